// test_inputs.cpp: --inputs DIR, replaying captured tensors from .npy files.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "math_sdpa/errors.h"
#include "math_sdpa/npy.h"
#include "repro/cli/inputs.h"
#include "run_program.h"

using namespace sdpa;

namespace {

using test_util::TempDir;

// A version 1.0 .npy file with any descr (numpy's layout: header padded to 64 bytes).
void write_raw_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                   const std::vector<uint8_t>& data) {
  std::string dims;
  for (auto d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size() & 0xff) << static_cast<char>(header.size() >> 8)
    << header;
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

std::vector<float> ramp(size_t n, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * step);
  return v;
}

void write_qkv(const std::string& dir, int64_t B, int64_t H, int64_t Hkv, int64_t L, int64_t S, int64_t E) {
  write_npy_float32(dir + "/q.npy", {B, H, L, E}, ramp(static_cast<size_t>(B * H * L * E), 0.1f).data());
  write_npy_float32(dir + "/k.npy", {B, Hkv, S, E}, ramp(static_cast<size_t>(B * Hkv * S * E), 0.2f).data());
  write_npy_float32(dir + "/v.npy", {B, Hkv, S, E}, ramp(static_cast<size_t>(B * Hkv * S * E), 0.3f).data());
}

}  // namespace

