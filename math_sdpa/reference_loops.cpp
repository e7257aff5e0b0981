// reference_loops.cpp: the float64 reference with our own loops for its products
// (reference_loops.h), as it was before OpenBLAS: row by row on a thread for each CPU (then every
// hardware thread; now, as the reference's, every CPU the process may run on: host_parallel.h).
#include "math_sdpa/reference_loops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "math_sdpa/host_parallel.h"
#include "math_sdpa/philox.h"

namespace sdpa::loops {

namespace {

enum class Upto { scores, probs, output };

// dots[s] = Σ_e row[e] · m[s·E + e] for s < S: the dot products of one float64 row with each row
// of an [S, E] float matrix. Four rows at a time, each with its own accumulator that sums over e
// in order: the same sums, bit for bit, as one dot product after another, but four independent
// chains of additions for the CPU to overlap instead of one waiting on each addition's latency
// (about four times the speed; the float64 reference of a 4608-key layer is most of a check).
void dot_rows(const double* row, const float* m, int64_t S, int64_t E, double* dots) {
  int64_t s = 0;
  for (; s + 4 <= S; s += 4) {
    const float *m0 = m + s * E, *m1 = m0 + E, *m2 = m1 + E, *m3 = m2 + E;
    double d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    for (int64_t e = 0; e < E; ++e) {
      d0 += row[e] * m0[e];
      d1 += row[e] * m1[e];
      d2 += row[e] * m2[e];
      d3 += row[e] * m3[e];
    }
    dots[s] = d0, dots[s + 1] = d1, dots[s + 2] = d2, dots[s + 3] = d3;
  }
  for (; s < S; ++s) {
    double d = 0;
    for (int64_t e = 0; e < E; ++e) d += row[e] * m[s * E + e];
    dots[s] = d;
  }
}

// A float row as float64, once, for dot_rows.
void widen(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i];
}

// One query row: scores over S keys, mask, safe softmax, dropout, then P·V, stopping after
// `upto`: the row of scores or probabilities (S values) or of the output (E values) goes to
// out_row.
void reference_row(const SdpaProblem& p, const HostInputs& in, int64_t b, int64_t h, int64_t l, Upto upto,
                   std::vector<double>& probs, std::vector<double>& q_row, double* out_row) {
  const int64_t E = p.head_dim, S = p.kv_len;
  const int64_t kv_head = h / (p.q_heads / p.kv_heads);  // repeat_interleave mapping
  const float* q = &in.q[static_cast<size_t>(((b * p.q_heads + h) * p.q_len + l) * E)];
  const float* k = &in.k[static_cast<size_t>((b * p.kv_heads + kv_head) * S * E)];
  const float* v = &in.v[static_cast<size_t>((b * p.kv_heads + kv_head) * S * E)];
  const double scale = p.softmax_scale();
  widen(q, E, q_row);
  dot_rows(q_row.data(), k, S, E, probs.data());
  if (upto == Upto::scores) {
    for (int64_t s = 0; s < S; ++s) out_row[s] = probs[s] * scale;
    return;
  }
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t s = 0; s < S; ++s) {
    probs[s] = probs[s] * scale + mask_value(p, in, b, h, l, s);
    row_max = std::max(row_max, probs[s]);
  }
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

// A thread's buffers for its rows (for_each_item gives each thread its own).
struct RowScratch {
  std::vector<double> probs, q_row;
};

}  // namespace

std::vector<double> reference_tensor(const SdpaProblem& p, const HostInputs& in, const std::string& tensor) {
  const Upto upto = tensor == "scores" ? Upto::scores : tensor == "probs" ? Upto::probs : Upto::output;
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  const int64_t row_len = upto == Upto::output ? p.head_dim : p.kv_len;
  std::vector<double> out(static_cast<size_t>(rows * row_len));
  for_each_item<RowScratch>(rows, [&](int64_t r, RowScratch& s) {
    s.probs.resize(static_cast<size_t>(p.kv_len));
    const int64_t l = r % p.q_len, h = (r / p.q_len) % p.q_heads, b = r / (p.q_len * p.q_heads);
    reference_row(p, in, b, h, l, upto, s.probs, s.q_row, &out[static_cast<size_t>(r * row_len)]);
  });
  return out;
}

