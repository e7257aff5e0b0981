// conditions.cpp: what the deadlock scenarios' conditions do on the GPU.
//
// scenarios/ chooses the conditions, PathSettings carries them, and here is the code that sets
// each one up, at its point in the path:
//   the path's stream and the Q·Kᵀ GEMM's stream, ordered by an event or not (scenario 1);
//   the scores' pages touched by the host before or during softmax (scenario 2);
//   a storm of concurrent page faults at the entry synchronisation (scenario 4);
//   memory advice on every managed tensor (--advise).
// (Scenario 3's layouts are in the pipeline itself: they change how K reaches cuBLAS.)
// Every action writes a line to the stage log, so a log shows what was set up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>

#include "cuda_check.h"
#include "errors.h"
#include "pipeline.h"
#include "unified_pages.h"

namespace sdpa {

namespace {

std::string stream_id(cudaStream_t s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<void*>(s));
  return buf;
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

std::vector<std::pair<void*, size_t>> MathSdpa::all_buffers(bool with_device_scores) const {
  std::vector<std::pair<void*, size_t>> out;
  for (const Slots* slots : {&shared_, &layer_[static_cast<size_t>(layer_now_ - 1)], &call_}) {
    for (const auto& buffers : *slots) {
      for (const DeviceBuffer& b : buffers) {
        if (with_device_scores || b.from(allocator_)) out.emplace_back(b.get(), b.bytes());
      }
    }
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
    case GemmStream::blocking:
      CUDA_CHECK(cudaStreamCreateWithFlags(&qk_stream_, cudaStreamDefault));
      owns_qk_stream_ = true;
      break;
  }
  if (qk_stream_ != stream_) {
    CUDA_CHECK(cudaEventCreateWithFlags(&producers_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&gemm_done_, cudaEventDisableTiming));
  }
  if (settings_.scores_host_phase == ScoresHostPhase::during && settings_.scores_to_host != ScoresToHost::none) {
    CUDA_CHECK(cudaEventCreateWithFlags(&softmax_done_, cudaEventDisableTiming));
  }
  for (int i = 0; i < settings_.entry_touch_streams; ++i) {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    touch_streams_.push_back(s);
  }
}

void MathSdpa::destroy_streams() {
  for (cudaStream_t s : touch_streams_) cudaStreamDestroy(s);
  if (softmax_done_) cudaEventDestroy(softmax_done_);
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

// Fix 2's device-scores part. What it buys under scenario 2: the pages softmax reduces over are
// device memory, which the driver never migrates and the host cannot reach, so they are on the GPU
// when softmax starts and while it runs, whatever the host does; it costs no operation per call.
// What it does not: Q, K, V and the output stay where --alloc puts them; a host that needs the
// scores must copy them (the scenario's host access is skipped, and says so); on a discrete GPU the
// memory comes from the device's own, and on a unified-memory machine (GB10) from the same pool.
Allocator& MathSdpa::allocator_for(const TensorSpec& t) {
  if (!device_scores_allocator_) return allocator_;
  return in_device_scores_memory(t.id, problem_, settings_) ? *device_scores_allocator_ : allocator_;
}

std::string MathSdpa::device_scores_note(const TensorSpec& t, const DeviceBuffer& b) const {
  if (!device_scores_allocator_ || !b.from(*device_scores_allocator_)) return "";
  return "[FIX_2] device-scores: " + std::string(t.name) + " (" + std::to_string(b.bytes()) + " bytes) in device memory, not " +
         alloc_kind_name(settings_.alloc);
}

// Up front for every tensor (the notes go to the stage log before the first call); per call for
// each tensor as it is allocated.
void MathSdpa::apply_memory_advice(const std::vector<std::pair<void*, size_t>>& buffers, bool at_setup) {
  if (settings_.advice.empty() || buffers.empty()) return;
  if (!migratable(settings_.alloc)) {
    if (at_setup) {
      setup_notes_.push_back(std::string("[ALLOC_ADVICE] skipped: ") + alloc_kind_name(settings_.alloc) +
                             " memory takes no cudaMemAdvise (only managed or system memory does)");
    }
    return;
  }
  for (Advice a : settings_.advice) {
    cudaMemoryAdvise advice = cudaMemAdviseSetReadMostly;
    cudaMemLocation where = memory_location(false, device_);
    switch (a) {
      case Advice::preferred_gpu: advice = cudaMemAdviseSetPreferredLocation; break;
      case Advice::preferred_cpu: advice = cudaMemAdviseSetPreferredLocation, where = memory_location(true, 0); break;
      case Advice::accessed_by_gpu: advice = cudaMemAdviseSetAccessedBy; break;
      case Advice::accessed_by_cpu: advice = cudaMemAdviseSetAccessedBy, where = memory_location(true, 0); break;
      case Advice::read_mostly: break;
    }
    for (const auto& [ptr, bytes] : buffers) CUDA_CHECK(cudaMemAdvise(ptr, bytes, advice, where));
    if (at_setup) {
      setup_notes_.push_back(std::string("[ALLOC_ADVICE] ") + advice_name(a) + " on " + std::to_string(buffers.size()) +
                             " tensors" + (settings_.alloc_timing == AllocTiming::per_call ? ", and on each a call allocates" : ""));
    }
  }
}

// Scenario 4. The pages are first moved to the host (a host read of each), then N streams read
// every page at once, so their faults arrive together; where the device allows the host to
// touch managed memory while kernels run (concurrentManagedAccess), a host thread reads them
// again at the same time, so faults go both ways. Then the entry synchronisation, the call seen
// to hang on the DGX Spark. With fix 4 (stream-ordered pool) the memory is device memory: the streams
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
  auto* sinks = static_cast<unsigned long long*>(tensor(TensorId::touch_sink));
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

// Scenario 2. The host may touch the scores only once they are final. With the phase `before`
// the host then reads every element (min and max, as the original instrumentation prints them)
// and/or advises the driver that the CPU is their preferred location, all before the softmax
// kernel starts: softmax then reduces over pages that are not on the GPU, which fault back at
// the kernel's start or are read remotely. With the phase `during` a host thread starts here and
// keeps touching the pages while the kernel runs (start_scores_toucher), so that they migrate
// during the reduction itself.
//
// (The original instrumentation printed scores.min().item(): a reduction on the GPU and a copy of
// one value, which moves no pages. The harness touches the pages on purpose instead, because page
// migration during the softmax is the hypothesis.)
void MathSdpa::move_scores_to_host() {
  if (device_scores_skip(Stage::scores_to_host)) return;
  const ScoresToHost mode = settings_.scores_to_host;
  const bool reads = mode == ScoresToHost::read || mode == ScoresToHost::both;
  if (settings_.scores_host_phase == ScoresHostPhase::during) {
    // The host may touch managed memory while a kernel runs only with concurrentManagedAccess;
    // elsewhere (and for pinned memory, which is not migrated anyway) it touches it before.
    const bool concurrent = settings_.alloc == AllocKind::system || concurrent_managed_access_;
    if (!reads || concurrent) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      start_scores_toucher();
      return;
    }
    note(Stage::scores_to_host, "[SCENARIO_2] the host cannot touch managed memory while a kernel runs here "
                                "(concurrentManagedAccess=0): it reads the scores before softmax instead");
  }
  move_to_host(Stage::scores_to_host, scores_operand());
}

// Under fix 2's device-scores part the host cannot touch what softmax reduces over: the
// scenario's host access is skipped, and the log says so.
bool MathSdpa::device_scores_skip(Stage s) {
  if (!device_scores_allocator_) return false;
  note(s, "[SCENARIO_2] host access skipped: fix 2's device-scores keeps what softmax reduces over in device memory, "
          "which the host cannot touch and the driver never migrates");
  return true;
}

void MathSdpa::move_to_host(Stage s, const std::vector<HostOperand>& operands) {
  if (device_scores_skip(s)) return;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  const ScoresToHost mode = settings_.scores_to_host;
  const bool reads = mode == ScoresToHost::read || mode == ScoresToHost::both;
  if (s != Stage::scores_to_host && settings_.scores_host_phase == ScoresHostPhase::during) {
    note(s, "[SCENARIO_2] the host touches the backward's operands before its softmax, not during it");
  }
  for (const HostOperand& o : operands) {
    if (mode == ScoresToHost::advise || mode == ScoresToHost::both) {
      CUDA_CHECK(cudaMemAdvise(o.data, o.bytes, cudaMemAdviseSetPreferredLocation, memory_location(true, 0)));
      note(s, std::string("[SCENARIO_2] cudaMemAdvise(") + o.name + ", SetPreferredLocation, host)");
    }
    if (!reads) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const DType type = problem_.compute_dtype();
    const int64_t n = static_cast<int64_t>(o.bytes / dtype_size(type));
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (int64_t i = 0; i < n; ++i) {
      float x;
      if (type == DType::fp32) {
        x = static_cast<const volatile float*>(o.data)[i];
      } else {
        const uint16_t h = static_cast<const volatile uint16_t*>(o.data)[i];
        x = type == DType::bf16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
      }
      if (x < lo) lo = x;
      if (x > hi) hi = x;
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "[SCENARIO_2] host read %s: %zu bytes, %zu pages, min=%.6g max=%.6g (%.3f ms)", o.name,
                  o.bytes, (o.bytes + kTouchPageBytes - 1) / kTouchPageBytes, lo, hi, ms_since(t0));
    note(s, buf);
  }
}

// The thread touches every page of the scores, pass after pass, until the softmax kernel of
// this call has finished: a read of one byte per page (what faults a page to the host), and/or
// the preferred location of each 2 MiB chunk switched between the CPU and none. Reads and
// advice change no value, so the probabilities stay exact.
void MathSdpa::start_scores_toucher() {
  finish_scores_touch();  // the previous chunk's thread, with fix 5's chunks
  const ScoresToHost mode = settings_.scores_to_host;
  const bool reads = mode == ScoresToHost::read || mode == ScoresToHost::both;
  const bool advises = mode == ScoresToHost::advise || mode == ScoresToHost::both;
  softmax_launched_ = false;
  scores_touch_ = {};
  touched_scores_ = tensor(TensorId::scores);
  touched_scores_bytes_ = tensor_bytes(TensorId::scores);
  char buf[200];
  std::snprintf(buf, sizeof buf, "[SCENARIO_2] a host thread %s the scores' %zu pages while softmax runs",
                reads && advises ? "reads and advises" : reads ? "reads" : "advises",
                (touched_scores_bytes_ + kTouchPageBytes - 1) / kTouchPageBytes);
  note(Stage::scores_to_host, buf);
  scores_toucher_ = std::thread([this, reads, advises] {
    constexpr size_t kChunk = 2u << 20;
    const std::vector<std::pair<void*, size_t>> scores = {{touched_scores_, touched_scores_bytes_}};
    const auto t0 = std::chrono::steady_clock::now();
    bool prefer_cpu = true;
    for (;;) {
      if (advises) {
        for (size_t off = 0; off < touched_scores_bytes_; off += kChunk) {
          char* chunk = static_cast<char*>(touched_scores_) + off;
          const size_t n = std::min(kChunk, touched_scores_bytes_ - off);
          // Errors here cannot be thrown from a thread; the call's own checks report the device's state.
          cudaMemAdvise(chunk, n, prefer_cpu ? cudaMemAdviseSetPreferredLocation : cudaMemAdviseUnsetPreferredLocation,
                        memory_location(true, 0));
        }
        prefer_cpu = !prefer_cpu;
      }
      if (reads) host_touch(scores);
      ++scores_touch_.passes;
      if (softmax_launched_ && cudaEventQuery(softmax_done_) != cudaErrorNotReady) break;
    }
    scores_touch_.ms = ms_since(t0);
  });
}

void MathSdpa::softmax_launched() {
  if (!scores_toucher_.joinable()) return;
  CUDA_CHECK(cudaEventRecord(softmax_done_, stream_));
  softmax_launched_ = true;
}

void MathSdpa::finish_scores_touch() {
  if (!scores_toucher_.joinable()) return;
  scores_toucher_.join();
  char buf[200];
  std::snprintf(buf, sizeof buf, "[SCENARIO_2] the host thread touched the scores %lld times while softmax ran (%.3f ms)",
                static_cast<long long>(scores_touch_.passes), scores_touch_.ms);
  note(Stage::stream_sync, buf);
  release_scores_advice();
}

std::vector<MathSdpa::HostOperand> MathSdpa::scores_operand() {
  return {{"scores", tensor(TensorId::scores), tensor_bytes(TensorId::scores)}};
}

void MathSdpa::release_scores_advice() { release_host_advice(scores_operand()); }

void MathSdpa::release_host_advice(const std::vector<HostOperand>& operands) {
  if (settings_.scores_to_host != ScoresToHost::advise && settings_.scores_to_host != ScoresToHost::both) return;
  if (device_scores_allocator_) return;  // none was given
  // The advice is for the softmax stage only; the next GEMM writes its operands on the GPU again.
  for (const HostOperand& o : operands) {
    CUDA_CHECK(cudaMemAdvise(o.data, o.bytes, cudaMemAdviseUnsetPreferredLocation, memory_location(true, 0)));
  }
}

// Scenario 1: the GEMM's stream waits for the kernels that produced Q and K (unless the race
// is asked for); the path's stream then waits for the GEMM.
void MathSdpa::order_gemm_after_producers(Stage gemm) {
  if (qk_stream_ == stream_) return;
  const std::string what = gemm == Stage::qk_gemm ? "Q.K^T" : stage_name(gemm);
  if (settings_.qk_gemm_order == GemmOrder::none) {
    note(gemm, "[SCENARIO_1] " + what + " GEMM on stream " + stream_id(qk_stream_) + " (" +
                   gemm_stream_name(settings_.qk_gemm_stream) + "), NOT ordered after stream " + stream_id(stream_) +
                   (implicitly_ordered_by_legacy_stream(settings_.stream, settings_.qk_gemm_stream)
                        ? " by any event or synchronisation: only the legacy default stream's implicit one orders them"
                        : ": a deliberate race"));
    return;
  }
  CUDA_CHECK(cudaEventRecord(producers_done_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(qk_stream_, producers_done_, 0));
  note(gemm, "[SCENARIO_1] " + what + " GEMM on stream " + stream_id(qk_stream_) + " (" +
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
