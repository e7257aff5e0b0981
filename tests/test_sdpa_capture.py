#!/usr/bin/env python3
"""test_sdpa_capture.py: scripts/sdpa_capture.py over a real training program, and repro's replay of a call.

Needs PyTorch with a CUDA device (exit 77, skipped, with one line saying why, without either).
Checks, each printed as "ok: ..." or "FAIL: ...":
  0. the capture's pure helpers (layouts, the text-padding pattern, the allocator's kind, .npy);
  1. the capture of tests/capture_model.py --steps 3: exit 0; workload.json's fields as the model
     makes its calls (two signatures: training and the evaluation pass; 2 calls a step; Q, K and V
     [B, S, H, E] buffers viewed as [B, H, S, E], layout bshe; the text-padding mask; backend
     math); calls.log (one enter and one exit line a call, the last an exit); calls/0/*.npy;
  2. workload.json against results/workload.schema.json, with a validator of the keywords the
     schema uses (no jsonschema package), which must also reject broken copies of the file;
  3. repro --workload-file FILE --call 0 --inputs calls/0 --check --save-output out.npy, and its
     output against PyTorch's own math SDPA on the same tensors, both against a float64
     reference: it passes when ours is within twice PyTorch's error (or 1e-6) in ||a-b||/||b||
     (--no-replay leaves it out);
  4. a process killed while a call is in flight (a program whose third call waits forever, then
     dumps its stacks and sends itself SIGKILL): workload.json is valid and counts the call,
     calls.log's last line is that call's enter line, stacks.txt shows where it waits;
  5. a program whose weights come from a memory-mapped file (capture_model.py --weights, a file
     of WEIGHTS_MIB MiB the test writes): the context records the host's memory (MemFree,
     MemAvailable, Cached, RssFile) and the file among the mapped files (its size, its resident
     pages); repro derives --mapped-weights from it (the plan's mapped weights, a report's commands),
     and --call-only leaves it out;
  6. capture_model.py --checkpoint non-reentrant and reentrant, with a frozen text encoder in each
     step: the recomputations inside the backward pass told apart (phase recompute), every training
     call a checkpointed layer's, calls_per_step the blocks (not the encoder's calls), and the
     replay's --layers N --retain checkpoint --backward.

Part 0 also checks the host readers (/proc/meminfo, /proc/self/status, /proc/self/smaps) over given
text, the page cache of a file it writes (cachestat and mincore, before and after its pages are
dropped), the loaded-files record, and the wrappers of the loaders, of torch.utils.checkpoint and
of the phase over stand-ins for torch and safetensors: `--helpers-only` runs part 0 alone, without
PyTorch (exit 0 or 1).

    python3 tests/test_sdpa_capture.py --repro build/repro [--keep DIR] [--no-replay] [--device cuda|cpu]
    python3 tests/test_sdpa_capture.py --helpers-only

--device cpu (with --no-replay) runs parts 0, 1, 2, 4, 5 (less repro's derivation) and 6 on PyTorch
without a GPU. Exit 0: every check passed; 1: a check failed; 2: bad options; 77: skipped.
"""
import argparse
import array
import ast
import json
import math
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
SCRIPT = os.path.join(SCRIPTS, "sdpa_capture.py")
MODEL = os.path.join(ROOT, "tests", "capture_model.py")
SCHEMA = os.path.join(ROOT, "results", "workload.schema.json")
sys.path.insert(0, SCRIPTS)
import sdpa_capture  # noqa: E402  (its pure helpers need no PyTorch)

EXIT_SKIP = 77
# capture_model.py's defaults, and the steps the test asks of it.
STEPS, BLOCKS, BATCH, HEADS, HEAD_DIM, TEXT, TEXT_VALID, IMAGE = 3, 2, 2, 4, 32, 32, 20, 96
WEIGHTS_MIB = 256  # part 5's weights file
SEQ = TEXT + IMAGE
CALLS_PER_SIGNATURE = 3  # sdpa_capture.py's default --calls-per-signature
CHECKPOINTED = ("non-reentrant", "reentrant")  # part 6's capture_model.py --checkpoint modes


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, condition, what, detail=""):
        if condition:
            self.passed += 1
            print("ok: " + what)
        else:
            self.failed += 1
            print("FAIL: " + what + (" (" + detail + ")" if detail else ""))
        return bool(condition)


def tail(text, lines=5):
    return " | ".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------------- JSON Schema, a subset
# The keywords results/*.schema.json use, no more: a schema with any other fails loudly, so that a
# new keyword is not silently ignored.
SCHEMA_KEYWORDS = {"$schema", "$defs", "title", "description", "type", "required", "properties",
                   "additionalProperties", "items", "enum", "minimum", "minItems", "maxItems", "anyOf", "$ref"}


class SchemaError(Exception):
    """The schema uses what this validator does not support."""


def json_type_matches(value, name):
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool):  # a bool is an int in Python, never a number in JSON
        return False
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float))
    raise SchemaError("unknown type %r" % name)


