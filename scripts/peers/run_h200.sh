#!/usr/bin/env bash
# Runs mstar's fused-MoE sweeps and the peers on the GPU machine, for the
# four reference shapes, and packs every results document into one archive.
#
#   bin/mstar must be built on the Go machine first:
#     CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/mstar ./cmd/mstar
#   then, on the GPU machine (repository root):
#     OUT=/some/dir scripts/peers/run_h200.sh [shape ...]
#
# Shapes: qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b (default: all).
set -u
OUT=${OUT:-out}
MSTAR=${MSTAR:-bin/mstar}
mkdir -p "$OUT/docs"
work=$(mktemp -d)
shapes=${*:-"qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b"}
log="$OUT/run.log"

"$MSTAR" bench ceilings --device cuda:0 --out "$OUT/docs/ceilings.json" 2>&1 | tee -a "$log"
for s in $shapes; do
  args="--model $s"
  [ "$s" = deepseek-v3-tp8 ] && args="--model deepseek-v3 --tp 8"
  echo "=== $s" | tee -a "$log"
  timeout 240 "$MSTAR" bench moe $args --device cuda:0 --ceilings "$OUT/docs/ceilings.json" \
    --out "$OUT/docs/moe-$s.json" --routing-out "$work/routing-$s.json" --dump-dir "$work/dump-$s" 2>&1 | tee -a "$log"
  echo "mstar exit ${PIPESTATUS[0]}" | tee -a "$log"
  PYTHONUNBUFFERED=1 timeout 240 python3 scripts/peers/moe_peers.py --mstar "$OUT/docs/moe-$s.json" \
    --routing "$work/routing-$s.json" --dump-dir "$work/dump-$s" --out "$OUT/docs/peers-$s.json" 2>&1 | tee -a "$log"
  echo "peers exit ${PIPESTATUS[0]}" | tee -a "$log"
done
tar -C "$OUT" -czf "$OUT/moe-h200.tgz" docs && rm -rf "$OUT/docs"
rm -rf "$work"
