// stage_log.cpp: the tags and texts of the stage log.
#include "stage_log.h"

#include <chrono>
#include <ctime>
#include <cctype>
#include <cstring>
#include <set>
#include <sstream>

#include "errors.h"
#include "name_table.h"

namespace sdpa {

const char* log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::off: return "off";
    case LogLevel::stages: return "stages";
    case LogLevel::sync: return "sync";
    case LogLevel::values: return "values";
  }
  return "?";
}

bool parse_log_level(const std::string& name, LogLevel& out) {
  for (LogLevel l : {LogLevel::off, LogLevel::stages, LogLevel::sync, LogLevel::values}) {
    if (name == log_level_name(l)) {
      out = l;
      return true;
    }
  }
  return false;
}

namespace {
const NameTable<LogFormat> kLogFormats{"--log-format", {{LogFormat::harness, "harness"}, {LogFormat::sdpa_debug, "sdpa-debug"}}};
}  // namespace

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

std::string with_summary(std::string line, const std::string& summary) {
  return summary.empty() ? line : line + " " + summary;
}

// The backward's stages have no lines in the original instrumentation (it watched the forward
// call); their tags are the stage's name, "[MATH_SOFTMAX_BACKWARD]" and "[MATH_SOFTMAX_BACKWARD_DONE]".
std::string backward_tag(Stage s, const char* suffix = "") {
  std::string tag = "[MATH_";
  for (const char* c = stage_name(s); *c; ++c) tag += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  return tag + suffix + "]";
}

bool is_backward_gemm(Stage s) {
  return s == Stage::dp_gemm || s == Stage::dv_gemm || s == Stage::dq_gemm || s == Stage::dk_gemm;
}

}  // namespace

// K's strides as PyTorch would print them: contiguous, or a view of a [B, S, H, E] buffer.
std::string key_strides(const SdpaProblem& p, const PathSettings& ps) {
  if (ps.k_layout == KLayout::bshe) return dims({p.kv_len * p.kv_heads * p.head_dim, p.head_dim, p.kv_heads * p.head_dim, 1});
  return contiguous_strides(p.kv_heads, p.kv_len, p.head_dim);
}

// K^T's strides: the transposed view of K (of the expanded K for GQA).
std::string key_t_strides(const SdpaProblem& p, const PathSettings& ps) {
  if (ps.k_layout == KLayout::bshe && !p.gqa()) {
    return dims({p.kv_len * p.q_heads * p.head_dim, p.head_dim, 1, p.q_heads * p.head_dim});
  }
  return dims({p.q_heads * p.kv_len * p.head_dim, p.kv_len * p.head_dim, 1, p.head_dim});
}

