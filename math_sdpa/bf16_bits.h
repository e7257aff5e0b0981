// bf16_bits.h: float <-> bf16 bits with round-to-nearest-even, as the device's __float2bfloat16_rn.
// Inlined verbatim into every generated bf16 reproducer (repro/report/reproducer), so it includes
// nothing from the harness: both programs then start from bit-identical inputs.
//
// Written out by hand (no x86 intrinsics) so that the inputs are the same on the users' aarch64
// DGX Spark and on x86_64 machines.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sdpa {

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep it a quiet NaN
  const uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace sdpa
