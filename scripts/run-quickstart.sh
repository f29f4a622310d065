#!/usr/bin/env bash
# `make run`: the quickstart on one machine. Three demo SAP instances,
# kwd-controller following examples/quickstart/ (admin on 127.0.0.1:9902, gRPC
# on 127.0.0.1:18000) and one kwd-proxy on 127.0.0.1:8080 (admin on
# 127.0.0.1:9901) fed by the controller. Editing the YAML changes routing live.
# Ctrl-C stops everything and exits 0.
set -euo pipefail

# Every background child, from the job table: a signal that arrives between
# starting a process and noting its pid must not leave it running (cleanup
# would then wait for it forever). A child that ignores SIGTERM gets SIGKILL
# after 5 s.
cleanup() {
  trap - EXIT INT TERM
  local children
  children=$(jobs -p)
  if [[ -n $children ]]; then
    kill $children 2>/dev/null || true
    for _ in $(seq 1 50); do
      [[ -z $(jobs -pr) ]] && break
      sleep 0.1
    done
    children=$(jobs -pr)
    [[ -z $children ]] || kill -KILL $children 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  echo "stopped"
}
# Ctrl-C (SIGINT) and SIGTERM are the normal way to stop: exit 0. Any other
# exit (a process died, a start failed) keeps its status.
trap cleanup EXIT
trap 'cleanup; exit 0' INT TERM

# Every external command of the start-up runs through `run`: in the
# background, then `wait`. A command bash waits for in the foreground can
# swallow the SIGINT: when it exits normally just as the signal arrives, bash
# concludes the command handled it and drops it (no trap runs; the script
# would go on starting everything and then wait forever). `wait` returns at
# once on a trapped signal and the trap runs. Loops use builtins only.
run() {
  "$@" &
  wait $!
}

# On a terminal, Ctrl-C sends SIGINT to the whole foreground process group:
# `make run` included, and make then reports "Interrupt" and fails however
# cleanly this script stops. So the script runs itself as a job of its own
# (job control: its own process group, given the terminal by fg): Ctrl-C
# reaches only the quickstart, which stops and exits 0, and so does make.
# Only when stdin and stderr are a terminal (bash's job control works through
# stderr) and this process group is its foreground: otherwise (no controlling
# terminal, as under setsid or some CI runners; stderr redirected; a
# background job) fg cannot hand the terminal over, and the quickstart would
# sit in a group no signal to this one reaches. Without a terminal, SIGINT or
# SIGTERM to the process group stops everything and this script exits 0 (a
# make around it reports the signal it got itself).
foreground_on_terminal() {
  [[ -t 0 && -t 2 ]] || return 1
  local stat fields
  read -r stat </proc/$$/stat || return 1
  read -r -a fields <<<"${stat##*) }"  # state ppid pgrp session tty_nr tpgid ...
  [[ ${fields[5]:-0} -gt 0 && ${fields[5]} == "${fields[2]}" ]]
}
if [[ -z "${KWD_QUICKSTART_JOB:-}" ]] && foreground_on_terminal; then
  set -m
  KWD_QUICKSTART_JOB=1 "$0" "$@" &
  status=0
  fg %1 >/dev/null || status=$?
  trap - EXIT  # the job cleaned up after itself
  exit $status
fi

build=${1:-build}
examples=${KWD_EXAMPLES:-examples/quickstart}
listen=${KWD_LISTEN:-127.0.0.1:8080}
admin=${KWD_ADMIN:-127.0.0.1:9901}
run_dir=$build/quickstart
run mkdir -p "$run_dir"
snapshot=$run_dir/snapshot.json

start_backend() {  # port instance kind
  "$build/kwd-demo-backend" --listen "127.0.0.1:$1" --instance "$2" --kind "$3" \
    >"$run_dir/backend-$2.log" 2>&1 &
}
start_backend 18001 demo1_QS_00 abap
start_backend 18002 demo2_QS_01 abap
start_backend 18003 demo3_QS_02 java

controller_admin=${KWD_CONTROLLER_ADMIN:-127.0.0.1:9902}
grpc=${KWD_GRPC_LISTEN:-127.0.0.1:18000}

# The .out files a previous run left say "listening" too: each is emptied
# here (a builtin, before the process starts) so that wait_listening reads
# only the new process's line. The process's own redirection truncates it
# too late: that happens in the background child, which under load may not
# have run yet when wait_listening first reads the file, and the proxy then
# started before the controller listened (the fake message server: the
# controller's first poll found nothing, and the next came 5 s later).
fresh() {  # file
  : >"$1"
}

wait_listening() {  # file log
  local line i
  for ((i = 0; i < 100; i++)); do
    if [[ -f $1 ]] && read -r line <"$1" && [[ $line == listening* ]]; then
      return 0
    fi
    run sleep 0.1
  done
  run cat "$2" >&2
  return 1
}

# examples/sapsystem: the demo backends listed by a fake SAP message server
# (tests/fake_sap) that the controller polls instead of static servers.
if [[ -f "$examples/message-server.json" ]]; then
  fresh "$run_dir/message-server.out"
  python3 -u tests/fake_sap/fake_message_server.py --listen 127.0.0.1:18101 \
    --config "$examples/message-server.json" >"$run_dir/message-server.out" 2>&1 &
  wait_listening "$run_dir/message-server.out" "$run_dir/message-server.out" || exit 1
fi

# The controller follows the YAML (it notices file changes) and streams each
# new snapshot to the proxy over gRPC.
fresh "$run_dir/controller.out"
"$build/kwd-controller" serve --source="dir:$examples" --grpc-listen "$grpc" \
  --admin-listen "$controller_admin" >"$run_dir/controller.out" 2>"$run_dir/controller.log" &
