// outcome.cpp
#include "repro/run/outcome.h"

#include <chrono>
#include <cstdio>
#include <ctime>

#include "math_sdpa/cpu_blas.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/host_parallel.h"
#include "math_sdpa/name_table.h"
#include "math_sdpa/npy.h"

namespace sdpa {

namespace {

const NameTable<Outcome> kOutcomes{"outcome",
                                   {{Outcome::pass, "pass"},
                                    {Outcome::waived, "waived"},
                                    {Outcome::mismatch, "mismatch"},
                                    {Outcome::leak, "leak"},
                                    {Outcome::hang, "hang"},
                                    {Outcome::timeout, "timeout"},
                                    {Outcome::crash, "crash"},
                                    {Outcome::cuda_error, "cuda_error"},
                                    {Outcome::usage, "usage"},
                                    {Outcome::no_gpu, "no_gpu"},
                                    {Outcome::refused, "refused"},
                                    {Outcome::stalled, "stalled"},
                                    {Outcome::planned, "planned"},
                                    {Outcome::no_result, "no_result"}}};

}  // namespace

const char* outcome_name(Outcome o) { return kOutcomes.name(o); }
Outcome parse_outcome(const std::string& s) { return kOutcomes.parse(s); }
std::optional<Outcome> find_outcome(const std::string& s) { return kOutcomes.find(s); }

std::optional<int> outcome_exit_code(Outcome o) {
  switch (o) {
    case Outcome::pass: return kExitPass;
    case Outcome::mismatch:
    case Outcome::leak: return kExitMismatch;
    case Outcome::usage: return kExitUsage;
    case Outcome::hang: return kExitHang;
    case Outcome::cuda_error: return kExitCudaError;
    case Outcome::crash: return kExitCrash;
    case Outcome::waived: return kExitWaived;
    case Outcome::no_gpu: return kExitNoGpu;
    case Outcome::refused: return kExitRefused;
    case Outcome::stalled: return kExitStalled;
    case Outcome::timeout:
    case Outcome::planned:
    case Outcome::no_result: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<Outcome> outcome_of_exit_code(int code) {
  // The first entry wins, so the shared code 1 reads as mismatch.
  for (const auto& entry : kOutcomes.entries) {
    if (outcome_exit_code(entry.first) == code) return entry.first;
  }
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& out, Outcome o) { return out << outcome_name(o); }

void Verdict::fail(Outcome o, const std::string& message) {
  outcome = o;
  exit_code = outcome_exit_code(o).value_or(kExitCrash);
  error = message;
}

void prepare_check(Verdict& v) {
  CheckCost& c = v.check_cost;
  c.products = reference_products();
  c.threads = host_cpus();
  c.blas = c.products == ReferenceProducts::blas ? cpu_blas_description() : "";
}

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double process_cpu_seconds() {
  timespec t{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

CheckCostMeter::CheckCostMeter(CheckCost& cost)
    : cost_(cost), wall_start_(steady_seconds()), cpu_start_(process_cpu_seconds()) {}

CheckCostMeter::~CheckCostMeter() {
  cost_.wall_seconds += steady_seconds() - wall_start_;
  cost_.cpu_seconds += process_cpu_seconds() - cpu_start_;
}

void CheckCost::add_ahead(double compute_seconds, double waited_seconds, double cpu) {
  wall_seconds += waited_seconds;
  overlapped_seconds += std::max(0.0, compute_seconds - waited_seconds);
  cpu_seconds += cpu;
}

std::string check_cost_line(const Verdict& v) {
  const CheckCost& c = v.check_cost;
  char line[512];
  std::snprintf(line, sizeof line, "# check cost: %.2f s, CPU %.1f s, %d threads, %s", c.wall_seconds, c.cpu_seconds,
                c.threads, c.products == ReferenceProducts::blas ? c.blas.c_str() : "the loops, SDPA_REFERENCE_PRODUCTS=loops");
  std::string s = line;
  if (c.layers_ahead > 0) {
    std::snprintf(line, sizeof line, "; %.2f s more during the run (%d layer%s, computed beside it)", c.overlapped_seconds,
                  c.layers_ahead, c.layers_ahead == 1 ? "" : "s");
    s += line;
  } else if (!c.after_run_because.empty()) {
    s += "; all after the last call: " + c.after_run_because;
  }
  std::snprintf(line, sizeof line, "; the whole run %.2f s", v.wall_seconds);
  s += line;
  if (v.cpu_seconds) {
    std::snprintf(line, sizeof line, ", CPU %.1f s", *v.cpu_seconds);
    s += line;
  }
  return s + "\n";
}

void save_and_check_result(Verdict& v, const RunOptions& o, ResultTensor tensor, const HostInputs& inputs,
                           const std::vector<float>& result, const std::vector<double>* reference) {
  const SdpaProblem& p = o.problem;
  if (!o.save_output_path.empty()) {
    const int64_t last = tensor == ResultTensor::output ? p.head_dim : p.kv_len;
    write_npy_float32(o.save_output_path, {p.batch, p.q_heads, p.q_len, last}, result.data());
  }
  if (o.check) {
    const CheckCostMeter meter(v.check_cost);
    v.checked = true;
    v.tolerance = tolerance_for(p.dtype, p.precision);
    const std::vector<double> computed = reference ? std::vector<double>() : reference_tensor(p, inputs, result_tensor_name(tensor));
    v.comparison = compare_to_reference(result, reference ? *reference : computed);
  }
}

void judge_outputs(Verdict& v, const std::string& where) {
  if (v.nonfinite_outputs == 0 && !(v.checked && !v.comparison.passed(v.tolerance))) return;
  v.fail(Outcome::mismatch,
         v.nonfinite_outputs > 0
             ? std::to_string(v.nonfinite_outputs) + " non-finite values in the " + where
             : "relative error " + std::to_string(v.comparison.rel_error) + " exceeds " + std::to_string(v.tolerance));
}

}  // namespace sdpa
