#!/usr/bin/env bash
# Runs every benchmark program of a bench build directory and prints the results.
set -euo pipefail
dir=${1:-build-bench}
for b in "$dir"/*_bench; do
  [[ -x "$b" ]] || continue
  echo "== $(basename "$b")"
  "$b" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
done
