// gpu_process_cost.cu: what a GPU process's start and end cost on this machine, phase by phase,
// and what GPU processes beside it do to a process that launches and waits on small kernels (what
// the GPU tests do when CTest runs them together). Built and run by tools/device_process_cost.sh;
// not part of the harness. Built twice: linked with cuBLAS (loaded at the process's start, as repro
// loads it) and with -DNO_CUBLAS.
//
//   gpu_process_cost start [--cublas]   cuInit, the primary context, (a cuBLAS handle and one GEMM),
//                                       a small kernel: each phase's ms on one line; the process's
//                                       end is timed by the caller
//   gpu_process_cost loop N             N times: a small kernel launched and waited for; the
//                                       median and 90th percentile ms of one, and the total
//   gpu_process_cost hold S             a context with 64 MiB allocated, idle for S seconds
//   gpu_process_cost spin S             one kernel spinning for S seconds (an injected hang's like)
#ifndef NO_CUBLAS
#include <cublas_v2.h>
#endif
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    const cudaError_t e = (call);                                                          \
    if (e != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e));                     \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__global__ void touch(float* x) { x[threadIdx.x] += 1.0f; }

__global__ void spin_for(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_process_cost start [--cublas] | loop N | hold S | spin S\n");
    return 2;
  }
  const std::string mode = argv[1];
  double t = now_ms();
  auto lap = [&] {
    const double n = now_ms(), d = n - t;
    t = n;
    return d;
  };
  if (mode == "start") {
    const bool with_cublas = argc > 2 && std::strcmp(argv[2], "--cublas") == 0;
    if (cuInit(0) != CUDA_SUCCESS) return 1;
    const double init = lap();
    CHECK_CUDA(cudaFree(nullptr));  // the primary context
    const double context = lap();
    float* x = nullptr;
    CHECK_CUDA(cudaMalloc(&x, 64 * 64 * sizeof(float) * 3));
    double handle = 0, gemm = 0;
#ifndef NO_CUBLAS
    cublasHandle_t h = nullptr;
    if (with_cublas) {
      if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
      handle = lap();
      const float one = 1, zero = 0;
      if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, x, 64, x + 4096, 64, &zero, x + 8192, 64) !=
          CUBLAS_STATUS_SUCCESS)
        return 1;
      CHECK_CUDA(cudaDeviceSynchronize());
      gemm = lap();
    }
#else
    if (with_cublas) return 2;
#endif
    touch<<<1, 32>>>(x);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    const double kernel = lap();
#ifndef NO_CUBLAS
    if (h) cublasDestroy(h);
#endif
    CHECK_CUDA(cudaFree(x));
    std::printf("init %.1f context %.1f handle %.1f gemm %.1f kernel %.1f\n", init, context, handle, gemm, kernel);
    return 0;
  }
  if (mode == "loop" && argc > 2) {
    const int n = std::atoi(argv[2]);
    float* x = nullptr;
    CHECK_CUDA(cudaMalloc(&x, 1024));
    touch<<<1, 32>>>(x);
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<double> each;
    const double t0 = now_ms();
    for (int i = 0; i < n; ++i) {
      const double s = now_ms();
      touch<<<1, 32>>>(x);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaStreamSynchronize(nullptr));
      each.push_back(now_ms() - s);
    }
    const double total = now_ms() - t0;
    std::sort(each.begin(), each.end());
    std::printf("loop %d: median %.3f ms, p90 %.3f ms, max %.1f ms, total %.0f ms\n", n, each[each.size() / 2],
                each[each.size() * 9 / 10], each.back(), total);
    return 0;
  }
  if ((mode == "hold" || mode == "spin") && argc > 2) {
    const double seconds = std::atof(argv[2]);
    float* x = nullptr;
    CHECK_CUDA(cudaMalloc(&x, 64 << 20));
    if (mode == "hold") {
      while (now_ms() - t < seconds * 1000) {
        struct timespec ts{0, 50 * 1000 * 1000};
        nanosleep(&ts, nullptr);
      }
    } else {
      int clock_khz = 0;
      CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
      spin_for<<<1, 32>>>(static_cast<long long>(seconds * clock_khz * 1000.0));
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaDeviceSynchronize());
    }
    return 0;
  }
  std::fprintf(stderr, "gpu_process_cost: unknown mode %s\n", mode.c_str());
  return 2;
}
