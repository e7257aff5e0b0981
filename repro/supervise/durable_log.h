// durable_log.h: --log-file, a record of the run that survives a frozen machine.
//
// On GB10, exhausting unified memory can freeze the whole machine until a power cycle, and the
// journal stops mid-line. So the supervisor appends each thing as it arrives (a stage-log line,
// a stage record, the hang, each snapshot collector) as one line with one write(2), and
// fsyncs: after a power cycle the last record on disk still names the stage that was running.
//
// A record: "<seconds since the log was opened>\t<kind>\t<text>". Kinds: start, log (a line of
// the stage log), record (a progress record, watchdog.h), hang, snapshot (a collector's end),
// keep, kill, stuck, end. At kDurableLogLimit the file starts again (a "restart" record), so a
// long run cannot fill the disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sdpa {

constexpr size_t kDurableLogLimit = size_t{64} << 20;

class DurableLog {
 public:
  DurableLog() = default;  // no log: every call does nothing
  // Opens `path` for appending (created if absent); throws InputError (one line) if it cannot.
  DurableLog(const std::string& path, int64_t start_us);
  ~DurableLog();
  DurableLog(const DurableLog&) = delete;
  DurableLog& operator=(const DurableLog&) = delete;

  bool enabled() const { return fd_ >= 0; }
  // Appends one record (newlines in `text` become spaces); not yet synced.
  void write(const std::string& kind, const std::string& text);
  // fsync: every record written so far is on disk.
  void sync();
  // write + sync.
  void record(const std::string& kind, const std::string& text) {
    write(kind, text);
    sync();
  }

 private:
  int fd_ = -1;
  int64_t start_us_ = 0;
  size_t bytes_ = 0;
  bool dirty_ = false;
};

}  // namespace sdpa
