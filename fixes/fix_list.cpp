// fix_list.cpp
#include "fix_list.h"

#include "math_sdpa/errors.h"

namespace sdpa {

namespace {

const FixInfo kFixes[kFixCount] = {
    {1, "gemm_stream_sync", "scenario 1",
     "bind the cuBLAS handle to the stream that produced Q and K, and synchronise that stream before and after "
     "each GEMM",
     "around qk_gemm and pv_gemm"},
    {2, "prefetch_scores", "scenario 2",
     "prefetch the scores to the GPU (cudaMemPrefetchAsync with a cudaMemLocation) and synchronise before softmax; "
     "synchronise the device after it",
     "around softmax"},
    {3, "contiguous_kt", "scenario 3",
     "copy K^T to a contiguous [B*H, E, S] buffer with our own transpose kernel before the GEMM (op N instead of a "
     "transposed view)",
     "the K^T preparation (stage kt_contiguous)"},
    {4, "stream_ordered_alloc", "scenario 4",
     "allocate every tensor with cudaMallocAsync, ordered on the path's stream, instead of cudaMallocManaged",
     "the allocator"},
    {5, "bounded_memory", "scenario 6",
     "keep the forward pass inside the memory there is: each layer keeps nothing for the backward pass (it is "
     "recomputed, as gradient checkpointing does) and the scores are computed in chunks of query rows of at most "
     "256 MiB (--chunk-size)",
     "what each layer allocates and keeps"},
};

}  // namespace

const std::vector<FixPartInfo>& fix_part_table() {
  static const std::vector<FixPartInfo> table = {
      {FixPart::set_stream, 1, "set-stream", "the Q.K^T GEMM's cuBLAS handle follows the stream that produced Q and K",
       true, true},
      {FixPart::gemm_host_sync, 1, "host-sync", "cudaStreamSynchronize of that stream before and after each GEMM", true,
       false},
      {FixPart::prefetch, 2, "prefetch",
       "cudaMemPrefetchAsync of the scores to the GPU on the softmax's stream, ordered before the kernel", true, false},
      {FixPart::softmax_host_sync, 2, "host-sync", "cudaStreamSynchronize before softmax", true, false},
      {FixPart::device_sync, 2, "device-sync", "cudaDeviceSynchronize after softmax", true, false},
      {FixPart::device_scores, 2, "device-scores",
       "the scores (and, backward, the probabilities and their gradient) in device memory (cudaMalloc), which never "
       "migrates: the host cannot touch their pages, so none moves",
       false, true},
      {FixPart::contiguous_kt, 3, "contiguous-kt", "K^T copied to a contiguous [B*H, E, S] buffer before the GEMM",
       true, true},
      {FixPart::stream_pool, 4, "stream-pool",
       "every tensor from cudaMallocAsync (the device's pool), ordered on the path's stream", true, true},
      {FixPart::private_pool, 4, "private-pool",
       "every tensor from a pool of our own (cudaMallocFromPoolAsync), each allocation synchronised on the pool's "
       "stream",
       false, false},
      {FixPart::native_probs, 5, "native",
       "the scores and probabilities in the input dtype (bf16/fp16), as allow_fp16_bf16_reduction_math_sdp(True) "
       "computes them: half the bytes kept per layer, and a result within that precision's tolerance",
       false, false},
      {FixPart::recompute, 5, "recompute",
       "each layer keeps nothing for the backward pass after its call, which recomputes it (gradient checkpointing)",
       true, true},
      {FixPart::chunk, 5, "chunk",
       "the scores, probabilities and dropout computed in chunks of query rows, each chunk's scores at most "
       "--chunk-size bytes (what autograd keeps is unchanged: every chunk's)",
       true, false},
  };
  return table;
}

const FixPartInfo& fix_part_info(FixPart p) { return fix_part_table()[static_cast<size_t>(p)]; }

const FixInfo& fix_info(int number) {
  if (number < 1 || number > kFixCount) throw InputError("no fix " + std::to_string(number) + " (fixes are 1-4)");
  return kFixes[number - 1];
}

FixSet FixSet::all() {
  FixSet s;
  for (int n = 1; n <= kFixCount; ++n) s.add(n);
  return s;
}

FixSet FixSet::lean() {
  FixSet s;
  for (int n = 1; n <= kFixCount; ++n) s.add_lean(n);
  return s;
}

void FixSet::add(int number) {
  for (const auto& p : fix_part_table()) {
    if (p.fix == number && p.design) add(p.part);
  }
}

void FixSet::add_lean(int number) {
  for (const auto& p : fix_part_table()) {
    if (p.fix == number && p.lean) add(p.part);
  }
}

bool FixSet::has(int number) const {
  for (const auto& p : fix_part_table()) {
    if (p.fix == number && has(p.part)) return true;
  }
  return false;
}

std::vector<int> FixSet::numbers() const {
  std::vector<int> out;
  for (int n = 1; n <= kFixCount; ++n) {
    if (has(n)) out.push_back(n);
  }
  return out;
}

std::vector<FixPart> FixSet::parts(int number) const {
  std::vector<FixPart> out;
  for (const auto& p : fix_part_table()) {
    if (p.fix == number && has(p.part)) out.push_back(p.part);
  }
  return out;
}

const char* FixSet::form(int number) const {
  FixSet design, lean;
  design.add(number);
  lean.add_lean(number);
  FixSet mine;
  for (FixPart p : parts(number)) mine.add(p);
  if (mine == design) return "design";
  if (mine == lean) return "lean";
  return "parts";
}

std::string FixSet::str() const {
  if (empty()) return "none";
  if (*this == all()) return "all";
  if (*this == lean()) return "all:lean";
  std::string s;
  for (int n : numbers()) {
    s += (s.empty() ? "" : ",") + std::to_string(n);
    const std::string f = form(n);
    if (f == "lean") s += ":lean";
    if (f != "parts") continue;
    std::string names;
    for (FixPart p : parts(n)) names += (names.empty() ? "" : "/") + std::string(fix_part_info(p).name);
    s += ":" + names;
  }
  return s;
}

FixSet parse_fix_list(const std::string& text) {
  if (text.empty() || text == "none") return {};
  if (text == "all") return FixSet::all();
  if (text == "all:lean") return FixSet::lean();
  const std::string expected = " (expected items N, N:lean or N:part/part with N in 1-" + std::to_string(kFixCount) +
                               ", or all, all:lean, none)";
  FixSet set;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty() || item[0] < '1' || item[0] > '0' + kFixCount || (item.size() > 1 && item[1] != ':') ||
        item.size() == 2) {
      throw InputError("--fixes: '" + item + "' in '" + text + "' is not a fix" + expected);
    }
    const int n = item[0] - '0';
    if (set.has(n)) throw InputError("--fixes: fix " + std::to_string(n) + " listed twice in '" + text + "'");
    const std::string form = item.size() > 2 ? item.substr(2) : "design";
    if (form == "design") {
      set.add(n);
    } else if (form == "lean") {
      set.add_lean(n);
    } else {
      size_t from = 0;
      while (true) {
        const size_t slash = form.find('/', from);
        const std::string name = form.substr(from, slash == std::string::npos ? std::string::npos : slash - from);
        bool found = false;
        std::string names;
        for (const auto& p : fix_part_table()) {
          if (p.fix != n) continue;
          names += (names.empty() ? "" : "|") + std::string(p.name);
          if (name != p.name) continue;
          if (set.has(p.part)) throw InputError("--fixes: part " + name + " of fix " + std::to_string(n) + " listed twice");
          set.add(p.part);
          found = true;
        }
        if (!found) {
          throw InputError("--fixes: '" + name + "' is not a part of fix " + std::to_string(n) + " (its parts: " + names +
                           "; or lean, design)");
        }
        if (slash == std::string::npos) break;
        from = slash + 1;
      }
    }
    if (set.has(FixPart::stream_pool) && set.has(FixPart::private_pool)) {
      throw InputError("--fixes: fix 4's stream-pool and private-pool exclude each other (one allocator)");
    }
    if (comma == std::string::npos) return set;
    start = comma + 1;
  }
}

}  // namespace sdpa
