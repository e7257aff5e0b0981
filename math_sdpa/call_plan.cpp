// call_plan.cpp: the steps of a layer's calls, in the order _scaled_dot_product_attention_math
// and its backward run them (call_plan.h says what the plan is for).
#include "call_plan.h"

#include <algorithm>
#include <type_traits>

#include "softmax_plan.h"

namespace sdpa {

namespace {

// Records what a hook asks for as operations of the step it acts in.
class RecordedActions : public HookActions {
 public:
  explicit RecordedActions(std::vector<PlanOp>& ops) : ops_(ops) {}
  void synchronize_stream(PathStream stream) override { ops_.push_back(HookSyncOp{stream}); }
  void synchronize_device() override { ops_.push_back(HookSyncOp{PathStream::none}); }
  void prefetch_to_device(const ReducedOperand& o, PathStream stream) override {
    ops_.push_back(PrefetchOp{{o.id, o.chunk, 0}, o.bytes, stream});
  }

 private:
  std::vector<PlanOp>& ops_;
};

class Planner {
 public:
  Planner(const SdpaProblem& p, const PathSettings& ps, const std::vector<TensorSpec>& tensors,
          const std::vector<PathHook*>& hooks, int device)
      : p_(p), ps_(ps), tensors_(tensors), hooks_(hooks), device_(device) {
    rows_ = chunk_rows(p, ps);
    chunks_ = static_cast<int>((p.q_len + rows_ - 1) / rows_);
    const int64_t bh = p.batch * p.q_heads;
    k_input_ = k_input_strides(p, ps.k_layout);
    k_gemm_ = k_gemm_strides(p, ps.k_layout);
    kt_ = kt_operand(p, k_gemm_, runs(Stage::kt_contiguous));
    qk_ = qk_gemm_call(bh, p.q_len, p.kv_len, p.head_dim, p.compute_dtype(), kt_, ps.qk_gemm_api);
    pv_ = pv_gemm_call(bh, p.q_len, p.kv_len, p.head_dim, p.compute_dtype());
    backward_ = backward_gemm_calls(bh, p.q_len, p.kv_len, p.head_dim, p.compute_dtype(), kt_);
    qk_.stream_name = stream_placeholder(PathStream::gemm);
    pv_.stream_name = stream_placeholder(PathStream::path);
    for (GemmCall* g : {&backward_.dp, &backward_.dv, &backward_.dq, &backward_.dk}) g->stream_name = qk_.stream_name;
  }

  CallPlan plan() {
    CallPlan c;
    c.chunks = chunks_;
    c.chunk_rows = rows_;
    c.entry = staged(Stage::entry_sync, p_.shape_string(), {EntrySyncOp{ps_.entry_touch_streams > 0}});
    out_ = &c.forward_gpu;
    forward();
    c.free_call = memory_step(Stage::free_call);
    c.stream_sync = staged(Stage::stream_sync, "", {SyncAllStreamsOp{}, FinishHostAccessOp{}});
    if (ps_.backward) {
      out_ = &c.backward_gpu;
      if (ps_.retain == Retain::checkpoint) recompute();
      backward();
      if (ps_.retain == Retain::checkpoint) free_recomputed();
      c.backward_sync = staged(Stage::backward_sync, "", {SyncAllStreamsOp{}});
    }
    c.free_step = memory_step(Stage::free_step);
    return c;
  }

 private:
  bool runs(Stage s) const { return stage_runs(s, p_, ps_); }
  DType ct() const { return p_.compute_dtype(); }
  int64_t acc() const { return static_cast<int64_t>(dtype_size(ct())); }
  bool has(TensorId id) const {
    for (const TensorSpec& t : tensors_) {
      if (t.id == id) return true;
    }
    return false;
  }
  int64_t bytes_of(TensorId id) const {
    for (const TensorSpec& t : tensors_) {
      if (t.id == id) return t.bytes;
    }
    return 0;
  }

