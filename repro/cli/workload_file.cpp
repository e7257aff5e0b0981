// workload_file.cpp: reading a captured workload and deriving a call's run options (workload_file.h).
#include "repro/cli/workload_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"
#include "repro/common/text.h"

namespace sdpa {

namespace {

using nlohmann::json;

const NameTable<CallPhase> kCallPhases{"phase", {{CallPhase::forward, "forward"}, {CallPhase::recompute, "recompute"}}};
const NameTable<FileRead> kFileReads{"how",
                                     {{FileRead::safetensors, "safetensors"},
                                      {FileRead::torch_load, "torch.load"},
                                      {FileRead::mapping, "mapping"},
                                      {FileRead::open, "open"}}};
const NameTable<PageCacheProbe> kPageCacheProbes{"cached_by",
                                                 {{PageCacheProbe::cachestat, "cachestat"}, {PageCacheProbe::mincore, "mincore"}}};

// Where each number with a fraction or an exponent is in the file ("calls[0].scale") and its text
// as typed: the parsed value prints otherwise (1e19 as 1e+19), and an error quotes the file.
// Integers print as typed already.
class TypedNumbers : public nlohmann::json_sax<json> {
 public:
  std::map<std::string, std::string> text;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t& typed) override {
    text[where()] = typed;
    return value();
  }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool key(string_t& k) override {
    open_.back().key = k;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Container {
    std::string where;
    bool array = false;
    size_t next = 0;  // an array's next item
    std::string key;  // an object's current key
  };
  std::vector<Container> open_;

  // The next value's place, spelt as LocatedValue spells it.
  std::string where() const {
    if (open_.empty()) return "";
    const Container& c = open_.back();
    if (c.array) return c.where + "[" + std::to_string(c.next) + "]";
    return c.where.empty() ? c.key : c.where + "." + c.key;
  }
  bool value() {
    if (!open_.empty() && open_.back().array) ++open_.back().next;
    return true;
  }
  bool open(bool array) {
    open_.push_back({where(), array, 0, ""});
    return true;
  }
  bool close() {
    open_.pop_back();
    return value();
  }
};

// A JSON value with where it is ("calls[2].query.shape"), so that every complaint names the key and
// quotes the value as the file has it. An object's keys are those read (at, maybe) and those
// declared recorded but not read (unread); no_other_keys() refuses any other.
class LocatedValue {
 public:
  LocatedValue(const json& value, std::string where, const std::string& file, const std::map<std::string, std::string>& typed)
      : v_(value), where_(std::move(where)), file_(file), typed_(typed), keys_(std::make_shared<std::vector<std::string>>()) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw InputError("--workload-file " + file_ + ": " + (where_.empty() ? "" : where_ + ": ") + why);
  }
  bool is_null() const { return v_.is_null(); }
  LocatedValue at(const std::string& key) const {
    if (!v_.is_object()) fail("expected an object");
    keys_->push_back(key);
    const std::string where = where_.empty() ? key : where_ + "." + key;
    if (!v_.contains(key)) LocatedValue(v_, where, file_, typed_).fail("missing");
    return LocatedValue(v_.at(key), where, file_, typed_);
  }
  // The key's value, or nothing where the object has no such key (a key newer captures add).
  std::optional<LocatedValue> maybe(const std::string& key) const {
    if (!v_.is_object()) fail("expected an object");
    if (!v_.contains(key)) {
      keys_->push_back(key);
      return std::nullopt;
    }
    return at(key);
  }
  // Keys the format has that the harness does not read.
  void unread(std::initializer_list<const char*> keys) const {
    for (const char* k : keys) keys_->push_back(k);
  }
  // After the object's keys are read: one it does not have is refused, with the one it most
  // likely meant (a misspelt mapped_files would otherwise leave the process's weights out unseen).
  void no_other_keys() const {
    if (!v_.is_object()) fail("expected an object");
    for (const auto& item : v_.items()) {
      if (std::find(keys_->begin(), keys_->end(), item.key()) != keys_->end()) continue;
      const std::string meant = nearest_word(item.key(), *keys_);
      std::string known;
      for (const std::string& k : *keys_) known += (known.empty() ? "" : ", ") + k;
      LocatedValue(item.value(), where_.empty() ? item.key() : where_ + "." + item.key(), file_, typed_)
          .fail("not a key of this format (" + (meant.empty() ? "its keys here: " + known : "did you mean " + meant + "?") + ")");
    }
  }
  LocatedValue item(size_t i) const {
    return LocatedValue(v_.at(i), where_ + "[" + std::to_string(i) + "]", file_, typed_);
  }
  size_t size() const {
    if (!v_.is_array()) fail("expected a list");
    return v_.size();
  }
  int64_t integer(int64_t min = 0) const {
    if (!v_.is_number_integer()) fail("expected an integer, not " + typed());
    if (v_.is_number_unsigned() && v_.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail(typed() + " is past the largest integer the format holds (2^63-1)");
    }
    const int64_t value = v_.get<int64_t>();
    if (value < min) fail(typed() + " is below " + std::to_string(min));
    return value;
  }
  double number(double min) const {
    if (!v_.is_number()) fail("expected a number, not " + typed());
    const double value = v_.get<double>();
    if (!std::isfinite(value) || value < min) fail(typed() + " is not a finite number of at least " + format_number("%g", min));
    return value;
  }
  bool boolean() const {
    if (!v_.is_boolean()) fail("expected true or false, not " + typed());
    return v_.get<bool>();
  }
  std::string string() const {
    if (!v_.is_string()) fail("expected a string, not " + typed());
    return v_.get<std::string>();
  }
  std::string one_of(const std::vector<std::string>& words) const {
    const std::string s = string();
    if (std::find(words.begin(), words.end(), s) == words.end()) {
      std::string list;
      for (const auto& w : words) list += (list.empty() ? "" : ", ") + w;
      fail("'" + one_line(s.substr(0, 40)) + "' is not one of " + list);
    }
    return s;
  }
  template <class E>
  E word(const NameTable<E>& table) const {
    return *table.find(one_of(table.names()));
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
  // The value as the file has it, cut to one short line.
  std::string typed() const {
    const auto t = typed_.find(where_);
    const std::string text = t != typed_.end() && v_.is_number_float() ? t->second : v_.dump();
    return one_line(text.size() > 40 ? text.substr(0, 37) + "..." : text);
  }

  const json& v_;
  std::string where_;
  const std::string& file_;
  const std::map<std::string, std::string>& typed_;
  std::shared_ptr<std::vector<std::string>> keys_;
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
  f.no_other_keys();
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
  f.no_other_keys();
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

std::string file_path(const LocatedValue& f) {
  const std::string path = f.at("path").string();
  if (path.empty()) f.at("path").fail("expected a file's path, not an empty string");
  return path;
}

MappedFile read_mapped_file(const LocatedValue& f) {
  MappedFile m;
  m.path = file_path(f);
  m.bytes = f.at("bytes").integer();
  m.resident_bytes = f.at("resident_bytes").optional<int64_t>([](const LocatedValue& r) { return r.integer(); });
  f.no_other_keys();
  return m;
}

LoadedFile read_loaded_file(const LocatedValue& f) {
  LoadedFile l;
  l.path = file_path(f);
  l.bytes = f.at("bytes").integer();
  l.how = f.at("how").word(kFileReads);
  l.mapped = f.at("mapped").boolean();
  l.cached_bytes = f.at("cached_bytes").optional<int64_t>([](const LocatedValue& b) { return b.integer(); });
  l.cached_by = f.at("cached_by").optional<PageCacheProbe>([](const LocatedValue& b) { return b.word(kPageCacheProbes); });
  if (l.cached_bytes.has_value() != l.cached_by.has_value()) {
    f.at("cached_by").fail("given with cached_bytes, null with it (how the pages were counted)");
  }
  f.no_other_keys();
  return l;
}

template <class T, class Read>
std::optional<std::vector<T>> optional_list(const LocatedValue& context, const std::string& key, Read read) {
  const std::optional<LocatedValue> files = context.maybe(key);
  if (!files || files->is_null()) return std::nullopt;
  std::vector<T> list;
  for (size_t i = 0; i < files->size(); ++i) list.push_back(read(files->item(i)));
  return list;
}

// A key of the context that older captures do not have: absent or null, nothing; else bytes.
std::optional<int64_t> optional_bytes(const LocatedValue& context, const std::string& key) {
  const std::optional<LocatedValue> f = context.maybe(key);
  if (!f) return std::nullopt;
  return f->optional<int64_t>([](const LocatedValue& b) { return b.integer(); });
}

Retain read_retention(const LocatedValue& f) {
  const std::string word = f.string();
  try {
    return parse_retain(word);
  } catch (const InputError&) {
    f.fail("'" + one_line(word.substr(0, 40)) + "' is not one of " + path_setting_choices("--retain"));
  }
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
  if (const auto phase = f.maybe("phase")) c.phase = phase->word(kCallPhases);
  const std::optional<LocatedValue> retention = f.maybe("retention");
  c.retention = retention ? read_retention(*retention) : c.requires_grad ? Retain::autograd : Retain::none;
  if (c.phase == CallPhase::recompute && c.retention != Retain::checkpoint) {
    (retention ? *retention : f.at("phase")).fail("a call recomputed in the backward pass is a checkpointed layer's: its "
                                                  "retention is checkpoint");
  }
  const LocatedValue context = f.at("context");
  c.memory_allocated = context.at("memory_allocated").integer();
  c.memory_reserved = context.at("memory_reserved").integer();
  c.mem_available = context.at("mem_available").optional<int64_t>([](const LocatedValue& m) { return m.integer(); });
  c.mem_free = optional_bytes(context, "mem_free");
  c.cached = optional_bytes(context, "cached");
  c.rss_file = optional_bytes(context, "rss_file");
  c.mapped_files = optional_list<MappedFile>(context, "mapped_files", read_mapped_file);
  c.loaded_files = optional_list<LoadedFile>(context, "loaded_files", read_loaded_file);
  context.no_other_keys();
  const auto tensors = f.at("tensors").optional<std::string>([](const LocatedValue& t) { return t.string(); });
  if (tensors) c.tensors = (std::filesystem::path(folder) / *tensors).lexically_normal().string();
  f.no_other_keys();
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

const char* call_phase_name(CallPhase p) { return kCallPhases.name(p); }
const char* file_read_name(FileRead r) { return kFileReads.name(r); }
const char* page_cache_probe_name(PageCacheProbe p) { return kPageCacheProbes.name(p); }

CapturedWeights captured_weights(const CapturedCall& call) {
  CapturedWeights w;
  std::vector<std::string> counted;
  int64_t cached = 0;
  bool every_cached = true;
  const auto count = [&](const std::string& path, int64_t bytes, bool mapped, std::optional<int64_t> cached_bytes) {
    if (std::find(counted.begin(), counted.end(), path) != counted.end()) return;
    counted.push_back(path);
    constexpr int64_t kMost = int64_t{1} << 50;
    if (bytes > kMost || w.bytes > kMost - bytes) throw InputError("the model's weight files add up to more than 2^50 bytes");
    w.bytes += bytes;
    w.mapped = w.mapped || mapped;
    if (++w.files <= 3) {
      w.names += (w.names.empty() ? "" : ", ") + one_line(std::filesystem::path(path).filename().string().substr(0, 80));
    } else if (w.files == 4) {
      w.names += ", ...";
    }
    // cachestat and mincore count whole pages: the last one may reach past the file's end.
    if (cached_bytes) cached += std::min(*cached_bytes, bytes);
    else every_cached = false;
  };
  // What a loader read is the model's whatever its name; a file only seen mapped or open, by its name.
  for (const LoadedFile& f : call.loaded_files.value_or(std::vector<LoadedFile>{})) {
    const bool loader = f.how == FileRead::safetensors || f.how == FileRead::torch_load;
    if (loader || is_weights_file(f.path)) count(f.path, f.bytes, f.mapped, f.cached_bytes);
  }
  for (const MappedFile& f : call.mapped_files.value_or(std::vector<MappedFile>{})) {
    if (is_weights_file(f.path)) count(f.path, f.bytes, true, std::nullopt);
  }
  if (w.files > 0 && every_cached) w.cached_bytes = cached;
  return w;
}

int64_t CapturedTensor::bytes() const {
  const int64_t size = dtype == "float32" ? 4 : dtype == "float64" ? 8 : 2;
  return elements(shape) * size;
}

WorkloadFile parse_workload_file(const std::string& text, const std::string& path) {
  json doc;
  TypedNumbers typed;
  try {
    doc = json::parse(text);
    json::sax_parse(text, &typed);
  } catch (const json::exception& e) {  // a syntax error, or a number past a double's range
    throw InputError("--workload-file " + path + ": not JSON (" + one_line(e.what()) + ")");
  }
  const LocatedValue root(doc, "", path, typed.text);
  if (!doc.is_object()) root.fail("not a JSON object (a workload file from scripts/sdpa_capture.py)");
  if (root.at("format").string() != "sdpa-repro-workload") root.at("format").fail("not sdpa-repro-workload");
  if (root.at("format_version").integer() != 1) root.at("format_version").fail("this harness reads version 1");
  WorkloadFile w;
  w.path = path;
  const LocatedValue captured = root.at("captured");
  captured.unread({"by", "utc", "command", "torch", "cuda"});
  const LocatedValue device = captured.at("device");
  if (!device.is_null()) {
    w.device_name = device.at("name").string();
    device.unread({"capability", "total_memory"});
    device.no_other_keys();
  }
  captured.no_other_keys();
  const LocatedValue env = root.at("environment");
  w.alloc_conf = env.at("PYTORCH_CUDA_ALLOC_CONF").optional<std::string>([](const LocatedValue& s) { return s.string(); });
  w.launch_blocking = env.at("CUDA_LAUNCH_BLOCKING").optional<std::string>([](const LocatedValue& s) { return s.string(); });
  env.no_other_keys();
  const LocatedValue allocator = root.at("allocator");
  w.allocator = allocator.at("kind").one_of({"caching", "expandable_segments", "cuda_malloc_async", "pluggable", "none"});
  allocator.unread({"detail"});
  allocator.no_other_keys();
  w.calls_per_step = root.at("calls_per_step").optional<int64_t>([](const LocatedValue& n) { return n.integer(1); });
  if (const auto recomputed = root.maybe("recomputed_per_step")) {
    w.recomputed_per_step = recomputed->optional<int64_t>([](const LocatedValue& n) { return n.integer(); });
  }
  w.total_calls = root.at("total_calls").integer();
  const LocatedValue calls = root.at("calls");
  root.no_other_keys();
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

  // The process around the call: its layers are the attention calls of a step's forward pass; with
  // activation checkpointing each block's call runs again inside the backward pass, and those
  // recomputations are the same layers again, kept as autograd keeps them until their backward.
  const bool checkpointed = c.retention == Retain::checkpoint;
  if (file.calls_per_step && *file.calls_per_step > 1) {
    add(r.context, "--layers", n(*file.calls_per_step),
        file.recomputed_per_step && *file.recomputed_per_step > 0
            ? "the attention calls of a step's forward pass (the " + n(*file.recomputed_per_step) +
                  " recomputed in its backward pass are the same layers)"
            : "attention calls per step");
  }
  if (checkpointed) {
    add(r.context, "--retain", retain_name(c.retention),
        "activation checkpointing: each layer keeps its inputs, not its scores and probabilities");
    add(r.context, "--backward", "", "a checkpointed layer's call is recomputed in the backward pass, which runs its backward");
  } else if (c.retention == Retain::autograd) {
    add(r.context, "--retain", retain_name(c.retention), "requires_grad: autograd keeps each call's tensors");
  }
  // The model's weights the process's loads read (safetensors maps the files, and the pages the
  // copies to the GPU read stay in the page cache, which on an integrated GPU shares the pool with
  // the GPU's allocations): the same bytes loaded the same way, from the harness's own weights
  // file (never the user's: a replay reads no model file), the mapping dropped or kept as the
  // process had it at the call.
  constexpr int64_t kMiB = 1 << 20;
  CapturedWeights weights;
  try {
    weights = captured_weights(c);
  } catch (const InputError& e) {
    throw refuse(e.what());
  }
  const auto gb = [](int64_t bytes) { return format_number("%.2f", static_cast<double>(bytes) / 1e9) + " GB"; };
  if (weights.bytes > 0) {
    add(r.context, "--mapped-weights", n((weights.bytes + kMiB - 1) / kMiB) + "M",
        "the model files the process loaded (" + std::to_string(weights.files) + ": " + weights.names + ", " +
            gb(weights.bytes) + (weights.cached_bytes ? ", " + gb(*weights.cached_bytes) + " of them in the page cache" : "") +
            "), loaded from the harness's own weights file");
    add(r.context, "--weights-mapping", weights.mapped ? "keep" : "unmap",
        weights.mapped ? "the files were still mapped at the call"
                       : "the files were no longer mapped at the call; their pages stay in the page cache");
    if (weights.cached_bytes && *weights.cached_bytes < weights.bytes - weights.bytes / 10) {
      r.approximations.push_back("only " + gb(*weights.cached_bytes) + " of the model files' " + gb(weights.bytes) +
                                 " were in the page cache at the call: the replay's load leaves all of them there");
    }
  }
  // What PyTorch held besides this call's inputs: the rest of the model, as a ballast on its allocator
  // (less the weights' GPU copies the load above makes, so that the GPU holds what the process did).
  const int64_t own = q.bytes() + k.bytes() + v.bytes();
  const int64_t held = c.memory_allocated - own;
  const int64_t rest = held > weights.bytes ? held - weights.bytes : 0;
  if (weights.bytes > 0 && held < weights.bytes) {
    r.approximations.push_back("the model's weight files (" + gb(weights.bytes) +
                               ") are more than PyTorch had allocated besides Q, K and V (" + gb(std::max<int64_t>(held, 0)) +
                               "): the replay copies all of them to the GPU");
  }
  const bool any_managed = (q.managed && *q.managed) || (k.managed && *k.managed) || (v.managed && *v.managed);
  if (rest >= kMiB) {
    add(r.context, "--ballast", n(rest) + "B",
        weights.bytes > 0 ? "memory PyTorch had allocated at the call, less Q, K, V and the model's weights"
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

std::string captured_conditions(const WorkloadFile& file, int call) {
  if (call < 0 || call >= static_cast<int>(file.calls.size())) return "";
  const CapturedCall& c = file.calls[call];
  const auto n = [](int64_t x) { return std::to_string(x); };
  const auto gb = [](int64_t bytes) { return format_number("%.2f", static_cast<double>(bytes) / 1e9) + " GB"; };
  std::vector<std::string> parts;
  const std::string layers = file.calls_per_step ? n(*file.calls_per_step) + " layers a step" : "";
  if (c.retention == Retain::checkpoint) {
    std::string s = layers;
    if (file.recomputed_per_step) s += (s.empty() ? "" : ", ") + n(*file.recomputed_per_step) + " of them recomputed in its backward pass";
    parts.push_back("activation checkpointing" + (s.empty() ? "" : " (" + s + ")"));
  } else if (c.retention == Retain::autograd) {
    parts.push_back("autograd's retention" + (layers.empty() ? "" : " (" + layers + ")"));
  }
  const CapturedWeights w = captured_weights(c);
  if (w.bytes > 0) {
    parts.push_back("the model's weights: " + gb(w.bytes) + " in " + n(w.files) + (w.files == 1 ? " file" : " files") +
                    " loaded through the page cache, " + (w.mapped ? "still mapped" : "unmapped") + " at the call" +
                    (w.cached_bytes ? ", " + gb(*w.cached_bytes) + " of them cached" : ""));
  }
  if (c.cached) parts.push_back("the page cache at the call: " + gb(*c.cached));
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace sdpa
