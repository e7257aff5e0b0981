// memory_plan.cpp: the path's tensor table and the plan added up from it.
#include "memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "name_table.h"

namespace sdpa {

namespace {

const NameTable<Lifetime> kLifetimes{"lifetime", {{Lifetime::run, "run"}, {Lifetime::call, "call"}, {Lifetime::step, "step"}}};

const char* const kTensorNames[kTensorCount] = {
    "query",      "key",         "value",          "mask_input",       "additive_mask", "query_acc",
    "key_acc",    "value_acc",   "query_scaled",   "key_expanded",     "value_expanded", "key_scaled",
    "key_transposed", "qk_pointer_arrays", "scores", "attn",           "softmax_neginf", "dropout_mask",
    "attn_dropped", "out_acc",   "output",
    "grad_output", "grad_output_acc", "grad_attn_dropped", "grad_value_expanded", "grad_attn", "grad_scores",
    "grad_query_scaled", "grad_key_scaled", "grad_query", "grad_key", "grad_value",
    "cublas_workspace", "value_stats",    "touch_sink"};

// PyTorch's cuBLAS workspace for Hopper and newer; the path passes its own of the same size.
constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;

}  // namespace

const char* lifetime_name(Lifetime l) { return kLifetimes.name(l); }
const char* tensor_name(TensorId id) { return kTensorNames[static_cast<int>(id)]; }

std::vector<TensorSpec> path_tensors(const SdpaProblem& p, const PathSettings& ps) {
  const bool per_call = ps.alloc_timing == AllocTiming::per_call;
  // Checkpointing keeps nothing of the call after it: what autograd saves lives in the call (and,
  // made again, in the backward call's recompute: plan_calls).
  const bool autograd = ps.retain == Retain::autograd;
  const DType ct = p.compute_dtype();
  const int64_t in_size = static_cast<int64_t>(dtype_size(p.dtype)), acc_size = static_cast<int64_t>(dtype_size(ct));
  const int64_t bh = p.batch * p.q_heads;
  const int64_t expanded_kv = bh * p.kv_len * p.head_dim;
  const int64_t rows = chunk_rows(p, ps);
  const int chunks = static_cast<int>((p.q_len + rows - 1) / rows);
  const int64_t chunk_scores = bh * rows * p.kv_len;
  const ResultTensor result = result_tensor_of(ps);
  auto runs = [&](Stage s) { return stage_runs(s, p, ps); };
  const bool upcast = runs(Stage::upcast), pv = runs(Stage::pv_gemm);

  std::vector<TensorSpec> t;
  // A tensor that exists before the first call whatever the timing: a layer's inputs, the workspace.
  auto add_run = [&](TensorId id, int64_t bytes, bool per_layer, const char* why) {
    TensorSpec s;
    s.id = id;
    s.name = tensor_name(id);
    s.bytes = bytes;
    s.per_layer = per_layer;
    s.why = why;
    t.push_back(s);
  };
  // A tensor of the call: per call, allocated by `stage`, kept until the step ends when `kept`
  // (autograd's or the layer's result), else freed at `freed`; up front, allocated before the
  // first call, one per layer when kept, else one the layers share.
  auto add = [&](TensorId id, int64_t bytes, Stage stage, bool kept, const char* why, Stage freed = Stage::free_call,
                 int n = 1) {
    add_run(id, bytes, kept, why);
    TensorSpec& s = t.back();
    s.chunks = n;
    if (per_call) {
      s.lifetime = kept ? Lifetime::step : Lifetime::call;
      s.alloc_stage = stage;
      s.free_stage = kept ? Stage::free_step : freed;
    }
  };

  add_run(TensorId::query, p.q_elems() * in_size, true, "the layer's Q, as the model hands it to SDPA");
  add_run(TensorId::key, p.kv_elems() * in_size, true, "the layer's K");
  add_run(TensorId::value, p.kv_elems() * in_size, true, "the layer's V");
  if (p.mask == MaskKind::boolean) add_run(TensorId::mask_input, p.mask_elems(), false, "the model's boolean mask, the same for every layer");
  if (p.mask == MaskKind::additive) {
    add_run(TensorId::mask_input, p.mask_elems() * in_size, false, "the model's additive mask, the same for every layer");
  }
  if (runs(Stage::mask_prepare)) {
    const int64_t elems = p.mask == MaskKind::causal ? p.q_len * p.kv_len : p.mask_elems();
    add(TensorId::additive_mask, elems * in_size, Stage::alloc_mask, false,
        p.mask == MaskKind::causal ? "the causal mask as -inf/0 (ones().tril(), then where())"
                                   : "the boolean mask as -inf/0 (scaled_dot_product_attention's conversion)");
  }
  if (upcast) {
    add(TensorId::query_acc, p.q_elems() * acc_size, Stage::alloc_upcast, false, "query.to(float)");
    add(TensorId::key_acc, p.kv_elems() * acc_size, Stage::alloc_upcast, false, "key.to(float)");
    // bmm(P, V) keeps the V it reads: this copy, unless GQA expands it into another.
    add(TensorId::value_acc, p.kv_elems() * acc_size, Stage::alloc_upcast, autograd && pv && !p.gqa(),
        "value.to(float); kept by bmm(P, V)");
  }
  add(TensorId::query_scaled, p.q_elems() * acc_size, Stage::alloc_query_scaled, autograd,
      "query * sqrt(scale); kept by bmm(Q, K^T)");
  if (runs(Stage::gqa_expand)) {
    add(TensorId::key_expanded, expanded_kv * acc_size, Stage::alloc_expanded, false, "key.repeat_interleave(group)");
    if (pv) add(TensorId::value_expanded, expanded_kv * acc_size, Stage::alloc_expanded, autograd, "value.repeat_interleave(group); kept by bmm(P, V)");
  }
  const bool kt_copy = runs(Stage::kt_contiguous);
  add(TensorId::key_scaled, (p.gqa() ? expanded_kv : p.kv_elems()) * acc_size, Stage::alloc_key_scaled, autograd && !kt_copy,
      "K^T * sqrt(scale), K's layout kept; kept by bmm(Q, K^T) unless copied");
  if (kt_copy) {
    add(TensorId::key_transposed, expanded_kv * acc_size, Stage::alloc_key_transposed, autograd,
        "at::matmul's contiguous copy of a K^T view it cannot batch (or fix 3's); kept by bmm(Q, K^T)");
  }
  if (ps.qk_gemm_api == GemmApi::batched) {
    add(TensorId::qk_pointers, 3 * bh * static_cast<int64_t>(sizeof(void*)), Stage::alloc_scores, false,
        "cublasGemmBatchedEx's per-head pointers (the harness's own)");
  }
  const bool scores_kept = result == ResultTensor::scores;
  add(TensorId::scores, chunk_scores * acc_size, Stage::alloc_scores, scores_kept,
      scores_kept ? "bmm(Q, K^T)'s output; the call's result" : "bmm(Q, K^T)'s output; dies when _safe_softmax returns",
      Stage::free_scores);
  if (runs(Stage::softmax)) {
    const bool dropout = runs(Stage::dropout);
    const bool probs_kept = autograd || (result == ResultTensor::probs && !dropout);
    add(TensorId::probs, chunk_scores * acc_size, Stage::alloc_probs, probs_kept,
        "_safe_softmax's output; kept by its backward (and by bmm(P, V) without dropout)", Stage::free_call,
        probs_kept ? chunks : 1);
    if (per_call) {
      add(TensorId::softmax_neginf, chunk_scores, Stage::alloc_probs, false,
          "_safe_softmax's bool mask of the -inf scores, alive while it runs", Stage::free_scores);
    }
    if (dropout) {
      const bool out_kept = autograd || result == ResultTensor::probs;
      add(TensorId::dropout_mask, chunk_scores, Stage::alloc_dropout, autograd, "native_dropout's mask; kept by its backward",
          Stage::free_call, autograd ? chunks : 1);
      add(TensorId::attn_dropped, chunk_scores * acc_size, Stage::alloc_dropout, out_kept,
          "native_dropout's output; kept by bmm(P, V)", Stage::free_call, out_kept ? chunks : 1);
    }
  }
  if (pv) {
    const bool cast = runs(Stage::cast_output);
    add(TensorId::out_acc, p.out_elems() * acc_size, Stage::alloc_output, !cast,
        cast ? "bmm(P, V)'s output, before the cast back" : "bmm(P, V)'s output; the call's result");
    if (cast) add(TensorId::output, p.out_elems() * in_size, Stage::alloc_output, true, "the output cast back; the call's result");
  }
  if (ps.backward) {
    const int64_t kv_in = p.kv_elems() * in_size;
    add_run(TensorId::grad_output, p.q_elems() * in_size, true, "the layer's gradient of its output (dO), seeded random");
    if (upcast) {
      add(TensorId::grad_output_acc, p.q_elems() * acc_size, Stage::alloc_grad_pv, false, "dO.to(float) (ToCopyBackward)",
          Stage::free_backward);
    }
    add(TensorId::grad_attn_dropped, chunk_scores * acc_size, Stage::alloc_grad_pv, false,
        "dO.bmm(V^T): the gradient of bmm(P, V)'s P", Stage::free_grad_probs);
    add(TensorId::grad_value_expanded, expanded_kv * acc_size, Stage::alloc_grad_pv, false,
        "P^T.bmm(dO): V's gradient in the query heads", Stage::free_backward);
    if (runs(Stage::dropout_backward)) {
      add(TensorId::grad_probs, chunk_scores * acc_size, Stage::alloc_grad_softmax, false, "native_dropout_backward's output",
          Stage::free_grad_probs);
    }
    add(TensorId::grad_scores, chunk_scores * acc_size, Stage::alloc_grad_softmax, false, "_softmax_backward_data's output",
        Stage::free_backward);
    add(TensorId::grad_query_scaled, p.q_elems() * acc_size, Stage::alloc_grad_qk, false, "dS.bmm(K): the scaled Q's gradient",
        Stage::free_backward);
    add(TensorId::grad_key_scaled, expanded_kv * acc_size, Stage::alloc_grad_qk, false,
        "Q^T.bmm(dS), transposed: the scaled K's gradient", Stage::free_backward);
    add(TensorId::grad_query, p.q_elems() * in_size, Stage::alloc_grad_qk, true, "dQ in the input dtype; the backward's result");
    add(TensorId::grad_key, kv_in, Stage::alloc_grad_qk, true, "dK, each GQA group summed, in the input dtype");
    add(TensorId::grad_value, kv_in, Stage::alloc_grad_qk, true, "dV, each GQA group summed, in the input dtype");
    // What autograd kept for this layer goes when its backward call ends, as autograd frees a
    // node's saved tensors once the node has run.
    if (per_call) {
      for (TensorSpec& s : t) {
        const bool result = s.id == TensorId::output || s.id == TensorId::out_acc || is_input_gradient(s.id);
        if (s.lifetime == Lifetime::step && !result) s.free_stage = Stage::free_backward;
      }
    }
  }
  add_run(TensorId::cublas_workspace, kCublasWorkspaceBytes, false, "cuBLAS's workspace (PyTorch's size for Hopper and newer)");
  add_run(TensorId::value_stats, 64, false, "the harness's: value summaries and digests read back");
  if (ps.entry_touch_streams > 0) {
    add_run(TensorId::touch_sink, ps.entry_touch_streams * static_cast<int64_t>(sizeof(unsigned long long)), false,
            "the harness's: scenario 4's page-touch sums");
  }
  return t;
}

TensorId result_tensor_id(const SdpaProblem& p, const PathSettings& ps) {
  switch (result_tensor_of(ps)) {
    case ResultTensor::scores: return TensorId::scores;
    case ResultTensor::probs: return stage_runs(Stage::dropout, p, ps) ? TensorId::attn_dropped : TensorId::probs;
    case ResultTensor::output: return stage_runs(Stage::cast_output, p, ps) ? TensorId::output : TensorId::out_acc;
  }
  return TensorId::output;
}

DType result_tensor_dtype(const SdpaProblem& p, const PathSettings& ps) {
  return result_tensor_id(p, ps) == TensorId::output ? p.dtype : p.compute_dtype();
}

int64_t result_tensor_elems(const SdpaProblem& p, const PathSettings& ps) {
  return result_tensor_of(ps) == ResultTensor::output ? p.out_elems() : p.score_elems();
}

bool in_device_scores_memory(TensorId id, const SdpaProblem& p, const PathSettings& ps) {
  if (!ps.reduced_on_device || !migratable(ps.alloc)) return false;
  const bool backward = stage_runs(Stage::softmax_backward, p, ps);
  return id == TensorId::scores ||
         (backward && (id == TensorId::probs || id == TensorId::grad_probs || id == TensorId::grad_attn_dropped));
}

MemoryPlan plan_memory(const SdpaProblem& p, const PathSettings& ps, const ContextMemory& context) {
  MemoryPlan plan;
  plan.tensors = path_tensors(p, ps);
  plan.layers = ps.layers;
  plan.weights_bytes = ps.weights.bytes;
  plan.weights_cache_bytes = ps.weights.io == WeightsIo::mapped && !ps.weights.drop_pages ? ps.weights.bytes : 0;
  plan.against_free = ps.plan_against_free;
  plan.kind = ps.alloc;
  plan.timing = ps.alloc_timing;
  plan.context = context;
  const int64_t rows = chunk_rows(p, ps);
  const int chunks = static_cast<int>((p.q_len + rows - 1) / rows);
  for (const TensorSpec& s : plan.tensors) {
    const int64_t all = s.bytes * s.chunks;
    if (s.lifetime == Lifetime::run) (s.per_layer ? plan.layer_run_bytes : plan.shared_bytes) += all;
    if (s.lifetime == Lifetime::step) plan.layer_kept_bytes += all;
  }
  // One call, stage by stage, as the pipeline runs it: what is live after each stage.
  int64_t live = 0;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    for (int i = 0; i < kStageCount; ++i) {
      const Stage stage = static_cast<Stage>(i);
      const bool in_chunk_loop = i >= static_cast<int>(Stage::alloc_scores) && i <= static_cast<int>(Stage::pv_gemm);
      if (!in_chunk_loop && chunk > 0) continue;
      if (in_chunk_loop && chunks > 1 && chunk > 0 && stage == Stage::alloc_output) continue;
      for (const TensorSpec& s : plan.tensors) {
        if (s.lifetime == Lifetime::run) continue;
        // A chunked tensor kept until the step ends is allocated once per chunk; the rest once.
        if (s.alloc_stage == stage && (chunk == 0 || s.chunks > 1)) live += s.bytes;
      }
      if (live > plan.call_peak_bytes) {
        plan.call_peak_bytes = live;
        plan.call_peak_stage = stage;
      }
      for (const TensorSpec& s : plan.tensors) {
        // What a call frees where it frees it; what a layer kept, freed by its backward call.
        const bool freed_here = s.lifetime == Lifetime::call || (s.lifetime == Lifetime::step && stage != Stage::free_step);
        if (!freed_here || s.free_stage != stage) continue;
        // Scores are freed after the last chunk's softmax; a call's other tensors at its end.
        if (stage == Stage::free_scores && chunk != chunks - 1) continue;
        live -= s.bytes;
      }
    }
  }
  // Checkpointing: a layer's backward call recomputes its forward, keeping what autograd keeps, then
  // runs the backward; at its peak it holds what a call with autograd's retention holds at the end of
  // its forward and in its backward, while the other layers keep only their outputs.
  if (ps.retain == Retain::checkpoint && ps.backward) {
    PathSettings retained = ps;
    retained.retain = Retain::autograd;
    const MemoryPlan r = plan_memory(p, retained, context);
    if (r.call_peak_bytes > plan.call_peak_bytes) {
      plan.call_peak_bytes = r.call_peak_bytes;
      plan.call_peak_stage = r.call_peak_stage;
    }
  }
  plan.path_bytes = plan.shared_bytes + plan.layers * plan.layer_run_bytes + (plan.layers - 1) * plan.layer_kept_bytes +
                    plan.call_peak_bytes;
  return plan;
}

