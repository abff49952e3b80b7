#!/usr/bin/env bash
# accept-h200.sh — on the GPU machine, the acceptance runs still open after
# 2026-12-01, one step per call (each fits the device's 10-minute limit):
#   tests      the GPU tests (scripts/gpu-test.sh), the cache-eviction test and the
#              MoE kernels' CUDA tests (the routing type changed after the last GPU run)
#   spill256   spill-matrix --sizes 256MiB ×5 with cold-L2 moves (#13: no flips;
#              device partial/uneven >= 80% of their ceilings)
#   spill1g    spill-matrix --sizes 1GiB (the default) ×RUNS (a run takes ~220 s:
#              RUNS=2 per call)
#   fresh-alloc  copies into a just-allocated buffer against a long-lived one, 256 MiB
#              and 1 GiB, alternating which goes first (2026-12-02: the first copy after
#              the fills runs at ~90%, whichever buffer, at both sizes)
#   placement  one MoE configuration timed over new graphs, new plans and new weight
#              copies, uploads, and after the smaller batches' plans (bin/moe.test):
#              which allocation moves small-M times (~2 min; MSTAR_MOE_PLACEMENT_CONFIG
#              picks the configuration)
#   pdl        the shipped MoE picks with plain against programmatic launches, same
#              plan and weights, alternated (bin/moe.test; ~1-2 min; v17 in NOTES)
#   aa-arena   A/A pairs of arena sweep --mode copy --max-size 64MiB (#12: 9 of 10)
#   devices    --devices 0 / --replicate / --shard on one GPU, bench p2p refusing (#16)
#   gate       the spill gate on the GPU (the cuda and gpu gate tests), then the
#              partial and uneven device cells at 256 MiB ×RUNS (default 10):
#              does holding the streams until everything is queued close the
#              partial cell's 69–77% (reports/measured/h200/spill-gap/)?
#   moe-table  bench moe --peers --rounds 1 of the four shapes × 13 batches with
#              the shipped tuned files, triton-ref in the same call (#11's table;
#              ~5.5 min: give it a call of its own; needs .dev/peers/triton_moe_ref.py;
#              ends with ratios.txt, scripts/moe-ratios.py of the documents, and
#              targets.txt, its --targets: each cell's target against its floor;
#              ROUNDS=2 or 3 pools fresh sweeps, whose medians differ by up to
#              ~6% at 16–64 tokens where one sweep's samples agree to ±0.3%)
# Build here: make gpu-bins (strip with -ldflags='-s -w' to carry under 64 MiB).
# There:  OUT=/dir scripts/accept-h200.sh STEP [PAIRS]; everything lands in $OUT/STEP.
set -u
step=${1:?usage: $0 tests|spill256|spill1g|gate|fresh-alloc|placement|pdl|aa-arena|devices|moe-table [PAIRS]}
OUT=${OUT:?set OUT}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${MSTAR_BIN:-bin}
dir=$OUT/$step
mkdir -p "$dir"
case $step in
tests)
	"$HERE/gpu-test.sh" "$dir"
	(cd internal/gpu && "../../$BIN/gpu.test" -test.run 'EvictCache|CopyDtoDBatchCUDA' -test.v) >"$dir/evict.log" 2>&1
	echo "evict test: exit $?" | tee -a "$dir/summary.txt"
	# The one routing type reaches the kernels through Routing.Computed().
	(cd kernels/moe && timeout 300 "../../$BIN/moe.test" -test.run CUDA -test.skip TCResources -test.v) >"$dir/moe.log" 2>&1
	echo "moe CUDA tests: exit $?" | tee -a "$dir/summary.txt"
	;;
spill256 | spill1g)
	size=256MiB
	[ "$step" = spill1g ] && size=1GiB
	OUT=$dir SKIP="tests ceilings moe" SIZES=$size RUNS=${RUNS:-5} DEADLINE=${DEADLINE:-540} "$HERE/ceilings-h200.sh"
	;;
gate)
	(cd internal/gpu/cuda && "../../../$BIN/cuda.test" -test.run Gate -test.v) >"$dir/gate-tests.log" 2>&1
	echo "cuda gate test: exit $?" | tee -a "$dir/summary.txt"
	(cd internal/gpu && "../../$BIN/gpu.test" -test.run 'Gate|EvictCache|CopyDtoDBatchCUDA' -test.v) >>"$dir/gate-tests.log" 2>&1
	echo "gpu gate tests: exit $?" | tee -a "$dir/summary.txt"
	for i in $(seq 1 "${RUNS:-10}"); do
		timeout 120 "$BIN/mstar" spill-matrix --device cuda:0 --sizes 256MiB --tiers device --cells 'partial/*,uneven/*' \
			--samples 12 --out "$dir/gated-$i.json" >"$dir/gated-$i.txt" 2>&1
		echo "gated partial/uneven run $i: exit $?" | tee -a "$dir/summary.txt"
	done
	;;
