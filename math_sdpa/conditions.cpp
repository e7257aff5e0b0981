// conditions.cpp: what the deadlock scenarios' conditions do on the GPU.
//
// scenarios/ chooses the conditions, PathSettings carries them, and here is the code that sets
// each one up, at its point in the path:
//   the path's stream and the Q·Kᵀ GEMM's stream, ordered by an event or not (scenario 1);
//   the scores' pages moved to the host before softmax (scenario 2);
//   a storm of concurrent page faults at the entry synchronisation (scenario 4);
//   memory advice on every managed tensor (--advise).
// (Scenario 3's layouts are in the pipeline itself: they change how K reaches cuBLAS.)
// Every action writes a line to the stage log, so a log shows what was set up.
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>

#include "cuda_check.h"
#include "errors.h"
#include "pipeline.h"

namespace sdpa {

namespace {

std::string stream_id(cudaStream_t s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<void*>(s));
  return buf;
}

cudaMemLocation host_location() {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeHost;
  l.id = 0;
  return l;
}

cudaMemLocation device_location(int device) {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeDevice;
  l.id = device;
  return l;
}

// Reads one byte of every page, so that every page not resident in host memory faults to it.
uint64_t host_touch(const std::vector<std::pair<void*, size_t>>& buffers) {
  uint64_t sum = 0;
  for (const auto& [ptr, bytes] : buffers) {
    const auto* p = static_cast<const volatile unsigned char*>(ptr);
    for (size_t offset = 0; offset < bytes; offset += kTouchPageBytes) sum += p[offset];
  }
  return sum;
}

size_t page_count(const std::vector<std::pair<void*, size_t>>& buffers) {
  size_t pages = 0;
  for (const auto& b : buffers) pages += (b.second + kTouchPageBytes - 1) / kTouchPageBytes;
  return pages;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<std::pair<void*, size_t>> MathSdpa::all_buffers() const {
  std::vector<std::pair<void*, size_t>> out;
  for (const DeviceBuffer* b :
       {&cublas_workspace_, &query_, &key_, &value_, &mask_input_, &additive_mask_, &query_acc_, &key_acc_, &value_acc_,
        &key_expanded_, &value_expanded_, &query_scaled_, &key_scaled_, &key_transposed_, &qk_pointers_, &scores_, &probs_,
        &out_acc_, &output_, &value_stats_, &touch_sink_}) {
    if (*b) out.emplace_back(b->get(), b->bytes());
  }
  return out;
}

void MathSdpa::create_streams() {
  switch (settings_.stream) {
    case StreamMode::non_blocking:
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      owns_stream_ = true;
      break;
    case StreamMode::legacy: stream_ = cudaStreamLegacy; break;
    case StreamMode::per_thread: stream_ = cudaStreamPerThread; break;
  }
  switch (settings_.qk_gemm_stream) {
    case GemmStream::same: qk_stream_ = stream_; break;
    case GemmStream::legacy: qk_stream_ = cudaStreamLegacy; break;
    case GemmStream::aux:
      CUDA_CHECK(cudaStreamCreateWithFlags(&qk_stream_, cudaStreamNonBlocking));
      owns_qk_stream_ = true;
      break;
  }
  if (qk_stream_ != stream_) {
    CUDA_CHECK(cudaEventCreateWithFlags(&producers_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&gemm_done_, cudaEventDisableTiming));
  }
  for (int i = 0; i < settings_.entry_touch_streams; ++i) {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    touch_streams_.push_back(s);
  }
}

void MathSdpa::destroy_streams() {
  for (cudaStream_t s : touch_streams_) cudaStreamDestroy(s);
  if (producers_done_) cudaEventDestroy(producers_done_);
  if (gemm_done_) cudaEventDestroy(gemm_done_);
  if (owns_qk_stream_) cudaStreamDestroy(qk_stream_);
  if (owns_stream_) cudaStreamDestroy(stream_);
}

void MathSdpa::check_conditions_expressible() const {
  if (settings_.scores_to_host != ScoresToHost::none && !migratable(settings_.alloc)) {
    throw WaivedError(std::string("scenario 2's condition (the scores moved to the host before softmax) needs memory "
                                  "whose pages migrate (--alloc managed, or system where the GPU reads pageable "
                                  "memory); ") +
                      alloc_kind_name(settings_.alloc) + " memory " +
                      (settings_.alloc == AllocKind::host ? "is pinned in host memory and never migrates"
                                                          : "never leaves the GPU"));
  }
}

void MathSdpa::apply_memory_advice() {
  if (settings_.advice.empty()) return;
  if (!migratable(settings_.alloc)) {
    setup_notes_.push_back(std::string("[ALLOC_ADVICE] skipped: ") + alloc_kind_name(settings_.alloc) +
                           " memory takes no cudaMemAdvise (only managed or system memory does)");
    return;
  }
  for (Advice a : settings_.advice) {
    cudaMemoryAdvise advice = cudaMemAdviseSetReadMostly;
    cudaMemLocation where = device_location(device_);
    switch (a) {
      case Advice::preferred_gpu: advice = cudaMemAdviseSetPreferredLocation; break;
      case Advice::preferred_cpu: advice = cudaMemAdviseSetPreferredLocation, where = host_location(); break;
      case Advice::accessed_by_gpu: advice = cudaMemAdviseSetAccessedBy; break;
      case Advice::accessed_by_cpu: advice = cudaMemAdviseSetAccessedBy, where = host_location(); break;
      case Advice::read_mostly: break;
    }
    const auto buffers = all_buffers();
    for (const auto& [ptr, bytes] : buffers) CUDA_CHECK(cudaMemAdvise(ptr, bytes, advice, where));
    setup_notes_.push_back(std::string("[ALLOC_ADVICE] ") + advice_name(a) + " on " + std::to_string(buffers.size()) +
                           " tensors");
  }
}

// Scenario 4. The pages are first moved to the host (a host read of each), then N streams read
// every page at once, so their faults arrive together; where the device allows the host to
// touch managed memory while kernels run (concurrentManagedAccess), a host thread reads them
// again at the same time, so faults go both ways. Then the entry synchronisation, the call the
// seed saw hang. With fix 4 (stream-ordered pool) the memory is device memory: the streams
// still touch it, the host cannot.
void MathSdpa::enter_with_page_fault_storm() {
  const auto buffers = all_buffers();
  const size_t pages = page_count(buffers);
  const bool host_ok = settings_.entry_host_touch && host_accessible(settings_.alloc);
  if (settings_.entry_host_touch && !host_ok) {
    note(Stage::entry_sync, std::string("[SCENARIO_4] host touches skipped: ") + alloc_kind_name(settings_.alloc) +
                                " memory is not host-accessible");
  }
  if (host_ok) {
    const auto t0 = std::chrono::steady_clock::now();
    host_touch(buffers);
    char buf[160];
    std::snprintf(buf, sizeof buf, "[SCENARIO_4] host read %zu pages of %zu tensors first (%.3f ms)", pages,
                  buffers.size(), ms_since(t0));
    note(Stage::entry_sync, buf);
  }
  auto* sinks = static_cast<unsigned long long*>(touch_sink_.get());
  for (size_t i = 0; i < touch_streams_.size(); ++i) {
    for (const auto& [ptr, bytes] : buffers) launch_touch_pages(ptr, bytes, sinks + i, touch_streams_[i]);
  }
  const bool concurrent = host_ok && concurrent_managed_access_;
  char buf[200];
  std::snprintf(buf, sizeof buf, "[SCENARIO_4] %zu streams touch %zu pages each; host touches %s",
                touch_streams_.size(), pages,
                !host_ok ? "none" : concurrent ? "concurrently (concurrentManagedAccess=1)"
                                               : "only between launches (concurrentManagedAccess=0)");
  note(Stage::entry_sync, buf);
  std::thread host_thread;
  if (concurrent) host_thread = std::thread([&buffers] { host_touch(buffers); });
  const cudaError_t status = cudaDeviceSynchronize();
  if (host_thread.joinable()) host_thread.join();
  CUDA_CHECK(status);
}

// Scenario 2. The host may read the scores only once they are final; then it reads every
// element (min and max, as the original instrumentation prints) and/or advises the driver that
// the CPU is their preferred location. Either way softmax then reduces over pages that are
// not on the GPU: they fault back, or are read remotely.
void MathSdpa::move_scores_to_host() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  const ScoresToHost mode = settings_.scores_to_host;
  const size_t bytes = scores_.bytes();
  if (mode == ScoresToHost::advise || mode == ScoresToHost::both) {
    CUDA_CHECK(cudaMemAdvise(scores_.get(), bytes, cudaMemAdviseSetPreferredLocation, host_location()));
    note(Stage::scores_to_host, "[SCENARIO_2] cudaMemAdvise(scores, SetPreferredLocation, host)");
  }
  if (mode == ScoresToHost::read || mode == ScoresToHost::both) {
    const auto t0 = std::chrono::steady_clock::now();
    const DType type = problem_.compute_dtype();
    const int64_t n = problem_.score_elems();
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (int64_t i = 0; i < n; ++i) {
      float x;
      if (type == DType::fp32) {
        x = static_cast<const volatile float*>(scores_.get())[i];
      } else {
        const uint16_t h = static_cast<const volatile uint16_t*>(scores_.get())[i];
        x = type == DType::bf16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
      }
      if (x < lo) lo = x;
      if (x > hi) hi = x;
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "[SCENARIO_2] host read scores: %zu bytes, %zu pages, min=%.6g max=%.6g (%.3f ms)",
                  bytes, (bytes + kTouchPageBytes - 1) / kTouchPageBytes, lo, hi, ms_since(t0));
    note(Stage::scores_to_host, buf);
  }
}

void MathSdpa::release_scores_advice() {
  if (settings_.scores_to_host != ScoresToHost::advise && settings_.scores_to_host != ScoresToHost::both) return;
  // The advice is for softmax only; the next call's GEMM writes the scores on the GPU again.
  CUDA_CHECK(cudaMemAdvise(scores_.get(), scores_.bytes(), cudaMemAdviseUnsetPreferredLocation, host_location()));
}

// Scenario 1: the GEMM's stream waits for the kernels that produced Q and K (unless the race
// is asked for); the path's stream then waits for the GEMM.
void MathSdpa::order_gemm_after_producers() {
  if (qk_stream_ == stream_) return;
  if (settings_.qk_gemm_order == GemmOrder::none) {
    note(Stage::qk_gemm, "[SCENARIO_1] Q.K^T GEMM on stream " + stream_id(qk_stream_) + " (" +
                             gemm_stream_name(settings_.qk_gemm_stream) + "), NOT ordered after stream " +
                             stream_id(stream_) + ": a deliberate race");
    return;
  }
  CUDA_CHECK(cudaEventRecord(producers_done_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(qk_stream_, producers_done_, 0));
  note(Stage::qk_gemm, "[SCENARIO_1] Q.K^T GEMM on stream " + stream_id(qk_stream_) + " (" +
                           gemm_stream_name(settings_.qk_gemm_stream) + "), ordered after stream " + stream_id(stream_) +
                           " by an event");
}

void MathSdpa::order_path_after_gemm() {
  if (qk_stream_ == stream_ || settings_.qk_gemm_order == GemmOrder::none) return;
  CUDA_CHECK(cudaEventRecord(gemm_done_, qk_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, gemm_done_, 0));
}

void MathSdpa::synchronize_all_streams() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (qk_stream_ != stream_) CUDA_CHECK(cudaStreamSynchronize(qk_stream_));
}

}  // namespace sdpa
