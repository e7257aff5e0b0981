// test_gpu_uvm_counters.cpp: math_sdpa/uvm_counters (CUPTI's Unified Memory counters) against
// traffic whose size is known. A 64 MiB "ballast" the host writes, the GPU reads and writes and
// the host reads back must show at least half of it moved each way; an 8 MiB "path" range the
// host writes and the GPU reads must show at least half of it moved host-to-device and nothing
// back; device memory copied both ways with cudaMemcpy is not migration and must count nowhere.
// The ballast is named after its traffic and the path before it, as the harness does both.
//
// Where CUPTI is missing or says this machine or setup cannot count (MPS, a profiler or
// compute-sanitizer attached), the case prints why and checks nothing more; any other reason
// for the counters being unavailable fails it.
//
// Checks that may not hold on every GPU, to confirm on the first H100 run:
//  - the lower bounds (half of each range) leave room for the driver's migration granularity and
//    prefetching; they are only asserted on a discrete GPU with concurrentManagedAccess, and the
//    device-to-host ones only where the host cannot read GPU memory in place
//    (directManagedMemAccessFromHost, e.g. Grace Hopper); DGX Spark's GB10 shares one memory and
//    may migrate nothing;
//  - the upper bounds (at most each range's size) assume no eviction (MiBs on an 80 GB GPU) and
//    no page moved twice;
//  - "other" must be 0: it assumes the driver and runtime touch no managed memory of their own;
//  - cpu_page_faults > 0 on the ballast assumes CUPTI reports the host's faults on pages the GPU
//    holds (not only first-touch ones), and gpu_page_faults > 0 that the GPU faults at all
//    rather than being handed the pages by a prefetch;
//  - that cuptiActivityFlushAll delivers the driver's last events without a delay.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>

#include "math_sdpa/cuda_check.h"
#include "math_sdpa/dtype.h"
#include "math_sdpa/kernels.h"
#include "math_sdpa/uvm_counters.h"

using namespace sdpa;

namespace {

constexpr size_t kMebibyte = size_t{1} << 20;
constexpr size_t kBallastBytes = 64 * kMebibyte, kPathBytes = 8 * kMebibyte, kDeviceBytes = 8 * kMebibyte;

int device_attribute(cudaDeviceAttr attr) {
  int device = 0, value = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

// Managed or device memory, freed at scope exit (a failed REQUIRE leaves through an exception).
class GpuBuffer {
 public:
  GpuBuffer(size_t bytes, bool managed) : bytes_(bytes) {
    CUDA_CHECK(managed ? cudaMallocManaged(&data_, bytes) : cudaMalloc(&data_, bytes));
  }
  ~GpuBuffer() { cudaFree(data_); }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  void* get() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / kMebibyte);
  return buf;
}

std::string describe(const UvmCounts& c) {
  std::ostringstream out;
  out << "UVM counters: " << mib(c.bytes_htod) << " host-to-device, " << mib(c.bytes_dtoh) << " device-to-host, "
      << c.cpu_page_faults << " CPU and " << c.gpu_page_faults << " GPU page faults, " << c.thrashing
      << " thrashing, " << c.throttling << " throttling, " << c.remote_map << " remote-map events; " << c.records
      << " records, " << c.dropped_records << " dropped";
  if (!c.not_counted.empty()) out << "; not counted: " << c.not_counted;
  for (const UvmRangeCounts& r : c.ranges) {
    out << "\n  " << r.name << ": " << mib(r.bytes_htod) << " HtoD, " << mib(r.bytes_dtoh) << " DtoH, "
        << r.cpu_page_faults << " CPU faults, " << r.gpu_page_faults << " GPU faults";
  }
  return out.str();
}

}  // namespace

