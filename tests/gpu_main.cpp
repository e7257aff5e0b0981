// gpu_main.cpp: entry point of the GPU tests. Without a usable GPU it prints why and exits 77,
// which CTest counts as skipped (SKIP_RETURN_CODE), so CI never runs them silently or fails.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

// doctest's listings (which cases a filter selects) need no GPU: tests/check_ctest_cases.py lists
// every CTest test's cases on the machine without one.
bool only_listing(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    for (const char* list : {"-ltc", "-lts", "--list-test-cases", "--list-test-suites"}) {
      if (std::strcmp(argv[i], list) == 0) return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (!only_listing(argc, argv)) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
      std::printf("SKIPPED: the GPU tests need an NVIDIA GPU (%s)\n",
                  status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device found");
      return 77;
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
