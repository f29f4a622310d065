# What the benchmark scripts share (scripts/bench-proxies.sh, bench/*.sh,
# bench/plain_shapes/*.sh): source it from bash, e.g.
#   source "$(dirname "$0")/lib.sh"
# Functions only, plus BENCH_BODY; nothing runs when it is sourced.

# The backends' answer: 64 bytes.
BENCH_BODY=0123456789012345678901234567890123456789012345678901234567890123

# A fresh work directory in $work (removed on exit) and the array $pids of
# processes killed on exit: bench_work NAME (/tmp/NAME.XXXXXX).
bench_work() {
  work=$(mktemp -d "/tmp/$1.XXXXXX")
  pids=()
  trap bench_cleanup EXIT
}
bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  local g
  for g in "${cpu_budget_groups[@]}"; do rmdir "$g" 2>/dev/null || true; done
  rm -rf "$work"
}

# CPU budgets: a process held to a share of one CPU by a cgroup of its own
# (CFS bandwidth: cgroup v1 cpu.cfs_quota_us, or v2 cpu.max; a 10 ms period),
# so that it, not the load generator or the backends, sets the pace.
#   cpu_budget_init            0 when budgets can be set here (root, a writable cpu controller)
#   cpu_budget NAME SHARE PID  PID (all its threads) into group kwd-bench-NAME-$$,
#                              SHARE of one CPU (0.4), at the largest CPU weight
#                              (so that other jobs on the machine do not take
#                              the budget from it)
#   cpu_budget_end PID         PID back into the group it came from
# The groups are removed on exit (bench_cleanup).
cpu_budget_groups=()
declare -A cpu_budget_from=()
cpu_budget_root=
cpu_budget_v=
cpu_budget_init() {
  if [[ -w /sys/fs/cgroup/cpu/cpu.cfs_quota_us || -w /sys/fs/cgroup/cpu/cgroup.procs ]]; then
    cpu_budget_root=/sys/fs/cgroup/cpu cpu_budget_v=1
  elif grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    # v2 with the cpu controller on for the root's children (not turned on
    # here: that would outlive the run).
    cpu_budget_root=/sys/fs/cgroup cpu_budget_v=2
  else
    return 1
  fi
  local probe=$cpu_budget_root/kwd-bench-probe-$$
  mkdir "$probe" 2>/dev/null || return 1
  rmdir "$probe"
}
cpu_budget() {
  local group=$cpu_budget_root/kwd-bench-$1-$$ period=10000
  local quota from
  quota=$(awk -v s="$2" -v p=$period 'BEGIN {printf "%d", s * p}')
  # Where the process is now (its line for the cpu controller, v1, or the
  # unified line, v2), for cpu_budget_end.
  if ((cpu_budget_v == 1)); then
    from=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' "/proc/$3/cgroup")
  else
    from=$(awk -F: '$1 == "0" {print $3}' "/proc/$3/cgroup")
  fi
  cpu_budget_from[$3]=${from%/}
  if [[ ! -d $group ]]; then
    mkdir "$group" || return 1
    cpu_budget_groups+=("$group")
  fi
  # The quota caps the group; the largest weight makes sure it gets its quota
  # when other jobs keep the machine's CPUs busy.
  if ((cpu_budget_v == 1)); then
    echo $period >"$group/cpu.cfs_period_us" && echo "$quota" >"$group/cpu.cfs_quota_us" || return 1
    echo 262144 >"$group/cpu.shares" 2>/dev/null || true
  else
    echo "$quota $period" >"$group/cpu.max" || return 1
    echo 10000 >"$group/cpu.weight" 2>/dev/null || true
  fi
  echo "$3" >"$group/cgroup.procs"
}
cpu_budget_end() {
  echo "$1" >"$cpu_budget_root${cpu_budget_from[$1]:-}/cgroup.procs" 2>/dev/null || true
}

# A loopback port that was free a moment ago.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# Waits (10 s at most) until 127.0.0.1:PORT accepts connections; exits otherwise.
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "port $1 did not open" >&2
  exit 1
}

# utime+stime of PID in clock ticks, and its resident memory in KiB.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
# Times PID's threads went to sleep (voluntary context switches, all threads).
sleeps() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {n += $2} END {print n + 0}'; }
# CPU microseconds per request: TICKS_BEFORE TICKS_AFTER REQUESTS FORMAT
# (printf format of the figure; 0 when there were no requests).
cpu_us_per() {
  awk -v b="$1" -v a="$2" -v n="$3" -v hz="$(getconf CLK_TCK)" -v f="$4" \
    'BEGIN {printf f, n ? (a - b) / hz * 1e6 / n : 0}'
}

