#!/usr/bin/env python3
"""capture_model.py: a small training program whose attention is the failing workload's, for sdpa_capture.py.

A diffusion transformer in miniature (random weights, seeded): text and image tokens, each with
their own projections, attend jointly in every block, text first. Q and K get an RMS norm and
rotary position embeddings; Q, K and V are built as [B, S, H, E] and handed to
F.scaled_dot_product_attention as .transpose(1, 2) views, with a boolean key-padding mask
[B, 1, 1, S] over the text: batch entry 0 keeps all its text tokens, the later entries only the
first --text-valid. AdamW trains it for --steps steps on random targets, then one evaluation pass
runs without gradients. With --math (the default) each attention call runs inside
sdpa_kernel(SDPBackend.MATH), the path the harness rebuilds.

With --checkpoint non-reentrant or reentrant every block runs through torch.utils.checkpoint.checkpoint
(use_reentrant False or True) while gradients are recorded, as diffusers' enable_gradient_checkpointing()
runs it: the backward pass recomputes each block's forward, its attention call with it.

With --text-encoder a frozen text encoder runs in each step, as a trainer's encodes its prompts:
one causal attention call over the text tokens, without gradients, before the model's forward pass.

With --weights FILE the weights come from a file, memory-mapped as safetensors maps a checkpoint
(mmap, copy-on-write): the parameters from its first bytes (bf16, in the model's order), the rest
of the file as frozen tensors on the device (the rest of a model, an encoder's weights), each copied
with .to(device) from the mapped pages. The mapping is kept while the program runs, as by a script
that holds its CPU state dict, so that its pages and the file show in the capture's context.

    python3 tests/capture_model.py --steps 3
    python3 scripts/sdpa_capture.py --out capture --tensors first -- tests/capture_model.py --steps 3
    python3 scripts/sdpa_capture.py --out capture -- tests/capture_model.py --weights model.bin

Attention calls: (--steps + 1) x --blocks, --blocks of them between two optimizer steps; with
--checkpoint, --steps x --blocks more, recomputed inside the backward passes; with --text-encoder,
--steps + 1 more, the encoder's.
Exit 0; 2 for a bad option or a device it cannot use (one line on stderr).
"""
import argparse
import contextlib
import mmap
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.nn.attention import SDPBackend, sdpa_kernel

PROG = "capture_model"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def rope_tables(length, head_dim, device, base=10000.0):
    """cos and sin [S, 1, E] of the rotary embedding, half-split as in rotate_half (fp32)."""
    inverse = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * inverse[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos()[:, None, :], angles.sin()[:, None, :]


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rope(x, cos, sin):
    """x [B, S, H, E], computed in fp32 and cast back, as diffusion models do."""
    x32 = x.float()
    return (x32 * cos + rotate_half(x32) * sin).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def feed_forward(dim):
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"),
                         nn.Linear(4 * dim, dim))


class JointBlock(nn.Module):
    """One block: text and image projected apart, attended together, projected apart again."""

    def __init__(self, heads, head_dim, math_only):
        super().__init__()
        dim = heads * head_dim
        self.heads, self.head_dim, self.math_only = heads, head_dim, math_only
        self.txt_norm, self.img_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.txt_q, self.txt_k, self.txt_v = (nn.Linear(dim, dim) for _ in range(3))
        self.img_q, self.img_k, self.img_v = (nn.Linear(dim, dim) for _ in range(3))
        self.norm_q, self.norm_k = RMSNorm(head_dim), RMSNorm(head_dim)
        self.txt_out, self.img_out = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.txt_ff, self.img_ff = feed_forward(dim), feed_forward(dim)

    def split_heads(self, x):  # [B, S, H*E] -> [B, S, H, E]
        return x.unflatten(-1, (self.heads, self.head_dim))

    def forward(self, txt, img, mask, cos, sin):
        text_tokens = txt.shape[1]
        t, i = self.txt_norm(txt), self.img_norm(img)
        # The joint sequence [text, image] along S, in [B, S, H, E].
        q = torch.cat([self.norm_q(self.split_heads(self.txt_q(t))), self.norm_q(self.split_heads(self.img_q(i)))], 1)
        k = torch.cat([self.norm_k(self.split_heads(self.txt_k(t))), self.norm_k(self.split_heads(self.img_k(i)))], 1)
        v = torch.cat([self.split_heads(self.txt_v(t)), self.split_heads(self.img_v(i))], 1)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # [B, S, H, E] buffers viewed as [B, H, S, E]: what the diffusion pipelines hand SDPA.
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        with sdpa_kernel(SDPBackend.MATH) if self.math_only else contextlib.nullcontext():
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        o = o.transpose(1, 2).flatten(2)
        txt = txt + self.txt_out(o[:, :text_tokens])
        img = img + self.img_out(o[:, text_tokens:])
        return txt + self.txt_ff(txt), img + self.img_ff(img)


