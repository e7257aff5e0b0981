// pytorch_equivalent.cpp
#include "repro/report/pytorch_equivalent.h"

#include <sstream>

#include "repro/common/text.h"

namespace sdpa {

namespace {

std::string torch_dtype(DType t) { return std::string("torch.") + torch_dtype_name(t); }

// "1, 24, 4608, 128": the sizes, as torch.randn takes them.
std::string sizes(std::initializer_list<int64_t> dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

}  // namespace

std::string pytorch_sdpa_snippet(const RunOptions& o) {
  const SdpaProblem& p = o.problem;
  const std::string dt = torch_dtype(p.dtype), on = "device=\"cuda\", dtype=" + dt;
  std::ostringstream s;
  s << "import torch\n"
    << "import torch.nn.functional as F\n"
    << "from torch.nn.attention import SDPBackend, sdpa_kernel\n\n";
  if (p.precision == Precision::native && p.dtype != DType::fp32) {
    s << "# --precision native: the math path stays in " << dtype_name(p.dtype) << " instead of upcasting to fp32\n"
      << "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)\n";
  }
  s << "torch.manual_seed(0)  # any inputs: the hang is not about the values\n"
    << "q = torch.randn(" << sizes({p.batch, p.q_heads, p.q_len, p.head_dim}) << ", " << on << ")\n";
  if (o.conditions.k_layout == KLayout::bshe) {
    s << "# K as attention modules produce it: a [B, S, H, E] projection viewed as [B, H, S, E]\n"
      << "k = torch.randn(" << sizes({p.batch, p.kv_len, p.kv_heads, p.head_dim}) << ", " << on << ").transpose(1, 2)\n";
  } else {
    s << "k = torch.randn(" << sizes({p.batch, p.kv_heads, p.kv_len, p.head_dim}) << ", " << on << ")\n";
  }
  s << "v = torch.randn(" << sizes({p.batch, p.kv_heads, p.kv_len, p.head_dim}) << ", " << on << ")\n";
  const std::string mask_sizes =
      sizes({p.mask_per_batch ? p.batch : 1, p.mask_per_head ? p.q_heads : 1, p.q_len, p.kv_len});
  std::string mask = "None";
  if (p.mask == MaskKind::boolean && p.mask_pattern == MaskPattern::text_padding) {
    s << "# key padding: the first " << p.text_tokens << " keys are text; batch entries after the first attend to only "
      << p.text_valid << " of them\n"
      << "attn_mask = torch.ones(" << p.batch << ", 1, 1, " << p.kv_len << ", device=\"cuda\", dtype=torch.bool)\n"
      << "attn_mask[1:, :, :, " << p.text_valid << ":" << p.text_tokens << "] = False\n";
    mask = "attn_mask";
  } else if (p.mask == MaskKind::boolean) {
    s << "attn_mask = torch.rand(" << mask_sizes << ", device=\"cuda\") >= 0.25  # True = attend\n";
    mask = "attn_mask";
  } else if (p.mask == MaskKind::additive) {
    s << "attn_mask = torch.randn(" << mask_sizes << ", " << on << ")  # added to the scores\n";
    mask = "attn_mask";
  }
  s << "with sdpa_kernel(SDPBackend.MATH):  # _scaled_dot_product_attention_math, as the harness\n"
    << "    out = F.scaled_dot_product_attention(q, k, v, attn_mask=" << mask << ", dropout_p=" << format_number("%g", p.dropout_p)
    << ", is_causal=" << (p.mask == MaskKind::causal ? "True" : "False");
  if (p.scale) s << ", scale=" << format_number("%.17g", *p.scale);
  if (p.gqa()) s << ", enable_gqa=True";
  s << ")\n"
    << "torch.cuda.synchronize()  # a hang in the math path never returns from here\n";
  return s.str();
}

std::vector<std::string> torch_stages_command(const std::vector<std::string>& run_args) {
  std::vector<std::string> a = {"python3", "scripts/torch_stages.py"};
  a.insert(a.end(), run_args.begin(), run_args.end());
  a.insert(a.end(), {"--json", "torch_stages.json"});
  return a;
}

}  // namespace sdpa
