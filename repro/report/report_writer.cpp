// report_writer.cpp: REPORT.md, result.json and stage.log from the report's runs.
//
// Every statement in the report is read from the runs' JSON results (run_json.cpp) or from
// the scenarios' own descriptions (scenarios/); nothing is measured or recomputed here.
#include "repro/report/report_writer.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "fixes/fix_list.h"
#include "math_sdpa/reference.h"
#include "math_sdpa/stats.h"
#include "repro/common/text.h"
#include "repro/report/hang_snapshot_section.h"
#include "repro/report/pytorch_equivalent.h"
#include "repro/report/reproducer/generator.h"
#include "repro/run/run_json.h"
#include "repro/supervise/child_process.h"
#include "scenarios/scenario.h"
#include "version.h"

namespace sdpa {

namespace {

using nlohmann::json;

constexpr size_t kFlightRecorderRows = 16;  // of the 64 the watchdog keeps: the stages before the hang

// What the report needs of one run, read from its JSON result.
struct RunView {
  const ReportRun* run = nullptr;
  int index = 0;                    // 1-based, in the order the runs ran
  std::optional<RunRecord> record;  // nullopt when the child wrote no result that reads as one
  Outcome outcome = Outcome::no_result;
  std::string stage;  // the hung stage, or the stage of the error
  std::string error;
  bool passed() const { return outcome == Outcome::pass; }
};

RunView view(const ReportRun& r, int index) {
  RunView v;
  v.run = &r;
  v.index = index;
  if (!r.result || !r.result->is_object()) {
    v.error = "the run wrote no result (exit " + std::to_string(r.exit_code) + ")";
    return v;
  }
  try {
    v.record = read_run_record(*r.result);
  } catch (const std::exception& e) {
    v.error = "the run's result does not read (" + one_line(e.what()) + "; exit " + std::to_string(r.exit_code) + ")";
    return v;
  }
  v.outcome = v.record->outcome;
  v.error = v.record->error.value_or("");
  v.stage = v.record->failing_stage().value_or("");
  return v;
}

std::vector<RunView> views(const ReportInput& in, std::optional<bool> fix_on = std::nullopt) {
  std::vector<RunView> out;
  for (size_t i = 0; i < in.runs.size(); ++i) {
    if (!fix_on || in.runs[i].fix_on == *fix_on) out.push_back(view(in.runs[i], static_cast<int>(i) + 1));
  }
  return out;
}

bool all_pass(const std::vector<RunView>& runs) {
  return !runs.empty() && std::all_of(runs.begin(), runs.end(), [](const RunView& v) { return v.passed(); });
}

// "hangs in softmax", "fails with a CUDA error in qk_gemm", ...
std::string verb(const RunView& v) {
  const std::string in_stage = v.stage.empty() ? "" : " in " + v.stage;
  switch (v.outcome) {
    case Outcome::hang: return "hangs" + in_stage;
    case Outcome::stalled: return "stalls" + in_stage + " in every call (under the deadline)";
    case Outcome::crash: return "crashes" + in_stage;
    case Outcome::cuda_error: return "fails with a CUDA error" + in_stage;
    case Outcome::mismatch: return "gives a wrong result (" + v.error + ")";
    case Outcome::waived: return "is waived on this GPU (" + v.error + ")";
    case Outcome::refused: return "is refused by the memory guard";
    case Outcome::no_gpu: return "cannot run (no usable CUDA GPU)";
    case Outcome::no_result: return "ends without a result";
    default: return std::string("ends with outcome ") + outcome_name(v.outcome);
  }
}

// The fix-off run that best shows the finding: the first hang, else the first failure.
const RunView* worst(const std::vector<RunView>& runs) {
  for (const auto& v : runs) {
    if (v.outcome == Outcome::hang) return &v;
  }
  for (const auto& v : runs) {
    if (!v.passed()) return &v;
  }
  return nullptr;
}

// "hung 3 of 5, pass 2 of 5"
std::string counts(const std::vector<RunView>& runs) {
  std::map<Outcome, int> n;
  std::vector<Outcome> order;
  for (const auto& v : runs) {
    if (n[v.outcome]++ == 0) order.push_back(v.outcome);
  }
  std::sort(order.begin(), order.end(), [](Outcome a, Outcome b) {
    return (a == Outcome::pass) < (b == Outcome::pass);  // failures first
  });
  std::string s;
  for (const Outcome o : order) {
    s += (s.empty() ? "" : ", ") + std::string(o == Outcome::hang ? "hung" : outcome_name(o)) + " " +
         std::to_string(n[o]) + " of " + std::to_string(runs.size());
  }
  return s.empty() ? "no runs" : s;
}

int fix_number(const ReportInput& in) { return scenario_info(in.fix_off.scenario).fix_number; }

std::string cell(const std::string& s) {  // a Markdown table cell
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

std::string code_block(const std::string& text) {
  std::string s = "```\n" + text;
  if (!s.empty() && s.back() != '\n') s += "\n";
  return s + "```\n";
}

std::string environment_section(const ReportInput& in) {
  std::ostringstream s;
  s << "## Environment\n\n";
  if (!in.environment) {
    s << "Not available: " << in.environment_error << "\n\n";
    return s.str();
  }
  if (in.no_run) {
    s << "From `repro info` on the machine that prepared this report (`--no-run`): it describes that machine, "
         "which need not be the affected one. Regenerate the report on the affected machine (without `--no-run`) so "
         "that this section describes where the runs ran.\n\n| | |\n|---|---|\n";
  } else {
    s << "From `repro info` on the machine the runs ran on.\n\n| | |\n|---|---|\n";
  }
  for (const auto& [label, value] : environment_lines(*in.environment)) s << "| " << label << " | " << cell(value) << " |\n";
  s << "\n";
  return s.str();
}

std::string commands_section(const ReportInput& in) {
  const int n = in.fix_off.scenario;
  std::ostringstream s;
  s << "## Exact commands\n\n"
    << "The harness (the attached `repro` binary; every run is a supervised child process whose watchdog names a "
       "hung stage):\n\n"
    << "    " << display_command(in.args_off) << "\n"
    << "    " << display_command(in.args_on) << "\n\n";
  if (in.no_run) {
    std::vector<std::string> run_it;
    for (const auto& a : in.report_argv) {
      if (a != "--no-run") run_it.push_back(a);
    }
    s << "Not run yet (`--no-run`). On the affected machine, `" << display_command(run_it) << "` (with `--force` "
      << "to replace this folder) runs them and fills in the results.\n\n";
  } else {
    s << "Each ran " << in.repeat << " time(s), fix on first and then fix off (so that a GPU left unusable by a "
      << "hang cannot pass for a failing fix), each adding `--json FILE`, `--log-file run-N.log` (kept unless the run "
      << "passed) and `--snapshot-dir hang-snapshot-run-N`; `result.json` holds every result and "
      << "`stage.log` every run's output. This report: `" << display_command(in.report_argv) << "`.\n\n";
  }
  s << "The single-file reproducer `" << reproducer_file_name(n) << "` (CUDA runtime and cuBLAS only; its first "
    << "comment says the same):\n\n"
    << "    " << reproducer_nvcc_command(n) << "\n"
    << "    " << reproducer_run_command(n, false) << "\n"
    << "    " << reproducer_run_command(n, true) << "\n\n"
    << "`-arch=native` builds for the GPU at hand; `-arch=sm_121` for DGX Spark (GB10), `-arch=sm_90` for H100. "
    << "`--timeout S` bounds a hung step (default 60 s: it prints `TIMEOUT: hung in <step>` and exits 3). Its "
    << "`result:` line has the l2, sum and elements of the result tensor, to compare with `result_stats` in "
    << "`result.json`.\n\n";
  return s.str();
}

std::string pytorch_section(const ReportInput& in) {
  const RunOptions& o = in.fix_off;
  std::ostringstream s;
  s << "## The same problem in PyTorch\n\n"
    << "The harness computes what this PyTorch call computes, stage for stage (PyTorch's "
    << "`_scaled_dot_product_attention_math`: upcast, Q and Kᵀ scaled by √scale, a batched GEMM, the mask, "
    << "`_safe_softmax`, dropout, a batched GEMM, the cast back). Where the hang is real, this call never returns "
    << "from the synchronisation:\n\n"
    << "```python\n" << pytorch_sdpa_snippet(o) << "```\n\n"
    << "The harness runs it on " << alloc_kind_name(o.conditions.alloc) << " memory under scenario " << o.scenario
    << "'s conditions (Preconditions, below); PyTorch's caching allocator uses `cudaMalloc`. To run the fix-off run's "
    << "call plan (`repro --plan --json`: its every step, the layers and the backward included) through PyTorch's own "
    << "kernels one stage at a time, on the run's memory (a synchronisation, a log line in the harness's `--log-format "
    << "sdpa-debug` tags and a watchdog after each; what PyTorch cannot express is said, one line each), from the "
    << "sdpa-repro source folder (it asks `build/repro` for the plan; `--repro ./repro` names the attached binary):\n\n"
    << "    " << shell_command(torch_stages_command(in.args_off)) << "\n\n"
    << "The same stage hanging in both confirms this reproducer; a hang in PyTorch only points to a condition the "
    << "harness lacks.\n\n";
  return s.str();
}

std::string preconditions_section(const ReportInput& in) {
  const ScenarioInfo& sc = scenario_info(in.fix_off.scenario);
  const FixInfo& fix = fix_info(sc.fix_number);
  const SdpaProblem& p = in.fix_off.problem;
  const PathSettings off = in.fix_off.settings, on = in.fix_on.settings;
  // The fix-on runs may use the fix's lean form (--fix-form lean): say which parts they applied.
  const std::string form = in.fix_on.fixes.form(sc.fix_number);
  const char* fix_on_word = form == "lean" ? "lean" : "on";
  std::string fix_form_text;
  if (form != "design") {
    for (FixPart part : in.fix_on.fixes.parts(sc.fix_number)) {
      const FixPartInfo& info = fix_part_info(part);
      fix_form_text += (fix_form_text.empty() ? "" : "; ") + ("`" + std::string(info.name) + "` (" + info.what + ")");
    }
    fix_form_text = "; the fix-on runs use its " + form + " form, only " + fix_form_text;
  }
  std::ostringstream s;
  s << "## Preconditions\n\n"
    << "- **Scenario " << sc.number << "**: " << sc.title << ".\n"
    << "- **Hypothesis**: " << sc.hypothesis << ".\n"
    << "- **Set up**: " << sc.setup << ".\n"
    << "- **Runs**: " << sc.runs << ".\n"
    << "- **Fix " << sc.fix_number << "** (`" << fix.name << "`, `--fix " << fix_on_word << "`): " << fix.what
    << fix_form_text << ".\n"
    << "- **Problem**: " << p.shape_string() << ", dtype " << dtype_name(p.dtype) << ", precision "
    << precision_name(p.precision) << ", mask " << mask_kind_name(p.mask) << ", dropout " << p.dropout_p
    << ", scale " << format_number("%.6g", p.softmax_scale()) << ", seed " << p.seed << ", " << in.fix_off.iters
    << " call(s) per run.\n"
    << "- **A hang looks like**: " << sc.hang_signature << ".\n\n";
  std::string pre;
  for (const auto& [name, value] : sc.preconditions) pre += (pre.empty() ? "" : ", ") + ("`" + name + "=" + value + "`");
  s << "What the scenario sets up: " << (pre.empty() ? "nothing" : pre) << ". The settings the runs used, where they "
    << "differ from a plain run (`settings` in `result.json`); the last column says what fix " << sc.fix_number
    << " changes:\n\n"
    << "| setting | fix off | fix on | changed by the fix |\n|---|---|---|---|\n";
  const auto plain = settings_fields(PathSettings{}), a = settings_fields(off), b = settings_fields(on);
  s << "| fixes | " << in.fix_off.fixes.str() << " | " << in.fix_on.fixes.str() << " | yes |\n";
  for (const auto& [name, value] : a) {
    if (value != plain.at(name) || b.at(name) != plain.at(name)) {
      s << "| " << name << " | " << value << " | " << b.at(name) << " | " << (value != b.at(name) ? "yes" : "") << " |\n";
    }
  }
  s << "\n";
  return s.str();
}

std::string expected_section(const ReportInput& in, const std::vector<RunView>& off, const std::vector<RunView>& on) {
  const SdpaProblem& p = in.fix_off.problem;
  const std::string tensor = result_tensor_name(in.fix_off.settings);
  std::ostringstream s;
  s << "## Expected and actual\n\n"
    << "- **Expected**: every run completes (exit 0) and its " << tensor << " tensor matches the float64 CPU "
    << "reference within " << format_number("%g", tolerance_for(p.dtype, p.precision)) << " (‖out − ref‖ / ‖ref‖), with fix "
    << fix_number(in) << " off and on.\n";
  if (in.no_run) {
    s << "- **Actual**: not run (`--no-run`).\n\n";
    return s.str();
  }
  auto actual = [&](const std::vector<RunView>& runs) {
    std::string t = counts(runs);
    std::vector<double> errors;
    for (const auto& v : runs) {
      if (v.record && v.record->rel_error) errors.push_back(*v.record->rel_error);
    }
    if (!errors.empty()) {
      t += "; rel_error " + format_number("%.3e", *std::min_element(errors.begin(), errors.end())) + " to " +
           format_number("%.3e", *std::max_element(errors.begin(), errors.end()));
    }
    return t;
  };
  s << "- **Actual, fix off**: " << actual(off) << ".\n"
    << "- **Actual, fix on**: " << actual(on) << ".\n";
  for (const auto& v : views(in)) {
    if (!v.passed()) {
      s << "- **First error**: run " << v.index << " (fix " << (v.run->fix_on ? "on" : "off") << "): `"
        << outcome_name(v.outcome) << "`" << (v.stage.empty() ? "" : " in stage `" + v.stage + "`") << ": " << v.error << ".\n";
      break;
    }
  }
  s << "\n";
  return s.str();
}

std::string how_often_section(const ReportInput& in, const std::vector<RunView>& off, const std::vector<RunView>& on) {
  std::ostringstream s;
  s << "## How often\n\n";
  if (in.no_run) {
    s << "Not run (`--no-run`). `--repeat K` runs each setting K times.\n\n";
    return s.str();
  }
  auto hung = [](const std::vector<RunView>& runs) {
    const auto n = std::count_if(runs.begin(), runs.end(), [](const RunView& v) { return v.outcome == Outcome::hang; });
    return "hung " + std::to_string(n) + " of " + std::to_string(runs.size()) + " runs";
  };
  s << "Fix off: " << hung(off) << " (" << counts(off) << "). Fix on: " << hung(on) << " (" << counts(on) << ").\n\n";
  return s.str();
}

// Every run with a stalled call, passing or not: a stage that took seconds and still finished is
// the investigation's symptom of a stuck migration, and may come before a hang.
std::string stalls_section(const ReportInput& in) {
  std::ostringstream rows;
  for (const auto& v : views(in)) {
    if (!v.record || !v.record->stalls) continue;
    const Stalls& st = *v.record->stalls;
    rows << "| " << v.index << " | " << (v.run->fix_on ? "on" : "off") << " | " << outcome_name(v.outcome) << " | `"
         << st.longest.stage << "` | " << format_number("%.1f", st.longest.ms) << " | " << st.calls_stalled << " of "
         << st.calls << " |\n";
  }
  if (rows.str().empty()) return "";
  std::ostringstream s;
  s << "## Stalls\n\n"
    << "Runs in which a stage took longer than the stall threshold (`--stall-threshold`, 1 s by default) and still "
    << "finished under the watchdog's deadline: the symptom of a page migration that was stuck for a while. A run "
    << "whose every call stalled ends as `stalled` (exit 9).\n\n"
    << "| run | fix | outcome | longest stall | ms | calls stalled |\n|---|---|---|---|---|---|\n"
    << rows.str() << "\n";
  return s.str();
}

std::string hang_section(const ReportInput& in) {
  std::ostringstream s;
  s << "## Hang\n\n";
  if (in.no_run) {
    s << "Not run (`--no-run`). A hang is reported with its stage, how long it ran, the flight recorder (the last "
         "stage records) and its classification: every scenario whose signature the hung stage fits, with what "
         "speaks for and against each from the conditions that were active.\n\n";
    return s.str();
  }
  const std::vector<RunView> all = views(in);
  const RunView* shown = nullptr;  // the first hang, else the first crash: both carry the watchdog's findings
  for (const auto& v : all) {
    if (v.outcome == Outcome::hang) {
      shown = &v;
      break;
    }
    if (!shown && v.outcome == Outcome::crash) shown = &v;
  }
  if (!shown) {
    s << "No run hung or crashed.";
    for (const auto& v : all) {
      if (!v.passed()) {
        s << " The first failure: run " << v.index << ", `" << outcome_name(v.outcome) << "`"
          << (v.stage.empty() ? "" : " in stage `" + v.stage + "`") << ": " << v.error << ".";
        break;
      }
    }
    s << "\n\n";
    return s.str();
  }
  const RunView& v = *shown;
  if (!v.record->watchdog) {
    s << "Run " << v.index << ": " << v.error << " (the run recorded no watchdog findings).\n\n";
    return s.str();
  }
  const WatchdogFindings& w = *v.record->watchdog;
  s << "Run " << v.index << " (fix " << (v.run->fix_on ? "on" : "off") << "): " << v.error << " (" << w.kind
    << " after " << format_number("%.2f", w.running_seconds) << " s in the stage).\n\n"
    << "- **Classification**: " << w.classification.value_or("") << ".\n"
    << "- **Stage**: `" << (v.stage.empty() ? "(none)" : v.stage) << "`.\n";
  for (const auto& c : w.candidates) s << "- **Candidate**: " << c << ".\n";
  s << "\n";
  const auto& records = w.flight_recorder;
  const size_t first = records.size() > kFlightRecorderRows ? records.size() - kFlightRecorderRows : 0;
  s << "Flight recorder (the last " << records.size() - first << " stage records, oldest first):\n\n"
    << "| stage | start_s | duration_ms | detail |\n|---|---|---|---|\n";
  for (size_t i = first; i < records.size(); ++i) {
    const auto& r = records[i];
    s << "| " << r.stage << " | " << format_number("%.4f", r.start_s) << " | "
      << (r.duration_ms ? format_number("%.3f", *r.duration_ms) : std::string("RUNNING")) << " | "
      << cell(r.detail.substr(0, 160)) << " |\n";
  }
  s << "\nStage log tail:\n\n";
  std::string tail;
  for (const auto& line : w.stage_log_tail) tail += line + "\n";
  s << code_block(tail.empty() ? "(empty)" : tail) << "\n";
  return s.str();
}

std::string stage_times_section(const ReportInput& in, const std::vector<RunView>& off, const std::vector<RunView>& on) {
  std::ostringstream s;
  s << "## Stage times\n\n";
  if (in.no_run) {
    s << "Not run (`--no-run`).\n\n";
    return s.str();
  }
  // Per stage, the median over the runs that completed of each run's own figure (ms): the first
  // call's time, and the median of calls 2..N.
  using Pick = std::vector<StageMedian> RunRecord::*;
  auto medians = [](const std::vector<RunView>& runs, Pick stages, std::optional<double> RunRecord::*call) {
    std::map<std::string, std::vector<double>> per_stage;
    for (const auto& v : runs) {
      if (!v.passed()) continue;
      for (const auto& st : (*v.record).*stages) per_stage[st.stage].push_back(st.median_ms);
      if (((*v.record).*call)) per_stage["call (GPU stages)"].push_back(*((*v.record).*call));
    }
    std::map<std::string, double> out;
    for (const auto& [stage, xs] : per_stage) out[stage] = median(xs);
    return out;
  };
  const auto off_first = medians(off, &RunRecord::first_call_stages, &RunRecord::first_call_ms);
  const auto off_steady = medians(off, &RunRecord::steady_stages, &RunRecord::steady_call_median_ms);
  const auto on_first = medians(on, &RunRecord::first_call_stages, &RunRecord::first_call_ms);
  const auto on_steady = medians(on, &RunRecord::steady_stages, &RunRecord::steady_call_median_ms);
  if (off_first.empty() && on_first.empty()) {
    s << "No run completed, so there are no stage times.\n\n";
    return s.str();
  }
  s << "Median over the runs that completed, ms (CUDA events; entry_sync and stream_sync on the host clock). The "
       "first call of a process is shown apart: it includes cuBLAS's and the driver's one-time set-up, which the "
       "steady state (the median of calls 2.." << in.fix_off.iters << ") does not.\n\n"
    << "| stage | fix off, first call | fix off, steady | fix on, first call | fix on, steady |\n|---|---|---|---|---|\n";
  std::vector<std::string> order;
  for (int i = 0; i < kStageCount; ++i) order.push_back(stage_name(static_cast<Stage>(i)));
  order.push_back("call (GPU stages)");
  for (const auto& stage : order) {
    const auto tables = {&off_first, &off_steady, &on_first, &on_steady};
    if (std::none_of(tables.begin(), tables.end(), [&](const auto* m) { return m->count(stage) > 0; })) continue;
    s << "| " << stage;
    for (const auto* m : tables) s << " | " << (m->count(stage) ? format_number("%.4f", m->at(stage)) : std::string("—"));
    s << " |\n";
  }
  s << "\n";
  return s.str();
}

std::string runs_section(const ReportInput& in) {
  std::ostringstream s;
  s << "## Fix off / fix on\n\n";
  if (in.no_run) {
    s << "| run | fix | outcome | exit | stage | rel_error | wall_s |\n|---|---|---|---|---|---|---|\n"
      << "| — | off | not run | — | — | — | — |\n| — | on | not run | — | — | — | — |\n\n";
    return s.str();
  }
  s << "Every run in the order it ran:\n\n| run | fix | outcome | exit | stage | rel_error | wall_s |\n"
    << "|---|---|---|---|---|---|---|\n";
  for (const auto& v : views(in)) {
    s << "| " << v.index << " | " << (v.run->fix_on ? "on" : "off") << " | " << outcome_name(v.outcome) << " | "
      << v.run->exit_code << " | " << (v.stage.empty() ? "—" : v.stage) << " | "
      << (v.record && v.record->rel_error ? format_number("%.3e", *v.record->rel_error) : std::string("—")) << " | " << format_number("%.2f", v.run->wall_s) << " |\n";
  }
  s << "\n";
  return s.str();
}

std::string bug_report_section(const ReportInput& in) {
  const int n = in.fix_off.scenario;
  std::ostringstream s;
  s << "## nvidia-bug-report.sh\n\n"
    << "NVIDIA asks for the driver's log with every bug. Collect it as root on the affected machine, best while a "
    << "hang is in progress: start the reproducer with a long timeout (`./repro_scenario" << n
    << " --timeout 900`, or the harness with `--stage-timeout 900`) and, once it is stuck, run from a second "
    << "terminal:\n\n"
    << "    sudo nvidia-bug-report.sh\n\n"
    << "It writes `nvidia-bug-report.log.gz` in the current directory. If it hangs itself (a wedged driver), run "
    << "`sudo nvidia-bug-report.sh --safe-mode`; add `--extra-system-data` when NVIDIA asks for more. Attach the "
    << "`.log.gz` with this folder.\n\n";
  return s.str();
}

}  // namespace

std::string display_command(const std::vector<std::string>& args) {
  std::vector<std::string> all{"./repro"};
  all.insert(all.end(), args.begin(), args.end());
  return shell_command(all);
}

std::string report_finding(const ReportInput& in) {
  if (in.no_run) return "not_run";
  const auto all = views(in);
  // The machine, not the scenario, decided: no GPU, a waiver, or a memory plan past what it has.
  for (const Outcome everywhere : {Outcome::no_gpu, Outcome::waived, Outcome::refused}) {
    if (!all.empty() &&
        std::all_of(all.begin(), all.end(), [&](const RunView& v) { return v.outcome == everywhere; })) {
      return outcome_name(everywhere);
    }
  }
  // Where only some runs were decided by the machine, they say nothing of the scenario: the
  // finding is that of the runs that ran (a GPU lost after a hang does not make a pass a failure).
  const auto machine_decided = [](const RunView& v) {
    return v.outcome == Outcome::no_gpu || v.outcome == Outcome::waived || v.outcome == Outcome::refused;
  };
  const auto ran = [&](std::vector<RunView> runs) {
    runs.erase(std::remove_if(runs.begin(), runs.end(), machine_decided), runs.end());
    return runs;
  };
  const auto off = ran(views(in, false)), on = ran(views(in, true));
  if (off.empty() || on.empty()) {  // one side never ran: nothing to compare
    const auto first = std::find_if(all.begin(), all.end(), machine_decided);
    return first == all.end() ? "not_run" : outcome_name(first->outcome);
  }
  // Passes under a condition that cannot show the hypothesis (scenario 2 on warp rows) prove nothing.
  if (all_pass(off) && all_pass(on) && !in.fix_off.caveats.empty()) return "not_exercised";
  if (all_pass(off)) return all_pass(on) ? "not_reproduced" : "fix_fails";
  const RunView* w = worst(off);
  if (w && w->outcome == Outcome::stalled) return "stalled";
  return w && w->outcome == Outcome::hang ? "hang" : "failure";
}

bool finding_ends_climb(const std::string& finding) {
  return finding == "hang" || finding == "stalled" || finding == "failure" || finding == "refused";
}

std::vector<LadderRung> ladder_rungs(const ContextLadderValues& v) {
  std::vector<LadderRung> rungs;
  for (const ContextRung& r : context_ladder(v)) rungs.push_back({r.name, r.adds, "", "", ""});
  return rungs;
}

namespace {

// The title of a report of one configuration.
std::string configuration_title(const ReportInput& in);

}  // namespace

std::string report_title(const ReportInput& in) {
  const std::string title = configuration_title(in);
  if (in.ladder.empty() || in.no_run) return title;
  const LadderRung& last = in.ladder.back();
  std::string below;
  for (size_t i = 0; i + 1 < in.ladder.size(); ++i) below += (below.empty() ? "" : ", ") + in.ladder[i].name;
  if (finding_ends_climb(last.finding)) {
    return title + ", at rung " + last.name + " of the context ladder" +
           (below.empty() ? std::string(" (its first)") : " (rungs below it pass: " + below + ")");
  }
  return title + "; at every rung of the context ladder (" + below + (below.empty() ? "" : ", ") + last.name + ")";
}

namespace {

std::string configuration_title(const ReportInput& in) {
  const int n = in.fix_off.scenario, fix = fix_number(in);
  // A report of an injected fault (repro report --allow-inject) must never read as a finding.
  const std::string scenario = (in.fix_off.inject.kind != FaultSpec::none
                                    ? "[injected " + fault_spec_string(in.fix_off.inject) + ": a test of the report] "
                                    : std::string()) +
                               "Scenario " + std::to_string(n);
  const auto off = views(in, false), on = views(in, true);
  const std::string finding = report_finding(in);
  if (finding == "not_run") return scenario + " (" + scenario_info(n).title + "): not run (report prepared with --no-run)";
  if (finding == "no_gpu") return scenario + ": not run on this machine (no usable CUDA GPU)";
  if (finding == "waived") return scenario + ": waived on this machine (" + off.front().error + ")";
  if (finding == "refused") return scenario + ": refused by the memory guard on this machine (" + off.front().error + ")";
  if (finding == "not_exercised") {
    return scenario + ": not exercised (fix off: " + counts(off) + "; fix on: " + counts(on) + "): " + in.fix_off.caveats.front();
  }
  if (finding == "not_reproduced") {
    return scenario + ": not reproduced on this machine (fix off: " + counts(off) + "; fix on: " + counts(on) + ")";
  }
  if (finding == "fix_fails") {
    return scenario + ": not reproduced with fix " + std::to_string(fix) + " off (" + counts(off) + "); with it on it " +
           verb(*worst(on)) + " (" + counts(on) + ")";
  }
  const RunView& w = *worst(off);
  std::string title = scenario + " " + verb(w);
  const std::string alloc = w.record ? w.record->alloc : "";
  if (!alloc.empty() && (w.outcome == Outcome::hang || w.outcome == Outcome::stalled || w.outcome == Outcome::crash || w.outcome == Outcome::cuda_error ||
                         w.outcome == Outcome::mismatch)) {
    title += " on " + alloc + " memory";
  }
  if (all_pass(on)) return title + "; fix " + std::to_string(fix) + " clears it";
  return title + "; fix " + std::to_string(fix) + " does not clear it (fix on: " + counts(on) + ")";
}

// With --ladder: every rung, what it adds and what its runs found.
std::string ladder_section(const ReportInput& in) {
  if (in.ladder.empty()) return "";
  std::ostringstream s;
  s << "## Context ladder\n\n"
    << "The scenario's call, then the training process around it one condition at a time (docs/CONTEXT.md), each "
    << "rung run as this report runs a scenario (fix off and on, " << in.repeat << " run(s) each); the climb stops "
    << "at the first rung that hangs or fails, and this report is about the last rung climbed.\n\n"
    << "| rung | adds (cumulative) | layers run | finding | runs |\n|---|---|---|---|---|\n";
  for (const LadderRung& r : in.ladder) {
    s << "| " << r.name << " | `" << (r.options.to_argv().empty() ? std::string("(the call alone)") : display_command(r.options.to_argv()).substr(8))
      << "` | " << (r.layers.empty() ? std::string("-") : r.layers) << " | "
      << (r.finding.empty() ? std::string("not climbed") : r.finding) << " | " << r.outcomes << " |\n";
  }
  s << "\n";
  return s.str();
}

}  // namespace

std::string report_markdown(const ReportInput& in) {
  const ScenarioInfo& sc = scenario_info(in.fix_off.scenario);
  const auto off = views(in, false), on = views(in, true);
  std::ostringstream s;
  s << "# " << report_title(in) << "\n\n"
    << "Scenario " << sc.number << " of sdpa-repro (" << sc.title << "), with fix " << sc.fix_number << " off and "
    << "on; " << (in.no_run ? std::string("not run yet") : std::to_string(in.repeat) + " run(s) each") << ". Written by "
    << "`repro report` (sdpa-repro " << kHarnessVersion << ", commit " << kGitCommit << ") on " << in.created_utc
    << ".\n\n";
  s << environment_section(in) << commands_section(in) << pytorch_section(in) << preconditions_section(in)
    << ladder_section(in) << expected_section(in, off, on) << how_often_section(in, off, on) << stalls_section(in)
    << hang_section(in) << hang_snapshot_section(in)
    << stage_times_section(in, off, on) << runs_section(in)
    << bug_report_section(in);
  s << "## Files\n\n"
    << "- `REPORT.md`: this report.\n"
    << "- `result.json`: the environment, the commands and every run's full JSON result (configuration, device, "
       "outcome, per-stage times, GEMM calls, allocations, the watchdog's findings).\n"
    << "- `stage.log`: every run's output: the stage log (`--log " << log_level_name(in.fix_off.log)
    << "`), the result table and any hang report.\n"
    << "- `" << reproducer_file_name(in.fix_off.scenario) << "`: the single-file reproducer"
    << (in.ladder.empty() ? "" : " of the last rung climbed") << ", printed from the runs' call plan with every "
       "condition they had: it computes what they computed, bit for bit, on the same GPU.\n";
  return s.str();
}

json report_json(const ReportInput& in) {
  const int n = in.fix_off.scenario;
  json runs = json::array();
  for (const auto& v : views(in)) {
    runs.push_back({{"index", v.index},
                    {"fix", v.run->fix_on ? "on" : "off"},
                    {"repeat", v.run->repeat},
                    {"command", display_command(v.run->args)},
                    {"exit_code", v.run->exit_code},
                    {"outcome", outcome_name(v.outcome)},
                    {"wall_seconds", v.run->wall_s},
                    {"result", v.run->result ? *v.run->result : json(nullptr)}});
  }
  json j;
  j["meta"] = {{"format_version", kResultFormatVersion},
               {"kind", "report"},
               {"harness", "sdpa-repro"},
               {"harness_version", kHarnessVersion},
               {"git_commit", kGitCommit},
               {"command_line", in.report_argv}};
  j["report"] = {{"scenario", n},
                 {"fix", fix_number(in)},
                 {"title", report_title(in)},
                 {"finding", report_finding(in)},
                 {"repeat", in.repeat},
                 {"no_run", in.no_run},
                 {"created_utc", in.created_utc}};
  j["scenario"] = scenario_to_json(n);
  j["environment"] = in.environment ? environment_to_json(*in.environment) : json(nullptr);
  j["environment_error"] = in.environment ? json(nullptr) : json(in.environment_error);
  j["run_options"] = {{"fix_off", in.spec_off.to_json()}, {"fix_on", in.spec_on.to_json()}};
  j["commands"] = {{"fix_off", display_command(in.args_off)},
                   {"fix_on", display_command(in.args_on)},
                   {"reproducer_build", reproducer_nvcc_command(n)},
                   {"reproducer_fix_off", reproducer_run_command(n, false)},
                   {"reproducer_fix_on", reproducer_run_command(n, true)}};
  j["runs"] = runs;
  json ladder = json::array();
  for (const LadderRung& r : in.ladder) {
    ladder.push_back({{"rung", r.name},
                      {"options", r.options.to_argv()},
                      {"layers", r.layers.empty() ? json(nullptr) : json(r.layers)},
                      {"finding", r.finding},
                      {"outcomes", r.outcomes}});
  }
  j["ladder"] = in.ladder.empty() ? json(nullptr) : ladder;
  return j;
}

std::string report_stage_log(const ReportInput& in) {
  std::ostringstream s;
  s << "# stage.log: the output of every run of `" << display_command(in.report_argv)
    << "` (stdout and stderr: the stage log, the result table, any hang report), in the order they ran.\n";
  if (in.no_run) {
    s << "# Not run (--no-run).\n";
    return s.str();
  }
  for (const auto& v : views(in)) {
    s << "\n=== run " << v.index << " of " << in.runs.size() << ": fix " << (v.run->fix_on ? "on" : "off")
      << ", repeat " << v.run->repeat << " of " << in.repeat << ": " << display_command(v.run->args) << " (exit "
      << v.run->exit_code << ", " << format_number("%.2f", v.run->wall_s) << " s) ===\n"
      << v.run->output;
    if (!v.run->output.empty() && v.run->output.back() != '\n') s << "\n";
  }
  return s.str();
}

}  // namespace sdpa
