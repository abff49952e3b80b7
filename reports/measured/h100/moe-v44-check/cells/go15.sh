#!/usr/bin/env bash
# main's H200 picks on an H100 (the files' device field rewritten too), the two 0.99 cells, with triton-ref.
set -u
cd "$(dirname "$0")/.."
tar xJf .dev/g14bins.tar.xz
G=/tmp/g15; mkdir -p $G/main; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | tee $G/gpu.txt
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); dev=${name// /_}
for f in kernels/moe/configs/*H200.json; do b=${f##*/}; sed "s/\"NVIDIA H200\"/\"$name\"/g" "$f" > "$G/main/${b/NVIDIA_H200/$dev}"; done
P="--peers --peer-impls bmm --triton-peer .dev/peers/triton_moe_ref.py --device cuda:0"
for r in 1 2; do
MSTAR_MOE_CONFIG_DIR=$G/main timeout 150 bin/mstar-main bench moe --model deepseek-v3 --tp 8 --batch 1 $P --out $G/ds-main-$r.json > $G/ds-main-$r.txt 2>&1
MSTAR_MOE_CONFIG_DIR=$G/main timeout 150 bin/mstar-main bench moe --model qwen3-235b-a22b --batch 8 $P --out $G/q235-main-$r.json > $G/q235-main-$r.txt 2>&1
grep -hE "warning: (ignored|no tuned)|M=[0-9]+ kernels|^ +[0-9]+ +[0-9.]+ +[0-9]+%" $G/*-main-$r.txt; echo "[$SECONDS s]"
[ $SECONDS -gt 200 ] && break
done
gzip $G/*.json; tar czf $OUT/g15.tgz -C /tmp g15
