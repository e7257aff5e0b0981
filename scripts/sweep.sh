#!/usr/bin/env bash
# sweep.sh: builds repro and runs the matrix sweep, `repro sweep` (docs/SWEEPS.md). Paths are
# taken relative to the directory it is called from.
#
#   scripts/sweep.sh --out sweep-h100                 # the default matrix, 324 cells
#   scripts/sweep.sh --shard 2/4 --out shard-2        # one of four slices (then: build/repro sweep merge)
#   scripts/sweep.sh --scenarios 1,2 --fix off,on --repeats 3 --json s.json
#   scripts/sweep.sh --out sweep-h100 --resume        # continue an interrupted sweep
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(
  cd "$root"
  scripts/setup_deps.sh
  export PATH="$PATH:/usr/local/cuda/bin"
  cmake --preset dev
  cmake --build --preset dev -j "$(nproc)" --target repro
) >&2
exec "$root/build/repro" sweep "$@"
