#!/usr/bin/env bash
# device_context.sh: the GPU evidence of the training context (docs/CONTEXT.md), in one call on a
# GPU machine. Builds preset ci (sm_90), then runs the sections named (default: tests), each
# writing its logs and JSON under $OUT (or ./device-out) and one summary line; the summary last.
#
#   tools/device_context.sh [tests] [plan] [scenario6] [ballast] [bench] [steps] [runs] [ladder]
#
#   tests      the GPU suites the context touches: kernels, allocator, uvm_counters, context, path,
#              scenarios, watchdog
#   plan       the memory plan's predicted peak against the measured one, qwen-image-1024, 20
#              layers, autograd retention (device and vmm memory)
#   scenario6  scenario 6 at its 60 layers: refused (exit 8) before allocating; each fix part run
#              where its plan fits, checked
#   ballast    a managed ballast of 80% of free memory touched by the host: migrations counted
#              (CUPTI), the output still checked
#   bench      a 60-layer forward pass without retention against 60 single calls (repro bench)
#   steps      --steps 1000 with per-call allocation and retention: memory flat
#   runs       JSON results of format 3: the default call, every condition at once, a hang in a layer
#   ladder     repro report --ladder --scenario 2 at its default shape, and with a hang injected under
#              the ballast (at -L 128)
#   fit        --layers-fit: qwen-image-1024's 60 layers with autograd's retention, planned and run
#              as many as fit, alone and beside a ballast of half the memory (the ladder's layers
#              and ballast rungs at the workload's size)
#   ctest      every GPU test through CTest (ctest -L gpu -j 4), each test's time
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_sections "tests" "$@"
device_build_ci
repro=./build-ci/repro

if want plan; then
  for alloc in device vmm; do
    $repro --workload qwen-image-1024 --layers 20 --retain autograd --alloc-timing per-call --alloc $alloc \
      --memory-trace --json "$out/plan_$alloc.json" >"$out/plan_$alloc.txt" 2>&1
    say "plan $alloc: exit $? $(python3 -c "
import json; r=json.load(open('$out/plan_$alloc.json')); p=r['memory_plan']['path_peak_bytes']; m=r['memory_measured']
print('predicted %.3f GB, live peak %.3f GB, reserved peak %.3f GB, GPU used peak %.3f GB (%+.2f%%)' % (p/1e9, m['peak_live_bytes']/1e9, m['peak_reserved_bytes']/1e9, m['gpu_used_peak_bytes']/1e9, 100*(m['gpu_used_peak_bytes']-p)/p))")"
  done
fi

if want scenario6; then
  $repro --scenario 6 --json "$out/s6_refused.json" >"$out/s6_refused.txt" 2>&1
  say "scenario 6 (60 layers): exit $? $(grep -o 'the memory plan needs[^(]*' "$out/s6_refused.txt" | head -1)"
  for part in recompute native chunk; do
    $repro --scenario 6 --fixes 5:$part --plan >"$out/s6_plan_$part.txt" 2>&1
    if grep -q "would be refused" "$out/s6_plan_$part.txt"; then
      say "scenario 6 --fixes 5:$part: plan does not fit ($(grep -o 'needs [0-9.]* GB of GPU memory' "$out/s6_plan_$part.txt" | head -1)); not run"
      continue
    fi
    $repro --scenario 6 --fixes 5:$part --json "$out/s6_$part.json" >"$out/s6_$part.txt" 2>&1
    say "scenario 6 --fixes 5:$part: exit $? $(tail -1 "$out/s6_$part.txt")"
  done
  $repro --scenario 6 --fix on --json "$out/s6_fix_on.json" >"$out/s6_fix_on.txt" 2>&1
  say "scenario 6 --fix on: exit $? $(tail -1 "$out/s6_fix_on.txt")"
fi

if want ballast; then
  $repro --ballast 0.8 --ballast-alloc managed --ballast-touch host --uvm-counters --alloc managed --check --iters 20 \
    --json "$out/ballast.json" >"$out/ballast.txt" 2>&1
  say "ballast 80% managed, host touch: exit $? $(python3 -c "
import json; r=json.load(open('$out/ballast.json')); u=r['uvm']
print('check', r['check'] and r['check']['passed'], 'ballast', r['context_load']['ballast_bytes']/1e9, 'GB;', 'uvm', u and {x['range']:(x['bytes_htod'],x['bytes_dtoh'],x['cpu_page_faults']) for x in u['ranges']} if u and u['available'] else (u and u['unavailable']))")"
fi

if want bench; then
  for layers in 1 60; do
    $repro bench --workload qwen-image-512 --layers $layers --alloc device --input-sets 1 -w 3 -n 20 --json "$out/bench_layers$layers.json" \
      >"$out/bench_layers$layers.txt" 2>&1
    say "bench layers=$layers: exit $? $(grep -m1 -E 'median' "$out/bench_layers$layers.txt")"
  done
