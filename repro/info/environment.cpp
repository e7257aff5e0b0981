// environment.cpp: the host part of the environment block, its JSON, its lines, and the
// comparison with the affected platform. No CUDA here (see environment.h).
#include "repro/info/environment.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "repro/common/text.h"
#include "repro/run/run_json.h"

namespace sdpa {

namespace {

std::string yes_no(bool b) { return b ? "1" : "0"; }

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

std::string cc_string(const DeviceInfo& d) { return std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor); }

}  // namespace

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  gmtime_r(&now, &t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &t);
  return buf;
}

std::string parse_os_release(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) != 0) continue;
    std::string value = line.substr(12);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    return value.empty() ? "unknown" : value;
  }
  return "unknown";
}

// The first line reads like "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05
// Release Build ..." (older drivers: "... x86_64 Kernel Module  535.129.03  Thu Oct ..."): the
// version is the first word made of digits and dots after the "NVRM version:" prefix.
std::string parse_nvidia_driver_version(const std::string& text) {
  const size_t at = text.find("NVRM version:");
  if (at == std::string::npos) return "unknown";
  std::istringstream words(text.substr(at + 13, text.find('\n', at) - at - 13));
  std::string word;
  while (words >> word) {
    const bool digits_and_dots = word.find_first_not_of("0123456789.") == std::string::npos;
    if (digits_and_dots && word.find('.') != std::string::npos && std::isdigit(static_cast<unsigned char>(word[0]))) {
      return word;
    }
  }
  return "unknown";
}

std::map<std::string, std::string> cuda_variables(const std::vector<std::string>& environment) {
  std::map<std::string, std::string> found;
  for (const std::string& entry : environment) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos) continue;
    const std::string name = entry.substr(0, equals);
    if (name.rfind("CUDA_", 0) == 0 || name.rfind("CUBLAS", 0) == 0) found[name] = entry.substr(equals + 1);
  }
  return found;
}

HostInfo query_host_info() {
  HostInfo h;
  std::vector<std::string> environment;
  for (char** entry = environ; entry && *entry; ++entry) environment.emplace_back(*entry);
  h.cuda_variables = cuda_variables(environment);
  h.os = parse_os_release(read_file("/etc/os-release").value_or(""));
  utsname u{};
  if (uname(&u) == 0) {
    h.kernel = u.release;
    h.cpu_arch = u.machine;
  }
  h.nvidia_driver = parse_nvidia_driver_version(read_file("/proc/driver/nvidia/version").value_or(""));
  return h;
}

