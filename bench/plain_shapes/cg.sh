#!/usr/bin/env bash
# usage: cg.sh BIN OUTNAME "wrk args" [kwd args...] -> Ir per request
source "$(dirname "$0")/env.sh"
source "$(dirname "$0")/mix.sh"
bin=$1; out=$2; wargs=$3; shift 3
if [[ -n $MIX ]]; then mix_snapshot; else snapshot; fi
KWD_AFFINITY_KEY=bench valgrind --tool=callgrind --callgrind-out-file=$W/$out.%p.cg $bin serve --snapshot $W/snapshot.json --listen 127.0.0.1:19380 \
  --admin-listen 127.0.0.1:19903 --workers 1 --access-log off "$@" >$W/cg.out 2>$W/cg.log &
vpid=$!
for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:19380/ && break; sleep 0.3; done
for i in 1 2 3 4 5 6 7 8; do curl -s -o /dev/null http://127.0.0.1:19380/; done
if [[ -n $MIX ]]; then mix_sessions 19380; export MIX_SESSIONS=$W/sessions-19380.txt MIX_MODE=kwd; fi
callgrind_control -z $vpid >/dev/null
res=$(eval wrk -t1 -d5s $wargs http://127.0.0.1:19380/ 2>&1)
n=$(awk '/requests in/ {print $1}' <<<"$res")
callgrind_control -d $vpid >/dev/null; sleep 0.5
kill $vpid; wait $vpid 2>/dev/null
f=$(ls -t $W/$out.$vpid.cg* | grep -v "\.cg$" | head -1)
[[ -z $f ]] && f=$(ls -t $W/$out.$vpid.cg* | head -1)
ir=$(callgrind_annotate $f 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
echo "file=$f requests=$n Ir=$ir Ir/req=$(( ir / n ))"
grep -E "Non-2xx|errors" <<<"$res"
