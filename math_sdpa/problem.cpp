// problem.cpp: validation of an SdpaProblem and the random input generator.
#include "problem.h"

#include <climits>
#include <cmath>
#include <sstream>

#include "errors.h"
#include "host_parallel.h"
#include "random_inputs.h"
#include "random_masks.h"

namespace sdpa {

const char* precision_name(Precision p) { return p == Precision::upcast ? "upcast" : "native"; }

const char* mask_kind_name(MaskKind m) {
  switch (m) {
    case MaskKind::none: return "none";
    case MaskKind::boolean: return "bool";
    case MaskKind::additive: return "float";
    case MaskKind::causal: return "causal";
  }
  return "?";
}

const char* mask_pattern_name(MaskPattern m) { return m == MaskPattern::random ? "random" : "text_padding"; }

double SdpaProblem::softmax_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

float SdpaProblem::q_factor() const {
  const double s = softmax_scale();
  return static_cast<float>(std::copysign(std::sqrt(std::fabs(s)), s));
}

float SdpaProblem::k_factor() const { return static_cast<float>(std::sqrt(std::fabs(softmax_scale()))); }

std::string SdpaProblem::shape_string() const {
  std::ostringstream s;
  s << "B=" << batch << " Hq=" << q_heads << " Hkv=" << kv_heads << " L=" << q_len
    << " S=" << kv_len << " E=" << head_dim;
  return s.str();
}

namespace {

// a * b, or an InputError naming `what` when the product leaves int64.
int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw InputError(std::string("sizes too large: the ") + what +
                     " tensor's size overflows a 64-bit byte count");
  }
  return r;
}

void require_positive(int64_t v, const char* name) {
  if (v <= 0) throw InputError(std::string(name) + " must be positive (got " + std::to_string(v) + ")");
  // cuBLAS takes m, n, k, leading dimensions and the batch count as 32-bit ints.
  if (v > INT_MAX) throw InputError(std::string(name) + " must be at most 2^31-1 (got " + std::to_string(v) + ")");
}

}  // namespace

void SdpaProblem::validate() const {
  require_positive(batch, "batch");
  require_positive(q_heads, "heads");
  require_positive(kv_heads, "kv-heads");
  require_positive(q_len, "q-len (L)");
  require_positive(kv_len, "kv-len (S)");
  require_positive(head_dim, "head-dim (E)");
  if (q_heads % kv_heads != 0) {
    throw InputError("heads (" + std::to_string(q_heads) + ") must be a multiple of kv-heads (" +
                     std::to_string(kv_heads) + ") for grouped-query attention");
  }
  if (!(dropout_p >= 0.0 && dropout_p < 1.0)) {
    throw InputError("dropout must be in [0, 1) (got " + std::to_string(dropout_p) + ")");
  }
  if (scale && !std::isfinite(*scale)) throw InputError("scale must be a finite number");
  if (mask_pattern == MaskPattern::text_padding) {
    if (mask != MaskKind::boolean || !mask_per_batch || mask_per_head) {
      throw InputError("a text padding mask is a boolean mask per batch entry (--mask bool --mask-dims Bx1)");
    }
    if (text_tokens < 1 || text_tokens > kv_len || text_valid < 1 || text_valid > text_tokens) {
      throw InputError("--text-padding TOKENS:VALID needs 1 <= VALID <= TOKENS <= S (got " + std::to_string(text_tokens) +
                       ":" + std::to_string(text_valid) + " with S=" + std::to_string(kv_len) + ")");
    }
  }
  const int64_t bh = checked_mul(batch, q_heads, "query");
  if (bh > INT_MAX) throw InputError("batch * heads must be at most 2^31-1 (cuBLAS batch count)");
  checked_mul(checked_mul(checked_mul(bh, q_len, "query"), head_dim, "query"), 4, "query");
  checked_mul(checked_mul(checked_mul(checked_mul(batch, kv_heads, "key"), kv_len, "key"), head_dim, "key"), 4, "key");
  checked_mul(checked_mul(checked_mul(bh, q_len, "scores"), kv_len, "scores"), 4, "scores");
}

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

}  // namespace sdpa
