// workload_file.cpp: reading a captured workload and deriving a call's run options (workload_file.h).
#include "repro/cli/workload_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "math_sdpa/errors.h"
#include "repro/common/text.h"

namespace sdpa {

namespace {

using nlohmann::json;

// A JSON value with where it is ("calls[2].query.shape"), so that every complaint names the key.
class LocatedValue {
 public:
  LocatedValue(const json& value, std::string where, const std::string& file) : v_(value), where_(std::move(where)), file_(file) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw InputError("--workload-file " + file_ + ": " + (where_.empty() ? "" : where_ + ": ") + why);
  }
  bool is_null() const { return v_.is_null(); }
  LocatedValue at(const std::string& key) const {
    if (!v_.is_object()) fail("expected an object");
    const std::string where = where_.empty() ? key : where_ + "." + key;
    if (!v_.contains(key)) LocatedValue(v_, where, file_).fail("missing");
    return LocatedValue(v_.at(key), where, file_);
  }
  // The key's value, or nothing where the object has no such key (a key newer captures add).
  std::optional<LocatedValue> maybe(const std::string& key) const {
    if (!v_.is_object()) fail("expected an object");
    if (!v_.contains(key)) return std::nullopt;
    return at(key);
  }
  LocatedValue item(size_t i) const { return LocatedValue(v_.at(i), where_ + "[" + std::to_string(i) + "]", file_); }
  size_t size() const {
    if (!v_.is_array()) fail("expected a list");
    return v_.size();
  }
  int64_t integer(int64_t min = 0) const {
    if (!v_.is_number_integer()) fail("expected an integer, not " + one_line(v_.dump().substr(0, 40)));
    const int64_t value = v_.get<int64_t>();
    if (value < min) fail(std::to_string(value) + " is below " + std::to_string(min));
    return value;
  }
  double number(double min) const {
    if (!v_.is_number()) fail("expected a number, not " + one_line(v_.dump().substr(0, 40)));
    const double value = v_.get<double>();
    if (!std::isfinite(value) || value < min) fail(one_line(v_.dump()) + " is not a finite number of at least " + format_number("%g", min));
    return value;
  }
  bool boolean() const {
    if (!v_.is_boolean()) fail("expected true or false");
    return v_.get<bool>();
  }
  std::string string() const {
    if (!v_.is_string()) fail("expected a string");
    return v_.get<std::string>();
  }
  std::string one_of(const std::set<std::string>& words) const {
    const std::string s = string();
    if (!words.count(s)) {
      std::string list;
      for (const auto& w : words) list += (list.empty() ? "" : ", ") + w;
      fail("'" + one_line(s.substr(0, 40)) + "' is not one of " + list);
    }
    return s;
  }
  std::vector<int64_t> integers(size_t min_n, size_t max_n, int64_t min) const {
    const size_t n = size();
    if (n < min_n || n > max_n) {
      fail("expected " + (min_n == max_n ? std::to_string(min_n) : std::to_string(min_n) + " to " + std::to_string(max_n)) +
           " integers, not " + std::to_string(n));
    }
    std::vector<int64_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(item(i).integer(min));
    return out;
  }
  template <class T, class Read>
  std::optional<T> optional(Read read) const {
    if (v_.is_null()) return std::nullopt;
    return read(*this);
  }

