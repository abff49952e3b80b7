#!/usr/bin/env bash
# sixth session call 2: v24 (tc ov=2, the stage ring across tiles) A/B at small M; its CUDA rows and tc resources
set -u
R=$OUT; X=/tmp/s2; rm -rf $X; mkdir -p $X/ab
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv > $X/gpu.txt
mkdir -p bin; tar xJf .dev/bins.tar.xz -C bin
(cd kernels/moe && timeout 200 ../../bin/moe-v24.test -test.run 'TestCUDATCResources|TestCUDAForward/.*ov=2' -test.v) > $X/moe-cuda-ov2.log 2>&1
echo "ov2 CUDA rows + TCResources exit $? [$SECONDS s]; $(grep -c -- '--- PASS' $X/moe-cuda-ov2.log) pass $(grep -c -- '--- FAIL' $X/moe-cuda-ov2.log) fail" >> $X/summary.txt
C=reports/measured/h200/moe-v21/stages/ceilings.json
T="tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1"
for i in 1 2; do
  for sh in "ds:--model deepseek-v3 --tp 8:4,8,16,32,64,128" "q30:--model qwen3-30b-a3b:4,8,16,32,64" "q235:--model qwen3-235b-a22b:4,8,16,32" "mx:--model mixtral-8x7b:8,16,32"; do
    IFS=: read -r n args b <<< "$sh"
    for v in "main:bin/mstar:1" "v24ov1:bin/mstar-v24:1" "v24ov2:bin/mstar-v24:2"; do
      IFS=: read -r tag bin ov <<< "$v"
      [ $SECONDS -gt ${STOP:-520} ] && break 3
      timeout 60 $bin bench moe $args --batch $b --config "$T,ov=$ov" --ceilings $C --rounds 1 --device cuda:0 --out $X/ab/$n-$i-$tag.json > $X/ab/$n-$i-$tag.txt 2>&1
      echo "$n $i $tag exit $? [$SECONDS s]" >> $X/summary.txt
    done
  done
done
tar czf $R/s2.tgz -C /tmp s2
cat $X/summary.txt | tail -8
for n in ds q30 q235 mx; do for f in $X/ab/$n-*.txt; do echo "$(basename $f .txt): $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ ' $f | awk '{printf "%s:%s ", $1, $4}')"; done; done
