#!/usr/bin/env python3
"""torch_stages.py: repro's Math SDPA problem run through your own PyTorch, one stage at a time.

Optional helper (PyTorch >= 2.5 with CUDA; the harness itself has no Python). It takes repro's
problem options (shape, dtype, precision, mask, dropout, scale, seed, --workload, --inputs,
--save-output, --k-layout, --scenario, --fix/--fixes) and runs the same call through PyTorch's
own kernels:

  stages mode (default): the operations of PyTorch's _scaled_dot_product_attention_math in its
    order and with its dtype rules (boolean mask to additive, upcast, sqrt(scale) on Q and on
    K^T, repeat_interleave for GQA, at::matmul's reshape and bmm, _safe_softmax, dropout,
    matmul, the cast back), with a device synchronisation after each and the log lines of
    `repro --log-format sdpa-debug` (docs/LOG_FORMAT.md): the same tags in the same order,
    so `scripts/compare_logs.py` diffs the two logs tag by tag;
  whole mode (--mode whole): F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.MATH),
    synchronised before and after, for the plain symptom.

--backward (stages mode) follows each call with its backward as autograd runs it through the math
path, one op a stage with repro --backward's stage names and lines: dO to fp32, bmm's gradients
dO.V^T and P^T.dO, native_dropout_backward, _softmax_backward_data, bmm's gradients dS.K and
Q^T.dS, then the scales, the GQA sums and the casts back, for repro's own seeded dO.

--mapped-weights SIZE[:FILE] (repro's option) loads the model's weights first, as a training script
does: the file (repro's default ~/.cache/sdpa-repro/weights.bin, made once) memory-mapped with
numpy.memmap, each tensor's slice copied with .to("cuda"), a load_weights stage each, and prints
what the load did to MemFree, MemAvailable, Cached and RssFile.

Memory (--memory): PyTorch's caching allocator (default), its cudaMallocAsync backend (async,
fix 4), or managed memory (managed): every tensor PyTorch allocates comes from
cudaMallocManaged, through torch.cuda.memory.CUDAPluggableAllocator and a small library
(scripts/torch_stages_alloc.cu) built at first use. A watchdog thread names a stage that
overruns --stage-timeout, dumps every Python thread's stack, writes the JSON and exits 3, as
repro does. Exit codes are repro's (math_sdpa/errors.h): 0 pass, 1 non-finite result, 2 usage,
3 hang, 4 CUDA error, 6 waived, 7 no PyTorch with CUDA. --dry-run prints the log lines of one
call without PyTorch. docs/TORCH_STAGES.md has the details; from the source folder:

    python3 scripts/torch_stages.py --memory managed --json torch_stages.json 2> torch.log
    ./build/repro --log-format sdpa-debug 2> repro.log
    python3 scripts/compare_logs.py repro.log torch.log
"""
import argparse
import copy
import ctypes
import faulthandler
import hashlib
import json
import math
import os
import re
import shutil
import stat
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

# How the log's [file:line] names this file (the harness names math_sdpa/stage_log.cpp).
LOG_FILE_NAME = "scripts/torch_stages.py"
HERE = os.path.dirname(os.path.abspath(__file__))
ALLOCATOR_SOURCE = os.path.join(HERE, "torch_stages_alloc.cu")
SOURCE_ROOT = os.path.dirname(HERE)
# The harness's headers it includes (self-contained: bf16 and fp16 bits to float).
ALLOCATOR_HEADERS = [os.path.join(SOURCE_ROOT, "math_sdpa", name) for name in ("bf16_bits.h", "fp16_bits.h")]
PROG = "torch_stages.py"

# ------------------------------------------------------------------------------------- exit codes
# repro's (math_sdpa/errors.h), and the outcome words of its JSON (repro/run/outcome.cpp).
EXIT_PASS, EXIT_MISMATCH, EXIT_USAGE, EXIT_HANG, EXIT_CUDA_ERROR, EXIT_WAIVED, EXIT_NO_GPU = 0, 1, 2, 3, 4, 6, 7
OUTCOMES = {EXIT_PASS: "pass", EXIT_MISMATCH: "mismatch", EXIT_USAGE: "usage", EXIT_HANG: "hang",
            EXIT_CUDA_ERROR: "cuda_error", EXIT_WAIVED: "waived", EXIT_NO_GPU: "no_gpu"}


class ScriptError(Exception):
    """Every failure of the script: one line, an exit code, the stage it happened in (if any)."""

    def __init__(self, exit_code, message, stage=None):
        super().__init__(message)
        self.exit_code = exit_code
        self.stage = stage


def usage_error(message):
    return ScriptError(EXIT_USAGE, message)


# ------------------------------------------------------------------------------------ the stage table
# Every fact about a stage (its name, kind, when it runs, its log lines and where the harness writes
# them) is a row of the harness's one stage table, math_sdpa/stage.cpp; stages.json beside this
# script is its copy (`repro help stages --json`, held equal to the binary's by a C++ test). What
# PyTorch runs for a stage is this script's own (DISPATCH, below).
STAGE_TABLE = os.path.join(HERE, "stages.json")


