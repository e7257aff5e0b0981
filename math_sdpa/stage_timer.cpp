// stage_timer.cpp
#include "stage_timer.h"

#include "cuda_check.h"

namespace sdpa {

StageTimer::StageTimer() = default;

StageTimer::StageTimer(Stage first, Stage last) {
  span_only_ = true;
  span_first_ = first;
  span_last_ = last;
}

void StageTimer::reserve(size_t passes) {
  auto touch = [n = std::min(passes, kMaxPasses)](std::vector<double>& v) {
    v.resize(n);  // writes every element: the pages are resident now, not during the run
    v.clear();
  };
  touch(call_ms_);
  if (span_only_) return;
  for (auto& s : samples_) touch(s);
  longest_.resize(std::min(passes, kMaxPasses));
  longest_.clear();
}

StageTimer::~StageTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t StageTimer::take_event() {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[used_++];
}

void StageTimer::stage_begin(Stage s, const std::string&, void* stream) {
  // The weights' load before the first call is the run's, not a call's: its time is the load's own
  // (weights_load.h), never a call's stage time or stall.
  if (stage_when(s) == StageWhen::load) return;
  const int i = static_cast<int>(s);
  if (span_only_) {
    if (s == span_first_ && !span_begin_) {
      span_begin_ = take_event();
      CUDA_CHECK(cudaEventRecord(span_begin_, static_cast<cudaStream_t>(stream)));
    }
    return;
  }
  ran_[i] = true;
  if (host_timed(s)) {
    host_begin_[i] = std::chrono::steady_clock::now();
    return;
  }
  open_[i] = take_event();
  CUDA_CHECK(cudaEventRecord(open_[i], static_cast<cudaStream_t>(stream)));
}

void StageTimer::stage_end(Stage s, const std::string&, void* stream) {
  if (stage_when(s) == StageWhen::load) return;
  const int i = static_cast<int>(s);
  if (span_only_) {
    if (s == span_last_ && span_begin_) {
      // The last end of the pass wins: each later one is recorded over the same event.
      if (!span_end_) span_end_ = take_event();
      CUDA_CHECK(cudaEventRecord(span_end_, static_cast<cudaStream_t>(stream)));
    }
    return;
  }
  if (host_timed(s)) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_begin_[i]).count();
    host_ms_[i] += ms;
    // A stall is judged by PyTorch's stages only: the harness's own work is timed, not judged.
    pass_longest_.add(s, ms);
    return;
  }
  Interval interval{s, open_[i], take_event()};
  CUDA_CHECK(cudaEventRecord(interval.end, static_cast<cudaStream_t>(stream)));
  intervals_.push_back(interval);
}

void StageTimer::collect_call() {
  if (span_only_) {
    if (span_begin_ && span_end_) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, span_begin_, span_end_));
      if (call_ms_.size() < kMaxPasses) call_ms_.push_back(ms);
    }
    span_begin_ = span_end_ = nullptr;
    used_ = 0;
    return;
  }
  std::array<double, kStageCount> gpu_ms{};
  for (const Interval& interval : intervals_) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, interval.begin, interval.end));
    gpu_ms[static_cast<int>(interval.stage)] += ms;
    pass_longest_.add(interval.stage, ms);
  }
  if (longest_.size() < kMaxPasses) longest_.push_back(pass_longest_);
  pass_longest_ = StageLongest{};
  for (int i = 0; i < kStageCount; ++i) {
    if (!ran_[i] || samples_[i].size() == kMaxPasses) continue;
    samples_[i].push_back(host_timed(static_cast<Stage>(i)) ? host_ms_[i] : gpu_ms[i]);
  }
  if (!intervals_.empty()) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, intervals_.front().begin, intervals_.back().end));
    if (call_ms_.size() < kMaxPasses) call_ms_.push_back(ms);
  }
  intervals_.clear();
  ran_.fill(false);
  host_ms_.fill(0);
  used_ = 0;
}

}  // namespace sdpa
