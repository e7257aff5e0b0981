// test_problem.cpp: problem validation and the random input generator.
#include <doctest/doctest.h>

#include <cmath>

#include "math_sdpa/dtype.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/random_inputs.h"
#include "math_sdpa/random_masks.h"

using namespace sdpa;

TEST_SUITE("problem") {
  TEST_CASE("defaults are the original standalone test's shape") {
    SdpaProblem p;
    CHECK(p.shape_string() == "B=2 Hq=8 Hkv=8 L=128 S=128 E=64");
    CHECK(p.dtype == DType::bf16);
    CHECK(p.softmax_scale() == doctest::Approx(0.125));
    CHECK_NOTHROW(p.validate());
  }

  TEST_CASE("validation rejects every bad field") {
    auto bad = [](auto edit) {
      SdpaProblem p;
      edit(p);
      CHECK_THROWS_AS(p.validate(), InputError);
    };
    bad([](SdpaProblem& p) { p.batch = 0; });
    bad([](SdpaProblem& p) { p.q_heads = -1; });
    bad([](SdpaProblem& p) { p.kv_heads = 0; });
    bad([](SdpaProblem& p) { p.q_len = 0; });
    bad([](SdpaProblem& p) { p.kv_len = -5; });
    bad([](SdpaProblem& p) { p.head_dim = 0; });
    bad([](SdpaProblem& p) { p.kv_heads = 3; });  // 8 is not a multiple of 3
    bad([](SdpaProblem& p) { p.dropout_p = 1.0; });
    bad([](SdpaProblem& p) { p.dropout_p = -0.1; });
    bad([](SdpaProblem& p) { p.dropout_p = std::nan(""); });
    bad([](SdpaProblem& p) { p.scale = INFINITY; });
    bad([](SdpaProblem& p) { p.q_len = int64_t{1} << 31; });  // beyond cuBLAS's int
    bad([](SdpaProblem& p) {  // scores overflow a 64-bit byte count
      p.batch = p.q_heads = p.kv_heads = 1 << 15;
      p.q_len = p.kv_len = (int64_t{1} << 31) - 1;
    });
  }

  TEST_CASE("random inputs are fresh, non-zero and rounded to the dtype") {
    SdpaProblem p;
    p.batch = 1;
    p.q_heads = p.kv_heads = 2;
    p.q_len = p.kv_len = 16;
    p.head_dim = 8;
    p.mask = MaskKind::boolean;
    const HostInputs a = make_random_inputs(p, 1), b = make_random_inputs(p, 2);
    CHECK(a.q != b.q);
    CHECK(a.q.size() == static_cast<size_t>(p.q_elems()));
    double sum_sq = 0;
    for (float x : a.q) {
      CHECK(round_to_dtype(x, DType::bf16) == x);
      sum_sq += x * x;
    }
    CHECK(sum_sq / a.q.size() == doctest::Approx(1.0).epsilon(0.25));  // N(0, 1)
    // The boolean mask has exactly one fully masked row (per slice) and keeps most keys.
    int fully_masked_rows = 0, kept = 0;
    for (int64_t r = 0; r < p.q_len; ++r) {
      int row_kept = 0;
      for (int64_t c = 0; c < p.kv_len; ++c) row_kept += a.bool_mask[r * p.kv_len + c];
      fully_masked_rows += row_kept == 0;
      kept += row_kept;
    }
    CHECK(fully_masked_rows == 1);
    CHECK(kept > p.q_len * p.kv_len / 2);
  }

  // The inputs are made in blocks of 2^20 values on all CPUs; the reproducer (and PyTorch's side,
  // scripts/torch_stages.py) makes them in one stream, as random_inputs.h does: the same bits. Left
  // out of the aarch64 build's run under qemu-user (host_only/), which runs a program's threads
  // hundreds of times slower while two of them compute at once.
  TEST_CASE("random inputs made on all CPUs are one stream's values, bit for bit, the mask after them") {
    SdpaProblem p;
    p.batch = 1;
    p.q_heads = p.kv_heads = 1;
    p.q_len = p.kv_len = 1100;  // Q, K and V a little over one block each
    p.head_dim = 1000;
    p.mask = MaskKind::boolean;
    const HostInputs in = make_random_inputs(p, 77);
    InputRng rng = input_rng_for_seed(77);
    const auto round = [&p](float f) { return round_to_dtype(f, p.dtype); };
    CHECK(in.q == random_normal(p.q_elems(), rng, round));
    CHECK(in.k == random_normal(p.kv_elems(), rng, round));
    CHECK(in.v == random_normal(p.kv_elems(), rng, round));
    CHECK(in.bool_mask == random_bool_mask(1, p.q_len, p.kv_len, rng));
    // dO, from a stream of its own.
    InputRng grad_rng = input_rng_for_seed(p.seed ^ 0x6A09E667F3BCC909ull);
    CHECK(make_grad_output(p, 1) == random_normal(p.q_elems(), grad_rng, round));
  }

  TEST_CASE("the additive mask has -inf entries and dtype-rounded values") {
    SdpaProblem p;
    p.dtype = DType::fp16;
    p.mask = MaskKind::additive;
    p.mask_per_head = true;
    const HostInputs in = make_random_inputs(p, 3);
    REQUIRE(in.additive_mask.size() == static_cast<size_t>(p.q_heads * p.q_len * p.kv_len));
    int neg_inf = 0;
    for (float x : in.additive_mask) {
      if (std::isinf(x)) {
        CHECK(x < 0);
        ++neg_inf;
      } else {
        CHECK(round_to_dtype(x, DType::fp16) == x);
        CHECK(std::fabs(x) <= 2.0f);
      }
    }
    CHECK(neg_inf > 0);
  }
}
