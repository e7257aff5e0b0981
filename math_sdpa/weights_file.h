// weights_file.h: the file --mapped-weights loads, and the one rule that keeps a user's file safe:
// the harness writes only files it made. A file it makes starts with a mark (kWeightsFileMark, the
// first bytes of its first tensor); only a file that starts with it is ever extended. Any other
// existing file, a user's model say, is read as it is when it holds the size asked for, and refused
// otherwise, whichever route named it (--mapped-weights SIZE:FILE, $SDPA_WEIGHTS_FILE, the cache's
// default file). The GPU side (weights_load.cpp) writes through ensure_weights_file, which decides
// again on the descriptor it writes with, so a file swapped in between the check and the load is
// not written either.
#pragma once

#include <cstdint>
#include <string>

namespace sdpa {

// The first 64 bytes of every weights file the harness (or scripts/torch_stages.py, or a reproducer)
// makes: the file says what it is to whoever opens it.
inline constexpr char kWeightsFileMark[] = "sdpa-repro weights: random bytes made by the harness, deletable\n";
static_assert(sizeof(kWeightsFileMark) == 65, "the mark is 64 bytes");

// Where the weights file is kept unless --mapped-weights names one: $SDPA_WEIGHTS_FILE, else
// $XDG_CACHE_HOME (or ~/.cache)/sdpa-repro/weights.bin, reused by every run that asks for no more.
std::string default_weights_file();

// The route that names a run's weights file, for the messages: "--mapped-weights" for SIZE:FILE,
// "$SDPA_WEIGHTS_FILE" for the variable, "--mapped-weights (the default file PATH)" otherwise.
std::string weights_file_route(const std::string& file_option);

// What a load will do with its file.
enum class WeightsFileUse {
  make,    // absent: made (its folder must be creatable: the caller checks, it names the option)
  extend,  // the harness's own, smaller than asked: extended
  reuse,   // the harness's own, large enough
  read,    // someone else's, large enough: read, never written
};

// Decides, and throws InputError (one line naming `route` and the path) where the file cannot serve:
// not a regular file, unreadable, or someone else's holding fewer than `bytes`.
WeightsFileUse weights_file_use(const std::string& route, const std::string& path, int64_t bytes);

// Makes or extends the file as weights_file_use allows, deciding again on the descriptor it writes
// through; synced, its pages dropped from the page cache. Returns whether it wrote.
bool ensure_weights_file(const std::string& route, const std::string& path, int64_t bytes);

}  // namespace sdpa
