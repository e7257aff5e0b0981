// process_mark.cpp: boot ids, /proc/PID/stat and /proc/PID/environ, read (process_mark.h).
#include "repro/supervise/process_mark.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "math_sdpa/errors.h"
#include "repro/common/text.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;

// What /proc/PID/stat says of a process: its state letter and its start time.
struct ProcStat {
  char state = '?';
  uint64_t start_ticks = 0;
  std::string name;
};

std::optional<ProcStat> proc_stat(int64_t pid) {
  const std::optional<std::string> text = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  // "PID (NAME) STATE PPID ...": the name may hold spaces and parentheses, so the fields are
  // counted from the last ')'; the state is field 3 and the start time field 22.
  const size_t open = text->find('('), close = text->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  std::istringstream fields(text->substr(close + 1));
  ProcStat s;
  s.name = text->substr(open + 1, close - open - 1);
  std::string field;
  for (int n = 3; fields >> field; ++n) {
    if (n == 3) s.state = field.empty() ? '?' : field[0];
    if (n == 22) {
      s.start_ticks = std::strtoull(field.c_str(), nullptr, 10);
      return s;
    }
  }
  return std::nullopt;
}

// A process that has exited (a zombie its new parent has not reaped yet, or one being reaped) is not there.
bool running(const ProcStat& s) { return s.state != 'Z' && s.state != 'X' && s.state != 'x'; }

// Whether the environment block `environment` (NUL-separated) carries `tag` in kProcessTagsVariable.
bool carries_tag(const std::string& environment, const std::string& tag) {
  const std::string prefix = std::string(kProcessTagsVariable) + "=";
  size_t at = 0;
  while (at < environment.size()) {
    size_t end = environment.find('\0', at);
    if (end == std::string::npos) end = environment.size();
    if (environment.compare(at, prefix.size(), prefix) == 0) {
      std::istringstream words(environment.substr(at + prefix.size(), end - at - prefix.size()));
      for (std::string word; words >> word;) {
        if (word == tag) return true;
      }
    }
    at = end + 1;
  }
  return false;
}

// The processes of `mark` running now: the marked one (by pid and start time) and every process
// that carries its tag, this one aside.
std::vector<std::string> marked_processes(const ProcessMark& mark) {
  std::vector<std::string> found;
  const int64_t self = getpid();
  auto describe = [](int64_t pid, const ProcStat& s) {
    return "pid " + std::to_string(pid) + " (" + s.name + ", state " + std::string(1, s.state) + ")";
  };
  if (mark.pid > 0 && mark.pid != self) {
    const std::optional<ProcStat> s = proc_stat(mark.pid);
    if (s && s->start_ticks == mark.start_ticks && running(*s)) found.push_back(describe(mark.pid, *s));
  }
  if (mark.tag.empty()) return found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int64_t pid = std::atoll(name.c_str());
    if (pid == self || pid == mark.pid) continue;
    // Another user's processes cannot be read, and are not the work's.
    const std::optional<std::string> environment = read_file(entry.path().string() + "/environ");
    if (!environment || !carries_tag(*environment, mark.tag)) continue;
    const std::optional<ProcStat> s = proc_stat(pid);
    if (s && running(*s)) found.push_back(describe(pid, *s));
  }
  return found;
}

std::string random_tag() {
  std::random_device device;
  std::uniform_int_distribution<uint32_t> word;
  char text[40];
  std::snprintf(text, sizeof text, "%08x%08x%08x%08x", word(device), word(device), word(device), word(device));
  return text;
}

}  // namespace

nlohmann::json ProcessMark::to_json() const {
  return {{"boot_id", boot_id}, {"pid", pid}, {"start_ticks", start_ticks}, {"tag", tag}};
}

std::optional<ProcessMark> ProcessMark::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  try {
    ProcessMark m;
    m.boot_id = j.at("boot_id").get<std::string>();
    m.pid = j.at("pid").get<int64_t>();
    m.start_ticks = j.at("start_ticks").get<uint64_t>();
    m.tag = j.at("tag").get<std::string>();
    return m;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::string current_boot_id() {
  if (const char* test = std::getenv(kTestBootIdVariable); test && *test) return test;
  std::string id = read_file("/proc/sys/kernel/random/boot_id").value_or("");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

ProcessMark new_process_mark() {
  ProcessMark m;
  m.boot_id = current_boot_id();
  m.tag = random_tag();
  return m;
}

void mark_started(ProcessMark& mark, pid_t pid) {
  mark.pid = pid;
  const std::optional<ProcStat> s = proc_stat(pid);
  mark.start_ticks = s ? s->start_ticks : 0;
}

ProcessMark this_process_mark() {
  ProcessMark m;
  m.boot_id = current_boot_id();
  mark_started(m, getpid());
  return m;
}

std::pair<std::string, std::string> process_tag_environment(const ProcessMark& mark) {
  const char* carried = std::getenv(kProcessTagsVariable);
  const std::string tags = carried && *carried ? std::string(carried) + " " + mark.tag : mark.tag;
  return {kProcessTagsVariable, tags};
}

std::string ProcessFinding::processes_text() const {
  std::string text;
  for (const std::string& p : processes) text += (text.empty() ? "" : ", ") + p;
  return text;
}

ProcessFinding find_marked_processes(const ProcessMark& mark, double grace_s) {
  ProcessFinding f;
  // Without a boot id on either side nothing says the machine stopped; the processes still tell.
  const std::string boot = current_boot_id();
  if (!mark.boot_id.empty() && !boot.empty() && mark.boot_id != boot) {
    f.fate = ProcessFate::machine_stopped;
    return f;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  for (;;) {
    f.processes = marked_processes(mark);
    if (f.processes.empty()) {
      f.fate = ProcessFate::gone;
      return f;
    }
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  f.fate = ProcessFate::still_there;
  return f;
}

void refuse_if_running(const std::string& what, const nlohmann::json& mark) {
  const std::optional<ProcessMark> m = ProcessMark::from_json(mark);
  if (!m) return;
  const ProcessFinding found = find_marked_processes(*m, 0);
  if (found.fate != ProcessFate::still_there) return;
  throw InputError("--resume: " + what + " is still running (" + found.processes_text() +
                   "): wait for it to end, or stop it first (kill " + std::to_string(m->pid) + ")");
}

}  // namespace sdpa
