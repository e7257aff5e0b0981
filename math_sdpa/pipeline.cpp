// pipeline.cpp: the stages of the Math SDPA path.
#include "pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "cublas_gemm.h"
#include "cuda_check.h"
#include "errors.h"
#include "host_values.h"
#include "unified_pages.h"

namespace sdpa {

namespace {
const char* byte_ptr(const void* base, int64_t elems, DType type) {
  return static_cast<const char*>(base) + elems * static_cast<int64_t>(dtype_size(type));
}
}  // namespace

MathSdpa::MathSdpa(const SdpaProblem& problem, const PathSettings& settings, Allocator& allocator)
    : problem_(problem), settings_(settings), allocator_(allocator) {
  problem_.validate();
  settings_.alloc = allocator_.kind();
  CUDA_CHECK(cudaGetDevice(&device_));
  require_kernel_image_for_device(device_);
  int concurrent = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device_));
  concurrent_managed_access_ = concurrent != 0;
  check_conditions_expressible();
  tensors_ = path_tensors(problem_, settings_);
  spec_index_.fill(-1);
  for (size_t i = 0; i < tensors_.size(); ++i) spec_index_[static_cast<int>(tensors_[i].id)] = static_cast<int>(i);
  layer_.resize(static_cast<size_t>(settings_.layers));
  chunk_rows_ = chunk_rows(problem_, settings_);
  chunks_ = static_cast<int>((problem_.q_len + chunk_rows_ - 1) / chunk_rows_);
  // The streams first: a stream-ordered allocator (fix 4) orders the workspace on the path's stream.
  create_streams();
  allocator_.order_on(stream_);
  if (settings_.reduced_on_device && migratable(settings_.alloc)) {
    device_scores_allocator_ = make_allocator(AllocKind::device, allocator_options(settings_, false));
  } else if (settings_.reduced_on_device) {
    setup_notes_.push_back(std::string("[FIX_2] device-scores: nothing to do (") + alloc_kind_name(settings_.alloc) +
                           " memory does not migrate)");
  }
  try {
    build_workspace();
  } catch (...) {  // the destructor will not run: release what it would (the buffers go after this)
    if (cublas_) cublasDestroy(cublas_);
    call_ = {};
    layer_.clear();
    shared_ = {};
    allocator_.order_on(nullptr);
    destroy_streams();
    throw;
  }
}

const TensorSpec* MathSdpa::spec_of(TensorId id) const {
  const int i = spec_index_[static_cast<int>(id)];
  return i < 0 ? nullptr : &tensors_[static_cast<size_t>(i)];
}

MathSdpa::Slots& MathSdpa::slots_of(const TensorSpec& spec, int layer) {
  if (spec.lifetime == Lifetime::call) return call_;
  return spec.per_layer ? layer_[static_cast<size_t>(layer - 1)] : shared_;
}

void* MathSdpa::tensor(TensorId id, int chunk) {
  const TensorSpec* spec = spec_of(id);
  if (!spec) return nullptr;
  const std::vector<DeviceBuffer>& buffers = slots_of(*spec, layer_now_)[static_cast<int>(id)];
  if (buffers.empty()) return nullptr;
  if (spec->chunks == 1) return buffers.front().get();
  // Kept per chunk: an allocation per chunk (per call), or one buffer of every chunk (up front).
  if (buffers.size() > 1) return buffers[static_cast<size_t>(chunk)].get();
  return static_cast<char*>(buffers.front().get()) + static_cast<int64_t>(chunk) * spec->bytes;
}

size_t MathSdpa::tensor_bytes(TensorId id) const {
  const TensorSpec* spec = spec_of(id);
  return spec ? static_cast<size_t>(spec->bytes) : 0;
}

