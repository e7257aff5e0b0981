// progress_reporter.h: the GPU child's side of the watchdog protocol (watchdog.h).
//
// A begin record goes out when the host issues a stage. For a GPU stage the end record goes
// out only when the GPU has finished it: an event is recorded at the stage's end, on the stream
// the stage ran on, and a polling
// thread sends the record once cudaEventQuery says it completed. So without any extra
// synchronisation the supervisor knows which GPU stage the stream is stuck in, even while the
// host thread is blocked in the final cudaStreamSynchronize. With a stage log at level `stages`
// (mark_gpu_stages), the same thread also writes to the log when the GPU starts and finishes
// each GPU stage, so the log itself shows which GPU stage never finished.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "math_sdpa/stage.h"
#include "math_sdpa/stage_log.h"

namespace sdpa {

class ProgressReporter : public StageObserver {
 public:
  explicit ProgressReporter(int fd);
  ~ProgressReporter() override;
  void stage_begin(Stage stage, const std::string& detail, void* stream) override;
  void stage_end(Stage stage, const std::string& summary, void* stream) override;
  void call_position(const CallPosition& position) override;
  void report_calls(int64_t calls_done);
  void report_device(const std::string& device_json);
  // From now on, GPU stage starts and ends are also written to this log; null stops it (before
  // the log goes away).
  void mark_gpu_stages(StageLogger* log) {
    std::lock_guard<std::mutex> lock(mutex_);
    marks_ = log;
  }

 private:
  struct Pending {
    Stage stage;
    cudaEvent_t event;
    std::string summary;
    bool begin = false;  // the GPU reached the stage's start (a log mark only, no record)
  };
  cudaEvent_t record_event(void* stream);  // under mutex_
  void send(const std::string& record);
  void drain_completed();  // sends end records of finished GPU stages, in order
  int fd_;
  std::mutex mutex_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::atomic<bool> stop_{false};
  std::thread poller_;
  int64_t last_calls_report_us_ = 0;
  StageLogger* marks_ = nullptr;  // under mutex_
};

}  // namespace sdpa
