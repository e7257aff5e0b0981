// test_reference_ahead.cpp: the references a checked run computes while the GPU runs
// (repro/run/reference_ahead.h): the same as computed after the run, for the right layers and
// tensor, from the inputs they lend the run; which runs compute them ahead; cancelled at the next
// block; their threads and CPU time; and what of host_parallel.h it relies on (cancellation, a
// thread count, the CPU time).
#include <doctest/doctest.h>

#include <stdlib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <chrono>
#include <thread>
#include <vector>

#include "math_sdpa/errors.h"
#include "math_sdpa/host_parallel.h"
#include "repro/run/reference_ahead.h"

using namespace sdpa;

namespace {

SdpaProblem ahead_problem() {
  SdpaProblem p;
  p.batch = 1;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.q_len = 96;
  p.kv_len = 80;
  p.head_dim = 32;
  p.dtype = DType::bf16;
  p.mask = MaskKind::causal;
  p.dropout_p = 0.1;
  return p;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) { return a == b && !a.empty(); }

RunOptions checked_run() {
  RunOptions o;
  o.check = true;
  o.problem = ahead_problem();
  o.settings.layers = 3;
  return o;
}

}  // namespace

TEST_SUITE("reference") {
  TEST_CASE("a reference computed during the run is the one computed after it, for its own layer and tensor") {
    const SdpaProblem p = ahead_problem();
    for (const bool backward : {false, true}) {
      for (const ResultTensor tensor : {ResultTensor::output, ResultTensor::probs}) {
        if (backward && tensor != ResultTensor::output) continue;
        CAPTURE(backward);
        CAPTURE(result_tensor_name(tensor));
        ReferenceAhead ahead(p, {2, 3}, nullptr, backward, tensor);
        CHECK_FALSE(ahead.take(1));  // not one of its layers
        CHECK(ahead.inputs(1) == nullptr);
        for (int layer : {2, 3}) {
          CAPTURE(layer);
          // The inputs it lends the run to upload are its layer's, as the run would make them.
          const HostInputs* lent = ahead.inputs(layer);
          REQUIRE(lent);
          const HostInputs made = layer_inputs(p, layer, nullptr, backward);
          CHECK(lent->q == made.q);
          CHECK(lent->k == made.k);
          CHECK(lent->v == made.v);
          CHECK(lent->grad_out == made.grad_out);
          const std::optional<LayerReference> got = ahead.take(layer);
          REQUIRE(got);
          CHECK(ahead.inputs(layer) == nullptr);  // taken: lent no more
          const LayerReference want = compute_layer_reference(p, layer, nullptr, backward, tensor);
          CHECK(got->inputs.q == want.inputs.q);
          CHECK(same_bits(got->result_reference(), want.result_reference()));
          if (backward) {
            REQUIRE(got->gradients);
            CHECK(same_bits(got->gradients->query, want.gradients->query));
            CHECK(same_bits(got->gradients->key, want.gradients->key));
            CHECK(same_bits(got->gradients->value, want.gradients->value));
          }
          // Its own layer's: another layer's differs (its inputs and dropout stream are others).
          const LayerReference other = compute_layer_reference(p, layer == 2 ? 3 : 2, nullptr, backward, tensor);
          CHECK_FALSE(got->result_reference() == other.result_reference());
        }
        // The tensor asked for: probabilities are [B, H, L, S], the output [B, H, L, E].
        const LayerReference last = compute_layer_reference(p, 1, nullptr, backward, tensor);
        CHECK(static_cast<int64_t>(last.result_reference().size()) ==
              (tensor == ResultTensor::output ? p.q_elems() : p.batch * p.q_heads * p.q_len * p.kv_len));
        CHECK_THROWS_AS(ahead.take(2), std::logic_error);  // taken once
        CHECK(ahead.compute_seconds() > 0);
        CHECK(ahead.cpu_seconds() > 0);
        CHECK(ahead.threads() == std::max(1, host_cpus() - 1));
      }
    }
  }

  // The loops (SDPA_REFERENCE_PRODUCTS=loops, read once per process) compute no output on the way
  // of the backward: this case runs itself again in a process that uses them.
  TEST_CASE("with the loops' products a backward layer's check has its output's reference all the same") {
    const SdpaProblem p = ahead_problem();
    const char* products = std::getenv("SDPA_REFERENCE_PRODUCTS");
    if (!products || std::string(products) != "loops") {
      const std::string self = "SDPA_REFERENCE_PRODUCTS=loops '" + std::filesystem::read_symlink("/proc/self/exe").string() +
                               "' --no-version "
                               "--test-case=\"with the loops' products*\" >/dev/null 2>&1";
      CHECK(std::system(self.c_str()) == 0);
      return;
    }
    REQUIRE(reference_products() == ReferenceProducts::loops);
    const LayerReference ref = compute_layer_reference(p, 2, nullptr, true, ResultTensor::output);
    CHECK(same_bits(ref.result_reference(), reference_sdpa(layer_problem(p, 2), ref.inputs)));
    CHECK(static_cast<int64_t>(ref.result_reference().size()) == p.q_elems());
  }

  TEST_CASE("which runs compute their references during the run: checked, their memory not the question, within the budget") {
    RunOptions o = checked_run();
    const std::vector<int> checked = {1, 2, 3};
    const int64_t layer = layer_reference_bytes(o.problem, false, ResultTensor::output);
    CHECK(layer > o.problem.q_elems() * 8);
    CHECK(layer_reference_bytes(o.problem, true, ResultTensor::output) > layer);
    CHECK(reference_ahead_layers(o, o.settings, checked, 10 * layer) == checked);
    CHECK(reference_ahead_layers(o, o.settings, checked, 2 * layer) == std::vector<int>{1, 2});
    std::string why;
    CHECK(reference_ahead_layers(o, o.settings, checked, layer - 1, &why).empty());
    CHECK(why.find("more than the memory") != std::string::npos);
    const auto refused = [&](RunOptions run, PathSettings settings, const std::string& reason) {
      std::string because;
      CHECK(reference_ahead_layers(run, settings, checked, 10 * layer, &because).empty());
      CHECK(because == reason);
    };
    RunOptions ballast = o;
    ballast.context.ballast.bytes = 1 << 20;
    refused(ballast, o.settings, "the run has a ballast");
    RunOptions host_load = o;
    host_load.context.host_load_threads = 2;
    refused(host_load, o.settings, "the run has a host load");
    PathSettings weights = o.settings;
    weights.weights.bytes = 1 << 20;
    refused(o, weights, "the run loads mapped weights");
    RunOptions fit = o;
    fit.layers_fit = true;
    refused(fit, o.settings, "the run's layers are fitted to the memory");
    RunOptions soak = o;
    soak.sample_every = 10;
    refused(soak, o.settings, "the run samples its memory (a soak)");
    RunOptions unchecked = o;
    unchecked.check = false;
    refused(unchecked, o.settings, "nothing is checked");
    setenv("SDPA_CHECK_AHEAD", "0", 1);
    refused(o, o.settings, "SDPA_CHECK_AHEAD=0");
    unsetenv("SDPA_CHECK_AHEAD");
    CHECK(reference_ahead_budget(-1) == 0);
    CHECK(reference_ahead_budget(int64_t{10} << 30) == (int64_t{10} << 30) / 50);
    CHECK(reference_ahead_budget(int64_t{500} << 30) == int64_t{1} << 30);
  }

  TEST_CASE("a run that ends early stops its references at their next block of rows") {
    // About 20 s of float64 on two cores if it ran to the end.
    SdpaProblem p = ahead_problem();
    p.q_heads = p.kv_heads = 16;
    p.q_len = p.kv_len = 3072;
    p.head_dim = 128;
    const auto t0 = std::chrono::steady_clock::now();
    {
      ReferenceAhead ahead(p, {1}, nullptr, true, ResultTensor::output);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // its inputs made, its products begun
    }
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 4.0);
  }

  TEST_CASE("host_parallel: a cancelled ParallelWork stops its items and throws; its threads' CPU time is counted") {
    ParallelWork work;
    const ParallelWorkScope scope(work);
    REQUIRE(parallel_work() == &work);
    std::atomic<int64_t> done{0};
    for_each_item<NoScratch>(64, [&](int64_t, NoScratch&) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
      while (std::chrono::steady_clock::now() < until) {
      }
      ++done;
    });
    CHECK(done == 64);
    if (host_cpus() > 1) CHECK(work.started_threads_cpu_ns > 0);
    work.cancel = true;
    done = 0;
    CHECK_THROWS_AS(for_each_item<NoScratch>(64, [&](int64_t, NoScratch&) { ++done; }), ParallelCancelled);
    CHECK(done == 0);
    // At most max_threads threads: one here, whatever the CPUs.
    ParallelWork one;
    one.max_threads = 1;
    const ParallelWorkScope alone(one);
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<bool> elsewhere{false};
    for_each_item<NoScratch>(16, [&](int64_t, NoScratch&) { if (std::this_thread::get_id() != caller) elsewhere = true; });
    CHECK_FALSE(elsewhere);
    CHECK(one.started_threads_cpu_ns == 0);
  }

  TEST_CASE("host_cpus: SDPA_HOST_CPUS caps the CPUs of the host's work; a value that is not a count is refused") {
    // The variable as this process got it, given back at the end (the emulated tests set it).
    const char* given = std::getenv("SDPA_HOST_CPUS");
    const std::string saved = given ? given : "";
    unsetenv("SDPA_HOST_CPUS");
    const int all = host_cpus();
    REQUIRE(all >= 1);
    setenv("SDPA_HOST_CPUS", "1", 1);
    CHECK(host_cpus() == 1);
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<bool> elsewhere{false};
    for_each_item<NoScratch>(16, [&](int64_t, NoScratch&) { if (std::this_thread::get_id() != caller) elsewhere = true; });
    CHECK_FALSE(elsewhere);
    setenv("SDPA_HOST_CPUS", "100000", 1);  // a cap above the CPUs leaves them all
    CHECK(host_cpus() == all);
    setenv("SDPA_HOST_CPUS", "", 1);  // empty: no cap
    CHECK(host_cpus() == all);
    for (const char* bad : {"0", "-1", "two", "2x", " 2", "99999999999999999999"}) {
      INFO("SDPA_HOST_CPUS=", bad);
      setenv("SDPA_HOST_CPUS", bad, 1);
      CHECK_THROWS_WITH_AS(host_cpus(), doctest::Contains("expected a whole number of CPUs"), InputError);
    }
    if (given) {
      setenv("SDPA_HOST_CPUS", saved.c_str(), 1);
    } else {
      unsetenv("SDPA_HOST_CPUS");
    }
  }
}
