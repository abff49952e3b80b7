#!/usr/bin/env bash
# call-wg.sh — on the GPU machine: the wg epilogue patches over v29 compiled
# for sm_90a, checked, and timed against v29 in the same wg configurations.
# v31 (wg-prefetch.patch): the wg producer fetches the next unit's expert and
# slots a whole unit ahead, and the consumers load the epilogue's slots and
# gemm2's routing weights while the tile's MMAs run. v32 (wg-vstore.patch,
# over v31): the epilogue stores 16 bytes a lane after a 4×4 transpose across
# each quad, not 4. B (default 32) names the build timed against v29.
#
# Here, before the call (from the repository root):
#   rm -rf /tmp/vwg && git worktree add -f /tmp/vwg HEAD &&
#   (cd /tmp/vwg && for p in tc-prefetch tc-narrow tc-self-align; do git apply kernels/moe/next/$p.patch || exit; done &&
#    go build -buildvcs=auto -ldflags='-s -w' -o "$OLDPWD/bin/mstar-v29" ./cmd/mstar &&
#    git apply kernels/moe/next/wg-prefetch.patch && git apply kernels/moe/next/wg-vstore.patch &&
#    go build -buildvcs=auto -ldflags='-s -w' -o "$OLDPWD/bin/mstar-v32" ./cmd/mstar &&
#    go test -c -ldflags='-s -w' -o "$OLDPWD/bin/moe-v32.test" ./kernels/moe)
#   mkdir -p .dev && tar cJf .dev/bins-wg.tar.xz bin/mstar-v29 bin/mstar-v32 bin/moe-v32.test
# (.dev and the checkout must stay under 64 MiB together: one mstar more does not fit.)
# There (carry .dev):
#   OUT=$OUT bash kernels/moe/next/call-wg.sh tests ab
# Steps:
#   tests  every tc and wg module compiled for the device (sm_90a) with its
#          registers and local memory (TestCUDATCResources: local memory in a
#          wg GEMM fails) and vB's wg forward rows on poisoned outputs
#          (TestCUDAForward/…wg…)
#   ab     v29 (A) against vB, one wg configuration per cell (the H100's
#          tuned picks; CELLS replaces them), fresh processes alternated, 2 a
#          side, through scripts/ab-builds.sh (report diff of the merged sides)
#   stages each kernel timed alone (bench moe --stages) with v29 and vB,
#          qwen3-30b-a3b and deepseek-v3 tp8 at M=1024 and 4096
# Returns $OUT/wg-<time>.tgz. If vB wins, land it with
# `V=32 kernels/moe/next/call-land-v29.sh tests tune` (with its bins32.tar.xz).
set -u
. scripts/lib.sh # ceilings
R=${OUT:?set OUT}
B=${B:-32}
[ $# -gt 0 ] || { echo "usage: $0 tests|ab ..." >&2; exit 2; }
X=/tmp/wg-$(date +%H%M%S)
mkdir -p "$X"
DEADLINE=${DEADLINE:-540}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
	--format=csv >"$X/gpu.txt" 2>&1
[ -x bin/mstar-v$B ] || tar xJf .dev/bins-wg.tar.xz || { echo "no .dev/bins-wg.tar.xz: build it here first (header)" >&2; exit 2; }

tests() {
	(cd kernels/moe && timeout 240 ../../bin/moe-v$B.test -test.run 'TestCUDATCResources|TestCUDAForward/.*wg' -test.v) \
		>"$X/tests.log" 2>&1
	echo "tests: exit $? [$SECONDS s]" | tee -a "$X/summary.txt"
	grep -E "^(--- FAIL|FAIL|panic|ok)" "$X/tests.log" | head -20 | tee -a "$X/summary.txt"
	grep -E "wg:.*registers" "$X/tests.log" | sed 's/^ *//' | sort -u >"$X/registers.txt"
}

ab() {
	ceilings bin/mstar-v$B "$X"
	# name | bench flags | batches | configuration (cooperative unless pp=1);
	# CELLS (the same form, ";"-separated) replaces them.
	local cells=(
		"q30|--model qwen3-30b-a3b|1024,4096|wg:nc=2,bn=256,stages=4,gm=8,tma=1"
		"ds|--model deepseek-v3 --tp 8|1024,4096|wg:nc=2,bn=256,stages=4,gm=8,tma=1"
		"q30pp|--model qwen3-30b-a3b|2048|wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1"
		"q235|--model qwen3-235b-a22b|1024|wg:nc=2,bn=256,stages=3,gm=8,tma=1"
		"mx|--model mixtral-8x7b|4096|wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=1"
	)
	[ -n "${CELLS:-}" ] && IFS=";" read -r -a cells <<<"$CELLS"
	for cell in "${cells[@]}"; do
		IFS="|" read -r n args b cfg <<<"$cell"
		left=$((DEADLINE - SECONDS))
		[ $left -le 60 ] && { echo "ab $n: SKIPPED (deadline)" | tee -a "$X/summary.txt"; continue; }
		# shellcheck disable=SC2086 # $args is the shape's flags
		timeout -s INT -k 10 "$left" scripts/ab-builds.sh -n 2 -o "$X/ab-$n" -a bin/mstar-v29 -b bin/mstar-v$B -- \
			bench moe $args --batch "$b" --config "$cfg" --rounds 1 --device cuda:0 --ceilings "$X/ceilings.json" >/dev/null 2>&1
		echo "ab $n: exit $? [$SECONDS s]" | tee -a "$X/summary.txt"
		grep -E "batch=|geomean" "$X/ab-$n/diff.txt" 2>/dev/null | tee -a "$X/summary.txt"
		gzip -f "$X/ab-$n"/*.json 2>/dev/null
	done
}

# Each kernel timed alone (bench moe --stages), v29 then vB, one process
# each, in the cooperative tma configuration: where a pass's gain sits.
stages() {
	local cfg="wg:nc=2,bn=256,stages=4,gm=8,tma=1"
	for cell in "q30|--model qwen3-30b-a3b" "ds|--model deepseek-v3 --tp 8"; do
		IFS="|" read -r n args <<<"$cell"
		for v in 29 "$B"; do
			[ $SECONDS -gt $((DEADLINE - 40)) ] && { echo "stages: stopped at the deadline" | tee -a "$X/summary.txt"; return; }
			# shellcheck disable=SC2086 # $args is the shape's flags
			timeout 90 bin/mstar-v$v bench moe $args --batch 1024,4096 --config "$cfg" --stages --rounds 1 \
				--device cuda:0 --ceilings "$X/ceilings.json" --out "$X/stages-$n-v$v.json" >"$X/stages-$n-v$v.txt" 2>&1
			echo "stages $n v$v: exit $? [$SECONDS s]" | tee -a "$X/summary.txt"
		done
	done
	gzip -f "$X"/stages-*.json 2>/dev/null
}

for s in "$@"; do
	case $s in
	tests) tests ;;
	ab) ab ;;
	stages)
		ceilings bin/mstar-v$B "$X"
		stages
		;;
	*) echo "$0: unknown step $s (tests, ab, stages)" >&2 ;;
	esac
done
gzip -f "$X/tests.log" 2>/dev/null
tar czf "$R/$(basename "$X").tgz" -C /tmp "$(basename "$X")"
cat "$X/summary.txt"
exit 0
