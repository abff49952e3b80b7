#!/usr/bin/env bash
# H100 fallback: ncu of v32's wg GEMMs at M=4096 (is gemm1 L2-bound?).
set -u
d=$OUT/ncu; mkdir -p $d
C=reports/measured/h100/moe-v32/call3/ceilings.json
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv >$d/gpu.txt
ncu --version >$d/ncu-version.txt 2>&1
for c in "ds|--model deepseek-v3 --tp 8|wg:nc=2,bn=256,stages=4,gm=8,tma=1" \
         "dsmc|--model deepseek-v3 --tp 8|wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=1" \
         "q30|--model qwen3-30b-a3b|wg:nc=2,bn=256,stages=4,gm=8,tma=1" \
         "mx|--model mixtral-8x7b|wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=1"; do
  IFS="|" read -r n args cfg <<<"$c"
  timeout 150 ncu --clock-control none -k regex:moe_gemm --launch-count 2 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats \
    --section ComputeWorkloadAnalysis -f -o $d/$n bin/mstar-v32 bench moe $args --batch 4096 --config $cfg \
    --rounds 1 --device cuda:0 --ceilings $C >$d/$n.log 2>&1
  echo "ncu $n: exit $? [$SECONDS s]" | tee -a $d/summary.txt
  ncu --import $d/$n.ncu-rep --page details >$d/$n.txt 2>&1
  ncu --import $d/$n.ncu-rep --page raw --csv >$d/$n.csv 2>&1
  rm -f $d/$n.ncu-rep
  grep -E "moe_gemm|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput" $d/$n.txt | head -20
done
tar czf $OUT/ncu.tgz -C $OUT ncu
