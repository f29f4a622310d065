#!/usr/bin/env bash
# What one request costs kwd-proxy and HAProxy 2.6, counted rather than
# timed (issue 25: "where a target is not reached, the note says what bounds
# it"): system calls by type, instructions, TCP segments and CPU time per
# request, for keep-alive, a new connection per request, TLS keep-alive and
# HTTP/2 over TLS.
#
#   bench/cost_per_request.sh BUILD_DIR
#   env: DURATION=5 seconds of each counted run; COST_SHAPES="keepalive close tls"
#        (also: h2, HTTP/2 over TLS, h2load -cCONNECTIONS -m10 instead of wrk);
#        COST_PROXIES="kwd kwd-noring haproxy"; CALLGRIND=1 (0: no instruction
#        counts); CG_SECONDS=10 seconds of the counted window under callgrind,
#        CG_WARM=20 seconds of the same wrk run before it (the connections'
#        handshakes); CG_KEEP=PREFIX keeps each dump as PREFIX.PROXY.SHAPE.out;
#        PERF=1 also a perf record -e cpu-clock profile per proxy and shape;
#        CALLGRIND_SHAPES="keepalive close tls h2" CALLGRIND_PROXIES="kwd haproxy"
#        (the runs under callgrind); CONNECTIONS=64
#
# The same set-up as scripts/bench-proxies.sh's plain shapes: one nginx
# backend with two ports weighted 2:1, one worker/thread per proxy, the same
# X-Forwarded-* and X-Request-Id headers, HAProxy with `http-reuse always`
# and its SERVERID cookie, kwd with its affinity cookie; the TLS listeners
# with one EC P-256 certificate. kwd-noring is kwd with `--io-uring off`: its
# system calls by type are what io_uring batches into io_uring_enter.
#
# Per proxy and shape, wrk -t1 -cCONNECTIONS, each figure from a run of its own:
#   - CPU us/request (utime+stime from /proc/PID/stat; user and system
#     apart), TCP connections opened per request (ActiveOpens) and segments per
#     request (Tcp OutSegs from /proc/net/snmp: every segment on loopback, the
#     client's, the proxy's and the backend's, both directions). The script
#     runs in a network namespace of its own (unshare -n), so no other
#     process's traffic is counted;
#   - system calls per request by type: `strace -c -f -p PID` attached during
#     the run (strace slows the proxy several times: the counts are what
#     matters, not the times);
#   - instructions per request: a second instance of the proxy under
#     `valgrind --tool=callgrind --instr-atstart=no` (about 50x slower),
#     counted in a window in the middle of one wrk run (callgrind_control -i
#     on, then off), so no handshake or connection set-up of keep-alive falls
#     in it; Ir / the requests of the window: kwd's calls of CountAndLog (one
#     per request), for HAProxy the backend's (nginx stub_status, read on
#     both sides of each switch). bench/callgrind_profile.py prints the top
#     functions (self Ir), kwd's code / OpenSSL / libc, and the OpenSSL
#     functions kwd calls.
# The other figures are per request as wrk counts them (requests completed
# in the run). Needs root (unshare; exit status 77 without), haproxy, nginx, wrk,
# strace, valgrind, openssl.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
export PATH=$PATH:/usr/sbin:/sbin

build=${1:?usage: bench/cost_per_request.sh BUILD_DIR}
build=$(cd "$build" && pwd)
# A network namespace of its own: the segment counters are this script's only.
if [[ -z ${KWD_COST_NETNS:-} ]]; then
  if ((EUID != 0)); then
    echo "cost_per_request: needs root (a network namespace of its own, strace -p); skipped" >&2
    exit 77
  fi
  require_tools unshare ip
  exec env KWD_COST_NETNS=1 unshare -n -- bash "$0" "$build"
fi
ip link set lo up

