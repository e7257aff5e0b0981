// random_masks.h: the generators of the random boolean and additive masks, drawn from the same
// InputRng (random_inputs.h) after Q, K and V. Inlined verbatim into every generated reproducer
// with a mask input (repro/report/reproducer), so it includes nothing from the harness.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "random_inputs.h"

namespace sdpa {

// [slices, rows, cols], 1 = attend: about a quarter of the keys dropped, and in one row per slice
// all of them, so that _safe_softmax's fully masked rows (zeros, not NaN) are exercised.
inline std::vector<uint8_t> random_bool_mask(int64_t slices, int64_t rows, int64_t cols, InputRng& rng) {
  std::vector<uint8_t> mask(static_cast<size_t>(slices * rows * cols));
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t fully_masked_row = (s * 7 + 3) % rows;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const bool keep = r != fully_masked_row && rng.uniform() >= 0.25;
        mask[static_cast<size_t>((s * rows + r) * cols + c)] = keep ? 1 : 0;
      }
    }
  }
  return mask;
}

// [batches, rows, cols], 1 = attend: the key padding of a joint text+image attention layer. The
// first text_tokens keys are text; batch entry 0 attends to all keys, the later entries to only
// the first text_valid text keys (the others are padding) and to every image key. Every row of an
// entry has the same mask, as PyTorch broadcasts a [B, 1, 1, S] padding mask over L.
inline std::vector<uint8_t> text_padding_mask(int64_t batches, int64_t rows, int64_t cols, int64_t text_tokens,
                                              int64_t text_valid) {
  std::vector<uint8_t> mask(static_cast<size_t>(batches * rows * cols));
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const bool padding = b > 0 && c >= text_valid && c < text_tokens;
        mask[static_cast<size_t>((b * rows + r) * cols + c)] = padding ? 0 : 1;
      }
    }
  }
  return mask;
}

// n values added to the scores: uniform in [-2, 2] rounded by round(float) -> float, about 10%
// of them -inf.
template <typename Round> std::vector<float> random_additive_mask(int64_t n, InputRng& rng, Round round) {
  std::vector<float> mask(static_cast<size_t>(n));
  for (auto& x : mask) {
    const double u = rng.uniform();
    x = u < 0.1 ? -INFINITY : round(static_cast<float>(4.0 * rng.uniform() - 2.0));
  }
  return mask;
}

}  // namespace sdpa
