#!/usr/bin/env bash
# call-next.sh — on the GPU machine: the next call's work, by card. On an
# H200 the v44 landing (call-land.sh STEPS, default tune; it resumes from
# .dev/work44.tgz); on any other card call-trace.sh (mstar and the peers
# under a replayed routing file, with main's build). Needs
# .dev/bins-next.tar.xz, made here:
#   kernels/moe/next/build.sh 44 gv-candidates.patch wg-mn-spill.patch \
#     align-rank.patch decode-shared.patch wg-nc3.patch
#   go build -ldflags='-s -w' -o bin/mstar-main ./cmd/mstar
#   XZ_OPT=-9e tar cJf .dev/bins-next.tar.xz bin/mstar-main bin/mstar-v44 \
#     bin/moe-v44.test
#   cp -r ../shared/peers .dev/
# There (carry .dev/bins-next.tar.xz, .dev/peers, and .dev/work44*.tgz once
# a tune has run):
#   OUT=$OUT bash kernels/moe/next/call-next.sh run
#   OUT=$OUT STEPS="tune table" bash kernels/moe/next/call-next.sh run
set -u
[ "${1:-}" = run ] && [ -n "${OUT:-}" ] || {
	echo "usage: OUT=DIR [STEPS='tune table'] $0 run   (on a GPU machine)" >&2
	exit 2
}
cd "$(dirname "$0")/../../.."
tar xJf .dev/bins-next.tar.xz || { echo "$0: no .dev/bins-next.tar.xz: build it here first (see the head of $0)" >&2; exit 2; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $name"
if [[ $name == *H200* ]]; then
	V=44 OUT=$OUT DEADLINE=${DEADLINE:-555} bash kernels/moe/next/call-land.sh ${STEPS:-tune}
else
	OUT=$OUT MSTAR=bin/mstar-main bash kernels/moe/next/call-trace.sh run
fi