seconds=${DURATION:-5}
seconds=${seconds%s}
shapes=${COST_SHAPES:-keepalive close tls}
proxies=${COST_PROXIES:-kwd kwd-noring haproxy}
callgrind=${CALLGRIND:-1}
cg_seconds=${CG_SECONDS:-10}
cg_warm=${CG_WARM:-20}
perf=${PERF:-0}
((perf)) && require_tools perf
cg_shapes=" ${CALLGRIND_SHAPES:-keepalive close tls h2} "
cg_proxies=" ${CALLGRIND_PROXIES:-kwd haproxy} "
conns=${CONNECTIONS:-64}
require_tools haproxy nginx wrk strace openssl curl "$build/kwd-proxy" "$build/kwd-controller"
[[ " $shapes " == *" h2 "* ]] && require_tools h2load
((callgrind)) && require_tools valgrind callgrind_control
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
# OpenSSL's archives, to tell its functions in the statically linked kwd-proxy.
openssl_archives=
for a in libssl.a libcrypto.a; do
  a=$(gcc -print-file-name=$a 2>/dev/null || true)
  [[ -f $a ]] && openssl_archives+=" $a"
done

bench_work kwd-cost
trap 'exit 130' INT TERM

# ---- backend: one nginx, two ports
B1=$(free_port)
B2=$(free_port)
BS=$(free_port)  # nginx's request count (stub_status)
mkdir -p "$work/backend"
cat >"$work/backend/nginx.conf" <<CONF
$(nginx_head "$work/backend" 8192 "master_process off;")
$(nginx_answer "$B1" A)
$(nginx_answer "$B2" B)
  server { listen 127.0.0.1:$BS; location / { stub_status; } }
}
CONF
nginx -c "$work/backend/nginx.conf" -e "$work/backend/error.log" &
pids+=($!)
wait_port "$B1"

# ---- kwd's snapshot (bench-proxies.sh's plain group) and certificate
bench_cert "$work/tls"
plain_objects "$work/objects" "$B1" "$B2"
"$build/kwd-controller" compile --source="dir:$work/objects" >"$work/snapshot.json"

# ---- starting a proxy: start NAME [PREFIX...] sets pid[NAME], port[NAME], tport[NAME]
declare -A pid port tport
start() {
  local name=$1
  shift
  local p t
  p=$(free_port)
  t=$(free_port)
  case $name in
    kwd*)
      local flags=()
      [[ $name == kwd-noring* ]] && flags=(--io-uring off)
      KWD_AFFINITY_KEY=bench "$@" "$build/kwd-proxy" serve --snapshot "$work/snapshot.json" \
        --listen "127.0.0.1:$p" --admin-listen "127.0.0.1:$(free_port)" --workers 1 --access-log off \
        --log-level warn --tls-listen "127.0.0.1:$t" --tls-cert-dir "$work/tls/certs" "${flags[@]}" \
        >"$work/$name.out" 2>"$work/$name.log" &
      ;;
    haproxy*)
      cat >"$work/$name.cfg" <<CONF
global
  nbthread 1
  maxconn 8192
$(haproxy_defaults 60s)
$(haproxy_app_backend "$B1" "$B2")
frontend web
  bind 127.0.0.1:$p
  bind 127.0.0.1:$t ssl crt $work/tls/haproxy.pem alpn h2,http/1.1 ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256
  option forwardfor
  http-request set-header X-Forwarded-Proto %[ssl_fc,iif(https,http)]
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  unique-id-format %{+X}o%ci%cp%Ts%rt%pid
  unique-id-header X-Request-Id
  default_backend app
CONF
      "$@" haproxy -f "$work/$name.cfg" -db >"$work/$name.log" 2>&1 &
      ;;
  esac
  pids+=($!)
  pid[$name]=$!
  port[$name]=$p
  tport[$name]=$t
  for _ in $(seq 1 300); do  # under valgrind a start takes seconds
    curl -fsS -o /dev/null "http://127.0.0.1:$p/" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "cost_per_request: $name did not answer on $p" >&2
  tail -n 5 "$work/$name.log" >&2
  exit 1
}
stop() { kill "${pid[$1]}" 2>/dev/null || true; wait "${pid[$1]}" 2>/dev/null || true; }

