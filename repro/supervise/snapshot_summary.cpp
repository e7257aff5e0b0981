// snapshot_summary.cpp: the summary of a hang snapshot, parsed out of the collectors' raw
// outputs, and the evidence lines a classification can use.
//
// The parsers read what the tools print (cuda-gdb 13's `info cuda kernels|warps|lanes` tables
// and gdb's `thread apply all bt`; /proc as the threads collector writes it; the kernel log),
// as captured on an H100 against live injected hangs (tests/fixtures/snapshot/). A line they
// do not recognise is skipped, never an error: the raw files stay in the folder for a person.
#include <algorithm>
#include <cctype>
#include <iterator>
#include <sstream>

#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"
#include "repro/common/text.h"
#include "repro/supervise/hang_snapshot.h"

namespace sdpa {

namespace {

const NameTable<CollectorState> kCollectorStates{"collector state",
                                                 {{CollectorState::ok, "ok"},
                                                  {CollectorState::timed_out, "timed_out"},
                                                  {CollectorState::failed, "failed"},
                                                  {CollectorState::skipped, "skipped"}}};

const NameTable<HostVerdict> kHostVerdicts{"host verdict",
                                           {{HostVerdict::blocked_in_kernel, "blocked_in_kernel"},
                                            {HostVerdict::waiting_in_cuda_call, "waiting_in_cuda_call"},
                                            {HostVerdict::spinning_in_user_space, "spinning_in_user_space"},
                                            {HostVerdict::sleeping, "sleeping"},
                                            {HostVerdict::unknown, "unknown"}}};

// The kernel log lines that concern the driver or a process stuck in it, most telling first: GPU
// exceptions (Xid), memory exhausted (the GB10 freeze begins with NVRM's NV_ERR_NO_MEMORY), the
// hung-task detector naming a task stuck in D state, unified memory (nvidia-uvm), the kernel's
// out-of-memory killer, then the resource manager's other lines (NVRM).
const char* const kDriverLogPatterns[] = {"Xid", "NV_ERR_NO_MEMORY", "blocked for more than", "nvidia-uvm", "nvidia_uvm",
                                          "Out of memory:", "oom-kill", "NVRM"};

// Where a line stands in kDriverLogPatterns; past the end when it matches none.
size_t driver_line_rank(const std::string& line) {
  size_t rank = 0;
  for (const char* pattern : kDriverLogPatterns) {
    if (line.find(pattern) != std::string::npos) return rank;
    ++rank;
  }
  return rank;
}

constexpr size_t kDriverLinesKept = 64;
constexpr size_t kDriverLinesInEvidence = 3;
constexpr size_t kKernelStackInEvidence = 3;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> tokens_of(const std::string& line) {
  std::vector<std::string> tokens;
  std::stringstream in(line);
  std::string token;
  while (in >> token) tokens.push_back(token);
  return tokens;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

bool parse_int(const std::string& s, int& out) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  out = std::stoi(s);
  return true;
}

// A table row of cuda-gdb: its fields, without the '*' that marks the focus.
std::vector<std::string> row_fields(const std::string& line) {
  std::string s = trimmed(line);
  if (!s.empty() && s[0] == '*') s = s.substr(1);
  return tokens_of(s);
}

// "Device 0 SM 124" and "Device 0 SM 124 Warp 1": the SM (and warp) a block of rows is about.
bool parse_device_heading(const std::string& line, int& sm, int& warp) {
  const auto t = tokens_of(line);
  if (t.size() < 4 || t[0] != "Device" || t[2] != "SM" || !parse_int(t[3], sm)) return false;
  warp = -1;
  if (t.size() >= 6 && t[4] == "Warp") parse_int(t[5], warp);
  return true;
}

// The end of the name in "NAME (args) from lib" or "NAME(sig) () at file:1": the first " ("
// outside template brackets and the name's own parentheses.
std::string function_name(const std::string& text) {
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') depth = std::max(0, depth - 1);
    if (depth == 0 && c == ' ' && i + 1 < text.size() && text[i + 1] == '(') return text.substr(0, i);
    if (depth == 0 && c == ' ' && (text.compare(i, 6, " from ") == 0 || text.compare(i, 4, " at ") == 0)) {
      return text.substr(0, i);
    }
  }
  return text;
}

// A signature without its argument list: "ns::f(int, char)" -> "ns::f".
std::string without_arguments(const std::string& signature) {
  if (signature.empty() || signature.back() != ')') return signature;
  int depth = 0;
  for (size_t i = signature.size(); i-- > 0;) {
    if (signature[i] == ')') ++depth;
    if (signature[i] == '(' && --depth == 0) return signature.substr(0, i);
  }
  return signature;
}

// "sdpa::(anonymous namespace)::spin_kernel(int const volatile*, ...)" -> "spin_kernel".
std::string short_name(const std::string& signature) {
  const std::string base = without_arguments(signature);
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i + 1 < base.size(); ++i) {
    if (base[i] == '<' || base[i] == '(') ++depth;
    if (base[i] == '>' || base[i] == ')') depth = std::max(0, depth - 1);
    if (depth == 0 && base[i] == ':' && base[i + 1] == ':') start = i + 2;
  }
  return base.substr(start);
}

