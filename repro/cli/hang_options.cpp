// hang_options.cpp: the --on-hang words and the CLI11 options of a hang.
#include "repro/cli/hang_options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <ctime>
#include <vector>

#include "math_sdpa/name_table.h"

namespace sdpa {

namespace {

const NameTable<OnHang> kOnHang{"--on-hang", {{OnHang::snapshot, "snapshot"}, {OnHang::kill, "kill"}, {OnHang::keep, "keep"}}};

}  // namespace

const char* on_hang_name(OnHang mode) { return kOnHang.name(mode); }
OnHang parse_on_hang(const std::string& text) { return kOnHang.parse(text); }

void add_hang_options(CLI::App& app, HangOptions& hang) {
  std::vector<std::string> words;
  for (const auto& entry : kOnHang.entries) words.push_back(entry.second);
  app.add_option_function<std::string>(
         "--on-hang", [&hang](const std::string& word) { hang.on_hang = parse_on_hang(word); },
         "when a stage or the run misses its deadline: snapshot (collect evidence from the live hung process: its "
         "threads' kernel stacks, cuda-gdb's resident kernels and backtraces, nvidia-smi, the driver's kernel log; at "
         "most --snapshot-timeout; then kill it), kill (kill it at once), keep (leave it running for a person, print "
         "its PID and the commands to inspect it, kill it on Ctrl-C or after --keep-timeout)")
      ->check(CLI::IsMember(words))
      ->default_str(on_hang_name(hang.on_hang));
  app.add_option("--snapshot-timeout", hang.snapshot_timeout_s,
                 "budget of the whole hang snapshot, seconds; each collector also has its own bound")
      ->check(CLI::Range(0.5, 3600.0));
  app.add_option("--keep-timeout", hang.keep_timeout_s, "--on-hang keep: kill the hung process after this long, seconds")
      ->check(CLI::Range(0.1, 604800.0));
  app.add_option("--snapshot-dir", hang.snapshot_dir,
                 "folder of the hang snapshot (snapshot.json and the collectors' raw outputs)")
      ->default_str("beside --json as FILE.snapshot, else ./repro-hang-<time>-<pid>");
  app.add_option("--log-file", hang.log_file,
                 "append the stage log, the stage records and the snapshot's progress to this file as they arrive, "
                 "each fsync'ed, so the last line on disk names the running stage even if the machine freezes");
  app.add_flag("--nvidia-bug-report", hang.nvidia_bug_report,
               "also run nvidia-bug-report.sh (as root) while the hang is live; it takes about a minute, so raise "
               "--snapshot-timeout");
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
