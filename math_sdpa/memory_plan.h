// memory_plan.h: every tensor the path allocates, when, and how long it lives; and from that,
// before anything is allocated, the memory a run will need against the memory there is.
//
// One table (path_tensors) says it, and it is read twice: by the pipeline, which allocates from
// it, and by the plan, which adds it up. What it says follows PyTorch's own math path (2.11, as
// torch.cuda.memory._record_memory_history and the autograd graph's saved tensors show it:
// scripts/torch_memory_trace.py; docs/CONTEXT.md has the trace):
//
//   - the operators allocate their outputs as they run: q.to(float) and the other two upcasts,
//     query * sqrt(scale), repeat_interleave, Kᵀ * sqrt(scale), at::matmul's copy of a Kᵀ view it
//     cannot batch, bmm's scores, _safe_softmax's probabilities (with, for as long as it runs, a
//     bool tensor of the scores' -inf entries), native_dropout's output and mask, bmm's P·V and
//     the cast back;
//   - the scores die when _safe_softmax returns; the rest of what autograd does not keep dies when
//     the math function returns;
//   - autograd keeps, until the backward pass: the scaled Q and the Kᵀ bmm read (the copy where
//     there is one), the fp32 probabilities, dropout's mask and output, and the V bmm read (the
//     upcast or expanded copy; the input itself when there is none). Per Qwen-Image block at
//     1024x1024 that is 2.32 GB, of which 2.04 GB are the probabilities.
//   - with --backward, each layer's backward call allocates dO's upcast, dPd and dV first, then
//     dropout's and softmax's gradients (dPd and dP die once softmax's backward has read them),
//     then dQ and dK of the GEMM and the input gradients, and frees its transients and what the
//     layer kept when it ends. Two departures, both on the high side: dPd lives until softmax's
//     backward ends (PyTorch frees it once dropout's backward returns), and each layer's input
//     gradients stay until the step ends (--check reads them; PyTorch hands them on).
//
// PyTorch also casts the probabilities back to bf16 as the math function's second output, which
// scaled_dot_product_attention discards: a transient of B·H·L·S·2 bytes after dropout, below the
// call's peak (which is in softmax), that the harness does not make.
//
// Host-only: the plan is printed (--plan) and checked against the memory available before the
// GPU child allocates anything, and the CPU tests hold its arithmetic against hand-computed
// figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "allocator.h"
#include "context.h"
#include "path_settings.h"
#include "problem.h"
#include "stage.h"

