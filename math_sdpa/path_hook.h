// path_hook.h: the point where a fix (fixes/) acts inside a stage of the path.
//
// Observers (stage.h) watch the path; hooks act on it. The pipeline calls every hook's
// before_stage after the stage has begun (so a fix's synchronisation that hangs is attributed
// to the stage it guards) and before its work, and after_stage after its work and before the
// stage ends. Fix 1 synchronises around the GEMMs, fix 2 prefetches the scores before softmax;
// fixes 3 and 4 change how the path is built (PathSettings) and need no hook.
//
// A hook asks the path for its GPU operations (HookActions) instead of calling CUDA itself, so
// the fixes are host-only code: the command line computes what each fix configures without
// linking the CUDA runtime, and only the pipeline (pipeline.cpp) issues the calls.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "allocator.h"
#include "stage.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; named here without the CUDA headers

namespace sdpa {

using StreamHandle = CUstream_st*;

// The GPU operations a hook may ask for; each is checked (CUDA_CHECK) by the path.
class HookActions {
 public:
  virtual ~HookActions() = default;
  virtual void synchronize_stream(StreamHandle stream) = 0;  // cudaStreamSynchronize
  virtual void synchronize_device() = 0;                     // cudaDeviceSynchronize
  // cudaMemPrefetchAsync of [data, data + bytes) to the device, ordered on `stream`.
  virtual void prefetch_to_device(void* data, size_t bytes, int device, StreamHandle stream) = 0;
};

struct HookContext {
  Stage stage;
  StreamHandle stream = nullptr;       // the stream the stage's work is issued on
  StreamHandle path_stream = nullptr;  // the path's own stream (the producer of Q, K, scores)
  int device = 0;
  // What a softmax stage reduces over: the scores (softmax), or the probabilities and their
  // gradient (softmax_backward); empty for every other stage.
  struct Operand {
    const char* name;
    void* data;
    size_t bytes;
  };
  std::vector<Operand> reduced;
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
