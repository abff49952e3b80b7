#!/usr/bin/env bash
# h200-suites.sh — on the GPU machine: doctor, the arena's CUDA test and
# copy/transport sweep, the spill matrix, and the router ablation with the
# CUDA kernel, each bounded in time, packed into one archive as it goes so
# that a cut-short run still returns what finished.
#
# The GPU machine has no Go. Build on the Go machine and carry bin/h200:
#   make build && cp bin/mstar bin/h200/ && go test -c -o bin/h200/arena.test ./arena
# then there, from the repository root:  OUT=/some/dir scripts/h200-suites.sh
# STEPS picks and orders the steps (default: doctor arena-test arena-sweep spill ablate).
# Writes $OUT/h200-suites.tgz (folder suites/) and $OUT/summary.txt.
set -u -o pipefail
OUT=${OUT:?set OUT}
BIN=${MSTAR_BIN:-bin/h200}
W=$(mktemp -d)/suites
mkdir -p "$W"
pack() { tar czf "$OUT/h200-suites.tgz" -C "$(dirname "$W")" suites; }
step() { # step NAME TIMEOUT CMD...
	local name=$1 limit=$2
	shift 2
	local t0=$(date +%s%N)
	timeout "$limit" "$@" >"$W/$name.txt" 2>&1
	local rc=$?
	printf '%-16s rc=%-3s %6d ms  %s\n' "$name" "$rc" $((($(date +%s%N) - t0) / 1000000)) "$*" | tee -a "$W/steps.txt"
	pack
}
for s in ${STEPS:-doctor arena-test arena-sweep spill ablate}; do
	case $s in
	doctor)
		step doctor 20 "$BIN/mstar" doctor
		step doctor-json 20 "$BIN/mstar" doctor --json ;;
	arena-test)
		step arena-test 60 "$BIN/arena.test" -test.v -test.count=1 -test.run CUDA ;;
	arena-sweep)
		step arena-sweep 150 "$BIN/mstar" arena sweep --device cuda:0 --mode all --min-size 4KiB --max-size 256MiB --samples 5 \
			--out "$W/arena-sweep.json" --plot "$W/arena-sweep.png" ;;
	spill)
		step spill 200 "$BIN/mstar" spill-matrix --device cuda:0 --sizes 256MiB --out "$W/spill.json" --trace "$W/trace.jsonl"
		step trace-sum 20 "$BIN/mstar" trace summarize "$W/trace.jsonl"
		step trace-plot 20 "$BIN/mstar" trace plot "$W/trace.jsonl" -o "$W/trace.png" ;;
	ablate)
		step ablate 90 "$BIN/mstar" ablate router --model qwen3-30b-a3b --layers 4 --device cuda:0 \
			--out "$W/ablate-router.json" --heatmap "$W/ablate-router.png" ;;
	*) echo "h200-suites.sh: unknown step $s" >&2 ;;
	esac
done
cp "$W/steps.txt" "$OUT/summary.txt"
for f in doctor spill arena-sweep; do [ -f "$W/$f.txt" ] && tail -n 60 "$W/$f.txt" >>"$OUT/summary.txt"; done
pack
