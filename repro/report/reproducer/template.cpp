// reproducer_template.cpp: the one template every generated repro_scenarioN.cu is cut from.
//
// It is the Math SDPA path of math_sdpa/ (pipeline.cpp, conditions.cpp, kernels.cu, the fixes)
// written out again as one plain CUDA program for an NVIDIA engineer to read, build and run with
// nothing else from us: the same stages in the same order, the same cuBLAS calls with the same
// parameters, the same input generator and the same float64 reference. Its kernels compute what
// the harness's compute, in their plain form (one thread per element; softmax a warp or a block
// per row where PyTorch has a warp or a block per row) rather than the harness's tuned ones, so
// results agree within the dtype's tolerance, not bit for bit.
// reproducer_cu.cpp decides which sections a configuration needs and fills in the values.
//
// Template language (expand_template in reproducer_cu.h): a line `//@if a || !b` starts a section
// kept when any term holds, `//@else` and `//@endif` close it (sections nest); `@NAME@` is
// replaced by a value. Directive lines never reach the output. When this file changes, the GPU
// test (tests/test_gpu_report.cpp) is what proves the generated programs still agree with the
// harness; the CPU test compiles one program per scenario.
#include "repro/report/reproducer/generator.h"

namespace sdpa {

const char* reproducer_template() {
  return R"cu(@HEADER@
#include <cublas_v2.h>
#include <cuda_runtime.h>
//@if bf16
#include <cuda_bf16.h>
//@endif
//@if fp16
#include <cuda_fp16.h>
//@endif
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#ifndef FIX
#define FIX 0  // 1: fix @FIX_NUMBER@ on (@FIX_NAME@); the command line (--fix on|off) overrides it
#endif

// ================================================================================ the problem
// Exactly as the harness ran it: Q [B, H, L, E]; K and V [B, HKV, S, E].
constexpr int64_t B = @B@, H = @HQ@, HKV = @HKV@, L = @L@, S = @S@, E = @E@;
constexpr double SCALE = @SCALE@;  // softmax scale
constexpr uint64_t SEED = @SEED@;  // of the random inputs (the harness's --seed)
constexpr int ITERS = @ITERS@;  // calls of the path (--iters)
constexpr double TOLERANCE = @TOLERANCE@;  // bound on ||result - reference|| / ||reference||
using Elem = @ELEM_TYPE@;  // @DTYPE@: Q, K, V, the mask and the output
using Acc = @ACC_TYPE@;  // scores, probabilities and GEMM results (precision @PRECISION@)
//@if !acc_fp32 || qk_batched
constexpr cudaDataType_t kAccType = @ACC_CUDA_TYPE@;
//@endif
//@if mask_input
constexpr int64_t MASK_B = @MASK_B@, MASK_H = @MASK_H@;  // the mask is [MASK_B, MASK_H, L, S], broadcast
//@endif
// The call @CALL_EXTENT@ and ends with the @RESULT_NAME@ tensor: what is compared with the
// reference and summarised in the result line.
constexpr int64_t RESULT_ELEMS = @RESULT_ELEMS@;
//@if storm || alloc_system
constexpr size_t PAGE = 4096;
//@endif
constexpr size_t kCublasWorkspaceBytes = 32u << 20;  // PyTorch's size for Hopper and newer, passed explicitly

// ============================================================================= how it runs
enum class Alloc { managed, device, async, host, system };
enum class GemmStream { same, legacy, aux };  // the Q.K^T GEMM on the path's stream, or another

// Where element (b, h, s, e) of a [B, H, S, E] tensor lives: b*batch + h*head + s*row + e.
struct HeadStrides {
  int64_t batch, head, row;
};

// A GEMM exactly as issued to cuBLAS. PyTorch tensors are row-major and cuBLAS is column-major:
// a row-major C = A.B is issued as the column-major C^T = B^T.A^T, so the operands swap places
// and m and n swap with them.
//   Q.K^T: scores [L, S] = Q [L, E] . K^T [E, S]: A = K with op T (the transposed view, no copy;
//          or op N on a contiguous K^T copy), B = Q with op N, m = S, n = L, k = E.
//   P.V:   out [L, E] = P [L, S] . V [S, E]: A = V, B = P, m = E, n = L, k = S.
struct Gemm {
  cublasOperation_t transa, transb;
  int m, n, k, lda, ldb, ldc;
  long long stride_a, stride_b, stride_c;  // elements from one (batch, head) to the next
  int batch;
};

// The path's settings with the fix off and on (the "settings" of the harness's result.json);
// they differ only where fix @FIX_NUMBER@ acts.
struct Config {
  Alloc alloc;             // where every tensor lives
  GemmStream qk_stream;    // the stream of the Q.K^T GEMM's cuBLAS handle
  bool kt_copy;            // K^T copied to a contiguous [B*H, E, S] before the GEMM
  bool sync_around_gemms;  // fix 1: cudaStreamSynchronize before and after each GEMM
  bool prefetch_scores;    // fix 2: the scores prefetched to the GPU before softmax
  Gemm qk;                 // the Q.K^T GEMM
};
const Config kFixOff = @CONFIG_OFF@;
const Config kFixOn = @CONFIG_ON@;
//@if pv_gemm
const Gemm kPv = @PV_GEMM@;
//@endif
//@if gqa || k_bshe
constexpr HeadStrides K_LAYOUT = @K_LAYOUT@;  // @K_LAYOUT_NOTE@
//@endif
//@if kt_copy || qk_batched
constexpr HeadStrides K_GEMM = @K_GEMM@;  // the K whose transpose the GEMM reads
//@endif
//@if cross_stream
constexpr bool GEMM_ORDERED = @GEMM_ORDERED@;  // false: the GEMM is not ordered after Q and K, a deliberate race
//@endif
//@if storm
constexpr int TOUCH_STREAMS = @TOUCH_STREAMS@;  // streams that read every page at entry
constexpr bool HOST_TOUCH = @HOST_TOUCH@;  // the host reads them too
//@endif
//@if advice
struct Advice {
  cudaMemoryAdvise advice;
  bool host;  // the location it names: the CPU, or this GPU
};
const std::vector<Advice> ADVICE = {@ADVICE@};  // --advise @ADVICE_LIST@, on every tensor
//@endif

// ====================================================================== errors and timeout
static std::atomic<const char*> g_step{"setup"};  // the step the host is in

static void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  std::fflush(stdout);
  std::fprintf(stderr, "CUDA error at %s:%d in step %s: code=%d(%s) \"%s\"\n", file, line, g_step.load(),
               static_cast<int>(status), cudaGetErrorName(status), call);
  _exit(4);
}
static void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::fflush(stdout);
  std::fprintf(stderr, "cuBLAS error at %s:%d in step %s: code=%d(%s) \"%s\"\n", file, line, g_step.load(),
               static_cast<int>(status), cublasGetStatusName(status), call);
  _exit(4);
}
#define CHECK(call) check((call), #call, __FILE__, __LINE__)
#define CHECK_LAUNCH() check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

