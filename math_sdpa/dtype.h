// dtype.h: the three element types of the path and exact host-side conversions for them.
//
// The CPU reference and the input generator work on float values that are already rounded to
// the run's dtype, so the GPU and the reference start from bit-identical inputs. The rounding
// here is round-to-nearest-even, the same as the device intrinsics __float2bfloat16 and
// __float2half, and it is written out by hand (no F16C or other x86 intrinsics) so that the
// harness behaves the same on the users' aarch64 DGX Spark and on our x86_64 machines.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

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

// The name PyTorch prints for the dtype, used in the stage log so lines match the seed's.
inline const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bfloat16";
    case DType::fp16: return "float16";
    case DType::fp32: return "float32";
  }
  return "?";
}

inline size_t dtype_size(DType t) { return t == DType::fp32 ? 4 : 2; }

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u = float_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep it a quiet NaN
  uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
inline float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_fp16_bits(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t abs = u & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return sign | (abs > 0x7F800000 ? 0x7E00 : 0x7C00);  // NaN / inf
  if (abs >= 0x477FF000) return sign | 0x7C00;  // rounds past 65504: overflow to inf
  if (abs < 0x33000001) return sign;            // below half the smallest subnormal: zero
  int exp = static_cast<int>(abs >> 23);
  uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
  int shift;
  uint32_t base;
  if (exp < 113) {  // result is subnormal in fp16
    shift = 126 - exp;  // 13 + (113 - exp)
    base = 0;
  } else {
    shift = 13;
    base = static_cast<uint32_t>(exp - 112) << 10;
    mant &= 0x7FFFFF;
  }
  uint32_t half_mant = mant >> shift;
  uint32_t rest = mant & ((1u << shift) - 1);
  uint32_t halfway = 1u << (shift - 1);
  uint32_t result = base + half_mant;
  if (rest > halfway || (rest == halfway && (half_mant & 1))) ++result;  // carries into exp are right
  return static_cast<uint16_t>(sign | result);
}

inline float fp16_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000 | (mant << 13));
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
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
