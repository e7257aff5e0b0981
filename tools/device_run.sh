#!/usr/bin/env bash
# device_run.sh: the GPU evidence, in one call on a GPU machine. Builds for sm_90, then runs
# the sections named on the command line (default: all), writes every log under $OUT (or
# ./device-out), packs them into $OUT/logs.tar.gz and prints a short summary last.
#
#   tools/device_run.sh [probe] [tests] [check] [watchdog] [scenarios] [logs] [mutant]
#
#   probe      the GPU, driver, unified-memory attributes, tools present
#   tests      ctest (every label but sanitizer), the GPU test binaries' own tables
#   check      repro --scenario 0 --check at the default and the image-layer shape, both allocators
#   watchdog   a clean --log values run (the expected stage-log pattern)
#   scenarios  scripts/scenario_table.py at the default shape and at B=2 H=8 L=S=2048
#   logs       each scenario's stage log with its fix off and on (--log stages)
#   mutant     a deliberately broken softmax must fail the GPU tests
#   sweep      the default sweep (repro sweep): footer, wall time, cell count; JSON, JSONL, SVG kept
#   report     repro report --scenario 2: the folder and the first 40 lines of its REPORT.md
#   soak       each scenario's 1000-call soak table (fix off), then the ladder (scripts/ladder.sh)
#   sanitizer  ctest -L sanitizer (memcheck, racecheck, initcheck, synccheck)
#   release    the release, release-static and spark-static presets: size, ldd, --version,
#              embedded code (only this section named: build-ci is not built)
#
# The default is the first seven; the others take minutes each and are named explicitly, a
# call each (a call may run for 10 minutes at most):
#   tools/device_run.sh sweep report soak     tools/device_run.sh sanitizer
#   tools/device_run.sh release
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_sections "probe tests check watchdog scenarios logs mutant" "$@"
# The release presets build their own trees; the other sections use build-ci.

if [[ " ${sections[*]} " != " release " ]]; then
  device_build_ci
fi
repro=./build-ci/repro

if want mutant; then  # built in the background while the tests run
  rm -rf /tmp/mutant && mkdir -p /tmp/mutant && cp -r CMakeLists.txt CMakePresets.json cmake math_sdpa repro tests fixes scenarios results /tmp/mutant/ &&
    sed -i 's|const float inv_sum = 1.0f / total.sum;|const float inv_sum = 1.001f / total.sum;|' /tmp/mutant/math_sdpa/kernels.cu &&
    (cmake -S /tmp/mutant -B /tmp/mutant/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null 2>&1 &&
     cmake --build /tmp/mutant/build -j 4 --target gpu_tests >"$out/mutant_build.log" 2>&1) &
  mutant_build=$!
fi

if want probe; then
  tools/probe_device.sh >/dev/null 2>&1
  cp "${OUT:-/tmp/out}/probe.txt" "$out/probe.txt" 2>/dev/null
  say "== probe"; grep -E "=|Version" "$out/probe.txt" | tee -a "$summary" >/dev/null
fi

if want tests; then
  ctest --test-dir build-ci --output-on-failure -j 4 -LE sanitizer >"$out/ctest.log" 2>&1
  say "== ctest -LE sanitizer (rc=$?)"; grep -E "Test +#|tests passed|tests failed" "$out/ctest.log" >>"$summary"
  grep -E -A3 "ERROR" "$out/ctest.log" | head -30 >>"$summary"
  ./build-ci/tests/gpu_tests --test-suite=gpu --test-case='*matrix*' >"$out/gpu_matrix.txt" 2>&1
  ./build-ci/tests/gpu_tests --test-suite=gpu_scenarios >"$out/gpu_scenarios.txt" 2>&1
  ./build-ci/tests/gpu_tests --test-suite=gpu_watchdog --test-case='*injected hang*' >"$out/gpu_watchdog.txt" 2>&1
  say "== matrix"; grep -E "input seed|worst rel_error|matrix cases|test cases" "$out/gpu_matrix.txt" >>"$summary"
  say "== scenarios"; grep -E "^(scenario|[0-4] )|waived|test cases|assertions" "$out/gpu_scenarios.txt" >>"$summary"
  say "== watchdog"; grep -E -A16 "^injected" "$out/gpu_watchdog.txt" >>"$summary"
fi

if want check; then
  for alloc in managed device; do
    $repro --scenario 0 --check --alloc "$alloc" --iters 20 --json "$out/default_$alloc.json" >"$out/default_$alloc.txt" 2>&1
    say "== default $alloc (rc=$?)"; cat "$out/default_$alloc.txt" >>"$summary"
    $repro --scenario 0 --check --alloc "$alloc" -b 1 --heads 24 -L 4608 -E 128 --dtype bf16 --iters 5 \
      --json "$out/image4608_$alloc.json" >"$out/image4608_$alloc.txt" 2>&1
    say "== image4608 $alloc (rc=$?)"; cat "$out/image4608_$alloc.txt" >>"$summary"
  done
fi

if want watchdog; then
  $repro --log values --check 2>"$out/clean_values_log.txt" >"$out/clean_values_stdout.txt"
  say "== clean --log values run (rc=$?)"; cut -c1-200 "$out/clean_values_log.txt" >>"$summary"
fi

if want scenarios; then
  python3 scripts/scenario_table.py $repro "$out/table_default" --iters 10 >"$out/table_default.txt" 2>&1
  python3 scripts/scenario_table.py $repro "$out/table_2048" --iters 10 -b 2 --heads 8 -L 2048 >"$out/table_2048.txt" 2>&1
  say "== scenario table, default shape"; cat "$out/table_default.txt" >>"$summary"
  say "== scenario table, B=2 H=8 L=S=2048"; cat "$out/table_2048.txt" >>"$summary"
