#!/usr/bin/env bash
# kwd-proxy vs HAProxy 2.6 vs nginx in one run, on loopback, over several
# traffic shapes (issue 16, targets 1-4). bench/README.md explains the table.
#
# Same two backends (one nginx, two ports, a 64-byte answer with an
# X-Served-By header) weighted 2:1 for every proxy; one worker thread each:
# kwd --workers 1, HAProxy nbthread 1 (http-reuse always), nginx
# worker_processes 1 (upstream keepalive). wrk -t1; ROUNDS rounds of
# DURATION per shape and proxy, the proxies' order rotated every round
# (kwd haproxy nginx, haproxy nginx kwd, ...). Per run: requests/s, p50,
# p90 and p99 latency, CPU time per request (utime+stime of the proxy from
# /proc/PID/stat around the run, divided by the requests wrk counted), the
# client connections the proxy accepted per request and the backend
# connections it opened, and wrk's errors. Medians per shape and proxy, and
# ratios against HAProxy.
#
# Shapes (SHAPES, space-separated; default all):
#   keepalive64   keep-alive, 64 connections, GET /
#   keepalive512  keep-alive, 512 connections, GET /
#   close64       a new connection per request (Connection: close), 64 connections
#   sapmix        bench/sap_mix.lua against a second set of proxies with 1,000 URL
#                 rules, two groups and session persistence; 64 connections
#   workers       kwd --workers 1 vs --workers 2, CPU per request; kwd pinned to
#                 CPU 0, wrk and a dedicated backend to CPU 1, in an autogroup of
#                 their own at nice -20 when allowed (WORKERS_NICE); the target
#                 compares equal connections per worker (w1 -c32, w2 -c64), the
#                 context row equal connections in all (w1 -c64); needs 2 CPUs
#   budget64      keepalive64 with every proxy held to BUDGET of one CPU (a
#                 cgroup's CPU bandwidth): the proxy, not wrk or the backends,
#                 sets the pace, so req/s is requests per CPU budget; needs
#                 root and a writable cpu cgroup controller, else skipped
#   budgetclose64 close64 with the same budget
#   budgettls64   keep-alive over TLS 1.3 (the same EC P-256 certificate for all
#                 three), wrk -t1 -c64, with the same budget
#   budgethandshake a full TLS 1.3 handshake per request (wrk -t1 -c64 over https
#                 with Connection: close and bench/full_handshake.c preloaded, so
#                 that wrk resumes no session; checked on kwd's handshake
#                 counters), with the same budget; needs cc
#   budgeth2      HTTP/2 over TLS (ALPN h2), h2load -t1 -c64 -m10 -D DURATION,
#                 with the same budget
#   budgetsapmix  sapmix with the same budget
# Every budget shape also reports the CPU each proxy used as a share of one
# CPU (CPU seconds / wall seconds of the run): a proxy below 90% of its budget
# was held up by the load generator or the backends (a starved round).
#
# usage: scripts/bench-proxies.sh [BUILD_DIR]
#   env: ROUNDS=3 DURATION=5s SHAPES="..." RESULTS=FILE (TSV of the medians:
#        shape, proxy, metric, value; what scripts/run-benchmarks.sh reads)
#        SESSIONS=1000 JSESSIONIDs the sapmix warm-up makes known
#        PORT_BASE=19400 (ports PORT_BASE+1..94 on 127.0.0.1)
#        HOLD=SECONDS keeps the proxies running that long after the runs (debugging)
#        KWD_FLAGS="--io-uring off" extra kwd-proxy serve flags (a before/after)
#        BUDGET=0.25 the share of one CPU each proxy gets in the budget shapes
#        BUDGET_NICE=-20 autogroup nice of the load generator and backends during
#        the budget shapes (0: none)
# Exit status: 0 measured (wrk errors are reported, not fatal), 77 a tool is
# missing, 1 a proxy did not start or did not route as the comparison needs.
set -euo pipefail
build=${1:-build-bench}
rounds=${ROUNDS:-3}
duration=${DURATION:-5s}
shapes=${SHAPES:-keepalive64 keepalive512 close64 budget64 budgetclose64 budgettls64 budgethandshake budgeth2 sapmix budgetsapmix workers}
budget_shapes="budget64 budgetclose64 budgettls64 budgethandshake budgeth2 budgetsapmix"
tls_shapes="budgettls64 budgethandshake budgeth2"
results=${RESULTS:-}
here=$(cd "$(dirname "$0")/.." && pwd)
proxy_bin=$build/kwd-proxy
controller_bin=$build/kwd-controller
lua=$here/bench/sap_mix.lua
source "$here/bench/lib.sh"
export PATH=$PATH:/usr/sbin:/sbin
# The system's python3 when there is one (a pyenv shim costs a second per call).
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3

for b in "$proxy_bin" "$controller_bin"; do
  [[ -x $b ]] || { echo "bench-proxies: no $b (make bench builds it)" >&2; exit 1; }
done
missing=()
for tool in haproxy nginx wrk curl python3 taskset openssl; do
  command -v $tool >/dev/null || missing+=($tool)
