// stage.h: the stages of one Math SDPA call, in PyTorch's order, and the hook through which
// everything that watches the path (stage times, the stage log, the watchdog's pipe, fault
// injection, the fixes) sees them.
//
// The order mirrors `_scaled_dot_product_attention_math` (PyTorch 2.5+): upcast, scale Q,
// expand K/V heads for GQA, scale the transposed K (and copy it contiguous where at::matmul
// would, or where fix 3 asks), bmm Q·Kᵀ, add the mask, _safe_softmax, dropout, bmm P·V, cast
// back. entry_sync and stream_sync are the synchronisations that the original instrumentation
// places around the call; scenario 4's hang is the entry one. scores_to_host is scenario 2's
// condition (the host reads the scores before softmax). With --graph the GPU stages are captured
// once into a CUDA graph and replayed (graph_capture, graph_instantiate, graph_launch: scenario 5).
// Host-only: the supervisor and the report writer use the names without any CUDA.
#pragma once

#include <cstdint>
#include <string>

namespace sdpa {

struct AllocationRecord;  // allocator.h

enum class Stage : uint8_t {
  entry_sync,    // cudaDeviceSynchronize at SDPA entry
  // --graph: the GPU stages below (mask_prepare .. cast_output) captured once into a CUDA graph
  // on the first call, instantiated, and replayed by every call (scenario 5).
  graph_capture,      // cudaStreamBeginCapture, the stages issued into it, cudaStreamEndCapture (host)
  graph_instantiate,  // cudaGraphInstantiate (host)
  graph_launch,       // cudaGraphLaunch: the captured stages run on the GPU
  // With --alloc-timing per-call each alloc_* stage allocates, inside the call, the tensors the
  // stage after it writes, where PyTorch's operator allocates its output (memory_plan.h has the
  // table); the free_* stages give back what PyTorch frees when it frees it. Host stages: a hang
  // in one is the allocator or the driver not returning.
  alloc_mask,    // the additive mask built from a boolean or causal mask
  mask_prepare,  // boolean or causal mask -> additive 0 / -inf mask in the dtype
  alloc_upcast,  // query_acc, key_acc, value_acc (q.to(float), k.to(float), v.to(float))
  upcast,        // fp16/bf16 Q, K, V -> fp32 (precision mode upcast only)
  alloc_query_scaled,
  scale_q,       // Q * sqrt(scale)
  alloc_expanded,  // key_expanded, value_expanded (repeat_interleave's outputs)
  gqa_expand,    // K, V heads repeated (repeat_interleave) for grouped-query attention
  alloc_key_scaled,
  scale_k,       // Kᵀ * sqrt(scale): the transposed-K preparation before the GEMM
  alloc_key_transposed,
  kt_contiguous, // Kᵀ copied to a contiguous [B*H, E, S] (at::matmul's copy, or fix 3)
  alloc_scores,  // the Q·Kᵀ GEMM's output (bmm allocates it)
  qk_gemm,       // cuBLAS batched Q·Kᵀ
  mask_add,      // scores += mask, in place
  scores_to_host,// scenario 2: the scores' pages moved to the host before softmax (host stage)
  alloc_probs,   // _safe_softmax's output and its -inf mask of the scores (a transient)
  softmax,       // _safe_softmax over the last dimension
  free_scores,   // the scores and that transient, freed when _safe_softmax returns
  alloc_dropout, // native_dropout's output and its mask
  dropout,       // Philox dropout: output and mask, as native_dropout writes them
  alloc_output,  // the probabilities cast back (the math function's second output), P·V, the output
  pv_gemm,       // cuBLAS strided-batched P·V
  cast_output,   // fp32 -> input dtype (precision mode upcast only)
  free_call,     // what the call does not keep, freed when the math function returns
  stream_sync,   // cudaStreamSynchronize at the end of the call
  // --backward: after the step's forward calls, each layer's backward call, last layer first, as
  // autograd runs the graph of _scaled_dot_product_attention_math (docs/BACKWARD.md has the
  // derivatives). dO is the gradient of the output; P the probabilities, Pd after dropout.
  alloc_grad_pv,       // dO upcast, dPd and dV (in the expanded heads): bmm(P, V)'s gradients
  grad_upcast,         // ToCopyBackward of the output's cast: dO -> fp32 (upcast only)
  dp_gemm,             // dPd = dO · Vᵀ (bmm's gradient for its first operand)
  dv_gemm,             // dV = Pdᵀ · dO (...and for its second)
  alloc_grad_softmax,  // dropout's gradient and _safe_softmax's
  dropout_backward,    // native_dropout_backward: dP = dPd · mask / (1 - p)
  grads_to_host,       // scenario 2: the probabilities and dP moved to the host before softmax's backward (host stage)
  softmax_backward,    // _softmax_backward_data: dS = P · (dP − Σ dP·P), a reduction per row
  free_grad_probs,     // dPd and dP, once softmax's backward has read them
  alloc_grad_qk,       // dQ and dK of bmm(Q, Kᵀ) and the three input gradients
  dq_gemm,             // dQs = dS · Ks
  dk_gemm,             // dKs = dSᵀ · Qs (Kᵀ's gradient, transposed back)
  grad_inputs,         // dQ = dQs·√scale, dK = dKs·√scale and dV, each GQA group summed, cast back
  free_backward,       // the backward's transients and what the layer kept for it
  backward_sync,       // cudaStreamSynchronize at the end of the layer's backward call
  free_step,     // after the last layer of a step: what autograd kept and the layers' outputs
};
constexpr int kStageCount = static_cast<int>(Stage::free_step) + 1;

const char* stage_name(Stage s);  // "qk_gemm"
bool parse_stage(const std::string& name, Stage& out);

// Where a call is in the run: its step (1..steps) and its layer (1..layers), both counted from 1
// as users name them ("layer 3 of 60").
struct CallPosition {
  int step = 1;
  int layer = 1;
  int layers = 1;
};

// Receives every stage boundary of the path. `detail` carries the stage's arguments (GEMM
// parameters, sizes) for logs and the flight recorder; `summary` carries the values seen at
// the end of the stage when the path collects them (--log values), else it is empty. `stream`
// is the cudaStream_t the stage's GPU work was issued on (scenario 1 runs the Q·Kᵀ GEMM on
// another stream than the rest), so observers that record events record them there.
// stage_note carries what a fix or a scenario condition did inside the stage, for the log.
// stage_begin may throw a CudaError (fault injection raises real errors there); nothing else
// in an observer may throw.
class StageObserver {
 public:
  virtual ~StageObserver() = default;
  virtual void stage_begin(Stage stage, const std::string& detail, void* stream) = 0;
  virtual void stage_end(Stage stage, const std::string& summary, void* stream) = 0;
  virtual void stage_note(Stage, const std::string&) {}
  // With --graph the GPU stages of the first call are captured into a graph, not run; an observer
  // that must act where the work is (an injected fault) says so and sees them being captured.
  virtual bool acts_in_capture() const { return false; }
  // A call of `position.layer` of step `position.step` begins (before its entry_sync); every
  // stage until the next position is that call's (free_step: the step's last layer's).
  virtual void call_position(const CallPosition& /*position*/) {}
  // The path allocated (freed = false) or freed a tensor: up front before the first call, or
  // inside a call's alloc_*/free_* stage with --alloc-timing per-call.
  virtual void memory_event(const AllocationRecord& /*record*/, bool /*freed*/) {}
};


// The longest single run of one stage in a pass of the path (not the sum over the pass's layers
// or chunks): the longest GPU stage's (CUDA events) and the longest host stage's (the host clock:
// a synchronisation that waited for the GPU, an allocation). What a stall is judged by.
struct StageLongest {
  Stage gpu_stage = Stage::entry_sync, host_stage = Stage::entry_sync;
  double gpu_ms = 0, host_ms = 0;
};

// The stages that allocate or free memory inside a call (--alloc-timing per-call): host calls
// into the allocator, which on a unified-memory machine may stall instead of failing.
inline bool is_memory_stage(Stage s) {
  switch (s) {
    case Stage::alloc_mask:
    case Stage::alloc_upcast:
    case Stage::alloc_query_scaled:
    case Stage::alloc_expanded:
    case Stage::alloc_key_scaled:
    case Stage::alloc_key_transposed:
    case Stage::alloc_scores:
    case Stage::alloc_probs:
    case Stage::free_scores:
    case Stage::alloc_dropout:
    case Stage::alloc_output:
    case Stage::free_call:
    case Stage::alloc_grad_pv:
    case Stage::alloc_grad_softmax:
    case Stage::free_grad_probs:
    case Stage::alloc_grad_qk:
    case Stage::free_backward:
    case Stage::free_step: return true;
    default: return false;
  }
}

// Stages whose work the host does or waits for itself (the two synchronisations, the host's
// read of the scores, graph capture and instantiation, the allocations); every other stage is
// GPU work, timed with events.
inline bool is_gpu_stage(Stage s) {
  return s != Stage::entry_sync && s != Stage::stream_sync && s != Stage::scores_to_host && s != Stage::graph_capture &&
         s != Stage::graph_instantiate && s != Stage::backward_sync && s != Stage::grads_to_host && !is_memory_stage(s);
}

// The backward call's stages (--backward), alloc_grad_pv through backward_sync.
inline bool is_backward_stage(Stage s) {
  return static_cast<int>(s) >= static_cast<int>(Stage::alloc_grad_pv) && static_cast<int>(s) <= static_cast<int>(Stage::backward_sync);
}

// A free_* stage (the rest of the memory stages allocate).
inline bool is_free_stage(Stage s) {
  return s == Stage::free_scores || s == Stage::free_call || s == Stage::free_grad_probs || s == Stage::free_backward ||
         s == Stage::free_step;
}

// The stages a CUDA graph holds (--graph): every GPU stage of the call but the replay itself.
inline bool is_captured_stage(Stage s) { return is_gpu_stage(s) && s != Stage::graph_launch; }

}  // namespace sdpa
