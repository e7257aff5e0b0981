#!/usr/bin/env python3
"""sdpa_capture.py: records the scaled_dot_product_attention calls of a PyTorch program, for repro to replay.

Optional helper (PyTorch; the harness itself has no Python). It runs a program with
torch.nn.functional.scaled_dot_product_attention wrapped, and writes into --out:

  workload.json  one entry per distinct call signature (shapes, strides, dtypes, devices, mask,
                 is_causal, scale, dropout_p, enable_gqa, requires_grad, and whether it is a
                 recomputation inside the backward pass and what its layer keeps: autograd's
                 tensors, or under activation checkpointing its inputs), with the process's
                 memory when the signature was first seen (PyTorch's, the host's MemFree,
                 MemAvailable, Cached and RssFile, its largest memory-mapped files, and the files
                 its weights loaders read, mapped or not, with their pages in the page cache),
                 the backend PyTorch picks for it, the allocator, a step's calls and its
                 recomputations; format results/workload.schema.json, read by
                 `repro --workload-file FILE --call N`. Rewritten atomically whenever the first
                 calls of a signature are described, so a process that hangs leaves it current.
  calls.log      a line when each call enters and one when it returns, each flushed and fsync'ed:
                 after a hang its last line names the call in flight.
  stacks.txt     every thread's Python stack every --stack-dump-s seconds, on SIGUSR1 and on a
                 fatal signal (faulthandler).
  calls/N/       with --tensors first: the first call of signature N's q.npy, k.npy, v.npy (and
                 mask.npy), as `repro --inputs` reads them.

    python3 scripts/sdpa_capture.py --out capture --tensors first -- train.py --epochs 1
    python3 scripts/sdpa_capture.py --out capture -- -m mypackage.train --config a.yaml

In a notebook, before the model's code is imported:

    from sdpa_capture import install
    cap = install(out="capture", tensors="first")
    ...                      # the program's own calls
    cap.uninstall()          # restores the function and writes workload.json a last time

Exit code: the program's own; 2 for an error of the capture itself (one line on stderr: no program
given, a bad option, --out not writable, PyTorch not importable). docs/CAPTURE.md has the details.
"""
import argparse
import atexit
import ctypes
import datetime
import faulthandler
import json
import mmap as mmap_module
import os
import re
import runpy
import signal
import stat
import struct
import sys
import threading
import time

PROG = "sdpa_capture"
TOOL = "sdpa_capture.py 2"
FORMAT, FORMAT_VERSION = "sdpa-repro-workload", 1
EXIT_USAGE = 2
TENSOR_MODES = ("first", "none")

# F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
# *, scale=None, enable_gqa=False): the first six may come by position.
SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
SDPA_POSITIONAL = 6
SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}

# torch dtype name -> .npy descr, as repro --inputs reads them (bfloat16 as its raw uint16 bits).
NPY_DESCR = {"bfloat16": "<u2", "float16": "<f2", "float32": "<f4", "float64": "<f8", "bool": "|b1"}
TENSOR_DTYPES = ("bfloat16", "float16", "float32", "float64")

# at::SDPBackend's names (torch.nn.attention.SDPBackend) in the schema's words.
BACKEND_WORDS = {"MATH": "math", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "efficient",
                 "CUDNN_ATTENTION": "cudnn"}
# Their values, for a PyTorch without the enum's members map; and the default priority order of
# aten/src/ATen/native/transformers/cuda/sdp_utils.cpp where torch._C has no _get_sdp_priority_order.
BACKEND_OF_VALUE = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}
DEFAULT_PRIORITY = (1, 2, 0, 3)

CU_POINTER_ATTRIBUTE_IS_MANAGED = 8


class CaptureError(Exception):
    """An error of the capture itself (not of the program): one line, exit 2 from the command line."""


# ------------------------------------------------------------------ shapes, strides and masks
# Pure functions over lists of ints and bools, so that they are tested without PyTorch.

def is_row_major(shape, stride):
    """True when `stride` is the contiguous (row-major) stride of `shape`. A dimension of size 1
    may have any stride, as in PyTorch's is_contiguous; an empty tensor is contiguous."""
    if any(d == 0 for d in shape):
        return True
    expected = 1
    for size, step in zip(reversed(shape), reversed(stride)):
        if size != 1:
            if step != expected:
                return False
            expected *= size
    return True


def layout_of(shape, stride):
    """bhse: contiguous [B, H, S, E]; bshe: a transpose(1, 2) view of a contiguous [B, S, H, E]
    buffer; other: anything else. A tensor that is both (H or S of 1) is bhse."""
    if len(shape) != 4 or len(stride) != 4:
        return "other"
    if is_row_major(shape, stride):
        return "bhse"
    if is_row_major([shape[0], shape[2], shape[1], shape[3]], [stride[0], stride[2], stride[1], stride[3]]):
        return "bshe"
    return "other"


def as_4d(shape, stride):
    """(shape, stride, exact) of a query, key or value as four dimensions [B, H, len, E]: fewer
    dimensions get leading ones (with the stride unsqueeze gives them); more have their leading
    dimensions merged into B, exactly where they are one run of memory, else by size alone
    (exact False, and the layout then says other)."""
    shape, stride = list(shape), list(stride)
    while len(shape) < 4:
        stride.insert(0, shape[0] * stride[0] if shape else 1)
        shape.insert(0, 1)
    exact = True
    while len(shape) > 4:
        if shape[0] != 1 and shape[1] != 1 and stride[0] != stride[1] * shape[1]:
            exact = False
        merged_stride = stride[1] if shape[1] != 1 else stride[0]
        shape[0:2] = [shape[0] * shape[1]]
        stride[0:2] = [merged_stride]
    return shape, stride, exact


def padded_shape(shape, at_least, at_most=4):
    """A shape with leading ones up to `at_least` dimensions, and its leading dimensions merged
    down to `at_most`: as PyTorch broadcasts a mask against [B, H, L, S]."""
    shape = list(shape)
    while len(shape) < at_least:
        shape.insert(0, 1)
    while len(shape) > at_most:
        shape[0:2] = [shape[0] * shape[1]]
    return shape


def mask_4d_shape(shape):
    """A mask's shape as four dimensions [B|1, H|1, L|1, S|1], broadcast as PyTorch broadcasts it."""
    return padded_shape(shape, 4)


def mask_shape_record(shape):
    """The shape the workload records for a mask: as passed, padded to two dimensions, more than
    four merged (the schema allows 2 to 4)."""
    return padded_shape(shape, 2)


def text_padding_of(rows):
    """(text_tokens, text_valid) when the key rows (one list of bools per batch entry of the mask)
    are a text key-padding mask of a joint [text, image] sequence: in every row the False keys
    are one run [valid, T), with the same end T in every row that has any; a row with none has
    valid = T. None otherwise, and for a mask with no False at all."""
    ends, valid = set(), []
    for row in rows:
        masked = [i for i, keep in enumerate(row) if not keep]
        if not masked:
            valid.append(None)
            continue
        first, end = masked[0], masked[-1] + 1
        if end - first != len(masked):
            return None
        valid.append(first)
        ends.add(end)
    if len(ends) != 1:
        return None
    tokens = ends.pop()
    return tokens, [tokens if v is None else v for v in valid]