url() {  # name shape
  if [[ $2 == tls || $2 == h2 ]]; then echo "https://127.0.0.1:${tport[$1]}/"; else echo "http://127.0.0.1:${port[$1]}/"; fi
}
# wrk's extra arguments for a shape, into the array extra.
wrk_args() {  # shape
  extra=()
  if [[ $1 == close ]]; then extra=(-H 'Connection: close'); fi
}
# The load of a shape for SECONDS, into the array cmd (run directly, so that
# a background one's $! is the load generator itself): wrk -t1
# -cCONNECTIONS, or for h2 h2load with CONNECTIONS connections of 10
# concurrent streams each (the budgeth2 shape of scripts/bench-proxies.sh),
# one thread.
load_cmd() {  # shape seconds target [wrk options...]
  local shape=$1 secs=$2 target=$3
  shift 3
  if [[ $shape == h2 ]]; then
    cmd=(h2load -t1 -c"$conns" -m10 -D "$secs" "$target")
  else
    wrk_args "$shape"
    cmd=(wrk -t1 -c"$conns" -d"${secs}s" "$@" "${extra[@]}" "$target")
  fi
}
tcp_out_segs() { awk '$1 == "Tcp:" && !h {h = 1; for (i = 1; i <= NF; i++) c[$i] = i; next} $1 == "Tcp:" {print $c["OutSegs"]}' /proc/net/snmp; }
# TCP connections opened on loopback (ActiveOpens: client and proxy to backend).
tcp_opens() { awk '$1 == "Tcp:" && !h {h = 1; for (i = 1; i <= NF; i++) c[$i] = i; next} $1 == "Tcp:" {print $c["ActiveOpens"]}' /proc/net/snmp; }
# Requests completed: wrk's "N requests in", h2load's "requests: ... N succeeded".
requests_of() { awk '/requests in/ {print $1} $1 == "requests:" {print $8}' "$1"; }

results=$work/results.tsv  # proxy shape metric value
: >"$results"
put() { printf '%s\t%s\t%s\t%s\n' "$@" >>"$results"; }

# ---- 1: CPU and segments per request; 2: system calls per request
plain_runs() {  # name shape
  local name=$1 shape=$2 target
  target=$(url "$name" "$shape")
  load_cmd "$shape" 1 "$target"
  "${cmd[@]}" >/dev/null 2>&1 || true
  local before after s_before s_after n u_before u_after o_before o_after
  before=$(cpu_ticks "${pid[$name]}")
  u_before=$(awk '{print $14}' "/proc/${pid[$name]}/stat")
  o_before=$(tcp_opens)
  s_before=$(tcp_out_segs)
  load_cmd "$shape" "$seconds" "$target"
  "${cmd[@]}" >"$work/wrk.out" 2>&1
  s_after=$(tcp_out_segs)
  o_after=$(tcp_opens)
  after=$(cpu_ticks "${pid[$name]}")
  u_after=$(awk '{print $14}' "/proc/${pid[$name]}/stat")
  n=$(requests_of "$work/wrk.out")
  put "$name" "$shape" requests "$n"
  put "$name" "$shape" cpu_us "$(cpu_us_per "$before" "$after" "$n" %.2f)"
  put "$name" "$shape" cpu_user_us "$(cpu_us_per "$u_before" "$u_after" "$n" %.2f)"
  put "$name" "$shape" cpu_sys_us "$(cpu_us_per "$((before - u_before))" "$((after - u_after))" "$n" %.2f)"
  put "$name" "$shape" tcp_conns "$(awk -v d=$((o_after - o_before)) -v n="$n" 'BEGIN {printf "%.3f", d / n}')"
  put "$name" "$shape" segs "$(awk -v d=$((s_after - s_before)) -v n="$n" 'BEGIN {printf "%.2f", d / n}')"
  # System calls: strace attached to every thread for the run.
  strace -c -f -p "${pid[$name]}" -o "$work/strace.out" 2>/dev/null &
  local st=$!
  sleep 1
  load_cmd "$shape" "$seconds" "$target" --timeout 10s
  "${cmd[@]}" >"$work/wrk.out" 2>&1
  kill -INT "$st" 2>/dev/null || true
  wait "$st" 2>/dev/null || true
  n=$(requests_of "$work/wrk.out")
  awk -v n="$n" -v p="$name" -v s="$shape" '
    $1 ~ /^-+$/ {dash++; next}
    dash == 1 && NF >= 5 {calls = $4; name = $NF; if (n) printf "%s\t%s\tsys:%s\t%.3f\n", p, s, name, calls / n}
    dash == 2 && $NF == "total" {if (n) printf "%s\t%s\tsys:total\t%.3f\n", p, s, $4 / n}' "$work/strace.out" >>"$results"
}

