// main.cpp: the `repro` executable: dispatches to a subcommand (commands.h), or runs one
// configuration when the first argument is an option.
#include <string>

#include "repro/commands.h"
#include "repro/supervise/hang_snapshot.h"

int main(int argc, char** argv) {
  using namespace sdpa;
  if (argc > 1) {
    const std::string command = argv[1];
    if (command == "report") return report_main(argc - 1, argv + 1);
    if (command == "sweep") return sweep_main(argc - 1, argv + 1);
    if (command == "bench") return bench_main(argc - 1, argv + 1);
    if (command == "info") return info_main(argc - 1, argv + 1);
    if (command == "hang-snapshot") return hang_snapshot_main(argc - 1, argv + 1);
    if (command == "--version" || command == "version") return version_main(argc - 1, argv + 1);
  }
  return run_main(argc, argv);
}
