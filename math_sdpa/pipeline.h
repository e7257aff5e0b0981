// pipeline.h: MathSdpa, the Math SDPA path strung together stage by stage.
//
// One object owns the workspace of one problem (every tensor through the Allocator), a stream
// and a cuBLAS handle bound to it, and runs calls of the path on them. Each stage runs inside
// `stage()`, which tells the observers (stage times, logs, the watchdog's pipe) where the path
// is; a hang is always attributable to exactly one stage.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "allocator.h"
#include "gemm.h"
#include "problem.h"
#include "stage.h"

namespace sdpa {

// How much the path does for observability beyond computing (the stage log's levels).
struct PathInstrumentation {
  bool sync_each_stage = false;  // cudaDeviceSynchronize after every GPU stage (--log sync)
  bool collect_values = false;   // min/max/isnan/isinf/sum after the GEMMs and softmax (--log values)
};

class MathSdpa {
 public:
  // Allocates the whole workspace up front (no allocation happens inside a call).
  MathSdpa(const SdpaProblem& problem, Allocator& allocator, cudaStream_t stream);
  ~MathSdpa();
  MathSdpa(const MathSdpa&) = delete;
  MathSdpa& operator=(const MathSdpa&) = delete;

  void upload(const HostInputs& inputs);
  void poison_output();  // fills the output with NaN, so a stage that silently does nothing fails
  void run();            // one SDPA call, synchronised at entry and at the end
  std::vector<float> download_output();  // [B, Hq, L, E] as float

  void add_observer(StageObserver* observer) { observers_.push_back(observer); }
  void set_instrumentation(const PathInstrumentation& instrumentation) { instrumentation_ = instrumentation; }
  const std::vector<GemmCall>& gemm_calls() const { return gemm_calls_; }
  const SdpaProblem& problem() const { return problem_; }
  cudaStream_t stream() const { return stream_; }
  size_t workspace_bytes() const;

 private:
  void stage(Stage s, const std::string& detail, const std::function<void()>& body);
  std::string value_summary(Stage s);
  void* alloc(DeviceBuffer& buffer, int64_t elems, DType type, const char* what);

  SdpaProblem problem_;
  Allocator& allocator_;
  cudaStream_t stream_;
  cublasHandle_t cublas_ = nullptr;
  std::vector<StageObserver*> observers_;
  std::vector<GemmCall> gemm_calls_;
  PathInstrumentation instrumentation_;

  // Workspace. Names follow the tensors of PyTorch's math path.
  DeviceBuffer cublas_workspace_;
  DeviceBuffer query_, key_, value_;       // inputs, dtype
  DeviceBuffer mask_input_;                // bool bytes or additive mask in dtype, [B|1, H|1, L, S]
  DeviceBuffer additive_mask_;             // built from bool / causal each call
  DeviceBuffer query_acc_, key_acc_, value_acc_;  // fp32 copies (upcast of fp16/bf16 only)
  DeviceBuffer key_expanded_, value_expanded_;    // GQA only
  DeviceBuffer query_scaled_, key_scaled_;
  DeviceBuffer scores_, probs_;
  DeviceBuffer out_acc_;                   // P·V in the compute dtype
  DeviceBuffer output_;                    // cast back to dtype (upcast of fp16/bf16 only)
  DeviceBuffer value_stats_;               // TensorStats for --log values
};

}  // namespace sdpa
