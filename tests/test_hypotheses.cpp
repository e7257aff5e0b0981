// test_hypotheses.cpp: that each scenario exercises its own hypothesis, decided on the CPU: the
// waivers of scenarios on memory that cannot migrate, the failing workload's layers as problems,
// the text padding mask, the softmax variant the harness and the generated reproducer choose,
// and the classification of a hang by its stage and its conditions.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "fixes/fix_list.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/random_masks.h"
#include "math_sdpa/softmax_plan.h"
#include "repro/cli/run_options.h"
#include "repro/report/pytorch_equivalent.h"
#include "repro/report/reproducer/generator.h"
#include "parse_words.h"
#include "run_program.h"
#include "scenarios/hang_classification.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

using namespace sdpa;
using test_util::parse;
using test_util::run_options;

namespace {

bool mentions(const std::vector<std::string>& lines, const std::string& word) {
  for (const auto& line : lines) {
    if (line.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_SUITE("hypotheses") {
  TEST_CASE("scenarios 1-4 on memory that cannot migrate are waived from the command line; fixes do not waive") {
    for (int n = 1; n <= 4; ++n) {
      for (const char* alloc : {"device", "async", "host"}) {
        CAPTURE(n);
        CAPTURE(alloc);
        const RunOptions o = run_options({"--scenario", std::to_string(n), "--alloc", alloc});
        CHECK(o.waiver.find("scenario " + std::to_string(n)) == 0);
        CHECK(o.waiver.find(std::string(alloc) + " memory") != std::string::npos);
        // Why that memory cannot show the hypothesis, in its own words.
        const std::string why = std::string(alloc) == "host" ? "host memory is pinned in host memory and never migrates"
                                                             : std::string(alloc) + " memory never leaves the GPU";
        CHECK(o.waiver.find(why) != std::string::npos);
      }
      CHECK(run_options({"--scenario", std::to_string(n)}).waiver.empty());
      CHECK(run_options({"--scenario", std::to_string(n), "--alloc", "system"}).waiver.empty());
    }
    CHECK(run_options({"--scenario", "0", "--alloc", "device"}).waiver.empty());
    // Fix 4 turns managed memory into a stream-ordered pool: the condition chosen was managed.
    const RunOptions fixed = run_options({"--scenario", "4", "--fix", "on"});
    CHECK(fixed.settings.alloc == AllocKind::async);
    CHECK(fixed.waiver.empty());
  }

  TEST_CASE("a waived scenario exits 6 with one line and its JSON before any GPU is looked for") {
    const std::string dir = test_util::temp_dir("waiver");
    for (int n = 1; n <= 4; ++n) {
      CAPTURE(n);
      const std::string json = dir + "/w" + std::to_string(n) + ".json";
      test_util::ProgramOptions po;
      po.timeout_s = 20;
      const auto run = test_util::run_program(
          {SDPA_REPRO_BINARY, "--scenario", std::to_string(n), "--alloc", "device", "--json", json}, po);
      CHECK(run.exit_code == kExitWaived);
      CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
      CHECK(run.err.find("waived") != std::string::npos);
      const auto j = nlohmann::json::parse(test_util::file_text(json));
      CHECK(j["outcome"] == "waived");
      CHECK(j["device"].is_null());  // the GPU was never queried
    }
    test_util::remove_tree(dir);
  }

  TEST_CASE("workloads: the failing model's layers, overridden field by field; scenario 2 runs one by default") {
    const RunOptions w = run_options({"--workload", "qwen-image-1024"});
    CHECK(w.workload == "qwen-image-1024");
    CHECK(w.problem.batch == 1);
    CHECK(w.problem.q_heads == 24);
    CHECK(w.problem.kv_heads == 24);
    CHECK(w.problem.q_len == 4608);  // 512 text + (1024/16)^2 image tokens
    CHECK(w.problem.kv_len == 4608);
    CHECK(w.problem.head_dim == 128);
    CHECK(w.problem.dtype == DType::bf16);
    CHECK(w.conditions.k_layout == KLayout::bshe);  // the model hands SDPA a view of a [B, S, H, E] projection

    const RunOptions fp16 = run_options({"--workload", "qwen-image-512", "--dtype", "fp16", "--heads", "8"});
    CHECK(fp16.problem.q_len == 1536);
    CHECK(fp16.problem.dtype == DType::fp16);
    CHECK(fp16.problem.q_heads == 8);
    CHECK(fp16.problem.kv_heads == 8);  // follows --heads

    const RunOptions s2 = run_options({"--scenario", "2"});
    CHECK(s2.workload == std::string(scenario_info(2).default_workload));
    CHECK(s2.problem.kv_len > kSoftmaxWarpRowMaxCols);
    CHECK(softmax_variant_for(s2.problem.compute_dtype(), s2.problem.kv_len) == SoftmaxVariant::block_per_row);
    const RunOptions s2_shape = run_options({"--scenario", "2", "-L", "256"});  // a shape given: no workload
    CHECK(s2_shape.workload.empty());
    CHECK(s2_shape.problem.q_heads == 8);
    CHECK(run_options({"--scenario", "1"}).workload.empty());

    const RunOptions pad = run_options({"--workload", "qwen-image-1024-textpad"});
    CHECK(pad.problem.batch == 2);
    CHECK(pad.problem.mask == MaskKind::boolean);
    CHECK(pad.problem.mask_per_batch);
    CHECK_FALSE(pad.problem.mask_per_head);
    CHECK(pad.problem.mask_pattern == MaskPattern::text_padding);
    CHECK(pad.problem.text_tokens == 512);
    CHECK(pad.problem.text_valid == 128);

    for (const auto& bad : std::vector<std::vector<std::string>>{{"--workload", "qwen"},
                                                                 {"--text-padding", "64"},
                                                                 {"--text-padding", "64:0", "-b", "2"},
                                                                 {"--text-padding", "10:20", "-b", "2"},
                                                                 {"--text-padding", "999:1", "-b", "2"},
                                                                 {"--text-padding", "64:8", "--mask", "float"}}) {
      CAPTURE(bad[1]);
      const ParseResult r = parse(bad);
      CHECK_FALSE(r.run);
      CHECK(r.exit_code == kExitUsage);
    }
  }

  TEST_CASE("the text padding mask: entry 0 attends everywhere, later entries not to their padded text") {
    const auto mask = text_padding_mask(3, 4, 20, 8, 3);
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t r = 0; r < 4; ++r) {
        for (int64_t c = 0; c < 20; ++c) {
          const bool padded = b > 0 && c >= 3 && c < 8;
          CHECK(mask[static_cast<size_t>((b * 4 + r) * 20 + c)] == (padded ? 0 : 1));
        }
      }
    }
    // And the random inputs of a text-padded problem carry exactly that mask.
    const RunOptions o = run_options({"--text-padding", "16:5", "-b", "2", "-L", "32"});
    const HostInputs in = make_random_inputs(o.problem, o.problem.seed);
    CHECK(in.bool_mask == text_padding_mask(2, 32, 32, 16, 5));
  }

  TEST_CASE("the reproducer runs the softmax variant the harness runs, at every row length and dtype") {
    // It calls the harness's own launcher (kernels.cu, inlined), which chooses the variant as the
    // harness's does, with the plan's rows and columns; the step's comment names the variant.
    for (const char* dtype : {"bf16", "fp16", "fp32"}) {
      for (const char* precision : {"upcast", "native"}) {
        for (int64_t S : {64, 512, 1024, 1025, 1536, 4608}) {
          CAPTURE(dtype);
          CAPTURE(precision);
          CAPTURE(S);
          const std::vector<std::string> args = {"--scenario", "2", "-b", "1", "--heads", "2", "-L", "8", "-S",
                                                 std::to_string(S), "--dtype", dtype, "--precision", precision};
          RunOptions off = run_options(args), on = run_options(args);
          on.set_fixes(parse_fix_list("2"));
          on.own_fix = true;
          const std::string cu = generate_reproducer(off, on, "off", "on");
          const SoftmaxVariant v = softmax_variant_for(off.problem.compute_dtype(), S);
          CHECK(cu.find(std::string("variant=") + softmax_variant_name(v)) != std::string::npos);
          CHECK(cu.find("launch_safe_softmax(p.t({TensorId::scores, 0, 0LL}), p.t({TensorId::probs, 0, 0LL}), DType::" +
                        std::string(dtype_name(off.problem.compute_dtype())) + ", 16LL, " + std::to_string(S) + "LL, p.s(PathStream::path));") !=
                std::string::npos);
          CHECK(cu.find("void launch_safe_softmax(const void* in, void* out, DType type, int64_t rows, int64_t cols") !=
                std::string::npos);
        }
      }
    }
  }

  TEST_CASE("classification: every candidate whose signature fits, ranked by the conditions present") {
    // Scenario 1's own conditions: the GEMM on a blocking stream ordered by nothing explicit, K contiguous.
    const RunOptions s1 = run_options({"--scenario", "1"});
    const HangClassification h1 = classify_hang(Stage::qk_gemm, s1.problem, s1.settings);
    REQUIRE(h1.candidates.size() == 2);
    CHECK(h1.scenario() == 1);
    CHECK(h1.candidates[1].scenario == 3);
    CHECK(mentions(h1.candidates[0].evidence, "blocking stream, not the path's (no explicit ordering: only the legacy"));
    CHECK(h1.summary().find("also scenario 3") != std::string::npos);

    // The same stage under scenario 3's conditions: K a [B, S, H, E] view through the pointer-array GEMM.
    const RunOptions s3 = run_options({"--scenario", "3"});
    const HangClassification h3 = classify_hang(Stage::qk_gemm, s3.problem, s3.settings);
    CHECK(h3.scenario() == 3);
    CHECK(mentions(h3.candidates[0].evidence, "[B, S, H, E]"));
    CHECK(mentions(h3.candidates[1].against, "path's own stream"));

    // With fix 3, K^T is copied contiguous: evidence against scenario 3.
    const RunOptions s3fix = run_options({"--scenario", "3", "--fix", "on"});
    for (const HangCandidate& c : classify_hang(Stage::qk_gemm, s3fix.problem, s3fix.settings).candidates) {
      if (c.scenario == 3) CHECK(mentions(c.against, "copied contiguous"));
    }

    // Softmax: the block reduction speaks for scenario 2, the warp softmax against it.
    const RunOptions s2 = run_options({"--scenario", "2"});
    const HangClassification h2 = classify_hang(Stage::softmax, s2.problem, s2.settings);
    REQUIRE(h2.candidates.size() == 1);
    CHECK(mentions(h2.candidates[0].evidence, "block_per_row"));
    CHECK(mentions(h2.candidates[0].evidence, "during softmax"));
    const RunOptions short_rows = run_options({"--scenario", "2", "-L", "128"});
    CHECK(mentions(classify_hang(Stage::softmax, short_rows.problem, short_rows.settings).candidates[0].against,
                   "warp_per_row"));

    // Memory that does not migrate is evidence against every candidate.
    const RunOptions device = run_options({"--scenario", "0", "--alloc", "device"});
    CHECK(mentions(classify_hang(Stage::entry_sync, device.problem, device.settings).candidates[0].against,
                   "does not migrate"));
    const RunOptions s4 = run_options({"--scenario", "4"});
    CHECK(mentions(classify_hang(Stage::entry_sync, s4.problem, s4.settings).candidates[0].evidence, "4 streams"));
    // Every kind of memory: system memory migrates as managed does (evidence); host, async and vmm
    // memory never migrate (against).
    for (const auto& [alloc, migrates] : std::vector<std::pair<std::string, bool>>{
             {"managed", true}, {"system", true}, {"host", false}, {"async", false}, {"vmm", false}, {"device", false}}) {
      CAPTURE(alloc);
      const RunOptions o = run_options({"--scenario", "0", "--alloc", alloc});
      const HangCandidate c = classify_hang(Stage::entry_sync, o.problem, o.settings).candidates.at(0);
      CHECK(mentions(migrates ? c.evidence : c.against, alloc + " memory"));
      CHECK_FALSE(mentions(migrates ? c.against : c.evidence, alloc + " memory"));
    }

    // No signature: unclassified, with the stage named and why no hypothesis fits.
    const HangClassification none = classify_hang(Stage::cast_output, s1.problem, s1.settings);
    CHECK(none.candidates.empty());
    CHECK(none.scenario() == 0);
    CHECK(none.summary().find("unclassified (hung in stage cast_output): none, because no hypothesis names stage cast_output (an elementwise") == 0);
    // Conditions against a scenario count: with fix 1 on, the GEMM on the path's own stream has as
    // much for scenario 1 as against it, and scenario 3's transposed view of K leads.
    const RunOptions s1fix = run_options({"--scenario", "1", "--fix", "on", "--k-layout", "bshe", "--gemm-api", "batched"});
    const HangClassification h1fix = classify_hang(Stage::qk_gemm, s1fix.problem, s1fix.settings);
    REQUIRE(h1fix.candidates.size() == 2);
    CHECK(h1fix.scenario() == 3);
    CHECK(mentions(h1fix.candidates[1].against, "path's own stream"));
    // A condition against a candidate cancels one for it. Fix 3 copied K^T contiguous (against 3) and
    // the snapshot found the copy kernel resident (for 3): scenario 3 has 4 for and 1 against, the
    // unordered GEMM stream's scenario 1 has 3 for and none against; a tie, which the likelier
    // (lower) number wins. Counting only the conditions for would put 3 first.
    const RunOptions s3copied = run_options({"--scenario", "3", "--fix", "on", "--gemm-stream", "aux"});
    HangEvidence copy_resident;
    copy_resident.resident_kernels = {"transpose_heads_kernel"};
    const HangClassification tie = classify_hang(Stage::qk_gemm, s3copied.problem, s3copied.settings, copy_resident);
    REQUIRE(tie.candidates.size() == 2);
    CHECK(tie.candidates[1].evidence.size() == 4);
    CHECK(tie.candidates[1].against.size() == 1);
    CHECK(tie.candidates[0].evidence.size() == 3);
    CHECK(tie.scenario() == 1);

    // A pass of many layers (the training context, even allocated up front) can exhaust memory in
    // any stage: scenario 6 is a candidate beside the stage's own, ranked by its conditions.
    for (const std::vector<std::string>& context : std::vector<std::vector<std::string>>{
             {"--layers", "4"}, {"--alloc-timing", "per-call"}, {"--retain", "autograd"}}) {
      std::vector<std::string> args = {"--scenario", "2"};
      args.insert(args.end(), context.begin(), context.end());
      CAPTURE(context[0]);
      const RunOptions layered = run_options(args);
      const HangClassification h = classify_hang(Stage::softmax, layered.problem, layered.settings);
      REQUIRE(h.candidates.size() == 2);
      CHECK(h.candidates[0].scenario == 2);
      CHECK(h.candidates[1].scenario == 6);
    }
    CHECK(classify_hang(Stage::softmax, s2.problem, s2.settings).candidates.size() == 1);  // one layer, up front: no 6
    // Before the first call (the weights' load) no layer has allocated anything: against scenario 6.
    const RunOptions loading = run_options({"--scenario", "6", "--mapped-weights", "1G"});
    for (const HangCandidate& c : classify_hang(Stage::load_weights, loading.problem, loading.settings).candidates) {
      if (c.scenario == 6) CHECK(mentions(c.against, "before the first call"));
    }

    // The P.V GEMM is a batched GEMM like Q.K^T: scenario 1's, with the stream against it.
    const HangClassification pv = classify_hang(Stage::pv_gemm, s1.problem, s1.settings);
    REQUIRE(pv.candidates.size() == 1);
    CHECK(mentions(pv.candidates[0].evidence, "fix 1 brackets"));
  }

  TEST_CASE("scenario 7's page cache: weights dropped after each copy or read with O_DIRECT count against it, not for") {
    auto candidate7 = [](const std::vector<std::string>& args) {
      std::vector<std::string> all = {"--scenario", "7", "--mapped-weights", "1G", "--layers", "1"};
      all.insert(all.end(), args.begin(), args.end());
      const RunOptions o = run_options(all);
      for (const HangCandidate& c : classify_hang(Stage::load_weights, o.problem, o.settings).candidates) {
        if (c.scenario == 7) return c;
      }
      FAIL("scenario 7 is no candidate for a hang in load_weights");
      return HangCandidate{};
    };
    const HangCandidate cached = candidate7({});
    CHECK(mentions(cached.evidence, "read through the page cache (mapped)"));
    CHECK_FALSE(mentions(cached.against, "kept out of the page cache"));
    for (const auto& [part, how] : std::vector<std::pair<std::string, std::string>>{{"6:drop", "pages dropped after each copy"},
                                                                                   {"6:direct", "O_DIRECT"}}) {
      CAPTURE(part);
      const HangCandidate kept_out = candidate7({"--fixes", part});
      CHECK_FALSE(mentions(kept_out.evidence, "read through the page cache"));
      CHECK(mentions(kept_out.against, "the weights were kept out of the page cache (" + how + ")"));
      // One fact for scenario 7 fewer and one against it more: the same run is two lower.
      CHECK(kept_out.weight() == cached.weight() - 2);
    }
  }

  TEST_CASE("classification says none fits when no candidate has more for it than against; a backward hang weighs the backward's facts") {
    // A hang in softmax_backward at the default shape, every tensor allocated up front: scenario 6
    // is a candidate (the layers keep what autograd keeps), but the stage alone is no evidence for
    // a scenario that can hang anywhere, its tensors were all allocated before the first call, and
    // the backward pass frees as it goes. None fits, and each candidate's for and against is said.
    const RunOptions upfront = run_options({"--backward"});
    const HangClassification h = classify_hang(Stage::softmax_backward, upfront.problem, upfront.settings);
    REQUIRE_FALSE(h.candidates.empty());
    CHECK(h.none_fits());
    INFO(h.summary());
    CHECK(h.scenario() == 0);
    CHECK(h.summary().find("none fits (hung in stage softmax_backward): no scenario has more evidence for it than against it") == 0);
    CHECK(h.summary().find("scenario 6 (the forward pass exhausts the shared memory pool): for: ") != std::string::npos);
    CHECK(h.summary().find("against: it hung in the backward pass, which frees what the forward pass kept as it goes, and not "
                           "in an allocation of its own, every tensor was allocated before the first call") != std::string::npos);
    // The same pass of 60 layers allocating inside each call, hung in an allocation of the backward
    // pass's own: scenario 6, with its conditions.
    const RunOptions per_call = run_options({"--backward", "--alloc-timing", "per-call", "--layers", "60"});
    const HangClassification alloc = classify_hang(Stage::alloc_grad_softmax, per_call.problem, per_call.settings);
    CHECK_FALSE(alloc.none_fits());
    CHECK(alloc.scenario() == 6);
    CHECK(mentions(alloc.candidates[0].evidence, "60 layers in sequence"));
    // A signature stage with its scenario's conditions present still names it.
    const RunOptions s2 = run_options({"--scenario", "2"});
    CHECK(classify_hang(Stage::softmax, s2.problem, s2.settings).scenario() == 2);
    // ... and at the default shape, with none of them, it does not.
    const RunOptions plain = run_options({});
    const HangClassification bare = classify_hang(Stage::softmax, plain.problem, plain.settings);
    CHECK(bare.none_fits());
    CHECK(bare.summary().find("scenario 2 (softmax reduction on unified memory under migration): for: hung in softmax") !=
          std::string::npos);
  }

  TEST_CASE("the PyTorch-level symptom: the SDPA call of the run's problem, valid Python") {
    const RunOptions pad = run_options({"--workload", "qwen-image-1024-textpad", "--scenario", "2"});
    const std::string py = pytorch_sdpa_snippet(pad);
    CHECK(py.find("q = torch.randn(2, 24, 4608, 128, device=\"cuda\", dtype=torch.bfloat16)") != std::string::npos);
    CHECK(py.find(".transpose(1, 2)") != std::string::npos);  // K as a view of [B, S, H, E]
    CHECK(py.find("attn_mask[1:, :, :, 128:512] = False") != std::string::npos);
    CHECK(py.find("with sdpa_kernel(SDPBackend.MATH):") != std::string::npos);
    const RunOptions gqa = run_options({"--heads", "8", "--kv-heads", "2", "--precision", "native", "--mask", "causal",
                                    "--dropout", "0.1", "--scale", "0.5"});
    const std::string py2 = pytorch_sdpa_snippet(gqa);
    CHECK(py2.find("enable_gqa=True") != std::string::npos);
    CHECK(py2.find("is_causal=True") != std::string::npos);
    CHECK(py2.find("dropout_p=0.1") != std::string::npos);
    CHECK(py2.find("scale=0.5") != std::string::npos);
    CHECK(py2.find("allow_fp16_bf16_reduction_math_sdp(True)") != std::string::npos);
    CHECK(py2.find("v = torch.randn(2, 2, 128, 64,") != std::string::npos);
    // A mask per batch and query head, for 8 query heads over 2 key heads; a boolean mask's True attends.
    const RunOptions per_head = run_options({"-b", "2", "--heads", "8", "--kv-heads", "2", "-L", "128", "--mask", "float",
                                             "--mask-dims", "BxH"});
    CHECK(pytorch_sdpa_snippet(per_head).find("attn_mask = torch.randn(2, 8, 128, 128, device=\"cuda\"") != std::string::npos);
    const RunOptions bool_mask = run_options({"-L", "128", "--mask", "bool"});
    CHECK(pytorch_sdpa_snippet(bool_mask).find("attn_mask = torch.rand(1, 1, 128, 128, device=\"cuda\") >= 0.25  # True = attend") !=
          std::string::npos);
    // Python parses it (no PyTorch needed for that).
    const std::string dir = test_util::temp_dir("pysnippet");
    for (const std::string& code : {py, py2}) {
      std::ofstream(dir + "/s.py") << code;
      test_util::ProgramOptions po;
      po.timeout_s = 20;
      const auto run = test_util::run_program({"/usr/bin/python3", "-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())",
                                               dir + "/s.py"},
                                              po);
      CHECK(run.exit_code == 0);
    }
    test_util::remove_tree(dir);
    // scripts/torch_stages.py runs the run's own options (it asks repro for their plan).
    const std::vector<std::string> args = torch_stages_command({"--scenario", "2", "--text-padding", "512:128"});
    CHECK(args == std::vector<std::string>{"python3", "scripts/torch_stages.py", "--scenario", "2", "--text-padding", "512:128",
                                           "--json", "torch_stages.json"});
  }

  TEST_CASE("a report refuses an injected fault and a waived configuration: exit 2, one line, nothing written") {
    const std::string dir = test_util::temp_dir("report_refusals");
    for (const auto& extra : std::vector<std::vector<std::string>>{{"--scenario", "2", "--inject", "hang:softmax"},
                                                                   {"--scenario", "1", "--alloc", "device"}}) {
      CAPTURE(extra[2]);
      std::vector<std::string> args = {SDPA_REPRO_BINARY, "report", "--no-run", "--out", dir + "/r"};
      args.insert(args.end(), extra.begin(), extra.end());
      test_util::ProgramOptions po;
      po.timeout_s = 30;
      const auto run = test_util::run_program(args, po);
      CHECK(run.exit_code == kExitUsage);
      CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
      CHECK(test_util::file_text(dir + "/r/REPORT.md").empty());
    }
    test_util::remove_tree(dir);
  }

  TEST_CASE("classification with a snapshot's evidence: the resident kernel and a thread blocked in the driver") {
    const RunOptions s3 = run_options({"--scenario", "3"});
    HangEvidence e;
    e.resident_kernels = {"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"};
    e.blocked_threads = {"thread 1234 (repro) in D state in uvm_va_block_make_resident"};
    e.host_call = "cuStreamSynchronize";
    const HangClassification h = classify_hang(Stage::qk_gemm, s3.problem, s3.settings, e);
    for (const HangCandidate& c : h.candidates) {
      CAPTURE(c.scenario);
      CHECK(mentions(c.evidence, "sm90_xmma_gemm"));  // a GEMM resident bears on 1 and 3
      CHECK(mentions(c.evidence, "unified-memory driver"));
    }
    CHECK(h.evidence_used.size() == 3);
    CHECK(h.summary().find("snapshot evidence used: resident kernel sm90_xmma_gemm") != std::string::npos);
    // A kernel of no scenario (the injected spin) is listed as used but supports no candidate.
    HangEvidence spin;
    spin.resident_kernels = {"spin_kernel"};
    const RunOptions s2 = run_options({"--scenario", "2"});
    const HangClassification h2 = classify_hang(Stage::softmax, s2.problem, s2.settings, spin);
    CHECK_FALSE(mentions(h2.candidates[0].evidence, "spin_kernel"));
    CHECK(mentions(h2.evidence_used, "spin_kernel (no scenario's kernel)"));
    HangEvidence softmax;
    softmax.resident_kernels = {"safe_softmax_rows_kernel"};
    CHECK(mentions(classify_hang(Stage::softmax, s2.problem, s2.settings, softmax).candidates[0].evidence,
                   "safe_softmax_rows_kernel"));
  }
}