std::vector<std::string> stage_begin_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                           const std::string& detail, const void* stream) {
  const std::string q_shape = dims({p.batch, p.q_heads, p.q_len, p.head_dim});
  const std::string kv_shape = dims({p.batch, p.kv_heads, p.kv_len, p.head_dim});
  const std::string scores_shape = dims({p.batch, p.q_heads, p.q_len, p.kv_len});
  std::ostringstream stream_id;
  stream_id << stream;
  if (is_memory_stage(s)) return {std::string(is_free_stage(s)
                                                  ? "[MATH_FREE] "
                                                  : "[MATH_ALLOC] ") +
                                  stage_name(s) + (detail.empty() ? "" : " " + detail)};
  if (is_backward_stage(s)) {
    if (s == Stage::backward_sync) return {"[BACKWARD_SYNC] stream=" + stream_id.str() + " device=0"};
    if (is_backward_gemm(s)) return {backward_tag(s), "[CUBLAS_GEMM_START] " + detail};
    return {backward_tag(s) + (detail.empty() ? "" : " " + detail)};
  }
  switch (s) {
    case Stage::entry_sync:
      return {"[SDPA_ENTRY] Q shape=" + q_shape + " K=" + kv_shape + " V=" + kv_shape +
              " device=cuda:0 dtype=" + torch_dtype_name(p.dtype) +
              " is_causal=" + (p.mask == MaskKind::causal ? "true" : "false")};
    case Stage::graph_capture: return {"[MATH_GRAPH_CAPTURE] " + detail};
    case Stage::graph_instantiate: return {"[MATH_GRAPH_INSTANTIATE] " + detail};
    case Stage::graph_launch: return {"[MATH_GRAPH_LAUNCH] " + detail};
    case Stage::mask_prepare: return {"[MATH_MASK_PREPARE] kind=" + detail + " shape=" + dims({p.q_len, p.kv_len})};
    case Stage::upcast: return {"[MATH_UPCAST] " + detail + " Q, K, V"};
    case Stage::scale_q:
      return {"[MATH_SDPA_START] About to compute QK^T", "[MATH_SCALE_Q] " + detail};
    case Stage::gqa_expand: return {"[MATH_GQA_EXPAND] K, V " + kv_shape + " " + detail};
    case Stage::scale_k:
      return {"[MATH_KT_PREP] K^T strides=" + key_t_strides(p, ps) + " contiguous=false " + detail};
    case Stage::kt_contiguous:
      return {"[MATH_KT_CONTIGUOUS] K^T -> " + dims({p.batch * p.q_heads, p.head_dim, p.kv_len}) + " contiguous " + detail};
    case Stage::qk_gemm: return {"[CUBLAS_GEMM_START] " + detail};
    case Stage::mask_add: return {"[MATH_MASK] Applying attention mask kind=" + detail};
    case Stage::scores_to_host: return {"[MATH_SCORES_TO_HOST] " + detail + " scores shape=" + scores_shape};
    case Stage::softmax: return {"[MATH_SOFTMAX_START] Input shape=" + scores_shape + " " + detail};
    case Stage::dropout: return {"[MATH_DROPOUT_START] " + detail};
    case Stage::pv_gemm: return {"[MATH_FINAL_BMM_START]", "[CUBLAS_GEMM_START] " + detail};
    case Stage::cast_output: return {"[MATH_CAST_OUTPUT] " + detail};
    case Stage::stream_sync: return {"[STREAM_SYNC] stream=" + stream_id.str() + " device=0"};
    default: break;  // alloc_* and free_*: above
  }
  return {};
}

std::vector<std::string> stage_end_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                         const std::string& summary, int64_t duration_us, int64_t now_us) {
  const std::string q_shape = dims({p.batch, p.q_heads, p.q_len, p.head_dim});
  const std::string scores_shape = dims({p.batch, p.q_heads, p.q_len, p.kv_len});
  if (is_memory_stage(s)) {
    return {std::string(is_free_stage(s) ? "[MATH_FREE_DONE] "
                                                                                               : "[MATH_ALLOC_DONE] ") +
            stage_name(s) + " duration_us=" + std::to_string(duration_us)};
  }
  if (is_backward_stage(s)) {
    if (s == Stage::backward_sync) return {"[BACKWARD_SYNC_DONE] result=success duration_ms=" + std::to_string(duration_us / 1000)};
    if (is_backward_gemm(s)) return {"[CUBLAS_GEMM_DONE]", with_summary(backward_tag(s, "_DONE"), summary)};
    return {with_summary(backward_tag(s, "_DONE"), summary)};
  }
  switch (s) {
    case Stage::entry_sync:
      return {"[CUDA_EVENT] sdpa_entry @ " + std::to_string(now_us), "[SDPA_ENTRY] Post-sync complete",
              "[BACKEND_SELECT] Chosen backend: MATH use_flash=false use_mem_efficient=false use_math=true "
              "use_cudnn=false"};
    case Stage::graph_capture: return {"[MATH_GRAPH_CAPTURE_DONE]"};
    case Stage::graph_instantiate: return {"[MATH_GRAPH_INSTANTIATE_DONE]"};
    case Stage::graph_launch: return {"[MATH_GRAPH_LAUNCH_DONE]"};
    case Stage::mask_prepare: return {"[MATH_MASK_PREPARE_DONE]"};
    case Stage::upcast: return {"[MATH_UPCAST_DONE]"};
    case Stage::scale_q:
      return {"[CUDA_EVENT] math_qk_start @ " + std::to_string(now_us),
              "[MATH_QK] Q strides=" + contiguous_strides(p.q_heads, p.q_len, p.head_dim) +
                  " K strides=" + key_strides(p, ps) +
                  " Q contiguous=true K contiguous=" + (ps.k_layout == KLayout::bshe ? "false" : "true")};
    case Stage::gqa_expand: return {"[MATH_GQA_EXPAND_DONE]"};
    case Stage::scale_k: return {"[MATH_KT_PREP_DONE]"};
    case Stage::kt_contiguous: return {"[MATH_KT_CONTIGUOUS_DONE]"};
    case Stage::qk_gemm:
      return {"[CUBLAS_GEMM_DONE]", with_summary("[MATH_QK_DONE] scores shape=" + scores_shape, summary)};
    case Stage::mask_add: return {"[MATH_MASK_DONE]"};
    case Stage::scores_to_host: return {"[MATH_SCORES_TO_HOST_DONE] duration_ms=" + std::to_string(duration_us / 1000)};
    case Stage::softmax: return {with_summary("[MATH_SOFTMAX_DONE] Output shape=" + scores_shape, summary)};
    case Stage::dropout: return {"[MATH_DROPOUT_DONE]"};
    case Stage::pv_gemm:
      return {"[CUBLAS_GEMM_DONE]", with_summary("[MATH_FINAL_BMM_DONE] output shape=" + q_shape, summary)};
    case Stage::cast_output: return {"[MATH_CAST_OUTPUT_DONE]"};
    case Stage::stream_sync:
      return {"[STREAM_SYNC_DONE] result=success duration_ms=" + std::to_string(duration_us / 1000),
              "[CUDA_EVENT] math_sdpa_complete @ " + std::to_string(now_us)};
    default: break;  // alloc_* and free_*: above
  }
  return {};
}

