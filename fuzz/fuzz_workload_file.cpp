// fuzz_workload_file.cpp: the workload file (--workload-file replays a call scripts/sdpa_capture.py
// captured). Any byte string must either parse, with every call then replayed into run options or
// refused, or be rejected: with an InputError and nothing else (no crash, no other exception, no
// over-read of a shape list).
#include <cstddef>
#include <cstdint>
#include <string>

#include "math_sdpa/errors.h"
#include "repro/cli/workload_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const sdpa::WorkloadFile w = sdpa::parse_workload_file(text, "fuzz/workload.json");
    for (size_t i = 0; i < w.calls.size(); ++i) {
      try {
        sdpa::replay_call(w, static_cast<int>(i));
      } catch (const sdpa::InputError&) {
      }
    }
  } catch (const sdpa::InputError&) {
  }
  return 0;
}
