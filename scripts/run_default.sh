#!/usr/bin/env bash
# run_default.sh: builds repro and runs the default scenario (the full Math SDPA path at the
# standalone test's shape (docs/SCENARIOS.md), bf16, managed memory), checked against the float64 reference.
#
#   scripts/run_default.sh [more repro options]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh
export PATH="$PATH:/usr/local/cuda/bin"
# Through ccache as test.sh builds: the folder this configures first is the one test.sh reuses.
source scripts/ccache_env.sh
cmake --preset dev
cmake --build --preset dev -j "$(nproc)" --target repro
exec build/repro --scenario 0 --check "$@"