namespace {

// One query head (b, h): every row's forward again, then its backward. dq_head is that head's
// [L, E] of dQ; dk_head and dv_head get its share of dK and dV, [S, E] (summed over the group by
// the caller).
void reference_head_backward(const SdpaProblem& p, const HostInputs& in, int64_t b, int64_t h, double* dq_head,
                             double* dk_head, double* dv_head) {
  const int64_t E = p.head_dim, S = p.kv_len, L = p.q_len;
  const int64_t kv_head = h / (p.q_heads / p.kv_heads);
  const float* k = &in.k[static_cast<size_t>((b * p.kv_heads + kv_head) * S * E)];
  const float* v = &in.v[static_cast<size_t>((b * p.kv_heads + kv_head) * S * E)];
  const double scale = p.softmax_scale();
  const float keep_prob = p.keep_prob();
  std::vector<double> prob(static_cast<size_t>(S)), kept(static_cast<size_t>(S)), dprob(static_cast<size_t>(S));
  std::vector<double> q_row, dout_row;
  for (int64_t l = 0; l < L; ++l) {
    const float* q = &in.q[static_cast<size_t>(((b * p.q_heads + h) * L + l) * E)];
    const float* dout = &in.grad_out[static_cast<size_t>(((b * p.q_heads + h) * L + l) * E)];
    widen(q, E, q_row);
    dot_rows(q_row.data(), k, S, E, prob.data());
    double row_max = -std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < S; ++s) {
      prob[s] = prob[s] * scale + mask_value(p, in, b, h, l, s);
      row_max = std::max(row_max, prob[s]);
    }
    if (row_max == -std::numeric_limits<double>::infinity()) continue;  // _safe_softmax's zeros: no gradient
    double sum = 0;
    for (int64_t s = 0; s < S; ++s) sum += (prob[s] = std::exp(prob[s] - row_max));
    const uint64_t row_index = static_cast<uint64_t>(((b * p.q_heads + h) * L + l) * S);
    for (int64_t s = 0; s < S; ++s) {
      prob[s] /= sum;
      // What dropout keeps of each probability, scaled: Pd = P · kept.
      kept[s] = p.dropout_p > 0 ? (dropout_keep(p.seed, p.dropout_offset, row_index + s, keep_prob) ? 1.0 / keep_prob : 0.0) : 1.0;
    }
    // dPd = dO · Vᵀ; dV += Pdᵀ · dO; dP = dPd · kept; dS = P · (dP − Σ dP · P).
    double row_dot = 0;
    widen(dout, E, dout_row);
    dot_rows(dout_row.data(), v, S, E, dprob.data());  // dPd
    for (int64_t s = 0; s < S; ++s) {
      const double pd = prob[s] * kept[s];
      if (pd != 0.0) {
        for (int64_t e = 0; e < E; ++e) dv_head[s * E + e] += pd * dout[e];
      }
      dprob[s] *= kept[s];
      row_dot += dprob[s] * prob[s];
    }
    // scores = scale · q · k: dQ = scale · dS · K, dK += scale · dSᵀ · Q.
    double* dq = dq_head + l * E;
    for (int64_t s = 0; s < S; ++s) {
      const double ds = prob[s] * (dprob[s] - row_dot) * scale;
      if (ds == 0.0) continue;
      for (int64_t e = 0; e < E; ++e) {
        dq[e] += ds * k[s * E + e];
        dk_head[s * E + e] += ds * q[e];
      }
    }
  }
}

}  // namespace

ReferenceGradients reference_gradients(const SdpaProblem& p, const HostInputs& in) {
  const int64_t heads = p.batch * p.q_heads, group = p.q_heads / p.kv_heads;
  const int64_t q_head = p.q_len * p.head_dim, kv_head = p.kv_len * p.head_dim;
  ReferenceGradients g;
  g.query.assign(static_cast<size_t>(heads * q_head), 0.0);
  // Each query head's share of dK and dV, summed over the group at the end (so that threads
  // never add into the same element).
  std::vector<double> dk_heads(static_cast<size_t>(heads * kv_head), 0.0), dv_heads(dk_heads.size(), 0.0);
  for_each_item<NoScratch>(heads, [&](int64_t i, NoScratch&) {
    reference_head_backward(p, in, i / p.q_heads, i % p.q_heads, &g.query[static_cast<size_t>(i * q_head)],
                            &dk_heads[static_cast<size_t>(i * kv_head)], &dv_heads[static_cast<size_t>(i * kv_head)]);
  });
  g.key.assign(static_cast<size_t>(p.batch * p.kv_heads * kv_head), 0.0);
  g.value.assign(g.key.size(), 0.0);
  for (int64_t i = 0; i < heads; ++i) {
    const int64_t kv = i / group;  // (b·Hq + h) / group = b·Hkv + h / group
    for (int64_t x = 0; x < kv_head; ++x) {
      g.key[static_cast<size_t>(kv * kv_head + x)] += dk_heads[static_cast<size_t>(i * kv_head + x)];
      g.value[static_cast<size_t>(kv * kv_head + x)] += dv_heads[static_cast<size_t>(i * kv_head + x)];
    }
  }
  return g;
}

}  // namespace sdpa::loops
