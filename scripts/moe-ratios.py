#!/usr/bin/env python3
"""moe-ratios.py: the ratio table of `mstar bench moe --peers` results documents.

    scripts/moe-ratios.py [--markdown] DOC.json[.gz] ...

One row per (shape, batch): mstar's and triton-ref's median latency, their
ratio (triton-ref us / mstar us, so above 1 is mstar ahead) and cublas-bmm's
time; then how many cells are at or ahead, the range and the geometric mean.
A ratio is printed only where both sides passed their correctness gates.
--markdown prints instead one table per shape as the README quotes it:
mstar's us with its % of floor, triton-ref's us, and the ratio, bold at 1.00
or more.
--targets prints, per cell, the issue's target against what the hardware
allows: the time the target asks for (triton-ref / 1.00; at M >= 1024
triton-ref / 1.20, or the time at 90% of the run's GEMM ceiling where that
is the lower bar, i.e. the longer time), how much faster mstar must get,
and what fraction of that time the cell's floor is (bench moe's floor:
touched weights, x and out once at the read ceiling, or the flops at the
GEMM ceiling, whichever is longer). A target at 100% of the floor or more
cannot be met by any kernel; above ~90% it asks for the ceilings
themselves. Its last column is the other target, at 16 <= M <= 512: the
share of the read ceiling mstar streams the cell's bytes at (95% asked).
"""
import gzip
import json
import math
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def median(metric):
    s = sorted(metric.get("samples") or [])
    return s[len(s) // 2] if s else None


def shape_of(params):
    """The row name: the model (or E/k/H/I of a custom shape), its tp and
    ep, and its routing where it is not uniform, so runs of one model under
    other settings keep their own rows."""
    name = params.get("model", "?")
    if name == "custom":
        name = "E{}k{}H{}I{}".format(*(params.get(k, "?") for k in ("experts", "topk", "hidden", "inter")))
    if params.get("tp", "1") != "1":
        name += "-tp" + params["tp"]
    if params.get("ep", "1") != "1":
        name += "-ep" + params["ep"]
    if params.get("routing", "uniform") != "uniform":
        name += "-" + params["routing"]
    return name


def main(args):
    markdown = "--markdown" in args
    targets = "--targets" in args
    paths = [a for a in args if a not in ("--markdown", "--targets")]
    if markdown and targets:
        print("moe-ratios.py: --markdown and --targets are two different tables: give one", file=sys.stderr)
        return 2
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cells = {}  # (shape, batch) -> impl -> (median us, gates passed, why unmeasured, % floor)
    extra = {}  # ((shape, batch), impl) -> % of the read and GEMM ceilings
    order = []
    for path in paths:
        try:
            doc = load(path)
        except (OSError, ValueError) as e:
            print(f"moe-ratios.py: {path}: {e}", file=sys.stderr)
            return 2
        for r in doc.get("results", []):
            if r.get("name") != "moe":
                continue
            p = r["params"]
            key = (shape_of(p), int(p["batch"]))
            if key not in cells:
                cells[key] = {}
                order.append(key)
            lat = next((m for m in r["metrics"] if m["name"] == "latency"), {})
            floor = next((m for m in r["metrics"] if m["name"] == "pct_floor"), {})
            ok = all(g.get("pass") for g in r.get("gates", []))
            cells[key][p["impl"]] = (median(lat), ok, lat.get("unmeasured", ""), median(floor))
            extra[(key, p["impl"])] = {m["name"]: median(m) for m in r["metrics"]
                                       if m["name"] in ("pct_bw_ceiling", "pct_compute_ceiling")}
    if markdown:
        return print_markdown(order, cells)
    if targets:
        return print_targets(order, cells, extra)
    w = max([18] + [len(k[0]) for k in order])
    print(f"{'shape':{w}s} {'M':>5s} {'mstar us':>10s} {'triton-ref us':>14s} {'ratio':>6s} {'cublas-bmm us':>14s}")
    ratios = []
    for key in order:
        impls = cells[key]
        ms, ok, _, _ = impls.get("mstar", (None, False, "", None))
        tr, tok, why, _ = impls.get("triton-ref", (None, False, "no row", None))
        bm = impls.get("cublas-bmm", (None, False, "", None))[0]
        fmt = lambda v: f"{v:.1f}" if v is not None else "-"
        ratio = "-"
        if ms and tr and ok and tok:
            ratios.append(tr / ms)
            ratio = f"{tr / ms:.2f}"
        note = "" if tr is not None else f"  (triton-ref unmeasured: {why[:60]})"
        note += "" if ok else "  (mstar FAILED its gate)"
        print(f"{key[0]:{w}s} {key[1]:5d} {fmt(ms):>10s} {fmt(tr):>14s} {ratio:>6s} {fmt(bm):>14s}{note}")
    if ratios:
        # Counted on the rounded ratio, as printed.
        at = sum(round(x, 2) >= 1.0 for x in ratios)
        ahead = sum(round(x, 2) > 1.0 for x in ratios)
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"{len(ratios)} cells: {at} at or ahead of triton-ref ({ahead} strictly), "
              f"ratio {min(ratios):.2f}-{max(ratios):.2f}, geometric mean {geo:.3f}")
    return 0


