// stage_timer.h: per-stage GPU times from CUDA events, for every pass of the path.
//
// Events are recorded at each stage boundary on the stream the stage ran on (scenario 1 runs
// the Q·Kᵀ GEMM on another stream) and read after the pass's closing synchronisation, so
// timing adds no synchronisation of its own. Host stages (the synchronisations, the host's read
// of the scores, allocations and frees) are timed on the host clock instead: an event pair
// around a host-side wait measures nothing.
//
// A pass is what collect_call() closes: one call of the path, or with --layers one call per
// layer (and with fix 5's chunks a stage runs once per chunk). A stage's sample is the sum of
// its times in the pass; the pass's GPU time runs from the first GPU stage's start to the last
// one's end.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <vector>

#include "stage.h"

namespace sdpa {

class StageTimer : public StageObserver {
 public:
  // Every stage: an event pair around each GPU stage, the host clock around each host stage.
  StageTimer();
  // Only the pass's GPU span: one event at the first start of `first` and one at the last end of
  // `last` (the first and last GPU stages the path runs), so a launch-bound call is perturbed by
  // two event records instead of two a stage. samples() stays empty; call_ms() is filled.
  StageTimer(Stage first, Stage last);
  ~StageTimer() override;
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  void stage_begin(Stage stage, const std::string& detail, void* stream) override;
  void stage_end(Stage stage, const std::string& summary, void* stream) override;
  // Reads this pass's times (after the path's closing stream synchronisation) and resets.
  void collect_call();
  // Makes room for `passes` passes' samples up front, with its pages touched, so that a long run's
  // resident set does not grow with its own timings (the soak judges it).
  void reserve(size_t passes);  // at most kMaxPasses

  // At most this many passes are kept (the first ones): a soak of millions of calls keeps bounded
  // bookkeeping.
  static constexpr size_t kMaxPasses = size_t{1} << 15;
  // samples[stage] holds one time per pass in which that stage ran, in ms.
  const std::array<std::vector<double>, kStageCount>& samples() const { return samples_; }
  // GPU time of each whole pass: first GPU stage's start to last GPU stage's end.
  const std::vector<double>& call_ms() const { return call_ms_; }
  // Each pass's longest single run of one stage (StageLongest), what a stall is judged by.
  const std::vector<StageLongest>& longest() const { return longest_; }

 private:
  static bool host_timed(Stage s) { return !is_gpu_stage(s); }
  cudaEvent_t take_event();  // from the pool, or a new one
  struct Interval {
    Stage stage;
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  bool span_only_ = false;
  Stage span_first_ = Stage::entry_sync, span_last_ = Stage::stream_sync;
  std::vector<cudaEvent_t> events_;       // every event made; the first `used_` are this pass's
  size_t used_ = 0;
  std::vector<Interval> intervals_;       // this pass's GPU stages, in order
  std::array<cudaEvent_t, kStageCount> open_{};  // the begin event of a GPU stage that has begun
  std::array<bool, kStageCount> ran_{};
  std::array<std::chrono::steady_clock::time_point, kStageCount> host_begin_{};
  std::array<double, kStageCount> host_ms_{};
  cudaEvent_t span_begin_ = nullptr, span_end_ = nullptr;
  std::array<std::vector<double>, kStageCount> samples_;
  std::vector<double> call_ms_;
  std::vector<StageLongest> longest_;
  StageLongest pass_longest_;  // this pass's, so far
};

}  // namespace sdpa
