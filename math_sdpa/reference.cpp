// reference.cpp: float64 Math SDPA on the CPU: the matrix products through OpenBLAS's dgemm
// (cpu_blas.h), the mask, the safe softmax, dropout and their backward in our own loops.
//
// The work is cut into blocks of rows that depend on the problem alone (kBlockDoubles of scores
// each), so the result has the same bits however many threads compute it. The reference's
// threads, one for each CPU the process may run on (host_parallel.h), take the next block in
// turn, multiply with OpenBLAS on themselves alone and run the mask, the softmax and dropout over
// the block's rows between its products. The harness's own threads are not starved by them: none
// of them spins, there are never more of them than CPUs, and the kernel's fair scheduler runs a
// thread that wakes (the supervisor's watchdog in its own process, the in-process watchdog of
// --no-fork, --host-load's threads, the ballast's toucher) beside them at its share. A run
// computes its first layers' references while the GPU works, on one thread fewer than the CPUs,
// where its memory and CPUs are not what it is about (repro/run/reference_ahead.h), the rest after
// the last call; no stage is open for either, so only the whole run's --timeout covers them.
#include "math_sdpa/reference.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "math_sdpa/cpu_blas.h"
#include "math_sdpa/host_parallel.h"
#include "math_sdpa/name_table.h"
#include "math_sdpa/philox.h"
#include "math_sdpa/reference_loops.h"

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

const NameTable<ReferenceProducts> kReferenceProducts{
    "SDPA_REFERENCE_PRODUCTS", {{ReferenceProducts::blas, "blas"}, {ReferenceProducts::loops, "loops"}}};

}  // namespace

ReferenceProducts reference_products() {
  // A throwing initializer leaves the variable to be initialized again: every call refuses.
  static const ReferenceProducts products = [] {
    const char* chosen = std::getenv("SDPA_REFERENCE_PRODUCTS");
    return chosen && *chosen ? kReferenceProducts.parse(chosen) : ReferenceProducts::blas;
  }();
  return products;
}

const char* reference_products_name(ReferenceProducts products) { return kReferenceProducts.name(products); }

namespace {

enum class Upto { scores, probs, output };

// The doubles of scores one block of rows holds (8 MiB): a few times a core's L2 cache, and
// products large enough for OpenBLAS's kernels to run near their peak (a block of a 4608-key
// layer is 227 rows).
constexpr int64_t kBlockDoubles = int64_t{1} << 20;

// Rows of `row_len` values a block holds: at least one, at most `rows`.
int64_t block_rows(int64_t row_len, int64_t rows) { return std::clamp<int64_t>(kBlockDoubles / row_len, 1, rows); }

// x as doubles (exactly), made on the reference's threads, each page first touched by its writer.
std::unique_ptr<double[]> widened(const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::unique_ptr<double[]> out(new double[x.size()]);
  for_each_item<NoScratch>(blocks_of(n, kBlockDoubles), [&](int64_t i, NoScratch&) {
    const int64_t first = i * kBlockDoubles, last = std::min(n, first + kBlockDoubles);
    std::copy(x.begin() + first, x.begin() + last, out.get() + first);
  });
  return out;
}

// Adds the mask of query row l of head (b, h), over the keys [s0, s0 + n), to row[0, n), as
// mask_value gives it.
void add_mask(const SdpaProblem& p, const HostInputs& in, int64_t b, int64_t h, int64_t l, int64_t s0, int64_t n,
              double* row) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  switch (p.mask) {
    case MaskKind::none: return;
    case MaskKind::causal:
      for (int64_t s = std::max(s0, l + 1); s < s0 + n; ++s) row[s - s0] += neg_inf;
      return;
    case MaskKind::boolean:
    case MaskKind::additive: {
      const int64_t mb = p.mask_per_batch ? b : 0, mh = p.mask_per_head ? h : 0;
      const size_t first = static_cast<size_t>(((mb * p.mask_heads() + mh) * p.q_len + l) * p.kv_len + s0);
      if (p.mask == MaskKind::boolean) {
        const uint8_t* keep = &in.bool_mask[first];
        for (int64_t s = 0; s < n; ++s) row[s] += keep[s] ? 0.0 : neg_inf;
      } else {
        const float* add = &in.additive_mask[first];
        for (int64_t s = 0; s < n; ++s) row[s] += add[s];
      }
      return;
    }
  }
}

// A query row's softmax: its largest masked score and the sum of the exponentials (max −inf: every
// key masked).
struct RowStats {
  double max = -std::numeric_limits<double>::infinity(), sum = 0;
  bool masked() const { return max == -std::numeric_limits<double>::infinity(); }
};

