// npy.h: reads and writes NumPy's .npy files.
//
// The harness replays Q, K, V and a mask captured from a failing PyTorch run with `np.save`, and
// writes its output the same way so it can be compared in Python. A captured file may be
// truncated, from another numpy, or not an .npy at all, so the reader checks everything and
// fails with one InputError line (exit 2) naming the file rather than running on bad data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "errors.h"

namespace sdpa {

// Element types the harness accepts: float32 ('<f4'), float16 ('<f2'), bfloat16 stored as
// uint16 ('<u2', numpy has no bfloat16), and bool ('|b1', also '<u1'/'|u1' as bool-like bytes).
enum class NpyType { float32, float16, uint16, bool8 };

struct NpyArray {
  NpyType type;
  std::vector<int64_t> shape;  // C order; a 0-d array has an empty shape
  std::vector<uint8_t> data;   // raw little-endian element bytes, C order
  int64_t element_count() const;
};

const char* npy_type_name(NpyType t);  // "float32", "float16", "uint16(bfloat16)", "bool"

// Versions 1.0, 2.0 and 3.0. Throws InputError on anything that is not a complete, C-order
// array of an accepted type; `what` (for parse_npy) names the source in the message.
NpyArray read_npy(const std::string& path);
NpyArray parse_npy(const std::vector<uint8_t>& bytes, const std::string& what);

// Writes a C-order float32 array. Atomic: writes to "<path>.tmp.<pid>" then renames over path,
// so an existing file is never left half-written.
void write_npy_float32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
// The same for a boolean array ('|b1', numpy's bool: one byte each, 0 or 1).
void write_npy_bool(const std::string& path, const std::vector<int64_t>& shape, const uint8_t* data);
std::vector<uint8_t> encode_npy_float32(const std::vector<int64_t>& shape, const float* data);

}  // namespace sdpa
