// stage_timer.h: per-stage GPU times from CUDA events, for every call of the path.
//
// Events are recorded at each stage boundary on the stream the stage ran on (scenario 1 runs
// the Q·Kᵀ GEMM on another stream) and read after the call's closing synchronisation, so
// timing adds no synchronisation of its own. The two host
// synchronisations (entry_sync, stream_sync) are timed on the host clock instead: an event
// pair around a host-side wait measures nothing.
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
  // Only the call's GPU span: one event at the start of `first` and one at the end of `last` (the
  // first and last GPU stages the path runs), so a launch-bound call is perturbed by two event
  // records instead of two a stage. samples() stays empty; call_ms() is filled.
  StageTimer(Stage first, Stage last);
  ~StageTimer() override;
  void stage_begin(Stage stage, const std::string& detail, void* stream) override;
  void stage_end(Stage stage, const std::string& summary, void* stream) override;
  // Reads this call's times (after the path's closing stream synchronisation) and resets.
  void collect_call();

  // samples[stage] holds one time per call in which that stage ran, in ms.
  const std::array<std::vector<double>, kStageCount>& samples() const { return samples_; }
  // GPU time of each whole call: first GPU stage's start to last GPU stage's end.
  const std::vector<double>& call_ms() const { return call_ms_; }

 private:
  static bool host_timed(Stage s) { return !is_gpu_stage(s); }
  bool span_only_ = false;
  Stage span_first_ = Stage::entry_sync, span_last_ = Stage::stream_sync;
  std::array<cudaEvent_t, kStageCount> begin_{}, end_{};
  std::array<bool, kStageCount> ran_{};
  std::array<std::chrono::steady_clock::time_point, kStageCount> host_begin_{};
  std::array<double, kStageCount> host_ms_{};
  int first_gpu_stage_ = -1, last_gpu_stage_ = -1;
  std::array<std::vector<double>, kStageCount> samples_;
  std::vector<double> call_ms_;
};

}  // namespace sdpa
