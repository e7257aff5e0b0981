#!/usr/bin/env bash
# device_backward.sh: the GPU evidence of the backward pass (--backward), in one call on a GPU
# machine: builds preset ci, runs the gpu_backward suite, scripts/compare_gradients.py against
# PyTorch's autograd (if PyTorch with CUDA is there), and the soak of --steps 1000; logs under
# $OUT (or ./device-out), the summary last, everything else in one archive.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_build_ci
repro=./build-ci/repro
t0=$SECONDS
timeout 300 ./build-ci/tests/gpu_tests --test-suite=gpu_backward >"$out/test_gpu_backward.log" 2>&1
say "test gpu_backward: exit $?, $((SECONDS - t0)) s, $(grep -E '^\[doctest\] test cases' "$out/test_gpu_backward.log")"
grep -E "ERROR|logged" -A4 "$out/test_gpu_backward.log" | head -40
$repro --backward --check --mask bool --dropout 0.1 --kv-heads 4 >"$out/backward_default.txt" 2>&1
say "repro --backward --check --mask bool --dropout 0.1 --kv-heads 4: exit $?"
grep -E "^# check" "$out/backward_default.txt" | tee -a "$summary"
$repro --alloc-timing per-call --layers 4 --retain autograd --steps 1000 --alloc device >"$out/steps1000.txt" 2>&1
say "steps 1000: exit $? $(grep -E '^# (memory|steps):' "$out/steps1000.txt" | tr '\n' ' ')"
t0=$SECONDS
timeout ${COMPARE_TIMEOUT:-240} python3 scripts/compare_gradients.py --repro $repro --out /tmp/grads ${COMPARE_ARGS:-} \
  --json "$out/compare_gradients.json" >"$out/compare_gradients.txt" 2>&1
say "compare_gradients: exit $?, $((SECONDS - t0)) s"
tail -60 "$out/compare_gradients.txt" | tee -a "$summary"
say "total: $((SECONDS - start)) s"
device_pack compare_gradients.json