def print_targets(order, cells, extra):
    rows = 0
    w = max([18] + [len(k[0]) for k in order])
    print(f"{'shape':{w}s} {'M':>5s} {'mstar us':>9s} {'% floor':>8s} {'target us':>10s} {'to go':>7s} "
          f"{'floor us':>9s} {'floor/target':>13s} {'% read':>7s}")
    for key in order:
        m = cells[key].get("mstar", (None, False, "", None))
        t = cells[key].get("triton-ref", (None, False, "", None))
        if not (m[0] and t[0] and m[1] and t[1]):
            continue
        ceil = extra.get((key, "mstar"), {})
        want = t[0] / (1.20 if key[1] >= 1024 else 1.00)
        gemm = ceil.get("pct_compute_ceiling")
        if key[1] >= 1024 and gemm:
            # The time at 90% of the GEMM ceiling, where that bar is lower.
            want = max(want, m[0] * gemm / 90)
        go = "met" if m[0] <= want else f"{100 * (1 - want / m[0]):.1f}%"
        floor = m[0] * m[3] / 100 if m[3] else None
        share = f"{100 * floor / want:.0f}%" if floor else "-"
        fl = f"{floor:.1f}" if floor else "-"
        pct = f"{m[3]:.0f}%" if m[3] else "-"
        read = ceil.get("pct_bw_ceiling")
        rd = f"{read:.1f}" if read and 16 <= key[1] <= 512 else "-"
        print(f"{key[0]:{w}s} {key[1]:5d} {m[0]:9.1f} {pct:>8s} {want:10.1f} {go:>7s} {fl:>9s} {share:>13s} {rd:>7s}")
        rows += 1
    if rows == 0:
        print("no cell has an mstar row and a triton-ref row that both passed their gates "
              "(bench moe --peers --triton-peer PATH on a GPU makes them)", file=sys.stderr)
        return 1
    return 0


def print_markdown(order, cells):
    shapes = []
    for shape, _ in order:
        if shape not in shapes:
            shapes.append(shape)
    for shape in shapes:
        batches = [b for s, b in order if s == shape]
        row = lambda name, vals: print(f"| {name} | " + " | ".join(vals) + " |")
        row(f"{shape}, M =", [str(b) for b in batches])
        print("|---|" + "---|" * len(batches))
        ms, tr, ratio = [], [], []
        for b in batches:
            m = cells[(shape, b)].get("mstar", (None, False, "", None))
            t = cells[(shape, b)].get("triton-ref", (None, False, "", None))
            ms.append("-" if m[0] is None else f"{m[0]:.0f}" + ("" if m[3] is None else f" ({m[3]:.0f}%)"))
            tr.append("-" if t[0] is None else f"{t[0]:.0f}")
            if m[0] and t[0] and m[1] and t[1]:
                x = round(t[0] / m[0], 2)
                ratio.append(f"**{x:.2f}**" if x >= 1.0 else f"{x:.2f}")
            else:
                ratio.append("-")
        row("mstar µs (% floor)", ms)
        row("triton-ref µs", tr)
        row("triton-ref / mstar", ratio)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
