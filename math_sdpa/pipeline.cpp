// pipeline.cpp: the stages of the Math SDPA path.
#include "pipeline.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "cublas_gemm.h"
#include "cuda_check.h"
#include "kernels.h"

namespace sdpa {

namespace {
// PyTorch sizes its cuBLAS workspace for Hopper and newer at 32 MiB; we pass ours explicitly
// so that the GEMM never allocates behind the allocator's back.
constexpr size_t kCublasWorkspaceBytes = 32u << 20;
}  // namespace

void* MathSdpa::alloc(DeviceBuffer& buffer, int64_t elems, DType type, const char* what) {
  buffer = DeviceBuffer(allocator_, static_cast<size_t>(elems) * dtype_size(type), what);
  return buffer.get();
}

MathSdpa::MathSdpa(const SdpaProblem& problem, Allocator& allocator, cudaStream_t stream)
    : problem_(problem), allocator_(allocator), stream_(stream) {
  problem_.validate();
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const bool upcast = ct != p.dtype;
  const int64_t expanded_kv = p.batch * p.q_heads * p.kv_len * p.head_dim;

  alloc(query_, p.q_elems(), p.dtype, "query");
  alloc(key_, p.kv_elems(), p.dtype, "key");
  alloc(value_, p.kv_elems(), p.dtype, "value");
  if (p.mask == MaskKind::boolean) {
    mask_input_ = DeviceBuffer(allocator_, static_cast<size_t>(p.mask_elems()), "bool_mask");
  }
  if (p.mask == MaskKind::additive) alloc(mask_input_, p.mask_elems(), p.dtype, "attn_mask");
  if (p.mask == MaskKind::boolean) alloc(additive_mask_, p.mask_elems(), p.dtype, "attn_mask");
  if (p.mask == MaskKind::causal) alloc(additive_mask_, p.q_len * p.kv_len, p.dtype, "causal_mask");
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
  alloc(key_scaled_, expanded_kv, ct, "key_scaled");
  alloc(scores_, p.score_elems(), ct, "scores");
  alloc(probs_, p.score_elems(), ct, "attn");
  alloc(out_acc_, p.out_elems(), ct, "out_acc");
  if (upcast) alloc(output_, p.out_elems(), p.dtype, "output");
  cublas_workspace_ = DeviceBuffer(allocator_, kCublasWorkspaceBytes, "cublas_workspace");
  value_stats_ = DeviceBuffer(allocator_, sizeof(TensorStats), "value_stats");

  CUDA_CHECK(cublasCreate(&cublas_));
  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace is set after it.
  CUDA_CHECK(cublasSetStream(cublas_, stream_));
  CUDA_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_.get(), kCublasWorkspaceBytes));
  // Default math: no TF32 for fp32 (PyTorch's allow_tf32 is False for matmul by default).
  CUDA_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));

  const int64_t bh = p.batch * p.q_heads;
  gemm_calls_.push_back(qk_gemm_call(bh, p.q_len, p.kv_len, p.head_dim, ct));
  gemm_calls_.push_back(pv_gemm_call(bh, p.q_len, p.kv_len, p.head_dim, ct));
  for (auto& g : gemm_calls_) g.stream = reinterpret_cast<uintptr_t>(stream_);
}

MathSdpa::~MathSdpa() {
  if (cublas_) cublasDestroy(cublas_);
}

