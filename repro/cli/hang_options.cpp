// hang_options.cpp: the --on-hang words and the CLI11 options of a hang.
#include "repro/cli/hang_options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <ctime>

#include "math_sdpa/name_table.h"

namespace sdpa {

namespace {

const NameTable<OnHang> kOnHang{"--on-hang", {{OnHang::snapshot, "snapshot"}, {OnHang::kill, "kill"}, {OnHang::keep, "keep"}}};

}  // namespace

const char* on_hang_name(OnHang mode) { return kOnHang.name(mode); }
OnHang parse_on_hang(const std::string& text) { return kOnHang.parse(text); }

void add_hang_options(CLI::App& app, HangOptions& hang, bool with_paths) {
  app.add_option_function<std::string>(
         "--on-hang", [&hang](const std::string& word) { hang.on_hang = parse_on_hang(word); },
         "at a hang: snapshot (evidence from the live process, then kill), kill, or keep it for a person")
      ->check(CLI::IsMember(kOnHang.names()))
      ->option_text("WHAT")
      ->default_str(on_hang_name(hang.on_hang));
  app.add_option("--snapshot-timeout", hang.snapshot_timeout_s, "the whole snapshot's budget, seconds")
      ->check(CLI::Range(0.5, 3600.0))
      ->option_text("S");
  app.add_option("--keep-timeout", hang.keep_timeout_s, "--on-hang keep: kill it after this long, seconds")
      ->check(CLI::Range(0.1, 604800.0))
      ->option_text("S");
  if (with_paths) {
    app.add_option("--snapshot-dir", hang.snapshot_dir, "the hang snapshot's folder")
        ->option_text("DIR")
        ->default_str("FILE.snapshot beside --json FILE, else ./repro-hang-TIME-PID");
    app.add_option("--log-file", hang.log_file,
                   "append the stage log and records, fsync'ed: survives a frozen machine")
        ->option_text("FILE");
  }
  app.add_flag("--nvidia-bug-report", hang.nvidia_bug_report,
               "also nvidia-bug-report.sh (root; a minute: raise --snapshot-timeout)");
}

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
