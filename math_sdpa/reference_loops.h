// reference_loops.h: the float64 reference's first form, with our own scalar loops for the
// matrix products (rows on every CPU, a dot product at a time), kept as the reference
// of the reference (tests/test_reference.cpp compares reference.h's products through OpenBLAS
// with these) and to measure what OpenBLAS saves: SDPA_REFERENCE_PRODUCTS=loops makes
// reference.h's functions use these (tools/device_check_cost.sh; for measurement only).
#pragma once

#include <string>
#include <vector>

#include "math_sdpa/problem.h"
#include "math_sdpa/reference.h"

namespace sdpa::loops {

// reference_tensor and reference_gradients of reference.h, computed as they were before OpenBLAS.
std::vector<double> reference_tensor(const SdpaProblem& p, const HostInputs& in, const std::string& tensor);
ReferenceGradients reference_gradients(const SdpaProblem& p, const HostInputs& in);

}  // namespace sdpa::loops
