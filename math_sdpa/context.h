// context.h: the training process around the call, beyond the path's own layers: memory held by
// the rest of the model (the ballast) and data-loader threads (the host load). docs/CONTEXT.md
// says what each stands for in the real process.
//
// Host-only: parsed by the command line, counted by the memory plan (memory_plan.h) and its
// guard; the GPU side (context_load.cpp) allocates and runs them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "allocator.h"

namespace sdpa {

// Who touches the ballast while the path runs: nobody, a host thread, a GPU stream, or both.
enum class BallastTouch { none, host, gpu, both };
const char* ballast_touch_name(BallastTouch t);
BallastTouch parse_ballast_touch(const std::string& s);
std::string ballast_touch_choices();  // "none|host|gpu|both"

struct BallastSpec {
  int64_t bytes = 0;      // --ballast SIZE
  double fraction = 0;    // --ballast FRACTION: of the memory available to its kind when the run starts
  AllocKind kind = AllocKind::device;  // PyTorch keeps a model's weights in cudaMalloc memory
  BallastTouch touch = BallastTouch::none;
  bool given() const { return bytes > 0 || fraction > 0; }
};

struct ContextSettings {
  BallastSpec ballast;
  int host_load_threads = 0;  // --host-load THREADS
};

// Each host-load thread's buffers: a pageable one it writes and reads, a pinned one it copies
// through, and a device one it copies to, this size each.
constexpr int64_t kHostLoadBufferBytes = int64_t{64} << 20;

// "40G", "512M", "1.5GiB", "2e9", "41GB": bytes (K, M, G, T and KiB..TiB are powers of 1024;
// KB..TB of 1000; no unit: bytes). Throws InputError naming `option`.
int64_t parse_size(const std::string& text, const std::string& option);
// --ballast's value: a size, or a fraction in (0, 1) (a plain number below 1).
BallastSpec parse_ballast(const std::string& text);
// "41.00 GiB" or "80% of the memory available"
std::string ballast_string(const BallastSpec& b);

}  // namespace sdpa
