#!/usr/bin/env bash
# sixth session call 3: v25 = v22 (tc zero-fill) + v24 (tc ov=2) against main, small M; v25's CUDA rows
set -u
R=$OUT; X=/tmp/s3; rm -rf $X; mkdir -p $X/ab
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv > $X/gpu.txt
mkdir -p bin; tar xJf .dev/bins.tar.xz -C bin
C=reports/measured/h200/moe-v21/stages/ceilings.json
T="tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1"
for i in 1 2; do
  for sh in "ds:--model deepseek-v3 --tp 8:4,8,16,32,64" "q30:--model qwen3-30b-a3b:4,8,16,32,64" "q235:--model qwen3-235b-a22b:4,8,16"; do
    IFS=: read -r n args b <<< "$sh"
    for v in "main:bin/mstar:1" "v25ov1:bin/mstar-v25:1" "v25ov2:bin/mstar-v25:2"; do
      IFS=: read -r tag bin ov <<< "$v"
      [ $SECONDS -gt ${STOP:-400} ] && break 3
      timeout 60 $bin bench moe $args --batch $b --config "$T,ov=$ov" --ceilings $C --rounds 1 --device cuda:0 --out $X/ab/$n-$i-$tag.json > $X/ab/$n-$i-$tag.txt 2>&1
      echo "$n $i $tag exit $? [$SECONDS s]" >> $X/summary.txt
    done
  done
done
(cd kernels/moe && timeout 150 ../../bin/moe-v25.test -test.run 'TestCUDAForward/.*(ov=2|bm=16,)' -test.v) > $X/moe-cuda-v25.log 2>&1
echo "v25 CUDA rows exit $? [$SECONDS s]; $(grep -c -- '--- PASS' $X/moe-cuda-v25.log) pass $(grep -c -- '--- FAIL' $X/moe-cuda-v25.log) fail" >> $X/summary.txt
tar czf $R/s3.tgz -C /tmp s3
tail -2 $X/summary.txt
for n in ds q30 q235; do for f in $X/ab/$n-*.txt; do echo "$(basename $f .txt): $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ ' $f | awk '{printf "%s:%s ", $1, $4}')"; done; done
