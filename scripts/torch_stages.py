#!/usr/bin/env python3
"""torch_stages.py: a run of repro's call plan through your own PyTorch, one stage at a time.

Optional helper (PyTorch >= 2.5 with CUDA). The path is described once, by the harness's call plan
(math_sdpa/call_plan.h, `repro --plan --json`): this script maps each of its steps' operations to
PyTorch's and runs them in its order, between `repro --log-format sdpa-debug`'s log lines, under a
watchdog (docs/TORCH_STAGES.md):

    python3 scripts/torch_stages.py --plan plan.json --inputs inputs/  # a plan and repro --save-inputs
    python3 scripts/torch_stages.py --backward --layers 2 -L 256      # repro's run options: the plan
                                                                       # is asked of --repro (build/repro)

A condition PyTorch cannot express is said once ("cannot express in PyTorch: ..."), and the rest runs.
Exit codes are repro's (math_sdpa/errors.h): 0 pass, 1 non-finite result, 2 usage, 3 hang, 4 CUDA
error, 7 no PyTorch with CUDA.
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
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types

LOG_FILE_NAME = "scripts/torch_stages.py"  # how the log's [file:line] names this file
PROG = "torch_stages.py"
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(HERE)
ALLOCATOR_SOURCE = os.path.join(HERE, "torch_stages_alloc.cu")
ALLOCATOR_HEADERS = [os.path.join(SOURCE_ROOT, "math_sdpa", name) for name in ("bf16_bits.h", "fp16_bits.h")]
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


# Every fact about a stage (its name, kind, when it runs, its log lines) is a row of the harness's
# stage table (math_sdpa/stage.cpp), which every plan carries (its "stage_table", as `repro help
# stages --json` prints it). The script names no stage: the plan says which run, the table what
# they write. Set by use_stage_table as the plan is read.
STAGE_TABLE = "the plan's stage table"
TABLE, TABLE_SOURCE, ROWS = [], "", {}


def use_stage_table(table):
    """Makes `table` (a plan's "stage_table") the one the script's functions read."""
    global TABLE, TABLE_SOURCE, ROWS
    if table.get("format") != 1:
        raise ValueError("its stage table is format %s, where this script reads format 1" % table.get("format"))
    TABLE, TABLE_SOURCE = table["stages"], table["source"]
    ROWS = {row["name"]: row for row in TABLE}


def stages_when(when):
    """The stages run around the plan's steps: "load" (the weights), "graph" (capture, instantiate, launch)."""
    return [row["name"] for row in TABLE if row["when"] == when]


TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
HOST_CODES = {"fp32": 0, "bf16": 1, "fp16": 2}  # torch_stages_alloc.cu sdpa_host_min_max's codes
TYPE_META_NAMES = {"bf16": "c10::BFloat16", "fp16": "c10::Half", "fp32": "float"}  # caffe2::TypeMeta's <<
MEMORIES = ("caching", "managed", "async")
MEMORY_OF_ALLOC = {"device": "caching", "managed": "managed", "async": "async"}  # repro's --alloc words
LOG_LEVELS = ("off", "stages", "sync", "values")
TOUCH_PAGE_BYTES = 4096  # math_sdpa/kernels.h kTouchPageBytes
# The weights' load (math_sdpa/weights_load.cpp): the sizes it copies in turn, a Qwen-Image block's
# weights in bf16 (attention's four 3072 x 3072 projections, the MLP's pair), and the file's blocks.
WEIGHTS_TENSOR_SIZES = tuple(n << 20 for n in (18, 18, 18, 18, 72, 72))


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
            use_stage_table(j["stage_table"])
            for step in self.all_steps():
                if "stage" in step and step["stage"] not in ROWS:
                    raise ValueError("its step %s is not a stage of %s" % (step["stage"], STAGE_TABLE))
                for op in step["ops"]:
                    if op["op"] not in KNOWN_OPS:
                        raise ValueError("its operation '%s' is not one this script maps to PyTorch" % op["op"])
        except (KeyError, TypeError, ValueError) as e:
            raise usage_error("the plan %s cannot be run: %s" % (source, e if isinstance(e, ValueError) else
                                                                  "it has no %s" % e))
        self.j, self.source, self.command = j, source, None

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
        names.update(stages_when("graph") if graph else [], stages_when("load") if self.weights_bytes() else [])
        return [row["name"] for row in TABLE if row["name"] in names]

    def gemm_operands(self, op):
        """A GEMM's A, B and C. A pointer-array GEMM names its arrays: their tensors are the plan's pointer_arrays
        op's, else (one layer allocated up front writes them before the calls) the strided call's (call_plan.cpp)."""
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
        """The tensor the forward call ends with (the last one written), and the backward's input gradients."""
        out = None
        for op in [op for step in self.calls["forward_gpu"] for op in step["ops"]]:
            op = self.gemm_operands(op) if op["op"] == "gemm" else op
            out = next((op[f]["tensor"] for f in ("c", "out", "dst") if isinstance(op.get(f), dict)), out)
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
    found = [p for p in (os.path.join(SOURCE_ROOT, d, "repro") for d in ("build", "build-ci")) if os.access(p, os.X_OK)]
    return (found or [os.path.join(SOURCE_ROOT, "build", "repro")])[0]


def plan_from_repro(binary, run_args, want_inputs):
    """`repro RUN_OPTIONS --plan --json FILE` (no GPU needed), with `--save-inputs DIR` where inputs are
    wanted, asked again without it of a repro that refuses it: (the plan, the inputs' folder or None, why none)."""
    tmp = tempfile.mkdtemp(prefix="torch_stages-")
    atexit.register(shutil.rmtree, tmp, True)
    plan_path, saved = os.path.join(tmp, "plan.json"), os.path.join(tmp, "inputs")
    command, why = [binary] + run_args + ["--plan", "--json", plan_path], None
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
        return plan, None, why or "repro --save-inputs wrote none"
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
    return "[CUDA_EVENT] " + message if channel == "CUDA_EVENT" else "[%s] %s [%s:%d]" % line


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
    H, S, E = p["kv_heads"], p["kv_len"], p["head_dim"]
    if s["k_layout"] == "bshe" and not (transposed and p["gqa"]):
        return [S * H * E, E, 1, H * E] if transposed else [S * H * E, E, H * E, 1]
    H = p["q_heads"] if transposed else H
    return [H * S * E, S * E, 1, E] if transposed else [H * S * E, S * E, E, 1]


class Boundary:
    """The start or the end of a stage: what its lines' placeholders stand for (stage_log.cpp LineValues
    in the sdpa-debug format: bools 0/1, the dtype as TypeMeta prints it, a null stream "0")."""

    def __init__(self, plan, stage, detail="", values=None, stream=0, duration_us=0, now=0):
        self.stage, self.values = stage, values or {}  # the --log values fields, as the instrumentation printed them
        p, s = plan.p, plan.s
        B, H, Hkv, L, S, E = (p[k] for k in ("batch", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim"))
        self.words = {
            "name": stage, "detail": detail, "+detail": " " + detail if detail else "",
            "+summary": "".join(" %s=%s" % kv for kv in self.values.items()), "mnk": " ".join(detail.split(" ")[:3]),
            "q_shape": dims([B, H, L, E]), "kv_shape": dims([B, Hkv, S, E]), "scores_shape": dims([B, H, L, S]),
            "mask_shape": dims([L, S]), "kt_shape": dims([B * H, E, S]), "q_strides": dims([H * L * E, L * E, E, 1]),
            "key_strides": dims(strides(p, s, False)), "key_t_strides": dims(strides(p, s, True)),
            "dtype": TYPE_META_NAMES[p["dtype"]], "is_causal": "1" if p["mask"] == "causal" else "0", "true": "1",
            "k_contiguous": "0" if s["k_layout"] == "bshe" else "1", "stream": pointer_text(stream),
            "now": str(now), "duration_ms": str(duration_us // 1000), "duration_us": str(duration_us)}


def render_template(text, b):
    def value(m):
        name = m.group(1)
        if name.startswith("values:"):  # the fields asked for, in that order, where there are values
            return "".join(" %s=%s" % (k, b.values[k]) for k in name[len("values:"):].split(",") if k in b.values)
        if name not in b.words:
            raise usage_error("%s: a line of stage %s has the placeholder {%s}, which this script does not know"
                              % (STAGE_TABLE, b.stage, name))
        return b.words[name]
    return re.sub(r"\{([^}]*)\}", value, text)


def stage_lines(b, which):
    """The table's sdpa-debug lines of stage b.stage, `which` "debug_begin" or "debug_end"."""
    return [(CHANNELS[t["channel"]], render_template(t["text"], b), TABLE_SOURCE, t["line"])
            for t in ROWS.get(b.stage, OWN_STAGE)[which]]


# Whole mode's stage between the entry and end synchronisations, the one call, which the table does not have.
SDPA_CALL, OWN_STAGE = "sdpa_call", {"kind": "host", "debug_begin": [], "debug_end": []}


class DebugLog:
    """Writes sdpa-debug lines to stderr, each flushed at once: the last line of a hung run names the stage."""

    def __init__(self, enabled, extras=False):
        self.enabled, self.extras, self.lock = enabled, extras, threading.Lock()

    def write(self, lines, raw=False):
        if self.enabled:
            with self.lock:
                for line in lines:
                    if raw or self.extras or is_instrumentation_line(line):
                        sys.stderr.write(debug_line_text(line) + "\n")
                sys.stderr.flush()

    def note(self, text):
        self.write([debug_line("SDPA_DEBUG", text)])


def monotonic_us():
    return time.monotonic_ns() // 1000


class Watchdog:
    """A thread polling the stage in progress (never CUDA): past the deadline it names it, dumps every Python
    thread's stack, writes the JSON and exits 3. PyTorch's ops and ctypes release the GIL; should a hung call
    hold it all the same, faulthandler's own timer dumps the stacks two seconds after the deadline."""

    def __init__(self, timeout_s, on_hang):
        self.timeout_s, self.on_hang = timeout_s, on_hang  # on_hang(stage, running_s, message)
        self.lock, self.stage, self.started = threading.Lock(), None, 0.0
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
            time.sleep(0.05)
            with self.lock:
                stage, running = self.stage, time.monotonic() - self.started
            if stage is not None and running > self.timeout_s:
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
    """The plan carried out as the harness carries it out (math_sdpa/pipeline.cpp MathSdpa::run, repro/run/
    runner.cpp): per iteration each layer's forward call (entry, the GPU steps or the graph's replay,
    free_call, stream_sync), then with the backward each layer's backward call from the last, then
    free_step; each staged step between its sdpa-debug lines, under the watchdog, done by the backend."""

    def __init__(self, plan, backend, log, level, watchdog, inject, timings):
        self.plan, self.be, self.log, self.level = plan, backend, log, level
        self.watchdog, self.inject, self.timings = watchdog, inject, timings
        self.graph_made, self.whole = False, None  # whole: --mode whole's call, in place of the GPU steps
        backend.log = log

    def run(self, on_last_step=None):
        run, calls = self.plan.run, self.plan.calls
        for step in range(1, run["iters"] + 1):
            t0 = time.monotonic()
            for layer in range(1, run["layers"] + 1):
                self.position(layer, step)
                self.steps(calls["entry"])
                if self.whole:
                    self.stage(SDPA_CALL, "", "path", self.whole)
                elif run["graph"]:
                    self.graph_call()
                else:
                    self.steps(calls["forward_gpu"])
                self.steps(calls["free_call"] + calls["stream_sync"])
            if run["backward"] and not run["graph"] and not self.whole:  # autograd reaches the last layer first
                for layer in range(run["layers"], 0, -1):
                    self.position(layer, step)
                    self.steps(calls["backward_gpu"] + calls["backward_sync"])
            if step == run["iters"] and on_last_step:
                on_last_step()
            self.steps(calls["free_step"])
            self.be.call_ms.append((time.monotonic() - t0) * 1e3)
            self.be.iterations_done = step

    def position(self, layer, step):
        """The layer about to run (stage_log.cpp StageLogger::call_position), a note as the harness writes it."""
        self.be.layer = layer
        if self.plan.run["layers"] > 1 or step > 1:
            self.log.note("[LAYER] step=%d layer=%d/%d" % (step, layer, self.plan.run["layers"]))

    def graph_call(self):
        """The first call captures its GPU steps (the backward's too) and makes the graph; every call
        replays it (pipeline.cpp capture_graph), each a stage of the table; the graph's operations say nothing."""
        capture, instantiate, launch = stages_when("graph")
        parts = ["forward_gpu"] + (["backward_gpu"] if self.plan.run["backward"] else [])
        ops = [op for part in parts for s in self.plan.calls[part] for op in s["ops"]]
        if not self.graph_made:
            self.graph_made = True
            self.stage(capture, "stream=%d" % self.be.handle("path"), "path", lambda: self.be.quietly("capture", ops))
            self.stage(instantiate, "", "path", lambda: None)  # PyTorch instantiates the graph at its capture's end
        self.stage(launch, "", "path", lambda: self.be.quietly("replay", ops))

    def steps(self, steps):
        for step in steps:
            if "stage" not in step:
                for op in step["ops"]:
                    self.be.run_op(op)
            elif step["ops"]:  # a memory stage with nothing to do in this configuration is not run
                self.stage(step["stage"], step["detail"], step["stream"], lambda s=step: [self.op(o) for o in s["ops"]],
                           step)

    def op(self, op):
        # An allocation inside the call is the instrumentation's (stage_log.cpp log_allocation), a pair a tensor
        # (a chunk's allocating the tensors kept per chunk); PyTorch allocates it in the operation that writes it.
        if op["op"] == "allocate":
            for name in op["tensors"]:
                t = self.plan.tensors[name]
                if op["chunk"] == 0 or t["chunks"] > 1:
                    self.log.write([debug_line("ALLOC_DEBUG", "[CUDA_MALLOC] size=%d stream=0 device=0 unified_memory"
                                               "=%d" % (t["bytes"], self.be.memory == "managed")),
                                    debug_line("ALLOC_DEBUG", "[CUDA_MALLOC_DONE] ptr=0x0")], raw=True)
        self.be.run_op(op)

    def stage(self, stage, detail, stream, work, step=None):
        """A stage's work between its lines, timed and watched; a GPU stage waited for as the instrumentation
        did: at --log sync and values (_DONE means finished on the GPU), and where its lines mark an event."""
        row, be = ROWS.get(stage, OWN_STAGE), self.be
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
        values = be.values() if self.level == "values" and step and any("{values:" in t["text"] for t in lines) else {}
        duration = monotonic_us() - t0
        self.log.write(stage_lines(Boundary(self.plan, stage, values=values, duration_us=duration,
                                            now=time.time_ns() // 1000), "debug_end"))
        self.timings.setdefault(stage, []).append(duration / 1000.0)
        if self.watchdog:
            self.watchdog.disarm()


# ------------------------------------------------------------------------------------ the operations
class Backend:
    """What is done with the plan's operations: the conditions' and fixes' actions, their notes and what
    PyTorch cannot express; each operation that computes is TorchBackend's do_<op>. On its own, the
    backend of --dry-run."""

    def __init__(self, plan, memory, stage_timeout_s):
        self.plan, self.memory, self.p, self.s, self.stage_timeout_s = plan, memory, plan.p, plan.s, stage_timeout_s
        self.log, self.quiet, self.layer, self.iterations_done, self.call_ms = None, False, 1, 0, []
        self.cannot_express, self.toucher, self.last_written = [], None, None  # what PyTorch cannot express, once each
        # The GEMMs' stream apart from the path's (conditions.cpp create_streams); whether the plan orders
        # them by events, or leaves the order to the legacy default stream's implicit synchronisation
        # (path_settings.cpp implicitly_ordered_by_legacy_stream), which only events give in PyTorch.
        gemm, path = self.s["qk_gemm_stream"], self.s["stream"]
        self.apart = gemm != "same" and (gemm, path) != ("legacy", "legacy")
        self.implicit = (gemm, path) in (("blocking", "legacy"), ("legacy", "per-thread"))
        self.ordered = self.s["qk_gemm_order"] == "event" or self.implicit

    def cannot(self, text):
        if text not in self.cannot_express:
            self.cannot_express.append(text)
            sys.stderr.write("%s: cannot express in PyTorch: %s\n" % (PROG, text))

    def note(self, text):
        if not self.quiet:
            self.log.note(text)

    def quietly(self, work, ops):
        self.quiet = True
        try:
            getattr(self, work)(ops)
        finally:
            self.quiet = False

    def say_conditions(self, check):
        """The plan's conditions outside the call's operations that PyTorch cannot express."""
        s, ctx = self.s, self.plan.context
        if check:
            self.cannot("--check's float64 reference: none here (the JSON's result_stats compare with repro's)")
        if self.apart and self.implicit:
            self.cannot("the GEMMs' stream (%s), ordered by the legacy default stream's implicit synchronisation: "
                        "PyTorch's side streams are non-blocking; the GEMMs run on one, ordered by events"
                        % s["qk_gemm_stream"])
        if s["stream"] not in ("legacy", "non-blocking"):
            self.cannot("the path's stream (%s): the path runs on PyTorch's current stream" % s["stream"])
        if s["alloc"] not in MEMORY_OF_ALLOC:
            self.cannot("%s memory (repro's --alloc): PyTorch's tensors are %s memory" % (s["alloc"], self.memory))
        if s.get("advise", "none") != "none":
            self.cannot("cudaMemAdvise on the tensors (--advise %s): not given" % s["advise"])
        if s.get("reduced_on_device") == "on":
            self.cannot("device memory for what softmax reduces over: one allocator for all, %s" % self.memory)
        if ctx.get("ballast"):
            self.cannot("the ballast (the rest of the model's memory, %s): not allocated" % json.dumps(ctx["ballast"]))
        if ctx.get("host_load_threads"):
            self.cannot("the host load (%d threads): not run" % ctx["host_load_threads"])
        if self.plan.weights_bytes() and (s.get("weights_io") != "mapped" or s.get("weights_pages") != "keep"):
            self.cannot("the weights read with io %s, pages %s: loaded from the mapping, pages kept"
                        % (s.get("weights_io"), s.get("weights_pages")))

    def run_op(self, op):
        own = getattr(self, "op_" + op["op"], None)
        own(op) if own else self.compute(op)

    def fill_streams(self, text):
        """A detail or note with the plan's stream placeholders ({stream:path}) as %p prints the handles."""
        return re.sub(r"\{stream:(\w+)\}", lambda m: pointer_p(self.handle(m.group(1))), text)

    def op_entry_sync(self, op):
        if op["storm"]:
            self.cannot("the page-fault storm at entry (%s streams and the host touching every page of every tensor "
                        "at once): a plain synchronisation" % self.s["entry_touch_streams"])
        self.synchronize()

    def op_sync_streams(self, op):
        for name in ("path", "gemm") if self.apart else ("path",):
            self.sync_stream(name)

    def op_fix_sync(self, op):
        self.synchronize() if op["stream"] == "none" else self.sync_stream(op["stream"])

    def op_note(self, op):
        self.note(self.fill_streams(op["text"]))

    def op_prefetch(self, op):
        if self.memory != "managed":
            return self.cannot("cudaMemPrefetchAsync of %s: %s memory does not migrate" % (op["tensor"]["tensor"],
                                                                                            self.memory))
        self.prefetch(op["tensor"], op["bytes"], op["stream"])

    def op_order_gemm(self, op):
        if self.apart:
            if self.ordered:
                self.wait("gemm", "path")
            self.note("[ORDER_GEMM] %s on stream %s, %s stream %s" % (
                op["gemm"], pointer_p(self.handle("gemm")), "after" if self.ordered else "NOT ordered after",
                pointer_p(self.handle("path"))))

    def op_order_path(self, op):
        if self.apart and self.ordered:
            self.wait("path", "gemm")

    def op_host_access(self, op):
        """The host's access to what a softmax reduces over (conditions.cpp move_to_host): each value read; in the
        forward's phase `during`, a host thread touching every page until the softmax ran (concurrentManagedAccess)."""
        s, names = self.s, ", ".join(o["name"] for o in op["operands"])
        if s["scores_to_host"] in ("advise", "both"):
            self.cannot("cudaMemAdvise(SetPreferredLocation, host) of what softmax reduces over: the host reads only")
        if self.memory != "managed":
            return self.cannot("the host's access to %s: %s memory is not the host's to read" % (names, self.memory))
        self.sync_stream("path")
        if s["scores_host_phase"] == "during":
            if ROWS[op["stage"]]["when"] == "call" and self.concurrent_managed_access() == 1:
                for o in op["operands"]:
                    self.note("[HOST_ACCESS] a host thread reads %s's %d pages while softmax runs" % (
                        o["name"], pages_of(o["bytes"])))
                    self.toucher = self.start_toucher(o)
                return
            self.note("[HOST_ACCESS] the host reads %s before softmax, not during it" % names)
        for o in op["operands"]:
            t0 = time.monotonic()
            lo, hi = self.host_min_max(o)
            self.note("[HOST_ACCESS] host read %s: %d bytes, %d pages, min=%.6g max=%.6g (%.3f ms)" % (
                o["name"], o["bytes"], pages_of(o["bytes"]), lo, hi, (time.monotonic() - t0) * 1e3))

    def op_softmax_launched(self, op):
        if self.toucher:
            self.toucher.event = self.record_event()

    def op_finish_host_access(self, op):
        if self.toucher:
            self.toucher.thread.join()
            self.note("[HOST_ACCESS] the host thread touched the pages %d times while softmax ran (%.3f ms)" % (
                self.toucher.passes, self.toucher.ms))
            self.toucher = None

    # PyTorch allocates in the operation that writes a tensor (Runner.op writes the allocation's lines);
    # at::bmm takes the tensors, not arrays of pointers (Plan.gemm_operands); no advice is given to release.
    op_allocate = op_pointer_arrays = op_release_host_advice = lambda self, op: None

    def op_gemm(self, op):
        if op["call"]["pointer_array"]:
            self.cannot("the pointer-array GEMM (%s): at::bmm runs the strided one on the same operands"
                        % op["call"]["function"])
        self.compute(op)

    # --- --dry-run: no PyTorch, no GPU; the operations do nothing but their notes (as on a device with
    # concurrentManagedAccess, numbers 0), so that a plan's log lines can be seen and tested anywhere.
    def stall(self, stream):  # the host stands in for the GPU: a bounded wait the watchdog must catch
        deadline = time.monotonic() + self.stage_timeout_s + 10.0
        while time.monotonic() < deadline:
            time.sleep(0.01)

    compute = synchronize = sync_stream = wait = prefetch = capture = replay = lambda self, *a: None
    handle = lambda self, stream: 0
    values = lambda self: {}
    concurrent_managed_access = lambda self: 1
    host_min_max = lambda self, operand: (0.0, 0.0)
    start_toucher = lambda self, operand: Toucher(lambda: time.sleep(0.001))
    record_event = lambda self: types.SimpleNamespace(query=lambda: True)


def pages_of(nbytes):
    return (nbytes + TOUCH_PAGE_BYTES - 1) // TOUCH_PAGE_BYTES


class Toucher:
    """A host thread touching a tensor's pages until the softmax whose event is set has run (start_scores_toucher)."""

    def __init__(self, touch):
        self.event, self.passes, self.ms, self.stop = None, 0, 0.0, False
        self.thread = threading.Thread(target=self._run, args=(touch,), name="host-toucher", daemon=True)
        self.thread.start()

    def _run(self, touch):
        t0 = time.monotonic()
        while not self.stop and not (self.event is not None and self.event.query()):
            touch()
            self.passes += 1
        self.ms = (time.monotonic() - t0) * 1e3


class TorchBackend(Backend):
    """The operations as _scaled_dot_product_attention_math and its autograd nodes run them (ATen's attention.cpp),
    on the tensors the plan names: a layer's its own, a call's one set, as the harness keeps them (memory_plan.h)."""

    def __init__(self, torch, plan, memory, helper, stage_timeout_s):
        super().__init__(plan, memory, stage_timeout_s)
        self.t, self.helper = torch, helper
        self.device = torch.cuda.current_device()
        self.dev = torch.device("cuda", self.device)
        if self.s["stream"] == "non-blocking":  # PyTorch's side streams are created non-blocking
            torch.cuda.set_stream(torch.cuda.Stream())
        self.side = torch.cuda.Stream() if self.apart else None
        self.shared, self.call, self.layers, self.graph = {}, {}, {}, None

    dtype = lambda self, name: getattr(self.t, TORCH_DTYPES[name])

    # --- streams and synchronisation
    def stream(self, name):
        """The path's stream is PyTorch's current one (a graph's capture stream while capturing)."""
        return self.side if name == "gemm" and self.side is not None else self.t.cuda.current_stream()

    handle = lambda self, name: self.stream(name).cuda_stream
    synchronize = lambda self: self.t.cuda.synchronize()
    sync_stream = lambda self, name: self.stream(name).synchronize()
    wait = lambda self, waiter, producer: self.stream(waiter).wait_stream(self.stream(producer))

    def record_event(self):
        event = self.t.cuda.Event()
        event.record(self.stream("path"))
        return event

    def stall(self, stream):
        """Spin kernels on the stage's stream (torch.cuda._sleep), its work queued behind them: bounded at
        the deadline plus ten seconds at up to 3 GHz."""
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
            for slot in (list(self.layers.values()) if every_layer and self.plan.tensors[name]["per_layer"]
                         else [self.slot(name)]):
                for key in [k for k in slot if k[0] == name]:
                    del slot[key]

    def upload(self, layer, arrays, mask):
        """A layer's inputs (float32, rounded to the dtype) as a model hands them over: K a [B, S, H, E] view."""
        np, t = numpy(), self.t
        to = lambda a: t.from_numpy(np.ascontiguousarray(a)).to(device=self.dev, dtype=self.dtype(self.p["dtype"]))
        slot = self.layers.setdefault(layer, {})
        for name, a in arrays.items():
            bshe = name == "key" and self.s["k_layout"] == "bshe"
            slot[(name, 0)] = to(a.transpose(0, 2, 1, 3)).transpose(1, 2) if bshe else to(a)
        if mask is not None and layer == 1:
            self.shared[("mask_input", 0)] = t.from_numpy(mask != 0).to(self.dev) if mask.dtype == "uint8" else to(mask)

    # --- the operations that compute
    def compute(self, op):
        getattr(self, "do_" + op["op"])(op)

    def do_build_mask(self, op):  # convert_boolean_attn_mask: True attends, False is -inf; causal: ones(L, S).tril()
        t = self.t
        m = self.get(op["bool_mask"]) if not op["causal"] else t.ones(op["L"], op["S"], dtype=t.bool,
                                                                      device=self.dev).tril()
        zero = t.scalar_tensor(0.0, dtype=self.dtype(op["type"]), device=self.dev)
        self.put(op["dst"], t.where(m.logical_not(), -math.inf, zero))

    def do_upcast(self, op):
        for src, dst in zip(op["src"], op["dst"]):
            self.put(dst, self.get(src).to(self.dtype(op["dst_type"])))

    def do_convert(self, op):  # .to(dtype), then the factor: sqrt(scale) on Q and K^T, the cast back, dO's upcast
        x = self.get(op["src"])
        x = x.to(self.dtype(op["dst_type"])) if op["src_type"] != op["dst_type"] else x
        self.put(op["dst"], x * op["factor"] if op["factor"] != 1.0 else x)

    def do_repeat_heads(self, op):  # GQA: repeat_interleave over the heads
        self.put(op["dst"], self.get(op["src"]).repeat_interleave(op["group"], dim=1))

    def do_transpose_heads(self, op):  # K^T copied contiguous: what at::matmul's reshape copies, or .contiguous()
        self.put(op["dst"], self.get(op["src"]).transpose(-2, -1).contiguous())

    def do_gemm(self, op):
        """cuBLAS's column-major C = op(A) op(B) is, row-major, C = op(B) op(A) (op: transposed where T): at::matmul
        of the tensors' row-major matrices, on the GEMM's stream; a chunk's operand and result its rows of the whole."""
        op = self.plan.gemm_operands(op)
        call = op["call"]
        a = self.get(op["a"])
        b = self.rows_of(op["b"], call["n"]) if call["transb"] == "N" else self.get(op["b"])
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
        self.store_rows(op["c"], c)

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
        self.get(op["scores"]).add_(self.get(op["mask"])[..., op["row0"]:op["row0"] + op["rows"], :])

    def do_softmax(self, op):  # rows that are -inf throughout give zeros instead of NaN
        self.put(op["out"], self.t.ops.aten._safe_softmax(self.get(op["in"]), -1))

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
        """The scalings' backward (MulBackward), repeat_interleave's (a group's heads summed), the upcast's (ToCopy)."""
        x = self.get(op["src"])
        x = x * op["factor"] if op["factor"] != 1.0 else x
        if op["group"] > 1:
            B, H, n, E = x.shape
            x = x.reshape(B, H // op["group"], op["group"], n, E).sum(2)
        self.put(op["dst"], x.to(self.dtype(op["dst_type"])))

    # --- the conditions' and fixes' primitives
    def prefetch(self, ref, nbytes, stream):
        self.helper.prefetch(self.get(ref).data_ptr() + ref["byte"], nbytes, self.device, self.handle(stream))

    concurrent_managed_access = lambda self: self.helper.concurrent_managed_access(self.device)
    operand = lambda self, o: self.get({"tensor": o["tensor"], "chunk": o["chunk"]})

    def host_min_max(self, o):
        x = self.operand(o)
        return self.helper.min_max(x.data_ptr(), min(x.numel(), o["bytes"] // x.element_size()),
                                   self.p["dtype"] if x.element_size() == 2 else "fp32")

    def start_toucher(self, o):
        ptr = self.operand(o).data_ptr()
        return Toucher(lambda: self.helper.touch(ptr, o["bytes"]))  # ctypes: without the GIL

    def values(self):
        """--log values: the instrumentation's fields of what the stage wrote, as its std::ostream printed them."""
        x = self.get(self.last_written).float()
        return {"min": "%.6g" % float32(x.min().item()), "max": "%.6g" % float32(x.max().item()),
                "isnan": "1" if x.isnan().any().item() else "0", "isinf": "1" if x.isinf().any().item() else "0",
                "sum": "%.6g" % float32(x.double().sum().item())}

    # --- a CUDA graph
    def capture(self, ops):
        """The call's GPU operations captured into a torch.cuda.CUDAGraph; where they cannot be, run at each replay."""
        t = self.t
        t.matmul(t.ones(2, 2, device=self.dev), t.ones(2, 2, device=self.dev))  # cuBLAS's handle outside the capture
        t.cuda.synchronize()
        graph = t.cuda.CUDAGraph()
        try:
            with t.cuda.graph(graph):
                for op in ops:
                    self.run_op(op)
            self.graph = graph
        except RuntimeError as e:
            self.cannot("a CUDA graph of the call (the capture failed: %s): its operations run at each replay, "
                        "eagerly" % (str(e).strip().splitlines() or [type(e).__name__])[0])
            t.cuda.synchronize()

    def replay(self, ops):
        if self.graph is not None:
            return self.graph.replay()
        for op in ops:
            self.run_op(op)

    def result(self, name, layer):
        self.layer = layer
        slot = self.slot(name)
        parts = [slot[k] for k in sorted(k for k in slot if k[0] == name)]
        return self.t.cat([x.float().reshape(-1) for x in parts]).cpu().numpy() if parts else None


# ------------------------------------------------------------------------------------ the inputs
def numpy():
    try:
        import numpy as np
    except ImportError:
        raise ScriptError(EXIT_USAGE, "numpy is needed for the inputs and results; install it next to PyTorch")
    return np


def input_shapes(p, backward):
    q, kv = [(p["batch"], p[h], p[n], p["head_dim"]) for h, n in (("q_heads", "q_len"), ("kv_heads", "kv_len"))]
    return dict([("query", q), ("key", kv), ("value", kv)] + ([("grad_output", q)] if backward else []))


def mask_shape(p):
    b, h = p["mask_dims"].split("x") if "x" in p.get("mask_dims", "") else ("1", "1")
    return (p["batch"] if b == "B" else 1, p["q_heads"] if h == "H" else 1, p["q_len"], p["kv_len"])


SAVED_NAMES = {"query": "q", "key": "k", "value": "v", "grad_output": "grad_out"}  # repro --save-inputs' files


def read_inputs(folder, plan, layer):
    """Layer `layer`'s inputs from `repro --save-inputs DIR`: layerN.q/k/v/grad_out.npy (float32, logical layout,
    rounded to the dtype) and mask.npy (uint8 0/1 or float32), checked against the plan's shapes."""
    np = numpy()
    arrays = {name: load_npy(os.path.join(folder, "layer%d.%s.npy" % (layer, SAVED_NAMES[name])), shape, "f")
              for name, shape in input_shapes(plan.p, plan.run["backward"]).items()}
    mask = None
    if plan.p["mask"] in ("bool", "float"):
        boolean = plan.p["mask"] == "bool"
        mask = load_npy(os.path.join(folder, "mask.npy"), mask_shape(plan.p), "bu" if boolean else "f")
        mask = mask.astype(np.uint8 if boolean else np.float32)
    return {n: a.astype(np.float32) for n, a in arrays.items()}, mask


def load_npy(path, shape, kinds):
    try:
        a = numpy().load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise usage_error("--inputs: %s: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))
    if tuple(a.shape) != tuple(shape) or a.dtype.kind not in kinds:
        raise usage_error("--inputs: %s is %s %s, where the plan's problem has %s %s" % (
            path, dims(a.shape), a.dtype, dims(shape), "float32" if kinds == "f" else "uint8 (0/1)"))
    return a


def random_inputs(plan, layer):
    """Inputs of the script's own where the harness gave none (numpy, the plan's seed and the layer): not its values."""
    np, p = numpy(), plan.p
    rng = np.random.default_rng([p["seed"], layer])
    arrays = {n: rng.standard_normal(s, dtype=np.float32) for n, s in input_shapes(p, plan.run["backward"]).items()}
    mask = None
    if p["mask"] == "bool":
        mask = (rng.random(mask_shape(p)) >= 0.25).astype(np.uint8)
        if p.get("text_padding"):  # the batch entries after the first attend to `valid` of the `tokens` text keys
            mask[:], mask[1:, :, :, p["text_padding"]["valid"]:p["text_padding"]["tokens"]] = 1, 0
    elif p["mask"] == "float":
        mask = rng.uniform(-2, 2, mask_shape(p)).astype(np.float32)
    return arrays, mask


# -------------------------------------------------------------------------- PyTorch and memory
def import_torch(memory):
    """PyTorch >= 2.5 with CUDA, imported now (--memory async chooses its backend before PyTorch reads it)."""
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
    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2] if x.isdigit()) < (2, 5):
        raise ScriptError(EXIT_NO_GPU, "PyTorch %s is older than 2.5 (the math path's upcast and _safe_softmax)"
                          % torch.__version__)
    if not torch.cuda.is_available():  # no CUDA initialisation yet: the allocator can still change
        raise ScriptError(EXIT_NO_GPU, "PyTorch %s sees no usable CUDA device (torch.version.cuda=%s)"
                          % (torch.__version__, torch.version.cuda))
    if memory == "async" and torch.cuda.memory.get_allocator_backend() != "cudaMallocAsync":
        raise usage_error("--memory async: PyTorch's allocator backend is %s, not cudaMallocAsync"
                          % torch.cuda.memory.get_allocator_backend())
    return torch


def build_helper_library():
    """torch_stages_alloc.cu built once per source under ~/.cache/sdpa-repro (else /tmp): (path, command if built)."""
    source = b""
    for path in [ALLOCATOR_SOURCE] + ALLOCATOR_HEADERS:
        with open(path, "rb") as f:
            source += f.read()
    nvcc = shutil.which("nvcc") or next((p for p in (os.path.join(os.environ.get(v) or "/usr/local/cuda", "bin", "nvcc")
                                              for v in ("CUDA_HOME", "CUDA_PATH")) if os.path.exists(p)), None)
    if not nvcc:
        raise usage_error("--memory managed: no nvcc (on PATH, or in $CUDA_HOME/bin) to build %s" % ALLOCATOR_SOURCE)
    command = lambda out: [nvcc, "-shared", "-Xcompiler", "-fPIC", "-O2", "-I" + SOURCE_ROOT, "-o", out,
                           ALLOCATOR_SOURCE]
    key = hashlib.sha256(source + " ".join(command("OUT")).encode()).hexdigest()[:16]
    for folder in (os.path.join(os.path.expanduser("~"), ".cache", "sdpa-repro"), tempfile.gettempdir()):
        path = os.path.join(folder, "torch_stages_alloc-%s.so" % key)
        if os.path.exists(path):
            return path, None
        tmp = "%s.tmp.%d" % (path, os.getpid())
        try:
            os.makedirs(folder, exist_ok=True)
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
        c = ctypes
        self.path, lib = path, c.CDLL(path)
        for name, args, result in (("concurrent_managed_access", [c.c_int], c.c_int),
                                   ("touch_pages", [c.c_void_p, c.c_size_t, c.c_size_t], c.c_ulonglong),
                                   ("host_min_max", [c.c_void_p, c.c_size_t, c.c_int, c.POINTER(c.c_double)], None),
                                   ("prefetch_to_device", [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p], c.c_int),
                                   ("error_string", [c.c_int], c.c_char_p),
                                   ("managed_stats", [c.POINTER(c.c_longlong)], None)):
            f = getattr(lib, "sdpa_" + name)
            f.argtypes, f.restype = args, result
            setattr(self, name, f)

    def touch(self, ptr, nbytes):
        self.touch_pages(ptr, nbytes, TOUCH_PAGE_BYTES)

    def min_max(self, ptr, count, dtype):
        out = (ctypes.c_double * 2)()
        self.host_min_max(ptr, count, HOST_CODES[dtype], out)
        return out[0], out[1]

    def prefetch(self, ptr, nbytes, device, stream):
        error = self.prefetch_to_device(ptr, nbytes, device, stream)
        if error:
            raise RuntimeError("cudaMemPrefetchAsync: CUDA error %d (%s)" % (error, self.error_string(error).decode()))

    def stats(self):
        out = (ctypes.c_longlong * 5)()
        self.managed_stats(out)
        return dict(zip(("allocations", "frees", "live_bytes", "peak_bytes", "failed_allocations"), out))


def install_memory(torch, memory):
    """PyTorch on managed memory before its first allocation (an allocator in use cannot be changed)."""
    if memory != "managed":
        return None
    path, built = build_helper_library()
    if built:
        sys.stderr.write("%s: built the managed-memory allocator: %s\n" % (PROG, built))
    torch.cuda.memory.change_current_allocator(
        torch.cuda.memory.CUDAPluggableAllocator(path, "sdpa_managed_malloc", "sdpa_managed_free"))
    return Helper(path)


def device_info(torch, helper):
    props, cma = torch.cuda.get_device_properties(0), helper.concurrent_managed_access(0) if helper else -1
    return {"name": props.name, "compute_capability": "%d.%d" % (props.major, props.minor),
            "total_memory_bytes": props.total_memory, "concurrent_managed_access": None if cma < 0 else bool(cma),
            "torch_version": torch.__version__, "torch_cuda_version": torch.version.cuda}


# ------------------------------------------------------------------------------- the weights
# The model's weights loaded before the first call from a memory-mapped file, as a training script
# loads them (safetensors maps the files, `.to("cuda")` copies each tensor from the mapped pages): the
# file, the sizes and the stage's detail are repro's (math_sdpa/weights_load.cpp).
def default_weights_file():  # repro's: $SDPA_WEIGHTS_FILE, else $XDG_CACHE_HOME (or ~/.cache)/sdpa-repro/weights.bin
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME") or ".", ".cache")
    return os.environ.get("SDPA_WEIGHTS_FILE") or os.path.join(cache, "sdpa-repro", "weights.bin")


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


def kib_field(text, key):
    """A "Key:   123 kB" line's value in bytes (/proc/meminfo, /proc/self/status); None where there is none."""
    m = re.search(r"^%s:\s+(\d+)( kB)?$" % key, text or "", re.M)
    return int(m.group(1)) * (1024 if m.group(2) else 1) if m else None


def read_host_memory():
    """MemFree, MemAvailable, Cached and this process's RssFile in bytes (math_sdpa/host_memory.h)."""
    def text(name):
        try:
            with open(name) as f:
                return f.read()
        except OSError:
            return None
    texts = [text("/proc/meminfo"), text("/proc/self/status")]
    return {"mem_free": kib_field(texts[0], "MemFree"), "mem_available": kib_field(texts[0], "MemAvailable"),
            "cached": kib_field(texts[0], "Cached"), "rss_file": kib_field(texts[1], "RssFile")}


def load_weights(runner, torch, plan, keep):
    """Before the first call, the harness's weights file (its run makes it) mapped copy-on-write (MAP_PRIVATE, as
    repro maps it), each tensor's slice .to("cuda") and kept, a load stage each; the mapping dropped or kept."""
    nbytes, path = plan.weights_bytes(), plan.s.get("weights_file") or default_weights_file()
    if torch is not None and (not os.path.isfile(path) or os.path.getsize(path) < nbytes):
        return runner.be.cannot("the weights' load from %s, which does not hold %d bytes (repro --mapped-weights "
                                "makes it): not loaded" % (path, nbytes))
    tensors = weights_tensors(nbytes)
    w = {"file": path, "bytes": nbytes, "tensors": len(tensors), "mapping": plan.s.get("weights_mapping", "unmap"),
         "before": read_host_memory()}
    copy, mapping = lambda n, at: None, []
    if torch is not None:
        fd = os.open(path, os.O_RDONLY)
        if hasattr(os, "posix_fadvise"):  # from what a fresh boot has: the pages are the load's to bring in
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        mapping.append(numpy().memmap(path, dtype="uint8", mode="c", shape=(nbytes,)))
        copy = lambda n, at: (keep.append(torch.from_numpy(mapping[0][at:at + n]).to("cuda")), torch.cuda.synchronize())
    start = time.monotonic()
    for i, (n, at) in enumerate(tensors):
        runner.stage(stages_when("load")[0], weights_detail(i, len(tensors), n, at, plan.s), "path",
                     lambda n=n, at=at: copy(n, at))
    if mapping and w["mapping"] == "keep":
        keep.append(mapping[0])  # the process holds the mapping until it ends
    mapping.clear()
    w["seconds"] = time.monotonic() - start
    w["gb_per_s"] = nbytes / 1e9 / w["seconds"] if w["seconds"] > 0 else 0.0
    w["after"] = read_host_memory()
    return w


def stats_of(a):
    np = numpy()
    finite = np.isfinite(a)
    values = a[finite].astype(np.float64)
    return {"elements": int(a.size), "l2": float(math.sqrt(float((values * values).sum()))),
            "sum": float(values.sum())}, int(a.size - finite.sum())


class Run:
    """What the JSON reports (repro/run/run_json.cpp's shape, where its fields apply)."""

    def __init__(self, args, argv, plan):
        self.args, self.argv, self.plan, self.memory = args, argv, plan, args.memory
        self.started, self.outcome_code, self.error, self.error_stage = time.monotonic(), EXIT_PASS, None, None
        self.timings, self.backend, self.device, self.torch, self.watchdog = {}, None, None, None, None
        self.result_tensor, self.result_stats, self.nonfinite = None, None, 0
        self.gradient_stats, self.nonfinite_gradients = None, 0
        self.notes, self.inputs_source, self.weights_load = [], None, None

    def to_json(self):
        a, plan, be = self.args, self.plan, self.backend
        calls = sorted(be.call_ms) if be else []
        stage = lambda n, v: {"stage": n, "calls": len(v), "median_ms": statistics.median(v), "min_ms": v[0],
                              "max_ms": v[-1], "clock": "host"}
        return {
            "meta": {"format_version": 2, "harness": "sdpa-repro", "tool": LOG_FILE_NAME,
                     "command_line": [PROG] + self.argv, "python": sys.version.split()[0]},
            "device": self.device,
            "config": {"plan": plan.source, "plan_command": plan.command, "scenario": plan.j["scenario"],
                       "fixes": plan.j["fixes"], "problem": plan.p, "settings": plan.s, "run": plan.run,
                       "context": plan.context, "memory": self.memory, "mode": a.mode, "log": a.log,
                       "log_extras": a.log_extras, "stage_timeout_s": a.stage_timeout, "inputs": a.inputs,
                       "inject": "hang:" + a.inject if a.inject else "none", "dry_run": a.dry_run},
            "outcome": OUTCOMES[self.outcome_code], "exit_code": self.outcome_code,
            "error": self.error, "error_stage": self.error_stage,
            "result_tensor": self.result_tensor, "result_stats": self.result_stats, "nonfinite_outputs": self.nonfinite,
            "gradient_stats": self.gradient_stats, "nonfinite_gradients": self.nonfinite_gradients,
            "iterations_done": be.iterations_done if be else 0,
            "timing": {"step_median_ms": statistics.median(calls) if calls else None,
                       "first_step_ms": be.call_ms[0] if calls else None},
            "stages": [stage(n, sorted(self.timings[n])) for n in [r["name"] for r in TABLE] + [SDPA_CALL]
                       if n in self.timings],
            "cannot_express": be.cannot_express if be else [],
            "weights_load": self.weights_load, "wall_seconds": time.monotonic() - self.started,
            "watchdog": self.watchdog, "inputs_source": self.inputs_source, "torch": self.torch,
            "notes": self.notes}

    def write(self):
        if self.args.json:
            try:
                write_atomically(self.args.json, lambda f: f.write(json.dumps(self.to_json(), indent=2) + "\n"), "w")
            except ScriptError as e:
                sys.stderr.write("%s: error: --json %s\n" % (PROG, e))


def write_atomically(path, write, mode="wb"):
    """`write(file)` to path.tmp.<pid>, then a rename over `path` (math_sdpa/atomic_file.h)."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, mode) as f:
            write(f)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise usage_error("%s: %s" % (path, e.strerror or e))


def whole_mode(runner, plan, be):
    """F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.MATH) in place of the plan's GPU steps."""
    for kind in sorted({op["op"] for op in plan.ops("host_access") + plan.ops("fix_sync") + plan.ops("prefetch")}):
        be.cannot("%s inside the call: --mode whole issues the call as one (--mode stages reaches it)" % kind)
    if plan.run["backward"]:
        be.cannot("the backward call in --mode whole: the forward call alone runs (--mode stages runs it)")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    p, t = plan.p, be.t
    native = getattr(t.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
    if native:
        native(p["precision"] == "native" and p["dtype"] != "fp32")
    g = lambda name: be.get({"tensor": name, "chunk": 0})

    def call():
        runner.log.note("[TORCH_SDPA_CALL] F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.MATH)")
        with sdpa_kernel(SDPBackend.MATH):
            be.put({"tensor": "output", "chunk": 0}, t.nn.functional.scaled_dot_product_attention(
                g("query"), g("key"), g("value"), attn_mask=g("mask_input") if p["mask"] in ("bool", "float") else None,
                dropout_p=p["dropout"], is_causal=p["mask"] == "causal", scale=p["scale"], enable_gqa=p["gqa"]))
        runner.log.note("[TORCH_SDPA_CALL_DONE] issued")
    runner.whole = call


def run_torch(run, plan, inputs_dir, log, watchdog, inputs_why):
    a = run.args
    torch = import_torch(run.memory)
    helper = install_memory(torch, run.memory)
    run.device = device_info(torch, helper)
    torch.manual_seed(plan.p["seed"] % (1 << 63))
    be = run.backend = TorchBackend(torch, plan, run.memory, helper, a.stage_timeout)
    be.say_conditions(a.check)
    run.torch = {"version": torch.__version__, "cuda": torch.version.cuda,
                 "allocator_backend": "pluggable" if helper else torch.cuda.memory.get_allocator_backend()}
    if plan.p["dropout"] > 0:
        run.notes.append("dropout: PyTorch's own generator (torch.manual_seed(%d)), not the harness's Philox "
                         "stream: the masks differ, so the outputs are not comparable" % plan.p["seed"])
    log.write([debug_line("ALLOC_DEBUG", "[TORCH_MEMORY] memory=%s allocator=%s" % (
        run.memory, "CUDAPluggableAllocator(cudaMallocManaged) library=%s concurrentManagedAccess=%d" % (
            helper.path, helper.concurrent_managed_access(be.device)) if helper else run.torch["allocator_backend"]))])
    runner = Runner(plan, be, log, a.log, watchdog, a.inject, run.timings)
    kept, got = [], {}  # the weights on the GPU (and their mapping with --weights-mapping keep); the results
    name, grads = plan.result()
    name = "output" if a.mode == "whole" else name
    try:
        if plan.weights_bytes():
            run.weights_load = load_weights(runner, torch, plan, kept)
        if inputs_dir is None:
            be.cannot("the harness's inputs (%s): random inputs of the script's own, seeded with the plan's seed; "
                      "the values differ from the harness's" % (inputs_why or "no --inputs"))
        run.inputs_source = inputs_dir or "random (numpy, seed %d and the layer)" % plan.p["seed"]
        for layer in range(1, plan.run["layers"] + 1):
            be.upload(layer, *(read_inputs(inputs_dir, plan, layer) if inputs_dir else random_inputs(plan, layer)))

        def last_step():  # before free_step gives back what the step kept: the last layer's
            for n in [name] + (grads if a.mode == "stages" else []):
                got[n] = be.result(n, plan.run["layers"])
        if a.mode == "whole":
            whole_mode(runner, plan, be)
        runner.run(last_step)
    except RuntimeError as e:  # PyTorch's CUDA and cuBLAS errors
        if be.toucher:
            be.toucher.stop = True
        stage = watchdog.stage
        watchdog.disarm()
        raise ScriptError(EXIT_CUDA_ERROR, "%s%s" % ("in stage %s: " % stage if stage else "",
                                                     (str(e).strip().splitlines() or [type(e).__name__])[0]), stage)
    run.result_tensor = name
    stem = a.save_output[:-4] if a.save_output and a.save_output.endswith(".npy") else a.save_output
    for n, x in got.items():
        if x is None:
            continue
        stats, bad = stats_of(x)
        if n == name:
            run.result_stats, run.nonfinite = stats, bad
        else:
            run.gradient_stats = dict(run.gradient_stats or {}, **{n: stats})
            run.nonfinite_gradients += bad
        if a.save_output:  # as repro --save-output FILE.npy, and with the backward FILE.grad_query.npy, ...
            write_atomically(a.save_output if n == name else "%s.%s.npy" % (stem, n),
                             lambda f, x=x: numpy().save(f, x, allow_pickle=False))
    if helper is not None:
        run.torch["managed_allocator"] = helper.stats()
    if run.nonfinite:
        raise ScriptError(EXIT_MISMATCH, "%d non-finite values in the %s tensor" % (run.nonfinite, name))
    if run.nonfinite_gradients:
        raise ScriptError(EXIT_MISMATCH, "%d non-finite values in the input gradients" % run.nonfinite_gradients)


def run_dry(run, plan, log, watchdog):
    """--dry-run: the plan's lines, nothing computed (the weights' load too: its lines, no file)."""
    be = run.backend = Backend(plan, run.memory, run.args.stage_timeout)
    be.say_conditions(run.args.check)
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
    a("--inputs", help="the harness's inputs, a folder of repro --save-inputs (layerN.q.npy, ...)")
    a("--mode", default="stages", choices=("stages", "whole"), help="stages (default) or whole "
                                                                    "(F.scaled_dot_product_attention)")
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
    a("--check", action="store_true", help="repro's: there is no reference here (said once)")
    return ap


def parse_command_line(argv):
    """(options, the plan, the inputs' folder, why there are no inputs)."""
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
        plan, saved, why = plan_from_repro(args.repro or default_repro(), run_args, not (inputs or args.dry_run))
        inputs = inputs or saved
    args.memory = args.memory or MEMORY_OF_ALLOC.get(plan.s["alloc"], "caching")
    if args.inputs:  # checked before anything runs: the first layer's
        read_inputs(inputs, plan, 1)
    if args.inject is not None:
        kind, _, stage = args.inject.partition(":")
        if kind != "hang" or stage not in plan.stages() + ([SDPA_CALL] if args.mode == "whole" else []):
            raise usage_error("--inject: '%s' is not hang:STAGE of a stage this plan runs (%s)" % (
                args.inject[:40], " ".join(plan.stages())))
        args.inject = stage
    return args, plan, inputs, why


def summary_line(run):
    j = run.to_json()
    text = "%s: %s (exit %d)" % (PROG, j["outcome"], j["exit_code"]) + (": " + j["error"] if j["error"] else "")
    if j["result_stats"]:
        s = j["result_stats"]
        text += "; %s l2=%.6g sum=%.6g elements=%d" % (j["result_tensor"], s["l2"], s["sum"], s["elements"])
    text += "".join("; %s l2=%.6g" % (n, g["l2"]) for n, g in (j["gradient_stats"] or {}).items())
    w = j["weights_load"]
    if w:  # what the load did to the host's memory: the page cache the mapped file filled
        change = lambda k: "?" if None in (w["before"][k], w["after"][k]) else "%+.2f GB" % (
            (w["after"][k] - w["before"][k]) / 1e9)
        text += "; weights %.2f GB, %.2f GB/s, Cached %s, MemAvailable %s" % (
            w["bytes"] / 1e9, w["gb_per_s"], change("cached"), change("mem_available"))
    if j["timing"]["step_median_ms"] is not None and not run.args.dry_run:
        text += "; step median %.3f ms over %d step(s)" % (j["timing"]["step_median_ms"], j["iterations_done"])
    return text


KNOWN_OPS = ({name[3:] for name in dir(Backend) if name.startswith("op_")} |
             {name[3:] for name in dir(TorchBackend) if name.startswith(("op_", "do_"))})


def main(argv):
    try:
        args, plan, inputs, why = parse_command_line(argv)
    except ScriptError as e:
        sys.stderr.write("%s: error: %s\n" % (PROG, e))
        return e.exit_code
    run = Run(args, argv, plan)
    log = DebugLog(args.log != "off", extras=args.log_extras)

    def on_hang(stage, running, message):
        run.outcome_code, run.error, run.error_stage = EXIT_HANG, message, stage
        run.watchdog = {"kind": "hang", "stage": stage, "running_seconds": running, "message": message,
                        "stage_timeout_s": args.stage_timeout, "python_stacks": "dumped to stderr by faulthandler"}
        run.write()

    watchdog = Watchdog(args.stage_timeout, on_hang)
    try:
        if args.dry_run:
            run_dry(run, plan, log, watchdog)
        else:
            run_torch(run, plan, inputs, log, watchdog, why)
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
