// test_log_format.cpp: the stage log's sdpa-debug format (docs/LOG_FORMAT.md): the shape of every
// line, the documented tag sequence of a call, values only where the instrumentation printed
// them, and the GPU stage marks of both formats. On the CPU: the logger is driven through the
// stages a call runs, as the path drives it.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>

#include "log_tags.h"
#include "sdpa_debug_macros.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/stage_log.h"

using namespace sdpa;

namespace {

// The log of one call of `p` under `ps`, as the path would drive the logger (with `summary` at
// the end of every stage, as --log values gives it).
std::string one_call(LogFormat format, const SdpaProblem& p, const PathSettings& ps, const std::string& summary = "",
                     bool extras = false) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* mem = open_memstream(&buffer, &size);
  {
    StageLogger logger(p, ps, format, mem, extras);
    logger.log_allocation("query", 262144, 0x7f2870000000, "managed");
    void* const stream = reinterpret_cast<void*>(uintptr_t{0x1234});
    for (int i = 0; i < kStageCount; ++i) {
      const Stage s = static_cast<Stage>(i);
      if (!stage_runs(s, p, ps)) continue;
      const bool gemm = s == Stage::qk_gemm || s == Stage::pv_gemm;
      logger.stage_begin(s, gemm ? "M=128 N=128 K=64 batch=16 fn=cublasSgemmStridedBatched" : "", stream);
      logger.stage_end(s, summary, stream);
    }
    logger.gpu_mark(Stage::softmax, false);
    logger.gpu_mark(Stage::softmax, true);
  }
  std::fclose(mem);
  std::string log(buffer, size);
  std::free(buffer);
  return log;
}

// One call as the instrumented PyTorch logs it, written by the macros themselves: the values a
// tensor's methods return, streamed as their types stream (IntArrayRef as "[2, 8, 128, 64]",
// bool as 0/1, a float as std::ostream prints it, TypeMeta as its type's name). The call: B=2,
// H=8, L=S=128, E=64, bf16, causal, dropout 0.1; at::bmm allocating the scores in the caching
// allocator before its GEMM.
struct IntArray {
  std::vector<int64_t> v;
};
std::ostream& operator<<(std::ostream& out, const IntArray& a) {
  out << "[";
  for (size_t i = 0; i < a.v.size(); ++i) out << (i ? ", " : "") << a.v[i];
  return out << "]";
}

std::string instrumented_call_log() {
  const IntArray q{{2, 8, 128, 64}}, scores{{2, 8, 128, 128}}, strides{{65536, 8192, 64, 1}};
  const char* const dtype = "c10::BFloat16";  // caffe2::TypeMeta's name of at::kBFloat16
  const bool is_causal = true;
  const float min = -4.8488f, max = 4.62291f, sum = 2048.0f;
  void* const stream = nullptr;  // the legacy default stream
  void* const scores_ptr = reinterpret_cast<void*>(uintptr_t{0x7f2870000000});
  std::ostringstream captured;
  std::streambuf* const saved = std::cerr.rdbuf(captured.rdbuf());
  LOG_SDPA_DEBUG("[SDPA_ENTRY] Q shape=" << q << " K=" << q << " V=" << q << " device=" << "cuda:0" << " dtype=" << dtype
                                         << " is_causal=" << is_causal);
  CUDA_EVENT_RECORD("sdpa_entry");
  LOG_SDPA_DEBUG("[SDPA_ENTRY] Post-sync complete");
  LOG_SDPA_DEBUG("[BACKEND_SELECT] Chosen backend: " << "MATH" << " use_flash=" << false << " use_mem_efficient=" << false
                                                     << " use_math=" << true << " use_cudnn=" << false);
  LOG_SDPA_DEBUG("[MATH_SDPA_START] About to compute QK^T");
  CUDA_EVENT_RECORD("math_qk_start");
  LOG_SDPA_DEBUG("[MATH_QK] Q strides=" << strides << " K strides=" << strides << " Q contiguous=" << true
                                        << " K contiguous=" << true);
  LOG_ALLOC_DEBUG("[CUDA_MALLOC] size=" << 2 * 8 * 128 * 128 * 4 << " stream=" << stream << " device=" << 0
                                        << " unified_memory=" << true);
  LOG_ALLOC_DEBUG("[CUDA_MALLOC_DONE] ptr=" << scores_ptr);
  LOG_SDPA_DEBUG("[CUBLAS_GEMM_START] M=" << 128 << " N=" << 128 << " K=" << 64);
  LOG_SDPA_DEBUG("[CUBLAS_GEMM_DONE]");
  LOG_SDPA_DEBUG("[MATH_QK_DONE] scores shape=" << scores << " min=" << min << " max=" << max << " isnan=" << false
                                                << " isinf=" << false);
  LOG_SDPA_DEBUG("[MATH_MASK] Applying attention mask");
  LOG_SDPA_DEBUG("[MATH_MASK_DONE]");
  LOG_SDPA_DEBUG("[MATH_SOFTMAX_START] Input shape=" << scores);
  LOG_SDPA_DEBUG("[MATH_SOFTMAX_DONE] Output shape=" << scores << " sum=" << sum);
  LOG_SDPA_DEBUG("[MATH_DROPOUT_START]");
  LOG_SDPA_DEBUG("[MATH_DROPOUT_DONE]");
  LOG_SDPA_DEBUG("[MATH_FINAL_BMM_START]");
  LOG_SDPA_DEBUG("[CUBLAS_GEMM_START] M=" << 128 << " N=" << 64 << " K=" << 128);
  LOG_SDPA_DEBUG("[CUBLAS_GEMM_DONE]");
  LOG_SDPA_DEBUG("[MATH_FINAL_BMM_DONE] output shape=" << q);
  CUDA_EVENT_RECORD("math_sdpa_complete");
  std::cerr.rdbuf(saved);
  return captured.str();
}

