#!/usr/bin/python3
"""cross_aarch64_gpu_side.py: compiles, for an aarch64 host, every source file of the x86-64
build that the host-only aarch64 build (host_only/) does not compile: the .cu files (nvcc with
aarch64-linux-gnu-g++ as its host compiler, device code for the DGX Spark's sm_121) and the C++
files that call CUDA and cuBLAS (the path, the GPU child, `repro info`, main.cpp, the GPU tests).
Compiled only, not linked: the CUDA toolkit here has its libraries for x86-64 only.

    tools/cross_aarch64_gpu_side.py X86_BUILD AARCH64_BUILD OUT_DIR

Each file is compiled with exactly its command in X86_BUILD (a configured Ninja build of the
top-level project, e.g. build-ci), changed only where the target differs: the host compiler, the
GPU architecture, where the object goes. The sources come from the two builds, so no list of
files is kept here; a unity batch's sources are each compiled alone. The CUDA headers are the x86-64 target's (targets/x86_64-linux/include):
NVIDIA ships the same header files for every Linux target and they test __aarch64__ themselves;
the toolkit here has no targets/sbsa-linux folder. Exit 0 when every file compiled; the warnings
are printed either way.
"""
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST_CXX = "aarch64-linux-gnu-g++"
# The DGX Spark (GB10): machine code only, so that ptxas checks every kernel's resources for it.
SPARK_ARCH = "--generate-code=arch=compute_121,code=[sm_121]"
# nvcc picks the toolkit's target folder from its host compiler (aarch64 -> targets/aarch64-linux,
# absent here); this points it at the only one there is, for the headers.
NVCC_TARGET = ["-target-dir", "x86_64-linux"]


def compile_commands(build_dir):
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "compdb"], check=True, capture_output=True, text=True)
    return [e for e in json.loads(out.stdout) if e["file"].endswith((".cpp", ".cu", ".cxx"))]


def each_source_alone(entries):
    """The entries with each unity batch (a generated file that #includes several sources, compiled
    as one) replaced by one entry per source it includes, with the batch's command: each source is
    compiled on its own, as without unity builds, so that it must include what it uses."""
    alone = []
    for e in entries:
        if f"{os.sep}Unity{os.sep}" not in e["file"]:
            alone.append(e)
            continue
        with open(e["file"]) as batch:
            sources = re.findall(r'^#include "([^"]+)"', batch.read(), re.M)
        alone += [{**e, "file": src, "command": e["command"].replace(e["file"], src)} for src in sources]
    return alone


def tracked_sources(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True, text=True)
    return {os.path.join(root, p) for p in out.stdout.split("\0") if p}


def for_aarch64(entry, out_dir):
    """The entry's command with the aarch64 host compiler, sm_121, and the object in out_dir."""
    words = shlex.split(entry["command"])
    if os.path.basename(words[0]) == "ccache":
        words = words[1:]  # the launcher is kept out: ccache keys on the rewritten command anyway
    nvcc = os.path.basename(words[0]) == "nvcc"
    rel = os.path.relpath(entry["file"], ROOT)
    obj = os.path.join(out_dir, rel + ".o")
    command = [words[0], "-ccbin", HOST_CXX, *NVCC_TARGET] if nvcc else [HOST_CXX]
    skip = 0
    for i, w in enumerate(words[1:], 1):
        if skip:
            skip -= 1
        elif w in ("-MT", "-MF", "-o"):
            skip = 1
        elif w == "-MD":
            pass
        elif nvcc and (w.startswith("--generate-code") or w.startswith("-gencode") or w.startswith("-arch")):
            pass
        else:
            command.append(w)
    if nvcc:
        command.append(SPARK_ARCH)
    else:
        command.append("-Werror")  # as in host_only/: a warning only aarch64 shows is a finding
    return rel, obj, command + ["-o", obj]


def run(job, cwd):
    rel, obj, command = job
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    return rel, done.returncode, (done.stdout + done.stderr).strip(), command


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    x86_build, aarch64_build, out_dir = (os.path.abspath(a) for a in sys.argv[1:])
    tracked = tracked_sources(ROOT)
    built_for_aarch64 = {e["file"] for e in each_source_alone(compile_commands(aarch64_build))}
    entries = [e for e in each_source_alone(compile_commands(x86_build))
               if e["file"] in tracked and e["file"] not in built_for_aarch64]
    if not entries:
        sys.exit(f"cross_aarch64_gpu_side: no source file of {x86_build} is left to compile")
    jobs = [for_aarch64(e, out_dir) for e in entries]
    failed = warned = 0
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for rel, code, output, command in pool.map(lambda j: run(j, x86_build), jobs):
            if code != 0:
                failed += 1
                print(f"FAILED {rel}\n  {shlex.join(command)}\n{output}")
            else:
                warned += bool(output)
                print(f"ok     {rel}" + (f"\n{output}" if output else ""))
    print(f"cross_aarch64_gpu_side: {len(jobs) - failed} of {len(jobs)} files compiled for aarch64 "
          f"({warned} with warnings); not linked (no aarch64 CUDA libraries in this toolkit)")
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