namespace sdpa {

// Every tensor of the path, by what it is (the names follow PyTorch's math path).
enum class TensorId : uint8_t {
  query, key, value, mask_input,  // a layer's inputs, as the model hands them to SDPA
  additive_mask,                  // built from a boolean or causal mask
  query_acc, key_acc, value_acc,  // the upcast copies
  query_scaled,
  key_expanded, value_expanded,   // GQA
  key_scaled,
  key_transposed,                 // the contiguous Kᵀ copy
  qk_pointers,                    // --gemm-api batched: per-head pointer arrays
  scores,
  probs,
  softmax_neginf,                 // _safe_softmax's transient: which scores are -inf (bool)
  dropout_mask, attn_dropped,     // native_dropout's mask and output
  out_acc, output,
  // --backward: the output's gradient (a layer's input), the backward's transients and the three
  // input gradients (the layer's result of its backward call).
  grad_output, grad_output_acc,
  grad_attn_dropped,              // dPd = dO·Vᵀ
  grad_value_expanded,            // dV in the query heads, before GQA's sum
  grad_probs,                     // dP, dropout's gradient (with dropout)
  grad_scores,                    // dS, _safe_softmax's gradient
  grad_query_scaled, grad_key_scaled,
  grad_query, grad_key, grad_value,
  cublas_workspace, value_stats, touch_sink,
};
constexpr int kTensorCount = static_cast<int>(TensorId::touch_sink) + 1;

enum class Lifetime : uint8_t {
  run,   // allocated before the first call, freed when the run ends
  call,  // allocated inside a call, freed before it returns
  step,  // allocated inside a call, kept until the step ends (autograd's, the layer's result)
};
const char* lifetime_name(Lifetime l);

struct TensorSpec {
  TensorId id;
  const char* name;  // the allocation's name in logs and the plan ("scores")
  int64_t bytes;     // one region: the whole tensor, or one chunk's part of it
  // With fix 5's chunks of query rows, a tensor kept per chunk has one region per chunk: per call
  // each is an allocation of its own (as each chunk's call allocates it), up front one buffer
  // holds them all. A chunk tensor that is not kept has one region, reused by every chunk.
  int chunks = 1;
  Lifetime lifetime = Lifetime::run;
  bool per_layer = false;  // one per layer (inputs, kept tensors, the result), else one for the run
  Stage alloc_stage = Stage::entry_sync;  // per call: the alloc_* stage that allocates it
  Stage free_stage = Stage::free_call;    // per call, lifetime call: where it is freed
  const char* why = "";                   // the PyTorch operation behind it, and why it lives so long
};

// The path's tensors for `p` under `ps`, in the order they are allocated. Up front every tensor
// has lifetime run (kept ones and the result one per layer, the rest shared by the layers); per
// call, the inputs, the mask and the workspace have lifetime run and the rest call or step.
std::vector<TensorSpec> path_tensors(const SdpaProblem& p, const PathSettings& ps);
const char* tensor_name(TensorId id);
// The tensor a call's result is in (the scores, the probabilities or the output, as --full and the
// scenario's last stage say), its dtype and its elements.
TensorId result_tensor_id(const SdpaProblem& p, const PathSettings& ps);
DType result_tensor_dtype(const SdpaProblem& p, const PathSettings& ps);
int64_t result_tensor_elems(const SdpaProblem& p, const PathSettings& ps);
// Fix 2's device-scores: whether tensor `id` (what a softmax reduces over) is in device memory
// whatever --alloc says. Only memory that migrates needs it moved there.
bool in_device_scores_memory(TensorId id, const SdpaProblem& p, const PathSettings& ps);
// dQ, dK or dV: what a backward call ends with.
inline bool is_input_gradient(TensorId id) {
  return id == TensorId::grad_query || id == TensorId::grad_key || id == TensorId::grad_value;
}

// What the run holds besides the path (docs/CONTEXT.md): the ballast (the rest of the model) and
// the data-loader threads' buffers.
struct ContextMemory {
  int64_t ballast_bytes = 0;
  AllocKind ballast_kind = AllocKind::device;
  int64_t host_load_host_bytes = 0;  // pageable and pinned buffers of --host-load
  int64_t host_load_gpu_bytes = 0;   // their device buffers
};

struct MemoryPlan {
  std::vector<TensorSpec> tensors;
  int layers = 1;
  AllocKind kind = AllocKind::managed;
  AllocTiming timing = AllocTiming::upfront;
  int64_t shared_bytes = 0;      // allocated once for the run: the workspace, the mask, up front the scratch
  int64_t layer_run_bytes = 0;   // per layer, before the first call: its inputs (up front also what it keeps)
  int64_t layer_kept_bytes = 0;  // per layer, allocated by its call and kept until the step ends
  int64_t call_peak_bytes = 0;   // the most one call holds at once of what it allocates, kept tensors included
  Stage call_peak_stage = Stage::entry_sync;  // the stage at whose end that peak is reached
  int64_t path_bytes = 0;        // the path's predicted peak: the last layer's call peak over all the rest
  ContextMemory context;
  // --mapped-weights (scenario 7): the GPU copies of the model's weights, and the page cache their
  // load leaves behind (the file's pages, unless read with O_DIRECT or dropped after each copy).
  int64_t weights_bytes = 0;
  int64_t weights_cache_bytes = 0;
  bool against_free = false;  // fix 6's guard: the page cache never counts as available
  // --layers-fit: the layers asked for when fewer were planned because they did not fit (0: as
  // asked), and the refusal the plan of all of them met.
  int layers_asked = 0;
  std::string fitted_because;
  int64_t total_bytes() const {
    return path_bytes + context.ballast_bytes + context.host_load_host_bytes + context.host_load_gpu_bytes + weights_bytes +
           weights_cache_bytes;
  }
};

MemoryPlan plan_memory(const SdpaProblem& p, const PathSettings& ps, const ContextMemory& context = {});

// What the machine has, read before anything is allocated; -1 where unknown (no GPU).
struct MemoryFacts {
  bool integrated = false;     // an integrated GPU such as GB10: one pool for CPU and GPU
  int64_t gpu_free = -1;       // cudaMemGetInfo's free memory
  int64_t host_available = -1;  // /proc/meminfo's MemAvailable
  int64_t host_free = -1;       // MemFree: what there is without reclaiming anything
  int64_t page_cache = -1;      // Cached: the page cache, which MemAvailable counts as available
};

// One pool of memory the plan draws on: a discrete GPU's memory and the host's, or an integrated
// GPU's one pool (judged, as NVIDIA advises for DGX Spark, by MemAvailable: cudaMemGetInfo does not
// count what the OS could reclaim).
struct PoolUse {
  std::string name;       // "GPU memory", "host memory", "unified memory (CPU and GPU)"
  std::string measured;   // what `available` is: "cudaMemGetInfo free", "MemAvailable"
  int64_t need = 0;
  int64_t available = -1;  // -1: unknown
  int64_t budget = -1;     // the guard's share of it
  // Pools judged by MemAvailable: the page cache it counts, and what there is without reclaiming it
  // (MemFree) with the guard's share of that; -1 elsewhere or unknown.
  int64_t page_cache = -1, without_reclaim = -1, budget_without_reclaim = -1;
  // Whether the page cache may be counted as available: not on an integrated GPU, where the GPU's
  // allocations would have the pool reclaim it (scenario 7's hypothesis), nor under fix 6's guard.
  bool reclaim_allowed = true;
  bool fits_with_reclaim() const { return available < 0 || need <= budget; }
  bool fits_without_reclaim() const { return budget_without_reclaim < 0 || need <= budget_without_reclaim; }
  // Fits only if the page cache is reclaimed: said on any machine, refused where reclaim is not allowed.
  bool fits_only_by_reclaim() const { return fits_with_reclaim() && !fits_without_reclaim(); }
  bool fits() const { return fits_with_reclaim() && (reclaim_allowed || fits_without_reclaim()); }
};

// The guard's share of available memory: what the allocator guard has always allowed.
constexpr double kGuardFraction = 0.9;

// What the context will hold: the ballast (a fraction of the memory available to its kind,
// resolved against `facts`) and the host load's buffers.
ContextMemory context_memory(const ContextSettings& context, const MemoryFacts& facts);

std::vector<PoolUse> plan_pools(const MemoryPlan& plan, const MemoryFacts& facts, double fraction = kGuardFraction);

// The one line of a plan that does not fit (RefusedError, exit 8), with its figures; "" if it fits.
std::string plan_refusal(const MemoryPlan& plan, const std::vector<PoolUse>& pools);

// --layers-fit: when `plan` does not fit, the largest number of its layers (at least 1) whose plan
// does, beside the same ballast, host load and weights: `settings.layers` and `plan` become that
// one, which records how many were asked for and why they were not planned. A plan that fits, or
// one whose single layer does not, is left as it is (the guard then refuses it as usual).
void fit_layers(MemoryPlan& plan, PathSettings& settings, const SdpaProblem& p, const ContextMemory& context,
                const MemoryFacts& facts);

// "--layers-fit: 23 of the 60 layers asked for, ..." for a fitted plan; "" for one as asked.
std::string layers_fit_text(const MemoryPlan& plan);

// The plan as text: one line per tensor of a layer, then the totals and each pool (--plan).
std::string plan_text(const MemoryPlan& plan, const std::vector<PoolUse>& pools);

// "2.04 GB" (decimal, as the figures in docs/CONTEXT.md) and "1.90 GiB" where a binary unit reads better.
std::string gigabytes(int64_t bytes);

}  // namespace sdpa
