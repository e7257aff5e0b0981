#!/usr/bin/env python3
"""torch_memory_trace.py: what PyTorch's math SDPA allocates, frees and keeps for the backward pass.

Optional helper (needs PyTorch and a GPU; the harness does not). The harness's memory plan
(`repro --plan`, docs/CONTEXT.md) predicts, per attention layer, which tensors a call allocates in
which order, which it frees before returning, and which autograd keeps until the backward pass.
This script measures the same three things in PyTorch itself, for the same problems, so the plan
can be held against the real thing:

  - the allocation trace of one call (torch.cuda.memory._record_memory_history): every block the
    caching allocator hands out or takes back, in order, with its size;
  - the tensors autograd saved (the graph's `_saved_*` attributes, one storage counted once),
    with the node that saved each;
  - the memory still allocated after N layers (each with its own Q, K, V and output) and the peak.

    python3 scripts/torch_memory_trace.py --json results/.../torch_memory_trace.json

Problems: B,H,L,E[,S][:option...] with options bf16|fp16|fp32, native (allow_fp16_bf16_reduction),
causal, bool, float, gqaN (N kv heads), dropoutP, bshe (K a transposed view of [B, S, H, E]).
"""
import argparse
import json
import sys

DEFAULT_PROBLEMS = [
    "2,8,512,64", "2,8,512,64:causal", "2,8,512,64:bool", "2,8,512,64:dropout0.1", "2,8,512,64:gqa2",
    "2,8,512,64:native", "2,8,512,64:fp32", "2,8,512,64:bshe", "1,24,4608,128:bshe",
]


def parse_problem(text):
    shape, _, opts = text.partition(":")
    dims = [int(x) for x in shape.split(",")]
    p = {"B": dims[0], "H": dims[1], "L": dims[2], "E": dims[3], "S": dims[4] if len(dims) > 4 else dims[2],
         "dtype": "bf16", "native": False, "mask": "none", "kv_heads": dims[1], "dropout": 0.0, "bshe": False,
         "text": text}
    for o in filter(None, opts.split(":")):
        if o in ("bf16", "fp16", "fp32"):
            p["dtype"] = o
        elif o == "native":
            p["native"] = True
        elif o in ("causal", "bool", "float"):
            p["mask"] = o
        elif o.startswith("gqa"):
            p["kv_heads"] = int(o[3:])
        elif o.startswith("dropout"):
            p["dropout"] = float(o[7:])
        elif o == "bshe":
            p["bshe"] = True
        else:
            raise SystemExit("unknown problem option %r in %r" % (o, text))
    return p


def make_inputs(torch, p):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[p["dtype"]]
    B, H, Hkv, L, S, E = p["B"], p["H"], p["kv_heads"], p["L"], p["S"], p["E"]
    q = torch.randn(B, H, L, E, device="cuda", dtype=dt, requires_grad=True)
    if p["bshe"]:
        k_base = torch.randn(B, S, Hkv, E, device="cuda", dtype=dt, requires_grad=True)
        k = k_base.transpose(1, 2)
    else:
        k_base = k = torch.randn(B, Hkv, S, E, device="cuda", dtype=dt, requires_grad=True)
    v = torch.randn(B, Hkv, S, E, device="cuda", dtype=dt, requires_grad=True)
    mask = None
    if p["mask"] == "bool":
        mask = torch.rand(1, 1, L, S, device="cuda") > 0.25
    elif p["mask"] == "float":
        mask = torch.randn(1, 1, L, S, device="cuda", dtype=dt)
    return (q, k_base, v), (q, k, v), mask


def call(torch, p, q, k, v, mask):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p["dropout"],
                                              is_causal=p["mask"] == "causal",
                                              enable_gqa=p["kv_heads"] != p["H"])