// The driver API (cuStreamSynchronize), the runtime (cudaStreamSynchronize) and the libraries
// (cublasSgemmStridedBatched, cublasLtMatmul): a CUDA entry point by its name.
bool is_cuda_api(const std::string& name) {
  for (const char* prefix : {"cublasLt", "cublas", "cuda", "cu"}) {
    const size_t n = std::string(prefix).size();
    if (starts_with(name, prefix) && name.size() > n && std::isupper(static_cast<unsigned char>(name[n]))) return true;
  }
  return false;
}

// "3-17, 20, 124": SM numbers as ranges.
std::string sm_list(const std::vector<int>& sms) {
  std::string s;
  for (size_t i = 0; i < sms.size();) {
    size_t j = i;
    while (j + 1 < sms.size() && sms[j + 1] == sms[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(sms[i]) + (j > i ? "-" + std::to_string(sms[j]) : "");
    i = j + 1;
  }
  return s;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : separator) + item;
  return s;
}

// Where a thread in the kernel waits: its innermost kernel frame, else its wchan.
std::string kernel_place(const HostThread& t) {
  if (!t.kernel_stack.empty()) return t.kernel_stack.front();
  return t.wchan.empty() || t.wchan == "0" ? std::string("(unknown)") : t.wchan;
}

std::string thread_name(const HostThread& t) { return std::to_string(t.tid) + (t.comm.empty() ? "" : " (" + t.comm + ")"); }

}  // namespace

const char* collector_state_name(CollectorState state) { return kCollectorStates.name(state); }
CollectorState parse_collector_state(const std::string& text) { return kCollectorStates.parse(text); }
const char* host_verdict_name(HostVerdict verdict) { return kHostVerdicts.name(verdict); }
HostVerdict parse_host_verdict(const std::string& text) { return kHostVerdicts.parse(text); }

std::vector<int> sms_of_mask(const std::string& mask) {
  std::vector<int> sms;
  if (!starts_with(mask, "0x")) return sms;
  const std::string digits = mask.substr(2);
  for (size_t i = 0; i < digits.size(); ++i) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[i])));
    const int value = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (value < 0) return {};
    const int nibble = static_cast<int>(digits.size() - 1 - i);  // from the right
    for (int bit = 0; bit < 4; ++bit) {
      if (value & (1 << bit)) sms.push_back(nibble * 4 + bit);
    }
  }
  std::sort(sms.begin(), sms.end());
  return sms;
}

