#!/usr/bin/env python3
"""torch_stages.py: a run of repro's call plan through your own PyTorch, one stage at a time.

Optional helper (PyTorch >= 2.5 with CUDA; the harness itself has no Python). The path is not
described here: the harness's call plan is (math_sdpa/call_plan.h, `repro --plan --json FILE`),
and this script only maps each of its steps' operations to PyTorch's (docs/TORCH_STAGES.md):

    python3 scripts/torch_stages.py --plan plan.json --inputs inputs/  # a plan and repro --save-inputs
    python3 scripts/torch_stages.py --backward --layers 2 -L 256      # repro's run options: the script
                                                                       # asks --repro (build/repro) for the plan

stages mode (default): every step of the plan in its order (the layers, the iterations, the
  backward calls last layer first, a CUDA graph's capture and replays), each operation as PyTorch's
  math path runs it (.to, the scalings, repeat_interleave, at::matmul, add_, _safe_softmax,
  native_dropout, the backward nodes' ops), with the log lines of `repro --log-format sdpa-debug`
  (docs/LOG_FORMAT.md) around each stage, so that scripts/compare_logs.py diffs the two logs;
whole mode (--mode whole): F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.MATH)
  between the entry and end synchronisations, for the plain symptom.

A condition PyTorch cannot express is said once on stderr ("cannot express in PyTorch: ...") and in
the JSON's notes, and the rest runs. Memory (--memory, by default the plan's): PyTorch's caching
allocator, its cudaMallocAsync backend, or managed memory through CUDAPluggableAllocator and
scripts/torch_stages_alloc.cu (built at first use). A watchdog thread names a stage that overruns
--stage-timeout, dumps the Python stacks, writes the JSON and exits 3. Exit codes are repro's
(math_sdpa/errors.h): 0 pass, 1 non-finite result, 2 usage, 3 hang, 4 CUDA error, 7 no PyTorch with
CUDA. --dry-run writes the log lines of the plan without PyTorch.
"""
import argparse
import atexit
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

LOG_FILE_NAME = "scripts/torch_stages.py"  # how the log's [file:line] names this file
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(HERE)
ALLOCATOR_SOURCE = os.path.join(HERE, "torch_stages_alloc.cu")
ALLOCATOR_HEADERS = [os.path.join(SOURCE_ROOT, "math_sdpa", name) for name in ("bf16_bits.h", "fp16_bits.h")]
PROG = "torch_stages.py"
PLAN_FORMAT, PLAN_VERSION = "sdpa-repro call plan", 1

EXIT_PASS, EXIT_MISMATCH, EXIT_USAGE, EXIT_HANG, EXIT_CUDA_ERROR, EXIT_NO_GPU = 0, 1, 2, 3, 4, 7
OUTCOMES = {EXIT_PASS: "pass", EXIT_MISMATCH: "mismatch", EXIT_USAGE: "usage", EXIT_HANG: "hang",
            EXIT_CUDA_ERROR: "cuda_error", EXIT_NO_GPU: "no_gpu"}


class ScriptError(Exception):
    """Every failure of the script: one line, an exit code, the stage it happened in (if any)."""

    def __init__(self, exit_code, message, stage=None):
        super().__init__(message)
        self.exit_code, self.stage = exit_code, stage


def usage_error(message):
    return ScriptError(EXIT_USAGE, message)


# ------------------------------------------------------------------------------------ the stage table
# Every fact about a stage (its name, kind, when it runs, its log lines) is a row of the harness's
# stage table (math_sdpa/stage.cpp); stages.json beside this script is its copy (`repro help stages
# --json`). The script names no stage: the plan says which run, the table what they write.
STAGE_TABLE = os.path.join(HERE, "stages.json")


def load_stage_table(path):
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


def stages_when(when):
    """The table's stages of a part of the run ("load": the weights' copies; "graph": a CUDA graph's
    capture, instantiation and replay, in that order), which the harness runs around the plan's steps."""
    return [row["name"] for row in TABLE if row["when"] == when]


DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
HOST_CODES = {"fp32": 0, "bf16": 1, "fp16": 2}  # torch_stages_alloc.cu sdpa_host_min_max's codes
TYPE_META_NAMES = {"bf16": "c10::BFloat16", "fp16": "c10::Half", "fp32": "float"}  # caffe2::TypeMeta's <<
MEMORIES = ("caching", "managed", "async")
MEMORY_OF_ALLOC = {"device": "caching", "managed": "managed", "async": "async"}  # repro's --alloc words
ALLOC_OF_MEMORY = {v: k for k, v in MEMORY_OF_ALLOC.items()}
LOG_LEVELS = ("off", "stages", "sync", "values")
MODES = ("stages", "whole")
TOUCH_PAGE_BYTES = 4096  # math_sdpa/kernels.h kTouchPageBytes
MIB = 1 << 20
# The weights' load (math_sdpa/weights_load.cpp): the sizes it copies in turn, a Qwen-Image block's
# weights in bf16 (attention's four 3072 x 3072 projections, the MLP's pair).
WEIGHTS_TENSOR_SIZES = (18 * MIB, 18 * MIB, 18 * MIB, 18 * MIB, 72 * MIB, 72 * MIB)
WEIGHTS_BLOCK = 8 * MIB
# The first 64 bytes of every weights file the harness makes (math_sdpa/weights_file.h): only a file
# that starts with them is ever written; any other is read as it is, or refused.
WEIGHTS_FILE_MARK = b"sdpa-repro weights: random bytes made by the harness, deletable\n"


# -------------------------------------------------------------------------------------- the plan
class Plan:
    """`repro --plan --json`'s plan (repro/run/plan_json.cpp): the problem, the settings, how the calls
    repeat, the tensor table and each call's steps, each {stage, detail, stream, ops} or {ops}."""

    PARTS = ("entry", "forward_gpu", "free_call", "stream_sync", "backward_gpu", "backward_sync", "free_step")

    def __init__(self, j, source):
        try:
            if j["meta"]["format"] != PLAN_FORMAT or j["meta"]["version"] != PLAN_VERSION:
                raise ValueError("it is %s version %s, where this script reads %s version %d" % (
                    j["meta"]["format"], j["meta"]["version"], PLAN_FORMAT, PLAN_VERSION))
            self.p, self.s, self.run, self.context = j["problem"], j["settings"], j["run"], j["context"]
            self.tensors = {t["tensor"]: t for t in j["tensors"]}
            self.calls = {part: j["calls"][part] for part in self.PARTS}
            self.chunks = j["calls"]["chunks"]
            for step in self.all_steps():
                if "stage" in step and step["stage"] not in ROWS:
                    raise ValueError("its step %s is not a stage of %s" % (step["stage"], STAGE_TABLE))
                for op in step["ops"]:
                    if op["op"] not in KNOWN_OPS:
                        raise ValueError("its operation '%s' is not one this script maps to PyTorch" % op["op"])
        except (KeyError, TypeError, ValueError) as e:
            raise usage_error("the plan %s cannot be run: %s" % (source, e if isinstance(e, ValueError) else
                                                                  "it has no %s" % e))
        self.j, self.source = j, source

    def all_steps(self):
        return [step for part in self.PARTS for step in self.calls[part]]

    def ops(self, kind, parts=PARTS):
        return [op for part in parts for step in self.calls[part] for op in step["ops"] if op["op"] == kind]

    def staged(self, part):
        return [s for s in self.calls[part] if "stage" in s and s["ops"]]

    def stages(self):
        """Every stage a run of this plan writes, in the table's order (a graph's replay holds the GPU steps)."""
        graph = self.run["graph"]
        parts = [p for p in self.PARTS if not (graph and p in ("forward_gpu", "backward_gpu", "backward_sync")) and
                 (self.run["backward"] or not p.startswith("backward"))]
        names = {s["stage"] for part in parts for s in self.staged(part)}
        if graph:
            names.update(stages_when("graph"))
        if self.weights_bytes():
            names.update(stages_when("load"))
        return [row["name"] for row in TABLE if row["name"] in names]

    def gemm_operands(self, op):
        """A GEMM's A, B and C. A pointer-array GEMM names its arrays, not their tensors: those are the
        plan's pointer_arrays op's, which a plan of one layer allocated up front does not have (its arrays
        are written once, before the calls, for the tensors the strided call reads: call_plan.cpp)."""
        if not op["call"]["pointer_array"]:
            return op
        given = (self.ops("pointer_arrays") or [None])[0] or {
            "kt": {"tensor": "key_transposed" if self.ops("transpose_heads") else "key_scaled"},
            "q": {"tensor": "query_scaled"}, "scores": {"tensor": "scores"}}
        ref = lambda r: {"tensor": r["tensor"], "chunk": r.get("chunk", 0), "byte": r.get("byte", 0)}
        return dict(op, a=ref(given["kt"]), b=ref(given["q"]), c=ref(given["scores"]))

    def weights_bytes(self):
        return int(self.s.get("mapped_weights", "0"))

    def result(self):
        """The tensor the forward call ends with (the last one its operations write), and the input
        gradients of the backward call (what its group sums write)."""
        out = None
        for op in [op for step in self.calls["forward_gpu"] for op in step["ops"]]:
            op = self.gemm_operands(op) if op["op"] == "gemm" else op
            for field in ("c", "out", "dst"):
                if isinstance(op.get(field), dict):
                    out = op[field]["tensor"]
        return out, [op["dst"]["tensor"] for op in self.ops("sum_head_groups", ("backward_gpu",))]


