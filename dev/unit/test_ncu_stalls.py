"""Unit test of dev/ncu_stalls.py on a small synthetic export in ncu's `--page source --csv` format
(no GPU, no ncu), and its one-line errors for a missing file, a directory, a binary file and an
export without the columns or rows it reads."""
import os
import re
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from check import check, finish  # noqa: E402
from ncu_stalls import opcode, read_first_kernel  # noqa: E402


HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
          '"stall_wait","stall_mio","stall_wait (Not Issued)"\n')
def kernel(name, rows):
    return f'"Kernel Name","{name}",\n' + HEADER + "".join(
        f'"{a}","{src}","{s}","{n}","{w}","{m}","0"\n' for a, src, s, n, w, m in rows)

first = kernel("k1(int)", [("0x10", "      MUFU.EX2 R1, R2", 30, 100, 10, 20),
                            ("0x20", "@!P0  BRA 0x10", 10, 50, 10, 0),
                            ("0x30", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ", 60, 10, 60, 0)])
second = kernel("k2(int)", [("0x10", "EXIT", 999, 1, 999, 0)])
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "sass.csv")
    with open(path, "w") as f:
        f.write(first + second)
    rows = read_first_kernel(path)
    check(len(rows) == 3, "only the first kernel's rows are read")
    check(rows[0]["Instructions Executed"] == "100", "columns by header name")
    check(opcode("@!P0  BRA 0x10") == "BRA" and opcode("MUFU.EX2 R1, R2") == "MUFU", "opcode: predicate and modifiers dropped")
    tool = os.path.join(os.path.dirname(__file__), "..", "ncu_stalls.py")
    out = subprocess.run([sys.executable, tool, path, "--top", "2"], capture_output=True, text=True)
    check(out.returncode == 0 and "100 samples" in out.stdout, "summary: total samples of the first kernel")
    has = lambda pattern: re.search(pattern, out.stdout, re.M) is not None  # noqa: E731
    check(has(r"^\s*wait\s+80\.0$") and has(r"^\s*mio\s+20\.0$"), "summary: shares by stall reason")
    check(has(r"^\s*HGMMA\s+60\.0\s+6\.2$"), "summary: shares by instruction class (samples, instructions)")
    # counts written with thousands separators ("1,234") are numbers, not 0
    sep = os.path.join(d, "sep.csv")
    with open(sep, "w") as f:
        f.write(kernel("k1(int)", [("0x10", "MUFU.EX2 R1, R2", "1,500", "2,000", "1,500", 0),
                                   ("0x20", "EXIT", 500, 10, 500, 0)]))
    out = subprocess.run([sys.executable, tool, sep], capture_output=True, text=True)
    check(out.returncode == 0 and "2000 samples" in out.stdout, "counts with thousands separators summed as numbers")
    bad = os.path.join(d, "bad.csv")
    with open(bad, "w") as f:
        f.write("not,an,ncu,export\n")
    out = subprocess.run([sys.executable, tool, bad], capture_output=True, text=True)
    check(out.returncode != 0 and "not an ncu" in out.stderr, "a file that is not an export: one line, non-zero exit")
    binary = os.path.join(d, "binary.csv")
    with open(binary, "wb") as f:
        f.write(b"\xff\xfe\x00\x81" + bytes(range(256)) * 8)
    no_samples = os.path.join(d, "no_samples.csv")
    with open(no_samples, "w") as f:
        f.write('"Kernel Name","k1(int)",\n"Address","Source"\n"0x10","EXIT"\n')
    no_rows = os.path.join(d, "no_rows.csv")
    with open(no_rows, "w") as f:
        f.write(kernel("k1(int)", []))
    for what, args, says in [("missing file", [os.path.join(d, "nope.csv")], "nope.csv: cannot read: No such file or directory"),
                             ("directory", [d], f"{d}: cannot read: Is a directory"),
                             ("binary file", [binary], "not an ncu --page source --csv export"),
                             ("no sample columns", [no_samples], "no column 'Warp Stall Sampling (All Samples)'"),
                             ("header without rows", [no_rows], "the first kernel has no instruction rows")]:
        out = subprocess.run([sys.executable, tool] + args, capture_output=True, text=True)
        check(out.returncode == 1 and not out.stdout and out.stderr.count("\n") == 1 and says in out.stderr,
              f"{what}: one line, exit 1 ({out.stderr.strip()})")
    out = subprocess.run([sys.executable, tool, "--help"], capture_output=True, text=True)
    check(out.returncode == 0 and out.stdout.startswith("usage:") and not out.stderr, "--help: usage, exit 0")
finish()
