# source after env.sh. SAP-like mix: snapshot with 1000 rules, backends with /login setting JSESSIONID
mix_backends() {
cat > $W/backend/nginx.conf <<CONF
$(nginx_head $W/backend 4096)
  large_client_header_buffers 4 16k;
  server { listen 127.0.0.1:$B1 reuseport; location / { add_header X-Served-By A; return 200 "$BENCH_BODY"; }
           location ~ /login$ { add_header Set-Cookie "JSESSIONID=S\$arg_sid; Path=/"; return 200 "login"; } }
  server { listen 127.0.0.1:$B2 reuseport; location / { add_header X-Served-By B; return 200 "$BENCH_BODY"; }
           location ~ /login$ { add_header Set-Cookie "JSESSIONID=S\$arg_sid; Path=/"; return 200 "login"; } }
}
CONF
nginx -c $W/backend/nginx.conf -e $W/backend/error.log & echo $! > $W/backend.pid
}
mix_snapshot() {
python3 - $B1 $B2 > $W/snapshot.json <<'PY'
import json,sys
b1,b2=int(sys.argv[1]),int(sys.argv[2])
g={"key":"bench/app","kind":"KIND_JAVA","strategy":"STRATEGY_WEIGHTED_ROUND_ROBIN","loadResetIntervalSeconds":25,
 "healthCheck":{"path":"/","intervalSeconds":25,"timeoutSeconds":5,"unhealthyThreshold":2,"healthyThreshold":1},
 "sessionAffinity":{"identifiers":["SESSION_IDENTIFIER_SAP_CONTEXTID","SESSION_IDENTIFIER_SAPLB","SESSION_IDENTIFIER_JSESSIONID","SESSION_IDENTIFIER_SAP_EXT_SID"],
  "sessionTableMaxEntries":50000,"sessionTableIdleTimeoutSeconds":3600,"affinityCookieEnabled":True,"affinityCookieName":"kwd_affinity"},
 "servers":[{"name":"A","address":"127.0.0.1","port":b1,"capacity":2,"state":"SERVER_STATE_READY"},
            {"name":"B","address":"127.0.0.1","port":b2,"capacity":1,"state":"SERVER_STATE_READY"}]}
rules=sorted([{"prefix":"/sap/app%d/"%i,"kind":"KIND_JAVA","group":"bench/app"} for i in range(1000)],key=lambda r:r["prefix"])
s={"groups":[g],"virtualHosts":[{"host":"","defaultRootHandler":"KIND_JAVA","defaultAbapGroup":"bench/app","defaultJavaGroup":"bench/app","rules":rules}]}
print(json.dumps(s))
PY
${STAMP:-/tmp/kwd-stamp} < $W/snapshot.json > $W/snapshot.s.json && mv $W/snapshot.s.json $W/snapshot.json
}
mix_start_kwd() { bin=$1; shift; mix_snapshot
KWD_AFFINITY_KEY=bench $bin serve --snapshot $W/snapshot.json --listen 127.0.0.1:$KWD \
  --admin-listen 127.0.0.1:19902 --workers 1 --access-log off "$@" >$W/kwd.out 2>$W/kwd.log & echo $! > $W/kwd.pid
}
# writes $W/kwd-sessions.txt: lines "JSESSIONID=...; kwd_affinity=..." learned through kwd on port $1
mix_sessions() {
  : > $W/sessions-$1.txt
  for i in $(seq 1 30); do
    curl -s -i "http://127.0.0.1:$1/sap/app$i/login?sid=$i" | tr -d '\r' | awk '/^[Ss]et-[Cc]ookie:/ {split($2,a,";"); printf "%s; ", a[1]} END {print ""}' >> $W/sessions-$1.txt
  done
}
