#!/usr/bin/env bash
# fresh processes, alternated: qwen3-235b M=4 with the 16x256 ov2 pick (a) and the 16x128 split (b)
set -u
[ -x bin/mstar ] || tar xJf .dev/bins-main.tar.xz
mkdir -p $OUT/ab4
nvidia-smi --query-gpu=name,uuid --format=csv >$OUT/ab4/gpu.txt
A='tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=2,pl=1+tc:bm=16,bn=128,bk=64,wm=1,wn=4,stages=4,gm=8,minb=3,ov=2,pl=1'
B='tc:bm=16,bn=128,bk=64,wm=1,wn=4,stages=4,gm=8,minb=2,ov=1+tc:bm=16,bn=128,bk=64,wm=1,wn=4,stages=4,gm=8,minb=2,ov=2'
CE=reports/measured/h200/moe-v25/tune/ceilings.json
for i in 1 2 3; do
	for s in a b; do
		c=$A; [ $s = b ] && c=$B
		timeout 60 bin/mstar bench moe --model qwen3-235b-a22b --batch 4,8 --rounds 1 --config "$c" --stages --ceilings $CE --device cuda:0 --out $OUT/ab4/$s-$i.json >$OUT/ab4/$s-$i.txt 2>&1
		echo "$s-$i: $(grep -E '^\s+4 ' $OUT/ab4/$s-$i.txt | head -1)" | tee -a $OUT/ab4/summary.txt
	done
done
tar czf $OUT/ab4.tgz -C $OUT ab4; rm -rf $OUT/ab4
