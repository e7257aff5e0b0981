#!/usr/bin/env bash
# device_issue2.sh: the GPU evidence for the core path, in one call on a GPU machine:
# build (sm_90), GPU tests, and repro --check at the default and the image-layer shapes in
# both allocator modes. Logs go to $OUT (or ./device-out); a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-device-out}
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv | tee "$out/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/cmake.log" 2>&1 &&
  cmake --build build-gpu -j 16 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log" "$out/cmake.log"; exit 1; }
ctest --test-dir build-gpu --output-on-failure -j 4 >"$out/ctest.log" 2>&1
ctest_rc=$?
grep -E "worst rel_error|matrix cases|input seed|tests passed|tests failed|Passed|Failed|SKIP" "$out/ctest.log" | head -40
results=()
run() {  # name, repro args...
  local name=$1
  shift
  ./build-gpu/repro "$@" --json "$out/$name.json" >"$out/$name.txt" 2>&1
  local rc=$?
  results+=("$(printf '%-34s rc=%d  %s' "$name" "$rc" "$(grep -E '^# check' "$out/$name.txt" | head -1)")")
}
for alloc in managed device; do
  run "default_$alloc" --scenario 0 --check --alloc "$alloc" --iters 20
  run "image4608_$alloc" --scenario 0 --check --alloc "$alloc" -b 1 --heads 24 -L 4608 -E 128 --dtype bf16 --iters 5
done
for f in "$out"/default_managed.txt "$out"/image4608_managed.txt; do echo "== $f"; cat "$f"; done
echo "ctest rc=$ctest_rc"
printf '%s\n' "${results[@]}"
