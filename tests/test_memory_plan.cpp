// test_memory_plan.cpp: the memory plan's arithmetic, the guard on discrete and integrated
// machines, the training context's options and refusals, each layer's inputs, the watchdog's view
// of layers, --layers-fit against a count of every layer, and the weights' load: its tensors' page
// ranges and fix 6's guard at its edges.
//
// The per-layer figures below are not the plan's own: they are what PyTorch 2.11's caching
// allocator measured for its math SDPA on an H100 (scripts/torch_memory_trace.py, committed as
// results/h100-2026-11-25/pytorch/torch_memory_trace.json): the bytes each layer still held after its
// call with autograd on, and the peak of three layers. The plan must reproduce them.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "math_sdpa/context.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/fault_spec.h"
#include "math_sdpa/host_memory.h"
#include "math_sdpa/memory_plan.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/weights_plan.h"
#include "parse_words.h"
#include "repro/supervise/watchdog.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

using namespace sdpa;
using test_util::parse;
using test_util::run_options;

namespace {

constexpr int64_t MiB = int64_t{1} << 20;

// The qwen-image-1024 layer: B=1, 24 heads, 4608 tokens, E=128, bf16, K a [B, S, H, E] view.
RunOptions qwen(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--workload", "qwen-image-1024", "--alloc-timing", "per-call", "--retain", "autograd"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_options(args);
}

MemoryPlan plan_of(const RunOptions& o, const ContextMemory& c = {}) { return plan_memory(o.problem, o.settings, c); }

// What a layer holds after its call: its inputs and what it kept. PyTorch's measure of the same.
int64_t held_per_layer(const MemoryPlan& p) { return p.layer_run_bytes + p.layer_kept_bytes; }

}  // namespace

