#!/usr/bin/env python3
"""trainer_twin.py: a LoRA trainer of Qwen-Image's kind in miniature, the process the hang came from.

What the public Qwen-Image LoRA trainers (FlyMyAI's train.py) do, in the same order, with PyTorch,
safetensors, peft and accelerate only (diffusers' blocks written out here from the model's
structure), small enough to train a few steps in seconds:

  1. the weights: the transformer's and a text encoder's, each a safetensors file beside its
     config.json, as a diffusers model folder holds them (made once, from seeded random weights,
     in --weights DIR); loaded as from_pretrained loads them: safe_open maps the file, the model is
     built on the meta device, its parameters assigned from the file's tensors and moved to the
     GPU. The CPU tensors and the handle are then dropped (the mapping goes; the file's pages stay
     in the page cache), or with --keep-mapped kept while the program trains, as by a script that
     holds its CPU state dict;
  2. the transformer: --blocks joint blocks of text and image streams (modulation from the
     timestep, LayerNorm, Q, K, V projections of each stream, RMSNorm on Q and K, rotary embedding,
     one attention over the concatenated [text, image] tokens with a boolean mask of the text's
     padding, output projections, a GELU MLP per stream); attention through
     F.scaled_dot_product_attention inside sdpa_kernel(SDPBackend.MATH), as the hang's process ran
     it, on Q, K, V built as [B, S, H, E] and handed over as [B, H, S, E] views;
  3. LoRA through peft on to_q, to_k, to_v and to_out.0 (inject_adapter_in_model: what diffusers'
     add_adapter calls), everything else frozen; the text encoder frozen and kept on the GPU;
  4. activation checkpointing per block as diffusers' enable_gradient_checkpointing() sets it up:
     torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False); --checkpointing reentrant
     (with the first block's input made to require grad, as enable_input_require_grads does) or
     off;
  5. accelerate's Accelerator(mixed_precision="bf16"), AdamW over the LoRA parameters, prompts
     padded to --text-tokens (max_sequence_length) with their mask, a flow-matching loss, gradient
     clipping, --steps steps.

The attention part's memory (what the memory plan of the replayed step predicts), measured around
each attention call and each attention backward pass of a step: before a call the allocator's peak
is reset, and the call's peak is torch.cuda.max_memory_allocated() less memory_allocated() at its
start; what it leaves allocated when it returns, its output aside, is what its layer keeps for the
backward pass (autograd's tensors; nothing under checkpointing's forward, the recomputation's until
its block's backward). An attention backward pass runs from the gradient of the call's output to
the last of its inputs' (tensor hooks), its peak measured the same way. The attention part's peak
is the most, over those events in the step's order, of what the layers still hold (kept by calls
whose backward has not run) plus the event's own peak: the path's own allocations, the inputs Q, K,
V and the output's gradient (the model's) not included. The last step's is reported; the step's
own max_memory_allocated() is reported beside it.

    python3 tests/trainer_twin.py --weights /tmp/twin-weights
    python3 tests/trainer_twin.py --weights /tmp/twin-weights --checkpointing off
    python3 scripts/sdpa_capture.py --out capture -- tests/trainer_twin.py --weights /tmp/twin-weights --keep-mapped

Last line of its output, for scripts: `TRAINER_TWIN_RESULT {json}` (the variant, the losses, the
calls per step, attention_peak_bytes and its parts, the weights and whether they were still mapped
at the first attention call). Exit 0; 1 a loss that is not finite; 2 a bad option, no CUDA device,
or a package missing (one line on stderr).
"""
import argparse
import functools
import gc
import json
import math
import mmap
import os
import sys
import threading
import time