  // What a softmax stage reduces over (the fixes' and scenario 2's operands).
  std::vector<ReducedOperand> reduced_by(Stage s) const {
    if (s == Stage::softmax) return {{"scores", TensorId::scores, 0, bytes_of(TensorId::scores)}};
    if (s != Stage::softmax_backward && s != Stage::grads_to_host) return {};
    const TensorId dprobs = runs(Stage::dropout_backward) ? TensorId::grad_probs : TensorId::grad_attn_dropped;
    return {{"probs", TensorId::probs, 0, bytes_of(TensorId::probs)}, {"grad_probs", dprobs, 0, bytes_of(dprobs)}};
  }

  // A stage with its work, the hooks' actions around it: theirs before, its own, theirs after.
  PlanStep staged(Stage s, std::string detail, std::vector<PlanOp> body, PathStream stream = PathStream::path) {
    PlanStep step;
    step.stage = s;
    step.detail = std::move(detail);
    step.stream = stream;
    HookContext ctx;
    ctx.stage = s;
    ctx.stream = stream;
    ctx.path_stream = PathStream::path;
    ctx.device = device_;
    ctx.reduced = reduced_by(s);
    ctx.kind = ps_.alloc;
    if (ps_.reduced_on_device && migratable(ps_.alloc) && !ctx.reduced.empty()) ctx.kind = AllocKind::device;
    RecordedActions actions(step.ops);
    ctx.gpu = &actions;
    ctx.note = [&step, s](const std::string& text) { step.ops.push_back(NoteOp{s, text}); };
    for (PathHook* h : hooks_) h->before_stage(ctx);
    for (PlanOp& op : body) step.ops.push_back(std::move(op));
    for (PathHook* h : hooks_) h->after_stage(ctx);
    return step;
  }
  void stage(Stage s, std::string detail, std::vector<PlanOp> body, PathStream stream = PathStream::path) {
    out_->push_back(staged(s, std::move(detail), std::move(body), stream));
  }
  void between(PlanOp op) {
    PlanStep step;
    step.staged = false;
    step.ops.push_back(std::move(op));
    out_->push_back(std::move(step));
  }

  // The alloc_* or free_* stage `s`, where it has anything to do: per call, and for a chunk's
  // alloc stage, where this chunk allocates (every chunk for tensors kept per chunk, else the first).
  PlanStep memory_step(Stage s, int chunk = 0) {
    PlanStep none;
    none.staged = false;
    if (!runs(s)) return none;
    std::string detail;
    std::vector<TensorId> ids;
    for (const TensorSpec& t : tensors_) {
      if (t.lifetime == Lifetime::run) continue;
      const bool allocates = t.alloc_stage == s && (chunk == 0 || t.chunks > 1);
      const bool frees = t.free_stage == s;
      if (!allocates && !frees) continue;
      detail += (detail.empty() ? "" : " ") + std::string(t.name) + "=" + std::to_string(t.bytes);
      ids.push_back(t.id);
    }
    if (detail.empty()) return none;
    if (chunks_ > 1 && s != Stage::free_call && s != Stage::free_step) detail += " chunk=" + std::to_string(chunk + 1);
    if (is_free_stage(s)) return staged(s, detail, {FreeOp{s, ids}});
    return staged(s, detail, {AllocateOp{s, chunk, ids}});
  }
  void memory(Stage s, int chunk = 0) {
    PlanStep step = memory_step(s, chunk);
    if (step.staged) out_->push_back(std::move(step));
  }