fresh-alloc)
	(cd internal/gpu && "../../$BIN/gpu.test" -test.run FreshAllocationCopyProbe -test.v) >"$dir/fresh-alloc.log" 2>&1
	echo "fresh-alloc probe: exit $?" | tee -a "$dir/summary.txt"
	grep "MiB in" "$dir/fresh-alloc.log" | tee -a "$dir/summary.txt"
	;;
placement)
	(cd kernels/moe && MSTAR_MOE_PLACEMENT=1 "../../$BIN/moe.test" -test.run PlacementSpeedProbe -test.v) >"$dir/placement.log" 2>&1
	echo "placement probe: exit $?" | tee -a "$dir/summary.txt"
	grep "new " "$dir/placement.log" | tee -a "$dir/summary.txt"
	;;
pdl)
	(cd kernels/moe && MSTAR_MOE_PDL_PROBE=1 "../../$BIN/moe.test" -test.run ProgrammaticSpeedProbe -test.v) >"$dir/pdl-probe.log" 2>&1
	echo "pdl probe: exit $?" | tee -a "$dir/summary.txt"
	grep "pdl " "$dir/pdl-probe.log" | tee -a "$dir/summary.txt"
	;;
aa-arena)
	"$HERE/aa-pairs.sh" -n "${2:-10}" -o "$dir" -b "$BIN/mstar" -- arena sweep --device cuda:0 --mode copy --max-size 64MiB
	;;
devices)
	m=$BIN/mstar
	{
		$m arena sweep --devices 0 --mode copy --min-size 1MiB --max-size 64MiB --rounds 1 --out "$dir/sweep-dev.json"
		echo "arena sweep --devices 0: exit $?"
		$m bench moe --model qwen3-30b-a3b --batch 1,16,256 --devices 0 --replicate --rounds 1 --out "$dir/moe-rep.json"
		echo "bench moe --devices 0 --replicate: exit $?"
		$m report show --gpus "$dir/moe-rep.json"
		for i in 1 2 3; do $m bench moe --model qwen3-30b-a3b --batch 1,16,256,1024,4096 --device cuda:0 --rounds 1 --shard $i/3 --out "$dir/s$i.json"; done
		$m report merge -o "$dir/merged.json" "$dir"/s1.json "$dir"/s2.json "$dir"/s3.json
		echo "report merge of 3 shards: exit $?"
		$m bench p2p
		echo "bench p2p on one GPU: exit $? (2 expected)"
	} >"$dir/devices.log" 2>&1
	grep -E 'exit|GPU' "$dir/devices.log" | tee "$dir/summary.txt"
	;;
moe-table)
	# Resumes: a shape whose document is there was done in an earlier call.
	# MSTAR (default $BIN/mstar), CEILINGS (a bench ceilings document) and
	# DEADLINE (seconds for this call, default 570) are optional; tuned
	# files come from MSTAR_MOE_CONFIG_DIR as for any bench moe.
	peer=${TRITON_PEER:-.dev/peers/triton_moe_ref.py}
	mstar=${MSTAR:-$BIN/mstar}
	ceil=()
	[ -n "${CEILINGS:-}" ] && ceil=(--ceilings "$CEILINGS")
	# SHAPES (default the four) picks shapes: deepseek-v3-tp8 is deepseek-v3 --tp 8.
	for s in ${SHAPES:-qwen3-30b-a3b deepseek-v3-tp8 qwen3-235b-a22b mixtral-8x7b}; do
		mdl=$s
		[ "$s" = deepseek-v3-tp8 ] && mdl="deepseek-v3 --tp 8"
		n=${mdl%% *}
		[ -s "$dir/peers-$n.json" ] && continue
		left=$((${DEADLINE:-570} - SECONDS))
		if [ "$left" -le 30 ]; then
			echo "bench moe --peers $mdl: SKIPPED (deadline): run the step again" | tee -a "$dir/summary.txt"
			break
		fi
		# shellcheck disable=SC2086 # $mdl is the shape's flags
		timeout -s INT -k 10 "$left" "$mstar" bench moe --model $mdl --rounds "${ROUNDS:-1}" --peers --triton-peer "$peer" \
			--device cuda:0 "${ceil[@]}" --out "$dir/peers-$n.json.part" >"$dir/peers-$n.txt" 2>&1
		rc=$?
		[ $rc -eq 0 ] && mv "$dir/peers-$n.json.part" "$dir/peers-$n.json"
		echo "bench moe --peers $mdl: exit $rc" | tee -a "$dir/summary.txt"
	done
	# The ratio table of the shapes done so far (the README's cells).
	docs=("$dir"/peers-*.json)
	[ -e "${docs[0]}" ] && python3 "$(dirname "$0")/moe-ratios.py" "${docs[@]}" >"$dir/ratios.txt" 2>&1 &&
		tail -1 "$dir/ratios.txt" | tee -a "$dir/summary.txt"
	# Each cell's target against its floor (what a miss would take).
	[ -e "${docs[0]}" ] && python3 "$(dirname "$0")/moe-ratios.py" --targets "${docs[@]}" >"$dir/targets.txt" 2>&1
	;;
*)
	echo "$0: unknown step $step" >&2
	exit 2
	;;
esac
