#!/usr/bin/env bash
# moe-tune-h200.sh — on the GPU machine: the fused-MoE kernels' GPU tests
# (every configuration, tc included, checked against the float64 reference
# on the device; registers and occupancy of each tc module), then
# `mstar bench moe --tune` over the four reference shapes, in about 3.5
# minutes (DEADLINE seconds at most: steps that would start later are
# skipped, and each step's timeout is cut to the time left).
#
# The GPU machine has no Go. Build on the Go machine and carry bin/:
#   CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/mstar ./cmd/mstar
#   go test -c -o bin/moe.test ./kernels/moe
# then there, from the repository root:
#   OUT=/some/dir scripts/moe-tune-h200.sh
#
# Writes three files to $OUT:
#   run.log               every step's output (the tune tables: per batch,
#                         each candidate's median µs or why it was rejected)
#   summary.txt           mstar report show of the tuned results: model,
#                         batch, chosen config, latency, % of floor, TFLOP/s;
#                         then every candidate's latency and rel L2
#   moe-tune-h200.tgz     docs/tune-<shape>.json (results documents; the
#                         moe_tune results hold every candidate's samples),
#                         docs/ceilings.json, gpu-tests.log, res-usage.txt
#                         (cuobjdump -res-usage of each tc module, when
#                         cuobjdump is installed), cubin/ (the modules)
# Environment: BATCHES (default 1,16,64,256,1024,4096), SHAPES (default the
# four), MSTAR_BIN (default bin), DEADLINE (default 230 seconds).
set -u -o pipefail
OUT=${OUT:-out}
BIN=${MSTAR_BIN:-bin}
BATCHES=${BATCHES:-1,16,64,256,1024,4096}
SHAPES=${SHAPES:-"qwen3-30b-a3b qwen3-235b-a22b deepseek-v3-tp8 mixtral-8x7b"}
DEADLINE=${DEADLINE:-230}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/moe-tune.XXXXXX)
mkdir -p "$work/docs" "$work/cubin"
# One kernel cache for the tests and the sweeps: each module compiles once.
export MSTAR_CACHE_DIR=${MSTAR_CACHE_DIR:-$work/cache}
log="$OUT/run.log"
: >"$log"
status=0

# step LIMIT LOGFILE COMMAND...: runs COMMAND with a timeout of LIMIT
# seconds (or the time left before DEADLINE), appending its output to
# LOGFILE (run.log, or a log of its own) and what ran to run.log.
step() {
	local limit=$1 to=$2
	shift 2
	local left=$((DEADLINE - SECONDS))
	if [ "$left" -le 5 ]; then
		echo "== [${SECONDS} s] SKIPPED (deadline ${DEADLINE} s): $*" | tee -a "$log"
		status=1
		return 1
	fi
	[ "$left" -lt "$limit" ] && limit=$left
	echo "== [${SECONDS} s] $* (timeout ${limit} s)" | tee -a "$log"
	timeout "$limit" "$@" >>"$to" 2>&1
	local rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "== [${SECONDS} s] FAILED (exit $rc): $*" | tee -a "$log"
		status=1
		return "$rc"
	fi
	return 0
}

step 10 "$log" nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv

# 1. GPU kernel tests: alignment, every configuration's forward pass against
#    the float64 reference (tc at thousands of tokens too), tc resources.
export MSTAR_MOE_CUBIN_DIR="$work/cubin"
step 120 "$work/gpu-tests.log" "$BIN/moe.test" -test.run 'CUDA(Align|Forward|TCResources)' -test.v -test.count=1
unset MSTAR_MOE_CUBIN_DIR
grep -E '^(=== RUN|--- FAIL|FAIL|ok|PASS)|registers|rel L2 .* > ' "$work/gpu-tests.log" | grep -v '^=== RUN' | tail -60 >>"$log"

# 2. What the device's compiler made of each tc module.
cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$cuobjdump" ] && ls "$work"/cubin/*.cubin >/dev/null 2>&1; then
	for f in "$work"/cubin/*.cubin; do
		echo "== $(basename "$f")"
		"$cuobjdump" -res-usage "$f" 2>&1 | grep -E 'Function|REG'
	done >"$work/res-usage.txt"
	cat "$work/res-usage.txt" >>"$log"
fi

# 3. The ceilings the percentages are of.
step 40 "$log" "$BIN/mstar" bench ceilings --device cuda:0 --out "$work/docs/ceilings.json"
ceil=()
[ -s "$work/docs/ceilings.json" ] && ceil=(--ceilings "$work/docs/ceilings.json")

# 4. The tuned sweeps. A shape whose tuned sweep fails without writing its
#    document (a candidate that crashed the CUDA context) is measured again
#    with the static table, so that it still has numbers.
for s in $SHAPES; do
	args=(--model "$s")
	[ "$s" = deepseek-v3-tp8 ] && args=(--model deepseek-v3 --tp 8)
	doc="$work/docs/tune-$s.json"
	step 80 "$log" "$BIN/mstar" bench moe "${args[@]}" --batch "$BATCHES" --tune --samples 10 --tune-samples 6 \
		--device cuda:0 "${ceil[@]}" --out "$doc"
	if [ ! -s "$doc" ]; then
		step 40 "$log" "$BIN/mstar" bench moe "${args[@]}" --batch "$BATCHES" --samples 10 \
			--device cuda:0 "${ceil[@]}" --out "$work/docs/static-$s.json"
	fi
done

# 5. Summary and archive.
docs=("$work"/docs/tune-*.json "$work"/docs/static-*.json)
existing=()
for d in "${docs[@]}"; do [ -s "$d" ] && existing+=("$d"); done
if [ ${#existing[@]} -gt 0 ]; then
	{
		echo "# measured batches (the chosen configuration)"
		"$BIN/mstar" report show --params model,tp,batch,config --metrics latency,pct_floor,throughput "${existing[@]}" ||
			"$BIN/mstar" report show --params model,tp,batch --metrics latency,pct_floor,throughput "${existing[@]}"
		echo
		echo "# every candidate of --tune"
		"$BIN/mstar" report show --params model,tp,batch,config --metrics tune_latency,rel_l2 "${existing[@]}"
	} >"$OUT/summary.txt" 2>&1
fi
tar -C "$work" -czf "$OUT/moe-tune-h200.tgz" docs gpu-tests.log cubin $([ -f "$work/res-usage.txt" ] && echo res-usage.txt)
echo "== [${SECONDS} s] moe-tune-h200.sh: exit $status" | tee -a "$log"
rm -rf "$work"
exit $status
