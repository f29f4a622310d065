#!/usr/bin/env bash
# Memory of kwd-proxy next to HAProxy 2.6 and nginx 1.22, in one run, on loopback.
#
# 1. Idle RSS: kwd-proxy serve with a SNAPSHOT_GROUPS-group snapshot (compiled by
#    kwd-controller from generated LogonGroups and one UrlMapping), HAProxy
#    and nginx configured as in scripts/bench-proxies.sh (one worker each,
#    the same two nginx backends weighted 2:1), VmRSS 2 s after start.
# 2. RSS under CONNECTIONS idle keep-alive connections: a Python client opens
#    them to one proxy at a time, sends one request on each, reads the answer
#    and keeps them all open; VmRSS is read 1 s after the last answer. The
#    per-connection figure is (RSS with connections - idle RSS) / connections.
#    HAProxy reserves two descriptors per connection, so under this machine's
#    descriptor limit (ulimit -Hn) it holds fewer: the table says how many.
#
# Targets (issue 16): kwd idle RSS <= 10 MiB with 100 groups; <= 64 MiB with
# 10,000 idle connections.
#
# usage: bench/memory_bench.sh [BUILD_DIR]
#   env: SNAPSHOT_GROUPS=100 CONNECTIONS=10000 PROXIES="kwd haproxy nginx"
#   BUILD_DIR holds kwd-proxy and kwd-controller (default build-bench).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:-build-bench}
groups=${SNAPSHOT_GROUPS:-100}
conns=${CONNECTIONS:-10000}
proxies=${PROXIES:-kwd haproxy nginx}
proxy_bin=$build/kwd-proxy
controller_bin=$build/kwd-controller
for bin in "$proxy_bin" "$controller_bin"; do
  [[ -x $bin ]] || { echo "no $bin: run make bench (or give the build directory)" >&2; exit 1; }
done
export PATH=$PATH:/usr/sbin
for tool in haproxy nginx python3; do
  command -v $tool >/dev/null || { echo "missing $tool" >&2; exit 1; }
done

bench_work kwd-membench

# Free loopback ports (other benchmarks may run on the machine).
B1=$(free_port); B2=$(free_port); KWD=$(free_port); HAP=$(free_port); NGX=$(free_port)
fd_limit=$(ulimit -Hn)
ulimit -n "$fd_limit"

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
KWD_AFFINITY_KEY=bench "$proxy_bin" serve --snapshot "$work/snapshot.json" --listen 127.0.0.1:$KWD \
  --admin-listen 127.0.0.1:0 --workers 1 --access-log off >"$work/kwd.out" 2>"$work/kwd.log" &
kwd_pid=$!
pids+=($kwd_pid)

# --- HAProxy (as in scripts/bench-proxies.sh; maxconn what the descriptor
# limit allows: two descriptors per connection plus a few) ---
hap_maxconn=$(( (fd_limit - 200) / 2 ))
(( hap_maxconn > conns + 100 )) && hap_maxconn=$((conns + 100))
cat > "$work/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn $hap_maxconn
$(haproxy_defaults 600s)
$(haproxy_app_backend $B1 $B2)
frontend web
  bind 127.0.0.1:$HAP
  default_backend app
CONF
haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
hap_pid=$!
pids+=($hap_pid)

# --- nginx as a proxy (as in scripts/bench-proxies.sh, with room for the
# connections: worker_connections is preallocated, so its idle RSS is higher
# than with bench-proxies.sh's 4096) ---
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
    listen 127.0.0.1:$NGX;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
ngx_pid=$!
pids+=($ngx_pid)

wait_port() {
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$1/" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "port $1 not answering" >&2
  cat "$work"/*.log >&2
  exit 1
}
for port in $B1 $B2 $KWD $HAP $NGX; do wait_port $port; done
sleep 2

declare -A port=([kwd]=$KWD [haproxy]=$HAP [nginx]=$NGX)
declare -A pid=([kwd]=$kwd_pid [haproxy]=$hap_pid [nginx]=$ngx_pid)
declare -A idle loaded held
for name in $proxies; do
  idle[$name]=$(rss_kib ${pid[$name]})
done

# The client: opens the connections in batches, one request each, keeps the
# answered ones open, writes "<held> <failed>" to the ready file and sleeps
# until killed.
cat > "$work/client.py" <<'PY'
import resource, socket, sys, time
port, count, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
request = b"GET / HTTP/1.1\r\nHost: bench.example\r\n\r\n"

def answered(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            return False
        body += chunk
    return head.startswith(b"HTTP/1.1 200")

kept, failed = [], 0
for start in range(0, count, 100):
    batch = []
    for _ in range(start, min(count, start + 100)):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(request)
            batch.append(s)
        except OSError:
            failed += 1
    for s in batch:
        try:
            ok = answered(s)
        except OSError:
            ok = False
        if ok:
            kept.append(s)
        else:
            failed += 1
            s.close()
with open(ready, "w") as f:
    f.write("%d %d\n" % (len(kept), failed))
time.sleep(3600)
PY

for name in $proxies; do
  want=$conns
  [[ $name == haproxy ]] && (( want > hap_maxconn - 10 )) && want=$((hap_maxconn - 10))
  rm -f "$work/ready"
  python3 "$work/client.py" ${port[$name]} "$want" "$work/ready" &
  client=$!
  for _ in $(seq 1 1200); do
    [[ -s $work/ready ]] && break
    kill -0 $client 2>/dev/null || break
    sleep 0.1
  done
  [[ -s $work/ready ]] || { echo "$name: the client did not finish" >&2; kill $client; exit 1; }
  sleep 1
  loaded[$name]=$(rss_kib ${pid[$name]})
  read -r held[$name] failed < "$work/ready"
  kill $client 2>/dev/null || true
  wait $client 2>/dev/null || true
  (( failed == 0 )) || echo "$name: $failed of $want connections got no answer" >&2
  sleep 1
done

echo "memory (VmRSS): kwd-proxy with a $groups-group snapshot, HAProxy and nginx as in scripts/bench-proxies.sh"
printf "%-8s %14s %12s %22s %18s\n" proxy "idle RSS KiB" connections "RSS with them KiB" "KiB per conn"
for name in $proxies; do
  per=$(awk -v a="${loaded[$name]}" -v b="${idle[$name]}" -v n="${held[$name]}" \
    'BEGIN {if (n > 0) printf "%.2f", (a - b) / n; else print "-"}')
  printf "%-8s %14s %12s %22s %18s\n" $name "${idle[$name]}" "${held[$name]}" "${loaded[$name]}" "$per"
done
awk -v i="${idle[kwd]}" -v l="${loaded[kwd]}" -v n="${held[kwd]}" 'BEGIN {
  printf "kwd targets: idle %.1f MiB (<= 10), with %d connections %.1f MiB (<= 64)\n", i / 1024, n, l / 1024 }'