  // mask_prepare .. cast_output (pipeline.h's issue order: _scaled_dot_product_attention_math's).
  void forward() {
    const SdpaProblem& p = p_;
    const int64_t group = p.q_heads / p.kv_heads;
    TensorRef mask{TensorId::mask_input};
    bool has_mask = p.mask == MaskKind::additive;
    if (runs(Stage::mask_prepare)) {
      memory(Stage::alloc_mask);
      const bool causal = p.mask == MaskKind::causal;
      stage(Stage::mask_prepare, mask_kind_name(p.mask),
            {BuildMaskOp{causal, {TensorId::mask_input}, {TensorId::additive_mask}, p.dtype,
                         causal ? 1 : p.mask_batch() * p.mask_heads(), p.q_len, p.kv_len}});
      mask = {TensorId::additive_mask};
      has_mask = true;
    }
    TensorRef q{TensorId::query}, k{TensorId::key}, v{TensorId::value};
    if (runs(Stage::upcast)) {
      memory(Stage::alloc_upcast);
      UpcastOp up;
      up.src[0] = q, up.src[1] = k, up.src[2] = v;
      up.dst[0] = {TensorId::query_acc}, up.dst[1] = {TensorId::key_acc}, up.dst[2] = {TensorId::value_acc};
      up.n[0] = p.q_elems(), up.n[1] = p.kv_elems(), up.n[2] = p.kv_elems();
      up.src_type = p.dtype, up.dst_type = ct();
      stage(Stage::upcast, std::string(dtype_name(p.dtype)) + "->fp32", {up});
      q = up.dst[0], k = up.dst[1], v = up.dst[2];
    }
    memory(Stage::alloc_query_scaled);
    stage(Stage::scale_q, "factor=" + std::to_string(p.q_factor()),
          {ConvertOp{q, {TensorId::query_scaled}, ct(), ct(), p.q_elems(), p.q_factor()}});
    if (runs(Stage::gqa_expand)) {
      memory(Stage::alloc_expanded);
      std::vector<PlanOp> ops = {
          RepeatHeadsOp{k, {TensorId::key_expanded}, k_input_, ct(), p.batch, p.kv_heads, group, p.kv_len, p.head_dim}};
      if (runs(Stage::pv_gemm)) {
        ops.push_back(RepeatHeadsOp{v, {TensorId::value_expanded}, contiguous_bhse(p.kv_heads, p.kv_len, p.head_dim), ct(),
                                    p.batch, p.kv_heads, group, p.kv_len, p.head_dim});
      }
      stage(Stage::gqa_expand, "group=" + std::to_string(group), std::move(ops));
      k = {TensorId::key_expanded};
      v = {TensorId::value_expanded};
    }
    const int64_t k_elems = p.gqa() ? p.batch * p.q_heads * p.kv_len * p.head_dim : p.kv_elems();
    memory(Stage::alloc_key_scaled);
    stage(Stage::scale_k, "factor=" + std::to_string(p.k_factor()) + " transposed_view=true",
          {ConvertOp{k, {TensorId::key_scaled}, ct(), ct(), k_elems, p.k_factor()}});  // keeps K's layout
    TensorRef kt{TensorId::key_scaled};
    if (runs(Stage::kt_contiguous)) {
      const char* reason = ps_.kt_contiguous ? "fix_3" : "reshape_copy (at::matmul cannot fold this K^T view into a batch)";
      memory(Stage::alloc_key_transposed);
      stage(Stage::kt_contiguous, std::string("reason=") + reason,
            {TransposeHeadsOp{{TensorId::key_scaled}, {TensorId::key_transposed}, k_gemm_, ct(), p.batch, p.q_heads, p.kv_len,
                              p.head_dim}});
      kt = {TensorId::key_transposed};
    }
    for (int c = 0; c < chunks_; ++c) {
      const int64_t row0 = c * rows_;
      chunk(c, row0, std::min(rows_, p.q_len - row0), kt, v, has_mask ? &mask : nullptr);
    }
    if (runs(Stage::cast_output)) {
      stage(Stage::cast_output, std::string("fp32->") + dtype_name(p.dtype),
            {ConvertOp{{TensorId::out_acc}, {TensorId::output}, ct(), p.dtype, p.out_elems(), 1.0f}});
    }
  }

