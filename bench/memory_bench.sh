#!/usr/bin/env bash
# Memory of kwd-proxy next to HAProxy 2.6 and nginx 1.22, in one run, on loopback.
#
# For each shape, each proxy is started afresh (configured for that shape
# only), and its VmRSS is read twice:
# 1. Idle RSS: kwd-proxy serve with a SNAPSHOT_GROUPS-group snapshot (compiled by
#    kwd-controller from generated LogonGroups and one UrlMapping), HAProxy
#    and nginx configured as in scripts/bench-proxies.sh (one worker each,
#    the same two nginx backends weighted 2:1), VmRSS 2 s after start.
# 2. RSS under N idle keep-alive connections: bench/memory_client.py (one
#    asyncio process, /usr/bin/python3) opens them to the proxy, sends one
#    request on each, reads the answer and keeps them all open; VmRSS is read
#    2 s after the last answer. The per-connection figure is
#    (RSS with connections - idle RSS) / connections.
# 3. Idle wake-ups (plain shape): how often the proxy's threads went to sleep
#    (voluntary context switches, all threads) per second over
#    IDLE_WAKE_SECONDS with no traffic, after the idle RSS: what a proxy
#    with nothing to do costs in CPU wake-ups.
# Shapes: plain (HTTP/1.1, CONNECTIONS), tls (HTTP/1.1 over TLS 1.3, ALPN
# http/1.1, CONNECTIONS) and h2 (HTTP/2 over TLS 1.3, ALPN h2,
# H2_CONNECTIONS); one EC P-256 certificate (bench_cert) for all proxies.
# HAProxy reserves two descriptors per connection, so under this machine's
# descriptor limit (ulimit -Hn) it holds fewer: the table says how many, and
# the "RSS with N" rows compare idle + N x its per-connection figure.
#
# Targets: issue 16: kwd idle RSS <= 10 MiB with 100 groups; <= 64 MiB with
# 10,000 idle connections. Issue 25: with N idle connections of each shape
# kwd's RSS <= HAProxy's (ratio <= 1.00x).
#
# usage: bench/memory_bench.sh [BUILD_DIR]
#   env: SNAPSHOT_GROUPS=100 CONNECTIONS=10000 H2_CONNECTIONS=1000
#        PROXIES="kwd haproxy nginx" SHAPES="plain tls h2"
#        H2_REQUESTS=1 (requests one after the other on each h2 connection
#        before it is left idle) IDLE_WAKE_SECONDS=10
#        MEMORY_PORT_BASE (unset: free ports the kernel picks; set: it to
#        MEMORY_PORT_BASE+5 on 127.0.0.1, for a machine shared by several runs)
#   BUILD_DIR holds kwd-proxy and kwd-controller (default build-bench).
# Prints a table per shape and BENCH-ROW lines for scripts/run-benchmarks.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
client_py=$(cd "$(dirname "$0")" && pwd)/memory_client.py
build=${1:-build-bench}
groups=${SNAPSHOT_GROUPS:-100}
conns=${CONNECTIONS:-10000}
h2_conns=${H2_CONNECTIONS:-1000}
h2_requests=${H2_REQUESTS:-1}
proxies=${PROXIES:-kwd haproxy nginx}
shapes=${SHAPES:-plain tls h2}
proxy_bin=$build/kwd-proxy
controller_bin=$build/kwd-controller
for bin in "$proxy_bin" "$controller_bin"; do
  [[ -x $bin ]] || { echo "no $bin: run make bench (or give the build directory)" >&2; exit 1; }
done
export PATH=$PATH:/usr/sbin
for tool in haproxy nginx python3 openssl /usr/bin/python3; do
  command -v $tool >/dev/null || { echo "missing $tool" >&2; exit 1; }
done
if [[ " $shapes " == *" h2 "* ]] && ! /usr/bin/python3 -c 'import h2' 2>/dev/null; then
  echo "the h2 shape needs python3-h2 for /usr/bin/python3 (or SHAPES=\"plain tls\")" >&2
  exit 1
fi

bench_work kwd-membench

