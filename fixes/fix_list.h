// fix_list.h: the five candidate fixes (docs/SCENARIOS.md), by number, their parts, and the
// --fixes list ("1,3", "1:lean,2:prefetch/host-sync", "all", "none"). Host-only: the CLI, the
// sweep and the report name fixes without a GPU; the fixes themselves are in fix.h and
// fixN_*.cpp.
//
// Each fix is made of parts, each one mechanism that can be switched on alone, so that a cure can
// be attributed to one mechanism and its cost measured apart (docs/FIXES.md). A fix's design form
// is every part as the fix was written (`--fixes 1`); its lean form keeps the guarantee the fix is
// for at the least cost per call, without host round trips (`--fixes 1:lean`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sdpa {

struct FixInfo {
  int number;
  const char* name;        // "gemm_stream_sync"
  const char* scenario;    // the scenario it answers
  const char* what;        // one line: what it does (its design form)
  const char* hook_point;  // where in the path it acts
};

constexpr int kFixCount = 5;
const FixInfo& fix_info(int number);  // 1..4

enum class FixPart : uint8_t {
  set_stream,         // fix 1: the Q.K^T GEMM's cuBLAS handle on the stream that produced Q and K
  gemm_host_sync,     // fix 1: cudaStreamSynchronize of that stream before and after each GEMM
  prefetch,           // fix 2: cudaMemPrefetchAsync of the scores to the GPU, on the stream, before softmax
  softmax_host_sync,  // fix 2: cudaStreamSynchronize before softmax
  device_sync,        // fix 2: cudaDeviceSynchronize after softmax
  device_scores,      // fix 2: what softmax reduces over in device memory, which never migrates
  contiguous_kt,      // fix 3: K^T copied contiguous before the GEMM
  stream_pool,        // fix 4: cudaMallocAsync from the device's pool, ordered on the path's stream
  private_pool,       // fix 4: a pool of our own, each allocation synchronised on the pool's stream
  native_probs,       // fix 5: the scores and probabilities in the input dtype, not fp32
  recompute,          // fix 5: each layer keeps nothing for the backward pass (it recomputes)
  chunk,              // fix 5: the scores in chunks of query rows, each at most a set size
};
constexpr int kFixPartCount = 12;

struct FixPartInfo {
  FixPart part;
  int fix;
  const char* name;  // unique within its fix: "host-sync" is fix 1's or fix 2's
  const char* what;  // one line
  bool design;       // in the fix as it was written
  bool lean;         // in its lean form
};
const FixPartInfo& fix_part_info(FixPart p);
const std::vector<FixPartInfo>& fix_part_table();

// A set of fixes, each with the parts it applies.
class FixSet {
 public:
  FixSet() = default;
  static FixSet all();   // every fix in its design form
  static FixSet lean();  // every fix in its lean form
  void add(int number);       // fix `number` in its design form
  void add_lean(int number);  // ...in its lean form
  void add(FixPart part) { bits_ |= 1u << static_cast<unsigned>(part); }
  void add(const FixSet& other) { bits_ |= other.bits_; }
  bool has(int number) const;  // any part of fix `number`
  bool has(FixPart part) const { return (bits_ >> static_cast<unsigned>(part)) & 1u; }
  bool empty() const { return bits_ == 0; }
  std::vector<int> numbers() const;
  std::vector<FixPart> parts(int number) const;
  // "design", "lean" or "parts" (a selection of its own) for a fix of the set.
  const char* form(int number) const;
  std::string str() const;  // "none", "all", "all:lean", or "1,2:lean,4:private-pool"
  bool operator==(const FixSet& o) const { return bits_ == o.bits_; }

 private:
  uint32_t bits_ = 0;
};

// "none" or "" -> {}; "all" and "all:lean" -> every fix; otherwise a comma-separated list of
// items N (design form), N:lean, N:design, or N:part/part... (fix_part_table names). Throws
// InputError (one line) on anything else: unknown numbers or parts, repeats, empty items.
FixSet parse_fix_list(const std::string& text);

}  // namespace sdpa