def load_plan(path):
    try:
        with open(path) as f:
            return Plan(json.load(f), path)
    except OSError as e:
        raise usage_error("--plan %s: %s" % (path, e.strerror))
    except ValueError as e:
        raise usage_error("--plan %s: not JSON (%s)" % (path, str(e).splitlines()[0]))


def default_repro():
    for folder in ("build", "build-ci"):
        path = os.path.join(SOURCE_ROOT, folder, "repro")
        if os.access(path, os.X_OK):
            return path
    return os.path.join(SOURCE_ROOT, "build", "repro")


def plan_from_repro(binary, run_args, want_inputs):
    """`repro RUN_OPTIONS --plan --json FILE` (no GPU needed), with `--save-inputs DIR` where inputs are
    wanted: (the plan, the folder of the harness's inputs or None, why there are none). A repro that
    refuses --save-inputs is asked again without it."""
    tmp = tempfile.mkdtemp(prefix="torch_stages-")
    atexit.register(shutil.rmtree, tmp, True)
    plan_path, saved = os.path.join(tmp, "plan.json"), os.path.join(tmp, "inputs")
    command = [binary] + run_args + ["--plan", "--json", plan_path]
    why = None
    for cmd in ([command + ["--save-inputs", saved]] if want_inputs else []) + [command]:
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        except OSError as e:
            raise usage_error("--repro %s: %s (build it, or name it with --repro)" % (binary, e.strerror))
        last = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        if r.returncode != 0:
            why = "repro refused --save-inputs: " + last
            continue
        plan = load_plan(plan_path)
        plan.command = cmd
        if os.path.exists(os.path.join(saved, "layer1.q.npy")):
            return plan, saved, None
        return plan, None, why or (want_inputs and "repro --save-inputs wrote none")
    raise usage_error("%s --plan: %s" % (os.path.basename(binary), last))


# ------------------------------------------------------------------------------------ the sdpa-debug log
# The lines of `repro --log-format sdpa-debug` (math_sdpa/stage_log.cpp), to the character. A line is
# (channel, message, file, line): a stage's lines are the table's, rendered from its templates and
# ending with the table's [file:line]; the script's own lines name the line of this file that made them.
CHANNELS = {"sdpa": "SDPA_DEBUG", "alloc": "ALLOC_DEBUG", "cuda": "CUDA_DEBUG", "event": "CUDA_EVENT"}
# The instrumentation's own tags and events (stage_log.cpp is_instrumentation_line): without
# --log-extras only these are written, as the instrumented PyTorch printed nothing else.
INSTRUMENTATION_TAGS = {"SDPA_ENTRY", "BACKEND_SELECT", "MATH_SDPA_START", "MATH_QK", "CUBLAS_GEMM_START",
                        "CUBLAS_GEMM_DONE", "MATH_QK_DONE", "MATH_MASK", "MATH_MASK_DONE", "MATH_SOFTMAX_START",
                        "MATH_SOFTMAX_DONE", "MATH_DROPOUT_START", "MATH_DROPOUT_DONE", "MATH_FINAL_BMM_START",
                        "MATH_FINAL_BMM_DONE", "CUDA_MALLOC", "CUDA_MALLOC_DONE"}
INSTRUMENTATION_EVENTS = {"sdpa_entry", "math_qk_start", "math_sdpa_complete"}


def debug_line(channel, message):
    """A line of this script on `channel`, remembering the line of this file that made it (as __LINE__ does)."""
    return (channel, message, LOG_FILE_NAME, sys._getframe(1).f_lineno)


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


def pointer_text(handle):
    """A pointer as std::ostream prints it ("0" for null), e.g. a cudaStream_t."""
    return "0x%x" % handle if handle else "0"


def pointer_p(handle):
    """A pointer as printf's %p prints it in glibc ("(nil)" for null), as repro's notes do."""
    return "0x%x" % handle if handle else "(nil)"


def strides(p, s, transposed):
    """K's strides as PyTorch prints them, or those of its transposed view (of the expanded K for
    GQA): contiguous, or a view of a [B, S, H, E] buffer (stage_log.cpp key_strides, key_t_strides)."""
    B, H, S, E = p["batch"], p["kv_heads"], p["kv_len"], p["head_dim"]
    if s["k_layout"] == "bshe" and not (transposed and p["gqa"]):
        return [S * H * E, E, 1, H * E] if transposed else [S * H * E, E, H * E, 1]
    H = p["q_heads"] if transposed else H
    return [H * S * E, S * E, 1, E] if transposed else [H * S * E, S * E, E, 1]


class Boundary:
    """The start or the end of a stage: what its lines' placeholders stand for."""

    def __init__(self, plan, stage, detail="", values=None, stream=0, duration_us=0, now=0):
        self.p, self.s, self.stage, self.detail, self.stream = plan.p, plan.s, stage, detail, stream
        self.values = values or {}  # the --log values fields, as the instrumentation printed them
        self.duration_us, self.now = duration_us, now


def q_dims(b):
    return [b.p["batch"], b.p["q_heads"], b.p["q_len"], b.p["head_dim"]]


