#!/usr/bin/env bash
# device_process_cost.sh: on a lent GPU machine, what a GPU process's start and end cost and what
# goes one process at a time (tools/gpu_process_cost.cu), and what other GPU processes do to one
# that launches and waits on small kernels. Logs under $OUT (or ./device-out), the summary last.
#
#   tools/device_process_cost.sh
#   CONCURRENCY="1 8" tools/device_process_cost.sh
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
bin=/tmp/gpu_process_cost
nvcc -O2 -std=c++17 -arch=sm_90 tools/gpu_process_cost.cu -o $bin.cublas -lcublas -lcuda || exit 1
nvcc -O2 -std=c++17 -arch=sm_90 -DNO_CUBLAS tools/gpu_process_cost.cu -o $bin.bare -lcuda || exit 1

# N workers at once, each running the command 4 times: ms a run, runs a second, the mean of each
# phase the processes printed.
at_once() {
  local what=$1 n=$2 t0 p pids=()
  shift 2
  local log="$out/${what}_$n.txt"
  : >"$log"
  t0=$(date +%s%N)
  for ((p = 0; p < n; p++)); do
    (for i in 1 2 3 4; do "$@" >>"$log" 2>&1; done) &
    pids+=($!)
  done
  wait "${pids[@]}"
  local ns=$(($(date +%s%N) - t0))
  say "$(awk -v ns="$ns" -v n="$n" -v w="$what" '
    /^init/ {k++; for (i = 1; i < NF; i += 2) s[$i] += $(i + 1)}
    END {printf "%-24s %2d at once: %6.0f ms a run, %5.1f runs/s;", w, n, ns / 4e6, 4 * n / (ns / 1e9)
         split("init context handle gemm kernel", f, " ")
         for (j = 1; j <= 5; j++) if (k) printf " %s %.0f", f[j], s[f[j]] / k
         printf "\n"}' "$log")"
}

say "--- a process's start and end, N at once (ms a run includes loading and ending)"
for n in ${CONCURRENCY:-1 4 8 16}; do
  at_once bare "$n" $bin.bare start
  at_once cublas_loaded "$n" $bin.cublas start
  at_once cublas_used "$n" $bin.cublas start --cublas
  CUDA_DEVICE_MAX_CONNECTIONS=1 at_once bare_1_connection "$n" $bin.bare start
done
$bin.bare hold 30 & keeper=$!
sleep 1
for n in 1 8; do at_once bare_beside_a_context "$n" $bin.bare start; done
kill $keeper 2>/dev/null
wait $keeper 2>/dev/null

say "--- 3000 small kernels launched and waited for, one at a time, beside:"
loop() { say "$(printf '%-26s' "$1:") $($bin.bare loop 3000)"; }
loop alone
for k in 1 2 3 4 5 6 7; do $bin.bare hold 20 & done
sleep 2
loop "7 idle contexts"
kill $(jobs -p) 2>/dev/null
wait
for k in 1 2 3 4; do (end=$((SECONDS + 12)); while ((SECONDS < end)); do $bin.bare start >/dev/null; done) & done
sleep 1
loop "4 processes starting"
wait
for k in 1 2 3 4 5 6 7; do $bin.bare loop 20000 >/dev/null & done
sleep 1
loop "7 other loops"
kill $(jobs -p) 2>/dev/null
wait
$bin.bare spin 15 &
sleep 1
loop "1 spinning kernel"
wait
say "total: $((SECONDS - start)) s"
