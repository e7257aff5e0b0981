// snapshot_collectors.cpp: the collectors of a hang snapshot.
//
// Two kinds, both child processes that the caller never waits for beyond their bound:
//   - tools (cuda-gdb or gdb, nvidia-smi, nvidia-bug-report.sh), found by absolute path and run
//     with an argument vector in the snapshot folder, output and errors into one file;
//   - readers of /proc, /sys and /dev/kmsg, forked: reading the files of a process stuck in the
//     driver (its environment needs its memory-map lock) or of a wedged driver's procfs can
//     block the reader, and a blocked child is abandoned where a blocked supervisor would hang.
// A reader reports its state, reason and files through a pipe, as one line.
#include "repro/supervise/snapshot_collectors.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "repro/common/text.h"
#include "repro/supervise/child_process.h"

namespace sdpa {

namespace {

constexpr double kCollectorKillWaitS = 1.0;    // after SIGKILL, before a collector is abandoned
constexpr size_t kReaderPayloadBytes = 60000;  // below a pipe's capacity: the reader never blocks on it
constexpr size_t kKernelLogBytes = 1 << 20;
constexpr int64_t kKernelLogSlackUs = 1000000;  // the kernel log's clock and CLOCK_MONOTONIC may differ a little
constexpr int kCapSysPtrace = 19;

std::string seconds_text(double s) { return format_number("%.1f", s); }

// A whole file by open/read, for /proc and /sys files (whose size reads as 0); the error when it cannot be read.
std::optional<std::string> read_special(const std::string& path, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = std::strerror(errno);
    return std::nullopt;
  }
  std::string text;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  if (n < 0) error = std::strerror(errno);
  ::close(fd);
  if (n < 0) return std::nullopt;
  return text;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::vector<std::string> entries_of(const std::string& folder, std::string& error) {
  std::vector<std::string> names;
  DIR* d = opendir(folder.c_str());
  if (!d) {
    error = std::strerror(errno);
    return names;
  }
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // numeric order for thread ids
  });
  return names;
}

std::string one_field(std::string s) {
  for (char& c : s) c = (c == '\t' || c == '\n' || c == '\r') ? ' ' : c;
  return s;
}

struct ReaderResult {
  CollectorState state = CollectorState::ok;
  std::string reason;
  std::vector<std::string> files;
  std::string payload;  // text for the caller (kernel_stacks_of)
};

// Runs `read` in a forked child for at most bound_s. The child's result comes back through a
// pipe: "state TAB reason TAB file,file" on the first line, then the payload.
CollectorRun run_reader(const std::string& name, double bound_s, const std::function<ReaderResult()>& read,
                        std::string* payload = nullptr) {
  CollectorRun run;
  run.name = name;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    run.state = CollectorState::failed;
    run.reason = std::string("cannot create a pipe: ") + std::strerror(errno);
    return run;
  }
  ChildSpec spec;
  spec.body = [&] {
    ReaderResult r;
    try {
      r = read();
    } catch (const std::exception& e) {
      r.state = CollectorState::failed;
      r.reason = e.what();
    }
    std::string files;
    for (const auto& f : r.files) files += (files.empty() ? "" : ",") + f;
    const std::string message = std::string(collector_state_name(r.state)) + "\t" + one_field(r.reason) + "\t" + files + "\n" +
                                r.payload.substr(0, kReaderPayloadBytes);
    (void)!::write(fds[1], message.data(), message.size());
    return 0;
  };
  spec.stdin_fd = spec.stdout_fd = spec.stderr_fd = kNullStream;
  spec.close_in_child = {fds[0]};
  spec.own_process_group = true;
  const int64_t start = monotonic_us();
  pid_t pid = -1;
  try {
    pid = start_child(spec);
  } catch (const InputError& e) {
    ::close(fds[0]);
    ::close(fds[1]);
    run.state = CollectorState::failed;
    run.reason = e.what();
    return run;
  }
  ::close(fds[1]);
  int status = 0;
  if (!reap_within(pid, bound_s, status)) {
    const bool reaped = stop_child(pid, true, 0, kCollectorKillWaitS, status);
    run.state = CollectorState::timed_out;
    run.reason = "did not end within " + seconds_text(bound_s) + " s" +
                 (reaped ? "" : "; still there after SIGKILL (stuck in the kernel reading a file), left behind");
  } else {
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    std::string text;
    char buf[8192];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    const std::string head = first_line(text);
    std::vector<std::string> fields;
    std::stringstream in(head);
    std::string field;
    while (std::getline(in, field, '\t')) fields.push_back(field);
    if (fields.empty()) {
      run.state = CollectorState::failed;
      run.reason = "the reader ended with exit " + std::to_string(exit_code_of(status)) + " and no result";
    } else {
      run.state = parse_collector_state(fields[0]);
      if (fields.size() > 1) run.reason = fields[1];
      if (fields.size() > 2) {
        std::stringstream files(fields[2]);
        while (std::getline(files, field, ',')) run.files.push_back(field);
      }
      if (payload && text.size() > head.size()) *payload = text.substr(head.size() + 1);
    }
  }
  ::close(fds[0]);
  run.seconds = (monotonic_us() - start) / 1e6;
  return run;
}

