#!/usr/bin/env bash
# tenth session: re-tune M = 1-64 of the four shapes and measure those cells with triton-ref, on one GPU.
#   step tune:  tune moe --batch 1..64 --force into .work/small/configs (seeded with the shipped files)
#   step table: bench moe --peers --batch 1..64 with the re-tuned files, then with the shipped ones (mstar only)
set -u
[ -x bin/mstar ] || tar xJf .dev/bins-main.tar.xz
W=.work/small
[ -d $W ] || { [ -f .dev/work-small.tgz ] && tar xzf .dev/work-small.tgz; }
mkdir -p $W/configs $W/docs
for f in kernels/moe/configs/*.json; do [ -e "$W/configs/${f##*/}" ] || cp "$f" "$W/configs/"; done
CE=reports/measured/h200/moe-v25/tune/ceilings.json
B=1,2,4,8,16,32,64
end=$((SECONDS + ${DEADLINE:-560}))
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv >>$W/gpu.txt
for step in "$@"; do
for s in ${SHAPES:-qwen3-30b-a3b deepseek-v3-tp8 qwen3-235b-a22b mixtral-8x7b}; do
	m="--model $s"; [ $s = deepseek-v3-tp8 ] && m="--model deepseek-v3 --tp 8"
	left=$((end - SECONDS)); [ $left -le 30 ] && { echo "$step $s: SKIPPED (deadline)" >>$W/summary.txt; continue; }
	case $step in
	tune)
		[ -f $W/docs/tune-$s.done ] && continue
		timeout -s INT -k 10 $left bin/mstar tune moe $m --batch $B --force --rounds 1 --dir $W/configs --ceilings $CE --device cuda:0 \
			--out $W/docs/tune-$s.json >$W/docs/tune-$s.txt 2>&1
		rc=$?; [ $rc = 0 ] && touch $W/docs/tune-$s.done ;;
	table)
		[ -s $W/docs/peers-$s.json ] && continue
		MSTAR_MOE_CONFIG_DIR=$W/configs timeout -s INT -k 10 $left bin/mstar bench moe $m --batch $B --rounds 1 --peers \
			--triton-peer .dev/peers/triton_moe_ref.py --ceilings $CE --device cuda:0 --out $W/docs/peers-$s.json.part >$W/docs/peers-$s.txt 2>&1
		rc=$?; [ $rc = 0 ] && mv $W/docs/peers-$s.json.part $W/docs/peers-$s.json
		left=$((end - SECONDS)); [ $left -le 20 ] && continue
		timeout -s INT -k 10 $left bin/mstar bench moe $m --batch $B --rounds 1 --ceilings $CE --device cuda:0 \
			--out $W/docs/shipped-$s.json >$W/docs/shipped-$s.txt 2>&1 ;;
	esac
	echo "$step $s: exit $rc at ${SECONDS}s" >>$W/summary.txt
done
done
tar czf $OUT/work-small.tgz $W
cat $W/summary.txt
