#!/usr/bin/env python3
"""ncu-sass-top.py FILE [N] — per kernel, the N SASS instructions (default 10)
with the most warp-stall samples and their top stall reasons, from the source
page of an Nsight Compute report with the SourceCounters section:

    ncu --import R.ncu-rep --page source --csv --print-source sass > R-sass.csv

(scripts/moe-ncu-h200.sh writes <case>-sass.csv). A kernel printed twice in
the page is read once."""
import csv
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 10
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    seen, i = set(), 0
    while i < len(rows):
        if not rows[i] or rows[i][0] != "Kernel Name":
            i += 1
            continue
        name, head = rows[i][1], rows[i + 1]
        i += 2
        body = []
        while i < len(rows) and rows[i] and rows[i][0] != "Kernel Name":
            body.append(rows[i])
            i += 1
        if name in seen or "Warp Stall Sampling (All Samples)" not in head:
            continue
        seen.add(name)
        ci, si = head.index("Warp Stall Sampling (All Samples)"), head.index("Source")
        num = lambda b, k: float(b[k] or 0)
        total = sum(num(b, ci) for b in body) or 1
        reasons = [k for k, c in enumerate(head) if c.startswith("stall_") and "(Not" not in c]
        print(f"== {name}: {len(body)} instructions, {total:.0f} stall samples")
        for b in sorted(body, key=lambda b: -num(b, ci))[:top]:
            why = sorted(((num(b, k), head[k][6:]) for k in reasons), reverse=True)[:3]
            print(f"  {num(b, ci) / total:6.1%}  {b[si].strip()[:64]:64s}  " +
                  ", ".join(f"{n} {v:.0f}" for v, n in why if v > 0))


if __name__ == "__main__":
    main()
