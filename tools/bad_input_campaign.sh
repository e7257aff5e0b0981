#!/usr/bin/env bash
# bad_input_campaign.sh: every command line below, as a new user might type it (mistyped,
# incomplete, out of range, pointing at files and folders that cannot be used), run against a
# repro binary in a scratch folder with no GPU visible. Prints one row per invocation: the exit
# code, how many lines it wrote to stderr, and its first line; then a verdict per row:
#   ok      refused: exit 2 with one line
#   ran     a valid line that ran as far as this machine allows: exit 0 (nothing needed a GPU) or 7
#           (no usable GPU); its progress may take several lines. Run as root, the read-only
#           folder `ro` is writable (root ignores the mode), so its rows run.
#   CRASH   a signal or an uncaught exception (exit >= 124, "terminate called")
#   LONG    a refusal of more than one line
# and the totals. Exit 1 if any row is CRASH or LONG.
#
#   tools/bad_input_campaign.sh [REPRO]      # default build-ci/repro
set -uo pipefail
repro=$(realpath "${1:-build-ci/repro}")
scratch=$(mktemp -d)
trap 'chmod -R u+w "$scratch"; rm -rf "$scratch"' EXIT
cd "$scratch" || exit 2
export CUDA_VISIBLE_DEVICES=""
touch afile
mkdir -p ro && chmod a-w ro
printf 'not json' >bad.json
printf '{"format": "sdpa-workload", "calls": []}' >empty_workload.json

cases=(
  # the command line itself
  "--batchh 2" "--itres 3" "--no-such-option" "positional" "trige" "sweeep" "help optoins" "help frobnicate"
  "--iters 2 -- extra" "--batch" "--batch x" "--batch --check" "--batch 0" "--batch -1" "--batch 1e3"
  "--heads 0" "--kv-heads 3" "-L 0" "-S -5" "-E 0" "-L 99999999999" "--dtype fp64" "--precision half"
  "--mask maybe" "--mask-dims 2x2" "--mask bool --mask-dims 3x3" "--text-padding 10:20" "--text-padding x"
  "--dropout 1" "--dropout -0.1" "--dropout abc" "--scale 0" "--scale nan" "--seed -5" "--seed 99999999999999999999999"
  "--alloc pinned" "--advise sideways" "--touch-streams 65" "--host-touch maybe" "--scenario 8" "--scenario -1"
  "--scenario x" "--fix maybe" "--fixes 9" "--fixes 2:nonsense" "--scenario 0 --fix on" "--stream fast"
  "--gemm-stream other" "--gemm-order maybe" "--k-layout hbse" "--gemm-api cublaslt" "--scores-to-host write"
  "--alloc-timing later" "--layers 0" "--layers model" "--layers 100001" "--retain all" "--steps 0"
  "--chunk-size 0" "--chunk-size 12" "--ballast 1.5" "--ballast 1" "--ballast 0" "--ballast -2G" "--ballast 16X"
  "--ballast-alloc pinned" "--ballast-touch all" "--host-load -1" "--mapped-weights 300" "--mapped-weights 2e9"
  "--mapped-weights 3G:" "--mapped-weights :/x" "--weights-mapping drop" "--log loud" "--log-format json"
  "--stage-timeout 0" "--stage-timeout -1" "--stage-timeout abc" "--stall-threshold -1" "--timeout -3"
  "--on-hang ignore" "--snapshot-timeout 0" "--keep-timeout -1" "--inject hang" "--inject hang:nostage"
  "--inject slow:softmax" "--inject error:grads_to_host" "--iters 0" "--iters 1.5" "--sample-every 10 --iters 5"
  "--workload nosuch" "--workload-file missing.json" "--workload-file bad.json" "--workload-file empty_workload.json"
  "--call 3" "--inputs absent" "--inputs afile" "--inputs ."
  # output paths
  "--json afile/x.json" "--json ro/x.json" "--json ''" "--json /proc/x.json" "--save-output afile/o.npy"
  "--log-file ro/run.log" "--snapshot-dir afile/snap"
  # the commands
  "report" "report --scenario 2" "report --scenario 2 --out afile --no-run" "report --scenario 2 --out ro/r --no-run"
  "report --scenario 2 --out /proc/x --no-run" "report --scenario 9 --out r --no-run" "report --scenario 0 --ladder --out r"
  "report --scenario 2 --check --out r" "report --scenario 2 --out r --repeat 0" "report --scenario 2 --out r --fix on"
  "sweep" "sweep --out afile" "sweep --out ro/s" "sweep --out s --scenarios 9" "sweep --out s --scenarios 1,,2"
  "sweep --out s --dtypes bf16,,fp16" "sweep --out s --shapes 2x" "sweep --out s --repeats 100000000"
  "sweep --out s --resume" "sweep --out s --scenarioz 1" "sweep --out s --shard 3/2" "sweep merge --out m"
  "bench --iters 5" "bench --json afile/b.json" "bench --scenario 9"
  "minimize" "minimize --out m" "minimize --out afile -- --scenario 2" "minimize --out m --scenario 2"
  "minimize --out m -- --iters 1.5" "minimize --out m --from-sweep missing.jsonl --cell 0" "minimize --out m --resume"
  "triage" "triage --out afile" "triage --out ro/t" "triage --out ''" "triage --out /proc/x" "triage --out t --budget 0"
  "triage --out t --budget forever" "triage --out t --budgte 4m" "triage --out t --scenarios 9" "triage --resume"
  "triage --out t --resume" "triage --out t --workload-file missing.json"
  "info --json afile/i.json" "info --bogus"
)

printf '%-8s %4s %5s  %-58s %s\n' verdict exit lines invocation "first line"
ok=0 ran=0 crash=0 long=0
for c in "${cases[@]}"; do
  eval "args=($c)"
  err=$(timeout 60 "$repro" "${args[@]}" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s' "$err" | grep -c '' || true)
  first=$(printf '%s\n' "$err" | head -1 | cut -c1-150)
  verdict=ok
  if ((rc >= 124)) || grep -q "terminate called" <<<"$err"; then
    verdict=CRASH crash=$((crash + 1))
  elif ((rc == 0 || rc == 7)); then
    verdict=ran ran=$((ran + 1))
  elif ((lines > 1)); then
    verdict=LONG long=$((long + 1))
  else
    ok=$((ok + 1))
  fi
  printf '%-8s %4d %5d  %-58s %s\n' "$verdict" "$rc" "$lines" "repro $c" "$first"
done
echo "# ${#cases[@]} invocations: $ok refused with one line (exit 2), $ran ran as far as this machine allows, $long refused with more than one line, $crash crashed or hung"
((crash + long == 0))
