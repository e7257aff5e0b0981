#!/usr/bin/env bash
# device_triage.sh: `repro triage` end to end on a GPU machine, twice: with a hang injected from
# S = 2048 on managed memory (the sweep finds it, minimize shrinks it to its known answer, report
# documents it), and as a user runs it (nothing hangs on a healthy GPU: the sweep and the ladder,
# nvidia-bug-report.sh when root). Each within its budget, its archive holding what its
# SUMMARY.md lists. Logs under $OUT (or ./device-out), the summary last.
set -uo pipefail
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
t0=$SECONDS
$repro triage --out "$out/triage_injected" --budget 4m --scenarios 1,2 --runs 2 --stage-timeout 3 --no-bug-report \
  --inject 'hang:qk_gemm@S>=2048@alloc=managed' >"$out/triage_injected.txt" 2>&1
say "repro triage --budget 4m --scenarios 1,2 --inject 'hang:qk_gemm@S>=2048@alloc=managed': exit $?, $((SECONDS - t0)) s"
check_archive "$out/triage_injected"
t0=$SECONDS
$repro triage --out "$out/triage" --budget 3m --scenarios 2 >"$out/triage.txt" 2>&1
say "repro triage --budget 3m --scenarios 2: exit $?, $((SECONDS - t0)) s"
check_archive "$out/triage"
cp "$out/triage_injected/SUMMARY.md" "$out/triage_injected_SUMMARY.md"
cp "$out/triage/SUMMARY.md" "$out/triage_SUMMARY.md"
cat "$out/triage_injected.txt" "$out/triage.txt" | grep -E "triage: " | cut -c1-200 | tee -a "$summary"
say "total: $((SECONDS - start)) s"
device_pack triage_injected_SUMMARY.md triage_SUMMARY.md
