// reference.cpp: float64 Math SDPA, row by row, on all CPU threads.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "philox.h"

namespace sdpa {

double mask_value(const SdpaProblem& p, const HostInputs& in, int64_t b, int64_t h, int64_t l, int64_t s) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  switch (p.mask) {
    case MaskKind::none: return 0.0;
    case MaskKind::causal: return s <= l ? 0.0 : neg_inf;
    case MaskKind::boolean:
    case MaskKind::additive: {
      const int64_t mb = p.mask_per_batch ? b : 0, mh = p.mask_per_head ? h : 0;
      const size_t i = static_cast<size_t>(((mb * p.mask_heads() + mh) * p.q_len + l) * p.kv_len + s);
      if (p.mask == MaskKind::boolean) return in.bool_mask[i] ? 0.0 : neg_inf;
      return in.additive_mask[i];
    }
  }
  return 0.0;
}

namespace {

enum class Upto { scores, probs, output };

// One query row: scores over S keys, mask, safe softmax, dropout, then P·V, stopping after
// `upto`: the row of scores or probabilities (S values) or of the output (E values) goes to
// out_row.
void reference_row(const SdpaProblem& p, const HostInputs& in, int64_t b, int64_t h, int64_t l, Upto upto,
                   std::vector<double>& probs, double* out_row) {
  const int64_t E = p.head_dim, S = p.kv_len;
  const int64_t kv_head = h / (p.q_heads / p.kv_heads);  // repeat_interleave mapping
  const float* q = &in.q[static_cast<size_t>(((b * p.q_heads + h) * p.q_len + l) * E)];
  const float* k = &in.k[static_cast<size_t>((b * p.kv_heads + kv_head) * S * E)];
  const float* v = &in.v[static_cast<size_t>((b * p.kv_heads + kv_head) * S * E)];
  const double scale = p.softmax_scale();
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t s = 0; s < S; ++s) {
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(q[e]) * k[s * E + e];
    if (upto == Upto::scores) {
      out_row[s] = dot * scale;
      continue;
    }
    probs[s] = dot * scale + mask_value(p, in, b, h, l, s);
    row_max = std::max(row_max, probs[s]);
  }
  if (upto == Upto::scores) return;
  std::fill(out_row, out_row + (upto == Upto::probs ? S : E), 0.0);
  if (row_max == -std::numeric_limits<double>::infinity()) return;  // _safe_softmax: zeros
  double sum = 0;
  for (int64_t s = 0; s < S; ++s) sum += (probs[s] = std::exp(probs[s] - row_max));
  if (upto == Upto::probs) {
    for (int64_t s = 0; s < S; ++s) out_row[s] = probs[s] / sum;
    return;
  }
  const uint64_t row_index = static_cast<uint64_t>(((b * p.q_heads + h) * p.q_len + l) * S);
  const float keep_prob = p.keep_prob();
  for (int64_t s = 0; s < S; ++s) {
    double prob = probs[s] / sum;
    if (p.dropout_p > 0) {
      prob = dropout_keep(p.seed, p.dropout_offset, row_index + s, keep_prob) ? prob / keep_prob : 0.0;
    }
    if (prob == 0.0) continue;
    for (int64_t e = 0; e < E; ++e) out_row[e] += prob * v[s * E + e];
  }
}

}  // namespace

std::vector<double> reference_sdpa(const SdpaProblem& p, const HostInputs& in) { return reference_tensor(p, in, "output"); }

std::vector<double> reference_tensor(const SdpaProblem& p, const HostInputs& in, const std::string& tensor) {
  const Upto upto = tensor == "scores" ? Upto::scores : tensor == "probs" ? Upto::probs : Upto::output;
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  const int64_t row_len = upto == Upto::output ? p.head_dim : p.kv_len;
  std::vector<double> out(static_cast<size_t>(rows * row_len));
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(rows, std::thread::hardware_concurrency()));
  auto work = [&](int64_t first, int64_t last) {
    std::vector<double> probs(static_cast<size_t>(p.kv_len));
    for (int64_t r = first; r < last; ++r) {
      const int64_t l = r % p.q_len, h = (r / p.q_len) % p.q_heads, b = r / (p.q_len * p.q_heads);
      reference_row(p, in, b, h, l, upto, probs, &out[static_cast<size_t>(r * row_len)]);
    }
  };
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) threads.emplace_back(work, rows * w / workers, rows * (w + 1) / workers);
  for (auto& t : threads) t.join();
  return out;
}

Comparison compare_to_reference(const std::vector<float>& out, const std::vector<double>& ref) {
  Comparison c;
  double diff2 = 0, ref2 = 0;
  const size_t n = std::min(out.size(), ref.size());
  if (out.size() != ref.size()) c.nonfinite = 1;  // a size mismatch can never pass
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      ++c.nonfinite;
      continue;
    }
    const double d = static_cast<double>(out[i]) - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    c.max_abs_error = std::max(c.max_abs_error, std::fabs(d));
  }
  c.rel_error = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (c.nonfinite) c.rel_error = std::numeric_limits<double>::infinity();
  return c;
}

double tolerance_for(DType dtype, Precision precision) {
  if (dtype == DType::fp32) return 1e-5;  // fp32 GEMMs without TF32
  if (precision == Precision::upcast) return dtype == DType::bf16 ? 4e-3 : 5e-4;  // output rounding
  return dtype == DType::bf16 ? 2e-2 : 3e-3;  // scores and probabilities rounded to the dtype
}

}  // namespace sdpa