controller_pid=$!
wait_listening "$run_dir/controller.out" "$run_dir/controller.log" || exit 1

fresh "$run_dir/proxy.out"
KWD_AFFINITY_KEY=${KWD_AFFINITY_KEY:-quickstart-key} "$build/kwd-proxy" serve --controller "$grpc" \
  --listen "$listen" --admin-listen "$admin" --access-log "$run_dir/access.log" --node-id quickstart \
  >"$run_dir/proxy.out" 2>"$run_dir/proxy.log" &
proxy_pid=$!
wait_listening "$run_dir/proxy.out" "$run_dir/proxy.log" || exit 1
ready=false
for ((i = 0; i < 100; i++)); do
  if run curl -sf "http://$admin/readyz" >/dev/null 2>&1; then
    ready=true
    break
  fi
  run sleep 0.1
done
$ready || { echo "the proxy got no snapshot; see $run_dir/" >&2; exit 1; }
# For the explain hint: the snapshot the controller serves, as JSON. With a
# message server, the first snapshot can come before the controller's first
# poll has listed any server: wait (at most about 10 s) for one that has them,
# so that the hints show the instances and not 503s.
for ((i = 0; i < 100; i++)); do
  run curl -s "http://$controller_admin/debug/snapshot" >"$snapshot"
  [[ -f "$examples/message-server.json" ]] || break
  content=
  IFS= read -r -d '' content <"$snapshot" || true
  [[ $content == *'"servers"'* ]] && break
  run sleep 0.1
done

# What to try, for the example that runs: every hint line that is not a
# comment is a command that works against it (tests/deploy/run_quickstart_test.py
# runs them).
example_name=${examples%/}
case ${example_name##*/} in
  quickstart)
    what="  backends: demo1_QS_00 (127.0.0.1:18001, abap, capacity 2), demo2_QS_01 (:18002, abap, capacity 1),
            demo3_QS_02 (:18003, java)"
    try="  # ABAP logon group \"public\", balanced 2:1 by capacity (watch X-Served-By):
  for i in 1 2 3 4 5 6; do curl -s -D- -o /dev/null http://$listen/sap/bc/gui/x | grep X-Served-By; done
  # the backend sets sap-contextid; sending it back sticks the session to that instance:
  curl -s -D- -o /dev/null http://$listen/sap/bc/gui/x --cookie 'sap-contextid=SID%3aANON%3ademo2_QS_01%3aabc' | grep X-Served-By
  # a root URL goes to Java (defaultRootHandler: the group j2ee):
  curl -s -D- -o /dev/null http://$listen/index.html | grep X-Served-By
  # the permission table: *.cgi is denied, /sap/bc/gui/secure/* needs https (403 EPERM over http):
  curl -s -D- -o /dev/null http://$listen/sap/x.cgi | grep -e ^HTTP -e X-Kwd-Error
  curl -s -D- -o /dev/null http://$listen/sap/bc/gui/secure/x | grep -e ^HTTP -e X-Kwd-Error
  # why did it go there?
  $build/kwd-proxy explain --snapshot $snapshot --url /sap/bc/gui/x --count 3
  curl -s 'http://$admin/admin/api/explain?url=/irj/portal'"
    ;;
  sapsystem)
    what="  backends: demo1_QS_00 (127.0.0.1:18001, abap, LB=2), demo2_QS_01 (:18002, abap, LB=1),
            demo3_QS_02 (:18003, java), listed by a fake message server on 127.0.0.1:18101
            that the controller polls every 5 s (SapSystem default/qs)"
    try="  # /sap/ goes to the ABAP instances the message server lists (LogonGroup diag), 2:1 by LB=:
  for i in 1 2 3 4 5 6; do curl -s -D- -o /dev/null http://$listen/sap/bc/gui/x | grep X-Served-By; done
  # a root URL goes to the Java instance (LogonGroup j2ee):
  curl -s -D- -o /dev/null http://$listen/index.html | grep X-Served-By
  # the SapSystem's status: servers found and refreshes:
  curl -s http://$controller_admin/metrics | grep -E '^kwd_controller_sapsystem_(servers|refreshes_total)'
  # why did it go there?
  $build/kwd-proxy explain --snapshot $snapshot --url /sap/bc/gui/x --count 3
  curl -s 'http://$admin/admin/api/explain?url=/index.html'"
    ;;
  *)
    what="  examples: $examples"
    try="  # where would a request go, and why?
  $build/kwd-proxy explain --snapshot $snapshot --url / --count 3
  curl -s 'http://$admin/admin/api/explain?url=/'"
    ;;
esac

# Printed by builtins (see `run` above).
IFS= read -r -d '' hints <<HINTS || true

kwd quickstart is running: proxy http://$listen, admin http://$admin
$what
Try:
$try
  # state and metrics:
  curl -s http://$admin/admin/api/state; curl -s http://$admin/metrics | grep kwd_proxy_requests_total
  # the controller: connected proxies, ACKs/NACKs, the snapshot it serves:
  curl -s http://$controller_admin/metrics | grep -E 'kwd_controller_(connected_proxies|snapshot_(acks|nacks))'
  curl -s http://$controller_admin/debug/snapshot
Edit $examples/*.yaml: the controller recompiles and streams the new snapshot to the proxy
over gRPC ($grpc); an invalid change is reported and the proxy keeps the previous one
(logs in $run_dir/).
Ctrl-C stops everything.
HINTS
printf '%s' "$hints"

# Signals interrupt `wait` at once, so Ctrl-C is handled without delay.
wait -n "$proxy_pid" "$controller_pid" || true
echo "a process exited; see $run_dir/proxy.log and $run_dir/controller.log" >&2
exit 1