fi

if want logs; then
  for n in 1 2 3 4; do
    for fix in off on; do
      $repro --scenario "$n" --fix "$fix" --check --log stages >"$out/log_s${n}_$fix.txt" 2>&1
      say "== scenario $n fix $fix (rc=$?)"
      grep -E "^\[(SCENARIO|FIX|MATH_KT|CUBLAS_GEMM_START|MATH_SCORES|ALLOC_DEBUG\] tensor=scores)|^# (check|result|settings)" \
        "$out/log_s${n}_$fix.txt" | cut -c1-230 >>"$summary"
    done
  done
fi

if want mutant; then
  wait "$mutant_build"
  SDPA_TEST_SEED=1 /tmp/mutant/build/tests/gpu_tests --test-suite=gpu --test-case='*matrix*' >"$out/mutant.txt" 2>&1
  say "== mutant (softmax off by 0.1%): gpu_tests rc=$? (must be non-zero)"
  grep -E "test cases|assertions" "$out/mutant.txt" >>"$summary"
fi

if want sweep; then
  start_ms=$(date +%s%3N)
  $repro sweep --out "$out/sweep" >"$out/sweep_stdout.txt" 2>"$out/sweep_stderr.txt"
  rc=$?
  wall=$(( ($(date +%s%3N) - start_ms) / 1000 ))
  say "== default sweep (rc=$rc, wall ${wall} s): repro sweep --out sweep"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('cells in JSON:', len(d['cells']), 'summary:', json.dumps(d['summary']))" \
    "$out/sweep/sweep.json" >>"$summary" 2>&1
  tail -n 14 "$out/sweep_stdout.txt" >>"$summary"
  # The same matrix with four cells at a time on the GPU: how much of a cell is process start.
  start_ms=$(date +%s%3N)
  $repro sweep --out "$out/sweep_x4" --cells-per-gpu 4 >"$out/sweep_x4_stdout.txt" 2>"$out/sweep_x4_stderr.txt"
  rc=$?
  say "== default sweep, --cells-per-gpu 4 (rc=$rc, wall $(( ($(date +%s%3N) - start_ms) / 1000 )) s)"
  tail -n 3 "$out/sweep_x4_stdout.txt" >>"$summary"
fi

if want report; then
  $repro report --scenario 2 --out "$out/report2" --force >"$out/report2_stdout.txt" 2>&1
  say "== repro report --scenario 2 --out report2 (rc=$?)"
  ls -la "$out/report2" >>"$summary"
  head -n 40 "$out/report2/REPORT.md" >>"$summary"
  # Every scenario's generated repro_scenarioN.cu built with nvcc and run, fix off and on, against
  # the harness run it came from (the test prints the comparison table).
  ./build-ci/tests/gpu_tests --test-suite=gpu_report >"$out/gpu_report.txt" 2>&1
  say "== gpu_tests --test-suite=gpu_report (rc=$?)"
  grep -E -B2 -A14 "^scenario|test cases|assertions" "$out/gpu_report.txt" | head -60 >>"$summary"
fi

if want soak; then
  for n in 0 1 2 3 4; do
    $repro --scenario "$n" --check --iters 1000 --sample-every 100 >"$out/soak_s$n.txt" 2>&1
    say "== soak: repro --scenario $n --check --iters 1000 --sample-every 100 (rc=$?)"
    grep -E "^#  calls|^  +[0-9]+  |^# memory|^# result" "$out/soak_s$n.txt" >>"$summary"
  done
  scripts/ladder.sh $repro >"$out/ladder.txt" 2>&1
  say "== ladder (rc=$?): scripts/ladder.sh $repro"; cat "$out/ladder.txt" >>"$summary"
fi

if want sanitizer; then
  ctest --test-dir build-ci -L sanitizer -j 4 -V >"$out/sanitizer.log" 2>&1  # -V: every run's line
  say "== ctest -L sanitizer (rc=$?)"
  grep -E "Test +#|tests passed|tests failed" "$out/sanitizer.log" >>"$summary"
  # run_sanitizer.sh judges each run and ends with "TOOL: N runs, 0 with errors" (or FAILED).
  grep -E ": (memcheck|racecheck|initcheck|synccheck): " "$out/sanitizer.log" >>"$summary"
  grep -E " rc=" "$out/sanitizer.log" | grep -v "rc=0 .*0 errors" | head -20 >>"$summary"
fi

if want release; then
  presets=(release release-static spark-static)
  for preset in "${presets[@]}"; do  # built side by side: each nvcc already uses every core
    (cmake --preset "$preset" && cmake --build --preset "$preset" -j "$(nproc)") >"$out/$preset.log" 2>&1 &
  done
  wait
  for preset in "${presets[@]}"; do
    say "== preset $preset (rc of the build: see $preset.log)"
    bin=build-$preset/repro
    [[ -x $bin ]] || { tail -20 "$out/$preset.log" >>"$summary"; continue; }
    ls -la "$bin" | awk '{print $5, $9}' >>"$summary"
    ldd "$bin" >>"$summary" 2>&1
    "$bin" --version >>"$summary" 2>&1
    cuobjdump --list-elf "$bin" 2>/dev/null | grep -o 'sm_[0-9]*[af]\?' | sort | uniq -c | tr '\n' ' ' >>"$summary"
    echo >>"$summary"
    "$bin" --scenario 2 --check --iters 3 | tail -n 2 >>"$summary" 2>&1
  done
fi

# Only a few files come back from the device machine: everything goes into one archive.
device_pack
cat "$summary" | tail -c 11000
