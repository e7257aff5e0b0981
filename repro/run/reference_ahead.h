// reference_ahead.h: a checked run's float64 references computed while the GPU runs, on the CPUs
// the run leaves idle, so that a check adds to the run only what is left of its reference when the
// last call ends, and the comparison.
//
// Each layer's inputs are made first and lent to the run to upload (inputs()), so a checked run
// makes them once. It uses one thread fewer than there are CPUs (at least one), so that the run's own threads (the
// one launching the path's work, which waits for the GPU spinning) have a CPU; the watchdog sleeps
// in another process until a line or a deadline, and the scheduler runs a thread that wakes
// beside them. Runs with a host load, whose threads are meant to compete, compute their references
// after the last call. The references are held until the run's result is judged: so only runs
// whose memory is not what they are about compute ahead (reference_ahead_layers says which layers,
// within a budget), the others after the last call as before.
//
// Not SCHED_IDLE: a thread of that class may never get back to the normal class unprivileged, so
// on a machine busy with other work a check would wait for idle CPUs that never come.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "math_sdpa/host_parallel.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/reference.h"
#include "repro/cli/run_options.h"

namespace sdpa {

// One layer's check: its inputs made again (and dO with --backward), the reference of the run's
// result tensor and, with --backward, the gradients' (whose pass computes the output's on the way:
// then `result` is empty and gradients->output holds it).
struct LayerReference {
  HostInputs inputs;
  std::vector<double> result;
  std::optional<ReferenceGradients> gradients;
  const std::vector<double>& result_reference() const { return result.empty() && gradients ? gradients->output : result; }
};

// Layer `layer`'s check, computed now on this thread and the CPUs (host_parallel.h).
LayerReference compute_layer_reference(const SdpaProblem& p, int layer, const HostInputs* given, bool backward,
                                       ResultTensor tensor);
// The references of `ref`'s inputs (made already, as layer_inputs makes them for `layer`).
void compute_references(const SdpaProblem& p, int layer, bool backward, ResultTensor tensor, LayerReference& ref);

// The host memory one layer's check holds (its inputs in float32, its references in float64).
int64_t layer_reference_bytes(const SdpaProblem& p, bool backward, ResultTensor tensor);

// The most memory the references computed ahead may hold: 1 GiB, and at most 2% of `mem_available`
// (MemAvailable; unknown, -1: none ahead).
int64_t reference_ahead_budget(int64_t mem_available);

// The checked layers (`checked`, in the order they are judged) whose references are computed
// during the run: the first that fit in `budget` together; none where the run's own conditions are
// about memory or the CPUs (a ballast, a host load, mapped weights, layers fitted to the memory, a
// soak's samples) or SDPA_CHECK_AHEAD=0 is set (the check then runs after the last call, as all of
// it did before). `why_not` says why none, where it is not null.
std::vector<int> reference_ahead_layers(const RunOptions& o, const PathSettings& settings, const std::vector<int>& checked,
                                        int64_t budget, std::string* why_not = nullptr);

class ReferenceAhead {
 public:
  // Starts computing the references of `layers` in that order on a thread of its own (none for an
  // empty list).
  ReferenceAhead(const SdpaProblem& p, std::vector<int> layers, const HostInputs* given, bool backward, ResultTensor tensor);
  // Stops what is still being computed at its next block of rows and waits for the thread.
  ~ReferenceAhead();
  ReferenceAhead(const ReferenceAhead&) = delete;
  ReferenceAhead& operator=(const ReferenceAhead&) = delete;

  // Layer `layer`'s inputs where its check is computed ahead, once they are made, for the run to
  // upload (so they are made once); null for a layer not in the list, or whose inputs could not be
  // made (the caller makes them). Valid until take(layer).
  const HostInputs* inputs(int layer);
  // Layer `layer`'s check where it is computed ahead, once it is ready (rethrowing what computing
  // it threw); nullopt for a layer not in the list. Each layer is taken once.
  std::optional<LayerReference> take(int layer);
  // Waits until every layer's is computed (or computing one failed).
  void wait();

  // The wall time of the computation (so far), the part of it the callers of take() waited for,
  // and the CPU time of every thread it used.
  double compute_seconds() const;
  double waited_seconds() const { return waited_seconds_; }
  double cpu_seconds() const;
  int threads() const { return work_.max_threads; }

 private:
  void compute();
  // Layer `layer`'s index in layers_, nullopt for one not in the list.
  std::optional<size_t> index_of(int layer) const;

  SdpaProblem problem_;
  std::vector<int> layers_;
  const HostInputs* given_;
  bool backward_;
  ResultTensor tensor_;
  ParallelWork work_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  // By index in layers_: made with the layer's inputs, never moved (inputs() hands them out) until
  // take() moves it out (null then, and before the layer's inputs are made).
  std::vector<std::unique_ptr<LayerReference>> done_;
  size_t inputs_made_ = 0;  // layers_[0, inputs_made_) have their inputs (or failed to)
  size_t computed_ = 0;     // layers_[0, computed_) are done (or failed)
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point start_, end_;
  bool finished_ = false;
  int64_t own_cpu_ns_ = 0;
  double waited_seconds_ = 0;
  std::thread thread_;
};

}  // namespace sdpa
