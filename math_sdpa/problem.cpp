// problem.cpp: validation of an SdpaProblem and the random input generator.
#include "problem.h"

#include <climits>
#include <cmath>
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

}  // namespace sdpa
