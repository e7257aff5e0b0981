// sdpa_debug_macros.h: the debug instrumentation's four logging macros, as docs/LOG_FORMAT.md
// describes them (each streams its message to std::cerr between its channel tag and the source
// location, then flushes; CUDA_EVENT_RECORD synchronises the device and prints microseconds since
// the epoch), for tests/test_log_format.cpp to write a log the instrumentation itself would have
// written. Only the device synchronisation is a stand-in: the test runs without a GPU.
#pragma once

#include <chrono>
#include <iostream>

namespace sdpa_debug_fixture {
inline int cudaDeviceSynchronize() { return 0; }  // the CPU test's stand-in
}  // namespace sdpa_debug_fixture

#define LOG_SDPA_DEBUG(msg)                                                                 \
  do {                                                                                      \
    std::cerr << "[SDPA_DEBUG] " << msg << " [" << __FILE__ << ":" << __LINE__ << "]" << std::endl; \
    std::cerr.flush();                                                                      \
  } while (0)

#define LOG_ALLOC_DEBUG(msg)                                                                \
  do {                                                                                      \
    std::cerr << "[ALLOC_DEBUG] " << msg << " [" << __FILE__ << ":" << __LINE__ << "]" << std::endl; \
    std::cerr.flush();                                                                      \
  } while (0)

#define LOG_CUDA_DEBUG(msg)                                                                 \
  do {                                                                                      \
    std::cerr << "[CUDA_DEBUG] " << msg << " [" << __FILE__ << ":" << __LINE__ << "]" << std::endl; \
    std::cerr.flush();                                                                      \
  } while (0)

#define CUDA_EVENT_RECORD(name)                                                                          \
  do {                                                                                                   \
    sdpa_debug_fixture::cudaDeviceSynchronize();                                                         \
    auto now = std::chrono::system_clock::now();                                                         \
    auto timestamp = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count(); \
    std::cerr << "[CUDA_EVENT] " << name << " @ " << timestamp << std::endl;                             \
    std::cerr.flush();                                                                                   \
  } while (0)
