// pipeline.h: MathSdpa, the Math SDPA path strung together stage by stage.
//
// One object owns the tensors of one problem (every one through the Allocator, as the tensor table
// of memory_plan.h says), its streams and a cuBLAS handle, and runs calls of the path on them as
// its PathSettings say: one layer, or --layers of them in sequence, each with its own inputs and
// result, allocating up front or inside each call (--alloc-timing) and keeping what autograd
// keeps (--retain). What a call does is its call plan (call_plan.h), made once the hooks (the
// fixes) are attached, which records their actions; the path carries it out step by step, each
// stage inside `stage()`, which tells the observers (stage times, logs, the watchdog's pipe) where
// the path is; a hang is always attributable to exactly one stage of one layer. The conditions the scenarios set up
// (the cross-stream GEMM, the scores moved to the host, the entry page-fault storm, memory
// advice) live in conditions.cpp.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "allocator.h"
#include "call_plan.h"
#include "gemm.h"
#include "kernels.h"
#include "memory_plan.h"
#include "path_hook.h"
#include "path_settings.h"
#include "problem.h"
#include "stage.h"
#include "weights_load.h"

namespace sdpa {

// How much the path does for observability beyond computing (the stage log's levels).
struct PathInstrumentation {
  bool sync_each_stage = false;  // cudaDeviceSynchronize after every GPU stage (--log sync)
  bool collect_values = false;   // min/max/isnan/isinf/sum after the GEMMs and softmax (--log values)
  // The original instrumentation synchronises the device at each of its CUDA_EVENT lines; of
  // those, only math_qk_start (after scale_q) is not a synchronisation of the path already.
  bool sync_at_events = false;   // --log-format sdpa-debug
};

class MathSdpa {
 public:
  // Allocates what lives for the whole run (up front: everything, so no allocation happens inside
  // a call; per call: the layers' inputs and the workspace). Throws WaivedError when the
  // settings ask for what this device or allocator cannot express.
  MathSdpa(const SdpaProblem& problem, const PathSettings& settings, Allocator& allocator);
  ~MathSdpa();
  MathSdpa(const MathSdpa&) = delete;
  MathSdpa& operator=(const MathSdpa&) = delete;

  int layers() const { return settings_.layers; }
  // The inputs of layer `layer` (1..layers()).
  void upload(const HostInputs& inputs, int layer = 1);
  // Fills every layer's result tensor (result_tensor_name) with NaN, so a stage that silently does
  // nothing fails. Per call there is nothing to fill yet: each call fills its result tensor when it
  // allocates it.
  void poison_result();
  // --mapped-weights: the model's weights copied from the mapped file into GPU memory, tensor by
  // tensor, each copy a load_weights stage (weights_load.h); they stay until the path goes. Call it
  // once the observers are attached, before the first call.
  WeightsLoad load_weights();
  // One pass: a call of every layer in order, each synchronised at entry and at its end (the
  // training step's forward pass). What the layers keep stays until end_step(), which a next
  // run() calls first.
  void run(int step = 1);
  // free_step: what the step's layers kept, and their results (per call); nothing up front.
  void end_step();
  // Layer `layer`'s result tensor as float (scores, probs or output), until end_step().
  std::vector<float> download_result(int layer = 1);
  // --backward: layer `layer`'s input gradients dQ, dK, dV as float, until end_step().
  struct Gradients {
    std::vector<float> query, key, value;
  };
  Gradients download_gradients(int layer = 1);
  // A digest of that tensor's bits (launch_digest), waited for: equal digests, equal tensors.
  uint64_t result_digest(int layer = 1);
  // The non-finite values (NaN and inf) of layer `layer`'s result tensor, and of its input
  // gradients (dQ, dK, dV together; --backward), counted on the device: for the layers a run does
  // not check, whose gigabytes then never cross to the host.
  int64_t result_nonfinite(int layer = 1);
  int64_t gradients_nonfinite(int layer = 1);

  void add_observer(StageObserver* observer) { observers_.push_back(observer); }
  // A fix's hook: its actions become steps of the call plan, made at the first call.
  void add_hook(PathHook* hook) { hooks_.push_back(hook); }
  // The plan this path runs (made at the first call, or here).
  const CallPlan& plan();
  void set_instrumentation(const PathInstrumentation& instrumentation) { instrumentation_ = instrumentation; }
  const std::vector<GemmCall>& gemm_calls() const { return gemm_calls_; }
  const PathSettings& settings() const { return settings_; }
  cudaStream_t stream() const { return stream_; }
  // What the constructor did beyond allocating (memory advice), for the stage log.
  const std::vector<std::string>& setup_notes() const { return setup_notes_; }

