#!/usr/bin/env bash
# kwd-proxy vs HAProxy 2.6 vs nginx 1.22 in one run, on loopback.
#
# Same two backends (one nginx, two ports, a 64-byte answer) weighted 2:1;
# each proxy gets one worker thread: kwd --workers 1, HAProxy nbthread 1 with
# cookie insert and http-reuse always, nginx worker_processes 1 with upstream
# keepalive. wrk -t1 -c64, ROUNDS interleaved rounds of DURATION each; the
# report gives medians per proxy: requests/s, p99 latency, CPU time per
# request (utime+stime from /proc/PID/stat around each round, divided by the
# requests wrk counted) and idle RSS, plus ratios against HAProxy.
#
# usage: scripts/bench-proxies.sh [BUILD_DIR]   (env: ROUNDS=5 DURATION=10s CONNECTIONS=64)
set -euo pipefail
build=${1:-build-bench}
rounds=${ROUNDS:-5}
duration=${DURATION:-10s}
conns=${CONNECTIONS:-64}
proxy_bin=$build/kwd-proxy
[[ -x $proxy_bin ]] || { echo "no $proxy_bin: run make bench" >&2; exit 1; }
for tool in haproxy nginx wrk; do
  command -v $tool >/dev/null || [[ -x /usr/sbin/$tool ]] || { echo "missing $tool" >&2; exit 1; }
done
export PATH=$PATH:/usr/sbin

work=$(mktemp -d /tmp/kwd-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

B1=19101; B2=19102; KWD=19080; HAP=19081; NGX=19082

# --- backends: one nginx, two ports ---
mkdir -p "$work/backend" "$work/nginx"
cat > "$work/backend/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/backend/nginx.pid;
error_log $work/backend/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$B1; location / { add_header X-Served-By A; return 200 "0123456789012345678901234567890123456789012345678901234567890123"; } }
  server { listen 127.0.0.1:$B2; location / { add_header X-Served-By B; return 200 "0123456789012345678901234567890123456789012345678901234567890123"; } }
}
CONF
nginx -c "$work/backend/nginx.conf" -e "$work/backend/error.log" &
pids+=($!)

# --- kwd ---
cat > "$work/snapshot.json" <<JSON
{"groups":[{"key":"bench/app","kind":"KIND_JAVA","strategy":"STRATEGY_WEIGHTED_ROUND_ROBIN",
 "loadResetIntervalSeconds":25,
 "healthCheck":{"path":"/","intervalSeconds":25,"timeoutSeconds":5,"unhealthyThreshold":2,"healthyThreshold":1},
 "sessionAffinity":{"identifiers":["SESSION_IDENTIFIER_SAP_CONTEXTID","SESSION_IDENTIFIER_SAPLB","SESSION_IDENTIFIER_JSESSIONID","SESSION_IDENTIFIER_SAP_EXT_SID"],
  "sessionTableMaxEntries":50000,"sessionTableIdleTimeoutSeconds":3600,"affinityCookieEnabled":true,"affinityCookieName":"kwd_affinity"},
 "servers":[{"name":"A","address":"127.0.0.1","port":$B1,"capacity":2,"state":"SERVER_STATE_READY"},
            {"name":"B","address":"127.0.0.1","port":$B2,"capacity":1,"state":"SERVER_STATE_READY"}]}],
 "virtualHosts":[{"host":"","defaultRootHandler":"KIND_JAVA","defaultAbapGroup":"bench/app","defaultJavaGroup":"bench/app"}]}
JSON
KWD_AFFINITY_KEY=bench "$proxy_bin" serve --snapshot "$work/snapshot.json" --listen 127.0.0.1:$KWD \
  --admin-listen 127.0.0.1:19901 --workers 1 --access-log off >"$work/kwd.out" 2>"$work/kwd.log" &
kwd_pid=$!
pids+=($kwd_pid)

