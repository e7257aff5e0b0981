// stage_log.cpp: the tags and texts of the stage log.
#include "stage_log.h"

#include <chrono>
#include <ctime>
#include <cctype>
#include <cstring>
#include <set>
#include <stdexcept>
#include <sstream>

#include "errors.h"
#include "name_table.h"

namespace sdpa {

namespace {
const NameTable<LogLevel> kLogLevels{
    "--log", {{LogLevel::off, "off"}, {LogLevel::stages, "stages"}, {LogLevel::sync, "sync"}, {LogLevel::values, "values"}}};
const NameTable<LogFormat> kLogFormats{"--log-format", {{LogFormat::harness, "harness"}, {LogFormat::sdpa_debug, "sdpa-debug"}}};
}  // namespace

const char* log_level_name(LogLevel l) { return kLogLevels.name(l); }
bool parse_log_level(const std::string& name, LogLevel& out) {
  const auto level = kLogLevels.find(name);
  if (level) out = *level;
  return level.has_value();
}
const char* log_format_name(LogFormat f) { return kLogFormats.name(f); }
LogFormat parse_log_format(const std::string& name) { return kLogFormats.parse(name); }

int64_t epoch_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

namespace {

std::string dims(std::initializer_list<int64_t> d) {
  std::ostringstream s;
  s << "[";
  bool first = true;
  for (int64_t x : d) {
    s << (first ? "" : ", ") << x;
    first = false;
  }
  s << "]";
  return s.str();
}

// PyTorch's strides of a contiguous [B, H, N, E] tensor.
std::string contiguous_strides(int64_t H, int64_t N, int64_t E) { return dims({H * N * E, N * E, E, 1}); }

// "M=128 N=128 K=64": the first three fields of a GEMM's description, all the instrumentation prints.
std::string gemm_mnk(const std::string& detail) {
  size_t end = 0;
  for (int field = 0; field < 3 && end != std::string::npos; ++field) end = detail.find(' ', end + (field ? 1 : 0));
  return detail.substr(0, end);
}

// The fields `keys` of a "k=v k=v" summary, in that order ("" when there is none).
std::string summary_fields(const std::string& summary, const std::string& keys) {
  std::string out;
  for (size_t from = 0; from <= keys.size();) {
    const size_t comma = std::min(keys.find(',', from), keys.size());
    const std::string prefix = keys.substr(from, comma - from) + "=";
    from = comma + 1;
    size_t at = summary.find(prefix);
    while (at != std::string::npos && at > 0 && summary[at - 1] != ' ') at = summary.find(prefix, at + 1);
    if (at == std::string::npos) continue;
    out += " " + summary.substr(at, summary.find(' ', at) - at);
  }
  return out;
}

// The --log values fields `keys` as the instrumentation printed them: numbers as they are (the
// summary has them as %.6g, which is how std::ostream prints a float), true/false as 1/0.
std::string debug_values(const std::string& summary, const std::string& keys) {
  std::string out = summary_fields(summary, keys);
  for (const char* word : {"=true", "=false"}) {
    for (size_t at = out.find(word); at != std::string::npos; at = out.find(word, at)) {
      out.replace(at, std::strlen(word), word[1] == 't' ? "=1" : "=0");
    }
  }
  return out;
}

std::string pointer_text(const void* p) {
  if (!p) return "0";  // as std::ostream prints a null pointer
  std::ostringstream s;
  s << p;
  return s.str();
}

// What the placeholders of one boundary's line templates stand for (stage.h, the table's lines).
struct LineValues {
  Stage stage;
  const SdpaProblem& p;
  const PathSettings& ps;
  LogFormat format;
  std::string detail, summary;  // the stage's arguments; the values seen at its end
  const void* stream = nullptr;
  int64_t duration_us = 0, now = 0;

  // Bools as the harness writes them, or as the instrumentation's std::ostream did (0/1).
  std::string flag(bool b) const { return format == LogFormat::sdpa_debug ? (b ? "1" : "0") : (b ? "true" : "false"); }

