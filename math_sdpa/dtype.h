// dtype.h: the three element types of the path and exact host-side conversions for them.
//
// The CPU reference and the input generator work on float values that are already rounded to
// the run's dtype, so the GPU and the reference start from bit-identical inputs. The rounding
// is round-to-nearest-even, the same as the device intrinsics __float2bfloat16 and __float2half
// (bf16_bits.h and fp16_bits.h, which the generated reproducer shares).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "bf16_bits.h"
#include "fp16_bits.h"

namespace sdpa {

enum class DType { bf16, fp16, fp32 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp32: return "fp32";
  }
  return "?";
}

// The name PyTorch prints for the dtype, used in the stage log so lines match the original log's.
inline const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bfloat16";
    case DType::fp16: return "float16";
    case DType::fp32: return "float32";
  }
  return "?";
}

// What PyTorch's C++ prints for a tensor's dtype() (caffe2::TypeMeta's operator<<: the C++ type's
// name), as the debug instrumentation's macros streamed it.
inline const char* type_meta_name(DType t) {
  switch (t) {
    case DType::bf16: return "c10::BFloat16";
    case DType::fp16: return "c10::Half";
    case DType::fp32: return "float";
  }
  return "?";
}

inline size_t dtype_size(DType t) { return t == DType::fp32 ? 4 : 2; }

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds a float to the nearest value representable in `t`.
inline float round_to_dtype(float f, DType t) {
  switch (t) {
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(f));
    case DType::fp16: return fp16_bits_to_float(float_to_fp16_bits(f));
    case DType::fp32: return f;
  }
  return f;
}

}  // namespace sdpa
