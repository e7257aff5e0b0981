#!/usr/bin/env bash
# device_test_sh.sh: scripts/test.sh on a lent GPU machine as a fresh clone runs it (no build
# folder, no compiler cache), timed; then, with the repro it built, the cost of scenario 2's runs
# at the default workload (what the context ladder's rungs are made of). Logs under $OUT (or
# ./device-out), the summary last.
#
#   scripts/device_test_sh.sh [testsh] [slots] [profile2]   # default: testsh profile2
#   SLOTS="2 1" scripts/device_test_sh.sh slots             # ctest again with 2, then 1 GPU test at a time
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
sections=("$@")
# Each line of stdin with the seconds since it started.
stamp() {
  local t0=$SECONDS line
  while IFS= read -r line; do echo "$((SECONDS - t0)) $line"; done
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
      CCACHE_DISABLE=1 scripts/test.sh --output-on-failure 2>&1 |
        stamp >"$out/test_sh.txt"
      rc=${PIPESTATUS[0]}
      kill $vm $sm 2>/dev/null
      say "scripts/test.sh (fresh build folder, no compiler cache): exit $rc after $((SECONDS - t0)) s"
      awk 'NR > 1 {d = ($2 - $1) / 1000; s += d; if ($2 > m) m = $2} END {printf "build steps summed %.0f s, span %.0f s\n", s, m / 1000}' \
        build/.ninja_log | tee -a "$summary"
      grep -E "Total Test time|tests passed|tests failed" "$out/test_sh.txt" | tee -a "$summary"
      grep -E "Test +#" "$out/test_sh.txt" | awk '{print $1 "s", $(NF-1), $5, $(NF-2)}' | sort -k2 -rn | head -16 | tee -a "$summary"
      grep -E "ERROR:|FAILED" "$out/test_sh.txt" | head -20 | tee -a "$summary"
      ;;
    slots)
      # The same tests again (the build kept) with SLOTS GPU tests at a time.
      for slots in ${SLOTS:-2}; do
        cmake -S . -B build -DSDPA_GPU_SLOTS="$slots" >/dev/null
        t0=$SECONDS
        ctest --test-dir build -j "$(nproc)" --output-on-failure 2>&1 |
          stamp >"$out/ctest_slots$slots.txt"
        say "ctest with $slots GPU slots: $((SECONDS - t0)) s"
        grep -E "tests passed|tests failed" "$out/ctest_slots$slots.txt" | tee -a "$summary"
        grep -E "Test +#" "$out/ctest_slots$slots.txt" | awk '{print $1 "s", $(NF-1), $5, $(NF-2)}' | sort -k2 -rn | head -8 | tee -a "$summary"
      done
      cmake -S . -B build -DSDPA_GPU_SLOTS=4 >/dev/null
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
