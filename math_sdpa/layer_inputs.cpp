// layer_inputs.cpp: each layer's random inputs and dropout stream (problem.h), from the seed.
// Inlined verbatim into the generated reproducer (repro/report/reproducer), so that its inputs are
// the harness's bit for bit: it includes nothing beyond the problem and the generators.
#include "problem.h"
#include "random_inputs.h"
#include "random_masks.h"

namespace sdpa {

SdpaProblem layer_problem(const SdpaProblem& p, int layer) {
  SdpaProblem l = p;
  l.dropout_offset += static_cast<uint64_t>(layer - 1);
  return l;
}

HostInputs make_layer_inputs(const SdpaProblem& p, int layer) {
  if (layer == 1) return make_random_inputs(p, p.seed);
  HostInputs in = make_random_inputs(p, p.seed + static_cast<uint64_t>(layer - 1) * 0x9E3779B97F4A7C15ull);
  if (p.mask == MaskKind::boolean && p.mask_pattern == MaskPattern::random) {
    // Layer 1's mask without its Q, K and V: each normal value takes two of splitmix64's steps, and
    // a step adds a constant to the state.
    InputRng rng = input_rng_for_seed(p.seed);
    rng.state += 2 * static_cast<uint64_t>(p.q_elems() + 2 * p.kv_elems()) * 0x9E3779B97F4A7C15ull;
    in.bool_mask = random_bool_mask(p.mask_batch() * p.mask_heads(), p.q_len, p.kv_len, rng);
  }
  if (p.mask == MaskKind::additive) {
    InputRng rng = input_rng_for_seed(p.seed);
    rng.state += 2 * static_cast<uint64_t>(p.q_elems() + 2 * p.kv_elems()) * 0x9E3779B97F4A7C15ull;
    in.additive_mask = random_additive_mask(p.mask_elems(), rng, [&p](float f) { return round_to_dtype(f, p.dtype); });
  }
  return in;
}

std::vector<float> make_grad_output(const SdpaProblem& p, int layer) {
  InputRng rng = input_rng_for_seed((p.seed + static_cast<uint64_t>(layer - 1) * 0x9E3779B97F4A7C15ull) ^ 0x6A09E667F3BCC909ull);
  return random_normal(p.q_elems(), rng, [&p](float f) { return round_to_dtype(f, p.dtype); });
}

HostInputs make_random_inputs(const SdpaProblem& p, uint64_t seed) {
  InputRng rng = input_rng_for_seed(seed);
  const auto round = [&p](float f) { return round_to_dtype(f, p.dtype); };
  HostInputs in;
  in.q = random_normal(p.q_elems(), rng, round);
  in.k = random_normal(p.kv_elems(), rng, round);
  in.v = random_normal(p.kv_elems(), rng, round);
  if (p.mask == MaskKind::boolean && p.mask_pattern == MaskPattern::text_padding) {
    in.bool_mask = text_padding_mask(p.mask_batch(), p.q_len, p.kv_len, p.text_tokens, p.text_valid);
  } else if (p.mask == MaskKind::boolean) {
    in.bool_mask = random_bool_mask(p.mask_batch() * p.mask_heads(), p.q_len, p.kv_len, rng);
  }
  if (p.mask == MaskKind::additive) in.additive_mask = random_additive_mask(p.mask_elems(), rng, round);
  return in;
}

HostInputs layer_inputs(const SdpaProblem& p, int layer, const HostInputs* given, bool backward) {
  HostInputs in = given ? *given : make_layer_inputs(p, layer);
  if (backward && in.grad_out.empty()) in.grad_out = make_grad_output(p, layer);
  return in;
}

}  // namespace sdpa
