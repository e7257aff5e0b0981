// test_reference.cpp: the float64 reference on cases whose answers are known by hand, against
// its first form (the loops it had before OpenBLAS computed its products), and the comparison
// helper.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "math_sdpa/host_parallel.h"
#include "math_sdpa/philox.h"
#include "math_sdpa/reference.h"
#include "math_sdpa/reference_loops.h"

using namespace sdpa;

namespace {
SdpaProblem small(int64_t B, int64_t H, int64_t L, int64_t S, int64_t E) {
  SdpaProblem p;
  p.batch = B;
  p.q_heads = p.kv_heads = H;
  p.q_len = L;
  p.kv_len = S;
  p.head_dim = E;
  p.dtype = DType::fp32;
  return p;
}
// ‖a − b‖ / ‖b‖ (‖a − b‖ when b is all zeros), and whether a is exactly zero wherever b is: a
// masked or dropped element is zero in both forms, not merely small.
struct Agreement {
  double relative = 0;
  bool zeros_kept = true;
};
Agreement agreement(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  Agreement g;
  double d2 = 0, b2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d2 += (a[i] - b[i]) * (a[i] - b[i]);
    b2 += b[i] * b[i];
    if (b[i] == 0.0 && a[i] != 0.0) g.zeros_kept = false;
  }
  g.relative = b2 > 0 ? std::sqrt(d2 / b2) : std::sqrt(d2);
  return g;
}

// The shapes and conditions the reference must compute as its loops did.
struct Shape {
  const char* name;
  std::function<void(SdpaProblem&)> set;
};
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> list = {
      {"no mask, B=2, L != S", [](SdpaProblem& p) { p.batch = 2, p.q_heads = p.kv_heads = 3, p.q_len = 7, p.kv_len = 9, p.head_dim = 5; }},
      {"GQA (6 query heads, 2 kv heads), causal with L > S",
       [](SdpaProblem& p) { p.batch = 2, p.q_heads = 6, p.kv_heads = 2, p.q_len = 9, p.kv_len = 5, p.head_dim = 4, p.mask = MaskKind::causal; }},
      {"boolean per batch and head (fully masked rows), dropout",
       [](SdpaProblem& p) {
         p.batch = 2, p.q_heads = p.kv_heads = 2, p.q_len = 6, p.kv_len = 10, p.head_dim = 8;
         p.mask = MaskKind::boolean, p.mask_per_batch = p.mask_per_head = true, p.dropout_p = 0.3;
       }},
      {"additive with -inf per batch, a negative scale",
       [](SdpaProblem& p) {
         p.batch = 3, p.q_heads = p.kv_heads = 1, p.q_len = 4, p.kv_len = 11, p.head_dim = 3;
         p.mask = MaskKind::additive, p.mask_per_batch = true, p.scale = -0.6;
       }},
      {"text padding, MQA (4 query heads, 1 kv head)",
       [](SdpaProblem& p) {
         p.batch = 2, p.q_heads = 4, p.kv_heads = 1, p.q_len = 8, p.kv_len = 12, p.head_dim = 6;
         p.mask = MaskKind::boolean, p.mask_per_batch = true, p.mask_pattern = MaskPattern::text_padding;
         p.text_tokens = 5, p.text_valid = 2;
       }},
  };
  return list;
}

// Shapes large enough to be cut into several blocks of rows (8 MiB of scores a block): the first
// with GQA (two query heads' sums of dK and dV added), the second one head of six blocks, so that
// the backward's blocks of one head add to its sums in turn.
const std::vector<Shape>& block_shapes() {
  static const std::vector<Shape> list = {
      {"blocks of rows: GQA, causal, dropout",
       [](SdpaProblem& p) {
         p.batch = 1, p.q_heads = 2, p.kv_heads = 1, p.q_len = 1100, p.kv_len = 1000, p.head_dim = 8;
         p.mask = MaskKind::causal, p.dropout_p = 0.1;
       }},
      {"six blocks of rows of one head: boolean",
       [](SdpaProblem& p) {
         p.batch = p.q_heads = p.kv_heads = 1, p.q_len = 5200, p.kv_len = 1024, p.head_dim = 4;
         p.mask = MaskKind::boolean;
       }},
  };
  return list;
}

