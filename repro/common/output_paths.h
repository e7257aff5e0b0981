// output_paths.h: checks, before any work, that the harness will be able to write where the
// command line says.
//
// A run's JSON, its output tensor, its durable log and its hang snapshot are written after the
// GPU work, some of them only once a hang has happened: a typo in a path must not cost the
// result of a run that took minutes to hang. Each check leaves nothing behind (it may make and
// remove a file, as only a write shows what root may write) and throws InputError (one line,
// exit 2) naming the option, the path and what is wrong with it.
#pragma once

#include <string>

namespace sdpa {

// An empty name (--out ""): refused, as it names nothing (where a default would be taken silently).
void check_not_empty(const std::string& option, const std::string& path);

// A file written whole (a temporary beside it, renamed over it): `path` is not a directory, and
// its directory exists and is writable.
void check_file_writable(const std::string& option, const std::string& path);

// A file appended to (--log-file): as above, and when it exists it is writable itself.
void check_file_appendable(const std::string& option, const std::string& path);

// A directory created with its parents when needed: `path` is a writable directory, or does not
// exist and its nearest existing ancestor is a writable directory.
void check_dir_creatable(const std::string& option, const std::string& path);

// The output folder of a command that writes into it at once (triage, minimize, sweep, report):
// created with its parents, and a file made and removed in it, so that an empty name, a file, a
// read-only folder or a path under /proc is one line (InputError) before anything runs.
void make_output_dir(const std::string& option, const std::string& path);

}  // namespace sdpa
