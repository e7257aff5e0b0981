// errors.h: the harness's error types and its process exit codes.
//
// Every failure in the harness is one of these exceptions, thrown where it is detected and
// caught once, in repro's main, which prints one line and exits with the matching code.
// The exit codes are the harness's public contract (README "Exit codes"); scripts and the
// sweep depend on them, so they never change meaning.
#pragma once

#include <stdexcept>
#include <string>

namespace sdpa {

enum ExitCode : int {
  kExitPass = 0,           // the run completed and (with --check) matched the reference
  kExitMismatch = 1,       // numerical mismatch against the reference, or non-finite output
  kExitUsage = 2,          // bad command line or bad input file; nothing was run
  kExitHang = 3,           // the watchdog stopped a stage that overran its deadline
  kExitCudaError = 4,      // a CUDA or cuBLAS call failed
  kExitCrash = 5,          // the GPU child died from a signal
  kExitWaived = 6,         // the scenario cannot be expressed on this device (reason printed)
  kExitNoGpu = 7,          // no usable CUDA device or driver
  kExitRefused = 8,        // a resource request was refused (e.g. managed-memory oversubscription)
  kExitStalled = 9,        // every call stalled: a stage over --stall-threshold, under the deadline
};

// The codes above in a few words each, for the footer of --help (docs/CLI.md has them in full).
constexpr const char* kExitCodeSummary =
    "0 pass, 1 mismatch or memory growth, 2 usage (nothing run), 3 hang, 4 CUDA error, 5 crash, 6 waived, "
    "7 no usable GPU or driver, 8 refused, 9 every call stalled";

// Bad command-line values, bad or mismatched input files: exit 2, one line.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A request the harness refuses to make because it could harm the machine (exit 8).
struct RefusedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The run asks for something this device cannot express, such as system memory used by the GPU
// directly on a GPU without pageableMemoryAccess (exit 6, the reason as one line), in the
// manner of cuda-samples' EXIT_WAIVED.
struct WaivedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// No CUDA device or driver usable by this process (exit 7).
struct NoGpuError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace sdpa
