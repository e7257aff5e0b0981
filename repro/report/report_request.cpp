// report_request.cpp: `repro report`'s command line, parsed into a ReportRequest and written back.
#include "repro/report/report_request.h"

#include <CLI/CLI.hpp>

#include "repro/cli/help_format.h"
#include "repro/common/text.h"

namespace sdpa {

std::vector<std::string> ReportRequest::to_argv() const {
  std::vector<std::string> args{"report"};
  const std::vector<std::string> options = run.to_argv();
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"--out", out_dir});
  if (repeat != 1) args.insert(args.end(), {"--repeat", std::to_string(repeat)});
  if (no_run) args.push_back("--no-run");
  if (force) args.push_back("--force");
  if (fix_form != "design") args.insert(args.end(), {"--fix-form", fix_form});
  if (ladder) args.push_back("--ladder");
  if (resume) args.push_back("--resume");
  if (allow_inject) args.push_back("--allow-inject");
  if (!repro_binary.empty()) args.insert(args.end(), {"--repro-binary", repro_binary});
  return args;
}

ReportParse parse_report_command_line(int argc, const char* const* argv) {
  ReportParse out;
  ReportRequest& r = out.request;
  CLI::App app{"repro report: a bug-report folder for NVIDIA. Runs the scenario with its own fix off and on (--repeat "
               "K times each, every run supervised as a plain run is, every call checked) and writes DIR/REPORT.md "
               "(the finding, the environment, the exact commands, expected and actual, how often, the hung stage, "
               "stage times, fix off/on), DIR/result.json, DIR/stage.log and DIR/repro_scenarioN.cu, a single-file "
               "reproducer. --no-run writes all of it without a GPU. The report decides the fixes, the checks and "
               "where every file goes, so it takes no --fix, --fixes, --check, --json, --save-output, --log-file, "
               "--snapshot-dir, --no-fork or --inputs.",
               "repro report"};
  use_help_format(app, "repro report --out DIR --scenario N [--repeat K] [--no-run] [run options]");
  app.footer("Exit codes: 0 the folder was written; 2 usage (nothing run, nothing written); 7 the folder was "
             "written but no run found a usable GPU.");
  app.option_defaults()->group("Report");
  app.add_option("--out", r.out_dir, "the report folder (must not exist, unless --force)")->required()->option_text("DIR");
  app.add_option("--repeat", r.repeat, "runs of each setting, fix off and fix on")
      ->check(CLI::Range(1, 1000))
      ->option_text("K")
      ->capture_default_str();
  app.add_flag("--no-run", r.no_run, "write what needs no GPU: the reproducer, the commands, the REPORT.md template");
  app.add_flag("--force", r.force, "replace the report in an existing --out folder");
  app.add_option("--fix-form", r.fix_form, "the fix-on runs' fix: as designed, or its lean form (docs/FIXES.md)")
      ->check(CLI::IsMember({"design", "lean"}))
      ->option_text("design|lean")
      ->capture_default_str();
  app.add_flag("--ladder", r.ladder,
               "climb the context ladder: the scenario isolated, then per-call allocation, layers with autograd's "
               "retention, a ballast, the model's mapped weights, a host load, steps, the backward pass (docs/CONTEXT.md); stop "
               "at the first rung that "
               "hangs or fails and report it. --layers, --ballast*, --mapped-weights, --host-load and --steps set their rungs' "
               "values");
  app.add_flag("--resume", r.resume,
               "with --ladder: go on from the rung an earlier climb into --out reached (its ladder.json; the rungs "
               "below it are not climbed again); without one, the climb starts at the first rung");
  app.add_option("--repro-binary", r.repro_binary, "the program each run runs (tests)")->group("");
  app.add_flag("--allow-inject", r.allow_inject,
               "for testing the report itself: let --inject through (refused otherwise); the title then says the "
               "fault was injected");
  RunOptionParser parser(app, RunCommand::report);
  ParseResult parsed;
  // The command line as parsed: a --workload-file call's derived options are every run's.
  if (!parser.parse(argc, argv, "repro report", parsed)) {
    out.exit_code = parsed.exit_code;
    out.message = parsed.message;
    return out;
  }
  r.run = parser.spec();
  out.words = parsed.words;
  out.run = true;
  return out;
}

}  // namespace sdpa