def json_equal(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return a == b


def shown(value):
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def schema_errors(value, schema, root=None, path="$"):
    """Every way `value` fails `schema`, one line each (empty: valid)."""
    root = schema if root is None else root
    unknown = set(schema) - SCHEMA_KEYWORDS
    if unknown:
        raise SchemaError("%s: keywords the validator does not support: %s" % (path, ", ".join(sorted(unknown))))
    errors = []
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/") or ref[8:] not in root.get("$defs", {}):
            raise SchemaError("%s: unsupported or unknown $ref %s" % (path, ref))
        errors += schema_errors(value, root["$defs"][ref[8:]], root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(json_type_matches(value, t) for t in types):
            return errors + ["%s: %s is not of type %s" % (path, shown(value), " or ".join(types))]
    if "enum" in schema and not any(json_equal(value, e) for e in schema["enum"]):
        errors.append("%s: %s is not one of %s" % (path, shown(value), shown(schema["enum"])))
    if "minimum" in schema and json_type_matches(value, "number") and value < schema["minimum"]:
        errors.append("%s: %s is below the minimum %s" % (path, shown(value), schema["minimum"]))
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                errors.append("%s: no key %r" % (path, name))
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                errors += schema_errors(item, properties[name], root, "%s.%s" % (path, name))
            elif extra is False:
                errors.append("%s: unexpected key %r" % (path, name))
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, root, "%s.%s" % (path, name))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append("%s: %d items, fewer than %d" % (path, len(value), schema["minItems"]))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append("%s: %d items, more than %d" % (path, len(value), schema["maxItems"]))
        if "items" in schema:
            for i, item in enumerate(value):
                errors += schema_errors(item, schema["items"], root, "%s[%d]" % (path, i))
    if "anyOf" in schema and all(schema_errors(value, sub, root, path) for sub in schema["anyOf"]):
        errors.append("%s: %s matches none of the %d schemas of anyOf" % (path, shown(value), len(schema["anyOf"])))
    return errors


# ----------------------------------------------------------------------------------------- .npy
NPY_ITEM = {"<u2": 2, "<f2": 2, "<f4": 4, "<f8": 8, "|b1": 1}


def read_npy(path):
    """(descr, shape, data bytes) of a .npy file, checked against its header."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY" or raw[6] not in (1, 2, 3):
        raise ValueError("%s: not a .npy file" % path)
    length, start = (struct.unpack("<H", raw[8:10])[0], 10) if raw[6] == 1 else (struct.unpack("<I", raw[8:12])[0], 12)
    header = ast.literal_eval(raw[start:start + length].decode("latin1"))
    if header["fortran_order"] or header["descr"] not in NPY_ITEM:
        raise ValueError("%s: unexpected header %s" % (path, header))
    data = raw[start + length:]
    count = 1
    for d in header["shape"]:
        count *= d
    if len(data) != count * NPY_ITEM[header["descr"]]:
        raise ValueError("%s: %d bytes of data for shape %s" % (path, len(data), header["shape"]))
    return header["descr"], list(header["shape"]), data


def npy_tensor(torch, path):
    descr, shape, data = read_npy(path)
    dtype = {"<u2": torch.bfloat16, "<f2": torch.float16, "<f4": torch.float32, "<f8": torch.float64,
             "|b1": torch.bool}[descr]
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape).clone()


# ------------------------------------------------------------------------------- 0. the helpers
def part_helpers(checks):
    c = sdpa_capture
    b, h, s, e = BATCH, HEADS, SEQ, HEAD_DIM
    checks.check(c.layout_of([b, h, s, e], [h * s * e, s * e, e, 1]) == "bhse"
                 and c.layout_of([b, h, s, e], [s * h * e, e, h * e, 1]) == "bshe"
                 and c.layout_of([b, h, s, e], [3 * s * h * e, e, 3 * h * e, 1]) == "other"
                 and c.layout_of([b, 1, s, e], [s * e, e, e, 1]) == "bhse"
                 and c.layout_of([1, h, s, e], [12345, e, h * e, 1]) == "bshe",
                 "layouts: contiguous bhse, a transposed [B, S, H, E] buffer bshe (any stride on a size-1 "
                 "dimension), packed QKV other")
    rows = [[True] * s, [True] * TEXT_VALID + [False] * (TEXT - TEXT_VALID) + [True] * IMAGE]
    checks.check(c.text_padding_of(rows) == (TEXT, [TEXT, TEXT_VALID])
                 and c.text_padding_of([[True] * s]) is None
                 and c.text_padding_of([[True, False, True, False]]) is None
                 and c.text_padding_of([[True, False, True], [True, True, False]]) is None,
                 "text padding: one run [valid, T) per batch entry with one end T; not all-True masks, two "
                 "runs or different ends")
    checks.check(c.allocator_kind(None, None, None, False)[0] == "none"
                 and c.allocator_kind(None, None, "native", True)[0] == "caching"
                 and c.allocator_kind("expandable_segments:True", None, "native", True)[0] == "expandable_segments"
                 and c.allocator_kind("backend:cudaMallocAsync", None, "cudaMallocAsync", True)[0] == "cuda_malloc_async"
                 and c.allocator_kind(None, None, "pluggable", True)[0] == "pluggable",
                 "allocator kinds from PYTORCH_CUDA_ALLOC_CONF and get_allocator_backend()")
    folder = tempfile.mkdtemp(prefix="sdpa_capture_npy.")
    try:
        path = os.path.join(folder, "x.npy")
        c.write_npy(path, "<u2", [1, 2, 1, 2], b"\x80\x3f\x00\x40\x40\x40\x80\x40")
        descr, shape, data = read_npy(path)
        header_end = os.path.getsize(path) - len(data)
        checks.check((descr, shape, data) == ("<u2", [1, 2, 1, 2], b"\x80\x3f\x00\x40\x40\x40\x80\x40")
                     and header_end % 64 == 0 and os.listdir(folder) == ["x.npy"],
                     ".npy written by hand: header, shape, data at a multiple of 64 bytes, no temporary file left")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    part_host_readers(checks)
    part_page_cache(checks)
    part_loaded_files(checks)
    part_wrappers(checks)


# The texts the host readers are given: /proc/meminfo, /proc/self/status, /proc/self/smaps (a
# safetensors shard mapped twice, a bigger dataset file, a shared library, a deleted file, an
# anonymous mapping, the heap, a device, the locale archive, a file of Python's own).
MEMINFO = """MemTotal:       128000000 kB
MemFree:         2000000 kB
MemAvailable:   90000000 kB
Buffers:           12345 kB
Cached:         70000000 kB
SwapCached:         4321 kB
"""
STATUS = """Name:\tpython3
VmRSS:\t 4000000 kB
RssAnon:\t 1000000 kB
RssFile:\t 3000000 kB
RssShmem:\t       0 kB
"""


def smaps_mapping(start, path, rss_kib, inode=7):
    return ("%012x-%012x r--p 00000000 103:02 %d%s\nSize:            %d kB\nRss:             %d kB\n"
            "Pss:             %d kB\nVmFlags: rd mr mw me sd\n" % (start, start + 4096, inode,
                                                                 (" " * 20 + path) if path else "", rss_kib, rss_kib,
                                                                 rss_kib))


def part_host_readers(checks):
    """The host memory and mapped-file readers over given text, without PyTorch or /proc."""
    c = sdpa_capture
    checks.check(c.host_memory_of(MEMINFO, STATUS) == {"mem_free": 2000000 * 1024, "mem_available": 90000000 * 1024,
                                                       "cached": 70000000 * 1024, "rss_file": 3000000 * 1024}
                 and c.host_memory_of(None, None) == {"mem_free": None, "mem_available": None, "cached": None,
                                                      "rss_file": None}
                 and c.host_memory_of("MemFree: 5 kB\n", "")["cached"] is None
                 and c.kib_field("Cached:  12\n", "Cached") == 12 and c.kib_field("Cached: x kB\n", "Cached") is None,
                 "the host's memory from /proc/meminfo and /proc/self/status: MemFree, MemAvailable, Cached (not "
                 "SwapCached), RssFile in bytes; null where a text or a line is missing")
    shard = "/hub/models--Qwen--Qwen-Image/snapshots/75e0/transformer/diffusion_pytorch_model-00001-of-00009.safetensors"
    smaps = "".join([
        smaps_mapping(0x1000, shard, 1000),
        smaps_mapping(0x9000, "/data/train.arrow", 50),
        smaps_mapping(0x11000, "/opt/conda/lib/libtorch_cuda.so", 900000),
        smaps_mapping(0x21000, "/home/u/w/libcustom.so.1.2", 10),
        smaps_mapping(0x31000, "/data/old.safetensors (deleted)", 10),
        smaps_mapping(0x41000, "", 4, inode=0),
        smaps_mapping(0x51000, "[heap]", 40000, inode=0),
        smaps_mapping(0x61000, "/dev/nvidia0", 0, inode=999),
        smaps_mapping(0x71000, "/usr/lib/locale/locale-archive", 100),
        smaps_mapping(0x81000, "/opt/conda/lib/python3.11/lib-dynload/x.bin", 1),
        smaps_mapping(0x91000, "/home/u/.nv/ComputeCache/index", 1),
        smaps_mapping(0xa1000, shard, 24),
        smaps_mapping(0xb1000, "/data/small.gguf", 8),
        smaps_mapping(0xc1000, "/data/with space.pt", 2),
        smaps_mapping(0xd1000, "/data/gone.bin", 2)])
    sizes = {shard: 5000000000, "/data/train.arrow": 9000000000, "/data/small.gguf": 3000000,
             "/data/with space.pt": 7, "/dev/nvidia0": None, "/opt/conda/lib/python3.11/lib-dynload/x.bin": 10 ** 12,
             "/home/u/.nv/ComputeCache/index": 10 ** 12, "/usr/lib/locale/locale-archive": 10 ** 12}
    size_of = sizes.get  # a file the dictionary lacks is gone (None), as a device is
    files = c.mapped_files_of(smaps, True, size_of=size_of, prefixes=("/opt/conda/",), name_of=lambda p: p)
    checks.check(files == [{"path": "/data/train.arrow", "bytes": 9000000000, "resident_bytes": 50 * 1024},
                           {"path": shard, "bytes": 5000000000, "resident_bytes": 1024 * 1024},
                           {"path": "/data/small.gguf", "bytes": 3000000, "resident_bytes": 8 * 1024},
                           {"path": "/data/with space.pt", "bytes": 7, "resident_bytes": 2 * 1024}],
                 "mapped files from /proc/self/smaps: largest first, one per path (its mappings' Rss summed), only "
                 "regular files; no shared library, deleted file, anonymous mapping, device, nor a file of the system, "
                 "Python or the CUDA cache", shown(files))
    maps = "\n".join(line for line in smaps.splitlines() if re.match(r"^[0-9a-f]+-", line))
    limited = c.mapped_files_of(maps, False, size_of=size_of, prefixes=("/opt/conda/",), limit=2, name_of=lambda p: p)
    checks.check([(f["path"], f["resident_bytes"]) for f in limited] == [("/data/train.arrow", None), (shard, None)]
                 and c.mapped_files_of("", True) == [] and c.mapped_files_of(None, True) == [],
                 "from /proc/self/maps (no smaps): the same files, resident_bytes null; at most `limit`; none from no text")
    checks.check(c.is_runtime_file("/x/libcudart.so.12.4.127") and c.is_runtime_file("/x/_C.cpython-311-x86_64-linux-gnu.so")
                 and c.is_runtime_file("/venv/lib/python3.11/site-packages/nvidia/cublas/lib/x.bin")
                 and c.is_runtime_file("/env/share/x.safetensors", ("/env/",))
                 and not c.is_runtime_file("/data/model.safetensors", ("/env/",))
                 and not c.is_runtime_file("/data/model.so.safetensors")
                 and not c.is_runtime_file("/data/isotope.bin"),
                 "runtime files: *.so and *.so.N, site-packages, Python's prefixes; a model file is not one")
    folder = tempfile.mkdtemp(prefix="sdpa_capture_hub.")
    try:
        repo = os.path.join(folder, "models--org--name")
        blob = os.path.join(repo, "blobs", "a" * 64)
        os.makedirs(os.path.dirname(blob))
        os.makedirs(os.path.join(repo, "snapshots", "rev1", "transformer"))
        with open(blob, "wb") as f:
            f.write(b"x" * 10)
        link = os.path.join(repo, "snapshots", "rev1", "transformer", "model-00001-of-00002.safetensors")
        os.symlink(os.path.join("..", "..", "..", "blobs", "a" * 64), link)
        other = os.path.join(repo, "blobs", "b" * 40)
        open(other, "w").close()
        real = os.path.realpath(blob)
        checks.check(c.hub_link_name(real) == os.path.join(os.path.realpath(repo), "snapshots", "rev1", "transformer",
                                                           "model-00001-of-00002.safetensors")
                     and c.hub_link_name(os.path.realpath(other)) == os.path.realpath(other)
                     and c.hub_link_name("/data/model.safetensors") == "/data/model.safetensors",
                     "a Hugging Face hub cache's blob is named by the snapshot link the program opened (its "
                     ".safetensors name); any other file by its path")
        text = smaps_mapping(0x1000, real, 4)
        files = c.mapped_files_of(text, True)
        checks.check([f["path"] for f in files] == [c.hub_link_name(real)] and files[0]["bytes"] == 10,
                     "mapped_files_of names the hub blob by its link, its size the blob's", shown(files))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    memory, mapped = c.read_host_memory(), c.read_mapped_files()
    on_proc = os.path.exists("/proc/self/maps")
    checks.check(sorted(memory) == ["cached", "mem_available", "mem_free", "rss_file"]
                 and all(v is None or (isinstance(v, int) and v >= 0) for v in memory.values())
                 and (mapped is None) == (not on_proc) and (mapped is None or len(mapped) <= 5),
                 "this process's memory and mapped files read (null where /proc is absent)",
                 shown({"memory": memory, "mapped": mapped}))


def filesystem_type(path):
    """The type of the file system `path` is on (/proc/mounts' longest mount point above it)."""
    best, kind = "", None
    real = os.path.realpath(path)
    for line in (sdpa_capture.read_text("/proc/mounts") or "").splitlines():
        fields = line.split()
        if len(fields) >= 3 and (real == fields[1] or real.startswith(fields[1].rstrip("/") + "/")) \
                and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def part_page_cache(checks):
    """A file's pages in the page cache, by each probe: all of them after it is read, fewer once
    they are dropped (posix_fadvise DONTNEED on its clean pages), on a file system whose pages
    can be dropped (not tmpfs)."""
    c = sdpa_capture
    if not sys.platform.startswith("linux"):
        print("# page cache probes: Linux only")
        return
    folder = tempfile.mkdtemp(prefix="sdpa_capture_cache.")
    try:
        path = os.path.join(folder, "weights.safetensors")
        size = (8 << 20) + 123  # not a whole number of pages
        with open(path, "wb") as f:
            f.write(os.urandom(size))
            f.flush()
            os.fsync(f.fileno())
        page = os.sysconf("SC_PAGE_SIZE")
        whole = (size + page - 1) // page * page
        probes = []
        for probe in c.PROBES:
            with open(path, "rb") as f:
                f.read()  # every page in the page cache
            read, by = c.page_cache_bytes(path, probes=(probe,))
            if read is None:
                print("# page cache probe %s: not answered here (an older kernel, or a filter)" % probe)
                continue
            probes.append(probe)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            dropped, _ = c.page_cache_bytes(path, probes=(probe,))
            droppable = filesystem_type(folder) not in ("tmpfs", "ramfs")
            checks.check(by == probe and read == whole and dropped is not None and dropped <= read
                         and (dropped < size if droppable else True),
                         "page cache by %s: %d bytes after the file is read (its %d bytes in whole pages), %d after its "
                         "pages are dropped" % (probe, read, size, dropped))
        checks.check(bool(probes) and c.page_cache_bytes(path)[1] == probes[0]
                     and c.page_cache_bytes(os.path.join(folder, "gone")) == (None, None),
                     "page_cache_bytes: the first probe that answers (%s); (None, None) for a file not there"
                     % (probes[0] if probes else "none"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def part_loaded_files(checks):
    """loaded_files_of over given loads, mappings and open files, sizes and page cache."""
    c = sdpa_capture
    shard1, shard2 = "/m/transformer/a.safetensors", "/m/transformer/b.safetensors"
    sizes = {shard1: 9 << 30, shard2: 5 << 30, "/m/te/model.pt": 100, "/data/train.arrow": 80 << 30,
             "/data/small.bin": 1 << 20, "/data/log.txt": 200 << 20, "/usr/lib/x.bin": 1 << 40, "/m/gone": None,
             "/env/lib/weights.safetensors": 3 << 30}
    cached = {shard1: (9 << 30, "cachestat"), shard2: (1 << 30, "cachestat"), "/m/te/model.pt": (4096, "mincore")}
    files = c.loaded_files_of({"/m/transformer/../transformer/a.safetensors": "safetensors", shard2: "safetensors",
                               "/m/te/model.pt": "torch.load", "/m/gone": "safetensors",
                               "/env/lib/weights.safetensors": "safetensors"},
                              mapped={shard2, "/data/train.arrow", "/data/small.bin", "/usr/lib/x.bin"},
                              opened={"/data/log.txt", shard1},
                              size_of=sizes.get, cached_of=lambda p: cached.get(p, (None, None)), prefixes=("/env/",),
                              name_of=lambda p: p, resolve=os.path.normpath)
    by_path = {f["path"]: f for f in files}
    checks.check([f["path"] for f in files] == ["/data/train.arrow", shard1, shard2, "/env/lib/weights.safetensors",
                                                "/data/log.txt", "/m/te/model.pt"]
                 and by_path[shard1]["how"] == "safetensors" and not by_path[shard1]["mapped"]
                 and by_path[shard2]["mapped"] and by_path[shard2]["cached_bytes"] == 1 << 30
                 and by_path["/m/te/model.pt"]["how"] == "torch.load"
                 and by_path["/m/te/model.pt"]["cached_by"] == "mincore"
                 and by_path["/data/train.arrow"]["how"] == "mapping" and by_path["/data/log.txt"]["how"] == "open"
                 and by_path["/data/log.txt"]["cached_bytes"] is None and by_path["/data/log.txt"]["cached_by"] is None
                 and by_path["/env/lib/weights.safetensors"]["how"] == "safetensors",
                 "loaded files: each loaded file once, resolved (mapped or not, any size, even under Python's prefix), "
                 "the large files mapped or open besides; none gone, small, or of the system; largest first; their "
                 "page cache and its probe", shown(files))
    checks.check(len(c.loaded_files_of({}, {"/a%d.bin" % i for i in range(50)}, None, size_of=lambda p: 1 << 30,
                                       cached_of=lambda p: (None, None), name_of=lambda p: p)) == c.LOADED_LIMIT
                 and c.loaded_files_of({}, None, None) == [],
                 "loaded files: at most %d; none from nothing" % c.LOADED_LIMIT)
    fd_folder = tempfile.mkdtemp(prefix="sdpa_capture_fd.")
    try:
        target = os.path.join(fd_folder, "model.safetensors")
        open(target, "w").close()
        os.symlink(target, os.path.join(fd_folder, "3"))
        os.symlink("socket:[1234]", os.path.join(fd_folder, "4"))
        os.symlink(target + "2 (deleted)", os.path.join(fd_folder, "5"))
        mine = c.open_files()
        checks.check(c.open_files(fd_folder) == {target} and c.open_files(os.path.join(fd_folder, "none")) is None
                     and (mine is None or all(p.startswith("/") for p in mine)),
                     "open files from /proc/self/fd's links: files only (no socket, no deleted file); None where "
                     "the folder cannot be read")
    finally:
        shutil.rmtree(fd_folder, ignore_errors=True)
    checks.check(c.retention_of(True, False) == "autograd" and c.retention_of(False, False) == "none"
                 and c.retention_of(True, True) == "checkpoint" and c.retention_of(False, True) == "checkpoint",
                 "retention: checkpoint for a checkpointed block's call (with or without grad), else autograd where "
                 "autograd records it, else none")


def part_wrappers(checks):
    """The loaders, torch.utils.checkpoint and the phase, through install()'s wrappers over stand-ins
    for torch and safetensors (the wrappers need nothing else of them)."""
    import importlib.machinery
    import types
    c = sdpa_capture
    names = ("torch", "torch.utils", "torch.utils.checkpoint", "safetensors", "safetensors.torch")
    saved = {name: sys.modules.get(name) for name in names}
    state = {"task": -1, "hooks": None}
    torch = types.ModuleType("torch")
    torch.load = lambda f, *args, **kwargs: ("torch.load", f)
    torch._C = types.SimpleNamespace(_current_graph_task_id=lambda: state["task"],
                                     _autograd=types.SimpleNamespace(
                                         _top_saved_tensors_default_hooks=lambda ignore_is_tracing: state["hooks"]))
    utils, checkpoint_module = types.ModuleType("torch.utils"), types.ModuleType("torch.utils.checkpoint")
    checkpoint_module.checkpoint = lambda function, *args, use_reentrant=None, **kwargs: function(*args)
    torch.utils, utils.checkpoint = utils, checkpoint_module
    safetensors, safetensors_torch = types.ModuleType("safetensors"), types.ModuleType("safetensors.torch")
    safetensors.__spec__ = importlib.machinery.ModuleSpec("safetensors", None)

    class SafeOpen:
        def __init__(self, filename, framework, device="cpu"):
            self.filename = filename

    safetensors.safe_open = safetensors_torch.safe_open = SafeOpen
    safetensors_torch.load_file = lambda filename, device="cpu": safetensors_torch.safe_open(filename, "pt")
    safetensors.torch = safetensors_torch
    originals = (torch.load, SafeOpen, safetensors_torch.load_file, checkpoint_module.checkpoint)
    folder = tempfile.mkdtemp(prefix="sdpa_capture_wrappers.")
    sys.modules.update({"torch": torch, "torch.utils": utils, "torch.utils.checkpoint": checkpoint_module,
                        "safetensors": safetensors, "safetensors.torch": safetensors_torch})
    try:
        cap = c.Capture(torch, os.path.join(folder, "out"), "none", 3, 0.0, False, ["x"])
        cap._active = True
        cap._patch_loaders()
        cap._patch_checkpoint()
        a, b, p = (os.path.join(folder, n) for n in ("a.safetensors", "b.safetensors", "c.pt"))
        import pathlib
        opened = safetensors.safe_open(pathlib.Path(a), framework="pt")
        safetensors_torch.load_file(b)
        with open(p, "w") as f:
            torch.load(f)
        torch.load(io_bytes())  # a buffer: no file
        checks.check(isinstance(opened, SafeOpen) and str(opened.filename) == a
                     and cap._loads == {a: "safetensors", b: "safetensors", p: "torch.load"},
                     "the loaders' wrappers record each file (safe_open of a Path, load_file through safe_open, "
                     "torch.load of a file object by its name; not a buffer) and return what the loader returns",
                     shown(cap._loads))
        inside = checkpoint_module.checkpoint(lambda x: (x, cap._in_checkpoint()), 7, use_reentrant=True)
        outside = cap._in_checkpoint()

        def pack_hook(x):
            return x
        pack_hook.__qualname__ = "_checkpoint_hook.__init__.<locals>.pack_hook"
        state["hooks"] = (pack_hook, pack_hook)
        by_hooks = cap._in_checkpoint()
        state["hooks"] = (lambda x: x, lambda x: x)
        other_hooks = cap._in_checkpoint()
        not_backward = cap._in_backward()
        state["task"] = 3
        in_backward = cap._in_backward()
        checks.check(inside == (7, True) and not outside and by_hooks and not other_hooks and not not_backward
                     and in_backward,
                     "inside torch.utils.checkpoint's forward (its wrapper, or a checkpoint bound before: its saved-"
                     "tensor hooks), and inside the backward pass (a graph task): told apart from the rest")
        for module, name, original, wrapper in reversed(cap._patches):
            setattr(module, name, original)
        checks.check((torch.load, safetensors.safe_open, safetensors_torch.load_file, checkpoint_module.checkpoint)
                     == originals and len(cap._patches) == 5,
                     "five functions wrapped (safe_open twice, load_file, torch.load, checkpoint), each put back")
        for f in (cap._log_file, cap._stacks):
            f.close()
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        shutil.rmtree(folder, ignore_errors=True)


def io_bytes():
    import io
    return io.BytesIO(b"x")


# ------------------------------------------------------------------------------- 1. the capture
def calls_log(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def log_field(line, name):
    for word in line.split():
        if word.startswith(name + "="):
            return word[len(name) + 1:]
    return None


def leftover_temporaries(folder):
    return [os.path.join(d, n) for d, _, names in os.walk(folder) for n in names if ".tmp." in n]


class Started:
    """A program started now and waited for when its part checks it. The parts' programs each import
    PyTorch and start CUDA, seconds apiece, so they all start first and run at once. Its output goes
    to files under `logs` (a pipe no one reads until the end could fill and stall it)."""

    def __init__(self, cmd, logs, timeout):
        os.makedirs(logs, exist_ok=True)
        self.cmd, self.timeout, self.began = cmd, timeout, time.monotonic()
        self.out_path, self.err_path = os.path.join(logs, "stdout.txt"), os.path.join(logs, "stderr.txt")
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err)

    def result(self):
        """Its exit and output (a CompletedProcess); killed, and TimeoutExpired raised, past its timeout."""
        try:
            self.proc.wait(timeout=max(0.1, self.timeout - (time.monotonic() - self.began)))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        with open(self.out_path, errors="replace") as out, open(self.err_path, errors="replace") as err:
            return subprocess.CompletedProcess(self.cmd, self.proc.returncode, out.read(), err.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_capture(out, device, logs):
    return Started([sys.executable, SCRIPT, "--out", out, "--tensors", "first", "--", MODEL, "--steps", str(STEPS),
                    "--device", device], logs, 600)


def part_capture(checks, torch, out, device, program):
    r = program.result()
    checks.check(r.returncode == 0, "the capture of capture_model.py --steps %d exits 0" % STEPS,
                 "exit %d: %s" % (r.returncode, tail(r.stderr)))
    path = os.path.join(out, "workload.json")
    if not checks.check(os.path.exists(path), "workload.json written"):
        return None
    with open(path) as f:
        w = json.load(f)
    cap = w.get("captured", {})
    checks.check(w.get("format") == "sdpa-repro-workload" and w.get("format_version") == 1
                 and cap.get("by") == "sdpa_capture.py 2" and cap.get("torch") == str(torch.__version__)
                 and cap.get("command") == [MODEL, "--steps", str(STEPS), "--device", device],
                 "format, version, tool, PyTorch's version and the program's command line",
                 shown({k: cap.get(k) for k in ("by", "torch", "command")}))
    if device == "cuda":
        d = cap.get("device") or {}
        checks.check(bool(d.get("name")) and str(d.get("capability", "")).count(".") == 1
                     and d.get("total_memory", 0) > 0, "the device recorded: %s, capability %s"
                     % (d.get("name"), d.get("capability")), shown(d))
        checks.check(w["allocator"]["kind"] != "none", "the allocator: %s (%s)" % (w["allocator"]["kind"],
                                                                                 w["allocator"]["detail"]))
    else:
        checks.check(cap.get("device") is None and w["allocator"]["kind"] == "none",
                     "no CUDA device and no allocator recorded on the CPU")
    total = (STEPS + 1) * BLOCKS
    checks.check(w.get("total_calls") == total, "total_calls %s: %d steps and the evaluation pass, %d blocks"
                 % (w.get("total_calls"), STEPS, BLOCKS))
    checks.check(w.get("calls_per_step") == BLOCKS and w.get("recomputed_per_step") == 0,
                 "calls_per_step %s (the model's %d blocks), none recomputed" % (w.get("calls_per_step"), BLOCKS))
    calls = w.get("calls", [])
    if not checks.check(len(calls) == 2 and sum(c["count"] for c in calls) == total,
                        "two signatures, training (requires_grad) and evaluation, counting every call",
                        "%d signatures, counts %s" % (len(calls), [c.get("count") for c in calls])):
        return w
    train, evaluation = calls
    checks.check((train["requires_grad"], train["first_call"], train["index_in_step"], train["count"])
                 == (True, 0, 0, STEPS * BLOCKS)
                 and (evaluation["requires_grad"], evaluation["first_call"], evaluation["index_in_step"],
                      evaluation["count"]) == (False, STEPS * BLOCKS, 0, BLOCKS),
                 "first calls, positions in the step and counts of both signatures")
    checks.check((train.get("phase"), train.get("retention"), evaluation.get("phase"), evaluation.get("retention"))
                 == ("forward", "autograd", "forward", "none"),
                 "the training calls kept as autograd keeps them, the evaluation's nothing; both of the forward pass")
    bshe_stride = [SEQ * HEADS * HEAD_DIM, HEAD_DIM, HEADS * HEAD_DIM, 1]
    layouts = {name: (train[name]["layout"], train[name]["stride"]) for name in ("query", "key", "value")}
    checks.check(all(train[name]["shape"] == [BATCH, HEADS, SEQ, HEAD_DIM] and train[name]["dtype"] == "bfloat16"
                     and not train[name]["contiguous"] and (train[name]["layout"], train[name]["stride"])
                     == ("bshe", bshe_stride) for name in ("query", "key", "value")),
                 "the model's Q, K and V all reach SDPA as [B, S, H, E] buffers viewed as [B, H, S, E]: layout "
                 "bshe, stride %s" % bshe_stride, shown(layouts))
    if device == "cuda":
        checks.check(all(train[name]["managed"] is False for name in ("query", "key", "value")),
                     "the driver says the caching allocator's memory is not managed",
                     shown([train[n]["managed"] for n in ("query", "key", "value")]))
    mask = train.get("mask") or {}
    padded = (TEXT - TEXT_VALID) * (BATCH - 1)
    checks.check(mask.get("kind") == "bool" and mask.get("shape") == [BATCH, 1, 1, SEQ]
                 and mask.get("pattern") == "text_padding" and mask.get("text_tokens") == TEXT
                 and mask.get("text_valid") == [TEXT] + [TEXT_VALID] * (BATCH - 1)
                 and abs(mask.get("masked_fraction", -1) - padded / (BATCH * SEQ)) < 1e-12,
                 "the mask: bool [B, 1, 1, S], text_padding, %d text tokens, valid %s"
                 % (TEXT, [TEXT] + [TEXT_VALID] * (BATCH - 1)), shown(mask))
    checks.check(train["backend"] == "math" and evaluation["backend"] == "math",
                 "backend math under sdpa_kernel(SDPBackend.MATH)", "%s, %s" % (train["backend"], evaluation["backend"]))
    checks.check((train["scale"], train["is_causal"], train["dropout_p"], train["enable_gqa"]) == (None, False, 0.0, False),
                 "scale, is_causal, dropout_p, enable_gqa as the model passes them")
    if device == "cuda":
        checks.check(train["context"]["memory_allocated"] > 0 and train["context"]["memory_reserved"]
                     >= train["context"]["memory_allocated"], "the context's memory: %s" % shown(train["context"]))
    host = {k: train["context"].get(k, "absent") for k in ("mem_free", "mem_available", "cached", "rss_file")}
    files = train["context"].get("mapped_files", "absent")
    checks.check(all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) for v in host.values())
                 and (files is None or (isinstance(files, list) and len(files) <= 5)),
                 "the context's host memory (MemFree, MemAvailable, Cached, RssFile) and mapped files",
                 shown({"host": host, "mapped_files": files}))
    checks.check(train["tensors"] == "calls/0" and evaluation["tensors"] == "calls/1", "tensors in calls/0 and calls/1")
    check_saved_tensors(checks, torch, os.path.join(out, "calls", "0"))
    log_path = os.path.join(out, "calls.log")
    if checks.check(os.path.exists(log_path), "calls.log written"):
        lines = calls_log(log_path)
        enters = [line for line in lines if line.startswith("enter ")]
        exits = [line for line in lines if line.startswith("exit ")]
        describes = [line for line in lines if line.startswith("describe ")]
        checks.check(len(enters) == total and len(exits) == total and bool(lines) and lines[-1].startswith("exit "),
                     "calls.log: %d enter and %d exit lines for %d calls, the last an exit line"
                     % (len(enters), len(exits), total), lines[-1] if lines else "empty")
        sigs = [log_field(line, "sig") for line in enters]
        checks.check(sigs == ["0"] * (STEPS * BLOCKS) + ["1"] * BLOCKS
                     and [log_field(line, "call") for line in enters] == [str(i) for i in range(total)],
                     "calls.log numbers the calls and names their signatures", shown(sigs))
        expected = min(CALLS_PER_SIGNATURE, STEPS * BLOCKS) + min(CALLS_PER_SIGNATURE, BLOCKS)
        checks.check(len(describes) == expected, "the first %d calls of each shape described (%d lines)"
                     % (CALLS_PER_SIGNATURE, len(describes)))
    stacks = os.path.join(out, "stacks.txt")
    checks.check(os.path.exists(stacks) and open(stacks).readline().startswith("# sdpa_capture"), "stacks.txt opened")
    checks.check(not leftover_temporaries(out), "no temporary file left", shown(leftover_temporaries(out)))
    return w


def check_saved_tensors(checks, torch, folder):
    names = ("q", "k", "v", "mask")
    if not checks.check(all(os.path.exists(os.path.join(folder, n + ".npy")) for n in names),
                        "calls/0 holds q.npy, k.npy, v.npy and mask.npy"):
        return
    headers = {n: read_npy(os.path.join(folder, n + ".npy"))[:2] for n in names}
    qkv = ("<u2", [BATCH, HEADS, SEQ, HEAD_DIM])
    checks.check(headers["q"] == qkv and headers["k"] == qkv and headers["v"] == qkv
                 and headers["mask"] == ("|b1", [BATCH, 1, SEQ, SEQ]),
                 "q, k, v as bf16 bits [B, H, len, E]; the mask broadcast to [B, 1, L, S]", shown(headers))
    mask = npy_tensor(torch, os.path.join(folder, "mask.npy"))
    row = torch.ones(SEQ, dtype=torch.bool)
    row[TEXT_VALID:TEXT] = False
    checks.check(bool(mask[0].all()) and all(bool((mask[b, 0] == row).all()) for b in range(1, BATCH)),
                 "mask.npy: entry 0 keeps every key, the others lose text keys %d..%d in every row"
                 % (TEXT_VALID, TEXT - 1))


# -------------------------------------------------------------------------------- 2. the schema
def part_schema(checks, w, schema, what):
    errors = schema_errors(w, schema)
    checks.check(not errors, "%s is valid against results/workload.schema.json" % what, "; ".join(errors[:3]))


def part_validator_rejects(checks, w, schema):
    """The validator is not vacuous: broken copies of a valid file fail it."""
    def broken(change):
        copy = json.loads(json.dumps(w))
        change(copy)
        return bool(schema_errors(copy, schema))

    def bad_pattern(d):
        d["calls"][0]["mask"]["pattern"] = "padding"

    def bad_shape(d):
        d["calls"][0]["query"]["shape"] = [1, 2, 3]

    def bool_count(d):
        d["calls"][0]["count"] = True

    checks.check(broken(lambda d: d.update(extra=1)) and broken(lambda d: d.pop("calls"))
                 and broken(bad_pattern) and broken(bad_shape) and broken(bool_count),
                 "the validator rejects an unknown key, a missing key, a word outside an enum (through anyOf and "
                 "$ref), a 3-dimensional shape and a bool for an integer")


# -------------------------------------------------------------------------------- 3. the replay
def reference_f64(torch, q, k, v, mask, scale, is_causal, enable_gqa):
    """softmax(Q K^T * scale + mask) V in float64 on the CPU; a row with every key masked is zeros,
    as PyTorch's _safe_softmax and repro's softmax give."""
    q, k, v = q.double(), k.double(), v.double()
    if enable_gqa and k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = q @ k.transpose(-2, -1) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.double()
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    row_max = scores.amax(-1, keepdim=True)
    empty = torch.isneginf(row_max)
    e = torch.exp(scores - torch.where(empty, torch.zeros_like(row_max), row_max))
    total = e.sum(-1, keepdim=True)
    p = torch.where(empty, torch.zeros_like(e), e / torch.where(empty, torch.ones_like(total), total))
    return p @ v


def relative_error(a, b):
    return float((a.double() - b).norm() / b.norm())


def part_replay(checks, torch, out, repro, w):
    folder = os.path.join(out, "calls", "0")
    output = os.path.join(out, "out.npy")
    cmd = [repro, "--workload-file", os.path.join(out, "workload.json"), "--call", "0", "--inputs", folder,
           "--check", "--save-output", output]
    print("# " + " ".join(cmd))
    if not checks.check(os.access(repro, os.X_OK), "the harness %s is there" % repro):
        return
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    if not checks.check(r.returncode == 0, "repro replays call 0 and passes its own check",
                        "exit %d: %s" % (r.returncode, tail(r.stderr + r.stdout))):
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    entry = w["calls"][0]
    q, k, v, mask = (npy_tensor(torch, os.path.join(folder, n + ".npy")) for n in ("q", "k", "v", "mask"))
    ours = npy_tensor(torch, output)
    if not checks.check(list(ours.shape) == list(q.shape) and ours.dtype == torch.float32,
                        "repro's output is float32 of Q's shape %s" % list(q.shape), str(list(ours.shape))):
        return
    kwargs = {"attn_mask": mask.cuda(), "is_causal": entry["is_causal"], "scale": entry["scale"]}
    if entry["enable_gqa"]:
        kwargs["enable_gqa"] = True
    with sdpa_kernel(SDPBackend.MATH):
        theirs = F.scaled_dot_product_attention(q.cuda(), k.cuda(), v.cuda(), **kwargs).float().cpu()
    reference = reference_f64(torch, q, k, v, mask, entry["scale"], entry["is_causal"], entry["enable_gqa"])
    ours_error, torch_error = relative_error(ours, reference), relative_error(theirs, reference)
    bound = max(2 * torch_error, 1e-6)
    print("replay: repro vs float64 %.3e" % ours_error)
    print("replay: PyTorch math vs float64 %.3e" % torch_error)
    print("replay: repro vs PyTorch math %.3e" % relative_error(ours, theirs.double()))
    checks.check(ours_error <= bound, "repro's output within twice PyTorch's error of the float64 reference "
                 "(%.3e <= %.3e)" % (ours_error, bound))


# --------------------------------------------------------------------------------- 4. the hang
HANG_PROGRAM = r'''
"""Three attention calls, the third of which never returns: its query is a tensor subclass that
waits, for the attention op alone, on an event no one sets. Once calls.log names the call, the
program dumps its stacks (SIGUSR1, delivered to this thread before the call returns) and sends
itself SIGKILL: what a hung process that is killed leaves behind."""
import os
import signal
import sys
import threading
import time

scripts, out, device = sys.argv[1:4]
sys.path.insert(0, scripts)
import torch
import torch.nn.functional as F
from sdpa_capture import install

install(out=out)
never = threading.Event()


class Blocking(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "scaled_dot_product_attention":
            never.wait()
        return super().__torch_function__(func, types, args, kwargs or {})


q, k, v = (torch.randn(1, 2, 8, 16, device=device) for _ in range(3))
F.scaled_dot_product_attention(q, k, v)
F.scaled_dot_product_attention(q, k, v)
threading.Thread(target=F.scaled_dot_product_attention, args=(q.as_subclass(Blocking), k, v), daemon=True).start()
log = os.path.join(out, "calls.log")
deadline = time.monotonic() + 30
while True:
    with open(log) as f:
        if any(line.startswith("enter call=2 ") for line in f):
            break
    if time.monotonic() > deadline:
        sys.exit("hang program: calls.log named no third call within 30 s")
    time.sleep(0.01)  # the poll's period; the condition and the deadline end it
signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
os.kill(os.getpid(), signal.SIGKILL)
'''


def start_hang(out, device, logs):
    os.makedirs(out, exist_ok=True)
    program = os.path.join(out, "hang_program.py")
    with open(program, "w") as f:
        f.write(HANG_PROGRAM)
    return Started([sys.executable, program, SCRIPTS, os.path.join(out, "capture"), device], logs, 180)


def part_hang(checks, out, program, schema):
    capture = os.path.join(out, "capture")
    r = program.result()
    if not checks.check(r.returncode == -signal.SIGKILL, "the hung program was killed by SIGKILL mid-call",
                        "exit %d: %s" % (r.returncode, tail(r.stderr))):
        return
    lines = calls_log(os.path.join(capture, "calls.log"))
    checks.check(bool(lines) and lines[-1].startswith("enter call=2 sig=0 "),
                 "calls.log's last line is the enter line of the call in flight: %s" % (lines[-1] if lines else ""))
    with open(os.path.join(capture, "workload.json")) as f:
        w = json.load(f)
    part_schema(checks, w, schema, "the killed process's workload.json")
    checks.check(w["total_calls"] == 3 and len(w["calls"]) == 1 and w["calls"][0]["count"] == 3,
                 "it counts the call in flight (written before the call entered)",
                 "total_calls %s, counts %s" % (w["total_calls"], [c["count"] for c in w["calls"]]))
    checks.check(not leftover_temporaries(capture), "no temporary file left", shown(leftover_temporaries(capture)))
    with open(os.path.join(capture, "stacks.txt")) as f:
        stacks = f.read()
    checks.check("__torch_function__" in stacks and "sdpa_capture.py" in stacks,
                 "stacks.txt shows the thread waiting inside the call, under the capture's wrapper")


# ------------------------------------------------------------------------- 5. mapped weights
def write_weights_file(path, mib):
    """`mib` MiB of bf16 values drawn from N(0, 0.02) (a model's weights; a block of 1 MiB repeated):
    float32 draws whose upper halves are their bf16 truncation."""
    rng = random.Random(7)
    values = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(1 << 19)))
    if sys.byteorder != "little":
        values.byteswap()
    halves = array.array("H")
    halves.frombytes(values.tobytes())
    block = halves[1::2].tobytes()
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)


