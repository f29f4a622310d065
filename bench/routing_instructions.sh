#!/usr/bin/env bash
# Instructions per routing decision (Router::Route, everything it calls) for
# each routing_bench benchmark, counted by callgrind: the steady figure on a
# shared machine, where cpu_time moves with the load of the other cores and
# hardware counters are not available (perf stat: not supported on this VM).
# Collection is on only inside Router::Route; the count is divided by the
# calls of Route (the warm-up pass over the 1,024 requests included).
#
# usage: bench/routing_instructions.sh [BUILD_DIR] [FILTER]
#   BUILD_DIR holds routing_bench (default build-bench); FILTER is a
#   --benchmark_filter regex (default: every BM_Route benchmark).
# Needs valgrind and python3; about 10 s per benchmark.
set -euo pipefail
build=${1:-build-bench}
filter=${2:-BM_Route}
bench=$build/routing_bench
[[ -x $bench ]] || { echo "no $bench: run make bench (or give the build directory)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
work=$(mktemp -d /tmp/routing_instructions.XXXXXX)
trap 'rm -rf "$work"' EXIT

for name in $("$bench" --benchmark_list_tests --benchmark_filter="$filter"); do
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.out" --collect-atstart=no \
    --toggle-collect='kwd::routing::Router::Route(kwd::routing::Request const&)' \
    "$bench" --benchmark_filter="^$name\$" --benchmark_min_time=0.05 >/dev/null 2>&1
  python3 - "$work/$name.out" "$name" <<'PY'
import re, sys
total = calls = 0
names = {}
caller = callee = None
for line in open(sys.argv[1]):
    if line.startswith("totals:"):
        total = int(line.split()[1])
        continue
    m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
    if m:
        kind, ident, name = m.groups()
        if name:
            names[ident] = name.strip()
        if kind == "fn":
            caller = names.get(ident, "")
        else:
            callee = names.get(ident, "")
        continue
    # Calls into Route from outside it (collection starts at Route's entry).
    if line.startswith("calls=") and callee.startswith("kwd::routing::Router::Route(") \
            and not caller.startswith("kwd::routing::Router::Route("):
        calls += int(line.split("=")[1].split()[0])
print(f"{sys.argv[2]:<44} {total / calls if calls else float('nan'):8.0f} instructions/decision"
      f"  ({total} over {calls} decisions)")
PY
done
