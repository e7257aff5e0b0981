#!/usr/bin/env bash
# ladder.sh: the validation ladder (docs/SCENARIOS.md) (1 call, 10 calls, 1000 calls) for every scenario, as
# one command to run before trusting the harness on a new machine. Each rung is a checked
# `repro` run; the 1000-call rung samples memory every 100 calls and fails if GPU free memory,
# RSS or the live allocations move after warm-up (docs/REPORTS.md, "Soak"). Prints one row per rung and
# exits 0 only if every rung passed (or was waived by the device), 1 otherwise. A rung that finds no
# usable GPU (repro's exit 7) stops the ladder at once with one line and exit 7: every other rung
# would say the same.
#
#   scripts/ladder.sh [path/to/repro] [extra repro options...]
set -uo pipefail
repro=${1:-./build/repro}
shift || true
if [[ ! -x $repro ]]; then
  echo "ladder: $repro is not an executable (build first: cmake --build build)" >&2
  exit 2
fi
printf '%-8s %-4s %6s  %-8s %-12s %s\n' scenario fix calls outcome rel_error memory
failed=0
scenarios=(0 1 2 3 4) fixes=(off on) rung_calls=(1 10 1000)
rungs=$((${#scenarios[@]} * ${#fixes[@]} * ${#rung_calls[@]})) ran=0
for scenario in "${scenarios[@]}"; do
  for fix in "${fixes[@]}"; do
    fix_args=(--fix "$fix")
    ((scenario == 0)) && fix_args=(--fixes "$([[ $fix == on ]] && echo all || echo none)")
    for calls in "${rung_calls[@]}"; do
      soak=()
      ((calls == 1000)) && soak=(--sample-every 100)
      text=$("$repro" --scenario "$scenario" "${fix_args[@]}" --check --iters "$calls" "${soak[@]}" "$@" 2>/dev/null)
      rc=$?
      outcome=$(sed -n 's/^# result: \([a-z_]*\).*/\1/p' <<<"$text")
      err=$(sed -n 's/^# check ([a-z]*): rel_error \([^ ]*\).*/\1/p' <<<"$text")
      memory=$(sed -n 's/^# memory: \([A-Za-z]*\) .*/\1/p' <<<"$text")
      printf '%-8s %-4s %6s  %-8s %-12s %s\n' "$scenario" "$fix" "$calls" "${outcome:-exit$rc}" "${err:--}" "${memory:--}"
      ran=$((ran + 1))
      if ((rc == 7)); then
        reason=$(sed -n 's/^# result: no_gpu (exit 7): //p' <<<"$text")
        echo "ladder: NO GPU: ${reason:-repro exited 7 (no usable CUDA GPU)}; stopped, $((rungs - ran)) rungs not run"
        exit 7
      fi
      ((rc == 0 || rc == 6)) || failed=1
    done
  done
done
((failed)) && echo "ladder: FAILED" || echo "ladder: OK"
exit $failed