// Runs a tool (absolute path) with its output and errors in dir/file, for at most bound_s.
CollectorRun run_tool(const std::string& name, const std::string& tool, const std::vector<std::string>& args,
                      const std::string& file, double bound_s, const std::string& dir) {
  CollectorRun run;
  run.name = name;
  run.command = {tool};
  run.command.insert(run.command.end(), args.begin(), args.end());
  run.files = {file};
  const std::string out = dir + "/" + file;
  ChildResult r;
  try {
    r = run_child(tool, args, out, out, bound_s, kCollectorKillWaitS, dir);
  } catch (const InputError& e) {
    run.state = CollectorState::failed;
    run.reason = e.what();
    return run;
  }
  run.seconds = r.wall_s;
  if (r.timed_out) {
    run.state = CollectorState::timed_out;
    run.reason = "did not answer within " + seconds_text(bound_s) + " s" +
                 (r.abandoned ? "; still there after SIGKILL (stuck in the driver), left behind" : "");
  } else if (r.exit_code != 0) {
    std::string last;
    std::stringstream lines(read_file(out).value_or(""));
    for (std::string line; std::getline(lines, line);) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    }
    run.state = CollectorState::failed;
    run.reason = "exit " + std::to_string(r.exit_code) + (last.empty() ? "" : ": " + last.substr(0, 200));
  } else {
    run.state = CollectorState::ok;
  }
  return run;
}

CollectorRun skipped(const std::string& name, const std::string& reason) {
  CollectorRun run;
  run.name = name;
  run.state = CollectorState::skipped;
  run.reason = reason;
  return run;
}

// Where a tool was looked for, in words: the default search is "PATH, ...", not PATH's every entry.
std::string join_dirs(const std::vector<std::string>& dirs) {
  if (dirs == default_tool_dirs()) return "PATH, /usr/local/cuda/bin or /usr/local/nvidia/bin";
  std::string s;
  for (const auto& d : dirs) s += (s.empty() ? "" : ":") + d;
  return s;
}

