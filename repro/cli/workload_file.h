// workload_file.h: a PyTorch program's captured attention calls (scripts/sdpa_capture.py's
// workload.json, results/workload.schema.json), read and turned into run options.
//
// `repro --workload-file FILE [--call N]` replays one captured call: it is the same run as the
// options this file derives from the call (shape, K's layout, mask, dtype, scale, dropout, GQA)
// and from the process's context when the call was made (attention calls per step as --layers,
// the memory PyTorch held as a ballast, PyTorch's allocator as --alloc and --alloc-timing,
// CUDA_LAUNCH_BLOCKING, and the model files it had memory-mapped as --mapped-weights). Options the command line gives itself win over derived ones, so a replay
// can change any one thing; the derived options are written into the run's command line, so a
// run's JSON, a report's commands and a minimizer's steps name them explicitly.
//
// Host-only: every check is made while parsing, and a bad file is a usage error (exit 2, one line).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sdpa {

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
  int64_t memory_allocated = 0, memory_reserved = 0;
  std::optional<int64_t> mem_available;
  // The host's memory at the call (/proc/meminfo MemFree and Cached, /proc/self/status RssFile) and
  // the process's largest memory-mapped files; absent from older captures, null where not read.
  std::optional<int64_t> mem_free, cached, rss_file;
  std::optional<std::vector<MappedFile>> mapped_files;
  std::string tensors;                 // the folder of its .npy files, resolved against the file's; "" none
};

struct WorkloadFile {
  std::string path;
  std::string device_name;             // the captured process's GPU ("" none)
  std::string allocator;               // caching, expandable_segments, cuda_malloc_async, pluggable, none
  std::optional<std::string> alloc_conf, launch_blocking;  // PYTORCH_CUDA_ALLOC_CONF, CUDA_LAUNCH_BLOCKING
  std::optional<int64_t> calls_per_step;
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
// .ckpt or .gguf (any case). Their sizes, summed, are the replay's --mapped-weights.
bool is_weights_file(const std::string& path);
// The bytes of the call's mapped weight files (0: none, or not recorded); InputError past 2^50.
int64_t mapped_weights_bytes(const CapturedCall& call);

}  // namespace sdpa
