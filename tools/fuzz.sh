#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets (fuzz/) with clang and runs each for a bounded time,
# starting from the seed corpus in fuzz/corpus/<target> (new inputs go to a scratch copy, not
# into the repository). Exits non-zero if a target found something; the crashing input is kept
# under build-fuzz/findings/, each target's whole output under build-fuzz/logs/.
#
#   tools/fuzz.sh [seconds per target, default 30]
#
# The targets run side by side, one per core (FUZZ_JOBS sets how many at once): each still fuzzes
# for the given seconds, on a core of its own; a target's summary is printed when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
export PATH="$PATH:/usr/local/cuda/bin"
source scripts/ccache_env.sh
CXX=clang++ cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)"
rm -rf build-fuzz/findings build-fuzz/logs
mkdir -p build-fuzz/findings build-fuzz/logs

fuzz_one() {
  local target=$1 name corpus
  name=$(basename "$target")
  corpus=build-fuzz/corpus/${name#fuzz_}
  rm -rf "$corpus" && mkdir -p "$corpus"
  cp -r "fuzz/corpus/${name#fuzz_}/." "$corpus/" 2>/dev/null || true
  # detect_leaks: a parser that leaks on a rejected input is a finding too.
  ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 "$target" "$corpus" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/findings/"$name"- \
    >build-fuzz/logs/"$name".log 2>&1 || true
  # One block per target, printed at once (the targets end in any order).
  local summary
  summary=$(grep -E "^(#[0-9]+ +DONE|Done|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|INFO: Seed)" \
    build-fuzz/logs/"$name".log || true)
  printf '== %s for %ss\n%s\n' "$name" "$seconds" "$summary"
}

jobs=${FUZZ_JOBS:-$(nproc)}
running=0
for target in build-fuzz/fuzz_*; do
  [[ -x $target && -f $target ]] || continue
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait

found=0
for target in build-fuzz/fuzz_*; do
  [[ -x $target && -f $target ]] || continue
  name=$(basename "$target")
  if ls build-fuzz/findings/"$name"-* >/dev/null 2>&1; then
    echo "fuzz: $name found a failing input: $(ls build-fuzz/findings/"$name"-*) (its output: build-fuzz/logs/$name.log)" >&2
    found=1
  fi
done
((found == 0)) || exit 1
echo "fuzz: no findings"
