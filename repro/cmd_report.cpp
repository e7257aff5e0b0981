// cmd_report.cpp: `repro report` (not implemented yet).
#include <iostream>

#include "commands.h"
#include "math_sdpa/errors.h"

namespace sdpa {

int report_main(int, char**) {
  std::cerr << "repro: error: 'repro report' is not implemented in this version\n";
  return kExitUsage;
}

}  // namespace sdpa
