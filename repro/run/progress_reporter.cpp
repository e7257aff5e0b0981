// progress_reporter.cpp
#include "repro/run/progress_reporter.h"

#include <unistd.h>

#include "math_sdpa/cuda_check.h"
#include "math_sdpa/stage_log.h"
#include "repro/supervise/watchdog.h"

namespace sdpa {

ProgressReporter::ProgressReporter(int fd) : fd_(fd) {
  poller_ = std::thread([this] {
    while (!stop_) {
      drain_completed();
      usleep(1000);
    }
  });
}

ProgressReporter::~ProgressReporter() {
  stop_ = true;
  poller_.join();
  for (auto& p : pending_) cudaEventDestroy(p.event);
  for (auto e : free_events_) cudaEventDestroy(e);
}

void ProgressReporter::send(const std::string& record) {
  // One write() per record, under PIPE_BUF, so records never interleave.
  const std::string r = record.size() < 4000 ? record : record.substr(0, 3999) + "\n";
  (void)!write(fd_, r.data(), r.size());
}

cudaEvent_t ProgressReporter::record_event(void* stream) {
  cudaEvent_t event;
  if (free_events_.empty()) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  } else {
    event = free_events_.back();
    free_events_.pop_back();
  }
  CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(stream)));
  return event;
}

void ProgressReporter::stage_begin(Stage stage, const std::string& detail, void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  send(progress_record('B', stage_name(stage), monotonic_us(), detail));
  if (marks_ && is_gpu_stage(stage)) pending_.push_back({stage, record_event(stream), "", true});
}

void ProgressReporter::stage_end(Stage stage, const std::string& summary, void* stream) {
  if (!is_gpu_stage(stage)) {
    drain_completed();  // a host stage waited for the GPU: the GPU stages before it are done
    std::lock_guard<std::mutex> lock(mutex_);
    send(progress_record('E', stage_name(stage), monotonic_us(), summary));
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back({stage, record_event(stream), summary});
}

void ProgressReporter::drain_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!pending_.empty() && cudaEventQuery(pending_.front().event) == cudaSuccess) {
    const Pending p = pending_.front();
    pending_.pop_front();
    if (!p.begin) send(progress_record('E', stage_name(p.stage), monotonic_us(), p.summary));
    if (marks_) marks_->gpu_mark(p.stage, !p.begin);
    free_events_.push_back(p.event);
  }
}

void ProgressReporter::call_position(const CallPosition& p) {
  std::lock_guard<std::mutex> lock(mutex_);
  send(progress_record('L', std::to_string(p.step) + "," + std::to_string(p.layer) + "," + std::to_string(p.layers),
                       monotonic_us(), ""));
}

void ProgressReporter::report_calls(int64_t calls_done) {
  const int64_t now = monotonic_us();
  if (now - last_calls_report_us_ < 100000) return;  // at most ten a second
  last_calls_report_us_ = now;
  std::lock_guard<std::mutex> lock(mutex_);
  send(progress_record('I', std::to_string(calls_done), now, ""));
}

void ProgressReporter::report_device(const std::string& device_json) {
  std::lock_guard<std::mutex> lock(mutex_);
  send("D\t" + device_json + "\n");
}

}  // namespace sdpa
