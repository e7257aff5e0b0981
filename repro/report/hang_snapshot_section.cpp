// hang_snapshot_section.cpp
#include "repro/report/hang_snapshot_section.h"

#include <sstream>

#include "repro/common/text.h"
#include "repro/run/run_json.h"
#include "repro/supervise/hang_snapshot.h"

namespace sdpa {

namespace {

constexpr size_t kDriverLinesShown = 12;

std::string table_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

std::string sm_text(const std::vector<int>& sms) {
  std::string s;
  for (size_t i = 0; i < sms.size(); ++i) s += (i ? ", " : "") + std::to_string(sms[i]);
  return s.empty() ? "?" : s;
}

// What the snapshot's summary says: the resident kernels, the host threads, the main thread's
// backtrace, the threads blocked in the kernel, nvidia-smi and the driver's log lines.
void write_snapshot_summary(std::ostringstream& s, const SnapshotSummary& summary) {
  if (!summary.kernels.empty()) {
    s << "| resident kernel | SMs | grid | block | a warp's PC | lane |\n|---|---|---|---|---|---|\n";
    for (const auto& k : summary.kernels) {
      s << "| `" << table_cell(k.function.empty() ? k.name : k.function) << "` | " << sm_text(k.sms) << " | "
        << k.grid << " | " << k.block << " | " << (k.warp ? k.warp->pc : "—") << " | "
        << (k.warp ? k.warp->lane_state : "—") << " |\n";
    }
    s << "\n";
  }
  s << "- **Host threads**: " << host_verdict_name(summary.verdict) << ": " << summary.verdict_detail << " ("
    << summary.thread_count << " threads).\n";
  if (summary.main_thread && !summary.main_thread->backtrace.empty()) {
    std::string frames;
    for (size_t i = 0; i < summary.main_thread->backtrace.size() && i < 12; ++i) {
      frames += (i ? " < " : "") + summary.main_thread->backtrace[i];
    }
    s << "- **Main thread's backtrace** (innermost first): `" << table_cell(frames) << "`.\n";
  }
  for (const auto& t : summary.blocked_threads) {
    std::string frames;
    for (size_t i = 0; i < t.kernel_stack.size() && i < 8; ++i) frames += (i ? " < " : "") + t.kernel_stack[i];
    s << "- **Thread " << t.tid << " (" << t.comm << ") in D state**: `" << frames << "`.\n";
  }
  if (!summary.nvidia_smi.empty()) s << "- **nvidia-smi**: " << summary.nvidia_smi << ".\n";
  s << "\n";
  if (!summary.driver_lines.empty()) {
    s << "The driver's kernel log lines since the run started"
      << (summary.driver_lines_during.empty() ? "" : " (some logged while the snapshot ran, which may have caused them)")
      << ":\n\n```\n";
    for (size_t i = 0; i < summary.driver_lines.size() && i < kDriverLinesShown; ++i) s << summary.driver_lines[i] << "\n";
    s << "```\n\n";
  }
}

}  // namespace

std::string hang_snapshot_section(const ReportInput& in) {
  std::ostringstream s;
  s << "## At the moment of the hang\n\n";
  if (in.no_run) {
    s << "Not run (`--no-run`). When a run hangs, its watchdog takes a hang snapshot of the live process before "
         "it kills it (docs/HANG_SNAPSHOT.md): the resident kernels and the threads' backtraces from cuda-gdb, the "
         "threads' kernel stacks, nvidia-smi and the driver's kernel log lines; it goes into this folder as "
         "`hang-snapshot-run-N/`.\n\n";
    return s.str();
  }
  int index = 0;
  for (const ReportRun& run : in.runs) {
    ++index;
    if (!run.result) continue;
    RunRecord record;
    try {
      record = read_run_record(*run.result);
    } catch (const std::exception&) {
      continue;
    }
    if (record.outcome != Outcome::hang || !record.watchdog) continue;
    const WatchdogFindings& w = *record.watchdog;
    s << "Run " << index << " (fix " << (run.fix_on ? "on" : "off") << ")";
    if (!w.snapshot.is_object()) {
      s << ": no hang snapshot was taken (`--on-hang` kill or keep); the flight recorder above is what there is.\n\n";
    } else {
      const std::string folder = run.snapshot_dir.empty() ? w.snapshot_path.value_or("") : run.snapshot_dir;
      s << " was still hung when its watchdog took a hang snapshot, in " << format_number("%.1f", w.snapshot.value("seconds", 0.0))
        << " s, before killing it: [`" << folder << "/snapshot.json`](" << folder << "/snapshot.json), with every "
        << "collector's raw output beside it.\n\n";
      if (!w.evidence.empty()) {
        s << "Evidence:\n\n";
        for (const auto& line : w.evidence) s << "- " << line << "\n";
        s << "\n";
      }
      write_snapshot_summary(s, summary_from_json(w.snapshot.value("summary", nlohmann::json::object())));
      std::string missing;
      for (const auto& c : w.snapshot.value("collectors", nlohmann::json::array())) {
        if (c.value("state", "") == "ok") continue;
        missing += "| " + c.value("name", "") + " | " + c.value("state", "") + " | " +
                   table_cell(c.contains("reason") && c.at("reason").is_string() ? c.at("reason").get<std::string>() : "") + " |\n";
      }
      if (!missing.empty()) s << "Collectors that did not run to the end:\n\n| collector | state | why |\n|---|---|---|\n" << missing << "\n";
    }
    if (w.survived_kill) {
      s << "The hung process did not die after SIGKILL: it was stuck in the kernel, and its supervisor exited "
           "without waiting for it. Its threads' kernel stacks:\n\n```\n";
      for (const auto& line : w.kernel_stacks) s << line << "\n";
      s << "```\n\n";
    }
    return s.str();
  }
  return "";
}

}  // namespace sdpa
