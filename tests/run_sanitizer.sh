#!/usr/bin/env bash
# run_sanitizer.sh: compute-sanitizer as a test mode (CTest label `sanitizer`).
#
#   tests/run_sanitizer.sh TOOL REPRO [GPU_TESTS]
#
# Runs `repro --no-fork` under `compute-sanitizer --tool TOOL` for every scenario x fix off/on x
# bf16/fp32 at a small shape (memcheck with leak checking), and, for memcheck, a subset of the
# GPU test binary; every run must finish with its own exit code 0 (or 6, waived) and "0 errors".
# Deliberately hanging cases (fault injection) are not run. Exits 77 (skipped, with a message)
# where compute-sanitizer or a GPU is missing.
#
# SANITIZER_JOBS (default 4) runs go at once: the tools' cost is host-side instrumentation, no
# case checks a time, and each run is its own process with its own report. The results print in
# the cases' order once all have ended.
set -uo pipefail
tool=$1 repro=$2 gpu_tests=${3:-}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [[ ! -x $sanitizer ]]; then
  echo "SKIPPED: compute-sanitizer not found (it comes with the CUDA toolkit)"
  exit 77
fi
"$repro" --iters 1 >/dev/null 2>&1
if [[ $? -eq 7 ]]; then
  echo "SKIPPED: the sanitizer tests need an NVIDIA GPU (repro reports none)"
  exit 77
fi
args=(--tool "$tool" --error-exitcode 99)
[[ $tool == memcheck ]] && args+=(--leak-check full)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
jobs_max=${SANITIZER_JOBS:-4}
labels=()
check() {  # label, command...: started in the background, judged by judge() at the end
  local n=${#labels[@]}
  labels+=("$1")
  shift
  ( "$sanitizer" "${args[@]}" "$@" >"$logs/$n.log" 2>&1; echo $? >"$logs/$n.rc" ) &
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n; done
}
failed=0 runs=0
judge() {  # label, exit code, log
  local label=$1 rc=$2 log=$3
  local summary
  summary=$(grep -E "(ERROR|LEAK|RACECHECK) SUMMARY" "$log" | tr '\n' ' ')
  runs=$((runs + 1))
  printf '%-44s rc=%-3d %s\n' "$label" "$rc" "${summary:-no summary}"
  # racecheck ends with its own line, "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0
  # warnings)"; the other tools with "ERROR SUMMARY: 0 errors".
  if [[ $rc -ne 0 && $rc -ne 6 ]] ||
    ! grep -Eq "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)" "$log"; then
    failed=1
    grep -E -B2 -A12 "^========= (Invalid|Uninitialized|Race|Barrier|Leaked|Error|Warning)" "$log" | head -40
    [[ -n $summary ]] || tail -n 8 "$log"  # no summary line at all: show how the tool ended
  fi
}
# Under a sanitizer every stage runs many times slower, and more so beside the other GPU tests:
# no stall is judged (--stall-threshold 0), a slow stage being no error of the tool's finding.
for scenario in 0 1 2 3 4; do
  for fix in off on; do
    fix_args=(--fix "$fix")
    ((scenario == 0)) && fix_args=(--fixes "$([[ $fix == on ]] && echo all || echo none)")
    for dtype in bf16 fp32; do
      check "scenario $scenario fix $fix $dtype" "$repro" --no-fork --scenario "$scenario" "${fix_args[@]}" \
        --dtype "$dtype" -b 1 --heads 2 -L 64 -S 96 -E 64 --mask causal --check --stall-threshold 0
    done
  done
done
if [[ $tool == memcheck && -n $gpu_tests ]]; then
  check "gpu_tests: back-to-back calls, allocators" "$gpu_tests" --test-suite=gpu \
    --test-case='*back-to-back*,*bitwise-identical output*'
fi
wait
for n in "${!labels[@]}"; do judge "${labels[n]}" "$(cat "$logs/$n.rc" 2>/dev/null || echo 98)" "$logs/$n.log"; done
echo "$tool: $runs runs, $([[ $failed -eq 0 ]] && echo "0 with errors" || echo "FAILED")"
exit $failed
