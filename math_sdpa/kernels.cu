// kernels.cu: elementwise, mask, softmax and dropout kernels of the Math SDPA path.
//
// Every kernel here is memory-bound: the floor is the bytes it must move over the GPU's copy
// bandwidth (notes/PERF.md has the numbers). So each one moves its bytes once, 16 bytes per
// access where the pointers and sizes allow (Vec below; launchers fall back to narrower vectors
// or single elements, and odd tails are done element by element), with 64-bit indices (scores of
// the 4608-token image layer have 5e8 elements). Arithmetic is fp32 and each stored value is
// rounded once. Reductions run in a fixed order, so every call gives bitwise the same result
// (tensor_stats, the --log values diagnostic, excepted: it adds with atomics).
//
// Softmax (the one kernel whose speed matters most: it reads and writes the whole score tensor)
// keeps each row in registers, so it reads every score once and writes every probability once;
// rows too long for registers take a two-pass fallback. Warp per row or block per row as PyTorch
// chooses (plan_safe_softmax in kernels.h says which runs, and why).
#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "philox.h"
#include "touch_pages_kernel.cuh"
#include "transpose_heads_kernel.cuh"

namespace sdpa {

namespace {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// N consecutive elements moved by one instruction: the alignment makes the compiler emit a single
// ld/st.global.v2/v4 (two for the 32-byte fp32 side of a conversion from a 16-bit type).
template <typename T, int N> struct alignas(sizeof(T) * N) Vec {
  T v[N];
};
template <typename T, int N> __device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <typename T, int N> __device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& x) {
  *reinterpret_cast<Vec<T, N>*>(p) = x;
}

template <typename T> struct TypeTag { using type = T; };
template <int N> using Width = std::integral_constant<int, N>;

// Calls f(TypeTag<T>{}) with the device element type of `t`.
template <typename F> void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::fp32: f(TypeTag<float>{}); break;
    case DType::fp16: f(TypeTag<__half>{}); break;
    case DType::bf16: f(TypeTag<__nv_bfloat16>{}); break;
  }
}

// Elements in 16 bytes of the narrower of two element types: the vector width an elementwise
// kernel over them uses when everything is aligned (the wider side then moves 32 bytes).
template <typename A, typename B = A> constexpr int max_width() {
  return 16 / static_cast<int>(sizeof(A) < sizeof(B) ? sizeof(A) : sizeof(B));
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Calls f(Width<W>{}) with W = Max when `vectorise`, else W = 1: two instantiations per kernel,
// the fast one and the element-by-element one for misaligned pointers.
template <int Max, typename F> void dispatch_width(bool vectorise, F&& f) {
  if (vectorise) {
    f(Width<Max>{});
  } else {
    f(Width<1>{});
  }
}

constexpr int kThreads = 256;
static_assert(kThreads == kSoftmaxFallbackThreads, "softmax_plan.h describes the fallback block");

// Enough blocks for one vector per thread, capped (the loops are grid-stride); one 16-byte
// access per thread per iteration with a full grid keeps ~32 KB in flight per SM, above what
// Hopper needs to reach its copy bandwidth.
int grid_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535LL * 8)));
}

#define GRID_STRIDE_LOOP(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The loop of every elementwise kernel: body(first, Width<W>{}) handles elements
// [first, first + W). The n / W whole vectors go grid-stride; the n % W tail elements, one each,
// to the first threads of the grid.
template <int W, typename Body> __device__ __forceinline__ void vector_loop(int64_t n, Body&& body) {
  const int64_t vectors = n / W;
  GRID_STRIDE_LOOP(v, vectors) body(v * W, Width<W>{});
  if constexpr (W > 1) {
    const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (tid < n % W) body(vectors * W + tid, Width<1>{});
  }
}

// Up to kMaxConvertJobs tensors, one per blockIdx.y, passed by value.
struct ConvertJobs {
  const void* src[kMaxConvertJobs];
  void* dst[kMaxConvertJobs];
  int64_t n[kMaxConvertJobs];
};

