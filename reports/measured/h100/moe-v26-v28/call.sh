#!/usr/bin/env bash
# As run in the twelfth session's calls 1-2 (H100 GPU-3d82fd05): main's
# kernels/moe/next/call-v26-v28.sh at f4d1e2f (v26, v27 and v28); call 2 with
# the H200-ceilings check added below (call 1 ran without it, so its bench
# steps exited 2 on the H200 ceilings and only its tests counted). The
# script in kernels/moe/next has since lost its v27 steps.
# call-v26-v28.sh — the prepared GPU calls for the three patches waiting
# in kernels/moe/next (run on the H200 from the repository root, OUT set):
#   1. v26's tc rows (ov=2 and 16-row), v27's wg rows and v28's 16-row tc
#      rows of TestCUDAForward (poisoned outputs, rel L2 against float64),
#      compiled for sm_90a, and v28's TCResources (registers, local memory);
#   2. v26 against main at small M, one fixed tc configuration, runs
#      alternated (deepseek-v3 tp8 M=4,16,64; qwen3-235b-a22b M=4,16);
#   3. v27 against main at large M, one fixed cooperative wg configuration
#      per shape (qwen3-30b-a3b and deepseek-v3 tp8 M=1024,2048,4096 tma=1;
#      qwen3-235b-a22b M=1024,4096 mc=1), runs alternated;
#   4. v28's new 16-row tiles against the 16×256 ones in one process: tune
#      moe of the cells where 16×256 tiles leave multiprocessors idle or
#      read under 88% (mixtral M=2,4; deepseek-v3 tp8 M=4,8; qwen3-30b-a3b
#      M=8,16; qwen3-235b-a22b M=4), the candidates filtered to 16-row tc
#      tiles (per-GEMM times in the document);
#   5. --weight-copies 4 against the default, main's build, qwen3-235b M=4
#      with the shipped file, runs alternated;
#   6. tune moe --finalists 3 (main's build) of qwen3-235b M=4: whether the
#      fresh processes pick another configuration than the tuner's times.
# Both builds of a pair read the same --config, so the shipped files' kernel
# hash does not matter to the A/B. Everything lands in one tarball under
# $OUT (the device returns only a few files a call).
#
# Here, before the call (bins into .dev, carry only .dev):
#   for v in 26:tc-prefetch 27:wg-idle-half 28:tc-narrow; do n=${v%%:*} p=${v#*:}
#     rm -rf /tmp/v$n && git worktree add -f /tmp/v$n HEAD &&
#     (cd /tmp/v$n && git apply kernels/moe/next/$p.patch &&
#      go build -ldflags='-s -w' -o /work/main/bin/mstar-v$n ./cmd/mstar &&
#      go test -c -ldflags='-s -w' -o /work/main/bin/moe-v$n.test ./kernels/moe); done
#   go build -buildvcs=auto -ldflags='-s -w' -o bin/mstar ./cmd/mstar
#   mkdir -p .dev && tar cJf .dev/bins.tar.xz bin/mstar bin/mstar-v2[678] bin/moe-v2[678].test
# There, in steps (each resumes nothing: give each call the steps it has
# time for; DEADLINE, default 570 s, skips the steps that would start late):
#   OUT=$OUT bash kernels/moe/next/call-v26-v28.sh tests ab tune28        (~420 s)
#   OUT=$OUT bash kernels/moe/next/call-v26-v28.sh copies finalists       (~120 s)
# Steps: tests (1), ab (2, 3), tune28 (4), copies (5), finalists (6). The
# first call unpacks .dev/bins.tar.xz; a later one on the same warm machine
# finds bin/ there, else carries .dev again.
set -u
R=${OUT:?set OUT}
[ $# -gt 0 ] || { echo "usage: $0 tests|ab|tune28|copies|finalists ..." >&2; exit 2; }
X=/tmp/c-$(date +%H%M%S)
mkdir -p $X/ab
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv >$X/gpu.txt
[ -x bin/mstar-v28 ] || tar xJf .dev/bins.tar.xz
C=reports/measured/h200/moe-v21/stages/ceilings.json
CE=(--ceilings $C)
if ! grep -q "H200" $X/gpu.txt; then
	timeout 120 bin/mstar bench ceilings --device cuda:0 --out $X/ceilings.json >$X/ceilings.txt 2>&1
	CE=(--ceilings $X/ceilings.json)
fi
DEADLINE=${DEADLINE:-570}
note() { echo "$* [$SECONDS s]" | tee -a $X/summary.txt; }
late() { [ $SECONDS -gt $((DEADLINE - ${1:-60})) ]; }

tests() {
	(cd kernels/moe && timeout 120 ../../bin/moe-v26.test -test.run 'TestCUDAForward/.*(ov=2|bm=16,)' -test.v) >$X/cuda-v26.log 2>&1
	note "v26 tc rows: exit $?; $(grep -c -- '--- PASS' $X/cuda-v26.log) pass, $(grep -c -- '--- FAIL' $X/cuda-v26.log) fail"
	(cd kernels/moe && timeout 150 ../../bin/moe-v27.test -test.run 'TestCUDAForward/.*wg:' -test.v) >$X/cuda-v27.log 2>&1
	note "v27 wg rows: exit $?; $(grep -c -- '--- PASS' $X/cuda-v27.log) pass, $(grep -c -- '--- FAIL' $X/cuda-v27.log) fail"
	(cd kernels/moe && timeout 120 ../../bin/moe-v28.test -test.run 'TestCUDAForward/.*bm=16,|TestCUDATCResources' -test.v) >$X/cuda-v28.log 2>&1
	note "v28 tc rows: exit $?; $(grep -c -- '--- PASS' $X/cuda-v28.log) pass, $(grep -c -- '--- FAIL' $X/cuda-v28.log) fail"
}

ab() {
	local T="tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=2"
	local W="wg:nc=2,bn=256,stages=4,gm=8,tma=1"
	# name | bench flags | batches | config | variant build
	local cells=(
		"ds-small|--model deepseek-v3 --tp 8|4,16,64|$T|bin/mstar-v26"
		"q235-small|--model qwen3-235b-a22b|4,16|$T|bin/mstar-v26"
		"q30-large|--model qwen3-30b-a3b|1024,2048,4096|$W|bin/mstar-v27"
		"ds-large|--model deepseek-v3 --tp 8|1024,2048,4096|$W|bin/mstar-v27"
		"q235-large|--model qwen3-235b-a22b|1024,4096|$W,mc=1|bin/mstar-v27"
	)
	for i in 1 2; do
		for cell in "${cells[@]}"; do
			IFS="|" read -r n args b cfg vbin <<<"$cell"
			for side in "main:bin/mstar" "var:$vbin"; do
				tag=${side%%:*} bin=${side#*:}
				late 30 && { note "ab: stopped at the deadline"; return; }
				timeout 90 $bin bench moe $args --batch $b --config "$cfg" "${CE[@]}" --rounds 1 --device cuda:0 \
					--out $X/ab/$n-$i-$tag.json >$X/ab/$n-$i-$tag.txt 2>&1
				note "$n $i $tag exit $?"
			done
		done
	done
}

# v28's tiles against the 16×256 ones, per GEMM, in one tuning process: the
# cells where the 16×256 tiles leave multiprocessors idle or read under 88%.
tune28() {
	for cell in "mixtral-8x7b|--model mixtral-8x7b|2,4" "deepseek-v3-tp8|--model deepseek-v3 --tp 8|4,8" \
		"qwen3-30b-a3b|--model qwen3-30b-a3b|8,16" "qwen3-235b-a22b|--model qwen3-235b-a22b|4"; do
		IFS="|" read -r n args b <<<"$cell"
		late 90 && { note "tune28: stopped at the deadline"; return; }
		MSTAR_MOE_TUNE_FILTER='^tc:bm=16,' timeout 150 bin/mstar-v28 tune moe $args --batch $b --dir $X/tune28 \
			--rounds 1 "${CE[@]}" --device cuda:0 --out $X/tune28-$n.json >$X/tune28-$n.txt 2>&1
		note "v28 tune $n: exit $?"
	done
}

copies() {
	for i in 1 2; do
		for side in "one:" "four:--weight-copies 4"; do
			tag=${side%%:*} extra=${side#*:}
			late 30 && { note "copies: stopped at the deadline"; return; }
			timeout 60 bin/mstar bench moe --model qwen3-235b-a22b --batch 4 $extra "${CE[@]}" --rounds 1 --device cuda:0 \
				--out $X/ab/copies-$i-$tag.json >$X/ab/copies-$i-$tag.txt 2>&1
			note "copies $i $tag exit $?"
		done
	done
}

finalists() {
	late 90 && { note "finalists: stopped at the deadline"; return; }
	timeout 150 bin/mstar tune moe --model qwen3-235b-a22b --batch 4 --finalists 3 --dir $X/tune-fin --rounds 1 \
		"${CE[@]}" --device cuda:0 --out $X/tune-fin.json >$X/tune-fin.txt 2>&1
	note "tune --finalists 3: exit $?"
}

for step in "$@"; do
	case $step in
	tests | ab | tune28 | copies | finalists) note "== $step"; $step ;;
	*) note "unknown step $step" ;;
	esac
done
tar czf $R/$(basename $X).tgz -C /tmp $(basename $X)
tail -3 $X/summary.txt
# One line a run: batch:median µs.
for f in $X/ab/*.txt; do
	[ -e "$f" ] && echo "$(basename $f .txt): $(grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ ' $f | awk '{printf "%s:%s ", $1, $4}')"
done
