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
               "attach",
               "repro triage"};
  use_help_format(app, "repro triage --out DIR [--budget 2h] [--workload-file capture/workload.json [--call N]] | --resume");
  TriageSettings t;
  std::string budget = "2h", workload_file, scenarios = scenario_list_text(default_triage_scenarios());
  int call = -1;
  bool no_bug_report = false, dry_run = false;
  app.add_option("--out", t.out_dir, "the triage's folder (OUT.tar.gz is written beside it)")->required()->option_text("DIR");
  app.add_option("--budget", budget,
                 "the whole triage's time; each step gets a share of what is left (with --resume: the time the "
                 "continuation may take, beyond what was spent)")
      ->option_text("TIME")
      ->capture_default_str();
  app.add_option("--workload-file", workload_file, "a capture of the real program (scripts/sdpa_capture.py): its call is "
                                                   "swept, and its process's context is the ladder's")
      ->option_text("FILE");
  app.add_option("--call", call, "the captured call (default 0)")->option_text("N");
  app.add_option("--scenarios", scenarios, "the scenarios to sweep and climb: N,N,.. or N-M (repro help scenarios)")
      ->option_text("LIST")
      ->capture_default_str();
  app.add_option("--runs", t.runs, "minimize's runs per configuration")->check(CLI::Range(1, 100))->option_text("N")->capture_default_str();
  app.add_option("--stage-timeout", t.stage_timeout_s, "every run's watchdog deadline per stage, seconds")
      ->check(CLI::Range(0.5, 3600.0))
      ->option_text("S")
      ->capture_default_str();
  app.add_flag("--no-bug-report", no_bug_report, "do not run nvidia-bug-report.sh (it takes a minute or more, as root)");
  app.add_option("--inject", t.inject,
                 "for testing the triage itself: a fault every run gets (--inject of a run); SUMMARY.md says so")
      ->option_text("FAULT");
  app.add_flag("--dry-run", dry_run,
               "print every step's command, each checked as its child would check it, and run nothing (no GPU needed)");
  bool resume = false;
  app.add_flag("--resume", resume,
               "continue the triage in --out DIR with its own options (and --budget, if given, for this "
               "continuation): steps that ended are kept; one cut at its share of the budget, interrupted, or killed "
               "goes on where it stopped; one that was running when the machine stopped (it booted since) is not run "
               "again and is named as where it stopped; one whose processes are still there is stuck: a hang");
  app.add_option("--repro-binary", t.repro_binary, "what info and every run run (tests)")->group("");
  app.footer("Exit codes: 0 nothing hung or failed, 1 a run failed without hanging, 3 a run hung (minimized and "
             "reported), 7 no usable GPU, 2 usage, 130/143 interrupted (summary and archive written). docs/TRIAGE.md has "
             "the steps and the archive.");
  ParseResult parsed;
  if (!parse_app(app, argc, argv, "repro triage", parsed)) {
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
      replay_call(load_workload_file(workload_file), std::max(call, 0));  // a bad file is refused before anything runs
      t.capture.workload_file = std::filesystem::absolute(workload_file).string();
      t.capture.call = std::max(call, 0);
    } else if (call >= 0) {
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
