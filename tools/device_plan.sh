#!/usr/bin/env bash
# device_plan.sh: the GPU evidence for the call plan, in one call on a GPU machine: builds preset ci,
# then the sections named (default: tests):
#
#   tools/device_plan.sh [tests] [twin]
#
#   tests  every GPU test (ctest -L gpu): among them gpu.report, every scenario's reproducer against
#          the harness run of the same options, bit for bit, and gpu.decisions
#   twin   tests/run_trainer_twin.py: the trainer's twin plain and captured, each capture replayed
#          (--check --backward) and triaged (--dry-run); the captures packed into twin-captures.tar.gz
#
# Logs under $OUT (or ./device-out); a short summary last.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_sections "tests" "$@"
device_build_ci

if want tests; then
  t0=$SECONDS
  ctest --test-dir build-ci --output-on-failure -j 4 -L gpu >"$out/ctest_gpu.log" 2>&1
  say "== ctest -L gpu (rc=$?, $((SECONDS - t0)) s)"
  grep -E "Test +#|tests passed|tests failed" "$out/ctest_gpu.log" | sed 's/  */ /g' >>"$summary"
  grep -E -B2 -A6 "ERROR|FATAL" "$out/ctest_gpu.log" | head -60 >>"$summary"
  # gpu.report's table (its output, printed whatever the outcome) and the snapshot test again, alone.
  ./build-ci/tests/gpu_tests --test-suite=gpu_report --test-case='every scenario*' -s >"$out/gpu_report.log" 2>&1
  say "== gpu.report again, its table (rc=$?)"
  grep -E "^(case|s[0-9]|ladder)" "$out/gpu_report.log" | head -60 >>"$summary"
  ./build-ci/tests/gpu_tests --test-suite=gpu_watchdog --test-case='the hang snapshot names*' >"$out/snapshot.log" 2>&1
  say "== the hang snapshot test alone (rc=$?)"
  grep -E "test cases|ERROR" "$out/snapshot.log" | head -5 >>"$summary"
fi

if want twin; then
  t0=$SECONDS
  PYTHONUNBUFFERED=1 python3 tests/run_trainer_twin.py --out "$out/twin" --repro build-ci/repro >"$out/twin.log" 2>&1
  say "== trainer twin (rc=$?, $((SECONDS - t0)) s)"
  grep -E "^(FAIL|run_trainer_twin)" "$out/twin.log" | head -30 >>"$summary"
  tail -15 "$out/twin.log" >>"$summary"
  tar -C "$out" -czf "$out/twin-captures.tar.gz" twin 2>/dev/null
fi
say "total: $((SECONDS - start)) s"
device_pack twin-captures.tar.gz
cat "$summary"
