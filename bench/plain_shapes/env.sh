# usage: source; start_backends; start_kwd BIN [extra args]; start_haproxy
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
B1=19201; B2=19202; KWD=19280; HAP=19281
W=${WORK:-/tmp/kwd-plain-shapes}; mkdir -p $W/backend
export PATH=$PATH:/usr/sbin
start_backends() {
cat > $W/backend/nginx.conf <<CONF
$(nginx_head $W/backend 4096)
$(nginx_answer $B1 A reuseport)
$(nginx_answer $B2 B reuseport)
}
CONF
nginx -c $W/backend/nginx.conf -e $W/backend/error.log & echo $! > $W/backend.pid
}
snapshot() {
cat > $W/snapshot.json <<JSON
{"groups":[{"key":"bench/app","kind":"KIND_JAVA","strategy":"STRATEGY_WEIGHTED_ROUND_ROBIN",
 "loadResetIntervalSeconds":25,
 "healthCheck":{"path":"/","intervalSeconds":25,"timeoutSeconds":5,"unhealthyThreshold":2,"healthyThreshold":1},
 "sessionAffinity":{"identifiers":["SESSION_IDENTIFIER_SAP_CONTEXTID","SESSION_IDENTIFIER_SAPLB","SESSION_IDENTIFIER_JSESSIONID","SESSION_IDENTIFIER_SAP_EXT_SID"],
  "sessionTableMaxEntries":50000,"sessionTableIdleTimeoutSeconds":3600,"affinityCookieEnabled":true,"affinityCookieName":"kwd_affinity"},
 "servers":[{"name":"A","address":"127.0.0.1","port":$B1,"capacity":2,"state":"SERVER_STATE_READY"},
            {"name":"B","address":"127.0.0.1","port":$B2,"capacity":1,"state":"SERVER_STATE_READY"}]}],
 "virtualHosts":[{"host":"","defaultRootHandler":"KIND_JAVA","defaultAbapGroup":"bench/app","defaultJavaGroup":"bench/app"}]}
JSON
${STAMP:-/tmp/kwd-stamp} < $W/snapshot.json > $W/snapshot.s.json && mv $W/snapshot.s.json $W/snapshot.json
}
start_kwd() { bin=$1; shift; snapshot
KWD_AFFINITY_KEY=bench $bin serve --snapshot $W/snapshot.json --listen 127.0.0.1:$KWD \
  --admin-listen 127.0.0.1:19902 --workers 1 --access-log off "$@" >$W/kwd.out 2>$W/kwd.log & echo $! > $W/kwd.pid
}
start_haproxy() {
cat > $W/haproxy.cfg <<CONF
global
  nbthread 1
  maxconn 4096
$(haproxy_defaults 60s)
$(haproxy_app_backend $B1 $B2)
frontend web
  bind 127.0.0.1:$HAP
  default_backend app
CONF
haproxy -f $W/haproxy.cfg -db >$W/haproxy.log 2>&1 & echo $! > $W/haproxy.pid
}

# Starts nginx backends, HAProxy and one kwd-proxy ($BIN) per line of
# $VARIANTS ("name|ENV=v ...|extra flags") on ports from 19590; fills $kp with
# their pids and $specs with "name:port:pid"; stops everything on exit.
start_variants() {
  kp=()
  trap 'kill "${kp[@]}" "$(cat $W/haproxy.pid)" "$(cat $W/backend.pid)" 2>/dev/null; wait 2>/dev/null' EXIT
  start_backends; sleep 0.5; snapshot; start_haproxy
  local port=19590 v name envs flags
  specs=()
  while IFS= read -r v; do [[ -z $v ]] && continue
    IFS='|' read -r name envs flags <<<"$v"
    # shellcheck disable=SC2086
    env $envs KWD_AFFINITY_KEY=bench "$BIN" serve --snapshot $W/snapshot.json --listen 127.0.0.1:$port \
      --admin-listen 127.0.0.1:$((port + 100)) --workers 1 --access-log off $flags >$W/$name.out 2>$W/$name.log &
    kp+=($!); specs+=("$name:$port:$!"); port=$((port + 1))
  done <<<"$VARIANTS"
  sleep 1
}