  // The Q.K^T GEMM through the P.V GEMM for query rows [row0, row0 + rows) of every head (fix 5's
  // chunks; the whole L without them).
  void chunk(int c, int64_t row0, int64_t rows, const TensorRef& kt, const TensorRef& v, const TensorRef* mask) {
    const SdpaProblem& p = p_;
    const bool chunked = chunks_ > 1;
    const std::string of_chunk = chunked ? " chunk=" + std::to_string(c + 1) + "/" + std::to_string(chunks_) : "";
    const int64_t n = p.batch * p.q_heads * rows * p.kv_len;
    memory(Stage::alloc_scores, c);
    // The pointer arrays point at this call's K^T, Q and scores: written once where those never
    // move (one layer up front: the pipeline writes them when it builds its workspace), else for
    // every call, once its scores exist.
    if (qk_.pointer_array && (ps_.layers > 1 || ps_.alloc_timing == AllocTiming::per_call)) {
      between(PointerArraysOp{kt, {TensorId::query_scaled}, {TensorId::scores},
                              kt_.contiguous ? contiguous_bhse(p.q_heads, p.head_dim, p.kv_len) : k_gemm_});
    }
    GemmCall qk = qk_;
    qk.n = static_cast<int>(rows);
    qk.stride_c = rows * p.kv_len;
    between(OrderGemmOp{Stage::qk_gemm});
    GemmOp gemm{qk, kt, {TensorId::query_scaled, 0, row0 * p.head_dim * acc()}, {TensorId::scores}, PathStream::gemm};
    if (qk.pointer_array) {
      const int64_t array_bytes = p.batch * p.q_heads * static_cast<int64_t>(sizeof(void*));
      gemm.a = {TensorId::qk_pointers, 0, 0}, gemm.b = {TensorId::qk_pointers, 0, array_bytes},
      gemm.c = {TensorId::qk_pointers, 0, 2 * array_bytes};
    }
    stage(Stage::qk_gemm, qk.describe() + of_chunk, {gemm}, PathStream::gemm);
    between(OrderPathOp{});
    if (runs(Stage::mask_add) && mask) {
      const bool causal = p.mask == MaskKind::causal;
      stage(Stage::mask_add, std::string(mask_kind_name(p.mask)) + of_chunk,
            {AddMaskOp{{TensorId::scores}, *mask, ct(), p.dtype, p.batch, p.q_heads, p.q_len, p.kv_len,
                       !causal && p.mask_per_batch, !causal && p.mask_per_head, row0, rows}});
    }
    if (runs(Stage::scores_to_host)) {
      stage(Stage::scores_to_host, std::string("mode=") + scores_to_host_name(ps_.scores_to_host) + of_chunk,
            {HostAccessOp{Stage::scores_to_host, reduced_by(Stage::softmax)}});
    }
    if (runs(Stage::softmax)) {
      memory(Stage::alloc_probs, c);
      const SoftmaxVariant variant = softmax_variant_for(ct(), p.kv_len);
      stage(Stage::softmax,
            "rows=" + std::to_string(p.batch * p.q_heads * rows) + " cols=" + std::to_string(p.kv_len) +
                " variant=" + softmax_variant_name(variant) + of_chunk,
            {SoftmaxOp{{TensorId::scores}, {TensorId::probs, c}, ct(), p.batch * p.q_heads * rows, p.kv_len},
             SoftmaxLaunchedOp{}});
      between(ReleaseHostAdviceOp{reduced_by(Stage::softmax), true});
      if (c == chunks_ - 1 && runs(Stage::free_scores)) {
        // Scenario 2's host thread touches the scores until softmax has read them: it is done
        // before they go.
        between(FinishHostAccessOp{});
        memory(Stage::free_scores);
      }
    }
    if (runs(Stage::dropout)) {
      memory(Stage::alloc_dropout, c);
      const PlannedRows planned = chunked ? PlannedRows{rows, row0, p.q_len, p.kv_len} : PlannedRows{};
      stage(Stage::dropout, "p=" + std::to_string(p.dropout_p) + of_chunk,
            {DropoutOp{{TensorId::probs, c}, {TensorId::attn_dropped, c}, {TensorId::dropout_mask, c}, ct(), n, p.seed,
                       p.keep_prob(), planned}});
    }
    if (runs(Stage::pv_gemm)) {
      memory(Stage::alloc_output, c);
      GemmCall pv = pv_;
      pv.n = static_cast<int>(rows);
      pv.stride_b = rows * p.kv_len;
      const TensorRef probs = runs(Stage::dropout) ? TensorRef{TensorId::attn_dropped, c} : TensorRef{TensorId::probs, c};
      stage(Stage::pv_gemm, pv.describe() + of_chunk,
            {GemmOp{pv, v, probs, {TensorId::out_acc, 0, row0 * p.head_dim * acc()}, PathStream::path}});
    }
  }