//@if alloc_system || scores_to_host
// The run asks for what this GPU cannot express (cuda-samples' EXIT_WAIVED; our code 6).
[[noreturn]] static void waive(const char* reason) {
  std::printf("WAIVED: %s\n", reason);
  std::fflush(stdout);
  _exit(6);
}
//@endif

// The GPU's progress: each GPU step records an event on its stream when its work is issued; a
// poller thread queries them oldest first, so the first step the GPU has not finished is known
// without adding any synchronisation. The watchdog thread never calls CUDA (a stuck driver
// cannot hold it): past the deadline it names that step, or the host step it is stuck in.
static std::mutex g_pending_mutex;
static std::deque<std::pair<const char*, cudaEvent_t>> g_pending;  // issued, not finished yet
static std::atomic<const char*> g_gpu_step{nullptr};               // the oldest of them
static std::atomic<bool> g_gpu_part_done{false};

static void gpu_step_issued(const char* name, cudaStream_t stream) {
  cudaEvent_t done = nullptr;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CHECK(cudaEventRecord(done, stream));
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  if (g_pending.empty()) g_gpu_step = name;
  g_pending.emplace_back(name, done);
}

static void poll_gpu_progress() {
  while (!g_gpu_part_done) {
    cudaEvent_t oldest = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_pending_mutex);
      if (!g_pending.empty()) oldest = g_pending.front().second;
    }
    if (oldest && cudaEventQuery(oldest) == cudaSuccess) {
      std::lock_guard<std::mutex> lock(g_pending_mutex);
      cudaEventDestroy(oldest);
      g_pending.pop_front();
      g_gpu_step = g_pending.empty() ? nullptr : g_pending.front().first;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

static void start_watchdog(double seconds) {
  std::thread([seconds] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!g_gpu_part_done) {
      if (std::chrono::steady_clock::now() > deadline) {
        const char* gpu = g_gpu_step.load();
        std::fflush(stdout);
        if (gpu) {
          std::fprintf(stderr, "TIMEOUT: hung in %s (not finished on the GPU after %.0f s; the host is in %s)\n", gpu,
                       seconds, g_step.load());
        } else {
          std::fprintf(stderr, "TIMEOUT: hung in %s (the host has not come back from it after %.0f s)\n",
                       g_step.load(), seconds);
        }
        _exit(3);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }).detach();
}

// ================================================================================== inputs
//@if bf16
// float <-> bf16 with round-to-nearest-even, written out as the harness does (math_sdpa/dtype.h)
// so that the inputs are bit-identical to the harness's with any host compiler.
static uint16_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep it a quiet NaN
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
static float bits_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
//@endif
//@if fp16
// float <-> fp16 with round-to-nearest-even, written out as the harness does (math_sdpa/dtype.h)
// so that the inputs are bit-identical to the harness's with any host compiler.
static uint16_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return sign | (abs > 0x7F800000 ? 0x7E00 : 0x7C00);  // NaN, inf
  if (abs >= 0x477FF000) return sign | 0x7C00;                                // overflows to inf
  if (abs < 0x33000001) return sign;                                          // rounds to zero
  const int exp = static_cast<int>(abs >> 23);
  uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
  int shift;
  uint32_t base;
  if (exp < 113) {  // subnormal in fp16
    shift = 126 - exp;
    base = 0;
  } else {
    shift = 13;
    base = static_cast<uint32_t>(exp - 112) << 10;
    mant &= 0x7FFFFF;
  }
  const uint32_t half_mant = mant >> shift, rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  uint32_t result = base + half_mant;
  if (rest > halfway || (rest == halfway && (half_mant & 1))) ++result;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | result);
}
static float bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000 | (mant << 13);
  } else if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
//@endif
//@if narrow
static float round_to_elem(float f) { return bits_to_float(float_to_bits(f)); }
static Elem to_elem(float f) {
  @ELEM_TYPE@_raw raw;
  raw.x = float_to_bits(f);
  return Elem(raw);
}
//@if !result_float
static float host_value(Elem x) { return bits_to_float(static_cast<@ELEM_TYPE@_raw>(x).x); }
//@endif
//@else
static float round_to_elem(float f) { return f; }
static Elem to_elem(float f) { return f; }
//@endif
//@if result_float
static float host_value(float x) { return x; }
//@endif

// splitmix64 and Box-Muller, written out as the harness's generator (math_sdpa/problem.cpp), so
// that the same seed gives the same inputs with any compiler and standard library.
struct InputRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// Values already rounded to Elem; Q [B, H, L, E], K and V [B, HKV, S, E].
struct Inputs {
  std::vector<float> q, k, v;
//@if mask_bool
  std::vector<uint8_t> bool_mask;  // [MASK_B, MASK_H, L, S]: 1 = attend
//@endif
//@if mask_float
  std::vector<float> additive_mask;  // [MASK_B, MASK_H, L, S]: added to the scores
//@endif
};

static std::vector<float> random_normal(int64_t n, InputRng& rng) {
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& x : out) x = round_to_elem(static_cast<float>(rng.normal()));
  return out;
}

static Inputs make_inputs() {
  InputRng rng{SEED * 0x2545F4914F6CDD1Dull + 1};
  Inputs in;
  in.q = random_normal(B * H * L * E, rng);
  in.k = random_normal(B * HKV * S * E, rng);
  in.v = random_normal(B * HKV * S * E, rng);
//@if mask_bool
  // About a quarter of the keys dropped, and in one row per slice all of them (_safe_softmax's zeros).
  in.bool_mask.resize(static_cast<size_t>(MASK_B * MASK_H * L * S));
  for (int64_t slice = 0; slice < MASK_B * MASK_H; ++slice) {
    const int64_t fully_masked_row = (slice * 7 + 3) % L;
    for (int64_t r = 0; r < L; ++r) {
      for (int64_t c = 0; c < S; ++c) {
        const bool keep = r != fully_masked_row && rng.uniform() >= 0.25;
        in.bool_mask[static_cast<size_t>((slice * L + r) * S + c)] = keep ? 1 : 0;
      }
    }
  }
//@endif
//@if mask_float
  // Values in [-2, 2], about 10% of them -inf.
  in.additive_mask.resize(static_cast<size_t>(MASK_B * MASK_H * L * S));
  for (auto& x : in.additive_mask) {
    const double u = rng.uniform();
    x = u < 0.1 ? -INFINITY : round_to_elem(static_cast<float>(4.0 * rng.uniform() - 2.0));
  }
//@endif
  return in;
}

