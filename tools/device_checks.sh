#!/usr/bin/env bash
# device_checks.sh: the context ladder of scenario 2 over the small captured call of
# tests/fixtures/triage/workload.json, healthy (every rung must pass), and gpu.watchdog and
# gpu.report; logs under $OUT (or ./device-out), the summary last.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_build_ci
r=build-ci/repro
t0=$SECONDS
$r report --ladder --scenario 2 --workload-file tests/fixtures/triage/workload.json --call 0 --out "$out/ladder_capture" \
  >"$out/ladder_capture.txt" 2>&1
say "repro report --ladder --scenario 2 --workload-file tests/fixtures/triage/workload.json --call 0: exit $? after $((SECONDS - t0)) s"
grep -E "rung [a-z-]+: [a-z_]+ \(" "$out/ladder_capture.txt" | tee -a "$summary"
cp "$out/ladder_capture/REPORT.md" "$out/ladder_capture_REPORT.md"
t0=$SECONDS
ctest --test-dir build-ci -R 'gpu\.(watchdog|report)$' -j 2 >"$out/ctest.txt" 2>&1
say "ctest gpu.watchdog gpu.report: exit $? after $((SECONDS - t0)) s"
grep -E "Test +#|tests passed" "$out/ctest.txt" | tee -a "$summary"
say "total: $((SECONDS - start)) s"
device_pack ladder_capture_REPORT.md ladder_capture.txt