// jobs.x[j] with constant indices only: a run-time index into a kernel parameter would copy the
// struct to local memory.
template <typename X> __device__ __forceinline__ X pick(const X (&x)[kMaxConvertJobs], int j) {
  static_assert(kMaxConvertJobs == 4, "pick() selects among four");
  return j == 0 ? x[0] : j == 1 ? x[1] : j == 2 ? x[2] : x[3];
}

template <typename Src, typename Dst, int W>
__global__ void __launch_bounds__(kThreads) convert_scale_kernel(ConvertJobs jobs, float factor) {
  const int j = blockIdx.y;
  const Src* src = static_cast<const Src*>(pick(jobs.src, j));
  Dst* dst = static_cast<Dst*>(pick(jobs.dst, j));
  vector_loop<W>(pick(jobs.n, j), [&](int64_t i, auto width) {
    constexpr int V = decltype(width)::value;
    const Vec<Src, V> x = load_vec<Src, V>(src + i);
    Vec<Dst, V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = from_float<Dst>(to_float(x.v[k]) * factor);
    store_vec<Dst, V>(dst + i, y);
  });
}

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) fill_kernel(T* dst, int64_t n, float value) {
  vector_loop<W>(n, [&](int64_t i, auto width) {
    constexpr int V = decltype(width)::value;
    Vec<T, V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = from_float<T>(value);
    store_vec<T, V>(dst + i, y);
  });
}

// Vectors run along E (vectorised only when E and every stride are multiples of W, so a vector
// never leaves its row).
template <typename T, int W>
__global__ void __launch_bounds__(kThreads) repeat_heads_kernel(const T* src, HeadStrides in, T* dst, int64_t batch,
                                                                int64_t kv_heads, int64_t group, int64_t rows,
                                                                int64_t head_dim) {
  const int64_t n = batch * kv_heads * group * rows * head_dim;
  vector_loop<W>(n, [&](int64_t i, auto width) {
    constexpr int V = decltype(width)::value;
    // Three 64-bit divisions (each a called subroutine on the GPU) instead of seven.
    const int64_t row_index = i / head_dim, e = i - row_index * head_dim;
    const int64_t slice = row_index / rows, s = row_index - slice * rows;
    const int64_t b = slice / (kv_heads * group), out_head = slice - b * (kv_heads * group);
    store_vec<T, V>(dst + i, load_vec<T, V>(src + b * in.batch + (out_head / group) * in.head + s * in.row + e));
  });
}

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) build_additive_mask_kernel(const uint8_t* bool_mask, T* dst, int64_t slices,
                                                                       int64_t L, int64_t S) {
  vector_loop<W>(slices * L * S, [&](int64_t i, auto width) {
    constexpr int V = decltype(width)::value;
    Vec<T, V> y;
    if (bool_mask) {
      const Vec<uint8_t, V> m = load_vec<uint8_t, V>(bool_mask + i);
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = from_float<T>(m.v[k] != 0 ? 0.0f : -INFINITY);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = from_float<T>(((i + k) % S) <= ((i + k) / S) % L ? 0.0f : -INFINITY);
    }
    store_vec<T, V>(dst + i, y);
  });
}

// Vectorised only when L*S is a multiple of W, so a vector never crosses from one mask slice
// into the next.
template <typename T, typename M, int W>
__global__ void __launch_bounds__(kThreads) add_mask_kernel(T* scores, const M* mask, int64_t B, int64_t H, int64_t L,
                                                            int64_t S, bool per_batch, bool per_head, int64_t row0,
                                                            int64_t rows) {
  vector_loop<W>(B * H * rows * S, [&](int64_t i, auto width) {
    constexpr int V = decltype(width)::value;
    const int64_t bh = i / (rows * S), ls = i - bh * (rows * S);
    const int64_t b = bh / H, h = bh - b * H;
    const int64_t slice = (per_batch ? b : 0) * (per_head ? H : 1) + (per_head ? h : 0);
    Vec<T, V> x = load_vec<T, V>(scores + i);
    const Vec<M, V> m = load_vec<M, V>(mask + slice * L * S + row0 * S + ls);
#pragma unroll
    for (int k = 0; k < V; ++k) x.v[k] = from_float<T>(to_float(x.v[k]) + to_float(m.v[k]));
    store_vec<T, V>(scores + i, x);
  });
}

// --- softmax ---

