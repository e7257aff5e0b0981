// output_paths.cpp
#include "repro/common/output_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "math_sdpa/errors.h"

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

}  // namespace

void check_not_empty(const std::string& option, const std::string& path) {
  if (path.empty()) throw InputError(option + ": an empty name names no file or folder");
}

void check_file_writable(const std::string& option, const std::string& path) {
  check_not_empty(option, path);
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
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::exists(status) && !fs::is_directory(status)) throw InputError(option + ": " + path + " exists and is not a folder");
  fs::create_directories(path, ec);
  if (ec) throw InputError(option + ": cannot create " + path + ": " + ec.message());
  check_writable_dir(option, "write in " + path, path);
}

}  // namespace sdpa
