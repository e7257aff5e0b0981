// cpu_blas.cpp: OpenBLAS opened at the first product (cpu_blas.h, cmake/openblas.cmake).
//
// cblas.h gives the types of the functions called (a definition here that differs from the
// header's does not compile); dlopen and dlsym give the functions themselves, from the library
// by the SONAME the build found (SDPA_OPENBLAS_SONAME).
#include "math_sdpa/cpu_blas.h"

#include <cblas.h>
#include <dlfcn.h>

#include <climits>
#include <mutex>
#include <stdexcept>

#include "math_sdpa/errors.h"

namespace sdpa {

namespace {

// OpenBLAS's own functions (openblas_config.h and cblas.h of every OpenBLAS since 0.2): its
// thread count, its description, and its threading (0 serial, 1 pthreads, 2 OpenMP).
using SetNumThreads = void (*)(int);
using GetConfig = char* (*)();
using GetParallel = int (*)();

struct OpenBlas {
  decltype(&cblas_dgemm) dgemm = nullptr;
  std::string description;
  bool serial = false;
  std::string error;  // why it could not be opened, "" when it was
};

const OpenBlas& openblas() {
  static const OpenBlas lib = [] {
    OpenBlas l;
    void* const handle = dlopen(SDPA_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    const auto set_num_threads = handle ? reinterpret_cast<SetNumThreads>(dlsym(handle, "openblas_set_num_threads")) : nullptr;
    const auto get_config = handle ? reinterpret_cast<GetConfig>(dlsym(handle, "openblas_get_config")) : nullptr;
    const auto get_parallel = handle ? reinterpret_cast<GetParallel>(dlsym(handle, "openblas_get_parallel")) : nullptr;
    l.dgemm = handle ? reinterpret_cast<decltype(&cblas_dgemm)>(dlsym(handle, "cblas_dgemm")) : nullptr;
    if (!l.dgemm || !set_num_threads || !get_config || !get_parallel) {
      const char* why = handle ? nullptr : dlerror();
      l.error = std::string("the float64 reference's OpenBLAS could not be opened (") +
                (why ? why : SDPA_OPENBLAS_SONAME " lacks cblas_dgemm or openblas_set_num_threads") +
                "): install the package libopenblas0 (Debian, Ubuntu), or run without --check";
      l.dgemm = nullptr;
      return l;
    }
    // Set once, before any product: every call runs on its caller's thread (cpu_blas.h). A threaded
    // OpenBLAS then leaves the threads it started as it loaded asleep for good.
    set_num_threads(1);
    const int parallel = get_parallel();
    // The serial build is safe to call from several threads only when it was built with
    // USE_LOCKING, which it does not say: its calls take turns (cpu_dgemm).
    l.serial = parallel == 0;
    l.description = std::string(get_config()) + " (" + (parallel == 2 ? "OpenMP" : parallel == 1 ? "pthreads" : "serial") +
                    ", " SDPA_OPENBLAS_SONAME ")";
    return l;
  }();
  if (!lib.dgemm) throw InputError(lib.error);
  return lib;
}

int blas_int(int64_t x) {
  if (x < 0 || x > INT_MAX) throw std::length_error("a matrix size of the float64 reference exceeds CBLAS's int");
  return static_cast<int>(x);
}

CBLAS_TRANSPOSE cblas_op(BlasOp op) { return op == BlasOp::transpose ? CblasTrans : CblasNoTrans; }

}  // namespace

void cpu_dgemm(BlasOp op_a, BlasOp op_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
               const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  const OpenBlas& lib = openblas();
  auto call = [&] {
    lib.dgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), blas_int(m), blas_int(n), blas_int(k), alpha, a, blas_int(lda),
              b, blas_int(ldb), beta, c, blas_int(ldc));
  };
  if (!lib.serial) return call();
  static std::mutex turns;
  std::lock_guard<std::mutex> lock(turns);
  call();
}

std::string cpu_blas_description() { return openblas().description; }

}  // namespace sdpa
