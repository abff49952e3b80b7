#!/usr/bin/env bash
# moe-ncu-h200.sh — on the GPU machine: Nsight Compute's counters for the
# fused-MoE GEMMs where mstar trails, and for cuBLAS's batched GEMM of the same
# sizes (the bound), so the next kernel change aims at what the counters say
# limits (tensor pipes, L2, DRAM, stalls) instead of at a guess.
#
# Each case profiles the first launch of each GEMM kernel of one bench moe
# batch (the run on poisoned buffers: the same work as the timed replays) with
# the clocks left alone (--clock-control none), and writes
#   $OUT/ncu/<case>.txt      the details page (speed of light, memory and
#                            compute workload, warp states, occupancy)
#   $OUT/ncu/<case>.csv      every metric, one row per kernel (--page raw)
#   $OUT/ncu/<case>.ncu-rep  the report, for the Nsight Compute GUI
#   $OUT/ncu/<case>-sass.csv, <case>-stalls.txt  warp-stall samples per SASS
#                            instruction, and the top ones (ncu-sass-top.py)
# Cases (CASES), each the GEMMs bench moe picks for that shape and batch
# (the tuned files; <case>.log names the configuration), named
# <shape>-<batch> with shape qwen3-30b, qwen3-235b, deepseek (tp 8) or
# mixtral: by default qwen3-30b-4096 and mixtral-4096 (wgmma), qwen3-30b-8
# (streaming tc), mixtral-256 (where tc and wg meet); e.g. also
# deepseek-4096 (gemm2 of K=256), mixtral-1024 and qwen3-30b-1024 (the
# 1.20× bar's hardest cells), qwen3-235b-4; and the peers' GEMMs over the
# same sizes (scripts/ncu-peer.py): bmm-<shape>-<batch>, torch.bmm over
# balanced slots as the cublas-bmm peer times it (at deepseek-1 cuBLAS's GEMV
# reads the weights at ~3.3 TB/s, mstar's decode kernels at ~2.5), and
# triton-<shape>-<batch>, triton-ref's kernels after its tuning (TRITON_PEER,
# default .dev/peers). Also $OUT/ncu.tgz, the folder in one file (the GPU
# machine returns a limited number of files).
#   OUT=/dir scripts/moe-ncu-h200.sh      (~1 min on the H200; MSTAR default bin/mstar)
#   CASES="deepseek-1 bmm-deepseek-1 triton-deepseek-1" OUT=/dir scripts/moe-ncu-h200.sh
set -u
OUT=${OUT:?set OUT}
MSTAR=${MSTAR:-bin/mstar}
NCU=${NCU:-ncu}
HERE=$(cd "$(dirname "$0")" && pwd)
CASES=${CASES:-"qwen3-30b-4096 mixtral-4096 qwen3-30b-8 mixtral-256 bmm-qwen3-30b-4096"}
SECTIONS=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
	--section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats
	--section Occupancy --section LaunchStats --section SourceCounters)
d=$OUT/ncu
mkdir -p "$d"
command -v "$NCU" >/dev/null || { echo "$0: no $NCU on PATH" | tee "$d/summary.txt"; exit 2; }
"$NCU" --version >"$d/ncu-version.txt" 2>&1
# Metric names differ between versions: keep the tensor-pipe ones for later queries.
"$NCU" --query-metrics --chip gh100 2>/dev/null | grep -i -E "tensor|gmma|hmma" >"$d/tensor-metrics.txt"
report() { # case: the text and csv pages of its report, and the stall samples per SASS instruction
	"$NCU" --import "$d/$1.ncu-rep" --page details >"$d/$1.txt" 2>&1
	"$NCU" --import "$d/$1.ncu-rep" --page raw --csv >"$d/$1.csv" 2>&1
	"$NCU" --import "$d/$1.ncu-rep" --page source --csv --print-source sass >"$d/$1-sass.csv" 2>&1 &&
		python3 "$HERE/ncu-sass-top.py" "$d/$1-sass.csv" 12 >"$d/$1-stalls.txt" 2>&1
}
status=0
for c in $CASES; do
	echo "== [$SECONDS s] $c" | tee -a "$d/summary.txt"
	# [bmm-|triton-]<shape>-<batch>, any batch: qwen3-30b, qwen3-235b, deepseek (tp 8), mixtral.
	known=1 peer=
	case $c in bmm-* | triton-*) peer=${c%%-*} ;; esac
	shape=${c#"${peer:+$peer-}"}
	shape=${shape%-*}
	case $shape in
	qwen3-30b) args=(--model qwen3-30b-a3b --batch "${c##*-}") ;;
	qwen3-235b) args=(--model qwen3-235b-a22b --batch "${c##*-}") ;;
	deepseek) args=(--model deepseek-v3 --tp 8 --batch "${c##*-}") ;;
	mixtral) args=(--model mixtral-8x7b --batch "${c##*-}") ;;
	*) known=0 ;;
	esac
	if [ $known = 0 ] || ! [[ ${c##*-} =~ ^[1-9][0-9]*$ ]]; then
		echo "$0: unknown case $c (want [bmm-|triton-]<shape>-<batch>, shape qwen3-30b, qwen3-235b, deepseek or mixtral)" | tee -a "$d/summary.txt"
		status=2
		continue
	fi
	if [ -z "$peer" ]; then
		timeout 300 "$NCU" --clock-control none -k regex:moe_gemm --launch-count 2 "${SECTIONS[@]}" \
			-f -o "$d/$c" "$MSTAR" bench moe "${args[@]}" --rounds 1 --device cuda:0 >"$d/$c.log" 2>&1
	else
		# The peer's GEMMs over the same sizes, one call after its warm-up
		# (triton-ref: its kernels only, not its alignment or the sum).
		kf=()
		[ "$peer" = triton ] && kf=(-k regex:_moe_gemm)
		timeout 300 "$NCU" --clock-control none --profile-from-start off "${kf[@]}" "${SECTIONS[@]}" -f -o "$d/$c" \
			python3 "$HERE/ncu-peer.py" "$peer" "$shape" "${c##*-}" --triton-peer "${TRITON_PEER:-.dev/peers}" >"$d/$c.log" 2>&1
	fi
	rc=$?
	echo "ncu $c: exit $rc" | tee -a "$d/summary.txt"
	if [ -s "$d/$c.ncu-rep" ]; then report "$c"; else status=1; tail -5 "$d/$c.log"; fi
done
tar czf "$OUT/ncu.tgz" -C "$OUT" ncu
exit $status