  // Checkpointing: the backward call first runs the layer's forward again up to the last tensor
  // autograd saves (dropout's output, or the probabilities), as PyTorch's checkpoint does (its early
  // stop ends the recomputation once every saved tensor is made again: the P.V GEMM and the cast
  // back are not run). What it allocates stays for the backward, which frees it at its end.
  void recompute() {
    std::vector<PlanStep> steps;
    std::vector<PlanStep>* out = out_;
    out_ = &steps;
    forward();
    out_ = out;
    std::vector<TensorId> live;  // allocated by the recompute and not freed yet
    for (PlanStep& s : steps) {
      if (s.staged && (s.stage == Stage::alloc_output || s.stage == Stage::pv_gemm || s.stage == Stage::cast_output)) break;
      for (const PlanOp& op : s.ops) {
        if (const auto* a = std::get_if<AllocateOp>(&op)) live.insert(live.end(), a->tensors.begin(), a->tensors.end());
        if (const auto* f = std::get_if<FreeOp>(&op)) {
          for (TensorId id : f->tensors) live.erase(std::remove(live.begin(), live.end(), id), live.end());
        }
      }
      out_->push_back(std::move(s));
    }
    // What autograd saves stays for the backward (freed where it ends); the rest of what the
    // recompute made goes when it stops, as a forward call's free_call frees it.
    PathSettings retained = ps_;
    retained.retain = Retain::autograd;
    std::vector<TensorId> transient;
    for (TensorId id : live) {
      const std::vector<TensorSpec> table = path_tensors(p_, retained);
      const bool saved = std::any_of(table.begin(), table.end(), [id](const TensorSpec& t) {
        return t.id == id && t.lifetime == Lifetime::step && t.free_stage == Stage::free_backward;
      });
      (saved ? recomputed_ : transient).push_back(id);
    }
    if (transient.empty()) return;
    std::string detail;
    for (TensorId id : transient) detail += (detail.empty() ? "" : " ") + std::string(tensor_name(id)) + "=" + std::to_string(bytes_of(id));
    stage(Stage::free_call, detail, {FreeOp{Stage::free_call, transient}});
  }
  void free_recomputed() {
    for (auto it = out_->rbegin(); it != out_->rend(); ++it) {
      if (!it->staged || it->stage != Stage::free_backward) continue;
      auto op = std::find_if(it->ops.begin(), it->ops.end(), [](const PlanOp& o) { return std::holds_alternative<FreeOp>(o); });
      auto& free = std::get<FreeOp>(*op);
      for (TensorId id : recomputed_) {
        free.tensors.push_back(id);
        it->detail += std::string(" ") + tensor_name(id) + "=" + std::to_string(bytes_of(id));
      }
      return;
    }
  }

  // A backward GEMM on the Q.K^T GEMM's stream (scenario 1's condition), ordered as that GEMM is.
  void gemm_stage(Stage s, const GemmCall& call, TensorRef a, TensorRef b, TensorRef c, int64_t calls = 1, int64_t step_a = 0,
                  int64_t step_b = 0, int64_t step_c = 0) {
    between(OrderGemmOp{s});
    stage(s, call.describe() + (calls > 1 ? " calls=" + std::to_string(calls) + " (one per batch entry)" : std::string()),
          {GemmOp{call, a, b, c, PathStream::gemm, calls, step_a * acc(), step_b * acc(), step_c * acc()}}, PathStream::gemm);
    between(OrderPathOp{});
  }

