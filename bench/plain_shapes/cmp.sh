#!/usr/bin/env bash
# usage: cmp.sh ROUNDS DUR "wrk args" name:port:pid ...   -> per-round and medians: rps p99 cpu_us/req
rounds=$1; dur=$2; wargs=$3; shift 3
hz=$(getconf CLK_TCK)
tmp=$(mktemp)
for r in $(seq 1 $rounds); do
  for spec in "$@"; do
    IFS=: read name port pid <<<"$spec"
    b=$(awk '{print $14+$15}' /proc/$pid/stat)
    out=$(eval $WRKPFX wrk -t1 -d$dur --latency $wargs "http://127.0.0.1:$port/" 2>&1)
    a=$(awk '{print $14+$15}' /proc/$pid/stat)
    n=$(awk '/requests in/ {print $1}' <<<"$out"); rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v=v*1000}; print v}' <<<"$out")
    err=$(grep -E "Non-2xx|Socket errors" <<<"$out" | tr '\n' ' ')
    cpu=$(awk -v b=$b -v a=$a -v n=$n -v hz=$hz 'BEGIN{printf "%.2f",(a-b)/hz*1e6/n}')
    echo -e "$name\t$rps\t$p99\t$cpu\t$err" | tee -a $tmp
  done
done
med() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
first=""
for spec in "$@"; do IFS=: read name port pid <<<"$spec"
  r=$(awk -v n=$name '$1==n{print $2}' $tmp | med); p=$(awk -v n=$name '$1==n{print $3}' $tmp | med); c=$(awk -v n=$name '$1==n{print $4}' $tmp | med)
  if [[ -z $first ]]; then first=1; R=$r; P=$p; C=$c; fi
  printf "MEDIAN %-10s rps %9s p99 %7s ms cpu %6s us/req | vs first: rps %.3f p99 %.3f cpu %.3f\n" $name $r $p $c $(awk -v a=$r -v b=$R 'BEGIN{print a/b}') $(awk -v a=$p -v b=$P 'BEGIN{print a/b}') $(awk -v a=$c -v b=$C 'BEGIN{print a/b}')
done
rm -f $tmp
