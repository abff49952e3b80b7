#!/usr/bin/env bash
# Runs each hostile-input fuzz target for $1 (default 2s): the worker
# protocol (frames, hello, descriptors with hostile sizes), safetensors,
# routing traces, regulator traces, results documents and the gobench
# export. `make test` runs it short; `make fuzz` long (FUZZTIME=60s).
# Prints the execs of each target; fails on the first crasher.
set -euo pipefail
fuzztime=${1:-2s}
targets=(
  "./arena FuzzHostileDescriptor"
  "./arena FuzzFrameHeader"
  "./arena FuzzRecvFrame"
  "./kernels/router FuzzSafetensors"
  "./kernels/router FuzzReadTrace"
  "./trace FuzzRead"
  "./reports/results FuzzRead"
  "./reports FuzzExportGoBench"
)
for t in "${targets[@]}"; do
  set -- $t
  out=$(go test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" "$1" 2>&1) || { echo "$out"; echo "fuzz $1 $2: FAILED"; exit 1; }
  execs=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -1 | awk '{print $2}')
  echo "fuzz $1 $2: ${execs:-?} execs in $fuzztime"
done