// ---------------------------------------------------------------------------- the sdpa-debug format
// Each line as the instrumentation's macros print it (docs/LOG_FORMAT.md). DEBUG_LINE(...) records the
// line of this file that makes the line, as __LINE__ does there.
#define DEBUG_LINE(channel, message) DebugLine{DebugChannel::channel, message, __LINE__}

namespace {

// "M=128 N=128 K=64": the first three fields of a GEMM's description, all the instrumentation prints.
std::string gemm_mnk(const std::string& detail) {
  size_t end = 0;
  for (int field = 0; field < 3 && end != std::string::npos; ++field) end = detail.find(' ', end + (field ? 1 : 0));
  return detail.substr(0, end);
}

// The fields `keys` of a "k=v k=v" summary, in that order ("" when there is none).
std::string summary_fields(const std::string& summary, std::initializer_list<const char*> keys) {
  std::string out;
  for (const char* key : keys) {
    const std::string prefix = std::string(key) + "=";
    size_t at = summary.find(prefix);
    while (at != std::string::npos && at > 0 && summary[at - 1] != ' ') at = summary.find(prefix, at + 1);
    if (at == std::string::npos) continue;
    out += " " + summary.substr(at, summary.find(' ', at) - at);
  }
  return out;
}

// A bool as the instrumentation's macros stream it: 0 or 1 (no std::boolalpha).
const char* ostream_bool(bool b) { return b ? "1" : "0"; }

// The --log values fields `keys` as the instrumentation printed them: numbers as they are (the
// summary has them as %.6g, which is how std::ostream prints a float), true/false as 1/0.
std::string debug_values(const std::string& summary, std::initializer_list<const char*> keys) {
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

}  // namespace

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
  return std::string("[") + tag + "] " + l.message + " [math_sdpa/stage_log.cpp:" + std::to_string(l.source_line) + "]";
}

