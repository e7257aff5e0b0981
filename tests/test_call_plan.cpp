// test_call_plan.cpp: the call plan (math_sdpa/call_plan.h), without a GPU: its steps are the
// stages stage_runs says run, in the table's order; every operand an operation reads or writes is
// a tensor that exists at that point of the call (allocated before, not freed yet), for every
// scenario and a matrix of conditions; the fixes' actions are where they act; activation
// checkpointing recomputes in the backward what the forward did not keep; and `repro --plan --json`
// writes the plan the harness runs.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fixes/fix.h"
#include "math_sdpa/call_plan.h"
#include "parse_words.h"
#include "run_program.h"
#include "scenarios/scenario.h"

using namespace sdpa;
using test_util::run_options;

namespace {

// The plan of a command line's run, with its fixes' hooks.
CallPlan plan_of(const RunOptions& o) {
  const auto fixes = make_fixes(o.fixes);
  std::vector<PathHook*> hooks;
  for (const auto& f : fixes) hooks.push_back(f.get());
  return plan_calls(o.problem, o.settings, path_tensors(o.problem, o.settings), hooks);
}

std::vector<const PlanStep*> staged(const std::vector<PlanStep>& steps) {
  std::vector<const PlanStep*> out;
  for (const PlanStep& s : steps) {
    if (s.staged && !s.ops.empty()) out.push_back(&s);
  }
  return out;
}

// Every tensor an operation names, as it names them.
std::vector<TensorRef> operands(const PlanOp& op) {
  std::vector<TensorRef> refs;
  std::visit(
      [&](const auto& o) {
        for_each_field(o, [&](const char*, const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, TensorRef>) refs.push_back(v);
          if constexpr (std::is_same_v<V, TensorRef[3]>) refs.insert(refs.end(), std::begin(v), std::end(v));
          if constexpr (std::is_same_v<V, std::vector<ReducedOperand>>) {
            for (const ReducedOperand& r : v) refs.push_back({r.id, r.chunk, 0});
          }
        });
      },
      op);
  // A causal mask is built from nothing: its boolean operand is not read.
  if (const auto* m = std::get_if<BuildMaskOp>(&op); m && m->causal) refs.erase(refs.begin());
  return refs;
}

// Walks a layer's calls as the pipeline runs them (forward, then its backward call) with the live
// tensors of the call: run-lifetime tensors always, the others from their allocation to their free.
// Returns what went wrong ("" when every operand was live and nothing was freed twice or leaked).
std::string walk(const RunOptions& o) {
  const CallPlan plan = plan_of(o);
  const std::vector<TensorSpec> table = path_tensors(o.problem, o.settings);
  std::map<TensorId, int> live;  // allocations of each tensor of the call and layer
  auto spec = [&](TensorId id) -> const TensorSpec* {
    for (const TensorSpec& t : table) {
      if (t.id == id) return &t;
    }
    return nullptr;
  };
  std::string problems;
  auto visit = [&](const std::vector<PlanStep>& steps, const char* call) {
    for (const PlanStep& s : steps) {
      for (const PlanOp& op : s.ops) {
        const std::string where = std::string(call) + " " + (s.staged ? stage_name(s.stage) : "(between stages)") + " " +
                                  plan_op_name(op) + ": ";
        if (const auto* a = std::get_if<AllocateOp>(&op)) {
          for (TensorId id : a->tensors) {
            const TensorSpec* t = spec(id);
            if (!t) problems += where + "allocates " + tensor_name(id) + ", which the table does not have\n";
            if (t && (a->chunk == 0 || t->chunks > 1)) ++live[id];
          }
          continue;
        }
        if (const auto* f = std::get_if<FreeOp>(&op)) {
          for (TensorId id : f->tensors) {
            if (live[id] == 0) problems += where + "frees " + tensor_name(id) + ", which is not allocated\n";
            live[id] = 0;
          }
          continue;
        }
        for (const TensorRef& r : operands(op)) {
          const TensorSpec* t = spec(r.id);
          if (!t) {
            problems += where + "reads " + tensor_name(r.id) + ", which the table does not have\n";
          } else if (t->lifetime != Lifetime::run && live[r.id] == 0) {
            problems += where + "reads " + tensor_name(r.id) + ", which is not allocated at that point\n";
          } else if (r.chunk >= std::max(1, t->chunks) || r.byte < 0 || r.byte >= t->bytes * std::max(1, t->chunks)) {
            problems += where + tensor_name(r.id) + " chunk " + std::to_string(r.chunk) + " byte " + std::to_string(r.byte) +
                        " is outside it\n";
          }
        }
      }
    }
  };
  for (int step = 0; step < 2; ++step) {  // two steps: the first step's frees must leave the second nothing stale
    visit({plan.entry}, "forward");
    visit(plan.forward_gpu, "forward");
    visit({plan.free_call}, "forward");
    visit({plan.stream_sync}, "forward");
    if (o.settings.backward) {
      visit(plan.backward_gpu, "backward");
      visit({plan.backward_sync}, "backward");
    }
    visit({plan.free_step}, "step");
    for (const auto& [id, n] : live) {
      if (n != 0) problems += std::string("step end: ") + tensor_name(id) + " is still allocated\n";
    }
  }
  return problems;
}

}  // namespace

