// cmd_info.cpp: `repro info` and `repro --version` (not implemented yet).
#include <iostream>

#include "commands.h"
#include "math_sdpa/errors.h"
#include "version.h"

namespace sdpa {

int info_main(int, char**) {
  std::cerr << "repro: error: 'repro info' is not implemented in this version\n";
  return kExitUsage;
}

int version_main(int, char**) {
  std::cout << "repro (sdpa-repro) " << kHarnessVersion << " commit " << kGitCommit << "\n";
  return 0;
}

}  // namespace sdpa
