// kernels.h: the path's own kernels (everything that is not a GEMM), launched on a stream.
//
// Each launcher dispatches on the runtime dtype (and on the widest vector the pointers and sizes
// allow), launches, and checks the launch (CUDA_CHECK_LAUNCH). Elementwise math is done in fp32
// and rounded once on store, as PyTorch's TensorIterator kernels do for fp16/bf16. Every kernel
// of the path is deterministic: the same inputs give bitwise the same outputs on every call
// (only launch_tensor_stats, a diagnostic for --log values, adds with atomics in any order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dtype.h"
#include "head_strides.h"
#include "softmax_plan.h"

namespace sdpa {

// dst[i] = src[i] * factor, converting between dtypes (upcast, scaling, the final cast).
void launch_convert_scale(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, float factor,
                          cudaStream_t stream);

// Several conversions with the same types and factor in one launch (the upcast stage converts
// Q, K and V: one launch instead of three, which is most of that stage's time at small shapes).
struct ConvertJob {
  const void* src;
  void* dst;
  int64_t n;
};
constexpr int kMaxConvertJobs = 4;
void launch_convert_scale_batch(const ConvertJob* jobs, int count, DType src_type, DType dst_type, float factor,
                                cudaStream_t stream);

// Throws CudaError with a one-line explanation when this binary holds neither machine code nor
// PTX that the current GPU can run (e.g. the sm_121-only spark-static build on an H100): without
// this the first symptom is a cryptic cuBLAS initialisation failure or a failed launch.
void require_kernel_image_for_device(int device);

// Fills n elements with `value` (used to poison outputs with NaN before every run).
void launch_fill(void* dst, DType type, int64_t n, float value, cudaStream_t stream);

// GQA: dst, a contiguous [B, Hkv*group, S, E], from src [B, Hkv, S, E] laid out as `src_strides`,
// each head repeated `group` times in a row, as torch.repeat_interleave(dim=-3) does.
void launch_repeat_heads(const void* src, HeadStrides src_strides, void* dst, DType type, int64_t batch,
                         int64_t kv_heads, int64_t group, int64_t rows, int64_t head_dim, cudaStream_t stream);

// K^T made contiguous: dst [B*H, E, S] from src [B, H, S, E] laid out as `src_strides` (the copy
// at::matmul makes of a K^T view it cannot fold into a batch, and fix 3's copy). Tiled through
// shared memory so both the reads and the writes are coalesced.
void launch_transpose_heads(const void* src, HeadStrides src_strides, void* dst, DType type, int64_t batch,
                            int64_t heads, int64_t rows, int64_t head_dim, cudaStream_t stream);

// Scenario 4: reads one word of every 4 KiB page of [data, data + bytes), so that every page
// not resident on this GPU faults; the sum goes to *sink so the reads cannot be elided.
void launch_touch_pages(const void* data, size_t bytes, unsigned long long* sink, cudaStream_t stream);
constexpr size_t kTouchPageBytes = 4096;

// The additive mask [slices, L, S] in `type`: from a boolean mask (1 = keep -> 0, 0 -> -inf),
// or, with bool_mask == nullptr, the causal mask (keep s <= l).
void launch_build_additive_mask(const uint8_t* bool_mask, void* dst, DType type, int64_t slices, int64_t L,
                                int64_t S, cudaStream_t stream);

// scores [B, H, L, S] += mask [B|1, H|1, L, S] (broadcast), in place. With fix 5's chunks the
// scores hold only query rows [row0, row0 + rows) of each head, [B, H, rows, S]; rows < 0: all L.
void launch_add_mask(void* scores, DType scores_type, const void* mask, DType mask_type, int64_t B, int64_t H,
                     int64_t L, int64_t S, bool mask_per_batch, bool mask_per_head, cudaStream_t stream,
                     int64_t row0 = 0, int64_t rows = -1);

// _safe_softmax over rows of length `cols`: out = exp(x - max) / sum, fp32 accumulation, and a
// row whose entries are all -inf gives zeros instead of NaN; a row with a NaN is all NaN.
// `out` may be `in` (in place) but must not overlap it otherwise.
void launch_safe_softmax(const void* in, void* out, DType type, int64_t rows, int64_t cols, cudaStream_t stream);

// How it runs a row: softmax_plan.h (plan_safe_softmax).

// Which element of the whole [B·H, L, S] tensor each element of a chunk of query rows is: the
// chunk holds rows [row0, row0 + rows) of every head, [B·H, rows, S] (fix 5's chunks). The
// default, rows == 0, is the whole tensor.
struct RowChunk {
  int64_t rows = 0, row0 = 0;
  int64_t total_rows = 0, cols = 0;  // L and S
};

// native_dropout: out[i] = in[i] / keep_prob where element i is kept (Philox keyed by seed, offset
// and the element's index in the whole tensor; philox.h), else 0; mask[i] = kept (one byte each)
// unless mask is null. `out` may be `in`.
void launch_dropout(const void* in, void* out, uint8_t* mask, DType type, int64_t n, uint64_t seed, uint64_t offset,
                    float keep_prob, cudaStream_t stream, const RowChunk& chunk = {});

// --backward. native_dropout_backward: out[i] = grad[i] / keep_prob where mask[i], else 0.
void launch_dropout_backward(const void* grad, const uint8_t* mask, void* out, DType type, int64_t n, float keep_prob,
                             cudaStream_t stream);

// _softmax_backward_data over rows of length `cols`: out = probs · (grad − Σ grad·probs), the sum
// per row in fp32 (a warp a row up to kSoftmaxBackwardWarpCols, else a block a row, as PyTorch's).
// A fully masked row (probs all 0) gets 0. `out` must not overlap the inputs.
void launch_softmax_backward(const void* grad, const void* probs, void* out, DType type, int64_t rows, int64_t cols,
                             cudaStream_t stream);

// dst [heads, head_elems] = factor · Σ_{g < group} src [heads·group, head_elems] (head h's group
// is src heads h·group .. h·group + group − 1: repeat_interleave's backward), converting dtypes;
// group 1 is a scaled conversion. The input gradients: dQ·√scale, dK·√scale and dV.
void launch_sum_head_groups(const void* src, DType src_type, void* dst, DType dst_type, int64_t heads, int64_t group,
                            int64_t head_elems, float factor, cudaStream_t stream);

// Summary of a tensor's values for the stage log's `values` level (the original log's min/max/isnan/
// isinf/sum lines), computed on the device so a large scores tensor is never copied.
struct TensorStats {
  float min, max;  // over finite values
  unsigned long long nan_count, inf_count;
  double sum;  // over finite values
};

// Resets *stats and accumulates the n elements of `data` into it (stream-ordered).
void launch_tensor_stats(const void* data, DType type, int64_t n, TensorStats* stats, cudaStream_t stream);

// A 64-bit digest of `bytes` bytes of `data` (a multiple of 2): the wrapping sum over its 16-bit
// words of a mix of each word with its position. Addition commutes, so the atomics leave the same
// value in any order: two tensors with the same bits have the same digest, and a change in any
// word changes it but with chance 2^-64. Resets *digest first (stream-ordered).
void launch_digest(const void* data, size_t bytes, unsigned long long* digest, cudaStream_t stream);

}  // namespace sdpa
