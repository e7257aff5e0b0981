// gemm.cpp: building the GEMM descriptions (host-only; the cuBLAS call is in cublas_gemm.cpp).
#include "gemm.h"

#include <sstream>

namespace sdpa {

namespace {
GemmCall strided_call(const char* name, DType type) {
  GemmCall g;
  g.name = name;
  g.function = type == DType::fp32 ? "cublasSgemmStridedBatched" : "cublasGemmStridedBatchedEx";
  g.ab_type = g.c_type = type;
  return g;
}
}  // namespace

HeadStrides k_input_strides(const SdpaProblem& p, KLayout layout) {
  if (layout == KLayout::bshe) return {p.kv_len * p.kv_heads * p.head_dim, p.head_dim, p.kv_heads * p.head_dim};
  return contiguous_bhse(p.kv_heads, p.kv_len, p.head_dim);
}

HeadStrides k_gemm_strides(const SdpaProblem& p, KLayout layout) {
  return p.gqa() ? contiguous_bhse(p.q_heads, p.kv_len, p.head_dim) : k_input_strides(p, layout);
}

KtOperand kt_operand(const SdpaProblem& p, const HeadStrides& k_gemm, bool kt_copy) {
  if (kt_copy) return {true, p.kv_len, p.kv_len * p.head_dim};
  return {false, k_gemm.row, k_gemm.head};
}

GemmCall qk_gemm_call(int64_t batch_heads, int64_t L, int64_t S, int64_t E, DType type, const KtOperand& kt,
                      GemmApi api) {
  GemmCall g = strided_call("qk", type);
  if (api == GemmApi::batched) {
    g.function = "cublasGemmBatchedEx";
    g.pointer_array = true;
  }
  g.transa = kt.contiguous ? 'N' : 'T';
  g.transb = 'N';
  g.m = static_cast<int>(S);
  g.n = static_cast<int>(L);
  g.k = static_cast<int>(E);
  g.lda = static_cast<int>(kt.ld);
  g.ldb = static_cast<int>(E);
  g.ldc = static_cast<int>(S);
  g.stride_a = kt.stride;
  g.stride_b = L * E;
  g.stride_c = L * S;
  g.batch = static_cast<int>(batch_heads);
  return g;
}

GemmCall pv_gemm_call(int64_t batch_heads, int64_t L, int64_t S, int64_t E, DType type) {
  GemmCall g = strided_call("pv", type);
  g.m = static_cast<int>(E);
  g.n = static_cast<int>(L);
  g.k = static_cast<int>(S);
  g.lda = static_cast<int>(E);
  g.ldb = static_cast<int>(S);
  g.ldc = static_cast<int>(E);
  g.stride_a = S * E;
  g.stride_b = L * S;
  g.stride_c = L * E;
  g.batch = static_cast<int>(batch_heads);
  return g;
}

BackwardGemms backward_gemm_calls(int64_t batch_heads, int64_t L, int64_t S, int64_t E, DType type, const KtOperand& kt) {
  auto call = [&](const char* name, char transa, char transb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                  int64_t ldc, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
    GemmCall g = strided_call(name, type);
    g.transa = transa;
    g.transb = transb;
    g.m = static_cast<int>(m);
    g.n = static_cast<int>(n);
    g.k = static_cast<int>(k);
    g.lda = static_cast<int>(lda);
    g.ldb = static_cast<int>(ldb);
    g.ldc = static_cast<int>(ldc);
    g.stride_a = stride_a;
    g.stride_b = stride_b;
    g.stride_c = stride_c;
    g.batch = static_cast<int>(batch_heads);
    return g;
  };
  BackwardGemms b;
  b.dp = call("dp", 'T', 'N', S, L, E, E, E, S, S * E, L * E, L * S);
  b.dv = call("dv", 'N', 'T', E, S, L, E, S, E, L * E, L * S, S * E);
  b.dq = kt.contiguous ? call("dq", 'T', 'N', E, L, S, S, S, E, kt.stride, L * S, L * E)
                       : call("dq", 'N', 'N', E, L, S, kt.ld, S, E, kt.stride, L * S, L * E);
  b.dk = call("dk", 'N', 'T', E, S, L, E, S, E, L * E, L * S, S * E);
  return b;
}

std::string GemmCall::describe() const {
  std::ostringstream s;
  s << "M=" << rows() << " N=" << cols() << " K=" << k << " batch=" << batch << " fn=" << function
    << " transa=" << transa << " transb=" << transb << " m=" << m << " n=" << n << " k=" << k
    << " lda=" << lda << " ldb=" << ldb << " ldc=" << ldc;
  if (pointer_array) {
    s << " pointer_arrays=true headA=" << stride_a << " headB=" << stride_b << " headC=" << stride_c;
  } else {
    s << " strideA=" << stride_a << " strideB=" << stride_b << " strideC=" << stride_c;
  }
  s << " type=" << dtype_name(ab_type) << " compute=fp32 stream=";
  if (stream_name.empty()) {
    s << "0x" << std::hex << stream;
  } else {
    s << stream_name;
  }
  return s.str();
}

}  // namespace sdpa
