#!/usr/bin/env bash
# HTTP/2 over TLS (ALPN h2): kwd-proxy against HAProxy 2.6 in one run, on
# loopback (issue 15's performance target).
#
#   bench/h2_bench.sh BUILD_DIR      env: ROUNDS=5 DURATION=10 CONNECTIONS=64 STREAMS=10
#                                    KWD_FLAGS="--io-uring off" (extra kwd-proxy flags)
#
# Both proxies terminate TLS with the same EC P-256 certificate, one worker /
# thread each (kwd --workers 1, HAProxy nbthread 1 with `alpn h2,http/1.1`),
# and forward HTTP/1.1 with keep-alive to the same two nginx backends (one
# nginx process, two ports, a 64-byte answer) weighted 2:1. No stickiness on
# either side (h2load keeps no cookies).
#
# Load: `h2load -cCONNECTIONS -mSTREAMS -t1 -D DURATION` (64 connections x 10
# concurrent streams), ROUNDS interleaved rounds (kwd, HAProxy, kwd, ...).
# Per round: requests/s (h2load), p99 of the request times in h2load's
# --log-file (it prints no percentiles), CPU per request (utime+stime of the
# proxy from /proc/PID/stat around the round, divided by the requests that
# succeeded). The report gives each proxy's medians and the ratios kwd/HAProxy
# against the targets: req/s >= 1.2x, p99 <= 0.8x, CPU/request <= 0.8x.
# Needs haproxy, nginx, h2load (nghttp2-client), openssl. The figures depend
# on the machine's load: compare the ratios from one run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

BUILD=${1:?usage: bench/h2_bench.sh BUILD_DIR   (env: ROUNDS DURATION CONNECTIONS STREAMS)}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
DURATION=${DURATION%s}
CONNECTIONS=${CONNECTIONS:-64}
STREAMS=${STREAMS:-10}
PROXY=$BUILD/kwd-proxy
CONTROLLER=$BUILD/kwd-controller
export PATH=$PATH:/usr/sbin
require_tools haproxy nginx h2load openssl "$PROXY" "$CONTROLLER"

bench_work kwd-h2-bench
WORK=$work

# ---- certificate ----
bench_cert "$WORK"

# ---- backends: one nginx, two ports ----
B1=$(free_port)
B2=$(free_port)
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<EOF
$(nginx_head $WORK/nginx 4096)
  keepalive_timeout 300s;
  server { listen 127.0.0.1:$B1; location / { return 200 "$BENCH_BODY"; } }
  server { listen 127.0.0.1:$B2; location / { return 200 "$BENCH_BODY"; } }
}
EOF
nginx -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" &
pids+=($!)
wait_port "$B1"
wait_port "$B2"

# ---- kwd-proxy ----
mkdir -p "$WORK/objects"
cat >"$WORK/objects/objects.yaml" <<EOF
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: bench, namespace: default}
spec:
  kind: java
  strategy: weighted_round_robin
  healthCheck: {path: /, intervalSeconds: 3600}
  sessionAffinity: {affinityCookie: {enabled: false}}
  backend:
    staticServers:
      - {name: a, address: 127.0.0.1, port: $B1, capacity: 2}
      - {name: b, address: 127.0.0.1, port: $B2, capacity: 1}
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
KWD_AFFINITY_KEY=bench "$PROXY" serve --snapshot "$WORK/snapshot.json" \
  --listen 127.0.0.1:"$(free_port)" --admin-listen 127.0.0.1:"$(free_port)" --workers 1 \
  --access-log off --log-level warn ${KWD_FLAGS:-} \
  --tls-listen 127.0.0.1:"$KWD_PORT" --tls-cert-dir "$WORK/certs" >/dev/null 2>"$WORK/kwd.log" &
KWD_PID=$!
pids+=($KWD_PID)
wait_port "$KWD_PORT"

# ---- HAProxy ----
HAP_PORT=$(free_port)
cat >"$WORK/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 4096
  ssl-default-bind-options ssl-min-ver TLSv1.2
defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$HAP_PORT ssl crt $WORK/haproxy.pem alpn h2,http/1.1
  default_backend be
backend be
  balance roundrobin
  server a 127.0.0.1:$B1 weight 2
  server b 127.0.0.1:$B2 weight 1
EOF
haproxy -f "$WORK/haproxy.cfg" -db >/dev/null 2>"$WORK/haproxy.log" &
HAP_PID=$!
pids+=($HAP_PID)
wait_port "$HAP_PORT"


