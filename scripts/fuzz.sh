#!/usr/bin/env bash
# Runs each hostile-input fuzz target for $1 (default 1000x): the worker
# protocol (frames, hello, descriptors with hostile sizes), safetensors,
# routing traces, regulator traces, results documents (whole and
# streamed) and the gobench export. `make test` runs it short, by count
# (1000x); `make fuzz` long (FUZZTIME=60s). A count is what CI needs: with
# a duration, Go's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" when a loaded machine's worker is mid-input as the
# time runs out (golang/go#75804; seen here: FuzzSafetensors at 32 execs/s
# in 3 s). Random mutation can still find a new failing input in CI: the
# fix adds that input (printed in the log) as a seed of its target.
# Prints the execs of each target; fails on the first crasher.
set -euo pipefail
fuzztime=${1:-1000x}
targets=(
  "./arena FuzzHostileDescriptor"
  "./arena FuzzFrameHeader"
  "./arena FuzzRecvFrame"
  "./kernels/router FuzzSafetensors"
  "./kernels/router FuzzReadTrace"
  "./trace FuzzRead"
  "./reports/results FuzzRead"
  "./reports/results FuzzReadStream"
  "./reports FuzzExportGoBench"
)
for t in "${targets[@]}"; do
  set -- $t
  out=$(go test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" "$1" 2>&1) || { echo "$out"; echo "fuzz $1 $2: FAILED"; exit 1; }
  execs=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -1 | awk '{print $2}')
  echo "fuzz $1 $2: ${execs:-?} execs (budget $fuzztime)"
done
