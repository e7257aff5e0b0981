// cmd_triage.cpp: `repro triage`, its command line (triage.h does the work).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "math_sdpa/errors.h"
#include "repro/cli/help_format.h"
#include "repro/cli/run_options.h"
#include "repro/cli/workload_file.h"
#include "repro/commands.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "repro/triage/triage.h"
#include "scenarios/scenario.h"

namespace sdpa {

int triage_main(int argc, char** argv) {
  CLI::App app{"repro triage: the one command for a machine that hangs: the environment, a sweep of the scenarios, "
               "the context ladder for those that did not hang, the first hang minimized and reported, "
               "nvidia-bug-report.sh, and OUT.tar.gz with a SUMMARY.md of what hung, when, what fixes it and what to "
               "attach. With --workload-file, the captured call is swept and its process's context is the ladder's.",
               "repro triage"};
  use_help_format(app, "repro triage --out DIR [--budget 2h] [--workload-file capture/workload.json [--call N]] | --resume");
  TriageSettings t;
  std::string budget = "2h", workload_file, scenarios = scenario_list_text(default_triage_scenarios());
  int call = 0;
  bool no_bug_report = false, dry_run = false, resume = false;
  // The options are the table's (repro/cli/run_spec.h); --workload-file, --call, --stage-timeout
  // and --inject are its runs', with a run's range.
  CommandOptions options(app, RunCommand::triage);
  options.add("--out", t.out_dir)->required();
  options.add("--budget", budget);
  options.add("--workload-file", workload_file)->group("Triage");
  CLI::Option* call_opt = options.add("--call", call)->group("Triage");
  options.add("--scenarios", scenarios);
  options.add("--runs", t.runs);
  options.add("--stage-timeout", t.stage_timeout_s)->group("Triage");
  options.add("--no-bug-report", no_bug_report);
  options.add("--inject", t.inject)->group("Triage");
  options.add("--dry-run", dry_run);
  options.add("--resume", resume);
  options.add("--repro-binary", t.repro_binary);
  app.footer("Exit codes: 0 nothing hung or failed, 1 a run failed without hanging, 3 a run hung (minimized and "
             "reported), 9 a run stalled without hanging (a stage over the stall threshold, under its deadline), 7 no "
             "usable GPU, 2 usage, 130/143 interrupted (summary and archive written). docs/TRIAGE.md has the steps and "
             "the archive.");
  ParseResult parsed;
  if (!parse_app(app, argc, argv, "repro triage", parsed, &options)) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  try {
    check_not_empty("--out", t.out_dir);
    if (resume) {
      for (const char* option : {"--workload-file", "--call", "--scenarios", "--runs", "--stage-timeout", "--no-bug-report",
                                 "--inject", "--dry-run"}) {
        if (app.count(option)) {
          throw InputError(std::string("--resume continues the triage in --out with the options it started with: ") +
                           option + " is not one to give again");
        }
      }
      // --budget again: the time this continuation may take (a triage cut at its budget needs more).
      const std::optional<double> more =
          app.count("--budget") ? std::optional<double>(parse_duration(budget, "--budget")) : std::nullopt;
      TriageSettings resumed = resumed_settings(t.out_dir, more);
      resumed.repro_binary = t.repro_binary;
      return run_triage(resumed);
    }
    t.budget_s = parse_duration(budget, "--budget");
    if (!workload_file.empty()) {
      replay_call(load_workload_file(workload_file), call);  // a bad file is refused before anything runs
      t.capture.workload_file = std::filesystem::absolute(workload_file).string();
      t.capture.call = call;
    } else if (call_opt->count()) {
      throw InputError("--call: it selects from a --workload-file");
    }
    t.scenarios = parse_scenario_list(scenarios, "--scenarios");
    if (!t.inject.empty()) parse_fault_spec(t.inject);
    t.bug_report = !no_bug_report;
    if (dry_run) {
      check_dir_creatable("--out", t.out_dir);
      return print_triage_plan(t);
    }
    make_output_dir("--out", t.out_dir);
    if (std::filesystem::exists(std::filesystem::path(t.out_dir) / "SUMMARY.md") ||
        std::filesystem::exists(std::filesystem::path(t.out_dir) / "triage.json")) {
      throw InputError("--out " + t.out_dir + " holds a triage already: give another folder, or --resume to continue it");
    }
    return run_triage(t);
  } catch (const InputError& e) {
    std::cerr << "repro triage: error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
}

}  // namespace sdpa
