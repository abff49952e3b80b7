#!/usr/bin/env bash
# call-trace.sh — on the GPU machine: mstar and the peers under a replayed
# routing file (#11's "replayed traces"), at qwen3-30b-a3b. The trace,
# made by this script there: 4096 tokens routed by `mstar route --router
# softmax-topk --renormalize --topk 8` over logits with a per-expert bias of
# σ 0.5 plus per-token noise of σ 1 (seed 7; at M=4096 the hottest expert
# holds ~3× the mean). Needs a main build as $MSTAR (default bin/mstar-main)
# and .dev/peers. Tars its outputs into $OUT/trace.tgz.
#   OUT=$OUT [BATCH=256,4096] [DEADLINE=s] bash kernels/moe/next/call-trace.sh run
# 1. bench moe --routing-file --peers (triton-ref tuned on the machine, under
#    the same routing; cublas-bmm's bound), the static table.
# 2. In the time left: tune moe --routing-file at the same batches, then
#    bench --peers again with its trace:trace-q30.jsonl picks.
set -u
[ "${1:-}" = run ] && [ -n "${OUT:-}" ] || {
	echo "usage: OUT=DIR [MSTAR=bin/mstar-main] [BATCH=256,4096] [DEADLINE=s] $0 run   (on a GPU machine)" >&2
	exit 2
}
cd "$(dirname "$0")/../../.."
M=${MSTAR:-bin/mstar-main}; B=${BATCH:-256,4096}; D=${DEADLINE:-540}
G=/tmp/trace; rm -rf $G; mkdir -p $G/cfg
pack() { gzip -f $G/*.json 2>/dev/null; tar czf "$OUT/trace.tgz" -C /tmp trace; }
trap pack EXIT
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | tee $G/gpu.txt
python3 - > $G/logits.json <<'PY'
import json, random
random.seed(7)
bias = [random.gauss(0, 0.5) for _ in range(128)]
json.dump([[round(b + random.gauss(0, 1), 3) for b in bias] for _ in range(4096)], open("/dev/stdout", "w"))
PY
$M route --router softmax-topk --renormalize --topk 8 --logits $G/logits.json > $G/trace-q30.jsonl || exit 1
rm $G/logits.json
T="--model qwen3-30b-a3b --routing-file $G/trace-q30.jsonl --device cuda:0 --batch $B"
P="--peers --peer-impls bmm --triton-peer .dev/peers/triton_moe_ref.py"
MSTAR_MOE_CONFIG_DIR=$G/cfg timeout $((D - SECONDS)) $M bench moe $T $P --out $G/static.json > $G/static.txt 2>&1
echo "static peers rc=$? [$SECONDS s]"
grep -A3 "batch  mstar us" $G/static.txt
[ $SECONDS -gt $((D - 200)) ] && exit 0
timeout $((D - SECONDS - 90)) $M tune moe $T --dir $G/cfg --out $G/tune.json > $G/tune.txt 2>&1
echo "tune rc=$? [$SECONDS s]"
grep -A4 "chosen us" $G/tune.txt | cut -c1-120
[ $SECONDS -gt $((D - 80)) ] && exit 0
MSTAR_MOE_CONFIG_DIR=$G/cfg timeout $((D - SECONDS)) $M bench moe $T $P --out $G/tuned.json > $G/tuned.txt 2>&1
echo "tuned peers rc=$? [$SECONDS s]"
grep -A3 "batch  mstar us" $G/tuned.txt