std::vector<DebugLine> debug_begin_lines(Stage s, const SdpaProblem& p, const PathSettings& ps, const std::string& detail,
                                       const void* stream) {
  const std::string kv_shape = dims({p.batch, p.kv_heads, p.kv_len, p.head_dim});
  const std::string scores_shape = dims({p.batch, p.q_heads, p.q_len, p.kv_len});
  // The instrumentation logged allocations in the allocator itself (debug_allocation_lines), not
  // as steps of the path.
  if (is_memory_stage(s)) return {};
  if (is_backward_stage(s)) {
    if (s == Stage::backward_sync) return {DEBUG_LINE(cuda, "[BACKWARD_SYNC] stream=" + pointer_text(stream) + " device=0")};
    if (is_backward_gemm(s)) return {DEBUG_LINE(sdpa, backward_tag(s)), DEBUG_LINE(sdpa, "[CUBLAS_GEMM_START] " + gemm_mnk(detail))};
    return {DEBUG_LINE(sdpa, backward_tag(s))};
  }
  switch (s) {
    case Stage::entry_sync:
      return {DEBUG_LINE(sdpa, "[SDPA_ENTRY] Q shape=" + dims({p.batch, p.q_heads, p.q_len, p.head_dim}) + " K=" + kv_shape +
                             " V=" + kv_shape + " device=cuda:0 dtype=" + type_meta_name(p.dtype) +
                             " is_causal=" + ostream_bool(p.mask == MaskKind::causal))};
    case Stage::graph_capture: return {DEBUG_LINE(sdpa, "[MATH_GRAPH_CAPTURE] " + detail)};
    case Stage::graph_instantiate: return {DEBUG_LINE(sdpa, "[MATH_GRAPH_INSTANTIATE] " + detail)};
    case Stage::graph_launch: return {DEBUG_LINE(sdpa, "[MATH_GRAPH_LAUNCH] " + detail)};
    case Stage::mask_prepare: return {DEBUG_LINE(sdpa, "[MATH_MASK_PREPARE] kind=" + detail + " shape=" + dims({p.q_len, p.kv_len}))};
    case Stage::upcast: return {DEBUG_LINE(sdpa, "[MATH_UPCAST] " + detail + " Q, K, V")};
    case Stage::scale_q:
      return {DEBUG_LINE(sdpa, "[MATH_SDPA_START] About to compute QK^T"), DEBUG_LINE(sdpa, "[MATH_SCALE_Q] " + detail)};
    case Stage::gqa_expand: return {DEBUG_LINE(sdpa, "[MATH_GQA_EXPAND] K, V " + kv_shape + " " + detail)};
    case Stage::scale_k: return {DEBUG_LINE(sdpa, "[MATH_KT_PREP] K^T strides=" + key_t_strides(p, ps) + " contiguous=false")};
    case Stage::kt_contiguous:
      return {DEBUG_LINE(sdpa, "[MATH_KT_CONTIGUOUS] K^T -> " + dims({p.batch * p.q_heads, p.head_dim, p.kv_len}) + " contiguous")};
    case Stage::qk_gemm: return {DEBUG_LINE(sdpa, "[CUBLAS_GEMM_START] " + gemm_mnk(detail))};
    case Stage::mask_add: return {DEBUG_LINE(sdpa, "[MATH_MASK] Applying attention mask")};
    case Stage::scores_to_host: return {DEBUG_LINE(sdpa, "[MATH_SCORES_TO_HOST] " + detail + " scores shape=" + scores_shape)};
    case Stage::softmax: return {DEBUG_LINE(sdpa, "[MATH_SOFTMAX_START] Input shape=" + scores_shape)};
    case Stage::dropout: return {DEBUG_LINE(sdpa, "[MATH_DROPOUT_START]")};
    case Stage::pv_gemm:
      return {DEBUG_LINE(sdpa, "[MATH_FINAL_BMM_START]"), DEBUG_LINE(sdpa, "[CUBLAS_GEMM_START] " + gemm_mnk(detail))};
    case Stage::cast_output: return {DEBUG_LINE(sdpa, "[MATH_CAST_OUTPUT] " + detail)};
    case Stage::stream_sync: return {DEBUG_LINE(cuda, "[STREAM_SYNC] stream=" + pointer_text(stream) + " device=0")};
    default: break;  // alloc_* and free_*: above
  }
  return {};
}