done
if ((${#missing[@]})); then
  echo "bench-proxies: missing ${missing[*]} (Debian: haproxy nginx wrk curl python3 util-linux openssl;" \
    "make bench installs them)" >&2
  exit 77
fi
for shape in $shapes; do
  case $shape in
    keepalive64 | keepalive512 | close64 | budget64 | budgetclose64 | budgettls64 | budgethandshake | \
      budgeth2 | sapmix | budgetsapmix | workers) ;;
    *) echo "bench-proxies: unknown shape '$shape'" >&2; exit 1 ;;
  esac
done
has_shape() { [[ " $shapes " == *" $1 "* ]]; }
drop_shape() { shapes=" $shapes "; shapes=${shapes// $1 / }; }
any_shape() { local s; for s in "$@"; do has_shape "$s" && return 0; done; return 1; }
budget=${BUDGET:-0.25}
# shellcheck disable=SC2086
if any_shape $budget_shapes; then
  if ! awk -v b="$budget" 'BEGIN {exit !(b > 0 && b <= 1)}'; then
    echo "bench-proxies: BUDGET must be a share of one CPU, 0 < BUDGET <= 1 (not '$budget')" >&2
    exit 1
  fi
  if ! cpu_budget_init; then
    echo "bench-proxies: the budget shapes need root and a writable cpu cgroup controller" \
      "(/sys/fs/cgroup/cpu, or cgroup v2 with cpu in the root's cgroup.subtree_control); skipped" >&2
    for s in $budget_shapes; do drop_shape "$s"; done
  fi
fi
if has_shape budgeth2 && ! command -v h2load >/dev/null; then
  echo "bench-proxies: budgeth2 needs h2load (Debian: nghttp2-client); skipped" >&2
  drop_shape budgeth2
fi

bench_work kwd-bench
budget_nice_before=
trap '[[ -n $budget_nice_before ]] && echo "$budget_nice_before" >/proc/$$/autogroup 2>/dev/null; bench_cleanup' EXIT
trap 'exit 130' INT TERM

# Ports: PORT_BASE (default 19400) + 1..6, 71..74, 80..94; fixed, so that a
# run can be repeated, and checked free before anything starts.
base=${PORT_BASE:-19400}
B1=$((base + 1)) B2=$((base + 2)) BSTAT=$((base + 3))    # backends and their stub_status
B3=$((base + 4)) B4=$((base + 5)) B3STAT=$((base + 6))   # the workers shape's backends (CPU 1)
KWD=$((base + 80)) HAP=$((base + 81)) NGX=$((base + 82)) NGXSTAT=$((base + 90))
KWD_SAP=$((base + 83)) HAP_SAP=$((base + 84)) NGX_SAP=$((base + 85)) NGX_SAPSTAT=$((base + 91))
KWD_W1=$((base + 86)) KWD_W2=$((base + 87))
KWD_TLS=$((base + 92)) HAP_TLS=$((base + 93)) NGX_TLS=$((base + 94))  # TLS listeners of kwd, haproxy, nginx
ADM=$((base + 71)) ADM_SAP=$((base + 72)) ADM_W1=$((base + 73)) ADM_W2=$((base + 74))
busy=()
for p in $B1 $B2 $BSTAT $B3 $B4 $B3STAT $KWD $HAP $NGX $NGXSTAT $KWD_SAP $HAP_SAP $NGX_SAP \
  $NGX_SAPSTAT $KWD_W1 $KWD_W2 $ADM $ADM_SAP $ADM_W1 $ADM_W2 $KWD_TLS $HAP_TLS $NGX_TLS; do
  if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then busy+=($p); fi
done
if ((${#busy[@]})); then
  echo "bench-proxies: ports ${busy[*]} are in use by another process; stop it or set PORT_BASE" \
    "(now $base; the script uses PORT_BASE+1..94)" >&2
  exit 1
fi
BODY=$BENCH_BODY

# ---------------------------------------------------------------- backends
# One nginx, two ports; /login/ sets JSESSIONID=<sid> as a SAP Java server
# would at logon (the sapmix warm-up).
backend_conf() {  # dir port1 port2 statport
  cat <<CONF
$(nginx_head $1 8192 "master_process off;")
  large_client_header_buffers 4 16k;
  server { listen 127.0.0.1:$2;
    location / { add_header X-Served-By A; return 200 "$BODY"; }
    location /login/ { add_header X-Served-By A; add_header Set-Cookie "JSESSIONID=\$arg_sid; Path=/";
                       return 200 "$BODY"; } }
  server { listen 127.0.0.1:$3;
    location / { add_header X-Served-By B; return 200 "$BODY"; }
    location /login/ { add_header X-Served-By B; add_header Set-Cookie "JSESSIONID=\$arg_sid; Path=/";
                       return 200 "$BODY"; } }
  server { listen 127.0.0.1:$4; location / { stub_status; } }
}
CONF
}
mkdir -p "$work/backend" "$work/backend-w"
backend_conf "$work/backend" $B1 $B2 $BSTAT >"$work/backend/nginx.conf"
nginx -c "$work/backend/nginx.conf" -e "$work/backend/error.log" &
pids+=($!)
# The workers shape's processes (its kwd, backend and wrk) run in a session
# of their own whose autogroup gets nice WORKERS_NICE (default -20; needs
# root or CAP_SYS_NICE, else it stays 0): on a box where other jobs compile,
# they would otherwise get a varying share of the two CPUs, and CPU per
# request moves with the cache pollution and preemption that brings.
workers_nice=${WORKERS_NICE:--20}
boost=(setsid bash -c 'echo "$0" >/proc/self/autogroup 2>/dev/null; exec "$@"' "$workers_nice")
if has_shape workers; then
  if ! setsid bash -c 'echo "$0" >/proc/self/autogroup' "$workers_nice" 2>/dev/null; then
    echo "bench-proxies: the workers shape runs at the machine's normal priority" \
      "(autogroup nice $workers_nice not allowed)" >&2
  fi
  backend_conf "$work/backend-w" $B3 $B4 $B3STAT >"$work/backend-w/nginx.conf"
  "${boost[@]}" taskset -c 1 nginx -c "$work/backend-w/nginx.conf" -e "$work/backend-w/error.log" &
  pids+=($!)
fi

# ------------------------------------------------- plain proxies (shapes 1, 2)
# kwd's snapshots are compiled from LogonGroup/UrlMapping objects, as in
# production (kwd-controller compile stamps the content-hash version).
compile_snapshot() {  # objects-dir output
  "$controller_bin" compile --source="dir:$1" >"$2" 2>"$1.log" || {
    echo "bench-proxies: kwd-controller compile $1 failed:" >&2
    cat "$1.log" >&2
    exit 1
  }
}
plain_objects "$work/objects" $B1 $B2
compile_snapshot "$work/objects" "$work/snapshot.json"
start_kwd() {  # name snapshot port admin workers [taskset cpus [extra flags...]]
  local cpus=${6:-}
  local cmd=("$proxy_bin" serve --snapshot "$2" --listen 127.0.0.1:$3 --admin-listen 127.0.0.1:$4
    --workers "$5" --access-log off ${KWD_FLAGS:-} "${@:7}")
  [[ -n $cpus ]] && cmd=("${boost[@]}" taskset -c "$cpus" "${cmd[@]}")
  KWD_AFFINITY_KEY=bench "${cmd[@]}" >"$work/$1.out" 2>"$work/$1.log" &
  pids+=($!)
  pid[$1]=$!
}
declare -A pid port admin tport
port=([kwd]=$KWD [haproxy]=$HAP [nginx]=$NGX [kwd-sap]=$KWD_SAP [haproxy-sap]=$HAP_SAP
  [nginx-sap]=$NGX_SAP [kwd-w1]=$KWD_W1 [kwd-w2]=$KWD_W2)
admin=([kwd]=$ADM [kwd-sap]=$ADM_SAP [kwd-w1]=$ADM_W1 [kwd-w2]=$ADM_W2
  [nginx]=$NGXSTAT [nginx-sap]=$NGX_SAPSTAT)

plain=0
# shellcheck disable=SC2086
for s in keepalive64 keepalive512 close64 budget64 budgetclose64 $tls_shapes; do has_shape $s && plain=1; done
# The TLS shapes use the same three processes, each with a TLS listener too
# (the other shapes do not touch it): one EC P-256 certificate, TLS 1.2-1.3,
# ALPN h2 and http/1.1, session tickets as each proxy has them by default
# (the handshake shape's load generator resumes none).
tls=0
# shellcheck disable=SC2086
any_shape $tls_shapes && tls=1
kwd_tls=() hap_tls="" ngx_tls=""
# TLS 1.3 suites in kwd's order (the server's choice): HAProxy and nginx
# would pick TLS_AES_256_GCM_SHA384 (the client's first) where kwd picks
# TLS_AES_128_GCM_SHA256; the same cipher for all three.
tls13_suites=TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256
if ((plain && tls)); then
  bench_cert "$work/tls"
  kwd_tls=(--tls-listen 127.0.0.1:$KWD_TLS --tls-cert-dir "$work/tls/certs")
  tport=([kwd]=$KWD_TLS [haproxy]=$HAP_TLS [nginx]=$NGX_TLS)
  hap_tls="frontend web-tls
  bind 127.0.0.1:$HAP_TLS ssl crt $work/tls/haproxy.pem alpn h2,http/1.1 ciphersuites $tls13_suites
  option forwardfor
  http-request set-header X-Forwarded-Proto https
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  unique-id-format %{+X}o%ci%cp%Ts%rt%pid
  unique-id-header X-Request-Id
  default_backend app"
  ngx_tls="  server {
    listen 127.0.0.1:$NGX_TLS ssl http2;
    ssl_certificate $work/tls/certs/bench.crt; ssl_certificate_key $work/tls/certs/bench.key;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_prefer_server_ciphers on; ssl_conf_command Ciphersuites $tls13_suites;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; proxy_set_header X-Forwarded-Proto \$scheme; proxy_set_header X-Forwarded-Host \$host; proxy_set_header X-Request-Id \$request_id; }
  }"
fi
if ((plain)); then
  start_kwd kwd "$work/snapshot.json" $KWD $ADM 1 "" "${kwd_tls[@]}"
  cat >"$work/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 8192
  stats socket $work/haproxy.sock
$(haproxy_defaults 60s)
$(haproxy_app_backend $B1 $B2)
frontend web
  bind 127.0.0.1:$HAP
  option forwardfor
  http-request set-header X-Forwarded-Proto http
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  unique-id-format %{+X}o%ci%cp%Ts%rt%pid
  unique-id-header X-Request-Id
  default_backend app
$hap_tls
CONF
  haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
  pids+=($!)
  pid[haproxy]=$!
  mkdir -p "$work/nginx"
  cat >"$work/nginx/nginx.conf" <<CONF
$(nginx_head $work/nginx 8192 "master_process off;")
  upstream app { server 127.0.0.1:$B1 weight=2; server 127.0.0.1:$B2 weight=1; keepalive 1024; }
  server {
    listen 127.0.0.1:$NGX;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; proxy_set_header X-Forwarded-Proto \$scheme; proxy_set_header X-Forwarded-Host \$host; proxy_set_header X-Request-Id \$request_id; }
  }
  server { listen 127.0.0.1:$NGXSTAT; location / { stub_status; } }
$ngx_tls
}
CONF
  nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
  pids+=($!)
  pid[nginx]=$!
fi

# ----------------------------------------------- SAP-mix proxies (shape 3)
# Two groups on the same two backends: bench/abap (servers named as ABAP
# instances, sap-contextid names them) and bench/java (JSESSIONID learned
# from Set-Cookie into the session table, affinity cookie). 1,000 URL rules
# /sap/bc/app<N>/: even N -> ABAP, odd N -> Java; anything else -> Java.
INST_A=sapa_ERP_00 INST_B=sapb_ERP_01
SESSIONS=${SESSIONS:-1000}  # JSESSIONIDs the sapmix warm-up makes known
if any_shape sapmix budgetsapmix; then
  rules=()
  for n in $(seq 0 999); do rules+=("/sap/bc/app$n/"); done
  mapfile -t sorted < <(printf '%s\n' "${rules[@]}" | LC_ALL=C sort)
  mkdir -p "$work/objects-sap"
  {
    logon_group abap abap $B1 $B2 $INST_A $INST_B
    logon_group java java $B1 $B2 $INST_A $INST_B
    cat <<YAML
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: sap, namespace: bench}
spec:
  hosts: []
  defaultRootHandler: java
  defaultGroups: {abap: abap, java: java}
  rules:
YAML
    for p in "${sorted[@]}"; do
      n=${p#/sap/bc/app}
      n=${n%/}
      if ((n % 2 == 0)); then k=abap; else k=java; fi
      echo "    - {prefix: $p, kind: $k, logonGroup: $k}"
    done
  } >"$work/objects-sap/objects.yaml"
  compile_snapshot "$work/objects-sap" "$work/snapshot-sap.json"
  rules=$($py -c 'import json,sys; print(sum(len(v.get("rules", [])) for v in json.load(open(sys.argv[1]))["virtualHosts"]))' "$work/snapshot-sap.json")
  [[ $rules == 1000 ]] || { echo "bench-proxies: the SAP snapshot has $rules URL rules, not 1000" >&2; exit 1; }
  for p in "${sorted[@]}"; do
    n=${p#/sap/bc/app}
    n=${n%/}
    if ((n % 2 == 0)); then echo "$p abap"; else echo "$p java"; fi
  done >"$work/urls.map"
  start_kwd kwd-sap "$work/snapshot-sap.json" $KWD_SAP $ADM_SAP 1

  # HAProxy: the 1,000 rules as a map_beg lookup; sap-contextid by use-server
  # on the instance inside the cookie (stateless, as kwd does); JSESSIONID in a
  # stick table learned from the response; its own SERVERID cookie as the
  # affinity cookie.
  cat >"$work/haproxy-sap.cfg" <<CONF
global
  nbthread 1
  maxconn 8192
  stats socket $work/haproxy-sap.sock
$(haproxy_defaults 60s)
frontend sap
  bind 127.0.0.1:$HAP_SAP
  option forwardfor
  http-request set-header X-Forwarded-Proto http
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  unique-id-format %{+X}o%ci%cp%Ts%rt%pid
  unique-id-header X-Request-Id
  use_backend %[path,map_beg($work/urls.map,java)]
backend abap
  balance roundrobin
  cookie SERVERID insert indirect nocache
  use-server $INST_A if { req.cook(sap-contextid) -m sub %3a$INST_A%3a }
  use-server $INST_B if { req.cook(sap-contextid) -m sub %3a$INST_B%3a }
  server $INST_A 127.0.0.1:$B1 weight 2 cookie A
  server $INST_B 127.0.0.1:$B2 weight 1 cookie B
backend java
  balance roundrobin
  cookie SERVERID insert indirect nocache
  stick-table type string len 64 size 100k expire 1h
  stick on req.cook(JSESSIONID)
  stick store-response res.cook(JSESSIONID)
  server $INST_A 127.0.0.1:$B1 weight 2 cookie A
  server $INST_B 127.0.0.1:$B2 weight 1 cookie B
CONF
  haproxy -f "$work/haproxy-sap.cfg" -db >"$work/haproxy-sap.log" 2>&1 &
  pids+=($!)
  pid[haproxy-sap]=$!

  # nginx (open source: no learned sessions): 1,000 prefix locations;
  # sap-contextid and its own "route" cookie pick the instance's upstream by
  # a map over the Cookie header; JSESSIONID by a consistent hash.
  mkdir -p "$work/nginx-sap"
  {
    cat <<CONF
$(nginx_head $work/nginx-sap 8192 "master_process off;")
  large_client_header_buffers 4 16k;
  upstream abap { server 127.0.0.1:$B1 weight=2; server 127.0.0.1:$B2 weight=1; keepalive 1024; }
  upstream java { hash \$cookie_JSESSIONID consistent;
                  server 127.0.0.1:$B1 weight=2; server 127.0.0.1:$B2 weight=1; keepalive 1024; }
  upstream $INST_A { server 127.0.0.1:$B1; keepalive 1024; }
  upstream $INST_B { server 127.0.0.1:$B2; keepalive 1024; }
  map \$http_cookie \$abap_up {
    "~sap-contextid=SID%3aANON%3a$INST_A%3a" $INST_A;
    "~sap-contextid=SID%3aANON%3a$INST_B%3a" $INST_B;
    "~(^|; )route=a" $INST_A;
    "~(^|; )route=b" $INST_B;
    default abap;
  }
  map \$http_cookie \$java_up {
    "~(^|; )route=a" $INST_A;
    "~(^|; )route=b" $INST_B;
    default java;
  }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; proxy_set_header X-Forwarded-Proto \$scheme; proxy_set_header X-Forwarded-Host \$host; proxy_set_header X-Request-Id \$request_id;
  server {
    listen 127.0.0.1:$NGX_SAP;
    location / { proxy_pass http://\$java_up; }
CONF
    for p in "${sorted[@]}"; do
      n=${p#/sap/bc/app}
      n=${n%/}
      if ((n % 2 == 0)); then echo "    location $p { proxy_pass http://\$abap_up; }"; else
        echo "    location $p { proxy_pass http://\$java_up; }"; fi
    done
    echo "  }"
    echo "  server { listen 127.0.0.1:$NGX_SAPSTAT; location / { stub_status; } }"
    echo "}"
  } >"$work/nginx-sap/nginx.conf"
  nginx -c "$work/nginx-sap/nginx.conf" -e "$work/nginx-sap/error.log" &
  pids+=($!)
  pid[nginx-sap]=$!
fi

# ------------------------------------------------- workers shape (target 4)
if has_shape workers; then
  if (($(nproc) < 2)); then
    echo "bench-proxies: the workers shape needs 2 CPUs; skipped" >&2
    shapes=${shapes/workers/}
  else
    plain_objects "$work/objects-w" $B3 $B4
    compile_snapshot "$work/objects-w" "$work/snapshot-w.json"
    start_kwd kwd-w1 "$work/snapshot-w.json" $KWD_W1 $ADM_W1 1 0
    start_kwd kwd-w2 "$work/snapshot-w.json" $KWD_W2 $ADM_W2 2 0
  fi
fi

# -------------------------------------------------------------- readiness
wait_ok() {  # url: 200 within 10 s
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "bench-proxies: $1 does not answer 200" >&2
  tail -n 5 "$work"/*.log "$work"/*/error.log >&2 2>/dev/null || true
  exit 1
}
for name in "${!pid[@]}"; do wait_ok "http://127.0.0.1:${port[$name]}/"; done
for name in "${!tport[@]}"; do wait_port "${tport[$name]}"; done

# ------------------------------------------------------------ measurement
# Times the process's threads went to sleep (voluntary context switches:
# an event loop blocking in epoll_wait), summed over its threads.
haproxy_cmd() {  # socket command
  $py - "$1" "$2" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((sys.argv[2] + "\n").encode())
out = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    out += chunk
print(out.decode())
PY
}
# Client connections the proxy has accepted so far.
accepted() {
  case $1 in
    kwd*) curl -fsS "http://127.0.0.1:${admin[$1]}/metrics" |
      awk '/^kwd_proxy_connections_accepted_total/ {printf "%d", $2}' ;;
    haproxy*) haproxy_cmd "$work/$1.sock" "show info" | awk -F': ' '$1=="CumConns" {print $2}' ;;
    nginx*) curl -fsS "http://127.0.0.1:${admin[$1]}/" | awk 'NR==3 {print $1}' ;;
  esac
}
backend_accepts() { curl -fsS "http://127.0.0.1:$1/" | awk 'NR==3 {print $1}'; }

declare -A idle_rss
for name in "${!pid[@]}"; do idle_rss[$name]=$(rss_kib ${pid[$name]}); done

: >"$work/runs.tsv"
# One measured wrk run: shape round name conns backend_stat_port [wrk prefix...] -- [wrk args...]
run_wrk() {
  local shape=$1 round=$2 name=$3 conns=$4 bstat=$5
  shift 5
  local prefix=()
  while [[ $1 != -- ]]; do prefix+=("$1"); shift; done
  shift
  local before after acc_before acc_after b_before b_after out
  acc_before=$(accepted "$name")
  b_before=$(backend_accepts "$bstat")
  before=$(cpu_ticks ${pid[$name]})
  local sleeps_before sleeps_after
  sleeps_before=$(sleeps ${pid[$name]})
  local t0 t1
  t0=$(date +%s.%N)
  out=$("${prefix[@]}" wrk -t1 -c"$conns" -d"$duration" --latency "$@" 2>&1) || {
    echo "bench-proxies: wrk failed against $name: $out" >&2
    exit 1
  }
  t1=$(date +%s.%N)
  after=$(cpu_ticks ${pid[$name]})
  sleeps_after=$(sleeps ${pid[$name]})
  acc_after=$(accepted "$name")
  b_after=$(backend_accepts "$bstat")
  local requests rps p99 p50 p90 errors cpu_us conns_per_req upstream sleeps_per_req
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(wrk_ms 99% <<<"$out")
  p50=$(wrk_ms 50% <<<"$out")
  p90=$(wrk_ms 90% <<<"$out")
  errors=$(awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(/,/, ""); n += $4 + $6 + $8 + $10} END {print n + 0}' <<<"$out")
  record_run "$shape" "$round" "$name" "$requests" "$rps" "$p50" "$p90" "$p99" "$errors" "$before" "$after" \
    "$t0" "$t1" "$acc_before" "$acc_after" "$b_before" "$b_after" "$sleeps_before" "$sleeps_after" "$out"
}
# One measured HTTP/2 run (TLS, ALPN h2): h2load -t1 -c64 -m10 -D DURATION
# against NAME's TLS port. req/s from h2load; p50/p90/p99 from its
# --log-file (the time to the end of each response; h2load prints no
# percentiles); errors: failed requests and non-2xx answers.
run_h2load() {  # shape round name
  local shape=$1 round=$2 name=$3 log=$work/h2load.log
  local before after acc_before acc_after b_before b_after sleeps_before sleeps_after out t0 t1
  acc_before=$(accepted "$name")
  b_before=$(backend_accepts $BSTAT)
  before=$(cpu_ticks ${pid[$name]})
  sleeps_before=$(sleeps ${pid[$name]})
  t0=$(date +%s.%N)
  # (h2load has been seen hanging on a loaded machine: bounded.)
  out=$(timeout $((${duration%s} + 60)) h2load -t1 -c64 -m10 -D "${duration%s}" --log-file="$log" \
    "https://127.0.0.1:${tport[$name]}/" 2>&1) || true
  t1=$(date +%s.%N)
  after=$(cpu_ticks ${pid[$name]})
  sleeps_after=$(sleeps ${pid[$name]})
  acc_after=$(accepted "$name")
  b_after=$(backend_accepts $BSTAT)
  local requests rps p50 p90 p99 errors
  requests=$(awk '/^requests:/ {print $8}' <<<"$out")
  rps=$(awk '/^finished in/ {print $4}' <<<"$out")
  read -r p50 p90 p99 < <(awk '{print $3}' "$log" | sort -n | awk '{v[NR] = $1}
    function q(p,  i) {i = int(NR * p); if (i < 1) i = 1; return v[i] / 1000}
    END {if (NR) printf "%.3f %.3f %.3f\n", q(0.5), q(0.9), q(0.99); else print "nan nan nan"}')
  errors=$(awk '/^requests:/ {n += $10} /^status codes:/ {n += $7 + $9} END {print n + 0}' <<<"$out")
  rm -f "$log"
  record_run "$shape" "$round" "$name" "$requests" "$rps" "$p50" "$p90" "$p99" "$errors" "$before" "$after" \
    "$t0" "$t1" "$acc_before" "$acc_after" "$b_before" "$b_after" "$sleeps_before" "$sleeps_after" "$out"
}
# The figures of one measured run into runs.tsv, and its line: shape round
# name requests rps p50 p90 p99 errors cpu_before cpu_after t0 t1
# accepted_before accepted_after backend_before backend_after sleeps_before
# sleeps_after output
record_run() {
  local shape=$1 round=$2 name=$3 requests=$4 rps=$5 p50=$6 p90=$7 p99=$8 errors=$9 before=${10} after=${11}
  local t0=${12} t1=${13} acc_before=${14} acc_after=${15} b_before=${16} b_after=${17}
  local sleeps_before=${18} sleeps_after=${19} out=${20}
  local cpu_us conns_per_req upstream sleeps_per_req cores
  if [[ -z $requests || $requests == 0 ]]; then
    echo "bench-proxies: no requests counted for $name: $out" >&2
    exit 1
  fi
  cpu_us=$(cpu_us_per "$before" "$after" "$requests" %.3f)
  # The CPU the proxy used, as a share of one CPU: CPU seconds / wall seconds.
  cores=$(awk -v b="$before" -v a="$after" -v t0="$t0" -v t1="$t1" -v hz="$(getconf CLK_TCK)" \
    'BEGIN {printf "%.3f", (t1 > t0) ? (a - b) / hz / (t1 - t0) : 0}')
  conns_per_req=$(awk -v b="$acc_before" -v a="$acc_after" -v n="$requests" 'BEGIN {printf "%.3f", (a-b)/n}')
  upstream=$((b_after - b_before))
  sleeps_per_req=$(awk -v b="$sleeps_before" -v a="$sleeps_after" -v n="$requests" 'BEGIN {printf "%.4f", (a-b)/n}')
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$shape" "$round" "$name" "$rps" "$p99" "$cpu_us" \
    "$errors" "$conns_per_req" "$upstream" "$p50" "$p90" "$sleeps_per_req" "$cores" >>"$work/runs.tsv"
  local starved=""
  if [[ $shape == budget* ]] && awk -v c="$cores" -v b="$budget" 'BEGIN {exit !(c < 0.9 * b)}'; then
    starved="  STARVED (below 90% of the budget)"
  fi
  printf "  round %s %-14s %10s req/s  p50/p90/p99 %s/%s/%s ms  cpu %7s us/req  cpu used %s  sleeps/req %s  conns/req %s  backend conns %s  errors %s%s\n" \
    "$round" "$name" "$rps" "$p50" "$p90" "$p99" "$cpu_us" "$cores" "$sleeps_per_req" "$conns_per_req" "$upstream" \
    "$errors" "$starved"
  if [[ $errors != 0 ]]; then
    echo "  WARNING: $name answered $errors requests with errors (shape $shape):" >&2
    grep -E 'Non-2xx|Socket errors' <<<"$out" >&2 || true
  fi
}

emit() {  # shape proxy metric value
  printf "%s\t%s\t%s\t%s\n" "$1" "$2" "$3" "$4" >>"$work/medians.tsv"
}
: >"$work/medians.tsv"
summarise() {  # shape description names...
  local shape=$1 description=$2
  shift 2
  echo "  medians of $rounds rounds ($description):"
  printf "  %-14s %12s %10s %10s %10s %12s %9s %10s %10s %14s %8s\n" proxy "req/s" "p50 ms" "p90 ms" "p99 ms" \
    "cpu us/req" "cpu used" "sleeps/req" "conns/req" "backend conns" errors
  local name
  for name in "$@"; do
    local rps p50 p90 p99 cpu cpr up err sl cores
    rps=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $4}' "$work/runs.tsv" | median)
    p50=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $10}' "$work/runs.tsv" | median)
    p90=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $11}' "$work/runs.tsv" | median)
    p99=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $5}' "$work/runs.tsv" | median)
    cpu=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $6}' "$work/runs.tsv" | median)
    cpr=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $8}' "$work/runs.tsv" | median)
    up=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $9}' "$work/runs.tsv" | median)
    err=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {e += $7} END {print e + 0}' "$work/runs.tsv")
    sl=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $12}' "$work/runs.tsv" | median)
    cores=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $13}' "$work/runs.tsv" | median)
    printf "  %-14s %12s %10s %10s %10s %12s %9s %10s %10s %14s %8s\n" "$name" "$rps" "$p50" "$p90" "$p99" "$cpu" \
      "$cores" "$sl" "$cpr" "$up" "$err"
    emit "$shape" "$name" cores "$cores"
    emit "$shape" "$name" rps "$rps"
    emit "$shape" "$name" p50_ms "$p50"
    emit "$shape" "$name" p90_ms "$p90"
    emit "$shape" "$name" p99_ms "$p99"
    emit "$shape" "$name" cpu_us "$cpu"
    emit "$shape" "$name" conns_per_req "$cpr"
    emit "$shape" "$name" errors "$err"
    emit "$shape" "$name" sleeps_per_req "$sl"
  done
}
# The proxies' order in round r: rotated left by r-1.
rotation() {  # round names...
  local r=$1
  shift
  local names=("$@") n=$#
  local i
  for ((i = 0; i < n; i++)); do printf '%s ' "${names[$(((i + r - 1) % n))]}"; done
}
ratio_line() {  # shape a b label
  awk -v s="$1" -v a="$2" -v b="$3" '
    $1==s && $2==a {va[$3]=$4} $1==s && $2==b {vb[$3]=$4}
    END {printf "  %s/%s: req/s %.2fx, cpu/req %.2fx, p99 %.2fx\n", a, b, va["rps"]/vb["rps"], va["cpu_us"]/vb["cpu_us"], va["p99_ms"]/vb["p99_ms"]}' \
    "$work/medians.tsv"
}

