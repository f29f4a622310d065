#!/usr/bin/env bash
# Usage: bench/passthrough_bench.sh [SECONDS]   (from the repository root, after `make build`)
# New TLS passthrough connections per second through kwd-proxy
# (--passthrough-listen) and through HAProxy 2.6 `mode tcp` routing by
# req.ssl_sni after `tcp-request inspect-delay`, in the same run, one worker
# (thread) each, to the same `openssl s_server` backend. The client is
# a Python ssl loop (openssl s_time cannot send SNI): connect, full TLS 1.3
# handshake with SNI (no resumption), close; four client processes at once.
# Both runs alternate twice; the last line prints the ratio kwd / HAProxy.
set -eu
source "$(dirname "$0")/lib.sh"
seconds=${1:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
proxy=${KWD_PROXY:-$root/build/kwd-proxy}
controller=${KWD_CONTROLLER:-$root/build/kwd-controller}
bench_work kwd-passthrough-bench
dir=$work
trap 'exit 130' INT TERM

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/k.pem" \
  -out "$dir/c.pem" -days 2 -subj /CN=bench.example.test \
  -addext subjectAltName=DNS:bench.example.test >/dev/null 2>&1
backend=$(free_port)
openssl s_server -accept "127.0.0.1:$backend" -cert "$dir/c.pem" -key "$dir/k.pem" -quiet \
  </dev/null >/dev/null 2>&1 &
pids+=($!)

mkdir "$dir/objects"
cat >"$dir/objects/o.yaml" <<YAML
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: tls, namespace: bench}
spec:
  kind: java
  healthCheck: {path: /, intervalSeconds: 3600, unhealthyThreshold: 100}
  backend:
    staticServers:
      - {name: s1, address: 127.0.0.1, port: $backend}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: tls, namespace: bench}
spec:
  hosts: [bench.example.test]
  passthroughGroup: tls
YAML
"$controller" compile --source="dir:$dir/objects" >"$dir/snapshot.json"
kwd_port=$(free_port)
"$proxy" serve --snapshot "$dir/snapshot.json" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --passthrough-listen "127.0.0.1:$kwd_port" --workers 1 --access-log off --log-level error \
  >/dev/null 2>&1 &
pids+=($!)

haproxy_port=$(free_port)
cat >"$dir/haproxy.cfg" <<CFG
global
  nbthread 1
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend passthrough
  bind 127.0.0.1:$haproxy_port
  tcp-request inspect-delay 5s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend tls if { req.ssl_sni -i bench.example.test }
backend tls
  server s1 127.0.0.1:$backend
CFG
haproxy -f "$dir/haproxy.cfg" -db >/dev/null 2>&1 &
pids+=($!)
sleep 1

rate() {
  python3 - "$1" "$seconds" <<'PY'
import multiprocessing, socket, ssl, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
def run(queue):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        with socket.create_connection(("127.0.0.1", port)) as s:
            with ctx.wrap_socket(s, server_hostname="bench.example.test"):
                n += 1
    queue.put(n)
queue = multiprocessing.Queue()
workers = [multiprocessing.Process(target=run, args=(queue,)) for _ in range(4)]
for w in workers: w.start()
total = sum(queue.get() for _ in workers)
for w in workers: w.join()
print("%.1f" % (total / seconds))
PY
}
kwd_total=0
haproxy_total=0
for round in 1 2; do
  k=$(rate "$kwd_port")
  h=$(rate "$haproxy_port")
  echo "round $round: kwd $k conn/s, haproxy $h conn/s"
  kwd_total=$(echo "$kwd_total + $k" | bc -l)
  haproxy_total=$(echo "$haproxy_total + $h" | bc -l)
done
echo "kwd/haproxy new passthrough connections/s: $(echo "scale=2; $kwd_total / $haproxy_total" | bc -l)"
