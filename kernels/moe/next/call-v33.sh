#!/usr/bin/env bash
# call-v33.sh — on the GPU machine: v33 (wg-traffic.patch over v32), the
# wg kernels' L2 and DRAM traffic, checked and timed against v32's kernels
# (l2=0, no mc=2) in one binary. l2= bits, each for keeping the gathered
# token rows in L2: 4 a persisting L2 access policy window over them on
# the launch, 8 a prefetch into L2 as evict-last two k-steps ahead. mc=2:
# clusters of two over an m-tile's two n-tiles, each block gathering half
# of the token rows and bulk-copying it into its peer's stage (each row
# leaves L2 once for both n-tiles).
# Calls 1 and 2 (reports/measured/h100/moe-v33/, as call-l2.sh with
# wg-l2hint.patch, l2 bits 1 and 2 only): l2=1 (evict-first weights) is
# 20–27% slower; every cp.async with a cache hint (l2=2) trapped (illegal
# instruction), with a createpolicy policy and with a constant one: ptxas
# 13 before 13.4.59 miscompiles cp.async with a fractional L2 policy
# (Marlin #44, Triton #11660/#11848). Both bits are gone from the patch;
# l2=4, l2=8 and mc=2 are new, none of them run on a GPU yet.
# Why: ncu of v32 on an H100 (deepseek-v3 tp8, M=4096, reports/measured/
# h100/moe-v32/ncu/) read 2.60 GB from DRAM in gemm1 for 1.88 GB of
# weights, at 90% of DRAM peak: the token rows, each read by 8 experts'
# tiles far apart in time, are evicted between reads by the weight stream.
#
# Here, before the call (from the repository root), v32 built as in
# call-wg.sh's header, then:
#   (cd /tmp/vwg && git apply kernels/moe/next/wg-traffic.patch &&
#    go build -buildvcs=auto -ldflags='-s -w' -o "$OLDPWD/bin/mstar-v33" ./cmd/mstar &&
#    go test -c -ldflags='-s -w' -o "$OLDPWD/bin/moe-v33.test" ./kernels/moe)
#   tar cJf .dev/bins33.tar.xz bin/mstar-v32 bin/moe-v32.test bin/mstar-v33 bin/moe-v33.test
# There (carry .dev):
#   OUT=$OUT bash kernels/moe/next/call-v33.sh tests stages ncu
# Steps:
#   tests  every tc and wg module (the l2 ones too) compiled for the device
#          with its registers and local memory, then the mc=2 forward rows,
#          then the l2 ones, each in its own process (a trap is sticky)
#   stages bench moe --stages of deepseek-v3 tp8 and qwen3-30b-a3b at
#          M=1024 and 4096, cooperative tma with l2=0, 4, 8, deepseek's
#          mc=1 with l2=0, 4, 8 and both with mc=2 (l2=0); fresh processes,
#          the configurations in turn,
#          twice (REPS), then a table of each pass and GEMM (l2-table.txt);
#          L2S, L2MC and L2MN replace the lists of l2 values
#   ncu    DRAM and L2 bytes of deepseek-v3 tp8 M=4096's GEMMs with l2=0, 4, 8
#          (L2NCU replaces them)
# Returns $OUT/v33-<time>.tgz.
set -u
R=${OUT:?set OUT}
[ $# -gt 0 ] || { echo "usage: $0 tests|stages|ncu ..." >&2; exit 2; }
X=/tmp/v33-$(date +%H%M%S)
mkdir -p "$X"
DEADLINE=${DEADLINE:-540}
REPS=${REPS:-2}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
	--format=csv >"$X/gpu.txt" 2>&1
[ -x bin/mstar-v33 ] || tar xJf .dev/bins33.tar.xz || { echo "no .dev/bins33.tar.xz: build it here first (header)" >&2; exit 2; }
COOP="wg:nc=2,bn=256,stages=4,gm=8,tma=1"

tests() {
	local i=0
	for run in 'TestCUDATCResources' 'TestCUDAForward/.*mc=2' 'TestCUDAForward/.*l2='; do
		i=$((i + 1))
		(cd kernels/moe && timeout 200 ../../bin/moe-v33.test -test.run "$run" -test.v) >"$X/tests-$i.log" 2>&1
		echo "tests $run: exit $? [$SECONDS s]" | tee -a "$X/summary.txt"
		grep -E "^(--- FAIL|FAIL|panic|ok)|^    --- (PASS|FAIL)|ILLEGAL" "$X/tests-$i.log" | head -12 | tee -a "$X/summary.txt"
	done
	grep -hE "wg:.*registers" "$X"/tests-*.log | sed 's/^ *//' | sort -u >"$X/registers.txt"
}

stages() {
	[ -s "$X/ceilings.json" ] || timeout 120 bin/mstar-v33 bench ceilings --device cuda:0 --out "$X/ceilings.json" >"$X/ceilings.txt" 2>&1
	local runs=()
	for l2 in ${L2S:-0 4 8}; do
		runs+=("ds|--model deepseek-v3 --tp 8|$COOP,l2=$l2" "q30|--model qwen3-30b-a3b|$COOP,l2=$l2")
	done
	for l2 in ${L2MC:-0 4 8}; do runs+=("dsmc|--model deepseek-v3 --tp 8|$COOP,mc=1,l2=$l2"); done
	for l2 in ${L2MN:-0}; do
		runs+=("dsmn|--model deepseek-v3 --tp 8|$COOP,mc=2,l2=$l2" "q30mn|--model qwen3-30b-a3b|$COOP,mc=2,l2=$l2")
	done
	for rep in $(seq "$REPS"); do
		for r in "${runs[@]}"; do
			IFS="|" read -r n args cfg <<<"$r"
			[ $SECONDS -gt $((DEADLINE - 20)) ] && { echo "stages: stopped at the deadline" | tee -a "$X/summary.txt"; break 2; }
			local f="$X/st-$n-l2${cfg##*l2=}-$rep"
			# shellcheck disable=SC2086 # $args is the shape's flags
			timeout 90 bin/mstar-v33 bench moe $args --batch 1024,4096 --config "$cfg" --stages --rounds 1 \
				--device cuda:0 --ceilings "$X/ceilings.json" --out "$f.json" >"$f.txt" 2>&1
			echo "stages $n l2=${cfg##*l2=} rep $rep: exit $? [$SECONDS s]" >>"$X/summary.txt"
		done
	done
	gzip -f "$X"/st-*.json 2>/dev/null
	# One row per run and batch: the pass, then gemm1 and gemm2 alone (µs).
	for f in "$X"/st-*.txt; do
		awk -v run="$(basename "$f" .txt)" '
			/^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ / { pass[$1] = $4 }
			/^# M=[0-9]+ stages/ { m = substr($2, 3) }
			/^ +gemm1 / { g1[m] = $2 } /^ +gemm2 / { g2[m] = $2 }
			END { for (b in pass) printf "%-16s M=%-5s pass %8s  gemm1 %8s  gemm2 %8s\n", run, b, pass[b], g1[b], g2[b] }' "$f"
	done | sort >"$X/l2-table.txt"
	cat "$X/l2-table.txt"
}

ncu_step() {
	command -v ncu >/dev/null || { echo "ncu: not on PATH" | tee -a "$X/summary.txt"; return; }
	mkdir -p "$X/ncu"
	local metrics=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sector_hit_rate.pct
	for l2 in ${L2NCU:-0 4 8}; do
		[ $SECONDS -gt $((DEADLINE - 25)) ] && { echo "ncu: stopped at the deadline" | tee -a "$X/summary.txt"; return; }
		timeout 90 ncu --clock-control none -k regex:moe_gemm --launch-count 2 --metrics "$metrics" --csv \
			bin/mstar-v33 bench moe --model deepseek-v3 --tp 8 --batch 4096 --config "$COOP,l2=$l2" --rounds 1 \
			--device cuda:0 --ceilings "$X/ceilings.json" >"$X/ncu/ds-l2$l2.csv" 2>"$X/ncu/ds-l2$l2.log"
		echo "ncu ds l2=$l2: exit $? [$SECONDS s]" | tee -a "$X/summary.txt"
		grep -E "dram__bytes_read.sum|gpu__time_duration" "$X/ncu/ds-l2$l2.csv" | awk -F'","' '{print $5, $(NF-2), $(NF-1), $NF}' | tee -a "$X/summary.txt"
	done
}

for s in "$@"; do
	case $s in
	tests) tests ;;
	stages) stages ;;
	ncu)
		[ -s "$X/ceilings.json" ] || timeout 120 bin/mstar-v33 bench ceilings --device cuda:0 --out "$X/ceilings.json" >"$X/ceilings.txt" 2>&1
		ncu_step
		;;
	*) echo "$0: unknown step $s (tests, stages, ncu)" >&2 ;;
	esac
done
gzip -f "$X"/tests-*.log 2>/dev/null
tar czf "$R/$(basename "$X").tgz" -C /tmp "$(basename "$X")"
cat "$X/summary.txt"
exit 0
