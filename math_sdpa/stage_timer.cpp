// stage_timer.cpp
#include "stage_timer.h"

#include "cuda_check.h"

namespace sdpa {

StageTimer::StageTimer() {
  for (int i = 0; i < kStageCount; ++i) {
    CUDA_CHECK(cudaEventCreate(&begin_[i]));
    CUDA_CHECK(cudaEventCreate(&end_[i]));
  }
}

StageTimer::StageTimer(Stage first, Stage last) : StageTimer() {
  span_only_ = true;
  span_first_ = first;
  span_last_ = last;
}

StageTimer::~StageTimer() {
  for (int i = 0; i < kStageCount; ++i) {
    cudaEventDestroy(begin_[i]);
    cudaEventDestroy(end_[i]);
  }
}

void StageTimer::stage_begin(Stage s, const std::string&, void* stream) {
  const int i = static_cast<int>(s);
  if (span_only_) {
    if (s == span_first_) {
      first_gpu_stage_ = i;
      CUDA_CHECK(cudaEventRecord(begin_[i], static_cast<cudaStream_t>(stream)));
    }
    return;
  }
  ran_[i] = true;
  if (host_timed(s)) {
    host_begin_[i] = std::chrono::steady_clock::now();
    return;
  }
  if (first_gpu_stage_ < 0) first_gpu_stage_ = i;
  last_gpu_stage_ = i;
  CUDA_CHECK(cudaEventRecord(begin_[i], static_cast<cudaStream_t>(stream)));
}

void StageTimer::stage_end(Stage s, const std::string&, void* stream) {
  const int i = static_cast<int>(s);
  if (span_only_) {
    if (s == span_last_ && first_gpu_stage_ >= 0) {
      last_gpu_stage_ = i;
      CUDA_CHECK(cudaEventRecord(end_[i], static_cast<cudaStream_t>(stream)));
    }
    return;
  }
  if (host_timed(s)) {
    host_ms_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_begin_[i]).count();
    return;
  }
  CUDA_CHECK(cudaEventRecord(end_[i], static_cast<cudaStream_t>(stream)));
}

void StageTimer::collect_call() {
  for (int i = 0; i < kStageCount; ++i) {
    if (!ran_[i]) continue;
    if (host_timed(static_cast<Stage>(i))) {
      samples_[i].push_back(host_ms_[i]);
    } else {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, begin_[i], end_[i]));
      samples_[i].push_back(ms);
    }
  }
  if (first_gpu_stage_ >= 0 && last_gpu_stage_ >= 0) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, begin_[first_gpu_stage_], end_[last_gpu_stage_]));
    call_ms_.push_back(ms);
  }
  ran_.fill(false);
  first_gpu_stage_ = last_gpu_stage_ = -1;
}

}  // namespace sdpa