# ---- 4 (PERF=1): where the CPU goes, perf record -e cpu-clock -g for the run
# (shares of the process's samples, callers included)
perf_run() {  # name shape
  local name=$1 shape=$2 target w
  target=$(url "$name" "$shape")
  load_cmd "$shape" "$((seconds + 2))" "$target"
  "${cmd[@]}" >/dev/null 2>&1 &
  w=$!
  sleep 1
  perf record -q -e cpu-clock -g -p "${pid[$name]}" -o "$work/perf.data" -- sleep "$seconds" >/dev/null 2>&1 || true
  wait "$w" || true
  [[ -s $work/perf.data ]] || { echo "  perf record gave nothing for $name" >&2; return 0; }
  perf report -i "$work/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null |
    awk -v p="$name" -v s="$shape" '$2 == "[kernel.kallsyms]" {printf "%s\t%s\tperf:kernel %%\t%s\n", p, s, $1}' >>"$results"
  perf report -i "$work/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
    awk -v p="$name" -v s="$shape" '
      $3 == "[k]" && $4 ~ /^(tcp_sendmsg|net_rx_action|tcp_recvmsg|do_epoll_wait|__schedule|io_submit_sqes|__sys_accept4|tcp_v4_connect|do_accept|io_accept|fget|io_file_get_normal|do_syscall_64|__do_sys_io_uring_enter|io_issue_sqe)$/ {
        printf "%s\t%s\tperf:%s %%\t%s\n", p, s, $4, $1}' >>"$results"
  rm -f "$work/perf.data"
}

# ---- 3: instructions per request under callgrind: a counted window in the
# middle of one wrk run, so that no handshake and no connection set-up falls
# in it (valgrind starts with instrumentation off; callgrind_control -i
# switches it on and off). The requests of the window are the backend's:
# nginx's stub_status request count, read on both sides of each switch
# (the two reads' mean), its own requests taken off.
backend_requests() { curl -fsS "http://127.0.0.1:$BS/" | awk '/^ *[0-9]+ +[0-9]+ +[0-9]+ *$/ {print $3}'; }
callgrind_runs() {  # name shape
  local name=$1 shape=$2 target
  local cg=$name-cg
  start "$cg" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/$cg.%p.out" --dump-instr=no
  target=$(url "$cg" "$shape")
  load_cmd "$shape" "$((cg_warm + cg_seconds + 30))" "$target" --timeout 30s
  "${cmd[@]}" >"$work/wrk.out" 2>&1 &
  local w=$! r1 r2 r3 r4
  sleep "$cg_warm"
  r1=$(backend_requests)
  callgrind_control -i on "${pid[$cg]}" >/dev/null
  r2=$(backend_requests)
  sleep "$cg_seconds"
  r3=$(backend_requests)
  callgrind_control -i off "${pid[$cg]}" >/dev/null
  r4=$(backend_requests)
  callgrind_control -d "${pid[$cg]}" >/dev/null
  kill "$w" 2>/dev/null || true
  wait "$w" 2>/dev/null || true
  local n dump ir
  # Each read is one request of its own; the mean of the reads on either side.
  n=$(awk -v a="$r1" -v b="$r2" -v c="$r3" -v d="$r4" 'BEGIN {printf "%.0f", (c + d) / 2 - (a + b) / 2 - 2}')
  if ((n <= 0)); then
    echo "cost_per_request: no request completed under callgrind ($name, $shape):" >&2
    cat "$work/wrk.out" >&2
    n=0
  fi
  sleep 1
  dump=$(ls -t "$work/$cg".*.out.* 2>/dev/null | head -n 1)
  # kwd counts each request once (CountAndLog): the exact figure, where the
  # backend's is an estimate.
  local count=()
  [[ $name == kwd* ]] && count=(--calls 'kwd::proxy::CountAndLog(')
  "$py" "$here/callgrind_profile.py" "$dump" "$n" "${count[@]}" $openssl_archives >"$work/profile.out"
  n=$(awk 'NR == 1 {print $1}' "$work/profile.out")
  ir=$(awk 'NR == 1 {print $(NF - 1)}' "$work/profile.out")
  put "$name" "$shape" instructions "$ir"
  put "$name" "$shape" cg_requests "$n"
  echo "  $name $shape under callgrind: backend count $r1/$r2 to $r3/$r4 around the switches; $(head -n 1 "$work/profile.out"):"
  tail -n +2 "$work/profile.out" | sed 's/^/    /'
  [[ -n ${CG_KEEP:-} ]] && cp "$dump" "$CG_KEEP.$name.$shape.out"
  stop "$cg"
  rm -f "$work/$cg".*
}

