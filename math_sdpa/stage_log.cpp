// stage_log.cpp: the tags and texts of the stage log.
#include "stage_log.h"

#include <ctime>
#include <sstream>

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
  switch (s) {
    case Stage::entry_sync:
      return {"[SDPA_ENTRY] Q shape=" + q_shape + " K=" + kv_shape + " V=" + kv_shape +
              " device=cuda:0 dtype=" + torch_dtype_name(p.dtype) +
              " is_causal=" + (p.mask == MaskKind::causal ? "true" : "false")};
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
    case Stage::softmax: return {"[MATH_SOFTMAX_START] Input shape=" + scores_shape};
    case Stage::dropout: return {"[MATH_DROPOUT_START] " + detail};
    case Stage::pv_gemm: return {"[MATH_FINAL_BMM_START]", "[CUBLAS_GEMM_START] " + detail};
    case Stage::cast_output: return {"[MATH_CAST_OUTPUT] " + detail};
    case Stage::stream_sync: return {"[STREAM_SYNC] stream=" + stream_id.str() + " device=0"};
  }
  return {};
}

std::vector<std::string> stage_end_lines(Stage s, const SdpaProblem& p, const PathSettings& ps,
                                         const std::string& summary, int64_t duration_us, int64_t now_us) {
  const std::string q_shape = dims({p.batch, p.q_heads, p.q_len, p.head_dim});
  const std::string scores_shape = dims({p.batch, p.q_heads, p.q_len, p.kv_len});
  switch (s) {
    case Stage::entry_sync:
      return {"[CUDA_EVENT] sdpa_entry @ " + std::to_string(now_us), "[SDPA_ENTRY] Post-sync complete",
              "[BACKEND_SELECT] Chosen backend: MATH use_flash=false use_mem_efficient=false use_math=true "
              "use_cudnn=false"};
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
  }
  return {};
}

void StageLogger::write(const std::string& line) {
  std::fprintf(out_, "%s t_us=%lld\n", line.c_str(), static_cast<long long>(monotonic_us()));
  std::fflush(out_);
}

void StageLogger::stage_begin(Stage s, const std::string& detail, void* stream) {
  begin_us_[static_cast<int>(s)] = monotonic_us();
  for (const auto& line : stage_begin_lines(s, problem_, settings_, detail, stream)) write(line);
}

void StageLogger::stage_end(Stage s, const std::string& summary, void*) {
  const int64_t now = monotonic_us();
  for (const auto& line : stage_end_lines(s, problem_, settings_, summary, now - begin_us_[static_cast<int>(s)], now)) {
    write(line);
  }
}

void StageLogger::log_allocation(const std::string& what, size_t bytes, uintptr_t address, const char* kind) {
  std::ostringstream s;
  s << "[ALLOC_DEBUG] tensor=" << what << " size=" << bytes << " ptr=0x" << std::hex << address << std::dec
    << " kind=" << kind;
  write(s.str());
}

}  // namespace sdpa
