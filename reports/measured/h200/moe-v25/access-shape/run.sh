#!/usr/bin/env bash
set -u
mkdir -p $OUT/acc
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv >$OUT/acc/gpu.txt
nvcc -arch=sm_90a -O3 -o /tmp/access .dev/acc/access.cu >$OUT/acc/build.txt 2>&1 || { cat $OUT/acc/build.txt; exit 1; }
/tmp/access | tee $OUT/acc/access.txt
/tmp/access >$OUT/acc/access-2.txt
