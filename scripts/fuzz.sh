#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets (fuzz/) with clang and runs each for a bounded time,
# starting from the seed corpus in fuzz/corpus/<target> (new inputs go to a scratch copy, not
# into the repository). Exits non-zero on the first finding; the crashing input is kept under
# build-fuzz/findings/.
#
#   scripts/fuzz.sh [seconds per target, default 30]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
export PATH="$PATH:/usr/local/cuda/bin"
CXX=clang++ cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)"
mkdir -p build-fuzz/findings
for target in build-fuzz/fuzz_*; do
  [[ -x $target && -f $target ]] || continue
  name=$(basename "$target")
  corpus=build-fuzz/corpus/${name#fuzz_}
  rm -rf "$corpus" && mkdir -p "$corpus"
  cp -r "fuzz/corpus/${name#fuzz_}/." "$corpus/" 2>/dev/null || true
  echo "== $name for ${seconds}s"
  # detect_leaks: a parser that leaks on a rejected input is a finding too.
  ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 "$target" "$corpus" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/findings/"$name"- 2>&1 |
    grep -E "^(#[0-9]+ +DONE|Done|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|INFO: Seed)" || true
  if ls build-fuzz/findings/"$name"-* >/dev/null 2>&1; then
    echo "fuzz: $name found a failing input: $(ls build-fuzz/findings/"$name"-*)" >&2
    exit 1
  fi
done
echo "fuzz: no findings"
