// durable_log.cpp
#include "repro/supervise/durable_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"

namespace sdpa {

DurableLog::DurableLog(const std::string& path, int64_t start_us) : start_us_(start_us) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError("--log-file: cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) == 0) bytes_ = static_cast<size_t>(st.st_size);
}

DurableLog::~DurableLog() {
  if (fd_ < 0) return;
  sync();
  ::close(fd_);
}

void DurableLog::write(const std::string& kind, const std::string& text) {
  if (fd_ < 0) return;
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%.6f\t", (monotonic_us() - start_us_) / 1e6);
  std::string line = stamp + kind + "\t" + text;
  for (char& c : line) c = (c == '\n' || c == '\r') ? ' ' : c;
  line += '\n';
  if (bytes_ + line.size() > kDurableLogLimit && ::ftruncate(fd_, 0) == 0) {
    bytes_ = 0;
    const std::string restart = std::string(stamp) + "restart\tthe log reached its limit; the records before were dropped\n";
    bytes_ += static_cast<size_t>(std::max<ssize_t>(0, ::write(fd_, restart.data(), restart.size())));
  }
  // One write per record, so the file never ends inside a record that was complete.
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n > 0) bytes_ += static_cast<size_t>(n);
  dirty_ = true;
}

void DurableLog::sync() {
  if (fd_ < 0 || !dirty_) return;
  ::fsync(fd_);
  dirty_ = false;
}

}  // namespace sdpa
