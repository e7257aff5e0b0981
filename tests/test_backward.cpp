// test_backward.cpp: the backward pass on the CPU. The float64 reference's gradients against
// finite differences of the float64 forward, the backward call's stages in autograd's order,
// and the memory plan of a training step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "math_sdpa/memory_plan.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/reference.h"

using namespace sdpa;

namespace {

// loss = Σ dO · output: its gradient with respect to the inputs is what the backward computes.
double loss(const SdpaProblem& p, const HostInputs& in) {
  const std::vector<double> out = reference_sdpa(p, in);
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += in.grad_out[i] * out[i];
  return l;
}

// d loss / d x[i] for every element of `x` (one of in's q, k, v) by central differences; the step
// divides by the difference of the floats actually stored, so only the O(h²) truncation remains.
std::vector<double> finite_differences(const SdpaProblem& p, HostInputs in, std::vector<float> HostInputs::*x) {
  const float h = 1e-2f;
  std::vector<double> grad((in.*x).size());
  for (size_t i = 0; i < grad.size(); ++i) {
    const float at = (in.*x)[i];
    (in.*x)[i] = at + h;
    const float up = (in.*x)[i];
    const double plus = loss(p, in);
    (in.*x)[i] = at - h;
    const float down = (in.*x)[i];
    const double minus = loss(p, in);
    (in.*x)[i] = at;
    grad[i] = (plus - minus) / (static_cast<double>(up) - down);
  }
  return grad;
}

double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d2 = 0, b2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d2 += (a[i] - b[i]) * (a[i] - b[i]);
    b2 += b[i] * b[i];
  }
  return std::sqrt(d2 / b2);
}

SdpaProblem small_problem() {
  SdpaProblem p;
  p.batch = 2;
  p.q_heads = 2;
  p.kv_heads = 2;
  p.q_len = 5;
  p.kv_len = 7;  // L != S
  p.head_dim = 4;
  p.dtype = DType::fp32;  // inputs are floats as given: no rounding between the two evaluations
  return p;
}

}  // namespace