PROG = "trainer_twin"
RESULT_PREFIX = "TRAINER_TWIN_RESULT "
CHECKPOINTING = ("non-reentrant", "reentrant", "off")
TRANSFORMER = "transformer"
TEXT_ENCODER = "text_encoder"
WEIGHTS_FILES = {TRANSFORMER: "diffusion_pytorch_model.safetensors", TEXT_ENCODER: "model.safetensors"}

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.utils.checkpoint
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import safetensors.torch
    from safetensors import safe_open
    from peft import LoraConfig, inject_adapter_in_model
    from accelerate import Accelerator
except ImportError as e:
    sys.stderr.write("%s: error: needs PyTorch, safetensors, peft and accelerate (%s)\n" % (PROG, e))
    sys.exit(2)


# ----------------------------------------------------------------------------- the model
class RMSNorm(nn.Module):
    """diffusers' RMSNorm with a weight: computed in fp32, cast back."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * self.weight.float()).to(x.dtype)


def rope_axes(head_dim):
    """The rotary embedding's three axes (frame, row, column) as Qwen-Image splits a head: 16, 56, 56
    of 128 (each even: a head dimension that is a multiple of 32)."""
    frame = head_dim // 8
    side = (head_dim - frame) // 2
    return frame, side, side


def rope_frequencies(positions, dim, theta=10000.0):
    """Complex [len(positions), dim // 2]: e^(i * position * theta^(-2j/dim))."""
    inverse = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim)
    angles = torch.outer(positions.float(), inverse)
    return torch.polar(torch.ones_like(angles), angles)


def rotary_tables(side, text_tokens, head_dim, device):
    """(image, text) complex frequencies [tokens, E/2]: the image's rows and columns centred on 0
    (scale_rope), its frame 0; the text's positions after the image's largest."""
    frame, rows, cols = rope_axes(head_dim)
    centred = torch.arange(side, device=device) - (side - side // 2)
    grid_rows = centred.repeat_interleave(side)
    grid_cols = centred.repeat(side)
    image = torch.cat([rope_frequencies(torch.zeros(side * side, device=device), frame),
                       rope_frequencies(grid_rows, rows), rope_frequencies(grid_cols, cols)], dim=-1)
    text_positions = torch.arange(text_tokens, device=device) + side // 2
    text = torch.cat([rope_frequencies(text_positions, frame), rope_frequencies(text_positions, rows),
                      rope_frequencies(text_positions, cols)], dim=-1)
    return image, text


def apply_rotary(x, freqs):
    """x [B, S, H, E] rotated by complex freqs [S, E/2] in fp32, cast back (apply_rotary_emb_qwen)."""
    rotated = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2)) * freqs.unsqueeze(1)
    return torch.view_as_real(rotated).flatten(3).type_as(x)


