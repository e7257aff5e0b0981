// problem.cpp: validation of an SdpaProblem and the random input generator.
#include "problem.h"

#include <climits>
#include <cmath>
#include <limits>
#include <sstream>

#include "errors.h"

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

double SdpaProblem::softmax_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

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
  const int64_t bh = checked_mul(batch, q_heads, "query");
  if (bh > INT_MAX) throw InputError("batch * heads must be at most 2^31-1 (cuBLAS batch count)");
  checked_mul(checked_mul(checked_mul(bh, q_len, "query"), head_dim, "query"), 4, "query");
  checked_mul(checked_mul(checked_mul(checked_mul(batch, kv_heads, "key"), kv_len, "key"), head_dim, "key"), 4, "key");
  checked_mul(checked_mul(checked_mul(bh, q_len, "scores"), kv_len, "scores"), 4, "scores");
}

namespace {

// splitmix64 and Box-Muller, written out so that the same seed gives the same inputs with
// any compiler and standard library (std::normal_distribution is implementation-defined).
struct InputRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0,1)
  double normal() {
    double u1 = 1.0 - uniform();  // (0, 1]
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

std::vector<float> random_normal(int64_t n, DType t, InputRng& rng) {
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& x : out) x = round_to_dtype(static_cast<float>(rng.normal()), t);
  return out;
}

}  // namespace

HostInputs make_random_inputs(const SdpaProblem& p, uint64_t seed) {
  InputRng rng{seed * 0x2545F4914F6CDD1Dull + 1};
  HostInputs in;
  in.q = random_normal(p.q_elems(), p.dtype, rng);
  in.k = random_normal(p.kv_elems(), p.dtype, rng);
  in.v = random_normal(p.kv_elems(), p.dtype, rng);
  const int64_t slices = p.mask_batch() * p.mask_heads();
  const int64_t rows = p.q_len, cols = p.kv_len;
  if (p.mask == MaskKind::boolean) {
    in.bool_mask.resize(static_cast<size_t>(p.mask_elems()));
    for (int64_t s = 0; s < slices; ++s) {
      const int64_t fully_masked_row = (s * 7 + 3) % rows;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          bool keep = r != fully_masked_row && rng.uniform() >= 0.25;
          in.bool_mask[static_cast<size_t>((s * rows + r) * cols + c)] = keep ? 1 : 0;
        }
      }
    }
  } else if (p.mask == MaskKind::additive) {
    in.additive_mask.resize(static_cast<size_t>(p.mask_elems()));
    for (auto& x : in.additive_mask) {
      double u = rng.uniform();
      x = u < 0.1 ? -std::numeric_limits<float>::infinity()
                  : round_to_dtype(static_cast<float>(4.0 * rng.uniform() - 2.0), p.dtype);
    }
  }
  return in;
}

}  // namespace sdpa
