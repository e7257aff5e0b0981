// fuzz_npy.cpp: the .npy reader (--inputs replays files captured from PyTorch). Any byte string
// must either parse into an array whose data size matches its shape and type, or be rejected
// with an InputError; nothing else (no crash, no other exception, no over-read).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "math_sdpa/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  try {
    const sdpa::NpyArray a = sdpa::parse_npy(bytes, "fuzz.npy");
    const size_t element = a.type == sdpa::NpyType::float32 ? 4 : a.type == sdpa::NpyType::bool8 ? 1 : 2;
    if (a.data.size() != static_cast<size_t>(a.element_count()) * element) std::abort();
  } catch (const sdpa::InputError&) {
  }
  return 0;
}