class AttentionMemory:
    """The attention part's memory over a step (the module's text says how it is measured)."""

    def __init__(self, device):
        self.device = device
        self.lock = threading.Lock()
        self.events = []
        self.step_peak = 0
        self.qkv_bytes = 0

    def begin_step(self):
        torch.cuda.synchronize(self.device)
        with self.lock:
            self.events = []
        torch.cuda.reset_peak_memory_stats(self.device)
        self.step_peak = 0

    def _reset_peak(self):
        """The allocator's peak so far into the step's, then a fresh peak from now."""
        self.step_peak = max(self.step_peak, torch.cuda.max_memory_allocated(self.device))
        torch.cuda.reset_peak_memory_stats(self.device)

    def call(self, run, q, k, v):
        """run() (the attention call) measured; its backward pass watched when autograd records it."""
        recompute = torch._C._current_graph_task_id() != -1  # inside the backward pass
        before = torch.cuda.memory_allocated(self.device)
        self._reset_peak()
        out = run()
        peak = torch.cuda.max_memory_allocated(self.device)
        after = torch.cuda.memory_allocated(self.device)
        kept = after - before - out.numel() * out.element_size()
        with self.lock:
            self.events.append({"kind": "recompute" if recompute else "forward", "peak": peak - before,
                                "kept": max(kept, 0)})
            self.qkv_bytes = sum(t.numel() * t.element_size() for t in (q, k, v))
        if out.requires_grad:
            self._watch_backward(out, [t for t in (q, k, v) if t.requires_grad])
        return out

    def _watch_backward(self, out, inputs):
        window = {"left": len(inputs), "before": None}

        def started(grad):
            window["before"] = torch.cuda.memory_allocated(self.device)
            self._reset_peak()

        def finished(grad):
            window["left"] -= 1
            if window["left"] == 0 and window["before"] is not None:
                peak = torch.cuda.max_memory_allocated(self.device)
                with self.lock:
                    self.events.append({"kind": "backward", "peak": peak - window["before"], "kept": 0})

        out.register_hook(started)
        for t in inputs:
            t.register_hook(finished)

    def end_step(self):
        """The step's attention peak: {attention_peak_bytes, attention_peak_at, events ...}."""
        torch.cuda.synchronize(self.device)
        self._reset_peak()
        with self.lock:
            events = list(self.events)
        held, best, at = [], 0, ""
        counts = {"forward": 0, "recompute": 0, "backward": 0}
        for event in events:
            kind = event["kind"]
            total = sum(held) + event["peak"]
            if total > best:
                best, at = total, "%s call %d" % (kind, counts[kind])
            counts[kind] += 1
            if kind == "backward":
                if held:
                    held.pop()  # the layers' backward passes run last layer first
            else:
                held.append(event["kept"])
        kept = [e["kept"] for e in events if e["kind"] == "forward"]
        return {"attention_peak_bytes": best, "attention_peak_at": at, "forward_calls": counts["forward"],
                "recomputed_calls": counts["recompute"], "backward_calls": counts["backward"],
                "kept_bytes_per_forward_call": max(kept) if kept else 0,
                "call_peak_bytes": max((e["peak"] for e in events), default=0), "qkv_bytes_per_call": self.qkv_bytes,
                "step_peak_bytes": self.step_peak}


class JointAttention(nn.Module):
    """diffusers' Attention with QwenDoubleStreamAttnProcessor2_0: the image stream's to_q, to_k,
    to_v, to_out; the text stream's add_*_proj and to_add_out; RMSNorm on every Q and K."""

    def __init__(self, dim, heads, head_dim, memory):
        super().__init__()
        self.heads, self.memory = heads, memory
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, heads * head_dim) for _ in range(3))
        self.add_q_proj, self.add_k_proj, self.add_v_proj = (nn.Linear(dim, heads * head_dim) for _ in range(3))
        self.norm_q, self.norm_k = RMSNorm(head_dim), RMSNorm(head_dim)
        self.norm_added_q, self.norm_added_k = RMSNorm(head_dim), RMSNorm(head_dim)
        self.to_out = nn.ModuleList([nn.Linear(heads * head_dim, dim), nn.Dropout(0.0)])
        self.to_add_out = nn.Linear(heads * head_dim, dim)

    def forward(self, image, text, mask, rotary):
        image_freqs, text_freqs = rotary
        heads = lambda x: x.unflatten(-1, (self.heads, -1))  # noqa: E731  [B, S, H*E] -> [B, S, H, E]
        iq, ik, iv = heads(self.to_q(image)), heads(self.to_k(image)), heads(self.to_v(image))
        tq, tk, tv = heads(self.add_q_proj(text)), heads(self.add_k_proj(text)), heads(self.add_v_proj(text))
        iq, ik = self.norm_q(iq), self.norm_k(ik)
        tq, tk = self.norm_added_q(tq), self.norm_added_k(tk)
        iq, ik = apply_rotary(iq, image_freqs), apply_rotary(ik, image_freqs)
        tq, tk = apply_rotary(tq, text_freqs), apply_rotary(tk, text_freqs)
        # One sequence, text first; [B, S, H, E] buffers handed over as [B, H, S, E] views, as
        # diffusers' native attention backend permutes them.
        q = torch.cat([tq, iq], dim=1).transpose(1, 2)
        k = torch.cat([tk, ik], dim=1).transpose(1, 2)
        v = torch.cat([tv, iv], dim=1).transpose(1, 2)

        def run():
            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False)

        joint = self.memory.call(run, q, k, v).transpose(1, 2).flatten(2, 3).to(q.dtype)
        text_tokens = text.shape[1]
        image_out = self.to_out[1](self.to_out[0](joint[:, text_tokens:]))
        return image_out, self.to_add_out(joint[:, :text_tokens])


