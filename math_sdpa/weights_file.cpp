// weights_file.cpp: which weights file a load reads, and the rule that it writes only its own
// (weights_file.h says why).
#include "weights_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "errors.h"

namespace sdpa {

namespace {

constexpr int64_t kMarkBytes = 64;
constexpr int64_t kBlock = int64_t{8} << 20;
constexpr int64_t kPage = 4096;

// Whether the open file starts with the mark.
bool starts_with_mark(int fd) {
  char head[kMarkBytes];
  return ::pread(fd, head, kMarkBytes, 0) == kMarkBytes && std::memcmp(head, kWeightsFileMark, kMarkBytes) == 0;
}

std::string size_text(int64_t bytes) { return std::to_string(bytes) + " bytes"; }

// The refusal of a file the harness did not make and may not grow.
InputError not_ours(const std::string& route, const std::string& path, int64_t size, int64_t bytes) {
  return InputError(route + ": " + path + " holds " + size_text(size) + ", fewer than the " + size_text(bytes) +
                    " asked for, and the harness did not make it, so it is read, never written (name a larger file, a "
                    "smaller size, or a file that does not exist yet, which is made)");
}

// What a file that is there is for, from its open descriptor.
WeightsFileUse decide(const std::string& route, const std::string& path, int fd, int64_t bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw InputError(route + ": cannot read " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw InputError(route + ": " + path + " is not a regular file");
  const int64_t size = st.st_size;
  if (starts_with_mark(fd)) return size >= bytes ? WeightsFileUse::reuse : WeightsFileUse::extend;
  if (size >= bytes) return WeightsFileUse::read;
  throw not_ours(route, path, size, bytes);
}

// Opens `path` for reading without blocking on a FIFO (one is refused as not a regular file).
int open_to_read(const std::string& route, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(route + ": cannot read " + path + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

std::string default_weights_file() {
  if (const char* file = std::getenv("SDPA_WEIGHTS_FILE"); file && *file) return file;
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = cache && *cache ? cache : std::string(home && *home ? home : ".") + "/.cache";
  return dir + "/sdpa-repro/weights.bin";
}

std::string weights_file_route(const std::string& file_option) {
  if (!file_option.empty()) return "--mapped-weights";
  if (const char* file = std::getenv("SDPA_WEIGHTS_FILE"); file && *file) return "$SDPA_WEIGHTS_FILE";
  return "--mapped-weights (its default file)";
}

WeightsFileUse weights_file_use(const std::string& route, const std::string& path, int64_t bytes) {
  if (path.empty()) throw InputError(route + ": an empty name names no file");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return WeightsFileUse::make;
    throw InputError(route + ": cannot read " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) throw InputError(route + ": " + path + " is not a regular file");
  const int fd = open_to_read(route, path);
  WeightsFileUse use{};
  try {
    use = decide(route, path, fd, bytes);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (use == WeightsFileUse::extend && ::access(path.c_str(), W_OK) != 0) {
    throw InputError(route + ": cannot extend " + path + " to " + size_text(bytes) + ": " + std::strerror(errno));
  }
  return use;
}

bool ensure_weights_file(const std::string& route, const std::string& path, int64_t bytes) {
  std::error_code ec;
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  // A new file is made only where none is (O_EXCL): an existing one is decided on, on this descriptor.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  int64_t at = 0;
  if (fd < 0) {
    if (errno != EEXIST) throw InputError(route + ": cannot create " + path + ": " + std::strerror(errno));
    fd = open_to_read(route, path);
    WeightsFileUse use{};
    struct stat st {};
    try {
      use = decide(route, path, fd, bytes);
      ::fstat(fd, &st);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    if (use != WeightsFileUse::extend) return false;
    fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    // Decided again on the descriptor written through: the file must still be the one with the mark.
    if (fd < 0 || !starts_with_mark(fd)) {
      if (fd >= 0) ::close(fd);
      throw InputError(route + ": cannot extend " + path + ": it changed while the run started");
    }
    at = std::max<int64_t>(kMarkBytes, st.st_size / kPage * kPage);  // its last partial page written again
  }
  // Data that is not zeros (a file of zeros could be sparse, its pages never read from disk).
  std::vector<uint64_t> block(static_cast<size_t>(kBlock / 8));
  std::mt19937_64 random(2026);
  for (uint64_t& x : block) x = random();
  const auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    return InputError(route + ": cannot " + what + " " + path + " (" + size_text(bytes) + "): " + std::strerror(err) +
                      " (free some disk, or name a file on a larger disk: SIZE:FILE)");
  };
  // The mark first: a creation cut short leaves a file the next run knows as its own and extends.
  if (at == 0) {
    if (::pwrite(fd, kWeightsFileMark, kMarkBytes, 0) != kMarkBytes) throw fail("write");
    at = kMarkBytes;
  }
  while (at < bytes) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kBlock, bytes - at));
    const ssize_t wrote = ::pwrite(fd, block.data(), n, at);
    if (wrote <= 0) throw fail("write");
    at += wrote;
  }
  if (::fsync(fd) != 0) throw fail("sync");
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return true;
}

}  // namespace sdpa
