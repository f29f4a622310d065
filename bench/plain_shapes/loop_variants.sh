#!/usr/bin/env bash
# Event-loop variants against HAProxy in one run (bench/PROFILE.md, "Why the box idles
# during kwd's keep-alive rounds"). Each line of $VARIANTS is "name|ENV=v ENV2=v|kwd flags";
# every variant is a kwd-proxy of BIN (default build-bench/kwd-proxy) with one worker.
# Rotating interleaved rounds of `wrk -t1 -c$C -d$D`; per round: req/s, p99 (ms), CPU us
# per request of the proxy, of the nginx worker and of wrk, cores left unused by the three
# (2 - req/s x their CPU per request), the proxy's sleeps (voluntary switches) per request
# and the idle share of /proc/stat; then medians and ratios against HAProxy.
#   VARIANTS="base||
#   off||--io-uring off" flock -o /tmp/kwd-bench.lock bench/plain_shapes/loop_variants.sh
# (-o: the backends and proxies started here do not inherit the lock.)
export WORK=${WORK:-/tmp/kwd-loop-variants}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"
B1=19501; B2=19502; HAP=19581
BIN=${BIN:-build-bench/kwd-proxy}
rounds=${ROUNDS:-3}; C=${C:-64}; D=${D:-4}
start_variants
specs+=("hap:$HAP:$(cat $W/haproxy.pid)")
ngx=$(pgrep -P "$(cat $W/backend.pid)" | head -1)
sleeps() { cat /proc/$1/task/*/status | awk '/^voluntary_ctxt/ {s += $2} END {print s}'; }
for spec in "${specs[@]}"; do IFS=: read -r name port pid <<<"$spec"; wrk -t1 -c$C -d1s http://127.0.0.1:$port/ >/dev/null 2>&1; done
n=${#specs[@]}
for round in $(seq 1 $rounds); do
  for k in $(seq 0 $((n - 1))); do
    # rotating, and backwards every other round: no contender always follows the same one
    idx=$(((k + round) % n)); ((round % 2 == 0)) && idx=$((n - 1 - idx))
    IFS=: read -r name port pid <<<"${specs[$idx]}"
    s1=$(head -1 /proc/stat); b=$(cpu_ticks $pid); nb=$(cpu_ticks $ngx); vb=$(sleeps $pid)
    out=$(/usr/bin/time -f "WRKCPU %U %S" wrk -t1 -c$C -d${D}s --latency ${WARGS:-} http://127.0.0.1:$port/ 2>&1)
    s2=$(head -1 /proc/stat); a=$(cpu_ticks $pid); na=$(cpu_ticks $ngx); va=$(sleeps $pid)
    req=$(awk '/requests in/ {print $1}' <<<"$out"); rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    pus=$(cpu_us_per $b $a $req %.2f); nus=$(cpu_us_per $nb $na $req %.2f)
    wus=$(awk -v n=$req '/^WRKCPU/ {printf "%.2f", ($2 + $3) * 1e6 / n}' <<<"$out")
    echo "R$round $name rps $rps p99 $(wrk_ms 99% <<<"$out") cpu $pus ngx $nus wrk $wus" \
      "unused $(awk -v r=$rps -v a=$pus -v b=$nus -v c=$wus 'BEGIN {printf "%.2f", 2 - r * (a + b + c) / 1e6}')" \
      "sleeps $(awk -v a=$va -v b=$vb -v n=$req 'BEGIN {printf "%.3f", (a - b) / n}')" \
      "idle $(awk -v x="$s1" -v y="$s2" 'BEGIN {split(x, p); split(y, q); for (i = 2; i <= 9; i++) t += q[i] - p[i]; printf "%.2f", (q[5] - p[5]) / t}')" \
      "$(grep -E 'Non-2xx|Socket err' <<<"$out" | tr '\n' ' ')"
  done
done | tee $W/rounds.txt
echo "name rounds | medians: rps p99 cpu ngx wrk unused sleeps idle | vs hap: rps p99 cpu"
for spec in "${specs[@]}"; do IFS=: read -r name port pid <<<"$spec"
  printf "%s %s" $name "$(awk -v n=$name '$2 == n' $W/rounds.txt | wc -l)"
  for c in 4 6 8 10 12 14 16 18; do printf " %s" "$(awk -v n=$name -v c=$c '$2 == n {print $c}' $W/rounds.txt | median)"; done
  echo
done >$W/medians.txt
read -r hr hp hc <<<"$(awk '$1 == "hap" {print $3, $4, $5}' $W/medians.txt)"
awk -v r=$hr -v p=$hp -v c=$hc '{printf "%s | %.3f %.3f %.3f\n", $0, $3 / r, $4 / p, $5 / c}' $W/medians.txt