def load_stage_table(path):
    """(the rows in the path's order, the source file their debug lines name); exit 2 if unreadable."""
    try:
        with open(path) as f:
            table = json.load(f)
        if table["format"] != 1:
            raise ValueError("format %s, where this script reads format 1" % table["format"])
        return table["stages"], table["source"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.stderr.write("%s: error: the stage table %s cannot be read: %s\n" % (
            PROG, path, e.strerror if isinstance(e, OSError) else str(e).splitlines()[0]))
        sys.exit(EXIT_USAGE)


TABLE, TABLE_SOURCE = load_stage_table(STAGE_TABLE)
ROWS = {row["name"]: row for row in TABLE}


def pytorch_stages(when):
    """The stages of one call (when "call") or of its backward ("backward") that PyTorch's side has,
    in the table's order: GPU and host work. The harness's allocation and free stages are not
    (PyTorch allocates inside its ops), nor its graph and step stages (one call here, no graph);
    its load stages (when "load") run with --mapped-weights only (LOAD_STAGES)."""
    return tuple(row["name"] for row in TABLE if row["when"] == when and row["kind"] in ("gpu", "host"))


STAGES = pytorch_stages("call")
BACKWARD_STAGES = pytorch_stages("backward")
ALL_STAGES = STAGES + BACKWARD_STAGES
# --mapped-weights: the table's stage of the load before the first call (repro's load_weights, one
# per tensor copied), taken from the table as every other stage is.
LOAD_STAGES = pytorch_stages("load")
# Stages whose work the host does or waits for itself; every other one is GPU work.
HOST_STAGES = frozenset(row["name"] for row in TABLE if row["kind"] == "host")


class DType:
    def __init__(self, name, torch_name, size, host_code):
        self.name, self.torch_name, self.size, self.host_code = name, torch_name, size, host_code


# name -> (PyTorch's name, bytes, sdpa_host_min_max's code)
DTYPES = {d.name: d for d in (DType("bf16", "bfloat16", 2, 1), DType("fp16", "float16", 2, 2),
                               DType("fp32", "float32", 4, 0))}
PRECISIONS = ("upcast", "native")
MASKS = ("none", "bool", "float", "causal")
MASK_DIMS = ("1x1", "Bx1", "1xH", "BxH")
K_LAYOUTS = ("bhse", "bshe")
MEMORIES = {"caching": "PyTorch's caching allocator (cudaMalloc)",
            "managed": "cudaMallocManaged through torch.cuda.memory.CUDAPluggableAllocator",
            "async": "PyTorch's cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)"}
# --memory in repro's --alloc words, for the JSON's config.alloc.
ALLOC_OF_MEMORY = {"caching": "device", "managed": "managed", "async": "async"}
GEMM_STREAMS = ("same", "aux")
GEMM_ORDERS = ("event", "none")
GEMM_APIS = ("strided", "batched")
SCORES_TO_HOST = ("none", "read", "advise", "both")
HOST_PHASES = ("before", "during")
LOG_LEVELS = ("off", "stages", "sync", "values")
LOG_FORMATS = ("sdpa-debug", "harness")
MODES = ("stages", "whole")
TOUCH_PAGE_BYTES = 4096  # math_sdpa/kernels.h kTouchPageBytes
# --mapped-weights (math_sdpa/weights_load.h): the sizes the load copies in turn, a Qwen-Image
# transformer block's weights in bf16 (attention's four 3072 x 3072 projections, the MLP's pair).
MIB = 1 << 20
WEIGHTS_TENSOR_SIZES = (18 * MIB, 18 * MIB, 18 * MIB, 18 * MIB, 72 * MIB, 72 * MIB)
WEIGHTS_MAPPINGS = ("unmap", "keep")
WEIGHTS_BLOCK = 8 * MIB  # the file is written in blocks of this many bytes
# repro's size units (math_sdpa/context.cpp), longest first.
SIZE_UNITS = (("KiB", 1024.0), ("MiB", 1048576.0), ("GiB", 1073741824.0), ("TiB", 1099511627776.0),
              ("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12),
              ("K", 1024.0), ("M", 1048576.0), ("G", 1073741824.0), ("T", 1099511627776.0), ("B", 1.0))
SIZE_NUMBER = re.compile(r"^((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(.*)$")


# --------------------------------------------------------------------------------------- problem
class Problem:
    """What one SDPA call computes (math_sdpa/problem.h), with its defaults."""

    def __init__(self):
        self.batch, self.q_heads, self.kv_heads = 2, 8, 8
        self.q_len, self.kv_len, self.head_dim = 128, 128, 64
        self.dtype, self.precision = "bf16", "upcast"
        self.mask, self.mask_per_batch, self.mask_per_head = "none", False, False
        self.mask_pattern, self.text_tokens, self.text_valid = "random", 0, 0
        self.dropout = 0.0
        self.scale = None  # default 1/sqrt(E)
        self.seed = 0x5D9A

    def gqa(self):
        return self.kv_heads != self.q_heads

    def compute_dtype(self):
        return "fp32" if self.precision == "upcast" else self.dtype

    def softmax_scale(self):
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    def has_mask_input(self):
        return self.mask in ("bool", "float")

    def mask_batch(self):
        return self.batch if self.mask_per_batch else 1

    def mask_heads(self):
        return self.q_heads if self.mask_per_head else 1

    def score_elems(self):
        return self.batch * self.q_heads * self.q_len * self.kv_len

    def mask_dims(self):
        return ("B" if self.mask_per_batch else "1") + "x" + ("H" if self.mask_per_head else "1")

    def validate(self):
        for value, name in ((self.batch, "batch"), (self.q_heads, "heads"), (self.kv_heads, "kv-heads"),
                            (self.q_len, "q-len (L)"), (self.kv_len, "kv-len (S)"), (self.head_dim, "head-dim (E)")):
            if value <= 0:
                raise usage_error("%s must be positive (got %d)" % (name, value))
            if value > 2 ** 31 - 1:  # cuBLAS takes its sizes as 32-bit ints
                raise usage_error("%s must be at most 2^31-1 (got %d)" % (name, value))
        if self.q_heads % self.kv_heads:
            raise usage_error("heads (%d) must be a multiple of kv-heads (%d) for grouped-query attention"
                              % (self.q_heads, self.kv_heads))
        if not 0.0 <= self.dropout < 1.0:
            raise usage_error("dropout must be in [0, 1) (got %g)" % self.dropout)
        if self.scale is not None and not math.isfinite(self.scale):
            raise usage_error("scale must be a finite number")
        if self.mask_pattern == "text_padding":
            if self.mask != "bool" or not self.mask_per_batch or self.mask_per_head:
                raise usage_error("a text padding mask is a boolean mask per batch entry (--mask bool --mask-dims Bx1)")
            if not 1 <= self.text_valid <= self.text_tokens <= self.kv_len:
                raise usage_error("--text-padding TOKENS:VALID needs 1 <= VALID <= TOKENS <= S (got %d:%d with S=%d)"
                                  % (self.text_tokens, self.text_valid, self.kv_len))
        if self.batch * self.q_heads > 2 ** 31 - 1:
            raise usage_error("batch * heads must be at most 2^31-1 (cuBLAS batch count)")

    def to_json(self):  # repro/run/run_json.cpp problem_to_json
        return {"batch": self.batch, "q_heads": self.q_heads, "kv_heads": self.kv_heads, "q_len": self.q_len,
                "kv_len": self.kv_len, "head_dim": self.head_dim, "dtype": self.dtype, "precision": self.precision,
                "mask": self.mask, "mask_dims": self.mask_dims(),
                "mask_pattern": self.mask_pattern if self.has_mask_input() else None,
                "text_padding": {"tokens": self.text_tokens, "valid": self.text_valid}
                if self.mask_pattern == "text_padding" else None,
                "dropout": self.dropout, "scale": self.softmax_scale(), "seed": self.seed, "gqa": self.gqa()}


def workload_layer(batch, pixels, text_padding=False):
    """A joint attention layer of the failing workload (scenarios/workload.cpp): 24 heads x 128,
    512 text tokens followed by (pixels/16)^2 image tokens, bf16, K as a [B, S, H, E] view."""
    p = Problem()
    p.batch, p.q_heads, p.kv_heads, p.head_dim = batch, 24, 24, 128
    p.q_len = p.kv_len = 512 + (pixels // 16) ** 2
    if text_padding:  # two captions, the second padded from 128 to 512 text tokens
        p.mask, p.mask_per_batch, p.mask_pattern, p.text_tokens, p.text_valid = "bool", True, "text_padding", 512, 128
    return p, "bshe"


WORKLOADS = {"qwen-image-1024": lambda: workload_layer(1, 1024),
             "qwen-image-1024-textpad": lambda: workload_layer(2, 1024, text_padding=True),
             "qwen-image-512": lambda: workload_layer(1, 512)}
# A scenario's own problem when the command line gives no shape (scenarios/scenario2_*.cpp).
SCENARIO_WORKLOADS = {2: "qwen-image-1024"}


# ------------------------------------------------------------------------------------ conditions
class Settings:
    """How the call runs (math_sdpa/path_settings.h, the fields PyTorch can express)."""

    def __init__(self):
        self.memory = "caching"
        self.qk_gemm_stream = "same"
        self.qk_gemm_order = "event"
        self.k_layout = "bhse"
        self.kt_contiguous = False
        self.scores_to_host = "none"
        self.scores_host_phase = "before"
        self.entry_touch_streams = 0
        self.entry_host_touch = False
        self.last_stage = "stream_sync"
        self.backward = False  # --backward: the backward call after each forward call
        self.mapped_weights = 0  # --mapped-weights: bytes of weights loaded before the first call (0: none)
        self.weights_file = ""   # ...from this file ("": default_weights_file())
        self.weights_mapping = "unmap"

    def fields(self):  # path_settings.cpp settings_fields, in repro's words
        return {"alloc": ALLOC_OF_MEMORY[self.memory], "memory": self.memory, "stream": "legacy",
                "qk_gemm_stream": self.qk_gemm_stream, "qk_gemm_order": self.qk_gemm_order,
                "k_layout": self.k_layout, "qk_gemm_api": "strided",
                "kt_contiguous": "on" if self.kt_contiguous else "off",
                "scores_to_host": self.scores_to_host, "scores_host_phase": self.scores_host_phase,
                "entry_touch_streams": str(self.entry_touch_streams),
                "entry_host_touch": "on" if self.entry_host_touch else "off", "last_stage": self.last_stage,
                "backward": "true" if self.backward else "false", "mapped_weights": str(self.mapped_weights),
                "weights_io": "mapped", "weights_pages": "keep", "weights_mapping": self.weights_mapping}


def apply_scenario(number, s):
    """Each scenario's preconditions (scenarios/scenarioN_*.cpp), where PyTorch can express them.
    Scenario 1's other stream is a side stream (repro's --gemm-stream aux): PyTorch's own current
    stream is the legacy default stream, so the legacy stream is no other stream here. Scenario 3's
    K^T reaches at::bmm as a strided view (repro's --gemm-api strided)."""
    if number == 1:
        s.qk_gemm_stream, s.qk_gemm_order, s.last_stage = "aux", "event", "qk_gemm"
    elif number == 2:
        s.scores_to_host, s.scores_host_phase, s.last_stage = "read", "during", "softmax"
    elif number == 3:
        s.k_layout, s.last_stage = "bshe", "qk_gemm"
    elif number == 4:
        s.entry_touch_streams, s.entry_host_touch = 4, True


# Each fix's change to the settings (fixes/fixN_*.cpp configure); fixes 1 and 2 also act around
# their stages (TorchBackend).
FIX_NAMES = {1: "gemm_stream_sync", 2: "prefetch_scores", 3: "contiguous_kt", 4: "stream_ordered_alloc"}


def configure_fix(number, s):
    if number == 1:
        s.qk_gemm_stream = "same"
    elif number == 3:
        s.kt_contiguous = True
    elif number == 4:
        s.memory = "async"


def parse_fix_list(text):
    if text in ("", "none"):
        return []
    if text == "all":
        return [1, 2, 3, 4]
    fixes = []
    for item in text.split(","):
        if item not in ("1", "2", "3", "4"):
            raise usage_error("--fixes: '%s' is not a fix (expected a list of 1-4, all or none)" % item)
        if int(item) in fixes:
            raise usage_error("--fixes: fix %s given twice" % item)
        fixes.append(int(item))
    return sorted(fixes)


def kt_copy_needed(p, s):
    """Whether K^T is copied contiguous before the GEMM (path_settings.cpp): always with fix 3,
    otherwise where at::matmul's reshape cannot fold a [B, S, H, E] view's batch and head strides."""
    if s.kt_contiguous:
        return True
    return s.k_layout == "bshe" and not p.gqa() and p.batch > 1 and p.kv_len > 1


def upcasts(p, s):
    return p.compute_dtype() != p.dtype


def has_dropout(p, s):
    return p.dropout > 0


def host_reads(p, s):  # scenario 2's host access
    return s.scores_to_host != "none"


def gemm_mnk(m, n, k):
    """A GEMM's detail: M, N, K of its row-major result in terms of L, S, E (gemm.cpp)."""
    return lambda p, s: "M=%d N=%d K=%d" % tuple({"L": p.q_len, "S": p.kv_len, "E": p.head_dim}[x] for x in (m, n, k))


class Op:
    """What the script does for one stage of the table. PyTorch's op is the backend's method of the
    stage's name (TorchBackend; DryBackend's only notes); `detail` gives the stage's argument in the
    harness's words (math_sdpa/pipeline.cpp) where its lines print it ({detail}, {mnk}); `runs` whether
    it runs in a call (path_settings.cpp stage_runs); `gemm` that it runs on the Q.K^T GEMM's stream
    (scenario 1's side stream), as repro's GEMMs do."""

    def __init__(self, detail=None, runs=lambda p, s: True, gemm=False):
        self.detail, self.runs, self.gemm = detail, runs, gemm


# Every stage of the table that PyTorch runs has its op here (the tests check it): those of
# _scaled_dot_product_attention_math, and with --backward those of its autograd nodes.
DISPATCH = {
    "entry_sync": Op(),
    "mask_prepare": Op(lambda p, s: p.mask, lambda p, s: p.mask in ("bool", "causal") and STAGES.index(
        s.last_stage) >= STAGES.index("mask_add")),
    "upcast": Op(lambda p, s: "%s->fp32" % p.dtype, upcasts),
    "scale_q": Op(lambda p, s: "factor=%f" % float32(scale_factors(p)[0])),
    "gqa_expand": Op(lambda p, s: "group=%d" % (p.q_heads // p.kv_heads), lambda p, s: p.gqa()),
    "scale_k": Op(),
    "kt_contiguous": Op(runs=kt_copy_needed),
    "qk_gemm": Op(gemm_mnk("L", "S", "E"), gemm=True),
    "mask_add": Op(runs=lambda p, s: p.mask != "none"),
    "scores_to_host": Op(lambda p, s: "mode=" + s.scores_to_host, host_reads),
    "softmax": Op(),
    "dropout": Op(runs=has_dropout),
    "pv_gemm": Op(gemm_mnk("L", "E", "S")),
    "cast_output": Op(lambda p, s: "fp32->" + p.dtype, upcasts),
    "stream_sync": Op(),
    "grad_upcast": Op(runs=upcasts),
    "dp_gemm": Op(gemm_mnk("L", "S", "E"), gemm=True),  # dPd = dO . V^T
    "dv_gemm": Op(gemm_mnk("S", "E", "L"), gemm=True),  # dV = Pd^T . dO
    "dropout_backward": Op(runs=has_dropout),
    "grads_to_host": Op(runs=host_reads),
    "softmax_backward": Op(),
    "dq_gemm": Op(gemm_mnk("L", "E", "S"), gemm=True),  # dQs = dS . Ks
    "dk_gemm": Op(gemm_mnk("S", "E", "L"), gemm=True),  # dKs = dS^T . Qs
    "grad_inputs": Op(),
    "backward_sync": Op(),
}


def stage_runs(stage, p, s):
    """Whether `stage` runs in a call of `p` under `s` (path_settings.cpp stage_runs): a scenario's
    call stops after its last stage, but for the closing synchronisation; the backward's run with --backward."""
    if stage in BACKWARD_STAGES:
        if not s.backward:
            return False
    elif stage != "stream_sync" and STAGES.index(stage) > STAGES.index(s.last_stage):
        return False
    return DISPATCH[stage].runs(p, s)


def stage_needs(stage, p, s):
    """Why `stage` does not run (the harness's stage_needs): --backward, its row's condition in the
    table's words (runs_if), or --full where the scenario stops before it."""
    if stage in BACKWARD_STAGES and not s.backward:
        return "--backward"
    if not DISPATCH[stage].runs(p, s):
        return ROWS[stage]["runs_if"] or "its own condition"
    return "--full (the scenario stops after %s)" % s.last_stage


def result_tensor_of(s):
    """The tensor a call ends with, the one --save-output writes (path_settings.cpp)."""
    last = STAGES.index(s.last_stage)
    if last < STAGES.index("scores_to_host"):
        return "scores"
    if last < STAGES.index("pv_gemm"):
        return "probs"
    return "output"


# ------------------------------------------------------------------------------------ the sdpa-debug log
# The lines of `repro --log-format sdpa-debug` (math_sdpa/stage_log.cpp), to the character: the four
# channels of the original instrumentation. A line is (channel, message, file, line): a stage's lines
# are the table's, rendered from its templates and ending with the table's [file:line], as the
# harness's do; the script's own lines (notes, allocations) name the line of this file that made them.
CHANNELS = {"sdpa": "SDPA_DEBUG", "alloc": "ALLOC_DEBUG", "cuda": "CUDA_DEBUG", "event": "CUDA_EVENT"}


def debug_line(channel, message):
    """A line of this script on `channel`, remembering the line of this file that made it (as __LINE__ does)."""
    return (channel, message, LOG_FILE_NAME, sys._getframe(1).f_lineno)


# The instrumentation's own tags and events (stage_log.cpp is_instrumentation_line): without
# --log-extras only these are written, as the instrumented PyTorch printed nothing else.
INSTRUMENTATION_TAGS = {"SDPA_ENTRY", "BACKEND_SELECT", "MATH_SDPA_START", "MATH_QK", "CUBLAS_GEMM_START",
                        "CUBLAS_GEMM_DONE", "MATH_QK_DONE", "MATH_MASK", "MATH_MASK_DONE", "MATH_SOFTMAX_START",
                        "MATH_SOFTMAX_DONE", "MATH_DROPOUT_START", "MATH_DROPOUT_DONE", "MATH_FINAL_BMM_START",
                        "MATH_FINAL_BMM_DONE", "CUDA_MALLOC", "CUDA_MALLOC_DONE"}
INSTRUMENTATION_EVENTS = {"sdpa_entry", "math_qk_start", "math_sdpa_complete"}
# What caffe2::TypeMeta's operator<< prints for each dtype: the C++ type's name.
TYPE_META_NAMES = {"bf16": "c10::BFloat16", "fp16": "c10::Half", "fp32": "float"}


def ostream_bool(b):
    """A bool as the macros stream it: 0 or 1 (no std::boolalpha)."""
    return "1" if b else "0"


def is_instrumentation_line(line):
    channel, message = line[0], line[1]
    if channel == "CUDA_EVENT":
        return message.split(" ")[0] in INSTRUMENTATION_EVENTS
    return message.startswith("[") and message[1:message.find("]")] in INSTRUMENTATION_TAGS


def debug_line_text(line):
    channel, message, source, number = line
    if channel == "CUDA_EVENT":
        return "[CUDA_EVENT] " + message
    return "[%s] %s [%s:%d]" % (channel, message, source, number)


def dims(values):
    return "[" + ", ".join(str(v) for v in values) + "]"


def float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def scale_factors(p):
    """sqrt(scale) on Q (with the scale's sign) and on K^T, as PyTorch's math path and repro
    compute them (double), and the float repro logs."""
    scale = p.softmax_scale()
    k_factor = math.sqrt(abs(scale))
    q_factor = -k_factor if scale < 0 else k_factor
    return q_factor, k_factor


def contiguous_strides(h, n, e):
    return [h * n * e, n * e, e, 1]


def key_strides(p, s):  # K as PyTorch prints it: contiguous, or a view of a [B, S, H, E] buffer
    if s.k_layout == "bshe":
        return [p.kv_len * p.kv_heads * p.head_dim, p.head_dim, p.kv_heads * p.head_dim, 1]
    return contiguous_strides(p.kv_heads, p.kv_len, p.head_dim)


def key_t_strides(p, s):  # the transposed view of K (of the expanded K for GQA)
    if s.k_layout == "bshe" and not p.gqa():
        return [p.kv_len * p.q_heads * p.head_dim, p.head_dim, 1, p.q_heads * p.head_dim]
    return [p.q_heads * p.kv_len * p.head_dim, p.kv_len * p.head_dim, 1, p.head_dim]


def pointer_text(handle):
    """A pointer as std::ostream prints it ("0" for null), e.g. a cudaStream_t."""
    return "0x%x" % handle if handle else "0"


def pointer_p(handle):
    """A pointer as printf's %p prints it in glibc ("(nil)" for null), as repro's notes do."""
    return "0x%x" % handle if handle else "(nil)"


class Boundary:
    """The start or the end of a stage: what its lines' placeholders stand for."""

    def __init__(self, stage, p, s, detail="", values=None, stream=0, duration_us=0, now=0):
        self.stage, self.p, self.s, self.detail, self.stream = stage, p, s, detail, stream
        self.values = values or {}  # the --log values fields the instrumentation printed, as it printed them
        self.duration_us, self.now = duration_us, now


# Each placeholder of the table's line templates as stage_log.cpp's LineValues::value writes it in the
# sdpa-debug format (bools 0/1, the dtype as TypeMeta prints it, a null stream "0"); {values:a,b} is
# handled in render_template.
PLACEHOLDERS = {
    "name": lambda b: b.stage,
    "detail": lambda b: b.detail,
    "+detail": lambda b: " " + b.detail if b.detail else "",
    "+summary": lambda b: " " + " ".join("%s=%s" % kv for kv in b.values.items()) if b.values else "",
    "mnk": lambda b: " ".join(b.detail.split(" ")[:3]),
    "q_shape": lambda b: dims([b.p.batch, b.p.q_heads, b.p.q_len, b.p.head_dim]),
    "kv_shape": lambda b: dims([b.p.batch, b.p.kv_heads, b.p.kv_len, b.p.head_dim]),
    "scores_shape": lambda b: dims([b.p.batch, b.p.q_heads, b.p.q_len, b.p.kv_len]),
    "mask_shape": lambda b: dims([b.p.q_len, b.p.kv_len]),
    "kt_shape": lambda b: dims([b.p.batch * b.p.q_heads, b.p.head_dim, b.p.kv_len]),
    "q_strides": lambda b: dims(contiguous_strides(b.p.q_heads, b.p.q_len, b.p.head_dim)),
    "key_strides": lambda b: dims(key_strides(b.p, b.s)),
    "key_t_strides": lambda b: dims(key_t_strides(b.p, b.s)),
    "dtype": lambda b: TYPE_META_NAMES[b.p.dtype],
    "is_causal": lambda b: ostream_bool(b.p.mask == "causal"),
    "true": lambda b: ostream_bool(True),
    "k_contiguous": lambda b: ostream_bool(b.s.k_layout != "bshe"),
    "stream": lambda b: pointer_text(b.stream),
    "now": lambda b: str(b.now),
    "duration_ms": lambda b: str(b.duration_us // 1000),
    "duration_us": lambda b: str(b.duration_us),
}
PLACEHOLDER = re.compile(r"\{([^}]*)\}")


def render_template(text, b):
    def value(m):
        name = m.group(1)
        if name.startswith("values:"):  # the fields asked for, in that order, where there are values
            return "".join(" %s=%s" % (k, b.values[k]) for k in name[len("values:"):].split(",") if k in b.values)
        if name not in PLACEHOLDERS:
            raise ScriptError(EXIT_USAGE, "%s: a line of stage %s has the placeholder {%s}, which this script "
                                          "does not know" % (STAGE_TABLE, b.stage, name))
        return PLACEHOLDERS[name](b)
    return PLACEHOLDER.sub(value, text)


def stage_lines(b, which):
    """The table's sdpa-debug lines of stage b.stage, `which` "debug_begin" or "debug_end"."""
    return [(CHANNELS[t["channel"]], render_template(t["text"], b), TABLE_SOURCE, t["line"])
            for t in ROWS[b.stage][which]]


def allocation_lines(nbytes, address, unified_memory):
    return [debug_line("ALLOC_DEBUG", "[CUDA_MALLOC] size=%d stream=0 device=0 unified_memory=%d"
                 % (nbytes, 1 if unified_memory else 0)),
            debug_line("ALLOC_DEBUG", "[CUDA_MALLOC_DONE] ptr=%s" % pointer_text(address))]


def note_line(text):
    return debug_line("SDPA_DEBUG", text)


def layer_line(step):
    """Before each call of a step after the first (stage_log.cpp StageLogger::call_position): one layer here."""
    return debug_line("SDPA_DEBUG", "[LAYER] step=%d layer=1/1" % step)


def memory_line(memory, detail):
    return debug_line("ALLOC_DEBUG", "[TORCH_MEMORY] memory=%s %s" % (memory, detail))


class DebugLog:
    """Writes sdpa-debug lines to stderr, each flushed at once: the last line of a hung run names the stage."""

    def __init__(self, enabled, out=None, extras=False):
        self.enabled, self.extras = enabled, extras
        self.out = out or sys.stderr
        self.lock = threading.Lock()

    def write(self, lines):
        if not self.enabled:
            return
        with self.lock:
            for line in lines:
                if self.extras or is_instrumentation_line(line):
                    self.out.write(debug_line_text(line) + "\n")
            self.out.flush()


def epoch_us():
    return time.time_ns() // 1000


def monotonic_us():
    return time.monotonic_ns() // 1000


# ---------------------------------------------------------------------------------- the watchdog
class Watchdog:
    """A thread that polls the stage in progress (never a CUDA call): past the deadline it prints
    the stage, dumps every Python thread's stack, writes the JSON and exits 3, within the deadline
    plus a poll. PyTorch releases the GIL in its ops and in torch.cuda.synchronize, and the
    helper library's host reads go through ctypes, which releases it too; should a hung call hold
    the GIL all the same, faulthandler's own timer (no GIL needed) still dumps the stacks two
    seconds after the deadline, and the process hangs on."""

    POLL_S = 0.05

    def __init__(self, timeout_s, on_hang):
        self.timeout_s = timeout_s
        self.on_hang = on_hang  # (stage, running_s) -> None; writes the JSON from host state only
        self.lock = threading.Lock()
        self.stage, self.started = None, 0.0
        self.thread = threading.Thread(target=self._watch, name="torch_stages-watchdog", daemon=True)
        self.thread.start()

    def arm(self, stage):
        with self.lock:
            self.stage, self.started = stage, time.monotonic()
        faulthandler.dump_traceback_later(self.timeout_s + 2.0, repeat=False, file=sys.stderr, exit=False)

    def disarm(self):
        faulthandler.cancel_dump_traceback_later()
        with self.lock:
            self.stage = None

    def _watch(self):
        while True:
            time.sleep(self.POLL_S)
            with self.lock:
                stage, started = self.stage, self.started
            if stage is None:
                continue
            running = time.monotonic() - started
            if running > self.timeout_s:
                self._fire(stage, running)

    def _fire(self, stage, running):
        message = "%s: HANG: stage %s did not finish within %.1f s (running for %.2f s)" % (
            PROG, stage, self.timeout_s, running)
        sys.stderr.write(message + "\n" + "%s: the Python threads' stacks, most recent call first:\n" % PROG)
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        try:
            self.on_hang(stage, running, message)
        finally:
            sys.stderr.flush()
            os._exit(EXIT_HANG)


# ----------------------------------------------------------------------------- the staged call
class StagedCall:
    """One call of the path, stage by stage, in the stage table's order, which is repro's MathSdpa::run's
    (math_sdpa/pipeline.cpp): the sdpa-debug lines and the watchdog around each stage, the work done by
    the backend (TorchBackend on the GPU, DryBackend for --dry-run)."""

    def __init__(self, problem, settings, level, log, backend, watchdog, inject, timings):
        self.p, self.s, self.level, self.log = problem, settings, level, log
        self.backend, self.watchdog, self.inject, self.timings = backend, watchdog, inject, timings
        backend.note = self.note

    def note(self, text):
        self.log.write([note_line(text)])

    def run_stage(self, stage):
        """One stage of the table: its op (DISPATCH) between its lines."""
        be, op, p, s = self.backend, DISPATCH[stage], self.p, self.s
        if op.gemm:
            be.order_gemm_after_producers(stage)

        def work():
            getattr(be, stage)()
            # As the original instrumentation: wait for the stage, so that its _DONE line means
            # "finished on the GPU"; the sdpa-debug format also waits before math_qk_start.
            if stage not in HOST_STAGES and (self.level in ("sync", "values") or stage == "scale_q"):
                be.synchronize()
            return be.values(stage) if self.level == "values" else {}

        detail = op.detail(p, s) if op.detail else ""
        self.timed(stage, stage_lines(Boundary(stage, p, s, detail, stream=be.stream_handle()), "debug_begin"), work,
                   lambda values, d: stage_lines(Boundary(stage, p, s, values=values, duration_us=d, now=epoch_us()),
                                                 "debug_end"))
        if op.gemm:
            be.order_path_after_gemm()

    def timed(self, stage, begin, work, end):
        """A stage's work between its lines (`end` made from what the work returns and the duration),
        timed, and watched by the watchdog."""
        if self.watchdog:
            self.watchdog.arm(stage)
        t0 = monotonic_us()
        self.log.write(begin)
        if self.inject == stage:
            self.backend.stall()
        result = work()
        duration = monotonic_us() - t0
        self.log.write(end(result, duration))
        self.timings.setdefault(stage, []).append(duration / 1000.0)
        if self.watchdog:
            self.watchdog.disarm()

    def run_load(self, stage, tensors, copy):
        """--mapped-weights: before the first call, the model's weights copied from the mapped file tensor
        by tensor (repro's MathSdpa::load_weights), each copy the table's load stage `stage` with its
        lines and the harness's detail, timed and watched by the watchdog; copy(bytes, offset) the work."""
        p, s, be = self.p, self.s, self.backend
        for i, (n, at) in enumerate(tensors):
            def work(n=n, at=at):
                copy(n, at)
                return {}

            self.timed(stage, stage_lines(Boundary(stage, p, s, weights_detail(i, len(tensors), n, at),
                                                   stream=be.stream_handle()), "debug_begin"), work,
                       lambda values, d: stage_lines(Boundary(stage, p, s, values=values, duration_us=d, now=epoch_us()),
                                                     "debug_end"))

    def run(self, step=1):
        """One call, and with --backward its backward as autograd runs _scaled_dot_product_attention_math's
        graph for dO (repro's MathSdpa::run and run_backward, one layer)."""
        self.run_stages(step, self.backend.start_call, STAGES)
        if self.s.backward:
            self.run_stages(step, self.backend.start_backward, BACKWARD_STAGES)

    def run_stages(self, step, start, stages):
        if step > 1:
            self.log.write([layer_line(step)])
        start()
        for stage in stages:
            if stage_runs(stage, self.p, self.s):
                self.run_stage(stage)


# The notes of the scenario conditions and fixes, in repro's words (math_sdpa/conditions.cpp, fixes/).
def pages_of(nbytes):
    return (nbytes + TOUCH_PAGE_BYTES - 1) // TOUCH_PAGE_BYTES


def scenario1_note(gemm_stream, path_stream, ordered, stage):
    """conditions.cpp order_gemm_after_producers: the Q.K^T GEMM, or a backward GEMM by its stage's name."""
    how = "ordered after stream %s by an event" if ordered else "NOT ordered after stream %s: a deliberate race"
    what = "Q.K^T" if stage == "qk_gemm" else stage
    return "[SCENARIO_1] %s GEMM on stream %s (aux), " % (what, pointer_p(gemm_stream)) + how % pointer_p(path_stream)


def scenario2_toucher_note(nbytes):
    return "[SCENARIO_2] a host thread reads the scores' %d pages while softmax runs" % pages_of(nbytes)


def scenario2_touched_note(passes, ms):
    return "[SCENARIO_2] the host thread touched the scores %d times while softmax ran (%.3f ms)" % (passes, ms)


def scenario2_read_note(nbytes, lo, hi, ms):
    return "[SCENARIO_2] host read scores: %d bytes, %d pages, min=%.6g max=%.6g (%.3f ms)" % (
        nbytes, pages_of(nbytes), lo, hi, ms)


SCENARIO2_NOT_CONCURRENT = ("[SCENARIO_2] the host cannot touch managed memory while a kernel runs here "
                            "(concurrentManagedAccess=0): it reads the scores before softmax instead")


def scenario4_host_touch(s, concurrent_managed_access):
    """Scenario 4's host touches: (whether the host touches the pages, whether it does so while
    the streams do, the note's words for it). Only managed memory is the host's to touch."""
    host_ok = s.entry_host_touch and s.memory == "managed"
    concurrent = host_ok and concurrent_managed_access == 1
    words = ("none" if not host_ok else "concurrently (concurrentManagedAccess=1)" if concurrent
             else "only between launches (concurrentManagedAccess=0)")
    return host_ok, concurrent, words


def scenario4_skipped_note(s):
    return "[SCENARIO_4] host touches skipped: %s memory is not host-accessible" % ALLOC_OF_MEMORY[s.memory]


def scenario4_host_read_note(pages, tensors, ms):
    return "[SCENARIO_4] host read %d pages of %d tensors first (%.3f ms)" % (pages, tensors, ms)


def scenario4_storm_note(streams, pages, host):
    return "[SCENARIO_4] %d streams touch %d pages each; host touches %s" % (streams, pages, host)


def fix1_note(path_stream, when):
    return "[FIX_1] cuBLAS handle on the producing stream %s; cudaStreamSynchronize %s the GEMM" % (
        pointer_p(path_stream), when)


def fix2_prefetch_note(nbytes, device, memory):
    if memory == "managed":
        return "[FIX_2] cudaMemPrefetchAsync(scores, %d bytes, device %d); cudaStreamSynchronize" % (nbytes, device)
    return "[FIX_2] prefetch skipped (%s memory does not migrate); cudaStreamSynchronize" % ALLOC_OF_MEMORY[memory]


FIX2_AFTER = "[FIX_2] cudaDeviceSynchronize after softmax"

# --backward: scenario 2's host access and fix 2 around softmax's backward, in the words of the
# harness's conditions.cpp move_to_host and fixes/fix2_prefetch_scores.cpp (its parts prefetch,
# host-sync and device-sync; the operands named as reduced_by names them).
SCENARIO2_BACKWARD_BEFORE = "[SCENARIO_2] the host touches the backward's operands before its softmax, not during it"


def scenario2_backward_read_note(name, nbytes, lo, hi, ms):
    return "[SCENARIO_2] host read %s: %d bytes, %d pages, min=%.6g max=%.6g (%.3f ms)" % (
        name, nbytes, pages_of(nbytes), lo, hi, ms)


def fix2_backward_prefetch_note(name, nbytes, device):
    return "[FIX_2] prefetch: cudaMemPrefetchAsync(%s, %d bytes, device %d) on the stream" % (name, nbytes, device)


def fix2_backward_skipped_note(memory):
    return "[FIX_2] prefetch skipped (%s memory does not migrate)" % ALLOC_OF_MEMORY[memory]


FIX2_BACKWARD_HOST_SYNC = "[FIX_2] host-sync: cudaStreamSynchronize before softmax_backward"
FIX2_BACKWARD_DEVICE_SYNC = "[FIX_2] device-sync: cudaDeviceSynchronize after softmax_backward"


class DryBackend:
    """--dry-run: no PyTorch, no GPU; the stages do nothing but their notes (as on a device with
    concurrentManagedAccess, numbers 0), so that the log lines of a call (and the watchdog, with
    --inject) can be seen and tested anywhere."""

    def __init__(self, problem, settings, fixes, stage_timeout_s):
        self.p, self.s, self.fixes, self.stage_timeout_s = problem, settings, fixes, stage_timeout_s
        self.note = None

    def stream_handle(self):
        return 0

    def stall(self):  # the host stands in for the GPU: a bounded wait the watchdog must catch
        deadline = time.monotonic() + self.stage_timeout_s + 10.0
        while time.monotonic() < deadline:
            time.sleep(0.01)

    def synchronize(self):
        pass

    def values(self, stage):
        return {}

    def start_call(self):
        pass

    def entry_sync(self):
        if self.s.entry_touch_streams > 0:
            host_ok, _, words = scenario4_host_touch(self.s, 1)
            if self.s.entry_host_touch and not host_ok:
                self.note(scenario4_skipped_note(self.s))
            if host_ok:
                self.note(scenario4_host_read_note(0, 0, 0.0))
            self.note(scenario4_storm_note(self.s.entry_touch_streams, 0, words))

    def _gemm(self):
        if 1 in self.fixes:
            self.note(fix1_note(0, "before"))
            self.note(fix1_note(0, "after"))

    def order_gemm_after_producers(self, stage):
        if self.s.qk_gemm_stream == "aux":
            self.note(scenario1_note(0, 0, self.s.qk_gemm_order == "event", stage))

    def scores_to_host(self):
        nbytes = self.p.score_elems() * DTYPES[self.p.compute_dtype()].size
        if self.s.scores_host_phase == "during":
            self.note(scenario2_toucher_note(nbytes))
        else:
            self.note(scenario2_read_note(nbytes, 0.0, 0.0, 0.0))

    def softmax(self):
        if 2 in self.fixes:
            self.note(fix2_prefetch_note(0, 0, self.s.memory))
            self.note(FIX2_AFTER)

    def stream_sync(self):
        if self.s.scores_to_host != "none" and self.s.scores_host_phase == "during" and stage_runs(
                "scores_to_host", self.p, self.s):
            self.note(scenario2_touched_note(0, 0.0))

    def grads_to_host(self):
        nbytes = self.p.score_elems() * DTYPES[self.p.compute_dtype()].size
        if self.s.scores_host_phase == "during":
            self.note(SCENARIO2_BACKWARD_BEFORE)
        for name in ("probs", "grad_probs"):
            self.note(scenario2_backward_read_note(name, nbytes, 0.0, 0.0, 0.0))

    def softmax_backward(self):
        if 2 in self.fixes:
            if self.s.memory == "managed":
                for name in ("probs", "grad_probs"):
                    self.note(fix2_backward_prefetch_note(name, 0, 0))
            else:
                self.note(fix2_backward_skipped_note(self.s.memory))
            self.note(FIX2_BACKWARD_HOST_SYNC)
            self.note(FIX2_BACKWARD_DEVICE_SYNC)

    qk_gemm = pv_gemm = _gemm
    mask_prepare = upcast = scale_q = gqa_expand = scale_k = kt_contiguous = start_call
    order_path_after_gemm = mask_add = dropout = cast_output = start_call
    start_backward = grad_upcast = dp_gemm = dv_gemm = dropout_backward = start_call
    dq_gemm = dk_gemm = grad_inputs = backward_sync = start_call


# --------------------------------------------------------------------------------- options
class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit 2 (repro's usage errors)."""

    def error(self, message):
        raise usage_error(message)


def build_parser():
    ap = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--scenario", type=int, default=0, choices=range(0, 5), help="0 = the full path; 1-4 the deadlock scenarios")
    a("--fix", default="off", choices=("on", "off"), help="on: apply the scenario's own fix")
    a("--fixes", default="none", help="fixes to apply, any scenario: a list of 1-4, all or none")
    a("--full", action="store_true", help="run the whole path under the scenario's conditions")
    a("--backward", action="store_true",
      help="after each call, its backward pass as autograd runs it, stage by stage, for a seeded dO (repro's "
           "--backward; implies --full; dout.npy of --inputs gives dO)")
    a("--workload", choices=sorted(WORKLOADS), help="a layer of the failing workload as the problem")
    a("--dtype", choices=sorted(DTYPES), help="element type (default bf16)")
    a("--precision", default="upcast", choices=PRECISIONS, help="upcast (PyTorch's default) or native")
    a("-b", "--batch", type=int, help="batch size B (default 2)")
    a("--heads", type=int, help="query heads Hq (default 8)")
    a("--kv-heads", type=int, help="key/value heads Hkv (default Hq)")
    a("-L", "--q-len", type=int, help="query length L (default 128)")
    a("-S", "--kv-len", type=int, help="key/value length S (default L)")
    a("-E", "--head-dim", type=int, help="head dimension E (default 64)")
    a("--mask", choices=MASKS, help="attention mask: none, bool, float (additive), causal")
    a("--mask-dims", choices=MASK_DIMS, help="mask broadcast over batch x heads (default 1x1)")
    a("--text-padding", metavar="TOKENS:VALID", help="a boolean key-padding mask (implies --mask bool --mask-dims Bx1)")
    a("--dropout", type=float, default=0.0, help="dropout probability in [0, 1)")
    a("--scale", type=float, help="softmax scale (default 1/sqrt(E))")
    a("--seed", help="seed of the random inputs (0 to 2^64-1, default 23962) and of torch's dropout")
    a("--k-layout", choices=K_LAYOUTS,
      help="bhse (contiguous K) or bshe (a [B, S, H, E] buffer viewed as [B, H, S, E])")
    a("--gemm-stream", choices=GEMM_STREAMS, help="the Q.K^T GEMM's stream: same, or aux (a side stream; scenario 1)")
    a("--gemm-order", choices=GEMM_ORDERS, help="that GEMM after Q and K: event, or none (a deliberate race)")
    a("--gemm-api", choices=GEMM_APIS, help="strided (at::bmm, the only one PyTorch calls)")
    a("--scores-to-host", choices=SCORES_TO_HOST, help="host access to the scores before softmax: none or read")
    a("--scores-host-phase", choices=HOST_PHASES, help="before softmax, or during it (a host thread)")
    a("--touch-streams", type=int, help="streams reading every page of every tensor at entry (scenario 4: 4)")
    a("--host-touch", choices=("on", "off"), help="a host thread reads those pages at entry too (scenario 4: on)")
    a("--memory", default="caching", choices=sorted(MEMORIES), help="caching (default), managed or async")
    a("--mapped-weights", metavar="SIZE[:FILE]",
      help="the model's weights, SIZE of them (a unit: 30G), loaded before the first call from a memory-mapped file "
           "(made once, then reused; default ~/.cache/sdpa-repro/weights.bin) with .to('cuda') tensor by tensor, "
           "as repro --mapped-weights")
    a("--weights-mapping", choices=WEIGHTS_MAPPINGS,
      help="after the load: the mapping dropped (unmap, the default, as PyTorch frees the CPU state dict) or kept")
    a("--mode", default="stages", choices=MODES, help="stages (default) or whole (F.scaled_dot_product_attention)")
    a("--iters", type=int, default=1, help="calls of the path")
    a("--json", help="write the result as JSON to this file")
    a("--inputs", help="load q.npy, k.npy, v.npy and optional mask.npy from this directory")
    a("--save-output", help="write the result tensor to this .npy file (float32)")
    a("--log", choices=LOG_LEVELS, help="off, stages, sync (a device sync after every stage) or values (also "
                                       "min/max/isnan/isinf and sums; the default, as the instrumentation; --mode "
                                       "whole: sync)")
    a("--log-format", default="sdpa-debug", choices=LOG_FORMATS, help="sdpa-debug (the only format this script writes)")
    a("--log-extras", action="store_true", help="also the lines of the harness's own stages and notes (repro's --log-extras)")
    a("--stage-timeout", type=float, default=20.0, help="watchdog deadline per stage, seconds (default 20)")
    a("--inject", help="hang:STAGE: a spinning kernel makes that stage stall, to test the watchdog")
    a("--dry-run", action="store_true", help="print one call's log lines without PyTorch, then exit")
    return ap


def parse_seed(text):
    if not text or len(text) > 20 or not text.isdigit() or not text.isascii() or int(text) >= 2 ** 64:
        raise usage_error("--seed: '%s' is not an integer in [0, 2^64)" % text[:40])
    return int(text)


def parse_size(text, option):
    """repro's parse_size (math_sdpa/context.cpp): a number and its unit (K, M, G, T: powers of 1024, as
    KiB...; KB, MB, GB, TB: of 1000; B), at least one byte."""
    bad = "%s: '%s' is not a size (e.g. 40G, 512M, 1.5GiB, 2e9B)" % (option, text[:40])
    m = SIZE_NUMBER.match(text) if text and len(text) <= 40 else None
    if not m:
        raise usage_error(bad)
    if not m.group(2):  # a bare number could mean bytes, GB or a fraction: repro refuses it too
        raise usage_error("%s: '%s' has no unit: a size needs one (e.g. 40G, 512M, 1.5GiB, 2e9B)" % (option, text[:40]))
    factor = dict(SIZE_UNITS).get(m.group(2))
    if factor is None or not math.isfinite(float(m.group(1))):
        raise usage_error(bad)
    nbytes = float(m.group(1)) * factor
    if not 1 <= nbytes <= 9.0e18:
        raise usage_error("%s: '%s' is not a size of at least one byte" % (option, text[:40]))
    return int(nbytes)


def parse_mapped_weights(text):
    """--mapped-weights SIZE[:FILE] as repro reads it (path_settings.cpp parse_mapped_weights): (bytes,
    the file or "" for the default one). SIZE needs a unit: a bare number is refused."""
    size, colon, path = text.partition(":")
    if not size.strip("0123456789."):
        raise usage_error("--mapped-weights: '%s' is not SIZE[:FILE] with a unit (e.g. 30G, 41GB)" % text[:60])
    nbytes = parse_size(size, "--mapped-weights")
    if colon and not path:
        raise usage_error("--mapped-weights: '%s' names no file after the ':'" % text[:60])
    return nbytes, path


def parse_text_padding(text):
    tokens, _, valid = text.partition(":")
    for part in (tokens, valid):
        if not part or len(part) > 9 or not part.isdigit() or not part.isascii():
            raise usage_error("--text-padding: '%s' is not TOKENS:VALID (two positive integers)" % text[:40])
    return int(tokens), int(valid)


class Options:
    """The command line, resolved: the problem, the conditions (scenario), the settings (with fixes)."""

    def __init__(self, args, argv):
        self.args, self.argv = args, argv
        self.scenario = args.scenario
        self.workload = None
        self.problem = Problem()
        self.conditions = Settings()
        self.fixes = []
        self.own_fix = args.fix == "on"
        self.settings = None
        self.inject = None
        self.waiver = None
        self.weights_stage = None  # --mapped-weights: the table's load stage


def resolve(args, argv):
    """repro's RunOptionParser::finish (repro/cli/run_options.cpp), for the options this script has."""
    missing = [name for name in ALL_STAGES if name not in DISPATCH]
    if missing:  # a stage the harness runs and this script would silently skip
        raise usage_error("%s has the stage(s) %s, for which this script has no PyTorch op (DISPATCH)"
                          % (STAGE_TABLE, ", ".join(missing)))
    o = Options(args, argv)
    shape_given = any(v is not None for v in (args.batch, args.heads, args.kv_heads, args.q_len, args.kv_len,
                                               args.head_dim)) or args.inputs is not None
    o.workload = args.workload or (None if shape_given else SCENARIO_WORKLOADS.get(args.scenario))
    p = o.problem
    workload_k_layout = None
    if o.workload:
        p, workload_k_layout = WORKLOADS[o.workload]()
        o.problem = p
    for field, value in (("batch", args.batch), ("q_heads", args.heads), ("q_len", args.q_len),
                         ("head_dim", args.head_dim)):
        if value is not None:
            setattr(p, field, value)
    if args.kv_heads is not None:
        p.kv_heads = args.kv_heads
    elif args.heads is not None or not o.workload:
        p.kv_heads = p.q_heads
    if args.kv_len is not None:
        p.kv_len = args.kv_len
    elif args.q_len is not None or not o.workload:
        p.kv_len = p.q_len
    if args.dtype is not None or not o.workload:
        p.dtype = args.dtype or "bf16"
    p.precision = args.precision
    if args.mask is not None or not o.workload:
        p.mask, p.mask_pattern = args.mask or "none", "random"
    if args.mask_dims is not None or not o.workload:
        dims_ = args.mask_dims or "1x1"
        p.mask_per_batch, p.mask_per_head = dims_[0] == "B", dims_[2] == "H"
    if args.text_padding is not None:
        if args.mask is not None and args.mask != "bool":
            raise usage_error("--text-padding is a boolean mask: it excludes --mask " + args.mask)
        p.mask, p.mask_per_batch, p.mask_per_head, p.mask_pattern = "bool", True, False, "text_padding"
        p.text_tokens, p.text_valid = parse_text_padding(args.text_padding)
    p.dropout = args.dropout
    if args.scale is not None:
        p.scale = args.scale
    if args.seed is not None:
        p.seed = parse_seed(args.seed)

    # Defaults, then the scenario's preconditions, then what the command line says explicitly.
    c = o.conditions
    c.memory = args.memory
    if workload_k_layout:
        c.k_layout = workload_k_layout
    apply_scenario(args.scenario, c)
    if args.full:
        c.last_stage = "stream_sync"
    if args.backward:  # repro: the backward reads what autograd saved from the whole forward path
        if args.mode == "whole":
            raise usage_error("--backward runs the backward's operations stage by stage (--mode stages): --mode whole "
                              "is F.scaled_dot_product_attention's forward call alone")
        c.backward, c.last_stage = True, "stream_sync"
    if args.gemm_stream is not None:
        c.qk_gemm_stream = args.gemm_stream
    if args.gemm_order is not None:
        c.qk_gemm_order = args.gemm_order
    if args.k_layout is not None:
        c.k_layout = args.k_layout
    if args.gemm_api == "batched":
        raise usage_error("--gemm-api batched: PyTorch's at::bmm has no pointer-array GEMM (cublasGemmBatchedEx); "
                          "this script runs strided, as repro --gemm-api strided does")
    if args.scores_to_host is not None:
        if args.scores_to_host in ("advise", "both"):
            raise usage_error("--scores-to-host %s: not supported here (none or read)" % args.scores_to_host)
        c.scores_to_host = args.scores_to_host
    if args.scores_host_phase is not None:
        c.scores_host_phase = args.scores_host_phase
    if args.touch_streams is not None:
        if not 0 <= args.touch_streams <= 64:
            raise usage_error("--touch-streams: %d is not in [0, 64]" % args.touch_streams)
        c.entry_touch_streams = args.touch_streams
    if args.host_touch is not None:
        c.entry_host_touch = args.host_touch == "on"
    if args.mapped_weights is not None:
        c.mapped_weights, c.weights_file = parse_mapped_weights(args.mapped_weights)
        if len(LOAD_STAGES) != 1:  # the table this script reads is older (or newer) than the option
            raise usage_error("--mapped-weights: the stage table %s has %d load stage(s) (%s), where this script runs "
                              "one, the weights' copy (build/repro help stages --json > scripts/stages.json)"
                              % (STAGE_TABLE, len(LOAD_STAGES), " ".join(LOAD_STAGES) or "none"))
        o.weights_stage = LOAD_STAGES[0]
        # Checked before anything runs, whichever route names the file: a file this script did not
        # make is read, never written.
        weights_file_use(weights_file_route(c.weights_file), c.weights_file or default_weights_file(), c.mapped_weights)
    if args.weights_mapping is not None:
        if not c.mapped_weights:
            raise usage_error("--weights-mapping describes a load of weights: give its size with --mapped-weights")
        c.weights_mapping = args.weights_mapping

    o.fixes = parse_fix_list(args.fixes)
    if o.own_fix:
        if args.scenario == 0:
            raise usage_error("--fix on: scenario 0 has no fix of its own (use --fixes 1,2,3,4 or all)")
        if args.scenario not in o.fixes:
            o.fixes = sorted(o.fixes + [args.scenario])  # scenario N's own fix is fix N
    o.settings = copy.copy(c)
    for n in o.fixes:
        configure_fix(n, o.settings)
    # Scenarios 1-4 are about pages that migrate; memory that never leaves the GPU waives them
    # (scenarios/registry.cpp scenario_waiver), unless a fix took the condition away; the host's
    # reads of the scores need memory the host can read (conditions.cpp check_conditions_expressible).
    if args.scenario > 0 and c.memory != "managed":
        o.waiver = ("scenario %d is about pages that migrate between host and GPU; %s memory never leaves the GPU "
                    "(use --memory managed)" % (args.scenario, args.memory))
    elif o.settings.scores_to_host != "none" and o.settings.memory != "managed":
        o.waiver = ("scenario 2's condition (the scores moved to the host before softmax) needs memory whose pages "
                    "migrate (--memory managed); %s memory never leaves the GPU" % o.settings.memory)

    if args.log_format != "sdpa-debug":
        raise usage_error("--log-format %s: this script writes the sdpa-debug format only (--log-format sdpa-debug)"
                          % args.log_format)
    if args.iters < 1:
        raise usage_error("--iters: %d is not in [1, 100000000]" % args.iters)
    if not 0.01 <= args.stage_timeout <= 86400:
        raise usage_error("--stage-timeout: %g is not in [0.01, 86400]" % args.stage_timeout)
    if args.inject is not None:
        kind, _, stage = args.inject.partition(":")
        if kind != "hang" or stage not in LOAD_STAGES + ALL_STAGES:
            raise usage_error("--inject: '%s' is not hang:STAGE (stages: %s)" % (args.inject[:40],
                                                                              " ".join(LOAD_STAGES + ALL_STAGES)))
        o.inject = stage
    if args.mode == "whole":
        check_whole_mode(o)
    if args.inputs is None:
        p.validate()
        check_inject(o)
    return o


def check_inject(o):
    if o.inject is None:
        return
    if o.inject in LOAD_STAGES:  # before the first call, in either mode
        if not o.settings.mapped_weights:
            raise usage_error("--inject: stage %s runs with --mapped-weights (the weights' load before the first call)"
                              % o.inject)
        return
    if o.args.mode == "whole":
        if o.inject not in ("entry_sync", "stream_sync"):
            raise usage_error("--inject: in --mode whole a stall can be injected at entry_sync or stream_sync "
                              "(the call itself only issues its kernels; stream_sync waits for them)")
    elif not stage_runs(o.inject, o.problem, o.settings):
        raise usage_error("--inject: stage %s does not run in this configuration: it needs %s (repro help stages "
                          "lists each stage's condition)" % (o.inject, stage_needs(o.inject, o.problem, o.settings)))


# Whole mode's stages: the entry synchronisation, the one call (a stage of this script's own, which
# the harness's table does not have), the end synchronisation.
SDPA_CALL = "sdpa_call"
OWN_STAGES = (SDPA_CALL,)
WHOLE_STAGES = ("entry_sync", SDPA_CALL, "stream_sync")


def check_whole_mode(o):
    s = o.settings
    if s.qk_gemm_stream != "same" or s.scores_to_host != "none":
        raise usage_error("--mode whole: scenario %d's condition acts inside the call, which whole mode cannot "
                          "reach (use --mode stages)" % o.scenario)
    if any(n in (1, 2, 3) for n in o.fixes):
        raise usage_error("--mode whole: fixes 1-3 act inside the call (use --mode stages); fix 4 is --memory async")
    if o.args.log == "values":
        raise usage_error("--mode whole: --log values needs the stages (use --mode stages)")


def parse_command_line(argv):
    args = build_parser().parse_args(argv)
    if args.log is None:  # the instrumentation's syncs and values, as repro's sdpa-debug format
        args.log = "values" if args.mode == "stages" else "sync"
    return resolve(args, argv)


# ------------------------------------------------------------------------------------ the inputs
# The generator of math_sdpa/random_inputs.h and random_masks.h, exactly: splitmix64 and
# Box-Muller, the same seed giving the same tensors as repro's. splitmix64's n-th output depends
# on n alone, so numpy computes them all at once. numpy's float64 log and cos may differ from the
# C library's in the last bits, so the few values whose rounding to float32 those bits could
# change are computed again with math.log and math.cos, the C library's own, which repro calls.
GOLDEN = 0x9E3779B97F4A7C15
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
MASK64 = (1 << 64) - 1
TWO_PI = 6.283185307179586
CHUNK = 1 << 22


class InputRng:
    """InputRng of random_inputs.h, with its draws counted, so that any range of them is computed."""

    def __init__(self, seed):
        self.state = (seed * 0x2545F4914F6CDD1D + 1) & MASK64
        self.drawn = 0

    def raw(self, count):
        """The next `count` outputs of next(), as uint64."""
        np = numpy()
        k = np.arange(self.drawn + 1, self.drawn + count + 1, dtype=np.uint64)
        self.drawn += count
        with np.errstate(over="ignore"):
            z = np.uint64(self.state) + k * np.uint64(GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
        return z ^ (z >> np.uint64(31))

    def uniform(self, count):
        return (self.raw(count) >> numpy().uint64(11)).astype(numpy().float64) * (1.0 / 9007199254740992.0)

    def normal_float32(self, count):
        """`count` values of float(normal()), as repro's random_normal casts them."""
        np = numpy()
        u = self.uniform(2 * count)
        u1, u2 = 1.0 - u[0::2], u[1::2]
        with np.errstate(divide="ignore"):
            d = np.sqrt(-2.0 * np.log(u1)) * np.cos(TWO_PI * u2)
        f = d.astype(np.float32)
        # Values near a float32 rounding boundary, or where log and cos are least accurate in
        # relative terms (u1 near 1, cos near 0), are computed again as the C library does.
        lo, hi = (d * (1.0 - 2.0 ** -40)).astype(np.float32), (d * (1.0 + 2.0 ** -40)).astype(np.float32)
        redo = np.nonzero((lo != hi) | (u1 > 0.999) | (np.abs(np.cos(TWO_PI * u2)) < 1e-3))[0]
        for i in redo.tolist():
            a, b = float(u1[i]), float(u2[i])
            f[i] = math.sqrt(-2.0 * math.log(a)) * math.cos(TWO_PI * b)
        return f


def round_to_dtype(values, dtype):
    """float32 values rounded to `dtype` with round-to-nearest-even (dtype.h round_to_dtype)."""
    np = numpy()
    if dtype == "fp32":
        return values
    if dtype == "fp16":
        return values.astype(np.float16).astype(np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)) & np.uint64(0xFFFF)
    nan = np.isnan(values)
    rounded[nan] = (bits[nan] >> np.uint64(16)) | np.uint64(0x40)  # keep it a quiet NaN
    return bf16_bits_to_float32(rounded.astype(np.uint16))


def bf16_bits_to_float32(bits):
    np = numpy()
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def random_normal(rng, count, dtype):
    np = numpy()
    out = np.empty(count, dtype=np.float32)
    for start in range(0, count, CHUNK):
        n = min(CHUNK, count - start)
        out[start:start + n] = round_to_dtype(rng.normal_float32(n), dtype)
    return out


def random_bool_mask(rng, slices, rows, cols):
    """[slices, rows, cols], 1 = attend: a quarter of the keys dropped, one row per slice fully
    masked (no draws for that row: the && short-circuits)."""
    np = numpy()
    mask = np.zeros((slices, rows, cols), dtype=np.bool_)
    for s in range(slices):
        drawn_rows = np.ones(rows, dtype=np.bool_)
        drawn_rows[(s * 7 + 3) % rows] = False
        mask[s, drawn_rows] = (rng.uniform((rows - 1) * cols) >= 0.25).reshape(rows - 1, cols)
    return mask


def text_padding_mask(batches, rows, cols, text_tokens, text_valid):
    np = numpy()
    mask = np.ones((batches, rows, cols), dtype=np.bool_)
    mask[1:, :, text_valid:text_tokens] = False
    return mask


def random_additive_mask(rng, count, dtype):
    """Uniform in [-2, 2] rounded to the dtype, about 10% -inf. Each value takes one draw, or two
    (the second gives the value) when the first is not below 0.1, so the values are drawn one
    by one (a Python loop: seconds for the largest masks)."""
    np = numpy()
    buffer, at = [], 0
    values = []
    for _ in range(count):
        if at == len(buffer):
            buffer, at = rng.uniform(CHUNK).tolist(), 0
        u = buffer[at]
        at += 1
        if u < 0.1:
            values.append(-math.inf)
            continue
        if at == len(buffer):
            buffer, at = rng.uniform(CHUNK).tolist(), 0
        values.append(4.0 * buffer[at] - 2.0)
        at += 1
    rng.drawn -= len(buffer) - at  # drawn ahead but not used: the next draws start there
    out = np.array(values, dtype=np.float64).astype(np.float32)  # static_cast<float>
    finite = np.isfinite(out)
    out[finite] = round_to_dtype(out[finite], dtype)
    return out


class HostInputs:
    """Q, K, V [B, H, len, E] float32 already rounded to the dtype, and the mask (bool or float)
    as [B|1, H|1, L, S]; where they came from, for the JSON."""

    def __init__(self, q, k, v, mask, source, dout=None):
        self.q, self.k, self.v, self.mask, self.source = q, k, v, mask, source
        self.dout = dout  # --backward: dO [B, H, L, E], from dout.npy (else made by make_grad_output)


def make_random_inputs(p):
    np = numpy()
    rng = InputRng(p.seed)
    q = random_normal(rng, p.batch * p.q_heads * p.q_len * p.head_dim, p.dtype)
    kv_shape = (p.batch, p.kv_heads, p.kv_len, p.head_dim)
    k = random_normal(rng, int(np.prod(kv_shape)), p.dtype)
    v = random_normal(rng, int(np.prod(kv_shape)), p.dtype)
    mask_shape = (p.mask_batch(), p.mask_heads(), p.q_len, p.kv_len)
    mask = None
    if p.mask == "bool" and p.mask_pattern == "text_padding":
        mask = text_padding_mask(p.mask_batch(), p.q_len, p.kv_len, p.text_tokens, p.text_valid)
    elif p.mask == "bool":
        mask = random_bool_mask(rng, p.mask_batch() * p.mask_heads(), p.q_len, p.kv_len)
    elif p.mask == "float":
        mask = random_additive_mask(rng, int(np.prod(mask_shape)), p.dtype)
    if mask is not None:
        mask = mask.reshape(mask_shape)
    return HostInputs(q.reshape(p.batch, p.q_heads, p.q_len, p.head_dim), k.reshape(kv_shape), v.reshape(kv_shape),
                      mask, "random (math_sdpa/random_inputs.h's generator, seed %d)" % p.seed)


# math_sdpa/problem.cpp make_grad_output: dO of layer 1, N(0, 1) rounded to the dtype, from the
# seed mixed with this constant (the harness's layer l adds (l - 1) * GOLDEN to the seed first).
GRAD_OUTPUT_SEED_MIX = 0x6A09E667F3BCC909


def make_grad_output(p):
    """repro --backward's seeded dO, bit for bit (the same generator as the inputs)."""
    rng = InputRng((p.seed ^ GRAD_OUTPUT_SEED_MIX) & MASK64)
    return random_normal(rng, p.batch * p.q_heads * p.q_len * p.head_dim, p.dtype).reshape(
        p.batch, p.q_heads, p.q_len, p.head_dim)


NPY_DTYPES = {"<f4": "fp32", "<f2": "fp16", "<u2": "bf16"}  # bf16 travels as uint16 (repro/cli/inputs.cpp)


def load_npy(path):
    np = numpy()
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise usage_error("%s: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))


def npy_as_float32(a, what):
    np = numpy()
    descr = a.dtype.str
    if descr not in NPY_DTYPES:
        raise usage_error("%s: must be float32, float16 or bfloat16 (stored as uint16), not %s" % (what, descr))
    if descr == "<u2":
        return bf16_bits_to_float32(a), "bf16"
    return a.astype(np.float32), NPY_DTYPES[descr]


def load_npy_inputs(directory, p, dtype_given, backward=False):
    """q.npy, k.npy, v.npy, an optional mask.npy and, with --backward, an optional dout.npy, checked
    as repro/cli/inputs.cpp checks them."""
    np = numpy()
    arrays = {name: load_npy(os.path.join(directory, name + ".npy")) for name in ("q", "k", "v")}
    for name, a in arrays.items():
        if a.ndim != 4:
            raise usage_error("%s.npy: expected 4 dimensions [B, H, len, E], got %s" % (name, dims(a.shape)))
    q, file_dtype = npy_as_float32(arrays["q"], "q.npy")
    if arrays["k"].dtype != arrays["q"].dtype or arrays["v"].dtype != arrays["q"].dtype:
        raise usage_error("q.npy, k.npy and v.npy must have the same dtype")
    k, _ = npy_as_float32(arrays["k"], "k.npy")
    v, _ = npy_as_float32(arrays["v"], "v.npy")
    if k.shape != v.shape:
        raise usage_error("k.npy %s and v.npy %s must have the same shape" % (dims(k.shape), dims(v.shape)))
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise usage_error("q.npy %s and k.npy %s must agree on batch and head dim" % (dims(q.shape), dims(k.shape)))
    if not dtype_given:
        p.dtype = file_dtype
    p.batch, p.q_heads, p.q_len, p.head_dim = (int(x) for x in q.shape)
    p.kv_heads, p.kv_len = int(k.shape[1]), int(k.shape[2])
    mask = None
    mask_path = os.path.join(directory, "mask.npy")
    if os.path.exists(mask_path):
        if p.mask == "causal":
            raise usage_error("mask.npy and --mask causal exclude each other")
        m = load_npy(mask_path)
        s = m.shape
        if m.ndim not in (2, 4) or s[-2] != p.q_len or s[-1] != p.kv_len or (
                m.ndim == 4 and (s[0] not in (1, p.batch) or s[1] not in (1, p.q_heads))):
            raise usage_error("mask.npy %s: expected [L, S] or [B|1, H|1, L, S] with L=%d S=%d"
                              % (dims(s), p.q_len, p.kv_len))
        p.mask_per_batch = m.ndim == 4 and s[0] == p.batch and p.batch > 1
        p.mask_per_head = m.ndim == 4 and s[1] == p.q_heads and p.q_heads > 1
        shape = (p.mask_batch(), p.mask_heads(), p.q_len, p.kv_len)
        if m.dtype.str in ("|b1", "|u1", "<u1"):
            p.mask, p.mask_pattern = "bool", "random"
            mask = (m != 0).reshape(shape)
        else:
            if m.dtype != arrays["q"].dtype:
                raise usage_error("mask.npy: a float mask must have the same dtype as q.npy")
            p.mask = "float"
            mask = round_to_dtype(npy_as_float32(m, "mask.npy")[0], p.dtype).reshape(shape)
    elif p.has_mask_input():
        raise usage_error("--mask %s needs %s" % (p.mask, mask_path))
    p.validate()
    rounded = [round_to_dtype(np.ascontiguousarray(x).reshape(-1), p.dtype).reshape(x.shape) for x in (q, k, v)]
    dout = None
    dout_path = os.path.join(directory, "dout.npy")
    if backward and os.path.exists(dout_path):
        d = load_npy(dout_path)
        if d.shape != arrays["q"].shape or d.dtype != arrays["q"].dtype:
            raise usage_error("dout.npy %s: the gradient of the output has q.npy's shape %s and dtype"
                              % (dims(d.shape), dims(arrays["q"].shape)))
        dout = round_to_dtype(np.ascontiguousarray(npy_as_float32(d, "dout.npy")[0]).reshape(-1), p.dtype).reshape(d.shape)
    return HostInputs(rounded[0], rounded[1], rounded[2], mask, "--inputs " + directory, dout)


def write_npy_atomically(path, array):
    """np.save to path.tmp.<pid>, then a rename over `path` (math_sdpa/atomic_file.h)."""
    np = numpy()
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            np.save(f, array, allow_pickle=False)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise usage_error("--save-output %s: %s" % (path, e.strerror or e))


def write_json_atomically(path, value):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            json.dump(value, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        sys.stderr.write("%s: error: --json %s: %s\n" % (PROG, path, e.strerror or e))


_numpy = None


def numpy():
    global _numpy
    if _numpy is None:
        try:
            import numpy as np
        except ImportError:
            raise ScriptError(EXIT_USAGE, "numpy is needed for the inputs (--inputs, --save-output and the random "
                                          "inputs); install it next to PyTorch")
        _numpy = np
    return _numpy


# -------------------------------------------------------------------------- PyTorch and memory
def import_torch(memory):
    """PyTorch >= 2.5 with CUDA, imported only now (option parsing and --dry-run need none).
    --memory async chooses the cudaMallocAsync backend before PyTorch reads its configuration."""
    if memory == "async":
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        if "backend" in conf:
            raise usage_error("--memory async: PYTORCH_CUDA_ALLOC_CONF already names a backend (%s)" % conf)
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (conf + "," if conf else "") + "backend:cudaMallocAsync"
    try:
        import torch
    except ImportError as e:
        raise ScriptError(EXIT_NO_GPU, "PyTorch is not importable here (%s): this script runs the problem through "
                                       "your PyTorch >= 2.5 with CUDA" % e)
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())
    if version < (2, 5):
        raise ScriptError(EXIT_NO_GPU, "PyTorch %s is older than 2.5 (the math path's upcast and _safe_softmax)"
                          % torch.__version__)
    if not torch.cuda.is_available():  # no CUDA initialisation yet: the allocator can still change
        raise ScriptError(EXIT_NO_GPU, "PyTorch %s sees no usable CUDA device (torch.version.cuda=%s)"
                          % (torch.__version__, torch.version.cuda))
    return torch


def cuda_home():
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if candidate and os.path.isdir(os.path.join(candidate, "include")):
            return candidate
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return "/usr/local/cuda"


def build_helper_library():
    """scripts/torch_stages_alloc.cu as a shared library, built once per source and compiler and
    kept under ~/.cache/sdpa-repro (a temporary folder where that is not writable)."""
    source = b""
    for path in [ALLOCATOR_SOURCE] + ALLOCATOR_HEADERS:
        with open(path, "rb") as f:
            source += f.read()
    home = cuda_home()
    nvcc = shutil.which("nvcc") or (os.path.join(home, "bin", "nvcc") if os.path.exists(
        os.path.join(home, "bin", "nvcc")) else None)
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if nvcc:
        command = lambda out: [nvcc, "-shared", "-Xcompiler", "-fPIC", "-O2", "-I" + SOURCE_ROOT, "-o", out,
                               ALLOCATOR_SOURCE]
    elif cxx:
        lib = os.path.join(home, "lib64")
        command = lambda out: [cxx, "-x", "c++", "-std=c++17", "-shared", "-fPIC", "-O2",
                               "-I" + os.path.join(home, "include"), "-I" + SOURCE_ROOT, ALLOCATOR_SOURCE,
                               "-L" + lib, "-lcudart", "-Wl,-rpath," + lib, "-o", out]
    else:
        raise ScriptError(EXIT_USAGE, "--memory managed: no nvcc and no C++ compiler to build %s" % ALLOCATOR_SOURCE)
    key = hashlib.sha256(source + " ".join(command("OUT")).encode()).hexdigest()[:16]
    for folder in (os.path.join(os.path.expanduser("~"), ".cache", "sdpa-repro"), tempfile.gettempdir()):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        path = os.path.join(folder, "torch_stages_alloc-%s.so" % key)
        if os.path.exists(path):
            return path, None
        tmp = "%s.tmp.%d" % (path, os.getpid())
        cmd = command(tmp)
        try:
            result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        except OSError:
            continue
        if result.returncode != 0:
            raise ScriptError(EXIT_USAGE, "building the managed-memory allocator failed: %s: %s" % (
                " ".join(cmd), result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "exit %d"
                % result.returncode))
        os.replace(tmp, path)
        return path, " ".join(command(path))
    raise ScriptError(EXIT_USAGE, "--memory managed: no writable folder for the allocator library")


class Helper:
    """The helper library through ctypes (CDLL: the GIL is released during each call)."""

    def __init__(self, path):
        self.path = path
        lib = self.lib = ctypes.CDLL(path)
        lib.sdpa_concurrent_managed_access.argtypes = [ctypes.c_int]
        lib.sdpa_touch_pages.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        lib.sdpa_touch_pages.restype = ctypes.c_ulonglong
        lib.sdpa_host_min_max.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                          ctypes.POINTER(ctypes.c_double)]
        lib.sdpa_prefetch_to_device.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.sdpa_error_string.restype = ctypes.c_char_p
        lib.sdpa_managed_stats.argtypes = [ctypes.POINTER(ctypes.c_longlong)]

    def concurrent_managed_access(self, device):
        return self.lib.sdpa_concurrent_managed_access(device)

    def touch_pages(self, ptr, nbytes):
        return self.lib.sdpa_touch_pages(ptr, nbytes, TOUCH_PAGE_BYTES)

    def host_min_max(self, ptr, count, dtype):
        out = (ctypes.c_double * 2)()
        self.lib.sdpa_host_min_max(ptr, count, DTYPES[dtype].host_code, out)
        return out[0], out[1]

    def prefetch_to_device(self, ptr, nbytes, device, stream):
        error = self.lib.sdpa_prefetch_to_device(ptr, nbytes, device, stream)
        if error:
            raise RuntimeError("cudaMemPrefetchAsync: CUDA error %d (%s)" % (
                error, self.lib.sdpa_error_string(error).decode()))

    def stats(self):
        out = (ctypes.c_longlong * 5)()
        self.lib.sdpa_managed_stats(out)
        return dict(zip(("allocations", "frees", "live_bytes", "peak_bytes", "failed_allocations"), out))


def install_memory(torch, memory, notes):
    """Puts PyTorch on the memory asked for, before its first CUDA allocation (and before CUDA is
    initialised, since change_current_allocator refuses an allocator already in use)."""
    if memory != "managed":
        return None
    path, built = build_helper_library()
    if built:
        sys.stderr.write("%s: built the managed-memory allocator: %s\n" % (PROG, built))
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "sdpa_managed_malloc", "sdpa_managed_free")
    torch.cuda.memory.change_current_allocator(allocator)
    notes.append("memory: every PyTorch tensor is cudaMallocManaged memory (CUDAPluggableAllocator over %s)" % path)
    return Helper(path)


def device_info(torch, helper):
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    cma = helper.concurrent_managed_access(index) if helper else None
    return {"index": index, "name": props.name, "compute_capability": "%d.%d" % (props.major, props.minor),
            "sm_count": props.multi_processor_count, "total_memory_bytes": props.total_memory,
            "integrated": bool(getattr(props, "is_integrated", False)),
            "concurrent_managed_access": None if cma is None or cma < 0 else bool(cma),
            "torch_version": torch.__version__, "torch_cuda_version": torch.version.cuda}


class DeviceInputs:
    def __init__(self, q, k, k_buffer, v, mask, dout=None):
        # k_buffer: the storage K is a view of (a [B, S, H, E] tensor for --k-layout bshe)
        self.q, self.k, self.k_buffer, self.v, self.mask = q, k, k_buffer, v, mask
        self.dout = dout  # --backward's dO, in the input dtype

    def tensors(self):
        return [t for t in (self.q, self.k_buffer, self.v, self.mask, self.dout) if t is not None]


def upload(torch, p, s, host, device):
    np = numpy()
    dt = getattr(torch, DTYPES[p.dtype].torch_name)
    to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dt)  # exact: already rounded
    q, v = to(host.q), to(host.v)
    if s.k_layout == "bshe":
        # K as attention modules produce it: a [B, S, H, E] projection viewed as [B, H, S, E].
        k_buffer = to(host.k.transpose(0, 2, 1, 3))
        k = k_buffer.transpose(1, 2)
    else:
        k = k_buffer = to(host.k)
    mask = None
    if host.mask is not None:
        mask = torch.from_numpy(host.mask).to(device) if p.mask == "bool" else to(host.mask)
    dout = to(host.dout) if host.dout is not None else None
    return DeviceInputs(q, k, k_buffer, v, mask, dout)


def convert_boolean_attn_mask(torch, mask, dtype):
    """PyTorch's convert_boolean_attn_mask (attention.cpp): True attends, False becomes -inf."""
    return torch.where(mask.logical_not(), -math.inf, torch.scalar_tensor(0.0, dtype=dtype, device=mask.device))


def safe_softmax(torch, x):
    """at::_safe_softmax(x, -1) where this PyTorch has it, else its composite (attention.cpp):
    softmax, with rows that are -inf throughout set to zero instead of NaN."""
    op = getattr(torch.ops.aten, "_safe_softmax", None)
    if op is not None:
        return op(x, -1)
    out = torch.softmax(x, -1)
    masked_rows = (x == -math.inf).all(-1, keepdim=True)
    return torch.where(masked_rows, torch.zeros((), dtype=out.dtype, device=out.device), out)


def storage_span(t):
    """(address, bytes) of the memory a tensor views (its whole storage)."""
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class TorchBackend:
    """The stages on PyTorch: the operations of _scaled_dot_product_attention_math one by one
    (aten/src/ATen/native/transformers/attention.cpp), with the scenario conditions and fixes."""

    def __init__(self, torch, problem, settings, fixes, inputs, helper, device, stage_timeout_s, findings):
        self.t, self.p, self.s, self.fixes = torch, problem, settings, fixes
        self.inputs, self.helper, self.device = inputs, helper, device  # the device's index
        self.torch_device = torch.device("cuda", device)
        self.stage_timeout_s, self.findings = stage_timeout_s, findings
        self.note = None
        self.cdt = getattr(torch, DTYPES[problem.compute_dtype()].torch_name)
        self.dt = getattr(torch, DTYPES[problem.dtype].torch_name)
        self.path_stream = torch.cuda.current_stream()
        self.side_stream = torch.cuda.Stream() if settings.qk_gemm_stream == "aux" else None
        self.cma = helper.concurrent_managed_access(device) if helper else 0
        self.q_factor, self.k_factor = scale_factors(problem)
        self.softmax_op = "aten._safe_softmax" if hasattr(torch.ops.aten, "_safe_softmax") else "composite"
        self.toucher = None
        self.touch_log = []  # (passes, ms) of each call's host thread

    def stream_handle(self):
        return self.t.cuda.current_stream().cuda_stream

    def stall(self):
        """A kernel that spins on the stage's stream (torch.cuda._sleep), so that the stage's own
        work queues behind it and its synchronisation waits: bounded at the deadline plus ten
        seconds at up to 3 GHz."""
        cycles = int((self.stage_timeout_s + 10.0) * 3e9)
        for _ in range(0, cycles, 10 ** 9):
            self.t.cuda._sleep(10 ** 9)

    def synchronize(self):
        self.t.cuda.synchronize()

    def values(self, stage):
        """The fields the instrumentation printed at --log values, as its macros streamed them: min,
        max (floats, %.6g as std::ostream prints a float), isnan, isinf (bools, 0 or 1) of the
        scores after the GEMM, the sum of the probabilities after softmax (.item<float>())."""
        if stage == "qk_gemm":  # the scores before the mask
            x = self.scores
            return {"min": "%.6g" % float32(x.min().item()), "max": "%.6g" % float32(x.max().item()),
                    "isnan": ostream_bool(x.isnan().any().item()), "isinf": ostream_bool(x.isinf().any().item())}
        if stage == "softmax":
            return {"sum": "%.6g" % float32(self.attn.double().sum().item())}
        return {}

    def start_call(self):
        i = self.inputs
        self.q, self.k, self.v, self.mask = i.q, i.k, i.v, i.mask
        self.kt3 = None

    # --- the stages, in order
    def entry_sync(self):
        if self.s.entry_touch_streams > 0:
            self.page_fault_storm()
        else:
            self.t.cuda.synchronize()

    def mask_prepare(self):
        if self.p.mask == "causal":
            # Lower triangle of ones over L x S, in the dtype of the (upcast) query, as the math path builds it.
            ones = self.t.ones(self.p.q_len, self.p.kv_len, dtype=self.t.bool, device=self.torch_device).tril()
            self.mask = convert_boolean_attn_mask(self.t, ones, self.cdt)
        else:
            # scaled_dot_product_attention converts a boolean mask in the input dtype, before the math path.
            self.mask = convert_boolean_attn_mask(self.t, self.mask, self.dt)

    def upcast(self):
        self.q, self.k, self.v = self.q.to(self.t.float32), self.k.to(self.t.float32), self.v.to(self.t.float32)

    def scale_q(self):
        self.q = self.q * self.q_factor

    def gqa_expand(self):
        group = self.p.q_heads // self.p.kv_heads
        self.k = self.k.repeat_interleave(group, -3)
        self.v = self.v.repeat_interleave(group, -3)

    def scale_k(self):
        self.kt = self.k.transpose(-2, -1) * self.k_factor

    def kt_contiguous(self):
        p = self.p
        if self.s.kt_contiguous:  # fix 3: key.transpose(-2, -1).contiguous()
            self.kt = self.kt.contiguous()
            return
        # at::matmul folds the batch dimensions with a reshape, which copies a view it cannot fold.
        before = self.kt.data_ptr()
        self.kt3 = self.kt.reshape(p.batch * p.q_heads, p.head_dim, p.kv_len)
        if self.kt3.data_ptr() == before:
            self.findings.append("kt_contiguous: at::matmul's reshape of K^T returned a view, where the plan "
                                 "expected a copy")

    def order_gemm_after_producers(self, stage):
        side = self.side_stream
        if side is None:
            return
        ordered = self.s.qk_gemm_order == "event"
        if ordered:
            side.wait_stream(self.path_stream)  # an event recorded on the path's stream, waited on by the side one
        self.note(scenario1_note(side.cuda_stream, self.path_stream.cuda_stream, ordered, stage))

    def qk_gemm(self):
        """at::matmul(query, K^T) for 4-d operands: both reshaped to [B*H, ., .], at::bmm, a view back."""
        p, t = self.p, self.t
        bh = p.batch * p.q_heads
        q3 = self.q.reshape(bh, p.q_len, p.head_dim)
        kt3 = self.kt3
        if kt3 is None:
            kt3 = self.kt.reshape(bh, p.head_dim, p.kv_len)
            if kt3.data_ptr() != self.kt.data_ptr():
                self.findings.append("qk_gemm: at::matmul's reshape copied K^T inside the GEMM stage, where the plan "
                                     "expected a view")
        self.fix1("before")
        if self.side_stream is not None:
            with t.cuda.stream(self.side_stream):
                scores3 = t.bmm(q3, kt3)
            q3.record_stream(self.side_stream)
            kt3.record_stream(self.side_stream)
            scores3.record_stream(self.path_stream)
        else:
            scores3 = t.bmm(q3, kt3)
        self.fix1("after")
        self.q3, self.kt_operand = q3, kt3  # what bmm saves for its backward (--backward)
        self.scores = scores3.view(p.batch, p.q_heads, p.q_len, p.kv_len)
        self.attn = self.scores

    def order_path_after_gemm(self):
        if self.side_stream is not None and self.s.qk_gemm_order == "event":
            self.path_stream.wait_stream(self.side_stream)

    def fix1(self, when):
        if 1 in self.fixes:
            self.path_stream.synchronize()
            self.note(fix1_note(self.path_stream.cuda_stream, when))

    def mask_add(self):
        self.scores.add_(self.mask)

    def scores_to_host(self):
        """Scenario 2: the host touches the scores' pages once they are final: all of them before
        softmax, or from a thread that keeps reading them while softmax runs (where the device
        lets the host touch managed memory during kernels)."""
        self.path_stream.synchronize()
        if self.side_stream is not None:
            self.side_stream.synchronize()
        ptr, nbytes = self.scores.data_ptr(), self.scores.numel() * self.scores.element_size()
        if self.s.scores_host_phase == "during":
            if self.cma == 1:
                self.start_toucher(ptr, nbytes)
                self.note(scenario2_toucher_note(nbytes))
                return
            self.note(SCENARIO2_NOT_CONCURRENT)
        t0 = time.monotonic()
        lo, hi = self.helper.host_min_max(ptr, self.scores.numel(), self.p.compute_dtype())
        self.note(scenario2_read_note(nbytes, lo, hi, (time.monotonic() - t0) * 1e3))

    def start_toucher(self, ptr, nbytes):
        done = threading.Event()
        state = {"passes": 0, "ms": 0.0, "launched": None, "stop": False}

        def touch():
            t0 = time.monotonic()
            while not state["stop"]:
                self.helper.touch_pages(ptr, nbytes)  # ctypes: without the GIL
                state["passes"] += 1
                launched = state["launched"]
                if launched is not None and launched.query():
                    break
            state["ms"] = (time.monotonic() - t0) * 1e3
            done.set()

        self.toucher = (threading.Thread(target=touch, name="scores-toucher", daemon=True), state, done)
        self.toucher[0].start()

    def softmax(self):
        t = self.t
        if 2 in self.fixes:
            nbytes = self.scores.numel() * self.scores.element_size()
            if self.s.memory == "managed":
                self.helper.prefetch_to_device(self.scores.data_ptr(), nbytes, self.device,
                                               self.path_stream.cuda_stream)
            self.path_stream.synchronize()
            self.note(fix2_prefetch_note(nbytes, self.device, self.s.memory))
        self.attn = self.probs = safe_softmax(t, self.scores)
        if self.toucher is not None:
            event = t.cuda.Event()
            event.record(self.path_stream)
            self.toucher[1]["launched"] = event
        if 2 in self.fixes:
            t.cuda.synchronize()
            self.note(FIX2_AFTER)

    def dropout(self):
        # What F.dropout(attn, p, training=True) runs on a CUDA tensor (at::dropout's fused kernel),
        # called by its name so that the mask its backward reads is at hand.
        self.attn, self.dropout_mask = self.t.ops.aten.native_dropout(self.attn, self.p.dropout, True)

    def pv_gemm(self):
        self.fix1("before")
        self.out = self.t.matmul(self.attn, self.v)
        self.fix1("after")

    def cast_output(self):
        self.out = self.out.to(self.dt)

    def stream_sync(self):
        self.path_stream.synchronize()
        if self.side_stream is not None:
            self.side_stream.synchronize()
        if self.toucher is not None:
            thread, state, _ = self.toucher
            thread.join()
            self.toucher = None
            self.touch_log.append((state["passes"], state["ms"]))
            self.note(scenario2_touched_note(state["passes"], state["ms"]))

    # --- the backward call's stages (--backward), in autograd's order
    def start_backward(self):
        self.grad_out = self.inputs.dout

    def _bmm(self, a, b):
        """at::bmm on the Q.K^T GEMM's stream, as repro runs the backward's GEMMs (scenario 1)."""
        if self.side_stream is None:
            return self.t.bmm(a, b)
        with self.t.cuda.stream(self.side_stream):
            c = self.t.bmm(a, b)
        a.record_stream(self.side_stream)
        b.record_stream(self.side_stream)
        c.record_stream(self.path_stream)
        return c

    def grad_upcast(self):  # ToCopyBackward of the output's cast back: dO to fp32
        self.grad_out = self.grad_out.to(self.t.float32)

    def dp_gemm(self):  # BmmBackward of bmm(P, V) for P: dPd = dO . V^T
        p = self.p
        bh = p.batch * p.q_heads
        self.grad_out3 = self.grad_out.reshape(bh, p.q_len, p.head_dim)
        v3 = self.v.reshape(bh, p.kv_len, p.head_dim)
        self.grad_attn = self._bmm(self.grad_out3, v3.transpose(1, 2)).view(p.batch, p.q_heads, p.q_len, p.kv_len)
        self.grad_probs = self.grad_attn

    def dv_gemm(self):  # ...and for V: dV = Pd^T . dO (in the expanded heads)
        p = self.p
        pd3 = self.attn.reshape(p.batch * p.q_heads, p.q_len, p.kv_len)
        self.grad_value3 = self._bmm(pd3.transpose(1, 2), self.grad_out3)

    def dropout_backward(self):  # NativeDropoutBackward: dP = dPd . mask / (1 - p)
        self.grad_probs = self.t.ops.aten.native_dropout_backward(self.grad_attn, self.dropout_mask,
                                                                  1.0 / (1.0 - self.p.dropout))

    def grads_to_host(self):
        """Scenario 2 in the backward (conditions.cpp move_to_host): once they are final, the host
        reads every value of the probabilities and of dP, the operands of softmax's backward."""
        self.path_stream.synchronize()
        if self.s.scores_host_phase == "during":
            self.note(SCENARIO2_BACKWARD_BEFORE)
        for name, x in (("probs", self.probs), ("grad_probs", self.grad_probs)):
            t0 = time.monotonic()
            lo, hi = self.helper.host_min_max(x.data_ptr(), x.numel(), self.p.compute_dtype())
            self.note(scenario2_backward_read_note(name, x.numel() * x.element_size(), lo, hi,
                                                   (time.monotonic() - t0) * 1e3))

    def softmax_backward(self):  # _safe_softmax's backward: dS = P . (dP - sum(dP . P))
        t = self.t
        if 2 in self.fixes:
            if self.s.memory == "managed":
                for name, x in (("probs", self.probs), ("grad_probs", self.grad_probs)):
                    nbytes = x.numel() * x.element_size()
                    self.helper.prefetch_to_device(x.data_ptr(), nbytes, self.device, self.path_stream.cuda_stream)
                    self.note(fix2_backward_prefetch_note(name, nbytes, self.device))
            else:
                self.note(fix2_backward_skipped_note(self.s.memory))
            self.path_stream.synchronize()
            self.note(FIX2_BACKWARD_HOST_SYNC)
        self.grad_scores = t.ops.aten._softmax_backward_data(self.grad_probs, self.probs, -1, self.probs.dtype)
        if 2 in self.fixes:
            t.cuda.synchronize()
            self.note(FIX2_BACKWARD_DEVICE_SYNC)

    def dq_gemm(self):  # BmmBackward of bmm(Q, K^T) for Q: dQs = dS . (K^T)^T, the K^T operand the GEMM read
        p = self.p
        self.grad_scores3 = self.grad_scores.reshape(p.batch * p.q_heads, p.q_len, p.kv_len)
        self.grad_query3 = self._bmm(self.grad_scores3, self.kt_operand.transpose(1, 2))

    def dk_gemm(self):  # ...and for K^T: Q^T . dS
        self.grad_key_t3 = self._bmm(self.q3.transpose(1, 2), self.grad_scores3)

    def grad_inputs(self):
        """The sqrt(scale) multiplications' backward, K^T's transpose back, repeat_interleave's sum
        over each GQA group and the upcasts' casts back (ToCopyBackward)."""
        p = self.p
        group = p.q_heads // p.kv_heads
        dq = self.grad_query3.view(p.batch, p.q_heads, p.q_len, p.head_dim) * self.q_factor
        dk = (self.grad_key_t3.view(p.batch, p.q_heads, p.head_dim, p.kv_len) * self.k_factor).transpose(-2, -1)
        dv = self.grad_value3.view(p.batch, p.q_heads, p.kv_len, p.head_dim)
        if group > 1:
            dk = dk.reshape(p.batch, p.kv_heads, group, p.kv_len, p.head_dim).sum(2)
            dv = dv.reshape(p.batch, p.kv_heads, group, p.kv_len, p.head_dim).sum(2)
        self.grad_query, self.grad_key, self.grad_value = (x.to(self.dt) for x in (dq, dk, dv))

    def backward_sync(self):
        self.path_stream.synchronize()
        if self.side_stream is not None:
            self.side_stream.synchronize()

    def gradients(self):
        """dQ, dK, dV as float32 [B, H, len, E] arrays, as repro --save-output writes them."""
        return [(name, getattr(self, name).float().contiguous().cpu().numpy())
                for name in ("grad_query", "grad_key", "grad_value")]

    def stop(self):
        """After an error: a host thread still touching the scores stops."""
        if self.toucher is not None:
            self.toucher[1]["stop"] = True

    def page_fault_storm(self):
        """Scenario 4 (conditions.cpp enter_with_page_fault_storm): the host reads every page of
        every tensor alive at entry (the inputs: PyTorch allocates the rest inside the call), then
        N streams read every page at once (a strided byte view reduced by PyTorch's own kernel)
        while a host thread reads them again, then the entry synchronisation."""
        t = self.t
        spans = [storage_span(x) for x in self.inputs.tensors()]
        pages = sum(pages_of(n) for _, n in spans)
        host_ok, concurrent, words = scenario4_host_touch(self.s, self.cma)
        if self.s.entry_host_touch and not host_ok:
            self.note(scenario4_skipped_note(self.s))
        if host_ok:
            t0 = time.monotonic()
            for ptr, n in spans:
                self.helper.touch_pages(ptr, n)
            self.note(scenario4_host_read_note(pages, len(spans), (time.monotonic() - t0) * 1e3))
        sinks = []
        for _ in range(self.s.entry_touch_streams):
            stream = t.cuda.Stream()
            stream.wait_stream(self.path_stream)
            with t.cuda.stream(stream):
                for x in self.inputs.tensors():
                    raw = x.reshape(-1).view(t.uint8)  # every tensor alive at entry is contiguous
                    sinks.append(raw[::TOUCH_PAGE_BYTES].sum(dtype=t.int64))
        self.note(scenario4_storm_note(self.s.entry_touch_streams, pages, words))
        thread = None
        if concurrent:
            thread = threading.Thread(target=lambda: [self.helper.touch_pages(p_, n_) for p_, n_ in spans], daemon=True)
            thread.start()
        t.cuda.synchronize()
        if thread is not None:
            thread.join()

    def result(self, tensor_name):
        x = getattr(self, {"scores": "scores", "probs": "attn", "output": "out"}[tensor_name])
        return x.float().cpu().numpy()


class WholeCall(StagedCall):
    """--mode whole: F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.MATH), between the
    entry and end synchronisations of the staged call (and scenario 4's storm at entry)."""

    def run(self, step=1):
        be, p = self.backend, self.p
        if step > 1:
            self.log.write([layer_line(step)])
        be.start_call()
        self.run_stage("entry_sync")

        def call():
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.MATH):
                be.out = be.t.nn.functional.scaled_dot_product_attention(
                    be.q, be.k, be.v, attn_mask=be.mask, dropout_p=p.dropout, is_causal=p.mask == "causal",
                    scale=p.scale, enable_gqa=p.gqa())

        self.timed(SDPA_CALL, [debug_line("SDPA_DEBUG", "[TORCH_SDPA_CALL] F.scaled_dot_product_attention under "
                                                        "sdpa_kernel(SDPBackend.MATH)")], call,
                   lambda _, d: [debug_line("SDPA_DEBUG", "[TORCH_SDPA_CALL_DONE] issued")])
        self.run_stage("stream_sync")


# ------------------------------------------------------------------------------- the weights
# --mapped-weights (scenario 7): the model's weights loaded into GPU memory before the first call
# from a memory-mapped file, as a diffusers or transformers training script loads them (safetensors
# maps the files, `.to("cuda")` copies each tensor from the mapped pages), here through PyTorch
# itself: numpy.memmap of the file, each tensor's slice torch.from_numpy(...).to("cuda"). The file,
# the sizes and the stage's detail are repro's (math_sdpa/weights_load.cpp). On an integrated GPU
# (GB10) the page cache those copies fill and the GPU's allocations share one pool, and
# MemAvailable counts the cached pages as available: MemFree, Cached and RssFile say what it did.

def default_weights_file():
    """repro's default_weights_file: $SDPA_WEIGHTS_FILE, else $XDG_CACHE_HOME (or ~/.cache)/sdpa-repro/weights.bin."""
    if os.environ.get("SDPA_WEIGHTS_FILE"):
        return os.environ["SDPA_WEIGHTS_FILE"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME") or ".", ".cache")
    return os.path.join(cache, "sdpa-repro", "weights.bin")


def weights_tensors(total):
    """(bytes, offset) of each tensor the load copies: WEIGHTS_TENSOR_SIZES in turn, the last cut to what is left."""
    out, at = [], 0
    while at < total:
        n = min(WEIGHTS_TENSOR_SIZES[len(out) % len(WEIGHTS_TENSOR_SIZES)], total - at)
        out.append((n, at))
        at += n
    return out


def weights_detail(i, count, n, at):
    """A load stage's detail, as repro's: the tensor (from 1), its bytes and offset, how it is read."""
    return "tensor=%d/%d bytes=%d offset=%d io=mapped pages=keep" % (i + 1, count, n, at)


# The first 64 bytes of every weights file repro or this script makes (math_sdpa/weights_file.h):
# only a file that starts with them is ever written; any other is read as it is, or refused.
WEIGHTS_FILE_MARK = b"sdpa-repro weights: random bytes made by the harness, deletable\n"


def weights_file_route(file_option):
    """Which route named the weights file, for the messages (repro's weights_file_route)."""
    if file_option:
        return "--mapped-weights"
    return "$SDPA_WEIGHTS_FILE" if os.environ.get("SDPA_WEIGHTS_FILE") else "--mapped-weights (its default file)"


def weights_file_use(route, path, nbytes):
    """repro's weights_file_use: "make" (absent), "extend" (the harness's own, too small), "reuse" (its
    own, large enough) or "read" (anyone else's, large enough); a usage error where it cannot serve."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "make"
    except OSError as e:
        raise usage_error("%s: cannot read %s: %s" % (route, path, e.strerror or e))
    if not stat.S_ISREG(st.st_mode):
        raise usage_error("%s: %s is not a regular file" % (route, path))
    try:
        with open(path, "rb") as f:
            marked = f.read(len(WEIGHTS_FILE_MARK)) == WEIGHTS_FILE_MARK
    except OSError as e:
        raise usage_error("%s: cannot read %s: %s" % (route, path, e.strerror or e))
    if marked:
        return "reuse" if st.st_size >= nbytes else "extend"
    if st.st_size >= nbytes:
        return "read"
    raise usage_error("%s: %s holds %d bytes, fewer than the %d bytes asked for, and the harness did not make it, so "
                      "it is read, never written (name a larger file, a smaller size, or a file that does not exist "
                      "yet, which is made)" % (route, path, st.st_size, nbytes))


def ensure_weights_file(path, nbytes, route="--mapped-weights"):
    """repro's ensure_weights_file: the file at least `nbytes` long, written only if it is absent (made,
    the mark first) or starts with the mark (extended from its last page); a file of anyone else's is
    read as it is when large enough and refused otherwise, never written. Data that is not zeros (a
    file of zeros could be sparse, its pages never read from disk), synced, its pages dropped from the
    page cache. False when nothing was written."""
    folder = os.path.dirname(path)
    try:
        if folder:
            os.makedirs(folder, exist_ok=True)
        try:
            fd, at = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), 0
        except FileExistsError:
            fd = None
    except OSError as e:
        raise usage_error("%s: cannot create %s: %s" % (route, path, e.strerror or e))
    if fd is None:
        if weights_file_use(route, path, nbytes) != "extend":
            return False
        size = os.stat(path).st_size
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            raise usage_error("%s: cannot extend %s: %s" % (route, path, e.strerror or e))
        if os.pread(fd, len(WEIGHTS_FILE_MARK), 0) != WEIGHTS_FILE_MARK:
            os.close(fd)
            raise usage_error("%s: cannot extend %s: it changed while the run started" % (route, path))
        at = max(len(WEIGHTS_FILE_MARK), size // 4096 * 4096)  # its last partial page written again
    try:
        if at == 0:  # the mark first: a creation cut short leaves a file the next run extends
            os.pwrite(fd, WEIGHTS_FILE_MARK, 0)
            at = len(WEIGHTS_FILE_MARK)
        block = os.urandom(WEIGHTS_BLOCK)
        while at < nbytes:
            n = min(WEIGHTS_BLOCK, nbytes - at)
            wrote = os.pwrite(fd, block if n == WEIGHTS_BLOCK else block[:n], at)
            if wrote <= 0:
                raise OSError(0, "nothing written")
            at += wrote
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError as e:
        raise usage_error("%s: cannot write %s (%d bytes): %s (free some disk, or name a file on a larger "
                          "disk: SIZE:FILE)" % (route, path, nbytes, e.strerror or e))
    finally:
        os.close(fd)
    return True


def kib_field(text, key):
    """A "Key:   123 kB" line's value in bytes (/proc/meminfo, /proc/self/status); None where there is none."""
    for line in (text or "").splitlines():
        name, colon, rest = line.partition(":")
        if colon and name.strip() == key:
            words = rest.split()
            try:
                return int(words[0]) * (1024 if len(words) > 1 and words[1] == "kB" else 1)
            except (ValueError, IndexError):
                return None
    return None


def read_host_memory():
    """MemFree, MemAvailable, Cached (/proc/meminfo) and this process's RssFile (/proc/self/status), bytes;
    None where they cannot be read (math_sdpa/host_memory.h)."""
    texts = {}
    for name in ("/proc/meminfo", "/proc/self/status"):
        try:
            with open(name) as f:
                texts[name] = f.read()
        except OSError:
            texts[name] = None
    meminfo = texts["/proc/meminfo"]
    return {"mem_free": kib_field(meminfo, "MemFree"), "mem_available": kib_field(meminfo, "MemAvailable"),
            "cached": kib_field(meminfo, "Cached"), "rss_file": kib_field(texts["/proc/self/status"], "RssFile")}


def gigabytes(nbytes):
    return "unknown" if nbytes is None else "%.2f GB" % (nbytes / 1e9)


def host_memory_text(m):
    """As repro's host_memory_text: "MemFree 38.20 GB, MemAvailable 98.10 GB, Cached 60.00 GB, RssFile 0.00 GB"."""
    return "MemFree %s, MemAvailable %s, Cached %s, RssFile %s" % (
        gigabytes(m["mem_free"]), gigabytes(m["mem_available"]), gigabytes(m["cached"]), gigabytes(m["rss_file"]))


def weights_summary(w):
    """The load's lines, as repro's result text writes them (repro/run/run_text.cpp)."""
    def change(key):
        a, b = w["before"][key], w["after"][key]
        return "unknown" if a is None or b is None else "%+.2f GB" % ((b - a) / 1e9)

    return ["# weights loaded: %s in %d tensors from %s%s, io mapped, pages keep, mapping %s: %.2f s, %.2f GB/s"
            % (gigabytes(w["bytes"]), w["tensors"], w["file"], " (written first)" if w["created"] else "", w["mapping"],
               w["seconds"], w["gb_per_s"]),
            "#   before: " + host_memory_text(w["before"]),
            "#   after:  " + host_memory_text(w["after"]),
            "#   change: Cached %s, MemFree %s, MemAvailable %s, RssFile %s" % (
                change("cached"), change("mem_free"), change("mem_available"), change("rss_file"))]


def load_weights(torch, o, call, run):
    """The load through PyTorch: the file made if missing, its pages dropped, mapped copy-on-write
    (numpy.memmap mode "c": MAP_PRIVATE, as repro maps it), each tensor's slice copied with
    .to("cuda") into a tensor kept for the run (the model's weights), synchronised, a stage each;
    then the mapping dropped (--weights-mapping unmap) or kept. Returns the JSON's weights_load."""
    s, np = o.settings, numpy()
    path = s.weights_file or default_weights_file()
    created = ensure_weights_file(path, s.mapped_weights, weights_file_route(s.weights_file))
    try:
        fd = os.open(path, os.O_RDONLY)
        try:  # from what a fresh boot has: the file's pages are the load's to bring in
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        mapping = [np.memmap(path, dtype=np.uint8, mode="c", shape=(s.mapped_weights,))]  # [] once unmapped
    except (OSError, ValueError) as e:
        raise usage_error("--mapped-weights: cannot map %s: %s" % (path, getattr(e, "strerror", None) or e))
    tensors = weights_tensors(s.mapped_weights)
    device = torch.device("cuda", torch.cuda.current_device())
    kept = []

    def copy_tensor(n, at):
        kept.append(torch.from_numpy(mapping[0][at:at + n]).to(device))
        torch.cuda.synchronize(device)

    before = read_host_memory()
    start = time.monotonic()
    call.run_load(o.weights_stage, tensors, copy_tensor)
    seconds = time.monotonic() - start
    run.weights = kept  # on the GPU until the run ends
    if s.weights_mapping == "keep":
        run.weights_mapping = mapping[0]  # the process holds the mapping until it ends
    mapping.clear()  # unmap: numpy's memmap goes with its last reference (the slices went with their copies)
    return {"file": path, "created": created, "bytes": s.mapped_weights, "tensors": len(tensors), "seconds": seconds,
            "gb_per_s": s.mapped_weights / 1e9 / seconds if seconds > 0 else 0.0, "io": "mapped", "pages": "keep",
            "mapping": s.weights_mapping, "before": before, "after": read_host_memory(),
            "how": "numpy.memmap(mode='c') of the file; each tensor torch.from_numpy(slice).to('cuda'), synchronised"}


# ----------------------------------------------------------------------------------- the result
def quantile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))]


def stage_summaries(timings, order):
    out = []
    for name in order:
        values = sorted(timings.get(name, []))
        if values:
            out.append({"stage": name, "calls": len(values), "median_ms": statistics.median(values),
                        "p10_ms": quantile(values, 0.1), "p90_ms": quantile(values, 0.9), "clock": "host"})
    return out


class Run:
    """What the JSON reports (repro/run/run_json.cpp's shape, where its fields apply)."""

    def __init__(self, o):
        self.o = o
        self.started = time.monotonic()
        self.device = None
        self.outcome_code = EXIT_PASS
        self.error = None
        self.error_stage = None
        self.watchdog = None
        self.timings = {}
        self.call_ms = []
        self.iterations_done = 0
        self.result_stats = None
        self.nonfinite = 0
        self.gradient_stats = None  # --backward: dQ, dK, dV's
        self.nonfinite_gradients = 0
        self.notes = []
        self.findings = []
        self.inputs_source = None
        self.torch = None
        self.weights_load = None     # --mapped-weights: what the load did (the JSON's weights_load)
        self.weights = None          # ...the GPU copies, kept for the run
        self.weights_mapping = None  # ...and the mapping, with --weights-mapping keep

    def to_json(self):
        o, a = self.o, self.o.args
        order = LOAD_STAGES + (WHOLE_STAGES if a.mode == "whole" else ALL_STAGES)
        calls = sorted(self.call_ms)
        return {
            "meta": {"format_version": 1, "harness": "sdpa-repro", "tool": LOG_FILE_NAME,
                     "command_line": [PROG] + o.argv,
                     "python": sys.version.split()[0]},
            "device": self.device,
            "config": {"scenario": o.scenario, "workload": o.workload, "problem": o.problem.to_json(),
                       "fix": "on" if o.own_fix else "off",
                       "fixes": [{"number": n, "name": FIX_NAMES[n]} for n in o.fixes],
                       "fix_list": ",".join(str(n) for n in o.fixes) or "none",
                       "conditions": o.conditions.fields(), "settings": o.settings.fields(),
                       "alloc": ALLOC_OF_MEMORY[o.settings.memory], "memory": o.settings.memory,
                       "mode": a.mode, "iters": a.iters, "log": a.log, "log_format": a.log_format,
                       "stage_timeout_s": a.stage_timeout, "inject": "hang:" + o.inject if o.inject else "none",
                       "inputs": a.inputs, "dry_run": a.dry_run, "backward": o.settings.backward,
                       "mapped_weights": o.settings.mapped_weights,
                       "weights_file": (o.settings.weights_file or default_weights_file()) if o.settings.mapped_weights
                       else None, "weights_mapping": o.settings.weights_mapping},
            "outcome": OUTCOMES[self.outcome_code], "exit_code": self.outcome_code,
            "error": self.error, "error_stage": self.error_stage,
            "result_tensor": "output" if a.mode == "whole" else result_tensor_of(o.settings),
            "result_stats": self.result_stats, "nonfinite_outputs": self.nonfinite,
            "gradient_stats": self.gradient_stats, "nonfinite_gradients": self.nonfinite_gradients,
            "iterations_done": self.iterations_done,
            "timing": {"call_median_ms": statistics.median(calls) if calls else None,
                       "call_p10_ms": quantile(calls, 0.1) if calls else None,
                       "call_p90_ms": quantile(calls, 0.9) if calls else None,
                       "first_call_ms": self.call_ms[0] if calls else None},
            "stages": stage_summaries(self.timings, order),
            "weights_load": self.weights_load,
            "wall_seconds": time.monotonic() - self.started,
            "watchdog": self.watchdog,
            "inputs_source": self.inputs_source,
            "torch": self.torch,
            "notes": self.notes + self.findings,
        }

    def write(self):
        if self.o.args.json:
            write_json_atomically(self.o.args.json, self.to_json())


def run_dry(o, run, log, watchdog):
    """--dry-run: one call's lines (or --iters calls), nothing computed."""
    p, s = o.problem, o.settings
    run.notes.append("dry run: no PyTorch, nothing computed; the lines are those of one call of this problem")
    backend = DryBackend(p, s, o.fixes, o.args.stage_timeout)
    if s.mapped_weights:  # the load's lines before the first call; nothing read, nothing copied
        tensors = weights_tensors(s.mapped_weights)
        run.notes.append("dry run: the weights' load (%d bytes, %d tensors) was not made, only its lines written"
                         % (s.mapped_weights, len(tensors)))
        StagedCall(p, s, o.args.log, log, backend, watchdog, o.inject, run.timings).run_load(
            o.weights_stage, tensors, lambda n, at: None)
    for _ in range(o.args.iters):
        t0 = time.monotonic()
        StagedCall(p, s, o.args.log, log, backend, watchdog, o.inject, run.timings).run(run.iterations_done + 1)
        run.call_ms.append((time.monotonic() - t0) * 1e3)
        run.iterations_done += 1


def describe_memory(o, helper, device):
    memory = o.settings.memory
    if memory == "managed":
        return "allocator=CUDAPluggableAllocator(cudaMallocManaged) library=%s concurrentManagedAccess=%d" % (
            helper.path, helper.concurrent_managed_access(device))
    if memory == "async":
        return "allocator=cudaMallocAsync (PYTORCH_CUDA_ALLOC_CONF=%s)" % os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    return "allocator=caching (cudaMalloc)"


def host_notes(o, helper, device):
    """What the host did, per condition, for the JSON."""
    s, notes = o.settings, []
    if s.scores_to_host == "read" and stage_runs("scores_to_host", o.problem, s):
        if s.scores_host_phase == "during" and helper.concurrent_managed_access(device) == 1:
            notes.append("scenario 2: once the scores were final, a host thread read one byte of every 4 KiB page of "
                         "them (through the helper library, without the GIL), pass after pass, until the softmax "
                         "kernel had finished")
        else:
            notes.append("scenario 2: before softmax the host read every score (min and max) from the managed pages")
    if s.entry_touch_streams > 0:
        host_ok, concurrent, _ = scenario4_host_touch(s, helper.concurrent_managed_access(device) if helper else 0)
        notes.append("scenario 4: at entry %s%d side streams read a byte of every page of the input tensors (the only "
                     "tensors alive then: PyTorch allocates the others inside the call) with a PyTorch reduction over "
                     "a strided byte view%s" % (
                         "the host read every page of them first, then " if host_ok else "", s.entry_touch_streams,
                         ", while a host thread read them again" if concurrent else ""))
    if s.qk_gemm_stream == "aux":
        notes.append("scenario 1: the Q.K^T bmm ran on a side torch.cuda.Stream (repro's --gemm-stream aux), %s" % (
            "ordered after the path's stream by an event (wait_stream) and the path after it"
            if s.qk_gemm_order == "event" else "NOT ordered after the path's stream (a deliberate race)"))
    if o.scenario == 3:
        notes.append("scenario 3: K^T reaches at::bmm as a strided view, as repro --gemm-api strided (repro's "
                     "scenario 3 defaults to the pointer-array cublasGemmBatchedEx, which PyTorch does not call)")
    if o.problem.dropout > 0:
        notes.append("dropout: PyTorch's own generator, seeded with torch.manual_seed(%d); its mask differs from "
                     "repro's Philox stream, so the outputs are not comparable" % o.problem.seed)
    if s.mapped_weights:
        notes.append("weights: %d bytes loaded before the first call from %s, memory-mapped (numpy.memmap, "
                     "copy-on-write), in %d tensors, each copied with .to('cuda') from the mapped pages (a pageable "
                     "copy into %s memory) and kept on the GPU for the run; the mapping then %s" % (
                         s.mapped_weights, s.weights_file or default_weights_file(), len(weights_tensors(s.mapped_weights)),
                         ALLOC_OF_MEMORY[s.memory], "dropped" if s.weights_mapping == "unmap" else "kept"))
    if s.backward:
        notes.append("backward: after each call its backward as autograd runs it through the math path, one op a stage "
                     "(ToCopyBackward, bmm's gradients, native_dropout_backward, _softmax_backward_data, bmm's "
                     "gradients, the scales, the GQA sums and the casts back), for dO %s" % (
                         "from dout.npy" if o.args.inputs and os.path.exists(os.path.join(o.args.inputs, "dout.npy"))
                         else "made as repro --backward makes layer 1's (make_grad_output: the input generator, seed "
                              "%d xor 0x%X), bit for bit" % (o.problem.seed, GRAD_OUTPUT_SEED_MIX)))
    return notes


def run_torch(o, run, log, watchdog):
    a, s = o.args, o.settings
    if o.waiver:
        raise ScriptError(EXIT_WAIVED, o.waiver)
    torch = import_torch(s.memory)
    helper = install_memory(torch, s.memory, run.notes)
    if s.memory == "async" and torch.cuda.memory.get_allocator_backend() != "cudaMallocAsync":
        raise ScriptError(EXIT_USAGE, "--memory async: PyTorch's allocator backend is %s, not cudaMallocAsync"
                          % torch.cuda.memory.get_allocator_backend())
    device = torch.cuda.current_device()
    run.device = device_info(torch, helper)
    native = o.problem.precision == "native" and o.problem.dtype != "fp32"
    reduction_flag = getattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
    if a.mode == "whole":
        if reduction_flag is None and native:
            raise usage_error("--precision native: this PyTorch (%s) has no "
                              "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp" % torch.__version__)
        if reduction_flag is not None:
            reduction_flag(native)
    torch.manual_seed(o.problem.seed)

    p = o.problem
    host = load_npy_inputs(a.inputs, p, a.dtype is not None, s.backward) if a.inputs else make_random_inputs(p)
    if a.inputs:
        check_inject(o)
    if s.backward and host.dout is None:
        host.dout = make_grad_output(p)
    run.inputs_source = host.source
    inputs = upload(torch, p, s, host, torch.device("cuda", device))
    run.notes.extend(host_notes(o, helper, device))
    backend = TorchBackend(torch, p, s, o.fixes, inputs, helper, device, a.stage_timeout, run.findings)
    run.torch = {"version": torch.__version__, "cuda": torch.version.cuda, "softmax": backend.softmax_op,
                 "allocator_backend": torch.cuda.memory.get_allocator_backend() if s.memory != "managed"
                 else "pluggable"}
    check_strides(torch, p, s, inputs, run.findings)
    log.write([memory_line(s.memory, describe_memory(o, helper, device))])
    for name, x in (("query", inputs.q), ("key", inputs.k_buffer), ("value", inputs.v), ("attn_mask", inputs.mask),
                    ("grad_output", inputs.dout)):
        if x is not None:
            ptr, nbytes = storage_span(x)
            if log.extras:  # made before the call: the instrumentation's malloc lines are the call's own
                log.write(allocation_lines(nbytes, ptr, s.memory == "managed"))
    call = (WholeCall if a.mode == "whole" else StagedCall)(p, s, a.log, log, backend, watchdog, o.inject, run.timings)
    try:
        if s.mapped_weights:  # the model's weights before its first call, as repro loads them
            run.weights_load = load_weights(torch, o, call, run)
            for line in weights_summary(run.weights_load):
                print(line)
            sys.stdout.flush()
        for _ in range(a.iters):
            t0 = time.monotonic()
            call.run(run.iterations_done + 1)
            run.call_ms.append((time.monotonic() - t0) * 1e3)
            run.iterations_done += 1
    except RuntimeError as e:  # PyTorch's CUDA and cuBLAS errors
        backend.stop()
        stage = watchdog.stage
        watchdog.disarm()
        raise ScriptError(EXIT_CUDA_ERROR, "%s%s" % ("in stage %s: " % stage if stage else "",
                                                     (str(e).strip().splitlines() or [type(e).__name__])[0]), stage)
    result = backend.result("output" if a.mode == "whole" else result_tensor_of(s))
    finite = numpy().isfinite(result)
    run.nonfinite = int(result.size - finite.sum())
    values = result[finite].astype(numpy().float64)
    run.result_stats = {"elements": int(result.size), "l2": float(math.sqrt(float((values * values).sum()))),
                        "sum": float(values.sum())}
    gradients = backend.gradients() if s.backward else []
    if gradients:
        run.gradient_stats = {}
        for name, g in gradients:
            finite = numpy().isfinite(g)
            run.nonfinite_gradients += int(g.size - finite.sum())
            values = g[finite].astype(numpy().float64)
            run.gradient_stats[name] = {"elements": int(g.size), "l2": float(math.sqrt(float((values * values).sum()))),
                                        "sum": float(values.sum())}
    if helper is not None:
        run.torch["managed_allocator"] = helper.stats()
    if a.save_output:
        write_npy_atomically(a.save_output, result)
        # As repro --backward --save-output FILE.npy: FILE.grad_query.npy, FILE.grad_key.npy, FILE.grad_value.npy.
        stem = a.save_output[:-4] if len(a.save_output) > 4 and a.save_output.endswith(".npy") else a.save_output
        for name, g in gradients:
            write_npy_atomically("%s.%s.npy" % (stem, name), g)
    if run.nonfinite:
        raise ScriptError(EXIT_MISMATCH, "%d non-finite values in the %s tensor" % (
            run.nonfinite, run.to_json()["result_tensor"]))
    if run.nonfinite_gradients:
        raise ScriptError(EXIT_MISMATCH, "%d non-finite values in the input gradients" % run.nonfinite_gradients)


def check_strides(torch, p, s, inputs, findings):
    """The strides the log prints (repro's formulas) against the tensors PyTorch really has."""
    k_expected = key_strides(p, s)
    if list(inputs.k.stride()) != k_expected:
        findings.append("K strides: PyTorch has %s, the log prints repro's %s" % (list(inputs.k.stride()), k_expected))
    if p.kv_heads == p.q_heads:
        kt = list(inputs.k.transpose(-2, -1).stride())
        if kt != key_t_strides(p, s):
            findings.append("K^T strides: PyTorch has %s, the log prints repro's %s" % (kt, key_t_strides(p, s)))


def summary_line(run):
    j = run.to_json()
    stats = j["result_stats"]
    text = "%s: %s (exit %d)" % (PROG, j["outcome"], j["exit_code"])
    if j["error"]:
        text += ": " + j["error"]
    if stats:
        text += "; %s l2=%.6g sum=%.6g elements=%d" % (j["result_tensor"], stats["l2"], stats["sum"], stats["elements"])
    if j["gradient_stats"]:
        g = j["gradient_stats"]
        text += "; gradients l2 dQ=%.6g dK=%.6g dV=%.6g" % (g["grad_query"]["l2"], g["grad_key"]["l2"], g["grad_value"]["l2"])
    if j["weights_load"]:
        w = j["weights_load"]
        text += "; weights %.2f GB in %d tensors, %.2f GB/s" % (w["bytes"] / 1e9, w["tensors"], w["gb_per_s"])
    if j["timing"]["call_median_ms"] is not None and not run.o.args.dry_run:
        text += "; call median %.3f ms over %d call(s)" % (j["timing"]["call_median_ms"], j["iterations_done"])
    return text


def main(argv):
    try:
        o = parse_command_line(argv)
    except ScriptError as e:
        sys.stderr.write("%s: error: %s\n" % (PROG, e))
        return e.exit_code
    run = Run(o)
    log = DebugLog(o.args.log != "off", extras=o.args.log_extras)

    def on_hang(stage, running, message):
        run.outcome_code, run.error, run.error_stage = EXIT_HANG, message, stage
        run.watchdog = {"kind": "hang", "stage": stage, "running_seconds": running, "message": message,
                        "stage_timeout_s": o.args.stage_timeout, "python_stacks": "dumped to stderr by faulthandler"}
        run.write()

    watchdog = Watchdog(o.args.stage_timeout, on_hang)
    try:
        if o.args.dry_run:
            if o.args.inputs:
                load_npy_inputs(o.args.inputs, o.problem, o.args.dtype is not None, o.settings.backward)
                check_inject(o)
            run_dry(o, run, log, watchdog)
        else:
            run_torch(o, run, log, watchdog)
    except ScriptError as e:
        run.outcome_code, run.error, run.error_stage = e.exit_code, str(e), e.stage
        sys.stderr.write("%s: error: %s\n" % (PROG, e))
    watchdog.disarm()
    run.write()
    print(summary_line(run))
    return run.outcome_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
