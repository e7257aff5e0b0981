// atomic_file.h: every file the harness writes goes through here, so that a result already on
// disk is never lost or left half-written: the bytes go to a temporary name in the same
// directory, are flushed, and are renamed over the target in one step.
#pragma once

#include <string>

namespace sdpa {

// Throws InputError (one line, naming the path) if the file cannot be written.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace sdpa
