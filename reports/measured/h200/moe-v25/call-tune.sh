#!/usr/bin/env bash
# sixth session call 4: v25 (tc zero-fill + ov=2) full re-tune, first part; the work dir comes back to resume next session
set -u
R=$OUT; X=/tmp/s4; rm -rf $X; mkdir -p $X
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv > $X/gpu.txt
mkdir -p bin .work; tar xJf .dev/bins.tar.xz -C bin
[ -d .work/v25 ] || { [ -f .dev/work25.tgz ] && tar xzf .dev/work25.tgz; }
VARIANT=bin/mstar-v25 MOE_TEST=bin/moe-v25.test WORK=.work/v25 ROUNDS=1 DEADLINE=${DEADLINE:-500} OUT=$X scripts/moe-variant-h200.sh tune
echo "variant exit $?" >> $X/variant/summary.txt
tar czf $R/work25.tgz .work/v25
tar czf $R/s4.tgz -C /tmp s4
cat $X/variant/summary.txt; grep -E "^== " .work/v25/tune/run.log | tail -8
