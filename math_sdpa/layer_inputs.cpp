// layer_inputs.cpp: each layer's random inputs and dropout stream (problem.h), derived from p.seed.
// Inlined verbatim into the generated reproducer (repro/report/reproducer), so that its inputs are
// the harness's bit for bit: it includes nothing beyond the problem, the generators and
// host_parallel.h (the values are made on every CPU, the same bits as on one).
#include "problem.h"

#include <algorithm>

#include "host_parallel.h"
#include "random_inputs.h"
#include "random_masks.h"

namespace sdpa {

SdpaProblem layer_problem(const SdpaProblem& p, int layer) {
  SdpaProblem l = p;
  l.dropout_offset += static_cast<uint64_t>(layer - 1);
  return l;
}

namespace {

// splitmix64's step: each InputRng::next() adds it to the state.
constexpr uint64_t kSplitmixStep = 0x9E3779B97F4A7C15ull;

// `rng` as it is after `values` normal values: each takes two of splitmix64's steps.
InputRng skipped(InputRng rng, int64_t values) {
  rng.state += 2 * static_cast<uint64_t>(values) * kSplitmixStep;
  return rng;
}

// random_normal's n values, made in blocks on the host's CPUs: block i starts where the sequence
// is after its first value's index, so the values are one thread's, bit for bit (a layer of the
// 4608-token workload has 42 million of them, over a second on one core); rng moves past them.
template <typename Round> std::vector<float> random_normal_on_cpus(int64_t n, InputRng& rng, Round round) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  std::vector<float> out(static_cast<size_t>(n));
  const InputRng start = rng;
  for_each_item<NoScratch>(blocks_of(n, kBlock), [&](int64_t i, NoScratch&) {
    InputRng block = skipped(start, i * kBlock);
    const int64_t last = std::min(n, (i + 1) * kBlock);
    for (int64_t j = i * kBlock; j < last; ++j) out[static_cast<size_t>(j)] = round(static_cast<float>(block.normal()));
  });
  rng = skipped(start, n);
  return out;
}

}  // namespace

HostInputs make_layer_inputs(const SdpaProblem& p, int layer) {
  if (layer == 1) return make_random_inputs(p, p.seed);
  HostInputs in = make_random_inputs(p, p.seed + static_cast<uint64_t>(layer - 1) * kSplitmixStep);
  // Layer 1's mask, without its Q, K and V.
  if (p.mask == MaskKind::boolean && p.mask_pattern == MaskPattern::random) {
    InputRng rng = skipped(input_rng_for_seed(p.seed), p.q_elems() + 2 * p.kv_elems());
    in.bool_mask = random_bool_mask(p.mask_batch() * p.mask_heads(), p.q_len, p.kv_len, rng);
  }
  if (p.mask == MaskKind::additive) {
    InputRng rng = skipped(input_rng_for_seed(p.seed), p.q_elems() + 2 * p.kv_elems());
    in.additive_mask = random_additive_mask(p.mask_elems(), rng, [&p](float f) { return round_to_dtype(f, p.dtype); });
  }
  return in;
}

std::vector<float> make_grad_output(const SdpaProblem& p, int layer) {
  InputRng rng = input_rng_for_seed((p.seed + static_cast<uint64_t>(layer - 1) * kSplitmixStep) ^ 0x6A09E667F3BCC909ull);
  return random_normal_on_cpus(p.q_elems(), rng, [&p](float f) { return round_to_dtype(f, p.dtype); });
}

HostInputs make_random_inputs(const SdpaProblem& p, uint64_t seed) {
  InputRng rng = input_rng_for_seed(seed);
  const auto round = [&p](float f) { return round_to_dtype(f, p.dtype); };
  HostInputs in;
  in.q = random_normal_on_cpus(p.q_elems(), rng, round);
  in.k = random_normal_on_cpus(p.kv_elems(), rng, round);
  in.v = random_normal_on_cpus(p.kv_elems(), rng, round);
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
