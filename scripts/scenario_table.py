#!/usr/bin/env python3
"""scenario_table.py: the scenario x fix x dtype table, from real `repro` runs.

Runs `repro --scenario N --fix off|on --dtype D --check --json ...` for N = 0..4 (scenario 0's
"on" is --fixes all), reads each JSON result and prints one row per run: outcome, relative
error, and the per-stage median times (CUDA events; entry_sync, scores_to_host and stream_sync
on the host clock). Not part of the harness (which needs no Python): a convenience for notes.

    scripts/scenario_table.py BUILD/repro OUT_DIR [extra repro options...]
"""
import json
import os
import subprocess
import sys


def main():
    repro, out_dir, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for scenario in range(5):
        for fix in ("off", "on"):
            for dtype in ("bf16", "fp16", "fp32"):
                fix_args = ["--fix", fix] if scenario else (["--fixes", "all"] if fix == "on" else [])
                name = f"s{scenario}_{fix}_{dtype}"
                path = os.path.join(out_dir, name + ".json")
                cmd = [repro, "--scenario", str(scenario), *fix_args, "--dtype", dtype, "--check", "--json", path, *extra]
                rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
                try:
                    with open(path) as f:
                        r = json.load(f)
                except (OSError, ValueError):
                    r = {"outcome": f"no json (exit {rc})"}
                rows.append((scenario, fix, dtype, rc, r))
    order = ["entry_sync", "mask_prepare", "upcast", "scale_q", "gqa_expand", "scale_k", "kt_contiguous", "qk_gemm",
             "mask_add", "scores_to_host", "softmax", "dropout", "pv_gemm", "cast_output", "stream_sync"]
    seen = {s["stage"] for *_, r in rows for s in r.get("stages", [])}
    stage_names = [n for n in order if n in seen]
    short = {n: n.replace("entry_sync", "entry").replace("scores_to_host", "to_host").replace("stream_sync", "sync")
             .replace("cast_output", "cast").replace("kt_contiguous", "kt_copy").replace("mask_prepare", "mprep")
             for n in stage_names}
    head = f"{'sc':>2} {'fix':>3} {'dtype':>5} {'alloc':>7} {'outcome':>9} {'tensor':>6} {'rel_err':>9} " + " ".join(
        f"{short[n]:>9}" for n in stage_names)
    print("# per-stage median ms over --iters calls; " + " ".join(extra))
    print(head)
    for scenario, fix, dtype, rc, r in rows:
        times = {s["stage"]: s["median_ms"] for s in r.get("stages", [])}
        err = (r.get("check") or {}).get("rel_error")
        alloc = (r.get("config") or {}).get("alloc", "?")
        cells = " ".join(f"{times[n]:9.4f}" if n in times else f"{'-':>9}" for n in stage_names)
        print(f"{scenario:>2} {fix:>3} {dtype:>5} {alloc:>7} {r.get('outcome', '?'):>9} {r.get('result_tensor', '?'):>6} "
              f"{err if err is None else format(err, '9.2e'):>9} {cells}")


if __name__ == "__main__":
    main()
