#!/usr/bin/env bash
# device_run.sh: the GPU evidence for the core path and the watchdog, in one call on a GPU
# machine: build (sm_90), all tests, the GPU test binaries' own output (error table, watchdog
# table), a clean --log values run, repro --check at the default and image-layer shapes in both
# allocator modes, and a mutation check (a deliberately broken softmax must fail the tests).
# Logs go to $OUT (or ./device-out); short tables are printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-device-out}
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$out/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/cmake.log" 2>&1 &&
  cmake --build build-gpu -j 16 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log" "$out/cmake.log"; exit 1; }
# A mutant with a wrong softmax normalisation, built in the background while the tests run.
rm -rf /tmp/mutant && mkdir -p /tmp/mutant && cp -r CMakeLists.txt math_sdpa repro tests /tmp/mutant/ &&
  sed -i 's|const float inv_sum = 1.0f / total.sum;|const float inv_sum = 1.001f / total.sum;|' /tmp/mutant/math_sdpa/kernels.cu &&
  (cmake -S /tmp/mutant -B /tmp/mutant/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null 2>&1 &&
   cmake --build /tmp/mutant/build -j 4 --target gpu_tests >"$out/mutant_build.log" 2>&1) &
mutant_build=$!
ctest --test-dir build-gpu --output-on-failure -j 2 >"$out/ctest.log" 2>&1
ctest_rc=$?
./build-gpu/tests/gpu_tests --test-case='*matrix*' >"$out/gpu_matrix.txt" 2>&1
./build-gpu/tests/gpu_tests --test-case='*injected hang*' >"$out/gpu_watchdog.txt" 2>&1
./build-gpu/repro --log values --check 2>"$out/clean_values_log.txt" >"$out/clean_values_stdout.txt"
results=()
run() {  # name, repro args...
  local name=$1
  shift
  ./build-gpu/repro "$@" --json "$out/$name.json" >"$out/$name.txt" 2>&1
  local rc=$?
  results+=("$(printf '%-20s rc=%d  %s' "$name" "$rc" "$(grep -E '^# check' "$out/$name.txt" | head -1)")")
}
for alloc in managed device; do
  run "default_$alloc" --scenario 0 --check --alloc "$alloc" --iters 20
  run "image4608_$alloc" --scenario 0 --check --alloc "$alloc" -b 1 --heads 24 -L 4608 -E 128 --dtype bf16 --iters 5
done
wait $mutant_build
SDPA_TEST_SEED=1 /tmp/mutant/build/tests/gpu_tests --test-case='*matrix*' >"$out/mutant.txt" 2>&1
mutant_rc=$?
exec > >(tee "$out/summary.txt") 2>&1
echo "== ctest (rc=$ctest_rc)"; grep -E "Test +#|tests passed|tests failed" "$out/ctest.log"
echo "== mutant (softmax off by 0.1%) gpu_tests rc=$mutant_rc (must be non-zero)"; grep -E "test cases|assertions|worst" "$out/mutant.txt"
grep -E -A3 "ERROR" "$out/ctest.log" | head -30
echo "== clean --log values run (stderr)"; cat "$out/clean_values_log.txt" | cut -c1-220
echo "== matrix"; grep -E "input seed|worst rel_error|matrix cases|test cases" "$out/gpu_matrix.txt"
echo "== watchdog"; grep -E -A13 "^injected" "$out/gpu_watchdog.txt"
for f in default_managed image4608_managed image4608_device; do echo "== $f"; cat "$out/$f.txt"; done
printf '%s\n' "${results[@]}"
# Only a few files come back from the device machine: pack the logs into one archive.
tar -C "$out" -czf /tmp/logs.tar.gz --exclude=logs.tar.gz . && mv /tmp/logs.tar.gz "$out/logs.tar.gz"