# Free loopback ports (other benchmarks may run on the machine), or the six
# from MEMORY_PORT_BASE.
if [[ -n ${MEMORY_PORT_BASE:-} ]]; then
  base=$MEMORY_PORT_BASE
  B1=$base B2=$((base + 1)) KWD=$((base + 2)) HAP=$((base + 3)) NGX=$((base + 4))
  KWD_PLAIN=$((base + 5))
else
  B1=$(free_port); B2=$(free_port); KWD=$(free_port); HAP=$(free_port); NGX=$(free_port)
  KWD_PLAIN=
fi
fd_limit=$(ulimit -Hn)
ulimit -n "$fd_limit"
bench_cert "$work"

# --- backends: one nginx, two ports (as in scripts/bench-proxies.sh) ---
mkdir -p "$work/backend" "$work/nginx" "$work/objects"
cat > "$work/backend/nginx.conf" <<CONF
$(nginx_head $work/backend 4096)
$(nginx_answer $B1 A)
$(nginx_answer $B2 B)
}
CONF
nginx -c "$work/backend/nginx.conf" -e "$work/backend/error.log" &
pids+=($!)

# --- kwd: SNAPSHOT_GROUPS logon groups (the first two are the SAP internal groups
# diag and j2ee that take what no rule names), one URL rule each ---
python3 - "$groups" "$B1" "$B2" > "$work/objects/objects.yaml" <<'PY'
import sys
count, b1, b2 = int(sys.argv[1]), sys.argv[2], sys.argv[3]
names = ["diag", "j2ee"] + ["g%03d" % i for i in range(max(count - 2, 0))]
names = names[:count]
docs = []
for i, name in enumerate(names):
    kind = "abap" if i % 2 == 0 else "java"
    docs.append(f"""apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {{name: {name}, namespace: bench}}
spec:
  kind: {kind}
  healthCheck: {{path: /, intervalSeconds: 3600, unhealthyThreshold: 100}}
  backend:
    staticServers:
      - {{name: s{i}a, address: 127.0.0.1, port: {b1}, capacity: 2}}
      - {{name: s{i}b, address: 127.0.0.1, port: {b2}, capacity: 1}}
""")
rules = "\n".join(f"    - {{prefix: /app{i}/, kind: {'abap' if i % 2 == 0 else 'java'}, logonGroup: {n}}}"
                  for i, n in enumerate(names))
docs.append(f"""apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {{name: bench, namespace: bench}}
spec:
  hosts: []
  defaultRootHandler: java
  rules:
{rules}
""")
print("---\n".join(docs), end="")
PY
"$controller_bin" compile --source="dir:$work/objects" > "$work/snapshot.json"

# HAProxy's maxconn: what the descriptor limit allows (two descriptors per
# connection plus a few).
hap_maxconn=$(( (fd_limit - 200) / 2 ))
(( hap_maxconn > conns + 100 )) && hap_maxconn=$((conns + 100))

# Starts proxy NAME configured for SHAPE, listening on its port; sets $proxy_pid.
start_proxy() {  # NAME SHAPE
  local name=$1 shape=$2
  case $name in
    kwd)
      local tls=()
      [[ $shape != plain ]] && tls=(--tls-listen 127.0.0.1:$KWD --tls-cert-dir "$work/certs")
      local plain=127.0.0.1:$KWD
      [[ $shape != plain ]] && plain=127.0.0.1:${KWD_PLAIN:-$(free_port)}
      KWD_AFFINITY_KEY=bench "$proxy_bin" serve --snapshot "$work/snapshot.json" --listen "$plain" \
        --admin-listen 127.0.0.1:0 --workers 1 --access-log off "${tls[@]}" \
        >"$work/kwd.out" 2>"$work/kwd.log" &
      ;;
    haproxy)
      # As in scripts/bench-proxies.sh (TLS: as in bench/tls_bench.sh and h2_bench.sh).
      local bind="bind 127.0.0.1:$HAP"
      [[ $shape == tls ]] && bind+=" ssl crt $work/haproxy.pem alpn http/1.1"
      [[ $shape == h2 ]] && bind+=" ssl crt $work/haproxy.pem alpn h2"
      cat > "$work/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn $hap_maxconn