namespace {

// The table of cuda-gdb's output a line's rows belong to.
enum class DebuggerTable { none, kernels, warps, lanes };

// The table a line starts (its heading) or ends (a blank or another listing's line); nullopt
// for a row.
std::optional<DebuggerTable> debugger_table_heading(const std::string& t) {
  if (starts_with(t, "Kernel Parent Dev Grid Status")) return DebuggerTable::kernels;
  if (starts_with(t, "Wp Active Lanes Mask")) return DebuggerTable::warps;
  if (starts_with(t, "Ln") && t.find("State") != std::string::npos && t.find("PC") != std::string::npos) {
    return DebuggerTable::lanes;
  }
  if (starts_with(t, "BlockIdx") || starts_with(t, "Thread ") || t.empty()) return DebuggerTable::none;
  return std::nullopt;
}

}  // namespace

std::vector<ResidentKernel> parse_debugger_kernels(const std::string& text) {
  using Table = DebuggerTable;
  Table table = Table::none;
  std::vector<std::pair<int, ResidentKernel>> kernels;  // cuda-gdb's kernel number, the kernel
  std::vector<std::pair<int, std::string>> focus_functions;
  int focus_kernel = -1, sm = -1, warp = -1;
  auto kernel_numbered = [&](int number) -> ResidentKernel* {
    for (auto& [n, k] : kernels) {
      if (n == number) return &k;
    }
    return nullptr;
  };
  for (const std::string& line : lines_of(text)) {
    const std::string t = trimmed(line);
    // "[Switching focus to CUDA kernel 0, grid 23, ...]" and, next, "0x7f.. in FUNCTION<<<(1,1,1),(1,1,1)>>> ()".
    if (starts_with(t, "[Switching focus to CUDA kernel ") && t.find(',') != std::string::npos) {
      const std::string prefix = "[Switching focus to CUDA kernel ";
      if (!parse_int(t.substr(prefix.size(), t.find(',') - prefix.size()), focus_kernel)) focus_kernel = -1;
      continue;
    }
    const size_t launch = t.find("<<<");
    if (focus_kernel >= 0 && launch != std::string::npos && t.find(" in ") != std::string::npos) {
      const size_t in = t.find(" in ");
      focus_functions.emplace_back(focus_kernel, t.substr(in + 4, launch - in - 4));
      focus_kernel = -1;
      continue;
    }
    if (const std::optional<Table> heading = debugger_table_heading(t)) {
      table = *heading;
      continue;
    }
    if (parse_device_heading(t, sm, warp)) continue;
    const auto f = row_fields(t);
    int number = 0;
    if (table == Table::kernels && f.size() >= 9 && parse_int(f[0], number)) {
      ResidentKernel k;
      k.status = f[4];
      k.sms = sms_of_mask(f[5]);
      k.grid = f[6];
      k.block = f[7];
      std::vector<std::string> invocation(f.begin() + 8, f.end());
      k.function = join(invocation, " ");
      k.name = short_name(k.function);
      kernels.emplace_back(number, k);
    } else if (table == Table::warps && f.size() >= 7 && parse_int(f[0], warp) && parse_int(f[4], number)) {
      ResidentKernel* k = kernel_numbered(number);
      if (k && !k->warp) {
        k->warp = ResidentKernel::Warp{sm, warp, f[3], f[5], "", ""};
      }
    } else if (table == Table::lanes && f.size() >= 5 && parse_int(f[0], number)) {
      for (auto& [n, k] : kernels) {
        if (k.warp && k.warp->sm == sm && k.warp->warp == warp && k.warp->lane_state.empty()) {
          k.warp->lane_state = f[1];
          k.warp->exception = f[4];
        }
      }
    }
  }
  std::vector<ResidentKernel> out;
  for (auto& [number, k] : kernels) {
    for (const auto& [n, function] : focus_functions) {
      if (n == number) {
        k.function = function;  // with its parameter types, where the table has "()"
        k.name = short_name(function);
      }
    }
    out.push_back(k);
  }
  return out;
}

