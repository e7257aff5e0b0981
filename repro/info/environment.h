// environment.h: the environment block of a bug report (`repro info`, REPORT.md): the GPU and its
// unified-memory attributes, the NVIDIA driver, the CUDA driver and runtime, the cuBLAS loaded
// and the one built against, the OS, the kernel and the CPU architecture, and whether this
// machine is the platform the hang was reported on.
//
// NVIDIA's bug template asks for exactly these. Everything here but query_environment() is
// host-only (no CUDA), so the report writer, which never calls CUDA, can read the block back
// from `repro info --json` run in a child, and the CPU tests can check it without a GPU.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "math_sdpa/device_info.h"

namespace sdpa {

struct HostInfo {
  std::string os = "unknown";             // /etc/os-release PRETTY_NAME
  std::string kernel = "unknown";         // uname -r
  std::string cpu_arch = "unknown";       // uname -m
  std::string nvidia_driver = "unknown";  // the kernel module's version, /proc/driver/nvidia/version
  // This process's environment variables named CUDA_* or CUBLAS* (cuda_variables below), among
  // them those that change how the driver, the runtime and cuBLAS behave:
  // CUDA_DEVICE_MAX_CONNECTIONS=1, for one, puts every stream's work in one queue, where scenario
  // 1's unordered side stream can no longer race.
  std::map<std::string, std::string> cuda_variables;
};

// CUDA and cuBLAS versions as major*1000+minor*10 (CUDA) and major*10000+minor*100+patch (cuBLAS).
struct CudaVersions {
  int driver = 0;         // cudaDriverGetVersion: the newest CUDA the driver supports; 0 = no driver
  int runtime = 0;        // cudaRuntimeGetVersion (linked statically: the toolkit it was built with)
  int cublas_loaded = 0;  // cublasGetProperty: the library actually in use
  int cublas_built = 0;   // CUBLAS_VER_* of the headers it was compiled against
  bool cublas_static = false;
  std::string cublas_path;  // the file cuBLAS was loaded from (the executable itself when static),
                            // or "not loaded: <why>"
};

struct Environment {
  HostInfo host;
  CudaVersions cuda;
  std::optional<DeviceInfo> device;  // absent without a usable GPU
  std::string gpu_error;             // "no usable CUDA GPU: <reason>" when absent
};

// The platform the hang was reported on: DGX Spark (GB10): aarch64, an integrated GPU whose
// unified memory the GPU reaches through the host's page tables, compute capability 12.1.
struct PlatformCheck {
  std::string what;      // "CPU architecture"
  std::string expected;  // "aarch64"
  std::string actual;    // "x86_64"; "unknown" when there is no usable GPU to ask
  bool matches = false;
  bool known = true;
};
std::vector<PlatformCheck> affected_platform_checks(const Environment& e);
// "matches the affected platform (...)" or "does not match the affected platform (...): differs:
// CPU architecture x86_64 (affected: aarch64); unknown without a GPU: ...; matches: ..."
std::string affected_platform_summary(const Environment& e);

// The entries of an environment ("NAME=VALUE", as environ holds them) whose names begin with CUDA_
// or CUBLAS (CUDA_DEVICE_MAX_CONNECTIONS, CUDA_LAUNCH_BLOCKING, CUDA_MODULE_LOADING,
// CUDA_VISIBLE_DEVICES, CUBLAS_WORKSPACE_CONFIG, ...), by name.
std::map<std::string, std::string> cuda_variables(const std::vector<std::string>& environment);

// Host facts, read without CUDA. Never throws; what cannot be read stays "unknown".
HostInfo query_host_info();
// The current time as ISO 8601 UTC, "2026-11-23T11:45:02Z" (when a report or a sweep started).
std::string utc_now();
std::string parse_os_release(const std::string& text);              // PRETTY_NAME, else "unknown"
std::string parse_nvidia_driver_version(const std::string& text);  // "580.95.05", else "unknown"

// The whole block, through the CUDA runtime and cuBLAS (environment_query.cpp). Never throws:
// without a GPU it returns the host part, the versions that need no GPU, and gpu_error.
Environment query_environment();
// Only the versions, which need no GPU (`repro --version`).
CudaVersions query_cuda_versions();

// "machine code sm_90 sm_121, PTX compute_121" from CMAKE_CUDA_ARCHITECTURES' "90-real;121".
std::string describe_cuda_architectures(const std::string& cmake_list);

// "13.0" from 13000; "none" for 0.
std::string cuda_version_string(int version);
// "13.1.0" from 130100; "unknown" for 0.
std::string cublas_version_string(int version);

nlohmann::json environment_to_json(const Environment& e);
Environment environment_from_json(const nlohmann::json& j);  // throws nlohmann::json::exception

// The block as label/value lines, in the order NVIDIA's template asks for them; `repro info`
// prints them aligned, REPORT.md as a table.
std::vector<std::pair<std::string, std::string>> environment_lines(const Environment& e);

}  // namespace sdpa
