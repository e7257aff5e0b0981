// stage.cpp: the stage table, one row per stage (stage.h says what a row holds).
//
// The log lines are those of the instrumentation that found the hang (its tags, its values, its
// expected pattern: docs/LOG_FORMAT.md) where it logged the step, and the harness's own
// otherwise; the sdpa-debug lines are that instrumentation's, value for value. A D(...) line's
// source line is the [file:line] its sdpa-debug line ends with.
#include "stage.h"

#include <stdexcept>

#include "name_table.h"
#include "path_settings.h"
#include "problem.h"

namespace sdpa {

namespace {

#define D(channel, text) DebugLineTemplate{DebugChannel::channel, text, __LINE__}

using K = StageKind;
using W = StageWhen;

// An allocation's or a free's lines (the instrumentation logged its allocations in the allocator
// itself, as debug_allocation_lines writes them, not as steps of the path).
const std::vector<const char*> kAllocBegin{"[MATH_ALLOC] {name}{+detail}"}, kAllocEnd{"[MATH_ALLOC_DONE] {name} duration_us={duration_us}"};
const std::vector<const char*> kFreeBegin{"[MATH_FREE] {name}{+detail}"}, kFreeEnd{"[MATH_FREE_DONE] {name} duration_us={duration_us}"};
const char* const kAllocWhat = "an allocation inside the call";
const char* const kFreeWhat = "a free inside the call";
const char* const kMemoryHang = "an allocation or free that did not return";
// The first kernels of a call (and of a backward call) to touch on the GPU pages the host wrote.
const char* const kFirstTouchHang = "the first kernel to touch on the GPU pages the host wrote: their faults go through the driver";
const char* const kElementwise = "an elementwise kernel reading only what the GPU wrote earlier in the same call";
const char* const kBackwardGemmHang = "a GEMM of the backward pass had started: [CUBLAS_GEMM_START] is the last line";

using RunsIf = StageRow::RunsIf;
const RunsIf kUpcasts{[](const SdpaProblem& p, const PathSettings&) { return p.compute_dtype() != p.dtype; },
                     "fp16 or bf16 with --precision upcast"};
const RunsIf kHasDropout{[](const SdpaProblem& p, const PathSettings&) { return p.dropout_p > 0; }, "--dropout > 0"};
const RunsIf kHostReadsScores{[](const SdpaProblem&, const PathSettings& ps) { return ps.scores_to_host != ScoresToHost::none; },
                              "scenario 2's host access (--scenario 2)"};

const NameTable<StageKind> kKinds{"stage kind", {{K::gpu, "gpu"}, {K::host, "host"}, {K::alloc, "alloc"}, {K::free, "free"}}};
const NameTable<StageWhen> kWhens{
    "stage when", {{W::load, "load"}, {W::call, "call"}, {W::graph, "graph"}, {W::backward, "backward"}, {W::step, "step"}}};
const NameTable<DebugChannel> kChannels{"debug channel",
                                        {{DebugChannel::sdpa, "sdpa"},
                                         {DebugChannel::alloc, "alloc"},
                                         {DebugChannel::cuda, "cuda"},
                                         {DebugChannel::event, "event"}}};

}  // namespace

const char* stage_kind_name(StageKind k) { return kKinds.name(k); }
const char* stage_when_name(StageWhen w) { return kWhens.name(w); }
const char* debug_channel_name(DebugChannel c) { return kChannels.name(c); }

const char* stage_table_source() { return "math_sdpa/stage.cpp"; }

const std::vector<StageRow>& stage_table() {
  static const std::vector<StageRow> table = [] {
    std::vector<StageRow> t = {
        {Stage::load_weights, "load_weights", K::host, W::load, Stage::load_weights,
         {[](const SdpaProblem&, const PathSettings& ps) { return ps.weights.bytes > 0; }, "--mapped-weights SIZE"},
         {"[LOAD_WEIGHTS] {detail}"}, {"[LOAD_WEIGHTS_DONE] duration_ms={duration_ms}{+summary}"},
         {D(sdpa, "[LOAD_WEIGHTS] {detail}")}, {D(sdpa, "[LOAD_WEIGHTS_DONE] duration_ms={duration_ms}")},
         "a copy of the model's weights from the mapped file to the GPU never returned (the pages it reads share the "
         "pool with the GPU's allocations on an integrated GPU)"},
        {Stage::entry_sync, "entry_sync", K::host, W::call, Stage::entry_sync, nullptr,
         {"[SDPA_ENTRY] Q shape={q_shape} K={kv_shape} V={kv_shape} device=cuda:0 dtype={dtype} is_causal={is_causal}"},
         {"[CUDA_EVENT] sdpa_entry @ {now}", "[SDPA_ENTRY] Post-sync complete",
          "[BACKEND_SELECT] Chosen backend: MATH use_flash=false use_mem_efficient=false use_math=true use_cudnn=false"},
         {D(sdpa, "[SDPA_ENTRY] Q shape={q_shape} K={kv_shape} V={kv_shape} device=cuda:0 dtype={dtype} is_causal={is_causal}")},
         {D(event, "sdpa_entry @ {now}"), D(sdpa, "[SDPA_ENTRY] Post-sync complete"),
          D(sdpa, "[BACKEND_SELECT] Chosen backend: MATH use_flash=0 use_mem_efficient=0 use_math=1 use_cudnn=0")},
         "the entry synchronisation never returned"},
        {Stage::graph_capture, "graph_capture", K::host, W::graph, Stage::graph_capture, nullptr,
         {"[MATH_GRAPH_CAPTURE] {detail}"}, {"[MATH_GRAPH_CAPTURE_DONE]"},
         {D(sdpa, "[MATH_GRAPH_CAPTURE] {detail}")}, {D(sdpa, "[MATH_GRAPH_CAPTURE_DONE]")},
         "the CUDA graph of the path"},
        {Stage::graph_instantiate, "graph_instantiate", K::host, W::graph, Stage::graph_instantiate, nullptr,
         {"[MATH_GRAPH_INSTANTIATE] {detail}"}, {"[MATH_GRAPH_INSTANTIATE_DONE]"},
         {D(sdpa, "[MATH_GRAPH_INSTANTIATE] {detail}")}, {D(sdpa, "[MATH_GRAPH_INSTANTIATE_DONE]")},
         "the CUDA graph of the path"},
        {Stage::graph_launch, "graph_launch", K::gpu, W::graph, Stage::graph_launch, nullptr,
         {"[MATH_GRAPH_LAUNCH] {detail}"}, {"[MATH_GRAPH_LAUNCH_DONE]"},
         {D(sdpa, "[MATH_GRAPH_LAUNCH] {detail}")}, {D(sdpa, "[MATH_GRAPH_LAUNCH_DONE]")},
         "the CUDA graph of the path"},
        {Stage::alloc_mask, "alloc_mask", K::alloc, W::call, Stage::mask_prepare, nullptr, kAllocBegin, kAllocEnd, {}, {}, kMemoryHang},
        {Stage::mask_prepare, "mask_prepare", K::gpu, W::call, Stage::mask_prepare,
         {[](const SdpaProblem& p, const PathSettings& ps) {
            return (p.mask == MaskKind::boolean || p.mask == MaskKind::causal) &&
                   static_cast<int>(ps.last_stage) >= static_cast<int>(Stage::mask_add);
          },
          "--mask bool or causal"},
         {"[MATH_MASK_PREPARE] kind={detail} shape={mask_shape}"}, {"[MATH_MASK_PREPARE_DONE]"},
         {D(sdpa, "[MATH_MASK_PREPARE] kind={detail} shape={mask_shape}")}, {D(sdpa, "[MATH_MASK_PREPARE_DONE]")},
         kFirstTouchHang},
        {Stage::alloc_upcast, "alloc_upcast", K::alloc, W::call, Stage::upcast, nullptr, kAllocBegin, kAllocEnd, {}, {}, kMemoryHang},
        {Stage::upcast, "upcast", K::gpu, W::call, Stage::upcast, kUpcasts,
         {"[MATH_UPCAST] {detail} Q, K, V"}, {"[MATH_UPCAST_DONE]"},
         {D(sdpa, "[MATH_UPCAST] {detail} Q, K, V")}, {D(sdpa, "[MATH_UPCAST_DONE]")}, kFirstTouchHang},
        {Stage::alloc_query_scaled, "alloc_query_scaled", K::alloc, W::call, Stage::scale_q, nullptr, kAllocBegin, kAllocEnd, {}, {},
         kMemoryHang},
        {Stage::scale_q, "scale_q", K::gpu, W::call, Stage::scale_q, nullptr,
         {"[MATH_SDPA_START] About to compute QK^T", "[MATH_SCALE_Q] {detail}"},
         {"[CUDA_EVENT] math_qk_start @ {now}",
          "[MATH_QK] Q strides={q_strides} K strides={key_strides} Q contiguous={true} K contiguous={k_contiguous}"},
         {D(sdpa, "[MATH_SDPA_START] About to compute QK^T"), D(sdpa, "[MATH_SCALE_Q] {detail}")},
         {D(event, "math_qk_start @ {now}"),
          D(sdpa, "[MATH_QK] Q strides={q_strides} K strides={key_strides} Q contiguous={true} K contiguous={k_contiguous}")},
         kFirstTouchHang},
        {Stage::alloc_expanded, "alloc_expanded", K::alloc, W::call, Stage::gqa_expand, nullptr, kAllocBegin, kAllocEnd, {}, {},
         kMemoryHang},
        {Stage::gqa_expand, "gqa_expand", K::gpu, W::call, Stage::gqa_expand,
         {[](const SdpaProblem& p, const PathSettings&) { return p.gqa(); }, "--kv-heads < --heads"},
         {"[MATH_GQA_EXPAND] K, V {kv_shape} {detail}"}, {"[MATH_GQA_EXPAND_DONE]"},
         {D(sdpa, "[MATH_GQA_EXPAND] K, V {kv_shape} {detail}")}, {D(sdpa, "[MATH_GQA_EXPAND_DONE]")},
         "after [MATH_QK], before [CUBLAS_GEMM_START]"},
        {Stage::alloc_key_scaled, "alloc_key_scaled", K::alloc, W::call, Stage::scale_k, nullptr, kAllocBegin, kAllocEnd, {}, {},
         kMemoryHang},
        {Stage::scale_k, "scale_k", K::gpu, W::call, Stage::scale_k, nullptr,
         {"[MATH_KT_PREP] K^T strides={key_t_strides} contiguous=false {detail}"}, {"[MATH_KT_PREP_DONE]"},
         {D(sdpa, "[MATH_KT_PREP] K^T strides={key_t_strides} contiguous=false")}, {D(sdpa, "[MATH_KT_PREP_DONE]")},
         "after [MATH_QK], before [CUBLAS_GEMM_START]"},
        {Stage::alloc_key_transposed, "alloc_key_transposed", K::alloc, W::call, Stage::kt_contiguous, nullptr, kAllocBegin,
         kAllocEnd, {}, {}, kMemoryHang},
        {Stage::kt_contiguous, "kt_contiguous", K::gpu, W::call, Stage::kt_contiguous,
         {[](const SdpaProblem& p, const PathSettings& ps) { return kt_copy_needed(p, ps); },
          "a contiguous K^T copy (fix 3, or a layout at::matmul copies)"},
         {"[MATH_KT_CONTIGUOUS] K^T -> {kt_shape} contiguous {detail}"}, {"[MATH_KT_CONTIGUOUS_DONE]"},
         {D(sdpa, "[MATH_KT_CONTIGUOUS] K^T -> {kt_shape} contiguous")}, {D(sdpa, "[MATH_KT_CONTIGUOUS_DONE]")},
         "after [MATH_QK], before [CUBLAS_GEMM_START]"},
        {Stage::alloc_scores, "alloc_scores", K::alloc, W::call, Stage::qk_gemm, nullptr, kAllocBegin, kAllocEnd, {}, {}, kMemoryHang},
        {Stage::qk_gemm, "qk_gemm", K::gpu, W::call, Stage::qk_gemm, nullptr,
         {"[CUBLAS_GEMM_START] {detail}"}, {"[CUBLAS_GEMM_DONE]", "[MATH_QK_DONE] scores shape={scores_shape}{+summary}"},
         {D(sdpa, "[CUBLAS_GEMM_START] {mnk}")},
         {D(sdpa, "[CUBLAS_GEMM_DONE]"), D(sdpa, "[MATH_QK_DONE] scores shape={scores_shape}{values:min,max,isnan,isinf}")},
         "the Q.K^T GEMM had started: [CUBLAS_GEMM_START] is the last line"},
        {Stage::mask_add, "mask_add", K::gpu, W::call, Stage::mask_add,
         {[](const SdpaProblem& p, const PathSettings&) { return p.mask != MaskKind::none; }, "a mask (--mask)"},
         {"[MATH_MASK] Applying attention mask kind={detail}"}, {"[MATH_MASK_DONE]"},
         {D(sdpa, "[MATH_MASK] Applying attention mask")}, {D(sdpa, "[MATH_MASK_DONE]")},
         "the first kernel on the path's stream to read the scores the Q.K^T GEMM wrote"},
        {Stage::scores_to_host, "scores_to_host", K::host, W::call, Stage::scores_to_host, kHostReadsScores,
         {"[MATH_SCORES_TO_HOST] {detail} scores shape={scores_shape}"}, {"[MATH_SCORES_TO_HOST_DONE] duration_ms={duration_ms}"},
         {D(sdpa, "[MATH_SCORES_TO_HOST] {detail} scores shape={scores_shape}")},
         {D(sdpa, "[MATH_SCORES_TO_HOST_DONE] duration_ms={duration_ms}")},
         "the host's access to the scores' pages before softmax never finished", true},
        {Stage::alloc_probs, "alloc_probs", K::alloc, W::call, Stage::softmax, nullptr, kAllocBegin, kAllocEnd, {}, {}, kMemoryHang},
        {Stage::softmax, "softmax", K::gpu, W::call, Stage::softmax, nullptr,
         {"[MATH_SOFTMAX_START] Input shape={scores_shape} {detail}"}, {"[MATH_SOFTMAX_DONE] Output shape={scores_shape}{+summary}"},
         {D(sdpa, "[MATH_SOFTMAX_START] Input shape={scores_shape}")},
         {D(sdpa, "[MATH_SOFTMAX_DONE] Output shape={scores_shape}{values:sum}")},
         "[MATH_SOFTMAX_START] is the last line"},
        // The scores are freed once softmax has read them; a call that stops before keeps them.
        {Stage::free_scores, "free_scores", K::free, W::call, Stage::softmax, nullptr, kFreeBegin, kFreeEnd, {}, {}, kMemoryHang},
        {Stage::alloc_dropout, "alloc_dropout", K::alloc, W::call, Stage::dropout, nullptr, kAllocBegin, kAllocEnd, {}, {},
         kMemoryHang},
        {Stage::dropout, "dropout", K::gpu, W::call, Stage::dropout, kHasDropout,
         {"[MATH_DROPOUT_START] {detail}"}, {"[MATH_DROPOUT_DONE]"},
         {D(sdpa, "[MATH_DROPOUT_START]")}, {D(sdpa, "[MATH_DROPOUT_DONE]")}, kElementwise},
        {Stage::alloc_output, "alloc_output", K::alloc, W::call, Stage::pv_gemm, nullptr, kAllocBegin, kAllocEnd, {}, {}, kMemoryHang},
        {Stage::pv_gemm, "pv_gemm", K::gpu, W::call, Stage::pv_gemm, nullptr,
         {"[MATH_FINAL_BMM_START]", "[CUBLAS_GEMM_START] {detail}"},
         {"[CUBLAS_GEMM_DONE]", "[MATH_FINAL_BMM_DONE] output shape={q_shape}{+summary}"},
         {D(sdpa, "[MATH_FINAL_BMM_START]"), D(sdpa, "[CUBLAS_GEMM_START] {mnk}")},
         {D(sdpa, "[CUBLAS_GEMM_DONE]"), D(sdpa, "[MATH_FINAL_BMM_DONE] output shape={q_shape}")},
         "the P.V GEMM had started: [CUBLAS_GEMM_START] is the last line"},
        {Stage::cast_output, "cast_output", K::gpu, W::call, Stage::cast_output, kUpcasts,
         {"[MATH_CAST_OUTPUT] {detail}"}, {"[MATH_CAST_OUTPUT_DONE]"},
         {D(sdpa, "[MATH_CAST_OUTPUT] {detail}")}, {D(sdpa, "[MATH_CAST_OUTPUT_DONE]")}, kElementwise},
        {Stage::free_call, "free_call", K::free, W::call, Stage::free_call, nullptr, kFreeBegin, kFreeEnd, {}, {}, kMemoryHang},
        {Stage::stream_sync, "stream_sync", K::host, W::call, Stage::stream_sync, nullptr,
         {"[STREAM_SYNC] stream={stream} device=0"},
         {"[STREAM_SYNC_DONE] result=success duration_ms={duration_ms}", "[CUDA_EVENT] math_sdpa_complete @ {now}"},
         {D(cuda, "[STREAM_SYNC] stream={stream} device=0")},
         // cudaGetErrorString(cudaSuccess): the call returned, or this line would not be written.
         {D(cuda, "[STREAM_SYNC_DONE] result=no error duration_ms={duration_ms}"), D(event, "math_sdpa_complete @ {now}")},
         "the synchronisation never returned though the stages before it had completed"},
        // The backward's stages have no lines in the original instrumentation (it watched the
        // forward call); their tags are the stage's name: [MATH_SOFTMAX_BACKWARD], [..._DONE].
        {Stage::alloc_grad_pv, "alloc_grad_pv", K::alloc, W::backward, Stage::alloc_grad_pv, nullptr, kAllocBegin, kAllocEnd, {}, {},
         kMemoryHang},
        {Stage::grad_upcast, "grad_upcast", K::gpu, W::backward, Stage::grad_upcast, kUpcasts,
         {"[MATH_GRAD_UPCAST]{+detail}"}, {"[MATH_GRAD_UPCAST_DONE]{+summary}"},
         {D(sdpa, "[MATH_GRAD_UPCAST]")}, {D(sdpa, "[MATH_GRAD_UPCAST_DONE]")}, kFirstTouchHang},
        {Stage::dp_gemm, "dp_gemm", K::gpu, W::backward, Stage::dp_gemm, nullptr,
         {"[MATH_DP_GEMM]", "[CUBLAS_GEMM_START] {detail}"}, {"[CUBLAS_GEMM_DONE]", "[MATH_DP_GEMM_DONE]{+summary}"},
         {D(sdpa, "[MATH_DP_GEMM]"), D(sdpa, "[CUBLAS_GEMM_START] {mnk}")},
         {D(sdpa, "[CUBLAS_GEMM_DONE]"), D(sdpa, "[MATH_DP_GEMM_DONE]")}, kBackwardGemmHang},
        {Stage::dv_gemm, "dv_gemm", K::gpu, W::backward, Stage::dv_gemm, nullptr,
         {"[MATH_DV_GEMM]", "[CUBLAS_GEMM_START] {detail}"}, {"[CUBLAS_GEMM_DONE]", "[MATH_DV_GEMM_DONE]{+summary}"},
         {D(sdpa, "[MATH_DV_GEMM]"), D(sdpa, "[CUBLAS_GEMM_START] {mnk}")},
         {D(sdpa, "[CUBLAS_GEMM_DONE]"), D(sdpa, "[MATH_DV_GEMM_DONE]")}, kBackwardGemmHang},
        {Stage::alloc_grad_softmax, "alloc_grad_softmax", K::alloc, W::backward, Stage::alloc_grad_softmax, nullptr, kAllocBegin,
         kAllocEnd, {}, {}, kMemoryHang},
        {Stage::dropout_backward, "dropout_backward", K::gpu, W::backward, Stage::dropout_backward, kHasDropout,
         {"[MATH_DROPOUT_BACKWARD]{+detail}"}, {"[MATH_DROPOUT_BACKWARD_DONE]{+summary}"},
         {D(sdpa, "[MATH_DROPOUT_BACKWARD]")}, {D(sdpa, "[MATH_DROPOUT_BACKWARD_DONE]")}, kElementwise},
        {Stage::grads_to_host, "grads_to_host", K::host, W::backward, Stage::grads_to_host, kHostReadsScores,
         {"[MATH_GRADS_TO_HOST]{+detail}"}, {"[MATH_GRADS_TO_HOST_DONE]{+summary}"},
         {D(sdpa, "[MATH_GRADS_TO_HOST]")}, {D(sdpa, "[MATH_GRADS_TO_HOST_DONE]")},
         "the host's access to the probabilities' and dP's pages before softmax's backward never finished", true},
        {Stage::softmax_backward, "softmax_backward", K::gpu, W::backward, Stage::softmax_backward, nullptr,
         {"[MATH_SOFTMAX_BACKWARD]{+detail}"}, {"[MATH_SOFTMAX_BACKWARD_DONE]{+summary}"},
         {D(sdpa, "[MATH_SOFTMAX_BACKWARD]")}, {D(sdpa, "[MATH_SOFTMAX_BACKWARD_DONE]")},
         "softmax's backward, a reduction per row like the forward's"},
        {Stage::free_grad_probs, "free_grad_probs", K::free, W::backward, Stage::free_grad_probs, nullptr, kFreeBegin, kFreeEnd, {}, {},
         kMemoryHang},
        {Stage::alloc_grad_qk, "alloc_grad_qk", K::alloc, W::backward, Stage::alloc_grad_qk, nullptr, kAllocBegin, kAllocEnd, {}, {},
         kMemoryHang},
        {Stage::dq_gemm, "dq_gemm", K::gpu, W::backward, Stage::dq_gemm, nullptr,
         {"[MATH_DQ_GEMM]", "[CUBLAS_GEMM_START] {detail}"}, {"[CUBLAS_GEMM_DONE]", "[MATH_DQ_GEMM_DONE]{+summary}"},
         {D(sdpa, "[MATH_DQ_GEMM]"), D(sdpa, "[CUBLAS_GEMM_START] {mnk}")},
         {D(sdpa, "[CUBLAS_GEMM_DONE]"), D(sdpa, "[MATH_DQ_GEMM_DONE]")}, kBackwardGemmHang},
        {Stage::dk_gemm, "dk_gemm", K::gpu, W::backward, Stage::dk_gemm, nullptr,
         {"[MATH_DK_GEMM]", "[CUBLAS_GEMM_START] {detail}"}, {"[CUBLAS_GEMM_DONE]", "[MATH_DK_GEMM_DONE]{+summary}"},
         {D(sdpa, "[MATH_DK_GEMM]"), D(sdpa, "[CUBLAS_GEMM_START] {mnk}")},
         {D(sdpa, "[CUBLAS_GEMM_DONE]"), D(sdpa, "[MATH_DK_GEMM_DONE]")}, kBackwardGemmHang},
        {Stage::grad_inputs, "grad_inputs", K::gpu, W::backward, Stage::grad_inputs, nullptr,
         {"[MATH_GRAD_INPUTS]{+detail}"}, {"[MATH_GRAD_INPUTS_DONE]{+summary}"},
         {D(sdpa, "[MATH_GRAD_INPUTS]")}, {D(sdpa, "[MATH_GRAD_INPUTS_DONE]")}, kElementwise},
        {Stage::free_backward, "free_backward", K::free, W::backward, Stage::free_backward, nullptr, kFreeBegin, kFreeEnd, {}, {},
         kMemoryHang},
        {Stage::backward_sync, "backward_sync", K::host, W::backward, Stage::backward_sync, nullptr,
         {"[BACKWARD_SYNC] stream={stream} device=0"}, {"[BACKWARD_SYNC_DONE] result=success duration_ms={duration_ms}"},
         {D(cuda, "[BACKWARD_SYNC] stream={stream} device=0")},
         {D(cuda, "[BACKWARD_SYNC_DONE] result=no error duration_ms={duration_ms}")},
         "the synchronisation never returned though the stages before it had completed"},
        {Stage::free_step, "free_step", K::free, W::step, Stage::free_step, nullptr, kFreeBegin, kFreeEnd, {}, {}, kMemoryHang},
    };
    for (size_t i = 0; i < t.size(); ++i) {
      if (static_cast<size_t>(t[i].stage) != i) throw std::logic_error(std::string("stage table: row ") + t[i].name + " out of order");
    }
    if (t.size() != static_cast<size_t>(kStageCount)) throw std::logic_error("stage table: a stage without its row");
    return t;
  }();
  return table;
}

#undef D

const StageRow& stage_row(Stage s) { return stage_table()[static_cast<size_t>(s)]; }
const char* stage_name(Stage s) { return stage_row(s).name; }

bool parse_stage(const std::string& name, Stage& out) {
  for (const StageRow& row : stage_table()) {
    if (name == row.name) {
      out = row.stage;
      return true;
    }
  }
  return false;
}

std::string stage_names(const char* separator) {
  std::string s;
  for (const StageRow& row : stage_table()) s += (s.empty() ? "" : separator) + std::string(row.name);
  return s;
}

Stage allocation_stage_of(Stage s) {
  for (const StageRow& row : stage_table()) {
    if (row.kind == StageKind::alloc && row.serves == s && row.stage != s) return row.stage;
  }
  return s;
}

bool stage_runs(Stage s, const SdpaProblem& p, const PathSettings& ps) {
  const StageRow& row = stage_row(s);
  if (row.runs_if.test && !row.runs_if.test(p, ps)) return false;
  switch (row.when) {
    case StageWhen::load: return true;
    case StageWhen::graph: return ps.graph;
    case StageWhen::backward: return ps.backward && (!is_memory_stage(s) || ps.alloc_timing == AllocTiming::per_call);
    case StageWhen::step: return ps.alloc_timing == AllocTiming::per_call;
    case StageWhen::call: break;
  }
  if (is_memory_stage(s)) return ps.alloc_timing == AllocTiming::per_call && (row.serves == s || stage_runs(row.serves, p, ps));
  return s == Stage::stream_sync || static_cast<int>(s) <= static_cast<int>(ps.last_stage);
}

std::string stage_needs(Stage s, const SdpaProblem& p, const PathSettings& ps) {
  if (stage_runs(s, p, ps)) return "";
  const StageRow& row = stage_row(s);
  if (row.runs_if.test && !row.runs_if.test(p, ps)) return row.runs_if.needs;
  switch (row.when) {
    case StageWhen::load: return "";
    case StageWhen::graph: return "--graph";
    case StageWhen::backward: return ps.backward ? "--alloc-timing per-call" : "--backward";
    case StageWhen::step: return "--alloc-timing per-call";
    case StageWhen::call: break;
  }
  if (is_memory_stage(s)) {
    if (ps.alloc_timing != AllocTiming::per_call) return "--alloc-timing per-call";
    return stage_needs(row.serves, p, ps);
  }
  return std::string("--full (the scenario stops after ") + stage_name(ps.last_stage) + ")";
}

void StageLongest::add(Stage s, double ms) {
  if (stage_row(s).harness_work || stage_when(s) == StageWhen::load) return;
  if (is_gpu_stage(s)) {
    if (ms > gpu_ms) gpu_ms = ms, gpu_stage = s;
  } else if (ms > host_ms) {
    host_ms = ms, host_stage = s;
  }
}

}  // namespace sdpa
