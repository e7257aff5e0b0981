#!/usr/bin/env python3
"""compare_pytorch.py: our Math path against PyTorch's SDPA backends on the same GPU, same run.

Optional helper (needs PyTorch; the harness does not). For each shape (B, H, L=S, E) in bf16,
no mask, no dropout, it times with CUDA events, median of --iters calls after --warmup calls
(50 after 10 by default):
  - PyTorch's math SDPA, upcast (the default) and reduced precision
    (torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True));
  - cuDNN attention and flash attention (torch.nn.attention.sdpa_kernel backends);
then runs `repro bench --json` for the same shapes in both precision modes, eager (the twin of
PyTorch's eager math path, the default) and replayed from a CUDA graph (--graph, the fast path for
launch-bound shapes) (--alloc device, as PyTorch's caching allocator uses device memory; input
sets rotated as the bench chooses), and prints one table row per shape and mode with our figures,
the targets and the ratios. Our figure is the bench's "gpu"
median: CUDA events from the first GPU stage to the last, the figure comparable with an
event-timed PyTorch call. The floor is the materialised path's four passes over the scores at
the copy bandwidth measured here (a device-to-device copy through PyTorch).

The training step (a second table): PyTorch's math SDPA, upcast, forward and backward through
autograd for a random dO, against `repro bench --backward --precision upcast` (the forward call
and its backward call, the bench's "gpu" median), with the ratio and its target (0.6). Beside
them, the step's six fp32 GEMMs alone, as PyTorch issues them (torch.bmm on the same operand
layouts as autograd's, into tensors made beforehand): what any path that makes the same cuBLAS
calls cannot go below, and that time over PyTorch's step, the least ratio such a path can have.

    python3 scripts/compare_pytorch.py --repro build-gpu/repro --out results/compare

Without PyTorch it still runs the bench and prints our columns.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SHAPES = [(2, 8, 512, 64), (4, 16, 2048, 64), (1, 24, 4608, 128)]
# H100 targets (ms) for our path, native and upcast (notes/PERF.md), eager and graph alike.
TARGETS = {(2, 8, 512, 64): (0.030, 0.060), (4, 16, 2048, 64): (1.0, 3.5), (1, 24, 4608, 128): (1.8, 7.5)}


def event_median_ms(torch, fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def copy_bandwidth(torch):
    """Bytes read plus written per second of a 2 GiB device-to-device copy (median of 20)."""
    x = torch.empty(1 << 30, dtype=torch.int16, device="cuda").random_()
    y = torch.empty_like(x)
    ms = event_median_ms(torch, lambda: y.copy_(x), 3, 20)
    return 2 * x.numel() * x.element_size() / (ms * 1e-3)


def time_pytorch(torch, shape, warmup, iters):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    b, h, l, e = shape
    gen = torch.Generator(device="cuda").manual_seed(23962)
    q, k, v = (torch.randn(b, h, l, e, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    out = {}
    reduction = getattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
    for name, backend, reduced in [("math_upcast", SDPBackend.MATH, False), ("math_reduced", SDPBackend.MATH, True),
                                   ("cudnn", SDPBackend.CUDNN_ATTENTION, False),
                                   ("flash", SDPBackend.FLASH_ATTENTION, False)]:
        try:
            if reduction is not None:
                reduction(reduced)
            elif reduced:
                raise RuntimeError("this PyTorch has no allow_fp16_bf16_reduction_math_sdp")
            # The backend is chosen outside the timed calls: its context manager is not the op.
            with sdpa_kernel(backend):
                out[name] = event_median_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v), warmup, iters)
        except Exception as exc:  # a backend this GPU or build does not have
            out[name] = None
            print(f"# {name} at {shape}: not available ({str(exc).splitlines()[0][:120]})", file=sys.stderr)
    if reduction is not None:
        reduction(False)
    return out


MODES = ("eager", "graph")


def time_pytorch_step(torch, shape, warmup, iters):
    """PyTorch's math SDPA (upcast), forward and backward for a random dO, in ms (median)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    b, h, l, e = shape
    gen = torch.Generator(device="cuda").manual_seed(23963)
    q, k, v, dout = (torch.randn(b, h, l, e, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()

    def step():
        q.grad = k.grad = v.grad = None  # each step's gradients new, as a training step's are
        F.scaled_dot_product_attention(q, k, v).backward(dout)

    with sdpa_kernel(SDPBackend.MATH):
        return event_median_ms(torch, step, warmup, iters)


def time_pytorch_step_gemms(torch, shape, warmup, iters):
    """The upcast training step's six fp32 GEMMs alone, as the Math path's autograd issues them, in
    ms (median): forward S = Q·Kᵀ and O = P·V; backward (bmm's derivative: grad_a = grad·bᵀ,
    grad_b = aᵀ·grad) dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dKᵀ = Qᵀ·dS. Transposes are views, as
    autograd's are, so cuBLAS gets the same operation flags; TF32 off, PyTorch's default."""
    b, h, l, e = shape
    bh = b * h
    gen = torch.Generator(device="cuda").manual_seed(23964)
    q, k, v, dout = (torch.randn(bh, l, e, device="cuda", dtype=torch.float32, generator=gen) for _ in range(4))
    p, ds = (torch.rand(bh, l, l, device="cuda", dtype=torch.float32, generator=gen) for _ in range(2))
    outs = {name: torch.empty(bh, m, n, device="cuda", dtype=torch.float32)
            for name, m, n in (("s", l, l), ("o", l, e), ("dp", l, l), ("dv", l, e), ("dq", l, e), ("dkt", e, l))}

    def gemms():
        torch.bmm(q, k.transpose(1, 2), out=outs["s"])
        torch.bmm(p, v, out=outs["o"])
        torch.bmm(dout, v.transpose(1, 2), out=outs["dp"])
        torch.bmm(p.transpose(1, 2), dout, out=outs["dv"])
        torch.bmm(ds, k, out=outs["dq"])
        torch.bmm(q.transpose(1, 2), ds, out=outs["dkt"])

    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return event_median_ms(torch, gemms, warmup, iters)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        del q, k, v, dout, p, ds, outs
        torch.cuda.empty_cache()


def run_bench(repro, shape, precision, mode, out_dir, warmup, iters):
    b, h, l, e = shape
    name = f"bench_{b}x{h}x{l}x{e}_{precision}" + ("_graph" if mode == "graph" else "") + ("_backward" if mode == "backward" else "")
    path = os.path.join(out_dir, name + ".json")
    cmd = [repro, "bench", "-b", str(b), "--heads", str(h), "-L", str(l), "-E", str(e), "--dtype", "bf16",
           "--precision", precision, "--alloc", "device", "-w", str(warmup), "-n", str(iters), "--json", path]
    if mode in ("graph", "backward"):
        cmd.append("--" + mode)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    with open(os.path.join(out_dir, name + ".txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0 or not os.path.exists(path):
        print(f"# repro bench {shape} {precision} {mode}: exit {proc.returncode}: {proc.stderr.strip()[-200:]}", file=sys.stderr)
        return None
    with open(path) as f:
        s = json.load(f)["benchmarks"][0]["summaries"]
    return {"gpu": s["gpu"]["median_ms"], "gpu_ci": s["gpu"]["median_ci95_ms"], "wall": s["wall"]["median_ms"]}


def fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repro", default="build/repro", help="the repro binary")
    ap.add_argument("--out", default="compare-out", help="folder for the JSON and logs")
    ap.add_argument("--warmup", type=int, default=10, help="PyTorch warm-up calls")
    ap.add_argument("--iters", type=int, default=50, help="PyTorch timed calls")
    ap.add_argument("--bench-warmup", type=int, default=10)
    ap.add_argument("--bench-iters", type=int, default=100)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    try:
        import torch
        have_torch = torch.cuda.is_available()
    except ImportError:
        torch, have_torch = None, False
    device = torch.cuda.get_device_name(0) if have_torch else "(PyTorch not available)"
    bandwidth = copy_bandwidth(torch) if have_torch else None

    rows = []
    for shape in SHAPES:
        b, h, l, e = shape
        row = {"shape": shape, "torch": time_pytorch(torch, shape, args.warmup, args.iters) if have_torch else {}}
        for precision in ("native", "upcast"):
            row[precision] = {mode: run_bench(args.repro, shape, precision, mode, args.out, args.bench_warmup,
                                              args.bench_iters) for mode in MODES}
        # Four passes over B*H*L*S scores (GEMM writes, softmax reads and writes, P.V reads).
        score_bytes = b * h * l * l
        row["floor_native_ms"] = 4 * score_bytes * 2 / bandwidth * 1e3 if bandwidth else None
        row["floor_upcast_ms"] = 4 * score_bytes * 4 / bandwidth * 1e3 if bandwidth else None
        row["step"] = {"torch_math_upcast": time_pytorch_step(torch, shape, args.warmup, args.iters) if have_torch else None,
                       "torch_six_gemms": time_pytorch_step_gemms(torch, shape, args.warmup, args.iters) if have_torch else None,
                       "ours_upcast": run_bench(args.repro, shape, "upcast", "backward", args.out, args.bench_warmup,
                                                args.bench_iters)}
        rows.append(row)

    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump({"device": device, "torch": torch.__version__ if have_torch else None,
                   "copy_bandwidth_bytes_per_s": bandwidth, "rows": rows}, f, indent=2)

    bw = f"{bandwidth / 1e12:.2f} TB/s" if bandwidth else "not measured"
    print(f"# {device}, PyTorch {torch.__version__ if have_torch else '-'}, copy bandwidth {bw}; "
          f"CUDA events, median of {args.iters} after {args.warmup} (PyTorch) and of {args.bench_iters} after "
          f"{args.bench_warmup} (repro bench, gpu stages); bf16, no mask, no dropout; targets are for an H100")
    print("| shape (B,H,L=S,E) | ours | torch math upcast | torch math reduced | cuDNN | flash | floor native "
          "| ours native | target | ours upcast | target | torch upcast / ours upcast | torch reduced / ours native "
          "| ours native / cuDNN |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = r["torch"]
        tn, tu = TARGETS[r["shape"]]
        mark = lambda x, target: "" if x is None else (" ok" if x <= target else " MISS")
        for mode in MODES:
            nat = r["native"][mode]["gpu"] if r["native"][mode] else None
            up = r["upcast"][mode]["gpu"] if r["upcast"][mode] else None
            print(f"| {','.join(map(str, r['shape']))} | {mode} | {fmt(t.get('math_upcast'))} "
                  f"| {fmt(t.get('math_reduced'))} | {fmt(t.get('cudnn'))} | {fmt(t.get('flash'))} "
                  f"| {fmt(r['floor_native_ms'])} | {fmt(nat)}{mark(nat, tn)} | {tn} | {fmt(up)}{mark(up, tu)} | {tu} "
                  f"| {fmt(ratio(t.get('math_upcast'), up), 2)} | {fmt(ratio(t.get('math_reduced'), nat), 2)} "
                  f"| {fmt(ratio(nat, t.get('cudnn')), 2)} |")
    print()
    print("| shape (B,H,L=S,E) | training step: torch math upcast F+B | ours upcast (--backward) | ours / torch | target "
          "| its six fp32 GEMMs alone (torch.bmm) | least ratio with those GEMMs |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        st = r["step"]
        ours = st["ours_upcast"]["gpu"] if st["ours_upcast"] else None
        q = ratio(ours, st["torch_math_upcast"])
        print(f"| {','.join(map(str, r['shape']))} | {fmt(st['torch_math_upcast'])} | {fmt(ours)} | {fmt(q, 2)}"
              f"{'' if q is None else (' ok' if q <= 0.6 else ' MISS')} | 0.6 | {fmt(st['torch_six_gemms'])} "
              f"| {fmt(ratio(st['torch_six_gemms'], st['torch_math_upcast']), 2)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
