#!/usr/bin/env bash
# build.sh — here, before a GPU call: build variant V (main at HEAD plus the
# named patches of this folder, applied in order) for the GPU machine, which
# has no Go. Writes bin/mstar-v$V and bin/moe-v$V.test (the kernels/moe test
# binary, for the CUDA tests there), and .dev/bins$V.tar.xz of both, which
# call-land.sh and call-wg.sh unpack there (carry .dev).
#   kernels/moe/next/build.sh 35                      # main as it is
#   kernels/moe/next/build.sh 35 wg-mn-spill.patch    # main plus a patch
# The checkout (~37 MiB tracked) and the carried paths share 64 MiB: carry
# this tarball by name, not all of .dev.
set -eu
[ $# -ge 1 ] && [[ $1 =~ ^[0-9a-z]+$ ]] || {
	echo "usage: $0 V [PATCH ...]  (V names the build: bin/mstar-vV, .dev/binsV.tar.xz)" >&2
	exit 2
}
V=$1
shift
root=$(git rev-parse --show-toplevel)
cd "$root"
for p in "$@"; do
	[ -f "kernels/moe/next/$p" ] || {
		echo "$0: kernels/moe/next/$p: no such patch" >&2
		exit 2
	}
done
wt=$(mktemp -d /tmp/mstar-v$V.XXXXXX)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git worktree add --detach -f "$wt" HEAD >/dev/null
for p in "$@"; do
	(cd "$wt" && git apply "$root/kernels/moe/next/$p") || {
		echo "$0: $p does not apply to HEAD" >&2
		exit 1
	}
done
mkdir -p bin .dev
(cd "$wt" && go build -buildvcs=auto -ldflags='-s -w' -o "$root/bin/mstar-v$V" ./cmd/mstar &&
	go test -c -ldflags='-s -w' -o "$root/bin/moe-v$V.test" ./kernels/moe)
tar cJf ".dev/bins$V.tar.xz" "bin/mstar-v$V" "bin/moe-v$V.test"
echo "built v$V = $(git rev-parse --short HEAD)${*:+ + $*}: .dev/bins$V.tar.xz ($(du -h ".dev/bins$V.tar.xz" | cut -f1))"