std::string cuda_version_string(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cublas_version_string(int v) {
  if (v <= 0) return "unknown";
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

std::string describe_cuda_architectures(const std::string& cmake_list) {
  std::string sass, ptx, other;
  std::istringstream in(cmake_list);
  std::string item;
  while (std::getline(in, item, ';')) {
    const size_t dash = item.find('-');
    const std::string arch = item.substr(0, dash), kind = dash == std::string::npos ? "" : item.substr(dash + 1);
    if (arch.empty() || arch.find_first_not_of("0123456789af") != std::string::npos) {
      other += " " + item;  // all, all-major, native: decided by nvcc at build time
      continue;
    }
    if (kind != "virtual") sass += " sm_" + arch;
    if (kind != "real") ptx += " compute_" + arch;
  }
  std::string s = "machine code" + (sass.empty() ? std::string(" none") : sass) + ", PTX" + (ptx.empty() ? " none" : ptx);
  if (!other.empty()) s += ", as nvcc resolves" + other;
  return s;
}

std::vector<PlatformCheck> affected_platform_checks(const Environment& e) {
  std::vector<PlatformCheck> checks;
  checks.push_back({"CPU architecture", "aarch64", e.host.cpu_arch, e.host.cpu_arch == "aarch64", true});
  if (e.device) {
    const DeviceInfo& d = *e.device;
    checks.push_back({"integrated GPU", "integrated=1", "integrated=" + yes_no(d.integrated), d.integrated, true});
    // The GPU reaches pageable host memory (and managed memory) through the host's page tables:
    // the unified memory of DGX Spark, as opposed to managed memory migrated page by page.
    checks.push_back({"unified memory", "pageableMemoryAccess=1",
                      "pageableMemoryAccess=" + yes_no(d.pageable_memory_access), d.pageable_memory_access, true});
    checks.push_back({"compute capability", "12.1", cc_string(d), d.cc_major == 12 && d.cc_minor == 1, true});
  } else {
    checks.push_back({"integrated GPU", "integrated=1", "unknown", false, false});
    checks.push_back({"unified memory", "pageableMemoryAccess=1", "unknown", false, false});
    checks.push_back({"compute capability", "12.1", "unknown", false, false});
  }
  return checks;
}

std::string affected_platform_summary(const Environment& e) {
  std::string matching, differing, unknown;
  auto add = [](std::string& list, const std::string& item) { list += (list.empty() ? "" : ", ") + item; };
  for (const auto& c : affected_platform_checks(e)) {
    if (!c.known) {
      add(unknown, c.what);
    } else if (c.matches) {
      add(matching, c.what + " " + c.actual);
    } else {
      add(differing, c.what + " " + c.actual + " (affected: " + c.expected + ")");
    }
  }
  const std::string platform = "the affected platform (DGX Spark: aarch64, integrated GPU with unified memory, "
                               "compute capability 12.1)";
  if (differing.empty() && unknown.empty()) return "matches " + platform;
  std::string s = "does not match " + platform + ":";
  if (!differing.empty()) s += " differs: " + differing + ";";
  if (!unknown.empty()) s += " unknown without a usable GPU: " + unknown + ";";
  return s + " matches: " + (matching.empty() ? "nothing" : matching);
}

nlohmann::json environment_to_json(const Environment& e) {
  using nlohmann::json;
  json checks = json::array();
  bool all = true;
  for (const auto& c : affected_platform_checks(e)) {
    checks.push_back(
        {{"what", c.what}, {"expected", c.expected}, {"actual", c.actual}, {"matches", c.matches}, {"known", c.known}});
    all = all && c.matches;
  }
  return {{"host",
           {{"os", e.host.os},
            {"kernel", e.host.kernel},
            {"cpu_arch", e.host.cpu_arch},
            {"nvidia_driver_version", e.host.nvidia_driver},
            {"cuda_variables", e.host.cuda_variables}}},
          {"cuda",
           {{"driver_version", e.cuda.driver},
            {"runtime_version", e.cuda.runtime},
            {"cublas_loaded_version", e.cuda.cublas_loaded},
            {"cublas_built_version", e.cuda.cublas_built},
            {"cublas_static", e.cuda.cublas_static},
            {"cublas_path", e.cuda.cublas_path}}},
          {"device", e.device ? device_to_json(*e.device) : json(nullptr)},
          {"gpu_error", e.gpu_error.empty() ? json(nullptr) : json(e.gpu_error)},
          {"affected_platform", {{"matches", all}, {"summary", affected_platform_summary(e)}, {"checks", checks}}}};
}

Environment environment_from_json(const nlohmann::json& j) {
  Environment e;
  const auto& h = j.at("host");
  e.host.os = h.at("os").get<std::string>();
  e.host.kernel = h.at("kernel").get<std::string>();
  e.host.cpu_arch = h.at("cpu_arch").get<std::string>();
  e.host.nvidia_driver = h.at("nvidia_driver_version").get<std::string>();
  // Absent from the JSON of builds before it was recorded.
  e.host.cuda_variables = h.value("cuda_variables", std::map<std::string, std::string>{});
  const auto& c = j.at("cuda");
  e.cuda.driver = c.at("driver_version").get<int>();
  e.cuda.runtime = c.at("runtime_version").get<int>();
  e.cuda.cublas_loaded = c.at("cublas_loaded_version").get<int>();
  e.cuda.cublas_built = c.at("cublas_built_version").get<int>();
  e.cuda.cublas_static = c.at("cublas_static").get<bool>();
  e.cuda.cublas_path = c.at("cublas_path").get<std::string>();
  if (!j.at("device").is_null()) e.device = device_from_json(j.at("device"));
  if (!j.at("gpu_error").is_null()) e.gpu_error = j.at("gpu_error").get<std::string>();
  return e;
}

std::vector<std::pair<std::string, std::string>> environment_lines(const Environment& e) {
  std::vector<std::pair<std::string, std::string>> lines;
  if (e.device) {
    const DeviceInfo& d = *e.device;
    lines.push_back({"GPU", d.name});
    lines.push_back({"compute capability", cc_string(d) + " (sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor) + ")"});
    lines.push_back({"SMs", std::to_string(d.sm_count)});
    lines.push_back({"memory", gib(d.total_memory)});
  } else {
    lines.push_back({"GPU", e.gpu_error.empty() ? "no usable CUDA GPU" : e.gpu_error});
  }
  lines.push_back({"NVIDIA driver", e.host.nvidia_driver});
  lines.push_back({"CUDA driver", e.cuda.driver > 0 ? cuda_version_string(e.cuda.driver) + " (cudaDriverGetVersion " +
                                                          std::to_string(e.cuda.driver) + ")"
                                                    : std::string("none (no CUDA driver loaded)")});
  lines.push_back({"CUDA runtime", cuda_version_string(e.cuda.runtime) + " (linked statically)"});
  lines.push_back({"cuBLAS", cublas_version_string(e.cuda.cublas_loaded) + " loaded (" +
                                 (e.cuda.cublas_static ? std::string("linked statically") : e.cuda.cublas_path) +
                                 "), built against " + cublas_version_string(e.cuda.cublas_built)});
  std::string variables;
  for (const auto& [name, value] : e.host.cuda_variables) variables += (variables.empty() ? "" : " ") + name + "=" + value;
  lines.push_back({"CUDA variables", variables.empty() ? "none set (the driver's and cuBLAS's defaults)" : variables});
  lines.push_back({"OS", e.host.os});
  lines.push_back({"kernel", e.host.kernel});
  lines.push_back({"CPU architecture", e.host.cpu_arch});
  if (e.device) {
    const DeviceInfo& d = *e.device;
    lines.push_back({"unified memory", "integrated=" + yes_no(d.integrated) +
                                           " concurrentManagedAccess=" + yes_no(d.concurrent_managed_access) +
                                           " pageableMemoryAccess=" + yes_no(d.pageable_memory_access) +
                                           " pageableMemoryAccessUsesHostPageTables=" +
                                           yes_no(d.pageable_memory_access_uses_host_page_tables) +
                                           " directManagedMemAccessFromHost=" +
                                           yes_no(d.direct_managed_mem_access_from_host) +
                                           " hostNativeAtomicSupported=" + yes_no(d.host_native_atomic_supported)});
  } else {
    lines.push_back({"unified memory", "unknown (no usable GPU)"});
  }
  lines.push_back({"affected platform", affected_platform_summary(e)});
  return lines;
}

}  // namespace sdpa
