// pipeline.cpp: the stages of the Math SDPA path.
#include "pipeline.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "cublas_gemm.h"
#include "cuda_check.h"
#include "errors.h"

namespace sdpa {

namespace {
// PyTorch sizes its cuBLAS workspace for Hopper and newer at 32 MiB; we pass ours explicitly
// so that the GEMM never allocates behind the allocator's back.
constexpr size_t kCublasWorkspaceBytes = 32u << 20;

const char* byte_ptr(const void* base, int64_t elems, DType type) {
  return static_cast<const char*>(base) + elems * static_cast<int64_t>(dtype_size(type));
}
}  // namespace

void* MathSdpa::alloc(DeviceBuffer& buffer, int64_t elems, DType type, const char* what) {
  buffer = DeviceBuffer(allocator_, static_cast<size_t>(elems) * dtype_size(type), what);
  return buffer.get();
}

MathSdpa::MathSdpa(const SdpaProblem& problem, const PathSettings& settings, Allocator& allocator)
    : problem_(problem), settings_(settings), allocator_(allocator) {
  problem_.validate();
  settings_.alloc = allocator_.kind();
  CUDA_CHECK(cudaGetDevice(&device_));
  require_kernel_image_for_device(device_);
  int concurrent = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device_));
  concurrent_managed_access_ = concurrent != 0;
  check_conditions_expressible();
  // The streams first: a stream-ordered allocator (fix 4) orders the workspace on the path's stream.
  create_streams();
  allocator_.order_on(stream_);
  try {
    build_workspace();
  } catch (...) {  // the destructor will not run: release what it would (the buffers go after this)
    if (cublas_) cublasDestroy(cublas_);
    allocator_.order_on(nullptr);
    destroy_streams();
    throw;
  }
}

