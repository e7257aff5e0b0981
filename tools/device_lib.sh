# device_lib.sh: what every tools/device_*.sh does on a lent GPU machine, sourced by them.
#   device_setup [DEFAULT_OUT]   cd to the source root; $out (= $OUT or DEFAULT_OUT), $summary, say(),
#                                $start (for a "total" line); the GPU's name, driver and memory first in
#                                the summary and in $out/gpu.txt (every figure after it is that GPU's)
#   device_build_ci              configure and build preset ci (logs in $out), say how long; exits on failure
#   device_sections DEFAULTS [NAME ...]  $sections: the NAMEs given, else the words of DEFAULTS;
#                                want NAME says whether NAME is one of them
#   device_pack [KEEP ...]       everything under $out into $out/logs.tar.gz but summary.txt and KEEP
#                                (a call brings back a few files only)
device_setup() {
  cd "$(dirname "${BASH_SOURCE[1]}")/.." || exit 1
  out=${OUT:-${1:-device-out}}
  mkdir -p "$out"
  export PATH="$PATH:/usr/local/cuda/bin"
  summary="$out/summary.txt"
  : >"$summary"
  start=$SECONDS
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$out/gpu.txt" |
    tee -a "$summary"
}

say() { echo "$@" | tee -a "$summary"; }

device_sections() {
  local defaults=$1
  shift
  sections=("$@")
  ((${#sections[@]})) || read -ra sections <<<"$defaults"
}
want() { [[ " ${sections[*]} " == *" $1 "* ]]; }

device_build_ci() {
  local t0=$SECONDS
  cmake --preset ci >"$out/cmake.log" 2>&1 && cmake --build --preset ci -j 16 >"$out/build.log" 2>&1 ||
    { tail -40 "$out/build.log" "$out/cmake.log"; exit 1; }
  say "build: $((SECONDS - t0)) s"
}

device_pack() {
  local keep=(-name logs.tar.gz -o -name summary.txt) k
  for k in "$@"; do keep+=(-o -name "$k"); done
  tar -C "$out" -czf /tmp/device-logs.tar.gz --exclude=logs.tar.gz --exclude=summary.txt . &&
    mv /tmp/device-logs.tar.gz "$out/logs.tar.gz"
  find "$out" -mindepth 1 -maxdepth 1 ! \( "${keep[@]}" \) -exec rm -rf {} +
}