CHECKPOINT_MODES = ("none", "non-reentrant", "reentrant")


class JointModel(nn.Module):
    def __init__(self, heads, head_dim, blocks, math_only, checkpoint="none"):
        super().__init__()
        dim = heads * head_dim
        self.checkpoint = checkpoint
        self.txt_in, self.img_in = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(JointBlock(heads, head_dim, math_only) for _ in range(blocks))
        self.img_out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim))

    def forward(self, txt, img, mask, cos, sin):
        txt, img = self.txt_in(txt), self.img_in(img)
        for block in self.blocks:
            if self.checkpoint != "none" and torch.is_grad_enabled():
                txt, img = torch.utils.checkpoint.checkpoint(block, txt, img, mask, cos, sin,
                                                             use_reentrant=self.checkpoint == "reentrant")
            else:
                txt, img = block(txt, img, mask, cos, sin)
        return self.img_out(img)


class TextEncoder(nn.Module):
    """A frozen encoder of the text tokens: a projection and one causal self-attention."""

    def __init__(self, heads, head_dim, math_only):
        super().__init__()
        self.heads, self.math_only = heads, math_only
        self.qkv = nn.Linear(heads * head_dim, 3 * heads * head_dim)
        self.requires_grad_(False)

    def forward(self, txt):
        q, k, v = (x.unflatten(-1, (self.heads, -1)).transpose(1, 2) for x in self.qkv(txt).chunk(3, dim=-1))
        with sdpa_kernel(SDPBackend.MATH) if self.math_only else contextlib.nullcontext():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return txt + o.transpose(1, 2).flatten(2)


def text_padding_mask(batch, text, text_valid, image, device):
    """Bool [B, 1, 1, S], True where a key is attended: entry 0 all its text, the others the first
    text_valid text tokens; every image token."""
    mask = torch.ones(batch, 1, 1, text + image, dtype=torch.bool, device=device)
    mask[1:, :, :, text_valid:text] = False
    return mask


FROZEN_CHUNK = 64 << 20  # bytes of each frozen tensor made of the rest of the weights file


