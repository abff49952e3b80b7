#!/usr/bin/env bash
# moe-stages-h200.sh — on the GPU machine: where a fused-MoE pass's time
# goes. Runs the TimeStages GPU test, measures the ceilings once, then
# `mstar bench moe --stages` over the four reference shapes (each kernel of
# the pass timed alone, each GEMM against its own floor), in about 2 minutes.
#
# Build on the Go machine and carry bin/:
#   make build && go test -c -o bin/moe.test ./kernels/moe
# then there, from the repository root:  OUT=/some/dir scripts/moe-stages-h200.sh
# Writes $OUT/timestages-test.log, ceilings.json, stages-<shape>.{txt,json}.
# Environment: BATCHES (default 16,256,1024,4096), MSTAR_BIN (default bin).
set -u -o pipefail
OUT=${OUT:?set OUT}
BIN=${MSTAR_BIN:-bin}
BATCHES=${BATCHES:-16,256,1024,4096}
"$BIN/moe.test" -test.run 'TimeStages' -test.v >"$OUT/timestages-test.log" 2>&1
echo "TimeStages test: exit $?"
"$BIN/mstar" bench ceilings --device cuda:0 --out "$OUT/ceilings.json" >"$OUT/ceilings.txt" 2>&1
for s in qwen3-30b-a3b mixtral-8x7b qwen3-235b-a22b deepseek-v3-tp8; do
	args=(--model "$s")
	[ "$s" = deepseek-v3-tp8 ] && args=(--model deepseek-v3 --tp 8)
	timeout 100 "$BIN/mstar" bench moe "${args[@]}" --batch "$BATCHES" --stages --samples 10 --device cuda:0 \
		--ceilings "$OUT/ceilings.json" --out "$OUT/stages-$s.json" >"$OUT/stages-$s.txt" 2>&1
	echo "$s: exit $?"
done
