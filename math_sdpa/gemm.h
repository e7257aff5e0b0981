// gemm.h: the two batched GEMMs of the path, as at::bmm issues them to cuBLAS.
//
// Row-major / column-major: PyTorch tensors are row-major, cuBLAS is column-major. A row-major
// [rows, cols] matrix is, to cuBLAS, its column-major transpose. So row-major C = A·B is issued
// as column-major Cᵀ = Bᵀ·Aᵀ: the operands swap places and every m/n swaps with it.
//   Q·Kᵀ (scores [L, S] = Q [L, E] · Kᵀ [E, S]), K contiguous [S, E]:
//     transa = T (K, read as its stored [E, S] column-major form and transposed: the op flag,
//     not a copy, exactly as at::bmm does for key.transpose(-2, -1)), transb = N (Q),
//     m = S, n = L, k = E, lda = E, ldb = E, ldc = S, strides S·E, L·E, L·S.
//   The same Kᵀ viewed from a [B, S, H, E] buffer (scenario 3): still op T, but lda = H·E and
//   consecutive heads E elements apart; a strided-batched call can take it only when batch and
//   head strides fold (B = 1), otherwise PyTorch copies it, and so do we.
//   A contiguous Kᵀ copy [B·H, E, S] (at::matmul's copy, or fix 3): transa = N, lda = S, stride E·S.
//   P·V (out [L, E] = P [L, S] · V [S, E]):
//     transa = N (V), transb = N (P), m = E, n = L, k = S, lda = E, ldb = S, ldc = E.
// fp32 goes to cublasSgemmStridedBatched; bf16/fp16 to cublasGemmStridedBatchedEx with
// CUBLAS_COMPUTE_32F (fp32 accumulation), the calls PyTorch's bgemm makes. With --gemm-api
// batched the Q·Kᵀ GEMM goes to cublasGemmBatchedEx with arrays of per-head pointers (any
// dtype, CUBLAS_COMPUTE_32F), the call the original instrumentation names.
#pragma once

#include <cstdint>
#include <string>

#include "gemm_call.h"
#include "head_strides.h"
#include "path_settings.h"

namespace sdpa {

// How Kᵀ reaches cuBLAS as operand A of the Q·Kᵀ GEMM.
struct KtOperand {
  bool contiguous = false;  // a contiguous [B·H, E, S] copy (op N), else a view of K (op T)
  int64_t ld = 0;           // leading dimension: S for the copy, the row stride of K for a view
  int64_t stride = 0;       // elements between consecutive heads (strided calls)
};

// K as uploaded: scenario 3's [B, S, Hkv, E] buffer viewed as [B, Hkv, S, E], or contiguous.
HeadStrides k_input_strides(const SdpaProblem& p, KLayout layout);
// The K whose transpose the Q·Kᵀ GEMM reads (key_scaled): gqa_expand writes a fresh contiguous
// [B, Hq, S, E]; without it, K as uploaded (scale_k keeps its input's layout, as PyTorch's
// elementwise kernels keep the layout of a transposed view).
HeadStrides k_gemm_strides(const SdpaProblem& p, KLayout layout);
// Kᵀ as operand A: the contiguous [B·H, E, S] copy when kt_contiguous runs, else the view of the
// K laid out as `k_gemm`.
KtOperand kt_operand(const SdpaProblem& p, const HeadStrides& k_gemm, bool kt_copy);

GemmCall qk_gemm_call(int64_t batch_heads, int64_t L, int64_t S, int64_t E, DType type, const KtOperand& kt,
                      GemmApi api);
GemmCall pv_gemm_call(int64_t batch_heads, int64_t L, int64_t S, int64_t E, DType type);

// The backward's four GEMMs, bmm's derivatives, per head and row-major as PyTorch sees them
// (column-major to cuBLAS as above, so every product is issued transposed):
//   dp: dPd [L, S] = dO [L, E] · Vᵀ          transa = T (V), transb = N (dO), m = S, n = L, k = E
//   dv: dV  [S, E] = Pdᵀ [S, L] · dO [L, E]   transa = N (dO), transb = T (Pd), m = E, n = S, k = L
//   dq: dQs [L, E] = dS [L, S] · Ks [S, E]    transa = N (Ks, a view: lda its row stride) or T (the
//                                             contiguous Kᵀ copy, lda = S), transb = N (dS), m = E, n = L, k = S
//   dk: dKs [S, E] = dSᵀ [S, L] · Qs [L, E]   transa = N (Qs), transb = T (dS), m = E, n = S, k = L
// dQs and dKs are the gradients of the scaled Q and K (the K of the GEMM: expanded for GQA).
struct BackwardGemms {
  GemmCall dp, dv, dq, dk;
};
BackwardGemms backward_gemm_calls(int64_t batch_heads, int64_t L, int64_t S, int64_t E, DType type, const KtOperand& kt);

}  // namespace sdpa
