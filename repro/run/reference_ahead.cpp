// reference_ahead.cpp: the float64 references computed during the run (reference_ahead.h).
#include "repro/run/reference_ahead.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace sdpa {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

LayerReference compute_layer_reference(const SdpaProblem& p, int layer, const HostInputs* given, bool backward,
                                       ResultTensor tensor) {
  LayerReference ref;
  ref.inputs = layer_inputs(p, layer, given, backward);
  compute_references(p, layer, backward, tensor, ref);
  return ref;
}

void compute_references(const SdpaProblem& p, int layer, bool backward, ResultTensor tensor, LayerReference& ref) {
  const SdpaProblem lp = layer_problem(p, layer);
  if (backward) ref.gradients = reference_gradients(lp, ref.inputs);
  // The gradients' pass computed the output on the way (the loops' do not, SDPA_REFERENCE_PRODUCTS=
  // loops); any other tensor is computed alone.
  const bool on_the_way = ref.gradients && !ref.gradients->output.empty() && tensor == ResultTensor::output;
  if (!on_the_way) ref.result = reference_tensor(lp, ref.inputs, result_tensor_name(tensor));
}

int64_t layer_reference_bytes(const SdpaProblem& p, bool backward, ResultTensor tensor) {
  const int64_t inputs = (p.q_elems() * (backward ? 2 : 1) + 2 * p.kv_elems() + p.mask_elems()) * 4;
  const int64_t result = tensor == ResultTensor::output ? p.q_elems() : p.batch * p.q_heads * p.q_len * p.kv_len;
  const int64_t gradients = backward ? 2 * p.q_elems() + 2 * p.kv_elems() : 0;  // query, key, value and the output
  return inputs + (result * (backward && tensor == ResultTensor::output ? 0 : 1) + gradients) * 8;
}

int64_t reference_ahead_budget(int64_t mem_available) {
  if (mem_available < 0) return 0;
  return std::min<int64_t>(int64_t{1} << 30, mem_available / 50);
}

std::vector<int> reference_ahead_layers(const RunOptions& o, const PathSettings& settings, const std::vector<int>& checked,
                                        int64_t budget, std::string* why_not) {
  const auto none = [why_not](const std::string& why) {
    if (why_not) *why_not = why;
    return std::vector<int>();
  };
  if (!o.check || checked.empty()) return none("nothing is checked");
  const char* ahead = std::getenv("SDPA_CHECK_AHEAD");
  if (ahead && std::strcmp(ahead, "0") == 0) return none("SDPA_CHECK_AHEAD=0");
  if (o.context.ballast.given()) return none("the run has a ballast");
  if (o.context.host_load_threads > 0) return none("the run has a host load");
  if (settings.weights.bytes > 0) return none("the run loads mapped weights");
  if (o.layers_fit) return none("the run's layers are fitted to the memory");
  if (o.sample_every > 0) return none("the run samples its memory (a soak)");
  const int64_t per_layer = layer_reference_bytes(o.problem, settings.backward, result_tensor_of(settings));
  std::vector<int> layers;
  for (int layer : checked) {
    if (static_cast<int64_t>(layers.size() + 1) * per_layer > budget) break;
    layers.push_back(layer);
  }
  if (layers.empty()) return none("one layer's reference is more than the memory it may hold during the run");
  return layers;
}

ReferenceAhead::ReferenceAhead(const SdpaProblem& p, std::vector<int> layers, const HostInputs* given, bool backward,
                               ResultTensor tensor)
    : problem_(p),
      layers_(std::move(layers)),
      given_(given),
      backward_(backward),
      tensor_(tensor),
      done_(layers_.size()) {
  start_ = end_ = std::chrono::steady_clock::now();
  work_.max_threads = std::max(1, host_cpus() - 1);
  if (layers_.empty()) {
    finished_ = true;
    return;
  }
  thread_ = std::thread([this] { compute(); });
}

ReferenceAhead::~ReferenceAhead() {
  work_.cancel = true;
  if (thread_.joinable()) thread_.join();
}

void ReferenceAhead::compute() {
  const ParallelWorkScope scope(work_);
  const int64_t cpu0 = thread_cpu_ns();
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::exception_ptr error;
    try {
      auto ref = std::make_unique<LayerReference>();
      ref->inputs = layer_inputs(problem_, layers_[i], given_, backward_);
      LayerReference* made = ref.get();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        done_[i] = std::move(ref);
        inputs_made_ = i + 1;
      }
      ready_.notify_all();
      // The run may be reading the inputs now (inputs()): only the references are written.
      compute_references(problem_, layers_[i], backward_, tensor_, *made);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error && !error_) error_ = error;
    inputs_made_ = std::max(inputs_made_, i + 1);
    computed_ = i + 1;
    own_cpu_ns_ = thread_cpu_ns() - cpu0;
    if (computed_ == layers_.size() || error_) {
      finished_ = true;
      end_ = std::chrono::steady_clock::now();
      ready_.notify_all();
      return;
    }
    ready_.notify_all();
  }
}

std::optional<size_t> ReferenceAhead::index_of(int layer) const {
  const auto it = std::find(layers_.begin(), layers_.end(), layer);
  if (it == layers_.end()) return std::nullopt;
  return static_cast<size_t>(it - layers_.begin());
}

const HostInputs* ReferenceAhead::inputs(int layer) {
  const std::optional<size_t> index = index_of(layer);
  if (!index) return nullptr;
  const size_t i = *index;
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return inputs_made_ > i || finished_; });
  return done_[i] ? &done_[i]->inputs : nullptr;  // none once taken
}

std::optional<LayerReference> ReferenceAhead::take(int layer) {
  const std::optional<size_t> index = index_of(layer);
  if (!index) return std::nullopt;
  const size_t i = *index;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return computed_ > i || finished_; });
  waited_seconds_ += seconds_between(t0, std::chrono::steady_clock::now());
  // Computing stops at the first layer that fails: that one and the later ones have no check.
  if (error_ && i + 1 >= computed_) std::rethrow_exception(error_);
  if (!done_[i]) throw std::logic_error("the reference computed ahead for layer " + std::to_string(layer) + " was taken twice");
  const std::unique_ptr<LayerReference> ref = std::move(done_[i]);
  return std::optional<LayerReference>(std::in_place, std::move(*ref));
}

void ReferenceAhead::wait() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return finished_; });
  waited_seconds_ += seconds_between(t0, std::chrono::steady_clock::now());
}

double ReferenceAhead::compute_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seconds_between(start_, finished_ ? end_ : std::chrono::steady_clock::now());
}

double ReferenceAhead::cpu_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<double>(own_cpu_ns_ + work_.started_threads_cpu_ns.load()) * 1e-9;
}

}  // namespace sdpa
