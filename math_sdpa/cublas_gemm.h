// cublas_gemm.h: issues a GemmCall to cuBLAS.
#pragma once

#include <cublas_v2.h>

#include "gemm_call.h"

namespace sdpa {

// C = alpha * op(A) * op(B) + beta * C with the parameters in `call` (see gemm.h for the
// operand order). For a pointer-array call (call.pointer_array) a, b and c are device arrays of
// call.batch pointers each. Checks the cuBLAS status.
void run_gemm(cublasHandle_t handle, const GemmCall& call, const void* a, const void* b, void* c);

}  // namespace sdpa
