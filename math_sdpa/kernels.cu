// kernels.cu: elementwise, mask, softmax and dropout kernels of the Math SDPA path.
//
// Written for clarity and correctness first: grid-stride loops with 64-bit indices (scores of
// the 4608-token image layer have 5e8 elements), fp32 arithmetic, one rounding per store.
#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>

#include "cuda_check.h"
#include "philox.h"

namespace sdpa {

namespace {

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <typename T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) with the device element type of `t`.
template <typename F> void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::fp32: f(TypeTag<float>{}); break;
    case DType::fp16: f(TypeTag<__half>{}); break;
    case DType::bf16: f(TypeTag<__nv_bfloat16>{}); break;
  }
}

constexpr int kThreads = 256;

// Enough blocks to fill the GPU several times over; grid-stride loops cover the rest.
int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535LL * 8)));
}

#define GRID_STRIDE_LOOP(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename Src, typename Dst>
__global__ void convert_scale_kernel(const Src* src, Dst* dst, int64_t n, float factor) {
  GRID_STRIDE_LOOP(i, n) store(dst, i, load(src, i) * factor);
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, float value) {
  GRID_STRIDE_LOOP(i, n) store(dst, i, value);
}

template <typename T>
__global__ void repeat_heads_kernel(const T* src, HeadStrides in, T* dst, int64_t batch, int64_t kv_heads,
                                    int64_t group, int64_t rows, int64_t head_dim) {
  const int64_t n = batch * kv_heads * group * rows * head_dim;
  GRID_STRIDE_LOOP(i, n) {
    const int64_t e = i % head_dim;
    const int64_t s = (i / head_dim) % rows;
    const int64_t out_head = (i / (head_dim * rows)) % (kv_heads * group);
    const int64_t b = i / (head_dim * rows * kv_heads * group);
    dst[i] = src[b * in.batch + (out_head / group) * in.head + s * in.row + e];
  }
}

// 32 x 32 tiles: read rows of K (E contiguous), write rows of K^T (S contiguous). The +1
// column keeps the shared-memory columns in distinct banks. Slices (b, h) and E-tiles are
// grid-stride loops over z and y, so any B*H and E fit the grid's limits.
constexpr int kTile = 32;
template <typename T>
__global__ void transpose_heads_kernel(const T* src, HeadStrides in, T* dst, int64_t slices, int64_t heads,
                                       int64_t rows, int64_t head_dim) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t slice = blockIdx.z; slice < slices; slice += gridDim.z) {
    const T* x = src + (slice / heads) * in.batch + (slice % heads) * in.head;
    T* y = dst + slice * head_dim * rows;
    for (int64_t e0 = static_cast<int64_t>(blockIdx.y) * kTile; e0 < head_dim; e0 += static_cast<int64_t>(gridDim.y) * kTile) {
      for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
        const int64_t s = s0 + r, e = e0 + threadIdx.x;
        if (s < rows && e < head_dim) tile[r][threadIdx.x] = x[s * in.row + e];
      }
      __syncthreads();
      for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
        const int64_t e = e0 + r, s = s0 + threadIdx.x;
        if (s < rows && e < head_dim) y[e * rows + s] = tile[threadIdx.x][r];
      }
      __syncthreads();
    }
  }
}

__global__ void touch_pages_kernel(const unsigned char* data, size_t pages, size_t bytes, unsigned long long* sink) {
  unsigned long long sum = 0;
  for (size_t page = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; page < pages;
       page += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t offset = page * kTouchPageBytes;
    sum += *reinterpret_cast<const volatile unsigned char*>(data + (offset < bytes ? offset : bytes - 1));
  }
  if (sum) atomicAdd(sink, sum);
}

template <typename T>
__global__ void build_additive_mask_kernel(const uint8_t* bool_mask, T* dst, int64_t slices, int64_t L, int64_t S) {
  GRID_STRIDE_LOOP(i, slices * L * S) {
    const bool keep = bool_mask ? bool_mask[i] != 0 : (i % S) <= (i / S) % L;
    store(dst, i, keep ? 0.0f : -INFINITY);
  }
}

template <typename T, typename M>
__global__ void add_mask_kernel(T* scores, const M* mask, int64_t B, int64_t H, int64_t L, int64_t S,
                                bool per_batch, bool per_head) {
  GRID_STRIDE_LOOP(i, B * H * L * S) {
    const int64_t ls = i % (L * S);
    const int64_t h = (i / (L * S)) % H;
    const int64_t b = i / (L * S * H);
    const int64_t slice = (per_batch ? b : 0) * (per_head ? H : 1) + (per_head ? h : 0);
    store(scores, i, load(scores, i) + load(mask, slice * L * S + ls));
  }
}

