#!/usr/bin/env bash
# device_capture.sh: the GPU evidence of capture, replay and minimize in one call on a GPU
# machine: builds preset ci; scripts/sdpa_capture.py over tests/capture_model.py (a small joint
# text+image transformer trained a few steps) and the harness's replay of the captured call
# against PyTorch's (tests/test_sdpa_capture.py); each captured call replayed with its context and
# checked; and `repro minimize` of a configuration with every condition, whose only fault is an
# injected hang armed from S = 2048 on managed memory (the known answer), ending with its report.
# Logs under $OUT (or ./device-out), the summary last, everything else in one archive.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_build_ci
repro=./build-ci/repro
t0=$SECONDS
PYTHONUNBUFFERED=1 python3 tests/test_sdpa_capture.py --repro "$repro" --keep "$out/capture_test" >"$out/capture_test.txt" 2>&1
say "tests/test_sdpa_capture.py --repro $repro: exit $?, $((SECONDS - t0)) s"
grep -E "^(FAIL|#)|test_sdpa_capture:|rel|calls_per_step|layout" "$out/capture_test.txt" | head -30 | tee -a "$summary"
workload=$out/capture_test/capture/workload.json
cp "$workload" "$out/workload.json" 2>/dev/null
for call in 0 1; do
  t0=$SECONDS
  $repro --workload-file "$workload" --call "$call" --check --json "$out/replay_$call.json" >"$out/replay_$call.txt" 2>&1
  say "repro --workload-file workload.json --call $call --check: exit $?, $((SECONDS - t0)) s"
  grep -E "^# (scenario|result|check)|warning" "$out/replay_$call.txt" | cut -c1-220 | tee -a "$summary"
done
t0=$SECONDS
$repro minimize --out "$out/minimize" --runs 2 --budget 5m -- --scenario 2 --full -b 2 --heads 8 --kv-heads 4 -L 256 \
  -S 4096 -E 64 --mask bool --dropout 0.1 --layers 3 --retain autograd --ballast 1G --host-load 2 --iters 4 \
  --alloc managed --fixes 1 --stage-timeout 2 --inject 'hang:softmax@S>=2048@alloc=managed' >"$out/minimize.txt" 2>&1
say "repro minimize (scenario 2, every condition, hang injected from S = 2048 on managed memory): exit $?, $((SECONDS - t0)) s"
grep -E "kept|rejected|smallest|report" "$out/minimize.txt" | cut -c1-240 | tee -a "$summary"
cp "$out/minimize/SUMMARY.md" "$out/minimize_SUMMARY.md" 2>/dev/null
head -3 "$out/minimize/report/REPORT.md" 2>/dev/null | tee -a "$summary"
say "total: $((SECONDS - start)) s"
device_pack workload.json minimize_SUMMARY.md capture_test.txt
