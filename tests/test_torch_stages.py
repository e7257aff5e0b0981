#!/usr/bin/env python3
"""test_torch_stages.py: scripts/torch_stages.py, compare_logs.py and scenario_table.py without PyTorch.

CTest's cpu.torch_stages (skipped, exit 77, where there is no python3). Checks:
  - the commands `repro report` prints for the script parse, and describe the report's problem;
  - bad options exit 2 with one line;
  - the script's --dry-run lines equal the harness's own (tests/fixtures/torch_stages/*.log, made
    by make_fixtures.cpp from math_sdpa/stage_log.cpp), a stage's ending with the stage table's
    [file:line], and the default call's tags equal the sequence docs/LOG_FORMAT.md documents;
  - the watchdog catches an injected stall: the stage named, the stacks dumped, the JSON, exit 3,
    within the deadline plus a second;
  - --backward: the backward call's stages in math_sdpa/stage.h's order with the tags
    math_sdpa/stage_log.cpp writes for them (the GEMMs' M, N, K those of gemm.cpp), the tag
    sequences docs/TORCH_STAGES.md documents, the scenario and fix notes in the harness's words,
    a hang in a backward stage named, and the combinations it cannot run refused (exit 2);
  - the workload table equals scenarios/workload.cpp's;
  - the random inputs equal the harness's bit for bit (--dump-inputs: the build's
    tests/fixtures/torch_stages/dump_random_inputs.cpp; needs numpy);
  - compare_logs.py finds the first divergence and a call that stops early, each line named by its stage;
  - --mapped-weights SIZE[:FILE]: parsed as repro parses it (the same sizes accepted and refused, the
    same bytes: asked of --repro's --plan), the load's lines before the first call (one load_weights
    stage a tensor, the sizes of math_sdpa/weights_load.cpp, the harness's detail, the table's lines
    and [file:line]; none without --log-extras, as repro), its stage in the JSON, a stall in it caught
    by the watchdog, the weights file made, reused and extended as repro makes it, and (with numpy)
    the load itself through a stand-in for PyTorch: every byte copied, the mapping dropped or kept;
  - the stage table (scripts/stages.json) is the one source of the stages: the scripts name no stage
    it lacks, torch_stages.py has an op for every stage of it that PyTorch runs (a renamed stage, a
    new one and a new detail, planted in a copy of the table, are caught), rows that are not
    PyTorch's (load, graph, step; allocations) change nothing, a table it cannot run or read exits 2;
    scenario_table.py takes its scenarios from `repro help scenarios --json` and its columns' order
    from the table.

    python3 tests/test_torch_stages.py [--repro BIN] [--dump-inputs BIN]
"""
import ast
import copy
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "torch_stages.py")
COMPARE = os.path.join(ROOT, "scripts", "compare_logs.py")
SCENARIO_TABLE = os.path.join(ROOT, "scripts", "scenario_table.py")
STAGES_JSON = os.path.join(ROOT, "scripts", "stages.json")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "torch_stages")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import compare_logs  # noqa: E402
import torch_stages  # noqa: E402

CONFIG = {"repro": None, "dump_inputs": None}
# REPORT.md's command for scenario 2, as repro/report/report_writer.cpp prints it (used where the
# test is not given the repro binary to ask).
REPORT_COMMAND = ("python3 scripts/torch_stages.py -b 1 --heads 24 --kv-heads 24 -L 4608 -S 4608 -E 128 --dtype bf16 "
                  "--precision upcast --k-layout bshe --seed 23962 --scenario 2 --memory managed --log-format sdpa-debug "
                  "--iters 25 --json torch_stages.json")

# The fixtures and the script's options for the same problems (make_fixtures.cpp's cases).
FIXTURE_CASES = {
    "default": [],
    "scenario2_report": shlex.split(REPORT_COMMAND)[2:],
    "mask_bool_gqa_dropout": ["-S", "96", "--kv-heads", "2", "--mask", "bool", "--mask-dims", "Bx1",
                              "--dropout", "0.1"],
    "causal_fp16_native_scale": ["--dtype", "fp16", "--precision", "native", "--mask", "causal", "--scale", "-0.5"],
    "bshe_float_mask": ["--k-layout", "bshe", "--mask", "float", "--mask-dims", "BxH", "--dtype", "fp32"],
    "scenario1": ["--scenario", "1", "--memory", "managed"],
    "scenario3_fix": ["--scenario", "3", "--fix", "on", "--memory", "managed"],
    "scenario4": ["--scenario", "4", "--memory", "managed"],
    "fixes_1_2": ["--fixes", "1,2", "--memory", "managed"],
}


