// path_settings.h: how the path runs, as opposed to what it computes (problem.h).
//
// Every condition a deadlock scenario sets up and every fix that changes how the path is built
// is one field here: where memory comes from, which stream the Q.K^T GEMM runs on, how K^T
// reaches cuBLAS, whether the scores are moved to the host before softmax, whether the entry
// is a storm of concurrent page faults, and where the call stops. The CLI fills the defaults,
// a scenario (scenarios/) sets its preconditions, explicit options override them, and fixes 3
// and 4 (fixes/) adjust the result; the pipeline only reads it.
//
// Host-only, so the CLI, the scenario registry and their tests need no GPU. settings_fields()
// names every field with its value; results, reports and the scenario table use those names.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "allocator.h"
#include "problem.h"
#include "stage.h"

namespace sdpa {

// The stream the path's own kernels run on (PyTorch's "current stream").
enum class StreamMode {
  legacy,        // the legacy default stream, which synchronises with every blocking stream: what
                 // PyTorch runs on unless the program picks another (the default)
  non_blocking,  // a created stream with cudaStreamNonBlocking (a side stream, as torch.cuda.Stream()
                 // and torch.cuda.graph's capture use)
  per_thread,    // cudaStreamPerThread
};

// The stream the cuBLAS handle of the Q.K^T GEMM is bound to (scenario 1).
enum class GemmStream {
  same,      // the path's stream (what at::bmm does, and fix 1)
  legacy,    // the legacy default stream
  aux,       // a second non-blocking stream, as GEMMs on an auxiliary stream
  blocking,  // a second stream created without cudaStreamNonBlocking: nothing orders it explicitly,
             // but the legacy default stream synchronises with it implicitly
};

// Whether the Q.K^T GEMM on its own stream is ordered after the path's kernels by the legacy
// default stream's implicit synchronisation alone: one of the two streams is the legacy stream
// and the other a blocking one (a created blocking stream, or the per-thread default stream).
bool implicitly_ordered_by_legacy_stream(StreamMode path, GemmStream gemm);

// How the Q.K^T GEMM on another stream is ordered after the kernels that produce Q and K.
enum class GemmOrder {
  event,  // cudaEventRecord on the producer, cudaStreamWaitEvent on the GEMM's stream
  none,   // not at all: a deliberate, documented race (results may be wrong)
};

// Physical layout of the key tensor that K^T is viewed from (scenario 3).
enum class KLayout {
  bhse,  // contiguous [B, H, S, E]
  bshe,  // a [B, S, H, E] buffer viewed as [B, H, S, E], as attention modules produce it
};

// The cuBLAS entry point of the Q.K^T GEMM.
enum class GemmApi {
  strided,  // cublasSgemmStridedBatched / cublasGemmStridedBatchedEx (at::bmm)
  batched,  // cublasGemmBatchedEx with pointer arrays (the call the original instrumentation names)
};

// What is done to the scores before softmax (scenario 2).
enum class ScoresToHost {
  none,
  read,    // the host reads every score (min/max), as the original instrumentation does
  advise,  // cudaMemAdvise: preferred location the CPU
  both,
};

// When the host touches the scores (scenario 2): all of it before the softmax kernel starts, or
// from a host thread that keeps touching them while the kernel runs (where the device lets the
// host access managed memory during kernels: concurrentManagedAccess; elsewhere `before`).
enum class ScoresHostPhase { before, during };

// When the path allocates its intermediates (--alloc-timing).
enum class AllocTiming {
  upfront,   // all of them before the first call, reused by every call (the isolated call)
  per_call,  // inside each call, in PyTorch's order, freed where PyTorch frees them (memory_plan.h)
};

// What each layer keeps after its call until the step ends (--retain).
enum class Retain {
  none,        // nothing but its output (inference)
  autograd,    // what autograd saves for the Math path's backward pass (memory_plan.h)
  checkpoint,  // activation checkpointing: the layer's inputs only; its backward recomputes the call first
};

// One cudaMemAdvise applied to every managed tensor after allocation (--advise).
enum class Advice { preferred_gpu, preferred_cpu, accessed_by_gpu, accessed_by_cpu, read_mostly };

// How the model's weights reach the GPU before the first call (--mapped-weights; scenario 7): read
// from a memory-mapped file through the page cache, as safetensors' safe_open maps it and
// `.to("cuda")` copies each tensor from the mapped pages, or read with O_DIRECT, bypassing the page
// cache (fix 6).
enum class WeightsIo { mapped, direct };
// After the load, the mapping is dropped (the CPU state dict freed once the model is on the GPU,
// as from_pretrained(...).to("cuda") leaves it) or kept (a script that holds the CPU tensors).
enum class WeightsMapping { unmap, keep };

struct MappedWeights {
  int64_t bytes = 0;   // 0: no weights loaded
  std::string file;    // the weights file; "" the default one (weights_load.h)
  WeightsIo io = WeightsIo::mapped;
  bool drop_pages = false;  // fix 6: each tensor's pages dropped from the page cache and unmapped after its copy
  WeightsMapping mapping = WeightsMapping::unmap;
};

struct PathSettings {
  AllocKind alloc = AllocKind::managed;
  AsyncPool async_pool = AsyncPool::private_pool;  // which allocator `async` memory comes from
  StreamMode stream = StreamMode::legacy;
  GemmStream qk_gemm_stream = GemmStream::same;
  GemmOrder qk_gemm_order = GemmOrder::event;
  KLayout k_layout = KLayout::bhse;
  GemmApi qk_gemm_api = GemmApi::strided;
  bool kt_contiguous = false;     // fix 3: K^T copied to a contiguous [B*H, E, S] before the GEMM
  ScoresToHost scores_to_host = ScoresToHost::none;
  ScoresHostPhase scores_host_phase = ScoresHostPhase::before;
  int entry_touch_streams = 0;    // scenario 4: streams that touch every managed page at entry
  bool entry_host_touch = false;  // scenario 4: a host thread touches them at the same time
  std::vector<Advice> advice;
  Stage last_stage = Stage::stream_sync;  // the call runs through this stage, then synchronises
  // --graph: the call's GPU stages captured into a CUDA graph on the first call, replayed by
  // every call (scenario 5). Host work inside the call (the scores moved to the host, host
  // synchronisations between stages) cannot be captured; graph_conflict() names it.
  bool graph = false;
  // The training process around the call (docs/CONTEXT.md): when intermediates are allocated,
  // how many attention layers a step runs, each with its own Q, K, V and output, and what each
  // keeps for the backward pass (scenario 6 sets all three).
  AllocTiming alloc_timing = AllocTiming::upfront;
  int layers = 1;
  Retain retain = Retain::none;
  // Fix 5's chunk part: the scores computed in chunks of query rows, each chunk's scores at most
  // this many bytes (0: the whole L at once).
  int64_t chunk_bytes = 0;
  // --backward: after each step's forward calls, every layer's backward call (last layer first),
  // as autograd runs it for a seeded random gradient of the output. Its layers keep what autograd
  // keeps (retain is autograd), and the call runs the whole forward path.
  bool backward = false;
  // Fix 2's device-scores part: what softmax and its backward reduce over (the scores; the
  // probabilities and their gradient) allocated in device memory, whatever `alloc` is.
  bool reduced_on_device = false;
  // The model's weights, loaded into GPU memory before the first call (scenario 7).
  MappedWeights weights;
  // Fix 6's guard part: the memory plan and the load judged against the memory there is without
  // reclaiming the page cache (MemFree), on any machine, not against MemAvailable.
  bool plan_against_free = false;
};

const char* stream_mode_name(StreamMode m);
const char* gemm_stream_name(GemmStream g);
const char* gemm_order_name(GemmOrder o);
const char* k_layout_name(KLayout k);
const char* gemm_api_name(GemmApi a);
const char* scores_to_host_name(ScoresToHost s);
const char* scores_host_phase_name(ScoresHostPhase p);
const char* advice_name(Advice a);
const char* alloc_timing_name(AllocTiming t);
const char* retain_name(Retain r);
const char* weights_io_name(WeightsIo w);
const char* weights_mapping_name(WeightsMapping m);

// Parsers for the CLI and matrix files; each throws InputError naming the accepted values.
StreamMode parse_stream_mode(const std::string& s);
GemmStream parse_gemm_stream(const std::string& s);
GemmOrder parse_gemm_order(const std::string& s);
KLayout parse_k_layout(const std::string& s);
GemmApi parse_gemm_api(const std::string& s);
ScoresToHost parse_scores_to_host(const std::string& s);
ScoresHostPhase parse_scores_host_phase(const std::string& s);
AllocKind parse_alloc_kind(const std::string& s);
WeightsMapping parse_weights_mapping(const std::string& s);
// --mapped-weights SIZE[:FILE]: the size (a unit is required: 30G, 41GB) and the file, if given.
MappedWeights parse_mapped_weights(const std::string& text);
AllocTiming parse_alloc_timing(const std::string& s);
Retain parse_retain(const std::string& s);
std::vector<Advice> parse_advice_list(const std::string& s);  // "preferred:cpu,read-mostly"; "" or "none"
std::string advice_list_string(const std::vector<Advice>& a);   // "none" when empty
// "a|b|c": the words the option of a setting accepts ("--alloc", "--stream", ...), from the
// tables the parsers use, for help text. Throws std::logic_error for any other option.
std::string path_setting_choices(const std::string& option);

// The allocator the settings ask for: its kind is settings.alloc; these are its options.
AllocatorOptions allocator_options(const PathSettings& s, bool allow_oversubscription);

// Every field by name (alloc -> managed, last_stage -> the stage's name, ...), in a fixed order.
std::map<std::string, std::string> settings_fields(const PathSettings& s);

// Why the call cannot be captured into a CUDA graph under these settings, or "" when it can:
// host work between GPU stages, streams that cannot be captured (the legacy default stream),
// a GEMM ordered by nothing (its stream would never join the capture).
std::string graph_conflict(const PathSettings& ps);

// Whether the observers (stage times, logs, the watchdog) see stage `s` of a call: every stage
// that runs, except, with --graph, those inside the graph (they see graph_launch instead).
bool stage_observed(Stage s, const SdpaProblem& p, const PathSettings& ps);

// Whether K^T must be copied to a contiguous buffer before the GEMM: always with fix 3;
// otherwise when the view cannot be handed to a strided-batched GEMM, which is when at::matmul
// copies it (a [B, S, H, E] K with B > 1 and S > 1: batch and head strides do not fold).
bool kt_copy_needed(const SdpaProblem& p, const PathSettings& ps);

// Fix 5's chunk part: the query rows each chunk of a call computes (all L without chunking): as
// few chunks as keep each chunk's scores within chunk_bytes, of rows as even as they divide.
int64_t chunk_rows(const SdpaProblem& p, const PathSettings& ps);

// The tensor a call ends with, and the one --check compares and --save-output writes.
enum class ResultTensor {
  scores,  // through qk_gemm or mask_add: [B, Hq, L, S]
  probs,   // through softmax or dropout: [B, Hq, L, S]
  output,  // through pv_gemm: [B, Hq, L, E]
};
ResultTensor result_tensor_of(const PathSettings& ps);
const char* result_tensor_name(ResultTensor t);
const char* result_tensor_name(const PathSettings& ps);  // result_tensor_name(result_tensor_of(ps))

}  // namespace sdpa