def load_weights(model, path, device):
    """The parameters, then frozen tensors of the rest, from `path` memory-mapped (see the module's
    text). Returns (the mapping, the frozen tensors): both kept by the caller while it trains."""
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # MAP_PRIVATE: read, never written back
    total, at = len(mapping), 0
    with torch.no_grad():
        for parameter in model.parameters():
            n = parameter.numel()
            if at + 2 * n > total:
                raise ValueError("%s: %d bytes, fewer than the model's parameters need" % (path, total))
            source = torch.frombuffer(mapping, dtype=torch.bfloat16, count=n, offset=at)
            parameter.copy_(source.view(parameter.shape).to(device=device, dtype=parameter.dtype))
            at += 2 * n
    frozen = []
    while total - at >= 2:
        n = min(FROZEN_CHUNK, (total - at) // 2 * 2)
        frozen.append(torch.frombuffer(mapping, dtype=torch.bfloat16, count=n // 2, offset=at).to(device))
        at += n
    return mapping, frozen


def main(argv):
    ap = argparse.ArgumentParser(prog="capture_model.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps (default 3)")
    ap.add_argument("--text", type=int, default=32, help="text tokens T (default 32)")
    ap.add_argument("--text-valid", type=int, default=20, help="valid text tokens of batch entries 1.. (default 20)")
    ap.add_argument("--image", type=int, default=96, help="image tokens (default 96)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads H (default 4)")
    ap.add_argument("--head-dim", type=int, default=32, help="head dimension E (default 32)")
    ap.add_argument("--batch", type=int, default=2, help="batch size B (default 2)")
    ap.add_argument("--blocks", type=int, default=2, help="transformer blocks (default 2)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--math", dest="math_only", action="store_true", default=True,
                    help="attention inside sdpa_kernel(SDPBackend.MATH) (the default)")
    ap.add_argument("--no-math", dest="math_only", action="store_false", help="let PyTorch pick the backend")
    ap.add_argument("--text-encoder", action="store_true",
                    help="encode the text with a frozen causal attention in each step, without gradients")
    ap.add_argument("--checkpoint", choices=CHECKPOINT_MODES, default="none",
                    help="activation checkpointing of every block: non-reentrant, reentrant or none (the default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weights", metavar="FILE",
                    help="load the weights from FILE, memory-mapped (bf16: the parameters, then frozen tensors)")
    args = ap.parse_args(argv)
    if min(args.steps, args.text, args.image, args.heads, args.batch, args.blocks) < 1 or args.head_dim < 2 \
            or args.head_dim % 2 or not 0 <= args.text_valid <= args.text:
        sys.stderr.write("%s: error: sizes must be >= 1, --head-dim even, 0 <= --text-valid <= --text\n" % PROG)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("%s: error: --device cuda: PyTorch %s sees no CUDA device\n" % (PROG, torch.__version__))
        return 2
    if args.weights is not None and not os.path.isfile(args.weights):
        sys.stderr.write("%s: error: --weights %s: no such file\n" % (PROG, args.weights))
        return 2

    torch.manual_seed(args.seed)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    dim = args.heads * args.head_dim
    model = JointModel(args.heads, args.head_dim, args.blocks, args.math_only, args.checkpoint).to(device=device,
                                                                                                  dtype=dtype)
    weights = None  # the mapping and the frozen tensors, kept while the program trains
    if args.weights is not None:
        try:
            weights = load_weights(model, args.weights, device)
        except (OSError, ValueError) as e:
            sys.stderr.write("%s: error: --weights %s\n" % (PROG, e))
            return 2
        print("%s: weights from %s (%d bytes, mapped), %d frozen tensors" % (PROG, args.weights, len(weights[0]),
                                                                           len(weights[1])))
    encoder = TextEncoder(args.heads, args.head_dim, args.math_only).to(device=device, dtype=dtype)

    def encode(txt):
        if not args.text_encoder:
            return txt
        with torch.no_grad():
            return encoder(txt)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mask = text_padding_mask(args.batch, args.text, args.text_valid, args.image, device)
    cos, sin = rope_tables(args.text + args.image, args.head_dim, device)

    def batch():
        return (torch.randn(args.batch, args.text, dim, device=device, dtype=dtype),
                torch.randn(args.batch, args.image, dim, device=device, dtype=dtype))

    for step in range(args.steps):
        txt, img = batch()
        txt = encode(txt)
        target = torch.randn_like(img)
        loss = F.mse_loss(model(txt, img, mask, cos, sin).float(), target.float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print("%s: step %d loss %.4f" % (PROG, step, loss.item()))
    with torch.no_grad():  # its calls need no gradient: another signature
        txt, img = batch()
        model(encode(txt), img, mask, cos, sin)
    recomputed = args.steps * args.blocks if args.checkpoint != "none" else 0
    encoded = args.steps + 1 if args.text_encoder else 0
    print("%s: %d attention calls, %d per step, %d recomputed, %d the text encoder's" % (
        PROG, (args.steps + 1) * args.blocks + recomputed + encoded, args.blocks, recomputed, encoded))
    del weights  # held until here, as a training script holds its CPU state dict
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
