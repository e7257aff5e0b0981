// host_values.h: a tensor's values on the host: floats packed into the bytes of a dtype and
// back, a [B, H, S, E] tensor's values placed at other strides (scenario 3's K), and their
// stats. Inlined verbatim into every generated reproducer (repro/report/reproducer), after the
// headers it includes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bf16_bits.h"
#include "dtype.h"
#include "fp16_bits.h"
#include "head_strides.h"

namespace sdpa {

// `values` as the bytes of `type` (fp16 and bf16 rounded to nearest even), as the GPU holds them.
inline std::vector<uint8_t> packed_values(const std::vector<float>& values, DType type) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(type));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == DType::fp32) {
      std::memcpy(&bytes[i * 4], &values[i], 4);
    } else {
      const uint16_t h = type == DType::bf16 ? float_to_bf16_bits(values[i]) : float_to_fp16_bits(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

// The bytes of `type` as floats.
inline std::vector<float> unpacked_values(const std::vector<uint8_t>& bytes, DType type) {
  std::vector<float> out(bytes.size() / dtype_size(type));
  for (size_t i = 0; i < out.size(); ++i) {
    if (type == DType::fp32) {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = type == DType::bf16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
    }
  }
  return out;
}

// The values of a contiguous [B, H, S, E] tensor placed at `strides` in a buffer of as many
// elements, E contiguous: K as the [B, S, H, E] buffer that a Linear projection followed by
// .view(B, S, H, E).transpose(1, 2) leaves behind, the logical tensor unchanged.
inline std::vector<float> placed_at(const std::vector<float>& bhse, const HeadStrides& strides, int64_t batch, int64_t heads,
                                    int64_t rows, int64_t dim) {
  std::vector<float> out(bhse.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < rows; ++s)
        std::memcpy(&out[static_cast<size_t>(b * strides.batch + h * strides.head + s * strides.row)],
                    &bhse[static_cast<size_t>(((b * heads + h) * rows + s) * dim)], static_cast<size_t>(dim) * sizeof(float));
  return out;
}

// The l2 norm and the sum of the finite values (added in order, in double), and how many are
// not: a result's stats, as the run's JSON (result_stats) and the reproducer's lines give them.
struct FiniteStats {
  double l2 = 0, sum = 0;
  int64_t nonfinite = 0;
};
inline FiniteStats finite_stats(const std::vector<float>& values) {
  FiniteStats s;
  for (float x : values) {
    if (!std::isfinite(x)) {
      ++s.nonfinite;
      continue;
    }
    s.l2 += static_cast<double>(x) * x;
    s.sum += x;
  }
  s.l2 = std::sqrt(s.l2);
  return s;
}

}  // namespace sdpa