  std::string value(const std::string& name) const {
    if (name == "name") return stage_name(stage);
    if (name == "detail") return detail;
    if (name == "+detail") return detail.empty() ? "" : " " + detail;
    if (name == "+summary") return summary.empty() ? "" : " " + summary;
    if (name.rfind("values:", 0) == 0) return debug_values(summary, name.substr(7));
    if (name == "mnk") return gemm_mnk(detail);
    if (name == "q_shape") return dims({p.batch, p.q_heads, p.q_len, p.head_dim});
    if (name == "kv_shape") return dims({p.batch, p.kv_heads, p.kv_len, p.head_dim});
    if (name == "scores_shape") return dims({p.batch, p.q_heads, p.q_len, p.kv_len});
    if (name == "mask_shape") return dims({p.q_len, p.kv_len});
    if (name == "kt_shape") return dims({p.batch * p.q_heads, p.head_dim, p.kv_len});
    if (name == "q_strides") return contiguous_strides(p.q_heads, p.q_len, p.head_dim);
    if (name == "key_strides") return key_strides(p, ps);
    if (name == "key_t_strides") return key_t_strides(p, ps);
    if (name == "dtype") return format == LogFormat::sdpa_debug ? type_meta_name(p.dtype) : torch_dtype_name(p.dtype);
    if (name == "is_causal") return flag(p.mask == MaskKind::causal);
    if (name == "true") return flag(true);
    if (name == "k_contiguous") return flag(ps.k_layout != KLayout::bshe);
    if (name == "stream") {
      if (format == LogFormat::sdpa_debug) return pointer_text(stream);
      std::ostringstream s;
      s << stream;
      return s.str();
    }
    if (name == "now") return std::to_string(now);
    if (name == "duration_ms") return std::to_string(duration_us / 1000);
    if (name == "duration_us") return std::to_string(duration_us);
    throw std::logic_error(std::string("stage table: unknown placeholder {") + name + "} in a line of " + stage_name(stage));
  }

  std::string render(const char* text) const {
    std::string out;
    for (const char* c = text; *c;) {
      const char* close = *c == '{' ? std::strchr(c, '}') : nullptr;
      if (!close) {
        out += *c++;
        continue;
      }
      out += value(std::string(c + 1, close));
      c = close + 1;
    }
    return out;
  }

  std::vector<std::string> lines(const std::vector<const char*>& templates) const {
    std::vector<std::string> out;
    for (const char* t : templates) out.push_back(render(t));
    return out;
  }
  std::vector<DebugLine> debug_lines(const std::vector<DebugLineTemplate>& templates) const {
    std::vector<DebugLine> out;
    for (const DebugLineTemplate& t : templates) out.push_back({t.channel, render(t.text), t.source_line, true});
    return out;
  }
};

}  // namespace

std::string key_strides(const SdpaProblem& p, const PathSettings& ps) {
  if (ps.k_layout == KLayout::bshe) return dims({p.kv_len * p.kv_heads * p.head_dim, p.head_dim, p.kv_heads * p.head_dim, 1});
  return contiguous_strides(p.kv_heads, p.kv_len, p.head_dim);
}

// The transposed view of K (of the expanded K for GQA).
std::string key_t_strides(const SdpaProblem& p, const PathSettings& ps) {
  if (ps.k_layout == KLayout::bshe && !p.gqa()) {
    return dims({p.kv_len * p.q_heads * p.head_dim, p.head_dim, 1, p.q_heads * p.head_dim});
  }
  return dims({p.q_heads * p.kv_len * p.head_dim, p.kv_len * p.head_dim, 1, p.head_dim});
}

std::vector<std::string> stage_begin_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                           const std::string& detail, const void* stream) {
  return LineValues{s, p, ps, LogFormat::harness, detail, "", stream}.lines(stage_row(s).begin);
}

