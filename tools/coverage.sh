#!/usr/bin/env bash
# coverage.sh: line and branch coverage of the host code by the CPU tests, with gcov and gcovr.
#
# The counters come from preset asan (the host code at -O1 under ASan/UBSan, with --coverage):
# CI's run of the CPU tests under the sanitizers is the run measured, so that nothing is built or
# run twice. Without --report-only this script builds that preset and runs the CPU tests from
# zeroed counters (cpu.report_nvcc, as the preset runs it, generates its reproducers and builds
# none); with it (CI, after its asan part), it only reads the counters the last run left. It writes
#   build-asan/coverage.txt         gcovr's table: every file of repro/, scenarios/, fixes/ and the
#                                   host side of math_sdpa/, its lines and branches, and the totals
#   build-asan/coverage_cpu.txt     the same without the files only a GPU run reaches (below)
#   build-asan/coverage.json        gcovr's JSON summary of the second
# and prints both totals, then whether the second meets the floors (below); exit 1 when not.
#
# Left out of every figure: the branches gcc adds for exceptions (--exclude-throw-branches),
# unreachable ones (--exclude-unreachable-branches), and those on the line that closes a table
# built once by a lambda called in place (`}();`): gcc gives that line one branch per temporary
# of the table for unwinding its construction, hundreds, taken only if a constructor throws.
# Left out of the second figure, as files: the GPU child's (gpu_only below), which need a CUDA
# device from their first line; the GPU tests run them.
#
#   tools/coverage.sh [--report-only] [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
report_only=0
if [[ ${1:-} == --report-only ]]; then
  report_only=1
  shift
fi
build=build-asan
scripts/setup_deps.sh --coverage
if [[ $report_only == 0 ]]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  source scripts/ccache_env.sh
  cmake --preset asan >/dev/null
  cmake --build --preset asan
  find "$build" -name '*.gcda' -delete
  ctest --preset asan -L cpu -j "$(nproc)" "$@" ||
    echo "coverage: some tests failed (the figures count what ran)" >&2
fi
gpu_only=(math_sdpa/allocator.cpp math_sdpa/conditions.cpp math_sdpa/context_load.cpp math_sdpa/pipeline.cpp math_sdpa/pipeline.h
  math_sdpa/stage_timer.cpp math_sdpa/uvm_counters.cpp math_sdpa/weights_load.cpp math_sdpa/cublas_gemm.cpp
  math_sdpa/device_info.cpp repro/bench/bench_runner.cpp repro/run/runner.cpp repro/run/progress_reporter.cpp
  repro/run/memory_trace.cpp repro/run/path_observers.cpp)
common=(--root . --object-directory "$build" --filter 'repro/' --filter 'scenarios/' --filter 'fixes/'
  --filter 'math_sdpa/.*\.(cpp|h)$' --exclude-throw-branches --exclude-unreachable-branches
  --exclude-branches-by-pattern '^\s*\}\(\);\s*$' --gcov-ignore-parse-errors)
# gcovr 5.2 merges each function's counts over the objects that hold it, and stops when an
# inline function's line differs between two of them (-O1 inlines some): its own merge option for
# that (the larger line wins) is not on its command line, so it is set here. Lines and branches
# are merged as before.
gcovr() {
  "$(sed -n '1s/^#! *//p' "$(type -P gcovr)")" -c 'import sys, gcovr.merging as m; m.DEFAULT_MERGE_OPTIONS.ignore_function_lineno = True
from gcovr.__main__ import main; sys.argv[0] = "gcovr"; main()' "$@"
}
excludes=()
for f in "${gpu_only[@]}"; do excludes+=(--exclude "${f//./\\.}"); done
gcovr "${common[@]}" --txt "$build/coverage.txt" --json-summary /tmp/coverage-all.$$.json
gcovr "${common[@]}" "${excludes[@]}" --txt "$build/coverage_cpu.txt" --json-summary "$build/coverage.json"
python3 - "$build" /tmp/coverage-all.$$.json <<'EOF'
import json, sys
build, every = sys.argv[1], sys.argv[2]
def totals(path):
    d = json.load(open(path))
    return "lines %.1f%% (%d of %d), branches %.1f%% (%d of %d)" % (
        d["line_percent"], d["line_covered"], d["line_total"], d["branch_percent"], d["branch_covered"], d["branch_total"])
print("coverage: every file of the host code:", totals(every))
print("coverage: the host code the CPU tests can run (the GPU child's files left out):", totals(build + "/coverage.json"))
EOF
# The floors, over the host code the CPU tests can run: 90% of its lines and 75% of its branches,
# and 80% of the lines of each file of the folders whose decisions a user reads (the report, the
# sweep, triage, the scenarios). Below one, the script names what fell short and fails.
floors_rc=0
python3 - "$build/coverage.json" <<'EOF' || floors_rc=$?
import json, sys
LINE_FLOOR, BRANCH_FLOOR, FILE_LINE_FLOOR = 90.0, 75.0, 80.0
FILE_FLOOR_FOLDERS = ("repro/report/", "repro/sweep/", "repro/triage/", "scenarios/")
d = json.load(open(sys.argv[1]))
short = []
if d["line_percent"] < LINE_FLOOR:
    short.append("lines %.1f%% < %.0f%%" % (d["line_percent"], LINE_FLOOR))
if d["branch_percent"] < BRANCH_FLOOR:
    short.append("branches %.1f%% < %.0f%%" % (d["branch_percent"], BRANCH_FLOOR))
floored = [f for f in d["files"] if f["filename"].startswith(FILE_FLOOR_FOLDERS) and f["line_total"] > 0]
for f in floored:
    if f["line_percent"] < FILE_LINE_FLOOR:
        short.append("%s: lines %.1f%% < %.0f%%" % (f["filename"], f["line_percent"], FILE_LINE_FLOOR))
if not floored:
    short.append("no file of %s in the report" % ", ".join(FILE_FLOOR_FOLDERS))
for line in short:
    print("coverage: below the floor:", line, file=sys.stderr)
if not short:
    lowest = min(floored, key=lambda f: f["line_percent"])
    print("coverage: floors met: lines %.0f%%, branches %.0f%%, and %.0f%% of the lines of each of the %d files of %s "
          "(the lowest %s, %.1f%%)" % (LINE_FLOOR, BRANCH_FLOOR, FILE_LINE_FLOOR, len(floored),
                                      ", ".join(FILE_FLOOR_FOLDERS), lowest["filename"], lowest["line_percent"]))
sys.exit(1 if short else 0)
EOF
rm -f /tmp/coverage-all.$$.json
exit "$floors_rc"
