// context.cpp: the context's names and the size parser.
#include "context.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "errors.h"
#include "name_table.h"

namespace sdpa {

namespace {

const NameTable<BallastTouch> kBallastTouches{
    "--ballast-touch",
    {{BallastTouch::none, "none"}, {BallastTouch::host, "host"}, {BallastTouch::gpu, "gpu"}, {BallastTouch::both, "both"}}};

struct Unit {
  const char* suffix;
  double factor;
};
// Longest first, so that "GiB" is not read as "G" followed by garbage.
const Unit kUnits[] = {{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
                       {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},          {"TB", 1e12},
                       {"K", 1024.0},   {"M", 1048576.0},   {"G", 1073741824.0},  {"T", 1099511627776.0},
                       {"B", 1.0}};

// The number at the start of `text` and the unit after it (factor 1 and no unit where there is
// none); throws InputError on anything else.
double parse_number_with_unit(const std::string& text, const std::string& option, double& factor, bool& has_unit) {
  const std::string bad = option + ": '" + text.substr(0, 40) + "' is not a size (e.g. 40G, 512M, 1.5GiB, 2e9B)";
  if (text.empty() || text.size() > 40) throw InputError(bad);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(value) || value < 0) throw InputError(bad);
  const std::string unit(end);
  factor = 1.0;
  has_unit = !unit.empty();
  if (!unit.empty()) {
    bool found = false;
    for (const Unit& u : kUnits) {
      if (unit == u.suffix) {
        factor = u.factor;
        found = true;
        break;
      }
    }
    if (!found) throw InputError(bad);
  }
  return value;
}

}  // namespace

const char* ballast_touch_name(BallastTouch t) { return kBallastTouches.name(t); }
BallastTouch parse_ballast_touch(const std::string& s) { return kBallastTouches.parse(s); }
std::string ballast_touch_choices() { return kBallastTouches.accepted(); }

int64_t parse_size(const std::string& text, const std::string& option) {
  double factor = 1.0;
  bool has_unit = false;
  const double bytes = parse_number_with_unit(text, option, factor, has_unit) * factor;
  // A bare number is refused: "1.5" could mean bytes, GB or a fraction, and as bytes it would be
  // a size nobody means (a ballast of one byte).
  if (!has_unit) {
    throw InputError(option + ": '" + text.substr(0, 40) + "' has no unit: a size needs one (e.g. 40G, 512M, 1.5GiB, 2e9B)");
  }
  if (bytes < 1) throw InputError(option + ": '" + text.substr(0, 40) + "' is not a size of at least one byte");
  // 9e18 bytes (8 EiB): what a signed 64-bit count holds, a million times any machine's memory.
  if (bytes > 9.0e18) throw InputError(option + ": '" + text.substr(0, 40) + "' is more than 9e18 bytes (8 EiB), the largest size");
  return static_cast<int64_t>(bytes);
}

BallastSpec parse_ballast(const std::string& text) {
  BallastSpec b;
  double factor = 1.0;
  bool has_unit = false;
  const double value = parse_number_with_unit(text, "--ballast", factor, has_unit);
  if (!has_unit && value > 0 && value < 1) {
    b.fraction = value;
    return b;
  }
  if (!has_unit && value == 0) throw InputError("--ballast: 0 is no ballast (leave --ballast out)");
  if (!has_unit) {
    throw InputError("--ballast: '" + text.substr(0, 40) + "' is neither a fraction below 1 of the memory available (e.g. "
                     "0.5) nor a size with a unit (e.g. 16G, 512MiB)");
  }
  b.bytes = parse_size(text, "--ballast");
  return b;
}

std::string ballast_string(const BallastSpec& b) {
  char buf[64];
  if (b.fraction > 0) {
    std::snprintf(buf, sizeof buf, "%g%% of the memory available", b.fraction * 100);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b.bytes) / 1073741824.0);
  }
  return buf;
}

}  // namespace sdpa