def feed_forward(dim):
    return nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))


def modulate(x, params):
    shift, scale, gate = params.chunk(3, dim=-1)
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1), gate.unsqueeze(1)


class JointBlock(nn.Module):
    """QwenImageTransformerBlock: each stream modulated by the timestep, attended jointly, then its MLP."""

    def __init__(self, dim, heads, head_dim, memory):
        super().__init__()
        self.img_mod = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.txt_mod = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.img_norm1, self.img_norm2 = (nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6) for _ in range(2))
        self.txt_norm1, self.txt_norm2 = (nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6) for _ in range(2))
        self.attn = JointAttention(dim, heads, head_dim, memory)
        self.img_mlp, self.txt_mlp = feed_forward(dim), feed_forward(dim)

    def forward(self, image, text, mask, temb, rotary):
        img_mod1, img_mod2 = self.img_mod(temb).chunk(2, dim=-1)
        txt_mod1, txt_mod2 = self.txt_mod(temb).chunk(2, dim=-1)
        img_in, img_gate1 = modulate(self.img_norm1(image), img_mod1)
        txt_in, txt_gate1 = modulate(self.txt_norm1(text), txt_mod1)
        img_attn, txt_attn = self.attn(img_in, txt_in, mask, rotary)
        image = image + img_gate1 * img_attn
        text = text + txt_gate1 * txt_attn
        img_in2, img_gate2 = modulate(self.img_norm2(image), img_mod2)
        image = image + img_gate2 * self.img_mlp(img_in2)
        txt_in2, txt_gate2 = modulate(self.txt_norm2(text), txt_mod2)
        text = text + txt_gate2 * self.txt_mlp(txt_in2)
        return text, image