// ================================================================================= kernels
// Elementwise math in fp32, rounded once on store, as PyTorch's TensorIterator kernels do.
__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
//@if bf16
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
//@endif
//@if fp16
__device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
//@endif

constexpr int kThreads = 256;
// Enough blocks to fill the GPU several times over; grid-stride loops cover the rest.
static int grid_for(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535LL * 8)));
}
#define GRID_STRIDE_LOOP(i, n)                                                          \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename Src, typename Dst>
__global__ void convert_scale_kernel(const Src* src, Dst* dst, int64_t n, float factor) {
  GRID_STRIDE_LOOP(i, n) store(dst, i, load(src, i) * factor);
}
template <typename Src, typename Dst>
static void convert_scale(const Src* src, Dst* dst, int64_t n, float factor, cudaStream_t stream) {
  convert_scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(src, dst, n, factor);
  CHECK_LAUNCH();
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, float value) {
  GRID_STRIDE_LOOP(i, n) store(dst, i, value);
}
//@if gqa

// GQA: a contiguous [B, HKV*group, S, E] from K or V, each head repeated `group` times in a row
// (torch.repeat_interleave(dim=-3)).
template <typename T>
__global__ void repeat_heads_kernel(const T* src, HeadStrides in, T* dst, int64_t group, int64_t rows) {
  const int64_t n = B * HKV * group * rows * E;
  GRID_STRIDE_LOOP(i, n) {
    const int64_t e = i % E, s = (i / E) % rows, out_head = (i / (E * rows)) % (HKV * group);
    const int64_t b = i / (E * rows * HKV * group);
    dst[i] = src[b * in.batch + (out_head / group) * in.head + s * in.row + e];
  }
}
//@endif
//@if kt_copy

// K^T made contiguous: dst [B*H, E, S] from src [B, H, S, E] laid out as `in`, through 32 x 32
// shared-memory tiles so that both the reads and the writes are coalesced.
constexpr int kTile = 32;
template <typename T>
__global__ void transpose_heads_kernel(const T* src, HeadStrides in, T* dst) {
  __shared__ T tile[kTile][kTile + 1];  // +1: columns in distinct banks
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t slice = blockIdx.z; slice < B * H; slice += gridDim.z) {
    const T* x = src + (slice / H) * in.batch + (slice % H) * in.head;
    T* y = dst + slice * E * S;
    for (int64_t e0 = static_cast<int64_t>(blockIdx.y) * kTile; e0 < E; e0 += static_cast<int64_t>(gridDim.y) * kTile) {
      for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
        const int64_t s = s0 + r, e = e0 + threadIdx.x;
        if (s < S && e < E) tile[r][threadIdx.x] = x[s * in.row + e];
      }
      __syncthreads();
      for (int r = threadIdx.y; r < kTile; r += blockDim.y) {
        const int64_t e = e0 + r, s = s0 + threadIdx.x;
        if (s < S && e < E) y[e * S + s] = tile[threadIdx.x][r];
      }
      __syncthreads();
    }
  }
}
//@endif
//@if storm

// Reads one byte of every 4 KiB page, so every page not resident on this GPU faults; the sum
// goes to *sink so that the reads cannot be elided.
__global__ void touch_pages_kernel(const unsigned char* data, size_t pages, size_t bytes, unsigned long long* sink) {
  unsigned long long sum = 0;
  for (size_t page = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; page < pages;
       page += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t offset = page * PAGE;
    sum += *reinterpret_cast<const volatile unsigned char*>(data + (offset < bytes ? offset : bytes - 1));
  }
  if (sum) atomicAdd(sink, sum);
}
//@endif
//@if mask_prepare

// The additive mask [slices, L, S]: from the boolean mask (1 -> 0, 0 -> -inf), or, without one,
// the causal mask (keep s <= l), as PyTorch's convert_boolean_attn_mask and ones(L, S).tril().
template <typename T>
__global__ void build_additive_mask_kernel(const uint8_t* bool_mask, T* dst, int64_t slices) {
  GRID_STRIDE_LOOP(i, slices * L * S) {
    const bool keep = bool_mask ? bool_mask[i] != 0 : (i % S) <= (i / S) % L;
    store(dst, i, keep ? 0.0f : -INFINITY);
  }
}
//@endif
//@if mask_add

// scores [B, H, L, S] += mask [B|1, H|1, L, S], broadcast, in place.
template <typename T, typename M>
__global__ void add_mask_kernel(T* scores, const M* mask, bool per_batch, bool per_head) {
  GRID_STRIDE_LOOP(i, B * H * L * S) {
    const int64_t ls = i % (L * S), h = (i / (L * S)) % H, b = i / (L * S * H);
    const int64_t slice = (per_batch ? b : 0) * (per_head ? H : 1) + (per_head ? h : 0);
    store(scores, i, load(scores, i) + load(mask, slice * L * S + ls));
  }
}
//@endif
//@if softmax

// _safe_softmax over rows of S, fp32 accumulation: an online (max, sum) pair per thread, merged
// across the row; a row that is all -inf gives zeros, not NaN. Split as PyTorch splits it
// (host_softmax in aten/src/ATen/native/cuda/SoftMax.cu): rows of up to 1024 elements a warp
// each, merged by shuffles alone (no shared memory, no barrier, as its warp softmax); longer rows
// a block each, merged through shared memory between two __syncthreads (as cunn_SoftMaxForward:
// the block reduction scenario 2's hypothesis is about).
constexpr int64_t kWarpSoftmaxMaxCols = 1024;
struct MaxSum {
  float max, sum;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (isnan(a.max) || isnan(b.max)) return {NAN, NAN};
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

template <bool kWarpPerRow, typename T>
__global__ void safe_softmax_kernel(const T* in, T* out, int64_t rows, int64_t cols) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = kWarpPerRow ? static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp : blockIdx.x;
  if (row >= rows) return;  // warp rows only: the whole warp leaves together
  const int first = kWarpPerRow ? lane : threadIdx.x;
  const int stride = kWarpPerRow ? 32 : blockDim.x;
  const T* x = in + row * cols;
  T* y = out + row * cols;
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t c = first; c < cols; c += stride) {
    const float v = load(x, c);
    if (isnan(v)) {
      acc = {NAN, NAN};
      break;
    }
    if (v > acc.max) {  // one exp per element: the running sum is rescaled only when the max moves
      acc.sum = acc.sum * expf(acc.max - v) + 1.0f;
      acc.max = v;
    } else if (v != -INFINITY) {
      acc.sum += expf(v - acc.max);
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {  // every lane ends with the warp's total
    acc = merge(acc, {__shfl_xor_sync(0xffffffffu, acc.max, offset), __shfl_xor_sync(0xffffffffu, acc.sum, offset)});
  }
  MaxSum total = acc;
  if constexpr (!kWarpPerRow) {
    __shared__ MaxSum warp_acc[32];
    __shared__ MaxSum row_acc;
    if (lane == 0) warp_acc[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      MaxSum merged = warp_acc[0];
      for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) merged = merge(merged, warp_acc[w]);
      row_acc = merged;
    }
    __syncthreads();
    total = row_acc;
  }
  const float inv_sum = 1.0f / total.sum;
  for (int64_t c = first; c < cols; c += stride) {
    store(y, c, total.max == -INFINITY ? 0.0f : expf(load(x, c) - total.max) * inv_sum);
  }
}
//@endif

