// cmd_sweep.cpp: `repro sweep` (not implemented yet).
#include <iostream>

#include "commands.h"
#include "math_sdpa/errors.h"

namespace sdpa {

int sweep_main(int, char**) {
  std::cerr << "repro: error: 'repro sweep' is not implemented in this version\n";
  return kExitUsage;
}

}  // namespace sdpa