# Each placeholder of the table's line templates as stage_log.cpp's LineValues::value writes it in the
# sdpa-debug format (bools 0/1, the dtype as TypeMeta prints it, a null stream "0").
PLACEHOLDERS = {
    "name": lambda b: b.stage,
    "detail": lambda b: b.detail,
    "+detail": lambda b: " " + b.detail if b.detail else "",
    "+summary": lambda b: " " + " ".join("%s=%s" % kv for kv in b.values.items()) if b.values else "",
    "mnk": lambda b: " ".join(b.detail.split(" ")[:3]),
    "q_shape": lambda b: dims(q_dims(b)),
    "kv_shape": lambda b: dims([b.p["batch"], b.p["kv_heads"], b.p["kv_len"], b.p["head_dim"]]),
    "scores_shape": lambda b: dims([b.p["batch"], b.p["q_heads"], b.p["q_len"], b.p["kv_len"]]),
    "mask_shape": lambda b: dims([b.p["q_len"], b.p["kv_len"]]),
    "kt_shape": lambda b: dims([b.p["batch"] * b.p["q_heads"], b.p["head_dim"], b.p["kv_len"]]),
    "q_strides": lambda b: dims([q_dims(b)[1] * q_dims(b)[2] * q_dims(b)[3], q_dims(b)[2] * q_dims(b)[3],
                                 q_dims(b)[3], 1]),
    "key_strides": lambda b: dims(strides(b.p, b.s, False)),
    "key_t_strides": lambda b: dims(strides(b.p, b.s, True)),
    "dtype": lambda b: TYPE_META_NAMES[b.p["dtype"]],
    "is_causal": lambda b: "1" if b.p["mask"] == "causal" else "0",
    "true": lambda b: "1",
    "k_contiguous": lambda b: "0" if b.s["k_layout"] == "bshe" else "1",
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
            raise usage_error("%s: a line of stage %s has the placeholder {%s}, which this script does not know"
                              % (STAGE_TABLE, b.stage, name))
        return PLACEHOLDERS[name](b)
    return PLACEHOLDER.sub(value, text)


def stage_lines(b, which):
    """The table's sdpa-debug lines of stage b.stage, `which` "debug_begin" or "debug_end"."""
    return [(CHANNELS[t["channel"]], render_template(t["text"], b), TABLE_SOURCE, t["line"])
            for t in ROWS[b.stage][which]]


class DebugLog:
    """Writes sdpa-debug lines to stderr, each flushed at once: the last line of a hung run names the stage."""

    def __init__(self, enabled, extras=False, out=None):
        self.enabled, self.extras, self.out = enabled, extras, out or sys.stderr
        self.lock = threading.Lock()

    def write(self, lines, raw=False):
        if not self.enabled:
            return
        with self.lock:
            for line in lines:
                if raw or self.extras or is_instrumentation_line(line):
                    self.out.write(debug_line_text(line) + "\n")
            self.out.flush()

    def note(self, text):
        self.write([debug_line("SDPA_DEBUG", text)])


def monotonic_us():
    return time.monotonic_ns() // 1000


# ---------------------------------------------------------------------------------- the watchdog
class Watchdog:
    """A thread that polls the stage in progress (never a CUDA call): past the deadline it prints
    the stage, dumps every Python thread's stack, writes the JSON and exits 3. PyTorch releases the
    GIL in its ops and synchronisations, ctypes around the helper library's calls; should a hung call
    hold it all the same, faulthandler's own timer dumps the stacks two seconds after the deadline."""

    POLL_S = 0.05

    def __init__(self, timeout_s, on_hang):
        self.timeout_s, self.on_hang = timeout_s, on_hang  # on_hang(stage, running_s, message)
        self.lock = threading.Lock()
        self.stage, self.started = None, 0.0
        threading.Thread(target=self._watch, name="torch_stages-watchdog", daemon=True).start()

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
            if stage is not None and time.monotonic() - started > self.timeout_s:
                self._fire(stage, time.monotonic() - started)

    def _fire(self, stage, running):
        message = "%s: HANG: stage %s did not finish within %.1f s (running for %.2f s)" % (
            PROG, stage, self.timeout_s, running)
        sys.stderr.write(message + "\n%s: the Python threads' stacks, most recent call first:\n" % PROG)
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        try:
            self.on_hang(stage, running, message)
        finally:
            sys.stderr.flush()
            os._exit(EXIT_HANG)


# ------------------------------------------------------------------------------------- the run
class Runner:
    """The plan carried out as the harness carries it out (math_sdpa/pipeline.cpp MathSdpa::run and
    repro/run/runner.cpp): per iteration, each layer's forward call (entry, the GPU steps or the
    graph's replay, free_call, stream_sync), then with the backward each layer's backward call, last
    layer first, then free_step. Each staged step between its sdpa-debug lines, under the watchdog;
    the operations done by the backend (TorchBackend, or DryBackend for --dry-run)."""

    def __init__(self, plan, backend, log, level, watchdog, inject, timings):
        self.plan, self.be, self.log, self.level = plan, backend, log, level
        self.watchdog, self.inject, self.timings = watchdog, inject, timings
        self.graph_made = False
        backend.note = log.note

    def run(self, on_last_step=None):
        plan, run = self.plan, self.plan.run
        for step in range(1, run["iters"] + 1):
            t0 = time.monotonic()
            for layer in range(1, run["layers"] + 1):
                self.forward_call(layer, step)
            if run["backward"] and not run["graph"]:  # autograd reaches the last layer first
                for layer in range(run["layers"], 0, -1):
                    self.position(layer, step)
                    self.steps(plan.calls["backward_gpu"])
                    self.steps(plan.calls["backward_sync"])
            if step == run["iters"] and on_last_step:
                on_last_step()
            self.steps(plan.calls["free_step"])
            self.be.call_ms.append((time.monotonic() - t0) * 1e3)
            self.be.iterations_done = step

    def position(self, layer, step):
        """The layer about to run (stage_log.cpp StageLogger::call_position), a note as the harness writes it."""
        self.be.layer = layer
        if self.plan.run["layers"] > 1 or step > 1:
            self.log.note("[LAYER] step=%d layer=%d/%d" % (step, layer, self.plan.run["layers"]))

    def forward_call(self, layer, step):
        self.position(layer, step)
        self.steps(self.plan.calls["entry"])
        if self.plan.run["graph"]:
            self.graph_call()
        else:
            self.steps(self.plan.calls["forward_gpu"])
        self.steps(self.plan.calls["free_call"])
        self.steps(self.plan.calls["stream_sync"])

    def graph_call(self):
        """The first call captures its GPU steps (the backward's too) without their lines and makes the
        graph; every call then replays it (pipeline.cpp capture_graph), each a stage of the table."""
        capture, instantiate, launch = stages_when("graph")
        parts = ["forward_gpu"] + (["backward_gpu"] if self.plan.run["backward"] else [])
        silent = [op for part in parts for s in self.plan.calls[part] for op in s["ops"]]
        note = self.be.note

        def quiet(work):  # as the harness: nothing is said of the graph's operations
            self.be.note = lambda text: None
            try:
                work()
            finally:
                self.be.note = note
        if not self.graph_made:
            self.graph_made = True
            self.stage(capture, "stream=%d" % self.be.handle("path"), "path",
                       lambda: quiet(lambda: self.be.capture(silent, self.be.run_op)))
            self.stage(instantiate, "", "path", self.be.instantiate)
        self.stage(launch, "", "path", lambda: quiet(lambda: self.be.replay(silent, self.be.run_op)))

    def steps(self, steps):
        for step in steps:
            if "stage" not in step:
                for op in step["ops"]:
                    self.op(op)
            elif step["ops"]:  # a memory stage with nothing to do in this configuration is not run
                self.stage(step["stage"], step["detail"], step["stream"], lambda s=step: [self.op(o) for o in s["ops"]],
                           step)

    def op(self, op):
        if op["op"] == "allocate":
            self.allocation_lines(op)
        self.be.run_op(op)

    def allocation_lines(self, op):
        """An allocation inside the call is the instrumentation's (stage_log.cpp log_allocation): one pair a
        tensor (a chunk's alloc stage allocates the tensors kept per chunk). PyTorch allocates it in the
        operation that writes it, next: the address is not known yet."""
        for name in op["tensors"]:
            t = self.plan.tensors[name]
            if op["chunk"] == 0 or t["chunks"] > 1:
                self.log.write([debug_line("ALLOC_DEBUG", "[CUDA_MALLOC] size=%d stream=0 device=0 unified_memory=%d"
                                           % (t["bytes"], self.be.memory == "managed")),
                                debug_line("ALLOC_DEBUG", "[CUDA_MALLOC_DONE] ptr=0x0")], raw=True)

    def stage(self, stage, detail, stream, work, step=None):
        """A stage's work between its lines, timed and watched. As the instrumentation does, a GPU stage
        is waited for at --log sync and values (its _DONE line then means finished on the GPU), and one
        whose lines mark an event at every level the log is on."""
        row, be = ROWS[stage], self.be
        if self.watchdog:
            self.watchdog.arm(stage)
        t0 = monotonic_us()
        self.log.write(stage_lines(Boundary(self.plan, stage, be.fill_streams(detail), stream=be.handle(stream)),
                                   "debug_begin"))
        if self.inject == stage:
            be.stall(stream)
        work()
        lines = row["debug_begin"] + row["debug_end"]
        if row["kind"] == "gpu" and (self.level in ("sync", "values") or (
                self.level != "off" and any(t["channel"] == "event" for t in lines))):
            be.synchronize()
        values = {}
        if self.level == "values" and step and any("{values:" in t["text"] for t in lines):
            values = be.values(step)
        duration = monotonic_us() - t0
        self.log.write(stage_lines(Boundary(self.plan, stage, values=values, duration_us=duration,
                                            now=time.time_ns() // 1000), "debug_end"))
        self.timings.setdefault(stage, []).append(duration / 1000.0)
        if self.watchdog:
            self.watchdog.disarm()


# ------------------------------------------------------------------------------------ the operations
class Backend:
    """What both backends do with the plan's operations: the conditions' and fixes' actions, their
    notes and what PyTorch cannot express; each computing operation is TorchBackend's do_<op>."""

    def __init__(self, plan, memory):
        self.plan, self.memory = plan, memory
        self.p, self.s = plan.p, plan.s
        self.note = None
        self.layer, self.iterations_done, self.call_ms = 1, 0, []
        self.cannot_express = []  # what PyTorch cannot express, once each
        self.toucher, self.last_written = None, None
        # The GEMMs' stream apart from the path's (conditions.cpp create_streams); whether the plan
        # orders them by events, or leaves the order to the legacy default stream's implicit one
        # (path_settings.cpp implicitly_ordered_by_legacy_stream), which only events give in PyTorch.
        gemm, path = self.s["qk_gemm_stream"], self.s["stream"]
        self.apart = gemm != "same" and not (gemm == "legacy" and path == "legacy")
        self.implicit = (gemm, path) in (("blocking", "legacy"), ("legacy", "per_thread"))
        self.ordered = self.s["qk_gemm_order"] == "event" or self.implicit

    def cannot(self, text):
        if text not in self.cannot_express:
            self.cannot_express.append(text)
            sys.stderr.write("%s: cannot express in PyTorch: %s\n" % (PROG, text))

    def say_conditions(self):
        """The plan's conditions outside the call's operations that PyTorch cannot express."""
        s, ctx = self.s, self.plan.context
        if self.apart and self.implicit:
            self.cannot("the GEMMs' stream (%s), ordered by the legacy default stream's implicit synchronisation: "
                        "PyTorch's side streams are non-blocking; the GEMMs run on one, ordered by events"
                        % s["qk_gemm_stream"])
        if s["stream"] not in ("legacy", "non-blocking"):
            self.cannot("the path's stream (%s): the path runs on PyTorch's current stream, the legacy default "
                        "stream" % s["stream"])
        if s["alloc"] not in MEMORY_OF_ALLOC:
            self.cannot("%s memory (--alloc %s): PyTorch's tensors are %s memory" % (s["alloc"], s["alloc"], self.memory))
        if s.get("advise", "none") != "none":
            self.cannot("cudaMemAdvise on the tensors (--advise %s): not given" % s["advise"])
        if s.get("reduced_on_device") == "on":
            self.cannot("device memory for what softmax reduces over, beside %s memory: one allocator for every "
                        "tensor" % self.memory)
        if ctx.get("ballast"):
            self.cannot("the ballast (the rest of the model's memory, %s): not allocated" % json.dumps(ctx["ballast"]))
        if ctx.get("host_load_threads"):
            self.cannot("the host load (%d threads): not run" % ctx["host_load_threads"])
        if self.plan.weights_bytes() and (s.get("weights_io") != "mapped" or s.get("weights_pages") != "keep"):
            self.cannot("the weights read with io %s, pages %s: loaded from the mapping, pages kept"
                        % (s.get("weights_io"), s.get("weights_pages")))

    def run_op(self, op):
        own = getattr(self, "op_" + op["op"], None)
        if own:
            own(op)
        else:
            self.compute(op)

    def fill_streams(self, text):
        """A detail or note with the plan's stream placeholders ({stream:path}) as %p prints the handles."""
        return re.sub(r"\{stream:(\w+)\}", lambda m: pointer_p(self.handle(m.group(1))), text)

    def op_allocate(self, op):  # PyTorch allocates in the operation that writes the tensor (the lines: Runner)
        pass

    def op_entry_sync(self, op):
        if op["storm"]:
            self.cannot("the page-fault storm at entry (%s streams and the host touching every page of every "
                        "tensor at once): a plain synchronisation" % self.s["entry_touch_streams"])
        self.synchronize()

    def op_sync_streams(self, op):
        self.sync_stream("path")
        if self.apart:
            self.sync_stream("gemm")

    def op_fix_sync(self, op):
        if op["stream"] == "none":
            self.synchronize()
        else:
            self.sync_stream(op["stream"])

    def op_note(self, op):
        self.note(self.fill_streams(op["text"]))

    def op_prefetch(self, op):
        if self.memory != "managed":
            self.cannot("cudaMemPrefetchAsync of %s: %s memory does not migrate" % (op["tensor"]["tensor"], self.memory))
            return
        self.prefetch(op["tensor"], op["bytes"], op["stream"])

    def op_order_gemm(self, op):
        if not self.apart:
            return
        if self.ordered:
            self.wait("gemm", "path")
        self.note("[ORDER_GEMM] %s on stream %s, %s stream %s" % (
            op["gemm"], pointer_p(self.handle("gemm")), "after" if self.ordered else "NOT ordered after",
            pointer_p(self.handle("path"))))

    def op_order_path(self, op):
        if self.apart and self.ordered:
            self.wait("path", "gemm")

    def op_pointer_arrays(self, op):  # at::bmm takes the tensors themselves (Plan.gemm_operands)
        pass

    def op_host_access(self, op):
        """The host's access to what a softmax reduces over, once it is final (conditions.cpp move_to_host):
        every value read (min and max); or, for the forward's softmax with the phase `during`, a host
        thread touching every page until the softmax has run, where the device lets the host touch
        managed memory while kernels run."""
        s, forward = self.s, ROWS[op["stage"]]["when"] == "call"
        if s["scores_to_host"] in ("advise", "both"):
            self.cannot("cudaMemAdvise(SetPreferredLocation, host) of what softmax reduces over: the host reads only")
        if self.memory != "managed":
            self.cannot("the host's access to %s: %s memory is not the host's to read" % (
                ", ".join(o["name"] for o in op["operands"]), self.memory))
            return
        self.sync_stream("path")
        if s["scores_host_phase"] == "during":
            if forward and self.concurrent_managed_access() == 1:
                for o in op["operands"]:
                    self.note("[HOST_ACCESS] a host thread reads %s's %d pages while softmax runs" % (
                        o["name"], pages_of(o["bytes"])))
                    self.toucher = self.start_toucher(o)
                return
            self.note("[HOST_ACCESS] the host reads %s before softmax, not during it" % (
                ", ".join(o["name"] for o in op["operands"])))
        for o in op["operands"]:
            t0 = time.monotonic()
            lo, hi = self.host_min_max(o)
            self.note("[HOST_ACCESS] host read %s: %d bytes, %d pages, min=%.6g max=%.6g (%.3f ms)" % (
                o["name"], o["bytes"], pages_of(o["bytes"]), lo, hi, (time.monotonic() - t0) * 1e3))

    def op_softmax_launched(self, op):
        if self.toucher:
            self.toucher.launched(self.record_event())

    def op_finish_host_access(self, op):
        if self.toucher:
            passes, ms = self.toucher.join()
            self.toucher = None
            self.note("[HOST_ACCESS] the host thread touched the pages %d times while softmax ran (%.3f ms)" % (passes, ms))

    def op_release_host_advice(self, op):  # no advice is given (op_host_access)
        pass

    def op_gemm(self, op):
        if op["call"]["pointer_array"]:
            self.cannot("the pointer-array GEMM (%s): at::bmm runs the strided one on the same operands"
                        % op["call"]["function"])
        self.compute(op)


def pages_of(nbytes):
    return (nbytes + TOUCH_PAGE_BYTES - 1) // TOUCH_PAGE_BYTES


class Toucher:
    """A host thread reading one byte of every page of a tensor, pass after pass, until the softmax
    kernel recorded with launched() has run (conditions.cpp start_scores_toucher)."""

    def __init__(self, touch):
        self.event, self.passes, self.ms, self.stop = None, 0, 0.0, False
        self.thread = threading.Thread(target=self._run, args=(touch,), name="host-toucher", daemon=True)
        self.thread.start()

    def _run(self, touch):
        t0 = time.monotonic()
        while not self.stop:
            touch()
            self.passes += 1
            if self.event is not None and self.event.query():
                break
        self.ms = (time.monotonic() - t0) * 1e3

    def launched(self, event):
        self.event = event

    def join(self):
        self.thread.join()
        return self.passes, self.ms


class DryEvent:
    def query(self):
        return True


class DryBackend(Backend):
    """--dry-run: no PyTorch, no GPU; the operations do nothing but their notes (as on a device with
    concurrentManagedAccess, numbers 0), so that the log lines of a plan can be seen and tested anywhere."""

    def __init__(self, plan, memory, stage_timeout_s):
        super().__init__(plan, memory)
        self.stage_timeout_s = stage_timeout_s

    def compute(self, op):
        pass

    def handle(self, stream):
        return 0

    def stall(self, stream):  # the host stands in for the GPU: a bounded wait the watchdog must catch
        deadline = time.monotonic() + self.stage_timeout_s + 10.0
        while time.monotonic() < deadline:
            time.sleep(0.01)

    def synchronize(self):
        pass

    sync_stream = wait = prefetch = capture = replay = lambda self, *a: None

    def instantiate(self):
        pass

    def values(self, step):
        return {}

    def concurrent_managed_access(self):
        return 1

    def host_min_max(self, operand):
        return 0.0, 0.0

    def start_toucher(self, operand):
        return Toucher(lambda: time.sleep(0.001))

    def record_event(self):
        return DryEvent()


# ------------------------------------------------------------------------------- PyTorch
class TorchBackend(Backend):
    """The operations on PyTorch: each as _scaled_dot_product_attention_math and its autograd nodes run
    it (aten/src/ATen/native/transformers/attention.cpp), on the tensors the plan names. Each layer's
    tensors are its own; a call's are one set, as the harness keeps them (memory_plan.h)."""

    def __init__(self, torch, plan, memory, helper, stage_timeout_s, findings):
        super().__init__(plan, memory)
        self.t, self.helper, self.stage_timeout_s, self.findings = torch, helper, stage_timeout_s, findings
        self.device = torch.cuda.current_device()
        self.dev = torch.device("cuda", self.device)
        if self.s["stream"] == "non-blocking":  # PyTorch's side streams are created non-blocking
            torch.cuda.set_stream(torch.cuda.Stream())
        self.side = torch.cuda.Stream() if self.apart else None
        self.shared, self.call, self.layers = {}, {}, {}
        self.graph, self.graph_error = None, None
        self.softmax_op = "aten._safe_softmax" if hasattr(torch.ops.aten, "_safe_softmax") else "composite"

    # --- streams and synchronisation
    def stream(self, name):
        """The path's stream is PyTorch's current one (a graph's capture stream while capturing)."""
        return self.side if name == "gemm" and self.side is not None else self.t.cuda.current_stream()

    def handle(self, name):
        return self.stream("gemm" if name == "gemm" else "path").cuda_stream

    def synchronize(self):
        self.t.cuda.synchronize()

    def sync_stream(self, name):
        self.stream(name).synchronize()

    def wait(self, waiter, producer):
        self.stream(waiter).wait_stream(self.stream(producer))

    def record_event(self):
        event = self.t.cuda.Event()
        event.record(self.stream("path"))
        return event

    def stall(self, stream):
        """Spin kernels on the stage's stream (torch.cuda._sleep), so that its work queues behind them:
        bounded at the deadline plus ten seconds at up to 3 GHz."""
        with self.t.cuda.stream(self.stream(stream)):
            for _ in range(0, int((self.stage_timeout_s + 10.0) * 3e9), 10 ** 9):
                self.t.cuda._sleep(10 ** 9)

    # --- the tensors
    def slot(self, name):
        t = self.plan.tensors.get(name, {"lifetime": "call", "per_layer": False})
        if t["lifetime"] == "call":
            return self.call
        return self.layers.setdefault(self.layer, {}) if t["per_layer"] else self.shared

    def key(self, ref):
        name = ref["tensor"]
        return name, ref["chunk"] if self.plan.tensors.get(name, {}).get("chunks", 1) > 1 else 0

    def get(self, ref):
        try:
            return self.slot(ref["tensor"])[self.key(ref)]
        except KeyError:
            raise ScriptError(EXIT_USAGE, "the plan reads %s (layer %d) before an operation of it made it"
                              % (ref["tensor"], self.layer))

    def put(self, ref, x):
        self.slot(ref["tensor"])[self.key(ref)] = x
        self.last_written = ref

    def op_free(self, op):
        """Drops the references: PyTorch gives the memory back to its allocator. free_step frees every layer's."""
        every_layer = ROWS[op["stage"]]["when"] == "step"
        for name in op["tensors"]:
            slots = list(self.layers.values()) if every_layer and self.plan.tensors[name]["per_layer"] else [self.slot(name)]
            for slot in slots:
                for key in [k for k in slot if k[0] == name]:
                    del slot[key]

    def upload(self, layer, arrays, mask):
        """A layer's inputs (float32 arrays, already rounded to the dtype), as the model hands them over:
        K a view of a [B, S, H, E] buffer where the plan's layout says so."""
        np, t = numpy(), self.t
        dt = getattr(t, TORCH_DTYPES[self.p["dtype"]])
        to = lambda a: t.from_numpy(np.ascontiguousarray(a)).to(device=self.dev, dtype=dt)
        slot = self.layers.setdefault(layer, {})
        for name, a in arrays.items():
            if name == "key" and self.s["k_layout"] == "bshe":
                slot[(name, 0)] = to(a.transpose(0, 2, 1, 3)).transpose(1, 2)
            else:
                slot[(name, 0)] = to(a)
        if mask is not None and layer == 1:
            self.shared[("mask_input", 0)] = (t.from_numpy(mask != 0).to(self.dev) if mask.dtype == np.uint8
                                              else to(mask))

    # --- the computing operations
    def compute(self, op):
        getattr(self, "do_" + op["op"])(op)

    def do_build_mask(self, op):  # convert_boolean_attn_mask: True attends, False is -inf; causal: ones(L, S).tril()
        t = self.t
        m = (t.ones(op["L"], op["S"], dtype=t.bool, device=self.dev).tril() if op["causal"]
             else self.get(op["bool_mask"]))
        zero = t.scalar_tensor(0.0, dtype=getattr(t, TORCH_DTYPES[op["type"]]), device=self.dev)
        self.put(op["dst"], t.where(m.logical_not(), -math.inf, zero))

    def do_upcast(self, op):
        for src, dst in zip(op["src"], op["dst"]):
            self.put(dst, self.get(src).to(getattr(self.t, TORCH_DTYPES[op["dst_type"]])))

    def do_convert(self, op):  # .to(dtype), then the factor: sqrt(scale) on Q and K^T, the cast back, dO's upcast
        x = self.get(op["src"])
        if op["src_type"] != op["dst_type"]:
            x = x.to(getattr(self.t, TORCH_DTYPES[op["dst_type"]]))
        self.put(op["dst"], x * op["factor"] if op["factor"] != 1.0 else x)

    def do_repeat_heads(self, op):  # GQA: repeat_interleave over the heads
        self.put(op["dst"], self.get(op["src"]).repeat_interleave(op["group"], dim=1))

    def do_transpose_heads(self, op):  # K^T copied contiguous: what at::matmul's reshape copies, or .contiguous()
        self.put(op["dst"], self.get(op["src"]).transpose(-2, -1).contiguous())

    def do_gemm(self, op):
        """cuBLAS's column-major C = op(A) op(B) is, row-major, C = op(B) op(A) with each operand the
        row-major matrices of its tensor, transposed where its trans is T: at::matmul of the two, on the
        GEMM's stream. A chunk's operand and result are its rows of the whole tensor."""
        op = self.plan.gemm_operands(op)
        call, refs, rows = op["call"], op, op["call"]["n"]
        a = self.get(refs["a"])
        b = self.rows_of(refs["b"], rows) if call["transb"] == "N" else self.get(refs["b"])
        a = a.transpose(-2, -1) if call["transa"] == "T" else a
        b = b.transpose(-2, -1) if call["transb"] == "T" else b
        if op["stream"] == "gemm" and self.side is not None:
            with self.t.cuda.stream(self.side):
                c = self.t.matmul(b, a)
            for x in (a, b):
                x.record_stream(self.side)
            c.record_stream(self.stream("path"))
        else:
            c = self.t.matmul(b, a)
        self.store_rows(refs["c"], c)

    def rows_of(self, ref, rows):
        x = self.get(ref)
        row0 = ref["byte"] // (x.shape[-1] * x.element_size())
        return x if row0 == 0 and x.shape[-2] == rows else x[..., row0:row0 + rows, :]

    def store_rows(self, ref, c):
        """The result, or its rows of the whole tensor where the plan's chunks write it a part at a time."""
        whole = self.plan.tensors[ref["tensor"]]["bytes"] // (c.numel() // c.shape[-2] * c.element_size())
        if whole == c.shape[-2]:
            return self.put(ref, c)
        row0 = ref["byte"] // (c.shape[-1] * c.element_size())
        if row0 == 0:
            self.put(ref, self.t.empty(*c.shape[:-2], whole, c.shape[-1], dtype=c.dtype, device=self.dev))
        self.get(ref)[..., row0:row0 + c.shape[-2], :].copy_(c)

    def do_add_mask(self, op):  # attn.add_(attn_mask), the chunk's rows
        mask = self.get(op["mask"])
        self.get(op["scores"]).add_(mask[..., op["row0"]:op["row0"] + op["rows"], :])

    def do_softmax(self, op):
        """at::_safe_softmax(x, -1) where this PyTorch has it, else its composite: rows that are -inf
        throughout give zeros instead of NaN."""
        t, x = self.t, self.get(op["in"])
        if self.softmax_op == "composite":
            out = t.where((x == -math.inf).all(-1, keepdim=True), t.zeros((), dtype=x.dtype, device=self.dev),
                          t.softmax(x, -1))
        else:
            out = t.ops.aten._safe_softmax(x, -1)
        self.put(op["out"], out)

    def do_dropout(self, op):  # what F.dropout(attn, p, training=True) runs, by name: its mask is the backward's
        out, mask = self.t.ops.aten.native_dropout(self.get(op["in"]), self.p["dropout"], True)
        self.put(op["out"], out)
        self.put(op["mask"], mask)

    def do_dropout_backward(self, op):
        self.put(op["out"], self.t.ops.aten.native_dropout_backward(self.get(op["grad"]), self.get(op["mask"]),
                                                                    1.0 / (1.0 - self.p["dropout"])))

    def do_softmax_backward(self, op):
        probs = self.get(op["probs"])
        self.put(op["out"], self.t.ops.aten._softmax_backward_data(self.get(op["grad"]), probs, -1, probs.dtype))

    def do_sum_head_groups(self, op):
        """The scalings' backward (MulBackward), repeat_interleave's (each group's heads summed) and the
        upcast's (ToCopyBackward, the cast back)."""
        x = self.get(op["src"])
        x = x * op["factor"] if op["factor"] != 1.0 else x
        if op["group"] > 1:
            B, H, n, E = x.shape
            x = x.reshape(B, H // op["group"], op["group"], n, E).sum(2)
        self.put(op["dst"], x.to(getattr(self.t, TORCH_DTYPES[op["dst_type"]])))

    # --- the conditions' and fixes' primitives
    def prefetch(self, ref, nbytes, stream):
        self.helper.prefetch_to_device(self.get(ref).data_ptr() + ref["byte"], nbytes, self.device, self.handle(stream))

    def concurrent_managed_access(self):
        return self.helper.concurrent_managed_access(self.device)

    def operand(self, o):
        return self.get({"tensor": o["tensor"], "chunk": o["chunk"]})

    def host_min_max(self, o):
        x = self.operand(o)
        return self.helper.host_min_max(x.data_ptr(), min(x.numel(), o["bytes"] // x.element_size()),
                                        self.p["dtype"] if x.element_size() == 2 else "fp32")

    def start_toucher(self, o):
        ptr = self.operand(o).data_ptr()
        return Toucher(lambda: self.helper.touch_pages(ptr, o["bytes"]))  # ctypes: without the GIL

    def values(self, step):
        """The fields the instrumentation printed at --log values, of what the stage's GPU operation wrote:
        min, max (%.6g as std::ostream prints a float), isnan, isinf (0 or 1), the sum (.item<float>())."""
        if self.last_written is None:
            return {}
        x = self.get(self.last_written).float()
        return {"min": "%.6g" % float32(x.min().item()), "max": "%.6g" % float32(x.max().item()),
                "isnan": "1" if x.isnan().any().item() else "0", "isinf": "1" if x.isinf().any().item() else "0",
                "sum": "%.6g" % float32(x.double().sum().item())}

    # --- a CUDA graph
    def capture(self, ops, run_op):
        """The call's GPU operations captured into a torch.cuda.CUDAGraph, where PyTorch can capture them;
        otherwise they run at each replay, as they are."""
        t = self.t
        t.matmul(t.ones(2, 2, device=self.dev), t.ones(2, 2, device=self.dev))  # cuBLAS's handle outside the capture
        t.cuda.synchronize()
        graph = t.cuda.CUDAGraph()
        try:
            with t.cuda.graph(graph):
                for op in ops:
                    run_op(op)
            self.graph = graph
        except RuntimeError as e:
            self.graph_error = (str(e).strip().splitlines() or [type(e).__name__])[0]
            self.cannot("a CUDA graph of the call (the capture failed: %s): its operations run at each replay, "
                        "eagerly" % self.graph_error)
            t.cuda.synchronize()

    def instantiate(self):  # PyTorch instantiates the graph at the end of its capture
        pass

    def replay(self, ops, run_op):
        if self.graph is not None:
            self.graph.replay()
        else:
            for op in ops:
                run_op(op)

    def result(self, name, layer):
        self.layer = layer
        slot = self.slot(name)
        parts = [slot[k] for k in sorted(k for k in slot if k[0] == name)]
        return self.t.cat([x.float().reshape(-1) for x in parts]).cpu().numpy() if parts else None

    def stop(self):
        if self.toucher:
            self.toucher.stop = True


# ------------------------------------------------------------------------------------ the inputs
def numpy():
    try:
        import numpy as np
    except ImportError:
        raise ScriptError(EXIT_USAGE, "numpy is needed for the inputs and results; install it next to PyTorch")
    return np


def input_shapes(p, backward):
    q = (p["batch"], p["q_heads"], p["q_len"], p["head_dim"])
    kv = (p["batch"], p["kv_heads"], p["kv_len"], p["head_dim"])
    return dict([("query", q), ("key", kv), ("value", kv)] + ([("grad_output", q)] if backward else []))


def mask_shape(p):
    b, h = p["mask_dims"].split("x") if "x" in p.get("mask_dims", "") else ("1", "1")
    return (p["batch"] if b == "B" else 1, p["q_heads"] if h == "H" else 1, p["q_len"], p["kv_len"])


# Each input's file: the harness's --save-inputs names (one a layer), or repro --inputs' (every layer's).
SAVED_NAMES = {"query": "q", "key": "k", "value": "v", "grad_output": "grad_out"}
GIVEN_NAMES = {"query": "q", "key": "k", "value": "v", "grad_output": "dout"}


def read_inputs(folder, plan, layer):
    """Layer `layer`'s inputs from `folder`: `repro --save-inputs`'s layerN.q.npy, layerN.k.npy, layerN.v.npy,
    layerN.grad_out.npy (float32, already rounded to the dtype) and mask.npy (uint8 0/1 or float32), or
    repro --inputs' q.npy, k.npy, v.npy, dout.npy, mask.npy (float32, float16, bf16 as uint16), checked
    against the plan's shapes."""
    np = numpy()
    saved = os.path.exists(os.path.join(folder, "layer1.q.npy"))
    if not saved and not os.path.exists(os.path.join(folder, "q.npy")):
        raise usage_error("--inputs %s: neither layer1.q.npy (repro --save-inputs) nor q.npy (repro --inputs) is there"
                          % folder)
    arrays = {}
    for name, shape in input_shapes(plan.p, plan.run["backward"]).items():
        file = ("layer%d.%s.npy" % (layer, SAVED_NAMES[name])) if saved else GIVEN_NAMES[name] + ".npy"
        a = load_npy(os.path.join(folder, file), shape)
        arrays[name] = a.astype(np.float32) if saved or a.dtype != np.uint16 else (
            a.astype(np.uint32) << np.uint32(16)).view(np.float32)
    mask = None
    if plan.p["mask"] in ("bool", "float"):
        mask = load_npy(os.path.join(folder, "mask.npy"), mask_shape(plan.p), plan.p["mask"] == "bool")
        mask = mask.astype(np.uint8) if plan.p["mask"] == "bool" else mask.astype(np.float32)
    return arrays, mask


def load_npy(path, shape, boolean=False):
    np = numpy()
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise usage_error("--inputs: %s: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))
    kinds = "bu" if boolean else "fu"
    if tuple(a.shape) != tuple(shape) or a.dtype.kind not in kinds:
        raise usage_error("--inputs: %s is %s %s, where the plan's problem has %s %s" % (
            path, dims(a.shape), a.dtype, dims(shape), "uint8 (0/1)" if boolean else "float32"))
    return a


def random_inputs(plan, layer):
    """Inputs of the script's own where the harness gave none: N(0, 1) and the mask's kinds, from
    numpy's generator seeded with the plan's seed and the layer; not the harness's values."""
    np, p = numpy(), plan.p
    rng = np.random.default_rng([p["seed"], layer])
    arrays = {n: rng.standard_normal(s, dtype=np.float32) for n, s in input_shapes(p, plan.run["backward"]).items()}
    mask = None
    if p["mask"] == "bool":
        mask = (rng.random(mask_shape(p)) >= 0.25).astype(np.uint8)
        if p.get("text_padding"):  # the batch entries after the first attend to `valid` text tokens of `tokens`
            mask[:] = 1
            mask[1:, :, :, p["text_padding"]["valid"]:p["text_padding"]["tokens"]] = 0
    elif p["mask"] == "float":
        mask = rng.uniform(-2, 2, mask_shape(p)).astype(np.float32)
    return arrays, mask


# -------------------------------------------------------------------------- PyTorch and memory
def import_torch(memory):
    """PyTorch >= 2.5 with CUDA, imported only now (--dry-run needs none). --memory async chooses the
    cudaMallocAsync backend before PyTorch reads its configuration."""
    if memory == "async":
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        if "backend" in conf:
            raise usage_error("--memory async: PYTORCH_CUDA_ALLOC_CONF already names a backend (%s)" % conf)
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (conf + "," if conf else "") + "backend:cudaMallocAsync"
    try:
        import torch
    except ImportError as e:
        raise ScriptError(EXIT_NO_GPU, "PyTorch is not importable here (%s): this script runs the plan through "
                                       "your PyTorch >= 2.5 with CUDA" % e)
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit())
    if version < (2, 5):
        raise ScriptError(EXIT_NO_GPU, "PyTorch %s is older than 2.5 (the math path's upcast and _safe_softmax)"
                          % torch.__version__)
    if not torch.cuda.is_available():  # no CUDA initialisation yet: the allocator can still change
        raise ScriptError(EXIT_NO_GPU, "PyTorch %s sees no usable CUDA device (torch.version.cuda=%s)"
                          % (torch.__version__, torch.version.cuda))
    if memory == "async" and torch.cuda.memory.get_allocator_backend() != "cudaMallocAsync":
        raise usage_error("--memory async: PyTorch's allocator backend is %s, not cudaMallocAsync"
                          % torch.cuda.memory.get_allocator_backend())
    return torch


def cuda_home():
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if candidate and os.path.isdir(os.path.join(candidate, "include")):
            return candidate
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else "/usr/local/cuda"


def build_helper_library():
    """scripts/torch_stages_alloc.cu as a shared library, built once per source and compiler and kept
    under ~/.cache/sdpa-repro (a temporary folder where that is not writable): (path, the command if built)."""
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
        raise usage_error("--memory managed: no nvcc and no C++ compiler to build %s" % ALLOCATOR_SOURCE)
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
        try:
            result = subprocess.run(command(tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    universal_newlines=True)
        except OSError:
            continue
        if result.returncode != 0:
            raise usage_error("building the managed-memory allocator failed: %s: %s" % (
                " ".join(command(tmp)), (result.stdout.strip().splitlines() or ["exit %d" % result.returncode])[-1]))
        os.replace(tmp, path)
        return path, " ".join(command(path))
    raise usage_error("--memory managed: no writable folder for the allocator library")


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
        self.lib.sdpa_host_min_max(ptr, count, HOST_CODES[dtype], out)
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


def install_memory(torch, memory):
    """Puts PyTorch on managed memory before its first CUDA allocation (change_current_allocator refuses
    an allocator already in use); the helper library serves the host's reads and prefetches too."""
    if memory != "managed":
        return None
    path, built = build_helper_library()
    if built:
        sys.stderr.write("%s: built the managed-memory allocator: %s\n" % (PROG, built))
    torch.cuda.memory.change_current_allocator(
        torch.cuda.memory.CUDAPluggableAllocator(path, "sdpa_managed_malloc", "sdpa_managed_free"))
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


# ------------------------------------------------------------------------------- the weights
# The model's weights loaded before the first call from a memory-mapped file, as a training script
# loads them (safetensors maps the files, `.to("cuda")` copies each tensor from the mapped pages): the
# file, the sizes and the stage's detail are repro's (math_sdpa/weights_load.cpp).
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


def weights_detail(i, count, n, at, s):
    return "tensor=%d/%d bytes=%d offset=%d io=%s pages=%s" % (i + 1, count, n, at, s.get("weights_io", "mapped"),
                                                               s.get("weights_pages", "keep"))


def ensure_weights_file(path, nbytes):
    """repro's ensure_weights_file: made when absent (the mark first), extended when it has the mark and
    is too small, read as it is when it is anyone else's and large enough, refused otherwise; data that is
    not zeros, synced, its pages dropped. True when it was written."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise usage_error("the weights file %s: %s" % (path, e.strerror))
    try:
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise usage_error("the weights file %s is not a regular file" % path)
            with open(path, "rb") as f:
                marked = f.read(len(WEIGHTS_FILE_MARK)) == WEIGHTS_FILE_MARK
            if st.st_size >= nbytes:
                return False
            if not marked:
                raise usage_error("the weights file %s holds %d bytes, fewer than the %d asked for, and the harness "
                                  "did not make it, so it is read, never written" % (path, st.st_size, nbytes))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            at = max(len(WEIGHTS_FILE_MARK), st.st_size // 4096 * 4096) if st else 0
            if at == 0:  # the mark first: a creation cut short leaves a file the next run extends
                os.pwrite(fd, WEIGHTS_FILE_MARK, 0)
                at = len(WEIGHTS_FILE_MARK)
            block = os.urandom(WEIGHTS_BLOCK)
            while at < nbytes:
                at += os.pwrite(fd, block[:min(WEIGHTS_BLOCK, nbytes - at)], at)
            os.fsync(fd)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except OSError as e:
        raise usage_error("the weights file %s (%d bytes): %s" % (path, nbytes, e.strerror or e))
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
    """MemFree, MemAvailable, Cached and this process's RssFile in bytes (math_sdpa/host_memory.h)."""
    texts = {}
    for name in ("/proc/meminfo", "/proc/self/status"):
        try:
            with open(name) as f:
                texts[name] = f.read()
        except OSError:
            texts[name] = None
    m = texts["/proc/meminfo"]
    return {"mem_free": kib_field(m, "MemFree"), "mem_available": kib_field(m, "MemAvailable"),
            "cached": kib_field(m, "Cached"), "rss_file": kib_field(texts["/proc/self/status"], "RssFile")}


def gigabytes(nbytes):
    return "unknown" if nbytes is None else "%.2f GB" % (nbytes / 1e9)


def weights_summary(w):
    """The load's lines, as repro's result text writes them (repro/run/run_text.cpp)."""
    def change(key):
        a, b = w["before"][key], w["after"][key]
        return "unknown" if a is None or b is None else "%+.2f GB" % ((b - a) / 1e9)

    text = lambda m: "MemFree %s, MemAvailable %s, Cached %s, RssFile %s" % tuple(
        gigabytes(m[k]) for k in ("mem_free", "mem_available", "cached", "rss_file"))
    return ["# weights loaded: %s in %d tensors from %s%s, mapping %s: %.2f s, %.2f GB/s" % (
        gigabytes(w["bytes"]), w["tensors"], w["file"], " (written first)" if w["created"] else "", w["mapping"],
        w["seconds"], w["gb_per_s"]),
            "#   before: " + text(w["before"]), "#   after:  " + text(w["after"]),
            "#   change: Cached %s, MemFree %s, MemAvailable %s, RssFile %s" % tuple(
                change(k) for k in ("cached", "mem_free", "mem_available", "rss_file"))]


def load_weights(runner, torch, plan, keep):
    """Before the first call: the file mapped copy-on-write (numpy.memmap mode "c": MAP_PRIVATE, as repro
    maps it), each tensor's slice copied with .to("cuda") into a tensor kept for the run, synchronised,
    a load stage each; then the mapping dropped, or kept (--weights-mapping keep). Returns weights_load."""
    nbytes, path = plan.weights_bytes(), plan.s.get("weights_file") or default_weights_file()
    tensors, stage = weights_tensors(nbytes), stages_when("load")[0]
    w = {"file": path, "bytes": nbytes, "tensors": len(tensors), "mapping": plan.s.get("weights_mapping", "unmap"),
         "created": False, "seconds": 0.0, "gb_per_s": 0.0, "before": read_host_memory()}
    copy = lambda n, at: None
    if torch is not None:
        np = numpy()
        w["created"] = ensure_weights_file(path, nbytes)
        fd = os.open(path, os.O_RDONLY)
        if hasattr(os, "posix_fadvise"):  # from what a fresh boot has: the pages are the load's to bring in
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        mapping = [np.memmap(path, dtype=np.uint8, mode="c", shape=(nbytes,))]
        copy = lambda n, at: (keep.append(torch.from_numpy(mapping[0][at:at + n]).to("cuda")), torch.cuda.synchronize())
    start = time.monotonic()
    for i, (n, at) in enumerate(tensors):
        runner.stage(stage, weights_detail(i, len(tensors), n, at, plan.s), "path", lambda n=n, at=at: copy(n, at))
    if torch is not None:
        if w["mapping"] == "keep":
            keep.append(mapping[0])  # the process holds the mapping until it ends
        mapping.clear()
    w["seconds"] = time.monotonic() - start
    w["gb_per_s"] = nbytes / 1e9 / w["seconds"] if w["seconds"] > 0 else 0.0
    w["after"] = read_host_memory()
    return w


# ----------------------------------------------------------------------------------- the result
def quantile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))]


def stats_of(a):
    np = numpy()
    finite = np.isfinite(a)
    values = a[finite].astype(np.float64)
    return {"elements": int(a.size), "l2": float(math.sqrt(float((values * values).sum()))),
            "sum": float(values.sum())}, int(a.size - finite.sum())


def stage_summary(name, v):
    return {"stage": name, "calls": len(v), "median_ms": statistics.median(v), "p10_ms": quantile(v, 0.1),
            "p90_ms": quantile(v, 0.9), "clock": "host"}


class Run:
    """What the JSON reports (repro/run/run_json.cpp's shape, where its fields apply)."""

    def __init__(self, args, argv):
        self.args, self.argv, self.plan = args, argv, None
        self.started = time.monotonic()
        self.memory = args.memory
        self.outcome_code, self.error, self.error_stage, self.watchdog = EXIT_PASS, None, None, None
        self.timings, self.backend, self.device, self.torch = {}, None, None, None
        self.result_tensor, self.result_stats, self.nonfinite = None, None, 0
        self.gradient_stats, self.nonfinite_gradients = None, 0
        self.notes, self.findings, self.inputs_source, self.weights_load = [], [], None, None

    def to_json(self):
        a, plan, be = self.args, self.plan, self.backend
        calls = sorted(be.call_ms) if be else []
        return {
            "meta": {"format_version": 2, "harness": "sdpa-repro", "tool": LOG_FILE_NAME,
                     "command_line": [PROG] + self.argv, "python": sys.version.split()[0]},
            "device": self.device,
            "config": {"plan": plan.source if plan else a.plan, "plan_command": getattr(plan, "command", None),
                       "scenario": plan.j["scenario"] if plan else None, "fixes": plan.j["fixes"] if plan else None,
                       "problem": plan.p if plan else None, "settings": plan.s if plan else None,
                       "run": plan.run if plan else None, "context": plan.context if plan else None,
                       "memory": self.memory, "alloc": ALLOC_OF_MEMORY.get(self.memory), "mode": a.mode, "log": a.log,
                       "log_extras": a.log_extras, "stage_timeout_s": a.stage_timeout, "inputs": a.inputs,
                       "inject": "hang:" + a.inject if a.inject else "none", "dry_run": a.dry_run},
            "outcome": OUTCOMES[self.outcome_code], "exit_code": self.outcome_code,
            "error": self.error, "error_stage": self.error_stage,
            "result_tensor": self.result_tensor, "result_stats": self.result_stats, "nonfinite_outputs": self.nonfinite,
            "gradient_stats": self.gradient_stats, "nonfinite_gradients": self.nonfinite_gradients,
            "iterations_done": be.iterations_done if be else 0,
            "timing": {"call_median_ms": statistics.median(calls) if calls else None,
                       "call_p10_ms": quantile(calls, 0.1) if calls else None,
                       "call_p90_ms": quantile(calls, 0.9) if calls else None,
                       "first_call_ms": be.call_ms[0] if calls else None},
            "stages": [stage_summary(n, sorted(self.timings[n])) for n in [r["name"] for r in TABLE] + [SDPA_CALL]
                       if n in self.timings],
            "cannot_express": be.cannot_express if be else [],
            "weights_load": self.weights_load, "wall_seconds": time.monotonic() - self.started,
            "watchdog": self.watchdog, "inputs_source": self.inputs_source, "torch": self.torch,
            "notes": self.notes + self.findings,
        }

    def write(self):
        if not self.args.json:
            return
        tmp = "%s.tmp.%d" % (self.args.json, os.getpid())
        try:
            with open(tmp, "w") as f:
                json.dump(self.to_json(), f, indent=2)
                f.write("\n")
            os.replace(tmp, self.args.json)
        except OSError as e:
            if os.path.exists(tmp):
                os.unlink(tmp)
            sys.stderr.write("%s: error: --json %s: %s\n" % (PROG, self.args.json, e.strerror or e))


def write_npy_atomically(path, array):
    """np.save to path.tmp.<pid>, then a rename over `path` (math_sdpa/atomic_file.h)."""
    np, tmp = numpy(), "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            np.save(f, array, allow_pickle=False)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise usage_error("--save-output %s: %s" % (path, e.strerror or e))


# Whole mode's own stage between the entry and end synchronisations: the one call, which the table does not have.
SDPA_CALL = "sdpa_call"


def whole_mode(runner, plan, be):
    """F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.MATH) on each layer's inputs, between
    the plan's entry and end steps; what acts inside the call is out of its reach, said once each."""
    kinds = {op["op"] for op in plan.ops("host_access") + plan.ops("fix_sync") + plan.ops("prefetch")}
    for kind in sorted(kinds):
        be.cannot("%s inside the call: --mode whole issues the call as one (--mode stages reaches it)" % kind)
    if plan.run["backward"]:
        be.cannot("the backward call in --mode whole: the forward call alone runs (--mode stages runs it)")
    p, t = plan.p, be.t

    def call():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        native = getattr(t.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
        if native:
            native(p["precision"] == "native" and p["dtype"] != "fp32")
        g = lambda name: be.get({"tensor": name, "chunk": 0})
        with sdpa_kernel(SDPBackend.MATH):
            be.put({"tensor": "output", "chunk": 0}, t.nn.functional.scaled_dot_product_attention(
                g("query"), g("key"), g("value"), attn_mask=g("mask_input") if p["mask"] in ("bool", "float") else None,
                dropout_p=p["dropout"], is_causal=p["mask"] == "causal", scale=p["scale"], enable_gqa=p["gqa"]))

    for step in range(1, plan.run["iters"] + 1):
        t0 = time.monotonic()
        for layer in range(1, plan.run["layers"] + 1):
            runner.position(layer, step)
            runner.steps(plan.calls["entry"])
            if runner.watchdog:
                runner.watchdog.arm(SDPA_CALL)
            started = monotonic_us()
            runner.log.note("[TORCH_SDPA_CALL] F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.MATH)")
            call()
            runner.log.note("[TORCH_SDPA_CALL_DONE] issued")
            runner.timings.setdefault(SDPA_CALL, []).append((monotonic_us() - started) / 1000.0)
            if runner.watchdog:
                runner.watchdog.disarm()
            runner.steps(plan.calls["stream_sync"])
        be.call_ms.append((time.monotonic() - t0) * 1e3)
        be.iterations_done = step


def run_torch(run, plan, inputs_dir, log, watchdog, inputs_why):
    a = run.args
    torch = import_torch(run.memory)
    helper = install_memory(torch, run.memory)
    run.device = device_info(torch, helper)
    torch.manual_seed(plan.p["seed"] % (1 << 63))
    be = run.backend = TorchBackend(torch, plan, run.memory, helper, a.stage_timeout, run.findings)
    be.say_conditions()
    run.torch = {"version": torch.__version__, "cuda": torch.version.cuda, "softmax": be.softmax_op,
                 "allocator_backend": "pluggable" if helper else torch.cuda.memory.get_allocator_backend()}
    if plan.p["dropout"] > 0:
        run.notes.append("dropout: PyTorch's own generator (torch.manual_seed(%d)), not the harness's Philox "
                         "stream: the masks differ, so the outputs are not comparable" % plan.p["seed"])
    log.write([debug_line("ALLOC_DEBUG", "[TORCH_MEMORY] memory=%s allocator=%s" % (
        run.memory, "CUDAPluggableAllocator(cudaMallocManaged) library=%s concurrentManagedAccess=%d" % (
            helper.path, helper.concurrent_managed_access(be.device)) if helper else run.torch["allocator_backend"]))])
    runner = Runner(plan, be, log, a.log, watchdog, a.inject, run.timings)
    kept = []  # the weights on the GPU (and their mapping with --weights-mapping keep), for the run
    result, gradients = {}, []
    try:
        if plan.weights_bytes():
            run.weights_load = load_weights(runner, torch, plan, kept)
            print("\n".join(weights_summary(run.weights_load)))
            sys.stdout.flush()
        if inputs_dir is None:
            be.cannot("the harness's inputs (%s): random inputs of the script's own, seeded with the plan's "
                      "seed; the values differ from the harness's" % (inputs_why or "no --inputs"))
        run.inputs_source = inputs_dir or "random (numpy, seed %d and the layer)" % plan.p["seed"]
        for layer in range(1, plan.run["layers"] + 1):
            be.upload(layer, *(read_inputs(inputs_dir, plan, layer) if inputs_dir else random_inputs(plan, layer)))
        name, grads = plan.result()
        name = "output" if a.mode == "whole" else name
        last = plan.run["layers"]

        def keep_result():  # before free_step gives back what the step kept
            result["x"] = be.result(name, last)
            gradients.extend((g, be.result(g, last)) for g in grads if a.mode == "stages")
        if a.mode == "whole":
            whole_mode(runner, plan, be)
            keep_result()
        else:
            runner.run(keep_result)
    except RuntimeError as e:  # PyTorch's CUDA and cuBLAS errors
        be.stop()
        stage = watchdog.stage
        watchdog.disarm()
        raise ScriptError(EXIT_CUDA_ERROR, "%s%s" % ("in stage %s: " % stage if stage else "",
                                                     (str(e).strip().splitlines() or [type(e).__name__])[0]), stage)
    run.result_tensor = name
    if result.get("x") is not None:
        run.result_stats, run.nonfinite = stats_of(result["x"])
        if a.save_output:
            write_npy_atomically(a.save_output, result["x"])
    if gradients:
        run.gradient_stats = {}
        stem = a.save_output[:-4] if a.save_output and a.save_output.endswith(".npy") else a.save_output
        for g, x in gradients:
            run.gradient_stats[g], bad = stats_of(x)
            run.nonfinite_gradients += bad
            if stem:  # as repro --backward --save-output FILE.npy: FILE.grad_query.npy, ...
                write_npy_atomically("%s.%s.npy" % (stem, g), x)
    if helper is not None:
        run.torch["managed_allocator"] = helper.stats()
    if run.nonfinite:
        raise ScriptError(EXIT_MISMATCH, "%d non-finite values in the %s tensor" % (run.nonfinite, name))
    if run.nonfinite_gradients:
        raise ScriptError(EXIT_MISMATCH, "%d non-finite values in the input gradients" % run.nonfinite_gradients)


def run_dry(run, plan, log, watchdog):
    """--dry-run: the plan's lines, nothing computed (the weights' load too: its lines, no file)."""
    be = run.backend = DryBackend(plan, run.memory, run.args.stage_timeout)
    be.say_conditions()
    runner = Runner(plan, be, log, run.args.log, watchdog, run.args.inject, run.timings)
    run.notes.append("dry run: no PyTorch, nothing computed; the lines are those of the plan's steps")
    if plan.weights_bytes():
        load_weights(runner, None, plan, [])
    if run.args.mode == "whole":
        be.cannot("--mode whole in a dry run: the plan's steps are written as --mode stages runs them")
    runner.run()
    run.result_tensor = plan.result()[0]


# --------------------------------------------------------------------------------- options
class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit 2 (repro's usage errors)."""

    def error(self, message):
        raise usage_error(message)


def build_parser():
    ap = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False,
                       usage="%(prog)s (--plan PLAN.json | [repro's run options]) [options]",
                       epilog="Any other option is repro's: without --plan the script runs `REPRO OPTIONS --plan "
                              "--json FILE --save-inputs DIR` for the plan and the inputs.")
    a = ap.add_argument
    a("--plan", help="the call plan (repro --plan --json FILE)")
    a("--repro", help="the repro binary that makes the plan without --plan (default build/repro, else build-ci/repro)")
    a("--inputs", help="the harness's inputs: repro --save-inputs DIR (layerN.q.npy ...) or repro --inputs' q.npy ...")
    a("--mode", default="stages", choices=MODES, help="stages (default) or whole (F.scaled_dot_product_attention)")
    a("--memory", choices=MEMORIES, help="caching, managed or async (default: the plan's --alloc)")
    a("--json", help="write the result as JSON to this file")
    a("--save-output", help="write the last layer's result tensor to this .npy file (float32), and its gradients")
    a("--log", default="values", choices=LOG_LEVELS, help="off, stages, sync (a device sync after every GPU stage) or "
                                                          "values (also the instrumentation's values; the default)")
    a("--log-format", default="sdpa-debug", choices=("sdpa-debug",), help="sdpa-debug (the only format written here)")
    a("--log-extras", action="store_true", help="also the harness's own stages' lines and the notes")
    a("--stage-timeout", type=float, default=20.0, help="watchdog deadline per stage, seconds (default 20)")
    a("--inject", metavar="hang:STAGE", help="a spinning kernel makes that stage stall, to test the watchdog")
    a("--dry-run", action="store_true", help="write the plan's log lines without PyTorch, then exit")
    return ap


def parse_command_line(argv):
    """(options, repro's run options, the plan, the inputs' folder, why there are no inputs)."""
    args, run_args = build_parser().parse_known_args(argv)
    if args.plan and run_args:
        raise usage_error("%s: not an option of this script (repro's run options make a plan only without --plan)"
                          % run_args[0])
    if not 0.01 <= args.stage_timeout <= 86400:
        raise usage_error("--stage-timeout: %g is not in [0.01, 86400]" % args.stage_timeout)
    if args.inputs is not None and not os.path.isdir(args.inputs):
        raise usage_error("--inputs %s: not a folder" % args.inputs)
    inputs, why = args.inputs, None
    if args.plan:
        plan = load_plan(args.plan)
    else:
        given = args.inputs and os.path.exists(os.path.join(args.inputs, "q.npy"))  # repro --inputs' own folder
        plan, saved, why = plan_from_repro(args.repro or default_repro(), run_args + (
            ["--inputs", args.inputs] if given else []), not (args.inputs or args.dry_run))
        inputs = inputs or saved
    args.memory = args.memory or MEMORY_OF_ALLOC.get(plan.s["alloc"], "caching")
    if args.inputs:  # checked before anything runs: the first layer's
        read_inputs(inputs, plan, 1)
    if args.inject is not None:
        kind, _, stage = args.inject.partition(":")
        if kind != "hang" or stage not in plan.stages():
            raise usage_error("--inject: '%s' is not hang:STAGE of a stage this plan runs (%s)" % (
                args.inject[:40], " ".join(plan.stages())))
        args.inject = stage
    return args, run_args, plan, inputs, why


def summary_line(run):
    j = run.to_json()
    text = "%s: %s (exit %d)" % (PROG, j["outcome"], j["exit_code"])
    if j["error"]:
        text += ": " + j["error"]
    if j["result_stats"]:
        s = j["result_stats"]
        text += "; %s l2=%.6g sum=%.6g elements=%d" % (j["result_tensor"], s["l2"], s["sum"], s["elements"])
    for name, g in (j["gradient_stats"] or {}).items():
        text += "; %s l2=%.6g" % (name, g["l2"])
    if j["timing"]["call_median_ms"] is not None and not run.args.dry_run:
        text += "; step median %.3f ms over %d step(s)" % (j["timing"]["call_median_ms"], j["iterations_done"])
    return text


KNOWN_OPS = ({name[3:] for name in dir(Backend) if name.startswith("op_")} |
             {name[3:] for name in dir(TorchBackend) if name.startswith(("op_", "do_"))})


def main(argv):
    try:
        args, _, plan, inputs, why = parse_command_line(argv)
    except ScriptError as e:
        sys.stderr.write("%s: error: %s\n" % (PROG, e))
        return e.exit_code
    run = Run(args, argv)
    run.plan = plan
    log = DebugLog(run.args.log != "off", extras=run.args.log_extras)

    def on_hang(stage, running, message):
        run.outcome_code, run.error, run.error_stage = EXIT_HANG, message, stage
        run.watchdog = {"kind": "hang", "stage": stage, "running_seconds": running, "message": message,
                        "stage_timeout_s": run.args.stage_timeout, "python_stacks": "dumped to stderr by faulthandler"}
        run.write()

    watchdog = Watchdog(run.args.stage_timeout, on_hang)
    try:
        if run.args.dry_run:
            run_dry(run, run.plan, log, watchdog)
        else:
            run_torch(run, run.plan, inputs, log, watchdog, why)
    except ScriptError as e:
        run.outcome_code, run.error, run.error_stage = e.exit_code, str(e), e.stage
        sys.stderr.write("%s: error: %s\n" % (PROG, e))
    watchdog.disarm()
    if run.backend:
        run.notes.extend("cannot express in PyTorch: " + x for x in run.backend.cannot_express)
    run.write()
    print(summary_line(run))
    return run.outcome_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