// Query row l of head (b, h): its scores (scale · q·k for every key, S values in `row`) become the
// safe softmax of scores + mask, exp(x − max) / Σ, or zeros where every key is masked
// (_safe_softmax).
RowStats softmax_row(const SdpaProblem& p, const HostInputs& in, int64_t b, int64_t h, int64_t l, double* row) {
  const int64_t S = p.kv_len;
  add_mask(p, in, b, h, l, 0, S, row);
  RowStats stats;
  for (int64_t s = 0; s < S; ++s) stats.max = std::max(stats.max, row[s]);
  if (stats.masked()) {
    std::fill(row, row + S, 0.0);
    return stats;
  }
  for (int64_t s = 0; s < S; ++s) stats.sum += (row[s] = std::exp(row[s] - stats.max));
  for (int64_t s = 0; s < S; ++s) row[s] /= stats.sum;
  return stats;
}

// What dropout keeps of the probability at `element` of the [B, Hq, L, S] scores, scaled (Pd = P ·
// kept): 1 / keep_prob or 0, and 1 without dropout.
double dropout_kept(const SdpaProblem& p, uint64_t element) {
  if (p.dropout_p == 0) return 1.0;
  return dropout_keep(p.seed, p.dropout_offset, element, p.keep_prob()) ? 1.0 / p.keep_prob() : 0.0;
}

}  // namespace

std::vector<double> reference_sdpa(const SdpaProblem& p, const HostInputs& in) { return reference_tensor(p, in, "output"); }

std::vector<double> reference_tensor(const SdpaProblem& p, const HostInputs& in, const std::string& tensor) {
  if (reference_products() == ReferenceProducts::loops) return loops::reference_tensor(p, in, tensor);
  const Upto upto = tensor == "scores" ? Upto::scores : tensor == "probs" ? Upto::probs : Upto::output;
  const int64_t L = p.q_len, S = p.kv_len, E = p.head_dim, group = p.q_heads / p.kv_heads;
  const int64_t row_len = upto == Upto::output ? E : S;
  std::vector<double> out(static_cast<size_t>(p.batch * p.q_heads * L * row_len));
  const std::unique_ptr<double[]> k = widened(in.k);
  const std::unique_ptr<double[]> v = upto == Upto::output ? widened(in.v) : nullptr;
  const double scale = p.softmax_scale();
  const float keep_prob = p.keep_prob();
  const int64_t rows = block_rows(S, L), blocks = blocks_of(L, rows);
  struct Scratch {
    std::vector<double> q, scores;
  };
  // One block: rows [l0, l0 + n) of query head (b, h).
  for_each_item<Scratch>(p.batch * p.q_heads * blocks, [&](int64_t item, Scratch& s) {
    const int64_t bh = item / blocks, l0 = item % blocks * rows, n = std::min(rows, L - l0);
    const int64_t b = bh / p.q_heads, h = bh % p.q_heads, kv = b * p.kv_heads + h / group;  // repeat_interleave
    const size_t first_row = static_cast<size_t>(bh * L + l0);
    s.q.assign(in.q.begin() + static_cast<ptrdiff_t>(first_row * E), in.q.begin() + static_cast<ptrdiff_t>((first_row + n) * E));
    double* scores = &out[first_row * S];  // the result itself, unless it is the output
    if (upto == Upto::output) {
      s.scores.resize(static_cast<size_t>(n * S));
      scores = s.scores.data();
    }
    // scale · Q·Kᵀ: dgemm multiplies each product by alpha once, as scale · (q·k) does.
    cpu_dgemm(BlasOp::none, BlasOp::transpose, n, S, E, scale, s.q.data(), E, k.get() + kv * S * E, E, 0.0, scores, S);
    if (upto == Upto::scores) return;
    for (int64_t r = 0; r < n; ++r) {
      double* row = scores + r * S;
      softmax_row(p, in, b, h, l0 + r, row);
      if (upto == Upto::output && p.dropout_p > 0) {
        const uint64_t element = static_cast<uint64_t>((first_row + r) * S);
        for (int64_t c = 0; c < S; ++c) {
          row[c] = dropout_keep(p.seed, p.dropout_offset, element + c, keep_prob) ? row[c] / keep_prob : 0.0;
        }
      }
    }
    if (upto == Upto::output) {
      cpu_dgemm(BlasOp::none, BlasOp::none, n, E, S, 1.0, scores, S, v.get() + kv * S * E, E, 0.0, &out[first_row * E], E);
    }
  });
  return out;
}

