// stage_log.h: the stage log, one line per stage boundary on stderr, in one of two formats.
//
// harness (the default): the tags of the instrumentation that found the hang and of its
// expected pattern (docs/SCENARIOS.md), with every parameter the harness knows, each line ending
// in t_us=<monotonic microseconds>:
//
//   [SDPA_ENTRY] Q shape=[2, 8, 128, 64] K=[2, 8, 128, 64] V=[2, 8, 128, 64] device=cuda:0 dtype=bfloat16 is_causal=false t_us=...
//   [CUBLAS_GEMM_START] M=128 N=128 K=64 batch=16 fn=cublasGemmStridedBatchedEx transa=T ... t_us=...
//
// sdpa-debug (--log-format sdpa-debug): that instrumentation's own lines, value for value (bools
// as 0/1, the dtype as c10 prints it) and only its tags unless the logger is given debug_extras
// (docs/LOG_FORMAT.md), so that a log from an instrumented PyTorch (or scripts/torch_stages.py)
// and one from the harness diff line by line and its grep finds every line:
//
//   [SDPA_DEBUG] [SDPA_ENTRY] Q shape=[2, 8, 128, 64] ... dtype=c10::BFloat16 is_causal=0 [math_sdpa/stage_log.cpp:NNN]
//   [CUDA_EVENT] sdpa_entry @ <microseconds since the epoch>
//   [ALLOC_DEBUG] [CUDA_MALLOC] size=262144 stream=0 device=0 unified_memory=1 [math_sdpa/stage_log.cpp:NNN]
//   [CUDA_DEBUG] [STREAM_SYNC_DONE] result=no error duration_ms=0 [math_sdpa/stage_log.cpp:NNN]
//
// The [file:line] is the line of this harness that wrote it, as __FILE__:__LINE__ is in the
// instrumentation. Either way the last line of a hung run names the stage, as the scenarios'
// signatures expect, and every line is flushed at once (a hang must not swallow the line
// before it). Host-only, so the formatting is tested without a GPU.
//
// Levels: off; stages (lines only: a _DONE line means "issued by the host"; where the watchdog's
// reporter runs, it also marks when the GPU starts and finishes each GPU stage, so the last GPU
// stage marked started is the one the GPU is in); sync (the path synchronises the device after
// every stage, as the original instrumentation does, so a _DONE line means "finished on the
// GPU", at the cost of timing); values (sync, plus min, max, isnan, isinf and sums of the scores,
// probabilities and output).
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "allocator.h"
#include "path_settings.h"
#include "problem.h"
#include "stage.h"

namespace sdpa {

enum class LogLevel { off, stages, sync, values };
const char* log_level_name(LogLevel l);
bool parse_log_level(const std::string& name, LogLevel& out);

enum class LogFormat { harness, sdpa_debug };
const char* log_format_name(LogFormat f);
LogFormat parse_log_format(const std::string& name);  // throws InputError naming both

// Microseconds on the monotonic clock (CLOCK_MONOTONIC, shared by all processes).
int64_t monotonic_us();
// Microseconds since the Unix epoch (the instrumentation's CUDA_EVENT timestamps).
int64_t epoch_us();

// The lines for one boundary in the harness format, without the trailing t_us (added when written).
std::vector<std::string> stage_begin_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                           const std::string& detail, const void* stream);
std::vector<std::string> stage_end_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                         const std::string& summary, int64_t duration_us, int64_t now_us);

// A line of the sdpa-debug format: its channel (the instrumentation's macro), its message, and the line
// that made it: of the stage table for a stage's lines, of stage_log.cpp for the others.
struct DebugLine {
  DebugChannel channel;  // stage.h
  std::string message;  // for event: "<name> @ <epoch us>"
  int source_line;
  bool from_table = false;  // a stage's line from the stage table (its source line is the table's)
};
std::string debug_line_text(const DebugLine& l);  // the whole line, without its newline
std::vector<DebugLine> debug_begin_lines(Stage s, const SdpaProblem& p, const PathSettings& ps, const std::string& detail,
                                       const void* stream);
std::vector<DebugLine> debug_end_lines(Stage s, const SdpaProblem& p, const PathSettings& ps, const std::string& summary,
                                     int64_t duration_us, int64_t now_epoch_us);
// K's strides as PyTorch prints them (contiguous, or a view of a [B, S, H, E] buffer), and K^T's.
std::string key_strides(const SdpaProblem& p, const PathSettings& ps);
std::string key_t_strides(const SdpaProblem& p, const PathSettings& ps);
std::vector<DebugLine> debug_allocation_lines(size_t bytes, uintptr_t address, bool unified_memory);
DebugLine debug_note_line(const std::string& note);
// Whether a line is one the instrumentation's macros printed (its tags and its three events)
// rather than one of the harness's own (its extra stages, notes, layer and GPU marks).
bool is_instrumentation_line(const DebugLine& l);

class StageLogger : public StageObserver {
 public:
  // debug_extras: in the sdpa-debug format, also the harness's own lines (--log-extras); without
  // it that format holds only what the instrumentation printed.
  StageLogger(const SdpaProblem& problem, const PathSettings& settings, LogFormat format = LogFormat::harness,
              std::FILE* out = stderr, bool debug_extras = false)
      : problem_(problem), settings_(settings), format_(format), out_(out), debug_extras_(debug_extras) {}
  void stage_begin(Stage stage, const std::string& detail, void* stream) override;
  void stage_end(Stage stage, const std::string& summary, void* stream) override;
  void stage_note(Stage, const std::string& note) override;
  // With several layers or steps, a [LAYER] line before each call: every line after it, to the
  // next, is that layer's.
  void call_position(const CallPosition& position) override;
  // A tensor allocated or freed inside a call (--alloc-timing per-call).
  void memory_event(const AllocationRecord& record, bool freed) override;
  // An allocation line (two in the sdpa-debug format), written once the workspace exists.
  void log_allocation(const std::string& what, size_t bytes, uintptr_t address, const char* kind);
  // The GPU reached the start (done = false) or the end of a GPU stage (the watchdog's reporter
  // sees it through events); called from the reporter's thread.
  void gpu_mark(Stage stage, bool done);
  void write(const std::string& line);  // one line of the harness format, with t_us, flushed at once

 private:
  void write_raw(const std::string& line);
  void write_debug(const std::vector<DebugLine>& lines);  // the instrumentation's, and the rest with extras
  SdpaProblem problem_;
  PathSettings settings_;
  LogFormat format_;
  std::FILE* out_;
  bool debug_extras_ = false;
  bool in_memory_stage_ = false;  // between an alloc_*/free_* stage's begin and end: inside the call
  std::mutex mutex_;  // the reporter's thread writes GPU marks
  int64_t begin_us_[kStageCount] = {};
};

}  // namespace sdpa