  // The backward of _scaled_dot_product_attention_math (pipeline.h has the order autograd runs it in).
  void backward() {
    const SdpaProblem& p = p_;
    const int64_t bh = p.batch * p.q_heads, group = p.q_heads / p.kv_heads;
    memory(Stage::alloc_grad_pv);
    TensorRef dout{TensorId::grad_output};
    if (runs(Stage::grad_upcast)) {
      stage(Stage::grad_upcast, std::string(dtype_name(p.dtype)) + "->fp32",
            {ConvertOp{dout, {TensorId::grad_output_acc}, p.dtype, ct(), p.q_elems(), 1.0f}});
      dout = {TensorId::grad_output_acc};
    }
    // The V and probabilities bmm(P, V) read, as it saved them.
    const TensorRef v{p.gqa() ? TensorId::value_expanded : runs(Stage::upcast) ? TensorId::value_acc : TensorId::value};
    const bool dropout = runs(Stage::dropout);
    const TensorRef probs_read{dropout ? TensorId::attn_dropped : TensorId::probs};
    gemm_stage(Stage::dp_gemm, backward_.dp, v, dout, {TensorId::grad_attn_dropped});
    gemm_stage(Stage::dv_gemm, backward_.dv, dout, probs_read, {TensorId::grad_value_expanded});
    memory(Stage::alloc_grad_softmax);
    TensorRef dprobs{TensorId::grad_attn_dropped};
    if (dropout) {
      stage(Stage::dropout_backward, "p=" + std::to_string(p.dropout_p),
            {DropoutBackwardOp{dprobs, {TensorId::dropout_mask}, {TensorId::grad_probs}, ct(), p.score_elems(), p.keep_prob()}});
      dprobs = {TensorId::grad_probs};
    }
    if (runs(Stage::grads_to_host)) {
      stage(Stage::grads_to_host, std::string("mode=") + scores_to_host_name(ps_.scores_to_host),
            {HostAccessOp{Stage::grads_to_host, reduced_by(Stage::softmax_backward)}});
    }
    stage(Stage::softmax_backward,
          "rows=" + std::to_string(bh * p.q_len) + " cols=" + std::to_string(p.kv_len) +
              (p.kv_len <= kSoftmaxBackwardWarpCols ? " variant=warp" : " variant=block"),
          {SoftmaxBackwardOp{dprobs, {TensorId::probs}, {TensorId::grad_scores}, ct(), bh * p.q_len, p.kv_len}});
    between(ReleaseHostAdviceOp{reduced_by(Stage::softmax_backward), false});
    memory(Stage::free_grad_probs);
    memory(Stage::alloc_grad_qk);
    // dQ reads K as the forward's GEMM did. A view of a [B, S, H, E] K whose batch and head strides
    // do not fold (the pointer-array GEMM took it without a copy) is read one batch entry a call.
    const bool kt_copy = runs(Stage::kt_contiguous);
    const HeadStrides& ks = k_gemm_;
    const bool folds = kt_copy || p.batch == 1 || ks.batch == p.q_heads * ks.head;
    GemmCall dq = backward_.dq;
    if (!folds) dq.batch = static_cast<int>(p.q_heads);
    gemm_stage(Stage::dq_gemm, dq, {kt_copy ? TensorId::key_transposed : TensorId::key_scaled}, {TensorId::grad_scores},
               {TensorId::grad_query_scaled}, folds ? 1 : p.batch, ks.batch, p.q_heads * p.q_len * p.kv_len,
               p.q_heads * p.q_len * p.head_dim);
    gemm_stage(Stage::dk_gemm, backward_.dk, {TensorId::query_scaled}, {TensorId::grad_scores}, {TensorId::grad_key_scaled});
    const int64_t head_elems = p.kv_len * p.head_dim;
    stage(Stage::grad_inputs, "group=" + std::to_string(group) + " ->" + dtype_name(p.dtype),
          {SumHeadGroupsOp{{TensorId::grad_query_scaled}, {TensorId::grad_query}, ct(), p.dtype, bh, 1, p.q_len * p.head_dim,
                           p.q_factor()},
           SumHeadGroupsOp{{TensorId::grad_key_scaled}, {TensorId::grad_key}, ct(), p.dtype, p.batch * p.kv_heads, group,
                           head_elems, p.k_factor()},
           SumHeadGroupsOp{{TensorId::grad_value_expanded}, {TensorId::grad_value}, ct(), p.dtype, p.batch * p.kv_heads, group,
                           head_elems, 1.0f}});
    memory(Stage::free_backward);
  }

