// generator.h: the single-file reproducer `repro_scenarioN.cu` that `repro report` writes.
//
// One CUDA program for exactly one configuration, depending only on the CUDA runtime and cuBLAS:
// the fix-off and fix-on runs' call plans (math_sdpa/call_plan.h) printed as CUDA, each step a line
// that calls the harness's own launcher, cuBLAS call or allocator, which are inlined from
// math_sdpa/ verbatim; so on the same GPU it computes what the harness computes, bit for bit, and
// it carries every condition of the run (the allocation, layers and what they keep, the backward
// pass, steps, fix 5's chunks, a ballast, a host load, the mapped weights' load). The fix is
// switchable by `#define FIX 0|1` or `--fix on|off`; its own timeout ("TIMEOUT: hung in <step>",
// exit 3) names the step a hang is in; it prints the result's l2, sum and element count (and with
// --backward dQ's, dK's and dV's) to set against the harness run's result_stats.
//
// Host-only: generating it needs no GPU (`repro report --no-run`).
#pragma once

#include <map>
#include <string>

#include "repro/cli/run_options.h"

namespace sdpa {

// Throws InputError (one line) for what the reproducer cannot express: captured inputs
// (--inputs), a configuration the scenario waives.
void check_reproducible(const RunOptions& options);

// `repro_scenario2.cu`; `nvcc -O2 -std=c++17 -arch=native repro_scenario2.cu -lcublas -o
// repro_scenario2`; `./repro_scenario2 --fix on`.
std::string reproducer_file_name(int scenario);
std::string reproducer_nvcc_command(int scenario, const std::string& arch = "native");
std::string reproducer_run_command(int scenario, bool fix_on);

// The program for the harness runs `fix_off` and `fix_on` (the same options but for the
// scenario's own fix), whose command lines go into its first comment. Throws InputError as
// check_reproducible does, and std::logic_error if the two differ in more than that fix.
std::string generate_reproducer(const RunOptions& fix_off, const RunOptions& fix_on, const std::string& command_off,
                                const std::string& command_on);

// The template (template.cu.in, embedded at build time) and its expansion. The language: a line
// `//@if a || !b` starts a section kept when any term holds, `//@else` and `//@endif` close it
// (sections nest); `//@inline PATH` pastes headers[PATH], a harness file, without its #pragma once
// and its #include "..." lines (its #include <...> stay, each system header's first only, in the
// template's text too); `@NAME@` is replaced by values[NAME], never
// rescanned; `//@//` starts a template comment. Directive lines never reach the output. Every
// flag a `//@if` names, every `@NAME@` and every inlined header must be given: a missing one is a
// bug in the generator and throws std::logic_error, so that no half-expanded program is ever
// written.
const char* reproducer_template();
std::string expand_template(const std::string& text, const std::map<std::string, bool>& flags,
                            const std::map<std::string, std::string>& values,
                            const std::map<std::string, std::string>& headers = {});

}  // namespace sdpa
