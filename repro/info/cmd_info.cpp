// cmd_info.cpp: `repro info [--json]` and `repro --version`.
//
// `repro info` prints the environment block of a bug report (environment.h) and whether this
// machine is the affected platform. Without a usable GPU it still prints everything that needs
// none (host, driver files, CUDA runtime and cuBLAS versions), says "no usable CUDA GPU:
// <reason>", and exits 7; with --json the JSON is written all the same (device null, gpu_error
// set), so a report can always include the block.
//
// `repro --version` says how the binary was built (build_info.h: compiler and flags, CUDA
// toolkit, the GPU architectures embedded, how cuBLAS is linked) and which cuBLAS it loaded. It
// never touches a GPU: the bug report needs it from machines where the GPU is wedged.
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <iostream>

#include "build_info.h"
#include "repro/commands.h"
#include "repro/info/environment.h"
#include "math_sdpa/errors.h"
#include "repro/cli/run_options.h"
#include "version.h"

namespace sdpa {

namespace {

void print_aligned(const std::vector<std::pair<std::string, std::string>>& lines) {
  for (const auto& [label, value] : lines) std::printf("%-19s %s\n", (label + ":").c_str(), value.c_str());
}

}  // namespace

int info_main(int argc, char** argv) {
  CLI::App app{"repro info: the environment block of a bug report (GPU, unified-memory attributes, driver, CUDA, "
               "cuBLAS, OS, kernel, CPU) and whether this machine is the affected platform. Exit 7 without a usable "
               "GPU (the rest is printed all the same).",
               "repro info"};
  bool json = false;
  app.add_flag("--json", json, "print the block as JSON on stdout");
  ParseResult parsed;
  if (!parse_app(app, argc, argv, "repro info", parsed)) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  const Environment e = query_environment();
  if (json) {
    nlohmann::json j = environment_to_json(e);
    j["meta"] = {{"harness", "sdpa-repro"}, {"harness_version", kHarnessVersion}, {"git_commit", kGitCommit}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("# repro info: sdpa-repro %s (commit %s)\n", kHarnessVersion, kGitCommit);
    print_aligned(environment_lines(e));
  }
  std::cout << std::flush;
  if (!e.device) {
    std::cerr << "repro info: " << e.gpu_error << "\n";
    return kExitNoGpu;
  }
  return kExitPass;
}

int version_main(int argc, char** argv) {
  if (argc > 1) {
    std::cerr << "repro --version: error: unexpected argument '" << argv[1] << "' (it takes none)\n";
    return kExitUsage;
  }
  const CudaVersions v = query_cuda_versions();
  std::printf("repro (sdpa-repro) %s commit %s\n", kHarnessVersion, kGitCommit);
  print_aligned({
      {"compiler", std::string(kCxxCompiler) + " (build type " + kBuildType + ")"},
      {"C++ flags", kCxxFlags},
      {"CUDA compiler", kCudaCompiler},
      {"CUDA flags", kCudaFlags},
      {"CUDA toolkit", std::string(kCudaToolkitVersion) + " (CUDART_VERSION " + std::to_string(CUDART_VERSION) +
                           "); CUDA runtime linked statically"},
      {"GPU architectures", std::string(kCudaArchitectures) + ": " + describe_cuda_architectures(kCudaArchitectures)},
      {"cuBLAS", "built against " + cublas_version_string(v.cublas_built) + ", loaded " +
                     cublas_version_string(v.cublas_loaded) + " (" +
                     (v.cublas_static  ? std::string("linked statically")
                      : v.cublas_loaded ? "from " + v.cublas_path
                                        : v.cublas_path) +
                     ")"},
      {"cuBLAS linkage", kCublasLinkage},
      {"built for", kTargetProcessor},
  });
  return kExitPass;
}

}  // namespace sdpa
