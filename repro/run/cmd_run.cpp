// cmd_run.cpp: `repro [options]`, one configuration.
//
// Parses the command line and runs the path in a supervised child process (supervisor.h): the
// parent never calls CUDA and reports a hang (exit 3) or a crash (exit 5) with the hung stage,
// the flight recorder and the tail of the stage log. With --no-fork the path runs in this
// process under a watchdog thread. The summary table goes to stdout, errors as one line to
// stderr, --json is written atomically, and the exit code is the documented one
// (math_sdpa/errors.h, README "Exit codes").
#include <cstdlib>
#include <iostream>

#include "math_sdpa/context_load.h"
#include "math_sdpa/cuda_check.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/atomic_file.h"
#include "math_sdpa/memory_plan.h"
#include "repro/commands.h"
#include "repro/common/text.h"
#include "repro/cli/inputs.h"
#include "repro/cli/run_options.h"
#include "repro/run/run_text.h"
#include "repro/run/plan_json.h"
#include "repro/run/run_json.h"
#include "repro/run/run_result.h"
#include "repro/supervise/supervised_command.h"

namespace sdpa {

namespace {

// --plan: the memory plan against the memory this machine has now, printed; nothing allocated.
// Without a usable GPU the plan is printed all the same, its pools' availability unknown. With
// --json FILE the call plan (plan_json.h) and the memory plan are written there too.
int print_plan(const RunOptions& o) {
  MemoryFacts facts;
  std::string unknown;
  try {
    CUDA_CHECK(cudaSetDevice(0));
    facts = query_memory_facts();
  } catch (const std::exception& e) {
    unknown = one_line(e.what());
  }
  const ContextMemory context = context_memory(o.context, facts);
  PathSettings settings = o.settings;
  MemoryPlan plan = plan_memory(o.problem, settings, context);
  if (o.layers_fit) fit_layers(plan, settings, o.problem, context, facts);
  const std::vector<PoolUse> pools = plan_pools(plan, facts);
  std::cout << "# " << configuration_line(o) << "\n" << plan_text(plan, pools);
  if (!unknown.empty()) std::cout << "# no GPU to ask how much memory there is: " << unknown << "\n";
  const std::string refusal = plan_refusal(plan, pools);
  if (!refusal.empty()) {
    std::cout << "# a run would be refused (exit 8" << (o.allow_oversubscription ? "; --allow-oversubscription lets it run" : "")
              << "): " << refusal << "\n";
  }
  if (!o.json_path.empty()) {
    nlohmann::json j = run_plan_to_json(o);
    j["memory_plan"] = plan_to_json(plan, pools, unknown.empty() ? std::optional<MemoryFacts>(facts) : std::nullopt);
    write_file_atomic(o.json_path, j.dump(2) + "\n");
    std::cout << "# the call plan: " << o.json_path << "\n";
  }
  return kExitPass;
}

}  // namespace

int run_main(int argc, char** argv) {
  const ParseResult parsed = parse_command_line(argc, argv);
  if (!parsed.run) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  const RunOptions& options = parsed.options;
  // Before CUDA starts in this process or the child it forks: the driver reads it once.
  if (options.launch_blocking) setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
  for (const std::string& caveat : options.caveats) std::cerr << "repro: warning: " << caveat << "\n";
  for (const std::string& a : options.replay_approximations) std::cerr << "repro: warning: replay: " << a << "\n";
  if (!options.save_inputs_dir.empty()) {
    save_layer_inputs(options.save_inputs_dir, options.problem, options.settings.layers, options.inputs.get(),
                      options.settings.backward);
  }
  if (options.plan_only) return print_plan(options);
  SupervisedCommand<RunResult> command;
  command.name = "repro";
  command.run = &options;
  command.configuration = configuration_line(options);
  command.work = [&](int fd) { return run_repro(options, fd); };
  command.hang_result = [&](const SupervisedOutcome& o) { return watchdog_result(options, o); };
  command.waived_result = [&](const std::string& reason) { return waived_result(options, reason); };
  command.to_text = result_to_text;
  command.to_json = result_to_json;
  return run_supervised_command(command);
}

}  // namespace sdpa
