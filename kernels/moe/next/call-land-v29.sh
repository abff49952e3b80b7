#!/usr/bin/env bash
# call-land-v29.sh — on the GPU machine: land "v29" = v26 (tc-prefetch.patch)
# + v28 (tc-narrow.patch), which won on an H100 (reports/measured/h100/
# moe-v26-v28/): the variant's re-tune, its 52-cell table with triton-ref in
# the same call, the A/B of the tuned builds, and its CUDA tests, over as many
# calls as it takes (~900 s of tune, ~330 s of table, ~150 s of ab + tests).
# The machine is given back ~30 s after a call, so the work dir travels: each
# call returns work29.tgz, and the next call resumes from .dev/work29.tgz.
#
# Here, before the first call (from the repository root):
#   rm -rf /tmp/v29 && git worktree add -f /tmp/v29 HEAD &&
#   (cd /tmp/v29 && git apply kernels/moe/next/tc-prefetch.patch && git apply kernels/moe/next/tc-narrow.patch &&
#    go build -buildvcs=auto -ldflags='-s -w' -o "$OLDPWD/bin/mstar-v29" ./cmd/mstar &&
#    go test -c -ldflags='-s -w' -o "$OLDPWD/bin/moe-v29.test" ./kernels/moe)
#   go build -buildvcs=auto -ldflags='-s -w' -o bin/mstar ./cmd/mstar      # main: the A/B's base
#   mkdir -p .dev && tar cJf .dev/bins29.tar.xz bin/mstar bin/mstar-v29 bin/moe-v29.test
#   cp -r ../shared/peers .dev/                                              # triton-ref for the table
# There (carry .dev; give each call the steps it has time for):
#   OUT=$OUT bash kernels/moe/next/call-land-v29.sh tune           # twice: the tune resumes
#   OUT=$OUT bash kernels/moe/next/call-land-v29.sh table
#   OUT=$OUT bash kernels/moe/next/call-land-v29.sh ab tests
# After each call, here: cp <files_at>/work29.tgz .dev/ (what the next call resumes from),
# and unpack <files_at>/v29-*.tgz into reports/measured/h200/moe-v29/ before committing.
# Landing: git apply both patches on main, copy .work/v29/tune/configs/*.json (from
# work29.tgz) into kernels/moe/configs, and the table's ratios into README.
# Steps are scripts/moe-variant-h200.sh's (tests, tune, table, ab); DEADLINE (default
# 540 s) is the time the steps may start in.
set -u
R=${OUT:?set OUT}
[ $# -gt 0 ] || { echo "usage: $0 tune|table|ab|tests ..." >&2; exit 2; }
X=/tmp/v29-$(date +%H%M%S)
mkdir -p "$X"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
	--format=csv >"$X/gpu.txt" 2>&1
grep -q H200 "$X/gpu.txt" || echo "warning: not an H200: the tuned files are per device name; land only an H200's" |
	tee -a "$X/summary.txt"
[ -x bin/mstar-v29 ] || tar xJf .dev/bins29.tar.xz || { echo "no .dev/bins29.tar.xz: build it here first (header)" >&2; exit 2; }
if [ ! -d .work/v29 ] && [ -f .dev/work29.tgz ]; then
	tar xzf .dev/work29.tgz && echo "resumed from .dev/work29.tgz" | tee -a "$X/summary.txt"
fi
VARIANT=bin/mstar-v29 BASE=bin/mstar MOE_TEST=bin/moe-v29.test WORK=.work/v29 ROUNDS=1 \
	DEADLINE=${DEADLINE:-540} OUT=$X scripts/moe-variant-h200.sh "$@"
echo "moe-variant-h200.sh $*: exit $?" | tee -a "$X/summary.txt"
# Two files back: the work dir (to resume) and this call's outputs.
[ -d .work/v29 ] && tar czf "$R/work29.tgz" .work/v29
tar czf "$R/$(basename "$X").tgz" -C /tmp "$(basename "$X")"
cat "$X/variant/summary.txt" 2>/dev/null
[ -f .work/v29/tune/run.log ] && grep -E "^== " .work/v29/tune/run.log | tail -8
[ -f .work/v29/moe-table/ratios.txt ] && tail -3 .work/v29/moe-table/ratios.txt
exit 0
