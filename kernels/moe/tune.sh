#!/usr/bin/env bash
# Sweeps kernel configurations of `mstar bench moe` on the GPU machine, for
# tuning ChooseConfig. Prints one line per (shape, config, batch):
#   OUT=dir MSTAR=bin/mstar kernels/moe/tune.sh
set -u
MSTAR=${MSTAR:-bin/mstar}
OUT=${OUT:-out}
mkdir -p "$OUT"
c="$OUT/tune-ceilings.json"
"$MSTAR" bench ceilings --quick --device cuda:0 --out "$c" >/dev/null 2>&1
sweep() { # shape-args batches config...
  local args=$1 batches=$2; shift 2
  for cfg in "$@"; do
    "$MSTAR" bench moe $args --batch "$batches" --config "$cfg" --samples 10 --ceilings "$c" --device cuda:0 2>&1 |
      awk -v s="$args" -v c="$cfg" '/^ +[0-9]+ /{printf "%-32s %-24s M=%-5s %9s us  floor %5s%%  err %s %s\n", s, c, $1, $4, $10, $11, $12} /mstar:/{print s, c, $0}'
  done
}
for s in "--model qwen3-30b-a3b" "--model qwen3-235b-a22b" "--model deepseek-v3 --tp 8" "--model mixtral-8x7b"; do
  sweep "$s" 1,2,4,8 skinny:nt=1 skinny:nt=1,w1=16 skinny:nt=1,w1=16,w2=16
  sweep "$s" 128,256 tiled:m16 tiled:m32 tiled:m64 tiled:w64x256
  sweep "$s" 512,1024,2048,4096 tiled:m64 tiled:m128 tiled:w128x128 tiled:w128x256 tiled:w64x256
done