 private:
  const json& v_;
  std::string where_;
  const std::string& file_;
};

CapturedTensor read_tensor(const LocatedValue& f) {
  CapturedTensor t;
  t.shape = f.at("shape").integers(4, 4, 0);
  t.stride = f.at("stride").integers(4, 4, INT64_MIN);
  t.dtype = f.at("dtype").one_of({"bfloat16", "float16", "float32", "float64"});
  f.at("device").string();
  f.at("contiguous").boolean();
  t.layout = f.at("layout").one_of({"bhse", "bshe", "other"});
  t.managed = f.at("managed").optional<bool>([](const LocatedValue& m) { return m.boolean(); });
  return t;
}

CapturedMask read_mask(const LocatedValue& f) {
  CapturedMask m;
  m.kind = f.at("kind").one_of({"bool", "float"});
  m.shape = f.at("shape").integers(2, 4, 1);
  f.at("dtype").string();
  m.masked_fraction = f.at("masked_fraction").number(0);
  m.pattern = f.at("pattern").one_of({"text_padding", "other"});
  const auto tokens = f.at("text_tokens").optional<int64_t>([](const LocatedValue& t) { return t.integer(1); });
  const LocatedValue valid = f.at("text_valid");
  if (m.pattern == "text_padding") {
    if (m.kind != "bool") f.at("pattern").fail("text_padding is a bool mask's pattern");
    if (!tokens) f.at("text_tokens").fail("text_padding needs the text's token count");
    if (valid.is_null()) valid.fail("text_padding needs each batch entry's valid text keys");
    m.text_tokens = *tokens;
    m.text_valid = valid.integers(1, 1u << 20, 0);
    for (size_t i = 0; i < m.text_valid.size(); ++i) {
      if (m.text_valid[i] > m.text_tokens) valid.item(i).fail("more valid text keys than text tokens");
    }
  }
  return m;
}

MappedFile read_mapped_file(const LocatedValue& f) {
  MappedFile m;
  m.path = f.at("path").string();
  if (m.path.empty()) f.at("path").fail("expected a file's path, not an empty string");
  m.bytes = f.at("bytes").integer();
  m.resident_bytes = f.at("resident_bytes").optional<int64_t>([](const LocatedValue& r) { return r.integer(); });
  return m;
}

// A key of the context that older captures do not have: absent or null, nothing; else bytes.
std::optional<int64_t> optional_bytes(const LocatedValue& context, const std::string& key) {
  const std::optional<LocatedValue> f = context.maybe(key);
  if (!f) return std::nullopt;
  return f->optional<int64_t>([](const LocatedValue& b) { return b.integer(); });
}

CapturedCall read_call(const LocatedValue& f, int index, const std::string& folder) {
  CapturedCall c;
  c.id = static_cast<int>(f.at("id").integer());
  if (c.id != index) f.at("id").fail("is " + std::to_string(c.id) + ", but it is call " + std::to_string(index) + " of the list");
  c.first_call = f.at("first_call").integer();
  c.count = f.at("count").integer(1);
  c.index_in_step = f.at("index_in_step").optional<int64_t>([](const LocatedValue& i) { return i.integer(); });
  c.query = read_tensor(f.at("query"));
  c.key = read_tensor(f.at("key"));
  c.value = read_tensor(f.at("value"));
  c.mask = f.at("mask").optional<CapturedMask>(read_mask);
  c.is_causal = f.at("is_causal").boolean();
  c.scale = f.at("scale").optional<double>([](const LocatedValue& s) { return s.number(-1e300); });
  c.dropout_p = f.at("dropout_p").number(0);
  c.enable_gqa = f.at("enable_gqa").boolean();
  c.backend = f.at("backend").one_of({"math", "flash", "efficient", "cudnn", "unknown"});
  c.requires_grad = f.at("requires_grad").boolean();
  const LocatedValue context = f.at("context");
  c.memory_allocated = context.at("memory_allocated").integer();
  c.memory_reserved = context.at("memory_reserved").integer();
  c.mem_available = context.at("mem_available").optional<int64_t>([](const LocatedValue& m) { return m.integer(); });
  c.mem_free = optional_bytes(context, "mem_free");
  c.cached = optional_bytes(context, "cached");
  c.rss_file = optional_bytes(context, "rss_file");
  if (const std::optional<LocatedValue> files = context.maybe("mapped_files"); files && !files->is_null()) {
    std::vector<MappedFile> list;
    for (size_t i = 0; i < files->size(); ++i) list.push_back(read_mapped_file(files->item(i)));
    c.mapped_files = std::move(list);
  }
  const auto tensors = f.at("tensors").optional<std::string>([](const LocatedValue& t) { return t.string(); });
  if (tensors) c.tensors = (std::filesystem::path(folder) / *tensors).lexically_normal().string();
  return c;
}

std::string dtype_option(const std::string& torch_dtype) {
  return torch_dtype == "bfloat16" ? "bf16" : torch_dtype == "float16" ? "fp16" : "fp32";
}

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

bool is_weights_file(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const std::string_view suffix : {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf"}) {
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  }
  return false;
}

int64_t mapped_weights_bytes(const CapturedCall& call) {
  int64_t total = 0;
  if (!call.mapped_files) return 0;
  for (const MappedFile& f : *call.mapped_files) {
    if (!is_weights_file(f.path)) continue;
    // A petabyte of weights is no capture; the bound keeps the sum (and its MiB, rounded up) exact.
    constexpr int64_t kMost = int64_t{1} << 50;
    if (f.bytes > kMost || total > kMost - f.bytes) {
      throw InputError("the mapped weight files add up to more than 2^50 bytes");
    }
    total += f.bytes;
  }
  return total;
}

int64_t CapturedTensor::bytes() const {
  const int64_t size = dtype == "float32" ? 4 : dtype == "float64" ? 8 : 2;
  return elements(shape) * size;
}

WorkloadFile parse_workload_file(const std::string& text, const std::string& path) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number past a double's range
    throw InputError("--workload-file " + path + ": not JSON (" + one_line(e.what()) + ")");
  }
  const LocatedValue root(doc, "", path);
  if (!doc.is_object()) root.fail("not a JSON object (a workload file from scripts/sdpa_capture.py)");
  if (root.at("format").string() != "sdpa-repro-workload") root.at("format").fail("not sdpa-repro-workload");
  if (root.at("format_version").integer() != 1) root.at("format_version").fail("this harness reads version 1");
  WorkloadFile w;
  w.path = path;
  const LocatedValue device = root.at("captured").at("device");
  if (!device.is_null()) w.device_name = device.at("name").string();
  const LocatedValue env = root.at("environment");
  w.alloc_conf = env.at("PYTORCH_CUDA_ALLOC_CONF").optional<std::string>([](const LocatedValue& s) { return s.string(); });
  w.launch_blocking = env.at("CUDA_LAUNCH_BLOCKING").optional<std::string>([](const LocatedValue& s) { return s.string(); });
  w.allocator = root.at("allocator").at("kind").one_of({"caching", "expandable_segments", "cuda_malloc_async", "pluggable", "none"});
  w.calls_per_step = root.at("calls_per_step").optional<int64_t>([](const LocatedValue& n) { return n.integer(1); });
  w.total_calls = root.at("total_calls").integer();
  const LocatedValue calls = root.at("calls");
  const std::string folder = std::filesystem::path(path).parent_path().string();
  for (size_t i = 0; i < calls.size(); ++i) w.calls.push_back(read_call(calls.item(i), static_cast<int>(i), folder));
  if (w.calls.empty()) calls.fail("no call was captured (did the program call scaled_dot_product_attention?)");
  return w;
}