// The same call through the harness's logger, as the path drives it with --alloc-timing per-call
// and --log values (the scores allocated in alloc_scores; the value fields at the GEMM's and
// softmax's ends).
std::string harness_call_log(bool extras) {
  SdpaProblem p;
  p.mask = MaskKind::causal;
  p.dropout_p = 0.1;
  PathSettings ps;
  ps.alloc_timing = AllocTiming::per_call;
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* mem = open_memstream(&buffer, &size);
  {
    StageLogger logger(p, ps, LogFormat::sdpa_debug, mem, extras);
    logger.log_allocation("query", 262144, 0x7f2860000000, "managed");  // before the call: the harness's own
    for (int i = 0; i < kStageCount; ++i) {
      const Stage s = static_cast<Stage>(i);
      if (!stage_runs(s, p, ps)) continue;
      const bool gemm = s == Stage::qk_gemm || s == Stage::pv_gemm;
      const std::string detail = s == Stage::qk_gemm   ? "M=128 N=128 K=64 batch=16 fn=cublasSgemmStridedBatched"
                                 : s == Stage::pv_gemm ? "M=128 N=64 K=128 batch=16 fn=cublasSgemmStridedBatched"
                                                       : "";
      logger.stage_begin(s, gemm ? detail : "", nullptr);
      if (s == Stage::alloc_scores) {
        AllocationRecord r;
        r.what = "scores", r.bytes = 2 * 8 * 128 * 128 * 4, r.address = 0x7f2870000000, r.kind = AllocKind::managed;
        logger.memory_event(r, false);
      }
      const std::string summary = s == Stage::qk_gemm ? "min=-4.8488 max=4.62291 isnan=false isinf=false sum=-605.655 rows=2048"
                                  : s == Stage::softmax ? "min=0 max=0.0871 isnan=false isinf=false sum=2048 rows=2048"
                                                        : "";
      logger.stage_end(s, summary, nullptr);
    }
  }
  std::fclose(mem);
  std::string log(buffer, size);
  std::free(buffer);
  return log;
}

// A log's lines with what may differ between two writers set aside: the source location at the
// end, the timestamps.
std::vector<std::string> comparable_lines(const std::string& log) {
  static const std::regex location(R"( \[[^\]]+:[0-9]+\]$)"), stamp(R"( @ [0-9]+$)");
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::regex_replace(std::regex_replace(line, location, ""), stamp, " @ T"));
  }
  return lines;
}

// The lines that end in a newline (a line still being written is left out).
std::vector<std::string> complete_lines(const std::string& log) {
  std::vector<std::string> lines;
  for (size_t pos = 0, nl; (nl = log.find('\n', pos)) != std::string::npos; pos = nl + 1) lines.push_back(log.substr(pos, nl - pos));
  return lines;
}

}  // namespace

