// watchdog.cpp
#include "repro/supervise/watchdog.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "math_sdpa/stage.h"

namespace sdpa {

namespace {
std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}
}  // namespace

HangMonitor::HangMonitor(double stage_timeout_s, double run_timeout_s, int64_t start_us)
    : stage_timeout_s_(stage_timeout_s), run_timeout_s_(run_timeout_s), start_us_(start_us) {}

namespace {
std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

std::string printable(std::string s) {
  for (auto& c : s) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return s;
}
}  // namespace

std::string progress_record(char type, const std::string& a, int64_t t_us, const std::string& b) {
  std::string line(1, type);
  line += '\t' + printable(a) + '\t' + std::to_string(t_us);
  if (type == 'B' || type == 'E') line += '\t' + printable(b);
  return line + '\n';
}

bool HangMonitor::consume(const std::string& line, int64_t now_us) {
  if (line.size() > 1 && line[0] == 'D' && line[1] == '\t') {
    device_json_ = line.substr(2);
    return true;
  }
  const auto f = split_tabs(line);
  int64_t t = 0;
  Stage stage;
  if (f.size() == 3 && f[0] == "I" && parse_int(f[1], t) && parse_int(f[2], t)) {
    parse_int(f[1], calls_done_);
    return true;
  }
  if (f.size() == 3 && f[0] == "L" && parse_int(f[2], t)) {
    const auto p = split_commas(f[1]);
    int64_t step = 0, layer = 0, layers = 0;
    if (p.size() != 3 || !parse_int(p[0], step) || !parse_int(p[1], layer) || !parse_int(p[2], layers) || step < 1 ||
        layer < 1 || layer > layers || layers > 1000000) {
      return false;
    }
    position_ = {static_cast<int>(step), static_cast<int>(layer), static_cast<int>(layers)};
    return true;
  }
  if (f.size() != 4 || (f[0] != "B" && f[0] != "E") || !parse_stage(f[1], stage) || !parse_int(f[2], t)) return false;
  if (f[0] == "B") {
    open_.push_back({f[1], now_us, position_});
    FlightRecord record{f[1], now_us, -1, f[3], "", position_.step, position_.layer};
    records_.push_back(record);
    if (records_.size() > kFlightRecorderSize) records_.pop_front();
    return true;
  }
  for (auto it = open_.begin(); it != open_.end(); ++it) {
    if (it->stage == f[1]) {
      open_.erase(it);
      break;
    }
  }
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (it->stage == f[1] && it->end_us < 0) {
      it->end_us = now_us;
      it->summary = f[3];
      break;
    }
  }
  return true;
}

std::string HangMonitor::open_stage() const { return open_.empty() ? std::string() : open_.front().stage; }

CallPosition HangMonitor::open_position() const { return open_.empty() ? position_ : open_.front().position; }

Expiry HangMonitor::check(int64_t now_us) const {
  Expiry e;
  if (!open_.empty()) {
    const double running = (now_us - open_.front().begin_us) / 1e6;
    if (running > stage_timeout_s_) return {true, false, open_.front().stage, running};
  }
  const double run = (now_us - start_us_) / 1e6;
  if (run_timeout_s_ > 0 && run > run_timeout_s_) return {true, true, open_stage(), run};
  return e;
}

std::string position_text(const CallPosition& p) {
  if (p.layers < 1 || (p.layers == 1 && p.step <= 1)) return "";
  return "layer " + std::to_string(p.layer) + " of " + std::to_string(p.layers) + ", step " + std::to_string(p.step);
}

LoggedProgress progress_in_log(const std::string& log_text) {
  HangMonitor monitor(0, 0, 0);
  std::istringstream lines(log_text);
  for (std::string line; std::getline(lines, line);) {
    // "<seconds>\t<kind>\t<payload>" (durable_log.h); only the child's records count here.
    const size_t kind = line.find('\t');
    if (kind == std::string::npos || line.compare(kind + 1, 7, "record\t") != 0) continue;
    monitor.consume(line.substr(kind + 8), static_cast<int64_t>(std::atof(line.c_str()) * 1e6));
  }
  return {monitor.open_stage(), monitor.open_position(), monitor.calls_done()};
}

std::string progress_text(const LoggedProgress& p) {
  const CallPosition& c = p.position;
  // L records number the calls: with one layer a call is a step; with more, each layer's call.
  const std::string call = c.step < 1   ? std::string()
                           : c.layers > 1 ? "layer " + std::to_string(c.layer) + " of " + std::to_string(c.layers) +
                                                ", step " + std::to_string(c.step)
                                          : "call " + std::to_string(c.step);
  const std::string stage = p.open_stage.empty() ? "between stages" : "in stage " + p.open_stage;
  if (call.empty()) return p.open_stage.empty() ? "before its first call" : stage;
  return "in " + call + ", " + stage;
}

