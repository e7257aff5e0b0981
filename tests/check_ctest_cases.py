#!/usr/bin/env python3
"""check_ctest_cases.py: every doctest case of the test programs runs in exactly one CTest test.

Each doctest suite is one CTest test, or several: tests/CMakeLists.txt splits a suite into parts
by patterns of case names, and a rest that excludes them all. A pattern that matches nothing (a
case renamed, a comma inside a name, which separates patterns), or a suite never registered,
would leave cases unrun or in the wrong part without a word; a case two parts select would run
twice. For each program CTest runs (their listings need no GPU), this lists each test's cases with
the test's own filters (doctest --list-test-cases) and compares them with the program's whole
list, suite by suite, and lists each of a part's patterns alone: each must select a case.

    python3 tests/check_ctest_cases.py --ctest ctest --build-dir BUILD

Exit 0: every case in exactly one test, every test and pattern with a case; 1: not so (each case,
test and pattern named); 77: a program is not built here (preset asan builds the CPU tests'
programs only).

It also checks host_only/CMakeLists.txt's lists of the cases the aarch64 tests leave out (those
that run the real repro, fork the test process, or spread work over threads): each pattern must
select a case of cpu_tests. A pattern left behind by a renamed case would let that case run under
the emulator, where a forking one never ends.
"""
import argparse
import collections
import json
import os
import re
import shlex
import subprocess
import sys

PROGRAMS = ("cpu_tests", "gpu_tests")
EXIT_SKIP = 77


def doctest_command(command):
    """(program, its doctest arguments) of a CTest command, or None when it runs no doctest program.
    A command may wrap the program in `sh -c '... exec "$0" ARGS' PROGRAM` (a test that skips
    itself unless asked)."""
    if os.path.basename(command[0]) in PROGRAMS:
        return command[0], command[1:]
    if len(command) == 4 and os.path.basename(command[0]) in ("sh", "bash") and command[1] == "-c" \
            and os.path.basename(command[3]) in PROGRAMS:
        m = re.search(r'exec "\$0"(.*)$', command[2])
        if m:
            return command[3], shlex.split(m.group(1))
    return None


def listed(program, args, what="--list-test-cases"):
    """The names doctest lists for `program args` (between its two lines of '=')."""
    r = subprocess.run([program] + list(args) + [what], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("%s %s %s: exit %d: %s" % (program, " ".join(args), what, r.returncode, r.stderr[-500:]))
    lines = r.stdout.splitlines()
    bars = [i for i, line in enumerate(lines) if line.startswith("=====")]
    if len(bars) < 2:
        raise RuntimeError("%s %s: no listing in its output: %s" % (program, what, r.stdout[-500:]))
    return lines[bars[0] + 1:bars[1]]


def case_patterns(args):
    """The patterns of a --test-case= filter, split at commas as doctest splits them (a backslash
    escapes a comma)."""
    for a in args:
        m = re.match(r"(?:--test-case|-tc)=(.*)$", a)
        if m:
            return [p.replace("\\,", ",") for p in re.split(r"(?<!\\),", m.group(1))]
    return []


HOST_ONLY_LISTS = ("needs_repro_cases", "threaded_work_cases", "forking_cases")


def cmake_arguments(text, start):
    """The quoted arguments of the CMake command whose "(" is at or after `start`, to its closing
    ")" (comments and unquoted words skipped), as written (escapes kept)."""
    i = text.index("(", start) + 1
    args = []
    while text[i] != ")":
        if text[i] == "#":
            i = text.index("\n", i)
        elif text[i] == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            args.append(text[i + 1:j])
            i = j + 1
        else:
            i += 1
    return args


def host_only_patterns(cmake_file):
    """(list, pattern as doctest gets it) of every case pattern host_only/CMakeLists.txt leaves out:
    its set(LIST ...) lists and each list(APPEND excluded_cases "...") of a single pattern."""
    text = open(cmake_file).read()
    found = []
    for name in HOST_ONLY_LISTS:
        m = re.search(r"^set\(%s\b" % name, text, re.M)
        if not m:
            raise RuntimeError("%s: no set(%s ...)" % (cmake_file, name))
        found += [(name, p) for p in cmake_arguments(text, m.start())]
    for m in re.finditer(r'^\s*list\(APPEND excluded_cases "', text, re.M):
        found += [("excluded_cases", p) for p in cmake_arguments(text, m.start())]
    # CMake's "\\," is the two characters doctest reads as an escaped comma.
    return [(name, p.replace("\\\\", "\\")) for name, p in found]


def suite_of(args):
    for a in args:
        m = re.match(r"(?:--test-suite|-ts)=(.*)$", a)
        if m:
            return m.group(1)
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ctest", default="ctest", help="the ctest program (default: ctest)")
    ap.add_argument("--build-dir", required=True, help="the build folder whose tests to check")
    args = ap.parse_args(argv)

    shown = subprocess.run([args.ctest, "--test-dir", args.build_dir, "--show-only=json-v1"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    if shown.returncode != 0:
        print("check_ctest_cases: ctest --show-only failed: " + shown.stderr.strip())
        return 1
    runs = []  # (test, program, doctest arguments)
    for test in json.loads(shown.stdout)["tests"]:
        found = doctest_command(test.get("command") or [""])
        if found:
            runs.append((test["name"], found[0], [a for a in found[1] if a != "--no-version"]))
    programs = sorted({program for _, program, _ in runs})
    missing = [p for p in programs if not os.access(p, os.X_OK)]
    if missing:
        print("SKIPPED: not built in this folder, so their cases cannot be listed: " + ", ".join(missing))
        return EXIT_SKIP

    problems = []
    selected = collections.Counter()  # (program, suite, case) -> how many tests run it
    for name, program, doctest_args in runs:
        suite = suite_of(doctest_args)
        if suite is None:
            problems.append("%s: names no single suite (--test-suite=NAME): %s" % (name, " ".join(doctest_args)))
            continue
        cases = listed(program, doctest_args)
        if not cases:
            problems.append("%s: its filters select no case: %s" % (name, " ".join(doctest_args)))
        for pattern in case_patterns(doctest_args):
            if not listed(program, ["--test-suite=" + suite, "--test-case=" + pattern.replace(",", "\\,")]):
                problems.append("%s: its pattern '%s' selects no case of suite %s" % (name, pattern, suite))
        for case in cases:
            selected[(os.path.basename(program), suite, case)] += 1
    every = collections.Counter()
    for program in programs:
        for suite in listed(program, [], "--list-test-suites"):
            for case in listed(program, ["--test-suite=" + suite]):
                every[(os.path.basename(program), suite, case)] += 1
    for key in sorted(every):
        if selected[key] == 0:
            problems.append("%s, suite %s: case '%s' runs in no CTest test" % key)
        elif selected[key] > every[key]:
            problems.append("%s, suite %s: case '%s' runs in %d CTest tests" % (key + (selected[key],)))
    cpu_tests = [p for p in programs if os.path.basename(p) == "cpu_tests"]
    host_only = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "host_only", "CMakeLists.txt")
    if cpu_tests:
        for list_name, pattern in host_only_patterns(host_only):
            if not listed(cpu_tests[0], ["--test-case=" + pattern]):
                problems.append("host_only/CMakeLists.txt, %s: '%s' selects no case of cpu_tests" % (list_name, pattern))
    for line in problems:
        print("FAIL: " + line)
    print("check_ctest_cases: %d CTest tests of %s, %d cases: %s"
          % (len(runs), ", ".join(os.path.basename(p) for p in programs), sum(every.values()),
             "%d problems" % len(problems) if problems else "each runs in exactly one test"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