// max that propagates NaN (fmaxf drops it): a row with a NaN must come out all NaN.
__device__ __forceinline__ float max_nan(float a, float b) { return (a > b || a != a) ? a : b; }
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_nan(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Reduces over the threads of one row: a butterfly within the warp (every lane ends with the
// same bits: each step adds the same two values), then, for rows wider than a warp, the warps'
// partials through shared memory, which every thread reads back in the same fixed order. So all
// threads of a row hold the bitwise-same total, and every call gets the same one.
template <typename Op>
__device__ __forceinline__ float row_reduce(float x, Op op, float* partials, int threads_per_row) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  if (threads_per_row == 32) return x;  // uniform over the block: no barrier is skipped by some
  if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = x;
  __syncthreads();
  float total = partials[0];
  for (int w = 1; w < threads_per_row / 32; ++w) total = op(total, partials[w]);
  return total;
}

// Online (max, sum) pair: merging keeps sum relative to the running max.
struct MaxSum {
  float max, sum;
};

// The row in registers: thread t of a row holds vectors t, t + threads_per_row, ... (so a warp's
// loads are consecutive 16-byte vectors), E elements at most; slots past the row's end hold
// -inf, which adds exp(-inf) = 0 to the sum. One read and one write per element, exp computed
// once. Blocks hold one row (threads_per_row > 32) or several warp rows.
//
// Launch bounds: E = 16 (any row up to 16384): with two 1024-thread blocks a multiprocessor, 32
// registers, which every width but 1 fits without spilling; the element-by-element variants (odd
// rows) are allowed 64. E = 32 (warp rows of 513-1024 elements): 128-thread blocks, registers
// as the compiler needs. Two 1024-thread blocks only fit where a multiprocessor holds 2048
// threads (sm_90, sm_100); sm_120/121 (GB10) hold 1536, so there one block is asked for, which
// is what ptxas falls back to anyway (with a warning for every instantiation).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr int kSoftmaxRowBlocksPerSM = 1;
#else
constexpr int kSoftmaxRowBlocksPerSM = 2;
#endif
template <typename T, int W, int E>
__global__ void __launch_bounds__(E == 32 ? 128 : kSoftmaxMaxThreadsPerRow,
                                  E == 32 ? 1 : (W == 1 ? 1 : kSoftmaxRowBlocksPerSM))
    safe_softmax_rows_kernel(const T* in, T* out, int64_t rows, int cols, int threads_per_row) {
  static_assert(E == 16 || E == 32, "16 or 32 elements a thread");
  constexpr int kVectors = E / W;
  __shared__ float max_partials[32], sum_partials[32];
  const int rows_per_block = blockDim.x / threads_per_row;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / threads_per_row;
  const int t = threadIdx.x % threads_per_row;
  const bool row_valid = row < rows;  // only the last block of warp rows can run past the end
  const int vectors = cols / W;
  const T* x = in + row * cols;
  T* y = out + row * cols;

  float v[E];
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = t + k * threads_per_row;
    if (row_valid && c < vectors) {
      const Vec<T, W> p = load_vec<T, W>(x + static_cast<int64_t>(c) * W);
#pragma unroll
      for (int j = 0; j < W; ++j) v[k * W + j] = to_float(p.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) v[k * W + j] = -INFINITY;
    }
  }
  float row_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < E; ++k) row_max = max_nan(row_max, v[k]);
  row_max = row_reduce(row_max, MaxOp{}, max_partials, threads_per_row);
  // _safe_softmax: a fully masked row (max == -inf) is all zeros, not 0/0. (A NaN max makes
  // every exp, the sum and so every output NaN, as PyTorch's softmax does.)
  const bool fully_masked = row_max == -INFINITY;
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < E; ++k) {
    v[k] = fully_masked ? 0.0f : expf(v[k] - row_max);
    sum += v[k];
  }
  const MaxSum total{row_max, row_reduce(sum, SumOp{}, sum_partials, threads_per_row)};
  const float inv_sum = 1.0f / total.sum;
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = t + k * threads_per_row;
    if (row_valid && c < vectors) {
      Vec<T, W> q;
#pragma unroll
      for (int j = 0; j < W; ++j) q.v[j] = from_float<T>(fully_masked ? 0.0f : v[k * W + j] * inv_sum);
      store_vec<T, W>(y + static_cast<int64_t>(c) * W, q);
    }
  }
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};  // both empty or all -inf so far
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// Fallback for rows too long for registers: one block per row. Pass 1: each thread folds its
// strided elements into (max, sum); the block merges them in a fixed order. Pass 2 reads the row
// again (mostly from L2) and writes exp(x - max) / sum. A NaN input makes the row NaN.
template <typename T>
__global__ void safe_softmax_long_rows_kernel(const T* in, T* out, int64_t cols) {
  const int64_t row = blockIdx.x;
  const T* x = in + row * cols;
  T* y = out + row * cols;
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = to_float(x[c]);
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
    y[c] = from_float<T>(total.max == -INFINITY ? 0.0f : expf(to_float(x[c]) - total.max) * inv_sum);
  }
}

