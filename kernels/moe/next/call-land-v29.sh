#!/usr/bin/env bash
# call-land-v29.sh — on the GPU machine: land "v29" = v26 (tc-prefetch.patch)
# + v28 (tc-narrow.patch), which won on an H100 (reports/measured/h100/
# moe-v26-v28/), + v30 (tc-self-align.patch: the alignment fused into a tc
# gemm1 at 64 slots or fewer, tried by the tuner on each batch's fastest
# configuration; emulator-checked, not yet run on a GPU): the variant's CUDA
# tests, v30 against the same configuration without it, the re-tune, the
# 52-cell table with triton-ref in the same call and the A/B of the tuned
# builds, over as many calls as it takes (~100 s of tests and saab, ~900 s of
# tune, ~330 s of table, ~150 s of ab). The machine is given back ~30 s after
# a call, so the work dir travels: each call returns work29.tgz, and the next
# call resumes from .dev/work29.tgz, but only on the card it came from (a
# call naming an H200 may get an H100: its tune and table go to their own
# work29-<card>.tgz, whose finished shapes an H200 must not skip).
#
# Here, before the first call (from the repository root):
#   rm -rf /tmp/v29 && git worktree add -f /tmp/v29 HEAD &&
#   (cd /tmp/v29 && for p in tc-prefetch tc-narrow tc-self-align; do git apply kernels/moe/next/$p.patch || exit; done &&
#    go build -buildvcs=auto -ldflags='-s -w' -o "$OLDPWD/bin/mstar-v29" ./cmd/mstar &&
#    go test -c -ldflags='-s -w' -o "$OLDPWD/bin/moe-v29.test" ./kernels/moe)
#   go build -buildvcs=auto -ldflags='-s -w' -o bin/mstar ./cmd/mstar      # main: the A/B's base
#   mkdir -p .dev && tar cJf .dev/bins29.tar.xz bin/mstar bin/mstar-v29 bin/moe-v29.test
#   cp -r ../shared/peers .dev/                                              # triton-ref for the table
# There (carry .dev; give each call the steps it has time for; saab ran on
# an H100 in the thirteenth session, reports/measured/h100/moe-v29/):
#   OUT=$OUT bash kernels/moe/next/call-land-v29.sh tests tune  # then tune again: it resumes
#   OUT=$OUT bash kernels/moe/next/call-land-v29.sh table
#   OUT=$OUT bash kernels/moe/next/call-land-v29.sh ab
# After each call, here: cp <files_at>/work29*.tgz .dev/ (what the next call resumes from),
# and unpack <files_at>/v29-*.tgz into reports/measured/h200/moe-v29/ before committing.
# Landing: apply the three patches on main, copy .work/v29/tune/configs/*H200.json (from
# work29.tgz) and reports/measured/h100/moe-v29/tune/configs/*.json (the H100's,
# same kernels) into kernels/moe/configs, and the table's ratios into README.
# Steps: saab (here: v30's fused alignment against the same tc configuration
# without it, fresh processes alternated, 2 a side, on the 16-row ov2 tile at
# 8–64 slots of each shape, then report diff of the merged sides), then
# scripts/moe-variant-h200.sh's (tests, tune, table, ab). DEADLINE (default
# 540 s) is the time the steps may start in.
set -u
# V (default 29) names the build: bin/mstar-v$V, bin/moe-v$V.test from
# .dev/bins$V.tar.xz, the work dir .work/v$V and work$V.tgz. V=32 lands v32
# (v29 + wg-prefetch.patch + wg-vstore.patch, next/call-wg.sh's header builds
# bin/mstar-v32 and bin/moe-v32.test) the same way. V=34 (v32 +
# wg-traffic.patch, whose tuner also times the l2=4 and mc=2 twins;
# next/call-v33.sh's header builds .dev/bins34.tar.xz) is the next landing.
V=${V:-29}
R=${OUT:?set OUT}
[ $# -gt 0 ] || { echo "usage: $0 tests|saab|tune|table|ab ..." >&2; exit 2; }
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
[ -x bin/mstar-v$V ] || tar xJf .dev/bins$V.tar.xz || { echo "no .dev/bins$V.tar.xz: build it here first (header)" >&2; exit 2; }
if [ ! -d $WORKDIR ] && [ -f .dev/$TARBALL ]; then
	tar xzf .dev/$TARBALL && echo "resumed from .dev/$TARBALL" | tee -a "$X/summary.txt"
fi

saab() {
	local T="tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=2"
	mkdir -p "$X/saab"
	timeout 120 bin/mstar-v$V bench ceilings --device cuda:0 --out "$X/saab/ceilings.json" >"$X/saab/ceilings.txt" 2>&1
	# name | bench flags | batches (8 to 64 slots)
	local cells=("q30|--model qwen3-30b-a3b|1,2,4,8" "ds|--model deepseek-v3 --tp 8|1,2,4,8"
		"mx|--model mixtral-8x7b|4,8,16,32" "q235|--model qwen3-235b-a22b|1,2,4,8")
	for i in 1 2; do
		for cell in "${cells[@]}"; do
			IFS="|" read -r n args b <<<"$cell"
			for side in "plain:$T" "sa:$T,sa=1"; do
				[ $SECONDS -gt $((DEADLINE - 30)) ] && { echo "saab: stopped at the deadline" | tee -a "$X/summary.txt"; return; }
				# shellcheck disable=SC2086 # $args is the shape's flags
				timeout 90 bin/mstar-v$V bench moe $args --batch "$b" --config "${side#*:}" --ceilings "$X/saab/ceilings.json" \
					--rounds 1 --device cuda:0 --out "$X/saab/$n-$i-${side%%:*}.json" >"$X/saab/$n-$i-${side%%:*}.txt" 2>&1
				echo "saab $n $i ${side%%:*}: exit $? [$SECONDS s]" >>"$X/summary.txt"
			done
		done
	done
	# Each side's runs merged (they become its rounds) and diffed, as
	# scripts/ab-builds.sh does; the config param differs, which report diff
	# pairs as "config=A → B".
	for side in plain sa; do
		bin/mstar-v$V report merge -o "$X/saab/$side.json" "$X"/saab/*-[12]-$side.json >/dev/null
	done
	bin/mstar-v$V report diff "$X/saab/plain.json" "$X/saab/sa.json" >"$X/saab/diff.txt" 2>&1
	echo "saab report diff: exit $?" | tee -a "$X/summary.txt"
	grep -E "batch=|geomean" "$X/saab/diff.txt"
}

# The variant script's steps, in the order given, with this call's time left.
variant() {
	# The tune tries per batch v25's shortlist (its six fastest by pass and
	# by each GEMM), the static pick and every candidate new since (v28's).
	SHORTLIST=${SHORTLIST-reports/measured/h200/moe-v25/tune/docs} \
		VARIANT=bin/mstar-v$V BASE=bin/mstar MOE_TEST=bin/moe-v$V.test WORK=$WORKDIR ROUNDS=1 \
		DEADLINE=$((DEADLINE - SECONDS)) OUT=$X scripts/moe-variant-h200.sh "$@"
	echo "moe-variant-h200.sh $*: exit $?" | tee -a "$X/summary.txt"
}
steps=()
for s in "$@"; do
	case $s in
	saab)
		[ ${#steps[@]} -gt 0 ] && variant "${steps[@]}"
		steps=()
		saab
		;;
	*) steps+=("$s") ;;
	esac
done
[ ${#steps[@]} -gt 0 ] && variant "${steps[@]}"
# Two files back: the work dir (to resume) and this call's outputs.
[ -d $WORKDIR ] && tar czf "$R/$TARBALL" $WORKDIR
tar czf "$R/$(basename "$X").tgz" -C /tmp "$(basename "$X")"
cat "$X/variant/summary.txt" 2>/dev/null
[ -f $WORKDIR/tune/run.log ] && grep -E "^== " $WORKDIR/tune/run.log | tail -8
[ -f $WORKDIR/moe-table/ratios.txt ] && tail -3 $WORKDIR/moe-table/ratios.txt
exit 0