// Online (max, sum) pair for softmax: merging keeps sum relative to the running max.
struct MaxSum {
  float max, sum;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};  // both empty or all -inf so far
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// One block per row. Pass 1: each thread folds its strided elements into (max, sum); the block
// merges them. Pass 2: writes exp(x - max) / sum. A NaN input makes the row NaN, as in PyTorch.
template <typename T>
__global__ void safe_softmax_kernel(const T* in, T* out, int64_t cols) {
  const int64_t row = blockIdx.x;
  const T* x = in + row * cols;
  T* y = out + row * cols;
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = load(x, c);
    if (isnan(v)) {
      acc = {NAN, NAN};
      break;
    }
    // One exp per element: rescale the running sum only when the max moves.
    if (v > acc.max) {
      acc.sum = acc.sum * expf(acc.max - v) + 1.0f;
      acc.max = v;
    } else if (v != -INFINITY) {
      acc.sum += expf(v - acc.max);
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, acc.max, offset), __shfl_xor_sync(0xffffffffu, acc.sum, offset)};
    acc = isnan(acc.max) || isnan(other.max) ? MaxSum{NAN, NAN} : merge(acc, other);
  }
  __shared__ MaxSum warp_acc[32];
  __shared__ MaxSum row_acc;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) warp_acc[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum total = warp_acc[0];
    for (int w = 1; w < warps; ++w) {
      total = isnan(total.max) || isnan(warp_acc[w].max) ? MaxSum{NAN, NAN} : merge(total, warp_acc[w]);
    }
    row_acc = total;
  }
  __syncthreads();
  const MaxSum total = row_acc;
  const float inv_sum = 1.0f / total.sum;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    // _safe_softmax: a fully masked row (max == -inf) is all zeros, not 0/0.
    store(y, c, total.max == -INFINITY ? 0.0f : expf(load(x, c) - total.max) * inv_sum);
  }
}

template <typename T>
__global__ void dropout_kernel(T* data, int64_t n, uint64_t seed, uint64_t offset, float keep_prob) {
  const float inv_keep = 1.0f / keep_prob;
  GRID_STRIDE_LOOP(i, n) {
    const bool keep = dropout_keep(seed, offset, static_cast<uint64_t>(i), keep_prob);
    store(data, i, keep ? load(data, i) * inv_keep : 0.0f);
  }
}

__device__ void atomic_min_float(float* addr, float v) {
  int* a = reinterpret_cast<int*>(addr);
  int old = *a;
  while (v < __int_as_float(old)) {
    const int seen = atomicCAS(a, old, __float_as_int(v));
    if (seen == old) break;
    old = seen;
  }
}
__device__ void atomic_max_float(float* addr, float v) {
  int* a = reinterpret_cast<int*>(addr);
  int old = *a;
  while (v > __int_as_float(old)) {
    const int seen = atomicCAS(a, old, __float_as_int(v));
    if (seen == old) break;
    old = seen;
  }
}

__global__ void reset_stats_kernel(TensorStats* stats) {
  *stats = TensorStats{INFINITY, -INFINITY, 0ull, 0ull, 0.0};
}

// Each thread folds its elements, then one atomic update per thread: a diagnostic, not a hot path.
template <typename T>
__global__ void tensor_stats_kernel(const T* data, int64_t n, TensorStats* stats) {
  float lo = INFINITY, hi = -INFINITY;
  unsigned long long nans = 0, infs = 0;
  double sum = 0;
  GRID_STRIDE_LOOP(i, n) {
    const float v = load(data, i);
    if (isnan(v)) {
      ++nans;
    } else if (isinf(v)) {
      ++infs;
    } else {
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
      sum += v;
    }
  }
  atomic_min_float(&stats->min, lo);
  atomic_max_float(&stats->max, hi);
  if (nans) atomicAdd(&stats->nan_count, nans);
  if (infs) atomicAdd(&stats->inf_count, infs);
  atomicAdd(&stats->sum, sum);
}

}  // namespace

void launch_tensor_stats(const void* data, DType type, int64_t n, TensorStats* stats, cudaStream_t stream) {
  reset_stats_kernel<<<1, 1, 0, stream>>>(stats);
  CUDA_CHECK_LAUNCH();
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    tensor_stats_kernel<<<std::min(grid_for(n), 1024), kThreads, 0, stream>>>(static_cast<const T*>(data), n, stats);
  });
  CUDA_CHECK_LAUNCH();
}