fi

if want steps; then
  $repro --alloc-timing per-call --layers 4 --retain autograd --steps 1000 --alloc device --json "$out/steps1000.json" \
    >"$out/steps1000.txt" 2>&1
  say "steps 1000: exit $? $(grep -E '^# (memory|steps):' "$out/steps1000.txt" | tr '\n' ' ')"
fi

if want runs; then
  $repro --check --alloc device --json "$out/default_device.json" >"$out/default_device.txt" 2>&1
  say "default, device memory: exit $? $(tail -1 "$out/default_device.txt")"
  $repro --check --alloc-timing per-call --layers 4 --retain autograd --steps 3 --ballast 1G --ballast-alloc managed \
    --ballast-touch both --host-load 2 --uvm-counters --memory-trace --json "$out/context_all.json" >"$out/context_all.txt" 2>&1
  say "every condition at once: exit $? $(tail -1 "$out/context_all.txt")"
  $repro --layers 4 --alloc-timing per-call --retain autograd --inject hang:alloc_probs@layer=3 --stage-timeout 1.5 \
    --json "$out/hang_layer.json" >"$out/hang_layer.txt" 2>&1
  say "hang injected in alloc_probs of layer 3: exit $? $(grep -m1 'HANG' "$out/hang_layer.txt")"
fi

if want ladder; then
  $repro report --ladder --scenario 2 --out "$out/ladder" --repeat 1 >"$out/ladder.txt" 2>&1
  say "ladder: exit $? $(tail -1 "$out/ladder.txt")"
  grep -E '^repro report: rung [a-z-]+: [a-z_]+ \(' "$out/ladder.txt" | tee -a "$summary"
  $repro report --ladder --scenario 2 -L 128 --out "$out/ladder_hang" --repeat 1 --allow-inject --inject hang:softmax@ballast \
    --stage-timeout 2 >"$out/ladder_hang.txt" 2>&1
  say "ladder, hang under ballast: exit $? $(tail -1 "$out/ladder_hang.txt")"
  grep -E '^repro report: rung [a-z-]+: [a-z_]+ \(' "$out/ladder_hang.txt" | tee -a "$summary"
  head -1 "$out/ladder_hang/REPORT.md" | tee -a "$summary"
fi
if want tests; then
  for suite in ${SUITES:-gpu_kernels gpu_allocator gpu_uvm_counters gpu_context gpu gpu_scenarios gpu_watchdog}; do
    t0=$SECONDS
    timeout 420 ./build-ci/tests/gpu_tests --test-suite=$suite >"$out/test_$suite.log" 2>&1
    rc=$?
    say "test $suite: exit $rc, $((SECONDS - t0)) s, $(grep -E '^\[doctest\] test cases' "$out/test_$suite.log" | head -1)"
    ((rc)) && grep -E "ERROR|FATAL" -A3 "$out/test_$suite.log" | head -30
  done
fi

if want fit; then
  fit=(--workload qwen-image-1024 --layers 60 --layers-fit --retain autograd --alloc-timing per-call --alloc device)
  $repro "${fit[@]}" --plan >"$out/fit_plan.txt" 2>&1
  say "fit plan: exit $? $(grep -o -- '--layers-fit: [0-9]* of the [0-9]* layers asked for' "$out/fit_plan.txt")"
  for rung in layers ballast; do
    extra=()
    [[ $rung == ballast ]] && extra=(--ballast 0.5 --ballast-alloc device --ballast-touch gpu)
    $repro "${fit[@]}" "${extra[@]}" --memory-trace --iters 2 --json "$out/fit_$rung.json" >"$out/fit_$rung.txt" 2>&1
    say "fit $rung: exit $? $(python3 -c "
import json; r=json.load(open('$out/fit_$rung.json')); p=r['memory_plan']; m=r['memory_measured']
print('ran %s of %s layers, ballast %.2f GB, plan %.2f GB, GPU used peak %.2f GB, outcome %s' % (p['layers'], p['layers_asked'], p['ballast_bytes']/1e9, p['total_bytes']/1e9, m['gpu_used_peak_bytes']/1e9, r['outcome']))" 2>&1 | tail -1)"
  done
fi

if want ctest; then
  t0=$SECONDS
  timeout "${CTEST_LIMIT_S:-900}" ctest --test-dir build-ci -L gpu -j 4 --output-on-failure >"$out/ctest_gpu.log" 2>&1
  say "ctest -L gpu: exit $?, $((SECONDS - t0)) s; $(grep -E 'tests passed' "$out/ctest_gpu.log")"
  grep -E '^ *[0-9]+/[0-9]+ Test' "$out/ctest_gpu.log" | sed 's/^ */  /' | tee -a "$summary"
fi

say "total: $((SECONDS - start)) s"
device_pack
