// workload_file.h: a PyTorch program's captured attention calls (scripts/sdpa_capture.py's
// workload.json, results/workload.schema.json), read and turned into run options.
//
// `repro --workload-file FILE [--call N]` replays one captured call: it is the same run as the
// options this file derives from the call (shape, K's layout, mask, dtype, scale, dropout, GQA)
// and from the process's context when the call was made (its forward pass's attention calls per
// step as --layers, what each kept for the backward pass as --retain: autograd's tensors, or with
// activation checkpointing the layer's inputs, recomputed in a backward pass; the memory PyTorch
// held as a ballast, PyTorch's allocator as --alloc and --alloc-timing, CUDA_LAUNCH_BLOCKING, and
// the model files its loads read as --mapped-weights, still mapped or not as --weights-mapping).
// Options the command line gives itself win over derived ones, so a replay can change any one
// thing; the derived options are written into the run's command line, so a run's JSON, a report's
// commands and a minimizer's steps name them explicitly.
//
// Host-only: every check is made while parsing, and a bad file is a usage error (exit 2, one line
// naming the key; a key the format does not have is one, with the key it most likely meant).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "math_sdpa/path_settings.h"

namespace sdpa {

// Where a captured call ran in its step: in the forward pass, or inside the backward pass, where
// activation checkpointing runs a block's forward again (a recomputation, not another layer).
enum class CallPhase { forward, recompute };
// How the capture knows of a file the process read its weights from: one of its loaders read it
// (safetensors' safe_open or load_file, torch.load), or it was mapped or open at the call.
enum class FileRead { safetensors, torch_load, mapping, open };
// How a file's pages in the page cache were counted: the cachestat system call, or mincore over
// a mapping of the file.
enum class PageCacheProbe { cachestat, mincore };

const char* call_phase_name(CallPhase p);
const char* file_read_name(FileRead r);
const char* page_cache_probe_name(PageCacheProbe p);

struct CapturedTensor {
  std::vector<int64_t> shape, stride;  // 4 each
  std::string dtype;                   // "bfloat16", "float16", "float32", "float64"
  std::string layout;                  // "bhse", "bshe", "other"
  std::optional<bool> managed;         // its memory is managed (null: not asked)
  int64_t bytes() const;
};

struct CapturedMask {
  std::string kind;                    // "bool" or "float"
  std::vector<int64_t> shape;          // 2 to 4 dims, as passed
  double masked_fraction = 0;
  std::string pattern;                 // "text_padding" or "other"
  int64_t text_tokens = 0;             // text_padding: T
  std::vector<int64_t> text_valid;     // text_padding: each batch entry's valid text keys
};

// A file the captured process had memory-mapped (a model's safetensors, ...).
struct MappedFile {
  std::string path;
  int64_t bytes = 0;                      // the file's size
  std::optional<int64_t> resident_bytes;  // the Rss of its mappings (null: not read)
};

// A file the captured process read a model's weights from (or had mapped or open at the call).
struct LoadedFile {
  std::string path;
  int64_t bytes = 0;                      // the file's size
  FileRead how = FileRead::safetensors;
  bool mapped = false;                    // still mapped at the call
  std::optional<int64_t> cached_bytes;    // its pages in the page cache at the call (null: not measured)
  std::optional<PageCacheProbe> cached_by;
};

struct CapturedCall {
  int id = 0;
  int64_t first_call = 0, count = 1;
  std::optional<int64_t> index_in_step;
  CapturedTensor query, key, value;
  std::optional<CapturedMask> mask;
  bool is_causal = false;
  std::optional<double> scale;
  double dropout_p = 0;
  bool enable_gqa = false;
  std::string backend;                 // what PyTorch would pick: math, flash, efficient, cudnn, unknown
  bool requires_grad = false;
  CallPhase phase = CallPhase::forward;  // older captures: forward
  // What the call's layer keeps for the backward pass: autograd's tensors, or with activation
  // checkpointing its inputs only. Older captures: autograd where requires_grad, else none.
  Retain retention = Retain::none;
  int64_t memory_allocated = 0, memory_reserved = 0;
  std::optional<int64_t> mem_available;
  // The host's memory at the call (/proc/meminfo MemFree and Cached, /proc/self/status RssFile) and
  // the process's largest memory-mapped files; absent from older captures, null where not read.
  std::optional<int64_t> mem_free, cached, rss_file;
  std::optional<std::vector<MappedFile>> mapped_files;
  // The files the process's loaders read, and large files mapped or open at the call, with their
  // pages in the page cache (absent from older captures).
  std::optional<std::vector<LoadedFile>> loaded_files;
  std::string tensors;                 // the folder of its .npy files, resolved against the file's; "" none
};

struct WorkloadFile {
  std::string path;
  std::string device_name;             // the captured process's GPU ("" none)
  std::string allocator;               // caching, expandable_segments, cuda_malloc_async, pluggable, none
  std::optional<std::string> alloc_conf, launch_blocking;  // PYTORCH_CUDA_ALLOC_CONF, CUDA_LAUNCH_BLOCKING
  std::optional<int64_t> calls_per_step;       // the forward pass's attention calls in a step
  std::optional<int64_t> recomputed_per_step;  // calls recomputed inside its backward pass (absent: unknown)
  int64_t total_calls = 0;
  std::vector<CapturedCall> calls;
};

// Reads and checks FILE. Throws InputError, one line naming the file and the first key at fault.
WorkloadFile load_workload_file(const std::string& path);
// The same from the file's text (tests); `path` names it in errors and resolves `tensors`.
WorkloadFile parse_workload_file(const std::string& text, const std::string& path);

// One option a call implies: the option (long name) and its value ("" for a flag).
struct DerivedOption {
  std::string name, value;
  std::string why;  // what of the capture it comes from, for --help-like listings and notes
};

struct CallReplay {
  std::vector<DerivedOption> problem;  // the call: shapes, dtype, layout, mask, scale, dropout
  std::vector<DerivedOption> context;  // the process: layers, retention, ballast, allocator, launch blocking, mapped weights
  // What the harness cannot replay exactly (Q or V laid out otherwise, a mask it can only
  // approximate, another backend chosen by PyTorch), each one line, printed as a warning.
  std::vector<std::string> approximations;
};

// The options that replay call `call` of `file` (InputError when there is no such call, or the
// call is one the harness does not compute: float64, a value head dim other than E, ...).
CallReplay replay_call(const WorkloadFile& file, int call);

// Whether a mapped file is a model's weights by its name: it ends in .safetensors, .bin, .pt, .pth,
// .ckpt or .gguf (any case).
bool is_weights_file(const std::string& path);

// The model's weights as the capture saw them at a call, each file once: every file a weights
// loader read, and the files mapped or open at the call whose names are a model's weights
// (is_weights_file). Their sizes, summed, are the replay's --mapped-weights.
struct CapturedWeights {
  int64_t bytes = 0;   // 0: none, or nothing recorded
  int files = 0;
  std::string names;   // up to three file names (not their folders), for messages
  bool mapped = false;  // one of them still mapped at the call
  // Their pages in the page cache at the call: measured for every one of them, or unknown.
  std::optional<int64_t> cached_bytes;
};
// InputError past 2^50 bytes (no capture holds a petabyte of weights; the bound keeps sums exact).
CapturedWeights captured_weights(const CapturedCall& call);

// What the capture says of the process around call `call`, in words, for a triage's summary: the
// retention of its layers (activation checkpointing and its recomputations, or autograd's) and the
// model's weights with the page cache their load left. "" when it says nothing of either.
std::string captured_conditions(const WorkloadFile& file, int call);

}  // namespace sdpa
