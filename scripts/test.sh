#!/usr/bin/env bash
# test.sh: builds everything and runs the tests (the README's test command; CI runs it).
#
#   scripts/test.sh                 # all tests; GPU tests report "skipped" without a GPU
#   scripts/test.sh -L cpu          # extra arguments go to ctest (here: only the CPU tests)
#
# Environment: BUILD_DIR (default build), CUDA_ARCHS (default: the CMake default, sm_90 and
# sm_121; CI sets one architecture to build faster), SANITIZE=1 (host code under AddressSanitizer
# and UndefinedBehaviorSanitizer; use a separate BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh
export PATH="$PATH:/usr/local/cuda/bin"
build_dir=${BUILD_DIR:-build}
arch_args=()
[[ -n ${CUDA_ARCHS:-} ]] && arch_args=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
build_type=Release
if [[ ${SANITIZE:-0} == 1 ]]; then
  arch_args+=(-DSDPA_SANITIZE=ON)
  build_type=RelWithDebInfo
  # The CUDA runtime maps memory where ASan's shadow gap would be; leaks are findings.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=$build_type "${arch_args[@]}"
cmake --build "$build_dir" -j "$(nproc)"
ctest --test-dir "$build_dir" --output-on-failure "$@"
