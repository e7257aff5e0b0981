#!/usr/bin/env bash
# device_check_cost.sh: on a lent GPU machine, what --check adds to a run at the workload the hang
# was seen with (qwen-image-1024, one layer), before and after the float64 reference's products
# went to OpenBLAS, measured in one run on one machine; self-checking: exits 1 when a limit is
# missed, a run fails, or the two references' reported errors differ.
#
#   tools/device_check_cost.sh                 # REPEATS=3 runs of each configuration after,
#   REPEATS=5 BEFORE_REPEATS=2 tools/device_check_cost.sh   # BEFORE_REPEATS=1 before
#
# Builds repro (preset ci), then times `repro --iters 1 --workload qwen-image-1024` as a user
# waits for it (the whole command, wall clock), interleaved: unchecked, --check, --backward,
# --check --backward. "Before" is the same binary with SDPA_REFERENCE_PRODUCTS=loops, the loops
# the reference had before OpenBLAS (kept for this measurement: the machine gets the working tree
# without its history, so the older commit cannot be built here). Limits, on the medians:
# --check <= 1.5 x unchecked, --check --backward <= 2 x unchecked --backward. The table and every
# run's JSON are under $OUT (or ./device-out); the summary last. About 2 minutes on an H200 with
# 16 cores (REPEATS=3 BEFORE_REPEATS=1, the build included), most of it the loops' runs.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
t0=$SECONDS
cmake --preset ci >"$out/cmake.log" 2>&1 && cmake --build --preset ci -j "$(nproc)" --target repro >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log" "$out/cmake.log"; exit 1; }
say "build: $((SECONDS - t0)) s"
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"

repeats=${REPEATS:-3}
before_repeats=${BEFORE_REPEATS:-1}
runs="$out/runs.tsv"  # configuration, products, repeat, wall seconds, exit code, JSON file
: >"$runs"
# run NAME PRODUCTS I [repro options]: one timed run of the whole command.
run() {
  local name=$1 products=$2 i=$3 json="$out/$1_$2_$3.json" start end rc
  shift 3
  start=$(date +%s.%N)
  # blas: OpenBLAS, the first layer's reference computed during the run; blas_after: OpenBLAS, all
  # of the check after the last call; loops: the loops, after the last call (before, both).
  SDPA_REFERENCE_PRODUCTS=${products%_after} SDPA_CHECK_AHEAD=$([[ $products == blas ]] && echo 1 || echo 0) build-ci/repro --iters 1 --workload qwen-image-1024 --json "$json" "$@" \
    >"$out/${name}_${products}_$i.txt" 2>&1
  rc=$?
  end=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$products" "$i" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" "$rc" \
    "$json" >>"$runs"
}
for ((i = 1; i <= repeats; i++)); do
  run unchecked blas "$i"
  run check blas "$i" --check
  run backward blas "$i" --backward
  run check_backward blas "$i" --check --backward
done
for ((i = 1; i <= before_repeats; i++)); do
  run check blas_after "$i" --check
  run check_backward blas_after "$i" --check --backward
  run check loops "$i" --check
  run check_backward loops "$i" --check --backward
done
say "runs: $((SECONDS - t0)) s in all"

/usr/bin/python3 - "$runs" <<'EOF' | tee -a "$summary"
import json, statistics, sys

rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
failed = []
by = {}
for name, products, i, wall, rc, path in rows:
    try:
        doc = json.load(open(path))
    except (OSError, ValueError):
        doc = {}
    if rc != "0" or doc.get("outcome") != "pass":
        failed.append(f"{name} ({products}) run {i}: exit {rc}, outcome {doc.get('outcome')}: {doc.get('error')}")
    cost = (doc.get("check") or {}).get("cost") or {}
    if cost and cost.get("products") != products.replace("_after", ""):
        failed.append(f"{name} ({products}) run {i}: the JSON says the products were {cost.get('products')}")
    by.setdefault((name, products), []).append((float(wall), cost, doc))