ContextMemory context_memory(const ContextSettings& context, const MemoryFacts& facts) {
  ContextMemory m;
  const BallastSpec& b = context.ballast;
  m.ballast_kind = b.kind;
  m.ballast_bytes = b.bytes;
  if (b.fraction > 0) {
    // A fraction of the pool the ballast draws on: the one pool of an integrated GPU, else the
    // GPU's memory for memory on the GPU and the host's for host memory.
    const bool host_pool = facts.integrated || b.kind == AllocKind::host || b.kind == AllocKind::system;
    const int64_t available = host_pool ? facts.host_available : facts.gpu_free;
    m.ballast_bytes = static_cast<int64_t>(b.fraction * static_cast<double>(available));
  }
  m.host_load_host_bytes = context.host_load_threads * 2 * kHostLoadBufferBytes;
  m.host_load_gpu_bytes = context.host_load_threads * kHostLoadBufferBytes;
  return m;
}

namespace {

bool in_gpu_pool(AllocKind k) { return k != AllocKind::host && k != AllocKind::system; }

}  // namespace

std::vector<PoolUse> plan_pools(const MemoryPlan& plan, const MemoryFacts& facts, double fraction) {
  const ContextMemory& c = plan.context;
  auto budget = [fraction](int64_t available) {
    return available < 0 ? int64_t{-1} : static_cast<int64_t>(fraction * static_cast<double>(available));
  };
  // A pool judged by MemAvailable: the page cache in it, and what there is without reclaiming it.
  auto with_page_cache = [&](PoolUse& u, bool reclaim_allowed) {
    u.page_cache = facts.page_cache;
    u.without_reclaim = facts.host_free;
    u.budget_without_reclaim = budget(facts.host_free);
    u.reclaim_allowed = reclaim_allowed && !plan.against_free;
  };
  std::vector<PoolUse> pools;
  if (facts.integrated) {
    PoolUse u;
    u.name = "unified memory (CPU and GPU)";
    u.measured = "MemAvailable";
    u.need = plan.total_bytes();
    u.available = facts.host_available;
    u.budget = budget(u.available);
    with_page_cache(u, false);
    pools.push_back(u);
    return pools;
  }
  PoolUse gpu, host;
  gpu.name = "GPU memory";
  gpu.measured = "cudaMemGetInfo free";
  gpu.available = facts.gpu_free;
  host.name = "host memory";
  host.measured = "MemAvailable";
  host.available = facts.host_available;
  (in_gpu_pool(plan.kind) ? gpu : host).need += plan.path_bytes;
  (in_gpu_pool(c.ballast_kind) ? gpu : host).need += c.ballast_bytes;
  host.need += c.host_load_host_bytes + plan.weights_cache_bytes;
  gpu.need += c.host_load_gpu_bytes + plan.weights_bytes;
  gpu.budget = budget(gpu.available);
  host.budget = budget(host.available);
  with_page_cache(host, true);
  pools.push_back(gpu);
  if (host.need > 0) pools.push_back(host);
  return pools;
}

