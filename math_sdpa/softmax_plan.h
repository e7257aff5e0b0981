// softmax_plan.h: how the softmax kernel (kernels.cu, launch_safe_softmax) runs a row of
// `cols` elements. Host-only and header-only, so the tests and the generated reproducer decide
// exactly as the kernel does, without a GPU.
//
// It follows PyTorch's split (host_softmax in aten/src/ATen/native/cuda/SoftMax.cu): rows of up
// to 1024 elements get a warp each (registers and shuffles, no shared memory, no block barrier,
// as PyTorch's warp softmax), four rows a block; longer rows a block each, reducing through
// shared memory with __syncthreads (the structure of PyTorch's cunn_SoftMaxForward, which
// scenario 2's hypothesis is about). Either way the row is held in registers (up to 16 elements
// a thread, or 32 for warp rows longer than 512), read once and written once, while it fits:
// 16384 elements (1024 threads x 16). Longer rows take the fallback, which reads each row twice.
// The vector width drops (to 1 at worst) when cols is odd or a pointer is misaligned.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace sdpa {

// The backward's softmax (launch_softmax_backward) takes a warp a row up to this many columns,
// else a block a row, as PyTorch's.
constexpr int64_t kSoftmaxBackwardWarpCols = 1024;

struct SoftmaxPlan {
  bool row_in_registers = false;
  int vector_width = 1;       // elements per load and store (16 bytes at most)
  int elems_per_thread = 16;  // the row's share each thread holds in registers (16 or 32)
  int threads_per_row = 0;    // a multiple of 32
  int rows_per_block = 1;
};
constexpr int64_t kSoftmaxWarpRowMaxCols = 1024;  // PyTorch's limit for its warp softmax
constexpr int kSoftmaxElemsPerThread = 16;
constexpr int kSoftmaxMaxThreadsPerRow = 1024;
constexpr int kSoftmaxFallbackThreads = 256;  // the two-pass fallback's block

inline SoftmaxPlan plan_safe_softmax(const void* in, const void* out, DType type, int64_t cols) {
  auto aligned = [](const void* p, int64_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  SoftmaxPlan plan;
  const int64_t elem = static_cast<int64_t>(dtype_size(type));
  // The widest vector (16 bytes at most) that divides the row, so every row starts aligned.
  int width = static_cast<int>(16 / elem);
  while (width > 1 && (cols % width != 0 || !aligned(in, width * elem) || !aligned(out, width * elem))) width /= 2;
  if (cols <= kSoftmaxWarpRowMaxCols) {  // a warp per row, four rows a 128-thread block
    plan.row_in_registers = true;
    plan.vector_width = width;
    plan.elems_per_thread = cols <= 32 * kSoftmaxElemsPerThread ? kSoftmaxElemsPerThread : 2 * kSoftmaxElemsPerThread;
    plan.threads_per_row = 32;
    plan.rows_per_block = 4;
    return plan;
  }
  const int64_t vectors = cols / width;
  const int64_t per_thread = kSoftmaxElemsPerThread / width;
  const int64_t threads = ((vectors + per_thread - 1) / per_thread + 31) / 32 * 32;  // whole warps
  if (threads > kSoftmaxMaxThreadsPerRow) {
    plan.row_in_registers = false;
    plan.vector_width = 1;
    plan.threads_per_row = kSoftmaxFallbackThreads;
    plan.rows_per_block = 1;
    return plan;
  }
  plan.row_in_registers = true;
  plan.vector_width = width;
  plan.threads_per_row = static_cast<int>(threads);
  plan.rows_per_block = 1;  // a block per row: the reduction goes through shared memory
  return plan;
}

// Which of the kernel's three ways of running a row a plan is: what scenario 2's hypothesis is
// about is the block reduction (shared memory and __syncthreads), which only rows longer than
// kSoftmaxWarpRowMaxCols get.
enum class SoftmaxVariant {
  warp_per_row,   // registers and warp shuffles, no shared memory, no block barrier
  block_per_row,  // the row in registers, reduced through shared memory with block barriers
  two_pass,       // rows too long for registers: a block per row reading it twice, with barriers
};

inline SoftmaxVariant softmax_variant(const SoftmaxPlan& plan) {
  if (plan.threads_per_row == 32 && plan.rows_per_block > 1) return SoftmaxVariant::warp_per_row;
  return plan.row_in_registers ? SoftmaxVariant::block_per_row : SoftmaxVariant::two_pass;
}

// The variant for rows of `cols` elements of `type` (the pointers only change the vector width).
inline SoftmaxVariant softmax_variant_for(DType type, int64_t cols) {
  return softmax_variant(plan_safe_softmax(nullptr, nullptr, type, cols));
}

inline const char* softmax_variant_name(SoftmaxVariant v) {
  switch (v) {
    case SoftmaxVariant::warp_per_row: return "warp_per_row";
    case SoftmaxVariant::block_per_row: return "block_per_row";
    case SoftmaxVariant::two_pass: return "two_pass";
  }
  return "?";
}

// Whether the variant reduces through shared memory with block-wide barriers.
inline bool softmax_uses_block_barriers(SoftmaxVariant v) { return v != SoftmaxVariant::warp_per_row; }

}  // namespace sdpa
