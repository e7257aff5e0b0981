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

// A name no file can have, whether it is read or written: empty (--out "": it names nothing, where
// a default would be taken silently), a part longer than NAME_MAX (255) or the whole longer than
// PATH_MAX (4096). Every check below starts with it.
void check_not_empty(const std::string& option, const std::string& path);

// The name of a file the harness will write whole (check_file_writable's first check, alone where
// its folder is made later: a sweep's --json): it leaves room for what the harness adds to it.
void check_written_file_name(const std::string& option, const std::string& path);

// A file written whole (a temporary beside it, renamed over it): `path` is not a directory, its
// directory exists and is writable, and its name leaves room for what the harness adds to it (its
// temporary NAME.tmp.PID, its companions: FILE.snapshot, F.grad_query.npy, FILE.jsonl).
void check_file_writable(const std::string& option, const std::string& path);

// A file appended to (--log-file): as above, and when it exists it is writable itself.
void check_file_appendable(const std::string& option, const std::string& path);

// A directory created with its parents when needed: `path` is a writable directory, or does not
// exist and its nearest existing ancestor is a writable directory; and the whole path leaves room
// for the files the harness writes in it.
void check_dir_creatable(const std::string& option, const std::string& path);

// The output folder of a command that writes into it at once (triage, minimize, sweep, report):
// created with its parents, and a file made and removed in it, so that an empty name, a file, a
// read-only folder or a path under /proc is one line (InputError) before anything runs.
void make_output_dir(const std::string& option, const std::string& path);

}  // namespace sdpa
