#!/usr/bin/env bash
# bench_device.sh: the benchmark's evidence in one call on a GPU machine. Builds for sm_90, proves the
# faster kernels still pass the whole correctness matrix (ctest -L gpu), times our path against
# PyTorch's SDPA backends at the three target shapes in both precision modes
# (scripts/compare_pytorch.py, which runs `repro bench` for our figures), measures each fix's
# cost at the three shapes (repro bench --fix-overhead each, design and lean forms), and records
# the machine code of the kernels (16-byte loads, no local memory). Logs go under $OUT (or
# ./bench-out), packed into $OUT/logs.tar.gz; a short summary is printed last.
#
#   tools/bench_device.sh [tests] [compare] [overhead] [sass]     (default: all four)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench-out}
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
sections=("$@")
((${#sections[@]})) || sections=(tests compare overhead sass)
want() { [[ " ${sections[*]} " == *" $1 "* ]]; }
summary="$out/summary.txt"
: >"$summary"
say() { echo "$@" | tee -a "$summary" >/dev/null; }

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv,noheader \
  | tee "$out/gpu.txt" >>"$summary"
cmake --preset ci >"$out/cmake.log" 2>&1 &&
  cmake --build --preset ci -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log" "$out/cmake.log"; exit 1; }
repro=./build-ci/repro

if want tests; then
  ctest --test-dir build-ci -L gpu --output-on-failure -j 2 >"$out/ctest_gpu.log" 2>&1
  say "== ctest -L gpu (rc=$?)"
  grep -E "Test +#|tests passed|tests failed" "$out/ctest_gpu.log" >>"$summary"
  grep -E -B2 -A6 "ERROR|FAILED" "$out/ctest_gpu.log" | head -40 >>"$summary"
  grep -E "input seed|worst rel_error" "$out/ctest_gpu.log" >>"$summary"
fi

if want compare; then
  # Our path at the three shapes, native and upcast (repro bench), beside PyTorch's backends.
  python3 scripts/compare_pytorch.py --repro "$repro" --out "$out/compare" >"$out/compare.txt" 2>"$out/compare_stderr.txt"
  say "== compare_pytorch.py (rc=$?)"
  cat "$out/compare.txt" >>"$summary"
  grep -v "^$" "$out/compare_stderr.txt" | tail -8 >>"$summary"
fi

if want overhead; then
  # Each fix against the default configuration (scenario 0, bf16, upcast, managed memory), at
  # the three shapes, design and lean forms.
  for shape in "2 8 512 64" "4 16 2048 64" "1 24 4608 128"; do
    read -r b h l e <<<"$shape"
    name="overhead_${b}x${h}x${l}x${e}"
    $repro bench -b "$b" --heads "$h" -L "$l" -E "$e" --fix-overhead each --json "$out/$name.json" >"$out/$name.txt" 2>&1
    say "== fix overhead at B=$b H=$h L=S=$l E=$e, bf16 upcast, managed (rc=$?)"
    grep -E "^(# repro bench|# [0-9]+ input set|Throughput|Avg latency|   whole call|   GPU stages|# result)" \
      "$out/$name.txt" | cut -c1-200 >>"$summary"
    sed -n '/# fix overhead/,$p' "$out/$name.txt" | cut -c1-200 >>"$summary"
  done
fi

if want sass; then
  obj=build-ci/math_sdpa/CMakeFiles/sdpa_path.dir/kernels.cu.o
  if command -v cuobjdump >/dev/null && [[ -f $obj ]]; then
    cuobjdump -sass "$obj" >"$out/kernels.sass" 2>&1
    say "== SASS of the softmax and conversion kernels: 128-bit loads/stores, local memory"
    # One line per kernel: its name, then how many LDG.E.128, STG.E.128 and LDL/STL it has.
    awk '/Function :/ {if (name) printf "%-90s LDG128=%d STG128=%d local=%d\n", name, l, s, x; name=$3; l=s=x=0}
         /LDG.E.128/ {l++} /STG.E.128/ {s++} /(LDL|STL)/ {x++}
         END {if (name) printf "%-90s LDG128=%d STG128=%d local=%d\n", name, l, s, x}' "$out/kernels.sass" \
      | grep -E "softmax|convert_scale" | sed -E 's/_ZN4sdpa43_GLOBAL__N__[0-9a-f_]+kernels_cu_[0-9a-f]+[0-9]+//' >>"$summary"
    say "local memory: $(grep -cE '\b(LDL|STL)(\.[A-Z0-9.]+)? ' "$out/kernels.sass") LDL/STL instructions in the whole object"
  else
    say "== SASS: cuobjdump or $obj not found"
  fi
fi

# Only a few files come back from the device machine: everything goes into one archive.
tar -C "$out" -czf /tmp/bench_logs.tar.gz --exclude=logs.tar.gz --exclude=summary.txt . && mv /tmp/bench_logs.tar.gz "$out/logs.tar.gz"
find "$out" -mindepth 1 -maxdepth 1 ! -name logs.tar.gz ! -name summary.txt -exec rm -rf {} +
tail -c 11000 "$summary"
