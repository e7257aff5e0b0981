// test_gpu_allocator.cpp: the allocators that keep freed memory, as PyTorch's caching allocator
// does. vmm (expandable segments): blocks are distinct, 512-byte aligned and hold what the GPU
// writes; freed blocks go to the best-fitting request, are split and merge with free neighbours;
// the segment grows at its end by whole granules (from a free last block) and never shrinks; a
// random mix of allocations and frees leaves one free block that serves the whole segment.
// Caching device memory: a freed block serves requests down to 80% of its size and no smaller,
// reserved_bytes() counts cached blocks and live_bytes() does not, and destruction gives
// everything back to the driver. Each case stays under a few hundred MiB.
//
// The random cases draw a fresh seed each run (SDPA_TEST_SEED replays one).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "math_sdpa/allocator.h"
#include "math_sdpa/cuda_check.h"

using namespace sdpa;

namespace {

uint64_t allocator_test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("SDPA_TEST_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 0) : (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    std::printf("gpu allocator tests: seed %llu (set SDPA_TEST_SEED to replay)\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
char* at(void* p, size_t offset) { return static_cast<char*>(p) + offset; }

// Every GPU this suite targets (sm_90, Linux) supports virtual memory management, so a waived
// vmm allocator fails the case: it would mean the driver entry points were looked up wrongly.
std::unique_ptr<Allocator> vmm_allocator() { return make_allocator(AllocKind::vmm, AllocatorOptions{}); }

std::unique_ptr<Allocator> caching_device_allocator() {
  AllocatorOptions options;
  options.caching = true;
  return make_allocator(AllocKind::device, options);
}

// Writes `value` to every byte with the GPU.
void fill(void* p, size_t bytes, unsigned char value) {
  CUDA_CHECK(cudaMemset(p, value, bytes));
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Whether every byte the GPU reads back is `value`.
bool holds(const void* p, size_t bytes, unsigned char value) {
  std::vector<unsigned char> host(bytes);
  CUDA_CHECK(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
  return std::all_of(host.begin(), host.end(), [value](unsigned char b) { return b == value; });
}

size_t free_device_memory() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

}  // namespace

TEST_SUITE("gpu_allocator") {
  TEST_CASE("vmm: blocks are distinct, 512-byte aligned, and hold what the GPU wrote to each") {
    auto allocator = vmm_allocator();
    CHECK(allocator->kind() == AllocKind::vmm);
    CHECK(allocator->reserved_bytes() == 0);  // memory is mapped on demand, not at creation
    // Around the 512-byte rounding, and larger than a 2 MiB granule so that a block spans mappings.
    const std::vector<size_t> sizes = {0, 1, 511, 512, 513, 4 * kKiB + 3, 100000, 3 * kMiB + 5, 7, 5 * kMiB};
    std::vector<void*> blocks;
    size_t requested = 0;
    for (size_t bytes : sizes) {
      blocks.push_back(allocator->allocate(bytes, "block"));
      requested += bytes;
      REQUIRE(blocks.back() != nullptr);
      CHECK(address(blocks.back()) % 512 == 0);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (size_t j = i + 1; j < sizes.size(); ++j) {
        CAPTURE(i);
        CAPTURE(j);
        const uintptr_t a = address(blocks[i]), b = address(blocks[j]);
        CHECK((a + std::max<size_t>(sizes[i], 1) <= b || b + std::max<size_t>(sizes[j], 1) <= a));
      }
    }
    // Overlapping blocks would show the later value in the earlier block.
    for (size_t i = 0; i < sizes.size(); ++i) fill(blocks[i], sizes[i], static_cast<unsigned char>(i + 1));
    for (size_t i = 0; i < sizes.size(); ++i) {
      CAPTURE(i);
      CHECK(holds(blocks[i], sizes[i], static_cast<unsigned char>(i + 1)));
    }
    CHECK(allocator->live_allocations() == sizes.size());
    CHECK(allocator->live_bytes() == requested);  // the tensors' sizes, not the rounded blocks
    REQUIRE(allocator->records().size() == sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      CHECK(allocator->records()[i].bytes == sizes[i]);
      CHECK(allocator->records()[i].address == address(blocks[i]));
      CHECK(allocator->records()[i].kind == AllocKind::vmm);
    }
    CHECK(allocator->reserved_bytes() >= requested);
    for (void* p : blocks) allocator->release(p);
    CHECK(allocator->live_bytes() == 0);
  }

  TEST_CASE("vmm: a freed block goes to the best-fitting request, is split, and merges with free neighbours") {
    auto allocator = vmm_allocator();
    // Live 512-byte separators keep the blocks of interest apart, so only the merges tested happen.
    void* a = allocator->allocate(256 * kKiB, "a");
    void* s1 = allocator->allocate(512, "separator");
    void* b = allocator->allocate(64 * kKiB, "b");
    void* s2 = allocator->allocate(512, "separator");
    void* c = allocator->allocate(64 * kKiB, "c");
    void* d = allocator->allocate(64 * kKiB, "d");
    void* s3 = allocator->allocate(512, "separator");
    void* e = allocator->allocate(64 * kKiB, "e");
    void* f = allocator->allocate(64 * kKiB, "f");
    void* s4 = allocator->allocate(512, "separator");
    const size_t reserved = allocator->reserved_bytes();

    // Best fit, not first fit: b, not the lower a.
    allocator->release(b);
    allocator->release(a);
    void* x = allocator->allocate(64 * kKiB, "x");
    CHECK(x == b);
    allocator->release(x);
    // Split: two halves of b, not a and then b.
    void* half1 = allocator->allocate(32 * kKiB, "half");
    void* half2 = allocator->allocate(32 * kKiB, "half");
    CHECK(half1 == b);
    CHECK(half2 == at(b, 32 * kKiB));
    allocator->release(half1);
    allocator->release(half2);
    // The halves merged back: b serves 64 KiB again.
    void* y = allocator->allocate(64 * kKiB, "y");
    CHECK(y == b);
    allocator->release(y);

    // c freed, then d: d merges into the free block before it. Unmerged, neither 64 KiB block
    // holds 128 KiB and the best fit would be a (256 KiB).
    allocator->release(c);
    allocator->release(d);
    void* cd = allocator->allocate(128 * kKiB, "cd");
    CHECK(cd == c);
    // f freed, then e: e merges with the free block after it.
    allocator->release(f);
    allocator->release(e);
    void* ef = allocator->allocate(128 * kKiB, "ef");
    CHECK(ef == e);
    // Three blocks: with b free (y was released) and cd freed, the separator between them, freed
    // last, joins all three; a block merged on one side only would not hold the request, and a
    // (256 KiB) would get it.
    allocator->release(cd);
    allocator->release(s2);
    void* bsc = allocator->allocate(64 * kKiB + 512 + 128 * kKiB, "b+s2+cd");
    CHECK(bsc == b);
    CHECK(allocator->reserved_bytes() == reserved);  // every request above was served without growing

    for (void* p : {s1, s3, s4, ef, bsc}) allocator->release(p);
    CHECK(allocator->live_bytes() == 0);
    CHECK(allocator->live_allocations() == 0);
  }

  TEST_CASE("vmm: the segment grows at its end by whole granules, from a free last block, and never shrinks") {
    auto allocator = vmm_allocator();
    void* first = allocator->allocate(1, "first");
    const size_t granule = allocator->reserved_bytes();  // one granule maps for the first block
    REQUIRE(granule > 0);
    CHECK(granule % (64 * kKiB) == 0);
    allocator->release(first);
    CHECK(allocator->reserved_bytes() == granule);

    // a takes a quarter of the granule; b needs more than the free three quarters: the last free
    // block grows by one granule and b starts right after a. Grown as a new block instead, b would
    // start at the next granule and map two.
    void* a = allocator->allocate(granule / 4, "a");
    CHECK(a == first);
    void* b = allocator->allocate(granule, "b");
    CHECK(b == at(a, granule / 4));
    CHECK(allocator->reserved_bytes() == 2 * granule);
    // b spans both mappings: both must be readable and writable by the GPU.
    fill(b, granule, 0x5A);
    CHECK(holds(b, granule, 0x5A));

    // c: three granules and a byte, with three quarters of a granule free at the end: three more.
    void* c = allocator->allocate(3 * granule + 1, "c");
    CHECK(c == at(b, granule));
    CHECK(allocator->reserved_bytes() == 5 * granule);
    CHECK(allocator->reserved_bytes() % granule == 0);
    fill(c, 3 * granule + 1, 0xC3);
    CHECK(holds(c, 3 * granule + 1, 0xC3));
    CHECK(holds(b, granule, 0x5A));

    // Freeing unmaps nothing; the three blocks merge into one that serves the whole segment.
    allocator->release(b);
    allocator->release(a);
    allocator->release(c);
    CHECK(allocator->reserved_bytes() == 5 * granule);
    void* whole = allocator->allocate(5 * granule, "whole");
    CHECK(whole == first);
    CHECK(allocator->reserved_bytes() == 5 * granule);
    CHECK(allocator->peak_reserved_bytes() == 5 * granule);
    allocator->release(whole);
  }

  TEST_CASE("vmm: a random mix of allocations and frees leaves nothing live, and the whole segment serves one request") {
    std::mt19937_64 rng(allocator_test_seed());
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      auto allocator = vmm_allocator();
      // Sizes spread over 1 B ... 2 MiB on a log scale, so that small and granule-sized blocks mix.
      std::uniform_real_distribution<double> log2_size(0.0, 21.0);
      auto random_size = [&] { return static_cast<size_t>(std::exp2(log2_size(rng))); };
      std::map<uintptr_t, std::pair<size_t, unsigned char>> live;  // address -> (bytes, byte written)
      size_t live_bytes = 0, reserved = 0;
      void* const start = allocator->allocate(random_size(), "start");  // the segment's first block
      allocator->release(start);
      auto free_one = [&](std::map<uintptr_t, std::pair<size_t, unsigned char>>::iterator it) {
        void* p = reinterpret_cast<void*>(it->first);
        CHECK(holds(p, it->second.first, it->second.second));  // no other block wrote over it
        allocator->release(p);
        live_bytes -= it->second.first;
        live.erase(it);
      };
      for (int step = 0; step < 300; ++step) {
        if (live.empty() || rng() % 5 < 3) {
          const size_t bytes = random_size();
          void* p = allocator->allocate(bytes, "mixed");
          const uintptr_t a = address(p);
          // No overlap with the live neighbours on either side.
          const auto next = live.lower_bound(a);
          if (next != live.end()) CHECK(a + bytes <= next->first);
          if (next != live.begin()) CHECK(std::prev(next)->first + std::prev(next)->second.first <= a);
          const auto tag = static_cast<unsigned char>(step % 251 + 1);
          fill(p, bytes, tag);
          live[a] = {bytes, tag};
          live_bytes += bytes;
        } else {
          auto it = live.begin();
          std::advance(it, static_cast<long>(rng() % live.size()));
          free_one(it);
        }
        CHECK(allocator->live_bytes() == live_bytes);
        CHECK(allocator->reserved_bytes() >= reserved);  // never shrinks
        CHECK(allocator->reserved_bytes() >= live_bytes);
        reserved = allocator->reserved_bytes();
      }
      while (!live.empty()) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        free_one(it);
      }
      CHECK(allocator->live_bytes() == 0);
      CHECK(allocator->live_allocations() == 0);
      CHECK(allocator->reserved_bytes() == reserved);
      // All of it merged back into one free block at the segment's start.
      void* whole = allocator->allocate(reserved, "whole");
      CHECK(whole == start);
      CHECK(allocator->reserved_bytes() == reserved);
      fill(whole, reserved, 0x77);
      CHECK(holds(whole, reserved, 0x77));
      allocator->release(whole);
    }
  }

  TEST_CASE("vmm: destruction unmaps the segment and gives its memory back") {
    const size_t held = 256 * kMiB;
    size_t free_while_held = 0;
    {
      auto allocator = vmm_allocator();
      void* p = allocator->allocate(held, "held");
      fill(p, held, 1);
      free_while_held = free_device_memory();
      allocator->release(p);
      CHECK(free_device_memory() < free_while_held + held / 2);  // released, not unmapped
    }
    CHECK(free_device_memory() >= free_while_held + held / 2);
  }

  TEST_CASE("caching device memory: a freed block serves requests down to 80% of its size, and no smaller") {
    auto allocator = caching_device_allocator();
    CHECK(allocator->kind() == AllocKind::device);
    void* a = allocator->allocate(kMiB, "a");
    CHECK(allocator->live_bytes() == kMiB);
    CHECK(allocator->reserved_bytes() == kMiB);
    allocator->release(a);
    // Kept, not given back: reserved counts it, live does not.
    CHECK(allocator->live_bytes() == 0);
    CHECK(allocator->live_allocations() == 0);
    CHECK(allocator->reserved_bytes() == kMiB);

    void* same = allocator->allocate(kMiB, "same size");
    CHECK(same == a);
    allocator->release(same);
    void* rounded = allocator->allocate(kMiB - 100, "rounds to the same block");
    CHECK(rounded == a);
    allocator->release(rounded);
    // 839,168 bytes (1 MiB / 1.25, rounded up to 512) may waste a quarter of itself: reused.
    void* smallest_fit = allocator->allocate(839168, "smallest that fits");
    CHECK(smallest_fit == a);
    allocator->release(smallest_fit);
    CHECK(allocator->reserved_bytes() == kMiB);

    // 512 bytes less would waste more than a quarter: a new block, and a still cached.
    void* too_small = allocator->allocate(838656, "too small");
    CHECK(too_small != a);
    CHECK(allocator->live_bytes() == 838656);
    CHECK(allocator->reserved_bytes() == kMiB + 838656);
    // A larger request than any cached block: a new block.
    void* larger = allocator->allocate(kMiB + 1, "larger");
    CHECK(larger != a);
    CHECK(larger != too_small);
    CHECK(allocator->reserved_bytes() == kMiB + 838656 + kMiB + 512);
    allocator->release(too_small);
    allocator->release(larger);
    // A reused block still holds what the GPU writes.
    void* reused = allocator->allocate(kMiB, "reused");
    CHECK(reused == a);
    fill(reused, kMiB, 0x3C);
    CHECK(holds(reused, kMiB, 0x3C));
    allocator->release(reused);

    CHECK(allocator->live_bytes() == 0);
    CHECK(allocator->reserved_bytes() == kMiB + 838656 + kMiB + 512);
    CHECK(allocator->peak_reserved_bytes() == kMiB + 838656 + kMiB + 512);
    CHECK(allocator->peak_live_bytes() == 838656 + kMiB + 1);
    // Records are the tensors handed out, at their own sizes.
    REQUIRE(allocator->records().size() == 7);
    CHECK(allocator->records()[2].bytes == kMiB - 100);
    CHECK(allocator->records()[2].address == address(a));
    CHECK(allocator->records()[5].bytes == kMiB + 1);
  }

  TEST_CASE("caching device memory: the smallest cached block that fits, whatever the order of freeing") {
    auto allocator = caching_device_allocator();
    void* first = allocator->allocate(kMiB, "first");
    void* middle = allocator->allocate(960 * kKiB, "middle");
    void* last = allocator->allocate(kMiB, "last");
    // Freed in this order, the oldest free block is `first` and the newest `last`: a queue or a
    // stack of freed blocks would hand out one of them; best fit hands out `middle`.
    allocator->release(first);
    allocator->release(middle);
    allocator->release(last);
    void* best = allocator->allocate(900 * kKiB, "best fit");  // 960 KiB and 1 MiB both fit
    CHECK(best == middle);
    CHECK(allocator->reserved_bytes() == 2 * kMiB + 960 * kKiB);
    allocator->release(best);
  }

  TEST_CASE("caching device memory: cached blocks go back to the driver when the allocator is destroyed") {
    const size_t held = 256 * kMiB;
    size_t free_while_cached = 0;
    {
      auto allocator = caching_device_allocator();
      void* p = allocator->allocate(held, "held");
      allocator->release(p);
      free_while_cached = free_device_memory();
      CHECK(allocator->reserved_bytes() == held);
    }
    CHECK(free_device_memory() >= free_while_cached + held / 2);
  }

  TEST_CASE("caching applies to device memory only: managed memory and uncached device memory free at once") {
    AllocatorOptions options;
    options.caching = true;
    auto managed = make_allocator(AllocKind::managed, options);
    managed->release(managed->allocate(kMiB, "managed"));
    CHECK(managed->reserved_bytes() == 0);
    auto device = make_allocator(AllocKind::device, AllocatorOptions{});
    device->release(device->allocate(kMiB, "device"));
    CHECK(device->reserved_bytes() == 0);
  }
}