// The per-thread part of threads.txt for one process: "== tid N comm=C wchan=W", its State
// line, its kernel stack. `stack_error` is set when a stack could not be read.
std::string thread_states(const std::string& proc, const std::vector<std::string>& tids, std::string& stack_error) {
  std::string out;
  for (const auto& tid : tids) {
    const std::string task = proc + "/task/" + tid;
    std::string error;
    std::string comm = first_line(read_special(task + "/comm", error).value_or(""));
    const std::string wchan = first_line(read_special(task + "/wchan", error).value_or(""));
    std::string state = "State:\t?";
    std::stringstream status(read_special(task + "/status", error).value_or(""));
    for (std::string line; std::getline(status, line);) {
      if (line.compare(0, 6, "State:") == 0) state = line;
    }
    out += "== tid " + tid + " comm=" + comm + " wchan=" + (wchan.empty() ? "0" : wchan) + "\n" + state + "\n";
    std::string why;
    if (const auto stack = read_special(task + "/stack", why)) {
      out += *stack;
      if (!stack->empty() && stack->back() != '\n') out += "\n";
    } else {
      out += "stack: not readable (" + why + ")\n";
      stack_error = why;
    }
  }
  return out;
}

// CUDA_* and NVIDIA_* of a NUL-separated /proc/PID/environ: never the whole environment.
std::string cuda_environment(const std::string& environ_text) {
  std::string out;
  size_t start = 0;
  while (start < environ_text.size()) {
    size_t end = environ_text.find('\0', start);
    if (end == std::string::npos) end = environ_text.size();
    const std::string entry = environ_text.substr(start, end - start);
    if (entry.compare(0, 5, "CUDA_") == 0 || entry.compare(0, 7, "NVIDIA_") == 0) out += entry + "\n";
    start = end + 1;
  }
  return out;
}

bool can_trace_any_process() {
  if (geteuid() == 0) return true;
  std::string error;
  std::stringstream status(read_special("/proc/self/status", error).value_or(""));
  for (std::string line; std::getline(status, line);) {
    if (line.compare(0, 7, "CapEff:") != 0) continue;
    const unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caps >> kCapSysPtrace) & 1;
  }
  return false;
}

// Why a debugger may not attach to `pid`, or nothing. The target declared this process its
// ptracer (PR_SET_PTRACER), which Yama's default scope 1 asks of a process that is not an
// ancestor; scopes 2 and 3 need privilege or forbid it.
std::optional<std::string> ptrace_refusal(const CollectorContext& c) {
  std::string error;
  std::stringstream status(read_file(c.dir + "/status.txt").value_or(""));
  for (std::string line; std::getline(status, line);) {
    if (line.compare(0, 10, "TracerPid:") != 0) continue;
    const long tracer = std::strtol(line.c_str() + 10, nullptr, 10);
    if (tracer != 0) {
      return "the process is already traced by pid " + std::to_string(tracer) + " (a debugger or compute-sanitizer)";
    }
  }
  const auto scope_text = read_special("/proc/sys/kernel/yama/ptrace_scope", error);
  const int scope = scope_text ? std::atoi(scope_text->c_str()) : 0;
  if (scope >= 3) return std::string("ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3)");
  if (scope == 2 && !can_trace_any_process()) {
    return std::string("attaching needs root or CAP_SYS_PTRACE (kernel.yama.ptrace_scope = 2)");
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> default_tool_dirs() {
  std::vector<std::string> dirs;
  std::stringstream path(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string dir; std::getline(path, dir, ':');) {
    if (!dir.empty() && dir[0] == '/') dirs.push_back(dir);  // a relative entry would depend on the folder
  }
  dirs.insert(dirs.end(), {"/usr/local/cuda/bin", "/usr/local/nvidia/bin"});
  return dirs;
}

std::string find_tool(const std::string& name, const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

std::optional<KernelLogRecord> parse_kernel_log_record(const std::string& record) {
  const size_t semicolon = record.find(';');
  if (semicolon == std::string::npos) return std::nullopt;
  std::vector<std::string> header;
  std::stringstream fields(record.substr(0, semicolon));
  for (std::string f; std::getline(fields, f, ',');) header.push_back(f);
  if (header.size() < 3) return std::nullopt;
  KernelLogRecord r;
  r.sequence = std::atoll(header[1].c_str());
  r.microseconds = std::atoll(header[2].c_str());
  r.message = first_line(record.substr(semicolon + 1));
  return r;
}

bool kernel_log_record_in_run(const KernelLogRecord& r, const CollectorContext& c) {
  if (c.run_start_kernel_log_seq >= 0) return r.sequence > c.run_start_kernel_log_seq;
  return r.microseconds + kKernelLogSlackUs >= c.run_start_us;
}

namespace {

// Calls on_record with each record of /dev/kmsg still in the ring, oldest first, until it returns
// false; the open's error where the log cannot be read.
std::string for_each_kernel_log_record(const std::function<bool(const KernelLogRecord&)>& on_record) {
  const int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  char buf[8192];  // one record per read
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EPIPE || errno == EINTR)) continue;  // EPIPE: records overwritten meanwhile
    if (n <= 0) break;                                           // EAGAIN: the end
    const auto record = parse_kernel_log_record(std::string(buf, static_cast<size_t>(n)));
    if (record && !on_record(*record)) break;
  }
  ::close(fd);
  return "";
}

}  // namespace

