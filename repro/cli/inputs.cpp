// inputs.cpp: reading and checking the --inputs files (inputs.h).
#include "repro/cli/inputs.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "math_sdpa/errors.h"
#include "math_sdpa/npy.h"

namespace sdpa {

namespace {

std::string dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<float> to_floats(const NpyArray& a, DType round_to) {
  std::vector<float> out(static_cast<size_t>(a.element_count()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (a.type == NpyType::float32) {
      uint32_t bits = 0;
      for (int b = 0; b < 4; ++b) bits |= static_cast<uint32_t>(a.data[i * 4 + b]) << (8 * b);
      out[i] = bits_float(bits);
    } else {
      const uint16_t bits = static_cast<uint16_t>(a.data[i * 2] | (a.data[i * 2 + 1] << 8));
      out[i] = a.type == NpyType::float16 ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
    }
    out[i] = round_to_dtype(out[i], round_to);
  }
  return out;
}

DType file_dtype(NpyType t, const std::string& what) {
  switch (t) {
    case NpyType::float32: return DType::fp32;
    case NpyType::float16: return DType::fp16;
    case NpyType::uint16: return DType::bf16;
    case NpyType::bool8: break;
  }
  throw InputError(what + ": must be float32, float16 or bfloat16 (stored as uint16), not bool");
}

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// The directory and its three required files, named in the error when one is missing.
void check_inputs_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status)) throw InputError("--inputs: " + dir + " does not exist");
  if (!fs::is_directory(status)) throw InputError("--inputs: " + dir + " is not a directory");
  for (const char* name : {"q.npy", "k.npy", "v.npy"}) {
    if (!fs::exists(fs::status(fs::path(dir) / name, ec))) {
      throw InputError("--inputs: " + dir + " has no " + name + " (it needs q.npy, k.npy, v.npy, and mask.npy if masked)");
    }
  }
}

}  // namespace

HostInputs load_npy_inputs(const std::string& dir, SdpaProblem& p, bool dtype_given) {
  check_inputs_folder(dir);
  const NpyArray q = read_npy(dir + "/q.npy"), k = read_npy(dir + "/k.npy"), v = read_npy(dir + "/v.npy");
  for (const auto* a : {&q, &k, &v}) {
    if (a->shape.size() != 4) {
      throw InputError(std::string(a == &q ? "q" : a == &k ? "k" : "v") + ".npy: expected 4 dimensions [B, H, len, E], got " +
                       dims(a->shape));
    }
  }
  const DType type = file_dtype(q.type, "q.npy");
  if (k.type != q.type || v.type != q.type) throw InputError("q.npy, k.npy and v.npy must have the same dtype");
  if (k.shape != v.shape) throw InputError("k.npy " + dims(k.shape) + " and v.npy " + dims(v.shape) + " must have the same shape");
  if (k.shape[0] != q.shape[0] || k.shape[3] != q.shape[3]) {
    throw InputError("q.npy " + dims(q.shape) + " and k.npy " + dims(k.shape) + " must agree on batch and head dim");
  }
  if (!dtype_given) p.dtype = type;
  p.batch = q.shape[0];
  p.q_heads = q.shape[1];
  p.q_len = q.shape[2];
  p.head_dim = q.shape[3];
  p.kv_heads = k.shape[1];
  p.kv_len = k.shape[2];

  HostInputs in;
  const std::string mask_path = dir + "/mask.npy";
  if (file_exists(mask_path)) {
    if (p.mask == MaskKind::causal) throw InputError("mask.npy and --mask causal exclude each other");
    const NpyArray m = read_npy(mask_path);
    const auto& s = m.shape;
    const bool as_2d = s.size() == 2, as_4d = s.size() == 4;
    if (!(as_2d || as_4d) || s[s.size() - 2] != p.q_len || s[s.size() - 1] != p.kv_len ||
        (as_4d && ((s[0] != 1 && s[0] != p.batch) || (s[1] != 1 && s[1] != p.q_heads)))) {
      throw InputError("mask.npy " + dims(s) + ": expected [L, S] or [B|1, H|1, L, S] with L=" + std::to_string(p.q_len) +
                       " S=" + std::to_string(p.kv_len));
    }
    p.mask_per_batch = as_4d && s[0] == p.batch && p.batch > 1;
    p.mask_per_head = as_4d && s[1] == p.q_heads && p.q_heads > 1;
    if (m.type == NpyType::bool8) {
      p.mask = MaskKind::boolean;
      in.bool_mask.resize(m.data.size());
      for (size_t i = 0; i < m.data.size(); ++i) in.bool_mask[i] = m.data[i] ? 1 : 0;
    } else {
      if (m.type != q.type) throw InputError("mask.npy: a float mask must have the same dtype as q.npy");
      p.mask = MaskKind::additive;
      in.additive_mask = to_floats(m, p.dtype);
    }
  } else if (p.has_mask_input()) {
    throw InputError("--mask " + std::string(mask_kind_name(p.mask)) + " needs " + mask_path);
  }
  p.validate();
  in.q = to_floats(q, p.dtype);
  in.k = to_floats(k, p.dtype);
  in.v = to_floats(v, p.dtype);
  // --backward's gradient of the output, when the directory has it (else a seeded random one).
  const std::string dout_path = dir + "/dout.npy";
  if (file_exists(dout_path)) {
    const NpyArray d = read_npy(dout_path);
    if (d.shape != q.shape || d.type != q.type) {
      throw InputError("dout.npy " + dims(d.shape) + ": the gradient of the output has q.npy's shape " + dims(q.shape) +
                       " and dtype");
    }
    in.grad_out = to_floats(d, p.dtype);
  }
  return in;
}

void save_layer_inputs(const std::string& dir, const SdpaProblem& p, int layers, const HostInputs* given, bool backward) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError("--save-inputs: cannot create " + dir + ": " + ec.message());
  const std::vector<int64_t> q = {p.batch, p.q_heads, p.q_len, p.head_dim}, kv = {p.batch, p.kv_heads, p.kv_len, p.head_dim};
  for (int l = 1; l <= layers; ++l) {
    const HostInputs in = layer_inputs(p, l, given, backward);
    const std::string layer = dir + "/layer" + std::to_string(l) + ".";
    write_npy_float32(layer + "q.npy", q, in.q.data());
    write_npy_float32(layer + "k.npy", kv, in.k.data());
    write_npy_float32(layer + "v.npy", kv, in.v.data());
    if (backward) write_npy_float32(layer + "grad_out.npy", q, in.grad_out.data());
    // The mask is the model's, the same for every layer: layer 1's inputs bring it.
    if (l != 1) continue;
    const int64_t mask_batch = p.mask_batch(), mask_heads = p.mask_heads();
    const std::vector<int64_t> mask = {mask_batch, mask_heads, p.q_len, p.kv_len};
    if (p.mask == MaskKind::boolean) write_npy_bool(dir + "/mask.npy", mask, in.bool_mask.data());
    if (p.mask == MaskKind::additive) write_npy_float32(dir + "/mask.npy", mask, in.additive_mask.data());
  }
}

}  // namespace sdpa
