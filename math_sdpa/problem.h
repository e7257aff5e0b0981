// problem.h: what one SDPA call computes (shapes, dtype, mask, dropout, scale, precision mode)
// and the host-side inputs for it.
//
// This is the configuration value that flows one way through the harness: the CLI builds it,
// scenarios adjust it, the GPU path and the float64 reference both consume it unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtype.h"

namespace sdpa {

// How softmax and the GEMMs run for fp16/bf16 inputs (fp32 inputs run in fp32 either way).
enum class Precision {
  upcast,  // PyTorch's default: Q, K, V converted to fp32, whole path fp32, output cast back
  native,  // allow_fp16_bf16_reduction_math_sdp(True): path stays in the input dtype
};

enum class MaskKind {
  none,
  boolean,  // true = attend; becomes an additive 0 / -inf mask in the input dtype
  additive, // a float mask in the input dtype, added as given
  causal,   // is_causal: top-left aligned lower triangle over L x S
};

// What a boolean mask's random inputs look like.
enum class MaskPattern {
  random,        // about a quarter of the keys dropped, one fully masked row per slice
  text_padding,  // a joint text+image layer's key padding: see SdpaProblem::text_tokens
};

const char* precision_name(Precision p);
const char* mask_pattern_name(MaskPattern m);
const char* mask_kind_name(MaskKind m);

struct SdpaProblem {
  int64_t batch = 2;
  int64_t q_heads = 8;
  int64_t kv_heads = 8;   // q_heads must be a multiple; != q_heads means grouped-query attention
  int64_t q_len = 128;    // L
  int64_t kv_len = 128;   // S
  int64_t head_dim = 64;  // E (the value head dim is the same)
  DType dtype = DType::bf16;
  Precision precision = Precision::upcast;
  MaskKind mask = MaskKind::none;
  bool mask_per_batch = false;  // mask shape [B|1, H|1, L, S]
  bool mask_per_head = false;
  // --text-padding TOKENS:VALID (mask_pattern text_padding, a boolean [B, 1, L, S] mask): the first
  // text_tokens keys are text, the rest image; batch entry 0 attends to all of them, the later
  // entries only to their first text_valid text keys (the rest of their text is padding).
  MaskPattern mask_pattern = MaskPattern::random;
  int64_t text_tokens = 0, text_valid = 0;
  double dropout_p = 0.0;
  std::optional<double> scale;  // default 1/sqrt(E)
  uint64_t seed = 0x5d9a;       // inputs and the dropout stream
  uint64_t dropout_offset = 0;  // Philox offset, as PyTorch advances it per call

  bool gqa() const { return kv_heads != q_heads; }
  // Dtype of the scores, probabilities and GEMM outputs inside the path.
  DType compute_dtype() const { return precision == Precision::upcast ? DType::fp32 : dtype; }
  double softmax_scale() const;
  // Q and Kᵀ are each multiplied by sqrt(|scale|) before the GEMM, as PyTorch does for numerical
  // stability; a negative scale puts its sign on Q. Their product is softmax_scale().
  float q_factor() const;
  float k_factor() const;
  float keep_prob() const { return static_cast<float>(1.0 - dropout_p); }

  int64_t q_elems() const { return batch * q_heads * q_len * head_dim; }
  int64_t kv_elems() const { return batch * kv_heads * kv_len * head_dim; }
  int64_t score_elems() const { return batch * q_heads * q_len * kv_len; }
  int64_t out_elems() const { return q_elems(); }
  int64_t mask_batch() const { return mask_per_batch ? batch : 1; }
  int64_t mask_heads() const { return mask_per_head ? q_heads : 1; }
  int64_t mask_elems() const { return mask_batch() * mask_heads() * q_len * kv_len; }
  bool has_mask_input() const { return mask == MaskKind::boolean || mask == MaskKind::additive; }

  // Throws InputError with one line if any field is out of range or a tensor's byte count
  // would overflow 64 bits.
  void validate() const;
  std::string shape_string() const;  // "B=2 Hq=8 Hkv=8 L=128 S=128 E=64"
};

// Host-side inputs, as float values already rounded to the problem's dtype (see dtype.h).
// Layouts are contiguous PyTorch layouts: Q [B, Hq, L, E], K and V [B, Hkv, S, E],
// mask [B|1, H|1, L, S] (bool as 0/1 bytes, additive as floats; -inf allowed).
struct HostInputs {
  std::vector<float> q, k, v;
  std::vector<uint8_t> bool_mask;
  std::vector<float> additive_mask;
  std::vector<float> grad_out;  // --backward: dO, the gradient of the output [B, Hq, L, E]
};

// Fresh random inputs: Q, K, V ~ N(0, 1) rounded to the dtype; a boolean mask that drops about
// a quarter of the keys and, in one row per head, all of them (to exercise _safe_softmax's
// fully-masked rows); an additive mask with values in [-2, 2] and some -inf.
HostInputs make_random_inputs(const SdpaProblem& p, uint64_t seed);

// Layer `layer` (1-based) of a run of several (--layers): each has inputs of its own, random from
// a seed of its own, and a dropout stream of its own (the Philox offset one further per layer, as
// PyTorch moves it on at every call); the mask is the model's, the same for every layer. Layer 1
// is the problem itself, so a run of one layer is what it always was.
SdpaProblem layer_problem(const SdpaProblem& p, int layer);
HostInputs make_layer_inputs(const SdpaProblem& p, int layer);

// --backward: layer `layer`'s gradient of its output, dO ~ N(0, 1) rounded to the dtype, from a
// stream of its own (so a layer's Q, K, V and mask are the same with and without --backward).
std::vector<float> make_grad_output(const SdpaProblem& p, int layer);

// Layer `layer`'s inputs as a run uploads them: the captured ones (`given`, --inputs) for every
// layer, else its own random ones; with `backward` its dO too (the captured one where there is one).
HostInputs layer_inputs(const SdpaProblem& p, int layer, const HostInputs* given, bool backward);

}  // namespace sdpa