std::vector<std::string> stage_end_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                         const std::string& summary, int64_t duration_us, int64_t now_us) {
  return LineValues{s, p, ps, LogFormat::harness, "", summary, nullptr, duration_us, now_us}.lines(stage_row(s).end);
}

// ---------------------------------------------------------------------------- the sdpa-debug format
// Each line as the instrumentation's macros print it (docs/LOG_FORMAT.md). DEBUG_LINE(...) records the
// line of this file that makes the line, as __LINE__ does there.
#define DEBUG_LINE(channel, message) DebugLine{DebugChannel::channel, message, __LINE__}

bool is_instrumentation_line(const DebugLine& l) {
  // The macros' own steps, wherever they run (the backward's GEMMs go through the same
  // gemm_batched); everything else is the harness's.
  static const std::set<std::string> tags{"SDPA_ENTRY",         "BACKEND_SELECT",     "MATH_SDPA_START",   "MATH_QK",
                                          "CUBLAS_GEMM_START",  "CUBLAS_GEMM_DONE",   "MATH_QK_DONE",      "MATH_MASK",
                                          "MATH_MASK_DONE",     "MATH_SOFTMAX_START", "MATH_SOFTMAX_DONE", "MATH_DROPOUT_START",
                                          "MATH_DROPOUT_DONE",  "MATH_FINAL_BMM_START", "MATH_FINAL_BMM_DONE", "CUDA_MALLOC",
                                          "CUDA_MALLOC_DONE"};
  static const std::set<std::string> events{"sdpa_entry", "math_qk_start", "math_sdpa_complete"};
  if (l.channel == DebugChannel::event) return events.count(l.message.substr(0, l.message.find(' '))) > 0;
  if (l.message.empty() || l.message[0] != '[') return false;
  return tags.count(l.message.substr(1, l.message.find(']') - 1)) > 0;
}

std::string debug_line_text(const DebugLine& l) {
  const char* tag = "SDPA_DEBUG";
  switch (l.channel) {
    case DebugChannel::event: return "[CUDA_EVENT] " + l.message;
    case DebugChannel::sdpa: tag = "SDPA_DEBUG"; break;
    case DebugChannel::alloc: tag = "ALLOC_DEBUG"; break;
    case DebugChannel::cuda: tag = "CUDA_DEBUG"; break;
  }
  // The harness's own lines (allocations, notes) name this file; the stages' lines the table's.
  const char* file = l.from_table ? stage_table_source() : "math_sdpa/stage_log.cpp";
  return std::string("[") + tag + "] " + l.message + " [" + file + ":" + std::to_string(l.source_line) + "]";
}

std::vector<DebugLine> debug_begin_lines(Stage s, const SdpaProblem& p, const PathSettings& ps, const std::string& detail,
                                       const void* stream) {
  return LineValues{s, p, ps, LogFormat::sdpa_debug, detail, "", stream}.debug_lines(stage_row(s).debug_begin);
}

std::vector<DebugLine> debug_end_lines(Stage s, const SdpaProblem& p, const PathSettings& ps, const std::string& summary,
                                     int64_t duration_us, int64_t now_epoch_us) {
  return LineValues{s, p, ps, LogFormat::sdpa_debug, "", summary, nullptr, duration_us, now_epoch_us}.debug_lines(
      stage_row(s).debug_end);
}

std::vector<DebugLine> debug_allocation_lines(size_t bytes, uintptr_t address, bool unified_memory) {
  // Every tensor is allocated up front, outside any stream (the pool of fix 4 included).
  return {DEBUG_LINE(alloc, "[CUDA_MALLOC] size=" + std::to_string(bytes) + " stream=0 device=0 unified_memory=" +
                          (unified_memory ? "1" : "0")),
          DEBUG_LINE(alloc, "[CUDA_MALLOC_DONE] ptr=" + pointer_text(reinterpret_cast<const void*>(address)))};
}

