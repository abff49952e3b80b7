#!/usr/bin/env bash
# gpu-test.sh runs the device layer's GPU tests and measures the ceilings on
# a machine with an NVIDIA GPU. That machine needs no Go: build on the Go
# machine and copy bin/ over:
#
#   CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/mstar ./cmd/mstar
#   go test -c -o bin/cuda.test  ./internal/gpu/cuda
#   go test -c -o bin/gpu.test   ./internal/gpu
#   go test -c -o bin/bench.test ./bench
#   go test -c -o bin/ceilings.test ./bench/ceilings
#   go test -c -o bin/ablate.test ./bench/ablate
#
# then, there:  scripts/gpu-test.sh [OUTDIR]     (default $OUT, else ./gpu-out;
# MSTAR_BIN names another folder of binaries than bin/)
#
# Writes OUTDIR/gpu-tests.log (every test's -v output) and
# OUTDIR/ceilings.json (the results document of 'mstar bench ceilings').
# Exits non-zero when any step failed; every step runs regardless.
set -u -o pipefail
out=${1:-${OUT:-./gpu-out}}
bin=${MSTAR_BIN:-bin} # where the binaries are
mkdir -p "$out"
log="$out/gpu-tests.log"
: >"$log"
# A fresh kernel cache, so the first compile is a miss and the second a hit.
export MSTAR_CACHE_DIR=${MSTAR_CACHE_DIR:-$(mktemp -d /tmp/mstar-kernels.XXXXXX)}
status=0

. "$(dirname "$0")/lib.sh" # step

step nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current --format=csv
# A test binary runs in its package's folder, as go test runs it (tests
# read fixtures by paths relative to it).
bin=$(cd "$bin" && pwd)
intest() { local dir=$1; shift; (cd "$dir" && "$@"); }
step intest internal/gpu/cuda "$bin"/cuda.test -test.v -test.count=1
step intest internal/gpu "$bin"/gpu.test -test.v -test.count=1
step intest bench "$bin"/bench.test -test.v -test.count=1 -test.run 'CUDA|Time'
step intest bench/ceilings "$bin"/ceilings.test -test.v -test.count=1 -test.run 'CUDA|Ceiling|Time'
step intest bench/ablate "$bin"/ablate.test -test.v -test.count=1 -test.run 'CUDA'
step "$bin"/mstar bench ceilings --device cuda:0 --out "$out/ceilings.json"
echo "== gpu-test.sh: exit $status" | tee -a "$log"
exit $status
