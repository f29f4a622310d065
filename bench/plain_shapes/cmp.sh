#!/usr/bin/env bash
# usage: cmp.sh ROUNDS DUR "wrk args" name:port:pid ...   -> per-round and medians: rps p99 cpu_us/req
source "$(dirname "$0")/../lib.sh"
rounds=$1; dur=$2; wargs=$3; shift 3
tmp=$(mktemp)
for r in $(seq 1 $rounds); do
  for spec in "$@"; do
    IFS=: read name port pid <<<"$spec"
    b=$(cpu_ticks $pid)
    out=$(eval $WRKPFX wrk -t1 -d$dur --latency $wargs "http://127.0.0.1:$port/" 2>&1)
    a=$(cpu_ticks $pid)
    n=$(awk '/requests in/ {print $1}' <<<"$out"); rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p99=$(wrk_ms 99% <<<"$out")
    err=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr '\n' ' ')
    cpu=$(cpu_us_per $b $a $n %.2f)
    echo -e "$name\t$rps\t$p99\t$cpu\t$err" | tee -a $tmp
  done
done
first=""
for spec in "$@"; do IFS=: read name port pid <<<"$spec"
  r=$(awk -v n=$name '$1==n{print $2}' $tmp | median); p=$(awk -v n=$name '$1==n{print $3}' $tmp | median); c=$(awk -v n=$name '$1==n{print $4}' $tmp | median)
  if [[ -z $first ]]; then first=1; R=$r; P=$p; C=$c; fi
  printf "MEDIAN %-10s rps %9s p99 %7s ms cpu %6s us/req | vs first: rps %.3f p99 %.3f cpu %.3f\n" $name $r $p $c $(awk -v a=$r -v b=$R 'BEGIN{print a/b}') $(awk -v a=$p -v b=$P 'BEGIN{print a/b}') $(awk -v a=$c -v b=$C 'BEGIN{print a/b}')
done
rm -f $tmp