TEST_SUITE("memory_plan") {
  TEST_CASE("a Qwen-Image block keeps what PyTorch's autograd keeps, to the byte") {
    const MemoryPlan p = plan_of(qwen());
    // Q, K, V in bf16: 3 x 24 x 4608 x 128 x 2.
    CHECK(p.layer_run_bytes == 84934656);
    // The scaled Q, the scaled K^T, V's fp32 copy (each 56623104), the fp32 probabilities
    // (24 x 4608^2 x 4 = 2038431744), the bf16 output (28311552).
    CHECK(p.layer_kept_bytes == 3 * 56623104LL + 2038431744LL + 28311552);
    CHECK(held_per_layer(p) == 2321547264);  // PyTorch: 2321547264 per layer
    // The call's peak is in softmax: Q, K, V upcast, Q and K^T scaled, the scores, the
    // probabilities and _safe_softmax's bool mask of the -inf scores.
    CHECK(p.call_peak_bytes == 5 * 56623104LL + 2 * 2038431744LL + 509607936);
    CHECK(p.call_peak_stage == Stage::alloc_probs);
    // Three layers: PyTorch's peak was 9600872960, of which 3.26 MB are tensors the harness does
    // not make (a 110592-byte row mask and a 3 MiB buffer of its random generator).
    const MemoryPlan three = plan_of(qwen({"--layers", "3"}));
    const int64_t ours = three.path_bytes - three.shared_bytes;  // without cuBLAS's workspace
    CHECK(ours == 9597616128);
    CHECK(9600872960 - ours < 4 * MiB);
    // The failing workload's 60 blocks: 141.96 GB, past a 128 GB DGX Spark before its weights.
    const MemoryPlan sixty = plan_of(qwen({"--layers", "model"}));
    CHECK(sixty.layers == kQwenImageBlocks);
    CHECK(sixty.path_bytes == p.shared_bytes + 60 * 84934656LL + 59 * p.layer_kept_bytes + p.call_peak_bytes);
    CHECK(sixty.path_bytes > 141'000'000'000LL);
    CHECK(sixty.path_bytes < 142'000'000'000LL);
  }

  TEST_CASE("what a layer keeps, as PyTorch measured it, for every kind of problem") {
    // Each case 2,8,512,64 as scripts/torch_memory_trace.py ran it: the bytes a layer held after
    // its call (inputs included), from PyTorch's allocator.
    const std::vector<std::pair<std::vector<std::string>, int64_t>> cases = {
        {{}, 27262976},                                      // bf16, upcast
        {{"--mask", "causal"}, 27262976},                    // the causal mask is not kept
        {{"--dropout", "0.1"}, 48234496},                    // + dropout's mask and output
        {{"--kv-heads", "2"}, 25690112},                     // GQA: the expanded V is kept, not V's copy
        {{"--precision", "native"}, 14680064},               // bf16 throughout, V itself kept
        {{"--dtype", "fp32"}, 29360128},                     // no upcast
        {{"--k-layout", "bshe"}, 27262976},                  // B = 2: the contiguous K^T copy kept instead
    };
    for (const auto& [extra, pytorch] : cases) {
      std::vector<std::string> args = {"-b", "2", "--heads", "8", "-L", "512", "-E", "64", "--alloc-timing", "per-call",
                                       "--retain", "autograd"};
      args.insert(args.end(), extra.begin(), extra.end());
      const RunOptions o = run_options(args);
      CAPTURE(o.argv.size() > 12 ? o.argv[13] : "plain");
      CHECK(held_per_layer(plan_of(o)) == pytorch);
    }
    // A boolean mask is the model's: one for every layer, not one each.
    const MemoryPlan masked = plan_of(run_options({"--mask", "bool", "--alloc-timing", "per-call", "--retain", "autograd",
                                                   "--layers", "4", "-L", "256"}));
    CHECK(masked.shared_bytes == 256 * 256 + (32 * MiB) + 64);
  }

  TEST_CASE("each fix part's plan: native halves what is kept, recompute keeps nothing, chunk bounds the call") {
    const MemoryPlan base = plan_of(qwen({"--scenario", "6"}));
    const MemoryPlan native = plan_of(qwen({"--scenario", "6", "--fixes", "5:native"}));
    const MemoryPlan recompute = plan_of(qwen({"--scenario", "6", "--fixes", "5:recompute"}));
    const MemoryPlan chunk = plan_of(qwen({"--scenario", "6", "--fixes", "5:chunk"}));
    // native: bf16 Q and K^T scaled, probabilities, output; V is the input itself.
    CHECK(native.layer_kept_bytes == 2 * 28311552LL + 1019215872LL + 28311552);
    // recompute: the output alone.
    CHECK(recompute.layer_kept_bytes == 28311552);
    CHECK(recompute.path_bytes < 12'000'000'000LL);
    // chunk: 8 chunks of 576 rows (256 MiB of fp32 scores each); what is kept does not shrink
    // (every chunk's probabilities), the call's transient does.
    CHECK(chunk.layer_kept_bytes == base.layer_kept_bytes);
    CHECK(chunk.call_peak_bytes < base.call_peak_bytes - 2'000'000'000LL);
    bool chunked_probs = false;
    for (const TensorSpec& t : chunk.tensors) {
      if (t.id == TensorId::scores) CHECK(t.bytes == 24LL * 576 * 4608 * 4);
      if (t.id == TensorId::probs) chunked_probs = t.chunks == 8 && t.lifetime == Lifetime::step;
    }
    CHECK(chunked_probs);
    // Up front the same tensors live for the run: one buffer per kept tensor and layer.
    const MemoryPlan upfront = plan_of(run_options({"--workload", "qwen-image-1024", "--retain", "autograd", "--layers", "2"}));
    CHECK(upfront.call_peak_bytes == 0);
    CHECK(upfront.layer_run_bytes == held_per_layer(base));
  }

  TEST_CASE("the guard: one pool on an integrated GPU, GPU and host memory apart on a discrete one") {
    const RunOptions o = qwen({"--scenario", "6"});
    MemoryFacts h100;  // what an H100 80GB said: 84.47 GB free (cudaMemGetInfo), 134 GB of host memory
    h100.gpu_free = 84'470'000'000LL;
    h100.host_available = 120'000'000'000LL;
    MemoryFacts spark;  // GB10: 128 GB shared, about 121 GiB usable
    spark.integrated = true;
    spark.gpu_free = 20'000'000'000LL;  // what cudaMemGetInfo says there does not count
    spark.host_available = 130'000'000'000LL;
    const MemoryPlan plan = plan_of(o);
    const auto on_h100 = plan_pools(plan, h100);
    REQUIRE(on_h100.size() == 1);  // the path is device memory; nothing on the host
    CHECK(on_h100[0].name == "GPU memory");
    CHECK(on_h100[0].budget == static_cast<int64_t>(0.9 * 84'470'000'000.0));
    CHECK_FALSE(on_h100[0].fits());
    const std::string refusal = plan_refusal(plan, on_h100);
    CHECK(refusal.find("141.96 GB") != std::string::npos);
    CHECK(refusal.find("84.47 GB") != std::string::npos);
    CHECK(refusal.find("--allow-oversubscription") != std::string::npos);
    const auto on_spark = plan_pools(plan, spark);
    REQUIRE(on_spark.size() == 1);
    CHECK(on_spark[0].measured == "MemAvailable");
    CHECK_FALSE(on_spark[0].fits());
    // What makes scenario 6 fit: recompute anywhere; native on the H100 (72.9 GB of 76.0 allowed)
    // and on the Spark, even beside the 41 GB of weights as ballast (113.9 of 117); chunk nowhere
    // (what autograd keeps does not shrink).
    CHECK(plan_pools(plan_of(qwen({"--scenario", "6", "--fixes", "5:recompute"})), h100)[0].fits());
    const MemoryPlan native = plan_of(qwen({"--scenario", "6", "--fixes", "5:native"}));
    CHECK(native.path_bytes == 72879177792);
    CHECK(plan_pools(native, h100)[0].fits());
    CHECK(plan_pools(native, spark)[0].fits());
    CHECK_FALSE(plan_pools(plan_of(qwen({"--scenario", "6", "--fixes", "5:chunk"})), spark)[0].fits());
    ContextMemory weights;
    weights.ballast_bytes = 41'000'000'000LL;
    CHECK(plan_pools(plan_of(qwen({"--scenario", "6", "--fixes", "5:native"}), weights), spark)[0].fits());
    CHECK_FALSE(plan_pools(plan_of(o, weights), spark)[0].fits());
    // A ballast in host memory on a discrete GPU draws on the host's pool.
    ContextMemory host_ballast;
    host_ballast.ballast_kind = AllocKind::host;
    host_ballast.ballast_bytes = 110'000'000'000LL;
    const auto pools = plan_pools(plan_of(run_options({})), h100);
    CHECK(pools.size() == 1);
    const auto with_host = plan_pools(plan_memory(SdpaProblem{}, PathSettings{}, host_ballast), h100);
    REQUIRE(with_host.size() == 2);
    CHECK(with_host[1].name == "host memory");
    CHECK_FALSE(with_host[1].fits());
    CHECK(with_host[0].fits());
    // Unknown memory (no GPU to ask) is never a refusal.
    CHECK(plan_refusal(plan, plan_pools(plan, MemoryFacts{})).empty());
  }

  // The memory-mapped weights' page cache (scenario 7): MemAvailable counts it as available, so a
  // plan judged by MemAvailable fits on a GB10 where the pool would have to reclaim the cache for the
  // GPU's allocations. The plan shows the cache, says when a plan fits only by reclaiming it, and on
  // an integrated GPU (or under fix 6's guard) refuses such a plan before anything is allocated.
  TEST_CASE("the page cache: its own line, and a plan that fits only if it is reclaimed is refused on one pool") {
    MemoryFacts spark;  // 100 GB available, of which 60 GB is page cache: 40 GB free
    spark.integrated = true;
    spark.host_available = 100'000'000'000LL;
    spark.page_cache = 60'000'000'000LL;
    spark.host_free = 40'000'000'000LL;
    MemoryFacts h100 = spark;  // the same host beside a discrete GPU with 80 GB free
    h100.integrated = false;
    h100.gpu_free = 80'000'000'000LL;
    // 30 GB of mapped weights: 30 GB of GPU copies and, read through the page cache, 30 GB of cache.
    const RunOptions loaded = run_options({"--mapped-weights", "30GB"});
    const MemoryPlan plan = plan_of(loaded);
    CHECK(plan.weights_bytes == 30'000'000'000LL);
    CHECK(plan.weights_cache_bytes == 30'000'000'000LL);
    const auto on_spark = plan_pools(plan, spark);
    REQUIRE(on_spark.size() == 1);
    CHECK(on_spark[0].need > 60'000'000'000LL);       // copies and cache, in one pool
    CHECK(on_spark[0].fits_with_reclaim());           // under 90% of MemAvailable (90 GB)...
    CHECK(on_spark[0].fits_only_by_reclaim());        // ...but over 90% of MemFree (36 GB)
    CHECK_FALSE(on_spark[0].fits());                  // refused on one pool
    const std::string refusal = plan_refusal(plan, on_spark);
    CHECK(refusal.find("only if the page cache (60.00 GB) is reclaimed") != std::string::npos);
    CHECK(refusal.find("40.00 GB (MemFree)") != std::string::npos);
    CHECK(refusal.find("--allow-oversubscription") != std::string::npos);
    const std::string text = plan_text(plan, on_spark);
    CHECK(text.find("fits only if the page cache is reclaimed (refused)") != std::string::npos);
    CHECK(text.find("of which page cache 60.00 GB (Cached)") != std::string::npos);
    CHECK(text.find("the mapped weights: 30.00 GB of GPU copies, and 30.00 GB of page cache") != std::string::npos);
    // On a discrete GPU the copies are GPU memory and the cache host memory: said, not refused.
    const auto on_h100 = plan_pools(plan, h100);
    REQUIRE(on_h100.size() == 2);
    CHECK(on_h100[0].need == plan.path_bytes + 30'000'000'000LL);
    CHECK(on_h100[0].fits());
    CHECK(on_h100[1].need == 30'000'000'000LL);
    CHECK(on_h100[1].fits());
    CHECK_FALSE(on_h100[1].fits_only_by_reclaim());  // 30 GB fits the 36 GB allowed of MemFree
    // The same plan with 20 GB less free memory: said on the discrete GPU, refused under fix 6's guard.
    h100.host_free = 20'000'000'000LL;
    CHECK(plan_pools(plan, h100)[1].fits_only_by_reclaim());
    CHECK(plan_pools(plan, h100)[1].fits());
    MemoryPlan guarded = plan;
    guarded.against_free = true;
    CHECK_FALSE(plan_pools(guarded, h100)[1].fits());
    CHECK(plan_refusal(guarded, plan_pools(guarded, h100)).find("fix 6's guard plans against that") != std::string::npos);
    // Weights read with O_DIRECT, or dropped after each copy, leave no cache: 30 GB fits the Spark's 36.
    PathSettings direct = loaded.settings;
    direct.weights.io = WeightsIo::direct;
    const MemoryPlan no_cache = plan_memory(loaded.problem, direct, {});
    CHECK(no_cache.weights_cache_bytes == 0);
    CHECK(plan_pools(no_cache, spark)[0].fits());
  }

  TEST_CASE("the host's memory as /proc says it: MemFree, MemAvailable, Cached, RssFile") {
    const HostMemory m = parse_host_memory("MemTotal:       131072000 kB\nMemFree:        39062500 kB\n"
                                           "MemAvailable:   97656250 kB\nBuffers:          1024 kB\nCached:         58593750 kB\n"
                                           "SwapCached:            0 kB\n",
                                           "Name:\trepro\nRssAnon:\t  102400 kB\nRssFile:\t 2048000 kB\n");
    CHECK(m.total == 131072000LL * 1024);
    CHECK(m.free == 39062500LL * 1024);
    CHECK(m.available == 97656250LL * 1024);
    CHECK(m.cached == 58593750LL * 1024);  // Cached, not SwapCached
    CHECK(m.rss_file == 2048000LL * 1024);
    CHECK(host_memory_text(m).find("Cached 60.00 GB") != std::string::npos);
    const HostMemory none = parse_host_memory("", "");
    CHECK(none.free == -1);
    CHECK(host_memory_text(none).find("MemFree unknown") == 0);
    // What a run reads on this machine: every field there, and consistent.
    const HostMemory here = read_host_memory();
    CHECK(here.total > 0);
    CHECK(here.free <= here.total);
    CHECK(here.available >= 0);
  }

  TEST_CASE("--mapped-weights: a size with a unit and a file; what the load is told") {
    const RunOptions o = run_options({"--mapped-weights", "30G:/tmp/no-such-dir/w.bin", "--weights-mapping", "keep"});
    CHECK(o.settings.weights.bytes == 30LL << 30);
    CHECK(o.settings.weights.file == "/tmp/no-such-dir/w.bin");
    CHECK(o.settings.weights.mapping == WeightsMapping::keep);
    CHECK(stage_runs(Stage::load_weights, o.problem, o.settings));
    CHECK_FALSE(stage_runs(Stage::load_weights, SdpaProblem{}, PathSettings{}));
    for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
             {"--mapped-weights", "30"}, {"--mapped-weights", "1.5"}, {"--mapped-weights", "30G:"},
             {"--mapped-weights", "lots"}, {"--weights-mapping", "keep"}}) {
      CAPTURE(bad[0] + " " + bad[1]);
      CHECK(parse(bad).exit_code == kExitUsage);
    }
    CHECK(parse({"--mapped-weights", "30"}).message.find("with a unit") != std::string::npos);
    // A file of the user's that holds less than asked is refused: it is read, never written.
    CHECK(parse({"--mapped-weights", "1G:/proc/self/status"}).message.find("fewer than the") != std::string::npos);
  }

  TEST_CASE("a ballast given as a fraction is of the memory its kind draws on") {
    MemoryFacts discrete;
    discrete.gpu_free = 80'000'000'000LL;
    discrete.host_available = 200'000'000'000LL;
    ContextSettings c;
    c.ballast = parse_ballast("0.8");
    c.ballast.kind = AllocKind::managed;
    CHECK(context_memory(c, discrete).ballast_bytes == 64'000'000'000LL);
    c.ballast.kind = AllocKind::host;
    CHECK(context_memory(c, discrete).ballast_bytes == 160'000'000'000LL);
    MemoryFacts integrated = discrete;
    integrated.integrated = true;
    c.ballast.kind = AllocKind::device;
    CHECK(context_memory(c, integrated).ballast_bytes == 160'000'000'000LL);
    c.host_load_threads = 3;
    CHECK(context_memory(c, integrated).host_load_host_bytes == 3 * 2 * kHostLoadBufferBytes);
    CHECK(parse_ballast("41G").bytes == 41LL << 30);
    CHECK(parse_ballast("41GB").bytes == 41'000'000'000LL);
    CHECK(parse_ballast("512MiB").bytes == 512LL << 20);
    CHECK(parse_ballast("0.25").fraction == 0.25);
    for (const char* bad : {"", "0", "-1G", "40X", "G", "1e400", "nan"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(parse_ballast(bad), InputError);
    }
  }

  TEST_CASE("the context's options parse, and what cannot act together is refused before the GPU") {
    const RunOptions s6 = run_options({"--scenario", "6"});
    CHECK(s6.settings.layers == 60);
    CHECK(s6.settings.alloc == AllocKind::device);
    CHECK(s6.settings.alloc_timing == AllocTiming::per_call);
    CHECK(s6.settings.retain == Retain::autograd);
    CHECK(s6.workload == "qwen-image-1024");
    CHECK(s6.memory_trace);
    const RunOptions steps = run_options({"--steps", "10", "--layers", "3"});
    CHECK(steps.iters == 10);
    CHECK(steps.steps);
    CHECK(steps.sample_every == 1);
    CHECK(run_options({"--steps", "1000"}).sample_every == 10);
    CHECK(run_options({"--workload", "qwen-image-512", "--layers", "model"}).settings.layers == 60);
    const RunOptions b = run_options({"--ballast", "2G", "--ballast-alloc", "managed", "--ballast-touch", "both", "--host-load", "2"});
    CHECK(b.context.ballast.bytes == 2LL << 30);
    CHECK(b.context.ballast.kind == AllocKind::managed);
    CHECK(b.context.ballast.touch == BallastTouch::both);
    CHECK(b.context.host_load_threads == 2);
    const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
        {{"--layers", "0"}, "--layers"},
        {{"--layers", "model"}, "workload"},
        {{"--layers", "x"}, "--layers"},
        {{"--steps", "3", "--iters", "3"}, "--steps and --iters"},
        {{"--steps", "0"}, "steps"},
        {{"--alloc-timing", "lazy"}, "--alloc-timing"},
        {{"--retain", "all"}, "--retain"},
        {{"--ballast", "lots"}, "--ballast"},
        {{"--ballast-alloc", "managed"}, "--ballast"},
        {{"--ballast", "1G", "--ballast-alloc", "vmm"}, "path's"},
        {{"--ballast", "1G", "--ballast-touch", "host"}, "cannot touch"},
        {{"--ballast", "1G", "--ballast-touch", "both"}, "cannot touch"},
        {{"--host-load", "-1"}, "host-load"},
        {{"--chunk-size", "64M"}, "chunk part"},
        {{"--graph", "--layers", "2"}, "--graph"},
        {{"--scenario", "5", "--alloc-timing", "per-call"}, "--graph"},
        {{"--inject", "hang:alloc_scores"}, "does not run"},
        {{"--inject", "hang:softmax@gpu"}, "condition"},
        {{"--plan", "--check"}, "--plan"},
        {{"--plan", "--save-output", "o.npy"}, "--plan"},
    };
    for (const auto& [args, needle] : bad) {
      const ParseResult r = parse(args);
      INFO(args.front(), " ", args.size() > 1 ? args[1] : "", " -> ", r.message);
      CHECK_FALSE(r.run);
      CHECK(r.exit_code == kExitUsage);
      CHECK(r.message.find('\n') == std::string::npos);
      CHECK(r.message.find(needle) != std::string::npos);
    }
  }

  TEST_CASE("a fault's conditions: only in a layer, a step, or a rung of the context") {
    const FaultSpec f = parse_fault_spec("hang:softmax@layer=3@ballast@per-call");
    CHECK(f.only_layer == 3);
    CHECK(f.only_with == std::vector<std::string>{"ballast", "per-call"});
    CHECK(fault_spec_string(f) == "hang:softmax@layer=3@ballast@per-call");
    CHECK(parse_fault_spec(fault_spec_string(f)).only_with == f.only_with);
    CHECK(fault_spec_string(parse_fault_spec("slow:qk_gemm:40@step=2")) == "slow:qk_gemm:40@step=2");
    for (const char* bad : {"hang:softmax@", "hang:softmax@layer=0", "hang:softmax@layer=x", "hang:softmax@layer=1@layer=2",
                            "hang:softmax@ballast@ballast", "hang@layer=1"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(parse_fault_spec(bad), InputError);
    }
    // Armed only where its conditions hold; below them the run is clean.
    CHECK_FALSE(run_options({"--inject", "hang:softmax@ballast"}).inject_armed);
    CHECK(run_options({"--inject", "hang:softmax@ballast", "--ballast", "1G"}).inject_armed);
    CHECK_FALSE(run_options({"--inject", "hang:softmax@per-call@layers", "--alloc-timing", "per-call"}).inject_armed);
    CHECK(run_options({"--inject", "hang:softmax@per-call@layers", "--alloc-timing", "per-call", "--layers", "2"}).inject_armed);
    CHECK(run_options({"--inject", "hang:softmax@steps", "--steps", "2"}).inject_armed);
    CHECK_FALSE(run_options({"--inject", "hang:softmax@steps", "--iters", "2"}).inject_armed);
    CHECK(run_options({"--inject", "hang:softmax@host-load", "--host-load", "1"}).inject_armed);
    // A disarmed fault in a stage that does not run at this rung is no error.
    CHECK_FALSE(run_options({"--inject", "hang:alloc_scores@per-call"}).inject_armed);
    // A layer or a step the run does not reach: a sweep's one-layer cells all carry the fault.
    CHECK_FALSE(run_options({"--inject", "hang:softmax@layer=3", "--layers", "2"}).inject_armed);
    CHECK(run_options({"--inject", "hang:softmax@layer=3", "--layers", "3"}).inject_armed);
    CHECK_FALSE(run_options({"--inject", "hang:softmax@step=2"}).inject_armed);
    CHECK(run_options({"--inject", "hang:softmax@step=2", "--iters", "2"}).inject_armed);
    // What autograd keeps; no fix on (the fault a fix clears).
    CHECK_FALSE(run_options({"--inject", "hang:softmax@retain", "--layers", "2"}).inject_armed);
    CHECK(run_options({"--inject", "hang:softmax@retain", "--layers", "2", "--retain", "autograd"}).inject_armed);
    CHECK(run_options({"--inject", "hang:softmax@no-fix", "--scenario", "2"}).inject_armed);
    // Only with the backward pass: a stage of it is no error in a forward run, where the fault waits.
    CHECK_FALSE(run_options({"--inject", "error:dq_gemm@backward"}).inject_armed);
    CHECK(run_options({"--inject", "error:dq_gemm@backward", "--backward"}).inject_armed);
    CHECK_FALSE(run_options({"--inject", "hang:softmax@no-fix", "--scenario", "2", "--fix", "on"}).inject_armed);
    CHECK_FALSE(run_options({"--inject", "hang:softmax@no-fix", "--fixes", "3"}).inject_armed);
  }

  TEST_CASE("each layer has inputs of its own and the model's one mask; layer 1 is the problem itself") {
    for (MaskKind mask : {MaskKind::boolean, MaskKind::additive}) {
      SdpaProblem p;
      p.batch = 1;
      p.q_heads = p.kv_heads = 2;
      p.q_len = p.kv_len = 16;
      p.head_dim = 8;
      p.mask = mask;
      const HostInputs one = make_layer_inputs(p, 1), two = make_layer_inputs(p, 2);
      const HostInputs plain = make_random_inputs(p, p.seed);
      CHECK(one.q == plain.q);
      CHECK(one.bool_mask == plain.bool_mask);
      CHECK(two.q != one.q);
      CHECK(two.k != one.k);
      CHECK(two.bool_mask == one.bool_mask);
      CHECK(two.additive_mask == one.additive_mask);
      CHECK(!(mask == MaskKind::boolean ? one.bool_mask.empty() : one.additive_mask.empty()));
    }
    SdpaProblem p;
    CHECK(layer_problem(p, 1).dropout_offset == p.dropout_offset);
    CHECK(layer_problem(p, 4).dropout_offset == p.dropout_offset + 3);
  }

  TEST_CASE("the memory stages run only per call, with the stages they allocate for") {
    const RunOptions per_call = run_options({"--alloc-timing", "per-call", "--dropout", "0.1"});
    const RunOptions upfront = run_options({"--dropout", "0.1"});
    for (Stage s : {Stage::alloc_upcast, Stage::alloc_scores, Stage::alloc_probs, Stage::free_scores, Stage::alloc_dropout,
                    Stage::alloc_output, Stage::free_call, Stage::free_step}) {
      CAPTURE(stage_name(s));
      CHECK(stage_runs(s, per_call.problem, per_call.settings));
      CHECK_FALSE(stage_runs(s, upfront.problem, upfront.settings));
    }
    // Nothing to expand, copy or mask: their alloc stages do not run either.
    for (Stage s : {Stage::alloc_expanded, Stage::alloc_key_transposed, Stage::alloc_mask}) {
      CHECK_FALSE(stage_runs(s, per_call.problem, per_call.settings));
    }
    // Scenario 2 stops after softmax: the scores are freed, the probabilities are its result.
    const RunOptions s2 = run_options({"--scenario", "2", "--alloc-timing", "per-call", "-L", "64"});
    CHECK(stage_runs(Stage::free_scores, s2.problem, s2.settings));
    CHECK_FALSE(stage_runs(Stage::alloc_output, s2.problem, s2.settings));
    // Scenario 1 stops at the GEMM: its scores are the result and never freed in the call.
    const RunOptions s1 = run_options({"--scenario", "1", "--alloc-timing", "per-call"});
    CHECK_FALSE(stage_runs(Stage::free_scores, s1.problem, s1.settings));
    for (const TensorSpec& t : path_tensors(s1.problem, s1.settings)) {
      if (t.id == TensorId::scores) CHECK(t.lifetime == Lifetime::step);
    }
  }

  TEST_CASE("chunks of query rows: the budget's rows, the whole path only") {
    SdpaProblem p;
    p.batch = 1;
    p.q_heads = 24;
    p.q_len = p.kv_len = 4608;
    p.head_dim = 128;
    PathSettings ps;
    CHECK(chunk_rows(p, ps) == 4608);
    ps.chunk_bytes = int64_t{256} << 20;
    CHECK(chunk_rows(p, ps) == 576);  // 256 MiB / (24 x 4608 x 4 bytes a row) = 606 at most: 8 chunks of 576
    ps.chunk_bytes = 1;
    CHECK(chunk_rows(p, ps) == 1);
    ps.chunk_bytes = int64_t{256} << 20;
    ps.last_stage = Stage::softmax;  // a call that stops early is not chunked
    CHECK(chunk_rows(p, ps) == 4608);
  }

  TEST_CASE("the watchdog names the layer of a hung stage, in the flight recorder and the report") {
    HangMonitor m(1.0, 0, 0);
    REQUIRE(m.consume("L\t1,1,60\t5", 10));
    REQUIRE(m.consume("B\tsoftmax\t6\trows=1", 20));
    REQUIRE(m.consume("E\tsoftmax\t7\t", 30));
    REQUIRE(m.consume("L\t1,3,60\t8", 40));
    REQUIRE(m.consume("B\talloc_probs\t9\tattn=2038431744", 50));
    CHECK(m.open_stage() == "alloc_probs");
    CHECK(m.open_position().layer == 3);
    CHECK(m.open_position().layers == 60);
    const auto records = m.flight_recorder();
    REQUIRE(records.size() == 2);
    CHECK(records[0].layer == 1);
    CHECK(records[1].layer == 3);
    for (const char* bad : {"L\t1,3\t8", "L\t1,61,60\t8", "L\t0,1,1\t8", "L\tx,1,1\t8"}) CHECK_FALSE(m.consume(bad, 60));
    SupervisedOutcome o;
    o.kind = SupervisedOutcome::hang;
    o.stage = "alloc_probs";
    o.position = m.open_position();
    o.records = records;
    o.expiry = m.check(2'000'000);
    const std::string report = hang_report_text(o, "scenario 6", 1.0, "");
    CHECK(report.find("stage alloc_probs (layer 3 of 60, step 1) did not finish") != std::string::npos);
    CHECK(report.find("    layer  stage") != std::string::npos);
    // One layer and one step: no layer anywhere.
    o.position = {1, 1, 1};
    CHECK(hang_report_text(o, "scenario 0", 1.0, "").find("layer") == std::string::npos);
  }

  TEST_CASE("--layers-fit: the most layers that fit beside the rest, how many were asked for and why; as asked where all fit") {
    MemoryFacts h100;  // 84.47 GB of GPU memory free
    h100.gpu_free = 84'470'000'000LL;
    h100.host_available = 120'000'000'000LL;
    RunOptions o = qwen({"--layers", "60", "--alloc", "device"});
    const ContextMemory ballast{20'000'000'000LL, AllocKind::device};
    PathSettings settings = o.settings;
    MemoryPlan plan = plan_memory(o.problem, settings, ballast);
    REQUIRE_FALSE(plan_refusal(plan, plan_pools(plan, h100)).empty());
    fit_layers(plan, settings, o.problem, ballast, h100);
    // Each layer holds 2.32 GB, and the last call adds its transient peak: 56.02 GB beside the
    // 20 GB ballast (of the guard's 76.02) holds 22 layers, not 23.
    CHECK(settings.layers == plan.layers);
    CHECK(plan.layers == 22);
    CHECK(plan.layers_asked == 60);
    CHECK(plan.fitted_because.find("the memory plan needs") != std::string::npos);
    CHECK(plan_refusal(plan, plan_pools(plan, h100)).empty());
    PathSettings one_more = settings;
    one_more.layers = plan.layers + 1;
    const MemoryPlan over = plan_memory(o.problem, one_more, ballast);
    CHECK_FALSE(plan_refusal(over, plan_pools(over, h100)).empty());
    CHECK(plan.context.ballast_bytes == ballast.ballast_bytes);  // the rest stays as it was
    CHECK(layers_fit_text(plan).find(std::to_string(plan.layers) + " of the 60 layers asked for") != std::string::npos);
    // A plan that fits is left as asked; so is one whose single layer does not fit (the guard refuses it).
    PathSettings three = o.settings;
    three.layers = 3;
    MemoryPlan fits = plan_memory(o.problem, three, ballast);
    fit_layers(fits, three, o.problem, ballast, h100);
    CHECK(three.layers == 3);
    CHECK(fits.layers_asked == 0);
    CHECK(layers_fit_text(fits).empty());
    MemoryFacts tiny = h100;
    tiny.gpu_free = 1'000'000'000LL;
    PathSettings sixty = o.settings;
    MemoryPlan none = plan_memory(o.problem, sixty, ballast);
    fit_layers(none, sixty, o.problem, ballast, tiny);
    CHECK(sixty.layers == 60);
    CHECK(none.layers_asked == 0);
  }

  TEST_CASE("--layers-fit settles on the largest count that fits: N fit and N+1 do not, at both edges of every N") {
    // Against a count of every layer: for each N below the number asked, the least GPU memory with
    // which N layers fit, and one byte less than the least with which N+1 do (the top of N's range).
    // Over every N of 60, 7, 3 and 2 asked, the halving ends on either side of its last gap.
    const ContextMemory ballast{20'000'000'000LL, AllocKind::device};
    auto facts = [](int64_t gpu_free) {
      MemoryFacts f;
      f.gpu_free = gpu_free;
      f.host_available = 1'000'000'000'000LL;
      return f;
    };
    for (int asked : {60, 7, 3, 2}) {
      CAPTURE(asked);
      const RunOptions o = qwen({"--layers", std::to_string(asked), "--alloc", "device"});
      std::vector<MemoryPlan> plans(static_cast<size_t>(asked) + 1);  // plans[n]: the plan of n layers
      for (int n = 1; n <= asked; ++n) {
        PathSettings s = o.settings;
        s.layers = n;
        plans[static_cast<size_t>(n)] = plan_memory(o.problem, s, ballast);
      }
      auto fits = [&](int n, int64_t gpu_free) {
        const MemoryPlan& plan = plans[static_cast<size_t>(n)];
        return plan_refusal(plan, plan_pools(plan, facts(gpu_free))).empty();
      };
      auto least_memory_for = [&](int n) {  // halving on the plan's own verdict
        int64_t refused = 0, fitted = int64_t{1} << 42;
        REQUIRE(fits(n, fitted));
        while (fitted - refused > 1) {
          const int64_t mid = refused + (fitted - refused) / 2;
          (fits(n, mid) ? fitted : refused) = mid;
        }
        return fitted;
      };
      for (int n = 1; n < asked; ++n) {
        CAPTURE(n);
        for (const int64_t gpu_free : {least_memory_for(n), least_memory_for(n + 1) - 1}) {
          CAPTURE(gpu_free);
          int most = 0;  // the largest count that fits, every count tried
          for (int k = 1; k <= asked; ++k) {
            if (fits(k, gpu_free)) most = k;
          }
          REQUIRE(most == n);
          PathSettings settings = o.settings;
          MemoryPlan plan = plans[static_cast<size_t>(asked)];
          fit_layers(plan, settings, o.problem, ballast, facts(gpu_free));
          CHECK(settings.layers == n);
          CHECK(plan.layers == n);
          CHECK(plan.layers_asked == asked);
        }
      }
    }
  }

  TEST_CASE("the weights' load: each tensor's own whole pages, one after the other to the file's end") {
    // The load's sizes (weights_load.cpp): 18 MiB four times, 72 MiB twice, over and over.
    const std::vector<int64_t> sizes = {18 * MiB, 18 * MiB, 18 * MiB, 18 * MiB, 72 * MiB, 72 * MiB};
    for (const int64_t file : std::vector<int64_t>{512 * MiB, 256 * MiB, 216 * MiB, 100 * MiB + 1000, 7 * 1024, 1}) {
      CAPTURE(file);
      const std::vector<WeightsTensor> tensors = weights_tensors(file, sizes);
      REQUIRE_FALSE(tensors.empty());
      int64_t at = 0;
      for (size_t i = 0; i < tensors.size(); ++i) {
        CAPTURE(i);
        const WeightsTensor& t = tensors[i];
        CHECK(t.offset == at);  // its own bytes: where the one before ended
        CHECK(t.offset % kWeightsPage == 0);
        CHECK(t.bytes == std::min(sizes[i % sizes.size()], file - at));
        // Whole pages covering it and no more: what the drop part unmaps and drops after its copy
        // reaches no byte of the next tensor.
        CHECK(t.page_bytes % kWeightsPage == 0);
        CHECK(t.page_bytes >= t.bytes);
        CHECK(t.page_bytes < t.bytes + kWeightsPage);
        if (i + 1 < tensors.size()) CHECK(t.offset + t.page_bytes == tensors[i + 1].offset);
        at += t.bytes;
      }
      CHECK(at == file);
    }
    // 512 MiB: 216 MiB twice, then four of 18 MiB and 8 MiB of the next.
    const std::vector<WeightsTensor> half_gib = weights_tensors(512 * MiB, sizes);
    REQUIRE(half_gib.size() == 17);
    CHECK(half_gib[4].offset == 72 * MiB);
    CHECK(half_gib[6].offset == 216 * MiB);
    CHECK(half_gib[16].offset == 504 * MiB);
    CHECK(half_gib[16].bytes == 8 * MiB);
    // The last tensor cut at the file's end still drops its last page whole.
    const std::vector<WeightsTensor> odd = weights_tensors(100 * MiB + 1000, sizes);
    REQUIRE(odd.size() == 5);
    CHECK(odd.back().bytes == 28 * MiB + 1000);
    CHECK(odd.back().page_bytes == 28 * MiB + kWeightsPage);
    CHECK(weights_tensors(0, sizes).empty());
    CHECK_THROWS_AS(weights_tensors(MiB, {MiB + 1}), std::invalid_argument);
    CHECK_THROWS_AS(weights_tensors(MiB, {0}), std::invalid_argument);
  }

  TEST_CASE("fix 6's guard: the tensor about to be loaded is counted, twice where its pages stay cached; refused below a tenth") {
    const int64_t total = 128'000'000'000LL, tenth = total / 10, n = 72 * MiB;
    auto memory = [&](int64_t free) {
      HostMemory m;
      m.total = total;
      m.free = free;
      return m;
    };
    MappedWeights cached;  // read through the mapping, pages kept: its copy and its pages
    MappedWeights dropped;
    dropped.drop_pages = true;
    MappedWeights direct;
    direct.io = WeightsIo::direct;
    CHECK(weights_pages_cached(cached));
    CHECK_FALSE(weights_pages_cached(dropped));
    CHECK_FALSE(weights_pages_cached(direct));
    // MemFree above a tenth before the tensor: it lands exactly on the tenth (allowed), or one byte
    // below it (refused). A guard that looked at MemFree alone would let the second through.
    CHECK_FALSE(weights_guard_refuses(memory(tenth + 2 * n), n, cached));
    CHECK(weights_guard_refuses(memory(tenth + 2 * n - 1), n, cached));
    for (const MappedWeights& w : {dropped, direct}) {
      CHECK_FALSE(weights_guard_refuses(memory(tenth + n), n, w));
      CHECK(weights_guard_refuses(memory(tenth + n - 1), n, w));
      CHECK_FALSE(weights_guard_refuses(memory(tenth + 2 * n - 1), n, w));  // the cache not counted
    }
    // Already below the tenth: any tensor is refused. Far above it: none.
    CHECK(weights_guard_refuses(memory(tenth - 1), 1, direct));
    CHECK_FALSE(weights_guard_refuses(memory(total / 2), n, cached));
    // MemFree or MemTotal unknown: nothing to judge by, nothing refused.
    HostMemory unknown = memory(-1);
    CHECK_FALSE(weights_guard_refuses(unknown, n, cached));
    unknown = memory(0);
    unknown.total = -1;
    CHECK_FALSE(weights_guard_refuses(unknown, n, cached));
  }
}
