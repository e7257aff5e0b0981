// philox.h: Philox4x32-10, the counter-based generator behind the dropout mask. Inlined verbatim
// into every generated reproducer with dropout (repro/report/reproducer), so it includes nothing
// from the harness: both programs drop exactly the same elements.
//
// Counter-based means element i's random number is a pure function of (seed, offset, i): the
// GPU kernel and the float64 CPU reference compute the identical keep/drop decision for every
// element without sharing any state, which is what lets --check verify a run with dropout.
// (PyTorch uses the same generator family, keyed by seed and offset, for its CUDA dropout.)
// Checked against Random123's published known-answer vectors in tests/test_philox.cpp.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SDPA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SDPA_HOST_DEVICE inline
#endif

namespace sdpa {

struct Philox4x32 {
  uint32_t v[4];
};

SDPA_HOST_DEVICE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

SDPA_HOST_DEVICE Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, counter.v[0], hi0, lo0);
    philox_mulhilo(kMul1, counter.v[2], hi1, lo1);
    counter = Philox4x32{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// The four uniform numbers of a dropout call keyed by (seed, offset) for elements 4*block ..
// 4*block + 3: one Philox call yields four numbers, used by four consecutive elements (so a
// vectorised kernel calls it once per four elements).
SDPA_HOST_DEVICE Philox4x32 dropout_philox_block(uint64_t seed, uint64_t offset, uint64_t block) {
  Philox4x32 counter{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                      static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// One Philox output word as a uniform number in [0, 1): a multiple of 2^-24, exact in float and
// double, so GPU and CPU compare it identically.
SDPA_HOST_DEVICE float dropout_uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// The uniform number in [0, 1) for element `index` of a dropout call keyed by (seed, offset).
// (Word chosen by selects, not r.v[index & 3]: a run-time index would put r in local memory.)
SDPA_HOST_DEVICE float dropout_uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  const Philox4x32 r = dropout_philox_block(seed, offset, index >> 2);
  const uint32_t word = (index & 2) ? ((index & 1) ? r.v[3] : r.v[2]) : ((index & 1) ? r.v[1] : r.v[0]);
  return dropout_uniform_from_bits(word);
}

// Keep decision shared by the kernel and the reference: keep with probability keep_prob.
SDPA_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, float keep_prob) {
  return dropout_uniform(seed, offset, index) < keep_prob;
}

}  // namespace sdpa
