#!/usr/bin/env python3
"""test_torch_stages.py: scripts/torch_stages.py, compare_logs.py and scenario_table.py without PyTorch.

CTest's cpu.torch_stages (skipped, exit 77, where there is no python3). Checks:
  - the dry run of a plan (`repro --plan --json`) writes the harness's stage sequence for it: the
    sdpa-debug tags in the order math_sdpa/pipeline.cpp and stage_log.cpp write them, derived here
    from the plan's staged steps (layers, iterations, the backward calls last layer first, a graph,
    per-call allocations, fix 5's chunks, the weights' load), for the scenarios 0-7 and training plans;
  - its stage lines are the harness's (tests/fixtures/torch_stages/*.log, made from stage_log.cpp)
    and the default call's tags those docs/LOG_FORMAT.md and docs/TORCH_STAGES.md document;
  - the PyTorch backend, on a stand-in for PyTorch that keeps shapes and dtypes: every plan's
    operations read only tensors made before them, at::matmul's operands agree, the result and the
    gradients have the problem's shapes and dtypes, a step's tensors are freed at its end, the GEMMs
    run on the side stream where the plan puts them, a graph that cannot be captured runs eagerly;
  - the command REPORT.md prints runs for every scenario (repro report --no-run), with the report's problem;
  - bad options and plans exit 2 with one line; a condition PyTorch cannot express is one line, not a refusal;
  - the watchdog catches an injected stall: the stage named, the stacks dumped, the JSON, exit 3;
  - the script names no stage, scenario or fix: it reads them from the plan and the stage table;
  - the inputs of `repro --save-inputs` are read and checked (needs numpy); the weights' load is repro's;
  - compare_logs.py finds the first divergence and a call that stops early; scenario_table.py's table.

    python3 tests/test_torch_stages.py --repro BIN
"""
import ast
import contextlib
import importlib.util
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "torch_stages.py")
COMPARE = os.path.join(ROOT, "scripts", "compare_logs.py")
SCENARIO_TABLE = os.path.join(ROOT, "scripts", "scenario_table.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "torch_stages")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import compare_logs  # noqa: E402
import stage_table  # noqa: E402
import torch_stages  # noqa: E402

CONFIG = {"repro": None}
# The harness's stage table, asked of the binary the tests were given (main()).
TABLE = []
ROWS = {}

# Plans the tests run, as repro's run options: the scenarios' own conditions at sizes a dry run and the
# stand-in go through quickly, and the training process's (layers, steps, retention, per-call allocation).
SMALL = ["-b", "1", "--heads", "2", "-L", "64", "-E", "32"]
PLANS = {"default": [],
         "training": ["-L", "64", "-S", "64", "--backward", "--retain", "checkpoint", "--alloc-timing", "per-call",
                      "--layers", "2", "--dropout", "0.1", "--mask", "bool"],
         "gqa_steps": ["-L", "96", "-S", "160", "-E", "32", "--kv-heads", "2", "--backward", "--mask", "float",
                       "--mask-dims", "BxH", "--dropout", "0.2", "--layers", "2", "--iters", "2"],
         "bshe_native": ["--k-layout", "bshe", "--backward", "--mask", "causal", "--dtype", "fp16", "--precision",
                         "native", "--scale", "-0.5"],
         "graph": ["-L", "32", "--graph", "--backward", "--iters", "2"],
         "aux_stream": ["--scenario", "1", "--gemm-stream", "aux", "--gemm-order", "event", "--backward", "--full"],
         "host_both": ["--scenario", "2"] + SMALL + ["--scores-to-host", "both", "--backward", "--full", "--fixes", "2"],
         "chunks": ["--scenario", "6", "--fix", "on", "-b", "1", "--heads", "4", "-L", "512", "--layers", "3",
                    "--chunk-size", "256K"],
         "weights": ["--mapped-weights", "221M", "--iters", "2"]}
for n in range(1, 8):
    for fix in ("off", "on"):
        PLANS["scenario%d_%s" % (n, fix)] = ["--scenario", str(n), "--fix", fix] + (
            SMALL + ["--layers", "3"] if n in (2, 6, 7) else []) + (["--mapped-weights", "100M"] if n == 7 else [])


def run_script(args, cwd=None, timeout=120, script=SCRIPT):
    start = time.monotonic()
    r = subprocess.run([sys.executable, script] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    r.seconds = time.monotonic() - start
    return r


def normalised(text):
    return [compare_logs.normalise(line) for _, _, line in compare_logs.tagged_lines(text)]


def tags(text):
    return [t for _, t, _ in compare_logs.tagged_lines(text)]


def positions(text):
    """The [LAYER] lines' words, in order: which layer of which step each call is."""
    return re.findall(r"\[LAYER\] (step=\d+ layer=\d+/\d+)", text)


def has_numpy():
    return importlib.util.find_spec("numpy") is not None


_plans = {}


def plan_file(name, args=None):
    """repro's plan for PLANS[name] (or `args`), made once; the test is skipped without --repro."""
    if not CONFIG["repro"]:
        raise unittest.SkipTest("no --repro: the plans are the harness's to make")
    key = name if args is None else " ".join(args)
    if key not in _plans:
        path = os.path.join(_TMP.name, "plan%d.json" % len(_plans))
        r = subprocess.run([CONFIG["repro"]] + (PLANS[name] if args is None else args) + ["--plan", "--json", path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        assert r.returncode == 0, (key, r.stderr)
        _plans[key] = path
    return _plans[key]


_TMP = tempfile.TemporaryDirectory()


def dry_run(plan, *extra, code=0, test=None):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        r = run_script(["--plan", plan, "--dry-run", "--json", out] + list(extra), cwd=tmp)
        if test:
            test.assertEqual(r.returncode, code, r.stderr[-3000:])
        r.json = None
        if os.path.exists(out):
            with open(out) as f:
                r.json = json.load(f)
    return r


# ----------------------------------------------------------------------- the harness's stage sequence
def harness_instrumentation():
    """The tags and events the sdpa-debug format writes without --log-extras (stage_log.cpp)."""
    with open(os.path.join(ROOT, "math_sdpa", "stage_log.cpp")) as f:
        body = re.search(r"bool is_instrumentation_line\(.*?\n\}", f.read(), re.S).group(0)
    sets = re.findall(r"\{([^{}]*)\};", body)
    return set(re.findall(r'"([A-Z_]+)"', sets[0])), set(re.findall(r'"([a-z_]+)"', sets[1]))


def harness_weights_sizes():
    """math_sdpa/weights_load.cpp weights_tensor_sizes(), in bytes."""
    with open(os.path.join(ROOT, "math_sdpa", "weights_load.cpp")) as f:
        body = re.search(r"weights_tensor_sizes\(\) \{.*?sizes = \{(.*?)\};", f.read(), re.S).group(1)
    return [int(n) << 20 for n in re.findall(r"(\d+) \* kMiB", body)]


def expected_tags(path, extras=False):
    """The tags `repro --log-format sdpa-debug` writes for the plan at `path`, read from the plan as the
    harness runs it: repro/run/runner.cpp (the weights' load, then per iteration run(), then end_step's
    free_step), pipeline.cpp (run: each layer's forward call, then with --backward and no graph each
    layer's backward call from the last; run_layer: entry, the GPU steps or the graph's capture,
    instantiation (once) and launch, free_call, stream_sync; execute: a staged step with operations is a
    stage; a capture writes nothing of its steps) and stage_log.cpp (a stage's lines are the table's, an
    allocation in a memory stage two lines, a chunk's alloc stage allocating only the tensors kept per
    chunk; without --log-extras only the instrumentation's tags)."""
    with open(path) as f:
        plan = json.load(f)
    tags_, events = harness_instrumentation()
    calls, run, table = plan["calls"], plan["run"], {t["tensor"]: t for t in plan["tensors"]}
    out, layers = [], []

    def line(channel, message):
        tag = message.split(" ")[0] if channel == "CUDA_EVENT" else message[1:message.index("]")]
        if extras or (tag in events if channel == "CUDA_EVENT" else tag in tags_):
            out.append(channel + " " + tag)

    def stage(name, ops=()):
        for t in ROWS[name]["debug_begin"]:
            line(compare_logs.CHANNELS[t["channel"]], t["text"])
        for op in ops:
            if op["op"] == "allocate":
                for tensor in op["tensors"]:
                    if op["chunk"] == 0 or table[tensor]["chunks"] > 1:
                        out.extend(["ALLOC_DEBUG CUDA_MALLOC", "ALLOC_DEBUG CUDA_MALLOC_DONE"])
            if op["op"] == "note":
                line("SDPA_DEBUG", op["text"])
        for t in ROWS[name]["debug_end"]:
            line(compare_logs.CHANNELS[t["channel"]], t["text"])

    def execute(part):
        for step in calls[part]:
            if "stage" in step and step["ops"]:
                stage(step["stage"], step["ops"])

    def position(step, layer):
        if run["layers"] > 1 or step > 1:
            line("SDPA_DEBUG", "[LAYER] step=%d layer=%d/%d" % (step, layer, run["layers"]))
            layers.append("step=%d layer=%d/%d" % (step, layer, run["layers"]))

    left, sizes = int(plan["settings"]["mapped_weights"]), itertools.cycle(harness_weights_sizes())
    while left > 0:  # a load stage for each tensor of the harness's sizes, the last cut short
        stage("load_weights")
        left -= next(sizes)
    graph_made = False
    for step in range(1, run["iters"] + 1):
        for layer in range(1, run["layers"] + 1):
            position(step, layer)
            execute("entry")
            if run["graph"]:
                if not graph_made:
                    stage("graph_capture")
                    stage("graph_instantiate")
                    graph_made = True
                stage("graph_launch")
            else:
                execute("forward_gpu")
            execute("free_call")
            execute("stream_sync")
        if run["backward"] and not run["graph"]:
            for layer in range(run["layers"], 0, -1):
                position(step, layer)
                execute("backward_gpu")
                execute("backward_sync")
        execute("free_step")
    return (out, layers) if extras else out


# The script's own lines for the conditions it carries out (the harness words them itself, with
# numbers of its run the plan does not hold), left out of the comparison with --log-extras.
SCRIPT_NOTES = {"SDPA_DEBUG ORDER_GEMM", "SDPA_DEBUG HOST_ACCESS"}


class StageSequence(unittest.TestCase):
    def test_the_dry_run_writes_the_harness_stage_sequence_for_every_plan(self):
        for name in PLANS:
            with self.subTest(plan=name):
                path = plan_file(name)
                expected = expected_tags(path)
                self.assertIn("CUDA_EVENT math_sdpa_complete", expected)
                self.assertEqual(tags(dry_run(path, test=self).stderr), expected)
                text = dry_run(path, "--log-extras", test=self).stderr
                expected, layers = expected_tags(path, extras=True)
                self.assertEqual([t for t in tags(text) if t not in SCRIPT_NOTES], expected)
                self.assertEqual(positions(text), layers)  # the backward calls from the last layer

    def test_the_plans_cover_what_the_sequence_depends_on(self):
        """A plan of each kind the derivation treats apart is among PLANS (else the test above proves less)."""
        seen = {}
        for name in PLANS:
            with open(plan_file(name)) as f:
                plan = json.load(f)
            staged = [s["stage"] for part in plan["calls"].values() if isinstance(part, list) for s in part if "stage" in s]
            for key, value in (("layers", plan["run"]["layers"] > 1), ("iters", plan["run"]["iters"] > 1),
                               ("backward", plan["run"]["backward"]), ("graph", plan["run"]["graph"]),
                               ("chunks", plan["calls"]["chunks"] > 1), ("per-call", "alloc_scores" in staged),
                               ("weights", plan["settings"]["mapped_weights"] != "0"),
                               ("recompute", staged.count("free_call") > 1)):
                seen[key] = seen.get(key, False) or value
        self.assertEqual([k for k, v in seen.items() if not v], [])

    def test_the_stage_lines_are_the_harness_lines(self):
        """The fixtures, made by make_fixtures.cpp from stage_log.cpp's own code: the stage lines of the first
        call (the notes are left out: the harness words them since, and its conditions' notes the plan lacks)."""
        cases = {"default": [], "mask_bool_gqa_dropout": ["-S", "96", "--kv-heads", "2", "--mask", "bool",
                                                           "--mask-dims", "Bx1", "--dropout", "0.1"],
                 "causal_fp16_native_scale": ["--dtype", "fp16", "--precision", "native", "--mask", "causal", "--scale",
                                              "-0.5"],
                 "bshe_float_mask": ["--k-layout", "bshe", "--mask", "float", "--mask-dims", "BxH", "--dtype", "fp32"],
                 "scenario1": ["--scenario", "1"], "scenario3_fix": ["--scenario", "3", "--fix", "on"],
                 "scenario4": ["--scenario", "4"], "fixes_1_2": ["--fixes", "1,2"],
                 "scenario2_report": ["-b", "1", "--heads", "24", "-L", "4608", "-E", "128", "--k-layout", "bshe",
                                      "--scenario", "2"]}
        note = re.compile(r"^\[SDPA_DEBUG\] \[(SCENARIO|FIX)_\d\]")
        for name, args in cases.items():
            with self.subTest(fixture=name):
                with open(os.path.join(FIXTURES, name + ".log")) as f:
                    expected = [x for x in normalised(f.read()) if not note.match(x)]
                text = dry_run(plan_file(name, args), "--log-extras", test=self).stderr
                call = compare_logs.first_call(compare_logs.tagged_lines(text))
                mine = [compare_logs.normalise(x) for _, t, x in call if t not in SCRIPT_NOTES]
                mine = [x for x in mine if not note.match(x)]
                self.assertEqual(mine, expected)
                self.assertGreater(len(expected), 15)

    def test_the_default_call_has_the_documented_tag_sequences(self):
        with open(os.path.join(ROOT, "docs", "LOG_FORMAT.md")) as f:
            log_format = f.read()
        with open(os.path.join(ROOT, "docs", "TORCH_STAGES.md")) as f:
            doc = f.read()
        block = lambda text, name: [x.strip() for x in re.search(r"<!-- %s -->\n(.*?)<!-- end -->" % name, text,
                                                                 re.S).group(1).splitlines() if x.strip()]
        backward = plan_file("backward", ["--backward"])
        for variant, extra in (("default", []), ("extras", ["--log-extras"])):
            with self.subTest(variant=variant):
                text = dry_run(backward, *extra, test=self).stderr
                call = compare_logs.first_call(compare_logs.tagged_lines(text))
                self.assertEqual([t for _, t, _ in call], block(log_format, "call-tags:" + variant))
                self.assertEqual(tags(text)[len(call):], block(doc, "backward-tags:" + variant))

    def test_the_log_is_off_at_log_off(self):
        r = dry_run(plan_file("default"), "--log", "off", test=self)
        self.assertEqual(r.stderr, "")


# ------------------------------------------------------------------------------ a stand-in for PyTorch
class FakeDType:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __repr__(self):
        return self.name


def broadcast(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and 1 not in (x, y):
            raise AssertionError("shapes %s and %s do not broadcast" % (a, b))
        out.append(max(x, y))
    return tuple(reversed(out))


class FakeTensor:
    """A tensor's shape and dtype, and the operations the backend calls on one, each checked."""
    _addresses = itertools.count(0x1000, 0x1000)

    def __init__(self, torch, shape, dtype):
        self.torch, self.shape, self.dtype, self.address = torch, tuple(shape), dtype, next(self._addresses)

    def _new(self, shape=None, dtype=None):
        return FakeTensor(self.torch, self.shape if shape is None else shape, dtype or self.dtype)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self.dtype.size

    def data_ptr(self):
        return self.address

    def transpose(self, a, b):
        s = list(self.shape)
        s[a], s[b] = s[b], s[a]
        return self._new(s)

    def contiguous(self):
        return self._new()

    def to(self, dtype=None, device=None):
        return self._new(dtype=dtype if isinstance(dtype, FakeDType) else None)

    def float(self):
        return self._new(dtype=self.torch.float32)

    def __mul__(self, k):
        assert isinstance(k, float), k
        return self._new()

    def repeat_interleave(self, n, dim):
        s = list(self.shape)
        s[dim] *= n
        return self._new(s)

    def reshape(self, *shape):
        assert self.numel() == FakeTensor(None, shape, None).numel(), (self.shape, shape)
        return self._new(shape)

    def sum(self, dim):
        return self._new(self.shape[:dim] + self.shape[dim + 1:])

    def __getitem__(self, index):
        rows = index[1]
        assert index[0] is Ellipsis and index[2] == slice(None) and 0 <= rows.start < rows.stop <= self.shape[-2]
        return self._new(self.shape[:-2] + (rows.stop - rows.start,) + self.shape[-1:])

    def add_(self, other):
        assert broadcast(self.shape, other.shape) == self.shape, (self.shape, other.shape)
        return self

    def copy_(self, other):
        assert other.shape == self.shape, (self.shape, other.shape)
        return self

    def logical_not(self):
        return self._new()

    tril = logical_not

    def record_stream(self, stream):
        self.torch.calls.append(("record_stream", stream.name))


class FakeStream:
    def __init__(self, torch, name, handle):
        self.torch, self.name, self.cuda_stream = torch, name, handle

    def synchronize(self):
        self.torch.calls.append(("sync", self.name))

    def wait_stream(self, other):
        self.torch.calls.append(("wait", self.name, other.name))


class FakeTorch:
    """What TorchBackend calls of PyTorch, keeping shapes and dtypes; `calls` what it did, in order."""

    def __init__(self, capturable=True):
        self.calls, self.capturable = [], capturable
        self.float32, self.bfloat16, self.float16, self.bool = (FakeDType(n, s) for n, s in (
            ("float32", 4), ("bfloat16", 2), ("float16", 2), ("bool", 1)))
        torch, streams = self, itertools.count(1)

        class Cuda:
            current = FakeStream(torch, "path", 0)
            Stream = staticmethod(lambda: FakeStream(torch, "side%d" % next(streams), 0x7000 + next(streams)))
            Event = type("Event", (), {"record": lambda self, s: None, "query": lambda self: True})
            CUDAGraph = type("CUDAGraph", (), {"replay": lambda self: torch.calls.append(("replay",))})
            current_device = staticmethod(lambda: 0)
            synchronize = staticmethod(lambda device=None: torch.calls.append(("sync", "device")))
            _sleep = staticmethod(lambda cycles: None)

            @classmethod
            def current_stream(cls):
                return cls.current

            @classmethod
            def set_stream(cls, s):
                cls.current = s

            @classmethod
            @contextlib.contextmanager
            def stream(cls, s):
                before, cls.current = cls.current, s
                try:
                    yield
                finally:
                    cls.current = before

            @staticmethod
            @contextlib.contextmanager
            def graph(g):
                torch.calls.append(("capture",))
                yield
                if not torch.capturable:
                    raise RuntimeError("operation not permitted when stream is capturing")

        def same(x, *a):
            return x._new()

        self.cuda = Cuda
        self.ops = type("ops", (), {"aten": type("aten", (), {
            "_safe_softmax": staticmethod(same), "native_dropout": staticmethod(lambda x, p, t: (x._new(), x._new())),
            "native_dropout_backward": staticmethod(same), "_softmax_backward_data": staticmethod(same)})()})()

    def device(self, *a):
        return "cuda:0"

    def ones(self, *shape, dtype=None, device=None):
        return FakeTensor(self, shape, dtype)

    empty = ones

    def scalar_tensor(self, value, dtype=None, device=None):
        return FakeTensor(self, (), dtype)

    def where(self, cond, a, b):
        return FakeTensor(self, broadcast(cond.shape, b.shape), b.dtype)

    def matmul(self, a, b):
        assert a.shape[-1] == b.shape[-2] and a.dtype is b.dtype, ("matmul", a.shape, a.dtype, b.shape, b.dtype)
        self.calls.append(("matmul", self.cuda.current.name))
        return FakeTensor(self, broadcast(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), a.dtype)


class FakeHelper:
    def __init__(self, torch):
        self.torch = torch

    def concurrent_managed_access(self, device):
        return 1

    def touch(self, ptr, nbytes):
        time.sleep(0.001)

    def min_max(self, ptr, count, dtype):
        self.torch.calls.append(("host_read",))
        return 0.0, 1.0

    def prefetch(self, ptr, nbytes, device, stream):
        self.torch.calls.append(("prefetch",))


def stand_in(plan, torch):
    """TorchBackend on `torch` for `plan`, each layer's inputs given as the harness gives them."""
    be = torch_stages.TorchBackend(torch, plan, "managed", FakeHelper(torch), 20)
    p = plan.p
    dt = getattr(torch, torch_stages.TORCH_DTYPES[p["dtype"]])
    for layer in range(1, plan.run["layers"] + 1):
        for name, shape in torch_stages.input_shapes(p, plan.run["backward"]).items():
            be.layers.setdefault(layer, {})[(name, 0)] = FakeTensor(torch, shape, dt)
    if p["mask"] in ("bool", "float"):
        be.shared[("mask_input", 0)] = FakeTensor(torch, torch_stages.mask_shape(p), torch.bool if p["mask"] == "bool" else dt)
    return be, {}


def stand_in_run(path, capturable=True):
    """The plan at `path` run by TorchBackend on FakeTorch: (the backend, the torch, the result and the
    gradients as the last step left them)."""
    plan = torch_stages.load_plan(path)
    torch = FakeTorch(capturable)
    be, got = stand_in(plan, torch)

    def last_step():
        be.layer = plan.run["layers"]
        name, grads = plan.result()
        got.update({n: be.get({"tensor": n, "chunk": 0}) for n in [name] + grads})
    torch_stages.Runner(plan, be, torch_stages.DebugLog(False), "stages", None, None, {}).run(last_step)
    return be, torch, got


class StandIn(unittest.TestCase):
    def test_every_plan_maps_onto_pytorch_operations_that_fit(self):
        for name in PLANS:
            with self.subTest(plan=name):
                be, torch, got = stand_in_run(plan_file(name))
                p = be.p
                name, grads = be.plan.result()
                B, H, Hkv, L, S, E = (p[k] for k in ("batch", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim"))
                expected = (B, H, L, E) if name in ("output", "out_acc") else (B, H, L, S)
                self.assertEqual(got[name].shape, expected)
                if name == "output":
                    self.assertEqual(got[name].dtype.name, torch_stages.TORCH_DTYPES[p["dtype"]])
                self.assertEqual(len(grads), 3 if be.plan.run["backward"] else 0)
                for g, shape in zip(grads, [(B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, E)]):
                    self.assertEqual((got[g].shape, got[g].dtype.name), (shape, torch_stages.TORCH_DTYPES[p["dtype"]]))
                # What a step keeps goes at its end, every layer's (free_step).
                step_kept = {t for t, spec in be.plan.tensors.items() if spec["lifetime"] == "step"}
                left = {k[0] for slot in be.layers.values() for k in slot} & step_kept
                self.assertEqual(left if be.plan.staged("free_step") else set(), set())
                gemms = [c for c in torch.calls if c[0] == "matmul"]
                self.assertTrue(gemms)
                if be.apart:  # the GEMMs the plan puts on its GEMM stream run on the side stream, and only they
                    gemm_steps = sum(1 for s in be.plan.all_steps() if s.get("stream") == "gemm")
                    self.assertGreater(gemm_steps, 0)
                    self.assertTrue(all(c[1] != "path" for c in gemms[:1]), gemms)

    def test_the_operations_run_in_the_plan_order_with_the_fixes_around_them(self):
        _, torch, _ = stand_in_run(plan_file("scenario1_on"))  # fix 1: a host sync before and after the GEMM
        gemm = torch.calls.index(("matmul", "path"))
        self.assertEqual(torch.calls[gemm - 1:gemm + 2], [("sync", "path"), ("matmul", "path"), ("sync", "path")])
        _, torch, _ = stand_in_run(plan_file("host_both"))  # in the backward the host reads, then fix 2 prefetches
        order = [c[0] for c in torch.calls if c[0] in ("host_read", "prefetch", "matmul")]
        self.assertEqual(order, ["matmul", "prefetch", "matmul"] + ["matmul"] * 2 + ["host_read"] * 2 + ["prefetch"] * 2
                         + ["matmul"] * 2)
        _, torch, _ = stand_in_run(plan_file("aux_stream"))  # the side stream after the path's, and back
        gemm = torch.calls.index(next(c for c in torch.calls if c[0] == "matmul"))
        self.assertEqual(torch.calls[gemm - 1][0], "wait")
        self.assertEqual(torch.calls[gemm][1][:4], "side")

    def test_a_graph_is_captured_once_and_replayed_or_run_eagerly(self):
        be, torch, _ = stand_in_run(plan_file("graph"))
        self.assertEqual(([c[0] for c in torch.calls].count("capture"), [c[0] for c in torch.calls].count("replay")),
                         (1, 2))
        self.assertEqual(be.cannot_express, [])
        be, torch, got = stand_in_run(plan_file("graph"), capturable=False)
        self.assertEqual(len(be.cannot_express), 1)
        self.assertIn("a CUDA graph of the call (the capture failed: operation not permitted", be.cannot_express[0])
        self.assertEqual([c[0] for c in torch.calls].count("replay"), 0)
        self.assertEqual(len(got), 4)  # the output and the three gradients, made eagerly

    def test_whole_mode_calls_sdpa_in_place_of_the_gpu_steps(self):
        """--mode whole: F.scaled_dot_product_attention with the plan's problem, for each layer and iteration,
        between the entry and end stages; what acts inside the call, and the backward, said once each."""
        path = plan_file("whole", ["--scenario", "2", "--fix", "on", "--backward", "--layers", "2", "--iters", "2",
                                   "--kv-heads", "2", "--mask", "bool"] + SMALL[:2] + SMALL[4:])
        plan = torch_stages.load_plan(path)
        torch = FakeTorch()
        calls = []

        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
            calls.append((q.shape, k.shape, attn_mask.shape, dropout_p, scale, enable_gqa))
            return q._new()
        torch.nn = types.SimpleNamespace(functional=types.SimpleNamespace(scaled_dot_product_attention=sdpa))
        torch.backends = types.SimpleNamespace(cuda=types.SimpleNamespace(allow_fp16_bf16_reduction_math_sdp=lambda on: None))
        attention = types.SimpleNamespace(SDPBackend=types.SimpleNamespace(MATH="math"),
                                          sdpa_kernel=lambda backend: contextlib.nullcontext())
        be, got = stand_in(plan, torch)
        runner = torch_stages.Runner(plan, be, torch_stages.DebugLog(False), "stages", None, None, {})
        saved = sys.modules.get("torch.nn.attention")
        sys.modules["torch.nn.attention"] = attention
        try:
            torch_stages.whole_mode(runner, plan, be)
            runner.run(lambda: got.update(output=be.get({"tensor": "output", "chunk": 0})))
        finally:
            sys.modules.pop("torch.nn.attention") if saved is None else sys.modules.update({"torch.nn.attention": saved})
        p = plan.p
        self.assertEqual(len(calls), 4)
        self.assertEqual(calls[0], ((1, 8, 64, 32), (1, 2, 64, 32), (1, 1, 64, 64), 0.0, p["scale"], True))
        self.assertEqual(got["output"].shape, (1, 8, 64, 32))
        self.assertEqual(torch.calls.count(("matmul", "path")), 0)  # none of the plan's GEMMs
        self.assertEqual(sorted(x.split(" ")[0] for x in be.cannot_express), ["fix_sync", "host_access", "prefetch",
                                                                              "the"])
        self.assertEqual(len(runner.timings[torch_stages.SDPA_CALL]), 4)

    def test_a_plan_reading_a_tensor_nothing_made_is_an_error(self):
        with open(plan_file("default")) as f:
            plan = json.load(f)
        softmax = next(s for s in plan["calls"]["forward_gpu"] if s.get("stage") == "softmax")
        softmax["ops"][0]["in"]["tensor"] = "grad_scores"
        path = os.path.join(_TMP.name, "bad_read.json")
        with open(path, "w") as f:
            json.dump(plan, f)
        with self.assertRaises(torch_stages.ScriptError) as e:
            stand_in_run(path)
        self.assertIn("the plan reads grad_scores (layer 1) before an operation of it made it", str(e.exception))


# ------------------------------------------------------------------------------------ the command line
def assert_refused(test, args, words, cwd=None):
    r = run_script(args, cwd=cwd)
    test.assertEqual(r.returncode, 2, r.stderr)
    lines = r.stderr.splitlines()
    test.assertEqual(len(lines), 1, r.stderr)
    test.assertTrue(lines[0].startswith("torch_stages.py: error: "), lines[0])
    test.assertIn(words, lines[0])
    test.assertEqual(r.stdout, "")


class Options(unittest.TestCase):
    def test_the_report_command_runs_for_every_scenario(self):
        """REPORT.md's command (report_writer.cpp), as printed, from the source folder: the report's problem."""
        if not CONFIG["repro"]:
            self.skipTest("no --repro")
        for n in range(1, 8):
            with self.subTest(scenario=n), tempfile.TemporaryDirectory() as tmp:
                subprocess.run([CONFIG["repro"], "report", "--no-run", "--out", os.path.join(tmp, "r"), "--scenario",
                                str(n)] + (["--iters", "1"] if n in (6, 7) else []), check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
                with open(os.path.join(tmp, "r", "REPORT.md")) as f:
                    report = f.read()
                command = re.search(r"^    (python3 scripts/torch_stages\.py .*)$", report, re.M)
                problem = re.search(r"^- \*\*Problem\*\*: (.*), \d+ call\(s\) per run\.$", report, re.M)
                self.assertTrue(command and problem, report[:2000])
                args = shlex.split(command.group(1))[2:]
                r = run_script(args + ["--repro", CONFIG["repro"], "--dry-run"], cwd=tmp, timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr[-2000:])
                self.assertIn("CUDA_EVENT math_sdpa_complete", tags(r.stderr))
                with open(os.path.join(tmp, "torch_stages.json")) as f:
                    j = json.load(f)
                p = j["config"]["problem"]
                self.assertEqual(j["config"]["scenario"], n)
                self.assertEqual("B=%d Hq=%d Hkv=%d L=%d S=%d E=%d, dtype %s, precision %s, mask %s, dropout %g, scale "
                                 "%.6g, seed %d" % (p["batch"], p["q_heads"], p["kv_heads"], p["q_len"], p["kv_len"],
                                                    p["head_dim"], p["dtype"], p["precision"], p["mask"], p["dropout"],
                                                    p["scale"], p["seed"]), problem.group(1))

    def test_repro_run_options_make_the_plan(self):
        if not CONFIG["repro"]:
            self.skipTest("no --repro")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            r = run_script(["--repro", CONFIG["repro"], "--scenario", "2", "-L", "96", "--scale", "-0.5", "--dry-run",
                            "--json", out, "--log", "stages"])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                j = json.load(f)
            self.assertEqual((j["config"]["scenario"], j["config"]["problem"]["q_len"], j["config"]["problem"]["scale"],
                              j["config"]["log"], j["config"]["memory"]), (2, 96, -0.5, "stages", "managed"))
            self.assertEqual(j["config"]["plan_command"][1:7], ["--scenario", "2", "-L", "96", "--scale", "-0.5"])
        # repro's own refusal, in its words; a repro that is not there.
        assert_refused(self, ["--repro", CONFIG["repro"], "--scenario", "99", "--dry-run"], "repro --plan: repro: error: ")
        assert_refused(self, ["--repro", "/nonexistent/repro", "--dry-run"], "--repro /nonexistent/repro: ")

    def test_bad_options_and_plans_exit_2_with_one_line(self):
        good = plan_file("default")
        with open(good) as f:
            plan = json.load(f)
        with tempfile.TemporaryDirectory() as tmp:
            def planted(name, change):
                j = json.loads(json.dumps(plan))
                change(j)
                path = os.path.join(tmp, name)
                with open(path, "w") as f:
                    json.dump(j, f)
                return path
            with open(os.path.join(tmp, "not.json"), "w") as f:
                f.write("{")
            cases = [
                (["--plan", good, "--scenario", "2"], "--scenario: not an option of this script"),
                (["--plan", "/nonexistent.json"], "--plan /nonexistent.json: No such file"),
                (["--plan", os.path.join(tmp, "not.json")], "not JSON"),
                (["--plan", planted("v.json", lambda j: j["meta"].update(version=9))], "version 9, where this script"),
                (["--plan", planted("op.json", lambda j: j["calls"]["forward_gpu"][0]["ops"][0].update(op="fused"))],
                 "its operation 'fused' is not one this script maps to PyTorch"),
                (["--plan", planted("stage.json", lambda j: j["calls"]["forward_gpu"][0].update(stage="qk_split"))],
                 "its step qk_split is not a stage of"),
                (["--plan", planted("key.json", lambda j: j.pop("tensors"))], "it has no 'tensors'"),
                (["--plan", good, "--inject", "hang:nowhere"], "is not hang:STAGE of a stage this plan runs"),
                (["--plan", good, "--inject", "hang:dropout"], "is not hang:STAGE of a stage this plan runs"),
                (["--plan", good, "--inject", "slow:softmax"], "is not hang:STAGE"),
                (["--plan", good, "--stage-timeout", "0"], "--stage-timeout: 0 is not in"),
                (["--plan", good, "--inputs", "/nonexistent"], "--inputs /nonexistent: not a folder"),
                (["--plan", good, "--log-format", "harness"], "invalid choice"),
                (["--plan", good, "--memory", "pinned"], "invalid choice"),
            ]
            for args, words in cases:
                with self.subTest(args=args[2:] or args):
                    assert_refused(self, args + ["--dry-run"], words)

    @unittest.skipIf(importlib.util.find_spec("torch") is not None, "PyTorch is installed for this python3")
    def test_without_pytorch_the_run_exits_7_with_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            r = run_script(["--plan", plan_file("default"), "--json", out])
            self.assertEqual(r.returncode, 7, r.stderr)
            self.assertEqual(r.stderr.splitlines(), ["torch_stages.py: error: PyTorch is not importable here (No module "
                                                     "named 'torch'): this script runs the plan through your PyTorch "
                                                     ">= 2.5 with CUDA"])
            with open(out) as f:
                self.assertEqual(json.load(f)["outcome"], "no_gpu")

    def test_what_pytorch_cannot_express_is_one_line_each_and_the_run_goes_on(self):
        cases = {"scenario4_off": "the page-fault storm at entry", "scenario1_off": "the GEMMs' stream (blocking)",
                 "scenario3_off": "the pointer-array GEMM (cublasGemmBatchedEx)",
                 "scenario7_on": "the weights read with io direct",
                 "host_both": "cudaMemAdvise(SetPreferredLocation, host)"}
        for name, words in cases.items():
            with self.subTest(plan=name):
                r = dry_run(plan_file(name), test=self)
                said = [x for x in r.stderr.splitlines() if x.startswith("torch_stages.py: cannot express in PyTorch: ")]
                self.assertEqual(len([x for x in said if words in x]), 1, said)
                self.assertEqual(len(said), len(set(said)))
                self.assertIn("cannot express in PyTorch: " + said[0].split(": ", 2)[2], r.json["notes"])
                self.assertEqual(r.json["outcome"], "pass")
        context = plan_file("context", ["--ballast", "1G", "--host-load", "2"])
        said = [x for x in dry_run(context, test=self).stderr.splitlines() if "cannot express" in x]
        self.assertEqual(len(said), 2, said)
        self.assertEqual(dry_run(plan_file("default"), test=self).json["cannot_express"], [])


class Watchdog(unittest.TestCase):
    def test_an_injected_stall_is_caught_within_the_deadline_plus_a_second(self):
        for stage, last, plan in (("softmax", "[MATH_SOFTMAX_START]", plan_file("backward", ["--backward"])),
                                  ("dk_gemm", "[CUBLAS_GEMM_START] M=128 N=64 K=128", plan_file("backward", ["--backward"])),
                                  ("alloc_scores", "[CUDA_MALLOC_DONE]", plan_file("training"))):
            with self.subTest(stage=stage):
                r = dry_run(plan, "--inject", "hang:" + stage, "--stage-timeout", "1", code=3, test=self)
                self.assertLess(r.seconds, 2.0)
                lines = r.stderr.splitlines()
                hang = [i for i, x in enumerate(lines) if x.startswith("torch_stages.py: HANG: stage %s did not finish "
                                                                       "within 1.0 s" % stage)]
                self.assertEqual(len(hang), 1, r.stderr)
                self.assertIn(last, lines[hang[0] - 1])  # the last stage line names the stage
                self.assertIn("(most recent call first)", r.stderr)  # faulthandler's stacks
                self.assertIn("in stall", r.stderr)
                self.assertEqual((r.json["outcome"], r.json["exit_code"], r.json["error_stage"], r.json["watchdog"]["stage"]),
                                 ("hang", 3, stage, stage))

    def test_no_stall_no_watchdog(self):
        # Longer than the deadline in all, each stage far shorter: a watchdog that kept counting from
        # its first stage would fire.
        start = time.monotonic()
        r = dry_run(plan_file("many", ["--iters", "2500"]), "--stage-timeout", "1", test=self)
        self.assertGreater(time.monotonic() - start, 1.0)
        self.assertNotIn("HANG", r.stderr)


class Names(unittest.TestCase):
    def test_the_script_names_no_stage_scenario_or_fix(self):
        """Its stages come from the plan and the table, its conditions from the plan's operations."""
        with open(SCRIPT) as f:
            tree = ast.parse(f.read())
        # The plan's and the problem's keys are not names of stages ("dropout" the probability, "free_call"
        # the part of the calls): what is looked up with [] or .get, and the plan's parts.
        keys = {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
        keys |= {id(n.args[0]) for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") ==
                 "get" and n.args}
        keys |= {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys}
        parts = set(torch_stages.Plan.PARTS)
        strings = [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and id(n) not in keys and n.value not in parts]
        stages = {row["name"] for row in TABLE}
        self.assertEqual([(line, s) for line, s in strings if s in stages], [])
        numbered = re.compile(r"(?i)\b(scenario|fix)(es)?[ _]?\d|--(scenario|fix)\b")
        self.assertEqual([(line, s) for line, s in strings if numbered.search(s)], [])


@unittest.skipUnless(has_numpy(), "numpy is not installed for this python3")
class Inputs(unittest.TestCase):
    def write(self, folder, plan, **changes):
        import numpy as np
        p = plan.p
        for layer in range(1, plan.run["layers"] + 1):
            for name, shape in torch_stages.input_shapes(p, plan.run["backward"]).items():
                a = np.full(shape, layer, dtype=np.float32)
                np.save(os.path.join(folder, "layer%d.%s.npy" % (layer, torch_stages.SAVED_NAMES[name])),
                        changes.get(name, a))
        if p["mask"] == "bool":
            np.save(os.path.join(folder, "mask.npy"), changes.get("mask", np.ones(torch_stages.mask_shape(p), np.uint8)))

    def test_the_harness_inputs_are_read_per_layer_and_checked(self):
        import numpy as np
        path = plan_file("training")
        plan = torch_stages.load_plan(path)
        with tempfile.TemporaryDirectory() as tmp:
            self.write(tmp, plan)
            for layer in (1, 2):
                arrays, mask = torch_stages.read_inputs(tmp, plan, layer)
                self.assertEqual(sorted(arrays), ["grad_output", "key", "query", "value"])
                self.assertTrue(all(float(a.flat[0]) == layer and a.dtype == np.float32 for a in arrays.values()))
                self.assertEqual((mask.dtype, mask.shape), (np.uint8, torch_stages.mask_shape(plan.p)))
            self.assertEqual(dry_run(path, "--inputs", tmp, test=self).json["outcome"], "pass")
        for name, bad, words in (("key", np.zeros((2, 8, 64, 32), np.float32), "layer1.k.npy is [2, 8, 64, 32] float32"),
                                 ("mask", np.zeros((1, 1, 64, 64), np.float32), "mask.npy is [1, 1, 64, 64] float32")):
            with self.subTest(input=name), tempfile.TemporaryDirectory() as tmp:
                self.write(tmp, plan, **{name: bad})
                assert_refused(self, ["--plan", path, "--inputs", tmp, "--dry-run"], words)
        with tempfile.TemporaryDirectory() as tmp:
            assert_refused(self, ["--plan", path, "--inputs", tmp, "--dry-run"], "layer1.q.npy")


class Weights(unittest.TestCase):
    def test_the_tensors_are_the_harness_sizes_and_the_detail_its_words(self):
        self.assertEqual(list(torch_stages.WEIGHTS_TENSOR_SIZES), harness_weights_sizes())
        self.assertEqual(torch_stages.weights_detail(4, 11, 75497472, 75497472, {"weights_io": "mapped",
                                                                                 "weights_pages": "keep"}),
                         "tensor=5/11 bytes=75497472 offset=75497472 io=mapped pages=keep")
        with open(os.path.join(ROOT, "math_sdpa", "weights_load.cpp")) as f:
            self.assertIn('"tensor=" + std::to_string(i + 1) + "/" + std::to_string(tensors()) + " bytes=" + '
                          'std::to_string(t.bytes) +', f.read())
        with open(os.path.join(ROOT, "math_sdpa", "weights_file.cpp")) as f:  # the harness's default file
            source = f.read()
        for words in ('std::getenv("SDPA_WEIGHTS_FILE")', 'std::getenv("XDG_CACHE_HOME")', '"/.cache"',
                      '"/sdpa-repro/weights.bin"'):
            self.assertIn(words, source)

    def test_the_host_memory_is_read_as_repro_reads_it(self):
        meminfo = "MemTotal:       128000000 kB\nMemFree:         1000 kB\nMemAvailable:   90000 kB\nCached:  5 kB\n"
        self.assertEqual([torch_stages.kib_field(meminfo, k) for k in ("MemFree", "MemAvailable", "Cached", "RssFile")],
                         [1024000, 92160000, 5120, None])
        self.assertEqual(sorted(torch_stages.read_host_memory()), ["cached", "mem_available", "mem_free", "rss_file"])


class CompareLogs(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(FIXTURES, "default.log")) as f:
            self.log = f.read()

    def compare(self, a, b, *flags):
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for name, text in (("a.log", a), ("b.log", b)):
                paths.append(os.path.join(tmp, name))
                with open(paths[-1], "w") as f:
                    f.write(text)
            return run_script(list(flags) + paths + (["--repro", CONFIG["repro"]] if CONFIG["repro"] else []),
                              script=COMPARE)

    def test_the_same_log_is_the_same(self):
        noisy = "# repro table line\n[ALLOC_DEBUG] [CUDA_MALLOC] size=1 stream=0 device=0 unified_memory=1 [x.cpp:1]\n"
        r = self.compare(noisy + self.log, self.log)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("same tag sequence (26 tags)", r.stdout)

    def test_a_missing_stage_is_the_first_divergence(self):
        lines = self.log.splitlines(True)
        without = "".join(line for line in lines if "MATH_UPCAST" not in line)
        r = self.compare(self.log, without)
        self.assertEqual(r.returncode, 1)
        self.assertIn("first divergence at tag #5: line 5 (stage upcast) vs line 5 (stage scale_q)", r.stdout)
        self.assertIn("[MATH_UPCAST] bf16->fp32", r.stdout)
        note = "[SDPA_DEBUG] [HOST_ACCESS] host read scores: 4 bytes [FILE:LINE]\n"
        r = self.compare(self.log, "".join(lines[:4]) + note + "".join(lines[4:]))
        self.assertIn("first divergence at tag #5: line 5 (stage upcast) vs line 5 (no stage's line)", r.stdout)
        for cut, stage in ((12, "qk_gemm"), (18, "pv_gemm")):  # a tag several stages write: the stage the log is in
            r = self.compare("".join(lines[:cut]), self.log)
            self.assertIn("the other goes on with SDPA_DEBUG CUBLAS_GEMM_START (line %d, stage %s)" % (cut + 1, stage),
                          r.stdout)

    def test_a_call_that_stops_is_named(self):
        lines = self.log.splitlines(True)
        hung = "".join(lines[:lines.index(next(x for x in lines if "MATH_SOFTMAX_START" in x)) + 1])
        r = self.compare(self.log, hung)
        self.assertEqual(r.returncode, 1)
        self.assertIn("B ends after tag #16, SDPA_DEBUG MATH_SOFTMAX_START (line 16, stage softmax)", r.stdout)

    def test_lines_compare_what_tags_do_not(self):
        other = self.log.replace("M=128 N=128 K=64", "M=128 N=128 K=32")
        self.assertEqual(self.compare(self.log, other).returncode, 0)
        r = self.compare(self.log, other, "--lines")
        self.assertEqual(r.returncode, 1)
        self.assertIn("K=32", r.stdout)

    def test_runs_of_the_same_problem_normalise_to_the_same_lines(self):
        run_a = "[SDPA_DEBUG] [FIX_2] prefetch: cudaMemPrefetchAsync(scores, 4 bytes, device 0) on the stream [a.cpp:10]"
        run_b = "[SDPA_DEBUG] [FIX_2] prefetch: cudaMemPrefetchAsync(scores, 8 bytes, device 1) on the stream [b.py:20]"
        self.assertEqual(compare_logs.normalise(run_a), compare_logs.normalise(run_b))
        self.assertNotEqual(compare_logs.normalise(run_a), compare_logs.normalise(run_b.replace("FIX_2", "FIX_4")))

    def test_an_unreadable_log_exits_2(self):
        self.assertEqual(run_script(["/nonexistent/a.log", "/nonexistent/b.log"], script=COMPARE).returncode, 2)


class ScenarioTable(unittest.TestCase):
    def test_scenario_table_runs_the_default_scenarios_with_the_table_stage_order(self):
        """scripts/scenario_table.py against a stand-in repro: the scenarios it lists by default, one
        that is not (by_default names why), the stages of each run in the table's order."""
        stages = [row["name"] for row in TABLE]
        fake = """import json, sys
args = sys.argv[1:]
if args[:2] == ["help", "stages"]:  # the stage table's order, as the real binary gives it
    print(json.dumps({"format": 1, "source": "math_sdpa/stage.cpp", "stages": [{"name": n} for n in %r]}))
    sys.exit(0)
if args[:2] == ["help", "scenarios"]:
    print(json.dumps([{"number": 0, "by_default": True, "fix": 0}, {"number": 3, "by_default": True, "fix": 3},
                      {"number": 6, "by_default": "it allocates past the memory there is", "fix": 5}]))
    sys.exit(0)
with open(sys.argv[0] + ".calls", "a") as f:
    f.write(" ".join(args) + "\\n")
json.dump({"outcome": "pass", "result_tensor": "output", "config": {"alloc": "managed"},
           "check": {"rel_error": 0.001}, "stages": [{"stage": n, "median_ms": 0.5} for n in %r]},
          open(args[args.index("--json") + 1], "w"))
""" % (stages, list(reversed(stages[:4] + ["stream_sync"])))
        with tempfile.TemporaryDirectory() as tmp:
            repro = os.path.join(tmp, "repro")
            with open(repro, "w") as f:
                f.write("#!%s\n%s" % (sys.executable, fake))
            os.chmod(repro, 0o755)
            r = subprocess.run([sys.executable, SCENARIO_TABLE, repro, os.path.join(tmp, "out"), "--iters", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(repro + ".calls") as f:
                calls = f.read().splitlines()
        lines = r.stdout.splitlines()
        self.assertEqual(lines[1].split()[7:], [n for n in stages if n in stages[:4] + ["stream_sync"]])
        self.assertEqual([line.split()[:3] for line in lines[2:]],
                         [[str(n), fix, dtype] for n in (0, 3) for fix in ("off", "on") for dtype in ("bf16", "fp16", "fp32")])
        self.assertEqual(len(calls), 12)
        self.assertIn("--scenario 0 --fixes all --dtype bf16", calls[3])
        self.assertIn("--scenario 3 --fix on --dtype bf16", calls[9])
        self.assertTrue(all(c.endswith("--iters 2") for c in calls), calls)


def main():
    args = sys.argv[1:]
    if "--repro" in args:
        i = args.index("--repro")
        CONFIG["repro"] = args[i + 1]
        del args[i:i + 2]
    TABLE.extend(stage_table.load(CONFIG["repro"])[0]["stages"])
    ROWS.update({row["name"]: row for row in TABLE})
    unittest.main(argv=[sys.argv[0]] + args, verbosity=2)


if __name__ == "__main__":
    main()