void MathSdpa::allocate_run_tensors() {
  for (const TensorSpec& t : tensors_) {
    if (t.lifetime != Lifetime::run) continue;
    const size_t bytes = static_cast<size_t>(t.bytes * t.chunks);  // up front one buffer holds every chunk
    std::vector<std::vector<DeviceBuffer>*> slots;
    if (!t.per_layer) slots.push_back(&shared_[static_cast<int>(t.id)]);
    for (int l = 1; t.per_layer && l <= settings_.layers; ++l) slots.push_back(&layer_[static_cast<size_t>(l - 1)][static_cast<int>(t.id)]);
    for (std::vector<DeviceBuffer>* buffers : slots) {
      buffers->emplace_back(allocator_for(t), bytes, t.name);
      const std::string placed = device_scores_note(t, buffers->back());
      if (!placed.empty()) setup_notes_.push_back(placed);
    }
  }
}

void MathSdpa::build_workspace() {
  const SdpaProblem& p = problem_;
  // The Kᵀ operand plan (gemm.h), shared with the generated reproducer.
  k_input_strides_ = k_input_strides(p, settings_.k_layout);
  k_gemm_strides_ = k_gemm_strides(p, settings_.k_layout);
  allocate_run_tensors();

  // Every byte of what exists before the first call is defined: scenario 4 reads every page of
  // every tensor at entry, and compute-sanitizer's initcheck must find no read of memory nothing
  // wrote. (The result tensor is still poisoned with NaN before each call.)
  for (const auto& [ptr, bytes] : all_buffers(true)) CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
  const auto buffers = all_buffers();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cublasCreate(&cublas_));
  bind_cublas(stream_);
  // Default math: no TF32 for fp32 (PyTorch's allow_tf32 is False for matmul by default).
  CUDA_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));

  const int64_t bh = p.batch * p.q_heads;
  const KtOperand kt = kt_operand(p, k_gemm_strides_, runs(Stage::kt_contiguous));
  gemm_calls_.push_back(qk_gemm_call(bh, p.q_len, p.kv_len, p.head_dim, p.compute_dtype(), kt, settings_.qk_gemm_api));
  gemm_calls_.push_back(pv_gemm_call(bh, p.q_len, p.kv_len, p.head_dim, p.compute_dtype()));
  gemm_calls_[0].stream = reinterpret_cast<uintptr_t>(qk_stream_);
  gemm_calls_[1].stream = reinterpret_cast<uintptr_t>(stream_);
  // One layer up front: the pointer arrays point at fixed tensors and are written once (a CUDA
  // graph replays them); otherwise each call writes them for its own tensors.
  if (settings_.qk_gemm_api == GemmApi::batched && settings_.layers == 1 && settings_.alloc_timing == AllocTiming::upfront) {
    build_qk_pointer_arrays(tensor(kt.contiguous ? TensorId::key_transposed : TensorId::key_scaled),
                            kt.contiguous ? contiguous_bhse(p.q_heads, p.head_dim, p.kv_len) : k_gemm_strides_);
  }
  apply_memory_advice(buffers, true);
}

MathSdpa::~MathSdpa() {
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (scores_toucher_.joinable()) {  // a call that ended in an error: let the thread finish
    softmax_launched_ = true;
    scores_toucher_.join();
  }
  if (cublas_) cublasDestroy(cublas_);
  // Nothing of the path may still run when its memory goes back (a free of system memory is not
  // stream-ordered); the streams go after the tensors.
  cudaDeviceSynchronize();
  call_ = {};
  layer_.clear();
  shared_ = {};
  allocator_.order_on(nullptr);
  destroy_streams();
}

void MathSdpa::bind_cublas(cudaStream_t stream) {
  if (cublas_stream_ == stream && cublas_stream_ != nullptr) return;
  CUDA_CHECK(cublasSetStream(cublas_, stream));
  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace is set after it.
  CUDA_CHECK(cublasSetWorkspace(cublas_, tensor(TensorId::cublas_workspace), tensor_bytes(TensorId::cublas_workspace)));
  cublas_stream_ = stream;
}

