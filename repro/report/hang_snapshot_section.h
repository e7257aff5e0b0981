// hang_snapshot_section.h: REPORT.md's "At the moment of the hang" section, written from the
// hang snapshot the first hung run's watchdog took (repro/supervise/hang_snapshot.h): the
// evidence, the resident kernels, the main thread's CUDA call, threads blocked in the kernel,
// the driver's log lines, and each collector that could not run and why.
#pragma once

#include <string>

#include "repro/report/report_writer.h"

namespace sdpa {

// "" when no run hung (the "Hang" section says so).
std::string hang_snapshot_section(const ReportInput& in);

}  // namespace sdpa
