// fix_list.cpp: the fix registry, the sets of their parts, and the --fixes list.
#include "fix_list.h"

#include <stdexcept>

#include "fix.h"
#include "math_sdpa/errors.h"

// Every fix, one line each, in number order: each is a function in its own file that returns its
// record (fixN_*.cpp).
#define SDPA_FIXES(X)                   \
  X(fix1_gemm_stream_sync)              \
  X(fix2_prefetch_scores)               \
  X(fix3_contiguous_kt)                 \
  X(fix4_stream_ordered_alloc)          \
  X(fix5_bounded_memory)                \
  X(fix6_page_cache_bypass)             \
  /* one line a record above; the list ends here */

namespace sdpa {

#define SDPA_DECLARE_FIX(name) FixInfo name();
SDPA_FIXES(SDPA_DECLARE_FIX)
#undef SDPA_DECLARE_FIX

namespace {

const std::vector<FixInfo>& fix_table() {
#define SDPA_FIX_RECORD(name) name(),
  static const std::vector<FixInfo> table = [] {
    std::vector<FixInfo> t = {SDPA_FIXES(SDPA_FIX_RECORD)};
    size_t parts = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].number != static_cast<int>(i) + 1) throw std::logic_error("fix registry: fix " + std::to_string(t[i].number) + " out of order");
      parts += t[i].parts.size();
    }
    if (parts > 64) throw std::logic_error("fix registry: more parts than a FixSet holds");
    return t;
  }();
#undef SDPA_FIX_RECORD
  return table;
}

// A part's bit: the registry's parts in order, fix by fix.
uint64_t bit(FixPart p) {
  size_t offset = 0;
  for (int n = 1; n < p.fix; ++n) offset += fix_info(n).parts.size();
  return uint64_t{1} << (offset + static_cast<size_t>(p.index));
}

std::string fix_range() { return "1-" + std::to_string(fix_count()); }

}  // namespace

int fix_count() { return static_cast<int>(fix_table().size()); }

const FixInfo& fix_info(int number) {
  if (number < 1 || number > fix_count()) {
    throw InputError("no fix " + std::to_string(number) + " (fixes are " + fix_range() + ")");
  }
  return fix_table()[static_cast<size_t>(number - 1)];
}

const FixPartInfo& fix_part_info(FixPart p) { return fix_info(p.fix).parts.at(static_cast<size_t>(p.index)); }

FixPart fix_part(int fix, const std::string& name) {
  const FixInfo& f = fix_info(fix);
  for (size_t i = 0; i < f.parts.size(); ++i) {
    if (name == f.parts[i].name) return {fix, static_cast<int>(i)};
  }
  throw std::logic_error("fix " + std::to_string(fix) + " has no part " + name);
}

FixSet FixSet::all() {
  FixSet s;
  for (int n = 1; n <= fix_count(); ++n) s.add(n);
  return s;
}

FixSet FixSet::lean() {
  FixSet s;
  for (int n = 1; n <= fix_count(); ++n) s.add_lean(n);
  return s;
}

void FixSet::add(FixPart part) { bits_ |= bit(part); }
bool FixSet::has(FixPart part) const { return (bits_ & bit(part)) != 0; }

void FixSet::add(int number) {
  const FixInfo& f = fix_info(number);
  for (size_t i = 0; i < f.parts.size(); ++i) {
    if (f.parts[i].design) add(FixPart{number, static_cast<int>(i)});
  }
}

void FixSet::add_lean(int number) {
  const FixInfo& f = fix_info(number);
  for (size_t i = 0; i < f.parts.size(); ++i) {
    if (f.parts[i].lean) add(FixPart{number, static_cast<int>(i)});
  }
}

bool FixSet::has(int number) const { return !parts(number).empty(); }

std::vector<int> FixSet::numbers() const {
  std::vector<int> out;
  for (int n = 1; n <= fix_count(); ++n) {
    if (has(n)) out.push_back(n);
  }
  return out;
}

std::vector<FixPart> FixSet::parts(int number) const {
  std::vector<FixPart> out;
  for (size_t i = 0; i < fix_info(number).parts.size(); ++i) {
    const FixPart p{number, static_cast<int>(i)};
    if (has(p)) out.push_back(p);
  }
  return out;
}

const char* FixSet::form(int number) const {
  FixSet design, lean, mine;
  design.add(number);
  lean.add_lean(number);
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
  const std::string expected = " (expected items N, N:lean or N:part/part with N in " + fix_range() + ", or all, all:lean, none)";
  FixSet set;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const size_t colon = item.find(':');
    const std::string number = item.substr(0, colon);
    const bool digits = !number.empty() && number.size() <= 3 && number.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(number) < 1 || std::stoi(number) > fix_count() || colon + 1 == item.size()) {
      throw InputError("--fixes: '" + item + "' in '" + text + "' is not a fix" + expected);
    }
    const int n = std::stoi(number);
    if (set.has(n)) throw InputError("--fixes: fix " + std::to_string(n) + " listed twice in '" + text + "'");
    const std::string form = colon == std::string::npos ? "design" : item.substr(colon + 1);
    if (form == "design") {
      set.add(n);
      continue;
    }
    if (form == "lean") {
      set.add_lean(n);
      continue;
    }
    const FixInfo& f = fix_info(n);
    std::string names;
    for (const FixPartInfo& p : f.parts) names += (names.empty() ? "" : "|") + std::string(p.name);
    for (size_t from = 0; from <= form.size();) {
      const size_t slash = std::min(form.find('/', from), form.size());
      const std::string name = form.substr(from, slash - from);
      from = slash + 1;
      size_t i = 0;
      while (i < f.parts.size() && name != f.parts[i].name) ++i;
      if (i == f.parts.size()) {
        throw InputError("--fixes: '" + name + "' is not a part of fix " + std::to_string(n) + " (its parts: " + names +
                         "; or lean, design)");
      }
      const FixPart part{n, static_cast<int>(i)};
      if (set.has(part)) throw InputError("--fixes: part " + name + " of fix " + std::to_string(n) + " listed twice");
      set.add(part);
    }
    for (FixPart p : set.parts(n)) {
      const char* other = fix_part_info(p).excludes;
      if (other && set.has(n, other)) {
        throw InputError("--fixes: fix " + std::to_string(n) + "'s " + fix_part_info(p).name + " and " + other +
                         " exclude each other");
      }
    }
  }
  return set;
}

std::string fixes_refuse(const FixSet& set, const SdpaProblem& p, const PathSettings& settings) {
  for (int n : set.numbers()) {
    const FixInfo& f = fix_info(n);
    const std::string why = f.refuse ? f.refuse(set, p, settings) : "";
    if (!why.empty()) return why;
  }
  return "";
}

std::vector<std::unique_ptr<Fix>> make_fixes(const FixSet& set) {
  std::vector<std::unique_ptr<Fix>> out;
  for (int n : set.numbers()) out.push_back(fix_info(n).make(set));
  return out;
}

}  // namespace sdpa