std::string gigabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

void fit_layers(MemoryPlan& plan, PathSettings& settings, const SdpaProblem& p, const ContextMemory& context,
                const MemoryFacts& facts) {
  const std::string refusal = plan_refusal(plan, plan_pools(plan, facts));
  if (refusal.empty() || settings.layers <= 1) return;
  const auto fits = [&](int layers) {
    PathSettings s = settings;
    s.layers = layers;
    const MemoryPlan candidate = plan_memory(p, s, context);
    return plan_refusal(candidate, plan_pools(candidate, facts)).empty();
  };
  // Each layer adds what it keeps: the plan grows with the layers, so the largest that fits is
  // found by halving between one that fits and one that does not.
  if (!fits(1)) return;
  int fit = 1, too_many = settings.layers;
  while (too_many - fit > 1) {
    const int mid = fit + (too_many - fit) / 2;
    (fits(mid) ? fit : too_many) = mid;
  }
  const int asked = settings.layers;
  settings.layers = fit;
  plan = plan_memory(p, settings, context);
  plan.layers_asked = asked;
  plan.fitted_because = refusal;
}

std::string plan_refusal(const MemoryPlan& plan, const std::vector<PoolUse>& pools) {
  for (const PoolUse& u : pools) {
    if (u.fits()) continue;
    if (u.fits_only_by_reclaim()) {
      return "the memory plan needs " + gigabytes(u.need) + " of " + u.name + " (the path's peak " + gigabytes(plan.path_bytes) +
             (plan.weights_bytes ? ", the mapped weights " + gigabytes(plan.weights_bytes) + " and their page cache " +
                                       gigabytes(plan.weights_cache_bytes)
                                 : std::string()) +
             "): it fits MemAvailable (" + gigabytes(u.available) + ") only if the page cache (" + gigabytes(u.page_cache) +
             ") is reclaimed; without reclaiming it there is " + gigabytes(u.without_reclaim) + " (MemFree), " +
             gigabytes(u.budget_without_reclaim) + " of it allowed (90%), and " +
             (plan.against_free ? std::string("fix 6's guard plans against that")
                                : "on an integrated GPU the GPU's allocations may stall on that reclaim instead of failing") +
             " (--allow-oversubscription overrides)";
    }
    return "the memory plan needs " + gigabytes(u.need) + " of " + u.name + " (the path's peak " + gigabytes(plan.path_bytes) +
           " over " + std::to_string(plan.layers) + " layer" + (plan.layers == 1 ? "" : "s") +
           (plan.context.ballast_bytes ? ", ballast " + gigabytes(plan.context.ballast_bytes) : std::string()) +
           ") but " + gigabytes(u.available) + " is available (" + u.measured + "), " + gigabytes(u.budget) +
           " of it allowed (90%); past it unified memory can stall the GPU or the whole machine "
           "(--allow-oversubscription overrides)";
  }
  return "";
}