# --- HAProxy ---
cat > "$work/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
backend app
  balance roundrobin
  cookie SERVERID insert indirect nocache
  server A 127.0.0.1:$B1 weight 2 cookie A
  server B 127.0.0.1:$B2 weight 1 cookie B
frontend web
  bind 127.0.0.1:$HAP
  default_backend app
CONF
haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
hap_pid=$!
pids+=($hap_pid)

# --- nginx as a proxy ---
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
master_process off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream app { server 127.0.0.1:$B1 weight=2; server 127.0.0.1:$B2 weight=1; keepalive 64; }
  server {
    listen 127.0.0.1:$NGX;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
ngx_pid=$!
pids+=($ngx_pid)

sleep 1
for port in $B1 $B2 $KWD $HAP $NGX; do
  curl -fsS -o /dev/null "http://127.0.0.1:$port/" || { echo "port $port not answering" >&2; cat "$work"/*.log >&2; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
hz=$(getconf CLK_TCK)

declare -A idle_rss=([kwd]=$(rss_kib $kwd_pid) [haproxy]=$(rss_kib $hap_pid) [nginx]=$(rss_kib $ngx_pid))
declare -A port=([kwd]=$KWD [haproxy]=$HAP [nginx]=$NGX)
declare -A pid=([kwd]=$kwd_pid [haproxy]=$hap_pid [nginx]=$ngx_pid)
: > "$work/results.tsv"
for round in $(seq 1 "$rounds"); do
  for name in kwd haproxy nginx; do
    before=$(cpu_ticks ${pid[$name]})
    out=$(wrk -t1 -c"$conns" -d"$duration" --latency "http://127.0.0.1:${port[$name]}/")
    after=$(cpu_ticks ${pid[$name]})
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v=v*1000}; print v}' <<<"$out")
    errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
    cpu_us=$(awk -v b="$before" -v a="$after" -v n="$requests" -v hz="$hz" 'BEGIN {printf "%.3f", (a-b)/hz*1e6/n}')
    printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$round" "$name" "$rps" "$p99" "$cpu_us" "$errors" >> "$work/results.tsv"
    printf "round %s %-8s %10s req/s  p99 %8s ms  cpu %s us/req %s\n" "$round" "$name" "$rps" "$p99" "$cpu_us" "$errors"
  done
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
echo
echo "medians over $rounds rounds (wrk -t1 -c$conns -d$duration, one worker each, backends weighted 2:1)"
printf "%-8s %12s %10s %14s %10s\n" proxy "req/s" "p99 ms" "cpu us/req" "idle RSS"
declare -A m_rps m_p99 m_cpu
for name in kwd haproxy nginx; do
  m_rps[$name]=$(awk -v n=$name '$2==n {print $3}' "$work/results.tsv" | median)
  m_p99[$name]=$(awk -v n=$name '$2==n {print $4}' "$work/results.tsv" | median)
  m_cpu[$name]=$(awk -v n=$name '$2==n {print $5}' "$work/results.tsv" | median)
  printf "%-8s %12s %10s %14s %7s KiB\n" $name "${m_rps[$name]}" "${m_p99[$name]}" "${m_cpu[$name]}" "${idle_rss[$name]}"
done
echo
awk -v k="${m_rps[kwd]}" -v h="${m_rps[haproxy]}" -v n="${m_rps[nginx]}" \
    -v kp="${m_p99[kwd]}" -v hp="${m_p99[haproxy]}" -v kc="${m_cpu[kwd]}" -v hc="${m_cpu[haproxy]}" \
    -v nc="${m_cpu[nginx]}" 'BEGIN {
  printf "kwd/haproxy: req/s %.2fx (target >= 1.25), cpu/req %.2fx (target <= 0.70), p99 %.2fx (target <= 0.80)\n", k/h, kc/hc, kp/hp
  printf "kwd/nginx:   req/s %.2fx, cpu/req %.2fx\n", k/n, kc/nc
}'
echo "kwd idle RSS ${idle_rss[kwd]} KiB (target < 8192)"
