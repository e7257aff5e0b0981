// cpu_blas.h: the CPU's BLAS (OpenBLAS, through its CBLAS interface) for the float64 reference's
// matrix products, opened at the first product rather than when a program starts
// (cmake/openblas.cmake says why).
//
// One threading model: OpenBLAS is told once, as it is opened, to run every call on the calling
// thread alone (openblas_set_num_threads(1)), and the reference calls it from its own threads,
// one block of rows each (reference.cpp). So no BLAS thread pool ever spins for work beside the
// reference's threads or the harness's, and a product never starts threads of its own.
#pragma once

#include <cstdint>
#include <string>

namespace sdpa {

enum class BlasOp { none, transpose };

// C = alpha · op(A) · op(B) + beta · C, row-major doubles: op(A) is m × k, op(B) is k × n, C is
// m × n; lda, ldb and ldc are the rows' strides as stored. On the calling thread. Throws
// InputError (one line naming the library and the package) when OpenBLAS cannot be opened, and
// std::length_error when a size exceeds CBLAS's int.
void cpu_dgemm(BlasOp op_a, BlasOp op_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
               const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// What runs the products, for a result's record of the check: OpenBLAS's own description (its
// version, build options and the CPU kernel it chose: "OpenBLAS 0.3.26 DYNAMIC_ARCH NO_AFFINITY
// SapphireRapids MAX_THREADS=64") and its threading ("pthreads", "OpenMP" or "serial"), opening
// the library if it is not yet. Throws InputError as cpu_dgemm does.
std::string cpu_blas_description();

}  // namespace sdpa
