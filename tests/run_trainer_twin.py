#!/usr/bin/env python3
"""run_trainer_twin.py: the trainer twin, run plain and captured, each capture replayed and triaged.

For the GPU machine (PyTorch, safetensors, peft, accelerate; a built repro). For each variant of
tests/trainer_twin.py (activation checkpointing non-reentrant, off, reentrant, and non-reentrant with
the weights still mapped at the first call):

  1. the twin runs plain: exit 0, its TRAINER_TWIN_RESULT line (the attention part's peak);
  2. the twin runs under scripts/sdpa_capture.py into OUT/VARIANT/: exit 0; workload.json valid
     against results/workload.schema.json; calls_per_step the twin's blocks; recomputed_per_step
     the blocks when checkpointed, else 0; every call's retention checkpoint (or autograd); the two
     weights files among loaded_files, mapped as the variant keeps them, and their page cache;
  3. repro --workload-file OUT/VARIANT/workload.json --check --backward --json: exit 0 (the replay
     passes its check), as many layers as the twin has blocks, retained as captured; its memory
     plan's attention part (the path's predicted peak less the shared tensors and the layers' inputs
     Q, K, V and dO, which are the model's) beside the twin's attention peak, with their ratio. The
     ratio is held within 5% once the binary has --retain checkpoint (the plan's checkpointed
     layers); before, it is printed and not judged;
  4. repro triage --dry-run --workload-file OUT/VARIANT/workload.json: exit 0, every step can run.

With --triage VARIANT, also `repro triage --workload-file OUT/VARIANT/workload.json --budget 8m`:
every step it starts ends with a result, and SUMMARY.md names the captured conditions (activation
checkpointing, the page cache).

    python3 tests/run_trainer_twin.py --out twin-captures --repro build/repro

Prints one line per check ("ok: ..." or "FAIL: ...") and a table last. OUT/VARIANT/workload.json are
the captures tests/fixtures/capture/trainer_twin/VARIANT/ holds. Exit 0: every check passed; 1: a
check failed; 2: bad options; 77: skipped (no PyTorch, one of the packages, or a CUDA device).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWIN = os.path.join(ROOT, "tests", "trainer_twin.py")
CAPTURE = os.path.join(ROOT, "scripts", "sdpa_capture.py")
SCHEMA = os.path.join(ROOT, "results", "workload.schema.json")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from test_sdpa_capture import Checks, schema_errors, shown, tail  # noqa: E402  (no PyTorch needed)

EXIT_SKIP = 77
RESULT_PREFIX = "TRAINER_TWIN_RESULT "
TOLERANCE = 0.05  # the plan's attention part against the twin's
# name, the twin's options, checkpointed, weights still mapped at the first call
VARIANTS = (("checkpointing", ["--checkpointing", "non-reentrant"], True, False),
            ("no-checkpointing", ["--checkpointing", "off"], False, False),
            ("reentrant", ["--checkpointing", "reentrant"], True, False),
            ("mapped", ["--checkpointing", "non-reentrant", "--keep-mapped"], True, True))


def run(cmd, timeout, env=None):
    print("# " + " ".join(cmd), flush=True)
    began = time.monotonic()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        r = subprocess.CompletedProcess(cmd, 124, e.stdout or "", (e.stderr or "") + "\n(timed out)")
    r.seconds = time.monotonic() - began
    return r


def twin_result(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return None


def gb(n):
    return "-" if n is None else "%.3f" % (n / 1e9)


def supports_checkpoint(repro):
    """Whether the binary keeps --retain checkpoint with --backward (its plan says retain=checkpoint)."""
    r = run([repro, "--plan", "--layers", "2", "--retain", "checkpoint", "--backward", "-L", "64", "-E", "32"], 60)
    return r.returncode == 0 and " retain=checkpoint" in r.stdout


def check_capture(checks, name, w, result, checkpointed, mapped, schema, weights):
    row = {}
    errors = schema_errors(w, schema)
    checks.check(not errors, "%s: workload.json is valid against results/workload.schema.json" % name, "; ".join(errors[:3]))
    blocks = result["blocks"] if result else None
    row["calls"] = "%s/%s" % (w.get("calls_per_step"), w.get("recomputed_per_step"))
    checks.check(w.get("calls_per_step") == blocks and w.get("recomputed_per_step") == (blocks if checkpointed else 0),
                 "%s: calls_per_step %s (the twin's %s blocks), recomputed_per_step %s" % (
                     name, w.get("calls_per_step"), blocks, w.get("recomputed_per_step")))
    retentions = sorted({(c.get("phase"), c.get("retention")) for c in w["calls"]})
    expected = [("forward", "checkpoint"), ("recompute", "checkpoint")] if checkpointed else [("forward", "autograd")]
    checks.check(retentions == expected, "%s: the calls' phases and retentions %s" % (name, expected), shown(retentions))
    files = {os.path.realpath(f["path"]): f for f in (w["calls"][0]["context"].get("loaded_files") or [])}
    ours = [files.get(os.path.realpath(p)) for p in weights]
    cached = [f["cached_bytes"] for f in ours if f and f["cached_bytes"] is not None]
    row["page cache"] = gb(sum(cached)) if len(cached) == len(weights) else "-"
    checks.check(all(f and f["how"] == "safetensors" and f["mapped"] == mapped for f in ours),
                 "%s: the two weights files safetensors loaded, %s at the first call, %s GB of them in the page cache"
                 % (name, "still mapped" if mapped else "unmapped", row["page cache"]), shown(ours))
    return row


def replay(checks, name, workload, repro, work, result, checkpointed, judge):
    row = {}
    out = os.path.join(work, name + "-replay.json")
    r = run([repro, "--workload-file", workload, "--check", "--backward", "--json", out], 600)
    row["replay"] = "pass" if r.returncode == 0 else "exit %d" % r.returncode
    checks.check(r.returncode == 0, "%s: repro --workload-file ... --check --backward passes" % name,
                 "exit %d: %s" % (r.returncode, tail(r.stderr + r.stdout)))
    try:
        with open(out) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return row
    settings = j["config"]["settings"]
    plan = j.get("memory_plan") or {}
    row["layers"], row["retain"] = settings.get("layers"), settings.get("retain")
    blocks = result["blocks"] if result else None
    # The settings' values are words ("8"), the plan's numbers.
    checks.check(str(settings.get("layers")) == str(blocks) and plan.get("layers") == blocks,
                 "%s: the replay runs %s layers, the twin's blocks (not the recomputations as more)"
                 % (name, settings.get("layers")))
    wanted = "checkpoint" if checkpointed else "autograd"
    if judge or not checkpointed:
        checks.check(settings.get("retain") == wanted, "%s: the replay's layers keep as the process's did (%s)"
                     % (name, wanted), str(settings.get("retain")))
    else:
        print("# %s: the replay's retention is %s: this binary has no --retain checkpoint yet (not judged)"
              % (name, settings.get("retain")))
    if plan and result:
        attention = plan["path_peak_bytes"] - plan["shared_bytes"] - plan["layers"] * plan["layer_inputs_bytes"]
        twin = result["attention_peak_bytes"]
        ratio = attention / twin if twin else float("inf")
        row.update({"plan GB": gb(attention), "twin GB": gb(twin), "ratio": "%.3f" % ratio})
        measured = (j.get("memory_measured") or {}).get("peak_live_bytes")
        print("# %s: the plan's attention part %s GB (path peak %s GB, shared %s GB, %d layers x inputs %s GB); the "
              "twin's %s GB (%s); the replay measured a live peak of %s GB" % (
                  name, gb(attention), gb(plan["path_peak_bytes"]), gb(plan["shared_bytes"]), plan["layers"],
                  gb(plan["layer_inputs_bytes"]), gb(twin), result.get("attention_peak_at"), gb(measured)))
        within = abs(ratio - 1) <= TOLERANCE
        row["5%"] = ("yes" if within else "no") if judge else "not judged"
        if judge:
            checks.check(within, "%s: the replay's plan of the attention part is within %d%% of the twin's (%.3f)"
                         % (name, TOLERANCE * 100, ratio))
    return row


def triage_dry_run(checks, name, workload, repro, work):
    r = run([repro, "triage", "--dry-run", "--workload-file", workload, "--out", os.path.join(work, name + "-triage")], 120)
    ok = r.returncode == 0 and "CANNOT RUN" not in r.stdout
    checks.check(ok, "%s: repro triage --dry-run says every step can run" % name,
                 "exit %d: %s" % (r.returncode, tail(r.stdout + r.stderr, 8)))
    return "every step can run" if ok else "exit %d" % r.returncode


def triage(checks, name, workload, repro, out):
    folder = os.path.join(out, name + "-triage")
    if os.path.exists(folder):
        shutil.rmtree(folder)
    r = run([repro, "triage", "--workload-file", workload, "--budget", "8m", "--out", folder], 900)
    checks.check(r.returncode in (0, 1, 3, 9), "%s: repro triage --budget 8m ends with a result (exit %d, %.0f s)"
                 % (name, r.returncode, r.seconds), tail(r.stdout + r.stderr, 8))
    summary = ""
    try:
        with open(os.path.join(folder, "SUMMARY.md")) as f:
            summary = f.read()
    except OSError:
        pass
    checks.check("activation checkpointing" in summary and "page cache" in summary,
                 "%s: SUMMARY.md names the captured conditions (activation checkpointing, the page cache)" % name)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the folder for the captures (OUT/VARIANT/workload.json, ...)")
    ap.add_argument("--repro", default=os.path.join(ROOT, "build", "repro"), help="the repro binary (default build/repro)")
    ap.add_argument("--python", default=sys.executable, help="the python3 with PyTorch (default this one)")
    ap.add_argument("--weights", metavar="DIR", help="the twin's model folder (default: a temporary one, removed after)")
    ap.add_argument("--only", metavar="VARIANT[,VARIANT]", help="these variants only (%s)" % ", ".join(v[0] for v in VARIANTS))
    ap.add_argument("--triage", metavar="VARIANT", help="also run repro triage --budget 8m on this variant's capture")
    args = ap.parse_args(argv)
    names = [v[0] for v in VARIANTS]
    only = args.only.split(",") if args.only else names
    for name in only + ([args.triage] if args.triage else []):
        if name not in names:
            ap.error("unknown variant %r (the variants: %s)" % (name, ", ".join(names)))
    repro = os.path.abspath(args.repro)
    if not os.access(repro, os.X_OK):
        ap.error("--repro %s: not an executable" % repro)
    probe = run([args.python, "-c", "import torch, safetensors, peft, accelerate; "
                                    "raise SystemExit(0 if torch.cuda.is_available() else 3)"], 300)
    if probe.returncode != 0:
        print("SKIPPED: %s cannot run the twin (%s)" % (args.python, "no CUDA device" if probe.returncode == 3
                                                        else tail(probe.stderr, 1)))
        return EXIT_SKIP
    with open(SCHEMA) as f:
        schema = json.load(f)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run_trainer_twin.")
    weights = os.path.abspath(args.weights) if args.weights else os.path.join(work, "weights")
    judge = supports_checkpoint(repro)
    print("# repro %s: --retain checkpoint %s" % (repro, "kept with --backward: the 5% check is made" if judge
                                                 else "not in this binary yet: the 5% check is printed, not judged"))
    checks, rows, began = Checks(), [], time.monotonic()
    for name, options, checkpointed, mapped in VARIANTS:
        if name not in only:
            continue
        row = {"variant": name}
        twin = [args.python, TWIN, "--weights", weights] + options
        plain = run(twin, 600)
        result = twin_result(plain.stdout)
        row["twin"] = "exit %d, %.0f s" % (plain.returncode, plain.seconds)
        checks.check(plain.returncode == 0 and result is not None, "%s: the twin runs plain and reports" % name,
                     "exit %d: %s" % (plain.returncode, tail(plain.stderr + plain.stdout)))
        folder = os.path.join(out, name)
        if os.path.exists(folder):
            shutil.rmtree(folder)
        captured = run([args.python, CAPTURE, "--out", folder, "--"] + twin[1:], 600)
        row["capture"] = "exit %d, %.0f s" % (captured.returncode, captured.seconds)
        checks.check(captured.returncode == 0 and twin_result(captured.stdout) is not None,
                     "%s: the twin runs under sdpa_capture.py" % name,
                     "exit %d: %s" % (captured.returncode, tail(captured.stderr + captured.stdout)))
        workload = os.path.join(folder, "workload.json")
        try:
            with open(workload) as f:
                w = json.load(f)
        except (OSError, ValueError) as e:
            checks.check(False, "%s: the capture wrote workload.json" % name, str(e))
            rows.append(row)
            continue
        paths = sorted(v["path"] for v in (result or {}).get("weights", {}).values())
        row.update(check_capture(checks, name, w, result, checkpointed, mapped, schema, paths))
        row.update(replay(checks, name, workload, repro, work, result, checkpointed, judge))
        row["triage --dry-run"] = triage_dry_run(checks, name, workload, repro, work)
        rows.append(row)
    if args.triage:
        triage(checks, args.triage, os.path.join(out, args.triage, "workload.json"), repro, out)
    shutil.rmtree(work, ignore_errors=True)

    columns = ["variant", "twin", "capture", "calls", "page cache", "replay", "layers", "retain", "plan GB", "twin GB",
               "ratio", "5%", "triage --dry-run"]
    print("\n| %s |" % " | ".join(columns))
    print("|%s|" % "|".join("---" for _ in columns))
    for row in rows:
        print("| %s |" % " | ".join(str(row.get(c, "-")) for c in columns))
    print("\n(calls: a step's forward calls / recomputed in its backward pass; plan GB: the replay's memory plan of the "
          "attention part; twin GB: the twin's attention peak, torch.cuda.max_memory_allocated() around its attention "
          "calls)")
    print("run_trainer_twin: %d passed, %d failed, %.0f s; the captures are in %s" % (
        checks.passed, checks.failed, time.monotonic() - began, out))
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