def retention_of(requires_grad, checkpointed):
    """What the call's layer keeps for the backward pass, in repro's --retain words: checkpoint
    (activation checkpointing: the block keeps its inputs, and its backward pass recomputes the
    call), autograd (autograd keeps the Math path's tensors), none (no backward through it)."""
    return "checkpoint" if checkpointed else "autograd" if requires_grad else "none"


# ---------------------------------------------------------------------------------- allocator
ALLOCATOR_WORDS = {
    "caching": "PyTorch's caching allocator over cudaMalloc",
    "expandable_segments": "PyTorch's caching allocator with expandable segments (cuMemCreate/cuMemMap)",
    "cuda_malloc_async": "cudaMallocAsync, stream-ordered",
    "pluggable": "a pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator)",
    "none": "no CUDA tensor was seen",
}


def alloc_settings(text):
    """PYTORCH_CUDA_ALLOC_CONF's "key:value,key:value" as a dict, keys and values lower case."""
    out = {}
    for item in (text or "").split(","):
        key, _, value = item.partition(":")
        if key.strip():
            out[key.strip().lower()] = value.strip().lower()
    return out


def allocator_kind(cuda_conf, generic_conf, backend, cuda_seen, stats_error=None):
    """(kind, detail) of the allocator record. `backend` is torch.cuda.get_allocator_backend()
    (native, cudaMallocAsync or pluggable; None where it could not be asked); the settings come
    from PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF (its newer name), as PyTorch reads them
    when it initialises CUDA. `stats_error`: why torch.cuda.memory_allocated() failed, if it did
    (a pluggable allocator keeps no statistics)."""
    if not cuda_seen:
        return "none", ALLOCATOR_WORDS["none"]
    settings = alloc_settings(cuda_conf)
    settings.update(alloc_settings(generic_conf))
    if backend == "pluggable" or (stats_error and "pluggable" in stats_error.lower()):
        kind = "pluggable"
    elif backend == "cudaMallocAsync" or settings.get("backend") == "cudamallocasync":
        kind = "cuda_malloc_async"
    elif settings.get("expandable_segments") == "true":
        kind = "expandable_segments"
    else:
        kind = "caching"
    parts = [ALLOCATOR_WORDS[kind], "get_allocator_backend()=%s" % (backend if backend is not None else "unknown"),
             "PYTORCH_CUDA_ALLOC_CONF=%s" % (cuda_conf if cuda_conf is not None else "unset")]
    if generic_conf is not None:
        parts.append("PYTORCH_ALLOC_CONF=%s" % generic_conf)
    if stats_error:
        parts.append("memory statistics unavailable, recorded as 0 (%s)" % stats_error)
    return kind, "; ".join(parts)


# ------------------------------------------------------------------------------------- files
def npy_header(descr, shape):
    """The .npy 1.0 preamble numpy writes: magic, version, header length, the header dict padded
    with spaces so that the data starts at a multiple of 64 bytes."""
    dims = ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    if len(header) > 0xFFFF:
        raise ValueError("a .npy header of %d bytes needs format 2.0" % len(header))
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")


def fsync_directory(path):
    """After a rename, so that the new name is on disk too (a frozen machine is power-cycled)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path, chunks):
    """The bytes of `chunks` to path.tmp.<pid> in the same folder, fsync'ed, renamed over `path`."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_directory(os.path.dirname(os.path.abspath(path)))


def write_npy(path, descr, shape, data):
    """`data` (bytes-like, C order) as a .npy file, atomically."""
    write_atomically(path, [npy_header(descr, shape), data])


def write_json_atomically(path, value):
    write_atomically(path, [(json.dumps(value, indent=2) + "\n").encode("utf-8")])


# ------------------------------------------------------------------------ the host's memory
# On an integrated GPU (GB10) the page cache that holds a program's memory-mapped weights
# (safetensors files) and the GPU's allocations share one pool, and MemAvailable counts the cached
# file pages as available: what matters is MemFree, MemAvailable and Cached (/proc/meminfo), the
# process's RssFile (/proc/self/status) and the files it has mapped (/proc/self/smaps). Pure
# functions over the files' text, so that they are tested without PyTorch (or /proc); the readers
# give None where a file cannot be read.

def read_text(path):
    """A file's text; None where it cannot be read (no /proc on this system)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def kib_field(text, key):
    """The bytes of a "Key:   123 kB" line of /proc/meminfo or /proc/self/status (a value without a
    unit is taken as bytes); None where the text is None or has no such line."""
    if text is None:
        return None
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        if colon and name.strip() == key:
            words = rest.split()
            try:
                return int(words[0]) * (1024 if len(words) > 1 and words[1] == "kB" else 1)
            except (ValueError, IndexError):
                return None
    return None


def host_memory_of(meminfo, status):
    """{"mem_free", "mem_available", "cached", "rss_file"} in bytes from /proc/meminfo's and
    /proc/self/status's text, each None where its text is None or lacks the line."""
    return {"mem_free": kib_field(meminfo, "MemFree"), "mem_available": kib_field(meminfo, "MemAvailable"),
            "cached": kib_field(meminfo, "Cached"), "rss_file": kib_field(status, "RssFile")}


def mem_available_bytes(path="/proc/meminfo"):
    """MemAvailable in bytes; None where /proc/meminfo cannot be read or has no such line."""
    return kib_field(read_text(path), "MemAvailable")


MAPPING_HEADER = re.compile(r"^[0-9a-fA-F]+-[0-9a-fA-F]+\s+\S+\s+[0-9a-fA-F]+\s+\S+\s+(\d+)(?:\s+(.*))?$")


def file_mappings(text):
    """(path, Rss bytes or None) of each file-backed mapping of /proc/PID/smaps's text (or maps's,
    whose mappings have no Rss: None), in the file's order. Anonymous mappings ([heap], inode 0),
    pseudo-files (anon_inode:...) and deleted files are left out."""
    out = []
    current = None
    for line in (text or "").splitlines():
        m = MAPPING_HEADER.match(line)
        if m:
            current = None
            path = (m.group(2) or "").strip()
            if m.group(1) != "0" and path.startswith("/") and not path.endswith(" (deleted)"):
                current = [path, None]
                out.append(current)
        elif current is not None and line.startswith("Rss:"):
            rss = kib_field(line, "Rss")
            if rss is not None:
                current[1] = (current[1] or 0) + rss
    return [tuple(x) for x in out]


SHARED_LIBRARY = re.compile(r"\.so(\.[0-9][0-9.]*)?$")
# What a PyTorch process maps besides its data: the system's files (the C library's locale archive,
# gconv modules, /dev's devices and shared memory) and the CUDA and Triton caches.
SYSTEM_PREFIXES = ("/usr/", "/lib/", "/lib64/", "/etc/", "/dev/", "/proc/", "/sys/", "/run/", "/var/cache/",
                   "/opt/nvidia/")
