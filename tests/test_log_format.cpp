// test_log_format.cpp: the stage log's sdpa-debug format (docs/LOG_FORMAT.md): the shape of every
// line, the documented tag sequence of a call, values only where the instrumentation printed
// them, and the GPU stage marks of both formats. On the CPU: the logger is driven through the
// stages a call runs, as the path drives it.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "log_tags.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/stage_log.h"

using namespace sdpa;

namespace {

// The log of one call of `p` under `ps`, as the path would drive the logger (with `summary` at
// the end of every stage, as --log values gives it).
std::string one_call(LogFormat format, const SdpaProblem& p, const PathSettings& ps, const std::string& summary = "") {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* mem = open_memstream(&buffer, &size);
  {
    StageLogger logger(p, ps, format, mem);
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

std::vector<std::string> lines_of(const std::string& log) {
  std::vector<std::string> lines;
  for (size_t pos = 0, nl; (nl = log.find('\n', pos)) != std::string::npos; pos = nl + 1) lines.push_back(log.substr(pos, nl - pos));
  return lines;
}

}  // namespace

TEST_SUITE("log_format") {
  TEST_CASE("sdpa-debug format: every line is one of the instrumentation's four shapes") {
    const std::string log = one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{});
    const std::regex tagged(R"(^\[(SDPA_DEBUG|ALLOC_DEBUG|CUDA_DEBUG)\] \[[A-Z0-9_]+\].* \[math_sdpa/stage_log\.cpp:[0-9]+\]$)");
    const std::regex event(R"(^\[CUDA_EVENT\] [a-z_]+ @ [0-9]{16}$)");  // epoch microseconds
    const auto lines = lines_of(log);
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
    CHECK(log.find("[SDPA_DEBUG] [BACKEND_SELECT] Chosen backend: MATH use_flash=false use_mem_efficient=false "
                   "use_math=true use_cudnn=false [") != std::string::npos);
    // The GPU marks, as CUDA_EVENT lines.
    CHECK(log.find("[CUDA_EVENT] softmax_gpu_start @ ") != std::string::npos);
    CHECK(log.find("[CUDA_EVENT] softmax_gpu_done @ ") != std::string::npos);
  }

  TEST_CASE("sdpa-debug format: a call's tag sequence is the one docs/LOG_FORMAT.md documents") {
    const auto documented = test_util::documented_call_tags("default");
    REQUIRE(documented.size() > 20);
    const auto tags = test_util::debug_tags(one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{}));
    CHECK(test_util::call_tags(tags) == documented);
    CHECK(tags.front() == "ALLOC_DEBUG CUDA_MALLOC");  // allocations come before the call
    CHECK(tags[1] == "ALLOC_DEBUG CUDA_MALLOC_DONE");
  }

  TEST_CASE("sdpa-debug format: values only where the instrumentation printed them") {
    const std::string summary = "min=-4.8488 max=4.62291 isnan=false isinf=false sum=-605.655 rows=2048";
    const std::string log = one_call(LogFormat::sdpa_debug, SdpaProblem{}, PathSettings{}, summary);
    CHECK(log.find("[MATH_QK_DONE] scores shape=[2, 8, 128, 128] min=-4.8488 max=4.62291 isnan=false isinf=false [") !=
          std::string::npos);
    CHECK(log.find("[MATH_SOFTMAX_DONE] Output shape=[2, 8, 128, 128] sum=-605.655 [") != std::string::npos);
    CHECK(log.find("[MATH_FINAL_BMM_DONE] output shape=[2, 8, 128, 64] [") != std::string::npos);
    CHECK(log.find("rows=") == std::string::npos);
  }

  TEST_CASE("harness format: GPU marks, and every line stamped") {
    const std::string log = one_call(LogFormat::harness, SdpaProblem{}, PathSettings{});
    CHECK(log.find("[GPU_STAGE_START] softmax t_us=") != std::string::npos);
    CHECK(log.find("[GPU_STAGE_DONE] softmax t_us=") != std::string::npos);
    for (const auto& line : lines_of(log)) CHECK(line.find(" t_us=") != std::string::npos);
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
