#!/usr/bin/env bash
# device_ladder.sh: `repro report --ladder --scenario 2` at the default workload on a lent GPU. The
# climb takes longer than one call may run (10 minutes), so it runs in the background, in its own
# session, and each call follows it for a while:
#
#   tools/device_ladder.sh start [report options]   # build (preset ci) if needed, start, follow
#   tools/device_ladder.sh follow                   # follow the climb already started
#
# FOLLOW_S (default 540) bounds how long a call follows. The report folder and the climb's log are
# /tmp/ladder2 and /tmp/ladder2.log (outside the checkout, which each call replaces); every call
# copies the log, and REPORT.md once written, under $OUT, and prints the rungs climbed so far.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
device_setup
dir=/tmp/ladder2 log=/tmp/ladder2.log pidfile=/tmp/ladder2.pid
case ${1:-follow} in
  start)
    shift
    if [[ ! -x build-ci/repro ]]; then
      t=$SECONDS
      { cmake --preset ci && cmake --build --preset ci -j "$(nproc)" --target repro; } >"$out/build.log" 2>&1 ||
        { tail -30 "$out/build.log"; exit 1; }
      say "build (repro): $((SECONDS - t)) s"
    fi
    rm -rf "$dir" "$log"
    setsid nohup /usr/bin/time -v build-ci/repro report --ladder --scenario 2 --out "$dir" "$@" >"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    say "started: repro report --ladder --scenario 2 --out $dir $* (pid $(cat "$pidfile"))"
    ;;
  follow) ;;
  *) say "usage: device_ladder.sh start|follow"; exit 2 ;;
esac
pid=$(cat "$pidfile" 2>/dev/null)
t0=$SECONDS
while [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && ((SECONDS - t0 < ${FOLLOW_S:-540})); do sleep 5; done
if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then say "still climbing after this call's $((SECONDS - t0)) s"; else say "the climb has ended"; fi
cp "$log" "$out/ladder2.log" 2>/dev/null
[[ -f $dir/REPORT.md ]] && cp "$dir/REPORT.md" "$dir/result.json" "$out/"
grep -E "^repro report: rung [a-z-]+: [a-z_]+ \(|Elapsed|Exit status|error" "$log" | tee -a "$summary"
tail -3 "$log"
say "total: $((SECONDS - start)) s"