RUNTIME_FRAGMENTS = ("/.nv/", "/.triton/", "/torch_extensions/", "/site-packages/", "/dist-packages/")


def runtime_prefixes():
    """Python's own folders (its prefixes and site-packages): the interpreter's and PyTorch's files."""
    prefixes = set()
    for name in ("prefix", "base_prefix", "exec_prefix", "base_exec_prefix"):
        value = getattr(sys, name, None)
        if value and value != "/":
            prefixes.add(os.path.join(os.path.realpath(value), ""))
    return tuple(sorted(prefixes))


def is_runtime_file(path, prefixes=()):
    """A shared library (*.so, *.so.N), or a file of the system, Python or the CUDA runtime: not the
    program's data."""
    if SHARED_LIBRARY.search(os.path.basename(path)):
        return True
    if path.startswith(SYSTEM_PREFIXES) or any(fragment in path for fragment in RUNTIME_FRAGMENTS):
        return True
    return any(path.startswith(p) for p in prefixes)


def regular_file_size(path):
    """The size of a regular file; None for anything else (a device, a socket) or a file that is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


HUB_BLOB = re.compile(r"/blobs/[0-9a-f]{40,64}$")


def hub_link_name(path):
    """The name a program opened a Hugging Face hub cache's file by: the cache keeps each file as
    models--ORG--NAME/blobs/<hash>, and the program opens the link snapshots/<revision>/<name> to it,
    so the mapping's path (the link resolved) has no name a reader can judge by (.safetensors). The
    first link under snapshots/ that resolves to `path`, or `path` itself where there is none."""
    if not HUB_BLOB.search(path):
        return path
    snapshots = os.path.join(os.path.dirname(os.path.dirname(path)), "snapshots")
    for folder, _, names in sorted(os.walk(snapshots)):
        for name in sorted(names):
            link = os.path.join(folder, name)
            try:
                if os.path.islink(link) and os.path.realpath(link) == path:
                    return link
            except OSError:
                continue
    return path


def mapped_files_of(text, resident, size_of=regular_file_size, prefixes=(), limit=5, name_of=hub_link_name):
    """The process's largest file-backed mappings from /proc/self/smaps's text (`resident` True) or
    maps's (False: resident_bytes null): deduplicated by path, regular files only, no shared library
    or runtime file (is_runtime_file), largest file first, at most `limit`; each {"path" (name_of
    the mapped file: a hub cache's blob by its snapshot link), "bytes" (the file's size),
    "resident_bytes" (the Rss of its mappings)}."""
    rss = {}
    for path, bytes_ in file_mappings(text):
        if path in rss:
            if bytes_ is not None:
                rss[path] = (rss[path] or 0) + bytes_
        else:
            rss[path] = bytes_
    files = []
    for path, bytes_ in rss.items():
        if is_runtime_file(path, prefixes):
            continue
        size = size_of(path)
        if size is None:
            continue
        files.append({"path": path, "bytes": int(size), "resident_bytes": bytes_ if resident else None})
    files.sort(key=lambda f: (-f["bytes"], f["path"]))
    files = files[:limit]
    for f in files:
        f["path"] = name_of(f["path"])
    return files


def read_mappings():
    """(this process's /proc/self/smaps text and True, or maps's and False where smaps cannot be
    read; (None, False) where neither can)."""
    text = read_text("/proc/self/smaps")
    if text is not None:
        return text, True
    return read_text("/proc/self/maps"), False


def read_mapped_files(prefixes=None):
    """mapped_files_of this process's /proc/self/smaps (or maps, without the Rss, where smaps cannot
    be read); None where neither can."""
    prefixes = runtime_prefixes() if prefixes is None else prefixes
    text, resident = read_mappings()
    return None if text is None else mapped_files_of(text, resident, prefixes=prefixes)


# ------------------------------------------------------------------------ the page cache
# How much of a file is in the page cache, whether or not anything maps it: the cachestat system
# call (Linux 6.5 and later; its number is 451 in the generic table x86-64 and aarch64 share), else
# mincore over a fresh read-only mapping of the file (nothing is read through it: mincore reports
# the file's pages in the page cache; since Linux 5.0 only for a file the process owns or may write,
# else only the pages mapped by this process, which a fresh mapping has none of).
SYS_CACHESTAT = 451
PROBES = ("cachestat", "mincore")


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [("nr_cache", ctypes.c_uint64), ("nr_dirty", ctypes.c_uint64), ("nr_writeback", ctypes.c_uint64),
                ("nr_evicted", ctypes.c_uint64), ("nr_recently_evicted", ctypes.c_uint64)]


_libc = None


def libc():
    """The C library this interpreter runs on, with the prototypes the probes need; None off Linux."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        _libc = lib
    return _libc


def cached_by_cachestat(fd):
    """Bytes of the open file's pages in the page cache by cachestat; None where the kernel (or a
    seccomp filter) refuses the call."""
    lib = libc()
    if lib is None:
        return None
    whole, stat_ = _CachestatRange(0, 0), _Cachestat()  # length 0: to the end of the file
    if lib.syscall(ctypes.c_long(SYS_CACHESTAT), ctypes.c_int(fd), ctypes.byref(whole), ctypes.byref(stat_),
                   ctypes.c_uint(0)) != 0:
        return None
    return int(stat_.nr_cache) * os.sysconf("SC_PAGE_SIZE")


def cached_by_mincore(fd, size):
    """Bytes of the open file's pages in the page cache by mincore over a read-only shared mapping
    of its `size` bytes; None where the mapping or the call fails."""
    lib = libc()
    if lib is None or size <= 0:
        return None if lib is None else 0
    page = os.sysconf("SC_PAGE_SIZE")
    address = lib.mmap(None, size, mmap_module.PROT_READ, mmap_module.MAP_SHARED, fd, 0)
    if address is None or address == ctypes.c_void_p(-1).value:
        return None
    try:
        pages = (size + page - 1) // page
        vector = (ctypes.c_ubyte * pages)()
        if lib.mincore(address, size, vector) != 0:
            return None
        # Bit 0 of each byte: the page is resident; the others are reserved (zero).
        return (pages - bytes(vector).count(0)) * page
    finally:
        lib.munmap(address, size)


