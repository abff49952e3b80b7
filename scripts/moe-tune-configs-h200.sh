#!/usr/bin/env bash
# moe-tune-configs-h200.sh — on the GPU machine: `mstar tune moe` over the
# four reference shapes and the default 13 batches, writing the tuned files
# that ship in kernels/moe/configs. Each file is saved after every batch,
# so a run cut short (DEADLINE, or the machine's limit) resumes where it
# stopped when run again with the same OUT.
#
#   make build   # on the Go machine; carry bin/ over
#   OUT=/some/dir scripts/moe-tune-configs-h200.sh      # again to resume
#   cp /some/dir/configs/*.json kernels/moe/configs/     # back on the Go machine
#
# Writes $OUT/configs/*.json (the tuned files), $OUT/docs/tune-<shape>.json
# (every candidate, both comparison sweeps) and $OUT/run.log (per shape the
# chosen configurations and the tuned-versus-static diff).
# A shape whose tune finished (its comparison included) is marked
# $OUT/docs/tune-<shape>.done and skipped when the script runs again, so a
# resumed call spends its time on the shapes left (FORCE=1 re-runs them).
# Batches that never met this build's candidates (a kernel family added
# since) are re-tuned by tune moe itself; the others are skipped.
# Environment: SHAPES (default the four), BATCH (default bench moe's 13),
# MSTAR (default bin/mstar), DEADLINE (seconds, default 560), ROUNDS (of the
# tuned-versus-static comparison, default 2; 1 halves its time), SAMPLES (its
# samples per batch, default tune moe's 20), SHORTLIST (a folder of an earlier
# tune's documents, tune-<shape>.json[.gz]: each shape found there is tuned
# with `--shortlist`, about 60% of the candidates; e.g.
# reports/measured/h200/moe-v25/tune/docs).
# To re-tune after a change to moe.cu's wgmma section only, copy the shipped
# files into $OUT/configs first: their batches without a wg candidate stay
# valid (each names the kernels it was tuned on) and are skipped.
set -u
OUT=${OUT:-out}
MSTAR=${MSTAR:-bin/mstar}
SHAPES=${SHAPES:-"qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b"}
DEADLINE=${DEADLINE:-560}
mkdir -p "$OUT/configs" "$OUT/docs"
export MSTAR_MOE_CONFIG_DIR="$OUT/configs"
log="$OUT/run.log"
batch=()
[ -n "${BATCH:-}" ] && batch=(--batch "$BATCH")
[ -s "$OUT/ceilings.json" ] || "$MSTAR" bench ceilings --device cuda:0 --out "$OUT/ceilings.json" 2>&1 | tee -a "$log"
status=0
for s in $SHAPES; do
  left=$((DEADLINE - SECONDS))
  if [ "$left" -le 10 ]; then
    echo "== $s: SKIPPED (deadline): run the script again to go on" | tee -a "$log"
    status=1
    continue
  fi
  done_mark="$OUT/docs/tune-$s.done"
  if [ -e "$done_mark" ] && [ -z "${FORCE:-}" ]; then
    echo "== $s: done in an earlier call ($done_mark)" | tee -a "$log"
    continue
  fi
  args=(--model "$s")
  [ "$s" = deepseek-v3-tp8 ] && args=(--model deepseek-v3 --tp 8)
  short=()
  for d in "${SHORTLIST:-}/tune-$s.json" "${SHORTLIST:-}/tune-$s.json.gz"; do
    [ -n "${SHORTLIST:-}" ] && [ -s "$d" ] && short=(--shortlist "$d")
  done
  [ -n "${SHORTLIST:-}" ] && [ ${#short[@]} -eq 0 ] &&
    echo "warning: SHORTLIST=$SHORTLIST has no tune-$s.json[.gz]: every candidate runs" | tee -a "$log"
  echo "== [${SECONDS} s] tune moe $s (timeout ${left} s) ${short[*]}" | tee -a "$log"
  # SIGINT: tune moe stops between candidates and keeps the batches done.
  timeout -s INT -k 20 "$left" "$MSTAR" tune moe "${args[@]}" "${batch[@]}" "${short[@]}" --device cuda:0 \
    --rounds "${ROUNDS:-2}" --samples "${SAMPLES:-0}" --ceilings "$OUT/ceilings.json" --out "$OUT/docs/tune-$s.json" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  echo "== tune moe $s: exit $rc" | tee -a "$log"
  if [ "$rc" -eq 0 ]; then touch "$done_mark"; else status=1; fi
done
ls -l "$OUT/configs" | tee -a "$log"
exit $status
