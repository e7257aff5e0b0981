// fix6_page_cache_bypass.cpp: Fix 6, for scenario 7 (docs/SCENARIOS.md, docs/FIXES.md).
//
// Hypothesis it answers (scenario 7): the page cache holding the model's memory-mapped weights and
// the GPU's allocations share GB10's one pool; MemAvailable counts the cache as available, and an
// allocation that needs it reclaimed stalls instead of failing. Its parts, each keeping the load
// from depending on that reclaim (the path carries them out: math_sdpa/weights_load.cpp):
//   direct  the weights read with O_DIRECT into a pinned buffer and copied from there: no page
//           of theirs enters the page cache (the design form; llama.cpp's fix for the same load hang
//           on another unified-memory APU was direct I/O);
//   drop    each tensor's pages dropped from the page cache (posix_fadvise DONTNEED) and unmapped
//           right after its copy: the cache never holds more than one tensor (the lean form: reads
//           stay buffered and sequential);
//   guard   the memory plan and each tensor of the load judged by MemFree, not MemAvailable: what
//           would need the page cache reclaimed is refused (exit 8) before it is asked for.
// The load happens once, before the calls: no part costs a call anything.
#include <string>

#include "fix.h"

namespace sdpa {

namespace {

class PageCacheBypass : public Fix {
 public:
  explicit PageCacheBypass(const FixSet& set)
      : direct_(set.has(6, "direct")), drop_(set.has(6, "drop")), guard_(set.has(6, "guard")),
        whole_(std::string(set.form(6)) != "parts") {}
  int number() const override { return 6; }
  void configure(PathSettings& s) const override {
    if (direct_) s.weights.io = WeightsIo::direct;
    if (drop_) s.weights.drop_pages = true;
    // Either part leaves no mapping when the load ends: as a form of the whole fix, whatever the run
    // asked of it (named alone with a mapping to keep, refuse below says no).
    if ((direct_ || drop_) && whole_) s.weights.mapping = WeightsMapping::unmap;
    if (guard_) s.plan_against_free = true;
  }

 private:
  bool direct_, drop_, guard_, whole_;
};

}  // namespace

FixInfo fix6_page_cache_bypass() {
  FixInfo f;
  f.number = 6;
  f.name = "page_cache_bypass";
  f.scenario = "scenario 7";
  f.what = "read the model's weights with O_DIRECT so that none of them enters the page cache, and judge the memory plan "
           "and the load by MemFree, refusing what would need the page cache reclaimed";
  f.hook_point = "the weights' load (stage load_weights) and the memory plan";
  f.budget = "<= 0%";
  f.parts = {{"direct", "the weights read with O_DIRECT into a pinned buffer, bypassing the page cache", true, false},
             // O_DIRECT brings no page of the file into the cache: there would be none to drop.
             {"drop", "each tensor's pages dropped from the page cache (posix_fadvise DONTNEED) and unmapped after its copy",
              false, true, "direct"},
             {"guard",
              "the memory plan and each tensor of the load judged by MemFree: what needs the page cache reclaimed is refused "
              "(exit 8)",
              true, true}};
  f.make = [](const FixSet& set) -> std::unique_ptr<Fix> { return std::make_unique<PageCacheBypass>(set); };
  f.refuse = [](const FixSet& set, const SdpaProblem&, const PathSettings& s) -> std::string {
    for (const char* part : {"direct", "drop"}) {
      if (!set.has(6, part)) continue;
      // Named alone (6:direct), a part that has no weights to act on would make a run that
      // changed nothing read as one the fix was applied to; as a form of the whole fix (6, 6:lean,
      // all) its guard still judges the memory plan.
      if (s.weights.bytes == 0 && std::string(set.form(6)) == "parts") {
        return std::string("--fixes: fix 6's ") + part + " part acts on the model's weights' load, and this run loads none "
               "(--mapped-weights SIZE, or scenario 7)";
      }
      // Either part leaves no mapping when the load ends: O_DIRECT maps nothing, and drop unmaps
      // each tensor after its copy. Named alone, with a mapping to keep, the two ask for opposite
      // things; as a form of the whole fix (--fix on of a captured process that kept its mapping),
      // the fix replaces the mapping with its own reads.
      if (s.weights.bytes > 0 && s.weights.mapping == WeightsMapping::keep && std::string(set.form(6)) == "parts") {
        return std::string("--weights-mapping keep: fix 6's ") + part + " part " +
               (std::string(part) == "direct" ? "reads the weights with O_DIRECT and maps nothing"
                                              : "unmaps each tensor after its copy") +
               ", so there is no mapping to keep (--weights-mapping unmap, or fix 6's guard alone: --fixes 6:guard)";
      }
    }
    return "";
  };
  f.outside_the_calls = "acts before the first call, on the weights' load and the memory plan, and a bench has neither";
  return f;
}

}  // namespace sdpa
