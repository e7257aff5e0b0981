// stage_log.h: the stage log, one line per stage boundary on stderr, in the format of the
// instrumentation that found the hang and its expected pattern (docs/SCENARIOS.md):
//
//   [SDPA_ENTRY] Q shape=[2, 8, 128, 64] K=[2, 8, 128, 64] V=[2, 8, 128, 64] device=cuda:0 dtype=bfloat16 is_causal=false t_us=...
//   [CUDA_EVENT] sdpa_entry @ 1234567890
//   ...
//   [CUBLAS_GEMM_START] M=128 N=128 K=64 batch=16 fn=cublasGemmStridedBatchedEx transa=T ...
//
// so that a log from this harness and one from an instrumented PyTorch can be read side by
// side, and the last line of a hung run names the stage, as Section 3's signatures expect.
// Every line ends with t_us=<monotonic microseconds> and is flushed at once (a hang must not
// swallow the line before it). Host-only, so the formatting is tested without a GPU.
//
// Levels: off; stages (lines only: a _DONE line then means "issued by the host"); sync (the
// path synchronises the device after every stage, as the original instrumentation does, so a
// _DONE line means "finished on the GPU", at the cost of timing); values (sync, plus min, max,
// isnan, isinf and sums of the scores, probabilities and output).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "path_settings.h"
#include "problem.h"
#include "stage.h"

namespace sdpa {

enum class LogLevel { off, stages, sync, values };
const char* log_level_name(LogLevel l);
bool parse_log_level(const std::string& name, LogLevel& out);

// Microseconds on the monotonic clock (CLOCK_MONOTONIC, shared by all processes).
int64_t monotonic_us();

// The lines for one boundary, without the trailing t_us (added when written).
std::vector<std::string> stage_begin_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                           const std::string& detail, const void* stream);
std::vector<std::string> stage_end_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                         const std::string& summary, int64_t duration_us, int64_t now_us);

class StageLogger : public StageObserver {
 public:
  StageLogger(const SdpaProblem& problem, const PathSettings& settings, std::FILE* out = stderr)
      : problem_(problem), settings_(settings), out_(out) {}
  void stage_begin(Stage stage, const std::string& detail, void* stream) override;
  void stage_end(Stage stage, const std::string& summary, void* stream) override;
  void stage_note(Stage, const std::string& note) override { write(note); }
  // An [ALLOC_DEBUG] line per allocation (written once the workspace exists).
  void log_allocation(const std::string& what, size_t bytes, uintptr_t address, const char* kind);
  void write(const std::string& line);  // one line, with t_us, flushed at once

 private:
  SdpaProblem problem_;
  PathSettings settings_;
  std::FILE* out_;
  int64_t begin_us_[kStageCount] = {};
};

}  // namespace sdpa
