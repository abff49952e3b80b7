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
# Shapes: qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b (default: all).
# Environment: MSTAR (bin/mstar), PYTHON (the python with torch, default
# python3), TRITON_PEER (.dev/peers/triton_moe_ref.py), PEER_IMPLS (bench
# moe --peer-impls; default every peer), BATCH (bench moe --batch; default
# its 13 batches), TIMEOUT (seconds per shape, default 1200).
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
[ -e "$TRITON_PEER" ] && extra+=(--triton-peer "$TRITON_PEER") || echo "no $TRITON_PEER: no triton-ref rows (see shared/peers/README.md)" | tee -a "$log"

"$MSTAR" bench ceilings --device cuda:0 --out "$OUT/docs/ceilings.json" 2>&1 | tee -a "$log"
for s in $shapes; do
  args=(--model "$s")
  [ "$s" = deepseek-v3-tp8 ] && args=(--model deepseek-v3 --tp 8)
  echo "=== $s" | tee -a "$log"
  timeout "$TIMEOUT" "$MSTAR" bench moe "${args[@]}" --device cuda:0 --ceilings "$OUT/docs/ceilings.json" \
    --peers --python "$PYTHON" "${extra[@]}" --out "$OUT/docs/moe-$s.json" 2>&1 | tee -a "$log"
  echo "bench moe --peers exit ${PIPESTATUS[0]}" | tee -a "$log"
done

# The compact ratio table, from the results documents.
"$PYTHON" - "$OUT"/docs/moe-*.json <<'PY' | tee "$OUT/ratios.txt" | tee -a "$log"
import json, sys
def med(m):
    s = sorted(m.get("samples") or [])
    return s[len(s) // 2] if s else None
print(f"{'shape':18s} {'M':>5s} {'mstar us':>10s} {'triton-ref us':>14s} {'ratio':>6s} {'cublas-bmm us':>14s}")
cells = wins = 0
for path in sys.argv[1:]:
    doc = json.load(open(path))
    shape = path.rsplit("moe-", 1)[1][:-5]
    t = {}
    for r in doc["results"]:
        if r["name"] != "moe":
            continue
        lat = next((m for m in r["metrics"] if m["name"] == "latency"), {})
        ok = all(g["pass"] for g in r.get("gates", []))
        t[(int(r["params"]["batch"]), r["params"]["impl"])] = (med(lat), ok, lat.get("unmeasured", ""))
    for m in sorted({b for b, _ in t}):
        ms, ok, _ = t.get((m, "mstar"), (None, False, ""))
        tr, tok, why = t.get((m, "triton-ref"), (None, False, "no row"))
        bm = t.get((m, "cublas-bmm"), (None, False, ""))[0]
        f = lambda v: f"{v:.1f}" if v is not None else "-"
        ratio = f"{tr / ms:.2f}" if ms and tr and ok and tok else "-"
        if ratio != "-":
            cells += 1
            wins += tr / ms >= 1.0
        note = "" if tr is not None else f"  (triton-ref unmeasured: {why[:60]})"
        note += "" if ok else "  (mstar FAILED its gate)"
        print(f"{shape:18s} {m:5d} {f(ms):>10s} {f(tr):>14s} {ratio:>6s} {f(bm):>14s}{note}")
print(f"mstar at or ahead of triton-ref in {wins} of {cells} measured cells (ratio = triton-ref us / mstar us)")
PY
tar -C "$OUT" -czf "$OUT/moe-h200.tgz" docs ratios.txt
