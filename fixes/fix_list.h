// fix_list.h: the candidate fixes (docs/FIXES.md), one record each, one registry, and the --fixes
// list ("1,3", "1:lean,2:prefetch/host-sync", "all", "none"). Host-only: the CLI, the sweep and
// the report name fixes without a GPU; what each fix does to the path is in its own file
// (fixN_*.cpp), which also holds its record.
//
// Each fix is made of parts, each one mechanism that can be switched on alone, so that a cure can
// be attributed to one mechanism and its cost measured apart (docs/FIXES.md). A fix's design form
// is every part as the fix was written (`--fixes 1`); its lean form keeps the guarantee the fix is
// for at the least cost per call, without host round trips (`--fixes 1:lean`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sdpa {

class Fix;     // fix.h
class FixSet;
struct SdpaProblem;
struct PathSettings;

struct FixPartInfo {
  const char* name;  // unique within its fix: "host-sync" is fix 1's or fix 2's
  const char* what;  // one line
  bool design;       // in the fix as it was written
  bool lean;         // in its lean form
  const char* excludes = nullptr;  // a part of the same fix it cannot go with (one allocator), or none
};

struct FixInfo {
  int number = 0;
  const char* name = "";        // "gemm_stream_sync"
  const char* scenario = "";    // the scenario it answers
  const char* what = "";        // one line: what it does (its design form)
  const char* hook_point = "";  // where in the path it acts
  const char* budget = "";      // its time budget per call, as the benchmark judges it ("5-10%"; "" none)
  std::vector<FixPartInfo> parts;
  std::unique_ptr<Fix> (*make)(const FixSet&) = nullptr;  // the fix with the parts of the set that are its own
  // Why its parts in `set` cannot act on a call of `p` under `settings` (a CUDA graph cannot hold a
  // host synchronisation, ...), or "" when they can: a usage error before anything runs.
  std::string (*refuse)(const FixSet& set, const SdpaProblem& p, const PathSettings& settings) = nullptr;
  // Why it does nothing inside a call (it acts before the first one), or nullptr: a benchmark,
  // which times calls, has nothing of it to time and refuses to try.
  const char* outside_the_calls = nullptr;
};

int fix_count();
const FixInfo& fix_info(int number);  // throws InputError for a number no fix has

// One part of one fix: the fix's number and the part's place among its parts.
struct FixPart {
  int fix = 0;
  int index = 0;
  bool operator==(const FixPart& o) const { return fix == o.fix && index == o.index; }
};
const FixPartInfo& fix_part_info(FixPart p);
// The part of fix `fix` named `name` (its --fixes word); std::logic_error when it has none, a bug.
FixPart fix_part(int fix, const std::string& name);

// A set of fixes, each with the parts it applies.
class FixSet {
 public:
  FixSet() = default;
  static FixSet all();   // every fix in its design form
  static FixSet lean();  // every fix in its lean form
  void add(int number);       // fix `number` in its design form
  void add_lean(int number);  // ...in its lean form
  void add(FixPart part);
  void add(const FixSet& other) { bits_ |= other.bits_; }
  bool has(int number) const;  // any part of fix `number`
  bool has(FixPart part) const;
  bool has(int fix, const std::string& part) const { return has(fix_part(fix, part)); }
  bool empty() const { return bits_ == 0; }
  std::vector<int> numbers() const;
  std::vector<FixPart> parts(int number) const;
  // "design", "lean" or "parts" (a selection of its own) for a fix of the set.
  const char* form(int number) const;
  std::string str() const;  // "none", "all", "all:lean", or "1,2:lean,4:private-pool"
  bool operator==(const FixSet& o) const { return bits_ == o.bits_; }

 private:
  uint64_t bits_ = 0;  // one bit a part, the registry's parts in order
};

// "none" or "" -> {}; "all" and "all:lean" -> every fix; otherwise a comma-separated list of
// items N (design form), N:lean, N:design, or N:part/part... (the fix's part names). Throws
// InputError (one line) on anything else: unknown numbers or parts, repeats, empty items.
FixSet parse_fix_list(const std::string& text);

// The first refusal of any fix of `set` for this call (FixInfo::refuse), or "".
std::string fixes_refuse(const FixSet& set, const SdpaProblem& p, const PathSettings& settings);

}  // namespace sdpa
