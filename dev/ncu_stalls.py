#!/usr/bin/env python3
"""Summarise an ncu per-SASS-instruction export (`ncu -i R --page source --csv --print-source sass`,
as dev/device/attn_ncu.sh writes it): where one kernel's warps wait.

Prints, for the first kernel in the file:
  - the warp-state samples by stall reason, as a share of all samples;
  - the samples and executed instructions by instruction class (opcode without modifiers:
    HGMMA, MUFU, FFMA, ...), i.e. what the kernel spends its issue slots and its waiting on;
  - the N instructions with the most samples, each with its two main stall reasons.

    python3 dev/ncu_stalls.py attn_sass_forward_kernel.csv [--top 30]
"""
import argparse
import collections
import csv
import sys


NEEDED = ("Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed")


def read_first_kernel(path):
    """Rows (dicts) of the first kernel block of the export; exits with one line when the file
    cannot be read or is not such an export."""
    try:
        rows, header = _first_kernel(path)
    except OSError as e:
        sys.exit(f"{path}: cannot read: {e.strerror or e}")
    except (UnicodeDecodeError, csv.Error):  # a binary file, say
        sys.exit(f"{path}: not a text CSV file: not an ncu --page source --csv export")
    if header is None:
        sys.exit(f"{path}: no 'Address' header row: not an ncu --page source --csv export")
    missing = [k for k in NEEDED if k not in header]
    if missing:
        sys.exit(f"{path}: no column {', '.join(repr(k) for k in missing)}: not an ncu --page source --csv export "
                 f"with the warp-state samples")
    if not rows:
        sys.exit(f"{path}: the first kernel has no instruction rows")
    return rows


def _first_kernel(path):
    """(rows, header) of the first kernel block; header None when there is no 'Address' row."""
    rows, header = [], None
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if rec[0] == "Kernel Name":
                if header is not None:
                    break  # the next kernel starts
                continue
            if rec[0] == "Address":
                header = rec
                continue
            if header is not None:
                rows.append(dict(zip(header, rec)))
    return rows, header


def num(s):
    """A cell as a number: ncu writes counts with thousands separators where the locale (or
    --print-units) asks for them ("1,234"), which float() refuses; an empty cell is 0."""
    try:
        return float(str(s).replace(",", ""))
    except (TypeError, ValueError):
        return 0.0


def opcode(src):
    """'@P0 HGMMA.64x128x16.F32.BF16 R24, ...' -> 'HGMMA'."""
    words = src.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.top < 1:
        ap.error(f"--top {args.top}: must be at least 1")
    rows = read_first_kernel(args.csv)
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    total = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rows)
    if total == 0:
        sys.exit(f"{args.csv}: no warp-state samples")
    by_reason = collections.Counter()
    by_op = collections.defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        for k in reasons:
            by_reason[k] += num(r[k])
        op = opcode(r["Source"])
        by_op[op][0] += num(r["Warp Stall Sampling (All Samples)"])
        by_op[op][1] += num(r["Instructions Executed"])
    insts = sum(v[1] for v in by_op.values())
    print(f"{len(rows)} SASS instructions, {total:.0f} samples, {insts:.0f} warp instructions executed")
    print("\nsamples by stall reason (% of all samples):")
    for k, v in by_reason.most_common():
        if v / total >= 0.005:
            print(f"  {k[6:]:<16} {100 * v / total:5.1f}")
    print("\nby instruction class: % of samples, % of executed warp instructions")
    for op, (s, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:20]:
        print(f"  {op:<10} {100 * s / total:5.1f} " + (f"{100 * n / insts:5.1f}" if insts > 0 else "    -"))   # (an export without SourceCounters)
    print(f"\ntop {args.top} instructions by samples: % of samples, main stall reasons, source")
    for r in sorted(rows, key=lambda r: -num(r["Warp Stall Sampling (All Samples)"]))[: args.top]:
        s = num(r["Warp Stall Sampling (All Samples)"])
        main2 = sorted(((num(r[k]), k[6:]) for k in reasons), reverse=True)[:2]
        why = ", ".join(f"{k} {100 * v / max(s, 1):.0f}%" for v, k in main2 if v > 0)
        print(f"  {100 * s / total:5.2f}  {r['Address'][-5:]}  {why:<32} {r['Source'].strip()[:70]}")


if __name__ == "__main__":
    main()
