#!/usr/bin/env bash
# run_default.sh: builds repro and runs the default scenario (the full Math SDPA path at the
# seed's standalone shape, bf16, managed memory), checked against the float64 reference.
#
#   scripts/run_default.sh [more repro options]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh
export PATH="$PATH:/usr/local/cuda/bin"
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j "$(nproc)" --target repro
exec "$build_dir/repro" --scenario 0 --check "$@"
