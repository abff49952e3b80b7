#!/usr/bin/env bash
# 2026-12-03 sixth session call 1: v23b A/B (ac with column-band order) on one build; ac CUDA rows; ncu of qwen3-30b M=1024 wg streaming
set -u
R=$OUT; X=/tmp/s1; rm -rf $X; mkdir -p $X/ab $X/ncu
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv > $X/gpu.txt
mkdir -p bin; tar xJf .dev/bins.tar.xz -C bin
C=reports/measured/h200/moe-v21/stages/ceilings.json
DS="wg:nc=2,bn=256,stages=4,gm=8,tma=1+wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1"
Q="wg:nc=2,bn=256,stages=3,gm=8,tma=1+wg:nc=2,bn=256,stages=3,gm=8,tma=1"
for i in 1 2; do
  for v in plain ac; do
    s=""; [ $v = ac ] && s=",ac=1"
    timeout 60 bin/mstar-v23 bench moe --model deepseek-v3 --tp 8 --batch 2048,4096 --config "$DS$s" --ceilings $C --rounds 1 --device cuda:0 --out $X/ab/ds-$i-$v.json > $X/ab/ds-$i-$v.txt 2>&1
    echo "ds $i $v exit $? [$SECONDS s]" >> $X/summary.txt
    timeout 60 bin/mstar-v23 bench moe --model qwen3-30b-a3b --batch 4096 --config "$Q$s" --ceilings $C --rounds 1 --device cuda:0 --out $X/ab/q-$i-$v.json > $X/ab/q-$i-$v.txt 2>&1
    echo "q $i $v exit $? [$SECONDS s]" >> $X/summary.txt
  done
done
(cd kernels/moe && timeout 150 ../../bin/moe-v23.test -test.run 'TestCUDAForward/.*ac=1' -test.v) > $X/moe-cuda-ac.log 2>&1
echo "ac CUDA rows exit $? [$SECONDS s]; $(grep -c -- '--- PASS' $X/moe-cuda-ac.log) pass $(grep -c -- '--- FAIL' $X/moe-cuda-ac.log) fail" >> $X/summary.txt
# qwen3-30b M=1024: the shipped pick streams gemm1 at 80% of its floor
G="wg:nc=2,bn=256,stages=4,gm=8,pp=1,pl=1"
for c in "q1024 $G" "q1024tma wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1"; do
  set -- $c
  [ $SECONDS -gt ${STOP:-300} ] && break
  timeout 90 ncu --clock-control none -k regex:moe_gemm --launch-count 2 --section SpeedOfLight --section WarpStateStats \
    --section SourceCounters --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats -f -o $X/ncu/$1 bin/mstar bench moe --model qwen3-30b-a3b --batch 1024 --config $2 \
    --rounds 1 --device cuda:0 > $X/ncu/$1.log 2>&1
  echo "ncu $1: exit $? [$SECONDS s]" >> $X/summary.txt
  timeout 30 ncu --import $X/ncu/$1.ncu-rep --page details > $X/ncu/$1.txt 2>&1
  timeout 30 ncu --import $X/ncu/$1.ncu-rep --page raw --csv > $X/ncu/$1.csv 2>&1
done
tar czf $R/s1.tgz -C /tmp s1
cat $X/summary.txt
grep -hE "^ *(2048|4096) " $X/ab/*.txt | head -20