def run_script(args, cwd=None, timeout=120, script=SCRIPT):
    start = time.monotonic()
    r = subprocess.run([sys.executable, script] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    r.seconds = time.monotonic() - start
    return r


def normalised(text):
    return [compare_logs.normalise(line) for _, _, line in compare_logs.tagged_lines(text)]


def has_numpy():
    return importlib.util.find_spec("numpy") is not None


def assert_refused(test, bad):
    """Each argument list of `bad` is a usage error: exit 2, one line on stderr, nothing on stdout."""
    for args in bad:
        with test.subTest(args=args):
            r = run_script(args + ["--dry-run"])
            test.assertEqual(r.returncode, 2, r.stderr)
            lines = r.stderr.splitlines()
            test.assertEqual(len(lines), 1, r.stderr)
            test.assertTrue(lines[0].startswith("torch_stages.py: error: "), lines[0])
            test.assertEqual(r.stdout, "")


class Options(unittest.TestCase):
    def report_commands(self):
        """(repro report options, the torch_stages.py command in its REPORT.md, its Problem line)."""
        if not CONFIG["repro"]:
            return [([], REPORT_COMMAND, None)]
        out = []
        for options in (["--scenario", "2"],
                        ["--scenario", "1", "--full", "--workload", "qwen-image-1024-textpad", "--dropout", "0.1", "--scale",
                         "0.125"],
                        ["--scenario", "3", "--mask", "float", "--mask-dims", "BxH", "--dtype", "fp16", "--precision",
                         "native"],
                        ["--scenario", "4", "--kv-heads", "2", "--mask", "causal", "--seed", "18446744073709551615"],
                        ["--scenario", "2", "--mask", "bool", "--mask-dims", "1xH", "-L", "96", "-S", "64"],
                        ["--scenario", "2", "--workload", "qwen-image-512", "-L", "100", "--heads", "4"],
                        ["--scenario", "1", "--workload", "qwen-image-1024-textpad", "-S", "600", "--dtype", "fp32"],
                        ["--scenario", "3", "--heads", "6", "-E", "32", "--mask", "float"]):
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([CONFIG["repro"], "report", "--no-run", "--out", os.path.join(tmp, "r")] + options,
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                with open(os.path.join(tmp, "r", "REPORT.md")) as f:
                    report = f.read()
            command = re.search(r"^    (python3 scripts/torch_stages\.py .*)$", report, re.M)
            problem = re.search(r"^- \*\*Problem\*\*: (.*), \d+ call\(s\) per run\.$", report, re.M)
            self.assertTrue(command and problem, options)
            out.append((options, command.group(1), problem.group(1)))
        return out

    def test_the_commands_of_repro_report_parse_and_describe_its_problem(self):
        """REPORT.md's command, and repro's own options given to the script, make the report's problem."""
        runs = []
        for options, command, problem in self.report_commands():
            runs.append((options, shlex.split(command)[2:], problem))
            if options:
                runs.append((options, options + ["--memory", "managed", "--json", "torch_stages.json"], problem))
        for options, args, problem in runs:
            with self.subTest(report=options, args=args), tempfile.TemporaryDirectory() as tmp:
                r = run_script(args + ["--dry-run"], cwd=tmp)
                self.assertEqual(r.returncode, 0, r.stderr)
                tags = [t for _, t, _ in compare_logs.first_call(compare_logs.tagged_lines(r.stderr))]
                self.assertEqual(tags[-1], "CUDA_EVENT math_sdpa_complete")
                with open(os.path.join(tmp, "torch_stages.json")) as f:
                    j = json.load(f)
                self.assertEqual(j["outcome"], "pass")
                self.assertEqual(j["config"]["memory"], "managed")
                if problem:  # repro report's own words for the problem (report_writer.cpp)
                    p = j["config"]["problem"]
                    mine = ("B=%d Hq=%d Hkv=%d L=%d S=%d E=%d, dtype %s, precision %s, mask %s, dropout %g, scale "
                            "%.6g, seed %d" % (p["batch"], p["q_heads"], p["kv_heads"], p["q_len"], p["kv_len"],
                                               p["head_dim"], p["dtype"], p["precision"], p["mask"], p["dropout"],
                                               p["scale"], p["seed"]))
                    self.assertEqual(mine, problem)

    def test_a_scenario_without_a_shape_runs_its_workload_and_a_shape_replaces_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            self.assertEqual(run_script(["--scenario", "2", "--dry-run", "--json", out]).returncode, 0)
            with open(out) as f:
                j = json.load(f)
            self.assertEqual(j["config"]["workload"], "qwen-image-1024")
            self.assertEqual((j["config"]["problem"]["q_len"], j["config"]["settings"]["k_layout"]), (4608, "bshe"))
            self.assertEqual(run_script(["--scenario", "2", "-L", "256", "--dry-run", "--json", out]).returncode, 0)
            with open(out) as f:
                j = json.load(f)
            self.assertIsNone(j["config"]["workload"])
            p = j["config"]["problem"]
            self.assertEqual((p["batch"], p["q_heads"], p["q_len"], p["kv_len"], p["head_dim"]), (2, 8, 256, 256, 64))

    def test_bad_options_exit_2_with_one_line(self):
        bad = [["--no-such-option"], ["--dtype", "fp64"], ["--seed", "abc"], ["--seed", "18446744073709551616"],
               ["--heads", "0"], ["--heads", "8", "--kv-heads", "3"], ["--text-padding", "512"],
               ["--text-padding", "4:8"], ["--dropout", "1"], ["--inject", "hang:nowhere"],
               ["--inject", "hang:dropout"], ["--inject", "slow:softmax:10"], ["--log-format", "harness"],
               ["--gemm-api", "batched"], ["--mode", "whole", "--scenario", "2"], ["--fix", "on"],
               ["--fixes", "5"], ["--scores-to-host", "advise"], ["--stage-timeout", "0"], ["--iters", "0"],
               ["--mem", "managed"], ["--scale", "nan"], ["--text-padding", "8:4", "--mask", "float"]]
        assert_refused(self, bad)

    @unittest.skipIf(importlib.util.find_spec("torch") is not None, "PyTorch is installed for this python3")
    def test_without_pytorch_the_run_exits_7_with_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            r = run_script(["--json", out])
            self.assertEqual(r.returncode, 7, r.stderr)
            self.assertEqual(r.stderr.splitlines(), ["torch_stages.py: error: PyTorch is not importable here (No module "
                                                     "named 'torch'): this script runs the problem through your "
                                                     "PyTorch >= 2.5 with CUDA"])
            with open(out) as f:
                self.assertEqual(json.load(f)["outcome"], "no_gpu")

    def test_a_scenario_on_memory_that_does_not_migrate_is_waived(self):
        r = run_script(["--scenario", "1"])  # before PyTorch is looked for
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("scenario 1 is about pages that migrate", r.stderr)


class LogLines(unittest.TestCase):
    def dry_run(self, args):
        with tempfile.TemporaryDirectory() as tmp:  # REPORT.md's command writes torch_stages.json
            r = run_script(args + ["--dry-run"], cwd=tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stderr

    def test_the_dry_run_prints_the_harness_lines(self):
        for name, args in FIXTURE_CASES.items():
            with self.subTest(fixture=name):
                with open(os.path.join(FIXTURES, name + ".log")) as f:
                    expected = normalised(f.read())
                mine = normalised(self.dry_run(args + ["--log-extras"]))  # the fixtures hold every line
                self.assertEqual(mine[:len(expected)], expected)
                self.assertTrue(len(expected) > 15)

    def test_every_line_has_one_of_the_four_shapes(self):
        tagged = re.compile(r"^\[(SDPA_DEBUG|ALLOC_DEBUG|CUDA_DEBUG)\] \[[A-Z0-9_]+\].* "
                            r"\[(scripts/torch_stages\.py|math_sdpa/stage\.cpp):\d+\]$")
        event = re.compile(r"^\[CUDA_EVENT\] [a-z_]+ @ \d{16}$")
        lines = self.dry_run(["--mask", "bool", "--kv-heads", "4", "--dropout", "0.2", "--scenario", "2", "--full",
                              "--memory", "managed", "--fixes", "all", "--log-extras", "--backward"]).splitlines()
        self.assertGreater(len(lines), 30)
        for line in lines:
            self.assertTrue(tagged.match(line) or event.match(line), line)
        # [file:line]: a stage's line names the stage table's line that holds its template, as the
        # harness's does; the script's own (notes, allocations) the line of the script that made it.
        sources = {}
        for name in ("scripts/torch_stages.py", "math_sdpa/stage.cpp"):
            with open(os.path.join(ROOT, name)) as f:
                sources[name] = f.read().splitlines()
        for line in lines:
            m = re.search(r"^\[[A-Z_]+\] \[([A-Z_0-9]+)\] .*\[([a-z_/]+\.(?:py|cpp)):(\d+)\]$", line)
            if m:
                source = sources[m.group(2)]
                made_at = source[int(m.group(3)) - 1] + source[int(m.group(3))]
                self.assertIn("debug_line(" if m.group(2).endswith(".py") else "D(", made_at, line)
                if not re.match(r"(SCENARIO|FIX)_\d$", m.group(1)):
                    self.assertIn('"[' + m.group(1), made_at, line)

    def test_the_default_call_has_the_documented_tag_sequence(self):
        with open(os.path.join(ROOT, "docs", "LOG_FORMAT.md")) as f:
            doc = f.read()
        block = re.search(r"<!-- call-tags:default -->\n(.*?)<!-- end -->", doc, re.S).group(1)
        documented = [line.strip() for line in block.splitlines() if line.strip()]
        self.assertEqual(len(documented), 17)
        tags = [t for _, t, _ in compare_logs.first_call(compare_logs.tagged_lines(self.dry_run([])))]
        self.assertEqual(tags, documented)

    def test_the_log_is_off_at_log_off(self):
        self.assertEqual(self.dry_run(["--log", "off"]), "")


class Watchdog(unittest.TestCase):
    def test_an_injected_stall_is_caught_within_the_deadline_plus_a_second(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "hang.json")
            r = run_script(["--dry-run", "--inject", "hang:softmax", "--stage-timeout", "1", "--json", out], timeout=30)
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertLess(r.seconds, 1.0 + 1.0)
            lines = r.stderr.splitlines()
            hang = [i for i, line in enumerate(lines) if line.startswith("torch_stages.py: HANG: stage softmax did not "
                                                                         "finish within 1.0 s")]
            self.assertEqual(len(hang), 1, r.stderr)
            self.assertIn("[MATH_SOFTMAX_START]", lines[hang[0] - 1])  # the last stage line names the stage
            self.assertIn("(most recent call first)", r.stderr)  # faulthandler's stacks
            self.assertIn("in stall", r.stderr)
            with open(out) as f:
                j = json.load(f)
            self.assertEqual((j["outcome"], j["exit_code"], j["error_stage"]), ("hang", 3, "softmax"))
            self.assertEqual(j["watchdog"]["stage"], "softmax")

    def test_no_stall_no_watchdog(self):
        # Longer than the deadline in all (about 1.5 s of stages), each stage far shorter: a watchdog
        # that kept counting from its first stage would fire, and a loaded machine (a descheduled
        # process) does not come near a second for one stage of microseconds.
        r = run_script(["--dry-run", "--stage-timeout", "1", "--iters", "2500"], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertGreater(r.seconds, 1.0)
        self.assertNotIn("HANG", r.stderr)


def harness_backward_stages():
    """The backward call's stages in math_sdpa/stage.h's order (alloc_grad_pv .. backward_sync), less
    the alloc_*/free_* stages of --alloc-timing per-call, which the script does not have."""
    with open(os.path.join(ROOT, "math_sdpa", "stage.h")) as f:
        body = re.search(r"enum class Stage : uint8_t \{(.*?)\};", f.read(), re.S).group(1)
    names = re.findall(r"^\s*([a-z_0-9]+),", body, re.M)
    part = names[names.index("alloc_grad_pv"):names.index("backward_sync") + 1]
    return [n for n in part if not re.match(r"(alloc|free)_", n)]


def harness_backward_gemm_shapes(L, S, E):
    """Each backward GEMM's M, N, K as the harness logs them: gemm.cpp backward_gemm_calls' (m, n, k),
    the row-major result M = n, N = m (gemm.h GemmCall::rows and cols)."""
    with open(os.path.join(ROOT, "math_sdpa", "gemm.cpp")) as f:
        source = f.read()
    values = {"L": L, "S": S, "E": E}
    shapes = {}
    for name, m, n, k in re.findall(r'call\("(dp|dv|dq|dk)", \'[NT]\', \'[NT]\', ([LSE]), ([LSE]), ([LSE]),', source):
        shape = (values[n], values[m], values[k])
        assert shapes.setdefault(name + "_gemm", shape) == shape, name  # dq's two forms agree
    return shapes


def after_forward(text):
    """The tagged lines after the first call's math_sdpa_complete: the backward call's."""
    tagged = compare_logs.tagged_lines(text)
    end = next(i for i, e in enumerate(tagged) if e[1] == "CUDA_EVENT math_sdpa_complete")
    return tagged[end + 1:]


def is_note(tag):
    return re.match(r"SDPA_DEBUG (SCENARIO|FIX)_\d$", tag) is not None


def weights_dry_run(args, env=None, cwd=None, code=0, test=None):
    """The script's --dry-run with `args`, its stderr and its JSON (a temporary file)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        full_env = dict(os.environ, **(env or {}))
        start = time.monotonic()
        r = subprocess.run([sys.executable, SCRIPT] + args + ["--dry-run", "--json", out], cwd=cwd or tmp,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120,
                           env=full_env)
        r.seconds = time.monotonic() - start
        test.assertEqual(r.returncode, code, r.stderr[-2000:])
        with open(out) as f:
            return r, json.load(f)


def harness_weights_sizes():
    """math_sdpa/weights_load.cpp weights_tensor_sizes(), in bytes."""
    with open(os.path.join(ROOT, "math_sdpa", "weights_load.cpp")) as f:
        source = f.read()
    body = re.search(r"weights_tensor_sizes\(\) \{.*?sizes = \{(.*?)\};", source, re.S).group(1)
    return [int(n) << 20 for n in re.findall(r"(\d+) \* kMiB", body)]


class MappedWeights(unittest.TestCase):
    """--mapped-weights SIZE[:FILE]: repro's option, its load made through PyTorch before the first call."""

    SIZES = ["30G", "41GB", "1.5GiB", "512M", "300M:/models/w.bin", "2e9B", "1B", "7K", "3TB", "0.5G",  # accepted
             "300", "", "1.5", "2e9", ":/models/w.bin", "30X", "3G:", "0.1B", "G", "-1G", "1e99G", "1.2.3G"]  # refused

    def test_sizes_parse_as_repro_parses_them(self):
        ts = torch_stages
        self.assertEqual(ts.parse_mapped_weights("30G"), (30 << 30, ""))
        self.assertEqual(ts.parse_mapped_weights("41GB"), (41 * 10 ** 9, ""))
        self.assertEqual(ts.parse_mapped_weights("1.5GiB:/m/w.bin"), (3 << 29, "/m/w.bin"))
        self.assertEqual(ts.parse_mapped_weights("2e9B"), (2 * 10 ** 9, ""))
        self.assertEqual(ts.parse_mapped_weights("300M:/a:b"), (300 << 20, "/a:b"))  # the first ':' separates
        for bad, words in (("300", "is not SIZE[:FILE] with a unit"), ("1.5", "with a unit"), ("", "with a unit"),
                           (":/m/w.bin", "with a unit"), ("2e9", "has no unit"), ("30X", "is not a size (e.g."), ("3G:", "names no file after"),
                           ("0.1B", "is not a size of at least one byte"), ("-1G", "is not a size (e.g.")):
            with self.subTest(size=bad):
                with self.assertRaises(torch_stages.ScriptError) as e:
                    ts.parse_mapped_weights(bad)
                self.assertEqual(e.exception.exit_code, 2)
                self.assertIn(words, str(e.exception))
        if not CONFIG["repro"]:
            return
        # The same sizes accepted and refused as repro's own parser, to the byte (its plan prints them).
        for size in self.SIZES:
            with self.subTest(size=size):
                r = subprocess.run([CONFIG["repro"], "--mapped-weights", size, "--plan"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
                try:
                    nbytes, _ = ts.parse_mapped_weights(size)
                except torch_stages.ScriptError:
                    nbytes = None
                self.assertEqual(r.returncode == 0, nbytes is not None, r.stderr)
                if nbytes is not None:
                    self.assertIn("# the mapped weights: %.2f GB of GPU copies" % (nbytes / 1e9), r.stdout)

    def test_bad_options_exit_2_with_one_line(self):
        assert_refused(self, [["--mapped-weights", "300"], ["--mapped-weights", "30X"], ["--mapped-weights", "3G:"],
                              ["--mapped-weights"], ["--weights-mapping", "keep"],
                              ["--mapped-weights", "1G", "--weights-mapping", "drop"],
                              ["--inject", "hang:load_weights"]])

    def test_the_tensors_are_the_harness_sizes(self):
        sizes = harness_weights_sizes()
        self.assertEqual(list(torch_stages.WEIGHTS_TENSOR_SIZES), sizes)
        self.assertEqual(sizes, [18 << 20] * 4 + [72 << 20] * 2)
        for total in (1, 18 << 20, (216 << 20) + 5, 30 << 30):
            with self.subTest(total=total):
                tensors = torch_stages.weights_tensors(total)
                self.assertEqual(sum(n for n, _ in tensors), total)
                self.assertEqual([at for _, at in tensors], [sum(n for n, _ in tensors[:i]) for i in range(len(tensors))])
                self.assertEqual([n for n, _ in tensors[:-1]], [sizes[i % len(sizes)] for i in range(len(tensors) - 1)])
        self.assertEqual(torch_stages.weights_detail(4, 11, 75497472, 75497472),
                         "tensor=5/11 bytes=75497472 offset=75497472 io=mapped pages=keep")
        with open(os.path.join(ROOT, "math_sdpa", "weights_load.cpp")) as f:  # the harness's detail, word for word
            self.assertIn('"tensor=" + std::to_string(i + 1) + "/" + std::to_string(tensors()) + " bytes=" + std::to_string(t.bytes) +',
                          f.read())

    def test_the_dry_run_writes_the_load_lines_before_the_first_call(self):
        size = (216 << 20) + (5 << 20)  # a whole cycle of sizes and a short last tensor
        tensors = torch_stages.weights_tensors(size)
        with open(STAGES_JSON) as f:
            row = next(r for r in json.load(f)["stages"] if r["name"] == "load_weights")
        self.assertEqual((row["kind"], row["when"]), ("host", "load"))
        r, j = weights_dry_run(["--mapped-weights", "%dM" % (size >> 20), "--log-extras"], test=self)
        lines = r.stderr.splitlines()
        load = lines[:2 * len(tensors)]
        for i, (n, at) in enumerate(tensors):
            self.assertEqual(load[2 * i], "[SDPA_DEBUG] [LOAD_WEIGHTS] tensor=%d/%d bytes=%d offset=%d io=mapped "
                             "pages=keep [math_sdpa/stage.cpp:%d]" % (i + 1, len(tensors), n, at,
                                                                      row["debug_begin"][0]["line"]))
            self.assertRegex(load[2 * i + 1], r"^\[SDPA_DEBUG\] \[LOAD_WEIGHTS_DONE\] duration_ms=\d+ "
                                              r"\[math_sdpa/stage\.cpp:%d\]$" % row["debug_end"][0]["line"])
        self.assertIn("[SDPA_ENTRY]", lines[2 * len(tensors)])
        # After the load, the call's lines are those of the same run without it.
        without = run_script(["--log-extras", "--dry-run"])
        self.assertEqual(normalised("\n".join(lines[2 * len(tensors):])), normalised(without.stderr))
        # The stage is timed in the JSON, first; the config says what was asked; nothing was loaded.
        self.assertEqual(j["stages"][0]["stage"], "load_weights")
        self.assertEqual(j["stages"][0]["calls"], len(tensors))
        self.assertEqual((j["config"]["mapped_weights"], j["config"]["weights_mapping"]), (size, "unmap"))
        self.assertEqual(j["config"]["settings"]["mapped_weights"], str(size))
        self.assertIsNone(j["weights_load"])
        self.assertTrue(any("the weights' load" in n and "was not made" in n for n in j["notes"]), j["notes"])
        # Without --log-extras the load writes nothing, as repro's sdpa-debug format (not the instrumentation's lines).
        r, _ = weights_dry_run(["--mapped-weights", "1G"], test=self)
        self.assertEqual(normalised(r.stderr), normalised(run_script(["--dry-run"]).stderr))

    def test_the_default_file_is_the_harness_and_a_dry_run_makes_none(self):
        with tempfile.TemporaryDirectory() as tmp:
            cases = [({"SDPA_WEIGHTS_FILE": os.path.join(tmp, "a.bin")}, os.path.join(tmp, "a.bin")),
                     ({"SDPA_WEIGHTS_FILE": "", "XDG_CACHE_HOME": os.path.join(tmp, "xdg")},
                      os.path.join(tmp, "xdg", "sdpa-repro", "weights.bin")),
                     ({"SDPA_WEIGHTS_FILE": "", "XDG_CACHE_HOME": "", "HOME": os.path.join(tmp, "home")},
                      os.path.join(tmp, "home", ".cache", "sdpa-repro", "weights.bin"))]
            for env, expected in cases:
                with self.subTest(env=env):
                    _, j = weights_dry_run(["--mapped-weights", "64M", "--weights-mapping", "keep"], env=env, test=self)
                    self.assertEqual(j["config"]["weights_file"], expected)
                    self.assertEqual(j["config"]["weights_mapping"], "keep")
                    self.assertFalse(os.path.exists(expected))
            _, j = weights_dry_run(["--mapped-weights", "64M:" + os.path.join(tmp, "named.bin")], test=self)
            self.assertEqual(j["config"]["weights_file"], os.path.join(tmp, "named.bin"))
            self.assertEqual(os.listdir(tmp), [])
        with open(os.path.join(ROOT, "math_sdpa", "weights_file.cpp")) as f:
            source = f.read()
        for words in ('std::getenv("SDPA_WEIGHTS_FILE")', 'std::getenv("XDG_CACHE_HOME")', '"/.cache"',
                      '"/sdpa-repro/weights.bin"'):
            self.assertIn(words, source)
        with open(os.path.join(ROOT, "math_sdpa", "weights_file.h")) as f:  # the same mark on both sides
            mark = torch_stages.WEIGHTS_FILE_MARK.decode().replace("\n", "\\n")
            self.assertIn('kWeightsFileMark[] = "%s";' % mark, f.read())

    def test_a_stall_in_the_load_is_caught_within_the_deadline_plus_a_second(self):
        r, j = weights_dry_run(["--mapped-weights", "1G", "--inject", "hang:load_weights", "--stage-timeout", "1",
                                "--log-extras"], code=3, test=self)
        self.assertLess(r.seconds, 1.0 + 1.0)
        lines = r.stderr.splitlines()
        hang = [i for i, line in enumerate(lines)
                if line.startswith("torch_stages.py: HANG: stage load_weights did not finish within 1.0 s")]
        self.assertEqual(len(hang), 1, r.stderr)
        self.assertTrue(lines[hang[0] - 1].startswith("[SDPA_DEBUG] [LOAD_WEIGHTS] tensor=1/"), lines[hang[0] - 1])
        self.assertEqual((j["outcome"], j["error_stage"], j["watchdog"]["stage"]), ("hang", "load_weights", "load_weights"))
        # In whole mode too: the load comes before the call in either mode.
        weights_dry_run(["--mode", "whole", "--mapped-weights", "1G", "--inject", "hang:load_weights",
                         "--stage-timeout", "1"], code=3, test=self)

    def test_the_weights_file_is_made_reused_and_extended_as_repro_makes_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sub", "w.bin")
            self.assertTrue(torch_stages.ensure_weights_file(path, 10000))
            with open(path, "rb") as f:
                data = f.read()
            self.assertEqual(len(data), 10000)
            self.assertGreater(len(data) - data.count(0), 9000)  # data, not zeros (a file of zeros could be sparse)
            self.assertFalse(torch_stages.ensure_weights_file(path, 10000))
            self.assertFalse(torch_stages.ensure_weights_file(path, 5000))  # large enough: reused
            self.assertTrue(torch_stages.ensure_weights_file(path, 20000))  # too small: extended from its last page
            with open(path, "rb") as f:
                longer = f.read()
            self.assertEqual((len(longer), longer[:8192]), (20000, data[:8192]))
            self.assertEqual(data[:64], torch_stages.WEIGHTS_FILE_MARK)  # the harness's own: the mark first
            # A file of anyone else's, smaller than asked: refused, never written, however it is named.
            users = os.path.join(tmp, "model.safetensors")
            for size in (0, 100, 8193, 10000):
                with open(users, "wb") as f:
                    f.write(b"u" * size)
                for route in ("--mapped-weights", "$SDPA_WEIGHTS_FILE"):
                    with self.assertRaises(torch_stages.ScriptError) as e:
                        torch_stages.ensure_weights_file(users, size + 1, route)
                    self.assertIn("%s: %s holds %d bytes, fewer than" % (route, users, size), str(e.exception))
                self.assertFalse(torch_stages.ensure_weights_file(users, size))  # large enough: read as it is
                with open(users, "rb") as f:
                    self.assertEqual(f.read(), b"u" * size)
            blocked = os.path.join(path, "inside-a-file.bin")
            with self.assertRaises(torch_stages.ScriptError) as e:
                torch_stages.ensure_weights_file(blocked, 10)
            self.assertIn("--mapped-weights: cannot create", str(e.exception))

    def test_the_host_memory_is_read_as_repro_reads_it(self):
        meminfo = "MemTotal:       128000000 kB\nMemFree:         1000 kB\nMemAvailable:   90000 kB\nCached:  5 kB\n" \
                  "SwapCached:        7 kB\n"
        self.assertEqual([torch_stages.kib_field(meminfo, k) for k in ("MemFree", "MemAvailable", "Cached", "RssFile")],
                         [1024000, 92160000, 5120, None])
        m = torch_stages.read_host_memory()
        self.assertEqual(sorted(m), ["cached", "mem_available", "mem_free", "rss_file"])
        if os.path.exists("/proc/meminfo"):
            self.assertTrue(all(isinstance(v, int) and v >= 0 for v in m.values()), m)
        self.assertEqual(torch_stages.host_memory_text({"mem_free": 38200000000, "mem_available": None, "cached": 0,
                                                        "rss_file": 10 ** 9}),
                         "MemFree 38.20 GB, MemAvailable unknown, Cached 0.00 GB, RssFile 1.00 GB")

    @unittest.skipUnless(has_numpy(), "numpy is not installed for this python3")
    def test_the_load_copies_every_tensor_from_the_mapping_and_drops_or_keeps_it(self):
        """load_weights with a stand-in for PyTorch (from_numpy, .to, synchronize): every byte of the file
        copied, one stage a tensor, the summary's numbers, the mapping gone after it or kept."""
        import numpy as np

        class Tensor:
            def __init__(self, a):
                self.a = a

            def to(self, device):
                return Tensor(np.array(self.a))

        class Cuda:
            synchronized = 0

            def current_device(self):
                return 0

            def synchronize(self, device=None):
                Cuda.synchronized += 1

        fake = type("torch", (), {"from_numpy": staticmethod(Tensor), "device": staticmethod(lambda *a: "cuda:0"),
                                  "cuda": Cuda()})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "w.bin")
            for mapping in ("unmap", "keep"):
                with self.subTest(mapping=mapping):
                    o = torch_stages.parse_command_line(["--mapped-weights", "100M:" + path, "--weights-mapping", mapping,
                                                         "--log", "off"])
                    run = torch_stages.Run(o)
                    call = torch_stages.StagedCall(o.problem, o.settings, "off", torch_stages.DebugLog(False),
                                                   torch_stages.DryBackend(o.problem, o.settings, [], 20), None, None,
                                                   run.timings)
                    Cuda.synchronized = 0
                    w = torch_stages.load_weights(fake, o, call, run)
                    tensors = torch_stages.weights_tensors(100 << 20)
                    self.assertEqual((w["created"], w["bytes"], w["tensors"], w["mapping"]),
                                     (mapping == "unmap", 100 << 20, len(tensors), mapping))
                    self.assertEqual((len(run.timings["load_weights"]), Cuda.synchronized), (len(tensors),) * 2)
                    with open(path, "rb") as f:
                        self.assertEqual(b"".join(t.a.tobytes() for t in run.weights), f.read())
                    with open("/proc/self/maps") as f:
                        mapped = path in f.read()
                    self.assertEqual(mapped, mapping == "keep")
                    self.assertEqual(sorted(w["after"]), ["cached", "mem_available", "mem_free", "rss_file"])
                    summary = torch_stages.weights_summary(w)
                    self.assertTrue(summary[0].startswith("# weights loaded: 0.10 GB in %d tensors from %s" % (
                        len(tensors), path)), summary[0])
                    self.assertEqual([x.split(":")[0] for x in summary[1:]], ["#   before", "#   after", "#   change"])
                    run.weights_mapping = None  # the kept mapping goes with the run


class Backward(unittest.TestCase):
    def dry_run(self, args, code=0):
        with tempfile.TemporaryDirectory() as tmp:
            r = run_script(args + ["--dry-run"], cwd=tmp)
        self.assertEqual(r.returncode, code, r.stderr)
        return r.stderr

    def test_the_backward_stages_run_in_the_harness_order_with_its_tags(self):
        every = harness_backward_stages()
        self.assertEqual(every, ["grad_upcast", "dp_gemm", "dv_gemm", "dropout_backward", "grads_to_host",
                                 "softmax_backward", "dq_gemm", "dk_gemm", "grad_inputs", "backward_sync"])
        with open(os.path.join(ROOT, "scripts", "stages.json")) as f:
            table = {row["name"]: row for row in json.load(f)["stages"]}
        # The stage table's tags for the backward (the stage's name), and backward_sync's own lines.
        for name in every[:-1]:
            self.assertEqual(table[name]["debug_begin"][-1 if "gemm" not in name else 0]["text"], "[MATH_%s]" % name.upper())
        self.assertEqual(table["backward_sync"]["debug_begin"][0]["text"], "[BACKWARD_SYNC] stream={stream} device=0")
        self.assertEqual(table["backward_sync"]["debug_end"][0]["text"],
                         "[BACKWARD_SYNC_DONE] result=no error duration_ms={duration_ms}")
        L, S, E = 96, 160, 32
        gemms = harness_backward_gemm_shapes(L, S, E)
        self.assertEqual(sorted(gemms), ["dk_gemm", "dp_gemm", "dq_gemm", "dv_gemm"])
        shape = ["-L", str(L), "-S", str(S), "-E", str(E)]
        cases = [  # options, the stages that run besides the six that always do
            ([], {"grad_upcast"}),
            (["--dtype", "fp32"], set()),
            (["--dtype", "fp16", "--precision", "native"], set()),
            (["--dropout", "0.1", "--kv-heads", "2", "--mask", "bool"], {"grad_upcast", "dropout_backward"}),
            (["--scenario", "2", "--memory", "managed", "--dropout", "0.2"],
             {"grad_upcast", "dropout_backward", "grads_to_host"}),
            (["--scenario", "3", "--memory", "managed", "--dtype", "fp32"], set()),
        ]
        for args, optional in cases:
            with self.subTest(args=args):
                runs = [n for n in every if n not in ("grad_upcast", "dropout_backward", "grads_to_host") or n in optional]
                expected = []
                for n in runs:
                    if n == "backward_sync":
                        expected += ["CUDA_DEBUG BACKWARD_SYNC", "CUDA_DEBUG BACKWARD_SYNC_DONE"]
                    elif n in gemms:
                        tag = "SDPA_DEBUG MATH_" + n.upper()
                        expected += [tag, "SDPA_DEBUG CUBLAS_GEMM_START", "SDPA_DEBUG CUBLAS_GEMM_DONE", tag + "_DONE"]
                    else:
                        expected += ["SDPA_DEBUG MATH_" + n.upper(), "SDPA_DEBUG MATH_" + n.upper() + "_DONE"]
                entries = [e for e in after_forward(self.dry_run(shape + args + ["--backward", "--log-extras"]))
                           if not is_note(e[1])]
                self.assertEqual([t for _, t, _ in entries], expected)
                # Each GEMM's [CUBLAS_GEMM_START] has the harness's M, N, K; no stage prints parameters.
                for i, (_, tag, line) in enumerate(entries):
                    if tag == "SDPA_DEBUG CUBLAS_GEMM_START":
                        stage = entries[i - 1][1][len("SDPA_DEBUG MATH_"):].lower()
                        self.assertIn("[CUBLAS_GEMM_START] M=%d N=%d K=%d [" % gemms[stage], line)
                    elif tag.startswith("SDPA_DEBUG MATH_"):
                        self.assertRegex(line, r"^\[SDPA_DEBUG\] \[MATH_[A-Z_]+\] \[math_sdpa/stage\.cpp:\d+\]$")

    def test_the_backward_tags_are_the_documented_sequence(self):
        with open(os.path.join(ROOT, "docs", "TORCH_STAGES.md")) as f:
            doc = f.read()
        with open(os.path.join(ROOT, "docs", "LOG_FORMAT.md")) as f:
            log_format = f.read()
        for variant, extra in (("default", []), ("extras", ["--log-extras"])):
            with self.subTest(variant=variant):
                block = re.search(r"<!-- backward-tags:%s -->\n(.*?)<!-- end -->" % variant, doc, re.S).group(1)
                documented = [line.strip() for line in block.splitlines() if line.strip()]
                text = self.dry_run(["--backward"] + extra)
                self.assertEqual([t for _, t, _ in after_forward(text)], documented)
                # The forward call before it is the call LOG_FORMAT.md documents.
                block = re.search(r"<!-- call-tags:%s -->\n(.*?)<!-- end -->" % variant, log_format, re.S).group(1)
                call = [t for _, t, _ in compare_logs.first_call(compare_logs.tagged_lines(text))]
                self.assertEqual(call, [line.strip() for line in block.splitlines() if line.strip()])
        self.assertEqual(len(re.findall(r"SDPA_DEBUG CUBLAS_GEMM_START", re.search(
            r"<!-- backward-tags:default -->\n(.*?)<!-- end -->", doc, re.S).group(1))), 4)

    def test_each_step_after_the_first_names_its_calls(self):
        # stage_log.cpp StageLogger::call_position: [LAYER] before each call of step 2 on, the backward's too.
        text = self.dry_run(["--backward", "--iters", "2", "--log-extras"])
        tags = [t for _, t, _ in compare_logs.tagged_lines(text)]
        layers = [i for i, line in enumerate(text.splitlines()) if "[LAYER] step=2 layer=1/1 [" in line]
        self.assertEqual(len(layers), 2)
        lines = text.splitlines()
        self.assertIn("[SDPA_ENTRY] Q shape=", lines[layers[0] + 1])
        self.assertIn("[MATH_GRAD_UPCAST]", lines[layers[1] + 1])
        self.assertEqual(tags.count("CUDA_DEBUG BACKWARD_SYNC_DONE"), 2)
        self.assertNotIn("[LAYER]", self.dry_run(["--backward", "--log-extras"]))

    def test_the_scenario_and_fix_notes_are_the_harness_words(self):
        with open(os.path.join(ROOT, "math_sdpa", "conditions.cpp")) as f:
            conditions = f.read()
        with open(os.path.join(ROOT, "fixes", "fix2_prefetch_scores.cpp")) as f:
            fix2 = f.read()
        for words in ('" GEMM on stream "', '"), ordered after stream "', '" by an event"',
                      "the host touches the backward's operands before its softmax, not during it",
                      '"[SCENARIO_2] host read %s: %zu bytes, %zu pages, min=%.6g max=%.6g (%.3f ms)"'):
            self.assertIn(words, conditions)
        for words in ('"[FIX_2] prefetch: cudaMemPrefetchAsync(%s, %lld bytes, device %d) on the stream"',
                      '"[FIX_2] host-sync: cudaStreamSynchronize before ")', '"[FIX_2] device-sync: cudaDeviceSynchronize after ")',
                      '"[FIX_2] prefetch skipped (%s memory does not migrate)"'):
            self.assertIn(words, fix2)
        self.assertIn("return s == Stage::softmax || s == Stage::softmax_backward;", fix2)

        def stage_notes(text):
            """{stage tag: the normalised notes from its begin line to its _DONE}, and the notes just before each."""
            inside, before, current, pending = {}, {}, None, []
            for _, tag, line in after_forward(text):
                if is_note(tag):
                    (inside.setdefault(current, []) if current else pending).append(compare_logs.normalise(line))
                elif tag.startswith("SDPA_DEBUG CUBLAS_GEMM_"):
                    continue
                elif tag.endswith("_DONE"):
                    current = None
                else:
                    current = tag
                    if pending:
                        before[tag], pending = pending, []
            return inside, before

        note = "[SDPA_DEBUG] [%s] %s [FILE:LINE]"
        inside, before = stage_notes(self.dry_run(["--scenario", "1", "--memory", "managed", "--backward",
                                                   "--log-extras"]))
        self.assertEqual(inside, {})
        self.assertEqual(before, {"SDPA_DEBUG MATH_%s" % g.upper(): [
            note % ("SCENARIO_1", "%s GEMM on stream P (aux), ordered after stream P by an event" % g)]
            for g in ("dp_gemm", "dv_gemm", "dq_gemm", "dk_gemm")})
        inside, before = stage_notes(self.dry_run(["--scenario", "2", "--fix", "on", "--memory", "managed", "--backward",
                                                   "--log-extras"]))
        self.assertEqual(before, {})
        self.assertEqual(inside["SDPA_DEBUG MATH_GRADS_TO_HOST"], [
            note % ("SCENARIO_2", "the host touches the backward's operands before its softmax, not during it"),
            note % ("SCENARIO_2", "host read probs: N bytes, N pages, min=V max=V (N ms)"),
            note % ("SCENARIO_2", "host read grad_probs: N bytes, N pages, min=V max=V (N ms)")])
        self.assertEqual(inside["SDPA_DEBUG MATH_SOFTMAX_BACKWARD"], [
            note % ("FIX_2", "prefetch: cudaMemPrefetchAsync(probs, N bytes, device N) on the stream"),
            note % ("FIX_2", "prefetch: cudaMemPrefetchAsync(grad_probs, N bytes, device N) on the stream"),
            note % ("FIX_2", "host-sync: cudaStreamSynchronize before softmax_backward"),
            note % ("FIX_2", "device-sync: cudaDeviceSynchronize after softmax_backward")])
        self.assertEqual(sorted(inside), ["SDPA_DEBUG MATH_GRADS_TO_HOST", "SDPA_DEBUG MATH_SOFTMAX_BACKWARD"])
        inside, _ = stage_notes(self.dry_run(["--fixes", "2", "--backward", "--log-extras"]))  # caching: no prefetch
        self.assertEqual(inside["SDPA_DEBUG MATH_SOFTMAX_BACKWARD"][0],
                         note % ("FIX_2", "prefetch skipped (device memory does not migrate)"))
        # Without --log-extras the notes are the harness's own lines, left out as repro leaves them out.
        self.assertNotIn("SCENARIO_", self.dry_run(["--scenario", "1", "--memory", "managed", "--backward"]))

    def test_an_injected_hang_in_a_backward_stage_is_named(self):
        cases = [  # stage, options, what the last line before the report says
            ("softmax_backward", ["--log-extras"], "[SDPA_DEBUG] [MATH_SOFTMAX_BACKWARD] ["),
            ("backward_sync", ["--log-extras"], "[CUDA_DEBUG] [BACKWARD_SYNC] stream=0 device=0 ["),
            ("dk_gemm", ["-L", "96", "-S", "160", "-E", "32"], "[SDPA_DEBUG] [CUBLAS_GEMM_START] M=160 N=32 K=96 ["),
        ]
        for stage, args, last in cases:
            with self.subTest(stage=stage), tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "hang.json")
                r = run_script(["--dry-run", "--backward", "--inject", "hang:" + stage, "--stage-timeout", "1", "--json",
                                out] + args, timeout=30)
                self.assertEqual(r.returncode, 3, r.stderr)
                self.assertLess(r.seconds, 1.0 + 1.0)
                lines = r.stderr.splitlines()
                hang = [i for i, line in enumerate(lines) if line.startswith(
                    "torch_stages.py: HANG: stage %s did not finish within 1.0 s" % stage)]
                self.assertEqual(len(hang), 1, r.stderr)
                self.assertTrue(lines[hang[0] - 1].startswith(last), lines[hang[0] - 1])
                if stage == "dk_gemm":  # the fourth GEMM of the backward: dk's, not dv's of the same M, N, K
                    self.assertEqual([t for _, t, _ in after_forward("\n".join(lines[:hang[0]]))].count(
                        "SDPA_DEBUG CUBLAS_GEMM_START"), 4)
                with open(out) as f:
                    j = json.load(f)
                self.assertEqual((j["outcome"], j["exit_code"], j["error_stage"]), ("hang", 3, stage))
                self.assertTrue(j["config"]["backward"])

    def test_what_it_cannot_run_with_backward_exits_2_with_one_line(self):
        bad = [["--backward", "--mode", "whole"],                 # the backward is stage by stage
               ["--backward", "--graph"],                         # repro's scenario 5: not here
               ["--backward", "--alloc-timing", "per-call"],      # PyTorch allocates inside its ops
               ["--backward", "--layers", "2"],
               ["--backward", "--log-format", "harness"],
               ["--backward", "--fixes", "5"],                    # repro refuses fix 5's parts with --backward
               ["--inject", "hang:softmax_backward"],             # no backward without --backward
               ["--backward", "--inject", "hang:dropout_backward"],  # no dropout
               ["--backward", "--inject", "hang:grads_to_host"],  # not scenario 2
               ["--backward", "--dtype", "fp32", "--inject", "hang:grad_upcast"],  # nothing to upcast
               ["--backward", "--inject", "hang:alloc_grad_pv"],
               ["--backward", "--inject", "hang:nowhere"]]
        assert_refused(self, bad)

    def test_the_json_says_backward_and_times_its_stages(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            self.assertEqual(run_script(["--dry-run", "--backward", "--dropout", "0.1", "--json", out]).returncode, 0)
            with open(out) as f:
                j = json.load(f)
        self.assertTrue(j["config"]["backward"])
        self.assertEqual(j["config"]["settings"]["backward"], "true")
        stages = [x["stage"] for x in j["stages"]]
        self.assertEqual(stages[stages.index("stream_sync") + 1:],
                         [n for n in harness_backward_stages() if n != "grads_to_host"])


class Tables(unittest.TestCase):
    def test_the_workloads_are_those_of_workload_cpp(self):
        with open(os.path.join(ROOT, "scenarios", "workload.cpp")) as f:
            source = f.read()
        heads, head_dim, text = (int(x) for x in re.search(
            r"kHeads = (\d+), kHeadDim = (\d+), kTextTokens = (\d+);", source).groups())
        valid = int(re.search(r"p\.text_valid = (\d+);", source).group(1))
        self.assertIn("w.k_layout = KLayout::bshe;", source)
        entries = re.findall(r'(with_text_padding\()?layer\("([^"]+)",\s*(?:"(?:[^"\\]|\\.)*"\s*)+,\s*(\d+),\s*(\d+)\)',
                             source)
        self.assertEqual(len(entries), 3)
        for padded, name, batch, pixels in entries:
            with self.subTest(workload=name):
                p, k_layout = torch_stages.WORKLOADS[name]()
                self.assertEqual((p.batch, p.q_heads, p.kv_heads, p.head_dim, p.q_len, p.kv_len, p.dtype, k_layout),
                                 (int(batch), heads, heads, head_dim, text + (int(pixels) // 16) ** 2,
                                  text + (int(pixels) // 16) ** 2, "bf16", "bshe"))
                self.assertEqual((p.mask_pattern, p.text_tokens, p.text_valid, p.mask_per_batch),
                                 ("text_padding", text, valid, True) if padded else ("random", 0, 0, False))
        self.assertEqual(sorted(torch_stages.WORKLOADS), sorted(name for _, name, _, _ in entries))

    def test_the_scenario_workloads_are_those_of_the_scenarios(self):
        found = {}
        folder = os.path.join(ROOT, "scenarios")
        for name in os.listdir(folder):
            m = re.match(r"scenario(\d)_.*\.cpp$", name)
            # torch_stages.py runs one call of scenarios 0-4 (5's graph and 6's training process are
            # the harness's alone).
            if m and int(m.group(1)) < 5:
                with open(os.path.join(folder, name)) as f:
                    w = re.search(r'default_workload = "([^"]+)"', f.read())
                if w:
                    found[int(m.group(1))] = w.group(1)
        self.assertEqual(found, torch_stages.SCENARIO_WORKLOADS)


def stage_literals(source):
    """(line, text) of each string literal a script's code uses as a stage's name: the keys of
    DISPATCH; what is compared with a name or attribute called *stage*, `name` or `inject`, or
    assigned to or defaulted for one called *stage*; an argument for a parameter called *stage* of a
    function or class of the same script; what STAGES.index and the like take."""
    tree = ast.parse(source)

    def ident(node):
        return getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "arg", None) or ""

    def stagey(node):
        return "stage" in ident(node).lower()

    def strings(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [(node.lineno, node.value)]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [x for e in node.elts for x in strings(e)]
        return []

    stage_params = {}  # function or class name -> the places of its parameters called *stage*
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            f = node if isinstance(node, ast.FunctionDef) else next(
                (d for d in node.body if isinstance(d, ast.FunctionDef) and d.name == "__init__"), None)
            if f is not None:
                params = [a for a in f.args.args if a.arg != "self"]
                stage_params.setdefault(node.name, set()).update(i for i, a in enumerate(params) if stagey(a))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "DISPATCH" and isinstance(node.value, ast.Dict):
                    out += [x for k in node.value.keys for x in strings(k)]
                pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                         and isinstance(node.value, ast.Tuple) else [(target, node.value)])
                out += [x for t, v in pairs if stagey(t) for x in strings(v)]
        elif isinstance(node, ast.Compare):
            operands = [node.left] + node.comparators
            if any(stagey(o) or ident(o) in ("name", "inject") for o in operands):
                out += [x for o in operands for x in strings(o)]
        elif isinstance(node, ast.Call):
            places = stage_params.get(ident(node.func), set())
            out += [x for i, a in enumerate(node.args) if i in places for x in strings(a)]
            out += [x for k in node.keywords if "stage" in (k.arg or "") for x in strings(k.value)]
            if ident(node.func) == "index" and "STAGES" in ident(node.func.value):
                out += [x for a in node.args for x in strings(a)]
        elif isinstance(node, ast.FunctionDef):
            params = node.args.args[len(node.args.args) - len(node.args.defaults):]
            out += [x for a, d in zip(params, node.args.defaults) if stagey(a) for x in strings(d)]
    return out


def table_problems(rows, sources):
    """What the scripts (name -> source) say of the stages that the table `rows` does not: a stage
    named that the table does not have, a stage PyTorch runs (a call's or its backward's GPU or host
    work) without an op in torch_stages.py's DISPATCH, a stage whose lines print its detail without
    one there. The harness's other stages (load, graph, step; allocations and frees) are not the script's."""
    names = {row["name"] for row in rows}
    problems = []
    for script, source in sorted(sources.items()):
        for line, text in stage_literals(source):
            if text not in names and text not in torch_stages.OWN_STAGES:
                problems.append("%s:%d names stage '%s', which the stage table does not have" % (script, line, text))
    for row in rows:
        name, op = row["name"], torch_stages.DISPATCH.get(row["name"])
        if row["when"] in ("call", "backward") and row["kind"] in ("gpu", "host") and op is None:
            problems.append("stage %s: PyTorch runs it, and torch_stages.py's DISPATCH has no op for it" % name)
        prints_detail = any(re.search(r"\{(\+?detail|mnk)\}", t["text"]) for t in row["debug_begin"])
        if op is not None and op.detail is None and prints_detail:
            problems.append("stage %s: its lines print its detail, which torch_stages.py's DISPATCH does not give" % name)
    return problems


class StageTable(unittest.TestCase):
    """The stages' facts live in the stage table (scripts/stages.json, math_sdpa/stage.cpp's): the
    scripts name no stage it lacks, and torch_stages.py runs every stage of it that PyTorch runs."""

    @classmethod
    def setUpClass(cls):
        with open(STAGES_JSON) as f:
            cls.table = json.load(f)
        cls.sources = {}
        for path in (SCRIPT, COMPARE, SCENARIO_TABLE):
            with open(path) as f:
                cls.sources[os.path.basename(path)] = f.read()

    def test_the_scripts_name_only_the_table_stages_and_the_dispatch_covers_it(self):
        self.assertEqual(table_problems(self.table["stages"], self.sources), [])
        # The check sees DISPATCH's keys and the stages named elsewhere (the scenarios' last stages,
        # stage_runs, the result tensor, the values, whole mode), so a name the table loses is caught there too.
        found = [text for _, text in stage_literals(self.sources["torch_stages.py"])]
        self.assertTrue(set(torch_stages.DISPATCH) <= set(found), found)
        self.assertEqual({"entry_sync", "scale_q", "qk_gemm", "mask_add", "scores_to_host", "softmax", "pv_gemm",
                          "stream_sync"}, {text for text in found if found.count(text) > 1})
        for name in torch_stages.DISPATCH:  # each op is a method of both backends
            self.assertTrue(callable(getattr(torch_stages.TorchBackend, name, None)), name)
            self.assertTrue(callable(getattr(torch_stages.DryBackend, name, None)), name)
        self.assertFalse(set(torch_stages.OWN_STAGES) & {row["name"] for row in self.table["stages"]})

    def test_a_planted_table_change_is_caught(self):
        rows = copy.deepcopy(self.table["stages"])
        names = [row["name"] for row in rows]
        rows[names.index("softmax")]["name"] = "softmax_forward"  # a stage renamed in the table only
        rows[names.index("grad_inputs")]["debug_begin"][0]["text"] = "[MATH_GRAD_INPUTS]{+detail}"  # a new detail
        rows.insert(names.index("qk_gemm"), dict(rows[names.index("qk_gemm")], name="qk_gemm_split"))  # a new GPU stage
        problems = table_problems(rows, self.sources)
        self.assertIn("torch_stages.py:", "\n".join(problems))
        self.assertTrue(any("names stage 'softmax'," in x for x in problems), problems)
        for name in ("softmax_forward", "qk_gemm_split"):
            self.assertIn("stage %s: PyTorch runs it, and torch_stages.py's DISPATCH has no op for it" % name, problems)
        self.assertIn("stage grad_inputs: its lines print its detail, which torch_stages.py's DISPATCH does not give",
                      problems)
        # The harness's own stages are not the script's: a load stage, another allocation, another step stage.
        rows = copy.deepcopy(self.table["stages"])
        for name, kind, when in (("load_weights", "host", "load"), ("alloc_extra", "alloc", "call"),
                                 ("step_sync", "gpu", "step")):
            rows.insert(0, dict(rows[0], name=name, kind=kind, when=when))
        self.assertEqual(table_problems(rows, self.sources), [])

    def run_with_table(self, rows, args, script=SCRIPT):
        """`script` run from a folder of its own whose stages.json has `rows` (no stages.json: None)."""
        with tempfile.TemporaryDirectory() as tmp:
            copy_path = os.path.join(tmp, os.path.basename(script))
            with open(script) as f, open(copy_path, "w") as out:
                out.write(f.read())
            if rows is not None:
                with open(os.path.join(tmp, "stages.json"), "w") as out:
                    json.dump(dict(self.table, stages=rows), out)
            return run_script(args, cwd=tmp, script=copy_path)

    def test_stages_that_are_not_pytorch_side_change_nothing(self):
        rows = copy.deepcopy(self.table["stages"])
        load = dict(rows[0], name="load_weights", kind="host", when="load")
        load["debug_begin"] = [{"channel": "sdpa", "line": 1, "text": "[MATH_LOAD_WEIGHTS] {weights}"}]
        rows.insert(0, load)
        args = ["--dry-run", "--backward", "--log-extras", "--dropout", "0.1", "--mask", "bool"]
        mine, expected = self.run_with_table(rows, args), run_script(args)
        self.assertEqual((mine.returncode, normalised(mine.stderr)), (0, normalised(expected.stderr)))

    def test_a_table_the_script_cannot_run_exits_2_with_one_line(self):
        rows = copy.deepcopy(self.table["stages"])
        rows.insert(1, dict(rows[1], name="extra_gemm", kind="gpu", when="call"))
        for table, words in ((rows, "has the stage(s) extra_gemm, for which this script has no PyTorch op"),
                             (None, "cannot be read")):
            with self.subTest(words=words):
                r = self.run_with_table(table, ["--dry-run"])
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertIn(words, r.stderr)
                r = self.run_with_table(table, [os.path.join(FIXTURES, "default.log")] * 2, script=COMPARE)
                self.assertEqual(r.returncode, 0 if table else 2, r.stderr)

    def test_scenario_table_runs_the_default_scenarios_with_the_table_stage_order(self):
        """scripts/scenario_table.py against a stand-in repro: the scenarios it lists by default, one
        that is not (by_default names why), the stages of each run in the table's order."""
        stages = [row["name"] for row in self.table["stages"]]
        fake = """import json, sys
args = sys.argv[1:]
if args[:2] == ["help", "scenarios"]:
    print(json.dumps([{"number": 0, "by_default": True, "fix": 0}, {"number": 3, "by_default": True, "fix": 3},
                      {"number": 6, "by_default": "it allocates past the memory there is", "fix": 5}]))
    sys.exit(0)
with open(sys.argv[0] + ".calls", "a") as f:
    f.write(" ".join(args) + "\\n")
json.dump({"outcome": "pass", "result_tensor": "output", "config": {"alloc": "managed"},
           "check": {"rel_error": 0.001}, "stages": [{"stage": n, "median_ms": 0.5} for n in %r]},
          open(args[args.index("--json") + 1], "w"))
""" % list(reversed(stages[:4] + ["stream_sync"]))
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
        columns = lines[1].split()[7:]
        self.assertEqual(columns, [n for n in stages if n in stages[:4] + ["stream_sync"]])
        self.assertEqual([line.split()[:3] for line in lines[2:]],
                         [[str(n), fix, dtype] for n in (0, 3) for fix in ("off", "on") for dtype in ("bf16", "fp16", "fp32")])
        self.assertEqual(len(calls), 12)
        self.assertIn("--scenario 0 --fixes all --dtype bf16", calls[3])
        self.assertIn("--scenario 3 --fix on --dtype bf16", calls[9])
        self.assertTrue(all(c.endswith("--iters 2") for c in calls), calls)


@unittest.skipUnless(has_numpy(), "numpy is not installed for this python3")
class RandomInputs(unittest.TestCase):
    PROBLEMS = [  # seed dtype B Hq Hkv L S E mask mask_dims tokens valid
        (23962, "bf16", 2, 8, 8, 128, 128, 64, "none", "1x1", 0, 0),
        (1, "fp32", 2, 8, 2, 256, 192, 128, "float", "BxH", 0, 0),
        (18446744073709551615, "fp16", 2, 4, 4, 100, 300, 64, "bool", "1xH", 0, 0),
        (7, "bf16", 2, 4, 4, 64, 640, 32, "textpad", "Bx1", 512, 128),
        (0, "fp32", 1, 24, 24, 512, 512, 128, "none", "1x1", 0, 0),
    ]

    @classmethod
    def setUpClass(cls):
        if not CONFIG["dump_inputs"]:
            raise unittest.SkipTest("no --dump-inputs: the harness's generator is not at hand")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dump = CONFIG["dump_inputs"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_same_seed_gives_the_harness_inputs_bit_for_bit(self):
        import numpy as np
        for case in self.PROBLEMS:
            seed, dtype, b, hq, hkv, l, s, e, mask, mask_dims, tokens, valid = case
            with self.subTest(problem=case):
                out = os.path.join(self.tmp.name, "inputs.bin")
                subprocess.run([self.dump] + [str(x) for x in case] + [out], check=True)
                expected = np.fromfile(out, dtype=np.float32)
                p = torch_stages.Problem()
                p.seed, p.dtype = seed, dtype
                p.batch, p.q_heads, p.kv_heads, p.q_len, p.kv_len, p.head_dim = b, hq, hkv, l, s, e
                p.mask = "bool" if mask == "textpad" else mask
                p.mask_per_batch, p.mask_per_head = mask_dims[0] == "B", mask_dims[2] == "H"
                if mask == "textpad":
                    p.mask_pattern, p.text_tokens, p.text_valid = "text_padding", tokens, valid
                inputs = torch_stages.make_random_inputs(p)
                parts = [inputs.q, inputs.k, inputs.v] + ([] if inputs.mask is None else [inputs.mask])
                mine = np.concatenate([x.astype(np.float32).ravel() for x in parts])
                self.assertEqual(mine.shape, expected.shape)
                self.assertEqual(int(np.count_nonzero(mine.view(np.uint32) != expected.view(np.uint32))), 0)


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
            return run_script(list(flags) + paths, script=COMPARE)

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
        # Each line named by the stage of the table that writes it.
        self.assertIn("first divergence at tag #5: line 5 (stage upcast) vs line 5 (stage scale_q)", r.stdout)
        self.assertIn("[MATH_UPCAST] bf16->fp32", r.stdout)
        note = "[SDPA_DEBUG] [SCENARIO_2] host read scores: 4 bytes [FILE:LINE]\n"
        r = self.compare(self.log, "".join(lines[:4]) + note + "".join(lines[4:]))
        self.assertIn("first divergence at tag #5: line 5 (stage upcast) vs line 5 (no stage's line)", r.stdout)
        # A tag several stages write (a GEMM's) is named by the stage the log is in.
        for cut, stage in ((12, "qk_gemm"), (18, "pv_gemm")):
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
        run_a = "[SDPA_DEBUG] [SCENARIO_2] host read scores: 4 bytes, 1 pages, min=-1 max=2 (0.5 ms) [a.cpp:10]\n"
        run_b = "[SDPA_DEBUG] [SCENARIO_2] host read scores: 8 bytes, 2 pages, min=-3 max=4 (0.25 ms) [b.py:20]\n"
        self.assertEqual(compare_logs.normalise(run_a.strip()), compare_logs.normalise(run_b.strip()))
        self.assertNotEqual(compare_logs.normalise(run_a.strip()),
                            compare_logs.normalise(run_b.strip().replace("SCENARIO_2", "SCENARIO_4")))

    def test_an_unreadable_log_exits_2(self):
        r = run_script(["/nonexistent/a.log", "/nonexistent/b.log"], script=COMPARE)
        self.assertEqual(r.returncode, 2)


def main():
    args = sys.argv[1:]
    for key in ("repro", "dump_inputs"):
        flag = "--" + key.replace("_", "-")
        if flag in args:
            i = args.index(flag)
            CONFIG[key] = args[i + 1]
            del args[i:i + 2]
    unittest.main(argv=[sys.argv[0]] + args, verbosity=2)


if __name__ == "__main__":
    main()
