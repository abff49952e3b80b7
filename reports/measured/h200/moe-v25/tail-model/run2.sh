#!/usr/bin/env bash
set -u
mkdir -p $OUT/tail
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv >$OUT/tail/gpu.txt
nvcc -arch=sm_90a -O3 -o /tmp/tail .dev/acc/tail.cu >$OUT/tail/build.txt 2>&1 || { cat $OUT/tail/build.txt; exit 1; }
/tmp/tail | tee $OUT/tail/tail.txt
/tmp/tail > $OUT/tail/tail-2.txt
