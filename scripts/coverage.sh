#!/usr/bin/env bash
# coverage.sh: line and branch coverage of the host code by the CPU tests, with gcov and gcovr.
# Builds preset coverage (build-cov: the host code at -O0 with --coverage), runs the CPU tests but
# cpu.report_nvcc (nvcc's builds of the reproducer: it runs no harness code), then writes
#   build-cov/coverage.txt    gcovr's table: every file of repro/, scenarios/, fixes/ and the host
#                             side of math_sdpa/, its lines and branches, and the totals
#   build-cov/coverage.json   the same as gcovr's JSON summary
# Branches on the throw paths gcc adds for exceptions are left out (--exclude-throw-branches), as
# are unreachable ones (--exclude-unreachable-branches). The last line prints the totals.
#
#   scripts/coverage.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh --coverage
export PATH="$PATH:/usr/local/cuda/bin"
source scripts/ccache_env.sh
cmake --preset coverage >/dev/null
cmake --build --preset coverage
find build-cov -name '*.gcda' -delete
ctest --preset coverage -E '^cpu\.report_nvcc$' -j "$(nproc)" "$@" || echo "coverage: some tests failed (the figures count what ran)" >&2
filters=(--filter 'repro/' --filter 'scenarios/' --filter 'fixes/' --filter 'math_sdpa/.*\.(cpp|h)$')
gcovr --root . --object-directory build-cov "${filters[@]}" --exclude-throw-branches --exclude-unreachable-branches \
  --gcov-ignore-parse-errors --txt build-cov/coverage.txt --json-summary build-cov/coverage.json --print-summary