  const SdpaProblem& p_;
  const PathSettings& ps_;
  const std::vector<TensorSpec>& tensors_;
  const std::vector<PathHook*>& hooks_;
  int device_;
  int64_t rows_ = 0;
  int chunks_ = 1;
  HeadStrides k_input_{}, k_gemm_{};
  KtOperand kt_;
  GemmCall qk_, pv_;
  BackwardGemms backward_;
  std::vector<PlanStep>* out_ = nullptr;
  std::vector<TensorId> recomputed_;  // what the backward's recompute allocated and keeps for it
};

template <typename T> struct OpName;
#define SDPA_OP_NAME(T, name) \
  template <> struct OpName<T> { static constexpr const char* value = name; };
SDPA_OP_NAME(AllocateOp, "allocate")
SDPA_OP_NAME(FreeOp, "free")
SDPA_OP_NAME(EntrySyncOp, "entry_sync")
SDPA_OP_NAME(SyncAllStreamsOp, "sync_streams")
SDPA_OP_NAME(HookSyncOp, "fix_sync")
SDPA_OP_NAME(PrefetchOp, "prefetch")
SDPA_OP_NAME(NoteOp, "note")
SDPA_OP_NAME(OrderGemmOp, "order_gemm")
SDPA_OP_NAME(OrderPathOp, "order_path")
SDPA_OP_NAME(BuildMaskOp, "build_mask")
SDPA_OP_NAME(ConvertOp, "convert")
SDPA_OP_NAME(UpcastOp, "upcast")
SDPA_OP_NAME(RepeatHeadsOp, "repeat_heads")
SDPA_OP_NAME(TransposeHeadsOp, "transpose_heads")
SDPA_OP_NAME(PointerArraysOp, "pointer_arrays")
SDPA_OP_NAME(GemmOp, "gemm")
SDPA_OP_NAME(AddMaskOp, "add_mask")
SDPA_OP_NAME(SoftmaxOp, "softmax")
SDPA_OP_NAME(DropoutOp, "dropout")
SDPA_OP_NAME(DropoutBackwardOp, "dropout_backward")
SDPA_OP_NAME(SoftmaxBackwardOp, "softmax_backward")
SDPA_OP_NAME(SumHeadGroupsOp, "sum_head_groups")
SDPA_OP_NAME(HostAccessOp, "host_access")
SDPA_OP_NAME(SoftmaxLaunchedOp, "softmax_launched")
SDPA_OP_NAME(FinishHostAccessOp, "finish_host_access")
SDPA_OP_NAME(ReleaseHostAdviceOp, "release_host_advice")
#undef SDPA_OP_NAME

}  // namespace

const char* path_stream_name(PathStream s) {
  return s == PathStream::path ? "path" : s == PathStream::gemm ? "gemm" : "none";
}

std::string stream_placeholder(PathStream s) { return std::string("{stream:") + path_stream_name(s) + "}"; }

const char* plan_op_name(const PlanOp& op) {
  return std::visit([](const auto& o) { return OpName<std::decay_t<decltype(o)>>::value; }, op);
}

CallPlan plan_calls(const SdpaProblem& p, const PathSettings& ps, const std::vector<TensorSpec>& tensors,
                    const std::vector<PathHook*>& hooks, int device) {
  return Planner(p, ps, tensors, hooks, device).plan();
}

}  // namespace sdpa
