// stage.h: the stages of one Math SDPA call, in PyTorch's order, the one table that says what
// each stage is, and the hook through which everything that watches the path (stage times, the
// stage log, the watchdog's pipe, fault injection, the fixes) sees them.
//
// The order mirrors `_scaled_dot_product_attention_math` (PyTorch 2.5+): upcast, scale Q,
// expand K/V heads for GQA, scale the transposed K (and copy it contiguous where at::matmul
// would, or where fix 3 asks), bmm Q·Kᵀ, add the mask, _safe_softmax, dropout, bmm P·V, cast
// back. entry_sync and stream_sync are the synchronisations that the original instrumentation
// places around the call; scenario 4's hang is the entry one. scores_to_host is scenario 2's
// condition (the host reads the scores before softmax). With --graph the GPU stages are captured
// once into a CUDA graph and replayed (graph_capture, graph_instantiate, graph_launch: scenario 5).
//
// Everything else about a stage is one row of the stage table (stage.cpp): its name, whether the
// GPU or the host does its work, when it runs, the allocation stage in front of it, the condition
// under which it runs, its lines in both log formats, and what a hang in it means. Every other
// file looks a stage's facts up there; the build writes the table as stages.json for the Python
// scripts (`repro help stages --json`). Host-only: the supervisor and the report writer use it
// without any CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sdpa {

struct AllocationRecord;  // allocator.h
struct SdpaProblem;       // problem.h
struct PathSettings;      // path_settings.h

enum class Stage : uint8_t {
  // --mapped-weights: before the first call, one of the model's weight tensors copied from the
  // memory-mapped file into GPU memory, as `.to("cuda")` copies each (a host stage, once a tensor).
  load_weights,
  entry_sync,    // cudaDeviceSynchronize at SDPA entry
  // --graph: the GPU stages below (mask_prepare .. cast_output) captured once into a CUDA graph
  // on the first call, instantiated, and replayed by every call (scenario 5).
  graph_capture,      // cudaStreamBeginCapture, the stages issued into it, cudaStreamEndCapture (host)
  graph_instantiate,  // cudaGraphInstantiate (host)
  graph_launch,       // cudaGraphLaunch: the captured stages run on the GPU
  // With --alloc-timing per-call each alloc_* stage allocates, inside the call, the tensors the
  // stage after it writes, where PyTorch's operator allocates its output (memory_plan.h has the
  // table); the free_* stages give back what PyTorch frees when it frees it. Host stages: a hang
  // in one is the allocator or the driver not returning.
  alloc_mask,    // the additive mask built from a boolean or causal mask
  mask_prepare,  // boolean or causal mask -> additive 0 / -inf mask in the dtype
  alloc_upcast,  // query_acc, key_acc, value_acc (q.to(float), k.to(float), v.to(float))
  upcast,        // fp16/bf16 Q, K, V -> fp32 (precision mode upcast only)
  alloc_query_scaled,
  scale_q,       // Q * sqrt(scale)
  alloc_expanded,  // key_expanded, value_expanded (repeat_interleave's outputs)
  gqa_expand,    // K, V heads repeated (repeat_interleave) for grouped-query attention
  alloc_key_scaled,
  scale_k,       // Kᵀ * sqrt(scale): the transposed-K preparation before the GEMM
  alloc_key_transposed,
  kt_contiguous, // Kᵀ copied to a contiguous [B*H, E, S] (at::matmul's copy, or fix 3)
  alloc_scores,  // the Q·Kᵀ GEMM's output (bmm allocates it)
  qk_gemm,       // cuBLAS batched Q·Kᵀ
  mask_add,      // scores += mask, in place
  scores_to_host,// scenario 2: the scores' pages moved to the host before softmax (host stage)
  alloc_probs,   // _safe_softmax's output and its -inf mask of the scores (a transient)
  softmax,       // _safe_softmax over the last dimension
  free_scores,   // the scores and that transient, freed when _safe_softmax returns
  alloc_dropout, // native_dropout's output and its mask
  dropout,       // Philox dropout: output and mask, as native_dropout writes them
  alloc_output,  // the probabilities cast back (the math function's second output), P·V, the output
  pv_gemm,       // cuBLAS strided-batched P·V
  cast_output,   // fp32 -> input dtype (precision mode upcast only)
  free_call,     // what the call does not keep, freed when the math function returns
  stream_sync,   // cudaStreamSynchronize at the end of the call
  // --backward: after the step's forward calls, each layer's backward call, last layer first, as
  // autograd runs the graph of _scaled_dot_product_attention_math (docs/BACKWARD.md has the
  // derivatives). dO is the gradient of the output; P the probabilities, Pd after dropout.
  alloc_grad_pv,       // dO upcast, dPd and dV (in the expanded heads): bmm(P, V)'s gradients
  grad_upcast,         // ToCopyBackward of the output's cast: dO -> fp32 (upcast only)
  dp_gemm,             // dPd = dO · Vᵀ (bmm's gradient for its first operand)
  dv_gemm,             // dV = Pdᵀ · dO (...and for its second)
  alloc_grad_softmax,  // dropout's gradient and _safe_softmax's
  dropout_backward,    // native_dropout_backward: dP = dPd · mask / (1 - p)
  grads_to_host,       // scenario 2: the probabilities and dP moved to the host before softmax's backward (host stage)
  softmax_backward,    // _softmax_backward_data: dS = P · (dP − Σ dP·P), a reduction per row
  free_grad_probs,     // dPd and dP, once softmax's backward has read them
  alloc_grad_qk,       // dQ and dK of bmm(Q, Kᵀ) and the three input gradients
  dq_gemm,             // dQs = dS · Ks
  dk_gemm,             // dKs = dSᵀ · Qs (Kᵀ's gradient, transposed back)
  grad_inputs,         // dQ = dQs·√scale, dK = dKs·√scale and dV, each GQA group summed, cast back
  free_backward,       // the backward's transients and what the layer kept for it
  backward_sync,       // cudaStreamSynchronize at the end of the layer's backward call
  free_step,     // after the last layer of a step: what autograd kept and the layers' outputs
};
constexpr int kStageCount = static_cast<int>(Stage::free_step) + 1;

