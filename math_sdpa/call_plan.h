// call_plan.h: the path's calls as a value. plan_calls() turns a problem, its settings (the
// scenario's conditions and the fixes' configuration already in them) and the fixes' hooks into
// the ordered steps of one layer's forward call and of its backward call: for each step its stage
// (or none: an action between stages), the stream it is issued on and its operations, each a
// kernel, a cuBLAS call, an allocation or a free, a synchronisation, a scenario's condition or a
// fix's action, with its operands named as tensors of the tensor table (memory_plan.h).
//
// It is the one description of the path. The pipeline (pipeline.cpp) runs it step by step, the
// reproducer generator (repro/report/reproducer) prints it as the program it hands over, and
// `repro --plan --json` prints it for scripts/torch_stages.py to map onto PyTorch's operations;
// so a condition added here reaches all three. Host-only: the CLI prints it without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "gemm.h"
#include "head_strides.h"
#include "memory_plan.h"
#include "path_hook.h"
#include "path_settings.h"
#include "problem.h"
#include "stage.h"

namespace sdpa {

// A tensor of the current layer's call (its chunk's region for a tensor kept per chunk), `byte`
// bytes in: what an operation reads or writes.
struct TensorRef {
  TensorId id = TensorId::query;
  int chunk = 0;
  int64_t byte = 0;
};

// A rows-of-the-query chunk's place for dropout's Philox stream (kernels.h RowChunk), planned.
struct PlannedRows {
  int64_t rows = 0, row0 = 0, L = 0, S = 0;  // rows == 0: the whole tensor
};

// --- the operations -------------------------------------------------------------------------

// Memory (--alloc-timing per-call): the tensors of an alloc_* stage for a chunk, or those a free_*
// stage gives back (free_step: everything the step's layers kept).
struct AllocateOp {
  Stage stage;
  int chunk = 0;
  std::vector<TensorId> tensors;
};
struct FreeOp {
  Stage stage;
  std::vector<TensorId> tensors;
};
// cudaDeviceSynchronize; or, with scenario 4's storm set up, the storm then the synchronisation.
struct EntrySyncOp {
  bool storm = false;
};
struct SyncAllStreamsOp {};  // the path's stream and the GEMM's (scenario 1)
// A fix's host synchronisation of a stream, or of the device (stream == none).
struct HookSyncOp {
  PathStream stream = PathStream::none;
};
// Fix 2: cudaMemPrefetchAsync of a tensor to the GPU on the stage's stream.
struct PrefetchOp {
  TensorRef tensor;
  int64_t bytes = 0;
  PathStream stream = PathStream::path;
};
// A line in the stage log, said by a fix or a condition where it acts.
struct NoteOp {
  Stage stage;
  std::string text;
};
// Scenario 1: the GEMM's stream waits for the path's (an event, or nothing: the race asked for),
// and the path's stream for the GEMM.
struct OrderGemmOp {
  Stage gemm;
};
struct OrderPathOp {};
// Kernels (kernels.h), their arguments as the launchers take them.
struct BuildMaskOp {
  bool causal = false;
  TensorRef bool_mask, dst;
  DType type = DType::fp32;
  int64_t slices = 0, L = 0, S = 0;
};
struct ConvertOp {
  TensorRef src, dst;
  DType src_type = DType::fp32, dst_type = DType::fp32;
  int64_t n = 0;
  float factor = 1.0f;
};
struct UpcastOp {  // Q, K and V converted in one launch (launch_convert_scale_batch)
  TensorRef src[3], dst[3];
  int64_t n[3] = {0, 0, 0};
  DType src_type = DType::fp32, dst_type = DType::fp32;
};
struct RepeatHeadsOp {
  TensorRef src, dst;
  HeadStrides strides{};
  DType type = DType::fp32;
  int64_t batch = 0, kv_heads = 0, group = 0, len = 0, dim = 0;
};
struct TransposeHeadsOp {
  TensorRef src, dst;
  HeadStrides strides{};
  DType type = DType::fp32;
  int64_t batch = 0, heads = 0, len = 0, dim = 0;
};
// --gemm-api batched: the per-head pointer arrays of the Q.K^T GEMM for this call's tensors.
struct PointerArraysOp {
  TensorRef kt, q, scores;
  HeadStrides kt_strides{};
};
// A cuBLAS call; `calls` > 1 issues it that many times, its operands `step_*` bytes on each time.
// With pointer arrays, a, b and c are the arrays (qk_pointers) rather than the tensors.
struct GemmOp {
  GemmCall call;
  TensorRef a, b, c;
  PathStream stream = PathStream::path;
  int64_t calls = 1, step_a = 0, step_b = 0, step_c = 0;
};
struct AddMaskOp {
  TensorRef scores, mask;
  DType scores_type = DType::fp32, mask_type = DType::fp32;
  int64_t B = 0, H = 0, L = 0, S = 0;
  bool per_batch = false, per_head = false;
  int64_t row0 = 0, rows = 0;
};
struct SoftmaxOp {
  TensorRef in, out;
  DType type = DType::fp32;
  int64_t rows = 0, cols = 0;
};
struct DropoutOp {  // the Philox offset is the layer's (layer_problem)
  TensorRef in, out, mask;
  DType type = DType::fp32;
  int64_t n = 0;
  uint64_t seed = 0;
  float keep = 1.0f;
  PlannedRows rows;
};
struct DropoutBackwardOp {
  TensorRef grad, mask, out;
  DType type = DType::fp32;
  int64_t n = 0;
  float keep = 1.0f;
};
struct SoftmaxBackwardOp {
  TensorRef grad, probs, out;
  DType type = DType::fp32;
  int64_t rows = 0, cols = 0;
};
struct SumHeadGroupsOp {
  TensorRef src, dst;
  DType src_type = DType::fp32, dst_type = DType::fp32;
  int64_t heads = 0, group = 0, elems = 0;
  float factor = 1.0f;
};
// Scenario 2: the host's access (read and/or advice) to what a softmax reduces over, before it
// (or, with --scores-host-phase during, a host thread that touches the scores while it runs).
struct HostAccessOp {
  Stage stage;
  std::vector<ReducedOperand> operands;
};
struct SoftmaxLaunchedOp {};     // ...the thread's softmax has been issued: it may stop once it ends
struct FinishHostAccessOp {};    // ...the thread joined (at the end of the call) and its advice taken back
struct ReleaseHostAdviceOp {     // ...the advice taken back once the softmax is issued
  std::vector<ReducedOperand> operands;
  bool unless_touching = false;  // not while the thread still touches them (it takes it back when it ends)
};

using PlanOp = std::variant<AllocateOp, FreeOp, EntrySyncOp, SyncAllStreamsOp, HookSyncOp, PrefetchOp, NoteOp, OrderGemmOp,
                            OrderPathOp, BuildMaskOp, ConvertOp, UpcastOp, RepeatHeadsOp, TransposeHeadsOp, PointerArraysOp,
                            GemmOp, AddMaskOp, SoftmaxOp, DropoutOp, DropoutBackwardOp, SoftmaxBackwardOp, SumHeadGroupsOp,
                            HostAccessOp, SoftmaxLaunchedOp, FinishHostAccessOp, ReleaseHostAdviceOp>;

// The operation's name in the plan's JSON and the reproducer ("gemm", "softmax", ...).
const char* plan_op_name(const PlanOp& op);

// Each operation's fields, in declaration order, as (name, value) to `f`: what the plan's printers
// (its JSON, the reproducer's code) walk, so that a field added to an operation is printed by both.
template <typename F> void for_each_field(const AllocateOp& o, F&& f) { f("stage", o.stage), f("chunk", o.chunk), f("tensors", o.tensors); }
template <typename F> void for_each_field(const FreeOp& o, F&& f) { f("stage", o.stage), f("tensors", o.tensors); }
template <typename F> void for_each_field(const EntrySyncOp& o, F&& f) { f("storm", o.storm); }
template <typename F> void for_each_field(const SyncAllStreamsOp&, F&&) {}
template <typename F> void for_each_field(const HookSyncOp& o, F&& f) { f("stream", o.stream); }
template <typename F> void for_each_field(const PrefetchOp& o, F&& f) { f("tensor", o.tensor), f("bytes", o.bytes), f("stream", o.stream); }
template <typename F> void for_each_field(const NoteOp& o, F&& f) { f("stage", o.stage), f("text", o.text); }
template <typename F> void for_each_field(const OrderGemmOp& o, F&& f) { f("gemm", o.gemm); }
template <typename F> void for_each_field(const OrderPathOp&, F&&) {}
template <typename F> void for_each_field(const BuildMaskOp& o, F&& f) {
  f("causal", o.causal), f("bool_mask", o.bool_mask), f("dst", o.dst), f("type", o.type), f("slices", o.slices), f("L", o.L),
      f("S", o.S);
}
template <typename F> void for_each_field(const ConvertOp& o, F&& f) {
  f("src", o.src), f("dst", o.dst), f("src_type", o.src_type), f("dst_type", o.dst_type), f("n", o.n), f("factor", o.factor);
}
template <typename F> void for_each_field(const UpcastOp& o, F&& f) {
  f("src", o.src), f("dst", o.dst), f("n", o.n), f("src_type", o.src_type), f("dst_type", o.dst_type);
}
template <typename F> void for_each_field(const RepeatHeadsOp& o, F&& f) {
  f("src", o.src), f("dst", o.dst), f("strides", o.strides), f("type", o.type), f("batch", o.batch), f("kv_heads", o.kv_heads),
      f("group", o.group), f("len", o.len), f("dim", o.dim);
}
template <typename F> void for_each_field(const TransposeHeadsOp& o, F&& f) {
  f("src", o.src), f("dst", o.dst), f("strides", o.strides), f("type", o.type), f("batch", o.batch), f("heads", o.heads),
      f("len", o.len), f("dim", o.dim);
}
template <typename F> void for_each_field(const PointerArraysOp& o, F&& f) {
  f("kt", o.kt), f("q", o.q), f("scores", o.scores), f("kt_strides", o.kt_strides);
}
template <typename F> void for_each_field(const GemmOp& o, F&& f) {
  f("call", o.call), f("a", o.a), f("b", o.b), f("c", o.c), f("stream", o.stream), f("calls", o.calls), f("step_a", o.step_a),
      f("step_b", o.step_b), f("step_c", o.step_c);
}
template <typename F> void for_each_field(const AddMaskOp& o, F&& f) {
  f("scores", o.scores), f("mask", o.mask), f("scores_type", o.scores_type), f("mask_type", o.mask_type), f("B", o.B), f("H", o.H),
      f("L", o.L), f("S", o.S), f("per_batch", o.per_batch), f("per_head", o.per_head), f("row0", o.row0), f("rows", o.rows);
}
template <typename F> void for_each_field(const SoftmaxOp& o, F&& f) {
  f("in", o.in), f("out", o.out), f("type", o.type), f("rows", o.rows), f("cols", o.cols);
}
template <typename F> void for_each_field(const DropoutOp& o, F&& f) {
  f("in", o.in), f("out", o.out), f("mask", o.mask), f("type", o.type), f("n", o.n), f("seed", o.seed), f("keep", o.keep),
      f("rows", o.rows);
}
template <typename F> void for_each_field(const DropoutBackwardOp& o, F&& f) {
  f("grad", o.grad), f("mask", o.mask), f("out", o.out), f("type", o.type), f("n", o.n), f("keep", o.keep);
}
template <typename F> void for_each_field(const SoftmaxBackwardOp& o, F&& f) {
  f("grad", o.grad), f("probs", o.probs), f("out", o.out), f("type", o.type), f("rows", o.rows), f("cols", o.cols);
}
template <typename F> void for_each_field(const SumHeadGroupsOp& o, F&& f) {
  f("src", o.src), f("dst", o.dst), f("src_type", o.src_type), f("dst_type", o.dst_type), f("heads", o.heads), f("group", o.group),
      f("elems", o.elems), f("factor", o.factor);
}
template <typename F> void for_each_field(const HostAccessOp& o, F&& f) { f("stage", o.stage), f("operands", o.operands); }
template <typename F> void for_each_field(const SoftmaxLaunchedOp&, F&&) {}
template <typename F> void for_each_field(const FinishHostAccessOp&, F&&) {}
template <typename F> void for_each_field(const ReleaseHostAdviceOp& o, F&& f) {
  f("operands", o.operands), f("unless_touching", o.unless_touching);
}

// One step: a stage of the path (observed: timed, logged, watched) with its operations, or
// (staged == false) operations between stages, such as scenario 1's event between the path's
// stream and the GEMM's.
struct PlanStep {
  bool staged = true;
  Stage stage = Stage::entry_sync;
  std::string detail;                    // the stage's arguments, as its log line shows them
  PathStream stream = PathStream::path;  // where its GPU work is issued
  std::vector<PlanOp> ops;
};

// A layer's calls. The forward call's GPU steps (mask_prepare .. cast_output) are those a CUDA
// graph captures (--graph); the forward call is entry_sync, those steps (or the graph's replay),
// free_call and stream_sync. The backward call (--backward) runs after every layer's forward call,
// last layer first.
struct CallPlan {
  std::vector<PlanStep> forward_gpu;
  std::vector<PlanStep> backward_gpu;
  PlanStep entry, free_call, stream_sync, backward_sync, free_step;
  int chunks = 1;
  int64_t chunk_rows = 0;
};

// The plan of `p` under `ps`, with the hooks' actions (the fixes) recorded where they act. The
// tensors are `tensors` (path_tensors(p, ps)).
// `device` is the CUDA device the fixes' notes name.
CallPlan plan_calls(const SdpaProblem& p, const PathSettings& ps, const std::vector<TensorSpec>& tensors,
                    const std::vector<PathHook*>& hooks, int device = 0);

}  // namespace sdpa