std::string layers_fit_text(const MemoryPlan& plan) {
  if (!plan.layers_asked) return "";
  return "--layers-fit: " + std::to_string(plan.layers) + " of the " + std::to_string(plan.layers_asked) +
         " layers asked for, the most that fit beside the rest (all of them: " + plan.fitted_because + ")";
}

std::string plan_text(const MemoryPlan& plan, const std::vector<PoolUse>& pools) {
  std::ostringstream s;
  char line[256];
  s << "# memory plan: " << plan.layers << " layer" << (plan.layers == 1 ? "" : "s") << ", " << alloc_kind_name(plan.kind)
    << " memory, allocated " << (plan.timing == AllocTiming::per_call ? "inside each call (per-call)" : "up front") << "\n";
  if (plan.layers_asked) s << "# " << layers_fit_text(plan) << "\n";
  std::snprintf(line, sizeof line, "#   %-18s %14s %6s %-8s %-7s %-20s %s\n", "tensor", "bytes", "chunks", "lifetime",
                "owner", "allocated by", "what");
  s << line;
  for (const TensorSpec& t : plan.tensors) {
    std::snprintf(line, sizeof line, "#   %-18s %14lld %6d %-8s %-7s %-20s ", t.name, static_cast<long long>(t.bytes), t.chunks,
                  lifetime_name(t.lifetime), t.lifetime == Lifetime::call ? "call" : t.per_layer ? "layer" : "shared",
                  t.lifetime == Lifetime::run ? "(before the calls)" : stage_name(t.alloc_stage));
    s << line << t.why << "\n";
  }
  s << "# per layer: inputs " << gigabytes(plan.layer_run_bytes) << ", kept until the step ends "
    << gigabytes(plan.layer_kept_bytes) << ", a call's peak " << gigabytes(plan.call_peak_bytes) << " (after "
    << stage_name(plan.call_peak_stage) << ")\n";
  s << "# the path: shared " << gigabytes(plan.shared_bytes) << " + " << plan.layers << " x inputs + " << (plan.layers - 1)
    << " x kept + the last call's peak = " << gigabytes(plan.path_bytes) << " predicted peak\n";
  const ContextMemory& c = plan.context;
  if (c.ballast_bytes || c.host_load_host_bytes || c.host_load_gpu_bytes) {
    s << "# around it: ballast " << gigabytes(c.ballast_bytes) << " (" << alloc_kind_name(c.ballast_kind) << "), host load "
      << gigabytes(c.host_load_host_bytes) << " host + " << gigabytes(c.host_load_gpu_bytes) << " GPU; total "
      << gigabytes(plan.total_bytes()) << "\n";
  }
  if (plan.weights_bytes) {
    s << "# the mapped weights: " << gigabytes(plan.weights_bytes) << " of GPU copies, and " << gigabytes(plan.weights_cache_bytes)
      << " of page cache their load leaves\n";
  }
  for (const PoolUse& u : pools) {
    s << "# " << u.name << ": needs " << gigabytes(u.need) << ", ";
    if (u.available < 0) {
      s << "available unknown (no GPU to ask)\n";
      continue;
    }
    s << "available " << gigabytes(u.available) << " (" << u.measured << "), guard " << gigabytes(u.budget) << " (90%): "
      << (!u.fits_with_reclaim() ? "does not fit" : u.fits_only_by_reclaim() ? "fits only if the page cache is reclaimed" : "fits")
      << (u.fits_only_by_reclaim() && !u.fits() ? " (refused)" : "") << "\n";
    if (u.page_cache >= 0) {
      s << "#   of which page cache " << gigabytes(u.page_cache) << " (Cached); without reclaiming it " << gigabytes(u.without_reclaim)
        << " (MemFree), guard " << gigabytes(u.budget_without_reclaim) << " (90%)"
        << (u.reclaim_allowed ? "" : ": the plan is judged by this (" + std::string(plan.against_free ? "fix 6's guard" : "an integrated GPU") + ")")
        << "\n";
    }
  }
  return s.str();
}

}  // namespace sdpa