TEST_SUITE("inputs") {
  TEST_CASE("float32 files set the shapes and dtype; --dtype rounds them") {
    TempDir dir;
    write_qkv(dir.path, 2, 4, 2, 5, 7, 8);
    SdpaProblem p;
    const HostInputs in = load_npy_inputs(dir.path, p, false);
    CHECK(p.shape_string() == "B=2 Hq=4 Hkv=2 L=5 S=7 E=8");
    CHECK(p.dtype == DType::fp32);
    CHECK(p.mask == MaskKind::none);
    CHECK(in.q[1] == std::sin(0.1f));
    SdpaProblem rounded;
    rounded.dtype = DType::bf16;
    const HostInputs in16 = load_npy_inputs(dir.path, rounded, true);
    CHECK(rounded.dtype == DType::bf16);
    CHECK(in16.q[1] == round_to_dtype(std::sin(0.1f), DType::bf16));
    // The backward's gradient of the output, dout.npy: taken when it is Q's shape and dtype, else refused.
    CHECK(in.grad_out.empty());
    write_npy_float32(dir.path + "/dout.npy", {2, 4, 5, 8}, ramp(2 * 4 * 5 * 8, 0.7f).data());
    SdpaProblem with_grad;
    const HostInputs graded = load_npy_inputs(dir.path, with_grad, false);
    REQUIRE(graded.grad_out.size() == 2 * 4 * 5 * 8);
    CHECK(graded.grad_out[1] == std::sin(0.7f));
    write_npy_float32(dir.path + "/dout.npy", {2, 4, 5, 7}, ramp(2 * 4 * 5 * 7, 0.7f).data());
    SdpaProblem wrong;
    CHECK_THROWS_WITH_AS(load_npy_inputs(dir.path, wrong, false),
                         doctest::Contains("the gradient of the output has q.npy's shape"), InputError);
  }

  TEST_CASE("float16 and bfloat16 (uint16) files, a bool mask and a float mask") {
    TempDir dir;
    const std::vector<uint8_t> half_ones(2 * 1 * 1 * 3 * 2 * 2, 0);
    std::vector<uint8_t> fp16_data;
    for (int i = 0; i < 6; ++i) {
      const uint16_t h = float_to_fp16_bits(0.5f * i);
      fp16_data.push_back(h & 0xff);
      fp16_data.push_back(h >> 8);
    }
    for (const std::string name : {"q", "k", "v"}) write_raw_npy(dir.path + "/" + name + ".npy", "<f2", {1, 1, 3, 2}, fp16_data);
    write_raw_npy(dir.path + "/mask.npy", "|b1", {3, 3}, {1, 0, 0, 1, 1, 0, 1, 1, 1});
    SdpaProblem p;
    HostInputs in = load_npy_inputs(dir.path, p, false);
    CHECK(p.dtype == DType::fp16);
    CHECK(p.mask == MaskKind::boolean);
    CHECK_FALSE(p.mask_per_batch);
    CHECK(in.q[3] == 1.5f);
    CHECK(in.bool_mask == std::vector<uint8_t>{1, 0, 0, 1, 1, 0, 1, 1, 1});

    write_raw_npy(dir.path + "/mask.npy", "<f2", {1, 1, 3, 3}, std::vector<uint8_t>(18, 0));
    SdpaProblem q;
    in = load_npy_inputs(dir.path, q, false);
    CHECK(q.mask == MaskKind::additive);
    CHECK(in.additive_mask.size() == 9);

    for (const std::string name : {"q", "k", "v"}) write_raw_npy(dir.path + "/" + name + ".npy", "<u2", {1, 1, 3, 2}, fp16_data);
    std::remove((dir.path + "/mask.npy").c_str());
    SdpaProblem r;
    in = load_npy_inputs(dir.path, r, false);
    CHECK(r.dtype == DType::bf16);
    (void)half_ones;
  }

  TEST_CASE("mismatched, missing and malformed inputs are one-line InputErrors") {
    TempDir dir;
    SdpaProblem p;
    CHECK_THROWS_AS(load_npy_inputs(dir.path, p, false), InputError);  // no files at all
    write_qkv(dir.path, 2, 4, 2, 5, 7, 8);
    write_npy_float32(dir.path + "/v.npy", {2, 2, 6, 8}, ramp(2 * 2 * 6 * 8, 0.3f).data());
    CHECK_THROWS_WITH_AS(load_npy_inputs(dir.path, p, false), doctest::Contains("same shape"), InputError);
    write_qkv(dir.path, 2, 4, 3, 5, 7, 8);  // 4 query heads, 3 kv heads
    CHECK_THROWS_WITH_AS(load_npy_inputs(dir.path, p, false), doctest::Contains("multiple"), InputError);
    write_qkv(dir.path, 2, 4, 2, 5, 7, 8);
    write_npy_float32(dir.path + "/k.npy", {2, 2, 7, 4}, ramp(2 * 2 * 7 * 4, 0.2f).data());
    write_npy_float32(dir.path + "/v.npy", {2, 2, 7, 4}, ramp(2 * 2 * 7 * 4, 0.2f).data());
    CHECK_THROWS_WITH_AS(load_npy_inputs(dir.path, p, false), doctest::Contains("head dim"), InputError);
    write_qkv(dir.path, 2, 4, 2, 5, 7, 8);
    write_npy_float32(dir.path + "/mask.npy", {5, 6}, ramp(30, 0.3f).data());
    CHECK_THROWS_WITH_AS(load_npy_inputs(dir.path, p, false), doctest::Contains("mask.npy"), InputError);
    std::remove((dir.path + "/mask.npy").c_str());
    write_npy_float32(dir.path + "/q.npy", {2, 4, 40}, ramp(320, 0.1f).data());
    CHECK_THROWS_WITH_AS(load_npy_inputs(dir.path, p, false), doctest::Contains("4 dimensions"), InputError);
    write_qkv(dir.path, 2, 4, 2, 5, 7, 8);
    {
      std::ofstream truncate(dir.path + "/k.npy", std::ios::binary | std::ios::trunc);
      truncate << "\x93NUMPY";
    }
    CHECK_THROWS_AS(load_npy_inputs(dir.path, p, false), InputError);
    write_qkv(dir.path, 2, 4, 2, 5, 7, 8);
    SdpaProblem needs_mask;
    needs_mask.mask = MaskKind::boolean;
    CHECK_THROWS_WITH_AS(load_npy_inputs(dir.path, needs_mask, false), doctest::Contains("mask.npy"), InputError);
  }

  TEST_CASE("--save-inputs writes each layer's inputs as the run makes them, bit for bit, and --inputs reads them back") {
    const TempDir dir("save_inputs");
    test_util::ProgramOptions options;
    options.timeout_s = 60;
    const auto r = test_util::run_program({SDPA_REPRO_BINARY, "--plan", "-b", "2", "--heads", "4", "--kv-heads", "2", "-L", "24",
                                           "-S", "40", "--mask", "bool", "--mask-dims", "Bx1", "--layers", "3", "--backward",
                                           "--save-inputs", dir / "in"},
                                          options);
    REQUIRE(r.exit_code == 0);
    SdpaProblem p;
    p.batch = 2, p.q_heads = 4, p.kv_heads = 2, p.q_len = 24, p.kv_len = 40, p.mask = MaskKind::boolean, p.mask_per_batch = true;
    auto floats = [](const NpyArray& a) {
      std::vector<float> v(static_cast<size_t>(a.element_count()));
      std::memcpy(v.data(), a.data.data(), v.size() * 4);
      return v;
    };
    for (int l = 1; l <= 3; ++l) {
      CAPTURE(l);
      const HostInputs want = layer_inputs(p, l, nullptr, true);
      const std::string layer = dir / "in/layer" + std::to_string(l) + ".";
      const NpyArray q = read_npy(layer + "q.npy"), k = read_npy(layer + "k.npy"), dout = read_npy(layer + "grad_out.npy");
      CHECK(q.shape == std::vector<int64_t>{2, 4, 24, 64});
      CHECK(k.shape == std::vector<int64_t>{2, 2, 40, 64});
      CHECK(floats(q) == want.q);
      CHECK(floats(k) == want.k);
      CHECK(floats(read_npy(layer + "v.npy")) == want.v);
      CHECK(floats(dout) == want.grad_out);
    }
    const NpyArray mask = read_npy(dir / "in/mask.npy");
    CHECK(mask.type == NpyType::bool8);
    CHECK(mask.shape == std::vector<int64_t>{2, 1, 24, 40});
    CHECK(mask.data == layer_inputs(p, 1, nullptr, false).bool_mask);
    CHECK_FALSE(test_util::file_text(dir / "in/layer4.q.npy").size());
  }
}
