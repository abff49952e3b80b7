#!/usr/bin/env bash
# tenth session, call 1: the placement probe with qwen3-235b M=4's pick, then bench alone vs in sweep order, then a 1-batch tune
set -u
[ -x bin/mstar ] || tar xJf .dev/bins-main.tar.xz
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; } >"$OUT/gpu.txt" 2>&1
end=$((SECONDS + ${BUDGET:-540}))
C4='tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=2,pl=1+tc:bm=16,bn=128,bk=64,wm=1,wn=4,stages=4,gm=8,minb=3,ov=2,pl=1'
CE=reports/measured/h200/moe-v25/tune/ceilings.json
MSTAR_MOE_PLACEMENT_CONFIG="$C4" OUT=$OUT timeout 200 scripts/accept-h200.sh placement
echo "placement done at ${SECONDS}s" >>"$OUT/steps.txt"
run() { # name, args...
	local n=$1; shift
	left=$((end - SECONDS)); [ $left -le 20 ] && { echo "$n: skipped (deadline)" >>"$OUT/steps.txt"; return; }
	timeout -s INT -k 5 $left bin/mstar "$@" --ceilings $CE --device cuda:0 --out "$OUT/$n.json" >"$OUT/$n.txt" 2>&1
	echo "$n: exit $? at ${SECONDS}s" >>"$OUT/steps.txt"
}
run alone4a bench moe --model qwen3-235b-a22b --batch 4 --rounds 1 --stages
run sweep124 bench moe --model qwen3-235b-a22b --batch 1,2,4 --rounds 1
run alone4b bench moe --model qwen3-235b-a22b --batch 4 --rounds 1
run sweep8421 bench moe --model qwen3-235b-a22b --batch 8,4,2,1 --rounds 1
mkdir -p $OUT/tdir
run tune4 tune moe --model qwen3-235b-a22b --batch 4,8 --dir $OUT/tdir --force --rounds 1
