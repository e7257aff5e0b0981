#!/usr/bin/env bash
# flake_check.sh: the CPU suites run N times over while the machine is loaded, and how often each
# test failed. A test that fails only sometimes can keep a good change from landing, or teach
# people to rerun until green; this finds it.
#
#   tools/flake_check.sh [N] [BUILD_DIR]    # default: N = 20, BUILD_DIR = build-ci (built)
#
# The load: stress-ng's CPU workers where it is installed, else a busy loop per core, for as long
# as the runs last; FLAKE_LOAD=external: none of its own, the caller's work beside it is the load
# (CI: the aarch64 cross build). Each run is `ctest -L cpu` with a job per core, as scripts/test.sh runs it.
# Prints one line per run and, last, every test that failed with its count; exit 1 if any did.
# Logs go to BUILD_DIR/flake_check/. FLAKE_CTEST_ARGS adds ctest arguments (e.g. "-E cpu.report_nvcc":
# that suite spends its minute and a half in nvcc, whatever the load).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
build=${2:-build-ci}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "flake_check: N must be a positive integer (got '$runs')" >&2; exit 2; }
[[ -f $build/CTestTestfile.cmake ]] || { echo "flake_check: $build is not a build folder (run scripts/test.sh first)" >&2; exit 2; }
logs=$build/flake_check
rm -rf "$logs" && mkdir -p "$logs"
cores=$(nproc)

load_pids=()
stop_load() { ((${#load_pids[@]})) && kill "${load_pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_load EXIT
if [[ ${FLAKE_LOAD:-} == external ]]; then
  load="the caller's load"
elif command -v stress-ng >/dev/null; then
  stress-ng --cpu "$cores" --quiet >/dev/null 2>&1 &
  load_pids+=($!)
  load="stress-ng --cpu $cores"
else
  for ((i = 0; i < cores; i++)); do
    (while :; do :; done) &
    load_pids+=($!)
  done
  load="$cores busy loops"
fi

# The names of the tests CTest's summary lists as failed ("\t 12 - cpu.sweep (Failed)").
failed_tests() { grep -hE '^[[:space:]]*[0-9]+ - [^ ]+ \((Failed|Timeout|SEGFAULT|Exception)' "$@" | sed -E 's/^[[:space:]]*[0-9]+ - ([^ ]+).*/\1/'; }

start=$SECONDS
for ((run = 1; run <= runs; run++)); do
  t0=$SECONDS
  # shellcheck disable=SC2086  # FLAKE_CTEST_ARGS is a list of words
  ctest --test-dir "$build" -L cpu -j "$cores" --output-on-failure ${FLAKE_CTEST_ARGS:-} >"$logs/run-$run.log" 2>&1
  failed=$(failed_tests "$logs/run-$run.log" | tr '\n' ' ')
  echo "flake_check: run $run of $runs under $load: $((SECONDS - t0)) s${failed:+, failed: $failed}"
done
stop_load
echo "flake_check: $runs runs in $((SECONDS - start)) s on $cores cores under $load"
counts=$(failed_tests "$logs"/run-*.log | sort | uniq -c)
if [[ -n $counts ]]; then
  echo "flake_check: failures per test (of $runs runs):"
  echo "$counts"
  exit 1
fi
echo "flake_check: 0 failures"
