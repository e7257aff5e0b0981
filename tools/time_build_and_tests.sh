#!/usr/bin/env bash
# time_build_and_tests.sh: where the time of a build and its tests goes. Builds a preset of
# CMakePresets.json from scratch into a fresh folder, runs its tests, and prints
#   - each build step's time (ninja's .ninja_log: end - start per output), the 25 longest;
#   - the build's wall time, the sum of its steps' times (CPU-bound: about cores x wall) and
#     the number of steps;
#   - each CTest test's time and result, longest first, and CTest's wall time.
#
#   tools/time_build_and_tests.sh [PRESET] [extra ctest arguments]   # PRESET: ci by default
#
# Folder: build-timing-PRESET (removed first; TIMING_DIR names another). ccache is kept out
# (CCACHE_DISABLE=1) so that "from scratch" means every file compiled; TIMING_CCACHE=1 keeps it.
# The test preset's own filter and environment apply (asan: the CPU tests, ASAN_OPTIONS);
# TIMING_TESTS=0 only builds. Writes the report to stdout and to FOLDER/timing.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-ci}
[[ $# -gt 0 ]] && shift
dir=${TIMING_DIR:-build-timing-$preset}
[[ ${TIMING_CCACHE:-0} == 1 ]] || export CCACHE_DISABLE=1
export PATH="$PATH:/usr/local/cuda/bin"

t_total=$SECONDS
started="$(date -u +%Y-%m-%dT%H:%M:%SZ)" load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
# The machine's busy CPU time (/proc/stat: user, nice, system, irq, softirq; in 1/100 s): at the
# end, what other processes used meanwhile tells how much the timings were slowed by sharing.
busy_cs() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
busy_start=$(busy_cs)
t0=$SECONDS
scripts/setup_deps.sh
t_deps=$((SECONDS - t0))

rm -rf "$dir"
# The preset's settings, its folder replaced (the command line's -B wins over binaryDir).
t0=$SECONDS
cmake --preset "$preset" -B "$dir" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
mv "$dir.configure.log" "$dir/configure.log"
t_configure=$((SECONDS - t0))

t0=$SECONDS
# The build preset's targets (release presets build repro only), as `cmake --build --preset` would.
targets=$(python3 - "$preset" <<'EOF'
import json, sys
presets = json.load(open("CMakePresets.json"))["buildPresets"]
print(" ".join(next((p.get("targets", []) for p in presets if p["name"] == sys.argv[1]), [])))
EOF
)
target_args=()
for t in $targets; do target_args+=(--target "$t"); done
cmake --build "$dir" -j "$(nproc)" "${target_args[@]}" >"$dir/build.log" 2>&1 || { tail -50 "$dir/build.log"; exit 1; }
t_build=$((SECONDS - t0))

t_tests=0
if [[ ${TIMING_TESTS:-1} == 1 ]]; then
  t0=$SECONDS
  # The test preset's label filter and environment (inherits resolved), run in the fresh folder:
  # `ctest --preset` runs in the preset's own folder whatever --test-dir says.
  mapfile -t preset_args < <(python3 - "$preset" <<'PY'
import json, sys
presets = {p["name"]: p for p in json.load(open("CMakePresets.json"))["testPresets"]}
chain, name = [], sys.argv[1]
while name in presets:
    chain.append(presets[name])
    name = presets[name].get("inherits")
env, label = {}, None
for p in reversed(chain):
    env.update(p.get("environment", {}))
    label = p.get("filter", {}).get("include", {}).get("label", label)
for k, v in env.items():
    print(f"{k}={v}")
if label:
    print("--label-regex")
    print(label)
PY
)
  env_args=() label_args=()
  for a in "${preset_args[@]}"; do
    if [[ $a == *=* && ${#label_args[@]} -eq 0 ]]; then env_args+=("$a"); else label_args+=("$a"); fi
  done
  env "${env_args[@]}" ctest --test-dir "$dir" -j "$(nproc)" --output-on-failure "${label_args[@]}" "$@" \
    >"$dir/ctest.log" 2>&1 || true
  t_tests=$((SECONDS - t0))
fi

# This script's children's CPU time (bash's `times`, second line: user and system, e.g. 1m2.5s),
# and the rest of the machine's busy time since the start.
times >"$dir/times.txt"
ours_s=$(tail -1 "$dir/times.txt" | awk '{t = 0; for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); t += a[1] * 60 + a[2]} printf "%.0f", t}')
others_s=$((($(busy_cs) - busy_start) / 100 - ours_s))
{
  echo "# tools/time_build_and_tests.sh $preset $*"
  echo "# started $started, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "$( [[ -n $(git status --porcelain 2>/dev/null) ]] && echo '(with uncommitted changes)')"
  echo "# $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
       "$(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME"), $(g++ --version | head -1)," \
       "nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'), load average at the start: $load_before, at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# ccache: $([[ ${CCACHE_DISABLE:-0} == 1 ]] && echo 'disabled' || echo 'allowed')"
  echo "# CPU time: this run's $ours_s s, other processes' meanwhile $others_s s (0 on an otherwise idle machine)"
  echo
  echo "== build steps (.ninja_log: end - start), the 25 longest"
  # .ninja_log v5: start_ms end_ms mtime output hash; the same output twice: the last counts.
  awk -F'\t' 'NR > 1 && !/^#/ {t[$4] = ($2 - $1) / 1000} END {for (o in t) printf "%8.1f s  %s\n", t[o], o}' \
    "$dir/.ninja_log" | sort -rn | head -25
  awk -F'\t' 'NR > 1 && !/^#/ {t[$4] = ($2 - $1) / 1000; if ($2 > end) end = $2}
    END {for (o in t) {sum += t[o]; n++}
         printf "build steps: %d, their times summed %.0f s, first start to last end %.0f s\n", n, sum, end / 1000}' \
    "$dir/.ninja_log"
  echo
  if [[ ${TIMING_TESTS:-1} == 1 ]]; then
    echo "== CTest tests, longest first"
    # "  3/45 Test  #7: cpu.sweep ..........   Passed   61.23 sec"
    sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [. *]*([A-Za-z*][^0-9]*[A-Za-z*]) +([0-9.]+) sec.*/\3 \1 \2/p' \
      "$dir/ctest.log" | sort -rn | awk '{name = $2; $1 = $1; t = $1; $1 = ""; $2 = ""; sub(/^ +/, ""); printf "%8.1f s  %-24s %s\n", t, name, $0}'
    grep -E '^[0-9]+% tests passed|^Total Test time' "$dir/ctest.log" || true
    echo
  fi
  echo "== totals"
  echo "setup_deps.sh  ${t_deps} s"
  echo "configure      ${t_configure} s"
  echo "build          ${t_build} s"
  [[ ${TIMING_TESTS:-1} == 1 ]] && echo "ctest          ${t_tests} s"
  echo "all            $((SECONDS - t_total)) s"
} | tee "$dir/timing.txt"
