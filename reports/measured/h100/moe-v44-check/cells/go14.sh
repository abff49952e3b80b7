#!/usr/bin/env bash
# The H200's two 0.99 cells (deepseek-v3 tp8 M=1, qwen3-235b-a22b M=8) on an H100 with the H200's
# files under this card's name: main's shipped picks, then v44's re-tune of those batches (shortlist
# of v34's tune as on the H200), each with triton-ref in the same process.
set -u
cd "$(dirname "$0")/.."
tar xJf .dev/g14bins.tar.xz
G=/tmp/g14; mkdir -p $G/main $G/v44; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | tee $G/gpu.txt
dev=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' _)
for d in main v44; do for f in kernels/moe/configs/*H200.json; do b=${f##*/}; cp "$f" "$G/$d/${b/NVIDIA_H200/$dev}"; done; done
P="--peers --peer-impls bmm --triton-peer .dev/peers/triton_moe_ref.py --device cuda:0"
run() { # name bin dir shape-args batch
  MSTAR_MOE_CONFIG_DIR=$G/$3 timeout 200 bin/mstar-$2 bench moe $4 --batch $5 $P --out $G/$1.json > $G/$1.txt 2>&1
  echo "$1 rc=$? [$SECONDS s]"; grep -E "^ +[0-9]+ |triton-ref|mstar " $G/$1.txt | head -8
}
run ds-main main main "--model deepseek-v3 --tp 8" 1
run q235-main main main "--model qwen3-235b-a22b" 8
for s in "ds|--model deepseek-v3 --tp 8|1|deepseek-v3-tp8" "q235|--model qwen3-235b-a22b|8|qwen3-235b-a22b"; do
  IFS="|" read -r n a b doc <<<"$s"
  timeout 240 bin/mstar-v44 tune moe $a --batch $b --device cuda:0 --dir $G/v44 \
    --shortlist reports/measured/h200/moe-v34/tune/docs/tune-$doc.json.gz --out $G/tune-$n.json > $G/tune-$n.txt 2>&1
  echo "tune $n rc=$? [$SECONDS s]"; tail -4 $G/tune-$n.txt
done
run ds-v44 v44 v44 "--model deepseek-v3 --tp 8" 1
run q235-v44 v44 v44 "--model qwen3-235b-a22b" 8
gzip $G/*.json; tar czf $OUT/g14.tgz -C /tmp g14