def median_wall(key):
    return statistics.median(w for w, _, _ in by[key]) if key in by else float("nan")

print("configuration (qwen-image-1024, 1 layer)      runs   wall median [min, max]   check wall  check CPU  during run  ratio   limit")
limits = {("check", "blas"): ("unchecked", 1.5), ("check_backward", "blas"): ("backward", 2.0),
          ("check", "loops"): ("unchecked", None), ("check_backward", "loops"): ("backward", None),
          ("check", "blas_after"): ("unchecked", None), ("check_backward", "blas_after"): ("backward", None)}
labels = {"unchecked": "unchecked", "check": "--check", "backward": "--backward", "check_backward": "--check --backward"}
missed = []
for key in [("unchecked", "blas"), ("check", "blas"), ("check", "blas_after"), ("check", "loops"), ("backward", "blas"),
            ("check_backward", "blas"), ("check_backward", "blas_after"), ("check_backward", "loops")]:
    if key not in by:
        continue
    walls = [w for w, _, _ in by[key]]
    costs = [c for _, c, _ in by[key] if c]
    label = labels[key[0]] + ("" if key[0] in ("unchecked", "backward") else " (OpenBLAS, beside the run)" if key[1] == "blas"
                              else " (OpenBLAS, after the run)" if key[1] == "blas_after" else " (loops: before)")
    check_wall = f"{statistics.median(c['wall_seconds'] for c in costs):8.2f} s" if costs else " " * 10
    check_cpu = f"{statistics.median(c['cpu_seconds'] for c in costs):7.1f} s" if costs else " " * 9
    during = f"{statistics.median(c.get('overlapped_seconds', 0) for c in costs):8.2f} s" if costs else " " * 10
    ratio, limit = "", ""
    if key in limits:
        base, bound = limits[key]
        r = statistics.median(walls) / median_wall((base, "blas"))
        ratio = f"{r:5.2f}x"
        if bound is None:
            limit = "(before)"
        else:
            ok = r <= bound
            limit = f"<= {bound:.1f}x {'OK' if ok else 'MISSED'}"
            if not ok:
                missed.append(f"{label}: {r:.2f}x the unchecked run's wall time, over {bound:.1f}x")
    print(f"{label:46s} {len(walls):4d} {statistics.median(walls):7.2f} s [{min(walls):.2f}, {max(walls):.2f}] "
          f"{check_wall} {check_cpu} {during}  {ratio:6s}  {limit}")

# The same GPU results judged by both references: the reported errors agree within 1e-12.
def errors(doc):
    check = doc.get("check") or {}
    e = {"output": check.get("rel_error")}
    for g in check.get("gradients", []):
        e[g["tensor"]] = g["rel_error"]
    return e
for name in ("check", "check_backward"):
    blas, loops = by.get((name, "blas")), by.get((name, "loops"))
    if not blas or not loops:
        continue
    a, b = errors(blas[0][2]), errors(loops[0][2])
    for tensor in b:
        x, y = a.get(tensor), b[tensor]
        if x is None or y is None:
            failed.append(f"{labels[name]}: no {tensor} error to compare")
            continue
        diff = abs(x - y) / max(abs(y), 1e-300)
        verdict = "OK" if diff <= 1e-12 else "DIFFER"
        print(f"{labels[name]} {tensor}: rel_error {x:.12e} (OpenBLAS) against {y:.12e} (loops), "
              f"relative difference {diff:.1e} <= 1e-12 {verdict}")
        if diff > 1e-12:
            failed.append(f"{labels[name]}: {tensor}'s rel_error differs between the references by {diff:.1e}")
if by.get(("check", "blas")):
    blas = (by[("check", "blas")][0][1] or {}).get("blas")
    print(f"OpenBLAS: {blas}")
for line in failed + missed:
    print("FAILED: " + line)
print("check cost: " + ("FAILED" if failed or missed else "OK"))
sys.exit(1 if failed or missed else 0)
EOF
rc=${PIPESTATUS[0]}
say "total: $((SECONDS - start)) s"
device_pack
exit "$rc"