std::vector<HostThread> parse_debugger_threads(const std::string& text) {
  std::vector<HostThread> threads;
  for (const std::string& line : lines_of(text)) {
    // gdb: Thread 1 (Thread 0x7f.. (LWP 1148) "repro"):  or, unthreaded, Thread 1 (process 1148 "sleep"):
    if (starts_with(line, "Thread ") && !line.empty() && line.back() == ':') {
      HostThread t;
      for (const std::string marker : {"(LWP ", "(process "}) {
        const size_t at = line.find(marker);
        if (at == std::string::npos) continue;
        const size_t start = at + marker.size(), end = line.find_first_not_of("0123456789", start);
        parse_int(line.substr(start, end - start), t.tid);
        break;
      }
      const size_t close = line.rfind('"'), open = close == std::string::npos ? close : line.rfind('"', close - 1);
      if (open != std::string::npos) t.comm = line.substr(open + 1, close - open - 1);
      threads.push_back(t);
      continue;
    }
    if (threads.empty() || !starts_with(line, "#")) continue;
    std::string frame = trimmed(line.substr(line.find_first_of(" \t") == std::string::npos ? line.size() : line.find_first_of(" \t")));
    if (starts_with(frame, "0x")) {
      const size_t in = frame.find(" in ");
      if (in == std::string::npos) continue;
      frame = frame.substr(in + 4);
    }
    threads.back().backtrace.push_back(function_name(frame));
  }
  for (HostThread& t : threads) {
    int innermost = -1, outermost = -1;
    for (size_t i = 0; i < t.backtrace.size(); ++i) {
      if (!is_cuda_api(t.backtrace[i])) continue;
      if (innermost < 0) innermost = static_cast<int>(i);
      outermost = static_cast<int>(i);
    }
    if (innermost < 0) continue;
    t.cuda_call = t.backtrace[static_cast<size_t>(innermost)];
    t.called_as = t.backtrace[static_cast<size_t>(outermost)];
    if (static_cast<size_t>(outermost) + 1 < t.backtrace.size()) t.caller = t.backtrace[static_cast<size_t>(outermost) + 1];
  }
  return threads;
}

std::vector<HostThread> parse_thread_states(const std::string& text) {
  std::vector<HostThread> threads;
  for (const std::string& line : lines_of(text)) {
    // "== tid 1148 comm=repro wchan=0", then "State:\tR (running)", then "[<0>] frame+0x3e/0xa0" lines.
    if (starts_with(line, "== tid ")) {
      HostThread t;
      parse_int(line.substr(7, line.find(' ', 7) - 7), t.tid);
      const size_t comm = line.find(" comm="), wchan = line.rfind(" wchan=");
      if (comm != std::string::npos && wchan != std::string::npos && wchan > comm) {
        t.comm = line.substr(comm + 6, wchan - comm - 6);
        t.wchan = trimmed(line.substr(wchan + 7));
      }
      threads.push_back(t);
      continue;
    }
    if (threads.empty()) continue;
    if (starts_with(line, "State:")) {
      const std::string state = trimmed(line.substr(6));
      if (!state.empty()) threads.back().state = state[0];
    } else if (starts_with(line, "[<")) {
      std::string frame = trimmed(line.substr(line.find(']') + 1));
      frame = frame.substr(0, frame.find('+'));
      if (!frame.empty()) threads.back().kernel_stack.push_back(frame);
    }
  }
  return threads;
}

std::vector<std::string> parse_driver_lines(const std::string& kernel_log) {
  std::vector<std::string> out;
  for (const std::string& line : lines_of(kernel_log)) {
    if (driver_line_rank(line) < std::size(kDriverLogPatterns)) out.push_back(line);
  }
  return out;
}

