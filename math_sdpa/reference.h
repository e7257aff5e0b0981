// reference.h: the float64 CPU reference of the Math SDPA path, and the one comparison helper.
//
// The reference computes the same function as the GPU path (same additive mask, same
// _safe_softmax rule for fully masked rows, same GQA head mapping, same Philox dropout
// decisions) in double precision, from the identical dtype-rounded inputs. Every correctness
// claim in the harness (tests, `repro --check`) is ‖out − ref‖ / ‖ref‖ against it.
//
// On the CPU, never on the GPU: its matrix products (Q·Kᵀ, P·V and the backward's) run through
// OpenBLAS's dgemm (cpu_blas.h), the rest (mask, softmax, dropout and their backward) in our own
// loops; blocks of rows on threads of its own, one a CPU (reference.cpp says how).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "problem.h"

namespace sdpa {

// The additive mask value at (b, h, l, s) for problem p: 0, a float, or -inf.
double mask_value(const SdpaProblem& p, const HostInputs& in, int64_t b, int64_t h, int64_t l, int64_t s);

// Output [B, Hq, L, E] in double.
std::vector<double> reference_sdpa(const SdpaProblem& p, const HostInputs& in);

// The tensors a call can end with (path_settings.h's result_tensor_name), for the scenarios
// that stop early: "scores" = scale·Q·Kᵀ before the mask [B, Hq, L, S]; "probs" = the safe
// softmax of the masked scores, before dropout [B, Hq, L, S]; "output" = reference_sdpa.
std::vector<double> reference_tensor(const SdpaProblem& p, const HostInputs& in, const std::string& tensor);

// The gradients of the output with respect to Q, K and V for dO = in.grad_out, in double: the
// backward of the same function (the mask's entries get none; a fully masked row passes none;
// dropout's kept elements pass dO's share scaled by 1/keep_prob, as native_dropout_backward does).
// dQ is [B, Hq, L, E]; dK and dV are [B, Hkv, S, E], each summed over its GQA group. The forward's
// output comes with them (computed on the way, as reference_sdpa computes it), or is empty with
// SDPA_REFERENCE_PRODUCTS=loops (reference_sdpa then computes it, as it did before OpenBLAS).
struct ReferenceGradients {
  std::vector<double> query, key, value;
  std::vector<double> output;
};
ReferenceGradients reference_gradients(const SdpaProblem& p, const HostInputs& in);

// What computes the products: OpenBLAS, or, for measuring what it saves only, the loops the
// reference had before it (reference_loops.h), chosen by the environment variable
// SDPA_REFERENCE_PRODUCTS=blas|loops (unset: blas), read once. Throws InputError on another value.
enum class ReferenceProducts { blas, loops };
ReferenceProducts reference_products();
const char* reference_products_name(ReferenceProducts products);

struct Comparison {
  double rel_error = 0;     // ‖out − ref‖₂ / ‖ref‖₂ (‖out − ref‖₂ when ref is all zeros)
  double max_abs_error = 0;
  int64_t nonfinite = 0;    // NaN or inf in `out`: never a pass
  bool passed(double tolerance) const { return nonfinite == 0 && rel_error <= tolerance; }
};

Comparison compare_to_reference(const std::vector<float>& out, const std::vector<double>& ref);

// The bound on the relative error for a dtype and precision mode (docs/PATH.md, "Accuracy").
double tolerance_for(DType dtype, Precision precision);
// The same for the gradients of --backward (docs/BACKWARD.md says how it is derived).
double gradient_tolerance_for(DType dtype, Precision precision);

}  // namespace sdpa
