#!/usr/bin/env bash
# call-land.sh — on the GPU machine: land a moe.cu change (variant V, built
# here by next/build.sh: bin/mstar-v$V and bin/moe-v$V.test in
# .dev/bins$V.tar.xz): its CUDA tests, the shortlisted re-tune, the 52-cell
# table with triton-ref in the same call, and optionally the A/B of the
# tuned builds (scripts/moe-variant-h200.sh's steps), over as many calls as
# it takes. v34 landed this way in the eighteenth session
# (reports/measured/h200/moe-v34/): tests ~80 s, tune ~560 s, table ~340 s,
# so two full calls after a start. The machine is given back ~30 s after a
# call, so the work dir travels: each call returns work$V.tgz, and the next
# resumes from .dev/work$V.tgz, but only on the card it came from (a call
# naming an H200 may get an H100: its tune and table go to their own
# work$V-<card>.tgz, whose finished shapes an H200 must not skip).
#
# Here, before the first call (from the repository root):
#   kernels/moe/next/build.sh $V [PATCH ...]
#   cp -r ../shared/peers .dev/            # triton-ref for the table
# There (carry .dev; give each call the steps it has time for):
#   V=$V OUT=$OUT bash kernels/moe/next/call-land.sh tune       # again if cut: it resumes
#   V=$V OUT=$OUT bash kernels/moe/next/call-land.sh tune table
# (next/call-wg.sh tests first, in the same call, for the wg modules'
# registers and local memory.) After each call, here: cp <files_at>/work$V*.tgz
# .dev/ (what the next call resumes from), and unpack <files_at>/v$V-*.tgz
# into reports/measured/h200/moe-v$V/ before committing.
# Landing: apply the patches on main, copy the tune's configs/*H200.json
# (in work$V.tgz) into kernels/moe/configs, and the table's ratios into
# README (scripts/moe-ratios.py --markdown) and kernels/moe/NOTES.md.
# The tune tries per batch the shortlist of SHORTLIST's documents (default
# v34's: its six fastest by pass and by each GEMM), the static pick and
# every candidate new since. DEADLINE (default 540 s) is the time the steps
# may start in.
set -u
[ $# -gt 0 ] && [ -n "${V:-}" ] || { echo "usage: V=N $0 tests|tune|table|ab ...  (V: the build, next/build.sh N)" >&2; exit 2; }
R=${OUT:?set OUT}
X=/tmp/v$V-$(date +%H%M%S)
mkdir -p "$X"
DEADLINE=${DEADLINE:-540}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
	--format=csv >"$X/gpu.txt" 2>&1
WORKDIR=.work/v$V TARBALL=work$V.tgz
if ! grep -q H200 "$X/gpu.txt"; then
	echo "warning: not an H200: the tuned files are per device name; land only an H200's" | tee -a "$X/summary.txt"
	card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr -c 'A-Za-z0-9\n' _)
	WORKDIR=.work/v$V-$card TARBALL=work$V-$card.tgz
fi
[ -x bin/mstar-v$V ] || tar xJf .dev/bins$V.tar.xz || { echo "no .dev/bins$V.tar.xz: build it here first: kernels/moe/next/build.sh $V" >&2; exit 2; }
if [ ! -d $WORKDIR ] && [ -f .dev/$TARBALL ]; then
	tar xzf .dev/$TARBALL && echo "resumed from .dev/$TARBALL" | tee -a "$X/summary.txt"
fi

# The variant script's steps, in the order given, with this call's time left.
variant() {
	# ab's A side is main's build, bin/mstar (go build it into bin/ and
	# add it to the tarball: build.sh does not).
	SHORTLIST=${SHORTLIST-reports/measured/h200/moe-v34/tune/docs} \
		VARIANT=bin/mstar-v$V BASE=bin/mstar MOE_TEST=bin/moe-v$V.test WORK=$WORKDIR ROUNDS=1 \
		DEADLINE=$((DEADLINE - SECONDS)) OUT=$X scripts/moe-variant-h200.sh "$@"
	echo "moe-variant-h200.sh $*: exit $?" | tee -a "$X/summary.txt"
}
variant "$@"
# Two files back: the work dir (to resume) and this call's outputs.
[ -d $WORKDIR ] && tar czf "$R/$TARBALL" $WORKDIR
tar czf "$R/$(basename "$X").tgz" -C /tmp "$(basename "$X")"
cat "$X/variant/summary.txt" 2>/dev/null
[ -f $WORKDIR/tune/run.log ] && grep -E "^== " $WORKDIR/tune/run.log | tail -8
[ -f $WORKDIR/moe-table/ratios.txt ] && tail -3 $WORKDIR/moe-table/ratios.txt
exit 0
