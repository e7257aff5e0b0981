// cublas_gemm.cpp: the cuBLAS calls.
#include "cublas_gemm.h"

#include "cuda_check.h"

namespace sdpa {

namespace {
cublasOperation_t op(char t) { return t == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N; }
cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::fp16: return CUDA_R_16F;
    case DType::fp32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}
}  // namespace

void run_gemm(cublasHandle_t handle, const GemmCall& g, const void* a, const void* b, void* c) {
  if (g.pointer_array) {
    CUDA_CHECK(cublasGemmBatchedEx(handle, op(g.transa), op(g.transb), g.m, g.n, g.k, &g.alpha,
                                   static_cast<const void* const*>(a), cuda_type(g.ab_type), g.lda,
                                   static_cast<const void* const*>(b), cuda_type(g.ab_type), g.ldb, &g.beta,
                                   static_cast<void* const*>(c), cuda_type(g.c_type), g.ldc, g.batch,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  if (g.ab_type == DType::fp32) {
    CUDA_CHECK(cublasSgemmStridedBatched(handle, op(g.transa), op(g.transb), g.m, g.n, g.k, &g.alpha,
                                         static_cast<const float*>(a), g.lda, g.stride_a,
                                         static_cast<const float*>(b), g.ldb, g.stride_b, &g.beta,
                                         static_cast<float*>(c), g.ldc, g.stride_c, g.batch));
    return;
  }
  CUDA_CHECK(cublasGemmStridedBatchedEx(handle, op(g.transa), op(g.transb), g.m, g.n, g.k, &g.alpha, a,
                                        cuda_type(g.ab_type), g.lda, g.stride_a, b, cuda_type(g.ab_type),
                                        g.ldb, g.stride_b, &g.beta, c, cuda_type(g.c_type), g.ldc,
                                        g.stride_c, g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace sdpa
