#!/usr/bin/env python3
"""test_ctest_usage.py: tools/ctest_usage.py against a CTest project of its own, without a GPU.

    tests/test_ctest_usage.py --script tools/ctest_usage.py --cmake CMAKE --ctest CTEST

The project's tests are known loads: one that spins a second of CPU time and reserves two CPUs,
one whose ten spinning children (0.1 s of CPU each: a 0.2 s sample sees little of any) have ended
and been reaped before the test ends (their time is only in the parent's children times), one that sleeps and takes a GPU slot, and one that is a script CTest
starts through its interpreter. The table must name each test, give its reservation, and count the
CPU time each used; the table written with --out must be the one printed; the command's exit code
must come back. Prints what it checked; exit 0 when all held, 1 otherwise.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

PROJECT = """cmake_minimum_required(VERSION 3.20)
project(usage NONE)
enable_testing()
set(py {python})
add_test(NAME load.busy COMMAND ${{py}} ${{CMAKE_CURRENT_SOURCE_DIR}}/spin.py 1.0)
set_tests_properties(load.busy PROPERTIES PROCESSORS 2)
add_test(NAME load.reaped COMMAND sh -c "for i in 1 2 3 4 5 6 7 8 9 10; do ${{py}} ${{CMAKE_CURRENT_SOURCE_DIR}}/spin.py 0.1; done; sleep 0.8")
add_test(NAME load.sleep COMMAND sleep 1.2)
set_tests_properties(load.sleep PROPERTIES RESOURCE_GROUPS "gpus:1")
add_test(NAME load.script COMMAND ${{CMAKE_CURRENT_SOURCE_DIR}}/script.sh)
file(WRITE ${{CMAKE_CURRENT_BINARY_DIR}}/resources.json
     "{{\\"version\\": {{\\"major\\": 1, \\"minor\\": 0}}, \\"local\\": [{{\\"gpus\\": [{{\\"id\\": \\"0\\", \\"slots\\": 2}}]}}]}}\\n")
set(CTEST_RESOURCE_SPEC_FILE ${{CMAKE_CURRENT_BINARY_DIR}}/resources.json)
"""

# CPU time, not wall time: the same amount however loaded the machine is.
SPIN = """import sys, time
while time.process_time() < float(sys.argv[1]):
    pass
"""

SCRIPT = """#!/bin/sh
sleep 0.8
"""


def table_rows(text):
    """{test: (PROC, slots, CPU s)} from the table's lines; the slots column is empty for a test
    without resource groups."""
    rows = {}
    for line in text.splitlines()[1:-1]:
        f = line.split()
        if len(f) == 8:
            f.insert(2, "")
        if len(f) == 9 and f[1].isdigit():
            rows[f[0]] = (int(f[1]), f[2], float(f[5]))
        else:  # a command line where a test's name should be
            rows[line.strip()] = (0, "", 0.0)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--script", required=True)
    ap.add_argument("--cmake", default="cmake")
    ap.add_argument("--ctest", default="ctest")
    a = ap.parse_args()
    failures = []

    def check(ok, what):
        print(("ok      " if ok else "FAILED  ") + what)
        if not ok:
            failures.append(what)

    work = tempfile.mkdtemp(prefix="sdpa_ctest_usage_")
    try:
        src, build = os.path.join(work, "src"), os.path.join(work, "build")
        os.makedirs(src)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write(PROJECT.format(python=sys.executable))
        with open(os.path.join(src, "spin.py"), "w") as f:
            f.write(SPIN)
        with open(os.path.join(src, "script.sh"), "w") as f:
            f.write(SCRIPT)
        os.chmod(os.path.join(src, "script.sh"), 0o755)
        subprocess.run([a.cmake, "-S", src, "-B", build], check=True, capture_output=True)
        # ctest_usage.py asks `ctest` for the tests' names: the one this build uses, first in PATH.
        env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(a.ctest)) + os.pathsep + os.environ["PATH"])
        out_file = os.path.join(work, "usage.txt")
        run = subprocess.run([sys.executable, a.script, "--build", build, "--out", out_file, "--",
                              a.ctest, "--test-dir", build, "-j", "4"], capture_output=True, text=True, env=env)
        header = re.search(r"^test +PROC", run.stdout, re.M)
        table = run.stdout[header.start():] if header else ""
        print(table, end="")
        check(run.returncode == 0, f"exit code 0 when CTest passes (got {run.returncode}: {run.stderr.strip()[-300:]})")
        rows = table_rows(table)
        check(sorted(rows) == ["load.busy", "load.reaped", "load.script", "load.sleep"],
              f"each test named, the script started through its interpreter too (rows: {sorted(rows)})")
        if "load.busy" in rows:
            processors, _, cpu = rows["load.busy"]
            check(processors == 2, f"load.busy's PROCESSORS 2 (got {processors})")
            # The test's own process is sampled every 0.2 s while it lives: its last moments are not.
            check(0.75 <= cpu <= 2.5, f"load.busy used about 1 CPU second (got {cpu})")
        if "load.reaped" in rows:
            check(0.8 <= rows["load.reaped"][2] <= 2.5,
                  f"load.reaped's ended children counted through their parent (got {rows['load.reaped'][2]})")
        if "load.sleep" in rows:
            check(rows["load.sleep"][1] == "gpus:1", f"load.sleep's resource groups gpus:1 (got {rows['load.sleep'][1]!r})")
            check(rows["load.sleep"][2] < 0.5, f"load.sleep used next to no CPU (got {rows['load.sleep'][2]})")
        last = table.strip().splitlines()[-1] if table.strip() else ""
        check(last.endswith("exit 0") and "used" in last, f"the last line has the totals and the exit ({last!r})")
        written = open(out_file).read() if os.path.exists(out_file) else ""
        check(written == table, "--out holds the table printed")
        failing = subprocess.run([sys.executable, a.script, "--build", build, "--", "sh", "-c", "exit 3"],
                                 capture_output=True, text=True, env=env)
        check(failing.returncode == 3, f"the command's exit code comes back (3; got {failing.returncode})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'0 failed' if not failures else str(len(failures)) + ' failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
