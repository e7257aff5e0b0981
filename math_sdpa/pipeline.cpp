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
  backward_gemms_ = backward_gemm_calls(bh, p.q_len, p.kv_len, p.head_dim, p.compute_dtype(), kt);
  for (GemmCall* g : {&backward_gemms_.dp, &backward_gemms_.dv, &backward_gemms_.dq, &backward_gemms_.dk}) {
    g->stream = reinterpret_cast<uintptr_t>(qk_stream_);
  }
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
    std::vector<uint8_t> bytes(host.size() * dtype_size(p.dtype));
    for (size_t i = 0; i < host.size(); ++i) {
      if (p.dtype == DType::fp32) {
        std::memcpy(&bytes[i * 4], &host[i], 4);
      } else {
        const uint16_t h = p.dtype == DType::bf16 ? float_to_bf16_bits(host[i]) : float_to_fp16_bits(host[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
    // cudaMemcpyDefault: the destination may be device, managed, pinned or plain host memory.
    CUDA_CHECK(cudaMemcpyAsync(tensor(dst), bytes.data(), bytes.size(), cudaMemcpyDefault, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // `bytes` dies at the end of this lambda
  };
  set_current_stage("upload");
  upload_tensor(in.q, TensorId::query);
  if (settings_.k_layout == KLayout::bshe) {
    // Scenario 3: K as a [B, S, Hkv, E] buffer (what a Linear projection followed by
    // .view(B, S, H, E).transpose(1, 2) leaves behind); the logical tensor is unchanged.
    std::vector<float> bshe(in.k.size());
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.kv_heads; ++h)
        for (int64_t s = 0; s < p.kv_len; ++s)
          std::memcpy(&bshe[static_cast<size_t>(b * k_input_strides_.batch + h * k_input_strides_.head + s * k_input_strides_.row)],
                      &in.k[static_cast<size_t>(((b * p.kv_heads + h) * p.kv_len + s) * p.head_dim)],
                      static_cast<size_t>(p.head_dim) * sizeof(float));
    upload_tensor(bshe, TensorId::key);
  } else {
    upload_tensor(in.k, TensorId::key);
  }
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

TensorId MathSdpa::result_id() const {
  switch (result_tensor_of(settings_)) {
    case ResultTensor::scores: return TensorId::scores;
    case ResultTensor::probs: return runs(Stage::dropout) ? TensorId::attn_dropped : TensorId::probs;
    case ResultTensor::output: return runs(Stage::cast_output) ? TensorId::output : TensorId::out_acc;
  }
  return TensorId::output;
}

DType MathSdpa::result_dtype() const { return result_id() == TensorId::output ? problem_.dtype : problem_.compute_dtype(); }

int64_t MathSdpa::result_elems() const {
  return result_tensor_of(settings_) == ResultTensor::output ? problem_.out_elems() : problem_.score_elems();
}

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
  std::vector<float> out(static_cast<size_t>(elems));
  for (size_t i = 0; i < out.size(); ++i) {
    if (type == DType::fp32) {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = type == DType::bf16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
    }
  }
  return out;
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

// A tensor kept per chunk is allocated by every chunk's alloc stage; any other by the first.
void MathSdpa::allocate_in_call(Stage s, int chunk) {
  std::vector<std::pair<void*, size_t>> fresh;
  for (const TensorSpec& t : tensors_) {
    if (t.lifetime == Lifetime::run || t.alloc_stage != s || (chunk > 0 && t.chunks == 1)) continue;
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
    if (!placed.empty()) note(s, placed);
  }
  apply_memory_advice(fresh, false);
}

void MathSdpa::free_in_call(Stage s) {
  // A free of pinned or plain host memory does not wait for the GPU's work on it, as cudaFree does
  // and as the caching and stream-ordered allocators order: the streams are waited for first.
  if (settings_.alloc == AllocKind::host || settings_.alloc == AllocKind::system) synchronize_all_streams();
  if (s == Stage::free_step) {
    for (Slots& slots : layer_) {
      for (const TensorSpec& t : tensors_) {
        if (t.lifetime != Lifetime::step) continue;
        for (const DeviceBuffer& b : slots[static_cast<int>(t.id)]) tell_memory(b, t.name, true);
        slots[static_cast<int>(t.id)].clear();
      }
    }
    return;
  }
  // The call's tensors freed here, and (by a backward call) what its layer kept for it.
  for (const TensorSpec& t : tensors_) {
    if (t.lifetime == Lifetime::run || t.free_stage != s) continue;
    std::vector<DeviceBuffer>& buffers = slots_of(t, layer_now_)[static_cast<int>(t.id)];
    for (const DeviceBuffer& b : buffers) tell_memory(b, t.name, true);
    buffers.clear();
  }
}

// The alloc_* or free_* stage `s`, when it has anything to do: per call, and for a chunk's alloc
// stage, when this chunk allocates (every chunk for tensors kept per chunk, else the first).
void MathSdpa::memory_stage(Stage s, int chunk) {
  if (!runs(s)) return;
  std::string detail;
  for (const TensorSpec& t : tensors_) {
    const bool allocates = t.lifetime != Lifetime::run && t.alloc_stage == s && (chunk == 0 || t.chunks > 1);
    const bool frees = t.lifetime != Lifetime::run && t.free_stage == s;
    if (allocates || frees) detail += (detail.empty() ? "" : " ") + std::string(t.name) + "=" + std::to_string(t.bytes);
  }
  if (detail.empty()) return;
  if (chunks_ > 1 && s != Stage::free_call && s != Stage::free_step) detail += " chunk=" + std::to_string(chunk + 1);
  stage(s, detail, [&] {
    if (is_free_stage(s)) {
      free_in_call(s);
    } else {
      allocate_in_call(s, chunk);
    }
  });
}

void MathSdpa::end_step() {
  if (!step_pending_) return;
  step_pending_ = false;
  memory_stage(Stage::free_step);
  set_current_stage("setup");
}

void MathSdpa::GpuHookActions::synchronize_stream(StreamHandle stream) { CUDA_CHECK(cudaStreamSynchronize(stream)); }

void MathSdpa::GpuHookActions::synchronize_device() { CUDA_CHECK(cudaDeviceSynchronize()); }

void MathSdpa::GpuHookActions::prefetch_to_device(void* data, size_t bytes, int device, StreamHandle stream) {
  cudaMemLocation gpu{};
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = device;
  CUDA_CHECK(cudaMemPrefetchAsync(data, bytes, gpu, 0, stream));
}

void MathSdpa::note(Stage s, const std::string& text) {
  for (auto* o : observers_) {
    if (!capturing_ || o->acts_in_capture()) o->stage_note(s, text);
  }
}

std::vector<HookContext::Operand> MathSdpa::reduced_by(Stage s) {
  if (s == Stage::softmax) return {{"scores", tensor(TensorId::scores), tensor_bytes(TensorId::scores)}};
  if (s != Stage::softmax_backward && s != Stage::grads_to_host) return {};
  const TensorId dprobs = runs(Stage::dropout_backward) ? TensorId::grad_probs : TensorId::grad_attn_dropped;
  return {{"probs", tensor(TensorId::probs), tensor_bytes(TensorId::probs)}, {"grad_probs", tensor(dprobs), tensor_bytes(dprobs)}};
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
  HookContext ctx{s, stream, stream_, device_, reduced_by(s), allocator_.kind(), [this, s](const std::string& text) { note(s, text); },
                  &hook_actions_};
  if (device_scores_allocator_ && !ctx.reduced.empty()) ctx.kind = AllocKind::device;  // fix 2's device-scores
  for (auto* h : hooks_) h->before_stage(ctx);
  body();
  for (auto* h : hooks_) h->after_stage(ctx);
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
  issue_backward_stages();
  stage(Stage::backward_sync, "", [&] { synchronize_all_streams(); });
}

void MathSdpa::issue_backward_stages() {
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const int64_t bh = p.batch * p.q_heads, group = p.q_heads / p.kv_heads;

  memory_stage(Stage::alloc_grad_pv);
  const void* dout = tensor(TensorId::grad_output);
  if (runs(Stage::grad_upcast)) {
    stage(Stage::grad_upcast, std::string(dtype_name(p.dtype)) + "->fp32", [&] {
      launch_convert_scale(dout, p.dtype, tensor(TensorId::grad_output_acc), ct, p.q_elems(), 1.0f, stream_);
    });
    dout = tensor(TensorId::grad_output_acc);
  }
  // The V and probabilities bmm(P, V) read, as it saved them.
  const void* v = p.gqa() ? tensor(TensorId::value_expanded) : runs(Stage::upcast) ? tensor(TensorId::value_acc) : tensor(TensorId::value);
  const bool dropout = runs(Stage::dropout);
  const void* probs_read = dropout ? tensor(TensorId::attn_dropped) : tensor(TensorId::probs);
  const BackwardGemms& g = backward_gemms_;
  // Scenario 1's condition: the backward's GEMMs on the Q·Kᵀ GEMM's stream, ordered (or not) as
  // that GEMM is. `calls` > 1 issues `call` that many times, the operands `step_*` elements on.
  auto gemm_stage = [&](Stage s, const GemmCall& call, const void* a, const void* b, void* c, int64_t calls = 1,
                        int64_t step_a = 0, int64_t step_b = 0, int64_t step_c = 0) {
    order_gemm_after_producers(s);
    stage(
        s, call.describe() + (calls > 1 ? " calls=" + std::to_string(calls) + " (one per batch entry)" : std::string()),
        [&] {
          bind_cublas(qk_stream_);
          for (int64_t i = 0; i < calls; ++i) {
            run_gemm(cublas_, call, byte_ptr(a, i * step_a, ct), byte_ptr(b, i * step_b, ct),
                     const_cast<char*>(byte_ptr(c, i * step_c, ct)));
          }
        },
        qk_stream_);
    order_path_after_gemm();
  };
  gemm_stage(Stage::dp_gemm, g.dp, v, dout, tensor(TensorId::grad_attn_dropped));
  gemm_stage(Stage::dv_gemm, g.dv, dout, probs_read, tensor(TensorId::grad_value_expanded));

  memory_stage(Stage::alloc_grad_softmax);
  const void* dprobs = tensor(TensorId::grad_attn_dropped);
  if (dropout) {
    stage(Stage::dropout_backward, "p=" + std::to_string(p.dropout_p), [&] {
      launch_dropout_backward(dprobs, static_cast<const uint8_t*>(tensor(TensorId::dropout_mask)), tensor(TensorId::grad_probs),
                              ct, p.score_elems(), p.keep_prob(), stream_);
    });
    dprobs = tensor(TensorId::grad_probs);
  }
  if (runs(Stage::grads_to_host)) {
    stage(Stage::grads_to_host, std::string("mode=") + scores_to_host_name(settings_.scores_to_host),
          [&] { move_to_host(Stage::grads_to_host, reduced_by(Stage::softmax_backward)); });
  }
  stage(Stage::softmax_backward,
        "rows=" + std::to_string(bh * p.q_len) + " cols=" + std::to_string(p.kv_len) +
            (p.kv_len <= kSoftmaxBackwardWarpCols ? " variant=warp" : " variant=block"),
        [&] {
          launch_softmax_backward(dprobs, tensor(TensorId::probs), tensor(TensorId::grad_scores), ct, bh * p.q_len, p.kv_len,
                                  stream_);
        });
  release_host_advice(reduced_by(Stage::softmax_backward));
  memory_stage(Stage::free_grad_probs);

  memory_stage(Stage::alloc_grad_qk);
  const bool kt_copy = runs(Stage::kt_contiguous);
  // dQ reads K as the forward's GEMM did. A view of a [B, S, H, E] K whose batch and head strides
  // do not fold (the pointer-array GEMM took it without a copy) is read one batch entry a call.
  const HeadStrides& ks = k_gemm_strides_;
  const bool folds = kt_copy || p.batch == 1 || ks.batch == p.q_heads * ks.head;
  const void* k_read = tensor(kt_copy ? TensorId::key_transposed : TensorId::key_scaled);
  GemmCall dq = g.dq;
  if (!folds) dq.batch = static_cast<int>(p.q_heads);
  gemm_stage(Stage::dq_gemm, dq, k_read, tensor(TensorId::grad_scores), tensor(TensorId::grad_query_scaled), folds ? 1 : p.batch,
             ks.batch, p.q_heads * p.q_len * p.kv_len, p.q_heads * p.q_len * p.head_dim);
  gemm_stage(Stage::dk_gemm, g.dk, tensor(TensorId::query_scaled), tensor(TensorId::grad_scores), tensor(TensorId::grad_key_scaled));
  stage(Stage::grad_inputs, "group=" + std::to_string(group) + " ->" + dtype_name(p.dtype), [&] {
    const int64_t head_elems = p.kv_len * p.head_dim;
    launch_sum_head_groups(tensor(TensorId::grad_query_scaled), ct, tensor(TensorId::grad_query), p.dtype, bh,
                           1, p.q_len * p.head_dim, p.q_factor(), stream_);
    launch_sum_head_groups(tensor(TensorId::grad_key_scaled), ct, tensor(TensorId::grad_key), p.dtype, p.batch * p.kv_heads,
                           group, head_elems, p.k_factor(), stream_);
    launch_sum_head_groups(tensor(TensorId::grad_value_expanded), ct, tensor(TensorId::grad_value), p.dtype,
                           p.batch * p.kv_heads, group, head_elems, 1.0f, stream_);
  });
  memory_stage(Stage::free_backward);
}

void MathSdpa::run_layer(int layer, int step) {
  layer_now_ = layer;
  const CallPosition position{step, layer, settings_.layers};
  for (auto* o : observers_) o->call_position(position);
  stage(Stage::entry_sync, problem_.shape_string(), [&] {
    if (settings_.entry_touch_streams > 0) {
      enter_with_page_fault_storm();
    } else {
      CUDA_CHECK(cudaDeviceSynchronize());
    }
  });

  if (settings_.graph) {
    if (!graph_exec_) capture_graph();
    stage(Stage::graph_launch, "nodes=" + std::to_string(graph_nodes_), [&] { CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream_)); });
  } else {
    issue_gpu_stages();
  }
  memory_stage(Stage::free_call);

  stage(Stage::stream_sync, "", [&] {
    synchronize_all_streams();
    finish_scores_touch();
  });
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
      issue_gpu_stages();
      if (settings_.backward) issue_backward_stages();
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

void MathSdpa::issue_gpu_stages() {
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const int64_t group = p.q_heads / p.kv_heads;
  const float q_factor = p.q_factor(), k_factor = p.k_factor();  // sqrt(scale), the sign on Q

  const void* mask = nullptr;  // the additive mask, in dtype
  if (p.mask == MaskKind::additive) mask = tensor(TensorId::mask_input);
  if (runs(Stage::mask_prepare)) {
    memory_stage(Stage::alloc_mask);
    stage(Stage::mask_prepare, mask_kind_name(p.mask), [&] {
      const bool causal = p.mask == MaskKind::causal;
      launch_build_additive_mask(causal ? nullptr : static_cast<const uint8_t*>(tensor(TensorId::mask_input)),
                                 tensor(TensorId::additive_mask), p.dtype, causal ? 1 : p.mask_batch() * p.mask_heads(),
                                 p.q_len, p.kv_len, stream_);
    });
    mask = tensor(TensorId::additive_mask);
  }

  const void* q = tensor(TensorId::query);
  const void* k = tensor(TensorId::key);
  const void* v = tensor(TensorId::value);
  if (runs(Stage::upcast)) {
    memory_stage(Stage::alloc_upcast);
    stage(Stage::upcast, std::string(dtype_name(p.dtype)) + "->fp32", [&] {
      // Q, K (keeping its layout) and V in one launch: three conversions, one launch's overhead.
      const ConvertJob jobs[] = {{q, tensor(TensorId::query_acc), p.q_elems()},
                                 {k, tensor(TensorId::key_acc), p.kv_elems()},
                                 {v, tensor(TensorId::value_acc), p.kv_elems()}};
      launch_convert_scale_batch(jobs, 3, p.dtype, ct, 1.0f, stream_);
    });
    q = tensor(TensorId::query_acc);
    k = tensor(TensorId::key_acc);
    v = tensor(TensorId::value_acc);
  }

  memory_stage(Stage::alloc_query_scaled);
  stage(Stage::scale_q, "factor=" + std::to_string(q_factor), [&] {
    launch_convert_scale(q, ct, tensor(TensorId::query_scaled), ct, p.q_elems(), q_factor, stream_);
  });

  if (runs(Stage::gqa_expand)) {
    memory_stage(Stage::alloc_expanded);
    stage(Stage::gqa_expand, "group=" + std::to_string(group), [&] {
      launch_repeat_heads(k, k_input_strides_, tensor(TensorId::key_expanded), ct, p.batch, p.kv_heads, group, p.kv_len,
                          p.head_dim, stream_);
      if (runs(Stage::pv_gemm)) {
        launch_repeat_heads(v, contiguous_bhse(p.kv_heads, p.kv_len, p.head_dim), tensor(TensorId::value_expanded), ct,
                            p.batch, p.kv_heads, group, p.kv_len, p.head_dim, stream_);
      }
    });
    k = tensor(TensorId::key_expanded);
    v = tensor(TensorId::value_expanded);
  }

  const int64_t k_elems = p.gqa() ? p.batch * p.q_heads * p.kv_len * p.head_dim : p.kv_elems();
  memory_stage(Stage::alloc_key_scaled);
  stage(Stage::scale_k, "factor=" + std::to_string(k_factor) + " transposed_view=true", [&] {
    launch_convert_scale(k, ct, tensor(TensorId::key_scaled), ct, k_elems, k_factor, stream_);  // keeps K's layout
  });

  const void* kt = tensor(TensorId::key_scaled);
  if (runs(Stage::kt_contiguous)) {
    const char* reason = settings_.kt_contiguous ? "fix_3" : "reshape_copy (at::matmul cannot fold this K^T view into a batch)";
    memory_stage(Stage::alloc_key_transposed);
    stage(Stage::kt_contiguous, std::string("reason=") + reason, [&] {
      launch_transpose_heads(tensor(TensorId::key_scaled), k_gemm_strides_, tensor(TensorId::key_transposed), ct, p.batch,
                             p.q_heads, p.kv_len, p.head_dim, stream_);
    });
    kt = tensor(TensorId::key_transposed);
  }

  const void* q_scaled = tensor(TensorId::query_scaled);
  for (int c = 0; c < chunks_; ++c) {
    const int64_t row0 = c * chunk_rows_;
    issue_chunk(c, row0, std::min(chunk_rows_, p.q_len - row0), q_scaled, kt, v, mask);
  }

  if (runs(Stage::cast_output)) {
    stage(Stage::cast_output, std::string("fp32->") + dtype_name(p.dtype), [&] {
      launch_convert_scale(tensor(TensorId::out_acc), ct, tensor(TensorId::output), p.dtype, p.out_elems(), 1.0f, stream_);
    });
  }
}

// The Q.K^T GEMM through the P.V GEMM for query rows [row0, row0 + rows) of every head: the whole
// L without fix 5's chunks; with them the scores, probabilities and dropout hold [B·H, rows, S]
// (allocated by the first chunk, or by every chunk for a tensor kept per chunk) and the GEMMs read
// and write those rows of Q and of the output.
void MathSdpa::issue_chunk(int chunk, int64_t row0, int64_t rows, const void* q, const void* kt, const void* v,
                           const void* mask) {
  const SdpaProblem& p = problem_;
  const DType ct = p.compute_dtype();
  const size_t acc = dtype_size(ct);
  const bool chunked = chunks_ > 1;
  const std::string of_chunk = chunked ? " chunk=" + std::to_string(chunk + 1) + "/" + std::to_string(chunks_) : "";
  const int64_t n = p.batch * p.q_heads * rows * p.kv_len;
  const RowChunk rows_of_chunk = chunked ? RowChunk{rows, row0, p.q_len, p.kv_len} : RowChunk{};

  memory_stage(Stage::alloc_scores, chunk);
  // The pointer arrays point at this call's K^T, Q and scores: written once where those never
  // move (one layer up front, build_workspace), else for every call, once its scores exist.
  if (gemm_calls_[0].pointer_array && (settings_.layers > 1 || settings_.alloc_timing == AllocTiming::per_call)) {
    build_qk_pointer_arrays(kt, runs(Stage::kt_contiguous) ? contiguous_bhse(p.q_heads, p.head_dim, p.kv_len) : k_gemm_strides_);
  }
  GemmCall qk = gemm_calls_[0];
  qk.n = static_cast<int>(rows);
  qk.stride_c = rows * p.kv_len;
  order_gemm_after_producers();
  stage(
      Stage::qk_gemm, qk.describe() + of_chunk,
      [&] {
        bind_cublas(qk_stream_);
        if (qk.pointer_array) {
          char* arrays = static_cast<char*>(tensor(TensorId::qk_pointers));  // A, B, C pointer arrays, back to back
          const size_t array_bytes = static_cast<size_t>(p.batch * p.q_heads) * sizeof(void*);
          run_gemm(cublas_, qk, arrays, arrays + array_bytes, arrays + 2 * array_bytes);
        } else {
          run_gemm(cublas_, qk, kt, static_cast<const char*>(q) + row0 * p.head_dim * acc, tensor(TensorId::scores));
        }
      },
      qk_stream_);
  order_path_after_gemm();

  if (runs(Stage::mask_add) && mask) {
    stage(Stage::mask_add, std::string(mask_kind_name(p.mask)) + of_chunk, [&] {
      const bool causal = p.mask == MaskKind::causal;
      launch_add_mask(tensor(TensorId::scores), ct, mask, p.dtype, p.batch, p.q_heads, p.q_len, p.kv_len,
                      !causal && p.mask_per_batch, !causal && p.mask_per_head, stream_, row0, rows);
    });
  }

  if (runs(Stage::scores_to_host)) {
    stage(Stage::scores_to_host, std::string("mode=") + scores_to_host_name(settings_.scores_to_host) + of_chunk,
          [&] { move_scores_to_host(); });
  }

  if (runs(Stage::softmax)) {
    memory_stage(Stage::alloc_probs, chunk);
    const SoftmaxVariant variant = softmax_variant_for(ct, p.kv_len);
    stage(Stage::softmax,
          "rows=" + std::to_string(p.batch * p.q_heads * rows) + " cols=" + std::to_string(p.kv_len) +
              " variant=" + softmax_variant_name(variant) + of_chunk,
          [&] {
            launch_safe_softmax(tensor(TensorId::scores), tensor(TensorId::probs, chunk), ct, p.batch * p.q_heads * rows,
                                p.kv_len, stream_);
            softmax_launched();
          });
    if (!scores_toucher_.joinable()) release_scores_advice();
    if (chunk == chunks_ - 1 && runs(Stage::free_scores)) {
      // Scenario 2's host thread touches the scores until softmax has read them: it is done
      // before they go.
      finish_scores_touch();
      memory_stage(Stage::free_scores);
    }
  }

  if (runs(Stage::dropout)) {
    memory_stage(Stage::alloc_dropout, chunk);
    stage(Stage::dropout, "p=" + std::to_string(p.dropout_p) + of_chunk, [&] {
      launch_dropout(tensor(TensorId::probs, chunk), tensor(TensorId::attn_dropped, chunk),
                     static_cast<uint8_t*>(tensor(TensorId::dropout_mask, chunk)), ct, n, p.seed,
                     layer_problem(p, layer_now_).dropout_offset, p.keep_prob(), stream_, rows_of_chunk);
    });
  }

  if (runs(Stage::pv_gemm)) {
    memory_stage(Stage::alloc_output, chunk);
    GemmCall pv = gemm_calls_[1];
    pv.n = static_cast<int>(rows);
    pv.stride_b = rows * p.kv_len;
    const void* probs = runs(Stage::dropout) ? tensor(TensorId::attn_dropped, chunk) : tensor(TensorId::probs, chunk);
    stage(Stage::pv_gemm, pv.describe() + of_chunk, [&] {
      bind_cublas(stream_);
      run_gemm(cublas_, pv, v, probs, static_cast<char*>(tensor(TensorId::out_acc)) + row0 * p.head_dim * acc);
    });
  }
}

}  // namespace sdpa
