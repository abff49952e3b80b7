#!/usr/bin/env bash
# v45 (bin/mstar-main) against v46 (the 16x64 static pick with pl=1), alternated, no tuned files.
set -u
cd "$(dirname "$0")/.."
tar xJf .dev/bins.tar.xz
G=/tmp/ab46; mkdir -p $G; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader > $G/gpu.txt; cat $G/gpu.txt
for r in 1 2; do for v in main v46; do
  bin/mstar-$v bench moe --experts 60 --topk 4 --hidden 1536 --inter 352 --batch 1,2,4,8,16,64,256 --device cuda:0 --out $G/odd-$v-$r.json > $G/odd-$v-$r.txt 2>&1
  bin/mstar-$v bench moe --model qwen3-30b-a3b --batch 1,4,16 --device cuda:0 --out $G/q30-$v-$r.json > $G/q30-$v-$r.txt 2>&1
  echo "$v $r [$SECONDS s]"; grep -E "^ +[0-9]+ +[0-9]+ " $G/odd-$v-$r.txt $G/q30-$v-$r.txt | awk '{print $1, $2, $5}'
  [ $SECONDS -gt 80 ] && break 2
done; done
gzip $G/*.json; tar czf $OUT/ab46.tgz -C /tmp ab46
