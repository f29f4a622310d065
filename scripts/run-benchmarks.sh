#!/usr/bin/env bash
# `make bench`: every Google Benchmark program of the bench build, then the
# proxy comparison against HAProxy and nginx (scripts/bench-proxies.sh).
set -euo pipefail
dir=${1:-build-bench}
for b in "$dir"/*_bench; do
  [[ -x "$b" ]] || continue
  echo "== $(basename "$b")"
  "$b" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
done
echo "== kwd-proxy vs HAProxy vs nginx"
"$(dirname "$0")/bench-proxies.sh" "$dir"
