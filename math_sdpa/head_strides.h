// head_strides.h: where an element of a [B, H, S, E] tensor lives, for any layout of K.
// Inlined verbatim into every generated reproducer that needs it (repro/report/reproducer), so it
// includes nothing from the harness.
#pragma once

#include <cstdint>

namespace sdpa {

// Element (b, h, s, e) lives at b*batch + h*head + s*row + e (E is always contiguous).
// Contiguous [B, H, S, E] is {H*S*E, S*E, E}; a key viewed from a [B, S, H, E] buffer
// (scenario 3) is {S*H*E, E, H*E}.
struct HeadStrides {
  int64_t batch, head, row;
};

inline HeadStrides contiguous_bhse(int64_t heads, int64_t rows, int64_t head_dim) {
  return {heads * rows * head_dim, rows * head_dim, head_dim};
}

}  // namespace sdpa
