// cuda_check.h: the harness's one error-checking idiom for CUDA and cuBLAS.
//
// CUDA_CHECK(call) works for cudaError_t and cublasStatus_t alike (as cuda-samples'
// checkCudaErrors does) and throws CudaError, whose message names the file, line, call, error
// code and the stage of the path that was running, e.g.
//   CUDA error at math_sdpa/pipeline.cu:88 in stage softmax: code=700(cudaErrorIllegalAddress) "cudaStreamSynchronize(stream_)"
// CUDA_CHECK_LAUNCH() checks the last error right after every kernel launch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "stage.h"

namespace sdpa {

struct CudaError : std::runtime_error {
  CudaError(const std::string& message, std::string stage_name, std::string code_name)
      : std::runtime_error(message), stage(std::move(stage_name)), code(std::move(code_name)) {}
  std::string stage;  // the stage running when it failed, or "setup"
  std::string code;   // e.g. cudaErrorIllegalAddress, CUBLAS_STATUS_EXECUTION_FAILED
};

// The stage the calling thread is in; set by the pipeline around each stage.
void set_current_stage(const char* name);

void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cuda(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace sdpa

#define CUDA_CHECK(call) ::sdpa::check_cuda((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH() ::sdpa::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