def timestep_embedding(t, channels=256):
    """Sinusoidal [B, channels] of t in [0, 1] scaled by 1000, cos first (flip_sin_to_cos)."""
    half = channels // 2
    exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half
    angles = 1000.0 * t.float()[:, None] * exponent.exp()[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


class TwinTransformer(nn.Module):
    """QwenImageTransformer2DModel's structure: image and text in, the blocks, the image out."""

    def __init__(self, cfg, memory):
        super().__init__()
        dim = cfg["heads"] * cfg["head_dim"]
        self.cfg = cfg
        self.img_in = nn.Linear(cfg["in_channels"], dim)
        self.txt_norm = RMSNorm(cfg["text_dim"])
        self.txt_in = nn.Linear(cfg["text_dim"], dim)
        self.time_embed = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.transformer_blocks = nn.ModuleList(
            JointBlock(dim, cfg["heads"], cfg["head_dim"], memory) for _ in range(cfg["blocks"]))
        self.norm_out_mod = nn.Linear(dim, 2 * dim)
        self.norm_out = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.proj_out = nn.Linear(dim, cfg["in_channels"])
        self.gradient_checkpointing = False
        self.input_requires_grad = False
        self._gradient_checkpointing_func = None

    def enable_gradient_checkpointing(self, use_reentrant=False):
        """As diffusers' ModelMixin does: every block through torch.utils.checkpoint.checkpoint."""
        self.gradient_checkpointing = True
        self._gradient_checkpointing_func = functools.partial(torch.utils.checkpoint.checkpoint,
                                                              use_reentrant=use_reentrant)

    def forward(self, latents, prompt_embeds, prompt_mask, timestep, rotary):
        image = self.img_in(latents)
        if self.input_requires_grad and not image.requires_grad:
            # Reentrant checkpointing backpropagates only into blocks whose inputs require grad, and
            # the frozen image projection's output does not: enable_input_require_grads' remedy.
            image.requires_grad_(True)
        text = self.txt_in(self.txt_norm(prompt_embeds))
        temb = self.time_embed(timestep_embedding(timestep).to(image.dtype))
        # The joint mask built once, as diffusers builds it: the prompt's valid tokens, every image token.
        batch, image_tokens = image.shape[:2]
        keep_image = torch.ones(batch, image_tokens, dtype=torch.bool, device=image.device)
        mask = torch.cat([prompt_mask, keep_image], dim=1)[:, None, None, :]
        for block in self.transformer_blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                text, image = self._gradient_checkpointing_func(block, image, text, mask, temb, rotary)
            else:
                text, image = block(image, text, mask, temb, rotary)
        scale, shift = self.norm_out_mod(F.silu(temb)).chunk(2, dim=-1)
        image = self.norm_out(image) * (1 + scale[:, None]) + shift[:, None]
        return self.proj_out(image)


class TextEncoder(nn.Module):
    """A text encoder's size on the GPU, frozen: an embedding table and a projection."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab"], cfg["text_dim"])
        self.proj = nn.Linear(cfg["text_dim"], cfg["text_dim"])

    def forward(self, tokens, mask):
        hidden = self.proj(self.embed_tokens(tokens))
        return hidden * mask[..., None].to(hidden.dtype)  # padded positions are zeros, as encode_prompt's


# ------------------------------------------------------------------------------ the weights
def model_configs(args):
    vocab = max(1, (args.text_encoder_mib << 20) // (2 * args.text_dim))
    return {TRANSFORMER: {"blocks": args.blocks, "heads": args.heads, "head_dim": args.head_dim,
                          "text_dim": args.text_dim, "in_channels": 64},
            TEXT_ENCODER: {"vocab": vocab, "text_dim": args.text_dim}}


def build(name, cfg, memory):
    return TwinTransformer(cfg, memory) if name == TRANSFORMER else TextEncoder(cfg)


def weights_path(folder, name):
    return os.path.join(folder, name, WEIGHTS_FILES[name])


def write_atomically(path, write):
    """write(tmp) then tmp renamed over `path`: a run killed while making the weights leaves none."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def ensure_weights(folder, configs, device):
    """Each model's config.json and safetensors file in `folder`, made (seeded, on the GPU) where
    missing or made for another config. Returns the weights files' paths."""
    paths = {}
    for index, (name, cfg) in enumerate(sorted(configs.items())):
        sub = os.path.join(folder, name)
        os.makedirs(sub, exist_ok=True)
        config_path, path = os.path.join(sub, "config.json"), weights_path(folder, name)
        paths[name] = path
        try:
            with open(config_path) as f:
                same = json.load(f) == cfg
        except (OSError, ValueError):
            same = False
        if same and os.path.isfile(path):
            continue
        torch.manual_seed(1000 + index)
        with torch.device(device):
            model = build(name, cfg, None).to(torch.bfloat16)
        state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        del model
        write_atomically(path, lambda tmp: safetensors.torch.save_file(state, tmp, metadata={"format": "pt"}))
        write_atomically(config_path, lambda tmp: write_text(tmp, json.dumps(cfg, indent=2) + "\n"))
        print("%s: made %s (%d bytes)" % (PROG, path, os.path.getsize(path)), flush=True)
    return paths


def mapped_paths():
    """The files this process has mapped now (/proc/self/maps), resolved."""
    try:
        with open("/proc/self/maps") as f:
            return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return set()


def load_pretrained(name, cfg, path, device, keep):
    """The model as from_pretrained loads it: built on the meta device, its parameters assigned the
    file's tensors (safe_open maps the file), then moved to the GPU in bf16. Returns (model, what is
    kept of the load: the handle and the CPU tensors, with --keep-mapped)."""
    handle = safe_open(path, framework="pt", device="cpu")
    state = {key: handle.get_tensor(key) for key in handle.keys()}
    with torch.device("meta"):
        model = build(name, cfg, MEMORY)
    model.load_state_dict(state, assign=True, strict=True)
    model.to(device=device, dtype=torch.bfloat16)
    if keep:
        return model, (handle, state)
    del handle, state
    return model, None


# ------------------------------------------------------------------------------- training
MEMORY = None  # the AttentionMemory every block's attention reports to


def prompts(batch, text_tokens, text_valid, vocab, device):
    """Token ids and the padding mask [B, T]: the first prompt fills all T tokens, the others are
    padded after `text_valid` (padded to max_sequence_length)."""
    tokens = torch.randint(0, vocab, (batch, text_tokens), device=device)
    mask = torch.ones(batch, text_tokens, dtype=torch.bool, device=device)
    mask[1:, text_valid:] = False
    return tokens, mask


def run(args):
    global MEMORY
    began = time.monotonic()
    device = torch.device("cuda")
    MEMORY = AttentionMemory(device)
    configs = model_configs(args)
    paths = ensure_weights(os.path.abspath(args.weights), configs, device)
    gc.collect()

    accelerator = Accelerator(mixed_precision="bf16")
    transformer, kept_transformer = load_pretrained(TRANSFORMER, configs[TRANSFORMER], paths[TRANSFORMER], device,
                                                    args.keep_mapped)
    text_encoder, kept_encoder = load_pretrained(TEXT_ENCODER, configs[TEXT_ENCODER], paths[TEXT_ENCODER], device,
                                                 args.keep_mapped)
    text_encoder.requires_grad_(False)
    gc.collect()
    own_mapping = []
    if args.keep_mapped:
        # The files stay mapped while the program trains. Where this safetensors read them without
        # mapping them, map them here, held as the CPU state dicts are.
        for path in paths.values():
            if os.path.realpath(path) not in mapped_paths():
                with open(path, "rb") as f:
                    own_mapping.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    mapped_at_start = sorted(p for p in paths.values() if os.path.realpath(p) in mapped_paths())

    torch.manual_seed(args.seed)
    lora = LoraConfig(r=args.rank, lora_alpha=args.rank, init_lora_weights="gaussian",
                      target_modules=["to_k", "to_q", "to_v", "to_out.0"])
    transformer = inject_adapter_in_model(lora, transformer)
    for name, parameter in transformer.named_parameters():
        parameter.requires_grad = "lora" in name
    trainable = [p for p in transformer.parameters() if p.requires_grad]
    if args.checkpointing != "off":
        transformer.enable_gradient_checkpointing(use_reentrant=args.checkpointing == "reentrant")
        transformer.input_requires_grad = args.checkpointing == "reentrant"
    transformer.train()
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, betas=(0.9, 0.999), weight_decay=1e-2, eps=1e-8)
    transformer, optimizer = accelerator.prepare(transformer, optimizer)
    rotary = rotary_tables(args.image_side, args.text_tokens, args.head_dim, device)
    image_tokens = args.image_side * args.image_side

    losses, step_memory = [], None
    for step in range(args.steps):
        MEMORY.begin_step()
        with torch.no_grad():
            tokens, prompt_mask = prompts(args.batch, args.text_tokens, args.text_valid, configs[TEXT_ENCODER]["vocab"],
                                          device)
            prompt_embeds = text_encoder(tokens, prompt_mask)
            latents = torch.randn(args.batch, image_tokens, 64, device=device, dtype=torch.bfloat16)
            noise = torch.randn_like(latents)
            sigma = torch.rand(args.batch, device=device)
            noisy = (1 - sigma[:, None, None]) * latents + sigma[:, None, None] * noise
        prediction = transformer(noisy.to(torch.bfloat16), prompt_embeds, prompt_mask, sigma, rotary)
        loss = F.mse_loss(prediction.float(), (noise - latents).float())
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.item()))
        step_memory = MEMORY.end_step()
        print("%s: step %d loss %.5f attention peak %.3f GB (%s), step peak %.3f GB"
              % (PROG, step, losses[-1], step_memory["attention_peak_bytes"] / 1e9, step_memory["attention_peak_at"],
                 step_memory["step_peak_bytes"] / 1e9), flush=True)

    result = {"variant": {"checkpointing": args.checkpointing, "keep_mapped": bool(args.keep_mapped)},
              "blocks": args.blocks, "steps": args.steps, "losses": losses,
              "shape": {"batch": args.batch, "heads": args.heads, "head_dim": args.head_dim,
                        "tokens": args.text_tokens + image_tokens, "text_tokens": args.text_tokens,
                        "text_valid": args.text_valid},
              "weights": {name: {"path": path, "bytes": os.path.getsize(path)} for name, path in sorted(paths.items())},
              "weights_mapped_at_first_step": mapped_at_start,
              "weights_mapped_by_the_twin": len(own_mapping),
              "seconds": round(time.monotonic() - began, 3)}
    result.update(step_memory)
    del kept_transformer, kept_encoder, own_mapping  # held until here, as a training script holds them
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)
    if not all(math.isfinite(x) for x in losses):
        sys.stderr.write("%s: error: a loss that is not finite: %s\n" % (PROG, losses))
        return 1
    return 0


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="trainer_twin.py", description=__doc__.split("\n\n")[0])
    a = ap.add_argument
    a("--weights", metavar="DIR", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "sdpa-repro-trainer-twin"),
      help="the model folder (transformer/, text_encoder/), made there once when missing or made for other sizes")
    a("--checkpointing", choices=CHECKPOINTING, default="non-reentrant",
      help="activation checkpointing per block: non-reentrant (diffusers' default), reentrant, off")
    a("--keep-mapped", action="store_true", help="keep the weights' files mapped while training (the CPU state dicts held)")
    a("--steps", type=int, default=3, help="optimizer steps (default 3; the last one's memory is reported)")
    a("--blocks", type=int, default=8, help="transformer blocks (default 8; Qwen-Image has 60)")
    a("--heads", type=int, default=24, help="attention heads (default 24, Qwen-Image's)")
    a("--head-dim", type=int, default=64, help="head dimension, a multiple of 32 (default 64; Qwen-Image's 128)")
    a("--text-tokens", type=int, default=256, help="text tokens every prompt is padded to, max_sequence_length (default 256)")
    a("--text-valid", type=int, default=100,
      help="valid text tokens of the prompts after the first (default 100); the first fills all of them")
    a("--image-side", type=int, default=32, help="image tokens per side of the packed latent (default 32: 1024 tokens)")
    a("--batch", type=int, default=2, help="batch size (default 2)")
    a("--text-dim", type=int, default=1024, help="the text encoder's hidden size (default 1024; Qwen2.5-VL's 3584)")
    a("--text-encoder-mib", type=int, default=512, help="the text encoder's weights, MiB, kept on the GPU (default 512)")
    a("--rank", type=int, default=16, help="LoRA rank (lora_alpha the same; default 16)")
    a("--lr", type=float, default=1e-4)
    a("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if min(args.steps, args.blocks, args.heads, args.text_tokens, args.image_side, args.batch, args.text_dim,
           args.text_encoder_mib, args.rank) < 1:
        ap.error("sizes, steps and the rank must be >= 1")
    if args.head_dim < 32 or args.head_dim % 32:
        ap.error("--head-dim %d: a multiple of 32 (the rotary embedding's three axes, each of an even size)"
                 % args.head_dim)
    if not 0 <= args.text_valid <= args.text_tokens:
        ap.error("--text-valid %d: between 0 and --text-tokens %d" % (args.text_valid, args.text_tokens))
    return args


def main(argv):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.stderr.write("%s: error: PyTorch %s sees no CUDA device\n" % (PROG, torch.__version__))
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
