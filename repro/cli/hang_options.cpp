// hang_options.cpp: the --on-hang words, and where a hang snapshot goes by default.
#include "repro/cli/hang_options.h"

#include <unistd.h>

#include <ctime>

#include "math_sdpa/name_table.h"

namespace sdpa {

namespace {

const NameTable<OnHang> kOnHang{"--on-hang", {{OnHang::snapshot, "snapshot"}, {OnHang::kill, "kill"}, {OnHang::keep, "keep"}}};

}  // namespace

const char* on_hang_name(OnHang mode) { return kOnHang.name(mode); }
OnHang parse_on_hang(const std::string& text) { return kOnHang.parse(text); }

std::string default_snapshot_dir(const std::string& json_path) {
  if (!json_path.empty()) {
    const size_t slash = json_path.rfind('/');
    const size_t dot = json_path.rfind('.');
    const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
    return (has_extension ? json_path.substr(0, dot) : json_path) + ".snapshot";
  }
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  return std::string("repro-hang-") + stamp + "-" + std::to_string(getpid());
}

}  // namespace sdpa
