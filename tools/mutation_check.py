#!/usr/bin/env python3
"""mutation_check.py: do the CPU tests fail when the code is wrong?

    tools/mutation_check.py [--mutants FILE] [--only ID[,ID...]] [--work DIR] [--jobs N]
                              [--out FILE] [--no-baseline]

Takes the list of small plausible bugs in tests/mutants.json (each: a file, the original text,
the mutant text, what it means), and for each one on its own: puts it into a scratch copy of the
tree, rebuilds that copy incrementally (the ci preset, in its own build folder, through ccache),
runs the CPU tests there (the suites likeliest to catch a bug in that file first, then, if none
failed, `ctest -L cpu` stopping at the first failure) and puts the original back. A mutant
is killed when a test fails, survives when every test passes; one whose original text is not in
its file exactly once, or that does not build, is reported as such (the list is stale). The
working tree itself is never changed.

Prints a Markdown table (and writes it to --out, default results/mutation/mutation_check.md):
the commit, the date, the machine, and per mutant its result, the first test that failed and
the time it took. Exit 0 when every mutant was killed, 1 otherwise, 2 on bad usage.

The copy and its build live in --work (default build-mutation/, ignored by git) and are kept
between calls, so a second call rebuilds only what the mutants touch. Not run in CI: each
mutant costs an incremental build and up to a full `ctest -L cpu`.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What `ctest -L cpu` needs built (tests/CMakeLists.txt keeps the list).
TARGETS = ["cpu_test_programs"]


def run(cmd, cwd, log, env=None, timeout=None):
    """Runs cmd, appending its output to `log`; returns (exit code, output)."""
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        out, code = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out, code = (e.stdout or b"").decode(errors="replace") + "\n(timed out)\n", 124
    with open(log, "a") as f:
        f.write("$ %s\n%s\n" % (" ".join(cmd), out))
    return code, out


def build_env():
    env = dict(os.environ)
    if shutil.which("ccache"):  # scripts/setup_deps.sh --mutation installs it
        env.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
        env.setdefault("CMAKE_CUDA_COMPILER_LAUNCHER", "ccache")
    env.setdefault("CCACHE_BASEDIR", os.path.dirname(ROOT))
    env["PATH"] = env.get("PATH", "") + ":/usr/local/cuda/bin"
    return env


def sync_tree(tree):
    """Copies the tracked and untracked-but-not-ignored files of the working tree into `tree`,
    rewriting only files whose bytes differ, so the copy's build stays incremental."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, check=True,
                           stdout=subprocess.PIPE).stdout.decode().split("\0")
    copied = 0
    for rel in filter(None, files):
        src, dst = os.path.join(ROOT, rel), os.path.join(tree, rel)
        if not os.path.isfile(src):
            continue  # deleted in the working tree but still in the index
        with open(src, "rb") as f:
            data = f.read()
        if os.path.isfile(dst):
            with open(dst, "rb") as f:
                if f.read() == data:
                    continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        # A fresh modification time, not the source's: an object built from the copy's previous
        # bytes after the source was edited is newer than the source, and would count as up to date.
        shutil.copyfile(src, dst)
        shutil.copymode(src, dst)
        copied += 1
    return copied


def build(tree, jobs, log, env):
    code, out = run(["cmake", "--build", "build-ci", "-j", str(jobs), "--target"] + TARGETS, tree, log, env)
    return code == 0


# The suites most likely to catch a bug in each place, run first: a mutant they kill needs no full
# `ctest -L cpu` (most of a run's time goes to the suites before the one that fails). One they
# do not kill still gets the full run, so the result means the same: some CPU test failed, or none.
FIRST_SUITES = [
    ("math_sdpa/stage_log.cpp", "cpu.log_format|cpu.watchdog"),
    ("math_sdpa/", "cpu.reference|cpu.npy|cpu.philox|cpu.stats|cpu.dtype|cpu.problem"),
    ("scenarios/", "cpu.hypotheses|cpu.scenarios"),
    ("repro/report/", "cpu.report|cpu.hypotheses"),
    ("repro/sweep/", "cpu.sweep"),
    ("repro/supervise/", "cpu.watchdog|cpu.hang_snapshot"),
    ("repro/bench/", "cpu.bench"),
    ("repro/cli/workload_file.cpp", "cpu.workload_file"),
    ("repro/cli/", "cpu.options|cpu.bad_input|cpu.memory_plan|cpu.workload_file"),
    ("repro/minimize/", "cpu.minimize|cpu.triage"),
    ("repro/triage/", "cpu.triage"),
    ("repro/run/", "cpu.schemas|cpu.result_json"),
]


def first_suites(path):
    for prefix, suites in FIRST_SUITES:
        if path.startswith(prefix):
            return suites
    return None


def failed_tests(out):
    return re.findall(r"Test\s+#\d+:\s+(\S+)\s+\.*\s*\*{0,3}(?:Failed|Timeout|Exception|SEGFAULT|Subprocess aborted|Child aborted)",
                      out)


def likely_tests(tree, jobs, log, env, suites):
    """The suites matching `suites` (a ctest -R pattern): (passed, the failed tests' names)."""
    code, out = run(["ctest", "--test-dir", "build-ci", "-L", "cpu", "-R", "^(%s)$" % suites.replace(".", "\\."), "-j",
                     str(jobs), "--output-on-failure"], tree, log, env)
    return code == 0, failed_tests(out)


