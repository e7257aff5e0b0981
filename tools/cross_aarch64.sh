#!/usr/bin/env bash
# cross_aarch64.sh: builds the harness for the DGX Spark's CPU (aarch64) on an x86-64 machine and
# tests what can be tested there (docs/DEVELOPMENT.md; CI runs it):
#   1. host_only/ with Debian's cross compiler (cmake/aarch64-linux-gnu.cmake): every CUDA-free
#      library and the CPU tests, warnings as errors, into build-aarch64; the tests run under
#      qemu-aarch64.
#   2. every other source file of the x86-64 build (the .cu files, the C++ that calls CUDA and
#      cuBLAS, the GPU tests) compiled for an aarch64 host, device code for sm_121
#      (tools/cross_aarch64_gpu_side.py), into build-aarch64/gpu_side. Not linked: the CUDA
#      toolkit here has its libraries for x86-64 only. Needs nvcc and the x86-64 build's
#      configuration (build-ci, configured here when missing).
#
#   tools/cross_aarch64.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh --aarch64
export PATH="$PATH:/usr/local/cuda/bin"
source scripts/ccache_env.sh  # the host_only build through ccache where it is installed

cmake -S host_only -B build-aarch64 -G Ninja --toolchain "$PWD/cmake/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release
cmake --build build-aarch64 -j "$(nproc)"
# A bound on the whole run (about 65 s on 2 cores): a test that hangs under the emulator fails
# this script within it instead of holding CI until its own limit. `timeout` runs ctest in a
# process group of its own and signals all of it, so no test process it started is left behind.
limit_s=${SDPA_AARCH64_TESTS_LIMIT_S:-1200}
timeout --kill-after=10 "$limit_s" ctest --test-dir build-aarch64 -j "$(nproc)" --output-on-failure "$@" || {
  rc=$?
  ((rc == 124 || rc == 137)) && echo "cross_aarch64: the aarch64 tests ran past $limit_s s and were stopped" >&2
  exit "$rc"
}

if ! command -v nvcc >/dev/null; then
  echo "cross_aarch64: no nvcc on PATH or in /usr/local/cuda/bin: the GPU side was not compiled for aarch64" >&2
  exit 1
fi
[[ -f build-ci/build.ninja ]] || cmake --preset ci >/dev/null
/usr/bin/python3 tools/cross_aarch64_gpu_side.py build-ci build-aarch64 build-aarch64/gpu_side
