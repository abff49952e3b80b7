#!/usr/bin/env bash
# arena-gpu.sh runs the shared-memory arena's GPU test, 'mstar arena sweep'
# on the GPU, and 'mstar arena stress' on the GPU machine's host (16 cores).
# That machine needs no Go: build on the Go machine and copy bin/ over:
#
#   CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/mstar ./cmd/mstar
#   go test -c -o bin/arena.test ./arena
#
# then, there:  scripts/arena-gpu.sh [OUTDIR] [STEP...]
#   (OUTDIR default $OUT, else ./gpu-out; MSTAR_BIN names another folder of
#   binaries than bin/). STEPs, default all, in this order:
#     test      the arena's CUDA test (registered segments, D2H into a slot,
#               H2D out of the peer mapping, ACK on the copy's event)  ~10 s
#     sweep     mstar arena sweep --device cuda:0 (copy + registration +
#               transport modes, 4 KiB..1 GiB)                         ~5 min
#     stress    mstar arena stress --duration 60s, then with --kill-rate 0.01 ~2 min
#     count     4 producers x 4 consumers, 100000 tensors, --kill-rate 0.01  ~2-6 min
#     compare   arena vs file transport, 30 s each, sizes up to 1 MiB      ~1 min
#   Each command stays well under 10 minutes; to stay under 10 minutes in
#   all, run "test sweep" in one call and "stress count compare" in another.
#
# Writes OUTDIR/arena-gpu.log and, per step, the results documents
# arena-sweep.json (+ arena-sweep.png, arena-sweep-transport.png),
# arena-stress.json, arena-stress-kill.json, arena-stress-100k.json and
# arena-compare.json. Exits non-zero when any step failed; every step runs.
set -u -o pipefail
out=${1:-${OUT:-./gpu-out}}
shift || true
steps=${*:-test sweep stress count compare}
bin=${MSTAR_BIN:-bin}
mkdir -p "$out"
log="$out/arena-gpu.log"
touch "$log"
status=0

. "$(dirname "$0")/lib.sh" # step

for s in $steps; do
	case $s in
	test)
		step nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
		step df -h /dev/shm
		step "$bin"/arena.test -test.v -test.count=1 -test.run 'CUDA'
		;;
	sweep)
		step "$bin"/mstar arena sweep --device cuda:0 --mode all --min-size 4KiB --max-size 1GiB \
			--out "$out/arena-sweep.json" --plot "$out/arena-sweep.png"
		;;
	stress)
		step "$bin"/mstar arena stress --duration 60s --seed 1 --interval 5s --out "$out/arena-stress.json"
		step "$bin"/mstar arena stress --duration 60s --kill-rate 0.01 --seed 2 --interval 5s --out "$out/arena-stress-kill.json"
		;;
	count)
		step "$bin"/mstar arena stress --producers 4 --consumers 4 --count 100000 --kill-rate 0.01 --seed 3 --interval 10s \
			--out "$out/arena-stress-100k.json"
		;;
	compare)
		step "$bin"/mstar arena stress --duration 30s --max-size 1MiB --transport arena,file --seed 4 --interval 5s \
			--out "$out/arena-compare.json"
		;;
	*)
		echo "arena-gpu.sh: unknown step $s (want test, sweep, stress, count or compare)" | tee -a "$log"
		status=2
		;;
	esac
done
echo "== arena-gpu.sh: exit $status" | tee -a "$log"
exit $status
