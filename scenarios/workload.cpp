// workload.cpp: the table of workloads. The numbers (docs/SCENARIOS.md, "The failing workload"):
// 24 heads x 128 (QwenImageTransformer2DModel's num_attention_heads and attention_head_dim); an
// image of H x W pixels becomes (H/16) x (W/16) tokens (the VAE's factor 8, then 2x2 patches);
// the text is at most 512 tokens (the pipeline's max_sequence_length); the joint sequence is the
// text followed by the image, for queries and keys alike.
#include "workload.h"

#include "math_sdpa/errors.h"

namespace sdpa {

namespace {

constexpr int64_t kHeads = 24, kHeadDim = 128, kTextTokens = 512;

int64_t image_tokens(int64_t pixels) { return (pixels / 16) * (pixels / 16); }

Workload layer(const char* name, const char* what, int64_t batch, int64_t pixels) {
  Workload w;
  w.name = name;
  w.what = what;
  SdpaProblem& p = w.problem;
  p.batch = batch;
  p.q_heads = p.kv_heads = kHeads;
  p.q_len = p.kv_len = kTextTokens + image_tokens(pixels);
  p.head_dim = kHeadDim;
  p.dtype = DType::bf16;
  w.k_layout = KLayout::bshe;
  w.blocks = kQwenImageBlocks;
  return w;
}

// Two captions in a batch: the first fills the 512 text tokens, the second uses 128 and is padded.
Workload with_text_padding(Workload w) {
  SdpaProblem& p = w.problem;
  p.mask = MaskKind::boolean;
  p.mask_per_batch = true;
  p.mask_pattern = MaskPattern::text_padding;
  p.text_tokens = kTextTokens;
  p.text_valid = 128;
  return w;
}

}  // namespace

const std::vector<Workload>& workload_table() {
  static const std::vector<Workload> table = {
      layer("qwen-image-1024", "a joint attention layer at 1024x1024: 512 text + 4096 image tokens, bf16", 1, 1024),
      with_text_padding(layer("qwen-image-1024-textpad",
                              "the same layer for a batch of two captions, the second padded from 128 to 512 text "
                              "tokens (a boolean key-padding mask)",
                              2, 1024)),
      layer("qwen-image-512", "a joint attention layer at 512x512: 512 text + 1024 image tokens, bf16", 1, 512),
  };
  return table;
}

std::string workload_names() {
  std::string names;
  for (const Workload& w : workload_table()) names += (names.empty() ? "" : "|") + std::string(w.name);
  return names;
}

const Workload& find_workload(const std::string& name) {
  for (const Workload& w : workload_table()) {
    if (name == w.name) return w;
  }
  throw InputError("--workload: unknown workload '" + name + "' (expected " + workload_names() + ")");
}

}  // namespace sdpa