// ================================================================================ the path
//@if host_location
static cudaMemLocation host_location() {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeHost;
  return l;
}
//@endif
//@if device_location
static cudaMemLocation device_location(int device) {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeDevice;
  l.id = device;
  return l;
}
//@endif
//@if storm
static bool host_accessible(Alloc a) { return a == Alloc::managed || a == Alloc::host || a == Alloc::system; }

// Reads one byte of every page, so that every page not resident in host memory faults to it.
static void host_touch(const std::vector<std::pair<void*, size_t>>& buffers) {
  unsigned sum = 0;
  for (const auto& [ptr, bytes] : buffers) {
    const auto* p = static_cast<const volatile unsigned char*>(ptr);
    for (size_t offset = 0; offset < bytes; offset += PAGE) sum += p[offset];
  }
  (void)sum;
}
//@endif
//@if scores_read
//@if acc_fp32
static float host_read(const float* p, int64_t i) { return static_cast<const volatile float*>(p)[i]; }
//@else
static float host_read(const Elem* p, int64_t i) { return bits_to_float(reinterpret_cast<const volatile uint16_t*>(p)[i]); }
//@endif
//@endif

// The workspace of one problem (every tensor allocated up front, none inside a call), its
// streams and its cuBLAS handle, as the harness's MathSdpa (math_sdpa/pipeline.cpp).
struct Path {
  const Config& cfg;
  int device = 0;
  cudaDeviceProp prop{};
  cudaStream_t stream = nullptr;     // the path's own stream (PyTorch's current stream)
  cudaStream_t qk_stream = nullptr;  // where the Q.K^T GEMM runs
  cublasHandle_t cublas = nullptr;
  cudaStream_t cublas_stream = nullptr;
  std::vector<std::pair<void*, size_t>> buffers;  // every tensor, in allocation order
//@if alloc_async
  cudaMemPool_t pool = nullptr;  // fix 4's stream-ordered pool
  cudaStream_t pool_stream = nullptr;
//@endif
//@if cross_stream
  cudaEvent_t producers_done = nullptr, gemm_done = nullptr;
//@endif
//@if storm
  std::vector<cudaStream_t> touch_streams;
  unsigned long long* touch_sink = nullptr;
//@endif
  // The tensors, named as in PyTorch's math path.
  Elem *query = nullptr, *key = nullptr, *value = nullptr;
//@if mask_bool
  uint8_t* bool_mask = nullptr;
//@endif
//@if mask_float
  Elem* mask_input = nullptr;
//@endif
//@if mask_prepare
  Elem* additive_mask = nullptr;
//@endif
//@if upcast
  Acc *query_acc = nullptr, *key_acc = nullptr, *value_acc = nullptr;
//@endif
//@if gqa
  Acc *key_expanded = nullptr, *value_expanded = nullptr;
//@endif
  Acc *query_scaled = nullptr, *key_scaled = nullptr;
//@if kt_copy
  Acc* key_transposed = nullptr;
//@endif
//@if qk_batched
  void** qk_pointers = nullptr;  // A, B, C pointer arrays of cublasGemmBatchedEx, back to back
//@endif
  Acc* scores = nullptr;
//@if softmax
  Acc* probs = nullptr;
//@endif
//@if pv_gemm
  Acc* out_acc = nullptr;
//@endif
//@if cast_output
  Elem* output = nullptr;
//@endif
  void* workspace = nullptr;  // cuBLAS's workspace, from the same allocator

  explicit Path(const Config& config) : cfg(config) {
    CHECK(cudaGetDevice(&device));
    CHECK(cudaGetDeviceProperties(&prop, device));
//@if alloc_system
    if (cfg.alloc == Alloc::system && !prop.pageableMemoryAccess) {
      waive("--alloc system needs a GPU that reads pageable host memory directly (pageableMemoryAccess)");
    }
//@endif
//@if scores_to_host
    if (cfg.alloc != Alloc::managed && cfg.alloc != Alloc::system) {
      waive("scenario 2's condition (the scores moved to the host before softmax) needs memory whose pages migrate");
    }
//@endif
//@if alloc_async
    if (cfg.alloc == Alloc::async) {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device;
      CHECK(cudaMemPoolCreate(&pool, &props));
      uint64_t keep_all = UINT64_MAX;  // freed memory stays in the pool
      CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
      CHECK(cudaStreamCreateWithFlags(&pool_stream, cudaStreamNonBlocking));
    }
//@endif
    query = alloc<Elem>(B * H * L * E);
    key = alloc<Elem>(B * HKV * S * E);
    value = alloc<Elem>(B * HKV * S * E);
//@if mask_bool
    bool_mask = alloc<uint8_t>(MASK_B * MASK_H * L * S);
//@endif
//@if mask_float
    mask_input = alloc<Elem>(MASK_B * MASK_H * L * S);
//@endif
//@if mask_prepare
    additive_mask = alloc<Elem>(@ADDITIVE_MASK_ELEMS@);
//@endif
//@if upcast
    query_acc = alloc<Acc>(B * H * L * E);
    key_acc = alloc<Acc>(B * HKV * S * E);
    value_acc = alloc<Acc>(B * HKV * S * E);
//@endif
//@if gqa
    key_expanded = alloc<Acc>(B * H * S * E);
    value_expanded = alloc<Acc>(B * H * S * E);
//@endif
    query_scaled = alloc<Acc>(B * H * L * E);
    key_scaled = alloc<Acc>(@KEY_SCALED_ELEMS@);
//@if kt_copy
    if (cfg.kt_copy) key_transposed = alloc<Acc>(B * H * S * E);
//@endif
    scores = alloc<Acc>(B * H * L * S);
//@if softmax
    probs = alloc<Acc>(B * H * L * S);
//@endif
//@if pv_gemm
    out_acc = alloc<Acc>(B * H * L * E);
//@endif
//@if cast_output
    output = alloc<Elem>(B * H * L * E);
//@endif
//@if qk_batched
    qk_pointers = alloc<void*>(3 * B * H);
//@endif
    workspace = alloc<char>(kCublasWorkspaceBytes);
//@if storm
    alloc<char>(32);  // the harness's statistics buffer, so that the storm touches the same pages
    touch_sink = alloc<unsigned long long>(TOUCH_STREAMS);
//@endif
    create_streams();
    CHECK(cublasCreate(&cublas));
    bind_cublas(stream);
    CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));  // no TF32, as PyTorch's default