def weights_file(work):
    return os.path.join(work, "model.bin")  # a name the harness counts as a model's weights


def start_mapped_weights(work, device, logs):
    os.makedirs(work, exist_ok=True)
    weights = weights_file(work)
    write_weights_file(weights, WEIGHTS_MIB)
    cmd = [sys.executable, SCRIPT, "--out", os.path.join(work, "capture"), "--", MODEL, "--steps", "2", "--device",
           device, "--weights", weights]
    print("# " + " ".join(cmd))
    return Started(cmd, logs, 600)


def part_mapped_weights(checks, torch, work, program, device, repro, schema):
    weights = weights_file(work)
    size = os.path.getsize(weights)
    out = os.path.join(work, "capture")
    r = program.result()
    if not checks.check(r.returncode == 0, "the capture of capture_model.py --weights (a %d MiB file, memory-mapped) "
                        "exits 0" % WEIGHTS_MIB, "exit %d: %s" % (r.returncode, tail(r.stderr + r.stdout))):
        return
    with open(os.path.join(out, "workload.json")) as f:
        w = json.load(f)
    part_schema(checks, w, schema, "the mapped-weights capture's workload.json")
    contexts = [c["context"] for c in w["calls"]]
    host_keys = ("mem_free", "mem_available", "cached", "rss_file")
    checks.check(all(isinstance(c.get(k), int) and not isinstance(c.get(k), bool) and c[k] >= 0
                     for c in contexts for k in host_keys) and all(c["cached"] > 0 for c in contexts),
                 "each signature's context has the host's MemFree, MemAvailable, Cached and RssFile in bytes",
                 shown([{k: c.get(k) for k in host_keys} for c in contexts]))
    real = os.path.realpath(weights)
    found = [[f for f in (c.get("mapped_files") or []) if f["path"] == real] for c in contexts]
    checks.check(all(len(x) == 1 and x[0]["bytes"] == size for x in found),
                 "each signature's mapped_files has the weights file, its size %d bytes" % size,
                 shown([c.get("mapped_files") for c in contexts]))
    if all(found):
        resident = found[0][0]["resident_bytes"]
        checks.check(isinstance(resident, int) and 0 < resident <= size + 4096 and contexts[0]["rss_file"] >= resident,
                     "its resident pages (%s bytes, the copies read them) counted in RssFile (%s)"
                     % (resident, contexts[0]["rss_file"]))
        files = contexts[0]["mapped_files"]
        checks.check(len(files) <= 5 and [f["bytes"] for f in files] == sorted((f["bytes"] for f in files), reverse=True)
                     and not any(re.search(r"\.so(\.[0-9.]*)?$", f["path"]) for f in files),
                     "mapped_files: at most 5, largest first, no shared library", shown(files))
    if device == "cuda":
        checks.check(contexts[0]["memory_allocated"] >= size,
                     "PyTorch holds the weights on the GPU (%d bytes allocated)" % contexts[0]["memory_allocated"])
    if device != "cuda" or not checks.check(os.access(repro, os.X_OK), "the harness %s is there" % repro):
        return
    mib = (size + (1 << 20) - 1) >> 20
    plan = subprocess.run([repro, "--workload-file", os.path.join(out, "workload.json"), "--call", "0", "--plan"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    line = "# the mapped weights: %.2f GB of GPU copies" % (mib * (1 << 20) / 1e9)
    checks.check(plan.returncode == 0 and line in plan.stdout,
                 "repro --workload-file ... --call 0 --plan derives --mapped-weights %dM: '%s'" % (mib, line),
                 "exit %d: %s" % (plan.returncode, tail(plan.stdout + plan.stderr)))
    call_only = subprocess.run([repro, "--workload-file", os.path.join(out, "workload.json"), "--call", "0",
                                "--call-only", "--plan"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=120)
    checks.check(call_only.returncode == 0 and "mapped weights" not in call_only.stdout,
                 "--call-only leaves the process's weights out", tail(call_only.stdout))
    report = os.path.join(work, "report")
    r = subprocess.run([repro, "report", "--scenario", "2", "--workload-file", os.path.join(out, "workload.json"),
                        "--out", report, "--no-run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    text = open(os.path.join(report, "REPORT.md")).read() if r.returncode == 0 else ""
    checks.check("--mapped-weights %dM" % mib in text and "--weights-mapping keep" in text and real not in text,
                 "a report's commands name the derived --mapped-weights %dM and --weights-mapping keep, never the "
                 "captured file" % mib, "exit %d: %s" % (r.returncode, tail(r.stderr)))


# ---------------------------------------------------------------------- 6. activation checkpointing
def start_checkpointing(work, device, mode, logs):
    cmd = [sys.executable, SCRIPT, "--out", os.path.join(work, mode), "--", MODEL, "--steps", str(STEPS), "--device",
           device, "--checkpoint", mode, "--text-encoder"]
    print("# " + " ".join(cmd))
    return Started(cmd, logs, 600)


def part_checkpointing(checks, work, mode, program, repro, schema):
    """capture_model.py --checkpoint MODE --text-encoder: its calls recomputed inside the backward
    pass are told apart (phase recompute, not more layers), every training call is a checkpointed
    layer's, the frozen text encoder's calls in each step are not layers of it, and the replay runs
    the blocks as checkpointed layers with their backward pass."""
    out = os.path.join(work, mode)
    r = program.result()
    if not checks.check(r.returncode == 0, "the capture of capture_model.py --checkpoint %s exits 0" % mode,
                        "exit %d: %s" % (r.returncode, tail(r.stderr + r.stdout))):
        return
    with open(os.path.join(out, "workload.json")) as f:
        w = json.load(f)
    part_schema(checks, w, schema, "the %s capture's workload.json" % mode)
    training = STEPS * BLOCKS
    encoded = STEPS + 1
    total = 2 * training + BLOCKS + encoded
    checks.check((w["calls_per_step"], w["recomputed_per_step"], w["total_calls"]) == (BLOCKS, BLOCKS, total),
                 "%s: %d calls a step's forward pass trains through (the blocks; not the text encoder's), %d "
                 "recomputed in its backward pass, %d in all" % (mode, BLOCKS, BLOCKS, total),
                 shown({k: w[k] for k in ("calls_per_step", "recomputed_per_step", "total_calls")}))
    found = sorted((c["phase"], c["retention"], c["requires_grad"], c["count"]) for c in w["calls"])
    expected = sorted([("forward", "checkpoint", mode == "non-reentrant", training),
                       ("recompute", "checkpoint", True, training), ("forward", "none", False, BLOCKS),
                       ("forward", "none", False, encoded)])
    checks.check(found == expected,
                 "%s: the checkpointed forward calls (%s grad), their recomputations (with grad), the evaluation's and "
                 "the text encoder's, each a signature" % (mode, "with" if mode == "non-reentrant" else "without"),
                 shown(found))
    enters = [line for line in calls_log(os.path.join(out, "calls.log")) if line.startswith("enter ")]
    checks.check(sum(log_field(line, "phase") == "recompute" for line in enters) == training,
                 "%s: calls.log marks the %d recomputed calls phase=recompute" % (mode, training))
    if not os.access(repro, os.X_OK):
        return
    first = next(c["id"] for c in w["calls"] if c["phase"] == "forward" and c["retention"] == "checkpoint")
    report = os.path.join(work, mode + "-report")
    r = subprocess.run([repro, "report", "--scenario", "2", "--workload-file", os.path.join(out, "workload.json"),
                        "--call", str(first), "--out", report, "--no-run"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    text = open(os.path.join(report, "REPORT.md")).read() if r.returncode == 0 else ""
    checks.check("--layers %d " % BLOCKS in text and "--retain checkpoint" in text and "--backward" in text,
                 "%s: the replay runs the %d blocks as checkpointed layers with their backward pass (--layers %d "
                 "--retain checkpoint --backward), not %d layers" % (mode, BLOCKS, BLOCKS, 2 * BLOCKS),
                 "exit %d: %s" % (r.returncode, tail(r.stderr)))


# --------------------------------------------------------------------------------------- main
def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repro", default=os.path.join(ROOT, "build", "repro"), help="the repro binary (default build/repro)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary folder, kept on failure)")
    ap.add_argument("--no-replay", action="store_true", help="leave out part 3, repro's replay")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where the programs run (default cuda)")
    ap.add_argument("--helpers-only", action="store_true",
                    help="part 0 alone, the capture's helpers and host readers (no PyTorch needed): exit 0 or 1")
    args = ap.parse_args(argv)
    if args.device == "cpu" and not args.no_replay:
        sys.stderr.write("test_sdpa_capture: error: --device cpu needs --no-replay (the replay compares on the GPU)\n")
        return 2

    checks = Checks()
    part_helpers(checks)
    if args.helpers_only:
        print("test_sdpa_capture: %d passed, %d failed" % (checks.passed, checks.failed))
        return 1 if checks.failed else 0
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        print("SKIPPED: PyTorch is not importable here (no module named 'torch')")
        return EXIT_SKIP if not checks.failed else 1
    with open(SCHEMA) as f:
        schema = json.load(f)
    work = args.keep or tempfile.mkdtemp(prefix="test_sdpa_capture.")
    os.makedirs(work, exist_ok=True)
    out, hang, weights, logs = (os.path.join(work, name) for name in ("capture", "hang", "weights", "logs"))
    # The programs first, all at once (and while this process imports PyTorch too).
    programs = {"capture": start_capture(out, args.device, os.path.join(logs, "capture")),
                "hang": start_hang(hang, args.device, os.path.join(logs, "hang")),
                "weights": start_mapped_weights(weights, args.device, os.path.join(logs, "weights"))}
    checkpointing = os.path.join(work, "checkpointing")
    for mode in CHECKPOINTED:
        programs[mode] = start_checkpointing(checkpointing, args.device, mode, os.path.join(logs, mode))
    try:
        import torch
        skipped = None
        if args.device == "cuda" and not torch.cuda.is_available():
            skipped = ("PyTorch %s sees no CUDA device (the capture is of a GPU program, the replay needs one)"
                       % torch.__version__)
    except ImportError as e:
        skipped = "PyTorch is not importable here (%s)" % e
    if skipped:
        for program in programs.values():
            program.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        print("SKIPPED: " + skipped)
        return EXIT_SKIP if not checks.failed else 1

    print("# PyTorch %s, device %s, folder %s" % (torch.__version__, args.device, work))
    try:
        w = part_capture(checks, torch, out, args.device, programs["capture"])
        if w is not None:
            part_schema(checks, w, schema, "workload.json")
            part_validator_rejects(checks, w, schema)
            if args.no_replay:
                print("# replay left out (--no-replay)")
            else:
                part_replay(checks, torch, out, os.path.abspath(args.repro), w)
        part_hang(checks, hang, programs["hang"], schema)
        part_mapped_weights(checks, torch, weights, programs["weights"], args.device, os.path.abspath(args.repro),
                            schema)
        for mode in CHECKPOINTED:
            part_checkpointing(checks, checkpointing, mode, programs[mode], os.path.abspath(args.repro), schema)
    finally:
        for program in programs.values():
            program.stop()

    print("test_sdpa_capture: %d passed, %d failed" % (checks.passed, checks.failed))
    if not args.keep:
        if checks.failed:
            print("# kept %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
