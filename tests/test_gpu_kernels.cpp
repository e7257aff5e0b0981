// test_gpu_kernels.cpp: the path's own kernels (math_sdpa/kernels.cu) one by one, where the
// fast versions could go wrong: softmax at row lengths around every vector, warp and block
// boundary and past the register limit (1 ... 16385), odd lengths and misaligned pointers (no
// 16-byte vectors), all dtypes, fully masked rows exactly zero, NaN rows all NaN, in place, and
// bitwise the same on every call; the elementwise kernels bit-exact against the same fp32
// arithmetic on the host, at sizes with tails and at misaligned pointers; and `repro bench`
// itself, end to end (a short run, a fix comparison, an injected hang).
//
// Inputs are fresh random numbers each run (SDPA_TEST_SEED replays a seed).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dtype_cases.h"
#include "math_sdpa/cuda_check.h"
#include "math_sdpa/dtype.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/host_values.h"
#include "math_sdpa/kernels.h"
#include "math_sdpa/npy.h"
#include "math_sdpa/philox.h"
#include "run_program.h"

using namespace sdpa;

namespace {

uint64_t kernel_test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("SDPA_TEST_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 0) : (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    std::printf("gpu kernel tests: input seed %llu (set SDPA_TEST_SEED to replay)\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

using test_util::kDTypes;

// Device memory with room for a misaligning offset in front.
class DeviceArray {
 public:
  explicit DeviceArray(size_t bytes) : bytes_(bytes + 64) {
    CUDA_CHECK(cudaMalloc(&base_, bytes_));
    CUDA_CHECK(cudaMemset(base_, 0xFF, bytes_));  // NaN patterns: an unwritten element shows
  }
  ~DeviceArray() { cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  char* at(size_t byte_offset) const { return static_cast<char*>(base_) + byte_offset; }

 private:
  void* base_ = nullptr;
  size_t bytes_;
};

void upload(void* dst, const std::vector<float>& x, DType t) {
  const auto bytes = packed_values(x, t);
  CUDA_CHECK(cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
}

std::vector<float> download(const void* src, size_t n, DType t) {
  std::vector<uint8_t> bytes(n * dtype_size(t));
  CUDA_CHECK(cudaMemcpy(bytes.data(), src, bytes.size(), cudaMemcpyDeviceToHost));
  return unpacked_values(bytes, t);
}

// N(0, scale) values, already rounded to the dtype (so host and device start from the same bits).
std::vector<float> random_values(size_t n, DType t, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = round_to_dtype(normal(rng), t);
  return x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Rows for the softmax tests: row 0 all -inf (fully masked), row 1 with one NaN, row 2 with
// about a quarter -inf, the rest plain random numbers.
std::vector<float> softmax_rows(int64_t rows, int64_t cols, DType t, uint64_t seed) {
  std::vector<float> x = random_values(static_cast<size_t>(rows * cols), t, seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(c)] = -INFINITY;
  if (rows > 1) x[static_cast<size_t>(cols + static_cast<int64_t>(rng() % static_cast<uint64_t>(cols)))] = NAN;
  if (rows > 2) {
    for (int64_t c = 0; c < cols; ++c) {
      if (rng() % 4 == 0) x[static_cast<size_t>(2 * cols + c)] = -INFINITY;
    }
  }
  return x;
}

// Checks one row against a float64 softmax: exact zeros where the input is -inf, NaN rows all
// NaN, and otherwise |y - ref| <= rel * ref + abs, where rel covers fp32 arithmetic plus the one
// rounding to the dtype.
void check_softmax_row(const float* x, const float* y, int64_t cols, DType t, const std::string& what) {
  bool has_nan = false;
  double mx = -INFINITY;
  for (int64_t c = 0; c < cols; ++c) {
    has_nan = has_nan || std::isnan(x[c]);
    if (!std::isnan(x[c])) mx = std::max(mx, static_cast<double>(x[c]));
  }
  if (has_nan) {
    for (int64_t c = 0; c < cols; ++c) {
      INFO(what, " col ", c);
      REQUIRE(std::isnan(y[c]));
    }
    return;
  }
  if (mx == -INFINITY) {
    for (int64_t c = 0; c < cols; ++c) {
      INFO(what, " col ", c, " y=", y[c]);
      REQUIRE(same_bits(y[c], 0.0f));  // _safe_softmax: exactly +0, not NaN
    }
    return;
  }
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(x[c]) - mx);
  const double rel = t == DType::fp32 ? 2e-5 : t == DType::bf16 ? 1.0 / 256 : 1.0 / 1024;
  const double abs = t == DType::fp16 ? 6e-8 : 1e-30;  // fp16 subnormal spacing
  for (int64_t c = 0; c < cols; ++c) {
    const double ref = std::exp(static_cast<double>(x[c]) - mx) / sum;
    INFO(what, " col ", c, " y=", y[c], " ref=", ref);
    if (x[c] == -INFINITY) {
      REQUIRE(same_bits(y[c], 0.0f));
    } else {
      REQUIRE(std::fabs(y[c] - ref) <= rel * ref + abs);
    }
  }
}

// Runs softmax on `rows` x `cols` at the given element offsets (0 = aligned) and checks every row.
void check_softmax(int64_t rows, int64_t cols, DType t, uint64_t seed, int64_t offset = 0, bool in_place = false) {
  const size_t elem = dtype_size(t);
  const size_t n = static_cast<size_t>(rows * cols);
  const std::vector<float> x = softmax_rows(rows, cols, t, seed);
  DeviceArray in(n * elem), out(n * elem);
  void* d_in = in.at(static_cast<size_t>(offset) * elem);
  void* d_out = in_place ? d_in : out.at(static_cast<size_t>(offset) * elem);
  upload(d_in, x, t);
  launch_safe_softmax(d_in, d_out, t, rows, cols, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = download(d_out, n, t);
  const SoftmaxPlan plan = plan_safe_softmax(d_in, d_out, t, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const std::string what = std::string(dtype_name(t)) + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                             " offset=" + std::to_string(offset) + (in_place ? " in place" : "") + " row " +
                             std::to_string(r) + " (width " + std::to_string(plan.vector_width) + ", " +
                             std::to_string(plan.threads_per_row) + " threads/row, " +
                             (plan.row_in_registers ? "registers" : "fallback") + ")";
    check_softmax_row(&x[static_cast<size_t>(r * cols)], &y[static_cast<size_t>(r * cols)], cols, t, what);
  }
}

// The real repro binary, as a user runs it.
// --inputs' q.npy [B, Hq, L, E], k.npy and v.npy [B, Hkv, S, E] in `dir`, of N(0, 1) values drawn
// in that order from `seed`; Q's element `nan_at` (when not negative) a NaN.
struct InputShape {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
};
void write_random_inputs(const std::string& dir, uint32_t seed, const InputShape& s, int64_t nan_at = -1) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  auto tensor = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(gen);
    return v;
  };
  std::vector<float> q = tensor(s.batch * s.q_heads * s.q_len * s.head_dim);
  if (nan_at >= 0) q[static_cast<size_t>(nan_at)] = std::nanf("");
  write_npy_float32(dir + "/q.npy", {s.batch, s.q_heads, s.q_len, s.head_dim}, q.data());
  const int64_t kv = s.batch * s.kv_heads * s.kv_len * s.head_dim;
  write_npy_float32(dir + "/k.npy", {s.batch, s.kv_heads, s.kv_len, s.head_dim}, tensor(kv).data());
  write_npy_float32(dir + "/v.npy", {s.batch, s.kv_heads, s.kv_len, s.head_dim}, tensor(kv).data());
}

using test_util::run_repro_json;

}  // namespace

TEST_SUITE("gpu_kernels") {
  TEST_CASE("softmax at every row length around the vector, warp, block and register boundaries") {
    const int64_t lengths[] = {1, 2, 3, 31, 32, 33, 127, 128, 129, 1023, 1024, 1025, 4097, 16384, 16385};
    int cases = 0;
    for (DType t : kDTypes) {
      for (int64_t cols : lengths) {
        // Short rows: 37 rows, so the last block of four warp rows is partly empty.
        const int64_t rows = cols <= 1024 ? 37 : 5;
        check_softmax(rows, cols, t, kernel_test_seed() + static_cast<uint64_t>(cases++));
      }
    }
  }

  TEST_CASE("softmax with misaligned pointers, long odd rows, and in place") {
    int cases = 0;
    for (DType t : kDTypes) {
      for (int64_t offset : {1, 2, 3, 4}) check_softmax(9, 1024, t, kernel_test_seed() + 100 + cases++, offset);
      check_softmax(3, 20001, t, kernel_test_seed() + 200 + cases++);      // fallback, odd
      check_softmax(3, 4608, t, kernel_test_seed() + 300 + cases++, 0, true);  // the image layer's rows, in place
      check_softmax(37, 512, t, kernel_test_seed() + 400 + cases++, 0, true);  // warp rows, in place
    }
  }

  TEST_CASE("softmax is bitwise the same on every call") {
    for (DType t : kDTypes) {
      for (int64_t cols : {512, 2048, 4608, 16385}) {
        const int64_t rows = 64;
        const size_t n = static_cast<size_t>(rows * cols);
        DeviceArray in(n * dtype_size(t)), out(n * dtype_size(t));
        upload(in.at(0), random_values(n, t, kernel_test_seed() + 500), t);
        std::vector<float> first;
        for (int call = 0; call < 5; ++call) {
          launch_safe_softmax(in.at(0), out.at(0), t, rows, cols, nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> y = download(out.at(0), n, t);
          if (call == 0) first = y;
          INFO(dtype_name(t), " cols=", cols, " call ", call);
          CHECK(std::memcmp(y.data(), first.data(), n * sizeof(float)) == 0);
        }
      }
    }
  }

  TEST_CASE("convert_scale: bit-exact for every dtype pair, with tails and misaligned pointers") {
    int cases = 0;
    for (DType src : kDTypes) {
      for (DType dst : kDTypes) {
        for (int64_t n : {1, 7, 8, 9, 33, 1000003}) {
          for (int64_t offset : {0, 1}) {
            const float factor = 0.353553f;
            const std::vector<float> x = random_values(static_cast<size_t>(n), src, kernel_test_seed() + cases++);
            DeviceArray a(static_cast<size_t>(n) * 4), b(static_cast<size_t>(n) * 4);
            void* d_src = a.at(static_cast<size_t>(offset) * dtype_size(src));
            void* d_dst = b.at(static_cast<size_t>(offset) * dtype_size(dst));
            upload(d_src, x, src);
            launch_convert_scale(d_src, src, d_dst, dst, n, factor, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> y = download(d_dst, static_cast<size_t>(n), dst);
            for (int64_t i = 0; i < n; ++i) {
              const float expected = round_to_dtype(x[static_cast<size_t>(i)] * factor, dst);
              INFO(dtype_name(src), "->", dtype_name(dst), " n=", n, " offset=", offset, " i=", i);
              REQUIRE(same_bits(y[static_cast<size_t>(i)], expected));
            }
          }
        }
      }
    }
  }

  TEST_CASE("convert_scale_batch: three tensors of different sizes in one launch") {
    for (DType src : {DType::bf16, DType::fp16}) {
      const int64_t sizes[] = {1000, 77, 4099};
      std::vector<std::vector<float>> x;
      std::vector<std::unique_ptr<DeviceArray>> a, b;
      std::vector<ConvertJob> jobs;
      for (int j = 0; j < 3; ++j) {
        x.push_back(random_values(static_cast<size_t>(sizes[j]), src, kernel_test_seed() + 600 + j));
        a.push_back(std::make_unique<DeviceArray>(static_cast<size_t>(sizes[j]) * 2));
        b.push_back(std::make_unique<DeviceArray>(static_cast<size_t>(sizes[j]) * 4));
        upload(a.back()->at(0), x.back(), src);
        jobs.push_back({a.back()->at(0), b.back()->at(0), sizes[j]});
      }
      launch_convert_scale_batch(jobs.data(), 3, src, DType::fp32, 1.0f, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      for (int j = 0; j < 3; ++j) {
        const std::vector<float> y = download(b[static_cast<size_t>(j)]->at(0), static_cast<size_t>(sizes[j]), DType::fp32);
        INFO(dtype_name(src), " job ", j);
        CHECK(std::memcmp(y.data(), x[static_cast<size_t>(j)].data(), y.size() * sizeof(float)) == 0);
      }
    }
  }

  TEST_CASE("fill writes every element, NaN included") {
    for (DType t : kDTypes) {
      for (int64_t n : {1, 9, 100001}) {
        for (int64_t offset : {0, 1}) {
          DeviceArray a(static_cast<size_t>(n) * 4);
          void* d = a.at(static_cast<size_t>(offset) * dtype_size(t));
          CUDA_CHECK(cudaMemset(d, 0, static_cast<size_t>(n) * dtype_size(t)));
          launch_fill(d, t, n, std::nanf(""), nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          for (float v : download(d, static_cast<size_t>(n), t)) REQUIRE(std::isnan(v));
          launch_fill(d, t, n, -1.5f, nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          for (float v : download(d, static_cast<size_t>(n), t)) REQUIRE(v == -1.5f);
        }
      }
    }
  }

  TEST_CASE("add_mask: bit-exact with every broadcast, vectorised and element by element") {
    int cases = 0;
    for (DType st : {DType::fp32, DType::bf16}) {
      for (DType mt : kDTypes) {
        // L*S = 64 (vectors) and 15 (no vector fits a slice).
        for (auto [L, S] : {std::pair<int64_t, int64_t>{8, 8}, {3, 5}}) {
          for (int dims = 0; dims < 4; ++dims) {
            const int64_t B = 2, H = 3;
            const bool per_b = dims & 1, per_h = dims & 2;
            const int64_t n = B * H * L * S, mask_n = (per_b ? B : 1) * (per_h ? H : 1) * L * S;
            std::vector<float> scores = random_values(static_cast<size_t>(n), st, kernel_test_seed() + 700 + cases);
            std::vector<float> mask = random_values(static_cast<size_t>(mask_n), mt, kernel_test_seed() + 800 + cases++);
            mask[0] = -INFINITY;
            DeviceArray ds(static_cast<size_t>(n) * 4), dm(static_cast<size_t>(mask_n) * 4);
            upload(ds.at(0), scores, st);
            upload(dm.at(0), mask, mt);
            launch_add_mask(ds.at(0), st, dm.at(0), mt, B, H, L, S, per_b, per_h, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> y = download(ds.at(0), static_cast<size_t>(n), st);
            for (int64_t i = 0; i < n; ++i) {
              const int64_t ls = i % (L * S), h = (i / (L * S)) % H, b = i / (L * S * H);
              const int64_t slice = (per_b ? b : 0) * (per_h ? H : 1) + (per_h ? h : 0);
              const float expected = round_to_dtype(scores[static_cast<size_t>(i)] + mask[static_cast<size_t>(slice * L * S + ls)], st);
              INFO(dtype_name(st), "+", dtype_name(mt), " L=", L, " S=", S, " dims=", dims, " i=", i);
              REQUIRE(same_bits(y[static_cast<size_t>(i)], expected));
            }
          }
        }
      }
    }
  }

  TEST_CASE("dropout: the same Philox decisions and scaling as the host, per element") {
    int cases = 0;
    for (DType t : kDTypes) {
      for (int64_t n : {1, 5, 8, 1000003}) {
        for (int64_t offset : {0, 1}) {
          const uint64_t seed = kernel_test_seed() + 900 + cases++, philox_offset = 12;
          const float keep = 0.8f;
          const std::vector<float> x = random_values(static_cast<size_t>(n), t, seed);
          // In place (the input overwritten), then out of place with native_dropout's mask.
          for (bool in_place : {true, false}) {
            DeviceArray a(static_cast<size_t>(n) * 4), b(static_cast<size_t>(n) * 4), m(static_cast<size_t>(n) + 16);
            void* d = a.at(static_cast<size_t>(offset) * dtype_size(t));
            void* out = in_place ? d : b.at(static_cast<size_t>(offset) * dtype_size(t));
            auto* mask = in_place ? nullptr : reinterpret_cast<uint8_t*>(m.at(0));
            upload(d, x, t);
            if (mask) CUDA_CHECK(cudaMemset(mask, 7, static_cast<size_t>(n)));
            launch_dropout(d, out, mask, t, n, seed, philox_offset, keep, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> y = download(out, static_cast<size_t>(n), t);
            std::vector<uint8_t> kept_bytes(static_cast<size_t>(n));
            if (mask) CUDA_CHECK(cudaMemcpy(kept_bytes.data(), mask, kept_bytes.size(), cudaMemcpyDeviceToHost));
            const std::vector<float> input_after = download(d, static_cast<size_t>(n), t);
            const float inv_keep = 1.0f / keep;
            for (int64_t i = 0; i < n; ++i) {
              const bool kept = dropout_keep(seed, philox_offset, static_cast<uint64_t>(i), keep);
              const float expected = kept ? round_to_dtype(x[static_cast<size_t>(i)] * inv_keep, t) : 0.0f;
              INFO(dtype_name(t), " n=", n, " offset=", offset, " in_place=", in_place, " i=", i);
              REQUIRE(same_bits(y[static_cast<size_t>(i)], expected));
              if (mask) REQUIRE(kept_bytes[static_cast<size_t>(i)] == (kept ? 1 : 0));
              if (!in_place) REQUIRE(same_bits(input_after[static_cast<size_t>(i)], x[static_cast<size_t>(i)]));
            }
          }
        }
      }
    }
  }

  TEST_CASE("dropout and the mask in chunks of query rows: each element decided by its index in the whole tensor") {
    // A chunk of rows [row0, row0 + rows) of every head gives exactly the elements the whole tensor
    // gives there (fix 5's chunks must not change the result); S = 6 and 8 and rows that do not
    // divide L cover the element-by-element and the vector paths.
    for (DType t : kDTypes) {
      for (auto [L, S] : {std::pair<int64_t, int64_t>{10, 8}, {7, 6}}) {
        const int64_t BH = 3, n_whole = BH * L * S;
        const uint64_t seed = kernel_test_seed() + 950, philox_offset = 4;
        const float keep = 0.7f;
        const std::vector<float> whole = random_values(static_cast<size_t>(n_whole), t, seed);
        const std::vector<float> mask_values = random_values(static_cast<size_t>(L * S), t, seed + 1);
        for (int64_t rows : {int64_t{3}, L}) {
          for (int64_t row0 = 0; row0 < L; row0 += rows) {
            const int64_t r = std::min(rows, L - row0), n = BH * r * S;
            std::vector<float> chunk(static_cast<size_t>(n));
            for (int64_t h = 0; h < BH; ++h)
              for (int64_t i = 0; i < r * S; ++i) chunk[static_cast<size_t>(h * r * S + i)] = whole[static_cast<size_t>((h * L + row0) * S + i)];
            DeviceArray dc(static_cast<size_t>(n) * 4), dm(static_cast<size_t>(L * S) * 4);
            upload(dc.at(0), chunk, t);
            upload(dm.at(0), mask_values, t);
            launch_add_mask(dc.at(0), t, dm.at(0), t, 1, BH, L, S, false, false, nullptr, row0, r);
            launch_dropout(dc.at(0), dc.at(0), nullptr, t, n, seed, philox_offset, keep, nullptr, RowChunk{r, row0, L, S});
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> y = download(dc.at(0), static_cast<size_t>(n), t);
            for (int64_t h = 0; h < BH; ++h) {
              for (int64_t i = 0; i < r * S; ++i) {
                const int64_t whole_i = (h * L + row0) * S + i;
                const float masked = round_to_dtype(whole[static_cast<size_t>(whole_i)] + mask_values[static_cast<size_t>(row0 * S + i)], t);
                const bool kept = dropout_keep(seed, philox_offset, static_cast<uint64_t>(whole_i), keep);
                const float expected = kept ? round_to_dtype(masked * (1.0f / keep), t) : 0.0f;
                INFO(dtype_name(t), " L=", L, " S=", S, " rows=", rows, " row0=", row0, " h=", h, " i=", i);
                REQUIRE(same_bits(y[static_cast<size_t>(h * r * S + i)], expected));
              }
            }
          }
        }
      }
    }
  }

  TEST_CASE("additive masks from boolean masks and the causal rule") {
    for (DType t : kDTypes) {
      for (auto [L, S] : {std::pair<int64_t, int64_t>{16, 16}, {5, 7}}) {
        const int64_t slices = 3, n = slices * L * S;
        std::vector<uint8_t> keep(static_cast<size_t>(n));
        std::mt19937_64 rng(kernel_test_seed() + 1000);
        for (auto& k : keep) k = static_cast<uint8_t>(rng() % 3 != 0);
        DeviceArray dbool(static_cast<size_t>(n)), dmask(static_cast<size_t>(n) * 4);
        CUDA_CHECK(cudaMemcpy(dbool.at(0), keep.data(), keep.size(), cudaMemcpyHostToDevice));
        launch_build_additive_mask(reinterpret_cast<const uint8_t*>(dbool.at(0)), dmask.at(0), t, slices, L, S, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> y = download(dmask.at(0), static_cast<size_t>(n), t);
        for (int64_t i = 0; i < n; ++i) REQUIRE(y[static_cast<size_t>(i)] == (keep[static_cast<size_t>(i)] ? 0.0f : -INFINITY));
        launch_build_additive_mask(nullptr, dmask.at(0), t, 1, L, S, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        y = download(dmask.at(0), static_cast<size_t>(L * S), t);
        for (int64_t l = 0; l < L; ++l) {
          for (int64_t s = 0; s < S; ++s) REQUIRE(y[static_cast<size_t>(l * S + s)] == (s <= l ? 0.0f : -INFINITY));
        }
      }
    }
  }

  TEST_CASE("repeat_heads copies every head group times, from contiguous and [B, S, H, E] layouts") {
    for (DType t : kDTypes) {
      for (int64_t E : {64, 5}) {
        for (bool bshe : {false, true}) {
          const int64_t B = 2, Hkv = 3, group = 2, S = 7;
          const HeadStrides in = bshe ? HeadStrides{S * Hkv * E, E, Hkv * E} : contiguous_bhse(Hkv, S, E);
          const std::vector<float> x = random_values(static_cast<size_t>(B * Hkv * S * E), t, kernel_test_seed() + 1100);
          const int64_t n = B * Hkv * group * S * E;
          DeviceArray src(x.size() * 4), dst(static_cast<size_t>(n) * 4);
          upload(src.at(0), x, t);
          launch_repeat_heads(src.at(0), in, dst.at(0), t, B, Hkv, group, S, E, nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> y = download(dst.at(0), static_cast<size_t>(n), t);
          for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hkv * group; ++h)
              for (int64_t s = 0; s < S; ++s)
                for (int64_t e = 0; e < E; ++e) {
                  const float got = y[static_cast<size_t>(((b * Hkv * group + h) * S + s) * E + e)];
                  const float want = x[static_cast<size_t>(b * in.batch + (h / group) * in.head + s * in.row + e)];
                  INFO(dtype_name(t), " E=", E, " bshe=", bshe);
                  REQUIRE(same_bits(got, want));
                }
        }
      }
    }
  }

  TEST_CASE("repro bench end to end: statistics, a fix comparison, and a hang reported like a run's") {
    const test_util::JsonRun plain = run_repro_json({"bench", "-w", "2", "-n", "7", "-L", "64", "--check"});
    INFO(plain.out);
    REQUIRE(plain.exit_code == 0);
    REQUIRE(plain.result.is_object());
    const auto& j = plain.result;
    CHECK(j["meta"]["command"] == "bench");
    CHECK(j["devices"].size() == 1);
    CHECK(j["outcome"] == "pass");
    CHECK(j["check"]["passed"] == true);
    CHECK(j["config"]["input_sets"].get<int>() >= 1);
    REQUIRE(j["benchmarks"].size() == 1);
    const auto& wall = j["benchmarks"][0]["summaries"]["wall"];
    CHECK(wall["n"] == 7);
    CHECK(wall["median_ms"].get<double>() > 0);
    CHECK(wall["median_ci95_ms"][0].get<double>() <= wall["median_ms"].get<double>());
    const auto& summaries = j["benchmarks"][0]["summaries"];
    CHECK(summaries["gpu"]["n"] == 7);  // the timed pass: the GPU span of every call
    CHECK(summaries["gpu"]["median_ms"].get<double>() > 0);
    CHECK(summaries["gpu"]["median_ms"].get<double>() <= summaries["event"]["median_ms"].get<double>());  // inside the call
    CHECK(j["benchmarks"][0]["stages"].size() >= 7);
    for (const auto& stage : j["benchmarks"][0]["stages"]) CHECK(stage["n"] == 7);  // the stage pass
    CHECK(plain.out.find("Throughput:") != std::string::npos);

    const test_util::JsonRun fix = run_repro_json({"bench", "-w", "1", "-n", "4", "-L", "64", "--input-sets", "2", "--fix-overhead", "1,4"});
    INFO(fix.out);
    REQUIRE(fix.exit_code == 0);
    REQUIRE(fix.result["fix_overhead"].size() == 2);
    for (const auto& c : fix.result["fix_overhead"]) {
      CHECK(c["is_skipped"] == false);
      CHECK(c["ratio_wall"]["ratio"].get<double>() > 0);
      CHECK(c["a"]["summaries"]["wall"]["n"] == 4);
      CHECK(c["b"]["summaries"]["wall"]["n"] == 4);
    }
    CHECK(fix.result["fix_overhead"][1]["b"]["settings"]["alloc"] == "async");

    const test_util::JsonRun hang = run_repro_json({"bench", "-w", "0", "-n", "3", "-L", "64", "--inject", "hang:softmax", "--stage-timeout", "1",
                                               "--on-hang", "kill"});
    CHECK(hang.exit_code == kExitHang);
    REQUIRE(hang.result.is_object());
    CHECK(hang.result["outcome"] == "hang");
    CHECK(hang.result["watchdog"]["stage"] == "softmax");
  }

  TEST_CASE("--inputs end to end: a run and a bench on the tensors the parent read, their shape, checked") {
    // Read while parsing (run_options.h) and handed to the GPU child: nothing reads them again.
    const std::string dir = test_util::temp_dir("gpu_inputs");
    write_random_inputs(dir, 7, {1, 4, 2, 48, 40, 16});
    const test_util::JsonRun run = run_repro_json({"--inputs", dir, "--check", "--iters", "2", "--save-output", dir + "/out.npy"});
    INFO(run.out, run.err);
    REQUIRE(run.exit_code == 0);
    CHECK(run.out.find("B=1 Hq=4 Hkv=2 L=48 S=40 E=16 dtype=fp32") != std::string::npos);
    CHECK(run.out.find("inputs=" + dir) != std::string::npos);
    CHECK(run.result["config"]["problem"]["kv_len"] == 40);
    CHECK(run.result["check"]["passed"] == true);
    CHECK(read_npy(dir + "/out.npy").shape == std::vector<int64_t>{1, 4, 48, 16});
    const test_util::JsonRun bench = run_repro_json({"bench", "--inputs", dir, "-w", "0", "-n", "2", "--check", "--dtype", "bf16"});
    INFO(bench.out, bench.err);
    REQUIRE(bench.exit_code == 0);
    CHECK(bench.out.find("B=1 Hq=4 Hkv=2 L=48 S=40 E=16 dtype=bf16") != std::string::npos);
    CHECK(bench.result["check"]["passed"] == true);
    test_util::remove_tree(dir);
  }

  TEST_CASE("a NaN reaches every layer's result, and every layer's is counted: checked, or counted on the GPU") {
    // --inputs gives every layer the same tensors, so each layer's result has the same non-finite
    // values. The layers a run neither checks nor saves are counted on the device (the last one,
    // and the checked ones, on the host): 3 layers must count three times what 1 does.
    const std::string dir = test_util::temp_dir("gpu_nan_layers");
    // Q's element 5: head 0, query row 0, so its scores, probabilities and output row.
    write_random_inputs(dir, 11, {1, 2, 2, 24, 32, 16}, 5);
    auto nonfinite = [&](std::vector<std::string> args) {
      args.insert(args.begin(), {"--inputs", dir});
      const test_util::JsonRun run = run_repro_json(args);
      INFO(run.out, run.err);
      CHECK(run.exit_code == kExitMismatch);  // NaN never passes, checked or not
      REQUIRE(run.result.is_object());
      return run.result["nonfinite_outputs"].get<int64_t>();
    };
    const int64_t one = nonfinite({});
    CHECK(one > 0);
    CHECK(nonfinite({"--layers", "3"}) == 3 * one);
    CHECK(nonfinite({"--layers", "3", "--check", "--check-layers", "last"}) == 3 * one);
    CHECK(nonfinite({"--layers", "3", "--check"}) == 3 * one);
    test_util::remove_tree(dir);
  }
}
