#!/usr/bin/env bash
# device_defaults.sh: the GPU evidence of PyTorch's defaults as the baseline and of the
# investigation's diagnostics, in one call on a GPU machine: builds preset ci; every scenario fix
# off and on with the defaults (scenario 6: its refusal, before any allocation); an injected
# slow:STAGE:3000 reported as stalled under the deadline (every call, and one call of three);
# --launch-blocking; the GPU suites that hold the stream variants, stalls and launch blocking; the
# default sweep matrix on the PyTorch-default stream. Logs under $OUT (or ./device-out), the
# summary last, everything else in one archive.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_build_ci
repro=./build-ci/repro
for s in 0 1 2 3 4 5; do
  for fix in off on; do
    fixarg=(--fix $fix)
    [ $s = 0 ] && [ $fix = on ] && fixarg=(--fixes all)  # scenario 0 has no fix of its own
    $repro --scenario $s "${fixarg[@]}" --check --json "$out/s${s}_$fix.json" >"$out/s${s}_$fix.txt" 2>&1
    rc=$?
    say "scenario $s fix $fix: exit $rc $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); c=j['config']['settings']; print('stream', c['stream'], 'gemm_stream', c['qk_gemm_stream'], 'order', c['qk_gemm_order'], 'rel_error', (j['check'] or {}).get('rel_error'), 'stalls', j['stalls']['calls_stalled'])" "$out/s${s}_$fix.json" 2>&1)"
  done
done
$repro --scenario 6 --json "$out/s6.json" >"$out/s6.txt" 2>&1
say "scenario 6 (the plan past the guard): exit $? $(grep -m1 -E 'refused|plan' "$out/s6.txt")"
$repro --inject slow:softmax:3000 --check --json "$out/slow_every.json" >"$out/slow_every.txt" 2>&1
say "--inject slow:softmax:3000 (1 call): exit $?; $(grep -E '^# STALLED' "$out/slow_every.txt")"
$repro --inject slow:softmax:3000@step=2 --iters 3 --check --json "$out/slow_one.json" >"$out/slow_one.txt" 2>&1
say "--inject slow:softmax:3000@step=2 --iters 3: exit $?; $(grep -E '^# STALLED' "$out/slow_one.txt")"
$repro --scenario 2 --inject slow:softmax:3000 --check >"$out/slow_s2.txt" 2>&1
say "--scenario 2 --inject slow:softmax:3000: exit $?; $(grep -E '^# STALLED' "$out/slow_s2.txt")"
$repro --launch-blocking --check --iters 3 >"$out/launch_blocking.txt" 2>&1
say "--launch-blocking: exit $?; $(grep -E '^# launch blocking' "$out/launch_blocking.txt")"
$repro --scenario 1 --gemm-stream aux --check >"$out/s1_race.txt" 2>&1
say "scenario 1 --gemm-stream aux (an outright race, fix off): exit $?"
# The sdpa-debug format against PyTorch's own run of the same problem (scripts/torch_stages.py),
# line by line with the values set aside; and the first lines of ours, as they are.
$repro --log-format sdpa-debug --check 2>"$out/repro_debug.log" >/dev/null
say "repro --log-format sdpa-debug: exit $?"
head -12 "$out/repro_debug.log" | sed 's/^/  /' | cut -c1-200 | tee -a "$summary"
timeout 120 python3 scripts/torch_stages.py --memory managed 2>"$out/torch_debug.log" >/dev/null
say "torch_stages.py --memory managed: exit $?"
python3 scripts/compare_logs.py --lines "$out/repro_debug.log" "$out/torch_debug.log" 2>&1 | tail -4 | tee -a "$summary"
grep -m2 "MATH_QK_DONE\|SOFTMAX_DONE" "$out/torch_debug.log" | cut -c1-160 | tee -a "$summary"
for suite in gpu_scenarios gpu_hypotheses; do
  t0=$SECONDS
  timeout 300 ./build-ci/tests/gpu_tests --test-suite=$suite >"$out/test_$suite.log" 2>&1
  say "test $suite: exit $?, $((SECONDS - t0)) s, $(grep -E '^\[doctest\] test cases' "$out/test_$suite.log")"
  grep -E "ERROR" -A4 "$out/test_$suite.log" | head -20
done
t0=$SECONDS
timeout 200 ./build-ci/tests/gpu_tests --test-suite=gpu_watchdog --test-case="*stall*,*launch-blocking*,slow:*" \
  >"$out/test_gpu_watchdog.log" 2>&1
say "test gpu_watchdog (stalls, launch blocking, slow): exit $?, $((SECONDS - t0)) s, $(grep -E '^\[doctest\] test cases' "$out/test_gpu_watchdog.log")"
grep -E "ERROR" -A6 "$out/test_gpu_watchdog.log" | head -20
if [ "${SWEEP:-1}" = 1 ]; then
  t0=$SECONDS
  timeout ${SWEEP_TIMEOUT:-300} $repro sweep --out "$out/sweep" >"$out/sweep.txt" 2>"$out/sweep.err"
  say "sweep (default matrix, stream axis default): exit $?, $((SECONDS - t0)) s"
  grep -E "^# [0-9]+ of|^# Sweep" "$out/sweep.txt" | tee -a "$summary"
  grep -m1 "left out" "$out/sweep.err" | cut -c1-200 | tee -a "$summary"
  cp "$out/sweep/sweep.json" "$out/sweep.json" 2>/dev/null
fi
say "total: $((SECONDS - start)) s"
device_pack sweep.json
