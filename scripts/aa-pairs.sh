#!/usr/bin/env bash
# aa-pairs.sh: run N A/A pairs of one measuring command — two back-to-back
# runs of the same command, diffed with `mstar report diff` — and count the
# diff's exit codes. A trustworthy diff exits 0 on (nearly) every pair: at
# least 19 of 20 is the bar.
#
#   scripts/aa-pairs.sh [-n N] [-o DIR] [-b MSTAR] [-d 'DIFF FLAGS'] -- COMMAND...
#
# COMMAND is an mstar command without --out (the script adds it), e.g.
#   scripts/aa-pairs.sh -n 20 -o reports/measured/aa-cpu/moe -- \
#       bench moe --model qwen3-30b-a3b --batch 1,16 --device cpu
#   scripts/aa-pairs.sh -n 10 -o aa-h200/arena -- \
#       arena sweep --device cuda:0 --mode copy --max-size 64MiB
# DIR receives pair-NN-a.json, pair-NN-b.json (-r reads them gzipped too, as
# committed), pair-NN.diff.txt (the diff's
# stdout and stderr), exits.txt (one "NN EXIT" line a pair) and summary.txt.
# Re-diff stored pairs with other flags: -r (no new runs).
set -u
n=20 dir=aa-pairs mstar=bin/mstar diffflags="" rediff=0
while getopts "n:o:b:d:r" opt; do
	case $opt in
	n) n=$OPTARG ;;
	o) dir=$OPTARG ;;
	b) mstar=$OPTARG ;;
	d) diffflags=$OPTARG ;;
	r) rediff=1 ;;
	*) echo "usage: $0 [-n N] [-o DIR] [-b MSTAR] [-d 'DIFF FLAGS'] [-r] -- COMMAND..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
if [ $rediff -eq 0 ] && [ $# -eq 0 ]; then
	echo "$0: no command given (see the comment at the top)" >&2
	exit 2
fi
if ! [ -x "$mstar" ]; then
	echo "$0: $mstar is not an executable (build it with make build, or give -b)" >&2
	exit 2
fi
mkdir -p "$dir" || exit 2
: >"$dir/exits.txt"
declare -A count=()
for i in $(seq -f %02g 1 "$n"); do
	a=$dir/pair-$i-a.json b=$dir/pair-$i-b.json
	# Stored pairs may be gzipped (the committed ones are: report reads both).
	if [ $rediff -eq 1 ] && [ ! -e "$a" ] && [ -e "$a.gz" ]; then a=$a.gz b=$b.gz; fi
	if [ $rediff -eq 0 ]; then
		for f in "$a" "$b"; do
			if "$mstar" "$@" --out "$f" >/dev/null 2>"$f.stderr"; then
				rm -f "$f.stderr"
			else
				echo "$0: pair $i: mstar $* failed (exit $?): see $f.stderr" >&2
			fi
		done
	fi
	# shellcheck disable=SC2086 # diff flags are words
	"$mstar" report diff $diffflags "$a" "$b" >"$dir/pair-$i.diff.txt" 2>&1
	code=$?
	echo "$i $code" >>"$dir/exits.txt"
	count[$code]=$((${count[$code]:-0} + 1))
	echo "pair $i: exit $code" >&2
done
{
	if [ $rediff -eq 0 ]; then
		echo "command: mstar $*"
	else
		echo "command: (stored pairs re-diffed; their documents hold the command)"
	fi
	echo "diff: mstar report diff $diffflags"
	echo "pairs: $n"
	for code in "${!count[@]}"; do echo "exit $code: ${count[$code]}"; done | sort
} | tee "$dir/summary.txt"
