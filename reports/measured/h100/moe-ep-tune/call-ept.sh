#!/usr/bin/env bash
# call-ept.sh — on the GPU machine: does a tune under --ep N beat the static
# table's EP rule, and does bench take the tune's ROUTING@epN picks? Needs a
# main build as $MSTAR (default bin/mstar-main) and the triton peer in
# .dev/peers. ~300 s; tars its outputs into $OUT/ept.tgz.
#   OUT=$OUT bash kernels/moe/next/call-ept.sh run
# 1. tune moe --model qwen3-30b-a3b --ep 8 at M=16,64,256 from an empty
#    folder: its closing sweep is the tuned picks against the static table.
# 2. bench moe --ep 8 --peers (triton-ref) from that folder: the configs'
#    source must read [uniform@ep8].
set -u
[ "${1:-}" = run ] && [ -n "${OUT:-}" ] || {
	echo "usage: OUT=DIR [MSTAR=bin/mstar-main] $0 run   (on a GPU machine; ~300 s)" >&2
	exit 2
}
cd "$(dirname "$0")/../../.."
M=${MSTAR:-bin/mstar-main}
G=/tmp/ept; rm -rf $G; mkdir -p $G/cfg
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | tee $G/gpu.txt
Q="--model qwen3-30b-a3b --ep 8 --device cuda:0"
timeout 220 $M tune moe $Q --batch 16,64,256 --dir $G/cfg --out $G/tune.json > $G/tune.txt 2>&1
echo "tune rc=$? [$SECONDS s]"
grep -A6 "chosen us" $G/tune.txt | cut -c1-120
grep -B2 -A8 "│ result" $G/tune.txt | cut -c1-120
if [ $SECONDS -lt 250 ]; then
	MSTAR_MOE_CONFIG_DIR=$G/cfg timeout 120 $M bench moe $Q --batch 64,256 --peers \
		--triton-peer .dev/peers/triton_moe_ref.py --out $G/peers.json > $G/peers.txt 2>&1
	echo "peers rc=$? [$SECONDS s]"
	grep -A3 "configurations from" $G/peers.txt | cut -c1-120
	grep -A3 "batch  mstar us" $G/peers.txt
fi
gzip -f $G/*.json
tar czf "$OUT/ept.tgz" -C /tmp ept
