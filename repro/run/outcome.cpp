// outcome.cpp
#include "repro/run/outcome.h"

#include "math_sdpa/errors.h"
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

void save_and_check_result(Verdict& v, const RunOptions& o, ResultTensor tensor, const HostInputs& inputs,
                           const std::vector<float>& result) {
  const SdpaProblem& p = o.problem;
  if (!o.save_output_path.empty()) {
    const int64_t last = tensor == ResultTensor::output ? p.head_dim : p.kv_len;
    write_npy_float32(o.save_output_path, {p.batch, p.q_heads, p.q_len, last}, result.data());
  }
  if (o.check) {
    v.checked = true;
    v.tolerance = tolerance_for(p.dtype, p.precision);
    v.comparison = compare_to_reference(result, reference_tensor(p, inputs, result_tensor_name(tensor)));
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
