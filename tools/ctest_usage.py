#!/usr/bin/env python3
"""ctest_usage.py: what each CTest test really used while a command ran, against what it reserved.

    tools/ctest_usage.py --build build --out usage.txt -- scripts/test.sh

Runs the command (any that runs ctest: test.sh, ctest itself) and samples /proc every 0.2 s. A
test is a process whose parent is a `ctest` below the command (no other CTest on the machine); its
CPU time is the user and system time of every
process below it (the living ones' own, the finished ones' through their parents' children
times), its GPU use what `nvidia-smi pmon` says of those processes (SM percent, summed over the
seconds: "GPU-seconds" of a whole GPU). Each test's name, PROCESSORS and resource groups come from
`ctest --show-only=json-v1` on the build folder, matched by command line.

"repros" counts the `repro` processes seen below a test (those that lived past a sample: nearly
every run that starts CUDA, which takes half a second; few of those that refuse their command line
or print help). Each CUDA context's creation and teardown go one process at a time on an H100
machine (about 200 ms with the driver's eight hardware queues, 76 ms with one), so this count
bounds how fast the GPU tests can go together. A test's own process is seen while it lives: the
CPU time of its last 0.2 s may be missed (its children's is not, once reaped).

The table says how many CPUs each test kept busy on average (CPU seconds / wall seconds) beside how
many it reserved: CTest starts a test only where its PROCESSORS fit, so a reservation far above
the use leaves cores idle while tests wait. Numbers are from one run on one machine, with every
other test beside it: they are what the schedule saw, not what a test costs alone.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def read_stat(pid):
    """(ppid, comm, own + reaped children's CPU seconds) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    # comm is in parentheses and may hold spaces: split after its closing one.
    close = s.rfind(")")
    comm = s[s.find("(") + 1:close]
    fields = s[close + 2:].split()
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, comm, (utime + stime + cutime + cstime) / TICK


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


class Sampler:
    """Samples the tests of the ctest processes below `root` (the command run): another CTest on
    the machine, or the one running this script as a test, is not watched."""

    def __init__(self, root):
        self.root = root
        self.tests = {}      # test pid -> {"cmd", "first", "last", "cpu"}
        self.owner = {}      # any pid seen below a test -> the test's pid
        self.lock = threading.Lock()

    def sample(self):
        now = time.monotonic()
        procs = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = read_stat(int(name))
                if st:
                    procs[int(name)] = st
        children = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        ctests, stack = set(), [self.root]
        while stack:
            p = stack.pop()
            if p in procs and procs[p][1] == "ctest":
                ctests.add(p)
            stack.extend(children.get(p, []))
        with self.lock:
            for ct in ctests:
                for top in children.get(ct, []):
                    t = self.tests.get(top)
                    if t is None:
                        t = self.tests[top] = {"cmd": cmdline(top), "first": now, "last": now, "cpu": 0.0,
                                               "repro": set()}
                    # Every living process below the test; the finished ones are in their parents'
                    # children times once reaped.
                    total, stack = 0.0, [top]
                    while stack:
                        p = stack.pop()
                        total += procs[p][2]
                        self.owner[p] = top
                        if procs[p][1] == "repro":
                            t["repro"].add(p)
                        stack.extend(children.get(p, []))
                    t["last"] = now
                    t["cpu"] = max(t["cpu"], total)


def pmon(stop, gpu_seconds, owner_of, lock):
    """nvidia-smi pmon's SM percent for each process, each second, added to its test's."""
    try:
        p = subprocess.Popen(["nvidia-smi", "pmon", "-s", "u", "-d", "1"], stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.DEVNULL)
    except OSError:
        return
    for line in p.stdout:
        if stop.is_set():
            break
        f = line.split()
        if not f or f[0].startswith("#") or len(f) < 4 or not f[1].isdigit() or not f[3].isdigit():
            continue
        with lock:
            top = owner_of.get(int(f[1]))
            if top is not None:
                gpu_seconds[top] = gpu_seconds.get(top, 0.0) + int(f[3]) / 100.0
    p.terminate()


def ctest_tests(build):
    """{tuple(command): (name, processors, resource groups)} from ctest --show-only=json-v1."""
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], capture_output=True, text=True).stdout
    found = {}
    for t in json.loads(out).get("tests", []):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        groups = props.get("RESOURCE_GROUPS")
        slots = ""
        if groups:
            slots = ",".join(f"{r['.type']}:{r['slots']}" for g in groups for r in g.get("requirements", []))
        found[tuple(t.get("command", []))] = (t["name"], int(props.get("PROCESSORS", 1)), slots)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="the build folder the tests are in (for their names)")
    ap.add_argument("--out", help="also write the table here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command to run (give it after --)")
    stop, gpu_seconds = threading.Event(), {}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    sampler = Sampler(proc.pid)
    threading.Thread(target=pmon, args=(stop, gpu_seconds, sampler.owner, sampler.lock), daemon=True).start()
    while proc.poll() is None:
        sampler.sample()
        time.sleep(0.2)
    stop.set()
    names = ctest_tests(a.build)
    rows = []
    for pid, t in sampler.tests.items():
        # A script CTest started runs as its interpreter with the script's path after it.
        name, processors, slots = names.get(tuple(t["cmd"])) or names.get(tuple(t["cmd"][1:])) or \
            (shlex.join(t["cmd"])[:60], 0, "")
        wall = max(t["last"] - t["first"], 0.2)
        rows.append((name, processors, slots, t["first"] - t0, wall, t["cpu"], gpu_seconds.get(pid, 0.0), len(t["repro"])))
    rows.sort(key=lambda r: -r[5])
    lines = [f"{'test':28} {'PROC':>4} {'slots':>8} {'start':>6} {'wall s':>7} {'CPU s':>7} {'CPUs':>5} {'GPU s':>6} "
             f"{'repros':>6}"]
    for name, processors, slots, start, wall, cpu, gpu, repros in rows:
        lines.append(f"{name:28} {processors:4} {slots:>8} {start:6.1f} {wall:7.1f} {cpu:7.1f} {cpu / wall:5.2f} {gpu:6.1f} "
                     f"{repros:6}")
    reserved = sum(r[1] * r[4] for r in rows)
    used = sum(r[5] for r in rows)
    lines.append(f"CPU seconds reserved (PROCESSORS x wall) {reserved:.0f}, used {used:.0f}; "
                 f"command's wall {time.monotonic() - t0:.0f} s, exit {proc.returncode}")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.out)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
