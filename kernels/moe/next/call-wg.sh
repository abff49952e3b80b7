#!/usr/bin/env bash
# call-wg.sh — on the GPU machine: the wg (wgmma) GEMMs of build V checked
# and timed: every module's registers and local memory on sm_90a, the SASS
# of the mc=2 GEMMs (where they touch local memory), the mc=2 and l2=4
# forward rows, and each GEMM alone with and without the L2 window and the
# clusters. Build V here with next/build.sh (bin/mstar-v$V, bin/moe-v$V.test
# in .dev/bins$V.tar.xz; carry .dev), then there:
#   V=35 OUT=$OUT bash kernels/moe/next/call-wg.sh tests stages ncu
# History: as call-v33.sh it measured v33 on an H100 (reports/measured/
# h100/moe-v33/) and v34's tests on the H200 (h200/moe-v34/call1: every mc=2
# and l2 row passes; the cooperative mc=2 gemm1 has 8 B of local memory,
# its producer's unit count spilled under setmaxnreg 40, so the tuner does
# not offer it: moe.clusterOffered).
# Steps:
#   tests  every tc and wg module (mc=2 too) compiled for the device with
#          its registers and local memory, and the SASS of mc=2's GEMMs;
#          then the mc=2 forward rows, then the l2=4 ones, each in its own
#          process (a trap is sticky); RESOURCES=wg compiles the wg
#          modules alone (~half the time)
#   forward every TestCUDAForward row (poisoned outputs, rel L2 against
#          float64; every kernel family, odd shapes, EP, zipf) in one
#          process (~100 s on an H200; FORWARD=REGEXP picks rows, e.g.
#          'TestCUDAForward/.*wg')
#   stages bench moe --stages of deepseek-v3 tp8 and qwen3-30b-a3b at
#          M=1024 and 4096, cooperative tma with l2=0 and 4, deepseek's
#          mc=1 with l2=0 and 4, and both with mc=2 (l2=0); fresh processes,
#          the configurations in turn, twice (REPS), then a table of each
#          pass and GEMM (l2-table.txt); L2S, L2MC and L2MN replace the
#          lists of l2 values
#   ncu    DRAM and L2 bytes of deepseek-v3 tp8 M=4096's GEMMs with l2=0
#          and 4 (L2NCU replaces them)
#   ab     build BASE (default V-1; bin/mstar-v$BASE from .dev/bins$BASE)
#          against V, alternating, two runs a side (scripts/ab-builds.sh),
#          bench moe --stages over AB_CASES ("name|shape flags|batches|config"
#          separated by ';', default: the cooperative tile of qwen3-30b-a3b,
#          deepseek-v3 tp8 and qwen3-235b-a22b at M = 1024–4096, then at
#          qwen3-30b-a3b M=2048 its mc=2 twin and the pp tile); ab-table.txt:
#          each case's pass and GEMM lines of its report diff
# Returns $OUT/v$V-<time>.tgz.
set -u
. scripts/lib.sh # ceilings
R=${OUT:?set OUT}
[ $# -gt 0 ] || { echo "usage: V=N $0 tests|forward|stages|ncu|ab ..." >&2; exit 2; }
V=${V:?set V: the build (next/build.sh V)}
X=/tmp/v$V-$(date +%H%M%S)
mkdir -p "$X" "$X/cubin"
DEADLINE=${DEADLINE:-540}
REPS=${REPS:-2}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
	--format=csv >"$X/gpu.txt" 2>&1
[ -x bin/mstar-v$V ] || tar xJf .dev/bins$V.tar.xz || { echo "no .dev/bins$V.tar.xz: build it here first: kernels/moe/next/build.sh $V" >&2; exit 2; }
COOP="wg:nc=2,bn=256,stages=4,gm=8,tma=1"
# AB_ROWS: python3 reading report diff's csv on stdin, printing one line per
# latency row of a pass or GEMM: "<case> M=<b> <stage> base -> new µs delta p verdict".
AB_ROWS='
import csv, re, sys
for r in csv.DictReader(sys.stdin):
    if r["metric"] != "latency" or r["name"] not in ("moe", "moe_stage"): continue
    m = re.search(r"batch=(\d+)", r["params"]); st = re.search(r"stage=(\w+)", r["params"])
    if r["name"] == "moe_stage" and not (st and st.group(1).startswith("gemm")): continue
    print("%s M=%s %s %.1f -> %.1f µs %+.1f%% p=%.3f %s" % (sys.argv[1], m.group(1) if m else "?",
        st.group(1) if st else "pass", float(r["base_median"]), float(r["new_median"]),
        float(r["delta_pct"]), float(r["p"] or "nan"), r["verdict"]))
'

# stage_rows FILE: one line per batch of a bench moe --stages printout,
# "M pass gemm1 gemm2" (µs; "-" where the run printed no such line).
stage_rows() {
	awk '/^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ / { pass[$1] = $4 }
		/^# M=[0-9]+ stages/ { m = substr($2, 3) }
		/^ +gemm1 / { g1[m] = $2 } /^ +gemm2 / { g2[m] = $2 }
		END { for (b in pass) print b, pass[b], (b in g1) ? g1[b] : "-", (b in g2) ? g2[b] : "-" }' "$1"
}

tests() {
	local i=0
	for run in 'TestCUDATCResources' 'TestCUDAForward/.*mc=2' 'TestCUDAForward/.*l2='; do
		i=$((i + 1))
		# TCResources also writes every module's image (MSTAR_MOE_CUBIN_DIR).
		(cd kernels/moe && MSTAR_MOE_RESOURCES=${RESOURCES:-} MSTAR_MOE_CUBIN_DIR="$X/cubin" timeout 200 ../../bin/moe-v$V.test -test.run "$run" -test.v) >"$X/tests-$i.log" 2>&1
		echo "tests $run: exit $? [$SECONDS s]" | tee -a "$X/summary.txt"
		grep -E "^(--- FAIL|FAIL|panic|ok)|^    --- (PASS|FAIL)|ILLEGAL" "$X/tests-$i.log" | head -12 | tee -a "$X/summary.txt"
	done
	grep -hE "wg:.*registers" "$X"/tests-*.log | sed 's/^ *//' | sort -u >"$X/registers.txt"
	# mc=2's SASS, and where it touches local memory (STL/LDL), with the
	# instructions before each: which warpgroup spills, and what.
	local f
	for f in "$X"/cubin/*mc2*.cubin; do
		[ -f "$f" ] || continue
		cuobjdump -sass "$f" >"$X/sass-$(basename "$f" .cubin).txt" 2>&1 &&
			grep -n -B12 -E "STL|LDL" "$X/sass-$(basename "$f" .cubin).txt" | head -200 >"$X/local-$(basename "$f" .cubin).txt"
	done
	gzip -f "$X"/sass-*.txt 2>/dev/null
	rm -rf "$X/cubin"
}

forward() {
	(cd kernels/moe && timeout 400 ../../bin/moe-v$V.test -test.run "${FORWARD:-TestCUDAForward}" -test.v) >"$X/forward.log" 2>&1
	echo "forward: exit $? [$SECONDS s]; $(grep -c -- '    --- PASS' "$X/forward.log") rows pass, $(grep -c -- '    --- FAIL' "$X/forward.log") fail" |
		tee -a "$X/summary.txt"
	grep -E -- "^    --- FAIL|panic|ILLEGAL" "$X/forward.log" | head -20 | tee -a "$X/summary.txt"
	gzip -f "$X/forward.log"
}

stages() {
	ceilings bin/mstar-v$V "$X"
	local runs=()
	for l2 in ${L2S:-0 4}; do
		runs+=("ds|--model deepseek-v3 --tp 8|$COOP,l2=$l2" "q30|--model qwen3-30b-a3b|$COOP,l2=$l2")
	done
	for l2 in ${L2MC:-0 4}; do runs+=("dsmc|--model deepseek-v3 --tp 8|$COOP,mc=1,l2=$l2"); done
	for l2 in ${L2MN:-0}; do
		runs+=("dsmn|--model deepseek-v3 --tp 8|$COOP,mc=2,l2=$l2" "q30mn|--model qwen3-30b-a3b|$COOP,mc=2,l2=$l2")
	done
	for rep in $(seq "$REPS"); do
		for r in "${runs[@]}"; do
			IFS="|" read -r n args cfg <<<"$r"
			[ $SECONDS -gt $((DEADLINE - 20)) ] && { echo "stages: stopped at the deadline" | tee -a "$X/summary.txt"; break 2; }
			local f="$X/st-$n-l2${cfg##*l2=}-$rep"
			# shellcheck disable=SC2086 # $args is the shape's flags
			timeout 90 bin/mstar-v$V bench moe $args --batch 1024,4096 --config "$cfg" --stages --rounds 1 \
				--device cuda:0 --ceilings "$X/ceilings.json" --out "$f.json" >"$f.txt" 2>&1
			echo "stages $n l2=${cfg##*l2=} rep $rep: exit $? [$SECONDS s]" >>"$X/summary.txt"
		done
	done
	gzip -f "$X"/st-*.json 2>/dev/null
	# One row per run and batch: the pass, then gemm1 and gemm2 alone (µs).
	for f in "$X"/st-*.txt; do
		stage_rows "$f" | awk -v run="$(basename "$f" .txt)" '{ printf "%-16s M=%-5s pass %8s  gemm1 %8s  gemm2 %8s\n", run, $1, $2, $3, $4 }'
	done | sort >"$X/l2-table.txt"
	cat "$X/l2-table.txt"
}

ncu_step() {
	command -v ncu >/dev/null || { echo "ncu: not on PATH" | tee -a "$X/summary.txt"; return; }
	ceilings bin/mstar-v$V "$X"
	mkdir -p "$X/ncu"
	local metrics=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sector_hit_rate.pct
	for l2 in ${L2NCU:-0 4}; do
		[ $SECONDS -gt $((DEADLINE - 25)) ] && { echo "ncu: stopped at the deadline" | tee -a "$X/summary.txt"; return; }
		timeout 90 ncu --clock-control none -k regex:moe_gemm --launch-count 2 --metrics "$metrics" --csv \
			bin/mstar-v$V bench moe --model deepseek-v3 --tp 8 --batch 4096 --config "$COOP,l2=$l2" --rounds 1 \
			--device cuda:0 --ceilings "$X/ceilings.json" >"$X/ncu/ds-l2$l2.csv" 2>"$X/ncu/ds-l2$l2.log"
		echo "ncu ds l2=$l2: exit $? [$SECONDS s]" | tee -a "$X/summary.txt"
		grep -E "dram__bytes_read.sum|gpu__time_duration" "$X/ncu/ds-l2$l2.csv" | awk -F'","' '{print $5, $(NF-2), $(NF-1), $NF}' | tee -a "$X/summary.txt"
	done
}

ab() {
	local base=${BASE:-$((V - 1))}
	[ -x bin/mstar-v$base ] || tar xJf .dev/bins$base.tar.xz || { echo "ab: no .dev/bins$base.tar.xz" | tee -a "$X/summary.txt"; return; }
	ceilings bin/mstar-v$V "$X"
	local cases=${AB_CASES:-"q30|--model qwen3-30b-a3b|1024,2048,4096|$COOP;ds|--model deepseek-v3 --tp 8|1024,2048|$COOP;q235|--model qwen3-235b-a22b|1024,2048|wg:nc=2,bn=256,stages=3,gm=8,tma=1;q30mn|--model qwen3-30b-a3b|2048|$COOP,mc=2;q30pp|--model qwen3-30b-a3b|2048|wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1"}
	local c n args batches cfg
	IFS=";" read -ra list <<<"$cases"
	for c in "${list[@]}"; do
		IFS="|" read -r n args batches cfg <<<"$c"
		[ $SECONDS -gt $((DEADLINE - 40)) ] && { echo "ab: stopped at the deadline before $n" | tee -a "$X/summary.txt"; break; }
		# A hang (a barrier bug in the variant) must not take the call's
		# other results with it: the case gets the time left.
		# shellcheck disable=SC2086 # $args is the shape's flags
		timeout -k 10 $((DEADLINE - SECONDS)) scripts/ab-builds.sh -n 2 -o "$X/ab-$n" -a bin/mstar-v$base -b bin/mstar-v$V -- \
			bench moe $args --batch "$batches" --config "$cfg" --stages --rounds 1 --device cuda:0 --ceilings "$X/ceilings.json" >/dev/null 2>&1
		echo "ab $n (v$base vs v$V): exit $? [$SECONDS s]" | tee -a "$X/summary.txt"
	done
	# Each case's pass and GEMMs from report diff's csv of the pooled runs
	# (ab-builds.sh writes each case's a.json and b.json): base -> variant,
	# delta, p, verdict.
	echo "# case M stage: v$base -> v$V µs, delta, p, verdict (report diff of the pooled runs)" >"$X/ab-table.txt"
	for d in "$X"/ab-*/; do
		[ -f "$d/a.json" ] && [ -f "$d/b.json" ] || continue
		bin/mstar-v$V report diff --format csv "$d/a.json" "$d/b.json" 2>/dev/null |
			python3 -c "$AB_ROWS" "$(basename "$d" | sed 's/^ab-//')" >>"$X/ab-table.txt"
	done
	cat "$X/ab-table.txt"
}

for s in "$@"; do
	case $s in
	tests) tests ;;
	forward) forward ;;
	stages) stages ;;
	ncu) ncu_step ;;
	ab) ab ;;
	*) echo "$0: unknown step $s (tests, forward, stages, ncu, ab)" >&2 ;;
	esac
done
gzip -f "$X"/tests-*.log 2>/dev/null
tar czf "$R/$(basename "$X").tgz" -C /tmp "$(basename "$X")"
cat "$X/summary.txt"
exit 0