 private:
  // A tensor's buffers: one, or one per chunk for a tensor kept per chunk and allocated per call.
  using Slots = std::array<std::vector<DeviceBuffer>, kTensorCount>;

  void build_workspace();   // the run's tensors, the cuBLAS handle and its GEMM plans (constructor)
  void run_layer(int layer, int step);
  void run_backward(int layer, int step);  // --backward: layer `layer`'s backward call
  // The plan's steps, on the streams (or into the capture), and each step's operations.
  void execute(const std::vector<PlanStep>& steps);
  void execute(const PlanStep& step);
  void run_op(const PlanOp& op, Stage stage, PathStream stream);
  struct OpRunner;  // what each kind of step does (pipeline.cpp)
  cudaStream_t stream_of(PathStream s) const { return s == PathStream::gemm ? qk_stream_ : stream_; }
  std::string with_streams(const std::string& text) const;  // the plan's stream placeholders filled in
  void* ref(const TensorRef& t);                            // the current call's tensor, t.byte bytes in
  void capture_graph();     // --graph, first call: stages graph_capture and graph_instantiate
  void stage(Stage s, const std::string& detail, const std::function<void()>& body, cudaStream_t on = nullptr);
  // A tensor a softmax reduces over, where it is now (the scenario's host access reads it).
  struct HostOperand {
    const char* name;
    void* data;
    size_t bytes;
  };
  std::vector<HostOperand> resolve(const std::vector<ReducedOperand>& operands);
  bool runs(Stage s) const { return stage_runs(s, problem_, settings_); }
  void note(Stage s, const std::string& text);
  std::string value_summary(Stage s);
  void bind_cublas(cudaStream_t stream);
  void build_qk_pointer_arrays(const void* kt_base, const HeadStrides& kt_strides);

  // The tensor table (memory_plan.h) and where each tensor's buffers are.
  const TensorSpec* spec_of(TensorId id) const;
  Slots& slots_of(const TensorSpec& spec, int layer);
  // The current call's `id` (its chunk `chunk`'s region for a tensor kept per chunk); null when
  // the tensor does not exist in this configuration or is not allocated yet.
  void* tensor(TensorId id, int chunk = 0);
  size_t tensor_bytes(TensorId id) const;  // one region's
  void allocate_run_tensors();
  // Per call: an alloc_* step of the plan allocates its tensors, a free_* step frees them.
  void allocate_in_call(const AllocateOp& op);
  void free_in_call(const FreeOp& op);
  void tell_memory(const DeviceBuffer& buffer, const std::string& what, bool freed);
  TensorId result_id() const;
  // Fills `data`, tensor t's buffer, with NaN when it is one a call must write: the result, and
  // with --backward the input gradients.
  void poison(void* data, const TensorSpec& t);
  // Tensor `id` of layer `layer` as its last call left it (a logic_error where no call ran).
  const void* called_tensor(TensorId id, int layer);
  // launch_tensor_stats over `elems` values of `data`, waited for.
  TensorStats device_stats(const void* data, DType type, int64_t elems);
  std::vector<float> download(TensorId id, DType type, int64_t elems, int layer);
  int64_t count_nonfinite(TensorId id, DType type, int64_t elems, int layer);
  DType result_dtype() const;
  int64_t result_elems() const;

