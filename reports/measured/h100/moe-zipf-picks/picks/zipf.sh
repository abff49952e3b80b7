#!/usr/bin/env bash
# zipf:1.2 on an H100: main's static table, main with the H200's uniform-tuned files (device field
# rewritten), and main with picks tuned under zipf (moe-general/zipf-tuned, as --config), alternated
# twice; then v44 tuned under zipf at deepseek M=256 with triton-ref if time is left.
set -u
cd "$(dirname "$0")/.."
[ -x bin/mstar-main ] || tar xJf .dev/bins-next.tar.xz
G=/tmp/g17; mkdir -p $G/files $G/empty $G/v44; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | tee $G/gpu.txt
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); dev=${name// /_}
for f in kernels/moe/configs/*H200.json; do b=${f##*/}; sed "s/\"NVIDIA H200\"/\"$name\"/g" "$f" > "$G/files/${b/NVIDIA_H200/$dev}"; done
DS="--model deepseek-v3 --tp 8"; Q="--model qwen3-30b-a3b"; Z="--routing zipf:1.2 --device cuda:0"
cases=("ds16|$DS|16|tc:bm=16,bn=64,bk=128,wm=1,wn=4,stages=4,gm=8,minb=2,ov=1,pl=1+tc:bm=16,bn=128,bk=128,wm=1,wn=4,stages=3,gm=8,minb=2,ov=2,pl=1"
       "ds256|$DS|256|tc:bm=32,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=2"
       "q256|$Q|256|wg:nc=1,bn=256,stages=4,gm=8,tma=1,mc=1,l2=4+wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1,pl=1")
for r in 1 2; do for c in "${cases[@]}"; do IFS="|" read -r n a b cfg <<<"$c"
  MSTAR_MOE_CONFIG_DIR=$G/empty timeout 60 bin/mstar-main bench moe $a $Z --batch $b --out $G/$n-static-$r.json > $G/$n-static-$r.txt 2>&1
  MSTAR_MOE_CONFIG_DIR=$G/files timeout 60 bin/mstar-main bench moe $a $Z --batch $b --out $G/$n-file-$r.json > $G/$n-file-$r.txt 2>&1
  MSTAR_MOE_CONFIG_DIR=$G/empty timeout 60 bin/mstar-main bench moe $a $Z --batch $b --config "$cfg" --out $G/$n-ztuned-$r.json > $G/$n-ztuned-$r.txt 2>&1
  for v in static file ztuned; do echo "$n $v $r: $(grep -hE "^ +[0-9]+ +[0-9]+ +[0-9]+ " $G/$n-$v-$r.txt | awk '{print $4, $NF}') $(grep -h "M=$b kernels" $G/$n-$v-$r.txt | cut -c1-90)"; done
done; echo "[$SECONDS s]"; [ $SECONDS -gt 110 ] && break; done
if [ $SECONDS -lt 100 ]; then
  timeout 90 bin/mstar-v44 tune moe $DS $Z --batch 256 --dir $G/v44 --out $G/tune.json > $G/tune.txt 2>&1; echo "tune rc=$? [$SECONDS s]"
  grep -E "chosen" -A1 $G/tune.txt | cut -c1-200
  MSTAR_MOE_CONFIG_DIR=$G/v44 timeout 80 bin/mstar-v44 bench moe $DS $Z --batch 256 --peers --peer-impls bmm --triton-peer .dev/peers/triton_moe_ref.py --out $G/v44.json > $G/v44.txt 2>&1; echo "v44 rc=$? [$SECONDS s]"
  grep -A2 "batch  mstar us" $G/v44.txt
fi
gzip -f $G/*.json; tar czf $OUT/g17.tgz -C /tmp g17
