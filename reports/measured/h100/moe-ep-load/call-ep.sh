#!/usr/bin/env bash
# call-ep.sh — the A/B this folder records (run twice on one H100 in the
# twenty-eighth session, as kernels/moe/next/call-ep.sh): main at 28143c7
# (bin/mstar-main; bench's picks are the same code at d0d72cd) against
# d0d72cd plus ep-load.patch (bin/mstar-vep: under
# --ep N the static table chose at the rank's load, M/N tokens, everywhere),
# static table only (an empty config folder), both builds alternated per
# cell. Main now takes the rank's load in the table's tc range only
# (moe.ChooseConfigOnRank), from this A/B. To rerun it, rebuild the two
# sides from git history (ep-load.patch is in d0d72cd's kernels/moe/next):
#   go build -ldflags='-s -w' -o bin/mstar-main ./cmd/mstar       # the A side
#   ... bin/mstar-vep                                               # the B side
#   tar cJf .dev/bins-ep.tar.xz bin/mstar-main bin/mstar-vep
# There (carry .dev/bins-ep.tar.xz):
#   OUT=$OUT [DEADLINE=480] bash reports/measured/h100/moe-ep-load/call-ep.sh run
# Outputs: $OUT/ep.tgz (documents, logs, ab.txt: per cell each side's
# median µs, its config, and new/old).
set -u
[ "${1:-}" = run ] && [ -n "${OUT:-}" ] || {
	echo "usage: OUT=DIR $0 run   (on a GPU machine; ~200 s)" >&2
	exit 2
}
cd "$(dirname "$0")/../../../.."
read -ra sides <<<"${SIDES:-main vep}"
[ -x "bin/mstar-${sides[1]}" ] || tar xJf .dev/bins-ep.tar.xz || { echo "$0: no .dev/bins-ep.tar.xz (see the head of $0)" >&2; exit 2; }
G=/tmp/ep; rm -rf $G; mkdir -p $G/empty
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | tee $G/gpu.txt
# BATCH, CELLS (';'-separated) and SIDES (the builds bin/mstar-SIDE) name
# another check; the defaults are this folder's A/B.
B=${BATCH:-64,256,1024,4096}
IFS=';' read -ra cells <<<"${CELLS:-deepseek-v3 --tp 8 --ep 4;qwen3-30b-a3b --ep 4;deepseek-v3 --tp 8 --ep 8}"
for r in 1 2; do
	for k in "${!cells[@]}"; do
		for side in "${sides[@]}"; do
			[ $SECONDS -gt ${DEADLINE:-480} ] && break 3
			MSTAR_MOE_CONFIG_DIR=$G/empty timeout 90 bin/mstar-$side bench moe --model ${cells[$k]} --batch $B \
				--device cuda:0 --out $G/c$k-$side-$r.json > $G/c$k-$side-$r.txt 2>&1
			echo "cell $k (${cells[$k]}) $side round $r: rc=$? [$SECONDS s]"
		done
	done
done
# Per cell and batch: each side's median over its rounds, the config, new/old.
python3 - "$G" "${sides[0]}" "${sides[1]}" > $G/ab.txt <<'PY'
import json, glob, sys, statistics as st
g = sys.argv[1]
rows = {}
for p in glob.glob(g + "/c*-*-*.json"):
    k, side, _ = p.rsplit("/", 1)[1][:-5].split("-")
    for r in json.load(open(p))["results"]:
        if r["name"] != "moe":
            continue
        lat = next(m for m in r["metrics"] if m["name"] == "latency")
        key = (k, int(r["params"]["batch"]))
        d = rows.setdefault(key, {}).setdefault(side, {"us": [], "cfg": r["params"].get("config", "")})
        d["us"].append(st.median(lat["samples"]))
print(f"{'cell':4} {'M':>5} {'A us':>9} {'B us':>9} {'B/A':>8}  configs (A | B)", sys.argv[2:])
for (k, m), d in sorted(rows.items()):
    a, b = d.get(sys.argv[2]), d.get(sys.argv[3])
    if not a or not b:
        continue
    ma, mb = st.median(a["us"]), st.median(b["us"])
    print(f"{k:4} {m:5} {ma:9.1f} {mb:9.1f} {mb/ma:8.3f}  {a['cfg']} | {b['cfg']}")
PY
cat $G/ab.txt
gzip -f $G/*.json
tar czf "$OUT/ep.tgz" -C /tmp ep