echo "cost_per_request: wrk -t1 -c$conns, ${seconds}s per counted run, shapes: $shapes, proxies: $proxies" \
  "(load average $(cut -d' ' -f1-3 /proc/loadavg))"
for name in $proxies; do
  start "$name"
  for shape in $shapes; do
    echo "== $name $shape"
    plain_runs "$name" "$shape"
    if ((perf)); then perf_run "$name" "$shape"; fi
    if ((callgrind)) && [[ $cg_shapes == *" $shape "* && $cg_proxies == *" $name "* ]]; then
      callgrind_runs "$name" "$shape"
    fi
  done
  stop "$name"
done

# ---- the table: one block per shape, a row per figure, a column per proxy
echo
echo "per request (wrk -t1 -c$conns; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end):"
for shape in $shapes; do
  echo "-- $shape"
  awk -F'\t' -v s="$shape" -v list="$proxies" '
    BEGIN {np = split(list, ps, " ")}
    $2 == s {v[$1, $3] = $4; if (!($3 in seen)) {seen[$3] = 1; order[++nm] = $3}}
    END {
      printf "  %-28s", "figure"; for (i = 1; i <= np; i++) printf " %14s", ps[i]; printf "\n"
      for (j = 1; j <= nm; j++) {
        m = order[j]
        if (m ~ /^sys:/) continue
        printf "  %-28s", m; for (i = 1; i <= np; i++) printf " %14s", ((ps[i], m) in v) ? v[ps[i], m] : "-"; printf "\n"
      }
      # system calls: those at 0.01 or more per request for some proxy, total last
      for (j = 1; j <= nm; j++) {
        m = order[j]
        if (m !~ /^sys:/ || m == "sys:total") continue
        keep = 0; for (i = 1; i <= np; i++) if (v[ps[i], m] + 0 >= 0.01) keep = 1
        if (!keep) continue
        printf "  %-28s", m; for (i = 1; i <= np; i++) printf " %14s", ((ps[i], m) in v) ? v[ps[i], m] : "-"; printf "\n"
      }
      printf "  %-28s", "sys:total"; for (i = 1; i <= np; i++) printf " %14s", ((ps[i], "sys:total") in v) ? v[ps[i], "sys:total"] : "-"; printf "\n"
    }' "$results"
done

# ---- rows for scripts/run-benchmarks.sh's table (kwd and HAProxy; context, no target)
for shape in $shapes; do
  for metric in cpu_us instructions sys:total segs; do
    awk -F'\t' -v s="$shape" -v m="$metric" '
      $2 == s && $3 == m {v[$1] = $4}
      END {
        if (!("kwd" in v)) exit
        label = m == "cpu_us" ? "CPU/request" : m == "sys:total" ? "system calls/request" : m == "segs" ? "TCP segments/request" : "instructions/request"
        unit = m == "cpu_us" ? "us" : ""
        printf "BENCH-ROW\tcost %s %s\t%s\t%s\t-\t%s\t-\n", s, label, v["kwd"], ("haproxy" in v) ? v["haproxy"] : "-", unit
      }' "$results"
  done
done
