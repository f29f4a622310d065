#!/usr/bin/env bash
# Scheduler trace of kwd variants and HAProxy (bench/PROFILE.md): per contender, a 4 s
# `wrk -t1 -c64` with `perf record` of sched_switch/sched_wakeup/sched_migrate_task on
# all CPUs for 1 s in its middle, then sched_summary.py's account. VARIANTS and BIN as in
# loop_variants.sh:  VARIANTS="base||" flock -o /tmp/kwd-bench.lock bench/plain_shapes/sched_probe.sh
export WORK=${WORK:-/tmp/kwd-loop-variants}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"
B1=19501; B2=19502; HAP=19581
BIN=${BIN:-build-bench/kwd-proxy}
start_variants
comm=$(basename "$BIN" | cut -c1-15)
for spec in "${specs[@]}" hap:$HAP; do IFS=: read -r name port _ <<<"$spec"
  wrk -t1 -c64 -d1s http://127.0.0.1:$port/ >/dev/null 2>&1
  wrk -t1 -c64 -d4s http://127.0.0.1:$port/ >$W/wrk-$name.txt 2>&1 &
  w=$!
  sleep 1.5
  perf record -q -o $W/perf-$name.data -e sched:sched_switch -e sched:sched_wakeup \
    -e sched:sched_migrate_task -a -- sleep 1 2>/dev/null
  wait $w
  echo "== $name $(grep Requests/sec $W/wrk-$name.txt)"
  perf script -i $W/perf-$name.data -F comm,tid,cpu,time,event,trace 2>/dev/null |
    python3 "$here/sched_summary.py" "wrk,nginx,$comm,haproxy"
done