int64_t kernel_log_last_sequence() {
  int64_t last = -1;
  const std::string error = for_each_kernel_log_record([&](const KernelLogRecord& r) {
    last = r.sequence;
    return true;
  });
  return error.empty() ? last : -1;
}

CollectorRun collect_kernel_log(const CollectorContext& c, const std::string& name, const std::string& file, double bound_s) {
  return run_reader(name, bound_s, [&] {
    ReaderResult r;
    std::string out;
    const std::string error = for_each_kernel_log_record([&](const KernelLogRecord& record) {
      if (kernel_log_record_in_run(record, c)) {
        char stamp[40];
        std::snprintf(stamp, sizeof stamp, "[%5lld.%06lld] ", static_cast<long long>(record.microseconds / 1000000),
                      static_cast<long long>(record.microseconds % 1000000));
        out += stamp + record.message + "\n";
      }
      return out.size() < kKernelLogBytes;
    });
    if (!error.empty()) {
      r.state = CollectorState::skipped;
      r.reason = "cannot read /dev/kmsg (" + error + "): the kernel log needs root or kernel.dmesg_restrict = 0";
      return r;
    }
    write_file_atomic(c.dir + "/" + file, out);
    r.files = {file};
    return r;
  });
}

CollectorRun collect_threads(const CollectorContext& c, double bound_s) {
  return run_reader("threads", bound_s, [&] {
    ReaderResult r;
    const std::string proc = "/proc/" + std::to_string(c.pid);
    std::string error, stack_error;
    const std::vector<std::string> tids = entries_of(proc + "/task", error);
    if (tids.empty()) {
      r.state = CollectorState::failed;
      r.reason = "cannot list " + proc + "/task (" + error + ")";
      return r;
    }
    write_file_atomic(c.dir + "/threads.txt", thread_states(proc, tids, stack_error));
    r.files.push_back("threads.txt");
    if (const auto status = read_special(proc + "/status", error)) {
      write_file_atomic(c.dir + "/status.txt", *status);
      r.files.push_back("status.txt");
    }
    // Its environment needs the process's memory-map lock: last, so a stuck read loses nothing else.
    if (const auto env = read_special(proc + "/environ", error)) {
      write_file_atomic(c.dir + "/environment.txt", cuda_environment(*env));
      r.files.push_back("environment.txt");
    }
    if (!stack_error.empty()) r.reason = "kernel stacks not readable (" + stack_error + "): they need root";
    return r;
  });
}