def saved_tensors(out):
    """Every tensor the autograd graph of `out` saved, one per storage, with the node that saved it."""
    seen, rows, stack, visited = set(), [], [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except Exception:  # noqa: BLE001 - some saved values cannot be read back (freed)
                continue
            for t in value if isinstance(value, (tuple, list)) else [value]:
                if not hasattr(t, "untyped_storage"):
                    continue
                storage = t.untyped_storage()
                key = storage.data_ptr()
                row = {"node": node.name(), "attr": attr[len("_saved_"):], "shape": list(t.shape),
                       "dtype": str(t.dtype).replace("torch.", ""), "storage_bytes": storage.nbytes(), "_ptr": key}
                if key in seen:
                    row["duplicate"] = True
                seen.add(key)
                rows.append(row)
        stack.extend(n for n, _ in node.next_functions)
    return rows


def allocation_trace(torch, p):
    """The caching allocator's events during one call, in order: (action, bytes)."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    leaves, (q, k, v), mask = make_inputs(torch, p)
    torch.cuda.synchronize()
    start = len(torch.cuda.memory._snapshot()["device_traces"][0])
    out = call(torch, p, q, k, v, mask)
    torch.cuda.synchronize()
    trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    torch.cuda.memory._record_memory_history(enabled=None)
    events = [{"action": e["action"], "bytes": e["size"]} for e in trace if e["action"] in ("alloc", "free_requested")]
    return events, out, leaves


def layers_retained(torch, p, layers):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    keep = []
    per_layer = []
    for _ in range(layers):
        leaves, (q, k, v), mask = make_inputs(torch, p)
        before = torch.cuda.memory_allocated()
        inputs_bytes = before - (per_layer[-1]["after"] if per_layer else base)
        out = call(torch, p, q, k, v, mask)
        torch.cuda.synchronize()
        per_layer.append({"inputs": inputs_bytes, "after": torch.cuda.memory_allocated()})
        keep.append((leaves, mask, out))
    peak = torch.cuda.max_memory_allocated() - base
    total = torch.cuda.memory_allocated() - base
    del keep
    torch.cuda.synchronize()
    return {"layers": layers, "allocated_bytes": total, "peak_bytes": peak,
            "per_layer_bytes": [r["after"] - (per_layer[i - 1]["after"] if i else base) for i, r in enumerate(per_layer)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", default="|".join(DEFAULT_PROBLEMS),
                    help="problems joined by '|' (see the module's help)")
    ap.add_argument("--layers", type=int, default=3, help="layers kept alive at once for the retention figure")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("torch_memory_trace: no CUDA device", file=sys.stderr)
        return 7
    results = []
    for text in args.problems.split("|"):
        p = parse_problem(text)
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(p["native"])
        events, out, leaves = allocation_trace(torch, p)
        saved = saved_tensors(out)
        leaf_ptrs = {t.untyped_storage().data_ptr() for t in leaves}
        for row in saved:
            row["leaf_input"] = row.pop("_ptr") in leaf_ptrs
        out.sum().backward()  # the graph must be usable: the saved tensors are the real ones
        del out, leaves, leaf_ptrs
        retained = layers_retained(torch, p, args.layers)
        r = {"problem": p, "trace": events, "saved": saved, "retained": retained,
             "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
        results.append(r)
        score = p["B"] * p["H"] * p["L"] * p["S"]
        print("== %s  (score elements %d)" % (text, score))
        print("  trace: " + " ".join("%s%d" % ("+" if e["action"] == "alloc" else "-", e["bytes"]) for e in events))
        for s in saved:
            print("  saved %-28s %-8s %-20s %-9s %12d%s%s" % (
                s["node"], s["attr"], s["shape"], s["dtype"], s["storage_bytes"],
                " (again)" if s.get("duplicate") else "", " (an input)" if s["leaf_input"] else ""))
        print("  %d layers: allocated %d, peak %d, per layer %s" % (retained["layers"], retained["allocated_bytes"],
                                                                   retained["peak_bytes"], retained["per_layer_bytes"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
