#!/usr/bin/env bash
# Regenerates dataplane/kwd-proxy.order, the function order static_link.sh
# hands to lld (--symbol-ordering-file) when it links kwd-proxy.
#
# Why: the kernel maps a file's pages around each page fault (fault-around,
# 64 KiB or a whole page-cache folio), so a function run at start-up makes
# its neighbours resident too. Unordered, the code an idle proxy runs (static
# initialisers, snapshot parsing, OpenSSL and protobuf set-up, one request)
# is spread over most of the 10 MiB of text, and 5-6 MiB of it is resident.
# Placed together, it takes about 2.7 MiB (bench/memory_bench.sh: idle RSS
# 10.4 -> 8.1 MiB with a 100-group snapshot).
#
# How: runs kwd-proxy under callgrind with a small snapshot and two Python
# backends, sends a few requests (routed, unrouted, admin), stops it and
# writes every function callgrind saw run that the binary defines, in the
# order callgrind first names them. A stale file costs only RSS: symbols it
# names that no longer exist are ignored, new functions go after the listed
# ones. Rerun after large changes to start-up or the request path.
#
# usage: dataplane/symbol_order.sh [BUILD_DIR]  (default build-bench; needs
#   kwd-proxy and kwd-controller there, valgrind, python3, curl)
set -euo pipefail
build=${1:-build-bench}
here=$(cd "$(dirname "$0")" && pwd)
proxy=$build/kwd-proxy
controller=$build/kwd-controller
for bin in "$proxy" "$controller"; do
  [[ -x $bin ]] || { echo "no $bin" >&2; exit 1; }
done
for tool in valgrind python3 curl nm; do
  command -v $tool >/dev/null || { echo "missing $tool" >&2; exit 1; }
done

work=$(mktemp -d /tmp/kwd-symbol-order.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
B1=$(free_port); B2=$(free_port); PORT=$(free_port); ADMIN=$(free_port)
for port in $B1 $B2; do
  python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work" >/dev/null 2>&1 &
  pids+=($!)
done

mkdir -p "$work/objects"
for i in 0 1 2 3; do
  kind=abap; name=g$i
  (( i % 2 )) && kind=java
  (( i == 0 )) && name=diag
  (( i == 1 )) && name=j2ee
  cat >> "$work/objects/objects.yaml" <<YAML
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: $name, namespace: order}
spec:
  kind: $kind
  healthCheck: {path: /, intervalSeconds: 3600, unhealthyThreshold: 100}
  backend:
    staticServers:
      - {name: s${i}a, address: 127.0.0.1, port: $B1, capacity: 2}
      - {name: s${i}b, address: 127.0.0.1, port: $B2, capacity: 1}
---
YAML
done
cat >> "$work/objects/objects.yaml" <<YAML
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: order, namespace: order}
spec:
  hosts: []
  defaultRootHandler: java
  rules:
    - {prefix: /app2/, kind: abap, logonGroup: g2}
    - {prefix: /app3/, kind: java, logonGroup: g3}
YAML
"$controller" compile --source="dir:$work/objects" > "$work/snapshot.json"

KWD_AFFINITY_KEY=order valgrind --tool=callgrind --demangle=no \
  --callgrind-out-file="$work/callgrind.out" \
  "$proxy" serve --snapshot "$work/snapshot.json" --listen 127.0.0.1:$PORT \
  --admin-listen 127.0.0.1:$ADMIN --workers 1 --access-log off >"$work/proxy.out" 2>"$work/proxy.log" &
proxy_pid=$!
pids+=($proxy_pid)
up=0
for _ in $(seq 1 300); do
  if curl -fsS -o /dev/null "http://127.0.0.1:$ADMIN/healthz" 2>/dev/null; then up=1; break; fi
  sleep 0.2
done
(( up )) || { echo "kwd-proxy did not start under valgrind" >&2; cat "$work/proxy.log" >&2; exit 1; }
# As memory_bench.sh does: requests through the proxy, one keep-alive pair.
curl -s -o /dev/null -o /dev/null "http://127.0.0.1:$PORT/" "http://127.0.0.1:$PORT/app2/x" || true
curl -s -o /dev/null "http://127.0.0.1:$PORT/app3/x" || true
curl -s -o /dev/null "http://127.0.0.1:$ADMIN/metrics" || true
sleep 3
kill -INT $proxy_pid
wait $proxy_pid || true

nm --defined-only "$proxy" | awk '{print $3}' | sort -u > "$work/defined"
python3 - "$work/callgrind.out" "$work/defined" > "$here/kwd-proxy.order" <<'PY'
import re, sys
defined = set(open(sys.argv[2]).read().split())
seen = set()
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"c?fn=\(\d+\) (\S+)", line)
    if not m:
        continue
    name = m.group(1).split("'")[0]
    if name in defined and name not in seen:
        seen.add(name)
        print(name)
PY
echo "wrote $here/kwd-proxy.order: $(wc -l < "$here/kwd-proxy.order") functions"
