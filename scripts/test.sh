#!/usr/bin/env bash
# test.sh: builds everything and runs the tests (the README's test command; CI runs it).
#
#   scripts/test.sh                 # all tests; GPU tests report "skipped" without a GPU
#   scripts/test.sh -L cpu          # extra arguments go to ctest (here: only the CPU tests)
#
# Environment: BUILD_DIR (default build), CUDA_ARCHS (default: the CMake default, sm_90 and
# sm_121; CI sets one architecture to build faster).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh
export PATH="$PATH:/usr/local/cuda/bin"
build_dir=${BUILD_DIR:-build}
arch_args=()
[[ -n ${CUDA_ARCHS:-} ]] && arch_args=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${arch_args[@]}"
cmake --build "$build_dir" -j "$(nproc)"
ctest --test-dir "$build_dir" --output-on-failure "$@"