// --- dropout ---

// The uniform numbers of elements [first, first + V): one Philox call per four elements when
// `first` is a multiple of four (every whole vector), one per element otherwise (the tail).
template <int V>
__device__ __forceinline__ void dropout_uniforms(uint64_t seed, uint64_t offset, uint64_t first, float (&u)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int g = 0; g < V; g += 4) {
      const Philox4x32 r = dropout_philox_block(seed, offset, (first + g) >> 2);
#pragma unroll
      for (int k = 0; k < 4; ++k) u[g + k] = dropout_uniform_from_bits(r.v[k]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) u[k] = dropout_uniform(seed, offset, first + k);
  }
}

// The index in the whole tensor of element i of a chunk (RowChunk in kernels.h).
__device__ __forceinline__ int64_t whole_index(int64_t i, const RowChunk& c) {
  if (c.rows == 0) return i;
  const int64_t per_head = c.rows * c.cols, head = i / per_head;
  return (head * c.total_rows + c.row0) * c.cols + (i - head * per_head);
}

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) dropout_kernel(const T* in, T* out, uint8_t* mask, int64_t n, uint64_t seed,
                                                           uint64_t offset, float keep_prob, RowChunk chunk) {
  const float inv_keep = 1.0f / keep_prob;
  vector_loop<W>(n, [&](int64_t i, auto width) {
    constexpr int V = decltype(width)::value;
    float u[V];
    // A vector never crosses a chunk's head boundary (the launcher vectorises only when each
    // head's part is a multiple of the width), so its elements are consecutive in the whole too.
    dropout_uniforms<V>(seed, offset, static_cast<uint64_t>(whole_index(i, chunk)), u);
    Vec<T, V> x = load_vec<T, V>(in + i);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const bool keep = u[k] < keep_prob;
      x.v[k] = from_float<T>(keep ? to_float(x.v[k]) * inv_keep : 0.0f);
      if (mask) mask[i + k] = keep;
    }
    store_vec<T, V>(out + i, x);
  });
}

// --- tensor statistics (--log values) ---

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
    const float v = to_float(data[i]);
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

// splitmix64's finaliser: every input bit moves about half of the output bits.
__device__ __forceinline__ unsigned long long mix64(unsigned long long x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void digest_kernel(const uint16_t* words, int64_t n, unsigned long long* digest) {
  unsigned long long sum = 0;
  GRID_STRIDE_LOOP(i, n) sum += mix64((static_cast<unsigned long long>(i) << 16) ^ words[i]);
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) atomicAdd(digest, sum);  // one atomic a warp
}

// --- the backward's kernels (--backward) ---

// native_dropout_backward: dP = dPd · mask · scale, scale = 1 / (1 - p).
template <typename T, int W>
__global__ void __launch_bounds__(kThreads) dropout_backward_kernel(const T* grad, const uint8_t* mask, T* out, int64_t n,
                                                                    float scale) {
  vector_loop<W>(n, [&](int64_t i, auto width) {
    constexpr int V = decltype(width)::value;
    Vec<T, V> g = load_vec<T, V>(grad + i);
#pragma unroll
    for (int k = 0; k < V; ++k) g.v[k] = from_float<T>(mask[i + k] ? to_float(g.v[k]) * scale : 0.0f);
    store_vec<T, V>(out + i, g);
  });
}

