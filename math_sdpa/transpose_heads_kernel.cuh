// transpose_heads_kernel.cuh: the K^T copy (at::matmul's copy of a K^T view it cannot fold into a
// batch, and fix 3's). Inlined verbatim into every generated reproducer that copies K^T
// (repro/report/reproducer), so it includes nothing from the harness but head_strides.h, which
// the reproducer inlines before it.
#pragma once

#include <cstdint>

#include "head_strides.h"

namespace sdpa {

// dst [slices, head_dim, rows] from src [B, heads, rows, head_dim] laid out as `in`, through
// 32 x 32 tiles: read rows of K (E contiguous), write rows of K^T (S contiguous), so both sides
// are coalesced. The +1 column keeps the shared-memory columns in distinct banks. Slices (b, h)
// and E-tiles are grid-stride loops over z and y, so any B*H and E fit the grid's limits.
// Launched with blocks of (kTransposeTile, 8) threads.
constexpr int kTransposeTile = 32;
template <typename T>
__global__ void transpose_heads_kernel(const T* src, HeadStrides in, T* dst, int64_t slices, int64_t heads,
                                       int64_t rows, int64_t head_dim) {
  __shared__ T tile[kTransposeTile][kTransposeTile + 1];
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kTransposeTile;
  for (int64_t slice = blockIdx.z; slice < slices; slice += gridDim.z) {
    const T* x = src + (slice / heads) * in.batch + (slice % heads) * in.head;
    T* y = dst + slice * head_dim * rows;
    for (int64_t e0 = static_cast<int64_t>(blockIdx.y) * kTransposeTile; e0 < head_dim;
         e0 += static_cast<int64_t>(gridDim.y) * kTransposeTile) {
      for (int r = threadIdx.y; r < kTransposeTile; r += blockDim.y) {
        const int64_t s = s0 + r, e = e0 + threadIdx.x;
        if (s < rows && e < head_dim) tile[r][threadIdx.x] = x[s * in.row + e];
      }
      __syncthreads();
      for (int r = threadIdx.y; r < kTransposeTile; r += blockDim.y) {
        const int64_t e = e0 + r, s = s0 + threadIdx.x;
        if (s < rows && e < head_dim) y[e * rows + s] = tile[threadIdx.x][r];
      }
      __syncthreads();
    }
  }
}

}  // namespace sdpa