void launch_convert_scale(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, float factor,
                          cudaStream_t stream) {
  dispatch(src_type, [&](auto src_tag) {
    using Src = typename decltype(src_tag)::type;
    dispatch(dst_type, [&](auto dst_tag) {
      using Dst = typename decltype(dst_tag)::type;
      convert_scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const Src*>(src),
                                                                 static_cast<Dst*>(dst), n, factor);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_fill(void* dst, DType type, int64_t n, float value, cudaStream_t stream) {
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst), n, value);
  });
  CUDA_CHECK_LAUNCH();
}

void launch_repeat_heads(const void* src, HeadStrides src_strides, void* dst, DType type, int64_t batch,
                         int64_t kv_heads, int64_t group, int64_t rows, int64_t head_dim, cudaStream_t stream) {
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    repeat_heads_kernel<<<grid_for(batch * kv_heads * group * rows * head_dim), kThreads, 0, stream>>>(
        static_cast<const T*>(src), src_strides, static_cast<T*>(dst), batch, kv_heads, group, rows, head_dim);
  });
  CUDA_CHECK_LAUNCH();
}

void launch_transpose_heads(const void* src, HeadStrides src_strides, void* dst, DType type, int64_t batch,
                            int64_t heads, int64_t rows, int64_t head_dim, cudaStream_t stream) {
  const int64_t slices = batch * heads;
  const dim3 grid(static_cast<unsigned>((rows + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>((head_dim + kTile - 1) / kTile, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(slices, 65535)));
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    transpose_heads_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(static_cast<const T*>(src), src_strides,
                                                               static_cast<T*>(dst), slices, heads, rows, head_dim);
  });
  CUDA_CHECK_LAUNCH();
}

void launch_touch_pages(const void* data, size_t bytes, unsigned long long* sink, cudaStream_t stream) {
  if (bytes == 0) return;
  const size_t pages = (bytes + kTouchPageBytes - 1) / kTouchPageBytes;
  touch_pages_kernel<<<grid_for(static_cast<int64_t>(pages)), kThreads, 0, stream>>>(
      static_cast<const unsigned char*>(data), pages, bytes, sink);
  CUDA_CHECK_LAUNCH();
}

void launch_build_additive_mask(const uint8_t* bool_mask, void* dst, DType type, int64_t slices, int64_t L,
                                int64_t S, cudaStream_t stream) {
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    build_additive_mask_kernel<<<grid_for(slices * L * S), kThreads, 0, stream>>>(bool_mask, static_cast<T*>(dst),
                                                                                 slices, L, S);
  });
  CUDA_CHECK_LAUNCH();
}

void launch_add_mask(void* scores, DType scores_type, const void* mask, DType mask_type, int64_t B, int64_t H,
                     int64_t L, int64_t S, bool mask_per_batch, bool mask_per_head, cudaStream_t stream) {
  dispatch(scores_type, [&](auto scores_tag) {
    using T = typename decltype(scores_tag)::type;
    dispatch(mask_type, [&](auto mask_tag) {
      using M = typename decltype(mask_tag)::type;
      add_mask_kernel<<<grid_for(B * H * L * S), kThreads, 0, stream>>>(
          static_cast<T*>(scores), static_cast<const M*>(mask), B, H, L, S, mask_per_batch, mask_per_head);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_safe_softmax(const void* in, void* out, DType type, int64_t rows, int64_t cols, cudaStream_t stream) {
  // Short rows get one warp, long rows a full block.
  const int threads = cols <= 32 ? 32 : cols <= 128 ? 128 : kThreads;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // One block per row; rows beyond the grid's x limit are split into several launches.
    const int64_t max_grid = 2147483647LL;
    for (int64_t first = 0; first < rows; first += max_grid) {
      const int64_t count = std::min(max_grid, rows - first);
      safe_softmax_kernel<<<static_cast<unsigned>(count), threads, 0, stream>>>(
          static_cast<const T*>(in) + first * cols, static_cast<T*>(out) + first * cols, cols);
    }
  });
  CUDA_CHECK_LAUNCH();
}

void launch_dropout(void* data, DType type, int64_t n, uint64_t seed, uint64_t offset, float keep_prob,
                    cudaStream_t stream) {
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, seed, offset, keep_prob);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sdpa
