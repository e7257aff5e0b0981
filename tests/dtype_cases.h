// dtype_cases.h: the dtypes and precisions the GPU tests check the kernels, the path and the
// scenarios in (test_gpu_kernels.cpp, test_gpu_path.cpp, test_gpu_scenarios.cpp): every one the
// harness offers.
#pragma once

#include "math_sdpa/dtype.h"
#include "math_sdpa/problem.h"

namespace test_util {

inline constexpr sdpa::DType kDTypes[] = {sdpa::DType::bf16, sdpa::DType::fp16, sdpa::DType::fp32};
inline constexpr sdpa::Precision kPrecisions[] = {sdpa::Precision::upcast, sdpa::Precision::native};

}  // namespace test_util