DebugLine debug_note_line(const std::string& note) { return DEBUG_LINE(sdpa, note); }

#undef DEBUG_LINE

// ---------------------------------------------------------------------------- the logger
void StageLogger::write_raw(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void StageLogger::write_debug(const std::vector<DebugLine>& lines) {
  for (const DebugLine& l : lines) {
    if (debug_extras_ || is_instrumentation_line(l)) write_raw(debug_line_text(l));
  }
}

void StageLogger::write(const std::string& line) {
  if (format_ == LogFormat::sdpa_debug) {
    write_debug({debug_note_line(line)});
    return;
  }
  write_raw(line + " t_us=" + std::to_string(monotonic_us()));
}

void StageLogger::stage_note(Stage, const std::string& note) { write(note); }

void StageLogger::call_position(const CallPosition& p) {
  if (p.layers <= 1 && p.step <= 1) return;
  write("[LAYER] step=" + std::to_string(p.step) + " layer=" + std::to_string(p.layer) + "/" + std::to_string(p.layers));
}

void StageLogger::memory_event(const AllocationRecord& r, bool freed) {
  if (!freed) {
    log_allocation(r.what, r.bytes, r.address, alloc_kind_name(r.kind));
    return;
  }
  // The instrumentation logged no frees; the harness's format says each.
  if (format_ == LogFormat::sdpa_debug) return;
  std::ostringstream s;
  s << "[FREE_DEBUG] tensor=" << r.what << " size=" << r.bytes << " ptr=0x" << std::hex << r.address << std::dec;
  write(s.str());
}

void StageLogger::stage_begin(Stage s, const std::string& detail, void* stream) {
  begin_us_[static_cast<int>(s)] = monotonic_us();
  if (is_memory_stage(s)) in_memory_stage_ = true;
  if (format_ == LogFormat::sdpa_debug) {
    write_debug(debug_begin_lines(s, problem_, settings_, detail, stream));
    return;
  }
  for (const auto& line : stage_begin_lines(s, problem_, settings_, detail, stream)) write(line);
}

void StageLogger::stage_end(Stage s, const std::string& summary, void*) {
  const int64_t now = monotonic_us(), duration = now - begin_us_[static_cast<int>(s)];
  if (is_memory_stage(s)) in_memory_stage_ = false;
  if (format_ == LogFormat::sdpa_debug) {
    write_debug(debug_end_lines(s, problem_, settings_, summary, duration, epoch_us()));
    return;
  }
  for (const auto& line : stage_end_lines(s, problem_, settings_, summary, duration, now)) write(line);
}

void StageLogger::gpu_mark(Stage s, bool done) {
  if (format_ == LogFormat::sdpa_debug) {
    write_debug({{DebugChannel::event,
                  std::string(stage_name(s)) + (done ? "_gpu_done" : "_gpu_start") + " @ " + std::to_string(epoch_us()), 0}});
    return;
  }
  write(std::string(done ? "[GPU_STAGE_DONE] " : "[GPU_STAGE_START] ") + stage_name(s));
}

void StageLogger::log_allocation(const std::string& what, size_t bytes, uintptr_t address, const char* kind) {
  if (format_ == LogFormat::sdpa_debug) {
    // The instrumentation printed an allocation where the caching allocator made it, inside the
    // call: one the harness made before the call (--alloc-timing upfront) is its own line.
    const std::string k = kind;
    const std::vector<DebugLine> lines = debug_allocation_lines(bytes, address, k == "managed" || k == "system");
    if (in_memory_stage_ || debug_extras_) {
      for (const DebugLine& l : lines) write_raw(debug_line_text(l));
    }
    return;
  }
  std::ostringstream s;
  s << "[ALLOC_DEBUG] tensor=" << what << " size=" << bytes << " ptr=0x" << std::hex << address << std::dec
    << " kind=" << kind;
  write(s.str());
}

}  // namespace sdpa