# The median of the numbers on stdin, one a line ("nan" when none).
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# A percentile of `wrk --latency` output on stdin in ms: wrk_ms 99%
wrk_ms() {
  awk -v p="$1" '$1 == p {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v=v*1000}; print v}'
}

# An nginx server block answering BENCH_BODY with X-Served-By NAME:
# nginx_answer PORT NAME [listen parameters]
nginx_answer() {
  echo "  server { listen 127.0.0.1:$1${3:+ $3}; location / { add_header X-Served-By $2; return 200 \"$BENCH_BODY\"; } }"
}

# HAProxy's backend "app": the two backends weighted 2:1, its SERVERID
# cookie naming them A and B: haproxy_app_backend PORT_A PORT_B
haproxy_app_backend() {
  cat <<CONF
backend app
  balance roundrobin
  cookie SERVERID insert indirect nocache
  server A 127.0.0.1:$1 weight 2 cookie A
  server B 127.0.0.1:$2 weight 1 cookie B
CONF
}

# The start of an nginx.conf, up to and into `http {`: one worker in the
# foreground, its pid file and error log in DIR, CONNECTIONS per worker, no
# access log, keep-alive without a request limit. LINE (optional) goes into
# the main context: nginx_head DIR CONNECTIONS [LINE]
nginx_head() {
  printf 'worker_processes 1;\ndaemon off;\n'
  if [[ -n ${3:-} ]]; then printf '%s\n' "$3"; fi
  cat <<CONF
pid $1/nginx.pid;
error_log $1/error.log;
events { worker_connections $2; }
http {
  access_log off;
  keepalive_requests 1000000;
CONF
}

# HAProxy's defaults section: HTTP mode, connection reuse always, client
# timeout CLIENT (e.g. 60s): haproxy_defaults CLIENT
haproxy_defaults() {
  cat <<CONF
defaults
  mode http
  timeout connect 5s
  timeout client $1
  timeout server 60s
  http-reuse always
CONF
}

# An EC P-256 certificate for bench.kwd.test, valid two days: DIR/certs/
# bench.crt and bench.key (kwd's --tls-cert-dir) and DIR/haproxy.pem (both,
# for HAProxy's crt): bench_cert DIR
bench_cert() {
  mkdir -p "$1/certs"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$1/certs/bench.key" -out "$1/certs/bench.crt" -subj /CN=bench.kwd.test \
    -addext subjectAltName=DNS:bench.kwd.test 2>/dev/null
  cat "$1/certs/bench.crt" "$1/certs/bench.key" >"$1/haproxy.pem"
}

# Exits 1 naming the first of TOOL... (a command or a path) that is missing.
require_tools() {
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
  done
}

# kwd's bench objects, as in production compiled by kwd-controller: a
# LogonGroup NAME of KIND with two static servers, SERVER-A on PORT-A
# (capacity 2) and SERVER-B on PORT-B (capacity 1), the four SAP session
# identifiers and the affinity cookie on, then `---`, on stdout:
#   logon_group NAME KIND PORT-A PORT-B SERVER-A SERVER-B
# and DIR/objects.yaml with group "app" (servers A and B) taking everything:
#   plain_objects DIR PORT-A PORT-B
logon_group() {  # name kind port-a port-b name-a name-b
  cat <<YAML
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: $1, namespace: bench}
spec:
  kind: $2
  strategy: weighted_round_robin
  loadResetIntervalSeconds: 25
  backend:
    staticServers:
      - {name: $5, address: 127.0.0.1, port: $3, capacity: 2}
      - {name: $6, address: 127.0.0.1, port: $4, capacity: 1}
  healthCheck: {path: /, intervalSeconds: 25, timeoutSeconds: 5, unhealthyThreshold: 2, healthyThreshold: 1}
  sessionAffinity:
    identifiers: [sap-contextid, saplb, jsessionid, sap-ext-sid]
    sessionTable: {maxEntries: 50000, idleTimeoutSeconds: 3600}
    affinityCookie: {enabled: true, name: kwd_affinity}
---
YAML
}
plain_objects() {  # dir port-a port-b
  mkdir -p "$1"
  {
    logon_group app java "$2" "$3" A B
    cat <<YAML
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: bench, namespace: bench}
spec:
  hosts: []
  defaultRootHandler: java
  defaultGroups: {abap: app, java: app}
YAML
  } >"$1/objects.yaml"
}
