// test_kernel_plans.cpp: how launch_safe_softmax will run a row (plan_safe_softmax), decided on
// the host from the row length, the dtype and the pointers' alignment, so it is checked here
// without a GPU: PyTorch's split between a warp per row (up to 1024 elements) and a block per
// row, the register limit, the vector width. (tests/test_gpu_kernels.cpp runs every plan.)
#include <doctest/doctest.h>

#include <cstdint>

#include "math_sdpa/dtype.h"
#include "math_sdpa/softmax_plan.h"

using namespace sdpa;

namespace {

// Host memory aligned as the allocators align device memory; only the addresses are used.
alignas(256) unsigned char g_buffer[1024];

}  // namespace

TEST_SUITE("kernel_plans") {
  TEST_CASE("softmax: a warp per row up to 1024 elements, as PyTorch's warp softmax; a block per row above") {
    void* p = g_buffer;
    for (DType t : {DType::fp32, DType::fp16, DType::bf16}) {
      INFO(dtype_name(t));
      for (int64_t cols : {1, 32, 128, 512, 513, 1000, 1024}) {
        INFO(cols);
        const SoftmaxPlan plan = plan_safe_softmax(p, p, t, cols);
        CHECK(plan.row_in_registers);
        CHECK(plan.threads_per_row == 32);
        CHECK(plan.rows_per_block == 4);
        CHECK(plan.elems_per_thread == (cols <= 512 ? 16 : 32));
        CHECK(plan.threads_per_row * plan.elems_per_thread >= cols);  // the whole row in registers
      }
      for (int64_t cols : {1025, 2048, 4608, 16384}) {
        INFO(cols);
        const SoftmaxPlan plan = plan_safe_softmax(p, p, t, cols);
        CHECK(plan.row_in_registers);
        CHECK(plan.threads_per_row > 32);  // a block per row: the shared-memory reduction
        CHECK(plan.threads_per_row % 32 == 0);
        CHECK(plan.threads_per_row <= kSoftmaxMaxThreadsPerRow);
        CHECK(plan.rows_per_block == 1);
        CHECK(plan.elems_per_thread == 16);
        CHECK(plan.threads_per_row * plan.elems_per_thread >= cols);
      }
      CHECK(plan_safe_softmax(p, p, t, 16384).threads_per_row == 1024);
      CHECK_FALSE(plan_safe_softmax(p, p, t, 16385).row_in_registers);  // the two-pass fallback
      CHECK_FALSE(plan_safe_softmax(p, p, t, 100000).row_in_registers);
    }
  }

  TEST_CASE("softmax: the widest vector the row length and both pointers allow") {
    void* p = g_buffer;
    for (DType t : {DType::fp32, DType::fp16, DType::bf16}) {
      INFO(dtype_name(t));
      const int widest = static_cast<int>(16 / dtype_size(t));
      CHECK(plan_safe_softmax(p, p, t, 4608).vector_width == widest);
      CHECK(plan_safe_softmax(p, p, t, 128).vector_width == widest);
      CHECK(plan_safe_softmax(p, p, t, 33).vector_width == 1);                          // odd: element by element
      CHECK(plan_safe_softmax(p, g_buffer + dtype_size(t), t, 1024).vector_width == 1);  // misaligned output
      CHECK(plan_safe_softmax(g_buffer + 4 * dtype_size(t), p, t, 1024).vector_width == 4);  // 4-element aligned input
      CHECK(plan_safe_softmax(p, p, t, 1026).vector_width == 2);                       // 1026 = 2 x 513
    }
  }
}