void MathSdpa::build_workspace() {
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const bool upcast = ct != p.dtype;
  const int64_t expanded_kv = p.batch * p.q_heads * p.kv_len * p.head_dim;
  // The Kᵀ operand plan (gemm.h), shared with the generated reproducer.
  k_input_strides_ = k_input_strides(p, settings_.k_layout);
  k_gemm_strides_ = k_gemm_strides(p, settings_.k_layout);

  alloc(query_, p.q_elems(), p.dtype, "query");
  alloc(key_, p.kv_elems(), p.dtype, "key");
  alloc(value_, p.kv_elems(), p.dtype, "value");
  if (p.mask == MaskKind::boolean) {
    mask_input_ = DeviceBuffer(allocator_, static_cast<size_t>(p.mask_elems()), "bool_mask");
  }
  if (p.mask == MaskKind::additive) alloc(mask_input_, p.mask_elems(), p.dtype, "attn_mask");
  if (runs(Stage::mask_prepare) && p.mask == MaskKind::boolean) alloc(additive_mask_, p.mask_elems(), p.dtype, "attn_mask");
  if (runs(Stage::mask_prepare) && p.mask == MaskKind::causal) {
    alloc(additive_mask_, p.q_len * p.kv_len, p.dtype, "causal_mask");
  }
  if (upcast) {
    alloc(query_acc_, p.q_elems(), ct, "query_acc");
    alloc(key_acc_, p.kv_elems(), ct, "key_acc");
    alloc(value_acc_, p.kv_elems(), ct, "value_acc");
  }
  if (p.gqa()) {
    alloc(key_expanded_, expanded_kv, ct, "key_expanded");
    alloc(value_expanded_, expanded_kv, ct, "value_expanded");
  }
  alloc(query_scaled_, p.q_elems(), ct, "query_scaled");
  alloc(key_scaled_, p.gqa() ? expanded_kv : p.kv_elems(), ct, "key_scaled");
  if (runs(Stage::kt_contiguous)) alloc(key_transposed_, expanded_kv, ct, "key_transposed");
  alloc(scores_, p.score_elems(), ct, "scores");
  if (runs(Stage::softmax)) alloc(probs_, p.score_elems(), ct, "attn");
  if (runs(Stage::pv_gemm)) alloc(out_acc_, p.out_elems(), ct, "out_acc");
  if (runs(Stage::cast_output)) alloc(output_, p.out_elems(), p.dtype, "output");
  if (settings_.qk_gemm_api == GemmApi::batched) {
    qk_pointers_ = DeviceBuffer(allocator_, 3 * static_cast<size_t>(p.batch * p.q_heads) * sizeof(void*), "qk_pointer_arrays");
  }
  cublas_workspace_ = DeviceBuffer(allocator_, kCublasWorkspaceBytes, "cublas_workspace");
  value_stats_ = DeviceBuffer(allocator_, sizeof(TensorStats), "value_stats");
  if (settings_.entry_touch_streams > 0) {
    touch_sink_ = DeviceBuffer(allocator_, static_cast<size_t>(settings_.entry_touch_streams) * sizeof(unsigned long long),
                               "touch_sink");
  }

  // Every byte of the workspace is defined before the first call: scenario 4 reads every page of
  // every tensor at entry, and compute-sanitizer's initcheck must find no read of memory nothing
  // wrote. (The result tensor is still poisoned with NaN before each call.)
  for (const auto& [ptr, bytes] : all_buffers()) CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cublasCreate(&cublas_));
  bind_cublas(stream_);
  // Default math: no TF32 for fp32 (PyTorch's allow_tf32 is False for matmul by default).
  CUDA_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));

  const int64_t bh = p.batch * p.q_heads;
  const KtOperand kt = kt_operand(p, k_gemm_strides_, runs(Stage::kt_contiguous));
  gemm_calls_.push_back(qk_gemm_call(bh, p.q_len, p.kv_len, p.head_dim, ct, kt, settings_.qk_gemm_api));
  gemm_calls_.push_back(pv_gemm_call(bh, p.q_len, p.kv_len, p.head_dim, ct));
  gemm_calls_[0].stream = reinterpret_cast<uintptr_t>(qk_stream_);
  gemm_calls_[1].stream = reinterpret_cast<uintptr_t>(stream_);
  if (settings_.qk_gemm_api == GemmApi::batched) {
    if (kt.contiguous) {
      build_qk_pointer_arrays(key_transposed_.get(), contiguous_bhse(p.q_heads, p.head_dim, p.kv_len));
    } else {
      build_qk_pointer_arrays(key_scaled_.get(), k_gemm_strides_);
    }
  }
  apply_memory_advice();
}

MathSdpa::~MathSdpa() {
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (scores_toucher_.joinable()) {  // a call that ended in an error: let the thread finish
    softmax_launched_ = true;
    scores_toucher_.join();
  }
  if (cublas_) cublasDestroy(cublas_);
  // The workspace is released after this body, when the path's streams are gone.
  allocator_.order_on(nullptr);
  destroy_streams();
}

void MathSdpa::bind_cublas(cudaStream_t stream) {
  if (cublas_stream_ == stream && cublas_stream_ != nullptr) return;
  CUDA_CHECK(cublasSetStream(cublas_, stream));
  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace is set after it.
  CUDA_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_.get(), kCublasWorkspaceBytes));
  cublas_stream_ = stream;
}

// Per (b, h): A = that head's Kᵀ (a view of K, or the contiguous copy), B = its Q, C = its scores.
void MathSdpa::build_qk_pointer_arrays(const void* kt_base, const HeadStrides& kt) {
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const int64_t bh = p.batch * p.q_heads;
  std::vector<const void*> ptrs(static_cast<size_t>(3 * bh));
  for (int64_t i = 0; i < bh; ++i) {
    const int64_t b = i / p.q_heads, h = i % p.q_heads;
    ptrs[static_cast<size_t>(i)] = byte_ptr(kt_base, b * kt.batch + h * kt.head, ct);
    ptrs[static_cast<size_t>(bh + i)] = byte_ptr(query_scaled_.get(), i * p.q_len * p.head_dim, ct);
    ptrs[static_cast<size_t>(2 * bh + i)] = byte_ptr(scores_.get(), i * p.q_len * p.kv_len, ct);
  }
  CUDA_CHECK(cudaMemcpy(qk_pointers_.get(), ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyDefault));
}

