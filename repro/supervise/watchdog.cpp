// watchdog.cpp
#include "repro/supervise/watchdog.h"

#include <cstdio>
#include <sstream>

#include "math_sdpa/stage.h"

namespace sdpa {

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
  if (f.size() != 4 || (f[0] != "B" && f[0] != "E") || !parse_stage(f[1], stage) || !parse_int(f[2], t)) return false;
  if (f[0] == "B") {
    open_.emplace_back(f[1], now_us);
    records_.push_back({f[1], now_us, -1, f[3], ""});
    if (records_.size() > kFlightRecorderSize) records_.pop_front();
    return true;
  }
  for (auto it = open_.begin(); it != open_.end(); ++it) {
    if (it->first == f[1]) {
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

std::string HangMonitor::open_stage() const { return open_.empty() ? std::string() : open_.front().first; }

Expiry HangMonitor::check(int64_t now_us) const {
  Expiry e;
  if (!open_.empty()) {
    const double running = (now_us - open_.front().second) / 1e6;
    if (running > stage_timeout_s_) return {true, false, open_.front().first, running};
  }
  const double run = (now_us - start_us_) / 1e6;
  if (run_timeout_s_ > 0 && run > run_timeout_s_) return {true, true, open_stage(), run};
  return e;
}

std::string hang_report_text(const SupervisedOutcome& o, const std::string& configuration, double stage_timeout_s,
                             const std::string& classification) {
  std::ostringstream s;
  char buf[512];
  if (o.kind == SupervisedOutcome::hang) {
    if (o.expiry.whole_run) {
      std::snprintf(buf, sizeof buf, "repro: HANG: the run exceeded its --timeout (%.2f s); stage %s was running\n",
                    o.expiry.running_s, o.stage.empty() ? "(none)" : o.stage.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "repro: HANG: stage %s did not finish within %.1f s (running for %.2f s)\n",
                    o.stage.c_str(), stage_timeout_s, o.expiry.running_s);
    }
  } else {
    std::snprintf(buf, sizeof buf, "repro: CRASH: %s (in stage %s)\n", o.message.c_str(),
                  o.stage.empty() ? "(none)" : o.stage.c_str());
  }
  s << buf;
  if (!classification.empty()) s << "  classification: " << classification << "\n";
  s << "  configuration: " << configuration << "\n";
  s << "  calls completed: " << o.calls_done << "\n";
  s << "  flight recorder (last " << o.records.size() << " stage records, oldest first):\n";
  s << "    stage          start_s  duration_ms  detail\n";
  for (const auto& r : o.records) {
    const double start = (r.start_us - o.start_us) / 1e6;
    std::string duration = r.end_us < 0 ? "RUNNING" : std::to_string((r.end_us - r.start_us) / 1000.0);
    if (r.end_us >= 0) duration.resize(duration.find('.') + 4);
    std::snprintf(buf, sizeof buf, "    %-13s %8.4f %12s  %s\n", r.stage.c_str(), start, duration.c_str(),
                  r.detail.substr(0, 160).c_str());
    s << buf;
  }
  if (!o.log_tail.empty()) {
    s << "  stage log tail:\n";
    for (const auto& line : o.log_tail) s << "    " << line << "\n";
  }
  return s.str();
}

}  // namespace sdpa
