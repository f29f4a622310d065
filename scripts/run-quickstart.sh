#!/usr/bin/env bash
# `make run`: the quickstart on one machine. Three demo SAP instances, the
# routing snapshot compiled from examples/quickstart/, and one kwd-proxy on
# 127.0.0.1:8080 (admin on 127.0.0.1:9901). Editing the YAML recompiles it and
# reloads the proxy (SIGHUP). Ctrl-C stops everything.
set -euo pipefail
build=${1:-build}
examples=${KWD_EXAMPLES:-examples/quickstart}
listen=${KWD_LISTEN:-127.0.0.1:8080}
admin=${KWD_ADMIN:-127.0.0.1:9901}
run_dir=$build/quickstart
mkdir -p "$run_dir"
snapshot=$run_dir/snapshot.json

pids=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped"
}
trap cleanup EXIT INT TERM

start_backend() {  # port instance kind
  "$build/kwd-demo-backend" --listen "127.0.0.1:$1" --instance "$2" --kind "$3" \
    >"$run_dir/backend-$2.log" 2>&1 &
  pids+=($!)
}
start_backend 18001 demo1_QS_00 abap
start_backend 18002 demo2_QS_01 abap
start_backend 18003 demo3_QS_02 java

compile() {
  if "$build/kwd-controller" compile --source="dir:$examples" >"$snapshot.new" 2>"$run_dir/compile.log"; then
    mv "$snapshot.new" "$snapshot"
    return 0
  fi
  cat "$run_dir/compile.log" >&2
  return 1
}
compile || { echo "the quickstart does not compile" >&2; exit 1; }
[[ -s $run_dir/compile.log ]] && cat "$run_dir/compile.log" >&2

KWD_AFFINITY_KEY=${KWD_AFFINITY_KEY:-quickstart-key} "$build/kwd-proxy" serve --snapshot "$snapshot" \
  --listen "$listen" --admin-listen "$admin" --access-log "$run_dir/access.log" \
  >"$run_dir/proxy.out" 2>"$run_dir/proxy.log" &
proxy_pid=$!
pids+=($proxy_pid)
for _ in $(seq 1 50); do
  grep -q '^listening' "$run_dir/proxy.out" 2>/dev/null && break
  sleep 0.1
done
grep -q '^listening' "$run_dir/proxy.out" || { cat "$run_dir/proxy.log" >&2; exit 1; }

cat <<HINTS

kwd quickstart is running: proxy http://$listen, admin http://$admin
  backends: demo1_QS_00 (127.0.0.1:18001, abap, capacity 2), demo2_QS_01 (:18002, abap, capacity 1),
            demo3_QS_02 (:18003, java)
Try:
  # ABAP logon group "public", balanced 2:1 by capacity (watch X-Served-By):
  for i in 1 2 3 4 5 6; do curl -s -D- -o /dev/null http://$listen/sap/bc/gui/x | grep X-Served-By; done
  # the backend sets sap-contextid; sending it back sticks the session to that instance:
  curl -s -D- -o /dev/null http://$listen/sap/bc/gui/x --cookie 'sap-contextid=SID%3aANON%3ademo2_QS_01%3aabc'
  # root URL -> Java (defaultRootHandler), a denied URL, a secure-only URL over http:
  curl -s -i http://$listen/index.html; curl -s -i http://$listen/sap/x.cgi | head -1
  # why did it go there?
  $build/kwd-proxy explain --snapshot $snapshot --url /sap/bc/gui/x --count 3
  curl -s 'http://$admin/admin/api/explain?url=/irj/portal'
  # state and metrics:
  curl -s http://$admin/admin/api/state; curl -s http://$admin/metrics | grep kwd_proxy_requests_total
Edit $examples/*.yaml: the snapshot is recompiled and the proxy reloads (logs in $run_dir/).
Ctrl-C stops everything.
HINTS

stamp() { find "$examples" -name '*.yaml' -o -name '*.yml' | sort | xargs stat -c '%n %Y %s' 2>/dev/null | md5sum; }
last=$(stamp)
while kill -0 "$proxy_pid" 2>/dev/null; do
  sleep 1
  now=$(stamp)
  if [[ $now != "$last" ]]; then
    last=$now
    if compile; then
      kill -HUP "$proxy_pid"
      echo "$(date +%T) configuration changed: snapshot recompiled, proxy reloaded"
    else
      echo "$(date +%T) configuration has errors: the proxy keeps the previous snapshot" >&2
    fi
  fi
done
echo "the proxy exited; see $run_dir/proxy.log" >&2
exit 1