// _softmax_backward_data: dS = P · (dP − Σ_row dP·P), fp32 accumulation. A warp a row for rows
// of at most 1024, else a block a row, as PyTorch's kernels divide it; the dot product is reduced
// in a fixed order (row_reduce), so every call gives the same bits. Two passes over the row: the
// dot product, then the output (the second reads mostly from L2).
template <typename T, int W>
__global__ void __launch_bounds__(kThreads) softmax_backward_kernel(const T* grad, const T* probs, T* out, int64_t rows,
                                                                    int cols, int threads_per_row) {
  __shared__ float partials[32];
  const int rows_per_block = blockDim.x / threads_per_row;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / threads_per_row;
  const int t = threadIdx.x % threads_per_row;
  const bool row_valid = row < rows;  // only the last block of warp rows can run past the end
  const int vectors = cols / W;
  const T* g = grad + row * cols;
  const T* p = probs + row * cols;
  float dot = 0.0f;
  for (int c = t; row_valid && c < vectors; c += threads_per_row) {
    const Vec<T, W> gv = load_vec<T, W>(g + static_cast<int64_t>(c) * W), pv = load_vec<T, W>(p + static_cast<int64_t>(c) * W);
#pragma unroll
    for (int j = 0; j < W; ++j) dot += to_float(gv.v[j]) * to_float(pv.v[j]);
  }
  dot = row_reduce(dot, SumOp{}, partials, threads_per_row);
  T* y = out + row * cols;
  for (int c = t; row_valid && c < vectors; c += threads_per_row) {
    const Vec<T, W> gv = load_vec<T, W>(g + static_cast<int64_t>(c) * W), pv = load_vec<T, W>(p + static_cast<int64_t>(c) * W);
    Vec<T, W> o;
#pragma unroll
    for (int j = 0; j < W; ++j) o.v[j] = from_float<T>(to_float(pv.v[j]) * (to_float(gv.v[j]) - dot));
    store_vec<T, W>(y + static_cast<int64_t>(c) * W, o);
  }
}

// dst [B, Hkv, rows] = factor · Σ_g src [B, Hkv·group + g, rows] (GQA's repeat_interleave summed
// back; group 1 is a scaled conversion), fp32 sums in head order, one rounding on store.
template <typename S, typename D, int W>
__global__ void __launch_bounds__(kThreads) sum_head_groups_kernel(const S* src, D* dst, int64_t n, int64_t head_elems,
                                                                   int64_t group, float factor) {
  vector_loop<W>(n, [&](int64_t i, auto width) {
    constexpr int V = decltype(width)::value;
    const int64_t head = i / head_elems, at = i - head * head_elems;
    float acc[V] = {};
    for (int64_t g = 0; g < group; ++g) {
      const Vec<S, V> x = load_vec<S, V>(src + (head * group + g) * head_elems + at);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += to_float(x.v[k]);
    }
    Vec<D, V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = from_float<D>(acc[k] * factor);
    store_vec<D, V>(dst + i, y);
  });
}

}  // namespace

void launch_digest(const void* data, size_t bytes, unsigned long long* digest, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(digest, 0, sizeof *digest, stream));
  const int64_t n = static_cast<int64_t>(bytes / 2);
  if (n == 0) return;
  digest_kernel<<<std::min(grid_for(n), 1024), kThreads, 0, stream>>>(static_cast<const uint16_t*>(data), n, digest);
  CUDA_CHECK_LAUNCH();
}

void launch_tensor_stats(const void* data, DType type, int64_t n, TensorStats* stats, cudaStream_t stream) {
  reset_stats_kernel<<<1, 1, 0, stream>>>(stats);
  CUDA_CHECK_LAUNCH();
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    tensor_stats_kernel<<<std::min(grid_for(n), 1024), kThreads, 0, stream>>>(static_cast<const T*>(data), n, stats);
  });
  CUDA_CHECK_LAUNCH();
}