void judge_host_threads(pid_t pid, const std::vector<HostThread>& states, const std::vector<HostThread>& backtraces,
                        SnapshotSummary& summary) {
  std::vector<HostThread> threads = states;
  for (const HostThread& b : backtraces) {
    auto same = std::find_if(threads.begin(), threads.end(), [&](const HostThread& t) { return t.tid == b.tid; });
    if (same == threads.end()) {
      threads.push_back(b);
      continue;
    }
    same->backtrace = b.backtrace;
    same->cuda_call = b.cuda_call;
    same->called_as = b.called_as;
    same->caller = b.caller;
    if (same->comm.empty()) same->comm = b.comm;
  }
  summary.thread_count = static_cast<int>(threads.size());
  summary.blocked_threads.clear();
  summary.main_thread.reset();
  for (const HostThread& t : threads) {
    if (t.tid == pid) summary.main_thread = t;
    if (t.state == 'D') summary.blocked_threads.push_back(t);
  }
  // The main thread first: it is the one that runs the path.
  std::stable_sort(summary.blocked_threads.begin(), summary.blocked_threads.end(),
                   [&](const HostThread& a, const HostThread& b) { return a.tid == pid && b.tid != pid; });
  const HostThread* main = summary.main_thread ? &*summary.main_thread : nullptr;
  if (!summary.blocked_threads.empty()) {
    const HostThread& t = summary.blocked_threads.front();
    summary.verdict = HostVerdict::blocked_in_kernel;
    summary.verdict_detail = "thread " + thread_name(t) + " in D state in " + kernel_place(t);
  } else if (main && !main->cuda_call.empty()) {
    summary.verdict = HostVerdict::waiting_in_cuda_call;
    summary.verdict_detail = "main thread in " + main->cuda_call + (main->state == 'R' ? ", running (spinning in the call)" : "");
  } else if (main && main->state == 'R') {
    summary.verdict = HostVerdict::spinning_in_user_space;
    summary.verdict_detail = main->backtrace.empty() ? "main thread running (no backtrace: inside a CUDA call or not)"
                                                     : "main thread running outside any CUDA call, in " + main->backtrace.front();
  } else if (main && main->state != '?') {
    summary.verdict = HostVerdict::sleeping;
    summary.verdict_detail = std::string("main thread in state ") + main->state + " in " + kernel_place(*main);
  } else {
    summary.verdict = HostVerdict::unknown;
    summary.verdict_detail = "the threads' states could not be read";
  }
}

SnapshotSummary summarize_snapshot(const std::string& dir, pid_t pid, const std::vector<CollectorRun>& collectors) {
  SnapshotSummary s;
  auto text = [&](const char* file) { return read_file(dir + "/" + file).value_or(""); };
  const std::string debugger = text("debugger.txt");
  s.kernels = parse_debugger_kernels(debugger);
  s.debugger_saw_no_kernel = s.kernels.empty() && debugger.find("No CUDA kernels") != std::string::npos;
  judge_host_threads(pid, parse_thread_states(text("threads.txt")), parse_debugger_threads(debugger), s);
  const std::vector<std::string> before = parse_driver_lines(text("kernel-log.txt"));
  const std::vector<std::string> after = parse_driver_lines(text("kernel-log-after.txt"));
  s.driver_lines = before;
  for (const auto& line : after) {
    if (std::find(before.begin(), before.end(), line) == before.end()) {
      s.driver_lines.push_back(line);
      s.driver_lines_during.push_back(line);
    }
  }
  if (s.driver_lines.size() > kDriverLinesKept) s.driver_lines.erase(s.driver_lines.begin() + kDriverLinesKept, s.driver_lines.end());
  for (const CollectorRun& c : collectors) {
    if (c.name != "nvidia_smi") continue;
    s.nvidia_smi = c.state == CollectorState::ok ? std::string("answered")
                   : c.state == CollectorState::timed_out ? c.reason
                   : std::string(collector_state_name(c.state)) + ": " + c.reason;
  }
  return s;
}

HangEvidence hang_evidence(const SnapshotSummary& s) {
  HangEvidence e;
  for (const ResidentKernel& k : s.kernels) e.resident_kernels.push_back(k.name);
  for (const HostThread& t : s.blocked_threads) e.blocked_threads.push_back("thread " + thread_name(t) + " in D state in " + kernel_place(t));
  if (s.main_thread) e.host_call = s.main_thread->cuda_call;
  return e;
}

