#!/usr/bin/env python3
"""scenario_table.py: the scenario x fix x dtype table, from real `repro` runs.

Runs `repro --scenario N --fix off|on --dtype D --check --json ...` for every scenario `repro help
scenarios --json` lists as run by default (not the memory-exhaustion one; a scenario without a fix
of its own takes --fixes all as "on"), reads each JSON result and prints one row per run: outcome,
relative error, and the per-stage median times (CUDA events; the host stages on the host clock), a
column per stage that ran, in the order of the stage table (`repro help stages --json`). Not
part of the harness (which needs no Python): a convenience for notes.

    scripts/scenario_table.py BUILD/repro OUT_DIR [extra repro options...]
"""
import json
import os
import subprocess
import sys

import stage_table  # beside this script


def fail(message):
    sys.stderr.write("scenario_table.py: error: %s\n" % message)
    sys.exit(2)


def default_scenarios(repro):
    """The scenario records `repro` runs by default (by_default is true; otherwise it says why not)."""
    try:
        out = subprocess.run([repro, "help", "scenarios", "--json"], stdout=subprocess.PIPE, check=True).stdout
        return [s for s in json.loads(out) if s["by_default"] is True]
    except (OSError, subprocess.CalledProcessError, ValueError, KeyError, TypeError) as e:
        fail("%s help scenarios --json: %s" % (repro, str(e).splitlines()[0]))


def stage_order(repro):
    try:
        return [row["name"] for row in stage_table.load(repro)[0]["stages"]]
    except (stage_table.StageTableError, KeyError, TypeError) as e:
        fail("the stage table: %s" % str(e).splitlines()[0])


def main():
    if len(sys.argv) < 3:
        fail("usage: scenario_table.py BUILD/repro OUT_DIR [extra repro options...]")
    repro, out_dir, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    scenarios, order = default_scenarios(repro), stage_order(repro)
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for record in scenarios:
        scenario = record["number"]
        for fix in ("off", "on"):
            for dtype in ("bf16", "fp16", "fp32"):
                fix_args = ["--fix", fix] if record["fix"] else (["--fixes", "all"] if fix == "on" else [])
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
    seen = {s["stage"] for *_, r in rows for s in r.get("stages", [])}
    stage_names = [n for n in order if n in seen]
    width = {n: max(9, len(n)) for n in stage_names}
    head = f"{'sc':>2} {'fix':>3} {'dtype':>5} {'alloc':>7} {'outcome':>9} {'tensor':>6} {'rel_err':>9} " + " ".join(
        f"{n:>{width[n]}}" for n in stage_names)
    print("# per-stage median ms over --iters calls; " + " ".join(extra))
    print(head)
    for scenario, fix, dtype, rc, r in rows:
        times = {s["stage"]: s["median_ms"] for s in r.get("stages", [])}
        err = (r.get("check") or {}).get("rel_error")
        alloc = (r.get("config") or {}).get("alloc") or "?"
        cells = " ".join(f"{times[n]:{width[n]}.4f}" if n in times else f"{'-':>{width[n]}}" for n in stage_names)
        print(f"{scenario:>2} {fix:>3} {dtype:>5} {alloc:>7} {r.get('outcome') or '?':>9} {r.get('result_tensor') or '?':>6} "
              f"{'-' if err is None else format(err, '9.2e'):>9} {cells}")


if __name__ == "__main__":
    main()
