#!/usr/bin/env bash
# device_test_sh.sh: scripts/test.sh on a lent GPU machine as a fresh clone runs it (no build
# folder, no compiler cache), timed; then, with the repro it built, the cost of scenario 2's runs
# at the default workload (what the context ladder's rungs are made of). Logs under $OUT (or
# ./device-out), the summary last.
#
#   tools/device_test_sh.sh [testsh] [slots] [profile2]   # default: testsh profile2
#   SLOTS="2 1" tools/device_test_sh.sh slots             # ctest again with 2, then 1 GPU test at a time
#   tools/device_test_sh.sh build cases                    # each GPU suite alone, each case's seconds
#   BUILD_ARGS=-DCMAKE_UNITY_BUILD=OFF tools/device_test_sh.sh build   # the build with more cmake arguments
#   ORDERS="spinning,quiet,sanitized,alone" tools/device_test_sh.sh testsh orders   # ctest again, kinds in that order
#   JOBS="24" tools/device_test_sh.sh testsh jobs          # ctest again with 24 jobs
#   tools/device_test_sh.sh startup                        # what one run costs: repro's start, CUDA's, a call's
#   CONCURRENCY="1 8" tools/device_test_sh.sh concurrency  # a short run's seconds with N at once
#   CONNECTIONS="default 1" tools/device_test_sh.sh testsh connections   # ctest again, the tests' CUDA queues
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
sections=("$@")
# The N slowest tests of a CTest log (stamped lines): when each ended, its seconds, its name, its result.
slowest() {
  grep -E "Test +#" "$2" | awk '{print $1 "s", $(NF-1), $5, $(NF-2)}' | sort -k2 -rn | head -"$1" | tee -a "$summary"
}
# The build's compile and link steps: their seconds summed, and the span from the first's start to the last's end.
build_steps() {
  awk 'NR > 1 {d = ($2 - $1) / 1000; s += d; if ($2 > m) m = $2} END {printf "build steps summed %.0f s, span %.0f s\n", s, m / 1000}' \
    build/.ninja_log | tee -a "$summary"
}
# Each line of stdin with the seconds since it started.
stamp() {
  local t0=$SECONDS line
  while IFS= read -r line; do echo "$((SECONDS - t0)) $line"; done
}
# CTest again on the kept build, as a fresh folder would order it (CTest's own times of the last run
# forgotten), each test's use sampled: ctest_again NAME WHAT JOBS writes ctest_NAME.txt and
# usage_NAME.txt, and says WHAT took how long, the result and the slowest tests.
ctest_again() {
  local name=$1 what=$2 jobs=$3 t0=$SECONDS
  rm -f build/Testing/Temporary/CTestCostData.txt
  tools/ctest_usage.py --build build --out "$out/usage_$name.txt" -- \
    ctest --test-dir build -j "$jobs" --output-on-failure 2>&1 | stamp >"$out/ctest_$name.txt"
  say "$what: $((SECONDS - t0)) s"
  grep -E "tests passed|tests failed" "$out/ctest_$name.txt" | tee -a "$summary"
  slowest 6 "$out/ctest_$name.txt"
}
((${#sections[@]})) || sections=(testsh profile2)

for section in "${sections[@]}"; do
  case $section in
    testsh)
      # A fresh clone's scripts/test.sh, each output line stamped with its second, the CPU
      # (vmstat) and the GPU (nvidia-smi) sampled meanwhile.
      rm -rf build
      vmstat -n 2 >"$out/vmstat.txt" 2>&1 & vm=$!
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 2 >"$out/gpu_util.csv" 2>&1 & sm=$!
      t0=$SECONDS
      # tools/ctest_usage.py: each test's CPU and GPU use beside its reservation (usage.txt).
      CCACHE_DISABLE=1 tools/ctest_usage.py --build build --out "$out/usage.txt" -- \
        scripts/test.sh --output-on-failure 2>&1 | stamp >"$out/test_sh.txt"
      rc=${PIPESTATUS[0]}
      kill $vm $sm 2>/dev/null
      say "scripts/test.sh (fresh build folder, no compiler cache): exit $rc after $((SECONDS - t0)) s"
      build_steps
      cp build/.ninja_log "$out/ninja_log.txt"
      grep -E "Total Test time|tests passed|tests failed" "$out/test_sh.txt" | tee -a "$summary"
      slowest 16 "$out/test_sh.txt"
      grep -E "ERROR:|FAILED" "$out/test_sh.txt" | head -20 | tee -a "$summary"
      ;;
    build)
      # preset dev in a fresh folder, no compiler cache: the build test.sh makes (BUILD_ARGS: more
      # cmake arguments, e.g. -DCMAKE_UNITY_BUILD=OFF)
      rm -rf build
      t0=$SECONDS
      # shellcheck disable=SC2086  # BUILD_ARGS: several words
      CCACHE_DISABLE=1 cmake --preset dev ${BUILD_ARGS:-} >"$out/cmake.log" 2>&1 &&
        CCACHE_DISABLE=1 cmake --build --preset dev -j "$(nproc)" >"$out/build.log" 2>&1 ||
        { tail -40 "$out/build.log" "$out/cmake.log"; exit 1; }
      say "build (preset dev ${BUILD_ARGS:-}, fresh folder, no compiler cache): $((SECONDS - t0)) s"
      build_steps
      cp build/.ninja_log "$out/ninja_log_build.txt"
      awk 'NR > 1 {printf "%.1f %s\n", ($2 - $1) / 1000, $4}' build/.ninja_log | sort -rn | head -12 | tee -a "$summary"
      ;;
    cases)
      # Each GPU suite alone (nothing else on the GPU or the cores), doctest's time for each of its
      # cases; the capture's checks stamped with their second. Where a shared run's time goes.
      for suite in gpu gpu_scenarios gpu_allocator gpu_uvm_counters gpu_context gpu_kernels gpu_hypotheses gpu_backward \
                   gpu_watchdog gpu_report; do
        t0=$SECONDS
        build/tests/gpu_tests -ts=$suite --duration=true --no-version >"$out/case_$suite.txt" 2>&1
        rc=$?
        say "$suite: exit $rc, $((SECONDS - t0)) s"
        grep -E "^[0-9.]+ s: " "$out/case_$suite.txt" | sort -rn | head -6 | tee -a "$summary"
      done
      t0=$SECONDS
      python3 tests/test_sdpa_capture.py --repro build/repro 2>&1 | stamp >"$out/case_capture.txt"
      say "capture: exit ${PIPESTATUS[0]}, $((SECONDS - t0)) s"
      for suite in bad_input sweep schemas; do
        t0=$SECONDS
        build/tests/cpu_tests -ts=$suite --duration=true --no-version >"$out/case_cpu_$suite.txt" 2>&1
        say "cpu $suite: exit $?, $((SECONDS - t0)) s"
        grep -E "^[0-9.]+ s: " "$out/case_cpu_$suite.txt" | sort -rn | head -3 | tee -a "$summary"
      done
      mkdir -p "$out/cases" && mv "$out"/case_*.txt "$out/cases/"
      ;;
    slots)
      # The same tests again (the build kept) with SLOTS GPU tests at a time.
      for slots in ${SLOTS:-2}; do
        cmake -S . -B build -DSDPA_GPU_SLOTS="$slots" >/dev/null
        ctest_again "slots$slots" "ctest with $slots GPU slots" "$(nproc)"
      done
      cmake -S . -B build -U SDPA_GPU_SLOTS >/dev/null
      ;;
    jobs)
      # The same tests again (the build kept) with JOBS CTest jobs (space-separated).
      for jobs in ${JOBS:-}; do
        ctest_again "j$jobs" "ctest -j $jobs" "$jobs"
      done
      ;;
    connections)
      # The same tests again (the build kept) with the tests' CUDA_DEVICE_MAX_CONNECTIONS at each
      # value of CONNECTIONS (space-separated; "default": the driver's own, 8), through the cache
      # variable SDPA_TEST_CUDA_CONNECTIONS (tests/CMakeLists.txt), then back to 1.
      for c in ${CONNECTIONS:-default 1}; do
        value=$c
        [[ $c == default ]] && value=""
        cmake build -DSDPA_TEST_CUDA_CONNECTIONS="$value" >/dev/null
        ctest_again "connections_$c" "ctest, the tests' CUDA_DEVICE_MAX_CONNECTIONS $c" "$(nproc)"
      done
      cmake build -DSDPA_TEST_CUDA_CONNECTIONS=1 >/dev/null
      ;;
    orders)
      # The same tests again (the build kept), the kinds of GPU test started in each order of
      # ORDERS (space-separated; kinds comma-separated).
      for order in ${ORDERS:-}; do
        cmake -S . -B build -DSDPA_GPU_ORDER="${order//,/;}" >/dev/null
        ctest_again "$order" "ctest with the kinds in the order $order" "$(nproc)"
      done
      cmake -S . -B build -U SDPA_GPU_ORDER >/dev/null
      ;;
    startup)
      # Each five times in a row: what a process, CUDA's start, and a small run cost here.
      timed() {
        local what=$1 t0 i
        shift
        t0=$(date +%s%N)
        for i in 1 2 3 4 5; do "$@" >/dev/null 2>&1; done
        say "$(awk -v ns=$(($(date +%s%N) - t0)) -v w="$what" 'BEGIN {printf "%-44s %6.0f ms a run\n", w, ns / 5e6}')"
      }
      timed "repro --help (opens no CUDA library)" build/repro --help
      timed "repro --version (opens cuBLAS)" build/repro --version
      timed "gpu_tests, one case of 0.3 s (CUDA's start)" build/tests/gpu_tests -ts=gpu_uvm_counters
      timed "repro -L 64 (fork)" build/repro -b 1 --heads 1 -L 64 -E 64 --iters 1
      timed "repro -L 64 --no-fork" build/repro -b 1 --heads 1 -L 64 -E 64 --iters 1 --no-fork
      timed "repro -L 64 --check" build/repro -b 1 --heads 1 -L 64 -E 64 --iters 1 --check
      timed "repro default (25 calls)" build/repro
      build/repro -b 1 --heads 1 -L 64 -E 64 --iters 1 --log stages --json "$out/startup_run.json" >"$out/startup_run.txt" 2>&1
      ;;
    concurrency)
      # N processes at once (N in CONCURRENCY, default 1 2 4 8 16), each running the same command
      # four times in a row: a run's seconds at each N, and the runs ended per second. Where a run
      # is mostly CUDA's start, this is what GPU tests sharing the GPU pay per process.
      for what in version run_no_fork run_fork; do
        case $what in
          version) cmd=(build/repro --version) ;;
          run_no_fork) cmd=(build/repro -b 1 --heads 1 -L 64 -E 64 --iters 1 --no-fork) ;;
          run_fork) cmd=(build/repro -b 1 --heads 1 -L 64 -E 64 --iters 1) ;;
        esac
        for n in ${CONCURRENCY:-1 2 4 8 16}; do
          t0=$(date +%s%N)
          for ((p = 0; p < n; p++)); do
            (for i in 1 2 3 4; do "${cmd[@]}" >/dev/null 2>&1; done) &
          done
          wait
          say "$(awk -v ns=$(($(date +%s%N) - t0)) -v n="$n" -v w="$what" \
            'BEGIN {printf "%-12s %2d at once: %6.0f ms a run, %5.1f runs/s\n", w, n, ns / 4e6, 4 * n / (ns / 1e9)}')"
        done
      done
      ;;
    profile2)
      repro=build/repro
      t0=$SECONDS
      $repro --scenario 2 --iters 25 --json "$out/iso25.json" >"$out/iso25.txt" 2>&1
      say "scenario 2, 25 calls, no check: exit $? in $((SECONDS - t0)) s"
      t0=$SECONDS
      $repro --scenario 2 --iters 1 --check >"$out/iso1_check.txt" 2>&1
      say "scenario 2, 1 call, --check: exit $? in $((SECONDS - t0)) s"
      $repro --scenario 2 --plan --alloc-timing per-call --layers model --layers-fit --retain autograd \
        >"$out/plan_layers.txt" 2>&1
      grep -iE "layers|fit" "$out/plan_layers.txt" | head -4 | tee -a "$summary"
      t0=$SECONDS
      $repro --scenario 2 --alloc-timing per-call --layers 8 --retain autograd --iters 2 --check --check-layers last \
        --json "$out/l8.json" >"$out/l8.txt" 2>&1
      say "scenario 2, 8 layers x 2 passes, last layer checked: exit $? in $((SECONDS - t0)) s"
      python3 - "$out" <<'EOF' | tee -a "$summary"
import json, sys
for name in ("iso25", "l8"):
    try:
        r = json.load(open(f"{sys.argv[1]}/{name}.json"))
    except Exception as e:
        print(name, "no JSON:", e)
        continue
    st = r.get("steps") or {}
    print(f"{name}: exit {r.get('exit_code')}, {st.get('count')} passes, first {st.get('first_ms', 0):.0f} ms, "
          f"median {st.get('median_ms', 0):.0f} ms, last {st.get('last_ms', 0):.0f} ms; layers {r.get('settings', {}).get('layers')}")
EOF
      ;;
    *) say "unknown section $section"; exit 2 ;;
  esac
done
say "total: $((SECONDS - start)) s"
device_pack test_sh.txt "usage*.txt"  # a call brings back a few files: the rest in logs.tar.gz