std::vector<DebugLine> debug_end_lines(Stage s, const SdpaProblem& p, const PathSettings& ps, const std::string& summary,
                                     int64_t duration_us, int64_t now_epoch_us) {
  const std::string scores_shape = dims({p.batch, p.q_heads, p.q_len, p.kv_len});
  const std::string at = " @ " + std::to_string(now_epoch_us);
  if (is_memory_stage(s)) return {};
  if (is_backward_stage(s)) {
    if (s == Stage::backward_sync) {
      return {DEBUG_LINE(cuda, "[BACKWARD_SYNC_DONE] result=no error duration_ms=" + std::to_string(duration_us / 1000))};
    }
    if (is_backward_gemm(s)) return {DEBUG_LINE(sdpa, "[CUBLAS_GEMM_DONE]"), DEBUG_LINE(sdpa, backward_tag(s, "_DONE"))};
    return {DEBUG_LINE(sdpa, backward_tag(s, "_DONE"))};
  }
  switch (s) {
    case Stage::entry_sync:
      return {DEBUG_LINE(event, "sdpa_entry" + at), DEBUG_LINE(sdpa, "[SDPA_ENTRY] Post-sync complete"),
              DEBUG_LINE(sdpa, "[BACKEND_SELECT] Chosen backend: MATH use_flash=0 use_mem_efficient=0 use_math=1 use_cudnn=0")};
    case Stage::graph_capture: return {DEBUG_LINE(sdpa, "[MATH_GRAPH_CAPTURE_DONE]")};
    case Stage::graph_instantiate: return {DEBUG_LINE(sdpa, "[MATH_GRAPH_INSTANTIATE_DONE]")};
    case Stage::graph_launch: return {DEBUG_LINE(sdpa, "[MATH_GRAPH_LAUNCH_DONE]")};
    case Stage::mask_prepare: return {DEBUG_LINE(sdpa, "[MATH_MASK_PREPARE_DONE]")};
    case Stage::upcast: return {DEBUG_LINE(sdpa, "[MATH_UPCAST_DONE]")};
    case Stage::scale_q:
      return {DEBUG_LINE(event, "math_qk_start" + at),
              DEBUG_LINE(sdpa, "[MATH_QK] Q strides=" + contiguous_strides(p.q_heads, p.q_len, p.head_dim) +
                             " K strides=" + key_strides(p, ps) + " Q contiguous=1 K contiguous=" +
                             ostream_bool(ps.k_layout != KLayout::bshe))};
    case Stage::gqa_expand: return {DEBUG_LINE(sdpa, "[MATH_GQA_EXPAND_DONE]")};
    case Stage::scale_k: return {DEBUG_LINE(sdpa, "[MATH_KT_PREP_DONE]")};
    case Stage::kt_contiguous: return {DEBUG_LINE(sdpa, "[MATH_KT_CONTIGUOUS_DONE]")};
    case Stage::qk_gemm:
      return {DEBUG_LINE(sdpa, "[CUBLAS_GEMM_DONE]"),
              DEBUG_LINE(sdpa, "[MATH_QK_DONE] scores shape=" + scores_shape + debug_values(summary, {"min", "max", "isnan", "isinf"}))};
    case Stage::mask_add: return {DEBUG_LINE(sdpa, "[MATH_MASK_DONE]")};
    case Stage::scores_to_host:
      return {DEBUG_LINE(sdpa, "[MATH_SCORES_TO_HOST_DONE] duration_ms=" + std::to_string(duration_us / 1000))};
    case Stage::softmax:
      return {DEBUG_LINE(sdpa, "[MATH_SOFTMAX_DONE] Output shape=" + scores_shape + debug_values(summary, {"sum"}))};
    case Stage::dropout: return {DEBUG_LINE(sdpa, "[MATH_DROPOUT_DONE]")};
    case Stage::pv_gemm:
      return {DEBUG_LINE(sdpa, "[CUBLAS_GEMM_DONE]"),
              DEBUG_LINE(sdpa, "[MATH_FINAL_BMM_DONE] output shape=" + dims({p.batch, p.q_heads, p.q_len, p.head_dim}))};
    case Stage::cast_output: return {DEBUG_LINE(sdpa, "[MATH_CAST_OUTPUT_DONE]")};
    case Stage::stream_sync:
      // cudaGetErrorString(cudaSuccess): the call returned, or this line would not be written.
      return {DEBUG_LINE(cuda, "[STREAM_SYNC_DONE] result=no error duration_ms=" + std::to_string(duration_us / 1000)),
              DEBUG_LINE(event, "math_sdpa_complete" + at)};
    default: break;  // alloc_* and free_*: above
  }
  return {};
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
