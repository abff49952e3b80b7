#!/usr/bin/env bash
# ceilings-h200.sh — on the GPU machine, issue 13's acceptance in one call:
#   1. the GPU tests of the new kernels (copy_batch, the read ceiling),
#   2. `bench ceilings` (the streaming-read ceiling: >= 4.4 TB/s expected;
#      each ceiling with the GPU's clocks, power and throttle reasons),
#   3. `bench moe` of the four reference shapes against those ceilings
#      (pct_floor <= 100 expected; every % above 105 warns),
#   4. spill-matrix at --sizes 256MiB and at the default (1GiB), RUNS runs
#      each: the PASS/FAIL flip count per cell and the device partial/uneven
#      moves as % of their same-size copy ceiling (>= 80% expected).
#
# Build on the Go machine and carry bin/ and scripts/:
#   make gpu-bins
# then there, from the repository root:  OUT=/some/dir scripts/ceilings-h200.sh
# Writes under $OUT: gpu-tests.log, ceilings.{txt,json}, moe-<shape>.{txt,json},
# spill-<size>-<run>.{txt,json}, flips-<size>.txt, summary.txt.
# Environment: RUNS (5), CELLS (the cells with bandwidth gates:
# hibernate,partial,restore-gate,uneven; '' for every cell), MSTAR_BIN (bin),
# SKIP (space-separated steps to leave out: tests ceilings moe spill),
# SIZES (the spill-matrix --sizes to repeat, default "256MiB 1GiB"),
# MOE_ARGS (extra bench moe flags, e.g. --rounds 1),
# DEADLINE (seconds, default 560: later steps are skipped, saying so, so the
# run ends inside the device's 10-minute limit; run the rest with SKIP).
set -u -o pipefail
OUT=${OUT:?set OUT}
BIN=${MSTAR_BIN:-bin}
RUNS=${RUNS:-5}
CELLS=${CELLS-hibernate,partial,restore-gate,uneven}
SKIP=${SKIP:-}
SIZES=${SIZES:-256MiB 1GiB}
MOE_ARGS=${MOE_ARGS:-}
HERE=$(cd "$(dirname "$0")" && pwd)
DEADLINE=${DEADLINE:-560}
START=$SECONDS
skip() { case " $SKIP " in *" $1 "*) return 0 ;; esac; return 1; }
late() {
	if [ $((SECONDS - START)) -ge "$DEADLINE" ]; then
		say "deadline ${DEADLINE}s reached: skipped $1 (run it again with SKIP)"
		return 0
	fi
	return 1
}
say() { echo "$@" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

if ! skip tests; then
	{
		"$BIN/gpu.test" -test.run 'CopyDtoDBatchCUDA' -test.v
		"$BIN/ceilings.test" -test.run 'TestCUDACeilingsQuick' -test.v
	} >"$OUT/gpu-tests.log" 2>&1
	say "gpu tests: exit $? ($(grep -c -- '--- PASS' "$OUT/gpu-tests.log") passed, $(grep -c -- '--- FAIL' "$OUT/gpu-tests.log") failed)"
fi

if ! skip ceilings; then
	timeout 240 "$BIN/mstar" bench ceilings --device cuda:0 --out "$OUT/ceilings.json" >"$OUT/ceilings.txt" 2>&1
	say "bench ceilings: exit $?"
	grep -E '^(d2d|read|h2d|d2h|gemm) |^note' "$OUT/ceilings.txt" | tee -a "$OUT/summary.txt"
fi

if ! skip moe; then
	ceil=()
	[ -s "$OUT/ceilings.json" ] && ceil=(--ceilings "$OUT/ceilings.json")
	for s in qwen3-30b-a3b qwen3-235b-a22b mixtral-8x7b deepseek-v3-tp8; do
		args=(--model "$s")
		[ "$s" = deepseek-v3-tp8 ] && args=(--model deepseek-v3 --tp 8)
		late "bench moe $s" && continue
		timeout 150 "$BIN/mstar" bench moe "${args[@]}" --device cuda:0 "${ceil[@]}" $MOE_ARGS \
			--out "$OUT/moe-$s.json" >"$OUT/moe-$s.txt" 2>&1
		rc=$?
		# The largest %floor of the shape, and how many rows warn above 105%.
		top=$(awk '$1 ~ /^[0-9]+$/ && NF == 12 { if ($10+0 > m) m = $10+0 } END { print m+0 }' "$OUT/moe-$s.txt")
		warn=$(grep -c 'is above 105%' "$OUT/moe-$s.txt")
		say "bench moe $s: exit $rc, max %floor $top, $warn warnings above 105%"
	done
fi

if ! skip spill; then
	cellargs=()
	[ -n "$CELLS" ] && cellargs=(--cells "$CELLS")
	for size in $SIZES; do
		files=()
		for i in $(seq 1 "$RUNS"); do
			f="$OUT/spill-$size-$i"
			late "spill-matrix --sizes $size run $i" && continue
			timeout 300 "$BIN/mstar" spill-matrix --device cuda:0 --sizes "$size" "${cellargs[@]}" --out "$f.json" >"$f.txt" 2>&1
			say "spill-matrix --sizes $size run $i: exit $? ($(grep -c 'PASS' "$f.txt") PASS, $(grep -c 'CANNOT-TELL' "$f.txt") CANNOT-TELL, $(grep -c 'FAIL' "$f.txt") FAIL lines)"
			[ -s "$f.json" ] && files+=("$f.json")
		done
		if [ ${#files[@]} -gt 0 ]; then
			python3 "$HERE/spill-flips.py" "${files[@]}" >"$OUT/flips-$size.txt"
			say "spill-matrix --sizes $size: $(grep 'cells flipping' "$OUT/flips-$size.txt")"
			sed -n '/device moves/,$p' "$OUT/flips-$size.txt" | tee -a "$OUT/summary.txt"
		fi
	done
fi
