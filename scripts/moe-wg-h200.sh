#!/usr/bin/env bash
# The wg (wgmma) kernels on the H200 in one call: GPU tests (correctness of
# every wg configuration, registers, local memory, SASS: HGMMA present, no
# local loads/stores), then per shape `bench moe --tune` over the batches
# (every candidate checked, wg included) and the Triton reference peer over
# the same layer and routing.
#
#   make build gpu-bins            (on the Go machine)
#   mkdir -p .dev && cp -r ../shared/peers .dev/   (the reference peer)
#   OUT=dir scripts/moe-wg-h200.sh [batches] [shape ...]   (on the GPU machine)
# PEERS=0 leaves the Triton peer out; TESTS=REGEXP picks the forward tests;
# MSTAR_MOE_TUNE_FILTER=REGEXP the tuner's candidates.
set -u
OUT=${OUT:-out}
BATCHES=${1:-256,1024,4096}
PEERS=${PEERS:-1}
shift || true
SHAPES=${*:-"qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b"}
mkdir -p "$OUT"
log="$OUT/wg.log"
work=$(mktemp -d)
mkdir -p "$work/cubin" "$work/docs"
echo "== $(date -u +%FT%TZ) moe-wg-h200.sh batches=$BATCHES" | tee "$log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv | tee -a "$log"

# 1. GPU tests of the wg kernels (and the auto path on the odd shape).
MSTAR_MOE_CUBIN_DIR="$work/cubin" timeout 240 bin/moe.test -test.run "TestCUDATCResources|TestCUDAForward/${TESTS:-.*(wg|odd_auto).*}" -test.v >"$work/gpu-tests.log" 2>&1
tests=$?
grep -E '^(--- |ok|FAIL|PASS)|wg_|wg:' "$work/gpu-tests.log" | grep -v '^=== ' | tail -60 | tee -a "$log"
echo "gpu tests exit $tests" | tee -a "$log"
for f in "$work"/cubin/wg_*; do
	[ -f "$f" ] || continue
	printf '%s: HGMMA %s, LDL/STL %s\n' "$(basename "$f")" "$(cuobjdump -sass "$f" 2>/dev/null | grep -c HGMMA)" \
		"$(cuobjdump -sass "$f" 2>/dev/null | grep -cE 'LDL|STL')" | tee -a "$log"
done

# 2. Tuned sweeps (wg candidates only if their tests passed) and the peer.
for s in $SHAPES; do
	args=(--model "$s")
	[ "$s" = deepseek-v3-tp8 ] && args=(--model deepseek-v3 --tp 8)
	doc="$work/docs/tune-$s.json"
	if [ $tests -eq 0 ]; then
		timeout 150 bin/mstar bench moe "${args[@]}" --batch "$BATCHES" --tune --samples 10 --tune-samples 6 \
			--device cuda:0 --out "$doc" --routing-out "$work/routing-$s.json" >>"$log" 2>&1
	else
		timeout 100 bin/mstar bench moe "${args[@]}" --batch "$BATCHES" --samples 10 \
			--device cuda:0 --out "$doc" --routing-out "$work/routing-$s.json" >>"$log" 2>&1
	fi
	echo "== $s mstar exit $?" | tee -a "$log"
	[ -s "$doc" ] && [ "$PEERS" = 1 ] || continue
	DEV_TRITON_PEER=.dev/peers PYTHONUNBUFFERED=1 timeout 200 python3 .dev/moe_peers_dev.py --mstar "$doc" \
		--routing "$work/routing-$s.json" --impls triton --samples 10 --out "$work/docs/peers-$s.json" 2>&1 |
		grep -v 'triton tune' | tee -a "$log"
done
bin/mstar report show --params model,tp,batch,config --metrics latency,pct_floor "$work"/docs/tune-*.json >"$OUT/mstar.txt" 2>&1
bin/mstar report show --params model,tp,batch,config,impl --metrics tune_latency,rel_l2 "$work"/docs/tune-*.json >"$OUT/candidates.txt" 2>&1
bin/mstar report show --params model,tp,batch,impl --metrics latency "$work"/docs/peers-*.json >"$OUT/peers.txt" 2>&1
tar -C "$work" -czf "$OUT/wg-h200.tgz" docs gpu-tests.log cubin
echo "== [${SECONDS} s] done" | tee -a "$log"