def page_cache_bytes(path, probes=PROBES):
    """(bytes of the file's pages in the page cache, the probe that counted them), the first of
    `probes` that answers; (None, None) where none does or the file cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None, None
    try:
        size = os.fstat(fd).st_size
        for probe in probes:
            cached = cached_by_cachestat(fd) if probe == "cachestat" else cached_by_mincore(fd, size)
            if cached is not None:
                return cached, probe
        return None, None
    finally:
        os.close(fd)


# --------------------------------------------------------------------- the files loads read
# The model files the process read its weights from: every file its weights loaders were asked for
# (safetensors' safe_open and load_file, torch.load; wrapped by install()), still mapped or not, and
# the large files mapped or open at the call that no wrapped loader read (a loader of its own, a
# C++ extension's). A loaded file's mapping is usually gone by the first attention call
# (from_pretrained(...).to("cuda") frees the CPU state dict); its pages stay in the page cache, which
# is what each entry's cached_bytes measures.
LOADERS = ("safetensors", "torch.load")
LOADED_MIN_BYTES = 64 << 20  # a file mapped or open, not read by a loader, counts from this size
LOADED_LIMIT = 32


def open_files(fd_folder="/proc/self/fd"):
    """The regular files this process has open (their resolved paths); None where the folder cannot
    be read."""
    try:
        names = os.listdir(fd_folder)
    except OSError:
        return None
    paths = set()
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_folder, name))
        except OSError:
            continue  # closed since the listing
        if target.startswith("/") and not target.endswith(" (deleted)"):
            paths.add(target)
    return paths


def loaded_files_of(loads, mapped, opened, size_of=regular_file_size, cached_of=page_cache_bytes, prefixes=(),
                    name_of=hub_link_name, limit=LOADED_LIMIT, min_bytes=LOADED_MIN_BYTES, resolve=os.path.realpath):
    """The loaded_files record: `loads` maps each path a loader read to its loader (LOADERS);
    `mapped` and `opened` are the resolved paths mapped and open now (None: unknown). Each file once
    (by its resolved path), a loader's first, then by size; regular files only, no runtime file
    (is_runtime_file) unless a loader read it, a file only mapped or open from `min_bytes`; at most
    `limit`, largest first. Each {"path" (name_of the resolved path: a hub blob by its link), "bytes",
    "how" (the loader, "mapping" or "open"), "mapped", "cached_bytes", "cached_by"}."""
    mapped, opened = set(mapped or ()), set(opened or ())
    candidates = {}
    for path, how in loads.items():
        candidates.setdefault(resolve(path), how)
    for how, paths in (("mapping", mapped), ("open", opened)):
        for path in sorted(paths):
            if path not in candidates and not is_runtime_file(path, prefixes):
                candidates[path] = how
    files = []
    for path, how in candidates.items():
        size = size_of(path)
        if size is None or (how not in LOADERS and size < min_bytes):
            continue
        files.append({"path": path, "bytes": int(size), "how": how, "mapped": path in mapped})
    files.sort(key=lambda f: (-f["bytes"], f["path"]))
    files = files[:limit]
    for f in files:
        f["cached_bytes"], f["cached_by"] = cached_of(f["path"])
        f["path"] = name_of(f["path"])
    return files


def read_host_memory():
    """host_memory_of this system's /proc/meminfo and this process's /proc/self/status."""
    return host_memory_of(read_text("/proc/meminfo"), read_text("/proc/self/status"))


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def one_line(error):
    text = str(error).strip().splitlines()
    return ("%s: %s" % (type(error).__name__, text[0] if text else ""))[:300]


# ------------------------------------------------------------------------------- CUDA driver
_libcuda = None
_libcuda_tried = False


def cuda_pointer_is_managed(pointer):
    """cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_IS_MANAGED) through libcuda.so.1, which PyTorch
    has loaded already; None where the driver cannot be asked or the call fails."""
    global _libcuda, _libcuda_tried
    if not _libcuda_tried:
        _libcuda_tried = True
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
            lib.cuPointerGetAttribute.restype = ctypes.c_int
            _libcuda = lib
        except (OSError, AttributeError):
            _libcuda = None
    if _libcuda is None or not pointer:
        return None
    value = ctypes.c_uint64(0)  # the driver writes an unsigned int; the wider zeroed buffer is safe
    try:
        status = _libcuda.cuPointerGetAttribute(ctypes.byref(value), CU_POINTER_ATTRIBUTE_IS_MANAGED, pointer)
    except (ctypes.ArgumentError, OSError):
        return None
    return bool(value.value) if status == 0 else None


# ------------------------------------------------------------------------------- the arguments
def bind_sdpa_arguments(args, kwargs):
    """F.scaled_dot_product_attention's arguments by name, defaults filled in; TypeError for a
    call the function itself would refuse (it is then passed through undescribed)."""
    if len(args) > SDPA_POSITIONAL:
        raise TypeError("%d positional arguments (at most %d)" % (len(args), SDPA_POSITIONAL))
    bound = dict(SDPA_DEFAULTS)
    bound.update(zip(SDPA_PARAMETERS, args))
    for name, value in kwargs.items():
        if name not in SDPA_PARAMETERS or name in SDPA_PARAMETERS[:len(args)]:
            raise TypeError("unexpected argument %r" % name)
        bound[name] = value
    for name in ("query", "key", "value"):
        if name not in bound:
            raise TypeError("missing argument %r" % name)
    return bound


# --------------------------------------------------------------------------------- the capture
_current = None  # the installed Capture, one per process


class Capture:
    """The wrapper around F.scaled_dot_product_attention and what it records. Made by install()."""

    def __init__(self, torch, out, tensors, calls_per_signature, stack_dump_s, sync_exit, command):
        self._torch = torch
        out = os.path.abspath(out)  # the program may change its working folder
        self.out = out
        self._tensors = tensors
        self._k = calls_per_signature
        self._stack_dump_s = stack_dump_s
        self._sync_exit = sync_exit
        self._command = [str(c) for c in command]
        self._pid = os.getpid()
        self._lock = threading.Lock()        # the counters and entries
        self._log_lock = threading.Lock()    # calls.log
        self._write_lock = threading.Lock()  # workload.json
        self._total = 0
        self._in_step = 0            # every call of the step so far
        self._forward_in_step = 0    # ... of its forward pass
        self._training_in_step = 0   # ... of its forward pass that keep something for the backward pass
        self._recomputed_in_step = 0  # ... recomputed inside its backward pass
        self._steps = 0
        self._calls_per_step = None
        self._recomputed_per_step = None
        self._loads = {}          # path -> the loader that read it (LOADERS)
        self._patches = []        # (module, name, original, wrapper) that install() replaced
        self._checkpoint = threading.local()  # depth: inside torch.utils.checkpoint.checkpoint
        self._entries = []
        self._signature_ids = {}  # (shape key, mask pattern) -> id
        self._shapes = {}         # shape key -> {"described": n, "sig": id of the last described call}
        self._device = None       # the first CUDA tensor's device record
        self._stats_error = None
        self._runtime_prefixes = runtime_prefixes()
        self._warned = set()
        self._active = False
        self._original = None
        self._wrapper = None
        self._hook = None
        self._dump_later = False
        self._usr1 = False
        self._fatal = False
        self._workload_path = os.path.join(out, "workload.json")
        try:
            os.makedirs(out, exist_ok=True)
            self._log_file = open(os.path.join(out, "calls.log"), "w")
            self._stacks = open(os.path.join(out, "stacks.txt"), "w")
        except OSError as e:
            raise CaptureError("--out %s: %s" % (out, e.strerror or e))

    # ------------------------------------------------------------------ install and uninstall
    def _install(self):
        import torch.nn.functional as F

        self._original = F.scaled_dot_product_attention
        capture = self

        def scaled_dot_product_attention(*args, **kwargs):
            return capture._call(args, kwargs)

        scaled_dot_product_attention.__doc__ = getattr(self._original, "__doc__", None)
        scaled_dot_product_attention.__wrapped__ = self._original
        self._wrapper = scaled_dot_product_attention
        # Code that looks the function up when it calls it (F.scaled_dot_product_attention,
        # torch.nn.functional's own multi_head_attention_forward) sees the wrapper.
        F.scaled_dot_product_attention = scaled_dot_product_attention
        self._active = True
        self._patch_loaders()
        self._patch_checkpoint()
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
            self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        except (ImportError, AttributeError) as e:
            self._warn("hook", "no optimizer step hook (%s): calls_per_step stays null" % one_line(e))
        self._start_stack_dumps()
        atexit.register(self._at_exit)
        self.write()

    def _patch(self, module, name, make):
        """Replaces module.name (when it has one) with make(original); uninstall() puts it back."""
        original = getattr(module, name, None)
        if original is None:
            return
        wrapper = make(original)
        for attribute in ("__name__", "__qualname__", "__doc__"):
            try:
                setattr(wrapper, attribute, getattr(original, attribute))
            except (AttributeError, TypeError):
                pass
        wrapper.__wrapped__ = original
        setattr(module, name, wrapper)
        self._patches.append((module, name, original, wrapper))

    def _patch_loaders(self):
        """The weights loaders whose files loaded_files names: safetensors' safe_open (which its
        load_file opens through) and load_file, and torch.load. Code that bound them before install
        keeps the originals; their files show while mapped or open."""
        capture = self

        def recording(how, argument):
            def make(original):
                def load(*args, **kwargs):
                    if capture._active and os.getpid() == capture._pid:
                        capture._note_load(how, args[0] if args else kwargs.get(argument))
                    return original(*args, **kwargs)
                return load
            return make

        import importlib.util
        try:
            have_safetensors = importlib.util.find_spec("safetensors") is not None
        except (ImportError, ValueError):
            have_safetensors = False
        if have_safetensors:
            try:
                import safetensors
                import safetensors.torch
            except Exception as e:  # a broken installation is the program's to meet
                self._warn("safetensors", "safetensors not wrapped (%s): its loads show only while mapped" % one_line(e))
            else:
                self._patch(safetensors, "safe_open", recording("safetensors", "filename"))
                self._patch(safetensors.torch, "safe_open", recording("safetensors", "filename"))
                self._patch(safetensors.torch, "load_file", recording("safetensors", "filename"))
        self._patch(self._torch, "load", recording("torch.load", "f"))

    def _note_load(self, how, source):
        """A loader was asked for `source` (a path, or a file object with its name)."""
        try:
            if not isinstance(source, (str, bytes, os.PathLike)):  # a file object: its name (a Path's is its last part)
                source = getattr(source, "name", source)
            path = os.path.abspath(os.fspath(source))
            if isinstance(path, bytes):
                path = os.fsdecode(path)
        except TypeError:
            return  # a buffer, not a file
        with self._lock:
            self._loads.setdefault(path, how)

    def _patch_checkpoint(self):
        """torch.utils.checkpoint.checkpoint, so that a call inside it in the forward pass is known
        to be a checkpointed block's (its tensors are not kept: the backward pass recomputes them),
        with use_reentrant True (the block runs without grad) and False alike."""
        capture = self
        try:
            import torch.utils.checkpoint as checkpoint_module
        except Exception as e:
            self._warn("checkpoint", "torch.utils.checkpoint not wrapped (%s)" % one_line(e))
            return

        def make(original):
            def checkpoint(function, *args, **kwargs):
                depth = getattr(capture._checkpoint, "depth", 0)
                capture._checkpoint.depth = depth + 1
                try:
                    return original(function, *args, **kwargs)
                finally:
                    capture._checkpoint.depth = depth
            return checkpoint

        self._patch(checkpoint_module, "checkpoint", make)

    def _in_backward(self):
        """Whether this thread is running the autograd engine's backward pass: a forward call made
        there is a recomputation (activation checkpointing's, reentrant or not)."""
        task = getattr(self._torch._C, "_current_graph_task_id", None)
        if task is None:
            self._warn("phase", "this PyTorch has no torch._C._current_graph_task_id: recomputations inside the "
                       "backward pass are counted as forward calls")
            return False
        try:
            return task() != -1
        except Exception:
            return False

    def _in_checkpoint(self):
        """Whether the call is inside torch.utils.checkpoint's forward: the wrapper's depth, else
        (a checkpoint bound before install) the saved-tensor hooks non-reentrant checkpoint pushes."""
        if getattr(self._checkpoint, "depth", 0) > 0:
            return True
        try:
            top = self._torch._C._autograd._top_saved_tensors_default_hooks
            try:
                hooks = top(False)
            except TypeError:
                hooks = top()
        except Exception:
            return False
        return bool(hooks) and "_checkpoint_hook" in getattr(hooks[0], "__qualname__", "")

    def _start_stack_dumps(self):
        self._stacks.write("# sdpa_capture: Python stacks of pid %d: every %s s, on SIGUSR1, on a fatal signal\n"
                           % (self._pid, self._stack_dump_s if self._stack_dump_s > 0 else "(never)"))
        self._stacks.flush()
        if self._stack_dump_s > 0:
            faulthandler.dump_traceback_later(self._stack_dump_s, repeat=True, file=self._stacks)
            self._dump_later = True
        # SIGUSR1 only where the program has not taken it for itself.
        if hasattr(faulthandler, "register") and hasattr(signal, "SIGUSR1"):
            if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
                faulthandler.register(signal.SIGUSR1, file=self._stacks, all_threads=True)
                self._usr1 = True
        if not faulthandler.is_enabled():
            faulthandler.enable(file=self._stacks, all_threads=True)
            self._fatal = True

    def uninstall(self):
        """Restore the function, remove the hook, stop the stack dumps, write workload.json."""
        global _current
        if not self._active:
            return
        import torch.nn.functional as F

        if F.scaled_dot_product_attention is self._wrapper:
            F.scaled_dot_product_attention = self._original
        for module, name, original, wrapper in reversed(self._patches):
            if getattr(module, name, None) is wrapper:
                setattr(module, name, original)
        self._patches = []
        self._active = False
        if self._hook is not None:
            self._hook.remove()
        if self._dump_later:
            faulthandler.cancel_dump_traceback_later()
        if self._usr1:
            faulthandler.unregister(signal.SIGUSR1)
        if self._fatal:
            faulthandler.disable()
        atexit.unregister(self._at_exit)
        self.write()
        for f in (self._log_file, self._stacks):
            try:
                f.close()
            except OSError:
                pass
        if _current is self:
            _current = None

    def _at_exit(self):
        if self._active and os.getpid() == self._pid:
            self.write()

    # -------------------------------------------------------------------------------- a call
    def _call(self, args, kwargs):
        # A forked child (a data-loader worker) inherits the wrapper; its calls are not this capture's.
        if not self._active or os.getpid() != self._pid:
            return self._original(*args, **kwargs)
        recomputed = self._in_backward()
        checkpointed = recomputed or self._in_checkpoint()
        phase = "recompute" if recomputed else "forward"
        arguments, sig, kept = None, None, checkpointed
        try:
            arguments = bind_sdpa_arguments(args, kwargs)
            kept = kept or self._requires_grad(self._torch, arguments)
        except Exception:
            pass  # described below, or said why not
        with self._lock:
            number, index, step = self._total, self._in_step, self._steps
            self._total += 1
            self._in_step += 1
            if recomputed:
                self._recomputed_in_step += 1
            else:
                self._forward_in_step += 1
                self._training_in_step += int(bool(kept))
        try:
            if arguments is None:
                arguments = bind_sdpa_arguments(args, kwargs)
            sig = self._signature(number, index, arguments, phase, checkpointed)
        except Exception as e:  # never the program's failure: the call is counted and logged all the same
            self._warn("describe", "call %d not described (%s); later ones may be" % (number, one_line(e)))
        sig_text = "-" if sig is None else str(sig)
        start = time.perf_counter()
        try:
            if self._sync_exit:  # the work queued before the call is finished before it enters
                self._synchronize(arguments)
            self._log("enter call=%d sig=%s step=%d index_in_step=%d phase=%s t=%.6f"
                      % (number, sig_text, step, index, phase, time.time()))
            start = time.perf_counter()
            result = self._original(*args, **kwargs)
            if self._sync_exit:
                self._synchronize(arguments)
        except BaseException as e:
            self._log("error call=%d sig=%s ms=%.3f %s" % (number, sig_text, (time.perf_counter() - start) * 1e3,
                                                          one_line(e)))
            raise
        self._log("exit call=%d sig=%s ms=%.3f" % (number, sig_text, (time.perf_counter() - start) * 1e3))
        return result

    def _signature(self, number, index, a, phase, checkpointed):
        """The id of the call's signature. The first calls of each shape (--calls-per-signature)
        are described: their mask is read (which waits for the GPU) and the entry found or made;
        later calls of the shape go to the entry its last described call went to, unread. A
        recomputation inside the backward pass, and a checkpointed block's call, are shapes of
        their own."""
        shapes = self._shape_key(a) + (phase, checkpointed)
        with self._lock:
            seen = self._shapes.setdefault(shapes, {"described": 0, "sig": None})
            if seen["described"] >= self._k and seen["sig"] is not None:
                self._entries[seen["sig"]]["count"] += 1
                return seen["sig"]
            seen["described"] += 1
        self._log("describe call=%d t=%.6f" % (number, time.time()))
        described = self._describe(a, phase, checkpointed)
        new = False
        with self._lock:
            key = (shapes, described["pattern"])
            sig = self._signature_ids.get(key)
            if sig is None:
                sig, new = len(self._entries), True
                self._signature_ids[key] = sig
                self._entries.append(self._entry(sig, number, index, a, described))
            else:
                self._entries[sig]["count"] += 1
            seen["sig"] = sig
        if new and self._tensors == "first":
            try:
                self._save_tensors(sig, a)
                with self._lock:
                    self._entries[sig]["tensors"] = "calls/%d" % sig
            except Exception as e:
                self._warn("tensors", "the tensors of signature %d were not saved (%s)" % (sig, one_line(e)))
        self.write()
        return sig

    def _shape_key(self, a):
        torch = self._torch

        def tensor_key(t):
            return tuple(t.shape), tuple(t.stride()), t.dtype, t.device

        q, k, v, m = a["query"], a["key"], a["value"], a["attn_mask"]
        scale = None if a["scale"] is None else float(a["scale"])
        return (tensor_key(q), tensor_key(k), tensor_key(v), None if m is None else tensor_key(m),
                bool(a["is_causal"]), scale, float(a["dropout_p"]), bool(a["enable_gqa"]),
                self._requires_grad(torch, a))

    @staticmethod
    def _requires_grad(torch, a):
        """Whether autograd records the call: grad mode on and an input that requires grad."""
        tensors = [a["query"], a["key"], a["value"]]
        if a["attn_mask"] is not None:
            tensors.append(a["attn_mask"])
        return bool(torch.is_grad_enabled() and any(t.requires_grad for t in tensors))

    def _describe(self, a, phase, checkpointed):
        torch = self._torch
        q, m = a["query"], a["attn_mask"]
        if q.device.type == "cuda" and self._device is None:
            self._device = self._device_record(q.device)
        mask, pattern = (None, None) if m is None else self._mask_record(m)
        requires_grad = self._requires_grad(torch, a)
        return {"query": self._tensor_record(q), "key": self._tensor_record(a["key"]),
                "value": self._tensor_record(a["value"]), "mask": mask, "pattern": pattern,
                "backend": self._backend(a), "requires_grad": requires_grad, "phase": phase,
                "retention": retention_of(requires_grad, checkpointed), "context": self._context(q.device)}

    @staticmethod
    def _entry(sig, number, index, a, d):
        return {"id": sig, "first_call": number, "count": 1, "index_in_step": index,
                "query": d["query"], "key": d["key"], "value": d["value"], "mask": d["mask"],
                "is_causal": bool(a["is_causal"]), "scale": None if a["scale"] is None else float(a["scale"]),
                "dropout_p": float(a["dropout_p"]), "enable_gqa": bool(a["enable_gqa"]), "backend": d["backend"],
                "requires_grad": d["requires_grad"], "phase": d["phase"], "retention": d["retention"],
                "context": d["context"], "tensors": None}

    # ------------------------------------------------------------------------- descriptions
    @staticmethod
    def _dtype_name(dtype):
        return str(dtype).replace("torch.", "")

    def _tensor_record(self, t):
        dtype = self._dtype_name(t.dtype)
        if dtype not in TENSOR_DTYPES:
            raise ValueError("a %s query, key or value (the workload records %s)" % (dtype, ", ".join(TENSOR_DTYPES)))
        shape, stride, exact = as_4d(list(t.shape), list(t.stride()))
        managed = None
        if t.device.type == "cuda":
            try:
                managed = cuda_pointer_is_managed(t.data_ptr())
            except Exception:
                managed = None
        return {"shape": shape, "stride": stride, "dtype": dtype, "device": str(t.device),
                "contiguous": bool(t.is_contiguous()), "layout": layout_of(shape, stride) if exact else "other",
                "managed": managed}

    def _mask_record(self, m):
        """The mask's record and its pattern key (part of the signature). Reads its values."""
        torch = self._torch
        boolean = m.dtype == torch.bool
        elements = m.numel()
        masked = int((~m).sum().item()) if boolean else int(torch.isneginf(m).sum().item())
        fraction = masked / elements if elements else 0.0
        padding = None
        if boolean and masked:
            m4 = m.reshape(mask_4d_shape(list(m.shape)))
            # The same over queries and heads, then one row of keys per batch entry.
            if bool((m4 == m4[:, :1, :1, :]).all().item()):
                padding = text_padding_of(m4[:, 0, 0, :].tolist())
        record = {"kind": "bool" if boolean else "float", "shape": mask_shape_record(list(m.shape)),
                  "dtype": self._dtype_name(m.dtype), "masked_fraction": fraction,
                  "pattern": "text_padding" if padding else "other",
                  "text_tokens": padding[0] if padding else None, "text_valid": padding[1] if padding else None}
        pattern = ("text_padding", padding[0], tuple(padding[1])) if padding else ("other",)
        return record, pattern

    def _backend(self, a):
        """The backend PyTorch picks for the call: its own choice function, which the call runs
        (flags, sdpa_kernel contexts and priority order included); else SDPAParams and the
        can_use_* checks in the priority order; unknown where neither answers."""
        torch = self._torch
        q, k, v, m = a["query"], a["key"], a["value"], a["attn_mask"]
        words = dict(BACKEND_OF_VALUE)
        try:
            from torch.nn.attention import SDPBackend
            words = {int(value): BACKEND_WORDS.get(name, "unknown") for name, value in SDPBackend.__members__.items()}
        except Exception:
            pass
        choice = getattr(torch, "_fused_sdp_choice", None)
        if choice is not None:
            try:
                try:
                    value = choice(q, k, v, m, a["dropout_p"], a["is_causal"], scale=a["scale"],
                                   enable_gqa=a["enable_gqa"])
                except TypeError:  # before enable_gqa (PyTorch < 2.5)
                    if a["enable_gqa"]:
                        raise
                    value = choice(q, k, v, m, a["dropout_p"], a["is_causal"], scale=a["scale"])
                return words.get(int(value), "unknown")
            except Exception:
                pass
        return self._backend_from_checks(a, words)

    def _backend_from_checks(self, a, words):
        torch = self._torch
        q = a["query"]
        cuda = torch.backends.cuda
        if q.device.type != "cuda":
            return "math"  # the CPU path's flash kernel is not asked about here
        try:
            try:
                params = cuda.SDPAParams(q, a["key"], a["value"], a["attn_mask"], float(a["dropout_p"]),
                                         bool(a["is_causal"]), bool(a["enable_gqa"]))
            except TypeError:
                params = cuda.SDPAParams(q, a["key"], a["value"], a["attn_mask"], float(a["dropout_p"]),
                                         bool(a["is_causal"]))
        except Exception:
            return "unknown"
        try:
            order = [int(x) for x in torch._C._get_sdp_priority_order()]
        except Exception:
            order = list(DEFAULT_PRIORITY)
        checks = {"flash": ("flash_sdp_enabled", "can_use_flash_attention"),
                  "efficient": ("mem_efficient_sdp_enabled", "can_use_efficient_attention"),
                  "cudnn": ("cudnn_sdp_enabled", "can_use_cudnn_attention"),
                  "math": ("math_sdp_enabled", None)}
        for value in order:
            word = words.get(value)
            if word not in checks:
                continue
            enabled, usable = checks[word]
            try:
                if not getattr(cuda, enabled)():
                    continue
                if usable is None or getattr(cuda, usable)(params):
                    return word
            except Exception:
                continue
        return "unknown"

    def _context(self, device):
        torch = self._torch
        allocated = reserved = 0
        if device.type == "cuda":
            try:
                allocated = int(torch.cuda.memory_allocated(device))
                reserved = int(torch.cuda.memory_reserved(device))
            except Exception as e:  # a pluggable allocator keeps no statistics
                self._stats_error = one_line(e)
        host = read_host_memory()
        text, resident = read_mappings()
        mapped = None if text is None else {path for path, _ in file_mappings(text)}
        opened = open_files()
        with self._lock:
            loads = dict(self._loads)
        loaded = None
        if text is not None or opened is not None or loads:
            loaded = loaded_files_of(loads, mapped, opened, prefixes=self._runtime_prefixes)
        return {"memory_allocated": allocated, "memory_reserved": reserved, "mem_available": host["mem_available"],
                "mem_free": host["mem_free"], "cached": host["cached"], "rss_file": host["rss_file"],
                "mapped_files": None if text is None else mapped_files_of(text, resident, prefixes=self._runtime_prefixes),
                "loaded_files": loaded}

    def _device_record(self, device):
        torch = self._torch
        try:
            index = device.index if device.index is not None else torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            return {"name": torch.cuda.get_device_name(index), "capability": "%d.%d" % (major, minor),
                    "total_memory": int(torch.cuda.get_device_properties(index).total_memory)}
        except Exception as e:
            self._warn("device", "the device was not described (%s)" % one_line(e))
            return None

    # ------------------------------------------------------------------------------ tensors
    def _save_tensors(self, sig, a):
        """calls/<sig>/q.npy, k.npy, v.npy as contiguous [B, H, len, E] copies, and mask.npy
        broadcast to [B|1, H|1, L, S]: the files repro --inputs reads."""
        folder = os.path.join(self.out, "calls", str(sig))
        os.makedirs(folder, exist_ok=True)
        q, k, v, m = a["query"], a["key"], a["value"], a["attn_mask"]
        for name, t in (("q", q), ("k", k), ("v", v)):
            host = t.detach().cpu().contiguous()
            self._write_tensor(os.path.join(folder, name + ".npy"), host.reshape(as_4d(list(host.shape),
                                                                                       list(host.stride()))[0]))
        if m is not None:
            host = m.detach().cpu()
            host = host.reshape(mask_4d_shape(list(host.shape)))
            host = host.expand(host.shape[0], host.shape[1], q.shape[-2], k.shape[-2]).contiguous()
            self._write_tensor(os.path.join(folder, "mask.npy"), host)

    def _write_tensor(self, path, t):
        descr = NPY_DESCR[self._dtype_name(t.dtype)]
        if sys.byteorder == "big":
            descr = descr.replace("<", ">")
        t = t.contiguous()
        nbytes = t.numel() * t.element_size()
        data = memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())) if nbytes else b""
        write_npy(path, descr, list(t.shape), data)

    # ---------------------------------------------------------------------- steps and sync
    def _on_optimizer_step(self, optimizer, args, kwargs):
        if not self._active or os.getpid() != self._pid:
            return
        first = False
        with self._lock:
            if self._calls_per_step is None and self._forward_in_step >= 1:
                # The layers are the calls the step trains through; a frozen text encoder's calls
                # under no_grad in the same step keep nothing and are not among them.
                self._calls_per_step = self._training_in_step or self._forward_in_step
                self._recomputed_per_step = self._recomputed_in_step
                first = True
            self._in_step = self._forward_in_step = self._recomputed_in_step = self._training_in_step = 0
            self._steps += 1
        if first:
            self.write()

    def _synchronize(self, a):
        torch = self._torch
        q = a.get("query") if a else None
        if q is not None and getattr(q, "is_cuda", False):
            torch.cuda.synchronize(q.device)
        elif torch.cuda.is_initialized():
            torch.cuda.synchronize()

    # ------------------------------------------------------------------------------ output
    def _log(self, line):
        with self._log_lock:
            try:
                self._log_file.write(line + "\n")
                self._log_file.flush()
                os.fsync(self._log_file.fileno())
            except (OSError, ValueError) as e:
                self._warn("log", "calls.log not written (%s)" % one_line(e))

    def _warn(self, what, message):
        if what not in self._warned:
            self._warned.add(what)
            sys.stderr.write("%s: warning: %s\n" % (PROG, message))

    def document(self):
        """workload.json's content now."""
        torch = self._torch
        with self._lock:
            calls = json.loads(json.dumps(self._entries))
            total, per_step, recomputed, device = self._total, self._calls_per_step, self._recomputed_per_step, self._device
        backend = None
        if device is not None:
            try:
                backend = torch.cuda.get_allocator_backend()
            except Exception:
                backend = None
        kind, detail = allocator_kind(os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), os.environ.get("PYTORCH_ALLOC_CONF"),
                                      backend, device is not None, self._stats_error)
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "captured": {"by": TOOL, "utc": utc_now(), "command": list(self._command), "torch": str(torch.__version__),
                         "cuda": torch.version.cuda, "device": device},
            "environment": {name: os.environ.get(name) for name in ("PYTORCH_CUDA_ALLOC_CONF", "CUDA_LAUNCH_BLOCKING")},
            "allocator": {"kind": kind, "detail": detail},
            "calls_per_step": per_step,
            "recomputed_per_step": recomputed,
            "total_calls": total,
            "calls": calls,
        }

    def write(self):
        """workload.json, atomically (a temporary file in the same folder, fsync'ed, renamed)."""
        try:
            document = self.document()
            with self._write_lock:
                write_json_atomically(self._workload_path, document)
        except Exception as e:  # the program goes on; the file keeps its last content
            self._warn("write", "%s not written (%s)" % (self._workload_path, one_line(e)))


