#!/usr/bin/env bash
# submit.sh N OUT_DIR SUITE [FLAGS...] — submits N shards of an mstar suite
# as a Slurm array job (mstar-shards.sbatch, one GPU per task), then a job
# that merges them once all have ended, into OUT_DIR/merged.json. Extra
# sbatch options (partition, account, time) go in SBATCH_* variables, as
# sbatch reads them. Prints the two job ids.
#   scripts/slurm/submit.sh 8 /shared/q30 bench moe --model qwen3-30b-a3b --device cuda:0
set -euo pipefail
if [ $# -lt 3 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
	echo "usage: submit.sh N OUT_DIR SUITE [FLAGS...]   (N: how many shards, from 1)" >&2
	exit 2
fi
n=$1 dir=$2
shift 2
mkdir -p "$dir"
export MSTAR_SHARDS=$n MSTAR_OUT_DIR=$dir MSTAR_ARGS="$*"
here=$(cd "$(dirname "$0")" && pwd)
jid=$(sbatch --parsable --array=1-"$n" --export=ALL --output="$dir/shard-%a.log" "$here/mstar-shards.sbatch")
echo "shards: job $jid"
merge="${MSTAR:-mstar} report merge -o $(printf %q "$dir/merged.json") $(printf %q "$dir")/shard-*-of-$n.json"
mid=$(sbatch --parsable --dependency=afterany:"$jid" --job-name=mstar-merge --ntasks=1 --export=ALL --output="$dir/merge.log" --wrap "$merge")
echo "merge: job $mid (writes $dir/merged.json; its log is $dir/merge.log)"