// Who does a stage's work: the GPU (timed with CUDA events), the host (a synchronisation that
// waits for the GPU, a graph's capture, the host's own reads), or the allocator (an allocation or
// a free inside the call: host calls into the allocator, which on a unified-memory machine may
// stall instead of failing).
enum class StageKind : uint8_t { gpu, host, alloc, free };

// When a stage runs: once before the first call (load), in every call (call: each layer's forward
// call), as part of the CUDA graph's life (graph), in each layer's backward call (backward), or once
// a step after its last layer (step).
enum class StageWhen : uint8_t { load, call, graph, backward, step };

// The channels of the sdpa-debug log format: the original instrumentation's macros.
enum class DebugChannel { sdpa, alloc, cuda, event };

// One line of the sdpa-debug format as the table holds it: its channel, its text with
// placeholders, and the table's own source line (what the [file:line] at its end names, as
// __FILE__:__LINE__ does in the instrumentation).
struct DebugLineTemplate {
  DebugChannel channel;
  const char* text;
  int source_line;
};

// A stage's row. Line templates hold placeholders in braces, filled in by the stage log
// (stage_log.cpp names them); "{+detail}" is " " + detail when there is one.
struct StageRow {
  Stage stage;
  const char* name;       // qk_gemm: the log's, the JSON's, --inject's and the scripts' name
  StageKind kind;
  StageWhen when;
  // An allocation or a free: the stage whose tensors it allocates (or after which it frees);
  // the stage itself for the others (the step's and the call's last frees name themselves).
  Stage serves;
  // Its own condition to run, beyond those of its kind and when (none: always): the mask, the
  // upcast, GQA, a K^T copy, scenario 2's host access, dropout, the mapped weights.
  struct RunsIf {
    bool (*test)(const SdpaProblem&, const PathSettings&) = nullptr;
    const char* needs = nullptr;  // the condition in a user's words: "--dropout > 0"
    RunsIf(std::nullptr_t) {}     // NOLINT: a row without a condition writes nullptr
    RunsIf(bool (*t)(const SdpaProblem&, const PathSettings&), const char* n) : test(t), needs(n) {}
  } runs_if;
  std::vector<const char*> begin, end;                 // harness format
  std::vector<DebugLineTemplate> debug_begin, debug_end;  // sdpa-debug format (none: not the instrumentation's)
  const char* hang;  // what a hang in it shows: "the Q.K^T GEMM had started: [CUBLAS_GEMM_START] is the last line"
  // The harness's own work, not a stage of PyTorch's path (a scenario's host access to the pages):
  // timed and watched like the others, its time reported apart, never judged a stall of the path.
  bool harness_work = false;
};

const char* stage_kind_name(StageKind k);  // "gpu", "host", "alloc", "free"
const char* stage_when_name(StageWhen w);  // "load", "call", "graph", "backward", "step"
const char* debug_channel_name(DebugChannel c);  // "sdpa", "alloc", "cuda", "event"

