#!/usr/bin/env bash
# small-M repeat: mstar (shipped v25 files) and triton-ref over the same layer, fresh processes
set -u
[ -x bin/mstar ] || tar xJf .dev/bins-main.tar.xz
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt"
end=$((SECONDS + ${BUDGET:-270}))
for rep in 1 2; do
	for m in qwen3-235b-a22b mixtral-8x7b; do
		left=$((end - SECONDS)); [ $left -le 15 ] && { echo "rep $rep $m: skipped (deadline)"; continue; }
		timeout -s INT -k 5 $left bin/mstar bench moe --model $m --batch 1,2,4,8 --rounds 1 --peers --peer-impls bmm \
			--triton-peer .dev/peers/triton_moe_ref.py --device cuda:0 --ceilings reports/measured/h200/moe-v25/tune/ceilings.json \
			--out "$OUT/rep$rep-$m.json" >"$OUT/rep$rep-$m.txt" 2>&1
		echo "rep $rep $m: exit $? at ${SECONDS}s"
	done
done
