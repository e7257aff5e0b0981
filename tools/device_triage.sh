#!/usr/bin/env bash
# device_triage.sh: `repro triage` end to end on a GPU machine, twice: with a hang injected from
# S = 2048 on managed memory (the sweep finds it, minimize shrinks it to its known answer, report
# documents it), and as a user runs it (nothing hangs on a healthy GPU: the sweep and the ladder,
# nvidia-bug-report.sh when root). Each within its budget, its archive holding what its
# SUMMARY.md lists. Then a freeze as a reboot leaves it: a triage killed (SIGKILL, its children
# dying with it) while a sweep cell runs on the GPU, and `--resume`, which must not run the sweep
# again and must name the cell with the last stage record of its log. Logs under $OUT (or
# ./device-out), the summary last.
#
# `known NAME,...` instead runs gpu.triage's known-answer triages (tests/triage_known_answers.h;
# all four when no names), keeping each folder and SUMMARY.md.
#
#   tools/device_triage.sh [injected] [user] [resume]     (default: all three)
#   tools/device_triage.sh known [softmax_from_2048,layer_3,dq_gemm_backward,stall]
set -uo pipefail
if [[ ${1:-} == known ]]; then
  source "$(dirname "$0")/device_lib.sh"
  device_setup
  device_build_ci
  mkdir -p "$out/known"
  t0=$SECONDS
  SDPA_TRIAGE_KEEP=$(cd "$out/known" && pwd) SDPA_TRIAGE_ONLY=${2:-} ./build-ci/tests/gpu_tests -ts=gpu_triage -s >"$out/known.txt" 2>&1
  say "gpu_triage ${2:-all}: exit $?, $((SECONDS - t0)) s"
  grep -E "MESSAGE|: repro triage --inject|ERROR|test cases|assertions" "$out/known.txt" | cut -c1-300 | tee -a "$summary"
  for d in "$out"/known/*/; do
    n=$(basename "$d")
    cp "$d/SUMMARY.md" "$out/${n}_SUMMARY.md" 2>/dev/null
    say "== $n: $(grep -m1 '^\*\*' "$d/SUMMARY.md" | cut -c1-120)"
    grep -E "\] [a-z0-9-]+: (exit|stopped|interrupted|not run|left out)" "$d/triage.log" | cut -f3 | cut -c1-160 | tee -a "$summary"
  done
  say "total: $((SECONDS - start)) s"
  device_pack $(cd "$out" && ls -- *_SUMMARY.md 2>/dev/null)
  exit 0
fi
sections=" ${*:-injected user resume} "
source "$(dirname "$0")/device_lib.sh"
device_setup
device_build_ci
repro=$PWD/build-ci/repro
check_archive() {  # every file SUMMARY.md lists is in the archive
  local dir=$1 name missing=0
  name=$(basename "$dir")
  tar tzf "$dir.tar.gz" >"$dir.list"  # listed once: grep -q on tar's pipe would cut it short (SIGPIPE)
  for f in $(sed -n '/^## Files/,$ s/^- `\([^`]*\)`.*/\1/p' "$dir/SUMMARY.md"); do
    grep -qx "$name/$f" "$dir.list" || { say "  missing from the archive: $f"; missing=1; }
  done
  say "  $name.tar.gz: $(wc -l <"$dir.list") entries, $(du -k "$dir.tar.gz" | cut -f1) KiB; every file SUMMARY.md lists is in it: $([[ $missing == 0 ]] && echo yes || echo NO)"
}
keep=()
# run_triage NAME ARGS...: repro triage --out $out/NAME ARGS, its exit and time, its archive
# checked, its SUMMARY.md kept as NAME_SUMMARY.md, its progress lines in the summary.
run_triage() {
  local name=$1 t0=$SECONDS
  shift
  $repro triage --out "$out/$name" "$@" >"$out/$name.txt" 2>&1
  say "repro triage $*: exit $?, $((SECONDS - t0)) s"
  check_archive "$out/$name"
  cp "$out/$name/SUMMARY.md" "$out/${name}_SUMMARY.md"
  grep -E "triage: " "$out/$name.txt" | cut -c1-200 | tee -a "$summary"
  keep+=("${name}_SUMMARY.md")
}
if [[ $sections == *" injected "* ]]; then
  run_triage triage_injected --budget 4m --scenarios 1,2 --runs 2 --stage-timeout 3 --no-bug-report \
    --inject 'hang:qk_gemm@S>=2048@alloc=managed'
fi
[[ $sections == *" user "* ]] && run_triage triage --budget 3m --scenarios 2
if [[ $sections == *" resume "* ]]; then
  dir=$out/triage_frozen
  t0=$SECONDS
  $repro triage --out "$dir" --budget 3m --scenarios 2 --no-bug-report >"$out/triage_frozen_first.txt" 2>&1 &
  pid=$!
  # The first cell's stage log appears as its run starts; a second later the run is on the GPU.
  while [[ ! -s $dir/sweep/sweep.cells/cell-0.log ]] && ((SECONDS - t0 < 120)); do sleep 0.2; done
  sleep 1
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  sleep 1
  say "triage killed (SIGKILL) $((SECONDS - t0)) s in, during the sweep's cell 0; processes left: $(pgrep -fc "$dir" || true)"
  cp "$dir/sweep/sweep.jsonl" "$out/frozen_jsonl_before" 2>/dev/null || : >"$out/frozen_jsonl_before"
  t0=$SECONDS
  $repro triage --out "$dir" --resume >"$out/triage_frozen_resume.txt" 2>&1
  say "repro triage --out triage_frozen --resume: exit $?, $((SECONDS - t0)) s"
  cmp -s "$out/frozen_jsonl_before" "$dir/sweep/sweep.jsonl" 2>/dev/null || [[ ! -e $dir/sweep/sweep.jsonl ]]
  say "  the sweep's records unchanged by the resume: $([[ $? == 0 ]] && echo yes || echo NO)"
  sed -n '/^## Where the machine stopped/,/^## /p' "$dir/SUMMARY.md" | grep '^- ' | cut -c1-300 | tee -a "$summary"
  check_archive "$dir"
  cp "$dir/SUMMARY.md" "$out/triage_frozen_SUMMARY.md"
  grep -E "triage: " "$out/triage_frozen_resume.txt" | cut -c1-200 | tee -a "$summary"
  keep+=(triage_frozen_SUMMARY.md)
fi
say "total: $((SECONDS - start)) s"
device_pack "${keep[@]}"