TEST_SUITE("gpu_uvm_counters") {

TEST_CASE("managed memory's migrations count for the range they were in; cudaMemcpy to device memory for none") {
  std::unique_ptr<UvmCounters> counters = UvmCounters::start();
  // CUPTI's buffers are process-wide: a second one while this counts must refuse and say why.
  const UvmCounts second = UvmCounters::start()->stop();

  GpuBuffer ballast(kBallastBytes, true), path(kPathBytes, true), device(kDeviceBytes, false);
  GpuBuffer sink(sizeof(unsigned long long), false);
  auto* touch_sink = static_cast<unsigned long long*>(sink.get());

  // Ballast: written by the host (its pages start there), read then written by the GPU (they
  // migrate to it), read back by the host (they migrate back).
  std::memset(ballast.get(), 0x5A, kBallastBytes);
  launch_touch_pages(ballast.get(), kBallastBytes, touch_sink, nullptr);
  launch_fill(ballast.get(), DType::fp32, static_cast<int64_t>(kBallastBytes / sizeof(float)), 1.0f, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto* values = static_cast<const float*>(ballast.get());
  size_t wrong = 0;
  for (size_t i = 0; i < kBallastBytes / sizeof(float); ++i) wrong += values[i] != 1.0f;
  CHECK(wrong == 0);
  counters->name_range("ballast", ballast.get(), kBallastBytes);  // after its traffic: attributed at stop()

  // Path: named first, written by the host, read by the GPU, never read back.
  counters->name_range("path", path.get(), kPathBytes);
  std::memset(path.get(), 0x11, kPathBytes);
  launch_touch_pages(path.get(), kPathBytes, touch_sink, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());

  // Device memory: copies through the copy engines, which the counters must not see.
  counters->name_range("device", device.get(), kDeviceBytes);
  std::unique_ptr<unsigned char[]> host(new unsigned char[kDeviceBytes]);
  std::memset(host.get(), 0x33, kDeviceBytes);
  CUDA_CHECK(cudaMemcpy(device.get(), host.get(), kDeviceBytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(host.get(), device.get(), kDeviceBytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaDeviceSynchronize());

  const UvmCounts counts = counters->stop();
  if (!counts.available) {
    MESSAGE("UVM counters unavailable: " << counts.unavailable);
    if (counts.unsupported) return;  // CUPTI missing or refusing this setup: said above, nothing to check
    FAIL("the counters failed for a reason other than CUPTI being missing or unsupported");
  }
  MESSAGE(describe(counts));

  CHECK_FALSE(second.available);
  CHECK_FALSE(second.unsupported);
  MESSAGE("a second start() while counting: " << second.unavailable);

  const UvmCounts again = counters->stop();  // idempotent: the same figures, nothing counted twice
  CHECK(again.available);
  CHECK(again.bytes_htod == counts.bytes_htod);
  CHECK(again.bytes_dtoh == counts.bytes_dtoh);
  CHECK(again.records == counts.records);

  CHECK(counts.dropped_records == 0);
  CHECK(counts.not_counted.empty());
  REQUIRE(counts.ranges.size() == 4);  // ballast, path, device (in the order named), other
  CHECK(counts.ranges[0].name == "ballast");
  CHECK(counts.ranges[1].name == "path");
  CHECK(counts.ranges[2].name == "device");
  CHECK(counts.ranges[3].name == "other");
  const UvmRangeCounts& b = counts.ranges[0];
  const UvmRangeCounts& p = counts.ranges[1];
  const UvmRangeCounts& d = counts.ranges[2];
  const UvmRangeCounts& o = counts.ranges[3];

  // Every record counts once, in exactly one range.
  CHECK(b.bytes_htod + p.bytes_htod + d.bytes_htod + o.bytes_htod == counts.bytes_htod);
  CHECK(b.bytes_dtoh + p.bytes_dtoh + d.bytes_dtoh + o.bytes_dtoh == counts.bytes_dtoh);
  CHECK(b.cpu_page_faults + p.cpu_page_faults + d.cpu_page_faults + o.cpu_page_faults == counts.cpu_page_faults);
  CHECK(b.gpu_page_faults + p.gpu_page_faults + d.gpu_page_faults + o.gpu_page_faults == counts.gpu_page_faults);

  // cudaMemcpy to and from device memory is not migration; nothing else here is managed memory.
  CHECK(d.bytes_htod == 0);
  CHECK(d.bytes_dtoh == 0);
  CHECK(d.cpu_page_faults == 0);
  CHECK(d.gpu_page_faults == 0);
  CHECK(o.bytes_htod == 0);
  CHECK(o.bytes_dtoh == 0);

  // Nothing can migrate more than once here (no eviction, no page touched twice on one side).
  CHECK(b.bytes_htod <= static_cast<int64_t>(kBallastBytes));
  CHECK(b.bytes_dtoh <= static_cast<int64_t>(kBallastBytes));
  CHECK(p.bytes_htod <= static_cast<int64_t>(kPathBytes));
  CHECK(p.bytes_dtoh == 0);

  const bool migrates = device_attribute(cudaDevAttrConcurrentManagedAccess) && !device_attribute(cudaDevAttrIntegrated);
  const bool host_faults_back = !device_attribute(cudaDevAttrDirectManagedMemAccessFromHost);
  if (!migrates) {
    MESSAGE("the lower bounds are not checked: this GPU is integrated or lacks concurrentManagedAccess, so "
            "managed pages need not migrate");
    return;
  }
  CHECK(b.bytes_htod >= static_cast<int64_t>(kBallastBytes / 2));
  CHECK(p.bytes_htod >= static_cast<int64_t>(kPathBytes / 2));
  CHECK(b.gpu_page_faults > 0);
  if (host_faults_back) {
    CHECK(b.bytes_dtoh >= static_cast<int64_t>(kBallastBytes / 2));
    CHECK(b.cpu_page_faults > 0);
  } else {
    MESSAGE("device-to-host lower bounds not checked: the host reads this GPU's memory in place "
            "(directManagedMemAccessFromHost)");
  }
}

}  // TEST_SUITE
