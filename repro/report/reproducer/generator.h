// generator.h: the single-file reproducer `repro_scenarioN.cu` that `repro report` writes.
//
// One CUDA program for exactly one scenario and one set of parameters, depending only on the
// CUDA runtime and cuBLAS: the path's stages, the scenario's conditions, its fix switchable by
// `#define FIX 0|1` or `--fix on|off`, its own error checks naming file and line, its own
// timeout ("TIMEOUT: hung in <step>", exit 3, instead of hanging forever), the harness's input
// generator and a float64 reference, and a result line (rel_error, l2, sum, elements) to set
// against the harness run it came from; with --backward, the call's backward call too, and a line
// for each of dQ, dK and dV. It is cut from one template (template.cu.in) with only
// the sections the configuration needs, so an NVIDIA engineer reads no dead code; what it shares
// with the harness verbatim (input generator, dtype rounding, Philox, two kernels) is inlined
// from the harness's own headers, so the two cannot drift apart.
//
// Host-only: generating it needs no GPU (`repro report --no-run`).
#pragma once

#include <map>
#include <string>

#include "repro/cli/run_options.h"

namespace sdpa {

// Throws InputError (one line) for what the reproducer cannot express: captured inputs
// (--inputs), scenario 0 (no fix to switch).
void check_reproducible(const RunOptions& options);

// Whether the reproducer of a run carries its backward call (--backward): each of its calls is
// then followed by the backward call for the harness's seeded dO, and dQ, dK and dV are checked
// too. A report's one call keeps the flag (cmd_report.cpp's one_call).
bool reproducer_runs_backward(const RunOptions& options);

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
// (sections nest); `//@inline PATH` pastes headers[PATH], a harness header, without its
// #pragma once, #include and namespace sdpa lines; `@NAME@` is replaced by values[NAME], never
// rescanned; `//@//` starts a template comment. Directive lines never reach the output. Every
// flag a `//@if` names, every `@NAME@` and every inlined header must be given: a missing one is a
// bug in the generator and throws std::logic_error, so that no half-expanded program is ever
// written.
const char* reproducer_template();
std::string expand_template(const std::string& text, const std::map<std::string, bool>& flags,
                            const std::map<std::string, std::string>& values,
                            const std::map<std::string, std::string>& headers = {});

}  // namespace sdpa