TEST_SUITE("call_plan") {
  TEST_CASE("the forward call's steps are the stages that run, in the table's order, each once a chunk") {
    for (const ScenarioInfo& sc : scenario_table()) {
      for (const char* full : {"", "--full"}) {
        CAPTURE(sc.number);
        CAPTURE(full);
        std::vector<std::string> args = {"--scenario", std::to_string(sc.number), "-L", "64", "-S", "64"};
        if (*full) args.push_back(full);
        if (sc.number >= 6) args.insert(args.end(), {"--layers", "2"});
        if (sc.number == 7) args.insert(args.end(), {"--mapped-weights", "64M"});
        const RunOptions o = run_options(args);
        const CallPlan plan = plan_of(o);
        std::vector<Stage> planned;
        for (const PlanStep* s : staged(plan.forward_gpu)) planned.push_back(s->stage);
        std::vector<Stage> expected;
        for (const StageRow& row : stage_table()) {
          if (row.when != StageWhen::call || !stage_runs(row.stage, o.problem, o.settings)) continue;
          if (row.stage == Stage::entry_sync || row.stage == Stage::free_call || row.stage == Stage::stream_sync) continue;
          if (is_memory_stage(row.stage) && std::none_of(plan.forward_gpu.begin(), plan.forward_gpu.end(),
                                                         [&](const PlanStep& s) { return s.staged && s.stage == row.stage; })) {
            continue;  // an allocation stage with nothing to allocate in this configuration
          }
          expected.push_back(row.stage);
        }
        CHECK(planned == expected);
        CHECK(plan.entry.stage == Stage::entry_sync);
        CHECK(plan.stream_sync.stage == Stage::stream_sync);
      }
    }
  }

  TEST_CASE("every operand of every operation is a tensor that exists at that point of the call") {
    const std::vector<std::vector<std::string>> extra = {
        {},
        {"--alloc-timing", "per-call"},
        {"--alloc-timing", "per-call", "--layers", "3", "--backward"},
        {"--alloc-timing", "per-call", "--backward", "--dropout", "0.1", "--kv-heads", "2", "--mask", "bool"},
        {"--alloc-timing", "per-call", "--backward", "--retain", "checkpoint", "--dropout", "0.1", "--layers", "2"},
        {"--alloc-timing", "per-call", "--backward", "--retain", "checkpoint", "--mask", "causal", "--precision", "native"},
        {"--backward", "--retain", "checkpoint", "--mask", "float"},
        {"--fixes", "5:chunk", "--chunk-size", "16K", "--alloc-timing", "per-call", "--retain", "autograd", "--dropout", "0.2"},
    };
    for (const ScenarioInfo& sc : scenario_table()) {
      for (const auto& more : extra) {
        std::vector<std::string> args = {"--scenario", std::to_string(sc.number), "--full", "-L", "64", "-S", "128"};
        args.insert(args.end(), more.begin(), more.end());
        if (sc.number == 7) args.insert(args.end(), {"--mapped-weights", "64M"});
        std::string line;
        for (const auto& a : args) line += a + " ";
        CAPTURE(line);
        const ParseResult parsed = test_util::parse(args);
        if (!parsed.run) continue;  // a combination the scenario refuses (its own message is tested elsewhere)
        CHECK(walk(parsed.options) == "");
      }
    }
  }

  TEST_CASE("activation checkpointing: the forward keeps its output only; the backward recomputes up to dropout, "
            "frees what autograd would not keep, and frees the rest where it ends") {
    const RunOptions o = run_options({"-L", "64", "-S", "64", "--alloc-timing", "per-call", "--layers", "3", "--backward",
                                      "--retain", "checkpoint", "--dropout", "0.1"});
    CHECK(o.settings.retain == Retain::checkpoint);
    const CallPlan plan = plan_of(o);
    const auto& freed = std::get<FreeOp>(plan.free_call.ops.front()).tensors;
    for (TensorId saved : {TensorId::query_scaled, TensorId::key_scaled, TensorId::probs, TensorId::dropout_mask,
                           TensorId::attn_dropped, TensorId::value_acc}) {
      CAPTURE(std::string(tensor_name(saved)));
      CHECK(std::count(freed.begin(), freed.end(), saved) == 1);  // the forward keeps none of it
    }
    CHECK(std::count(freed.begin(), freed.end(), TensorId::output) == 0);
    // The backward call: the recompute, up to dropout and no further, then the backward's own steps.
    const auto steps = staged(plan.backward_gpu);
    std::vector<Stage> order;
    for (const PlanStep* s : steps) order.push_back(s->stage);
    const auto at = [&](Stage s) { return std::find(order.begin(), order.end(), s) - order.begin(); };
    CHECK(at(Stage::upcast) < at(Stage::qk_gemm));
    CHECK(at(Stage::softmax) < at(Stage::dropout));
    CHECK(at(Stage::dropout) < at(Stage::free_call));
    CHECK(at(Stage::free_call) < at(Stage::dp_gemm));
    CHECK(std::count(order.begin(), order.end(), Stage::pv_gemm) == 0);  // PyTorch's early stop
    CHECK(std::count(order.begin(), order.end(), Stage::cast_output) == 0);
    const auto& transient = std::get<FreeOp>(steps[static_cast<size_t>(at(Stage::free_call))]->ops.front()).tensors;
    CHECK(transient == std::vector<TensorId>{TensorId::query_acc, TensorId::key_acc});
    const auto& end = std::get<FreeOp>(steps.back()->ops.front());
    CHECK(end.stage == Stage::free_backward);
    for (TensorId saved : {TensorId::query_scaled, TensorId::probs, TensorId::attn_dropped, TensorId::value_acc}) {
      CAPTURE(std::string(tensor_name(saved)));
      CHECK(std::count(end.tensors.begin(), end.tensors.end(), saved) == 1);
    }
    // The memory plan: the other layers keep their output and input gradients only; one layer's
    // recompute and backward at a time hold what a retaining call holds.
    const MemoryPlan ck = plan_memory(o.problem, o.settings, ContextMemory{});
    PathSettings retained = o.settings;
    retained.retain = Retain::autograd;
    const MemoryPlan ag = plan_memory(o.problem, retained, ContextMemory{});
    const int64_t q = o.problem.q_elems() * 2, kv = o.problem.kv_elems() * 2;  // bf16
    CHECK(ck.layer_kept_bytes == q + q + kv + kv);  // output, dQ, dK, dV
    CHECK(ck.layer_kept_bytes < ag.layer_kept_bytes);
    CHECK(ck.call_peak_bytes == ag.call_peak_bytes);
    CHECK(ck.path_bytes == ck.shared_bytes + 3 * ck.layer_run_bytes + 2 * ck.layer_kept_bytes + ag.call_peak_bytes);
    // Fix 5's recompute part is this retention.
    const RunOptions fixed = run_options({"-L", "64", "-S", "64", "--backward", "--fixes", "5:recompute"});
    CHECK(fixed.settings.retain == Retain::checkpoint);
  }

  TEST_CASE("the fixes' actions are recorded in the steps they act in") {
    const RunOptions one = run_options({"--scenario", "1", "--fix", "on", "--full", "-L", "64", "-S", "64"});
    const CallPlan with_fix1 = plan_of(one);
    for (const PlanStep* s : staged(with_fix1.forward_gpu)) {
      const bool gemm = s->stage == Stage::qk_gemm || s->stage == Stage::pv_gemm;
      const auto syncs = std::count_if(s->ops.begin(), s->ops.end(), [](const PlanOp& op) { return std::holds_alternative<HookSyncOp>(op); });
      CAPTURE(std::string(stage_name(s->stage)));
      CHECK(syncs == (gemm ? 2 : 0));  // fix 1's host-sync, before and after each GEMM
      if (gemm) CHECK(std::holds_alternative<HookSyncOp>(s->ops.front()));
    }
    const RunOptions two = run_options({"--scenario", "2", "--fix", "on", "-L", "64", "-S", "64"});
    const CallPlan with_fix2 = plan_of(two);
    for (const PlanStep* s : staged(with_fix2.forward_gpu)) {
      const bool prefetch = std::any_of(s->ops.begin(), s->ops.end(), [](const PlanOp& op) { return std::holds_alternative<PrefetchOp>(op); });
      CAPTURE(std::string(stage_name(s->stage)));
      CHECK(prefetch == (s->stage == Stage::softmax));
    }
  }

  TEST_CASE("repro --plan --json writes the plan: the tensors, how the calls repeat, every step and operation") {
    const test_util::TempDir dir("call_plan");
    test_util::ProgramOptions options;
    options.timeout_s = 60;
    const auto r = test_util::run_program({SDPA_REPRO_BINARY, "--plan", "-L", "64", "-S", "64", "--backward", "--retain",
                                           "checkpoint", "--alloc-timing", "per-call", "--layers", "2", "--json", dir / "plan.json"},
                                          options);
    REQUIRE(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(test_util::file_text(dir / "plan.json"));
    CHECK(j["meta"]["format"] == "sdpa-repro call plan");
    CHECK(j["run"]["layers"] == 2);
    CHECK(j["run"]["retain"] == "checkpoint");
    CHECK(j["run"]["backward"] == true);
    const RunOptions o = run_options({"-L", "64", "-S", "64", "--backward", "--retain", "checkpoint", "--alloc-timing", "per-call",
                                      "--layers", "2"});
    const CallPlan plan = plan_of(o);
    REQUIRE(j["calls"]["backward_gpu"].size() == staged(plan.backward_gpu).size() +
                                                    std::count_if(plan.backward_gpu.begin(), plan.backward_gpu.end(),
                                                                  [](const PlanStep& s) { return !s.staged && !s.ops.empty(); }));
    const nlohmann::json& gemm = j["calls"]["forward_gpu"][8];
    CHECK(gemm["stage"] == "qk_gemm");
    CHECK(gemm["ops"][0]["op"] == "gemm");
    CHECK(gemm["ops"][0]["call"]["transa"] == "T");
    CHECK(gemm["ops"][0]["a"]["tensor"] == "key_scaled");
    CHECK(j["tensors"].size() == path_tensors(o.problem, o.settings).size());
    CHECK(j["memory_plan"].is_object());
  }
}
