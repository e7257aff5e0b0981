// gemm_call.h: one cuBLAS GEMM exactly as the path issues it (gemm.h says how the path's GEMMs
// map onto cuBLAS's column-major calls; cublas_gemm.h issues one). Host-only, and inlined verbatim
// into the generated reproducer, so it includes nothing but the dtype.
#pragma once

#include <cstdint>
#include <string>

#include "dtype.h"

namespace sdpa {

// Exactly what was passed to cuBLAS (kept host-only so logs and reports can show it).
struct GemmCall {
  std::string name;      // "qk" or "pv"
  std::string function;  // cublasSgemmStridedBatched / cublasGemmStridedBatchedEx / cublasGemmBatchedEx
  bool pointer_array = false;  // cublasGemmBatchedEx: a, b, c are device arrays of per-batch pointers
  char transa = 'N', transb = 'N';
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  long long stride_a = 0, stride_b = 0, stride_c = 0;  // strided calls only
  int batch = 0;
  DType ab_type = DType::fp32, c_type = DType::fp32;
  float alpha = 1.0f, beta = 0.0f;
  uintptr_t stream = 0;
  std::string stream_name;  // printed in place of `stream` when set (the call plan's placeholder)
  // The row-major view the original log prints: M x N result, K the reduced dimension.
  int64_t rows() const { return n; }
  int64_t cols() const { return m; }
  std::string describe() const;  // one line with every parameter
};

}  // namespace sdpa
