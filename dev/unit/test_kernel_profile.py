"""Unit test of dev/kernel_profile.py on a small synthetic ncu CSV (no GPU, no ncu): the per-kernel
table by name and by name and grid (time units converted, ncu's thousands separators read), --help,
and one line and a non-zero exit for a missing file, a directory, a file that is not an ncu CSV, one
without timing rows and one whose time is not a number."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from check import check, finish  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernel_profile.py")
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')


def row(i, kernel, grid, unit, value, metric="gpu__time_duration.sum"):
    return f'"{i}","1","train_gpt2cu","h","{kernel}","1","7","(128,1,1)","{grid}","0","9.0","metrics","{metric}","{unit}","{value}"\n'


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def table(out):
    """{(kernel, grid): (calls, ms, %)} of the printed table."""
    return {(m.group(1), m.group(2) or ""): (int(m.group(3)), float(m.group(4)), float(m.group(5)))
            for m in re.finditer(r"^(\S+) +(\(\S+\))? +(\d+) +([0-9.]+) +([0-9.]+)$", out, re.M)}


with tempfile.TemporaryDirectory() as tmp:
    def write(name, text, mode="w"):
        path = os.path.join(tmp, name)
        with open(path, mode) as f:
            f.write(text)
        return path

    step = write("step.csv", "==PROF== Connected to process 1\n" + HEADER
                 + row(0, "matmul_forward(float*, int)", "(64,1,1)", "usecond", "1,500.00")
                 + row(1, "matmul_forward(float*, int)", "(32,1,1)", "nsecond", "500000")
                 + row(2, "layernorm_forward(float*)", "(32,1,1)", "msecond", "0.5")
                 + row(3, "layernorm_forward(float*)", "(32,1,1)", "", "7", metric="sm__cycles_elapsed.avg"))
    rc, out, err = run(step)
    t = table(out)
    check(rc == 0 and t == {("matmul_forward", ""): (2, 2.0, 80.0), ("layernorm_forward", ""): (1, 0.5, 20.0)}
          and re.search(r"^total +3 +2\.500$", out, re.M) is not None, f"by name: calls, ms (units converted), % ({t})")
    rc, out, err = run(step, "--by-shape")
    t = table(out)
    check(rc == 0 and t.get(("matmul_forward", "(64,1,1)")) == (1, 1.5, 60.0) and t.get(("matmul_forward", "(32,1,1)")) == (1, 0.5, 20.0),
          f"--by-shape: a row per kernel and grid ({t})")

    # two kernels whose names differ only past the 67 characters the table shows (cuBLAS' names end in
    # their variant): two rows, each with its own calls and time, not one row of both (the name was
    # shortened before the kernels were grouped); each shown whole, as the shortened names would be alike
    k1 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"
    k2 = k1.replace("warpgroupsize1x1x1", "warpgroupsize2x1x1")
    k3 = "x" * 80 + "_kernel"
    long_names = write("long.csv", HEADER + row(0, k1, "(8,1,1)", "msecond", "1") + row(1, k2, "(8,1,1)", "msecond", "3")
                       + row(2, k2, "(8,1,1)", "msecond", "1") + row(3, k3 + "(int)", "(8,1,1)", "msecond", "5"))
    for opts in ([], ["--by-shape"]):
        rc, out, err = run(long_names, *opts)
        t = table(out)
        grid = "(8,1,1)" if opts else ""
        check(rc == 0 and t.get((k1, grid)) == (1, 1.0, 10.0) and t.get((k2, grid)) == (2, 4.0, 40.0)
              and t.get((k3[:67] + "...", grid)) == (1, 5.0, 50.0), f"{' '.join(opts) or 'by name'}: kernels alike in their first 67 "
              f"characters are rows of their own, shown whole; a long name alone shortened ({t})")

    rc, out, err = run("--help")
    check(rc == 0 and out.startswith("usage:") and "--by-shape" in out and not err, "--help: usage, exit 0")
    rc, out, err = run()
    check(rc == 2 and not out and err.strip().splitlines()[-1].endswith("the following arguments are required: csv"),
          "no argument: the usage error, exit 2")
    binary = write("binary.bin", bytes(range(256)) * 4, mode="wb")
    no_rows = write("norows.csv", HEADER + row(0, "k(int)", "(1,1,1)", "", "7", metric="sm__cycles_elapsed.avg"))
    no_value = write("novalue.csv", HEADER + row(4, "k(int)", "(1,1,1)", "nsecond", "n/a"))
    odd_unit = write("oddunit.csv", HEADER + row(5, "k(int)", "(1,1,1)", "cycle", "7"))
    for what, path, says in [("missing file", os.path.join(tmp, "nope.csv"), "nope.csv: cannot read: No such file or directory"),
                             ("directory", tmp, f"{tmp}: cannot read: Is a directory"),
                             ("binary file", binary, "binary.bin: no ncu CSV header"),
                             ("no timing rows", no_rows, "norows.csv: no gpu__time_duration.sum rows"),
                             ("a time that is not a number", no_value, "novalue.csv: a gpu__time_duration.sum row without a "
                              "kernel name or a number (ID 4)"),
                             ("a time in an unknown unit", odd_unit, "oddunit.csv: a gpu__time_duration.sum row in an unknown unit 'cycle' (ID 5)")]:
        rc, out, err = run(path)
        check(rc == 1 and not out and err.count("\n") == 1 and says in err, f"{what}: one line, exit 1 ({err.strip()})")
finish()