//@if qk_batched
    build_qk_pointer_arrays();
//@endif
//@if advice
    apply_memory_advice();
//@endif
  }

  template <typename T> T* alloc(int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    void* p = nullptr;
    switch (cfg.alloc) {
//@if alloc_managed
      case Alloc::managed: CHECK(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal)); break;
//@endif
//@if alloc_device
      case Alloc::device: CHECK(cudaMalloc(&p, bytes)); break;
//@endif
//@if alloc_async
      case Alloc::async:  // synchronised at once, so that any stream may use it
        CHECK(cudaMallocFromPoolAsync(&p, bytes, pool, pool_stream));
        CHECK(cudaStreamSynchronize(pool_stream));
        break;
//@endif
//@if alloc_host
      case Alloc::host: CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable)); break;
//@endif
//@if alloc_system
      case Alloc::system:  // plain host memory the GPU reads directly
        p = std::aligned_alloc(PAGE, (bytes + PAGE - 1) / PAGE * PAGE);
        if (!p) {
          std::fprintf(stderr, "out of host memory\n");
          _exit(4);
        }
        break;
//@endif
      default: break;
    }
    buffers.emplace_back(p, bytes);
    return static_cast<T*>(p);
  }

  void create_streams() {
//@if stream_non_blocking
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
//@endif
//@if stream_legacy
    stream = cudaStreamLegacy;  // --stream legacy: the legacy default stream
//@endif
//@if stream_per_thread
    stream = cudaStreamPerThread;  // --stream per-thread
//@endif
    switch (cfg.qk_stream) {
      case GemmStream::same: qk_stream = stream; break;
      case GemmStream::legacy: qk_stream = cudaStreamLegacy; break;
      case GemmStream::aux: CHECK(cudaStreamCreateWithFlags(&qk_stream, cudaStreamNonBlocking)); break;
    }
//@if cross_stream
    if (qk_stream != stream) {
      CHECK(cudaEventCreateWithFlags(&producers_done, cudaEventDisableTiming));
      CHECK(cudaEventCreateWithFlags(&gemm_done, cudaEventDisableTiming));
    }
//@endif
//@if storm
    touch_streams.resize(TOUCH_STREAMS);
    for (auto& s : touch_streams) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
//@endif
  }

  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace is set after it.
  void bind_cublas(cudaStream_t s) {
    if (cublas_stream == s && cublas_stream != nullptr) return;
    CHECK(cublasSetStream(cublas, s));
    CHECK(cublasSetWorkspace(cublas, workspace, kCublasWorkspaceBytes));
    cublas_stream = s;
  }
//@if qk_batched

  // Per (b, h): A = that head's K^T (a view of K, or the contiguous copy), B = its Q, C = its scores.
  void build_qk_pointer_arrays() {
//@if kt_copy
    const Acc* kt = cfg.kt_copy ? key_transposed : key_scaled;
    const HeadStrides st = cfg.kt_copy ? HeadStrides{H * E * S, E * S, S} : K_GEMM;
//@else
    const Acc* kt = key_scaled;
    const HeadStrides st = K_GEMM;
//@endif
    std::vector<const void*> ptrs(static_cast<size_t>(3 * B * H));
    for (int64_t i = 0; i < B * H; ++i) {
      ptrs[i] = kt + (i / H) * st.batch + (i % H) * st.head;
      ptrs[B * H + i] = query_scaled + i * L * E;
      ptrs[2 * B * H + i] = scores + i * L * S;
    }
    CHECK(cudaMemcpy(qk_pointers, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyDefault));
  }
//@endif
//@if advice

  void apply_memory_advice() {
    if (cfg.alloc != Alloc::managed && cfg.alloc != Alloc::system) {
      std::printf("[ALLOC_ADVICE] skipped: only managed or system memory takes cudaMemAdvise\n");
      return;
    }
    for (const Advice& a : ADVICE) {
      for (const auto& [ptr, bytes] : buffers) {
        CHECK(cudaMemAdvise(ptr, bytes, a.advice, a.host ? host_location() : device_location(device)));
      }
    }
  }
