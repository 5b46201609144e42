#!/usr/bin/env python3
"""Where one training step's GPU time goes, per kernel, from an ncu CSV.

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \\
        ./train_gpt2cu --bench -b 64 --bench-warmup 2 --bench-steps 1 --bench-profile > step.csv
    python3 dev/kernel_profile.py step.csv [--by-shape]

ncu runs the kernels one at a time, so the sum is the step's kernel time without overlap (the
trainer's own step time is the honest total; this is its breakdown). Kernels are grouped by name,
or by name and grid with --by-shape (the GEMMs of the different layers differ only in grid).
"""
import csv, sys, io, collections

def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    by_shape = "--by-shape" in sys.argv
    text = open(args[0], errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{args[0]}: no ncu CSV header (\"ID\",...) found")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    total = collections.defaultdict(float)
    count = collections.Counter()
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0]
        if len(name) > 70:
            name = name[:67] + "..."
        key = (name, r.get("Grid Size", "")) if by_shape else (name, "")
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "ns": 1e-6, "us": 1e-3, "ms": 1.0}.get(r.get("Metric Unit", "nsecond"), 1e-6)
        total[key] += float(r["Metric Value"].replace(",", "")) * scale
        count[key] += 1
    s = sum(total.values())
    print(f"{'kernel':72s} {'grid':>16s} {'calls':>5s} {'ms':>8s} {'%':>6s}")
    for key, ms in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"{key[0]:72s} {key[1]:>16s} {count[key]:5d} {ms:8.3f} {100 * ms / s:6.1f}")
    print(f"{'total':72s} {'':>16s} {sum(count.values()):5d} {s:8.3f}")

if __name__ == "__main__":
    main()