void launch_convert_scale_batch(const ConvertJob* jobs, int count, DType src_type, DType dst_type, float factor,
                                cudaStream_t stream) {
  if (count < 1 || count > kMaxConvertJobs) {
    throw std::invalid_argument("launch_convert_scale_batch: 1 to 4 jobs");  // a programming error, not input
  }
  ConvertJobs args{};
  int64_t largest = 0;
  for (int j = 0; j < count; ++j) {
    args.src[j] = jobs[j].src;
    args.dst[j] = jobs[j].dst;
    args.n[j] = jobs[j].n;
    largest = std::max(largest, jobs[j].n);
  }
  if (largest == 0) return;
  dispatch(src_type, [&](auto src_tag) {
    using Src = typename decltype(src_tag)::type;
    dispatch(dst_type, [&](auto dst_tag) {
      using Dst = typename decltype(dst_tag)::type;
      constexpr int kWidth = max_width<Src, Dst>();
      bool vectorise = true;
      for (int j = 0; j < count; ++j) {
        vectorise = vectorise && aligned(jobs[j].src, kWidth * sizeof(Src)) && aligned(jobs[j].dst, kWidth * sizeof(Dst));
      }
      dispatch_width<kWidth>(vectorise, [&](auto width) {
        constexpr int W = decltype(width)::value;
        const dim3 grid(static_cast<unsigned>(grid_for((largest + W - 1) / W)), static_cast<unsigned>(count));
        convert_scale_kernel<Src, Dst, W><<<grid, kThreads, 0, stream>>>(args, factor);
      });
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_convert_scale(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, float factor,
                          cudaStream_t stream) {
  const ConvertJob job{src, dst, n};
  launch_convert_scale_batch(&job, 1, src_type, dst_type, factor, stream);
}

void require_kernel_image_for_device(int device) {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, fill_kernel<float, 1>);
  if (status == cudaErrorNoKernelImageForDevice) {
    (void)cudaGetLastError();  // not sticky, but leave no error behind for the next check
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    const std::string sm = std::to_string(major) + std::to_string(minor);
    throw CudaError("this repro binary holds no machine code or PTX that this GPU (sm_" + sm +
                        ") can run: use a build whose `repro --version` lists sm_" + sm +
                        " (the release preset) or rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + sm,
                    "setup", "cudaErrorNoKernelImageForDevice");
  }
  CUDA_CHECK(status);
}

void launch_fill(void* dst, DType type, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kWidth = max_width<T>();
    dispatch_width<kWidth>(aligned(dst, kWidth * sizeof(T)), [&](auto width) {
      constexpr int W = decltype(width)::value;
      fill_kernel<T, W><<<grid_for((n + W - 1) / W), kThreads, 0, stream>>>(static_cast<T*>(dst), n, value);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_repeat_heads(const void* src, HeadStrides src_strides, void* dst, DType type, int64_t batch,
                         int64_t kv_heads, int64_t group, int64_t rows, int64_t head_dim, cudaStream_t stream) {
  const int64_t n = batch * kv_heads * group * rows * head_dim;
  if (n == 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kWidth = max_width<T>();
    const bool vectorise = head_dim % kWidth == 0 && src_strides.batch % kWidth == 0 && src_strides.head % kWidth == 0 &&
                           src_strides.row % kWidth == 0 && aligned(src, kWidth * sizeof(T)) &&
                           aligned(dst, kWidth * sizeof(T));
    dispatch_width<kWidth>(vectorise, [&](auto width) {
      constexpr int W = decltype(width)::value;
      repeat_heads_kernel<T, W><<<grid_for((n + W - 1) / W), kThreads, 0, stream>>>(
          static_cast<const T*>(src), src_strides, static_cast<T*>(dst), batch, kv_heads, group, rows, head_dim);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_transpose_heads(const void* src, HeadStrides src_strides, void* dst, DType type, int64_t batch,
                            int64_t heads, int64_t rows, int64_t head_dim, cudaStream_t stream) {
  const int64_t slices = batch * heads;
  const dim3 grid(static_cast<unsigned>((rows + kTransposeTile - 1) / kTransposeTile),
                  static_cast<unsigned>(std::min<int64_t>((head_dim + kTransposeTile - 1) / kTransposeTile, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(slices, 65535)));
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    transpose_heads_kernel<<<grid, dim3(kTransposeTile, 8), 0, stream>>>(
        static_cast<const T*>(src), src_strides, static_cast<T*>(dst), slices, heads, rows, head_dim);
  });
  CUDA_CHECK_LAUNCH();
}

void launch_touch_pages(const void* data, size_t bytes, unsigned long long* sink, cudaStream_t stream) {
  if (bytes == 0) return;
  const size_t pages = (bytes + kTouchPageBytes - 1) / kTouchPageBytes;
  touch_pages_kernel<kTouchPageBytes><<<grid_for(static_cast<int64_t>(pages)), kThreads, 0, stream>>>(
      static_cast<const unsigned char*>(data), pages, bytes, sink);
  CUDA_CHECK_LAUNCH();
}

void launch_build_additive_mask(const uint8_t* bool_mask, void* dst, DType type, int64_t slices, int64_t L,
                                int64_t S, cudaStream_t stream) {
  const int64_t n = slices * L * S;
  if (n == 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kWidth = max_width<T>();
    const bool vectorise = aligned(dst, kWidth * sizeof(T)) && (!bool_mask || aligned(bool_mask, kWidth));
    dispatch_width<kWidth>(vectorise, [&](auto width) {
      constexpr int W = decltype(width)::value;
      build_additive_mask_kernel<T, W><<<grid_for((n + W - 1) / W), kThreads, 0, stream>>>(bool_mask, static_cast<T*>(dst),
                                                                                            slices, L, S);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_add_mask(void* scores, DType scores_type, const void* mask, DType mask_type, int64_t B, int64_t H,
                     int64_t L, int64_t S, bool mask_per_batch, bool mask_per_head, cudaStream_t stream, int64_t row0,
                     int64_t rows) {
  if (rows < 0) rows = L;
  const int64_t n = B * H * rows * S;
  if (n == 0) return;
  dispatch(scores_type, [&](auto scores_tag) {
    using T = typename decltype(scores_tag)::type;
    dispatch(mask_type, [&](auto mask_tag) {
      using M = typename decltype(mask_tag)::type;
      constexpr int kWidth = max_width<T, M>();
      // Vectors stay inside one head's part of the scores and start where the mask's do.
      const bool vectorise = (rows * S) % kWidth == 0 && (L * S) % kWidth == 0 && (row0 * S) % kWidth == 0 &&
                             aligned(scores, kWidth * sizeof(T)) && aligned(mask, kWidth * sizeof(M));
      dispatch_width<kWidth>(vectorise, [&](auto width) {
        constexpr int W = decltype(width)::value;
        add_mask_kernel<T, M, W><<<grid_for((n + W - 1) / W), kThreads, 0, stream>>>(
            static_cast<T*>(scores), static_cast<const M*>(mask), B, H, L, S, mask_per_batch, mask_per_head, row0, rows);
      });
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_safe_softmax(const void* in, void* out, DType type, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const SoftmaxPlan plan = plan_safe_softmax(in, out, type, cols);
  // Blocks beyond the grid's x limit are split into several launches.
  const int64_t max_grid = 2147483647LL;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (!plan.row_in_registers) {
      for (int64_t first = 0; first < rows; first += max_grid) {
        const int64_t count = std::min(max_grid, rows - first);
        safe_softmax_long_rows_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(x + first * cols,
                                                                                           y + first * cols, cols);
      }
      return;
    }
    auto launch_rows = [&](auto width, auto elems) {
      constexpr int W = decltype(width)::value;
      constexpr int E = decltype(elems)::value;
      const int64_t rows_per_launch = max_grid * plan.rows_per_block;
      for (int64_t first = 0; first < rows; first += rows_per_launch) {
        const int64_t count = std::min(rows_per_launch, rows - first);
        const int64_t blocks = (count + plan.rows_per_block - 1) / plan.rows_per_block;
        safe_softmax_rows_kernel<T, W, E><<<static_cast<unsigned>(blocks), plan.threads_per_row * plan.rows_per_block, 0,
                                         stream>>>(x + first * cols, y + first * cols, count, static_cast<int>(cols),
                                                   plan.threads_per_row);
      }
    };
    auto launch_width = [&](auto elems) {
      switch (plan.vector_width) {
        case 8:
          if constexpr (sizeof(T) == 2) launch_rows(Width<8>{}, elems);
          break;
        case 4: launch_rows(Width<4>{}, elems); break;
        case 2: launch_rows(Width<2>{}, elems); break;
        default: launch_rows(Width<1>{}, elems); break;
      }
    };
    if (plan.elems_per_thread == 2 * kSoftmaxElemsPerThread) {
      launch_width(Width<2 * kSoftmaxElemsPerThread>{});
    } else {
      launch_width(Width<kSoftmaxElemsPerThread>{});
    }
  });
  CUDA_CHECK_LAUNCH();
}

void launch_dropout(const void* in, void* out, uint8_t* mask, DType type, int64_t n, uint64_t seed, uint64_t offset,
                    float keep_prob, cudaStream_t stream, const RowChunk& chunk) {
  if (n == 0) return;
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kWidth = max_width<T>();
    // Philox gives four numbers per call for four consecutive elements of the whole tensor: a
    // vector must start at a multiple of four there and stay inside one head's part of a chunk.
    const bool chunk_ok = chunk.rows == 0 || ((chunk.rows * chunk.cols) % kWidth == 0 && chunk.cols % 4 == 0);
    const bool vectorise = chunk_ok && aligned(in, kWidth * sizeof(T)) && aligned(out, kWidth * sizeof(T));
    dispatch_width<kWidth>(vectorise, [&](auto width) {
      constexpr int W = decltype(width)::value;
      dropout_kernel<T, W><<<grid_for((n + W - 1) / W), kThreads, 0, stream>>>(
          static_cast<const T*>(in), static_cast<T*>(out), mask, n, seed, offset, keep_prob, chunk);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_dropout_backward(const void* grad, const uint8_t* mask, void* out, DType type, int64_t n, float keep_prob,
                             cudaStream_t stream) {
  if (n == 0) return;
  // PyTorch's scale: 1 / (1 - p) in double, then in the kernel's float.
  const float scale = static_cast<float>(1.0 / static_cast<double>(keep_prob));
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kWidth = max_width<T>();
    const bool vectorise = aligned(grad, kWidth * sizeof(T)) && aligned(out, kWidth * sizeof(T));
    dispatch_width<kWidth>(vectorise, [&](auto width) {
      constexpr int W = decltype(width)::value;
      dropout_backward_kernel<T, W><<<grid_for((n + W - 1) / W), kThreads, 0, stream>>>(static_cast<const T*>(grad), mask,
                                                                                        static_cast<T*>(out), n, scale);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_softmax_backward(const void* grad, const void* probs, void* out, DType type, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const int threads_per_row = cols <= kSoftmaxBackwardWarpCols ? 32 : kThreads;
  const int rows_per_block = kThreads / threads_per_row;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > INT32_MAX) throw std::invalid_argument("launch_softmax_backward: too many rows for one launch");
  dispatch(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kWidth = max_width<T>();
    const bool vectorise = cols % kWidth == 0 && aligned(grad, 16) && aligned(probs, 16) && aligned(out, 16);
    dispatch_width<kWidth>(vectorise, [&](auto width) {
      constexpr int W = decltype(width)::value;
      softmax_backward_kernel<T, W><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(probs), static_cast<T*>(out), rows, static_cast<int>(cols),
          threads_per_row);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_sum_head_groups(const void* src, DType src_type, void* dst, DType dst_type, int64_t heads, int64_t group,
                            int64_t head_elems, float factor, cudaStream_t stream) {
  const int64_t n = heads * head_elems;
  if (n == 0) return;
  dispatch(src_type, [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    dispatch(dst_type, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      constexpr int kWidth = max_width<S, D>();
      const bool vectorise = head_elems % kWidth == 0 && aligned(src, kWidth * sizeof(S)) && aligned(dst, kWidth * sizeof(D));
      dispatch_width<kWidth>(vectorise, [&](auto width) {
        constexpr int W = decltype(width)::value;
        sum_head_groups_kernel<S, D, W><<<grid_for((n + W - 1) / W), kThreads, 0, stream>>>(
            static_cast<const S*>(src), static_cast<D*>(dst), n, head_elems, group, factor);
      });
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace sdpa