# h2load must really speak h2 through each proxy, and get 200s.
for port in "$KWD_PORT" "$HAP_PORT"; do
  out=$(timeout 60 h2load -n 100 -c 2 -m 10 -t 1 "https://127.0.0.1:$port/" 2>&1) || true
  if ! grep -q "Application protocol: h2" <<<"$out" || ! grep -q "status codes: 100 2xx" <<<"$out"; then
    echo "h2load against port $port did not get 100 HTTP/2 2xx answers:" >&2
    echo "$out" >&2
    exit 1
  fi
done

round() {  # name pid port
  local name=$1 pid=$2 port=$3 log=$WORK/$1.requests
  local before after out
  before=$(cpu_ticks "$pid")
  # (h2load has been seen hanging on a loaded machine: bounded.)
  out=$(timeout $((DURATION + 60)) h2load -c "$CONNECTIONS" -m "$STREAMS" -t 1 -D "$DURATION" \
    --log-file="$log" "https://127.0.0.1:$port/" 2>&1) || true
  after=$(cpu_ticks "$pid")
  local rps succeeded failed p99 cpu
  rps=$(awk '/^finished in/ {print $4}' <<<"$out")
  succeeded=$(awk '/^requests:/ {print $8}' <<<"$out")
  failed=$(awk '/^requests:/ {print $10}' <<<"$out")
  # Third column: microseconds until the end of the response.
  p99=$(awk '{print $3}' "$log" | sort -n | awk '{v[NR] = $1} END {i = int(NR * 0.99); if (i < 1) i = 1; printf "%.2f", v[i] / 1000}')
  cpu=$(cpu_us_per "$before" "$after" "$succeeded" %.2f)
  printf '%-8s round %d  %10s req/s  p99 %7s ms  CPU %6s us/request  (%s ok, %s failed)\n' \
    "$name" "$r" "$rps" "$p99" "$cpu" "${succeeded:-0}" "${failed:-?}"
  if [[ -z $succeeded || $succeeded == 0 ]]; then
    echo "$name round $r: no request succeeded, round left out" >&2
    tail -5 <<<"$out" >&2
    rm -f "$log"
    return
  fi
  echo "$rps" >>"$WORK/$name.rps"
  echo "$p99" >>"$WORK/$name.p99"
  echo "$cpu" >>"$WORK/$name.cpu"
  rm -f "$log"
}

echo "h2load -c$CONNECTIONS -m$STREAMS -t1 -D ${DURATION}s, $ROUNDS interleaved rounds, TLS ALPN h2"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Warm-up: connection pools, TLS session caches, page cache.
for port in "$KWD_PORT" "$HAP_PORT"; do
  timeout 60 h2load -c "$CONNECTIONS" -m "$STREAMS" -t 1 -D 2 "https://127.0.0.1:$port/" >/dev/null 2>&1 || true
done
for r in $(seq 1 "$ROUNDS"); do
  round kwd "$KWD_PID" "$KWD_PORT"
  round haproxy "$HAP_PID" "$HAP_PORT"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

kwd_rps=$(median <"$WORK/kwd.rps")
hap_rps=$(median <"$WORK/haproxy.rps")
kwd_p99=$(median <"$WORK/kwd.p99")
hap_p99=$(median <"$WORK/haproxy.p99")
kwd_cpu=$(median <"$WORK/kwd.cpu")
hap_cpu=$(median <"$WORK/haproxy.cpu")
echo
printf '%-8s %12s %12s %16s\n' median req/s "p99 ms" "CPU us/request"
printf '%-8s %12s %12s %16s\n' kwd "$kwd_rps" "$kwd_p99" "$kwd_cpu"
printf '%-8s %12s %12s %16s\n' haproxy "$hap_rps" "$hap_p99" "$hap_cpu"
ratio() {  # label kwd haproxy op target
  awk -v l="$1" -v k="$2" -v h="$3" -v op="$4" -v t="$5" 'BEGIN {
    r = h > 0 ? k / h : 0
    ok = (op == ">=") ? r >= t : r <= t
    printf "kwd/haproxy %-14s %6.2fx  (target %s %.1fx: %s)\n", l, r, op, t, ok ? "met" : "MISSED"
  }'
}
ratio req/s "$kwd_rps" "$hap_rps" ">=" 1.2
ratio p99 "$kwd_p99" "$hap_p99" "<=" 0.8
ratio CPU/request "$kwd_cpu" "$hap_cpu" "<=" 0.8