def install(out="capture", tensors="none", calls_per_signature=3, stack_dump_s=120.0, sync_exit=False, command=None):
    """Wrap torch.nn.functional.scaled_dot_product_attention and record its calls into `out`.

    tensors: "first" saves the first call of each signature's inputs (calls/<id>/*.npy), "none"
    saves none. calls_per_signature: how many calls of each shape are described (their mask
    read, which waits for the GPU). stack_dump_s: the period of the stack dumps into
    stacks.txt (0: none). sync_exit: synchronise the device before and after each call, so that
    an exit line means the call's kernels have finished. command: the program's command line
    for the record (default sys.argv). Code that bound the function before this call (`from
    torch.nn.functional import scaled_dot_product_attention`) keeps the unwrapped one: install
    before the model's modules are imported. Returns the Capture (uninstall(), write())."""
    global _current
    if _current is not None and _current._active:
        raise CaptureError("already installed (into %s); uninstall() it first" % _current.out)
    if tensors not in TENSOR_MODES:
        raise CaptureError("tensors must be one of %s, not %r" % (", ".join(TENSOR_MODES), tensors))
    if not isinstance(calls_per_signature, int) or calls_per_signature < 1:
        raise CaptureError("calls per signature must be an integer >= 1, not %r" % (calls_per_signature,))
    if not (stack_dump_s >= 0):
        raise CaptureError("the stack dump period must be >= 0 seconds, not %r" % (stack_dump_s,))
    try:
        import torch
        import torch.nn.functional  # noqa: F401
    except ImportError as e:
        raise CaptureError("PyTorch is not importable here (%s)" % e)
    capture = Capture(torch, out, tensors, calls_per_signature, float(stack_dump_s), bool(sync_exit),
                      sys.argv if command is None else command)
    capture._install()
    _current = capture
    return capture


