#!/usr/bin/env bash
# Soak of issue #15 item 1: N cycles of "start `mstar arena stress`, SIGKILL
# the whole run (its process group and every worker, as a cgroup kill does)
# at a random moment, `mstar arena clean`", then count what is left. Uses a
# private --shm-dir and $TMPDIR, so other runs on the machine are untouched.
#
#   scripts/stress-kill-soak.sh [cycles (20)] [mstar binary (bin/mstar)]
set -u
cycles=${1:-20}
mstar=${2:-bin/mstar}
base=$(mktemp -d /dev/shm/mstar-soak-XXXXXX)
export TMPDIR=$(mktemp -d /tmp/mstar-soak-tmp-XXXXXX)
shm=$base
trap 'rm -rf "$base" "$TMPDIR"' EXIT

alive() { # a pid that exists and is not a zombie whose threads have all exited
  local s
  s=$(cut -d')' -f2 "/proc/$1/stat" 2>/dev/null | awk '{print $1}') || return 1
  [ -n "$s" ] || return 1
  [ "$s" != Z ] || [ "$(ls "/proc/$1/task" 2>/dev/null | wc -l)" -gt 1 ]
}

total_files=0 total_dirs=0 killed_workers=0 removed=0
for i in $(seq 1 "$cycles"); do
  setsid "$mstar" arena stress --duration 1m --producers 2 --consumers 2 --max-size 1MiB \
    --segment-size 4MiB --max-segments 2 --shm-dir "$shm" >/dev/null 2>&1 &
  parent=$!
  sleep "$(awk -v s=$RANDOM 'BEGIN{srand(s); printf "%.2f", 0.05 + rand()*2.5}')"
  # All at once, as a cgroup kill: stopped first, so that no worker sees its
  # parent die and stops in order before its own SIGKILL lands.
  kill -STOP -- "-$parent" 2>/dev/null
  workers=$(ps -o pid= --ppid "$parent" 2>/dev/null | tr -d ' ')
  kill -STOP $workers 2>/dev/null
  kill -9 -- "-$parent" $workers 2>/dev/null
  wait "$parent" 2>/dev/null
  for w in $workers; do
    killed_workers=$((killed_workers + 1))
    for _ in $(seq 1 3000); do alive "$w" || break; sleep 0.01; done
  done
  out=$("$mstar" arena clean --shm-dir "$shm")
  removed=$((removed + $(grep -c '^removed  ' <<<"$out")))
  files=$(find "$shm" "$TMPDIR" -mindepth 1 ! -type d | wc -l)
  dirs=$(find "$shm" "$TMPDIR" -mindepth 1 -type d | wc -l)
  total_files=$((total_files + files)) total_dirs=$((total_dirs + dirs))
  echo "cycle $i: killed $(wc -w <<<"$workers") workers, clean: $(tail -1 <<<"$out"); left: $files files, $dirs directories"
done
echo "soak: $cycles cycles, $killed_workers workers killed, $removed entries removed by clean; left in total: $total_files files, $total_dirs directories"
[ "$total_files" -eq 0 ] && [ "$total_dirs" -eq 0 ]
