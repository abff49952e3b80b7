#!/usr/bin/env bash
# mstar's fused-MoE sweeps and the peers in one call per shape (bench moe
# --peers: same layer, weights and routing), for the four reference shapes,
# then a compact ratio table: shape × batch, mstar µs, triton-ref µs, ratio
# (triton-ref µs / mstar µs: above 1, mstar is faster), and cublas-bmm's
# bound, over every shape whose document is in $OUT/docs (so shapes run in
# separate calls with the same OUT make one table). Every results document
# is packed into one archive.
#
#   bin/mstar must be built on the Go machine first (make build); on the GPU
#   machine, from the repository root, with the reference peer copied in:
#     mkdir -p .dev && cp -r ../shared/peers .dev/
#     OUT=/some/dir scripts/peers/run_h200.sh [shape ...]
#
# Shapes: qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b (default: all),
# and e60-odd (E60 k4 H1536 I352: no tuned file, the static table's picks).
# The margins beyond the reference table (zipf routing, EP), e.g.
#   EXTRA="--routing zipf:1.2" TAG=-zipf OUT=... scripts/peers/run_h200.sh
#   EXTRA="--ep 4" TAG=-ep4 OUT=... scripts/peers/run_h200.sh qwen3-30b-a3b
# (the ratio table names such rows by their routing and ep).
# Environment: MSTAR (bin/mstar), PYTHON (the python with torch, default
# python3), TRITON_PEER (.dev/peers/triton_moe_ref.py), PEER_IMPLS (bench
# moe --peer-impls; default every peer), BATCH (bench moe --batch; default
# its 13 batches), TIMEOUT (seconds per shape, default 1200), EXTRA (more
# bench moe flags), TAG (appended to each document's name).
# For the ratio table alone (triton-ref and cublas-bmm): PEER_IMPLS=bmm.
set -u
OUT=${OUT:-out}
MSTAR=${MSTAR:-bin/mstar}
PYTHON=${PYTHON:-python3}
TRITON_PEER=${TRITON_PEER:-.dev/peers/triton_moe_ref.py}
TIMEOUT=${TIMEOUT:-1200}
mkdir -p "$OUT/docs"
shapes=${*:-"qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b"}
log="$OUT/run.log"
extra=()
[ -n "${PEER_IMPLS:-}" ] && extra+=(--peer-impls "$PEER_IMPLS")
[ -n "${BATCH:-}" ] && extra+=(--batch "$BATCH")
# shellcheck disable=SC2206 # EXTRA is a list of flags
[ -n "${EXTRA:-}" ] && extra+=($EXTRA)
[ -e "$TRITON_PEER" ] && extra+=(--triton-peer "$TRITON_PEER") || echo "no $TRITON_PEER: no triton-ref rows (see shared/peers/README.md)" | tee -a "$log"

"$MSTAR" bench ceilings --device cuda:0 --out "$OUT/docs/ceilings.json" 2>&1 | tee -a "$log"
for s in $shapes; do
  args=(--model "$s")
  [ "$s" = deepseek-v3-tp8 ] && args=(--model deepseek-v3 --tp 8)
  [ "$s" = e60-odd ] && args=(--experts 60 --topk 4 --hidden 1536 --inter 352)
  echo "=== $s" | tee -a "$log"
  timeout "$TIMEOUT" "$MSTAR" bench moe "${args[@]}" --device cuda:0 --ceilings "$OUT/docs/ceilings.json" \
    --peers --python "$PYTHON" "${extra[@]}" --out "$OUT/docs/moe-$s${TAG:-}.json" 2>&1 | tee -a "$log"
  echo "bench moe --peers exit ${PIPESTATUS[0]}" | tee -a "$log"
done

# The compact ratio table, from the results documents.
"$PYTHON" "$(dirname "$0")/../moe-ratios.py" "$OUT"/docs/moe-*.json | tee "$OUT/ratios.txt" | tee -a "$log"
tar -C "$OUT" -czf "$OUT/moe-h200.tgz" docs ratios.txt