void MathSdpa::upload(const HostInputs& in) {
  const SdpaProblem& p = problem_;
  auto upload_tensor = [&](const std::vector<float>& host, DeviceBuffer& dst) {
    std::vector<uint8_t> bytes(host.size() * dtype_size(p.dtype));
    for (size_t i = 0; i < host.size(); ++i) {
      if (p.dtype == DType::fp32) {
        std::memcpy(&bytes[i * 4], &host[i], 4);
      } else {
        const uint16_t h = p.dtype == DType::bf16 ? float_to_bf16_bits(host[i]) : float_to_fp16_bits(host[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
    // cudaMemcpyDefault: the destination may be device, managed, pinned or plain host memory.
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), bytes.data(), bytes.size(), cudaMemcpyDefault, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // `bytes` dies at the end of this lambda
  };
  set_current_stage("upload");
  upload_tensor(in.q, query_);
  if (settings_.k_layout == KLayout::bshe) {
    // Scenario 3: K as a [B, S, Hkv, E] buffer (what a Linear projection followed by
    // .view(B, S, H, E).transpose(1, 2) leaves behind); the logical tensor is unchanged.
    std::vector<float> bshe(in.k.size());
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.kv_heads; ++h)
        for (int64_t s = 0; s < p.kv_len; ++s)
          std::memcpy(&bshe[static_cast<size_t>(b * k_input_strides_.batch + h * k_input_strides_.head + s * k_input_strides_.row)],
                      &in.k[static_cast<size_t>(((b * p.kv_heads + h) * p.kv_len + s) * p.head_dim)],
                      static_cast<size_t>(p.head_dim) * sizeof(float));
    upload_tensor(bshe, key_);
  } else {
    upload_tensor(in.k, key_);
  }
  upload_tensor(in.v, value_);
  if (p.mask == MaskKind::boolean) {
    CUDA_CHECK(cudaMemcpyAsync(mask_input_.get(), in.bool_mask.data(), in.bool_mask.size(), cudaMemcpyDefault, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  if (p.mask == MaskKind::additive) upload_tensor(in.additive_mask, mask_input_);
  set_current_stage("setup");
}

const DeviceBuffer& MathSdpa::result_buffer() const {
  const std::string tensor = result_tensor_name(settings_);
  if (tensor == "scores") return scores_;
  if (tensor == "probs") return probs_;
  return output_ ? output_ : out_acc_;
}

DType MathSdpa::result_dtype() const {
  return &result_buffer() == &output_ ? problem_.dtype : problem_.compute_dtype();
}

int64_t MathSdpa::result_elems() const {
  return std::string(result_tensor_name(settings_)) == "output" ? problem_.out_elems() : problem_.score_elems();
}

void MathSdpa::poison_result() {
  launch_fill(result_buffer().get(), result_dtype(), result_elems(), std::nanf(""), stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::vector<float> MathSdpa::download_result() {
  const DeviceBuffer& src = result_buffer();
  const DType type = result_dtype();
  std::vector<uint8_t> bytes(static_cast<size_t>(result_elems()) * dtype_size(type));
  CUDA_CHECK(cudaMemcpyAsync(bytes.data(), src.get(), bytes.size(), cudaMemcpyDefault, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> out(static_cast<size_t>(result_elems()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (type == DType::fp32) {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = type == DType::bf16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
    }
  }
  return out;
}

uint64_t MathSdpa::result_digest() {
  auto* digest = static_cast<unsigned long long*>(value_stats_.get());
  launch_digest(result_buffer().get(), static_cast<size_t>(result_elems()) * dtype_size(result_dtype()), digest, stream_);
  unsigned long long host = 0;
  CUDA_CHECK(cudaMemcpyAsync(&host, digest, sizeof host, cudaMemcpyDefault, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host;
}

void MathSdpa::GpuHookActions::synchronize_stream(StreamHandle stream) { CUDA_CHECK(cudaStreamSynchronize(stream)); }

void MathSdpa::GpuHookActions::synchronize_device() { CUDA_CHECK(cudaDeviceSynchronize()); }

void MathSdpa::GpuHookActions::prefetch_to_device(void* data, size_t bytes, int device, StreamHandle stream) {
  cudaMemLocation gpu{};
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = device;
  CUDA_CHECK(cudaMemPrefetchAsync(data, bytes, gpu, 0, stream));
}

void MathSdpa::note(Stage s, const std::string& text) {
  for (auto* o : observers_) {
    if (!capturing_ || o->acts_in_capture()) o->stage_note(s, text);
  }
}

void MathSdpa::stage(Stage s, const std::string& detail, const std::function<void()>& body, cudaStream_t on) {
  cudaStream_t stream = on ? on : stream_;
  set_current_stage(stage_name(s));
  // While the stages are captured into a graph they do not run: the observers see the capture and
  // the replays instead, and only what must act inside the graph (an injected fault) sees them.
  auto watching = [&](StageObserver* o) { return !capturing_ || o->acts_in_capture(); };
  for (auto* o : observers_) {
    if (watching(o)) o->stage_begin(s, detail, stream);
  }
  HookContext ctx{s, stream, stream_, device_, scores_.get(), scores_.bytes(), allocator_.kind(),
                  [this, s](const std::string& text) { note(s, text); }, &hook_actions_};
  for (auto* h : hooks_) h->before_stage(ctx);
  body();
  for (auto* h : hooks_) h->after_stage(ctx);
  // As the original instrumentation does: wait for the stage to finish, so its _DONE line and
  // its end time mean "finished on the GPU".
  if (is_gpu_stage(s) && (instrumentation_.sync_each_stage || instrumentation_.collect_values ||
                          (instrumentation_.sync_at_events && s == Stage::scale_q))) {
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  const std::string summary = instrumentation_.collect_values ? value_summary(s) : std::string();
  for (auto* o : observers_) {
    if (watching(o)) o->stage_end(s, summary, stream);
  }
  set_current_stage("setup");
}

std::string MathSdpa::value_summary(Stage s) {
  const SdpaProblem& p = problem_;
  const void* data = nullptr;
  int64_t n = 0;
  if (s == Stage::qk_gemm) data = scores_.get(), n = p.score_elems();
  if (s == Stage::softmax || s == Stage::dropout) data = probs_.get(), n = p.score_elems();
  if (s == Stage::pv_gemm) data = out_acc_.get(), n = p.out_elems();
  if (!data) return {};
  auto* stats = static_cast<TensorStats*>(value_stats_.get());
  launch_tensor_stats(data, p.compute_dtype(), n, stats, stream_);
  TensorStats host{};
  CUDA_CHECK(cudaMemcpyAsync(&host, stats, sizeof host, cudaMemcpyDefault, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  char buf[256];
  std::snprintf(buf, sizeof buf, "min=%.6g max=%.6g isnan=%s isinf=%s sum=%.6g rows=%lld", host.min, host.max,
                host.nan_count ? "true" : "false", host.inf_count ? "true" : "false", host.sum,
                static_cast<long long>(p.batch * p.q_heads * p.q_len));
  return buf;
}

void MathSdpa::run() {
  stage(Stage::entry_sync, problem_.shape_string(), [&] {
    if (settings_.entry_touch_streams > 0) {
      enter_with_page_fault_storm();
    } else {
      CUDA_CHECK(cudaDeviceSynchronize());
    }
  });

  if (settings_.graph) {
    if (!graph_exec_) capture_graph();
    stage(Stage::graph_launch, "nodes=" + std::to_string(graph_nodes_), [&] { CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream_)); });
  } else {
    issue_gpu_stages();
  }

  stage(Stage::stream_sync, "", [&] {
    synchronize_all_streams();
    finish_scores_touch();
  });
}

// The first call's GPU stages are issued into a capture of the path's stream instead of run:
// the kernels, both cuBLAS GEMMs (their handle and workspace set before), the fixes' device-side
// parts (the prefetch) and an injected fault all become nodes of one graph, which every call
// then replays. Thread-local capture: the watchdog's and the reporter's threads keep working.
void MathSdpa::capture_graph() {
  stage(Stage::graph_capture, "stream=" + std::to_string(reinterpret_cast<uintptr_t>(stream_)), [&] {
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    try {
      issue_gpu_stages();
    } catch (...) {
      capturing_ = false;
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream_, &broken);  // ends the capture whatever went wrong; its error is the one thrown
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    capturing_ = false;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph_));
    CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &graph_nodes_));
  });
  stage(Stage::graph_instantiate, "nodes=" + std::to_string(graph_nodes_),
        [&] { CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0)); });
}

void MathSdpa::issue_gpu_stages() {
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const int64_t group = p.q_heads / p.kv_heads;
  // Q and K are each scaled by sqrt(scale), as PyTorch does for numerical stability; a negative
  // scale puts its sign on Q.
  const double scale = p.softmax_scale();
  const float q_factor = static_cast<float>(std::copysign(std::sqrt(std::fabs(scale)), scale));
  const float k_factor = static_cast<float>(std::sqrt(std::fabs(scale)));

  const void* mask = nullptr;  // the additive mask, in dtype
  if (p.mask == MaskKind::additive) mask = mask_input_.get();
  if (runs(Stage::mask_prepare)) {
    stage(Stage::mask_prepare, mask_kind_name(p.mask), [&] {
      const bool causal = p.mask == MaskKind::causal;
      launch_build_additive_mask(causal ? nullptr : static_cast<const uint8_t*>(mask_input_.get()),
                                 additive_mask_.get(), p.dtype, causal ? 1 : p.mask_batch() * p.mask_heads(),
                                 p.q_len, p.kv_len, stream_);
    });
    mask = additive_mask_.get();
  }

  const void* q = query_.get();
  const void* k = key_.get();
  const void* v = value_.get();
  if (runs(Stage::upcast)) {
    stage(Stage::upcast, std::string(dtype_name(p.dtype)) + "->fp32", [&] {
      // Q, K (keeping its layout) and V in one launch: three conversions, one launch's overhead.
      const ConvertJob jobs[] = {{query_.get(), query_acc_.get(), p.q_elems()},
                                 {key_.get(), key_acc_.get(), p.kv_elems()},
                                 {value_.get(), value_acc_.get(), p.kv_elems()}};
      launch_convert_scale_batch(jobs, 3, p.dtype, ct, 1.0f, stream_);
    });
    q = query_acc_.get();
    k = key_acc_.get();
    v = value_acc_.get();
  }

  stage(Stage::scale_q, "factor=" + std::to_string(q_factor), [&] {
    launch_convert_scale(q, ct, query_scaled_.get(), ct, p.q_elems(), q_factor, stream_);
  });

  if (runs(Stage::gqa_expand)) {
    stage(Stage::gqa_expand, "group=" + std::to_string(group), [&] {
      launch_repeat_heads(k, k_input_strides_, key_expanded_.get(), ct, p.batch, p.kv_heads, group, p.kv_len,
                          p.head_dim, stream_);
      if (runs(Stage::pv_gemm)) {
        launch_repeat_heads(v, contiguous_bhse(p.kv_heads, p.kv_len, p.head_dim), value_expanded_.get(), ct, p.batch,
                            p.kv_heads, group, p.kv_len, p.head_dim, stream_);
      }
    });
    k = key_expanded_.get();
    v = value_expanded_.get();
  }

  const int64_t k_elems = p.gqa() ? p.batch * p.q_heads * p.kv_len * p.head_dim : p.kv_elems();
  stage(Stage::scale_k, "factor=" + std::to_string(k_factor) + " transposed_view=true", [&] {
    launch_convert_scale(k, ct, key_scaled_.get(), ct, k_elems, k_factor, stream_);  // keeps K's layout
  });

  const void* kt = key_scaled_.get();
  if (runs(Stage::kt_contiguous)) {
    const char* reason = settings_.kt_contiguous ? "fix_3" : "reshape_copy (at::matmul cannot fold this K^T view into a batch)";
    stage(Stage::kt_contiguous, std::string("reason=") + reason, [&] {
      launch_transpose_heads(key_scaled_.get(), k_gemm_strides_, key_transposed_.get(), ct, p.batch, p.q_heads,
                             p.kv_len, p.head_dim, stream_);
    });
    kt = key_transposed_.get();
  }

  const GemmCall& qk = gemm_calls_[0];
  order_gemm_after_producers();
  stage(
      Stage::qk_gemm, qk.describe(),
      [&] {
        bind_cublas(qk_stream_);
        if (qk.pointer_array) {
          char* arrays = static_cast<char*>(qk_pointers_.get());  // A, B, C pointer arrays, back to back
          const size_t array_bytes = static_cast<size_t>(p.batch * p.q_heads) * sizeof(void*);
          run_gemm(cublas_, qk, arrays, arrays + array_bytes, arrays + 2 * array_bytes);
        } else {
          run_gemm(cublas_, qk, kt, query_scaled_.get(), scores_.get());
        }
      },
      qk_stream_);
  order_path_after_gemm();

  if (runs(Stage::mask_add) && mask) {
    stage(Stage::mask_add, mask_kind_name(p.mask), [&] {
      const bool causal = p.mask == MaskKind::causal;
      launch_add_mask(scores_.get(), ct, mask, p.dtype, p.batch, p.q_heads, p.q_len, p.kv_len,
                      !causal && p.mask_per_batch, !causal && p.mask_per_head, stream_);
    });
  }

  if (runs(Stage::scores_to_host)) {
    stage(Stage::scores_to_host, std::string("mode=") + scores_to_host_name(settings_.scores_to_host),
          [&] { move_scores_to_host(); });
  }

  if (runs(Stage::softmax)) {
    const SoftmaxVariant variant = softmax_variant_for(ct, p.kv_len);
    stage(Stage::softmax,
          "rows=" + std::to_string(p.batch * p.q_heads * p.q_len) + " cols=" + std::to_string(p.kv_len) +
              " variant=" + softmax_variant_name(variant),
          [&] {
            launch_safe_softmax(scores_.get(), probs_.get(), ct, p.batch * p.q_heads * p.q_len, p.kv_len, stream_);
            softmax_launched();
          });
    if (!scores_toucher_.joinable()) release_scores_advice();
  }

  if (runs(Stage::dropout)) {
    stage(Stage::dropout, "p=" + std::to_string(p.dropout_p), [&] {
      launch_dropout(probs_.get(), ct, p.score_elems(), p.seed, p.dropout_offset, p.keep_prob(), stream_);
    });
  }

  if (runs(Stage::pv_gemm)) {
    const GemmCall& pv = gemm_calls_[1];
    stage(Stage::pv_gemm, pv.describe(), [&] {
      bind_cublas(stream_);
      run_gemm(cublas_, pv, v, probs_.get(), out_acc_.get());
    });
  }

  if (runs(Stage::cast_output)) {
    stage(Stage::cast_output, std::string("fp32->") + dtype_name(p.dtype), [&] {
      launch_convert_scale(out_acc_.get(), ct, output_.get(), p.dtype, p.out_elems(), 1.0f, stream_);
    });
  }
}

}  // namespace sdpa