  // conditions.cpp: what the scenarios set up.
  void create_streams();
  void destroy_streams();
  void check_conditions_expressible() const;
  void apply_memory_advice(const std::vector<std::pair<void*, size_t>>& buffers, bool at_setup);
  // Where tensor `t` is allocated: the path's allocator, or device memory for what softmax and its
  // backward reduce over under fix 2's device-scores part.
  Allocator& allocator_for(const TensorSpec& t);
  std::string device_scores_note(const TensorSpec& t, const DeviceBuffer& b) const;  // "" if not there
  void enter_with_page_fault_storm();         // scenario 4, the entry synchronisation
  void move_scores_to_host();                 // scenario 2, before softmax
  bool device_scores_skip(Stage s);           // true (and a note) when fix 2 keeps the scores from the host
  // Scenario 2's host access (advice and/or a read of every page) to `operands`, stage `s`'s, with
  // the stream synchronised first; release_host_advice takes the advice back.
  void move_to_host(Stage s, const std::vector<HostOperand>& operands);
  void release_host_advice(const std::vector<HostOperand>& operands);
  void start_scores_toucher();                // scenario 2, --scores-host-phase during
  void softmax_launched();                    // ...its thread stops once that softmax finished
  void finish_scores_touch();                 // joins it (end of the call) and releases advice
  void release_scores_advice();
  std::vector<HostOperand> scores_operand();  // what softmax reduces over: the scores
  // Scenario 1: the GEMM stream waits for the path's stream (the Q·Kᵀ GEMM, and with --backward
  // the backward's four, which run where it runs).
  void order_gemm_after_producers(Stage gemm = Stage::qk_gemm);
  void order_path_after_gemm();               // ...and the path's stream for the GEMM
  void synchronize_all_streams();
  // Every buffer the current call can touch: the run's, the current layer's and the call's; by
  // default only the path allocator's (what the host may touch and the driver may advise), not
  // fix 2's device memory.
  std::vector<std::pair<void*, size_t>> all_buffers(bool with_device_scores = false) const;

  SdpaProblem problem_;
  PathSettings settings_;
  Allocator& allocator_;
  int device_ = 0;
  bool concurrent_managed_access_ = false;
  cudaStream_t stream_ = nullptr;         // the path's own stream
  bool owns_stream_ = false;
  cudaStream_t qk_stream_ = nullptr;      // where the Q·Kᵀ GEMM runs (stream_ unless scenario 1)
  bool owns_qk_stream_ = false;
  std::vector<cudaStream_t> touch_streams_;  // scenario 4
  // Scenario 2 with --scores-host-phase during: a host thread touching the scores while softmax
  // runs; it stops once softmax_launched_ is set and softmax_done_ has completed.
  std::thread scores_toucher_;
  std::atomic<bool> softmax_launched_{false};
  cudaEvent_t softmax_done_ = nullptr;
  struct ScoresTouchCount {
    int64_t passes = 0;
    double ms = 0;
  } scores_touch_;
  void* touched_scores_ = nullptr;  // the scores the thread touches
  size_t touched_scores_bytes_ = 0;
  cudaEvent_t producers_done_ = nullptr, gemm_done_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudaStream_t cublas_stream_ = nullptr;
  // --graph: the captured GPU stages, replayed by every call; capturing_ while they are issued.
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  size_t graph_nodes_ = 0;
  bool capturing_ = false;
  std::vector<StageObserver*> observers_;
  std::vector<PathHook*> hooks_;
  CallPlan plan_;
  bool planned_ = false;
  std::vector<GemmCall> gemm_calls_;
  PathInstrumentation instrumentation_;
  std::vector<std::string> setup_notes_;
  HeadStrides k_input_strides_{};  // layout of key (and key_acc): bhse, or bshe for scenario 3
  HeadStrides k_gemm_strides_{};   // layout of key_scaled, the K whose transpose the GEMM reads
  std::vector<const void*> qk_pointer_host_;  // the pointer arrays' source while they are copied

  // The tensors (memory_plan.h), named after the tensors of PyTorch's math path.
  std::vector<TensorSpec> tensors_;
  std::array<int, kTensorCount> spec_index_{};  // into tensors_, -1 for a tensor this problem has not
  // Fix 2's device-scores part: device memory for what softmax reduces over (null without it, or
  // where the path's memory does not migrate anyway). Declared before the slots: outlives them.
  std::unique_ptr<Allocator> device_scores_allocator_;
  Slots shared_;              // the run's tensors the layers share
  std::vector<Slots> layer_;  // each layer's: its inputs, what it keeps, its result
  Slots call_;                // per call: the current call's tensors that die with it
  int layer_now_ = 1;         // the layer whose call runs (1-based)
  bool step_pending_ = false;  // a pass ran and its kept tensors are not freed yet
  int64_t chunk_rows_ = 0;    // query rows per chunk (q_len without chunks)
  int chunks_ = 1;
  std::unique_ptr<WeightsLoader> weights_;  // --mapped-weights: the file, its mapping, the GPU copies
};

}  // namespace sdpa