# ------------------------------------------------------------------------------ command line
class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit 2."""

    def error(self, message):
        raise CaptureError(message)


def build_parser():
    ap = OneLineParser(prog="sdpa_capture.py", description=__doc__.split("\n\n")[0], allow_abbrev=False,
                       usage="%(prog)s [options] -- PROGRAM.py ARGS... | -- -m MODULE ARGS...")
    a = ap.add_argument
    a("--out", default="capture", help="the folder for workload.json, calls.log, stacks.txt, calls/ (default capture)")
    a("--calls-per-signature", type=int, default=3, metavar="K",
      help="calls of each shape described in full (their mask read, which waits for the GPU); all are counted (default 3)")
    a("--tensors", default="none", choices=TENSOR_MODES,
      help="first: save the first call of each signature's q, k, v, mask as .npy; none (default)")
    a("--stack-dump-s", type=float, default=120.0, metavar="S",
      help="dump every thread's Python stack into stacks.txt every S seconds (0: never; default 120)")
    a("--sync-exit", action="store_true",
      help="synchronise the device before and after each call: an exit line then means its kernels finished")
    return ap


def split_command_line(argv):
    """(our options, the program's words): the program follows the first '--'."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def run_program(program):
    """The program as `python3 PROGRAM.py ARGS` or `python3 -m MODULE ARGS` would run it, in this
    process, so that the wrapper is in place before any of its modules is imported."""
    if program[0] == "-m":
        module = program[1]
        sys.argv = [module] + program[2:]  # run_module sets argv[0] to the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = program[0]
        sys.argv = list(program)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


def check_program(program):
    if not program:
        raise CaptureError("no program given: sdpa_capture.py [options] -- PROGRAM.py ARGS... (or -- -m MODULE ARGS...)")
    if program[0] == "-m":
        if len(program) < 2:
            raise CaptureError("-m needs a module name")
        # Only the top-level name, looked up where `python3 -m` looks (the current folder first):
        # finding a submodule would import its package before the wrapper is in place.
        import importlib.util
        top = program[1].split(".")[0]
        sys.path.insert(0, os.getcwd())
        try:
            found = bool(top) and importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        finally:
            sys.path.pop(0)
        if not found:
            raise CaptureError("no module named %s" % top)
    elif not os.path.exists(program[0]):
        raise CaptureError("%s: no such file" % program[0])


def main(argv):
    options, program = split_command_line(argv)
    try:
        args = build_parser().parse_args(options)
        if args.calls_per_signature < 1:
            raise CaptureError("--calls-per-signature must be >= 1")
        if not (args.stack_dump_s >= 0):
            raise CaptureError("--stack-dump-s must be >= 0")
        check_program(program)
        capture = install(out=args.out, tensors=args.tensors, calls_per_signature=args.calls_per_signature,
                          stack_dump_s=args.stack_dump_s, sync_exit=args.sync_exit, command=program)
    except CaptureError as e:
        sys.stderr.write("%s: error: %s\n" % (PROG, e))
        return EXIT_USAGE
    try:
        run_program(program)
    finally:  # SystemExit and the program's exceptions pass through; the file is current either way
        capture.write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
