// path_hook.h: the point where a fix (fixes/) acts inside a stage of the path.
//
// Observers (stage.h) watch the path; hooks act on it. The pipeline calls every hook's
// before_stage after the stage has begun (so a fix's synchronisation that hangs is attributed
// to the stage it guards) and before its work, and after_stage after its work and before the
// stage ends. Fix 1 synchronises around the GEMMs, fix 2 prefetches the scores before softmax;
// fixes 3 and 4 change how the path is built (PathSettings) and need no hook.
//
// A hook asks the path for its GPU operations (HookActions) instead of calling CUDA itself, so
// the fixes are host-only code: the hooks are called once, when the call plan is made
// (call_plan.h), which records what they ask for as steps of the plan; the pipeline, the generated
// reproducer and the PyTorch side then carry those steps out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "allocator.h"
#include "memory_plan.h"
#include "stage.h"

namespace sdpa {

// The streams of the path, by role: the path's own (PyTorch's current stream), and the one the
// Q.K^T GEMM runs on (the same stream unless scenario 1 puts it on another). The pipeline knows
// which cudaStream_t each is.
enum class PathStream : uint8_t { none, path, gemm };
const char* path_stream_name(PathStream s);  // "path", "gemm"
// What a stage log note writes where the stream's handle goes: the pipeline puts the handle in.
std::string stream_placeholder(PathStream s);  // "{stream:path}"

// A tensor a softmax reduces over (the scores; in the backward the probabilities and dP), as the
// fixes and scenario 2 act on it: by name, as a tensor of the call, and its size.
struct ReducedOperand {
  const char* name;
  TensorId id;
  int chunk = 0;
  int64_t bytes = 0;
};

// The GPU operations a hook may ask for; the plan records them where the hook asks (call_plan.h)
// and the pipeline carries them out, each checked.
class HookActions {
 public:
  virtual ~HookActions() = default;
  virtual void synchronize_stream(PathStream stream) = 0;  // cudaStreamSynchronize
  virtual void synchronize_device() = 0;                   // cudaDeviceSynchronize
  // cudaMemPrefetchAsync of the operand to the device, ordered on `stream`.
  virtual void prefetch_to_device(const ReducedOperand& operand, PathStream stream) = 0;
};

struct HookContext {
  Stage stage;
  PathStream stream = PathStream::path;       // the stream the stage's work is issued on
  PathStream path_stream = PathStream::path;  // the path's own stream (the producer of Q, K, scores)
  int device = 0;
  // What a softmax stage reduces over: the scores (softmax), or the probabilities and their
  // gradient (softmax_backward); empty for every other stage.
  std::vector<ReducedOperand> reduced;
  AllocKind kind = AllocKind::managed;  // the memory of `reduced` where there is any (device under fix 2's
                                        // device-scores), else the path's
  std::function<void(const std::string&)> note;  // one line in the stage log, tagged with the fix
  HookActions* gpu = nullptr;                    // the path's GPU operations
};

class PathHook {
 public:
  virtual ~PathHook() = default;
  virtual void before_stage(HookContext&) {}
  virtual void after_stage(HookContext&) {}
};

}  // namespace sdpa
