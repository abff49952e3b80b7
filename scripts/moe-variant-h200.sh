#!/usr/bin/env bash
# moe-variant-h200.sh — on the GPU machine: a fused-MoE kernel variant
# (a moe.cu change, so the shipped tuned files do not apply to it) checked,
# tuned and timed against main's build, in the steps it takes. Each step
# resumes, and WORK (default .work/gpu, ignored) survives between calls while
# the machine stays warm, so run them in order in as many calls as needed:
#   tests  every MoE CUDA test of the variant (its forward rows on poisoned
#          outputs, and TCResources: registers and local memory per tc
#          configuration, as NVRTC 13 compiles them for sm_90a)
#   tune   scripts/moe-tune-configs-h200.sh with the variant, seeded with
#          the shipped files (batches on kernels the variant did not change
#          are kept; SEED=0 re-tunes them too) (~14 min for
#          the four shapes on the H200 with v19's candidates, so two calls:
#          finished shapes are skipped on resume; ROUNDS=1 halves the
#          tuned-versus-static comparison, ~100 s of it)
#   table  accept-h200.sh moe-table with the variant and its tuned files
#          (the 52-cell table, triton-ref in the same call, and its ratios.txt; ~5.5 min;
#          shapes already done skipped)
#   ab     scripts/ab-builds.sh: main's build with its shipped files (A)
#          against the variant with its tuned files (B), runs alternated,
#          on the batches AB_BATCH (default 1,8,16,256,1024) of each shape
# Build here, the variant checked out (or its patch applied):
#   go build -buildvcs=auto -ldflags='-s -w' -o bin/mstar ./cmd/mstar
#   go test -c -ldflags='-s -w' -o bin/moe.test ./kernels/moe
# and main's build beside it:
#   git worktree add /tmp/base main && (cd /tmp/base && go build -buildvcs=auto -ldflags='-s -w' -o "$OLDPWD/bin/mstar-base" ./cmd/mstar)
# There:  OUT=/dir scripts/moe-variant-h200.sh tests tune ...   (outputs under $OUT/variant)
# Environment: VARIANT (bin/mstar), BASE (bin/mstar-base), MOE_TEST (bin/moe.test),
# WORK, PEER (.dev/peers/triton_moe_ref.py), DEADLINE (seconds for this call, 570), SEED (1),
# AB_RUNS (3 a side), AB_BATCH, SHAPES (the four).
set -u
OUT=${OUT:?set OUT}
VARIANT=${VARIANT:-bin/mstar}
BASE=${BASE:-bin/mstar-base}
MOE_TEST=${MOE_TEST:-bin/moe.test}
WORK=${WORK:-.work/gpu}
PEER=${PEER:-.dev/peers/triton_moe_ref.py}
DEADLINE=${DEADLINE:-570}
SHAPES=${SHAPES:-"qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b"}
HERE=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || { echo "usage: $0 tests|tune|table|ab ..." >&2; exit 2; }
o=$OUT/variant
mkdir -p "$o"
model_args() { # a shape's name as bench moe's flags
	if [ "$1" = deepseek-v3-tp8 ]; then echo "--model deepseek-v3 --tp 8"; else echo "--model $1"; fi
}
status=0
for step in "$@"; do
	left=$((DEADLINE - SECONDS))
	if [ "$left" -le 20 ]; then
		echo "== $step: SKIPPED (deadline): run it again" | tee -a "$o/summary.txt"
		status=1
		continue
	fi
	echo "== [$SECONDS s] $step" | tee -a "$o/summary.txt"
	case $step in
	tests)
		(cd kernels/moe && timeout "$left" "../../$MOE_TEST" -test.run CUDA -test.skip SpeedProbe -test.v) >"$o/moe-cuda.log" 2>&1
		rc=$?
		echo "moe CUDA tests: exit $rc" | tee -a "$o/summary.txt"
		grep -E "^(--- FAIL|FAIL|panic)" "$o/moe-cuda.log" | head -20
		[ $rc -ne 0 ] && status=1
		;;
	tune)
		# Seeded with the shipped files: the batches whose kernels the
		# variant left alone stay (each names what it was tuned on), the
		# rest are tuned; SEED=0 tunes every batch.
		mkdir -p "$WORK/tune/configs"
		if [ "${SEED:-1}" = 1 ]; then # cp -n warns on newer coreutils: keep what is there by hand
			for f in kernels/moe/configs/*.json; do
				[ -e "$WORK/tune/configs/${f##*/}" ] || cp "$f" "$WORK/tune/configs/"
			done
		fi
		MSTAR=$VARIANT OUT=$WORK/tune DEADLINE=$left SHAPES=$SHAPES "$HERE/moe-tune-configs-h200.sh" >>"$o/tune.out" 2>&1
		rc=$?
		echo "tune: exit $rc" | tee -a "$o/summary.txt"
		cp -r "$WORK/tune" "$o/"
		[ $rc -ne 0 ] && status=1
		;;
	table)
		MSTAR=$VARIANT MSTAR_MOE_CONFIG_DIR=$WORK/tune/configs CEILINGS=$WORK/tune/ceilings.json DEADLINE=$left \
			OUT=$WORK "$HERE/accept-h200.sh" moe-table
		cp -r "$WORK/moe-table" "$o/"
		;;
	ab)
		for s in $SHAPES; do
			[ -s "$WORK/ab-$s/summary.txt" ] && grep -q "report diff" "$WORK/ab-$s/summary.txt" && continue
			left=$((DEADLINE - SECONDS))
			[ "$left" -le 30 ] && { echo "ab $s: SKIPPED (deadline)" | tee -a "$o/summary.txt"; status=1; break; }
			rm -rf "$WORK/ab-$s" # a pair cut short is not resumed: its runs would not alternate
			# shellcheck disable=SC2046 # the shape's flags
			timeout -s INT -k 10 "$left" "$HERE/ab-builds.sh" -n "${AB_RUNS:-3}" -o "$WORK/ab-$s" \
				-a "$BASE" -b "$VARIANT" -B "MSTAR_MOE_CONFIG_DIR=$WORK/tune/configs" -- \
				bench moe $(model_args "$s") --batch "${AB_BATCH:-1,8,16,256,1024}" --rounds 1 --device cuda:0 \
				--ceilings "$WORK/tune/ceilings.json" >/dev/null 2>&1
			echo "ab $s: exit $?" | tee -a "$o/summary.txt"
			cp -r "$WORK/ab-$s" "$o/"
		done
		;;
	*)
		echo "$0: unknown step $step (tests, tune, table, ab)" >&2
		exit 2
		;;
	esac
done
exit $status