// Per (b, h): A = that head's Kᵀ (a view of K, or the contiguous copy), B = its Q, C = its scores.
void MathSdpa::build_qk_pointer_arrays(const void* kt_base, const HeadStrides& kt) {
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const int64_t bh = p.batch * p.q_heads;
  qk_pointer_host_.assign(static_cast<size_t>(3 * bh), nullptr);
  for (int64_t i = 0; i < bh; ++i) {
    const int64_t b = i / p.q_heads, h = i % p.q_heads;
    qk_pointer_host_[static_cast<size_t>(i)] = byte_ptr(kt_base, b * kt.batch + h * kt.head, ct);
    qk_pointer_host_[static_cast<size_t>(bh + i)] = byte_ptr(tensor(TensorId::query_scaled), i * p.q_len * p.head_dim, ct);
    qk_pointer_host_[static_cast<size_t>(2 * bh + i)] = byte_ptr(tensor(TensorId::scores), i * p.q_len * p.kv_len, ct);
  }
  CUDA_CHECK(cudaMemcpyAsync(tensor(TensorId::qk_pointers), qk_pointer_host_.data(), qk_pointer_host_.size() * sizeof(void*),
                             cudaMemcpyDefault, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void MathSdpa::upload(const HostInputs& in, int layer) {
  const SdpaProblem& p = problem_;
  layer_now_ = layer;
  auto upload_tensor = [&](const std::vector<float>& host, TensorId dst) {
    const std::vector<uint8_t> bytes = packed_values(host, p.dtype);
    // cudaMemcpyDefault: the destination may be device, managed, pinned or plain host memory.
    CUDA_CHECK(cudaMemcpyAsync(tensor(dst), bytes.data(), bytes.size(), cudaMemcpyDefault, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // `bytes` dies at the end of this lambda
  };
  set_current_stage("upload");
  upload_tensor(in.q, TensorId::query);
  // K at its layout's strides (scenario 3: a [B, S, Hkv, E] buffer).
  upload_tensor(placed_at(in.k, k_input_strides_, p.batch, p.kv_heads, p.kv_len, p.head_dim), TensorId::key);
  upload_tensor(in.v, TensorId::value);
  if (settings_.backward) {
    if (in.grad_out.size() != static_cast<size_t>(p.q_elems())) {
      throw std::logic_error("upload: --backward needs the layer's gradient of its output (HostInputs::grad_out)");
    }
    upload_tensor(in.grad_out, TensorId::grad_output);
  }
  // The mask is the model's, the same for every layer: the first layer's inputs bring it.
  if (layer == 1 && p.mask == MaskKind::boolean) {
    CUDA_CHECK(cudaMemcpyAsync(tensor(TensorId::mask_input), in.bool_mask.data(), in.bool_mask.size(), cudaMemcpyDefault, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  if (layer == 1 && p.mask == MaskKind::additive) upload_tensor(in.additive_mask, TensorId::mask_input);
  set_current_stage("setup");
}

TensorId MathSdpa::result_id() const { return result_tensor_id(problem_, settings_); }

DType MathSdpa::result_dtype() const { return result_tensor_dtype(problem_, settings_); }

int64_t MathSdpa::result_elems() const { return result_tensor_elems(problem_, settings_); }

void MathSdpa::poison(void* data, const TensorSpec& t) {
  const bool result = t.id == result_id();
  if (!result && !(settings_.backward && is_input_gradient(t.id))) return;
  const DType type = result ? result_dtype() : problem_.dtype;  // the gradients have the inputs' dtype
  launch_fill(data, type, t.bytes / static_cast<int64_t>(dtype_size(type)), std::nanf(""), stream_);
}

void MathSdpa::poison_result() {
  if (settings_.alloc_timing == AllocTiming::per_call) return;  // each call poisons its own (allocate_in_call)
  for (int l = 1; l <= settings_.layers; ++l) {
    layer_now_ = l;
    for (const TensorSpec& t : tensors_) poison(tensor(t.id), t);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

const void* MathSdpa::called_tensor(TensorId id, int layer) {
  layer_now_ = layer;
  const void* data = tensor(id);
  if (!data) throw std::logic_error("layer " + std::to_string(layer) + " has no " + tensor_name(id) + " (no call ran)");
  return data;
}

TensorStats MathSdpa::device_stats(const void* data, DType type, int64_t elems) {
  auto* stats = static_cast<TensorStats*>(tensor(TensorId::value_stats));
  launch_tensor_stats(data, type, elems, stats, stream_);
  TensorStats host{};
  CUDA_CHECK(cudaMemcpyAsync(&host, stats, sizeof host, cudaMemcpyDefault, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host;
}

std::vector<float> MathSdpa::download(TensorId id, DType type, int64_t elems, int layer) {
  const void* src = called_tensor(id, layer);
  std::vector<uint8_t> bytes(static_cast<size_t>(elems) * dtype_size(type));
  CUDA_CHECK(cudaMemcpyAsync(bytes.data(), src, bytes.size(), cudaMemcpyDefault, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return unpacked_values(bytes, type);
}

std::vector<float> MathSdpa::download_result(int layer) { return download(result_id(), result_dtype(), result_elems(), layer); }

MathSdpa::Gradients MathSdpa::download_gradients(int layer) {
  if (!settings_.backward) throw std::logic_error("download_gradients: the path runs no backward call (--backward)");
  const SdpaProblem& p = problem_;
  return {download(TensorId::grad_query, p.dtype, p.q_elems(), layer), download(TensorId::grad_key, p.dtype, p.kv_elems(), layer),
          download(TensorId::grad_value, p.dtype, p.kv_elems(), layer)};
}

int64_t MathSdpa::count_nonfinite(TensorId id, DType type, int64_t elems, int layer) {
  const TensorStats stats = device_stats(called_tensor(id, layer), type, elems);
  return static_cast<int64_t>(stats.nan_count + stats.inf_count);
}

int64_t MathSdpa::result_nonfinite(int layer) { return count_nonfinite(result_id(), result_dtype(), result_elems(), layer); }

int64_t MathSdpa::gradients_nonfinite(int layer) {
  if (!settings_.backward) throw std::logic_error("gradients_nonfinite: the path runs no backward call (--backward)");
  const SdpaProblem& p = problem_;
  return count_nonfinite(TensorId::grad_query, p.dtype, p.q_elems(), layer) +
         count_nonfinite(TensorId::grad_key, p.dtype, p.kv_elems(), layer) +
         count_nonfinite(TensorId::grad_value, p.dtype, p.kv_elems(), layer);
}

uint64_t MathSdpa::result_digest(int layer) {
  layer_now_ = layer;
  auto* digest = static_cast<unsigned long long*>(tensor(TensorId::value_stats));
  launch_digest(tensor(result_id()), static_cast<size_t>(result_elems()) * dtype_size(result_dtype()), digest, stream_);
  unsigned long long host = 0;
  CUDA_CHECK(cudaMemcpyAsync(&host, digest, sizeof host, cudaMemcpyDefault, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host;
}

// ------------------------------------------------------------------------ memory inside a call

void MathSdpa::tell_memory(const DeviceBuffer& buffer, const std::string& what, bool freed) {
  const AllocKind kind = buffer.from(allocator_) ? allocator_.kind() : AllocKind::device;  // fix 2's device-scores
  const AllocationRecord record{what, buffer.bytes(), reinterpret_cast<uintptr_t>(buffer.get()), kind};
  for (auto* o : observers_) o->memory_event(record, freed);
}

// The tensors the plan's alloc_* step names, for chunk `chunk`: a tensor kept per chunk is
// allocated by every chunk's alloc stage, any other by the first.
void MathSdpa::allocate_in_call(const AllocateOp& op) {
  std::vector<std::pair<void*, size_t>> fresh;
  for (TensorId id : op.tensors) {
    const TensorSpec& t = *spec_of(id);
    if (op.chunk > 0 && t.chunks == 1) continue;
    std::vector<DeviceBuffer>& buffers = slots_of(t, layer_now_)[static_cast<int>(t.id)];
    buffers.emplace_back(allocator_for(t), static_cast<size_t>(t.bytes), t.name);
    const DeviceBuffer& b = buffers.back();
    tell_memory(b, t.name, false);
    fresh.emplace_back(b.get(), b.bytes());
    // _safe_softmax writes its -inf mask of the scores; the harness needs no values in it, but its
    // pages are written as PyTorch's are, so that they take the memory PyTorch's take.
    if (t.id == TensorId::softmax_neginf) CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), stream_));
    poison(b.get(), t);
    const std::string placed = device_scores_note(t, b);
    if (!placed.empty()) note(op.stage, placed);
  }
  apply_memory_advice(fresh, false);
}

// The tensors the plan's free_* step names: the call's, what the layer kept for its backward call,
// what a checkpointed layer's recompute made again; at free_step every layer's.
void MathSdpa::free_in_call(const FreeOp& op) {
  // A free of pinned or plain host memory does not wait for the GPU's work on it, as cudaFree does
  // and as the caching and stream-ordered allocators order: the streams are waited for first.
  if (settings_.alloc == AllocKind::host || settings_.alloc == AllocKind::system) synchronize_all_streams();
  for (TensorId id : op.tensors) {
    const TensorSpec& t = *spec_of(id);
    const bool every_layer = op.stage == Stage::free_step && t.per_layer;
    for (size_t l = 0; l < (every_layer ? layer_.size() : 1); ++l) {
      std::vector<DeviceBuffer>& buffers = every_layer ? layer_[l][static_cast<int>(id)] : slots_of(t, layer_now_)[static_cast<int>(id)];
      for (const DeviceBuffer& b : buffers) tell_memory(b, t.name, true);
      buffers.clear();
    }
  }
}

void MathSdpa::end_step() {
  if (!step_pending_) return;
  step_pending_ = false;
  execute(plan().free_step);
  set_current_stage("setup");
}

void MathSdpa::note(Stage s, const std::string& text) {
  for (auto* o : observers_) {
    if (!capturing_ || o->acts_in_capture()) o->stage_note(s, text);
  }
}

void MathSdpa::stage(Stage s, const std::string& detail, const std::function<void()>& body, cudaStream_t on) {
  cudaStream_t stream = on ? on : stream_;
  set_current_stage(stage_name(s));
  // While the stages are captured into a graph they do not run: the observers see the capture and
  // the replays instead, and only what must act inside the graph (an injected fault) sees them.
  auto watching = [&](StageObserver* o) { return !capturing_ || o->acts_in_capture(); };
  for (auto* o : observers_) {
    if (watching(o)) o->stage_begin(s, detail, stream);
  }
  body();
  // As the original instrumentation does: wait for the stage to finish, so its _DONE line and
  // its end time mean "finished on the GPU".
  if (is_gpu_stage(s) && (instrumentation_.sync_each_stage || instrumentation_.collect_values ||
                          (instrumentation_.sync_at_events && s == Stage::scale_q))) {
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  const std::string summary = instrumentation_.collect_values ? value_summary(s) : std::string();
  for (auto* o : observers_) {
    if (watching(o)) o->stage_end(s, summary, stream);
  }
  set_current_stage("setup");
}

std::string MathSdpa::value_summary(Stage s) {
  const SdpaProblem& p = problem_;
  const void* data = nullptr;
  int64_t n = 0;
  // The whole tensor where there are no chunks; the last chunk's part where there are.
  const int64_t chunk_scores = p.batch * p.q_heads * chunk_rows_ * p.kv_len;
  if (s == Stage::qk_gemm) data = tensor(TensorId::scores), n = chunk_scores;
  if (s == Stage::softmax) data = tensor(TensorId::probs, chunks_ - 1), n = chunk_scores;
  if (s == Stage::dropout) data = tensor(TensorId::attn_dropped, chunks_ - 1), n = chunk_scores;
  if (s == Stage::pv_gemm) data = tensor(TensorId::out_acc), n = p.out_elems();
  if (!data) return {};
  const TensorStats host = device_stats(data, p.compute_dtype(), n);
  char buf[256];
  std::snprintf(buf, sizeof buf, "min=%.6g max=%.6g isnan=%s isinf=%s sum=%.6g rows=%lld", host.min, host.max,
                host.nan_count ? "true" : "false", host.inf_count ? "true" : "false",
                static_cast<double>(static_cast<float>(host.sum)),  // as .item<float>() would give it
                static_cast<long long>(s == Stage::pv_gemm ? p.batch * p.q_heads * p.q_len : n / p.kv_len));
  return buf;
}

WeightsLoad MathSdpa::load_weights() {
  weights_ = std::make_unique<WeightsLoader>(settings_.weights, settings_.plan_against_free);
  for (int i = 0; i < weights_->tensors(); ++i) stage(Stage::load_weights, weights_->detail(i), [&] { weights_->copy(i, stream_); });
  return weights_->finish();
}

const CallPlan& MathSdpa::plan() {
  if (!planned_) {
    plan_ = plan_calls(problem_, settings_, tensors_, hooks_, device_);
    planned_ = true;
  }
  return plan_;
}

void MathSdpa::run(int step) {
  if (step_pending_) end_step();
  for (int l = 1; l <= settings_.layers; ++l) run_layer(l, step);
  // Autograd runs the layers' backward calls in reverse: the last layer's output is the first
  // the loss reaches. With --graph (one layer) the graph holds the backward call's stages too.
  if (settings_.backward && !settings_.graph) {
    for (int l = settings_.layers; l >= 1; --l) run_backward(l, step);
  }
  step_pending_ = true;
}

// The backward of _scaled_dot_product_attention_math for dO = grad_output, in the order autograd
// runs its nodes: the cast back's ToCopyBackward, bmm(P, V)'s (dPd, then dV), dropout's,
// _safe_softmax's (the mask's add passes the gradient through), bmm(Q, Kᵀ)'s (dQs, then dKs),
// then the √scale multiplications, repeat_interleave's sums and the upcasts' casts back, here one
// kernel per input. Every tensor it reads is what autograd saved (memory_plan.h).
void MathSdpa::run_backward(int layer, int step) {
  layer_now_ = layer;
  for (auto* o : observers_) o->call_position(CallPosition{step, layer, settings_.layers});
  execute(plan().backward_gpu);
  execute(plan_.backward_sync);
}

void MathSdpa::run_layer(int layer, int step) {
  layer_now_ = layer;
  const CallPosition position{step, layer, settings_.layers};
  for (auto* o : observers_) o->call_position(position);
  execute(plan().entry);
  if (settings_.graph) {
    if (!graph_exec_) capture_graph();
    stage(Stage::graph_launch, "nodes=" + std::to_string(graph_nodes_), [&] { CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream_)); });
  } else {
    execute(plan_.forward_gpu);
  }
  execute(plan_.free_call);
  execute(plan_.stream_sync);
}

// The first call's GPU stages are issued into a capture of the path's stream instead of run:
// the kernels, both cuBLAS GEMMs (their handle and workspace set before), the fixes' device-side
// parts (the prefetch) and an injected fault all become nodes of one graph, which every call
// then replays. Thread-local capture: the watchdog's and the reporter's threads keep working.
void MathSdpa::capture_graph() {
  stage(Stage::graph_capture, "stream=" + std::to_string(reinterpret_cast<uintptr_t>(stream_)), [&] {
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    try {
      execute(plan().forward_gpu);
      if (settings_.backward) execute(plan_.backward_gpu);
    } catch (...) {
      capturing_ = false;
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream_, &broken);  // ends the capture whatever went wrong; its error is the one thrown
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    capturing_ = false;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph_));
    CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &graph_nodes_));
  });
  stage(Stage::graph_instantiate, "nodes=" + std::to_string(graph_nodes_),
        [&] { CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0)); });
}

// ------------------------------------------------------------------------ the plan, carried out

void MathSdpa::execute(const std::vector<PlanStep>& steps) {
  for (const PlanStep& s : steps) execute(s);
}

void MathSdpa::execute(const PlanStep& step) {
  if (!step.staged) {
    for (const PlanOp& op : step.ops) run_op(op, step.stage, step.stream);
    return;
  }
  if (step.ops.empty()) return;  // a memory stage with nothing to do in this configuration
  stage(
      step.stage, with_streams(step.detail),
      [&] {
        for (const PlanOp& op : step.ops) run_op(op, step.stage, step.stream);
      },
      stream_of(step.stream));
}

std::string MathSdpa::with_streams(const std::string& text) const {
  std::string out = text;
  for (PathStream s : {PathStream::path, PathStream::gemm}) {
    const std::string placeholder = stream_placeholder(s);
    char handle[32];
    std::snprintf(handle, sizeof handle, "%p", static_cast<void*>(stream_of(s)));
    for (size_t at; (at = out.find(placeholder)) != std::string::npos;) out.replace(at, placeholder.size(), handle);
  }
  return out;
}

void* MathSdpa::ref(const TensorRef& t) {
  void* base = tensor(t.id, t.chunk);
  if (!base) throw std::logic_error(std::string("the call plan reads ") + tensor_name(t.id) + ", which this call has not allocated");
  return static_cast<char*>(base) + t.byte;
}

std::vector<MathSdpa::HostOperand> MathSdpa::resolve(const std::vector<ReducedOperand>& operands) {
  std::vector<HostOperand> out;
  for (const ReducedOperand& o : operands) out.push_back({o.name, tensor(o.id, o.chunk), static_cast<size_t>(o.bytes)});
  return out;
}

// One step of the call plan, by its kind: an allocation, a synchronisation, a kernel, a cuBLAS
// call, the host's touch of a tensor.
struct MathSdpa::OpRunner {
  MathSdpa& m;
  Stage s;
  cudaStream_t stream;
  void operator()(const AllocateOp& o) { m.allocate_in_call(o); }
  void operator()(const FreeOp& o) { m.free_in_call(o); }
  void operator()(const EntrySyncOp& o) {
    if (o.storm) {
      m.enter_with_page_fault_storm();
    } else {
      CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  void operator()(const SyncAllStreamsOp&) { m.synchronize_all_streams(); }
  void operator()(const HookSyncOp& o) {
    if (o.stream == PathStream::none) {
      CUDA_CHECK(cudaDeviceSynchronize());
    } else {
      CUDA_CHECK(cudaStreamSynchronize(m.stream_of(o.stream)));
    }
  }
  void operator()(const PrefetchOp& o) {
    CUDA_CHECK(cudaMemPrefetchAsync(m.ref(o.tensor), static_cast<size_t>(o.bytes), memory_location(false, m.device_), 0,
                                    m.stream_of(o.stream)));
  }
  void operator()(const NoteOp& o) { m.note(o.stage, m.with_streams(o.text)); }
  void operator()(const OrderGemmOp& o) { m.order_gemm_after_producers(o.gemm); }
  void operator()(const OrderPathOp&) { m.order_path_after_gemm(); }
  void operator()(const BuildMaskOp& o) {
    launch_build_additive_mask(o.causal ? nullptr : static_cast<const uint8_t*>(m.ref(o.bool_mask)), m.ref(o.dst), o.type,
                               o.slices, o.L, o.S, stream);
  }
  void operator()(const ConvertOp& o) {
    launch_convert_scale(m.ref(o.src), o.src_type, m.ref(o.dst), o.dst_type, o.n, o.factor, stream);
  }
  void operator()(const UpcastOp& o) {
    // Q, K (keeping its layout) and V in one launch: three conversions, one launch's overhead.
    const ConvertJob jobs[] = {{m.ref(o.src[0]), m.ref(o.dst[0]), o.n[0]},
                               {m.ref(o.src[1]), m.ref(o.dst[1]), o.n[1]},
                               {m.ref(o.src[2]), m.ref(o.dst[2]), o.n[2]}};
    launch_convert_scale_batch(jobs, 3, o.src_type, o.dst_type, 1.0f, stream);
  }
  void operator()(const RepeatHeadsOp& o) {
    launch_repeat_heads(m.ref(o.src), o.strides, m.ref(o.dst), o.type, o.batch, o.kv_heads, o.group, o.len, o.dim, stream);
  }
  void operator()(const TransposeHeadsOp& o) {
    launch_transpose_heads(m.ref(o.src), o.strides, m.ref(o.dst), o.type, o.batch, o.heads, o.len, o.dim, stream);
  }
  void operator()(const PointerArraysOp& o) { m.build_qk_pointer_arrays(m.ref(o.kt), o.kt_strides); }
  void operator()(const GemmOp& o) {
    m.bind_cublas(m.stream_of(o.stream));
    const char* a = static_cast<const char*>(m.ref(o.a));
    const char* b = static_cast<const char*>(m.ref(o.b));
    char* c = static_cast<char*>(m.ref(o.c));
    for (int64_t i = 0; i < o.calls; ++i) run_gemm(m.cublas_, o.call, a + i * o.step_a, b + i * o.step_b, c + i * o.step_c);
  }
  void operator()(const AddMaskOp& o) {
    launch_add_mask(m.ref(o.scores), o.scores_type, m.ref(o.mask), o.mask_type, o.B, o.H, o.L, o.S, o.per_batch, o.per_head,
                    stream, o.row0, o.rows);
  }
  void operator()(const SoftmaxOp& o) { launch_safe_softmax(m.ref(o.in), m.ref(o.out), o.type, o.rows, o.cols, stream); }
  void operator()(const DropoutOp& o) {
    const RowChunk rows{o.rows.rows, o.rows.row0, o.rows.L, o.rows.S};
    launch_dropout(m.ref(o.in), m.ref(o.out), static_cast<uint8_t*>(m.ref(o.mask)), o.type, o.n, o.seed,
                   layer_problem(m.problem_, m.layer_now_).dropout_offset, o.keep, stream, rows);
  }
  void operator()(const DropoutBackwardOp& o) {
    launch_dropout_backward(m.ref(o.grad), static_cast<const uint8_t*>(m.ref(o.mask)), m.ref(o.out), o.type, o.n, o.keep,
                            stream);
  }
  void operator()(const SoftmaxBackwardOp& o) {
    launch_softmax_backward(m.ref(o.grad), m.ref(o.probs), m.ref(o.out), o.type, o.rows, o.cols, stream);
  }
  void operator()(const SumHeadGroupsOp& o) {
    launch_sum_head_groups(m.ref(o.src), o.src_type, m.ref(o.dst), o.dst_type, o.heads, o.group, o.elems, o.factor, stream);
  }
  void operator()(const HostAccessOp& o) {
    if (o.stage == Stage::scores_to_host) {
      m.move_scores_to_host();
    } else {
      m.move_to_host(o.stage, m.resolve(o.operands));
    }
  }
  void operator()(const SoftmaxLaunchedOp&) { m.softmax_launched(); }
  void operator()(const FinishHostAccessOp&) { m.finish_scores_touch(); }
  void operator()(const ReleaseHostAdviceOp& o) {
    if (o.unless_touching && m.scores_toucher_.joinable()) return;
    m.release_host_advice(m.resolve(o.operands));
  }
};

void MathSdpa::run_op(const PlanOp& planned, Stage s, PathStream on) { std::visit(OpRunner{*this, s, stream_of(on)}, planned); }

}  // namespace sdpa