std::vector<std::string> snapshot_evidence(const SnapshotSummary& s) {
  std::vector<std::string> lines;
  for (const ResidentKernel& k : s.kernels) {
    std::string line = "kernel " + k.name + " resident on SM " + (k.sms.empty() ? std::string("?") : sm_list(k.sms)) +
                       " (grid " + k.grid + ", block " + k.block + ", " + k.status + ")";
    if (k.warp) {
      line += "; warp " + std::to_string(k.warp->warp) + " on SM " + std::to_string(k.warp->sm) + " at PC " + k.warp->pc +
              (k.warp->lane_state.empty() ? "" : ", lane " + k.warp->lane_state);
      if (!k.warp->exception.empty() && k.warp->exception != "None") line += ", exception " + k.warp->exception;
    }
    lines.push_back(line);
  }
  if (s.debugger_saw_no_kernel) lines.push_back("no kernel resident on the GPU (cuda-gdb listed none)");
  if (s.main_thread && !s.main_thread->cuda_call.empty()) {
    const HostThread& m = *s.main_thread;
    std::string line = "main thread (tid " + std::to_string(m.tid) + ") in " + m.cuda_call;
    if (m.called_as != m.cuda_call || !m.caller.empty()) {
      line += " (called as " + m.called_as + (m.caller.empty() ? "" : " from " + without_arguments(m.caller)) + ")";
    }
    if (m.state != '?') line += std::string(", state ") + m.state;
    lines.push_back(line);
  } else if (s.verdict != HostVerdict::blocked_in_kernel && s.verdict != HostVerdict::unknown) {
    lines.push_back(s.verdict_detail);
  }
  for (const HostThread& t : s.blocked_threads) {
    std::vector<std::string> top(t.kernel_stack.begin(),
                                 t.kernel_stack.begin() + static_cast<long>(std::min(t.kernel_stack.size(), kKernelStackInEvidence)));
    lines.push_back("thread " + thread_name(t) + " in D state in " + kernel_place(t) +
                    (top.size() > 1 ? " (kernel stack: " + join(top, " < ") + ")" : ""));
  }
  // The most telling driver lines, each message once (the same line logged at several times),
  // saying when: a line the snapshot's own tools may have caused must not read as the hang's cause.
  struct DriverMessage {
    std::string text;
    bool before_snapshot = false, during_snapshot = false;
  };
  std::vector<DriverMessage> messages;
  for (const std::string& line : s.driver_lines) {
    const bool stamped = !line.empty() && line[0] == '[' && line.find(']') != std::string::npos;
    const std::string message = trimmed(stamped ? line.substr(line.find(']') + 1) : line);
    const bool during = std::find(s.driver_lines_during.begin(), s.driver_lines_during.end(), line) != s.driver_lines_during.end();
    auto same = std::find_if(messages.begin(), messages.end(), [&](const DriverMessage& m) { return m.text == message; });
    if (same == messages.end()) same = messages.insert(messages.end(), DriverMessage{message});
    (during ? same->during_snapshot : same->before_snapshot) = true;
  }
  std::stable_sort(messages.begin(), messages.end(), [](const DriverMessage& a, const DriverMessage& b) {
    return driver_line_rank(a.text) < driver_line_rank(b.text);
  });
  for (size_t i = 0; i < messages.size() && i < kDriverLinesInEvidence; ++i) {
    const DriverMessage& m = messages[i];
    lines.push_back("kernel log: " + m.text +
                    (!m.during_snapshot  ? ""
                     : m.before_snapshot ? " (logged before the snapshot and again while it ran)"
                                         : " (logged while the snapshot ran)"));
  }
  if (messages.size() > kDriverLinesInEvidence) {
    lines.push_back("kernel log: " + std::to_string(s.driver_lines.size()) + " driver lines in all since the run started");
  }
  if (!s.nvidia_smi.empty() && s.nvidia_smi != "answered" && !starts_with(s.nvidia_smi, "skipped")) {
    lines.push_back("nvidia-smi " + s.nvidia_smi);
  }
  return lines;
}

}  // namespace sdpa