const std::vector<StageRow>& stage_table();  // in Stage order
const StageRow& stage_row(Stage s);
const char* stage_name(Stage s);  // its row's name (qk_gemm)
bool parse_stage(const std::string& name, Stage& out);
std::string stage_names(const char* separator = " ");  // every name, in order
// The source file the table's DebugLineTemplate lines are in, as the sdpa-debug lines name it.
const char* stage_table_source();

inline StageKind stage_kind(Stage s) { return stage_row(s).kind; }
inline StageWhen stage_when(Stage s) { return stage_row(s).when; }
// The stages that allocate or free memory inside a call (--alloc-timing per-call).
inline bool is_memory_stage(Stage s) { return stage_kind(s) == StageKind::alloc || stage_kind(s) == StageKind::free; }
inline bool is_free_stage(Stage s) { return stage_kind(s) == StageKind::free; }
// GPU work, timed with events; every other stage the host does or waits for itself.
inline bool is_gpu_stage(Stage s) { return stage_kind(s) == StageKind::gpu; }
// The backward call's stages (--backward), alloc_grad_pv through backward_sync.
inline bool is_backward_stage(Stage s) { return stage_when(s) == StageWhen::backward; }
// The stages a CUDA graph holds (--graph): every GPU stage of the call and of its backward call,
// but the replay itself.
inline bool is_captured_stage(Stage s) { return is_gpu_stage(s) && stage_when(s) != StageWhen::graph; }
// The allocation stage in front of `s` (alloc_scores for qk_gemm), or `s` when it has none.
Stage allocation_stage_of(Stage s);

// Whether stage `s` runs in a call of problem `p` under settings `ps`: its row's condition, and
// that of its kind and when (the backward's with --backward, the graph's with --graph, the
// allocations with --alloc-timing per-call, each where the stage it serves runs); stages after
// last_stage do not run (stream_sync always does).
bool stage_runs(Stage s, const SdpaProblem& p, const PathSettings& ps);
// Why `s` does not run under `p` and `ps`, in a user's words ("--dropout > 0", "--graph",
// "--alloc-timing per-call", "--full: the scenario stops before it"); empty where it runs.
std::string stage_needs(Stage s, const SdpaProblem& p, const PathSettings& ps);

// Where a call is in the run: its step (1..steps) and its layer (1..layers), both counted from 1
// as users name them ("layer 3 of 60").
struct CallPosition {
  int step = 1;
  int layer = 1;
  int layers = 1;
};

// Receives every stage boundary of the path. `detail` carries the stage's arguments (GEMM
// parameters, sizes) for logs and the flight recorder; `summary` carries the values seen at
// the end of the stage when the path collects them (--log values), else it is empty. `stream`
// is the cudaStream_t the stage's GPU work was issued on (scenario 1 runs the Q·Kᵀ GEMM on
// another stream than the rest), so observers that record events record them there.
// stage_note carries what a fix or a scenario condition did inside the stage, for the log.
// stage_begin may throw a CudaError (fault injection raises real errors there); nothing else
// in an observer may throw.
class StageObserver {
 public:
  virtual ~StageObserver() = default;
  virtual void stage_begin(Stage stage, const std::string& detail, void* stream) = 0;
  virtual void stage_end(Stage stage, const std::string& summary, void* stream) = 0;
  virtual void stage_note(Stage, const std::string&) {}
  // With --graph the GPU stages of the first call are captured into a graph, not run; an observer
  // that must act where the work is (an injected fault) says so and sees them being captured.
  virtual bool acts_in_capture() const { return false; }
  // A call of `position.layer` of step `position.step` begins (before its entry_sync); every
  // stage until the next position is that call's (free_step: the step's last layer's).
  virtual void call_position(const CallPosition& /*position*/) {}
  // The path allocated (freed = false) or freed a tensor: up front before the first call, or
  // inside a call's alloc_*/free_* stage with --alloc-timing per-call.
  virtual void memory_event(const AllocationRecord& /*record*/, bool /*freed*/) {}
};


// The longest single run of one stage in a pass of the path (not the sum over the pass's layers
// or chunks): the longest GPU stage's (CUDA events) and the longest host stage's (the host clock:
// a synchronisation that waited for the GPU, an allocation). What a stall is judged by.
struct StageLongest {
  Stage gpu_stage = Stage::entry_sync, host_stage = Stage::entry_sync;
  double gpu_ms = 0, host_ms = 0;
  // Counts one run of `s` that took `ms`: a GPU stage's among the GPU stages, any other's among the
  // host stages. The harness's own work (a row's harness_work) and the weights' load before the
  // first call are never counted: they are not PyTorch's path, and a stall names the path's stage.
  void add(Stage s, double ms);
};

}  // namespace sdpa