# The URL of NAME's plain listener, or its TLS listener when proto=https.
proxy_url() {  # name
  if [[ ${proto:-http} == https ]]; then echo "https://127.0.0.1:${tport[$1]}/"; else
    echo "http://127.0.0.1:${port[$1]}/"; fi
}
# (env proto=https: the TLS listeners; preload=LIB: wrk runs with LD_PRELOAD=LIB)
plain_shape() {  # shape conns description [wrk args]
  local shape=$1 conns=$2 description=$3
  shift 3
  echo "== $shape: $description (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  local name round prefix=(env)
  [[ -n ${preload:-} ]] && prefix=(env LD_PRELOAD="$preload")
  for name in kwd haproxy nginx; do
    "${prefix[@]}" wrk -t1 -c"$conns" -d1s "$@" "$(proxy_url $name)" >/dev/null 2>&1 || true
  done
  for round in $(seq 1 "$rounds"); do
    for name in $(rotation "$round" kwd haproxy nginx); do
      run_wrk "$shape" "$round" "$name" "$conns" $BSTAT "${prefix[@]}" -- "$@" "$(proxy_url $name)"
    done
  done
  summarise "$shape" "$description" kwd haproxy nginx
  ratio_line "$shape" kwd haproxy
  ratio_line "$shape" kwd nginx
}

