// path_observers.cpp
#include "repro/run/path_observers.h"

namespace sdpa {

void attach_observers(MathSdpa& path, const PathObservers& observers, const std::vector<std::unique_ptr<Fix>>& fixes,
                      const Allocator& allocator, size_t first_allocation, LogLevel log, LogFormat format) {
  if (observers.reporter) path.add_observer(observers.reporter);
  if (observers.logger) {
    path.add_observer(observers.logger);
    const auto& records = allocator.records();
    for (size_t i = first_allocation; i < records.size(); ++i) {
      observers.logger->log_allocation(records[i].what, records[i].bytes, records[i].address, alloc_kind_name(records[i].kind));
    }
    for (const auto& line : path.setup_notes()) observers.logger->write(line);
    if (observers.mark_gpu_stages && observers.reporter && log == LogLevel::stages) {
      observers.reporter->mark_gpu_stages(observers.logger);
    }
  }
  if (observers.nvtx) path.add_observer(observers.nvtx);
  if (observers.timer) path.add_observer(observers.timer);
  if (observers.memory) path.add_observer(observers.memory);
  if (observers.injector) path.add_observer(observers.injector);
  for (const auto& fix : fixes) path.add_hook(fix.get());
  path.set_instrumentation({log >= LogLevel::sync, log == LogLevel::values, log != LogLevel::off && format == LogFormat::sdpa_debug});
}

}  // namespace sdpa
