#!/usr/bin/env python3
"""compare_builds.py: do two builds of repro behave the same? Runs the same command lines with
both binaries and compares what a run decides: exit code, outcome, result tensor and its
summaries (l2, sum, elements), the check against the reference, the settings, the GEMM calls,
the allocations, the stage names, and the stdout/stderr text with every number that measures
time masked. Times, the command line, the commit and the memory samples are left out.

    tools/compare_builds.py OLD/repro NEW/repro [--gpu] [--out DIR]

Without --gpu only command lines that need no GPU are compared (help, dry runs, report --no-run,
bad input). With --gpu every scenario fix off and on, with a mask, dropout and GQA, an injected
hang, and a small benchmark are compared too. Exit 0 when every row is identical.
"""
import argparse, json, os, re, subprocess, sys, tempfile

CPU_CASES = [
    ["--help"], ["report", "--help"], ["sweep", "--help"], ["bench", "--help"], ["info", "--help"],
    ["sweep", "--dry-run"], ["sweep", "--dry-run", "--scenarios", "1,2", "--dtypes", "fp16", "--fixes", "off,on"],
    ["--scenario", "9"], ["--dtype", "fp64"], ["--fixes", "1,1"], ["report", "--scenario", "2"],
    ["bench", "--iters", "0"], ["sweep", "--scenarios", "7"],
] + [["report", "--scenario", str(s), "--no-run", "--out", "{tmp}/report%d" % s, "--force"] for s in (1, 2, 3, 4)]
GPU_CASES = [
    ["--scenario", str(s), "--fix", f, "--check", "--iters", "3"] for s in (1, 2, 3, 4) for f in ("off", "on")
] + [
    ["--scenario", "0", "--check"],
    ["--scenario", "0", "--check", "--alloc", "device", "--dtype", "fp16", "--precision", "native"],
    ["--scenario", "0", "--check", "--mask", "causal", "--dropout", "0.1", "--heads", "8", "--kv-heads", "4"],
    ["--scenario", "0", "--check", "--mask", "bool", "--fixes", "all", "--dtype", "fp32", "-L", "64", "-S", "96"],
    ["--scenario", "2", "--check", "--log", "stages", "--fix", "on"],
    ["--scenario", "0", "--inject", "hang:softmax", "--stage-timeout", "1"],
    ["--scenario", "0", "--inject", "hang:qk_gemm", "--stage-timeout", "1", "--no-fork"],
    ["bench", "--iters", "5", "--warmup", "2"],
]
VOLATILE = re.compile(r"(_ms|_us|_s|seconds|time|timing|meta|memory|command_line|wall|git_commit|ptr|address)$")
# Numbers that are times, addresses or per-run random seeds in text output.
MASKS = [(re.compile(r"0x[0-9a-f]+"), "0xADDR"), (re.compile(r"\d+\.\d+(e[-+]\d+)? ?(ms|s|us|µs)\b"), "T"),
         (re.compile(r"t_us=\d+"), "t_us=T"), (re.compile(r"@ \d+"), "@ T"), (re.compile(r"[0-9a-f]{12}(-dirty)?"), "COMMIT"),
         (re.compile(r"\d{4}-\d\d-\d\dT[\d:]+Z"), "DATE"),
         (re.compile(r"(input seed|seed) \d+"), r"\1 S"), (re.compile(r"\d+\.\d+ (GiB|MiB)"), "M"),
         (re.compile(r"\bpid \d+"), "pid P"), (re.compile(r"/[\w./-]*repro\b"), "REPRO"), (re.compile(r"/tmp/\S+"), "TMP")]


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if not VOLATILE.search(k)}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def mask(text):
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    return text


def run(binary, args, tmp, timing_only):
    args = [a.replace("{tmp}", tmp) for a in args]
    json_path = os.path.join(tmp, "result.json")
    if os.path.exists(json_path):
        os.remove(json_path)
    takes_json = not (args and args[0] in ("report", "sweep", "info") or "--help" in args)
    full = [binary] + args + (["--json", json_path] if takes_json else [])
    p = subprocess.run(full, capture_output=True, text=True, timeout=300)
    doc = None
    if os.path.exists(json_path):
        with open(json_path) as f:
            doc = strip(json.load(f))
    text = "" if timing_only else mask(p.stdout + p.stderr)
    return p.returncode, doc, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old"), ap.add_argument("new")
    ap.add_argument("--gpu", action="store_true", help="also the command lines that need a GPU")
    ap.add_argument("--out", default=None, help="folder for the differing outputs")
    a = ap.parse_args()
    cases = CPU_CASES + (GPU_CASES if a.gpu else [])
    different = 0
    print(f"{'command line':78} {'exit':>9}  same")
    for args in cases:
        bench = args[0] == "bench" and "--help" not in args
        results = []
        for binary in (a.old, a.new):
            with tempfile.TemporaryDirectory() as tmp:
                results.append(run(os.path.abspath(binary), args, tmp, timing_only=bench))
        (rc_old, doc_old, text_old), (rc_new, doc_new, text_new) = results
        if bench and doc_old and doc_new:  # a benchmark's numbers are measurements: compare its decisions
            doc_old, doc_new = ({k: d.get(k) for k in ("outcome", "exit_code", "result_tensor", "config")} for d in (doc_old, doc_new))
        same = rc_old == rc_new and doc_old == doc_new and text_old == text_new
        different += not same
        line = " ".join(args)
        print(f"{line[:78]:78} {rc_old:>4}/{rc_new:<4}  {'yes' if same else 'NO'}")
        if not same and a.out:
            os.makedirs(a.out, exist_ok=True)
            name = re.sub(r"[^\w.-]+", "_", line)[:80]
            for tag, doc, text in (("old", doc_old, text_old), ("new", doc_new, text_new)):
                with open(os.path.join(a.out, f"{name}.{tag}.txt"), "w") as f:
                    f.write(text + "\n" + json.dumps(doc, indent=1, sort_keys=True))
    print(f"compare_builds: {len(cases) - different} of {len(cases)} command lines behave the same")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