CollectorRun collect_debugger(const CollectorContext& c, double bound_s) {
  std::string tool = find_tool("cuda-gdb", c.tool_dirs);
  const bool cuda = !tool.empty();
  if (!cuda) tool = find_tool("gdb", c.tool_dirs);
  if (tool.empty()) return skipped("debugger", "neither cuda-gdb nor gdb found in " + join_dirs(c.tool_dirs));
  if (const auto refusal = ptrace_refusal(c)) return skipped("debugger", *refusal);
  // Batch mode detaches when the commands are done; -nx: no user init file changes the output.
  std::vector<std::string> args{"-p", std::to_string(c.pid), "-batch", "-nx"};
  if (cuda) {
    for (const char* command : {"info cuda kernels", "info cuda blocks", "info cuda warps", "info cuda lanes"}) {
      args.insert(args.end(), {"-ex", command});
    }
  }
  args.insert(args.end(), {"-ex", "thread apply all bt"});
  CollectorRun run = run_tool("debugger", tool, args, "debugger.txt", bound_s, c.dir);
  // A debugger killed while attached does not detach, and may leave the process stopped.
  ::kill(c.pid, SIGCONT);
  return run;
}

CollectorRun collect_tool(const CollectorContext& c, const std::string& name, const std::string& tool_name,
                          const std::vector<std::string>& args, const std::string& file, double bound_s) {
  const std::string tool = find_tool(tool_name, c.tool_dirs);
  if (tool.empty()) return skipped(name, tool_name + " not found in " + join_dirs(c.tool_dirs));
  return run_tool(name, tool, args, file, bound_s, c.dir);
}

CollectorRun collect_driver_files(const CollectorContext& c, const DriverFiles& what, double bound_s) {
  return run_reader(what.name, bound_s, [&] {
    ReaderResult r;
    std::string error;
    const std::vector<std::string> entries = entries_of(what.folder, error);
    if (entries.empty()) {
      r.state = CollectorState::skipped;
      r.reason = std::string("nothing in ") + what.folder + " (" + (error.empty() ? "empty" : error) + "): " + what.absent;
      return r;
    }
    std::string out;
    for (const auto& entry : entries) {
      const std::string path = std::string(what.folder) + "/" + entry + what.suffix;
      const std::string text = read_special(path, error).value_or("(not readable: " + error + ")\n");
      if (what.one_line_each) {
        out += entry + "=" + first_line(text) + "\n";
      } else {
        out += "== " + path + "\n" + text + (text.empty() || text.back() == '\n' ? "" : "\n");
      }
    }
    write_file_atomic(c.dir + "/" + what.file, out);
    r.files = {what.file};
    return r;
  });
}

CollectorRun collect_nvidia_bug_report(const CollectorContext& c, double bound_s) {
  const std::string tool = find_tool("nvidia-bug-report.sh", c.tool_dirs);
  if (tool.empty()) return skipped("nvidia_bug_report", "nvidia-bug-report.sh not found in " + join_dirs(c.tool_dirs));
  if (geteuid() != 0) return skipped("nvidia_bug_report", "nvidia-bug-report.sh needs root");
  CollectorRun run = run_tool("nvidia_bug_report", tool, {"--output-file", "nvidia-bug-report.log"},
                              "nvidia-bug-report.out", bound_s, c.dir);
  run.files.push_back("nvidia-bug-report.log.gz");
  return run;
}

std::vector<std::string> kernel_stacks_of(pid_t pid, double bound_s) {
  std::string payload;
  run_reader(
      "kernel_stacks", bound_s,
      [&] {
        ReaderResult r;
        const std::string proc = "/proc/" + std::to_string(pid);
        std::string error, stack_error;
        const auto tids = entries_of(proc + "/task", error);
        for (const HostThread& t : parse_thread_states(thread_states(proc, tids, stack_error))) {
          std::string line = "tid " + std::to_string(t.tid) + " (" + t.comm + ") " + std::string(1, t.state) + ":";
          for (size_t i = 0; i < t.kernel_stack.size(); ++i) line += (i ? " < " : " ") + t.kernel_stack[i];
          if (t.kernel_stack.empty()) line += " (no kernel stack" + (stack_error.empty() ? std::string() : ": " + stack_error) + ")";
          r.payload += line + "\n";
        }
        return r;
      },
      &payload);
  std::vector<std::string> lines;
  std::stringstream in(payload);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace sdpa
