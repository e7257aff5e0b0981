// cmd_bench.cpp: `repro bench` (not implemented yet).
#include <iostream>

#include "commands.h"
#include "math_sdpa/errors.h"

namespace sdpa {

int bench_main(int, char**) {
  std::cerr << "repro: error: 'repro bench' is not implemented in this version\n";
  return kExitUsage;
}

}  // namespace sdpa
