// stage.h: the stages of one Math SDPA call, in PyTorch's order, and the hook through which
// everything that watches the path (stage times, the stage log, the watchdog's pipe, fault
// injection, the fixes) sees them.
//
// The order mirrors `_scaled_dot_product_attention_math` (PyTorch 2.5+): upcast, scale Q,
// expand K/V heads for GQA, scale the transposed K, bmm Q·Kᵀ, add the mask, _safe_softmax,
// dropout, bmm P·V, cast back. entry_sync and stream_sync are the synchronisations that the
// seed's instrumentation places around the call; scenario 4's hang is the entry one.
// Host-only: the supervisor and the report writer use the names without any CUDA.
#pragma once

#include <cstdint>
#include <string>

namespace sdpa {

enum class Stage : uint8_t {
  entry_sync,    // cudaDeviceSynchronize at SDPA entry
  mask_prepare,  // boolean or causal mask -> additive 0 / -inf mask in the dtype
  upcast,        // fp16/bf16 Q, K, V -> fp32 (precision mode upcast only)
  scale_q,       // Q * sqrt(scale)
  gqa_expand,    // K, V heads repeated (repeat_interleave) for grouped-query attention
  scale_k,       // Kᵀ * sqrt(scale): the transposed-K preparation before the GEMM
  qk_gemm,       // cuBLAS strided-batched Q·Kᵀ
  mask_add,      // scores += mask, in place
  softmax,       // _safe_softmax over the last dimension
  dropout,       // Philox dropout, in place
  pv_gemm,       // cuBLAS strided-batched P·V
  cast_output,   // fp32 -> input dtype (precision mode upcast only)
  stream_sync,   // cudaStreamSynchronize at the end of the call
};
constexpr int kStageCount = static_cast<int>(Stage::stream_sync) + 1;

const char* stage_name(Stage s);  // "qk_gemm"
bool parse_stage(const std::string& name, Stage& out);

// Receives every stage boundary of the path. `detail` carries the stage's arguments (GEMM
// parameters, sizes) for logs and the flight recorder; `summary` carries the values seen at
// the end of the stage when the path collects them (--log values), else it is empty.
// stage_begin may throw a CudaError (fault injection raises real errors there); nothing else
// in an observer may throw.
class StageObserver {
 public:
  virtual ~StageObserver() = default;
  virtual void stage_begin(Stage stage, const std::string& detail) = 0;
  virtual void stage_end(Stage stage, const std::string& summary) = 0;
};

// Stages that run on the GPU (everything but the two host synchronisations).
inline bool is_gpu_stage(Stage s) { return s != Stage::entry_sync && s != Stage::stream_sync; }

// The design document's Section 3 hang signatures: the scenario a hang in `stage` points to
// (1 cuBLAS Q.K^T, 2 softmax, 3 the transposed-K preparation, 4 the entry synchronisation),
// or 0 when the stage matches none of them ("unclassified").
int scenario_for_hung_stage(Stage s);
std::string classify_hang(Stage s);  // "scenario 2 (softmax reduction on unified memory)"

}  // namespace sdpa
