// path_hook.h: the point where a fix (fixes/) acts inside a stage of the path.
//
// Observers (stage.h) watch the path; hooks act on it. The pipeline calls every hook's
// before_stage after the stage has begun (so a fix's synchronisation that hangs is attributed
// to the stage it guards) and before its work, and after_stage after its work and before the
// stage ends. Fix 1 synchronises around the GEMMs, fix 2 prefetches the scores before softmax;
// fixes 3 and 4 change how the path is built (PathSettings) and need no hook.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

#include "allocator.h"
#include "stage.h"

namespace sdpa {

struct HookContext {
  Stage stage;
  cudaStream_t stream = nullptr;       // the stream the stage's work is issued on
  cudaStream_t path_stream = nullptr;  // the path's own stream (the producer of Q, K, scores)
  int device = 0;
  void* scores = nullptr;  // the scores softmax reads
  size_t scores_bytes = 0;
  AllocKind scores_kind = AllocKind::managed;
  std::function<void(const std::string&)> note;  // one line in the stage log, tagged with the fix
};

class PathHook {
 public:
  virtual ~PathHook() = default;
  virtual void before_stage(HookContext&) {}
  virtual void after_stage(HookContext&) {}
};

}  // namespace sdpa
