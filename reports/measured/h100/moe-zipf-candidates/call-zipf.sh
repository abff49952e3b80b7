#!/usr/bin/env bash
# call-zipf.sh — on the GPU machine: do tune candidates that see the
# routing (moe.CandidatesUnder, on main since the twenty-seventh session)
# beat the picks tuned over the uniform families under zipf:1.2? Needs a
# main build as $MSTAR (default bin/mstar; build it here, carry it) and the
# triton peer in .dev/peers. ~430 s; tars its outputs into $OUT/zipf.tgz.
#   OUT=$OUT MSTAR=bin/mstar bash kernels/moe/next/call-zipf.sh run
# 1. tune moe --routing zipf:1.2 at deepseek-v3 tp8 and qwen3-30b-a3b M=256
#    into a folder that holds the H200's uniform files (copied under this
#    card's name, their device field rewritten): the zipf picks go beside.
# 2. bench moe under zipf:1.2 with that folder against the picks tuned
#    over the uniform families (moe-general/zipf-tuned, as --config),
#    alternated twice; a uniform run from the same folder (its own pick).
# 3. bench moe --peers (triton-ref) with the new picks.
set -u
[ "${1:-}" = run ] && [ -n "${OUT:-}" ] || {
	echo "usage: OUT=DIR [MSTAR=bin/mstar] $0 run   (on a GPU machine; ~430 s)" >&2
	exit 2
}
cd "$(dirname "$0")/../../.."
M=${MSTAR:-bin/mstar}
G=/tmp/zipf; rm -rf $G; mkdir -p $G/zc $G/empty
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | tee $G/gpu.txt
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); dev=${name// /_}
for f in kernels/moe/configs/*H200.json; do b=${f##*/}; sed "s/\"NVIDIA H200\"/\"$name\"/g" "$f" > "$G/zc/${b/NVIDIA_H200/$dev}"; done
DS="--model deepseek-v3 --tp 8"; Q="--model qwen3-30b-a3b"; Z="--routing zipf:1.2 --device cuda:0"
timeout 200 $M tune moe $DS $Z --batch 256 --dir $G/zc --out $G/tune-ds.json > $G/tune-ds.txt 2>&1; echo "tune ds rc=$? [$SECONDS s]"
grep -A4 "chosen us" $G/tune-ds.txt | cut -c1-160
if [ $SECONDS -lt 150 ]; then
	timeout 150 $M tune moe $Q $Z --batch 256 --dir $G/zc --out $G/tune-q.json > $G/tune-q.txt 2>&1; echo "tune q rc=$? [$SECONDS s]"
	grep -A4 "chosen us" $G/tune-q.txt | cut -c1-160
fi
line() { echo "$1: $(grep -hE "^ +[0-9]+ +[0-9]+ +[0-9]+ " $2 | awk '{print $4, $NF}') $(grep -h "M=256 kernels" $2 | cut -c1-100)"; }
for r in 1 2; do
	MSTAR_MOE_CONFIG_DIR=$G/zc timeout 60 $M bench moe $DS $Z --batch 256 --out $G/ds-zc-$r.json > $G/ds-zc-$r.txt 2>&1
	MSTAR_MOE_CONFIG_DIR=$G/empty timeout 60 $M bench moe $DS $Z --batch 256 --out $G/ds-ztuned-$r.json \
		--config "tc:bm=32,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=2" > $G/ds-ztuned-$r.txt 2>&1
	MSTAR_MOE_CONFIG_DIR=$G/zc timeout 60 $M bench moe $Q $Z --batch 256 --out $G/q-zc-$r.json > $G/q-zc-$r.txt 2>&1
	MSTAR_MOE_CONFIG_DIR=$G/empty timeout 60 $M bench moe $Q $Z --batch 256 --out $G/q-ztuned-$r.json \
		--config "wg:nc=1,bn=256,stages=4,gm=8,tma=1,mc=1,l2=4+wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1,pl=1" > $G/q-ztuned-$r.txt 2>&1
	for v in ds-zc ds-ztuned q-zc q-ztuned; do line "$v $r" $G/$v-$r.txt; done
	echo "[$SECONDS s]"
	[ $SECONDS -gt 300 ] && break
done
MSTAR_MOE_CONFIG_DIR=$G/zc timeout 60 $M bench moe $DS --device cuda:0 --batch 256 --out $G/ds-uniform.json > $G/ds-uniform.txt 2>&1
line "ds uniform run, same folder" $G/ds-uniform.txt
for s in ds q; do
	[ $SECONDS -gt 330 ] && break
	a=$DS; [ $s = q ] && a=$Q
	MSTAR_MOE_CONFIG_DIR=$G/zc timeout 110 $M bench moe $a $Z --batch 256 --peers --peer-impls bmm \
		--triton-peer .dev/peers/triton_moe_ref.py --out $G/$s-peers.json > $G/$s-peers.txt 2>&1
	echo "$s peers rc=$? [$SECONDS s]"
	grep -A1 "batch  mstar us" $G/$s-peers.txt
done
gzip -f $G/*.json
tar czf "$OUT/zipf.tgz" -C /tmp zipf