size_t MathSdpa::workspace_bytes() const {
  size_t total = 0;
  for (const auto& r : allocator_.records()) total += r.bytes;
  return total;
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
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // `bytes` dies at the end of this lambda
  };
  set_current_stage("upload");
  upload_tensor(in.q, query_);
  upload_tensor(in.k, key_);
  upload_tensor(in.v, value_);
  if (p.mask == MaskKind::boolean) {
    CUDA_CHECK(cudaMemcpyAsync(mask_input_.get(), in.bool_mask.data(), in.bool_mask.size(), cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  if (p.mask == MaskKind::additive) upload_tensor(in.additive_mask, mask_input_);
  set_current_stage("setup");
}

void MathSdpa::poison_output() {
  const SdpaProblem& p = problem_;
  const float nan = std::nanf("");
  launch_fill(out_acc_.get(), p.compute_dtype(), p.out_elems(), nan, stream_);
  if (output_) launch_fill(output_.get(), p.dtype, p.out_elems(), nan, stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::vector<float> MathSdpa::download_output() {
  const SdpaProblem& p = problem_;
  const DeviceBuffer& src = output_ ? output_ : out_acc_;
  std::vector<uint8_t> bytes(src.bytes());
  CUDA_CHECK(cudaMemcpyAsync(bytes.data(), src.get(), bytes.size(), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> out(static_cast<size_t>(p.out_elems()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (p.dtype == DType::fp32) {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = p.dtype == DType::bf16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
    }
  }
  return out;
}

void MathSdpa::stage(Stage s, const std::string& detail, const std::function<void()>& body) {
  set_current_stage(stage_name(s));
  for (auto* o : observers_) o->stage_begin(s, detail);
  body();
  // As the seed's instrumentation does: wait for the stage to finish, so its _DONE line and
  // its end time mean "finished on the GPU".
  if (is_gpu_stage(s) && (instrumentation_.sync_each_stage || instrumentation_.collect_values)) {
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  const std::string summary = instrumentation_.collect_values ? value_summary(s) : std::string();
  for (auto* o : observers_) o->stage_end(s, summary);
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
  CUDA_CHECK(cudaMemcpyAsync(&host, stats, sizeof host, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  char buf[256];
  std::snprintf(buf, sizeof buf, "min=%.6g max=%.6g isnan=%s isinf=%s sum=%.6g rows=%lld", host.min, host.max,
                host.nan_count ? "true" : "false", host.inf_count ? "true" : "false", host.sum,
                static_cast<long long>(p.batch * p.q_heads * p.q_len));
  return buf;
}

void MathSdpa::run() {
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const bool upcast = ct != p.dtype;
  const int64_t group = p.q_heads / p.kv_heads;
  const int64_t expanded_kv = p.batch * p.q_heads * p.kv_len * p.head_dim;
  // Q and K are each scaled by sqrt(scale), as PyTorch does for numerical stability; a negative
  // scale puts its sign on Q.
  const double scale = p.softmax_scale();
  const float q_factor = static_cast<float>(std::copysign(std::sqrt(std::fabs(scale)), scale));
  const float k_factor = static_cast<float>(std::sqrt(std::fabs(scale)));

  stage(Stage::entry_sync, p.shape_string(), [&] { CUDA_CHECK(cudaDeviceSynchronize()); });

  const void* mask = nullptr;  // the additive mask, in dtype
  if (p.mask == MaskKind::additive) mask = mask_input_.get();
  if (p.mask == MaskKind::boolean || p.mask == MaskKind::causal) {
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
  if (upcast) {
    stage(Stage::upcast, std::string(dtype_name(p.dtype)) + "->fp32", [&] {
      launch_convert_scale(query_.get(), p.dtype, query_acc_.get(), ct, p.q_elems(), 1.0f, stream_);
      launch_convert_scale(key_.get(), p.dtype, key_acc_.get(), ct, p.kv_elems(), 1.0f, stream_);
      launch_convert_scale(value_.get(), p.dtype, value_acc_.get(), ct, p.kv_elems(), 1.0f, stream_);
    });
    q = query_acc_.get();
    k = key_acc_.get();
    v = value_acc_.get();
  }

  stage(Stage::scale_q, "factor=" + std::to_string(q_factor), [&] {
    launch_convert_scale(q, ct, query_scaled_.get(), ct, p.q_elems(), q_factor, stream_);
  });

  if (p.gqa()) {
    stage(Stage::gqa_expand, "group=" + std::to_string(group), [&] {
      launch_repeat_heads(k, key_expanded_.get(), ct, p.batch, p.kv_heads, group, p.kv_len * p.head_dim, stream_);
      launch_repeat_heads(v, value_expanded_.get(), ct, p.batch, p.kv_heads, group, p.kv_len * p.head_dim, stream_);
    });
    k = key_expanded_.get();
    v = value_expanded_.get();
  }

  stage(Stage::scale_k, "factor=" + std::to_string(k_factor) + " transposed_view=true", [&] {
    launch_convert_scale(k, ct, key_scaled_.get(), ct, expanded_kv, k_factor, stream_);
  });

  const GemmCall& qk = gemm_calls_[0];
  stage(Stage::qk_gemm, qk.describe(), [&] { run_gemm(cublas_, qk, key_scaled_.get(), query_scaled_.get(), scores_.get()); });

  if (mask) {
    stage(Stage::mask_add, mask_kind_name(p.mask), [&] {
      const bool causal = p.mask == MaskKind::causal;
      launch_add_mask(scores_.get(), ct, mask, p.dtype, p.batch, p.q_heads, p.q_len, p.kv_len,
                      !causal && p.mask_per_batch, !causal && p.mask_per_head, stream_);
    });
  }

  stage(Stage::softmax, "rows=" + std::to_string(p.batch * p.q_heads * p.q_len) + " cols=" + std::to_string(p.kv_len),
        [&] { launch_safe_softmax(scores_.get(), probs_.get(), ct, p.batch * p.q_heads * p.q_len, p.kv_len, stream_); });

  if (p.dropout_p > 0) {
    stage(Stage::dropout, "p=" + std::to_string(p.dropout_p), [&] {
      launch_dropout(probs_.get(), ct, p.score_elems(), p.seed, p.dropout_offset, p.keep_prob(), stream_);
    });
  }

  const GemmCall& pv = gemm_calls_[1];
  stage(Stage::pv_gemm, pv.describe(), [&] { run_gemm(cublas_, pv, v, probs_.get(), out_acc_.get()); });

  if (upcast) {
    stage(Stage::cast_output, std::string("fp32->") + dtype_name(p.dtype), [&] {
      launch_convert_scale(out_acc_.get(), ct, output_.get(), p.dtype, p.out_elems(), 1.0f, stream_);
    });
  }

  stage(Stage::stream_sync, "", [&] { CUDA_CHECK(cudaStreamSynchronize(stream_)); });
}

}  // namespace sdpa
