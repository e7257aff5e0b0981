// fix_list.h: the four candidate fixes (docs/SCENARIOS.md), by number, and the
// --fixes list ("1,3", "all", "none"). Host-only: the CLI, the sweep and the report name fixes
// without a GPU; the fixes themselves are in fix.h and fixN_*.cpp.
#pragma once

#include <string>
#include <vector>

namespace sdpa {

struct FixInfo {
  int number;
  const char* name;        // "gemm_stream_sync"
  const char* scenario;    // the scenario it answers
  const char* what;        // one line: what it does
  const char* hook_point;  // where in the path it acts
};

constexpr int kFixCount = 4;
const FixInfo& fix_info(int number);  // 1..4

// A set of fixes, by number (1..4).
class FixSet {
 public:
  FixSet() = default;
  static FixSet all() {
    FixSet s;
    for (int n = 1; n <= kFixCount; ++n) s.add(n);
    return s;
  }
  void add(int number) { bits_ |= 1u << number; }
  bool has(int number) const { return (bits_ >> number) & 1u; }
  bool empty() const { return bits_ == 0; }
  std::vector<int> numbers() const;
  std::string str() const;  // "none", "1,3" or "all"
  bool operator==(const FixSet& o) const { return bits_ == o.bits_; }

 private:
  unsigned bits_ = 0;
};

// "none" or "" -> {}, "all" -> {1,2,3,4}, "1,3" -> {1,3}. Throws InputError (one line) on
// anything else: unknown numbers, repeats, empty items, stray characters.
FixSet parse_fix_list(const std::string& text);

}  // namespace sdpa
