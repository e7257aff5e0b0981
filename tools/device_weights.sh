#!/usr/bin/env bash
# device_weights.sh: the mapped weights' condition and scenario 7 on a GPU machine. The load's
# memory picture with each of fix 6's parts (Cached, MemFree, MemAvailable and RssFile before and
# after, printed by the run itself, with the load's time and bandwidth), scenario 7 at a size that
# fits (fix off, on and lean, checked), its full size refused before anything is allocated, and a
# hang injected into the load: named, snapshotted, classified. Logs and JSON under $OUT (or
# ./device-out), the summary last. SIZE (default 30G) must fit the machine's disk and host memory.
#
#   tools/device_weights.sh [SIZE]
set -uo pipefail
size=${1:-30G}
source "$(dirname "$0")/device_lib.sh"
device_setup
device_build_ci
repro=$PWD/build-ci/repro
export SDPA_WEIGHTS_FILE=${SDPA_WEIGHTS_FILE:-$PWD/weights-file.bin}
say "weights file: $SDPA_WEIGHTS_FILE; disk: $(df -h --output=avail "$(dirname "$SDPA_WEIGHTS_FILE")" | tail -1)"
# run NAME ARGS...: repro ARGS --json $out/NAME.json (not with --plan, which writes none), its exit
# and time, its weights lines
run() {
  local name=$1 t0=$SECONDS code json=()
  shift
  [[ " $* " == *" --plan "* ]] || json=(--json "$out/$name.json")
  "$repro" "$@" "${json[@]}" >"$out/$name.log" 2>&1
  code=$?
  say "$name: exit $code in $((SECONDS - t0)) s: repro $*"
  grep -E "^# weights loaded|^#   (before|after|change)|^# result|error:|refused" "$out/$name.log" | sed 's/^/  /' | tee -a "$summary"
}
small=(-b 1 --heads 8 -L 1024 -E 64)
run load_mapped --mapped-weights "$size" "${small[@]}" --check
run load_direct --mapped-weights "$size" --fixes 6:direct "${small[@]}" --check
run load_drop --mapped-weights "$size" --fixes 6:drop "${small[@]}" --check
run load_keep --mapped-weights "$size" --weights-mapping keep "${small[@]}" --check
run s7_plan --scenario 7 --plan
run s7_full --scenario 7
run s7_off --scenario 7 --mapped-weights 20G --layers 4 "${small[@]}" --check
run s7_on --scenario 7 --mapped-weights 20G --layers 4 "${small[@]}" --check --fix on
run s7_lean --scenario 7 --mapped-weights 20G --layers 4 "${small[@]}" --check --fix lean
run s7_hang --scenario 7 --mapped-weights 2G --layers 1 "${small[@]}" --inject hang:load_weights --stage-timeout 5 --log stages
python3 - "$out/s7_hang.json" <<'PY' | tee -a "$summary"
import json, sys
j = json.load(open(sys.argv[1]))
w = j.get("watchdog") or {}
print("  hang: outcome %s, stage %s, scenario %s, snapshot %s" % (j.get("outcome"), w.get("stage"), w.get("scenario"),
      (w.get("snapshot") or {}).get("dir") if isinstance(w.get("snapshot"), dict) else w.get("snapshot")))
print("  classification: %s" % (w.get("classification") or "")[:400])
PY
run s2_backward --scenario 2 --backward --check
"$repro" triage --dry-run --out "$out/triage-plan" --scenarios 1-7 --no-bug-report >"$out/triage_plan.log" 2>&1
say "triage --dry-run --scenarios 1-7: exit $? ($(grep -c '^  valid' "$out/triage_plan.log") valid, $(grep -c 'left out' "$out/triage_plan.log") left out, $(grep -c 'CANNOT RUN' "$out/triage_plan.log") cannot run)"
rm -f "$SDPA_WEIGHTS_FILE"
say "total: $((SECONDS - start)) s"
device_pack
cat "$summary"
