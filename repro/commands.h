// commands.h: repro's subcommands, each in its own file, dispatched by main.cpp.
//
//   repro [options]            run one configuration (cmd_run.cpp)
//   repro report [options]     a bug report folder for NVIDIA (cmd_report.cpp)
//   repro sweep [options]      a matrix of runs in isolated processes, as JSON (cmd_sweep.cpp)
//   repro bench [options]      timing with statistics and fix overheads (cmd_bench.cpp)
//   repro minimize [options]   a failing configuration made as small as it can be (cmd_minimize.cpp)
//   repro triage [options]     everything a bug needs, in one command and one archive (cmd_triage.cpp)
//   repro info [--json]        the environment block of a bug report (cmd_info.cpp)
//   repro help [TOPIC]         --help, the scenarios in full, or a command's --help (main.cpp)
//   repro -V, --version        version, commit, compiler, CUDA, architectures (cmd_info.cpp)
//   repro hang-snapshot ...    hidden: the --no-fork watchdog's hang snapshot (supervise/hang_snapshot.h)
//
// Any other first word that is not an option is an unknown command (exit 2, one line).
//
// Each takes argv with its own name first (argv[0] == "report") and returns the process exit
// code (math_sdpa/errors.h).
#pragma once

namespace sdpa {

int run_main(int argc, char** argv);
int report_main(int argc, char** argv);
int sweep_main(int argc, char** argv);
int bench_main(int argc, char** argv);
int minimize_main(int argc, char** argv);
int triage_main(int argc, char** argv);
int info_main(int argc, char** argv);
int version_main(int argc, char** argv);

}  // namespace sdpa