SdpaProblem shape_problem(const Shape& shape) {
  SdpaProblem p;
  p.dtype = DType::bf16;
  shape.set(p);
  p.validate();
  return p;
}

// Every tensor and gradient of `shape` through OpenBLAS against the loops', within 1e-12.
void expect_the_loops_results(const Shape& shape) {
  CAPTURE(shape.name);
  const SdpaProblem p = shape_problem(shape);
  HostInputs in = make_random_inputs(p, 29);
  in.grad_out = make_grad_output(p, 1);
  for (const char* tensor : {"scores", "probs", "output"}) {
    CAPTURE(tensor);
    const Agreement g = agreement(reference_tensor(p, in, tensor), loops::reference_tensor(p, in, tensor));
    CHECK(g.relative <= 1e-12);
    CHECK(g.zeros_kept);
  }
  const ReferenceGradients blas = reference_gradients(p, in), loop = loops::reference_gradients(p, in);
  // The output the backward computes on the way is the forward's, bit for bit (a check of the
  // output with --backward uses it).
  CHECK(blas.output == reference_sdpa(p, in));
  const std::vector<double>* got[] = {&blas.query, &blas.key, &blas.value};
  const std::vector<double>* want[] = {&loop.query, &loop.key, &loop.value};
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    const Agreement g = agreement(*got[i], *want[i]);
    CHECK(g.relative <= 1e-12);
    CHECK(g.zeros_kept);
  }
}

}  // namespace

