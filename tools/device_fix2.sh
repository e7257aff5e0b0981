#!/usr/bin/env bash
# device_fix2.sh: the GPU evidence of fix 2's lean form (the scores in device memory) in one
# call on a GPU machine: builds preset ci; its cost against no fix (and the prefetch's, in the same
# process) at the three benchmark shapes; scenario 2 at its workload fix off and lean, with the
# driver's migration counters; the GPU test of what it guarantees; the report's reproducer with it;
# and the GPU tests made faster (the hang per stage four at a time, the sanitizers). Logs under
# $OUT (or ./device-out), the summary last, everything else in one archive.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_build_ci
repro=./build-ci/repro
for shape in "2 8 512 64" "4 16 2048 64" "1 24 4608 128"; do
  read -r b h l e <<<"$shape"
  name=${b}x${h}x${l}x${e}
  t0=$SECONDS
  $repro bench -b "$b" --heads "$h" -L "$l" -E "$e" -n 200 --fix-overhead 2:lean,2:prefetch \
    --json "$out/overhead_$name.json" >"$out/overhead_$name.txt" 2>&1
  say "bench $name --fix-overhead 2:lean,2:prefetch: exit $?, $((SECONDS - t0)) s"
  python3 - "$out/overhead_$name.json" <<'EOF' | tee -a "$summary"
import json, sys
d = json.load(open(sys.argv[1]))
for o in d["fix_overhead"]:
    w, g = o["ratio_wall"], o["ratio_gpu"]
    print("  %-11s wall %.3f [%.3f, %.3f]  gpu %.3f [%.3f, %.3f]  A median %.4f ms  %s" % (
        o["fix"], w["ratio"], w["ci95"][0], w["ci95"][1], g["ratio"], g["ci95"][0], g["ci95"][1],
        o["a"]["summaries"]["wall"]["median_ms"], o["verdict"]))
EOF
done
for fix in off lean; do
  t0=$SECONDS
  $repro --scenario 2 --fix $fix --check --uvm-counters --log stages --json "$out/s2_$fix.json" \
    >"$out/s2_$fix.txt" 2>"$out/s2_$fix.err"
  say "scenario 2 (its workload) --fix $fix --uvm-counters: exit $?, $((SECONDS - t0)) s"
  python3 - "$out/s2_$fix.json" <<'EOF' | tee -a "$summary"
import json, sys
j = json.load(open(sys.argv[1]))
p = j["config"]["problem"]
u = j["uvm"]
path = [r for r in u["ranges"] if r["range"] == "path"] if u["available"] else []
print("  %sx%sx%sx%sx%s %s fixes=%s rel_error=%s softmax variant in log; uvm path: %s" % (
    p["batch"], p["q_heads"], p["q_len"], p["kv_len"], p["head_dim"], p["dtype"], j["config"]["fix_list"],
    (j["check"] or {}).get("rel_error"),
    ("htod %d B, dtoh %d B, gpu faults %d, cpu faults %d" % (path[0]["bytes_htod"], path[0]["bytes_dtoh"],
     path[0]["gpu_page_faults"], path[0]["cpu_page_faults"])) if path else u["unavailable"]))
EOF
  grep -m2 -E "FIX_2|touched the scores" "$out/s2_$fix.err" | cut -c1-200 | sed 's/^/  /' | tee -a "$summary"
done
t0=$SECONDS
timeout 200 ./build-ci/tests/gpu_tests --test-suite=gpu_hypotheses --test-case="*device-scores*" --success=false \
  >"$out/test_device_scores.log" 2>&1
say "test fix 2 device-scores: exit $?, $((SECONDS - t0)) s, $(grep -E '^\[doctest\] test cases' "$out/test_device_scores.log")"
grep -E "MESSAGE|migration" -A2 "$out/test_device_scores.log" | head -6 | tee -a "$summary"
grep -E "ERROR" -A6 "$out/test_device_scores.log" | head -20
t0=$SECONDS
$repro report --scenario 2 -L 256 --fix-form lean --out "$out/report_lean" >"$out/report_lean.txt" 2>&1
say "report --scenario 2 -L 256 --fix-form lean: exit $?, $((SECONDS - t0)) s; $(grep -m1 -E '^# ' "$out/report_lean/REPORT.md" 2>/dev/null | cut -c1-160)"
grep -m3 -iE "reproducer.*(agree|differ|exit)" "$out/report_lean.txt" | cut -c1-200 | tee -a "$summary"
for case in "gpu_watchdog|an injected hang in every stage*" "gpu_backward|a hang injected in each backward stage*"; do
  suite=${case%%|*} pattern=${case#*|}
  t0=$SECONDS
  timeout 400 ./build-ci/tests/gpu_tests --test-suite="$suite" --test-case="$pattern" >"$out/test_$suite.log" 2>&1
  say "test $suite '$pattern': exit $?, $((SECONDS - t0)) s, $(grep -E '^\[doctest\] test cases' "$out/test_$suite.log")"
  grep -E "ERROR" -A6 "$out/test_$suite.log" | head -20
done
t0=$SECONDS
tests/run_sanitizer.sh memcheck $repro ./build-ci/tests/gpu_tests >"$out/sanitizer_memcheck.log" 2>&1
say "sanitizer memcheck (4 at a time): exit $?, $((SECONDS - t0)) s; $(tail -1 "$out/sanitizer_memcheck.log")"
say "total: $((SECONDS - start)) s"
device_pack