//@endif

  // cudaMemcpyDefault: the destination may be device, managed, pinned or plain host memory.
  void upload(const std::vector<float>& host, Elem* dst) {
    std::vector<Elem> converted(host.size());
    for (size_t i = 0; i < host.size(); ++i) converted[i] = to_elem(host[i]);
    CHECK(cudaMemcpyAsync(dst, converted.data(), converted.size() * sizeof(Elem), cudaMemcpyDefault, stream));
    CHECK(cudaStreamSynchronize(stream));
  }

  void upload(const Inputs& in) {
    upload(in.q, query);
//@if k_bshe
    // K as the [B, S, HKV, E] buffer that a Linear projection followed by .view(B, S, HKV, E)
    // .transpose(1, 2) leaves behind; the logical tensor is unchanged.
    std::vector<float> bshe(in.k.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < HKV; ++h)
        for (int64_t s = 0; s < S; ++s)
          std::memcpy(&bshe[b * K_LAYOUT.batch + h * K_LAYOUT.head + s * K_LAYOUT.row], &in.k[((b * HKV + h) * S + s) * E],
                      E * sizeof(float));
    upload(bshe, key);
//@else
    upload(in.k, key);
//@endif
    upload(in.v, value);
//@if mask_bool
    CHECK(cudaMemcpyAsync(bool_mask, in.bool_mask.data(), in.bool_mask.size(), cudaMemcpyDefault, stream));
    CHECK(cudaStreamSynchronize(stream));
//@endif
//@if mask_float
    upload(in.additive_mask, mask_input);
//@endif
  }

  auto* result_buffer() { return @RESULT_BUFFER@; }

  // The result filled with NaN before every call, so that a step that silently does nothing fails.
  void poison_result() {
    fill_kernel<<<grid_for(RESULT_ELEMS), kThreads, 0, stream>>>(result_buffer(), RESULT_ELEMS, NAN);
    CHECK_LAUNCH();
    CHECK(cudaStreamSynchronize(stream));
  }

  std::vector<float> download_result() {
    using T = std::remove_pointer_t<decltype(result_buffer())>;
    std::vector<T> raw(static_cast<size_t>(RESULT_ELEMS));
    CHECK(cudaMemcpyAsync(raw.data(), result_buffer(), raw.size() * sizeof(T), cudaMemcpyDefault, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<float> out(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = host_value(raw[i]);
    return out;
  }

  // A step on the GPU: the host names it, the fix acts around it, and its end is recorded on the
  // stream it ran on (the harness's stages, math_sdpa/stage.h).
  template <typename Work> void gpu_step(const char* name, cudaStream_t on, Work&& work) {
    g_step = name;
//@if hooks
    fix_before(name);
//@endif
    work();
//@if hooks
    fix_after(name);
//@endif
//@if sync_each_step
    CHECK(cudaDeviceSynchronize());  // --log @LOG@: the harness synchronised after every stage
//@endif
    gpu_step_issued(name, on);
  }
  // A step the host does or waits for itself (the synchronisations, the host's read of the scores).
  template <typename Work> void host_step(const char* name, Work&& work) {
    g_step = name;
    work();
  }
//@if hooks

  void fix_before(const char* step) {
//@if fix1
    // Fix 1: the GEMMs on the stream that produced their inputs, synchronised before and after.
    if (cfg.sync_around_gemms && (!std::strcmp(step, "qk_gemm") || !std::strcmp(step, "pv_gemm"))) {
      CHECK(cudaStreamSynchronize(stream));
    }
//@endif
//@if fix2
    // Fix 2: the scores back on the GPU, and the stream synchronised, before softmax reads them.
    if (cfg.prefetch_scores && !std::strcmp(step, "softmax")) {
      if (cfg.alloc == Alloc::managed || cfg.alloc == Alloc::system) {
        CHECK(cudaMemPrefetchAsync(scores, B * H * L * S * sizeof(Acc), device_location(device), 0, stream));
      }
      CHECK(cudaStreamSynchronize(stream));
    }
//@endif
  }
  void fix_after(const char* step) {
//@if fix1
    if (cfg.sync_around_gemms && (!std::strcmp(step, "qk_gemm") || !std::strcmp(step, "pv_gemm"))) {
      CHECK(cudaStreamSynchronize(stream));
    }
//@endif
//@if fix2
    if (cfg.prefetch_scores && !std::strcmp(step, "softmax")) CHECK(cudaDeviceSynchronize());
//@endif
  }
//@endif
//@if storm

  // Scenario 4: the pages are first moved to the host (a host read of each), then TOUCH_STREAMS
  // streams read every page at once, so that their faults arrive together; where the device lets
  // the host touch managed memory while kernels run (concurrentManagedAccess), a host thread
  // reads them again meanwhile. Then the entry synchronisation, the call the seed saw hang.
  void enter_with_page_fault_storm() {
    const bool host_ok = HOST_TOUCH && host_accessible(cfg.alloc);
    if (host_ok) host_touch(buffers);
    size_t pages = 0;
    for (int i = 0; i < TOUCH_STREAMS; ++i) {
      for (const auto& [ptr, bytes] : buffers) {
        const size_t n = (bytes + PAGE - 1) / PAGE;
        if (i == 0) pages += n;
        touch_pages_kernel<<<grid_for(static_cast<int64_t>(n)), kThreads, 0, touch_streams[i]>>>(
            static_cast<const unsigned char*>(ptr), n, bytes, touch_sink + i);
        CHECK_LAUNCH();
      }
    }
    const bool concurrent = host_ok && prop.concurrentManagedAccess;
    std::printf("[SCENARIO_4] %d streams touch %zu pages each; host touches %s\n", TOUCH_STREAMS, pages,
                !host_ok ? "none" : concurrent ? "concurrently" : "only before the launches");
    std::thread host;
    if (concurrent) host = std::thread([this] { host_touch(buffers); });
    const cudaError_t status = cudaDeviceSynchronize();
    if (host.joinable()) host.join();
    CHECK(status);
  }
//@endif
//@if cross_stream

  // Scenario 1: the GEMM's stream waits for the kernels that produced Q and K (unless the race
  // is asked for), and the path's stream waits for the GEMM.
  void order_gemm_after_producers() {
    if (qk_stream == stream || !GEMM_ORDERED) return;
    CHECK(cudaEventRecord(producers_done, stream));
    CHECK(cudaStreamWaitEvent(qk_stream, producers_done, 0));
  }
  void order_path_after_gemm() {
    if (qk_stream == stream || !GEMM_ORDERED) return;
    CHECK(cudaEventRecord(gemm_done, qk_stream));
    CHECK(cudaStreamWaitEvent(stream, gemm_done, 0));
  }
//@endif
//@if scores_to_host

  // Scenario 2: once the scores are final, the host reads every one (min and max, as the seed's
  // instrumentation prints) and/or advises the driver that the CPU is their preferred location;
  // softmax then reduces over pages that are not on the GPU: they fault back, or are read remotely.
  void move_scores_to_host() {  // --scores-to-host @SCORES_TO_HOST@
    CHECK(cudaStreamSynchronize(stream));
//@if scores_advise
    CHECK(cudaMemAdvise(scores, B * H * L * S * sizeof(Acc), cudaMemAdviseSetPreferredLocation, host_location()));
//@endif
//@if scores_read
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < B * H * L * S; ++i) {
      const float x = host_read(scores, i);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    std::printf("[SCENARIO_2] host read scores: %zu bytes, min=%.6g max=%.6g\n", B * H * L * S * sizeof(Acc), lo, hi);
//@endif
  }
//@endif

  void gemm_strided(const Gemm& g, const Acc* a, const Acc* b, Acc* c) {
    const float alpha = 1.0f, beta = 0.0f;
//@if acc_fp32
    CHECK(cublasSgemmStridedBatched(cublas, g.transa, g.transb, g.m, g.n, g.k, &alpha, a, g.lda, g.stride_a, b, g.ldb,
                                    g.stride_b, &beta, c, g.ldc, g.stride_c, g.batch));
//@else
    // fp32 accumulation (CUBLAS_COMPUTE_32F), as PyTorch's bgemm
    CHECK(cublasGemmStridedBatchedEx(cublas, g.transa, g.transb, g.m, g.n, g.k, &alpha, a, kAccType, g.lda, g.stride_a,
                                     b, kAccType, g.ldb, g.stride_b, &beta, c, kAccType, g.ldc, g.stride_c, g.batch,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
//@endif
  }
//@if qk_batched
  void gemm_batched(const Gemm& g) {
    const float alpha = 1.0f, beta = 0.0f;
    CHECK(cublasGemmBatchedEx(cublas, g.transa, g.transb, g.m, g.n, g.k, &alpha, qk_pointers, kAccType, g.lda,
                              qk_pointers + B * H, kAccType, g.ldb, &beta, qk_pointers + 2 * B * H, kAccType, g.ldc,
                              g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
//@endif

  // One call of the path, in PyTorch's order (_scaled_dot_product_attention_math).
  void run() {
    // Q and K each scaled by sqrt(scale), as PyTorch does; a negative scale puts its sign on Q.
    const float q_factor = static_cast<float>(std::copysign(std::sqrt(std::fabs(SCALE)), SCALE));
    const float k_factor = static_cast<float>(std::sqrt(std::fabs(SCALE)));

    host_step("entry_sync", [&] {
//@if storm
      enter_with_page_fault_storm();
//@else
      CHECK(cudaDeviceSynchronize());
//@endif
    });
//@if mask_prepare
    gpu_step("mask_prepare", stream, [&] {
//@if mask_bool
      build_additive_mask_kernel<<<grid_for(MASK_B * MASK_H * L * S), kThreads, 0, stream>>>(bool_mask, additive_mask,
                                                                                            MASK_B * MASK_H);
//@else
      build_additive_mask_kernel<<<grid_for(L * S), kThreads, 0, stream>>>(nullptr, additive_mask, 1);  // causal
//@endif
      CHECK_LAUNCH();
    });
//@endif
//@if upcast
    gpu_step("upcast", stream, [&] {
      convert_scale(query, query_acc, B * H * L * E, 1.0f, stream);
      convert_scale(key, key_acc, B * HKV * S * E, 1.0f, stream);  // keeps K's layout
      convert_scale(value, value_acc, B * HKV * S * E, 1.0f, stream);
    });
    const Acc* q = query_acc;
    const Acc* k = key_acc;
//@if pv_gemm
    const Acc* v = value_acc;
//@endif
//@else
    const Acc* q = query;
    const Acc* k = key;
//@if pv_gemm
    const Acc* v = value;
//@endif
//@endif
    gpu_step("scale_q", stream, [&] { convert_scale(q, query_scaled, B * H * L * E, q_factor, stream); });
//@if gqa
    gpu_step("gqa_expand", stream, [&] {
      repeat_heads_kernel<<<grid_for(B * H * S * E), kThreads, 0, stream>>>(k, K_LAYOUT, key_expanded, H / HKV, S);
      CHECK_LAUNCH();
//@if pv_gemm
      repeat_heads_kernel<<<grid_for(B * H * S * E), kThreads, 0, stream>>>(v, HeadStrides{HKV * S * E, S * E, E},
                                                                           value_expanded, H / HKV, S);
      CHECK_LAUNCH();
//@endif
    });
    k = key_expanded;
//@if pv_gemm
    v = value_expanded;
//@endif
//@endif
    gpu_step("scale_k", stream, [&] { convert_scale(k, key_scaled, @KEY_SCALED_ELEMS@, k_factor, stream); });  // keeps K's layout
//@if !qk_batched
    const Acc* kt = key_scaled;  // K^T as the GEMM reads it: the transposed view of the scaled K
//@endif
//@if kt_copy
    if (cfg.kt_copy) {  // fix 3, or where at::matmul copies a K^T view it cannot fold into a batch
      gpu_step("kt_contiguous", stream, [&] {
        const dim3 grid((S + kTile - 1) / kTile, std::min<int64_t>((E + kTile - 1) / kTile, 65535),
                        std::min<int64_t>(B * H, 65535));
        transpose_heads_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(key_scaled, K_GEMM, key_transposed);
        CHECK_LAUNCH();
      });
//@if !qk_batched
      kt = key_transposed;
//@endif
    }
//@endif
//@if cross_stream
    order_gemm_after_producers();
//@endif
    gpu_step("qk_gemm", qk_stream, [&] {
      bind_cublas(qk_stream);
//@if qk_batched
      gemm_batched(cfg.qk);
//@else
      gemm_strided(cfg.qk, kt, query_scaled, scores);
//@endif
    });
//@if cross_stream
    order_path_after_gemm();
//@endif
//@if mask_add
    gpu_step("mask_add", stream, [&] {
      add_mask_kernel<<<grid_for(B * H * L * S), kThreads, 0, stream>>>(scores, @MASK_POINTER@, @MASK_PER_BATCH@,
                                                                       @MASK_PER_HEAD@);
      CHECK_LAUNCH();
    });
//@endif
//@if scores_to_host
    host_step("scores_to_host", [&] { move_scores_to_host(); });
//@endif
//@if softmax
    gpu_step("softmax", stream, [&] {
      const int64_t rows = B * H * L;
      if (S <= kWarpSoftmaxMaxCols) {  // a warp per row, four rows a block
        safe_softmax_kernel<true><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(scores, probs, rows, S);
      } else {  // a block per row
        safe_softmax_kernel<false><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(scores, probs, rows, S);
      }
      CHECK_LAUNCH();
    });
//@if scores_advise
    // The advice is for softmax only; the next call's GEMM writes the scores on the GPU again.
    CHECK(cudaMemAdvise(scores, B * H * L * S * sizeof(Acc), cudaMemAdviseUnsetPreferredLocation, host_location()));
//@endif
//@endif
//@if pv_gemm
    gpu_step("pv_gemm", stream, [&] {
      bind_cublas(stream);
      gemm_strided(kPv, v, probs, out_acc);
    });
//@endif
//@if cast_output
    gpu_step("cast_output", stream, [&] { convert_scale(out_acc, output, B * H * L * E, 1.0f, stream); });
//@endif
    host_step("stream_sync", [&] {
      CHECK(cudaStreamSynchronize(stream));
//@if cross_stream
      if (qk_stream != stream) CHECK(cudaStreamSynchronize(qk_stream));
//@endif
    });
  }
};

// =================================================================== the float64 reference
// The same function on the CPU in double precision from the same rounded inputs, as the
// harness's math_sdpa/reference.cpp: scores = SCALE * Q.K^T (before the mask); probs = the safe
// softmax of the masked scores (a fully masked row is zeros); output = probs . V. With GQA, query
// head h reads key/value head h / (H / HKV).
//@if !result_scores
static double mask_value(const Inputs& in, int64_t b, int64_t h, int64_t l, int64_t s) {
//@if mask_none
  (void)in, (void)b, (void)h, (void)l, (void)s;
  return 0.0;
//@endif
//@if mask_causal
  (void)in, (void)b, (void)h;
  return s <= l ? 0.0 : -INFINITY;
//@endif
//@if mask_input
  const size_t i = static_cast<size_t>((((MASK_B > 1 ? b : 0) * MASK_H + (MASK_H > 1 ? h : 0)) * L + l) * S + s);
//@if mask_bool
  return in.bool_mask[i] ? 0.0 : -INFINITY;
//@else
  return in.additive_mask[i];
//@endif
//@endif
}
//@endif

static void reference_row(const Inputs& in, int64_t b, int64_t h, int64_t l, double* out) {
  const int64_t kv_head = h / (H / HKV);
  const float* q = &in.q[static_cast<size_t>(((b * H + h) * L + l) * E)];
  const float* k = &in.k[static_cast<size_t>((b * HKV + kv_head) * S * E)];
//@if result_scores
  for (int64_t s = 0; s < S; ++s) {
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(q[e]) * k[s * E + e];
    out[s] = dot * SCALE;
  }
//@else
  std::vector<double> p(static_cast<size_t>(S));
  double row_max = -INFINITY;
  for (int64_t s = 0; s < S; ++s) {
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(q[e]) * k[s * E + e];
    p[s] = dot * SCALE + mask_value(in, b, h, l, s);
    row_max = std::max(row_max, p[s]);
  }
  std::fill(out, out + @REFERENCE_ROW@, 0.0);
  if (row_max == -INFINITY) return;  // _safe_softmax: a fully masked row is zeros
  double sum = 0;
  for (int64_t s = 0; s < S; ++s) sum += (p[s] = std::exp(p[s] - row_max));
//@if result_probs
  for (int64_t s = 0; s < S; ++s) out[s] = p[s] / sum;
//@else
  const float* v = &in.v[static_cast<size_t>((b * HKV + kv_head) * S * E)];
  for (int64_t s = 0; s < S; ++s) {
    const double prob = p[s] / sum;
    for (int64_t e = 0; e < E; ++e) out[e] += prob * v[s * E + e];
  }
//@endif
//@endif
}

static std::vector<double> reference(const Inputs& in) {
  const int64_t rows = B * H * L, row_len = RESULT_ELEMS / rows;
  std::vector<double> out(static_cast<size_t>(RESULT_ELEMS));
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(rows, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      for (int64_t r = rows * w / workers; r < rows * (w + 1) / workers; ++r) {
        reference_row(in, r / (L * H), (r / L) % H, r % L, &out[static_cast<size_t>(r * row_len)]);
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// ==================================================================================== main
static void usage(const char* program, int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: %s [--fix on|off] [--timeout SECONDS] [--no-check]\n"
               "  --fix on|off       fix @FIX_NUMBER@ (@FIX_NAME@); default from FIX (%s)\n"
               "  --timeout SECONDS  give up on a hung step after this long, exit 3 (default 60)\n"
               "  --no-check         skip the float64 CPU reference (slow for large shapes)\n",
               program, FIX ? "on" : "off");
  std::exit(code);
}

int main(int argc, char** argv) {
  bool fix = FIX != 0, check_result = true;
  double timeout_s = 60;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--fix" && (value == "on" || value == "off")) {
      fix = value == "on";
      ++i;
    } else if (arg == "--timeout" && std::atof(value.c_str()) > 0) {
      timeout_s = std::atof(value.c_str());
      ++i;
    } else if (arg == "--no-check") {
      check_result = false;
    } else {
      usage(argv[0], arg == "--help" || arg == "-h" ? 0 : 2);
    }
  }
  const Config& cfg = fix ? kFixOn : kFixOff;
  const char* fix_state = fix ? "on" : "off";

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::fprintf(stderr, "no usable CUDA GPU: %s\n", status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device");
    return 7;
  }
  start_watchdog(timeout_s);
  std::thread poller(poll_gpu_progress);
  int driver = 0, runtime = 0, cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  CHECK(cublasGetProperty(MAJOR_VERSION, &cublas_major));
  CHECK(cublasGetProperty(MINOR_VERSION, &cublas_minor));
  CHECK(cublasGetProperty(PATCH_LEVEL, &cublas_patch));

  Path path(cfg);
  std::printf("device: %s (sm_%d%d, %d SMs, integrated=%d concurrentManagedAccess=%d pageableMemoryAccess=%d), "
              "CUDA driver %d, runtime %d, cuBLAS %d.%d.%d\n",
              path.prop.name, path.prop.major, path.prop.minor, path.prop.multiProcessorCount, path.prop.integrated,
              path.prop.concurrentManagedAccess, path.prop.pageableMemoryAccess, driver, runtime, cublas_major,
              cublas_minor, cublas_patch);
  std::printf("config: @CONFIG_LINE@, fix @FIX_NUMBER@ %s\n", fix_state);
  std::fflush(stdout);
  const Inputs in = make_inputs();
  path.upload(in);
  const auto start = std::chrono::steady_clock::now();
  for (int it = 0; it < ITERS; ++it) {
    path.poison_result();
    path.run();
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const std::vector<float> result = path.download_result();
  g_step = "done";
  g_gpu_part_done = true;  // the GPU part is over: the watchdog stands down
  poller.join();

  // Summaries of the result (finite values, in double), as the harness's result_stats.
  double l2 = 0, sum = 0;
  int64_t nonfinite = 0;
  for (float x : result) {
    if (!std::isfinite(x)) {
      ++nonfinite;
      continue;
    }
    l2 += static_cast<double>(x) * x;
    sum += x;
  }
  l2 = std::sqrt(l2);
  std::printf("time: %d call(s) in %.3f ms\n", ITERS, ms);
  const long long elements = static_cast<long long>(result.size());
  if (!check_result) {
    std::printf("result: %s l2=%.10g sum=%.10g elements=%lld nonfinite=%lld (fix %s)\n",
                nonfinite ? "mismatch" : "unchecked", l2, sum, elements, static_cast<long long>(nonfinite), fix_state);
    return nonfinite ? 1 : 0;
  }
  const std::vector<double> ref = reference(in);
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < result.size(); ++i) {
    if (!std::isfinite(result[i])) continue;
    const double d = result[i] - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
  }
  const double rel_error = nonfinite ? INFINITY : ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  const bool pass = nonfinite == 0 && rel_error <= TOLERANCE;
  std::printf("result: %s rel_error=%.3e l2=%.10g sum=%.10g elements=%lld nonfinite=%lld (fix %s)\n",
              pass ? "pass" : "mismatch", rel_error, l2, sum, elements, static_cast<long long>(nonfinite), fix_state);
  return pass ? 0 : 1;
}
)cu";
}

}  // namespace sdpa