// The backward, with the forward's output on the way, in one pass over blocks of query rows. Each
// item is one block of one query head: P again, the output O = Pd·V, dPd = dO·Vᵀ, dP = dPd · kept,
// D = Σ dP·P, dS = scale · P · (dP − D), dQ = dS·K, and its share of dV and dK, Pdᵀ·dO and dSᵀ·Q,
// added to the query head's own sums ([S, E] each) in block order: a block waits for its turn, the
// one before it of the same query head (BlockTurns). The items run block by block over every query
// head, so the blocks running at once belong to different heads and the turn has almost always
// come; and they are small (a head of a 4608-key layer is 21 of them), so the CPUs stay busy to the
// end of the pass. A GQA group's query heads' sums are added in head order at the end (without GQA
// the query head's sums are the kv head's gradients themselves). One pass computes each
// exponential once and six products a block (a pass over rows for dQ and one over keys for dK and
// dV would take two of each and seven).
namespace {

// Query row l of head (b, h) in the backward, from its scale · q·k in `prob` and dPd = dO·Vᵀ in
// `dprob` (S values each; `kept` is room for S): `prob` becomes Pd (the forward's probabilities
// after dropout) and `dprob` dS = scale · P · (dP − Σ dP·P), where dP = dPd · kept; both zeros where
// every key is masked (_safe_softmax's zeros: no output, no gradient). `element` is the row's first
// in the [B, Hq, L, S] scores (dropout's stream).
void softmax_backward_row(const SdpaProblem& p, const HostInputs& in, int64_t b, int64_t h, int64_t l, uint64_t element,
                          double* prob, double* dprob, double* kept) {
  const int64_t S = p.kv_len;
  if (softmax_row(p, in, b, h, l, prob).masked()) {
    std::fill(dprob, dprob + S, 0.0);
    return;
  }
  const double scale = p.softmax_scale();
  const float keep_prob = p.keep_prob();
  double dot = 0;
  for (int64_t c = 0; c < S; ++c) {
    kept[c] = dropout_kept(p, element + c);
    dprob[c] *= kept[c];
    dot += dprob[c] * prob[c];
  }
  for (int64_t c = 0; c < S; ++c) {
    dprob[c] = prob[c] * (dprob[c] - dot) * scale;  // dS
    // Pd, as the forward computes it: P / keep_prob where dropout keeps it.
    if (p.dropout_p > 0) prob[c] = kept[c] != 0.0 ? prob[c] / keep_prob : 0.0;
  }
}

// Whose turn it is to add to each query head's sums of dK and dV: the number of its blocks added.
// A failed block (an exception) ends every wait, so that no thread waits for it forever.
class BlockTurns {
 public:
  explicit BlockTurns(int64_t heads) : added_(static_cast<size_t>(heads), 0) {}

  // Waits until `block` blocks of `head` have been added (throws once a block failed).
  void wait_for(int64_t head, int64_t block) {
    std::unique_lock<std::mutex> lock(mutex_);
    turn_.wait(lock, [&] { return failed_ || added_[static_cast<size_t>(head)] == block; });
    if (failed_) throw std::runtime_error("the reference's backward: an earlier block failed");
  }
  void added(int64_t head) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++added_[static_cast<size_t>(head)];
    }
    turn_.notify_all();
  }
  void failed() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed_ = true;
    }
    turn_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable turn_;
  std::vector<int64_t> added_;
  bool failed_ = false;
};

}  // namespace

