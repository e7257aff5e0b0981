// output_paths.cpp
#include "repro/common/output_paths.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;

// Throws unless `dir` is an existing directory this process may create files in. access() alone
// answers yes to root everywhere (/proc, a read-only mount too): a file made and removed decides.
void check_writable_dir(const std::string& option, const std::string& what, const fs::path& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  const std::string prefix = option + ": cannot " + what + ": ";
  if (!fs::exists(status)) throw InputError(prefix + "directory " + dir.string() + " does not exist");
  if (!fs::is_directory(status)) throw InputError(prefix + dir.string() + " is not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0) throw InputError(prefix + dir.string() + ": " + std::strerror(errno));
  std::string probe = (dir / ".sdpa-write-test-XXXXXX").string();
  const int fd = mkstemp(probe.data());
  if (fd < 0) throw InputError(prefix + dir.string() + ": " + std::strerror(errno));
  close(fd);
  unlink(probe.c_str());
}


// The directory a file of `path` goes into.
fs::path dir_of(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

// What the harness adds to the name of a file it writes: its temporary's ".tmp.PID" (12), a
// result's companions (".grad_query.npy" for ".npy", ".snapshot" and ".jsonl" for ".json").
constexpr size_t kFileNameReserve = 24;
// What it writes inside a folder it is given: a report's, a sweep's or a triage's own paths
// (minimize/runs/run-12-3.snapshot/cuda-gdb.txt, ...).
constexpr size_t kInsidePathReserve = 160;

// Throws unless every part of `path` fits NAME_MAX, its last `last_reserve` characters short of
// it, and the whole, with `inside_reserve` more, fits PATH_MAX.
void check_lengths(const std::string& option, const std::string& path, size_t last_reserve, size_t inside_reserve) {
  if (path.size() + inside_reserve >= PATH_MAX) {
    throw InputError(option + ": the path " + quoted_word(path) + " is " + std::to_string(path.size()) +
                     " characters long; with what goes into it, more than the " + std::to_string(PATH_MAX - 1) +
                     " a path can have");
  }
  size_t start = 0;
  while (start < path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    const size_t length = slash - start;
    const bool last = slash == path.size();
    if (length > NAME_MAX || (last && length + last_reserve > NAME_MAX)) {
      throw InputError(option + ": the name " + quoted_word(path.substr(start, length)) + " is " + std::to_string(length) +
                       " characters long; a file's name can have " + std::to_string(NAME_MAX) +
                       (last && last_reserve ? ", less the " + std::to_string(last_reserve) +
                                                   " the harness adds to it (its temporary, its companion files)"
                                             : ""));
    }
    start = slash + 1;
  }
}

}  // namespace

void check_not_empty(const std::string& option, const std::string& path) {
  if (path.empty()) throw InputError(option + ": an empty name names no file or folder");
  check_lengths(option, path, 0, 0);
}

void check_written_file_name(const std::string& option, const std::string& path) {
  check_not_empty(option, path);
  check_lengths(option, path, kFileNameReserve, kFileNameReserve);
}

void check_file_writable(const std::string& option, const std::string& path) {
  check_written_file_name(option, path);
  std::error_code ec;
  if (fs::is_directory(fs::status(path, ec))) throw InputError(option + ": cannot write " + path + ": it is a directory");
  check_writable_dir(option, "write " + path, dir_of(path));
}

void check_file_appendable(const std::string& option, const std::string& path) {
  check_file_writable(option, path);
  std::error_code ec;
  if (fs::exists(fs::status(path, ec)) && access(path.c_str(), W_OK) != 0) {
    throw InputError(option + ": cannot write " + path + ": " + std::strerror(errno));
  }
}

void check_dir_creatable(const std::string& option, const std::string& path) {
  check_not_empty(option, path);
  check_lengths(option, path, 0, kInsidePathReserve);
  // The nearest part of the path that exists decides: it must be a writable directory.
  fs::path existing = path;
  std::error_code ec;
  while (!fs::exists(fs::status(existing, ec))) {
    const fs::path parent = existing.parent_path();
    if (parent.empty() || parent == existing) {  // a relative path's first part ("." next), or "/"
      existing = parent.empty() ? fs::path(".") : parent;
      break;
    }
    existing = parent;
  }
  check_writable_dir(option, "create " + path, existing);
}

void make_output_dir(const std::string& option, const std::string& path) {
  check_not_empty(option, path);
  check_lengths(option, path, 0, kInsidePathReserve);
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::exists(status) && !fs::is_directory(status)) throw InputError(option + ": " + path + " exists and is not a folder");
  fs::create_directories(path, ec);
  if (ec) throw InputError(option + ": cannot create " + path + ": " + ec.message());
  check_writable_dir(option, "write in " + path, path);
}

}  // namespace sdpa