std::string hang_report_text(const SupervisedOutcome& o, const std::string& configuration, double stage_timeout_s,
                             const std::string& classification) {
  std::ostringstream s;
  char buf[512];
  const std::string where = position_text(o.position);
  const std::string stage = (o.stage.empty() ? std::string("(none)") : o.stage) + (where.empty() ? "" : " (" + where + ")");
  if (o.kind == SupervisedOutcome::hang) {
    if (o.expiry.whole_run) {
      std::snprintf(buf, sizeof buf, "repro: HANG: the run exceeded its --timeout (%.2f s); stage %s was running",
                    o.expiry.running_s, stage.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "repro: HANG: stage %s did not finish within %.1f s (running for %.2f s)",
                    stage.c_str(), stage_timeout_s, o.expiry.running_s);
    }
    s << buf << (o.snapshot ? "; snapshot in " + o.snapshot->dir : std::string()) << "\n";
  } else {
    std::snprintf(buf, sizeof buf, "repro: CRASH: %s (in stage %s)\n", o.message.c_str(), stage.c_str());
    s << buf;
  }
  if (!classification.empty()) s << "  classification: " << classification << "\n";
  s << "  configuration: " << configuration << "\n";
  s << "  calls completed: " << o.calls_done << "\n";
  s << "  flight recorder (last " << o.records.size() << " stage records, oldest first):\n";
  // The layer column only where the run had layers or steps.
  const bool layered = !where.empty();
  s << (layered ? "    layer  stage          start_s  duration_ms  detail\n" : "    stage          start_s  duration_ms  detail\n");
  for (const auto& r : o.records) {
    const double start = (r.start_us - o.start_us) / 1e6;
    std::string duration = r.end_us < 0 ? "RUNNING" : std::to_string((r.end_us - r.start_us) / 1000.0);
    if (r.end_us >= 0) duration.resize(duration.find('.') + 4);
    if (layered) {
      std::snprintf(buf, sizeof buf, "    %5d  %-13s %8.4f %12s  %s\n", r.layer, r.stage.c_str(), start, duration.c_str(),
                    r.detail.substr(0, 150).c_str());
    } else {
      std::snprintf(buf, sizeof buf, "    %-13s %8.4f %12s  %s\n", r.stage.c_str(), start, duration.c_str(),
                    r.detail.substr(0, 160).c_str());
    }
    s << buf;
  }
  if (!o.log_tail.empty()) {
    s << "  stage log tail:\n";
    for (const auto& line : o.log_tail) s << "    " << line << "\n";
  }
  s << hang_actions_text(o);
  return s.str();
}

std::string hang_actions_text(const SupervisedOutcome& o) {
  std::ostringstream s;
  if (o.snapshot) {
    const HangSnapshot& snap = *o.snapshot;
    int ok = 0;
    for (const auto& c : snap.collectors) ok += c.state == CollectorState::ok;
    char line[160];
    std::snprintf(line, sizeof line, " (%d of %zu collectors ok, %.1f s of %.0f s)", ok, snap.collectors.size(),
                  snap.seconds, snap.budget_s);
    s << "  hang snapshot: " << snap.dir << "/snapshot.json" << line << "\n";
    for (const auto& c : snap.collectors) {
      if (c.state != CollectorState::ok) s << "    " << collector_line(c) << "\n";
    }
    const auto evidence = snapshot_evidence(snap.summary);
    if (!evidence.empty()) s << "  evidence:\n";
    for (const auto& e : evidence) s << "    " << e << "\n";
  }
  if (o.on_hang == OnHang::keep) {
    s << "  kept for inspection (--on-hang keep) for " << format_seconds(o.kept_s) << " s before the kill\n";
  }
  if (o.survived_kill) {
    s << "  the hung process did not die after SIGKILL: it is stuck in the kernel; the supervisor exits without "
         "waiting for it. Its threads' kernel stacks:\n";
    for (const auto& line : o.kernel_stacks) s << "    " << line << "\n";
    if (o.kernel_stacks.empty()) s << "    (not readable)\n";
  }
  if (!o.log_file.empty()) s << "  log file: " << o.log_file << "\n";
  return s.str();
}

nlohmann::json hang_actions_json(const SupervisedOutcome& o) {
  using nlohmann::json;
  json snapshot = nullptr, evidence = json::array();
  if (o.snapshot) {
    json collectors = json::array();
    for (const auto& c : o.snapshot->collectors) {
      collectors.push_back({{"name", c.name},
                            {"state", collector_state_name(c.state)},
                            {"reason", c.reason.empty() ? json(nullptr) : json(c.reason)},
                            {"seconds", c.seconds}});
    }
    snapshot = {{"path", o.snapshot->dir},
                {"seconds", o.snapshot->seconds},
                {"budget_seconds", o.snapshot->budget_s},
                {"collectors", collectors},
                {"summary", summary_to_json(o.snapshot->summary)}};
    evidence = snapshot_evidence(o.snapshot->summary);
  }
  return {{"on_hang", on_hang_name(o.on_hang)},
          {"snapshot", snapshot},
          {"evidence", evidence},
          {"kept_seconds", o.on_hang == OnHang::keep ? json(o.kept_s) : json(nullptr)},
          {"survived_kill", o.survived_kill},
          {"kernel_stacks", o.kernel_stacks},
          {"log_file", o.log_file.empty() ? json(nullptr) : json(o.log_file)}};
}

}  // namespace sdpa
