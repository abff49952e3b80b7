#!/usr/bin/env bash
# ab-builds.sh: compare two builds of mstar (or one build under two
# environments) on one measuring command. The runs alternate, A B A B ...,
# so that a drift of the machine (clocks, power cap, temperature) lands on
# both sides instead of on whichever ran second; each side's runs are merged
# into one document (`mstar report merge`: its runs become that side's
# rounds, their spread its noise) and the two are diffed (`mstar report
# diff`). The script exits with the diff's code: 0 no regression of B
# against A, 1 a regression or failed gate, 2 bad input.
#
#   scripts/ab-builds.sh [-n N] [-o DIR] -a MSTAR_A [-A 'ENV'] -b MSTAR_B [-B 'ENV']
#                        [-d 'DIFF FLAGS'] -- COMMAND...
#
# COMMAND is an mstar command without --out (the script adds it); ENV is
# assignments for that side's runs, e.g. -B MSTAR_MOE_CONFIG_DIR=tune/configs.
#   scripts/ab-builds.sh -n 3 -o ab -a bin/mstar-main -b bin/mstar -- \
#       bench moe --model mixtral-8x7b --batch 256,1024 --rounds 1 --device cuda:0
# DIR receives a-NN.json / b-NN.json and their printed output (.txt), the
# merged a.json and b.json, diff.txt and summary.txt.
set -u
n=3 dir=ab a="" b="" enva="" envb="" diffflags=""
while getopts "n:o:a:A:b:B:d:" opt; do
	case $opt in
	n) n=$OPTARG ;;
	o) dir=$OPTARG ;;
	a) a=$OPTARG ;;
	A) enva=$OPTARG ;;
	b) b=$OPTARG ;;
	B) envb=$OPTARG ;;
	d) diffflags=$OPTARG ;;
	*) echo "usage: $0 [-n N] [-o DIR] -a MSTAR_A [-A ENV] -b MSTAR_B [-B ENV] [-d FLAGS] -- COMMAND..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ]; then
	echo "$0: no command given (see the comment at the top)" >&2
	exit 2
fi
case $n in '' | *[!0-9]* | 0 | 1)
	echo "$0: -n $n: want a whole number of runs a side, at least 2 (one run has no rounds to tell noise by)" >&2
	exit 2
	;;
esac
for bin in "$a" "$b"; do
	if [ -z "$bin" ] || ! [ -x "$bin" ]; then
		echo "$0: '$bin' is not an executable: give both builds, -a and -b" >&2
		exit 2
	fi
done
mkdir -p "$dir" || exit 2
: >"$dir/summary.txt"
for i in $(seq -w 1 "$n"); do
	for side in a b; do
		if [ $side = a ]; then bin=$a envs=$enva; else bin=$b envs=$envb; fi
		# shellcheck disable=SC2086 # ENV is a list of assignments
		env $envs "$bin" "$@" --out "$dir/$side-$i.json" >"$dir/$side-$i.txt" 2>&1
		rc=$?
		echo "run $i $side ($bin${envs:+ $envs}): exit $rc" | tee -a "$dir/summary.txt"
		# 0 ok, 4 cannot tell: the document is whole either way.
		if [ $rc -ne 0 ] && [ $rc -ne 4 ]; then
			echo "$0: run $i of side $side failed (exit $rc): see $dir/$side-$i.txt" >&2
			exit 2
		fi
	done
done
for side in a b; do
	"$a" report merge -o "$dir/$side.json" "$dir"/$side-*.json >/dev/null || exit 2
done
# shellcheck disable=SC2086 # DIFF FLAGS is a list of flags
"$a" report diff $diffflags "$dir/a.json" "$dir/b.json" >"$dir/diff.txt" 2>&1
rc=$?
cat "$dir/diff.txt"
echo "report diff a.json b.json: exit $rc" | tee -a "$dir/summary.txt"
exit $rc
