// report_request.h: `repro report`'s command line as one value: the scenario's run options and the
// report's own (where it goes, how often each setting runs, the context ladder). minimize and
// triage build these values to run a report, and `repro report` parses its command line into one;
// plan_report (cmd_report.cpp) makes every check the report makes before it runs anything.
#pragma once

#include <string>
#include <vector>

#include "repro/cli/run_options.h"

namespace sdpa {

struct ReportRequest {
  RunSpec run;               // the scenario's run options (those RunCommand::report takes)
  std::string out_dir;
  int repeat = 1;            // runs of each setting, fix off and fix on
  bool no_run = false;       // write what needs no GPU
  bool force = false;        // replace the report in an existing folder
  bool allow_inject = false;
  bool ladder = false;       // climb the context ladder
  bool resume = false;       // --ladder: go on from the rung an earlier climb into out_dir reached (ladder.json)
  std::string fix_form = "design";  // the fix-on runs' fix: design or lean
  std::string repro_binary;  // the program each run runs ("" this executable; tests: a fake)

  // `report` and its options: `repro` followed by them is the command.
  std::vector<std::string> to_argv() const;
};

struct ReportParse {
  bool run = false;
  int exit_code = 0;
  std::string message;               // the help text, or one error line
  ReportRequest request;
  std::vector<std::string> words;    // the command line as parsed (a replay's derived options in front)
};

// argv[0] is "report"; --help gives exit 0 and the help, a bad option exit 2 and one line.
ReportParse parse_report_command_line(int argc, const char* const* argv);

// Everything `repro report` checks before it runs anything (the options, the configuration the
// reproducer must hold, every rung of the ladder, the folder): throws InputError with the line the
// report would print. No file is written.
void validate_report(const ReportRequest& request);

}  // namespace sdpa