WorkloadFile load_workload_file(const std::string& path) {
  const std::optional<std::string> text = read_file(path);
  if (!text) throw InputError("--workload-file " + path + ": cannot be read");
  return parse_workload_file(*text, path);
}

CallReplay replay_call(const WorkloadFile& file, int call) {
  if (call < 0 || call >= static_cast<int>(file.calls.size())) {
    throw InputError("--call " + std::to_string(call) + ": " + file.path + " has calls 0 to " +
                     std::to_string(file.calls.size() - 1));
  }
  const CapturedCall& c = file.calls[call];
  const std::string at = "--workload-file " + file.path + ": call " + std::to_string(call) + ": ";
  const auto refuse = [&](const std::string& why) { return InputError(at + why); };
  const CapturedTensor &q = c.query, &k = c.key, &v = c.value;
  if (q.dtype == "float64") throw refuse("float64: the harness computes bf16, fp16 and fp32");
  if (k.dtype != q.dtype || v.dtype != q.dtype) throw refuse("Q, K and V have different dtypes");
  if (k.shape[0] != q.shape[0] || v.shape[0] != q.shape[0]) throw refuse("Q, K and V have different batch sizes");
  if (k.shape != v.shape) throw refuse("K and V have different shapes (the harness's V is shaped as K)");
  if (k.shape[3] != q.shape[3]) throw refuse("K's head dim differs from Q's");
  if (q.shape[1] % k.shape[1] != 0) throw refuse("Q's heads are not a multiple of K's");
  if (k.shape[1] != q.shape[1] && !c.enable_gqa) throw refuse("K has fewer heads than Q without enable_gqa");
  if (c.mask && c.is_causal) throw refuse("a mask and is_causal together (PyTorch refuses them)");
  if (c.dropout_p >= 1) throw refuse("dropout_p must be below 1");

  CallReplay r;
  const auto add = [](std::vector<DerivedOption>& to, std::string name, std::string value, std::string why) {
    to.push_back({std::move(name), std::move(value), std::move(why)});
  };
  const auto n = [](int64_t x) { return std::to_string(x); };
  add(r.problem, "--batch", n(q.shape[0]), "Q's shape");
  add(r.problem, "--heads", n(q.shape[1]), "Q's shape");
  add(r.problem, "--kv-heads", n(k.shape[1]), "K's shape");
  add(r.problem, "--q-len", n(q.shape[2]), "Q's shape");
  add(r.problem, "--kv-len", n(k.shape[2]), "K's shape");
  add(r.problem, "--head-dim", n(q.shape[3]), "Q's shape");
  add(r.problem, "--dtype", dtype_option(q.dtype), "Q's dtype");
  add(r.problem, "--k-layout", k.layout == "bshe" ? "bshe" : "bhse", "K's strides");
  if (k.layout == "other") r.approximations.push_back("K's strides are neither [B, H, S, E] nor a view of [B, S, H, E]: replayed contiguous");
  for (const auto* t : {&q, &v}) {
    if (t->layout != "bhse") {
      r.approximations.push_back(std::string(t == &q ? "Q" : "V") + " is laid out " + t->layout +
                                 ": the harness's Q and V are contiguous [B, H, L, E]");
    }
  }
  if (c.is_causal) add(r.problem, "--mask", "causal", "is_causal");
  if (c.mask) {
    const CapturedMask& m = *c.mask;
    const size_t d = m.shape.size();
    const bool per_batch = d == 4 && m.shape[0] > 1, per_head = d >= 3 && m.shape[d - 3] > 1;
    bool text_padding = false;
    if (m.pattern == "text_padding" && !per_head) {
      // The harness's text padding: entry 0 sees all the text, every later entry the same VALID keys.
      const int64_t tokens = m.text_tokens;
      int64_t later = m.text_valid.size() > 1 ? m.text_valid[1] : tokens;
      bool exact = m.text_valid.size() == static_cast<size_t>(q.shape[0]) && !m.text_valid.empty() && m.text_valid[0] == tokens;
      for (size_t i = 1; i < m.text_valid.size(); ++i) {
        exact = exact && m.text_valid[i] == later;
        later = std::min(later, m.text_valid[i]);
      }
      if (later >= 1 && tokens <= k.shape[2]) {
        text_padding = true;
        add(r.problem, "--text-padding", n(tokens) + ":" + n(later), "the mask's text padding");
        if (!exact) {
          r.approximations.push_back("the text padding differs between batch entries: entry 0 sees all " + n(tokens) +
                                     " text keys, the others " + n(later) + " (--inputs replays the mask itself)");
        }
      }
    }
    if (!text_padding) {
      add(r.problem, "--mask", m.kind == "bool" ? "bool" : "float", "the mask's dtype");
      if (per_batch || per_head) {
        add(r.problem, "--mask-dims", std::string(per_batch ? "B" : "1") + "x" + (per_head ? "H" : "1"), "the mask's shape");
      }
      r.approximations.push_back(std::string("the mask is replayed as random ") + m.kind + " values (" +
                                 format_number("%.3f", m.masked_fraction) + " of it masked in the capture; --inputs replays it)");
    }
  }
  if (c.scale) add(r.problem, "--scale", format_number("%.17g", *c.scale), "scale");
  if (c.dropout_p > 0) add(r.problem, "--dropout", format_number("%.17g", c.dropout_p), "dropout_p");
  if (c.backend != "math") {
    r.approximations.push_back("PyTorch would run this call on its " + c.backend +
                               " backend, not the Math path the harness rebuilds");
  }

  // The process around the call.
  if (file.calls_per_step && *file.calls_per_step > 1) {
    add(r.context, "--layers", n(*file.calls_per_step), "attention calls per step");
  }
  if (c.requires_grad) add(r.context, "--retain", "autograd", "requires_grad: autograd keeps each call's tensors");
  // The model's weight files the process had memory-mapped at the call (safetensors maps them, and
  // the pages the copies to the GPU read stay in the page cache, which on an integrated GPU shares
  // the pool with the GPU's allocations): the same bytes loaded the same way, from the harness's
  // own weights file (never the user's: a replay reads no model file), the mapping kept, as the
  // process still had it.
  constexpr int64_t kMiB = 1 << 20;
  int64_t weights = 0;
  try {
    weights = mapped_weights_bytes(c);
  } catch (const InputError& e) {
    throw refuse(e.what());
  }
  if (weights > 0) {
    int files = 0;
    std::string names;
    for (const MappedFile& f : *c.mapped_files) {
      if (!is_weights_file(f.path)) continue;
      ++files;
      if (files <= 3) names += (names.empty() ? "" : ", ") + one_line(std::filesystem::path(f.path).filename().string().substr(0, 80));
    }
    if (files > 3) names += ", ...";
    add(r.context, "--mapped-weights", n((weights + kMiB - 1) / kMiB) + "M",
        "the model files mapped at the call (" + std::to_string(files) + ": " + names + ", " +
            format_number("%.2f", static_cast<double>(weights) / 1e9) + " GB), loaded from the harness's own weights file");
    add(r.context, "--weights-mapping", "keep", "the files were still mapped at the call");
  }
  // What PyTorch held besides this call's inputs: the rest of the model, as a ballast on its allocator
  // (less the weights' GPU copies the load above makes, so that the GPU holds what the process did).
  const int64_t own = q.bytes() + k.bytes() + v.bytes();
  const int64_t held = c.memory_allocated - own;
  const int64_t rest = held > weights ? held - weights : 0;
  if (weights > 0 && held < weights) {
    r.approximations.push_back("the mapped weight files (" + format_number("%.2f", static_cast<double>(weights) / 1e9) +
                               " GB) are more than PyTorch had allocated besides Q, K and V (" +
                               format_number("%.2f", static_cast<double>(std::max<int64_t>(held, 0)) / 1e9) +
                               " GB): the replay copies all of them to the GPU");
  }
  const bool any_managed = (q.managed && *q.managed) || (k.managed && *k.managed) || (v.managed && *v.managed);
  if (rest >= kMiB) {
    add(r.context, "--ballast", n(rest) + "B",
        weights > 0 ? "memory PyTorch had allocated at the call, less Q, K, V and the mapped weights"
                    : "memory PyTorch had allocated at the call, less Q, K, V");
    add(r.context, "--ballast-alloc", any_managed ? "managed" : "device", "the tensors' memory");
    add(r.context, "--ballast-touch", "gpu", "the model's weights and activations are the GPU's");
  }
  std::string alloc;
  if (any_managed) alloc = "managed";
  else if (file.allocator == "caching" || file.allocator == "pluggable") alloc = "device";
  else if (file.allocator == "expandable_segments") alloc = "vmm";
  else if (file.allocator == "cuda_malloc_async") alloc = "async";
  if (!alloc.empty()) {
    add(r.context, "--alloc", alloc, any_managed ? "Q's memory is managed" : "PyTorch's allocator (" + file.allocator + ")");
    add(r.context, "--alloc-timing", "per-call", "PyTorch allocates a call's intermediates inside it");
  }
  if (file.launch_blocking && *file.launch_blocking == "1") add(r.context, "--launch-blocking", "", "CUDA_LAUNCH_BLOCKING=1");
  return r;
}

}  // namespace sdpa