ReferenceGradients reference_gradients(const SdpaProblem& p, const HostInputs& in) {
  if (reference_products() == ReferenceProducts::loops) return loops::reference_gradients(p, in);
  const int64_t L = p.q_len, S = p.kv_len, E = p.head_dim, group = p.q_heads / p.kv_heads;
  const int64_t heads = p.batch * p.q_heads, head_kv = S * E;
  const double scale = p.softmax_scale();
  const std::unique_ptr<double[]> k = widened(in.k), v = widened(in.v);
  ReferenceGradients g;
  g.output.assign(in.q.size(), 0.0);
  g.query.assign(in.q.size(), 0.0);
  g.key.assign(in.k.size(), 0.0);
  g.value.assign(in.v.size(), 0.0);
  // Each query head's sums of dK and dV: with GQA its own, else its kv head's gradients.
  std::vector<double> key_sums, value_sums;
  if (group > 1) {
    key_sums.assign(static_cast<size_t>(heads * head_kv), 0.0);
    value_sums.assign(key_sums.size(), 0.0);
  }
  const auto sums_of = [&](std::vector<double>& own, std::vector<double>& kv_heads, int64_t bh) {
    return group > 1 ? &own[static_cast<size_t>(bh * head_kv)]
                     : &kv_heads[static_cast<size_t>(bh * head_kv)];  // bh is its kv head's index
  };
  const int64_t rows = block_rows(S, L), blocks = blocks_of(L, rows);
  BlockTurns turns(heads);
  struct Scratch {
    std::vector<double> q, dout, a, b, kept;
  };
  for_each_item<Scratch>(blocks * heads, [&](int64_t item, Scratch& s) {
    const int64_t block = item / heads, bh = item % heads;
    const int64_t b = bh / p.q_heads, h = bh % p.q_heads, kv = b * p.kv_heads + h / group;
    const double* kh = k.get() + kv * head_kv;
    const double* vh = v.get() + kv * head_kv;
    const int64_t l0 = block * rows, n = std::min(rows, L - l0);
    const size_t first_row = static_cast<size_t>(bh * L + l0);
    try {
      const auto rows_of = [&](const std::vector<float>& x, std::vector<double>& out) {
        out.assign(x.begin() + static_cast<ptrdiff_t>(first_row * E), x.begin() + static_cast<ptrdiff_t>((first_row + n) * E));
      };
      rows_of(in.q, s.q);
      rows_of(in.grad_out, s.dout);
      s.a.resize(static_cast<size_t>(n * S));
      s.b.resize(s.a.size());
      s.kept.resize(static_cast<size_t>(S));
      cpu_dgemm(BlasOp::none, BlasOp::transpose, n, S, E, scale, s.q.data(), E, kh, E, 0.0, s.a.data(), S);  // scale · Q·Kᵀ
      cpu_dgemm(BlasOp::none, BlasOp::transpose, n, S, E, 1.0, s.dout.data(), E, vh, E, 0.0, s.b.data(), S);  // dPd = dO·Vᵀ
      for (int64_t r = 0; r < n; ++r) {
        softmax_backward_row(p, in, b, h, l0 + r, static_cast<uint64_t>((first_row + r) * S), &s.a[static_cast<size_t>(r * S)],
                             &s.b[static_cast<size_t>(r * S)], s.kept.data());
      }
      cpu_dgemm(BlasOp::none, BlasOp::none, n, E, S, 1.0, s.a.data(), S, vh, E, 0.0, &g.output[first_row * E], E);  // Pd·V
      cpu_dgemm(BlasOp::none, BlasOp::none, n, E, S, 1.0, s.b.data(), S, kh, E, 0.0, &g.query[first_row * E], E);  // dS·K
      turns.wait_for(bh, block);
      cpu_dgemm(BlasOp::transpose, BlasOp::none, S, E, n, 1.0, s.a.data(), S, s.dout.data(), E, 1.0,
                sums_of(value_sums, g.value, bh), E);  // += Pdᵀ·dO
      cpu_dgemm(BlasOp::transpose, BlasOp::none, S, E, n, 1.0, s.b.data(), S, s.q.data(), E, 1.0,
                sums_of(key_sums, g.key, bh), E);  // += dSᵀ·Q
    } catch (...) {
      turns.failed();
      throw;
    }
    turns.added(bh);
  });
  if (group == 1) return g;
  // Each kv head's dK and dV: its group's query heads' sums, added in head order.
  const int64_t parts = blocks_of(head_kv, kBlockDoubles);
  for_each_item<NoScratch>(p.batch * p.kv_heads * parts, [&](int64_t item, NoScratch&) {
    const int64_t bkv = item / parts, x0 = item % parts * kBlockDoubles, x1 = std::min(head_kv, x0 + kBlockDoubles);
    const int64_t first_head = bkv / p.kv_heads * p.q_heads + bkv % p.kv_heads * group;
    for (int64_t head = first_head; head < first_head + group; ++head) {
      for (int64_t x = x0; x < x1; ++x) {
        g.key[static_cast<size_t>(bkv * head_kv + x)] += key_sums[static_cast<size_t>(head * head_kv + x)];
        g.value[static_cast<size_t>(bkv * head_kv + x)] += value_sums[static_cast<size_t>(head * head_kv + x)];
      }
    }
  });
  return g;
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

double gradient_tolerance_for(DType dtype, Precision precision) {
  // fp32: the backward's five GEMMs and the softmax backward's cancellation (dP − Σ dP·P) lose
  // more than the forward's two GEMMs.
  if (dtype == DType::fp32) return 1e-4;
  // Upcast: fp32 throughout, one rounding to the dtype at the end, as the forward's output.
  if (precision == Precision::upcast) return tolerance_for(dtype, precision);
  // Native: every intermediate (dO·Vᵀ, dP, dS, dQ, dK before the sum) rounded to the dtype, and
  // dS's cancellation amplifies the rounding of dP.
  return dtype == DType::bf16 ? 6e-2 : 1e-2;
}

}  // namespace sdpa