TEST_SUITE("log_format") {
  TEST_CASE("sdpa-debug format: line for line what the instrumentation's own macros write for the same call") {
    const std::vector<std::string> theirs = comparable_lines(instrumented_call_log());
    REQUIRE(theirs.size() == 23);
    CHECK(theirs[0] == "[SDPA_DEBUG] [SDPA_ENTRY] Q shape=[2, 8, 128, 64] K=[2, 8, 128, 64] V=[2, 8, 128, 64] "
                       "device=cuda:0 dtype=c10::BFloat16 is_causal=1");
    const std::vector<std::string> ours = comparable_lines(harness_call_log(false));
    CHECK(ours.size() == theirs.size());
    for (size_t i = 0; i < std::min(ours.size(), theirs.size()); ++i) {
      CAPTURE(i);
      CHECK(ours[i] == theirs[i]);
    }
    // With --log-extras the harness's own lines come back, the instrumentation's among them in order.
    const std::vector<std::string> all = comparable_lines(harness_call_log(true));
    CHECK(all.size() > ours.size() + 10);
    size_t next = 0;
    for (const auto& line : all) next += next < ours.size() && line == ours[next];
    CHECK(next == ours.size());
    CHECK(std::find(all.begin(), all.end(), "[SDPA_DEBUG] [MATH_UPCAST_DONE]") != all.end());
  }

  TEST_CASE("sdpa-debug format: every line is one of the instrumentation's four shapes, --log-extras's too") {
    const std::string log = one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{}, "", true);
    const std::regex tagged(R"(^\[(SDPA_DEBUG|ALLOC_DEBUG|CUDA_DEBUG)\] \[[A-Z0-9_]+\].* \[math_sdpa/stage(_log)?\.cpp:[0-9]+\]$)");
    const std::regex event(R"(^\[CUDA_EVENT\] [a-z_]+ @ [0-9]{16}$)");  // epoch microseconds
    const auto lines = complete_lines(log);
    REQUIRE(lines.size() > 20);
    for (const auto& line : lines) {
      CAPTURE(line);
      CHECK((std::regex_match(line, tagged) || std::regex_match(line, event)));
      CHECK(line.find("t_us=") == std::string::npos);
    }
    CHECK(log.find("[ALLOC_DEBUG] [CUDA_MALLOC] size=262144 stream=0 device=0 unified_memory=1 [") != std::string::npos);
    CHECK(log.find("[ALLOC_DEBUG] [CUDA_MALLOC_DONE] ptr=0x7f2870000000 [") != std::string::npos);
    CHECK(log.find("[SDPA_DEBUG] [CUBLAS_GEMM_START] M=128 N=128 K=64 [") != std::string::npos);  // no more than M, N, K
    CHECK(log.find("[CUDA_DEBUG] [STREAM_SYNC] stream=0x1234 device=0 [") != std::string::npos);
    CHECK(log.find("[CUDA_DEBUG] [STREAM_SYNC_DONE] result=no error duration_ms=") != std::string::npos);
    CHECK(log.find("[SDPA_DEBUG] [BACKEND_SELECT] Chosen backend: MATH use_flash=0 use_mem_efficient=0 use_math=1 "
                   "use_cudnn=0 [") != std::string::npos);
    // The GPU marks, as CUDA_EVENT lines.
    CHECK(log.find("[CUDA_EVENT] softmax_gpu_start @ ") != std::string::npos);
    CHECK(log.find("[CUDA_EVENT] softmax_gpu_done @ ") != std::string::npos);
    // Without --log-extras none of the harness's own lines: the closing synchronisation, the
    // allocation before the call, the extra stages, the GPU marks.
    const std::string plain = one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{});
    for (const char* own : {"STREAM_SYNC", "CUDA_MALLOC", "MATH_UPCAST", "MATH_SCALE_Q", "MATH_KT_PREP", "MATH_CAST_OUTPUT",
                            "_gpu_start", "_gpu_done"}) {
      CAPTURE(own);
      CHECK(plain.find(own) == std::string::npos);
    }
  }

  TEST_CASE("sdpa-debug format: a call's tag sequence is the one docs/LOG_FORMAT.md documents") {
    const auto documented = test_util::documented_call_tags("default");
    REQUIRE(documented.size() == 17);
    const auto tags = test_util::debug_tags(one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{}));
    CHECK(test_util::call_tags(tags) == documented);
    CHECK(tags.front() == "SDPA_DEBUG SDPA_ENTRY");
    const auto documented_extras = test_util::documented_call_tags("extras");
    REQUIRE(documented_extras.size() > 20);
    const auto all = test_util::debug_tags(one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{}, "", true));
    CHECK(test_util::call_tags(all) == documented_extras);
    CHECK(all.front() == "ALLOC_DEBUG CUDA_MALLOC");  // with --log-extras: the allocations before the call
    CHECK(all[1] == "ALLOC_DEBUG CUDA_MALLOC_DONE");
  }

  TEST_CASE("sdpa-debug format: values only where the instrumentation printed them") {
    const std::string summary = "min=-4.8488 max=4.62291 isnan=false isinf=false sum=-605.655 rows=2048";
    const std::string log = one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{}, summary);
    CHECK(log.find("[MATH_QK_DONE] scores shape=[2, 8, 128, 128] min=-4.8488 max=4.62291 isnan=0 isinf=0 [") !=
          std::string::npos);
    CHECK(log.find("[MATH_SOFTMAX_DONE] Output shape=[2, 8, 128, 128] sum=-605.655 [") != std::string::npos);
    CHECK(log.find("[MATH_FINAL_BMM_DONE] output shape=[2, 8, 128, 64] [") != std::string::npos);
    CHECK(log.find("rows=") == std::string::npos);
    // A field is the whole key: max= is not the tail of another key's name.
    const std::string tricky = one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{},
                                        "row_max=9 min=-1 max=4 isnan=false isinf=false sum=3");
    CHECK(tricky.find("[MATH_QK_DONE] scores shape=[2, 8, 128, 128] min=-1 max=4 isnan=0 isinf=0 [") != std::string::npos);
  }

  TEST_CASE("allocations and frees in both formats: every kind, the stage's tag, the unified-memory flag") {
    for (const AllocKind kind : {AllocKind::managed, AllocKind::device, AllocKind::async, AllocKind::host, AllocKind::system,
                                 AllocKind::vmm}) {
      CAPTURE(alloc_kind_name(kind));
      for (const LogFormat format : {LogFormat::harness, LogFormat::sdpa_debug}) {
        char* buffer = nullptr;
        size_t size = 0;
        std::FILE* mem = open_memstream(&buffer, &size);
        {
          StageLogger logger(SdpaProblem{}, PathSettings{}, format, mem, false);
          AllocationRecord r;
          r.what = "scores", r.bytes = 4096, r.address = 0x7f2870000000, r.kind = kind;
          logger.stage_begin(Stage::alloc_scores, "", nullptr);
          logger.memory_event(r, false);
          logger.stage_end(Stage::alloc_scores, "", nullptr);
          logger.stage_begin(Stage::free_scores, "", nullptr);
          logger.memory_event(r, true);
          logger.stage_end(Stage::free_scores, "", nullptr);
        }
        std::fclose(mem);
        const std::string log(buffer, size);
        std::free(buffer);
        // Pages the host and the GPU share: managed and system memory (the instrumentation's flag).
        const bool unified = kind == AllocKind::managed || kind == AllocKind::system;
        if (format == LogFormat::harness) {
          CHECK(log.find("[MATH_ALLOC] alloc_scores t_us=") != std::string::npos);
          CHECK(log.find("[MATH_ALLOC_DONE] alloc_scores duration_us=") != std::string::npos);
          CHECK(log.find("[ALLOC_DEBUG] tensor=scores size=4096 ptr=0x7f2870000000 kind=" + std::string(alloc_kind_name(kind)) +
                         " t_us=") != std::string::npos);
          CHECK(log.find("[MATH_FREE] free_scores t_us=") != std::string::npos);
          CHECK(log.find("[FREE_DEBUG] tensor=scores size=4096 ptr=0x7f2870000000 t_us=") != std::string::npos);
        } else {
          CHECK(log.find(std::string("[CUDA_MALLOC] size=4096 stream=0 device=0 unified_memory=") + (unified ? "1" : "0") + " [") !=
                std::string::npos);
          CHECK(log.find("FREE") == std::string::npos);  // the instrumentation logged no frees
        }
      }
    }
  }

  TEST_CASE("harness format: GPU marks, and every line stamped") {
    const std::string log = one_call(LogFormat::harness, SdpaProblem{}, PathSettings{});
    CHECK(log.find("[GPU_STAGE_START] softmax t_us=") != std::string::npos);
    CHECK(log.find("[GPU_STAGE_DONE] softmax t_us=") != std::string::npos);
    for (const auto& line : complete_lines(log)) CHECK(line.find(" t_us=") != std::string::npos);
  }

  TEST_CASE("the log format's names parse, and a bad one names both") {
    CHECK(parse_log_format("sdpa-debug") == LogFormat::sdpa_debug);
    CHECK(parse_log_format("harness") == LogFormat::harness);
    try {
      parse_log_format("pytorch");
      FAIL("accepted");
    } catch (const std::exception& e) {
      CHECK(std::string(e.what()).find("harness|sdpa-debug") != std::string::npos);
    }
  }
}
