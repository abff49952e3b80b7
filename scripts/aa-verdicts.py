#!/usr/bin/env python3
"""aa-verdicts.py: what decided each A/A pair that scripts/aa-pairs.sh stored.

    scripts/aa-verdicts.py DIR [MSTAR [OLD_MSTAR]]

Re-diffs DIR/pair-NN-a.json against pair-NN-b.json with MSTAR (default
bin/mstar) in JSON and prints, per pair: the exit code, the deciding
comparisons, how many were "too noisy", how many would have failed without
the noise rule (worse, significant, over the threshold, enough samples), and
the widest and narrowest noise; with OLD_MSTAR (a build from before), that
build's exit code too.
"""
import json
import os
import subprocess
import sys

d = sys.argv[1]
mstar = sys.argv[2] if len(sys.argv) > 2 else "bin/mstar"
old = sys.argv[3] if len(sys.argv) > 3 else None
# The committed pairs are gzipped (mstar report reads either).
pairs = sorted({f.split("-")[1] for f in os.listdir(d) if f.startswith("pair-") and f.endswith(("-a.json", "-a.json.gz"))})
print("pair exit old_exit deciding too_noisy fail_without_noise_rule max_noise_pct min_noise_pct")
n = ok = old_ok = noisy_pairs = would = 0
for i in pairs:
    a, b = f"{d}/pair-{i}-a.json", f"{d}/pair-{i}-b.json"
    if not os.path.exists(a) and os.path.exists(a + ".gz"):
        a, b = a + ".gz", b + ".gz"
    if not os.path.exists(b):
        continue
    r = subprocess.run([mstar, "report", "diff", "--format", "json", a, b], capture_output=True, text=True)
    if not r.stdout:
        print(i, r.returncode, "-", r.stderr.strip())
        continue
    j = json.loads(r.stdout)
    dec = [v for v in j["verdicts"] if v["decides"] and v.get("base")]
    too_noisy = sum(v["verdict"] == "too noisy" for v in dec)
    fail = sum(v["worse"] and v["significant"] and v["over_threshold"] and v["enough_samples"] for v in dec)
    noise = [max(v["base"]["noise_pct"] or 0, v["new"]["noise_pct"] or 0) for v in dec]
    oc = "-"
    if old:
        oc = subprocess.run([old, "report", "diff", a, b], capture_output=True).returncode
        old_ok += oc == 0
    print(i, r.returncode, oc, len(dec), too_noisy, fail, f"{max(noise, default=0):.1f}", f"{min(noise, default=0):.1f}")
    n += 1
    ok += r.returncode == 0
    noisy_pairs += too_noisy > 0
    would += fail > 0
print(f"pairs {n}: exit 0 in {ok}" + (f"; the old build exit 0 in {old_ok}" if old else "")
      + f"; pairs with a 'too noisy' verdict {noisy_pairs}; pairs that would fail without the noise rule {would}")
