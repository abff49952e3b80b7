#!/usr/bin/env bash
# The spill matrix on the GPU machine (there is no Go there). Build first, on
# the Go machine:
#
#   CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/mstar ./cmd/mstar
#
# then run this from the repository root there, with OUT set to a folder
# whose files come back. It writes:
#
#   $OUT/spill.json          results document (every cell, gates, ceilings)
#   $OUT/spill-matrix.txt    the matrix as printed
#   $OUT/trace.jsonl         the ladder cells' regulator ticks (NDJSON)
#   $OUT/trace-summary.txt   mstar trace summarize of it
#   $OUT/trace.png           mstar trace plot of it
#
# Targets on the H200, each a gate at its CUDA default: hibernate through
# pinned at >= 90% of the pinned ceiling measured in the same run
# (--hibernate-pinned-floor), ping-pong predicted within 10% of measured
# (--pingpong-tol), ladder at most one rung change per cooldown and no tick
# costing more than its interval. Exit status: spill-matrix's (1 when any
# gate failed).
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
bin/mstar spill-matrix --device cuda:0 --out "$OUT/spill.json" --trace "$OUT/trace.jsonl" \
	2> >(tee "$OUT/spill-matrix.stderr" >&2) | tee "$OUT/spill-matrix.txt"
status=${PIPESTATUS[0]}
bin/mstar trace summarize "$OUT/trace.jsonl" > "$OUT/trace-summary.txt" || true
bin/mstar trace plot "$OUT/trace.jsonl" -o "$OUT/trace.png" || true
exit "$status"
