#!/usr/bin/env bash
# device_torch_stages.sh: the PyTorch side against the harness, on a GPU machine with PyTorch: builds
# preset ci, then for each case below runs the harness (`repro --log-format sdpa-debug`) and
# scripts/torch_stages.py on the same run options (the script asks the same binary for their call
# plan) and compares the two logs' tag sequences, every call of the run (compare_logs.py --all).
#
#   tools/device_torch_stages.sh            # PYTHON=python3.12 for another interpreter
#
# Prints a table (case, each side's exit code, same stage sequence, the tags compared, how many
# conditions PyTorch cannot express, the result's l2 in PyTorch over the harness's: both run on the
# harness's inputs, repro --save-inputs) and exits 0 when every case has the same sequence and both
# sides exit 0, 1 otherwise; then each "cannot express" line. Scenarios 2, 6 and 7 run at sizes that
# fit and pass quickly (7's weights 1 GB, in the harness's default file, which its run makes); the
# rest at their own. Scenario 5 (a CUDA graph) logs its stages without the per-stage device
# synchronisation sdpa-debug implies (`--log stages`): a graph cannot synchronise inside itself. About 2-3 minutes on an H200 with the build. Logs under $OUT (or ./device-out).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
device_build_ci
python=${PYTHON:-python3}
small="-b 1 --heads 4 -L 256 -E 64"
cases=(
  "0 off|--scenario 0"
  "1 off|--scenario 1 --fix off" "1 on|--scenario 1 --fix on"
  "2 off|--scenario 2 --fix off -b 1 --heads 2 -L 2048 -E 64" "2 on|--scenario 2 --fix on -b 1 --heads 2 -L 2048 -E 64"
  "3 off|--scenario 3 --fix off" "3 on|--scenario 3 --fix on"
  "4 off|--scenario 4 --fix off" "4 on|--scenario 4 --fix on"
  "5 off|--scenario 5 --fix off --log stages" "5 on|--scenario 5 --fix on --log stages"
  "6 off|--scenario 6 --fix off $small --layers 3" "6 on|--scenario 6 --fix on $small --layers 3 --chunk-size 256K"
  "7 off|--scenario 7 --fix off $small --layers 3 --mapped-weights 1G"
  "7 on|--scenario 7 --fix on $small --layers 3 --mapped-weights 1G"
  "training|-L 64 -S 64 --backward --retain checkpoint --alloc-timing per-call --layers 2 --dropout 0.1 --mask bool"
)
printf "%-9s %-6s %-6s %-5s %-6s %-8s %s\n" case repro torch same tags "cannot" "l2 torch/repro" | tee -a "$summary"
failed=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  args=${c#*|}
  tag=${name// /_}
  # shellcheck disable=SC2086  # the options are words
  timeout 120 build-ci/repro $args --log-format sdpa-debug --stage-timeout 60 --json "$out/repro_$tag.json" \
    >"$out/repro_$tag.txt" 2>"$out/repro_$tag.log"
  rrc=$?
  # shellcheck disable=SC2086
  timeout 120 "$python" scripts/torch_stages.py --repro build-ci/repro $args --stage-timeout 60 \
    --json "$out/torch_$tag.json" >"$out/torch_$tag.txt" 2>"$out/torch_$tag.log"
  trc=$?
  "$python" scripts/compare_logs.py --all "$out/repro_$tag.log" "$out/torch_$tag.log" >"$out/compare_$tag.txt" 2>&1
  same=$([ $? = 0 ] && echo yes || echo no)
  [ "$same" = yes ] && [ $rrc = 0 ] && [ $trc = 0 ] || failed=1
  tags=$(grep -oE "\([0-9]+ tags\)" "$out/compare_$tag.txt" | tr -dc 0-9)
  cannot=$(grep -c "cannot express in PyTorch" "$out/torch_$tag.log")
  ratio=$("$python" -c 'import json, sys
l2 = [(json.load(open(f)).get("result_stats") or {}).get("l2") for f in sys.argv[1:]]
print("%.6f" % (l2[1] / l2[0]) if None not in l2 and l2[0] else "-")' "$out/repro_$tag.json" "$out/torch_$tag.json" 2>/dev/null)
  printf "%-9s %-6s %-6s %-5s %-6s %-8s %s\n" "$name" "$rrc" "$trc" "$same" "${tags:--}" "$cannot" "${ratio:--}" |
    tee -a "$summary"
  [ "$same" = yes ] || sed 's/^/    /' "$out/compare_$tag.txt" | head -4 | tee -a "$summary"
done
say "what PyTorch cannot express, by case:"
grep -H "cannot express in PyTorch" "$out"/torch_*.log | sed "s|$out/torch_||; s|\.log:torch_stages.py: cannot express in PyTorch||" |
  cut -c1-160 | tee -a "$summary"
say "total: $((SECONDS - start)) s; $([ $failed = 0 ] && echo "every case: the same stage sequence, both exit 0" || echo FAILED)"
exit $failed