TEST_SUITE("backward") {
  TEST_CASE("the reference's gradients are the finite differences of the float64 forward") {
    struct Case {
      const char* name;
      void (*set)(SdpaProblem&);
    };
    const Case cases[] = {
        {"no mask", [](SdpaProblem&) {}},
        {"causal", [](SdpaProblem& p) { p.mask = MaskKind::causal; }},
        {"boolean per batch and head (a fully masked row)",
         [](SdpaProblem& p) {
           p.mask = MaskKind::boolean;
           p.mask_per_batch = p.mask_per_head = true;
         }},
        {"additive with -inf", [](SdpaProblem& p) { p.mask = MaskKind::additive; }},
        {"dropout", [](SdpaProblem& p) { p.dropout_p = 0.3; }},
        {"GQA (4 query heads, 2 kv heads)",
         [](SdpaProblem& p) {
           p.q_heads = 4;
           p.kv_heads = 2;
         }},
        {"custom negative scale", [](SdpaProblem& p) { p.scale = -0.7; }},
        {"everything at once",
         [](SdpaProblem& p) {
           p.q_heads = 4;
           p.kv_heads = 1;
           p.mask = MaskKind::boolean;
           p.dropout_p = 0.2;
           p.scale = 0.9;
         }},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      SdpaProblem p = small_problem();
      c.set(p);
      p.validate();
      HostInputs in = make_random_inputs(p, 17);
      in.grad_out = make_grad_output(p, 1);
      const ReferenceGradients g = reference_gradients(p, in);
      REQUIRE(g.query.size() == in.q.size());
      REQUIRE(g.key.size() == in.k.size());
      REQUIRE(g.value.size() == in.v.size());
      CHECK(relative_difference(g.query, finite_differences(p, in, &HostInputs::q)) < 1e-4);
      CHECK(relative_difference(g.key, finite_differences(p, in, &HostInputs::k)) < 1e-4);
      CHECK(relative_difference(g.value, finite_differences(p, in, &HostInputs::v)) < 1e-4);
    }
  }

  TEST_CASE("a fully masked row passes no gradient, and dO reaches only what dropout kept") {
    SdpaProblem p = small_problem();
    p.mask = MaskKind::boolean;
    HostInputs in = make_random_inputs(p, 3);
    in.grad_out = make_grad_output(p, 1);
    // Row 0 of the mask masked entirely: query row 0 of every head gets a zero gradient.
    for (int64_t s = 0; s < p.kv_len; ++s) in.bool_mask[static_cast<size_t>(s)] = 0;
    const ReferenceGradients g = reference_gradients(p, in);
    for (int64_t bh = 0; bh < p.batch * p.q_heads; ++bh) {
      for (int64_t e = 0; e < p.head_dim; ++e) CHECK(g.query[static_cast<size_t>(bh * p.q_len * p.head_dim + e)] == 0.0);
    }
    // Everything dropped but a share: the gradients change with the dropout stream.
    SdpaProblem d = p;
    d.dropout_p = 0.5;
    const ReferenceGradients h = reference_gradients(d, in);
    CHECK(relative_difference(h.value, g.value) > 0.1);
  }

  TEST_CASE("the gradient of the output is seeded per layer and leaves the forward's inputs alone") {
    SdpaProblem p = small_problem();
    const std::vector<float> a = make_grad_output(p, 1), b = make_grad_output(p, 2);
    REQUIRE(a.size() == static_cast<size_t>(p.q_elems()));
    CHECK(a != b);
    CHECK(a == make_grad_output(p, 1));
    CHECK(a != make_layer_inputs(p, 1).q);
  }

  TEST_CASE("the backward call's stages, in autograd's order, each where its forward stage runs") {
    auto backward_stages = [](const SdpaProblem& p, const PathSettings& ps) {
      std::vector<std::string> names;
      for (int i = 0; i < kStageCount; ++i) {
        const Stage s = static_cast<Stage>(i);
        if (is_backward_stage(s) && stage_runs(s, p, ps)) names.push_back(stage_name(s));
      }
      return names;
    };
    SdpaProblem p;
    PathSettings ps;
    CHECK(backward_stages(p, ps).empty());  // no --backward: none
    ps.backward = true;
    CHECK(backward_stages(p, ps) == std::vector<std::string>{"grad_upcast", "dp_gemm", "dv_gemm", "softmax_backward", "dq_gemm",
                                                             "dk_gemm", "grad_inputs", "backward_sync"});
    p.dropout_p = 0.1;
    ps.alloc_timing = AllocTiming::per_call;
    CHECK(backward_stages(p, ps) ==
          std::vector<std::string>{"alloc_grad_pv", "grad_upcast", "dp_gemm", "dv_gemm", "alloc_grad_softmax",
                                   "dropout_backward", "softmax_backward", "free_grad_probs", "alloc_grad_qk", "dq_gemm",
                                   "dk_gemm", "grad_inputs", "free_backward", "backward_sync"});
    p.dtype = DType::fp32;  // nothing to upcast: dO is used as given
    CHECK(backward_stages(p, ps).at(1) == "dp_gemm");
    // Scenario 2's host access: the probabilities and their gradient, just before softmax's backward.
    ps.scores_to_host = ScoresToHost::read;
    const std::vector<std::string> touched = backward_stages(p, ps);
    const auto at = std::find(touched.begin(), touched.end(), "grads_to_host");
    REQUIRE(at != touched.end());
    CHECK(*(at + 1) == "softmax_backward");
    CHECK(*(at - 1) == "dropout_backward");
    CHECK_FALSE(is_gpu_stage(Stage::grads_to_host));
    // Between the forward's end and the step's end, and host or GPU work as they are.
    CHECK(static_cast<int>(Stage::alloc_grad_pv) > static_cast<int>(Stage::stream_sync));
    CHECK(static_cast<int>(Stage::backward_sync) < static_cast<int>(Stage::free_step));
    CHECK(is_gpu_stage(Stage::softmax_backward));
    CHECK_FALSE(is_gpu_stage(Stage::backward_sync));
    CHECK(is_memory_stage(Stage::free_backward));
    CHECK(is_free_stage(Stage::free_grad_probs));
    CHECK_FALSE(is_free_stage(Stage::alloc_grad_qk));
  }

  TEST_CASE("the memory plan of a training step: the backward's transients on top of everything kept") {
    // 1 x 24 x 4608 x 128, bf16 upcast, per call, 3 layers: the last layer's backward call holds
    // every layer's kept tensors, its own gradients and, in softmax's backward, dPd, dS and the
    // probabilities at once.
    SdpaProblem p;
    p.batch = 1;
    p.q_heads = p.kv_heads = 24;
    p.q_len = p.kv_len = 4608;
    p.head_dim = 128;
    PathSettings ps;
    ps.alloc_timing = AllocTiming::per_call;
    ps.retain = Retain::autograd;
    ps.layers = 3;
    const MemoryPlan forward = plan_memory(p, ps);
    ps.backward = true;
    const MemoryPlan step = plan_memory(p, ps);
    const int64_t scores = 24LL * 4608 * 4608 * 4, q32 = 24LL * 4608 * 128 * 4, q16 = q32 / 2;
    // dO per layer; kept until the step ends: the output and the three gradients (bf16).
    CHECK(step.layer_run_bytes == forward.layer_run_bytes + q16);
    CHECK(step.layer_kept_bytes == forward.layer_kept_bytes + 3 * q16);
    // The backward's peak, after alloc_grad_softmax: what the layer kept and its result (the
    // forward's kept bytes), dO upcast, dPd, dV and dS (its gradients come after dPd is freed).
    CHECK(step.call_peak_stage == Stage::alloc_grad_softmax);
    CHECK(step.call_peak_bytes == forward.layer_kept_bytes + q32 + scores + q32 + scores);
    CHECK(step.path_bytes > forward.path_bytes);
    // What autograd kept for a layer goes when that layer's backward call ends (the path frees it
    // there); the output and the input gradients stay until the step ends.
    int freed_by_backward = 0;
    for (const TensorSpec& t : step.tensors) {
      CAPTURE(t.name);
      if (t.id == TensorId::probs) CHECK(t.free_stage == Stage::free_backward);
      if (t.id == TensorId::grad_query || t.id == TensorId::output) CHECK(t.free_stage != Stage::free_backward);
      freed_by_backward += t.lifetime == Lifetime::step && t.free_stage == Stage::free_backward;
    }
    CHECK(freed_by_backward >= 3);
  }
}