TEST_SUITE("reference") {
  TEST_CASE("one key: the output is that key's value row") {
    SdpaProblem p = small(1, 1, 3, 1, 2);
    HostInputs in = make_random_inputs(p, 11);
    const auto out = reference_sdpa(p, in);
    for (int l = 0; l < 3; ++l) {
      CHECK(out[l * 2 + 0] == doctest::Approx(in.v[0]));
      CHECK(out[l * 2 + 1] == doctest::Approx(in.v[1]));
    }
  }

  TEST_CASE("two keys, hand-computed softmax") {
    SdpaProblem p = small(1, 1, 1, 2, 1);
    p.scale = 1.0;
    HostInputs in;
    in.q = {1.0f};
    in.k = {2.0f, 0.0f};
    in.v = {10.0f, 20.0f};
    // scores 2 and 0: weights e^2/(e^2+1) and 1/(e^2+1)
    const double w0 = std::exp(2.0) / (std::exp(2.0) + 1.0);
    const auto out = reference_sdpa(p, in);
    CHECK(out[0] == doctest::Approx(w0 * 10 + (1 - w0) * 20).epsilon(1e-12));
  }

  TEST_CASE("default scale is 1/sqrt(E) and a negative scale flips the scores") {
    SdpaProblem p = small(1, 1, 4, 5, 16);
    HostInputs in = make_random_inputs(p, 5);
    SdpaProblem explicit_scale = p;
    explicit_scale.scale = 0.25;
    CHECK(reference_sdpa(p, in) == reference_sdpa(explicit_scale, in));
    SdpaProblem negative = p;
    negative.scale = -0.25;
    HostInputs flipped = in;
    for (auto& x : flipped.q) x = -x;
    const auto a = reference_sdpa(negative, in), b = reference_sdpa(explicit_scale, flipped);
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-12));
  }

  TEST_CASE("causal: row 0 sees only key 0; a boolean mask equals its additive form") {
    SdpaProblem p = small(2, 2, 6, 6, 4);
    p.mask = MaskKind::causal;
    HostInputs in = make_random_inputs(p, 9);
    const auto causal = reference_sdpa(p, in);
    for (int e = 0; e < 4; ++e) CHECK(causal[e] == doctest::Approx(in.v[e]));
    // The same mask as a boolean [L, S] mask, and as an additive one.
    SdpaProblem as_bool = p, as_float = p;
    as_bool.mask = MaskKind::boolean;
    as_float.mask = MaskKind::additive;
    HostInputs with_masks = in;
    for (int l = 0; l < 6; ++l) {
      for (int s = 0; s < 6; ++s) {
        with_masks.bool_mask.push_back(s <= l);
        with_masks.additive_mask.push_back(s <= l ? 0.0f : -std::numeric_limits<float>::infinity());
      }
    }
    CHECK(reference_sdpa(as_bool, with_masks) == causal);
    CHECK(reference_sdpa(as_float, with_masks) == causal);
  }

  TEST_CASE("L != S causal is top-left aligned") {
    SdpaProblem p = small(1, 1, 2, 5, 3);
    p.mask = MaskKind::causal;
    HostInputs in = make_random_inputs(p, 4);
    CHECK(mask_value(p, in, 0, 0, 0, 0) == 0.0);
    CHECK(std::isinf(mask_value(p, in, 0, 0, 0, 1)));
    CHECK(mask_value(p, in, 0, 0, 1, 1) == 0.0);
    CHECK(std::isinf(mask_value(p, in, 0, 0, 1, 4)));
  }

  TEST_CASE("a fully masked row gives exact zeros (_safe_softmax), other rows are untouched") {
    SdpaProblem p = small(1, 1, 3, 4, 2);
    p.mask = MaskKind::boolean;
    HostInputs in = make_random_inputs(p, 8);
    in.bool_mask.assign(12, 1);
    for (int s = 0; s < 4; ++s) in.bool_mask[4 + s] = 0;  // row 1 fully masked
    const auto out = reference_sdpa(p, in);
    CHECK(out[2] == 0.0);
    CHECK(out[3] == 0.0);
    CHECK(out[0] != 0.0);
  }

  TEST_CASE("broadcast masks: [B,1,L,S] applies per batch") {
    SdpaProblem p = small(2, 2, 2, 3, 2);
    p.mask = MaskKind::additive;
    p.mask_per_batch = true;
    HostInputs in = make_random_inputs(p, 21);
    REQUIRE(in.additive_mask.size() == 12);
    CHECK(mask_value(p, in, 1, 0, 1, 2) == in.additive_mask[(1 * 2 + 1) * 3 + 2]);
    CHECK(mask_value(p, in, 1, 1, 1, 2) == in.additive_mask[(1 * 2 + 1) * 3 + 2]);
  }

  TEST_CASE("GQA equals attention with K and V heads repeated (repeat_interleave)") {
    SdpaProblem gqa = small(2, 4, 3, 5, 4);
    gqa.kv_heads = 2;
    HostInputs in = make_random_inputs(gqa, 13);
    SdpaProblem full = gqa;
    full.kv_heads = 4;
    HostInputs expanded = in;
    expanded.k.clear();
    expanded.v.clear();
    const size_t head = 5 * 4;
    for (int b = 0; b < 2; ++b) {
      for (int h = 0; h < 4; ++h) {
        const size_t src = (b * 2 + h / 2) * head;  // q head h reads kv head h / group
        expanded.k.insert(expanded.k.end(), in.k.begin() + src, in.k.begin() + src + head);
        expanded.v.insert(expanded.v.end(), in.v.begin() + src, in.v.begin() + src + head);
      }
    }
    CHECK(reference_sdpa(gqa, in) == reference_sdpa(full, expanded));
  }

  TEST_CASE("dropout zeroes the dropped probabilities and scales the kept ones by 1/(1-p)") {
    SdpaProblem p = small(1, 1, 1, 64, 1);
    p.dropout_p = 0.5;
    p.scale = 0.0;  // uniform weights 1/64, so the output is the scaled sum of kept values
    HostInputs in = make_random_inputs(p, 17);
    double expected = 0;
    int kept = 0;
    for (int s = 0; s < 64; ++s) {
      if (dropout_keep(p.seed, p.dropout_offset, s, 0.5f)) {
        expected += in.v[s] / 64.0 / 0.5;
        ++kept;
      }
    }
    CHECK(kept > 0);
    CHECK(kept < 64);
    CHECK(reference_sdpa(p, in)[0] == doctest::Approx(expected).epsilon(1e-12));
  }

  // The loops computed every product as a dot product at a time, OpenBLAS in blocks with other
  // sums' orders: the same function within rounding, 1e-12 being a million times the differences
  // seen (about 1e-16) and a millionth of the smallest tolerance of a check (1e-5).
  TEST_CASE("the products through OpenBLAS give what the loops gave: every tensor, the gradients, within 1e-12") {
    for (const Shape& shape : shapes()) expect_the_loops_results(shape);
  }

  // Shapes of millions of scores: left out of the aarch64 build's run under qemu-user (host_only/),
  // which runs a program's threads hundreds of times slower while two of them compute at once.
  TEST_CASE("the products through OpenBLAS give what the loops gave on shapes of several blocks of rows") {
    for (const Shape& shape : block_shapes()) expect_the_loops_results(shape);
  }

  // The blocks of a head add to its dK and dV in block order whichever thread computes them: the
  // same bits on one thread as on four (more threads than this machine may have CPUs, so that
  // blocks of one head are computed at once and wait for their turn).
  TEST_CASE("the backward's gradients have the same bits on one thread and on four") {
    for (const Shape& shape : block_shapes()) {
      CAPTURE(shape.name);
      const SdpaProblem p = shape_problem(shape);
      HostInputs in = make_random_inputs(p, 31);
      in.grad_out = make_grad_output(p, 1);
      const auto on_threads = [&](int threads) {
        ParallelWork work;
        work.max_threads = threads;
        const ParallelWorkScope scope(work);
        return reference_gradients(p, in);
      };
      const ReferenceGradients one = on_threads(1);
      for (int run = 0; run < 3; ++run) {
        const ReferenceGradients four = on_threads(4);
        CHECK(four.query == one.query);
        CHECK(four.key == one.key);
        CHECK(four.value == one.value);
        CHECK(four.output == one.output);
      }
    }
  }

  TEST_CASE("compare_to_reference: relative error, NaN never passes, sizes must match") {
    const std::vector<double> ref{3.0, 4.0};
    CHECK(compare_to_reference({3.0f, 4.0f}, ref).rel_error == 0.0);
    const Comparison c = compare_to_reference({3.0f, 4.5f}, ref);
    CHECK(c.rel_error == doctest::Approx(0.1));
    CHECK(c.max_abs_error == doctest::Approx(0.5));
    CHECK(c.passed(0.11));
    CHECK_FALSE(c.passed(0.09));
    const Comparison nan = compare_to_reference({std::nanf(""), 4.0f}, ref);
    CHECK(nan.nonfinite == 1);
    CHECK_FALSE(nan.passed(1e30));
    CHECK_FALSE(compare_to_reference({3.0f}, ref).passed(1e30));
    CHECK(compare_to_reference({0.5f, 0.0f}, {0.0, 0.0}).rel_error == doctest::Approx(0.5));
  }

  TEST_CASE("tolerances per dtype and precision mode") {
    CHECK(tolerance_for(DType::fp32, Precision::upcast) == 1e-5);
    CHECK(tolerance_for(DType::bf16, Precision::upcast) == 4e-3);
    CHECK(tolerance_for(DType::fp16, Precision::upcast) == 5e-4);
    CHECK(tolerance_for(DType::fp16, Precision::native) == 3e-3);
    CHECK(tolerance_for(DType::bf16, Precision::native) == 2e-2);
  }
}
