#!/usr/bin/env bash
# test.sh: builds everything and runs the tests (the README's test command; CI runs it).
#
#   scripts/test.sh                 # all tests; GPU tests report "skipped" without a GPU
#   scripts/test.sh -L cpu          # extra arguments go to ctest (here: only the CPU tests)
#   scripts/test.sh -j 1            # one test at a time (the last -j wins)
#
# Environment: PRESET, a configure/build/test preset of CMakePresets.json: dev (default: sm_90 and
# sm_121, folder build), ci (sm_90 only, build-ci; CI uses it to build faster), asan (host code
# under AddressSanitizer and UndefinedBehaviorSanitizer, the CPU tests and only the programs they
# run, build-asan). CUDA_ARCHS overrides the preset's GPU architectures. A folder configured here
# for the first time compiles through ccache when it is installed (scripts/ccache_env.sh;
# SDPA_CCACHE=0: without).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh
export PATH="$PATH:/usr/local/cuda/bin"
source scripts/ccache_env.sh
preset=${PRESET:-dev}
arch_args=()
[[ -n ${CUDA_ARCHS:-} ]] && arch_args=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
cmake --preset "$preset" "${arch_args[@]}"
cmake --build --preset "$preset" -j "$(nproc)"
# Every core: the GPU tests take turns on the GPU, the CPU tests share the rest (tests/CMakeLists.txt).
ctest --preset "$preset" -j "$(nproc)" "$@"