# Connection: close really closes: two requests on one curl are two connections.
check_close() {
  local name n
  for name in kwd haproxy nginx; do
    n=$(curl -sv -o /dev/null -o /dev/null -H 'Connection: close' "http://127.0.0.1:${port[$name]}/" \
      "http://127.0.0.1:${port[$name]}/" 2>&1 | grep -c '^\* .*Connected to' || true)
    if [[ $n != 2 ]]; then
      echo "bench-proxies: $name kept the connection open after Connection: close ($n connects)" >&2
      exit 1
    fi
  done
  echo "  checked: each proxy closes after a Connection: close request (curl needs 2 connects for 2 requests)"
}

echo "bench-proxies: rounds $rounds x $duration, shapes: $shapes"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
has_shape keepalive64 && plain_shape keepalive64 64 "keep-alive, wrk -t1 -c64, GET /"
has_shape keepalive512 && plain_shape keepalive512 512 "keep-alive, wrk -t1 -c512, GET /"
if has_shape close64; then
  check_close
  plain_shape close64 64 "new connection per request, wrk -t1 -c64 -H 'Connection: close'" \
    -H 'Connection: close'
fi

# Every proxy held to the same CPU budget (BUDGET of one CPU, its own
# cgroup): the proxy sets the pace, so req/s is what each proxy does with
# that much CPU. A proxy that used clearly less than its budget was held up
# by wrk or the backends instead, and the line says so.
# budget_on NAME...: each proxy into its own cgroup at BUDGET of one CPU (1
# when one could not be held to it: all are let go again then).
# While a budget shape runs, the script's own autogroup (wrk, h2load, the
# backends; not the proxies, which are in cgroups of their own) runs at
# autogroup nice BUDGET_NICE (default -20; 0: none): on a machine where other
# jobs keep both CPUs busy, the load generator and the backends would
# otherwise get too little CPU to keep a proxy at its budget. The same for
# every proxy; the "CPU used" figures show what each proxy really had.
budget_nice=${BUDGET_NICE:--20}
budget_on() {
  local name
  if [[ $budget_nice != 0 && -w /proc/$$/autogroup ]]; then
    budget_nice_before=$(awk '{print $NF}' /proc/$$/autogroup)
    echo "$budget_nice" >/proc/$$/autogroup 2>/dev/null ||
      echo "bench-proxies: autogroup nice $budget_nice not allowed; the load generator runs at nice $budget_nice_before" >&2
  fi
  for name in "$@"; do
    if ! cpu_budget "$name" "$budget" "${pid[$name]}"; then
      echo "bench-proxies: could not hold $name to a CPU budget" >&2
      budget_off "$@"
      return 1
    fi
  done
}
budget_off() {
  local name
  for name in "$@"; do cpu_budget_end "${pid[$name]}"; done
  if [[ -n $budget_nice_before ]]; then
    echo "$budget_nice_before" >/proc/$$/autogroup 2>/dev/null || true
    budget_nice_before=
  fi
}
# The CPU each proxy used in SHAPE (median of its rounds, a share of one CPU),
# and a NOTE naming those below 90% of the budget: budget_used SHAPE NAME...
budget_used() {
  local shape=$1 name used=() low=()
  shift
  for name in "$@"; do
    local cores
    cores=$(awk -v s="$shape" -v n="$name" '$1==s && $3==n {print $13}' "$work/runs.tsv" | median)
    used+=("$name $(printf %.3f "$cores")")
    awk -v c="$cores" -v b="$budget" 'BEGIN {exit !(c < 0.9 * b)}' && low+=("$name")
  done
  echo "  CPU used (CPU s / wall s, median of the rounds; budget $budget): $(IFS=,; echo "${used[*]}" | sed 's/,/, /g')"
  if ((${#low[@]})); then
    echo "  NOTE: ${low[*]} used less than 90% of the budget (starved): wrk, h2load or the backends set the pace" \
      "there, or the machine's other load left less than the budget (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  fi
}
budget_shape() {  # shape description [wrk args]   (env proto=https: the TLS listeners)
  local shape=$1 description=$2
  shift 2
  budget_on kwd haproxy nginx || { echo "  $shape skipped" >&2; return 0; }
  plain_shape "$shape" 64 "$description" "$@"
  budget_off kwd haproxy nginx
  budget_used "$shape" kwd haproxy nginx
}
# A full TLS handshake per request: wrk over https with Connection: close,
# with bench/full_handshake.c preloaded. wrk alone resumes the session of a
# connection slot's last connection (TLS 1.3 tickets: 100% reuse on
# HAProxy's counters); the preloaded SSL_connect drops it before each
# handshake. Checked on kwd's own counters: one full handshake per request,
# none resumed.
full_handshake=
check_handshakes() {
  require_tools cc
  full_handshake=$work/full_handshake.so
  cc -O2 -shared -fPIC -o "$full_handshake" "$here/bench/full_handshake.c" -ldl || {
    echo "bench-proxies: cannot compile bench/full_handshake.c" >&2
    exit 1
  }
  local before after
  before=$(curl -fsS "http://127.0.0.1:$ADM/metrics" | awk '/^kwd_proxy_tls_handshakes_total/ {print $1, $2}')
  local out
  out=$(LD_PRELOAD=$full_handshake wrk -t1 -c8 -d1s -H 'Connection: close' "https://127.0.0.1:$KWD_TLS/" 2>&1)
  after=$(curl -fsS "http://127.0.0.1:$ADM/metrics" | awk '/^kwd_proxy_tls_handshakes_total/ {print $1, $2}')
  local requests
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  local verdict
  verdict=$(awk -v n="${requests:-0}" 'NR == FNR {b[$1] = $2; next} {d[$1] = $2 - b[$1]}
    END {full = 0; res = 0
         for (k in d) if (k ~ /resumed="true"/) res += d[k]; else full += d[k]
         printf "%d %d %.3f\n", full, res, n ? (full + res) / n : 0}' <(echo "$before") <(echo "$after"))
  read -r full resumed per <<<"$verdict"
  echo "  checked: wrk -H 'Connection: close' over https: $requests requests, kwd did $full full and $resumed resumed" \
    "TLS handshakes ($per per request)"
  if ((resumed > 0 || full == 0)); then
    echo "bench-proxies: wrk resumed TLS sessions (or kwd counted no handshakes): budgethandshake would not measure full handshakes" >&2
    echo "$out" >&2
    exit 1
  fi
  local name proto_line
  for name in kwd haproxy nginx; do
    proto_line=$(openssl s_client -connect "127.0.0.1:${tport[$name]}" -alpn h2,http/1.1 </dev/null 2>/dev/null |
      awk '/^New, / {sub(/^New, /, ""); l = $0} /^ALPN protocol:/ {a = $3} /Server Temp Key:/ {k = $4 $5}
           END {print l ", " k ", ALPN " a}')
    echo "  $name TLS: $proto_line"
  done
}
h2_shape() {  # shape description
  local shape=$1 description=$2
  budget_on kwd haproxy nginx || { echo "  $shape skipped" >&2; return 0; }
  echo "== $shape: $description (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  local name round out
  for name in kwd haproxy nginx; do
    out=$(timeout 60 h2load -n 100 -c 2 -m 10 -t 1 "https://127.0.0.1:${tport[$name]}/" 2>&1) || true
    if ! grep -q "Application protocol: h2" <<<"$out" || ! grep -q "status codes: 100 2xx" <<<"$out"; then
      echo "bench-proxies: h2load against $name did not get 100 HTTP/2 2xx answers:" >&2
      echo "$out" >&2
      exit 1
    fi
    timeout 60 h2load -t1 -c64 -m10 -D 1 "https://127.0.0.1:${tport[$name]}/" >/dev/null 2>&1 || true
  done
  echo "  checked: h2load speaks h2 (ALPN) to each proxy and gets 2xx"
  for round in $(seq 1 "$rounds"); do
    for name in $(rotation "$round" kwd haproxy nginx); do
      run_h2load "$shape" "$round" "$name"
    done
  done
  budget_off kwd haproxy nginx
  summarise "$shape" "$description" kwd haproxy nginx
  ratio_line "$shape" kwd haproxy
  ratio_line "$shape" kwd nginx
  budget_used "$shape" kwd haproxy nginx
}
has_shape budget64 && budget_shape budget64 "keep-alive, wrk -t1 -c64, GET /; each proxy held to $budget CPU"
has_shape budgetclose64 && ! has_shape close64 && check_close
has_shape budgetclose64 && budget_shape budgetclose64 \
  "new connection per request, wrk -t1 -c64 -H 'Connection: close'; each proxy held to $budget CPU" \
  -H 'Connection: close'
has_shape budgethandshake && check_handshakes
has_shape budgettls64 && proto=https budget_shape budgettls64 \
  "TLS 1.3 keep-alive, wrk -t1 -c64, GET /; each proxy held to $budget CPU"
has_shape budgethandshake && proto=https preload=$full_handshake budget_shape budgethandshake \
  "a full TLS 1.3 handshake per request, wrk -t1 -c64 -H 'Connection: close' over https (bench/full_handshake.c preloaded); each proxy held to $budget CPU" \
  -H 'Connection: close'
has_shape budgeth2 && h2_shape budgeth2 \
  "HTTP/2 over TLS, h2load -t1 -c64 -m10 -D ${duration%s}; each proxy held to $budget CPU"

# ----------------------------------------------------------------- sapmix
# kwd's counters from a /metrics text: requests, routed:<identifier>, lost.
sticky_counts() {
  awk '/^kwd_proxy_requests_total/ {v["requests"] += $NF}
       /^kwd_proxy_sticky_lost_total/ {v["lost"] += $NF}
       /^kwd_proxy_sticky_routed_total/ {id = $1; sub(/.*identifier="/, "", id); sub(/".*/, "", id); v["routed:" id] += $NF}
       END {for (k in v) print k, v[k]}'
}
declare -A affinity
sapmix_prepare() {
  echo "== sapmix: 70% sticky (sap-contextid, JSESSIONID from the table, affinity cookie), 30% balanced, 4 KiB cookies, 1,000 URL rules"
  # Warm-up: sid1..sid1000 log on through each proxy (balanced); the backend
  # sets JSESSIONID; kwd and HAProxy learn it, kwd answers with its affinity
  # cookie. Record which server each session landed on.
  local name
  for name in kwd-sap haproxy-sap nginx-sap; do
    curl -fsS -D "$work/$name.login" "http://127.0.0.1:${port[$name]}/login/x?sid=sid[1-$SESSIONS]" \
      >/dev/null
  done
  affinity[kwd-sap]=$(grep -i '^set-cookie: kwd_affinity=' "$work/kwd-sap.login" |
    sed -e 's/^[^:]*: //' -e 's/;.*//' | tr -d '\r' | sort -u | head -n 2 | paste -sd'|')
  affinity[haproxy-sap]="SERVERID=A|SERVERID=B"
  affinity[nginx-sap]="route=a|route=b"
  if [[ -z ${affinity[kwd-sap]} ]]; then
    echo "bench-proxies: kwd set no kwd_affinity cookie when it learned the JSESSIONIDs" >&2
    exit 1
  fi
  local learned
  learned=$(curl -fsS "http://127.0.0.1:$ADM_SAP/metrics" |
    awk '/^kwd_proxy_sessions_learned_total/ {printf "%d", $2}')
  local table
  table=$(haproxy_cmd "$work/haproxy-sap.sock" "show table java" | sed -n 's/.*used:\([0-9]*\).*/\1/p')
  echo "  warm-up: kwd learned ${learned:-0} JSESSIONIDs, HAProxy's stick table holds ${table:-0}," \
    "kwd affinity cookies: $(tr '|' '\n' <<<"${affinity[kwd-sap]}" | wc -l)"
  if ((${learned:-0} < SESSIONS || ${table:-0} < SESSIONS)); then
    echo "bench-proxies: the warm-up did not make every session known" >&2
    exit 1
  fi
  # Persistence really sticks: the named instance for sap-contextid, the
  # logon's server for JSESSIONID (nginx: the same server every time), the
  # affinity cookie's server every time. One curl per proxy (--next per
  # request); checks are "key, cookie, path, wanted server" where "=" means
  # the same server as every other request of that key.
  local abap=/sap/bc/app0/x java=/sap/bc/app1/x i cookie
  for name in kwd-sap haproxy-sap nginx-sap; do
    {
      for i in 1 2 3; do
        printf 'ctx-a\tsap-contextid=SID%%3aANON%%3a%s%%3aabc%s\t%s\tA\n' $INST_A $i $abap
        printf 'ctx-b\tsap-contextid=SID%%3aANON%%3a%s%%3aabc%s\t%s\tB\n' $INST_B $i $abap
      done
      for i in 1 2 3 $((SESSIONS / 2)) $SESSIONS; do
        local want="="
        if [[ $name != nginx-sap ]]; then
          want=$(awk -v sid="sid$i" '/^HTTP/ {srv = ""} tolower($1) == "x-served-by:" {srv = $2}
            tolower($0) ~ "jsessionid=" sid ";" {gsub(/\r/, "", srv); print srv; exit}' "$work/$name.login")
        fi
        for _ in 1 2 3; do printf 'jsession-%s\tJSESSIONID=sid%s\t%s\t%s\n' $i $i $java "${want:-?}"; done
      done
      for cookie in $(tr '|' ' ' <<<"${affinity[$name]}"); do
        for _ in 1 2 3 4; do printf 'affinity-%s\t%s\t%s\t=\n' "${cookie:0:24}" "$cookie" $java; done
      done
    } >"$work/$name.checks"
    local args=() first=1
    while IFS=$'\t' read -r _ cookie path _; do
      ((first)) || args+=(--next)
      first=0
      args+=(-fsS -o /dev/null -D - -H "Cookie: $cookie" "http://127.0.0.1:${port[$name]}$path")
    done <"$work/$name.checks"
    curl "${args[@]}" | awk -F': ' 'tolower($1) == "x-served-by" {gsub(/\r/, "", $2); print $2}' \
      >"$work/$name.served"
    if ! paste "$work/$name.checks" "$work/$name.served" | awk -F'\t' -v proxy=$name '
        NF < 5 || $5 == "" {print proxy ": no answer for " $2; bad = 1; next}
        $4 != "=" && $5 != $4 {print proxy ": " $2 " went to " $5 ", not " $4; bad = 1}
        $4 == "=" && ($1 in seen) && seen[$1] != $5 {print proxy ": " $2 " went to " seen[$1] " and " $5; bad = 1}
        {seen[$1] = $5}
        END {exit bad}' >&2; then
      echo "bench-proxies: $name does not route the SAP mix's sessions as it should" >&2
      exit 1
    fi
  done
  echo "  checked: every proxy routes sap-contextid to the named instance, JSESSIONID to the logon's server" \
    "(nginx: a consistent hash), the affinity cookie to one server"

}
sapmix_rounds() {  # shape description
  local shape=$1 description=$2 name
  echo "== $shape: $description (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for name in kwd-sap haproxy-sap nginx-sap; do
    wrk -t1 -c64 -d1s -s "$lua" "http://127.0.0.1:${port[$name]}/" -- "${affinity[$name]}" $SESSIONS \
      "$INST_A|$INST_B" >/dev/null 2>&1 || true
  done
  local round sticky_before sticky_after
  for round in $(seq 1 "$rounds"); do
    for name in $(rotation "$round" kwd-sap haproxy-sap nginx-sap); do
      [[ $name == kwd-sap ]] && sticky_before=$(curl -fsS "http://127.0.0.1:$ADM_SAP/metrics")
      run_wrk "$shape" "$round" "$name" 64 $BSTAT -- -s "$lua" "http://127.0.0.1:${port[$name]}/" -- \
        "${affinity[$name]}" $SESSIONS "$INST_A|$INST_B"
      if [[ $name == kwd-sap ]]; then
        sticky_after=$(curl -fsS "http://127.0.0.1:$ADM_SAP/metrics")
        # kwd's own count of sticky decisions in this round, by identifier.
        sticky_counts <<<"$sticky_before" >"$work/sticky.before"
        sticky_counts <<<"$sticky_after" >"$work/sticky.after"
        awk 'NR == FNR {b[$1] = $2; next} {d[$1] = $2 - b[$1]}
             END {
               total = d["requests"]; routed = 0
               for (k in d) if (k ~ /^routed:/) routed += d[k]
               printf "    kwd sticky decisions this round: %d of %d requests (%.1f%%; sap-contextid %d, jsessionid %d, affinity-cookie %d), lost %d\n",
                 routed, total, total ? 100 * routed / total : 0, d["routed:sap-contextid"],
                 d["routed:jsessionid"], d["routed:affinity-cookie"], d["lost"]
               printf "%.4f\n", total ? routed / total : 0 > "'"$work/sticky.share"'"
             }' "$work/sticky.before" "$work/sticky.after"
        emit "$shape" kwd-sap sticky_share_r$round "$(cat "$work/sticky.share")"
      fi
    done
  done
  summarise "$shape" "$description" kwd-sap haproxy-sap nginx-sap
  ratio_line "$shape" kwd-sap haproxy-sap
  ratio_line "$shape" kwd-sap nginx-sap
}
any_shape sapmix budgetsapmix && sapmix_prepare
has_shape sapmix && sapmix_rounds sapmix "wrk -t1 -c64 -s bench/sap_mix.lua"
if has_shape budgetsapmix && budget_on kwd-sap haproxy-sap nginx-sap; then
  sapmix_rounds budgetsapmix "wrk -t1 -c64 -s bench/sap_mix.lua; each proxy held to $budget CPU"
  budget_off kwd-sap haproxy-sap nginx-sap
  budget_used budgetsapmix kwd-sap haproxy-sap nginx-sap
fi

# ---------------------------------------------------------------- workers
workers() {
  # Target 4 compares equal connections per worker: with a closed-loop load an
  # event loop's events per epoll_wait grow with the connections it serves,
  # and fewer events per wake-up cost more CPU per request (bench/README.md).
  # --workers 2 gets 64 connections (about 32 per worker, SO_REUSEPORT), so
  # --workers 1 gets 32 (kwd-w1-c32). kwd-w1 (64 connections, as many in all)
  # is the context row.
  echo "== workers: kwd CPU per request, --workers 2 vs --workers 1 (kwd on CPU 0; wrk -t1 and its backend on CPU 1)"
  pid[kwd-w1-c32]=${pid[kwd-w1]}
  port[kwd-w1-c32]=${port[kwd-w1]}
  admin[kwd-w1-c32]=${admin[kwd-w1]}
  declare -A conns=([kwd-w1-c32]=32 [kwd-w1]=64 [kwd-w2]=64)
  local name round
  for name in kwd-w1-c32 kwd-w1 kwd-w2; do
    "${boost[@]}" taskset -c 1 wrk -t1 -c"${conns[$name]}" -d1s "http://127.0.0.1:${port[$name]}/" >/dev/null 2>&1 || true
  done
  for round in $(seq 1 "$rounds"); do
    for name in $(rotation "$round" kwd-w1-c32 kwd-w1 kwd-w2); do
      run_wrk workers "$round" "$name" "${conns[$name]}" $B3STAT "${boost[@]}" taskset -c 1 -- \
        "http://127.0.0.1:${port[$name]}/"
    done
  done
  summarise workers "kwd pinned to CPU 0 with --workers 1 (wrk -c32 and -c64) and --workers 2 (wrk -c64); wrk and backend on CPU 1" \
    kwd-w1-c32 kwd-w1 kwd-w2
  awk '$1=="workers" && $3=="cpu_us" {c[$2]=$4}
       END {printf "  cpu/req --workers 2 vs 1: %.2fx at equal connections per worker (target within 10%%), %.2fx at equal connections in all\n",
              c["kwd-w2"]/c["kwd-w1-c32"], c["kwd-w2"]/c["kwd-w1"]}' "$work/medians.tsv"
}
has_shape workers && workers

echo
echo "idle RSS before the runs (KiB):"
for name in $(printf '%s\n' "${!idle_rss[@]}" | sort); do
  printf "  %-14s %8s\n" "$name" "${idle_rss[$name]}"
  emit idle "$name" rss_kib "${idle_rss[$name]}"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -n $results ]] && cp "$work/medians.tsv" "$results"
if [[ -n ${HOLD:-} ]]; then  # debugging: keep everything running (and $work) for HOLD seconds
  echo "holding for $HOLD s; work directory $work"
  sleep "$HOLD" &
  wait $!
fi
exit 0
