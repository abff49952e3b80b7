#!/usr/bin/env python3
"""moe-static-fit.py — which single kernel configuration to put in the static
table for a range of slots per touched expert, from `mstar tune moe` documents.

For every batch of every document whose slots per touched expert (M·topk over
the experts touched, as kernels/moe's perExpert) lie in [LO, HI), each single
(not split) configuration's pass latency is divided by the batch's best (any
configuration, splits included); `pl=1` twins count as their plain twin.
Configurations timed in every such batch are ranked by their worst ratio, then
by the geometric mean: the first is the static pick that stays nearest the
tuned files over those batches. Runs anywhere (no GPU, standard library).

Usage:
  scripts/moe-static-fit.py LO HI DOC... [--top N]
Example (the fit behind ChooseConfigOn's wg rows):
  scripts/moe-static-fit.py 64 128 reports/measured/h200/moe-v25/tune/docs/tune-*.json.gz \\
      reports/measured/h100/moe-v29/tune/docs/tune-*.json.gz
"""
import argparse
import collections
import gzip
import json
import statistics
import sys


def per_expert(experts, topk, m):
    slots = m * topk
    return slots / max(1, min(experts, slots))


def batches(path):
    """(label, M, experts, topk, {config: median µs}) per batch of a document."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    by = collections.defaultdict(dict)
    shape = {}
    for r in doc.get("results", []):
        if r.get("name") != "moe_tune":
            continue
        p = r["params"]
        m = int(p["batch"])
        med = {x["name"]: statistics.median(x["samples"]) for x in r.get("metrics", []) if x.get("samples")}
        if "tune_latency" not in med or med.get("rel_l2", 1) > 0.01:
            continue  # rejected or untimed
        by[m][p["config"]] = med["tune_latency"]
        shape[m] = (int(p["experts"]), int(p["topk"]))
    for m, cs in sorted(by.items()):
        yield f"{path.replace('reports/measured/', '')}:M={m}", m, *shape[m], cs


def plain(config):
    return ",".join(k for k in config.split(",") if k != "pl=1")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lo", type=float)
    ap.add_argument("hi", type=float)
    ap.add_argument("docs", nargs="+")
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args()
    ratios = collections.defaultdict(list)
    cells = 0
    for path in a.docs:
        try:
            rows = list(batches(path))
        except (OSError, ValueError, KeyError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 1
        for label, m, experts, topk, cs in rows:
            if not a.lo <= per_expert(experts, topk, m) < a.hi:
                continue
            cells += 1
            best = min(cs.values())
            singles = {}
            for c, us in cs.items():
                if "+" not in c:
                    singles[plain(c)] = min(singles.get(plain(c), us), us)
            for c, us in singles.items():
                ratios[c].append((us / best, label))
    if cells == 0:
        print(f"no batch at {a.lo:g} to {a.hi:g} slots per expert", file=sys.stderr)
        return 1
    ranked = sorted(
        (max(r for r, _ in rs), statistics.geometric_mean([r for r, _ in rs]), c, rs)
        for c, rs in ratios.items()
        if len(rs) == cells
    )
    print(f"{cells} batches at {a.lo:g} <= slots per expert < {a.hi:g}; "
          f"{len(ranked)} single configurations timed in all of them")
    for worst, geo, c, rs in ranked[: a.top]:
        label = max(rs)[1]
        print(f"  worst {worst:.3f} ({label})  geomean {geo:.3f}  {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