def cpu_tests(tree, jobs, log, env):
    """ctest -L cpu, stopping at the first failure: (passed, the failed tests' names). Without
    the times of earlier runs ctest starts the tests in the order they are registered, the short
    suites first, so a mutant is usually killed before the long ones (report_nvcc) start."""
    cost_data = os.path.join(tree, "build-ci", "Testing", "Temporary", "CTestCostData.txt")
    if os.path.exists(cost_data):
        os.remove(cost_data)
    code, out = run(["ctest", "--test-dir", "build-ci", "-L", "cpu", "-j", str(jobs), "--stop-on-failure",
                     "--output-on-failure"], tree, log, env)
    return code == 0, failed_tests(out)


def git_description():
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, stdout=subprocess.PIPE,
                           text=True).stdout.strip()
    return commit + (" (with uncommitted changes)" if dirty else "")


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mutants", default=os.path.join(ROOT, "tests", "mutants.json"))
    parser.add_argument("--only", help="comma-separated mutant ids")
    parser.add_argument("--work", default=os.path.join(ROOT, "build-mutation"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "mutation", "mutation_check.md"))
    parser.add_argument("--no-baseline", action="store_true", help="skip the run of the unmutated tree")
    args = parser.parse_args()
    with open(args.mutants) as f:
        mutants = json.load(f)["mutants"]
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {m["id"] for m in mutants})
        if unknown:
            print("mutation_check.py: no mutant %s in %s" % (", ".join(unknown), args.mutants), file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m["id"] in wanted]
    tree = os.path.join(args.work, "tree")
    log = os.path.join(args.work, "mutation_check.log")
    os.makedirs(tree, exist_ok=True)
    open(log, "w").close()
    env = build_env()
    started = time.time()
    print("copying the tree to %s: %d files changed" % (tree, sync_tree(tree)), flush=True)
    if not os.path.isfile(os.path.join(tree, "build-ci", "CMakeCache.txt")):
        # Each file alone: a mutant then recompiles its own file, not a unity batch of eight.
        if run(["cmake", "--preset", "ci", "-DCMAKE_UNITY_BUILD=OFF"], tree, log, env)[0] != 0:
            print("mutation_check.py: cmake --preset ci failed; see %s" % log, file=sys.stderr)
            return 1
    if not build(tree, args.jobs, log, env):
        print("mutation_check.py: the unmutated tree does not build; see %s" % log, file=sys.stderr)
        return 1
    if not args.no_baseline:
        t = time.time()
        ok, failed = cpu_tests(tree, args.jobs, log, env)
        if not ok:
            print("mutation_check.py: ctest -L cpu fails without any mutant (%s); see %s" % (", ".join(failed) or "?", log),
                  file=sys.stderr)
            return 1
        print("baseline: ctest -L cpu passes (%.0f s)" % (time.time() - t), flush=True)
    rows = []
    for n, m in enumerate(mutants, 1):
        path = os.path.join(tree, m["file"])
        with open(path) as f:
            original = f.read()
        t = time.time()
        count = original.count(m["original"])
        if count != 1:
            result, killer = "stale (original text found %d times)" % count, ""
        else:
            try:
                with open(path, "w") as f:
                    f.write(original.replace(m["original"], m["mutant"]))
                if not build(tree, args.jobs, log, env):
                    result, killer = "does not build", ""
                else:
                    suites = first_suites(m["file"])
                    # cpu.schemas checks that every mutant's original text is in its file: not
                    # this one's, which is out while it is in (tests/test_schemas.cpp).
                    mutant_env = dict(env, SDPA_MUTANT_IN=m["id"])
                    ok, failed = likely_tests(tree, args.jobs, log, mutant_env, suites) if suites else (True, [])
                    if ok:
                        ok, failed = cpu_tests(tree, args.jobs, log, mutant_env)
                    result, killer = ("survived", "") if ok else ("killed", ", ".join(failed) or "(ctest failed)")
            finally:
                with open(path, "w") as f:
                    f.write(original)
        seconds = time.time() - t
        rows.append((m, result, killer, seconds))
        print("%2d/%d %-34s %-9s %-22s %4.0f s" % (n, len(mutants), m["id"], result, killer, seconds), flush=True)
    build(tree, args.jobs, log, env)  # leave the copy built as the tree is, for the next call
    total = time.time() - started
    killed = sum(1 for r in rows if r[1] == "killed")
    lines = [
        "# Mutation check",
        "",
        "`tools/mutation_check.py` on commit %s, %s, %s (%d CPUs): each mutant of `%s` put into a copy of "
        "the tree on its own, the copy rebuilt (`ci` preset, ccache) and the CPU tests run: the suites likeliest to "
        "catch a bug in its file first, then, if none failed, `ctest -L cpu` until its first failure."
        % (git_description(), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           platform.machine(), os.cpu_count() or 0, os.path.relpath(args.mutants, ROOT)),
        "",
        "**%d of %d killed**; %.0f min in all (copying and building the tree, %sthe rebuilds and the test runs)." % (
            killed, len(rows), total / 60, "" if args.no_baseline else "the baseline `ctest -L cpu`, "),
        "",
        "| # | mutant | where | the bug put in | what it means | result | first failing test | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, (m, result, killer, seconds) in enumerate(rows, 1):
        lines.append("| %d | `%s` | `%s` | `%s` → `%s` | %s | %s | %s | %.0f |" % (
            n, m["id"], m["file"], cell(m["original"]), cell(m["mutant"]), cell(m["means"]), result, killer, seconds))
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        tmp = "%s.tmp.%d" % (args.out, os.getpid())
        with open(tmp, "w") as f:
            f.write(table)
        os.replace(tmp, args.out)
        print("wrote %s" % args.out)
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
