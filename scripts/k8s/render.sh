#!/usr/bin/env bash
# render.sh — prints mstar-shards.yaml (or, with --merge, mstar-merge.yaml)
# with its ${MSTAR_...} filled in, for kubectl apply -f -.
#   scripts/k8s/render.sh -n 8 -i registry/mstar:v1 -c mstar-results -- bench moe --model qwen3-30b-a3b --device cuda:0 | kubectl apply -f -
#   kubectl wait --for=condition=complete job/mstar-shards --timeout=24h
#   scripts/k8s/render.sh --merge -n 8 -i registry/mstar:v1 -c mstar-results | kubectl apply -f -
# Options: -n N shards (required), -i IMAGE with mstar on its PATH
# (required), -c CLAIM a ReadWriteMany PersistentVolumeClaim (required),
# -o DIR where it is mounted (/results), -j NAME of the Job (mstar-shards),
# -p PARALLEL pods at once (N), -g GPUS per pod (1; 0 for the CPU suites;
# a whole node's, e.g. 8, with --devices all in the suite's flags),
# -s SIZE of /dev/shm (16Gi). After --, the suite and its flags (split at
# spaces; %I becomes the shard's number).
set -euo pipefail
usage() {
	echo "usage: render.sh [--merge] -n N -i IMAGE -c CLAIM [-o DIR] [-j NAME] [-p PARALLEL] [-g GPUS] [-s SHM] -- SUITE [FLAGS...]" >&2
	exit 2
}
here=$(cd "$(dirname "$0")" && pwd)
template=$here/mstar-shards.yaml
n="" image="" claim="" dir=/results job=mstar-shards parallel="" gpus=1 shm=16Gi
while [ $# -gt 0 ]; do
	case $1 in
	--merge) template=$here/mstar-merge.yaml ;;
	-n | -i | -c | -o | -j | -p | -g | -s)
		[ $# -ge 2 ] || usage
		case $1 in -n) n=$2 ;; -i) image=$2 ;; -c) claim=$2 ;; -o) dir=$2 ;; -j) job=$2 ;; -p) parallel=$2 ;; -g) gpus=$2 ;; -s) shm=$2 ;; esac
		shift
		;;
	--)
		shift
		break
		;;
	*) usage ;;
	esac
	shift
done
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "render.sh: -n N: want a whole number from 1, got '$n'" >&2; usage; }
[ -n "$image" ] && [ -n "$claim" ] || usage
if [ "$template" = "$here/mstar-shards.yaml" ] && [ $# -eq 0 ]; then
	echo "render.sh: give the suite after --, e.g. -- bench moe --model qwen3-30b-a3b" >&2
	usage
fi
# A YAML single-quoted scalar: ' doubles, nothing else is special.
quote() { printf "'%s'" "${1//\'/\'\'}"; }
t=$(<"$template")
t=${t//'${MSTAR_JOB}'/$job}
t=${t//'${MSTAR_SHARDS}'/$n}
t=${t//'${MSTAR_PARALLEL}'/${parallel:-$n}}
t=${t//'${MSTAR_IMAGE}'/$(quote "$image")}
t=${t//'${MSTAR_ARGS}'/$(quote "$*")}
t=${t//'${MSTAR_OUT_DIR}'/$(quote "$dir")}
t=${t//'${MSTAR_CLAIM}'/$(quote "$claim")}
t=${t//'${MSTAR_GPUS}'/$gpus}
t=${t//'${MSTAR_SHM}'/$shm}
printf '%s\n' "$t"
