#!/usr/bin/env python3
"""cli_docs.py: writes the option tables of docs/*.md from the binary, so that they list what it has.

A page holds a generated block as two comment lines around what a command prints:

    <!-- generated: repro help sweep --markdown Axes -->
    | option | default | meaning |
    ...
    <!-- end generated -->

The command is `repro help TOPIC --markdown [GROUP]` (TOPIC options, or a command): the tables of
its options, from the same option table its parser and --help read. This script runs each block's
command with the binary given and puts its output between the two lines, leaving the rest of the
page as it is. With --check it writes nothing and exits 1 naming each block that differs; cpu.help
(tests/test_help.cpp) fails the same way and names this script.

    python3 tools/cli_docs.py                       # build/repro, docs/
    python3 tools/cli_docs.py --repro build-ci/repro --check
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"^<!-- generated: repro (help [^\n]*?) -->\n(.*?)^<!-- end generated -->$", re.M | re.S)


def command_words(words):
    """'help sweep --markdown Scenario and fixes' -> ['help', 'sweep', '--markdown', 'Scenario and fixes']."""
    head, _, group = words.partition(" --markdown")
    return head.split() + ["--markdown"] + ([group.strip()] if group.strip() else [])


def update(text, repro):
    """The page with each block's content replaced; and the commands of the blocks that changed."""
    stale = []

    def fill(m):
        words = m.group(1)
        r = subprocess.run([repro] + command_words(words), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if r.returncode != 0:
            sys.exit("cli_docs.py: repro %s: exit %d: %s" % (words, r.returncode, r.stderr.strip()))
        if r.stdout != m.group(2):
            stale.append(words)
        return "<!-- generated: repro %s -->\n%s<!-- end generated -->" % (words, r.stdout)

    return BLOCK.sub(fill, text), stale


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repro", default=os.path.join(ROOT, "build", "repro"), help="the binary (default build/repro)")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs"), help="the pages' folder (default docs/)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block is not what the binary prints")
    args = ap.parse_args(argv)
    found = 0
    stale = []
    for name in sorted(os.listdir(args.docs)):
        if not name.endswith(".md"):
            continue
        path = os.path.join(args.docs, name)
        with open(path) as f:
            text = f.read()
        found += len(BLOCK.findall(text))
        new, changed = update(text, args.repro)
        stale += ["%s: repro %s" % (name, words) for words in changed]
        if changed and not args.check:
            with open(path + ".tmp", "w") as f:
                f.write(new)
            os.replace(path + ".tmp", path)
    if found == 0:
        sys.exit("cli_docs.py: no generated block in %s" % args.docs)
    for s in stale:
        print(("stale: " if args.check else "written: ") + s)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
