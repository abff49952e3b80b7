#!/usr/bin/env python3
"""spill-flips.py RUN.json[.gz]... — across repeated spill-matrix runs, each
cell's outcome per run (PASS, FAIL, or CANNOT-TELL when a gate could not
tell and none failed), the cells that flipped between PASS and FAIL, and
the device partial/uneven moves as % of their ceilings (median of runs).
Exit 1 when a cell flipped."""
import gzip
import json
import statistics
import sys
from collections import defaultdict


def cell_of(r):
    p = r["params"]
    return "%s/%s/%s" % (p.get("scenario", r["name"]), p.get("tier", "?"), p.get("size", "?"))


def main(paths):
    outcome = defaultdict(dict)  # cell -> run -> PASS|FAIL|CANNOT-TELL
    pct = defaultdict(list)      # "partial/device fraction=25 restore" -> [% per run]
    for run, path in enumerate(paths):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            doc = json.load(f)
        for r in doc.get("results", []):
            if r["name"] == "spill-ceiling" or "scenario" not in r.get("params", {}):
                continue
            c = cell_of(r)
            gates = r.get("gates", [])
            failed = any(not g["pass"] and not g.get("undecided") for g in gates)
            unsure = any(g.get("undecided") for g in gates)
            prev = outcome[c].get(run, "PASS")
            now = "FAIL" if failed else ("CANNOT-TELL" if unsure else "PASS")
            if prev == "FAIL" or now == "FAIL":
                now = "FAIL"
            elif prev == "CANNOT-TELL":
                now = "CANNOT-TELL"
            outcome[c][run] = now
            p = r["params"]
            if p.get("tier") == "device" and p.get("scenario") in ("partial", "uneven"):
                for m in r.get("metrics", []):
                    if m["name"] in ("spill_of_ceiling", "restore_of_ceiling") and m.get("samples"):
                        key = "%s/device/%s %s%s" % (p["scenario"], p.get("size"), m["name"].split("_")[0],
                                                    " fraction=" + p["fraction"] if "fraction" in p else "")
                        pct[key].append(statistics.median(m["samples"]))
    flips = 0
    print("%-34s %s" % ("cell", " ".join("run%d" % (i + 1) for i in range(len(paths)))))
    for c in sorted(outcome):
        runs = [outcome[c].get(i, "-") for i in range(len(paths))]
        flipped = "PASS" in runs and "FAIL" in runs
        flips += flipped
        print("%-34s %s%s" % (c, " ".join("%-11s" % x for x in runs), "  <- FLIPPED" if flipped else ""))
    print("\ncells flipping between PASS and FAIL: %d of %d" % (flips, len(outcome)))
    if pct:
        print("\ndevice moves, % of the same-size copy ceiling (median of each run's median):")
        for k in sorted(pct):
            print("  %-44s %6.1f%%  (runs: %s)" % (k, statistics.median(pct[k]), ", ".join("%.1f" % v for v in pct[k])))
    return 1 if flips else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