$(haproxy_defaults 600s)
$(haproxy_app_backend $B1 $B2)
frontend web
  $bind
  default_backend app
CONF
      haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
      ;;
    nginx)
      # As in scripts/bench-proxies.sh, with room for the connections:
      # worker_connections is preallocated, so its idle RSS is higher than
      # with bench-proxies.sh's 4096.
      local listen="listen 127.0.0.1:$NGX;"
      [[ $shape == tls ]] && listen="listen 127.0.0.1:$NGX ssl;"
      [[ $shape == h2 ]] && listen="listen 127.0.0.1:$NGX ssl http2;"
      local certs=""
      [[ $shape != plain ]] && certs="ssl_certificate $work/certs/bench.crt; ssl_certificate_key $work/certs/bench.key; ssl_protocols TLSv1.2 TLSv1.3;"
      cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile $fd_limit;
daemon off;
master_process off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections $((fd_limit - 100)); }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 600s;
  upstream app { server 127.0.0.1:$B1 weight=2; server 127.0.0.1:$B2 weight=1; keepalive 64; }
  server {
    $listen
    $certs
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
      nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
      ;;
  esac
  proxy_pid=$!
  pids+=($proxy_pid)
}
stop_proxy() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
wait_answer() {  # URL: 10 s at most
  for _ in $(seq 1 100); do
    curl -kfsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$1 not answering" >&2
  cat "$work"/*.log "$work"/nginx/error.log >&2 2>/dev/null || true
  exit 1
}
wait_answer "http://127.0.0.1:$B1/"
wait_answer "http://127.0.0.1:$B2/"

declare -A port=([kwd]=$KWD [haproxy]=$HAP [nginx]=$NGX)
declare -A idle loaded held wakes
idle_wake_seconds=${IDLE_WAKE_SECONDS:-10}
for shape in $shapes; do
  count=$conns
  [[ $shape == h2 ]] && count=$h2_conns
  scheme=http
  [[ $shape != plain ]] && scheme=https
  for name in $proxies; do
    start_proxy $name $shape
    wait_answer "$scheme://127.0.0.1:${port[$name]}/"
    sleep 2
    idle[$name,$shape]=$(rss_kib $proxy_pid)
    if [[ $shape == plain ]]; then
      before=$(sleeps $proxy_pid)
      sleep "$idle_wake_seconds"
      wakes[$name,$shape]=$(awk -v a="$(sleeps $proxy_pid)" -v b="$before" -v s="$idle_wake_seconds" \
        'BEGIN {printf "%.1f", (a - b) / s}')
    fi
    want=$count
    [[ $name == haproxy ]] && (( want > hap_maxconn - 10 )) && want=$((hap_maxconn - 10))
    rm -f "$work/ready"
    /usr/bin/python3 "$client_py" $shape ${port[$name]} "$want" "$work/ready" "$h2_requests" &
    client=$!
    for _ in $(seq 1 3000); do
      [[ -s $work/ready ]] && break
      kill -0 $client 2>/dev/null || break
      sleep 0.1
    done
    [[ -s $work/ready ]] || { echo "$name $shape: the client did not finish" >&2; kill $client; exit 1; }
    sleep 2
    loaded[$name,$shape]=$(rss_kib $proxy_pid)
    read -r held[$name,$shape] failed < "$work/ready"
    kill $client 2>/dev/null || true
    wait $client 2>/dev/null || true
    (( failed == 0 )) || echo "$name $shape: $failed of $want connections got no answer" >&2
    stop_proxy $proxy_pid
    sleep 1
  done
done

# KiB per connection; and the RSS with COUNT connections in MiB, from the
# idle RSS and the per-connection figure (the measured one when the proxy
# held them all).
per_conn() { awk -v a="${loaded[$1,$2]}" -v b="${idle[$1,$2]}" -v n="${held[$1,$2]}" \
  'BEGIN {if (n > 0) printf "%.2f", (a - b) / n; else print "-"}'; }
rss_at() { awk -v a="${loaded[$1,$2]}" -v b="${idle[$1,$2]}" -v n="${held[$1,$2]}" -v c="$3" \
  'BEGIN {if (n > 0) printf "%.1f", (b + (a - b) / n * c) / 1024; else print "-"}'; }
cell() {  # FUNCTION SHAPE [ARG]: the three proxies' figures, tab-separated
  local out=() name
  for name in kwd haproxy nginx; do
    if [[ " $proxies " == *" $name "* && -n ${held[$name,$2]:-} ]]; then
      out+=("$($1 $name $2 ${3:-})")
    else
      out+=(-)
    fi
  done
  local IFS=$'\t'
  echo "${out[*]}"
}
raw() { case $3 in idle) awk -v v="${idle[$1,$2]}" 'BEGIN {printf "%.1f", v / 1024}' ;;
  loaded) awk -v v="${loaded[$1,$2]}" 'BEGIN {printf "%.1f", v / 1024}' ;; held) echo "${held[$1,$2]}" ;;
  wakes) echo "${wakes[$1,$2]:--}" ;; esac; }

declare -A label=([plain]="plain HTTP/1.1" [tls]="TLS 1.3 HTTP/1.1" [h2]="HTTP/2 over TLS 1.3")
for shape in $shapes; do
  echo
  extra=""
  [[ $shape == h2 && $h2_requests != 1 ]] && extra=", $h2_requests requests per connection"
  echo "memory (VmRSS), ${label[$shape]}$extra: kwd-proxy with a $groups-group snapshot, HAProxy and nginx as in scripts/bench-proxies.sh"
  printf "%-8s %14s %12s %22s %18s\n" proxy "idle RSS KiB" connections "RSS with them KiB" "KiB per conn"
  for name in $proxies; do
    printf "%-8s %14s %12s %22s %18s\n" $name "${idle[$name,$shape]}" "${held[$name,$shape]}" \
      "${loaded[$name,$shape]}" "$(per_conn $name $shape)"
  done
  if [[ $shape == plain ]]; then
    printf "idle wake-ups per second, no traffic (%s s):" "$idle_wake_seconds"
    for name in $proxies; do printf " %s %s" $name "${wakes[$name,plain]:--}"; done
    echo
  fi
done
echo
tab=$'\t'
for shape in $shapes; do
  count=$conns
  [[ $shape == h2 ]] && count=$h2_conns
  n=$(printf "%'d" $count 2>/dev/null || echo $count)
  if [[ $shape == plain ]]; then
    echo "BENCH-ROW${tab}5 idle RSS, $groups-group snapshot${tab}$(cell raw plain idle)${tab}MiB${tab}<=10MiB"
    echo "BENCH-ROW${tab}5 RSS with ${held[kwd,plain]:-?} idle keep-alive conns${tab}$(cell raw plain loaded)${tab}MiB${tab}<=64MiB"
    echo "BENCH-ROW${tab}5 idle wake-ups, no traffic (info)${tab}$(cell raw plain wakes)${tab}/s${tab}-"
  fi
  echo "BENCH-ROW${tab}5 idle $shape conns held (HAProxy: fd limit)${tab}$(cell raw $shape held)${tab}${tab}-"
  echo "BENCH-ROW${tab}5 KiB per idle $shape conn${tab}$(cell per_conn $shape)${tab}KiB${tab}-"
  echo "BENCH-ROW${tab}5 RSS with $n idle $shape conns (idle + $n x per conn)${tab}$(cell rss_at $shape $count)${tab}MiB${tab}<=1.00x"
done
if [[ -n ${held[kwd,plain]:-} ]]; then
  awk -v i="${idle[kwd,plain]}" -v l="${loaded[kwd,plain]}" -v n="${held[kwd,plain]}" 'BEGIN {
    printf "kwd targets: idle %.1f MiB (<= 10), with %d connections %.1f MiB (<= 64)\n", i / 1024, n, l / 1024 }'
fi
