#!/usr/bin/env bash
# tenth session, call 2: the tuner at M=4 alone (does it reproduce 242 us?), bench after it, ncu of the small-M cells
set -u
[ -x bin/mstar ] || tar xJf .dev/bins-main.tar.xz
mkdir -p $OUT/r
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; } >"$OUT/r/gpu.txt" 2>&1
CE=reports/measured/h200/moe-v25/tune/ceilings.json
mkdir -p $OUT/tdir
timeout 120 bin/mstar tune moe --model qwen3-235b-a22b --batch 4 --dir $OUT/tdir --force --rounds 1 --ceilings $CE --device cuda:0 --out $OUT/r/tune4.json >$OUT/r/tune4.txt 2>&1; echo "tune4 exit $? at $SECONDS" >>$OUT/r/steps.txt
cp $OUT/tdir/*.json $OUT/r/tuned-qwen3-235b.json
timeout 60 bin/mstar bench moe --model qwen3-235b-a22b --batch 4 --rounds 1 --stages --ceilings $CE --device cuda:0 --out $OUT/r/alone4.json >$OUT/r/alone4.txt 2>&1; echo "alone4 exit $? at $SECONDS" >>$OUT/r/steps.txt
CASES="qwen3-235b-4 mixtral-2" OUT=$OUT/r timeout 300 scripts/moe-ncu-h200.sh >$OUT/r/ncu-run.txt 2>&1; echo "ncu exit $? at $SECONDS" >>$OUT/r/steps.txt
rm -rf $OUT/r/ncu/*.ncu-rep.unused
tar czf $OUT/r.tgz -C $OUT r; rm -rf $OUT/r $OUT/tdir
