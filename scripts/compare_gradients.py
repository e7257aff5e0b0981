#!/usr/bin/env python3
"""compare_gradients.py: repro's backward pass (--backward) against PyTorch's autograd through
_scaled_dot_product_attention_math, on the same .npy inputs and dO, both against float64.

Optional helper (PyTorch with CUDA; the harness itself has no Python). For each case it writes
q, k, v, dout (and a mask) as repro --inputs reads them, runs

    repro --inputs DIR --backward --save-output DIR/out.npy --json DIR/run.json [--check] ...

and PyTorch's math path with autograd on the GPU (allow_fp16_bf16_reduction_math_sdp for
--precision native) and in float64 on the CPU. It prints, for the output and dQ, dK, dV,
‖x − ref‖ / ‖ref‖ of ours and of PyTorch's against PyTorch's float64, and the verdict "ours no
worse than PyTorch's own rounding" (ours ≤ 1.5 × PyTorch's, or both below 1e-6). With dropout
the two sides draw different masks (the harness's Philox stream is its own): each is compared
with the float64 computation of its own mask (ours: repro --check's float64 reference, which
replays the harness's mask; PyTorch's: the mask read from the probabilities it returns).

It also times one training step (forward + backward) of each side with CUDA events: repro's
median pass against PyTorch's median forward + backward, the ratio printed per case.

    python3 scripts/compare_gradients.py --repro build/repro --out grads/ [--quick]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np


def torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def save_tensor(path, t, torch):
    """As repro --inputs reads it: float32, float16, or bfloat16 stored as uint16; bool masks as bool."""
    t = t.detach().cpu()
    np.save(path, t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy())


def rel(x, ref):
    x = x.double().flatten()
    ref = ref.double().flatten()
    if not bool(x.isfinite().all()):
        return float("inf")
    d = (x - ref).norm().item()
    n = ref.norm().item()
    return d / n if n > 0 else d


def math_sdpa(torch, q, k, v, mask, causal, dropout, scale, gqa, dropout_mask=None):
    # scaled_dot_product_attention turns a boolean mask into -inf/0 in the query's dtype before it
    # calls the math path (convert_boolean_attn_mask); the math op itself would add it as 0/1.
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(mask.logical_not(), float("-inf"))
    out, attn = torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal, dropout_mask=dropout_mask, scale=scale, enable_gqa=gqa)
    return out, attn


def run_case(torch, args, case, index):
    b, h, hkv, L, S, E = case["shape"]
    dtype = torch_dtype(torch, case.get("dtype", "bf16"))
    native = case.get("precision") == "native"
    mask_kind = case.get("mask", "none")
    dropout = case.get("dropout", 0.0)
    scale = case.get("scale")
    d = os.path.join(args.out, "case%02d" % index)
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(1000 + index)
    q = torch.randn(b, h, L, E, generator=g).to(dtype)
    k = torch.randn(b, hkv, S, E, generator=g).to(dtype)
    v = torch.randn(b, hkv, S, E, generator=g).to(dtype)
    dout = torch.randn(b, h, L, E, generator=g).to(dtype)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(b, 1, L, S, generator=g) > 0.25
        mask[0, 0, 0, :] = False  # one fully masked row
    elif mask_kind == "additive":
        mask = (torch.rand(b, 1, L, S, generator=g) * 4 - 2).to(dtype)
    for name, t in (("q", q), ("k", k), ("v", v), ("dout", dout)):
        save_tensor(os.path.join(d, name + ".npy"), t, torch)
    if mask is not None:
        save_tensor(os.path.join(d, "mask.npy"), mask, torch)

    cmd = [args.repro, "--inputs", d, "--backward", "--save-output", os.path.join(d, "out.npy"), "--json",
           os.path.join(d, "run.json"), "--iters", str(case.get("iters", 5)), "--stage-timeout", "120"]
    check = case.get("check", True)
    if check:
        cmd.append("--check")
    if native:
        cmd += ["--precision", "native"]
    if mask_kind == "causal":
        cmd += ["--mask", "causal"]
    if dropout:
        cmd += ["--dropout", str(dropout)]
    if scale is not None:
        cmd += ["--scale", str(scale)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(os.path.join(d, "run.json")):
        print("repro failed (exit %d): %s\n%s" % (proc.returncode, " ".join(cmd), (proc.stdout + proc.stderr)[-2000:]))
        return None
    run = json.load(open(os.path.join(d, "run.json")))

    def load(name):
        return torch.from_numpy(np.load(os.path.join(d, name)))

    ours = {"output": load("out.npy"), "grad_query": load("out.grad_query.npy"), "grad_key": load("out.grad_key.npy"),
            "grad_value": load("out.grad_value.npy")}

    # PyTorch on the GPU, autograd through the math path.
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(native)
    dev = "cuda"
    qg, kg, vg = (t.to(dev).requires_grad_() for t in (q, k, v))
    mg = mask.to(dev) if mask is not None else None
    causal = mask_kind == "causal"
    gqa = h != hkv
    torch.manual_seed(7 + index)
    out_t, attn_t = math_sdpa(torch, qg, kg, vg, mg, causal, dropout, scale, gqa)
    out_t.backward(dout.to(dev))
    theirs = {"output": out_t.detach().cpu(), "grad_query": qg.grad.cpu(), "grad_key": kg.grad.cpu(), "grad_value": vg.grad.cpu()}
    torch_mask = None
    if dropout:
        # The mask PyTorch drew: its dropped probabilities are exactly 0 where the mask dropped
        # (a probability that underflowed to 0 passes nothing either way).
        torch_mask = (attn_t.detach() != 0).cpu()

    # float64 on the CPU: of the same inputs and, with dropout, of PyTorch's own mask.
    def f64(dropout_mask):
        q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
        m64 = mask.double() if mask is not None and mask.dtype != torch.bool else mask
        o, _ = math_sdpa(torch, q64, k64, v64, m64, causal, dropout, scale, gqa, dropout_mask=dropout_mask)
        o.backward(dout.double())
        return {"output": o.detach(), "grad_query": q64.grad, "grad_key": k64.grad, "grad_value": v64.grad}

    ref_theirs = f64(torch_mask) if dropout else f64(None)
    rows = []
    for name in ("output", "grad_query", "grad_key", "grad_value"):
        torch_err = rel(theirs[name], ref_theirs[name])
        if dropout:
            # Ours against the harness's own float64 reference of its own mask (repro --check).
            if name == "output":
                ours_err = run["check"]["rel_error"] if check else float("nan")
            else:
                ours_err = next((c["rel_error"] for c in (run["check"] or {}).get("gradients", []) if c["tensor"] == name),
                                float("nan"))
        else:
            ours_err = rel(ours[name], ref_theirs[name])
        ok = ours_err <= 1.5 * torch_err or (ours_err < 1e-6 and torch_err < 1e-6)
        rows.append((name, ours_err, torch_err, ok))

    # One training step each, timed on the GPU.
    ours_ms = run["timing"]["call_median_ms"]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    dout_d = dout.to(dev)
    for i in range(8):
        qg.grad = kg.grad = vg.grad = None
        torch.cuda.synchronize()
        start.record()
        o, _ = math_sdpa(torch, qg, kg, vg, mg, causal, dropout, scale, gqa)
        o.backward(dout_d)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    torch_ms = sorted(times)[len(times) // 2]
    return rows, ours_ms, torch_ms, run["check"] is not None and run["outcome"] == "pass"


CASES = [
    {"name": "bf16 upcast", "shape": (2, 8, 8, 512, 512, 64)},
    {"name": "fp16 upcast causal", "shape": (2, 8, 8, 512, 512, 64), "dtype": "fp16", "mask": "causal"},
    {"name": "fp32 bool mask", "shape": (2, 8, 8, 512, 512, 64), "dtype": "fp32", "mask": "bool"},
    {"name": "bf16 native additive", "shape": (2, 8, 8, 512, 512, 64), "precision": "native", "mask": "additive"},
    {"name": "fp16 native", "shape": (2, 8, 8, 512, 512, 64), "dtype": "fp16", "precision": "native"},
    {"name": "bf16 GQA 8/2, scale 0.2", "shape": (2, 8, 2, 512, 384, 64), "scale": 0.2},
    {"name": "bf16 dropout 0.1", "shape": (2, 8, 8, 512, 512, 64), "dropout": 0.1},
    {"name": "fp32 dropout 0.2 GQA", "shape": (2, 8, 4, 256, 256, 64), "dtype": "fp32", "dropout": 0.2},
    {"name": "bf16 1x24x1024x128", "shape": (1, 24, 24, 1024, 1024, 128)},
    {"name": "qwen-image-1024 bf16 upcast", "shape": (1, 24, 24, 4608, 4608, 128), "check": False, "iters": 5, "big": True},
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repro", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="leave out the Qwen-Image shape")
    ap.add_argument("--json", help="write the table as JSON here")
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("compare_gradients.py: no CUDA GPU for PyTorch")
        return 7
    os.makedirs(args.out, exist_ok=True)
    table = []
    failures = 0
    for i, case in enumerate(CASES):
        if args.quick and case.get("big"):
            continue
        got = run_case(torch, args, case, i)
        if got is None:
            failures += 1
            continue
        rows, ours_ms, torch_ms, checked = got
        for name, ours_err, torch_err, ok in rows:
            failures += not ok
            table.append({"case": case["name"], "tensor": name, "ours_vs_f64": ours_err, "torch_vs_f64": torch_err, "ok": ok})
        table.append({"case": case["name"], "tensor": "step_ms", "ours": ours_ms, "torch": torch_ms, "ratio": ours_ms / torch_ms})
        sys.stdout.flush()
    print("%-30s %-11s %12s %12s  %s" % ("case", "tensor", "ours-vs-f64", "torch-vs-f64", "verdict"))
    for r in table:
        if r["tensor"] == "step_ms":
            print("%-30s %-11s %9.3f ms %9.3f ms  ratio %.2f" % (r["case"], "step", r["ours"], r["torch"], r["ratio"]))
        else:
            print("%-30s %-11s %12.3e %12.3e  %s" % (r["case"], r["tensor"], r["ours_vs_f64"], r["torch_vs_f64"],
                                                    "ok" if r["ok"] else "WORSE"))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": table}, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    print("compare_gradients: %d row(s) worse than PyTorch's own rounding" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
