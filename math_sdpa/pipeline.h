// pipeline.h: MathSdpa, the Math SDPA path strung together stage by stage.
//
// One object owns the workspace of one problem (every tensor through the Allocator), its
// streams and a cuBLAS handle, and runs calls of the path on them as its PathSettings say.
// Each stage runs inside `stage()`, which tells the observers (stage times, logs, the watchdog's
// pipe) where the path is and lets the hooks (the fixes) act; a hang is always attributable to
// exactly one stage. The conditions the scenarios set up (the cross-stream GEMM, the scores
// moved to the host, the entry page-fault storm, memory advice) live in conditions.cpp.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "allocator.h"
#include "gemm.h"
#include "kernels.h"
#include "path_hook.h"
#include "path_settings.h"
#include "problem.h"
#include "stage.h"

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
  // Allocates the whole workspace up front (no allocation happens inside a call). Throws
  // WaivedError when the settings ask for what this device or allocator cannot express.
  MathSdpa(const SdpaProblem& problem, const PathSettings& settings, Allocator& allocator);
  ~MathSdpa();
  MathSdpa(const MathSdpa&) = delete;
  MathSdpa& operator=(const MathSdpa&) = delete;

  void upload(const HostInputs& inputs);
  // Fills the call's result tensor (result_tensor_name) with NaN, so a stage that silently does
  // nothing fails.
  void poison_result();
  void run();                            // one SDPA call, synchronised at entry and at the end
  std::vector<float> download_result();  // the result tensor as float (scores, probs or output)
  // A digest of the result tensor's bits (launch_digest), waited for: equal digests, equal tensors.
  uint64_t result_digest();

  void add_observer(StageObserver* observer) { observers_.push_back(observer); }
  void add_hook(PathHook* hook) { hooks_.push_back(hook); }
  void set_instrumentation(const PathInstrumentation& instrumentation) { instrumentation_ = instrumentation; }
  const std::vector<GemmCall>& gemm_calls() const { return gemm_calls_; }
  const PathSettings& settings() const { return settings_; }
  cudaStream_t stream() const { return stream_; }
  // What the constructor did beyond allocating (memory advice), for the stage log.
  const std::vector<std::string>& setup_notes() const { return setup_notes_; }

 private:
  void build_workspace();  // every tensor, the cuBLAS handle and its GEMM plans (constructor)
  void issue_gpu_stages();  // mask_prepare .. cast_output, on the streams (or into the capture)
  void capture_graph();     // --graph, first call: stages graph_capture and graph_instantiate
  void stage(Stage s, const std::string& detail, const std::function<void()>& body, cudaStream_t on = nullptr);
  bool runs(Stage s) const { return stage_runs(s, problem_, settings_); }
  void note(Stage s, const std::string& text);
  std::string value_summary(Stage s);
  void* alloc(DeviceBuffer& buffer, int64_t elems, DType type, const char* what);
  void bind_cublas(cudaStream_t stream);
  void build_qk_pointer_arrays(const void* kt_base, const HeadStrides& kt_strides);
  const DeviceBuffer& result_buffer() const;
  DType result_dtype() const;
  int64_t result_elems() const;

  // conditions.cpp: what the scenarios set up.
  void create_streams();
  void destroy_streams();
  void check_conditions_expressible() const;
  void apply_memory_advice();
  void enter_with_page_fault_storm();         // scenario 4, the entry synchronisation
  void move_scores_to_host();                 // scenario 2, before softmax
  void start_scores_toucher();                // scenario 2, --scores-host-phase during
  void softmax_launched();                    // ...its thread stops once that softmax finished
  void finish_scores_touch();                 // joins it (end of the call) and releases advice
  void release_scores_advice();
  void order_gemm_after_producers();          // scenario 1: GEMM stream waits for the path's stream
  void order_path_after_gemm();               // ...and the path's stream for the GEMM
  void synchronize_all_streams();
  std::vector<std::pair<void*, size_t>> all_buffers() const;

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
  // What the hooks (the fixes) ask of the GPU, carried out here so that fixes/ needs no CUDA.
  struct GpuHookActions : HookActions {
    void synchronize_stream(StreamHandle stream) override;
    void synchronize_device() override;
    void prefetch_to_device(void* data, size_t bytes, int device, StreamHandle stream) override;
  } hook_actions_;
  std::vector<GemmCall> gemm_calls_;
  PathInstrumentation instrumentation_;
  std::vector<std::string> setup_notes_;
  HeadStrides k_input_strides_{};  // layout of key_ (and key_acc_): bhse, or bshe for scenario 3
  HeadStrides k_gemm_strides_{};   // layout of key_scaled_, the K whose transpose the GEMM reads

  // Workspace. Names follow the tensors of PyTorch's math path.
  DeviceBuffer cublas_workspace_;
  DeviceBuffer query_, key_, value_;       // inputs, dtype (key_ laid out as k_input_strides_)
  DeviceBuffer mask_input_;                // bool bytes or additive mask in dtype, [B|1, H|1, L, S]
  DeviceBuffer additive_mask_;             // built from bool / causal each call
  DeviceBuffer query_acc_, key_acc_, value_acc_;  // fp32 copies (upcast of fp16/bf16 only)
  DeviceBuffer key_expanded_, value_expanded_;    // GQA only
  DeviceBuffer query_scaled_, key_scaled_;
  DeviceBuffer key_transposed_;            // contiguous Kᵀ [B·H, E, S] (kt_contiguous only)
  DeviceBuffer qk_pointers_;               // A, B, C pointer arrays (--gemm-api batched only)
  DeviceBuffer scores_, probs_;
  DeviceBuffer out_acc_;                   // P·V in the compute dtype
  DeviceBuffer output_;                    // cast back to dtype (upcast of fp16/bf16 only)
  DeviceBuffer value_stats_;               // small results read back: TensorStats (--log values), the digest
  DeviceBuffer touch_sink_;                // scenario 4's touch kernels write their sums here
};

}  // namespace sdpa
