#!/usr/bin/env bash
# TLS termination: kwd-proxy against HAProxy, same certificate, same backend,
# one worker/thread each, on loopback.
#
#   bench/tls_bench.sh BUILD_DIR [SECONDS] [CONNECTIONS]
#
# Measures, for each proxy in turn:
#   - keep-alive requests/s and p99 latency: wrk -t1 -cCONNECTIONS over TLS;
#   - CPU per request: utime+stime of the proxy process (/proc/PID/stat)
#     during the wrk run, divided by the requests wrk completed;
#   - full handshakes/s with resumption off: `openssl s_time -new` (a fresh
#     TLS 1.3 handshake per connection, one request each), two in parallel.
# The backend is a third process (HAProxy answering 200 "ok" itself), so both
# proxies forward to the same, fast upstream. Needs haproxy, wrk, openssl.
# The numbers depend on the machine's load: run it on a quiet machine, and
# compare ratios from the same run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

BUILD=${1:?usage: tls_bench.sh BUILD_DIR [SECONDS] [CONNECTIONS]}
SECONDS_PER_RUN=${2:-10}
CONNECTIONS=${3:-50}
PROXY=$BUILD/kwd-proxy
CONTROLLER=$BUILD/kwd-controller
require_tools haproxy wrk openssl "$PROXY" "$CONTROLLER"

bench_work kwd-tls-bench
WORK=$work

# ---- certificate: EC P-256, like most ingress certificates ----
bench_cert "$WORK"

# ---- the shared backend ----
BACKEND_PORT=$(free_port)
cat >"$WORK/backend.cfg" <<EOF
global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend be
  bind 127.0.0.1:$BACKEND_PORT
  http-request return status 200 content-type text/plain string ok
EOF
haproxy -f "$WORK/backend.cfg" -db >/dev/null 2>&1 &
pids+=($!)
wait_port "$BACKEND_PORT"

# ---- kwd-proxy ----
mkdir -p "$WORK/objects"
cat >"$WORK/objects/objects.yaml" <<EOF
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: bench, namespace: default}
spec:
  kind: java
  healthCheck: {path: /, intervalSeconds: 3600}
  sessionAffinity: {affinityCookie: {enabled: false}}
  backend:
    staticServers:
      - {name: be, address: 127.0.0.1, port: $BACKEND_PORT}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: bench, namespace: default}
spec:
  hosts: []
  defaultRootHandler: java
  defaultGroups: {java: bench}
EOF
"$CONTROLLER" compile --source="dir:$WORK/objects" >"$WORK/snapshot.json"
KWD_PORT=$(free_port)
"$PROXY" serve --snapshot "$WORK/snapshot.json" --listen 127.0.0.1:0 \
  --admin-listen 127.0.0.1:0 --workers 1 --access-log off --log-level warn \
  --tls-listen 127.0.0.1:$KWD_PORT --tls-cert-dir "$WORK/certs" >/dev/null 2>"$WORK/kwd.log" &
KWD_PID=$!
pids+=($KWD_PID)
wait_port "$KWD_PORT"

# ---- HAProxy terminating TLS ----
HAP_PORT=$(free_port)
cat >"$WORK/haproxy.cfg" <<EOF
global
  nbthread 1
  ssl-default-bind-options ssl-min-ver TLSv1.2
  ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305
  ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256
  tune.ssl.default-dh-param 2048
defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$HAP_PORT ssl crt $WORK/haproxy.pem alpn http/1.1
  option forwardfor
  http-request set-header X-Forwarded-Proto https
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  unique-id-format %{+X}o%ci%cp%Ts%rt%pid
  unique-id-header X-Request-Id
  default_backend be
backend be
  server be 127.0.0.1:$BACKEND_PORT
EOF
haproxy -f "$WORK/haproxy.cfg" -db >/dev/null 2>"$WORK/haproxy.log" &
HAP_PID=$!
pids+=($HAP_PID)
wait_port "$HAP_PORT"

keepalive() {  # name pid port
  local name=$1 pid=$2 port=$3
  wrk -t1 -c"$CONNECTIONS" -d1s "https://127.0.0.1:$port/" >/dev/null 2>&1 || true  # warm-up
  local before after out requests rps p99
  before=$(cpu_ticks "$pid")
  out=$(wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency "https://127.0.0.1:$port/")
  after=$(cpu_ticks "$pid")
  requests=$(echo "$out" | awk '/requests in/ {print $1}')
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
  local errors
  errors=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}' | tr '\n' ' ')
  local us_per_req
  us_per_req=$(cpu_us_per "$before" "$after" "$requests" %.1f)
  printf '%-8s keep-alive  %10s req/s  p99 %8s  CPU %6s us/request  %s\n' \
    "$name" "$rps" "$p99" "$us_per_req" "$errors"
}

handshakes() {  # name pid port
  local name=$1 pid=$2 port=$3 total=0
  local outs=() before after
  before=$(cpu_ticks "$pid")
  for i in 1 2; do
    openssl s_time -connect "127.0.0.1:$port" -new -time "$SECONDS_PER_RUN" \
      -www / >"$WORK/s_time.$i" 2>&1 &
    outs+=($!)
  done
  wait "${outs[@]}" || true
  after=$(cpu_ticks "$pid")
  for i in 1 2; do
    local n
    n=$(awk '/connections in [0-9.]+ real/ {print $1; exit}' "$WORK/s_time.$i")
    total=$((total + ${n:-0}))
  done
  printf '%-8s handshakes  %10s /s  CPU %6s us/handshake (s_time -new, 2 clients)\n' \
    "$name" "$(awk -v n=$total -v s="$SECONDS_PER_RUN" 'BEGIN {printf "%.0f", n / s}')" \
    "$(cpu_us_per "$before" "$after" "$total" %.1f)"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2; do
  keepalive kwd "$KWD_PID" "$KWD_PORT"
  keepalive haproxy "$HAP_PID" "$HAP_PORT"
done
for round in 1 2; do
  handshakes kwd "$KWD_PID" "$KWD_PORT"
  handshakes haproxy "$HAP_PID" "$HAP_PORT"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
