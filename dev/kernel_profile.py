#!/usr/bin/env python3
"""Where one training step's GPU time goes, per kernel, from an ncu CSV.

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \\
        ./train_gpt2cu --bench -b 64 --bench-warmup 2 --bench-steps 1 --bench-profile > step.csv
    python3 dev/kernel_profile.py step.csv [--by-shape]

ncu runs the kernels one at a time, so the sum is the step's kernel time without overlap (the
trainer's own step time is the honest total; this is its breakdown). Kernels are grouped by name,
or by name and grid with --by-shape (the GEMMs of the different layers differ only in grid).
"""
import argparse, csv, sys, io, collections

UNITS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3, "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}  # -> ms


def read_csv(path):
    """The rows of the ncu CSV in path (whatever ncu printed before its header skipped); exits with
    one line when the file cannot be read or holds no ncu CSV."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"{path}: cannot read: {e.strerror or e}")
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{path}: no ncu CSV header (\"ID\",...) found")
    return list(csv.DictReader(io.StringIO(text[start:])))


def kernel_times(rows, by_shape, path):
    """{(kernel name, grid or ""): ms} and {same key: calls} over the gpu__time_duration rows."""
    total = collections.defaultdict(float)
    count = collections.Counter()
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit") or "nsecond"
        if unit not in UNITS:
            sys.exit(f"{path}: a gpu__time_duration.sum row in an unknown unit '{unit}' (ID {r.get('ID')})")
        try:
            name = r["Kernel Name"].split("(")[0]
            ms = float(r["Metric Value"].replace(",", "")) * UNITS[unit]
        except (KeyError, AttributeError, ValueError):
            sys.exit(f"{path}: a gpu__time_duration.sum row without a kernel name or a number (ID {r.get('ID')})")
        key = (name, r.get("Grid Size") or "") if by_shape else (name, "")
        total[key] += ms
        count[key] += 1
    return total, count


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("csv", help="ncu --csv output with the gpu__time_duration.sum metric")
    ap.add_argument("--by-shape", action="store_true", help="group by kernel name and grid, not by name alone")
    args = ap.parse_args()
    total, count = kernel_times(read_csv(args.csv), args.by_shape, args.csv)
    if not total:
        sys.exit(f"{args.csv}: no gpu__time_duration.sum rows (ncu --metrics gpu__time_duration.sum)")
    s = sum(total.values())
    # The kernels are grouped by their whole names (cuBLAS' differ often only at the end: grouped by a
    # shortened name, two kernels were one row); a long name is shortened where it is printed, unless
    # another's would read the same, and then both are printed whole.
    short = {name: name if len(name) <= 70 else name[:67] + "..." for name, _ in total}
    alike = collections.Counter(short.values())     # (short has each kernel once, whatever its grids)
    print(f"{'kernel':72s} {'grid':>16s} {'calls':>5s} {'ms':>8s} {'%':>6s}")
    for key, ms in sorted(total.items(), key=lambda kv: -kv[1]):
        name = short[key[0]] if alike[short[key[0]]] == 1 else key[0]
        print(f"{name:72s} {key[1]:>16s} {count[key]:5d} {ms:8.3f} {100 * ms / s if s > 0 else 0.0:6.1f}")
    print(f"{'total':72s} {'':>16s} {sum(count.values()):5d} {s:8.3f}")


if __name__ == "__main__":
    main()
