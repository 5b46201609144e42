"""Unit test of dev/scaling.py's failed runs, with a stand-in trainer (no GPU): when no run is
measured, one closing line, a non-zero exit and the earlier CSV / markdown left as they were; when
some runs fail, the others written, then one line counting the failures and a non-zero exit; each
failure keeps its FAILED detail; the runs a failed 1-GPU run keeps from starting are counted too; a RESULT line without a field the table needs is a failed run, and so
is a run without a RESULT line, which its FAILED line says even where it exited 0; a --bin that is
not a program is one argument error before any run."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from standins import TRAINER_STANDIN, check, finish, gpu_tools, write  # noqa: E402

SCALING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scaling.py")
EARLIER = {".csv": "model,gpus\nd12,1\n", ".md": "| the earlier table |\n"}


def run(tmp, fail="", extra=(), env=None):
    """scaling.py over blocks 512 and 1024 (global mode, DDP) with the stand-in, its output at
    tmp/out.* where the earlier results lie; returns the CompletedProcess."""
    for ext, text in EARLIER.items():
        write(os.path.join(tmp, "out" + ext), text)
    args = ["--bin", os.path.join(tmp, "standin"), "--gpus", "1", "--blocks", "512,1024", "--modes", "global",
            "--types", "ddp", "--predict", "8,16", "--link-gbs", "50", "--out", os.path.join(tmp, "out")] + list(extra)
    e = dict(os.environ, STANDIN_FAIL_T=fail, MPLBACKEND="Agg", **(env or {}))
    return subprocess.run([sys.executable, SCALING] + args, capture_output=True, text=True, env=e)


def earlier_kept(tmp):
    return all(open(os.path.join(tmp, "out" + ext)).read() == text for ext, text in EARLIER.items())


def csv_rows(tmp):
    with open(os.path.join(tmp, "out.csv")) as f:
        return f.read().splitlines()[1:]


with tempfile.TemporaryDirectory() as tmp:
    write(os.path.join(tmp, "standin"), TRAINER_STANDIN, exe=True)
    out = os.path.join(tmp, "out")

    # every run fails (a machine without a GPU): nothing written, one closing line, non-zero
    p = run(tmp, fail="all")
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    check(p.returncode == 1 and last == f"scaling.py: no run measured (2 failed, see FAILED above): {out}.csv, .md and .png not written",
          "every run failed: one closing line naming the outputs, exit 1", p.stdout + p.stderr)
    check(earlier_kept(tmp) and not os.path.exists(out + ".png"), "every run failed: the earlier CSV and markdown kept, no PNG")
    check(p.stderr.count("  FAILED: ") == 2 and p.stderr.count("no CUDA-capable device") == 2
          and "stand-in output before the error" in p.stderr, "every run failed: each FAILED with its command and output", p.stderr)
    check("|" not in p.stdout and "predicted" not in p.stdout, "every run failed: no table, no predictions", p.stdout)

    # one block fails: the other's rows written, then the count of failures, non-zero
    p = run(tmp, fail="512")
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    check(p.returncode == 1 and last == f"scaling.py: 1 of 2 runs failed (see FAILED above); the 1 measured are in {out}.csv and .md",
          "one run of two failed: one closing line counting it, exit 1", p.stdout + p.stderr)
    rows = csv_rows(tmp)
    check(len(rows) == 1 and rows[0].startswith("d12,1,1024,global,") and "| d12 | 1 | 1024 |" in open(out + ".md").read(),
          "one run of two failed: the measured row written to the CSV and markdown", rows)
    check(p.stderr.count("  FAILED: ") == 1 and " -t 512 " in p.stderr and "predicted    8 GPUs T=1024 global" in p.stdout
          and "T=512" not in p.stdout, "one run of two failed: its FAILED detail; the other block's predictions", p.stdout + p.stderr)

    # 2 GPUs, the ZeRO-1 run fails, no probe program: the other rows written, the failure counted
    p = run(tmp, extra=["--gpus", "1,2", "--types", "ddp,zero1", "--blocks", "1024", "--probe", os.path.join(tmp, "none")],
            env=dict(PATH=gpu_tools(tmp), STANDIN_FAIL_ZERO="1"))
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    check(p.returncode == 1 and last.startswith("scaling.py: 1 of 3 runs failed") and len(csv_rows(tmp)) == 2
          and "probe 2 GPUs P2P_DISABLE=0: failed: its rows get no prediction" in p.stdout and "Traceback" not in p.stderr,
          "2 GPUs, ZeRO-1 failed, no probe program: 2 rows written, 1 failure counted, exit 1", p.stdout + p.stderr)

    # 2 GPUs, block 512's 1-GPU run fails: its 2-GPU runs are not started (no row to compare them
    # with); the closing line counts them with the failure, as rows the table misses (it said
    # "1 of 4 runs failed" of 6 rows, 3 missing)
    p = run(tmp, fail="512", extra=["--gpus", "1,2", "--types", "ddp,zero1", "--probe", os.path.join(tmp, "none")],
            env=dict(PATH=gpu_tools(tmp)))
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    check(p.returncode == 1 and len(csv_rows(tmp)) == 3 and "  T=512 global: 2 runs on more GPUs not started: no 1-GPU row to compare them with" in p.stderr
          and last == f"scaling.py: 1 of 4 runs failed, 2 more not started (their 1-GPU run failed) (see FAILED above); the 3 measured are in {out}.csv and .md",
          "a block's 1-GPU run failed: its other runs counted as not started", p.stdout + p.stderr)
    p = run(tmp, fail="all", extra=["--gpus", "1,2", "--types", "ddp,zero1", "--probe", os.path.join(tmp, "none")],
            env=dict(PATH=gpu_tools(tmp)))
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    check(p.returncode == 1 and last == f"scaling.py: no run measured (2 failed, 4 more not started (their 1-GPU run failed), see FAILED above): "
          f"{out}.csv, .md and .png not written", "every 1-GPU run failed: the runs not started counted too", p.stderr)

    # every run measured: exit 0, no closing failure line
    p = run(tmp)
    check(p.returncode == 0 and len(csv_rows(tmp)) == 2 and "failed" not in p.stderr and "FAILED" not in p.stderr,
          "every run measured: both rows written, exit 0", p.stdout + p.stderr)

    # a --bin that is not a program: one argument error, before any run, nothing written
    for what, b in [("missing", os.path.join(tmp, "nope")), ("a directory", tmp)]:
        p = run(tmp, extra=["--bin", b])
        check(p.returncode == 2 and p.stderr.strip().splitlines()[-1] == f"scaling.py: error: --bin {b}: not an executable file"
              and not p.stdout and earlier_kept(tmp), f"--bin {what}: one argument error, exit 2, nothing written", p.stdout + p.stderr)

    # lists of counts that are not: one argument error naming the option, before any run
    for opt, value, why in [("--blocks", "12x", "'12x' is not a comma-separated list of whole numbers"),
                            ("--gpus", "0,2", "'0,2': every number must be at least 1"),
                            ("--predict", "8;16", "'8;16' is not a comma-separated list of whole numbers")]:
        p = run(tmp, extra=[opt, value])
        check(p.returncode == 2 and p.stderr.strip().splitlines()[-1] == f"scaling.py: error: argument {opt}: {why}"
              and not p.stdout and earlier_kept(tmp), f"{opt} {value}: one argument error, exit 2, nothing written", p.stdout + p.stderr)
    p = run(tmp, extra=["--modes", "seeds"])
    check(p.returncode == 2 and p.stderr.strip().splitlines()[-1] == "scaling.py: error: --modes seeds: seed and/or global, comma-separated",
          "--modes seeds: one argument error", p.stdout + p.stderr)

# a RESULT line without a field the table needs, or with it not a number (a line cut short, another
# rank's output in it): that run FAILED, one line saying which field, the other block's row written
# (it was a KeyError, the sweep's measured rows lost); text that is no field (no "=") is passed over
with tempfile.TemporaryDirectory() as tmp:
    write(os.path.join(tmp, "standin"), TRAINER_STANDIN.replace(
        "exposed_comm_pct=0.00 ", "{os.environ['STANDIN_PCT'] if T == 512 else 'exposed_comm_pct=0.00 '}"), exe=True)
    out = os.path.join(tmp, "out")
    for what, pct, why in [("no exposed_comm_pct", "", "the RESULT line has no number for exposed_comm_pct"),
                           ("exposed_comm_pct=n/a", "exposed_comm_pct=n/a ", "the RESULT line has no number for exposed_comm_pct")]:
        p = run(tmp, env=dict(STANDIN_PCT=pct))
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        check(p.returncode == 1 and "Traceback" not in p.stderr and f" -t 512 " in p.stderr and f"({why})" in p.stderr
              and last == f"scaling.py: 1 of 2 runs failed (see FAILED above); the 1 measured are in {out}.csv and .md"
              and len(csv_rows(tmp)) == 1 and csv_rows(tmp)[0].startswith("d12,1,1024,global,"),
              f"a RESULT line with {what}: that run FAILED saying why, the other row written, exit 1", p.stdout + p.stderr)
    p = run(tmp, env=dict(STANDIN_PCT="exposed_comm_pct=0.00 [1,1]<stdout>: a warning "))
    check(p.returncode == 0 and len(csv_rows(tmp)) == 2 and "Traceback" not in p.stderr,
          "a RESULT line with words that are no field in it: read, both rows written", p.stdout + p.stderr)

# a run that ends with exit code 0 but no RESULT line (e.g. under mpirun --tag-output, which puts
# "[1,0]<stdout>:" before it): FAILED saying there was no RESULT line, not only "exit code 0", which
# reads as a success; a run without a RESULT line that fails keeps its exit code in the reason too
with tempfile.TemporaryDirectory() as tmp:
    write(os.path.join(tmp, "standin"), TRAINER_STANDIN.replace('print(f"RESULT ', 'print(f"[1,0]<stdout>:RESULT '), exe=True)
    p = run(tmp)
    check(p.returncode == 1 and p.stderr.count("(no RESULT line in its output, exit code 0)") == 2 and "(exit code 0)" not in p.stderr,
          "exit code 0 without a RESULT line: FAILED, no RESULT line named as the reason", p.stderr)
    write(os.path.join(tmp, "standin"), TRAINER_STANDIN, exe=True)
    p = run(tmp, fail="512")
    check(p.returncode == 1 and "(no RESULT line in its output, exit code 1)" in p.stderr,
          "a failed run without a RESULT line: both said", p.stderr)

# the table's ratio and efficiency: throughput (the mean step's tok/s) against the group's 1-GPU row,
# and that over the GPU count, whatever the row's type (P2P on or off: the same 1-GPU base)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from scaling import add_ratios, parse_result, use_mean_step  # noqa: E402


def row(line, **extra):
    r = use_mean_step(parse_result(line))
    r.update(extra)
    return r


base = row("RESULT precision=bf16 accum=8 total_batch=524288 median_ms=880 tok_per_s=595782 mean_ms=900 tok_per_s_mean=582542 "
           "fwd_ms=280 bwd_ms=560 opt_ms=5", gpus=1, type="ddp", T=1024)
for typ in ("ddp", "ddp_nop2p"):
    four = add_ratios(row("RESULT precision=bf16 accum=2 total_batch=524288 median_ms=230 tok_per_s=2279513 mean_ms=240 "
                          "tok_per_s_mean=2184533 fwd_ms=70 bwd_ms=140 opt_ms=5 bwd_last_ms=72 bwd_other_ms=70", gpus=4, type=typ, T=1024),
                      base, {}, "d12", 1024)
    check(abs(four["ratio"] - 2184533 / 582542) < 1e-12 and abs(four["efficiency"] - 2184533 / (4 * 582542)) < 1e-12
          and abs(four["samples_per_s"] - 2184533 / 1024) < 1e-9 and four["interference_ms"] == 2 and four["pred_tok_per_s"] is None,
          f"{typ}, 4 GPUs: ratio = tok/s(4) / tok/s(1) of the mean steps, efficiency = that / 4 ({four['ratio']}, {four['efficiency']})")
one = add_ratios(dict(base), base, {}, "d12", 1024)
check(one["ratio"] == 1 and one["efficiency"] == 1 and one["interference_ms"] is None, "the 1-GPU row: ratio 1, efficiency 100 %")

p = subprocess.run([sys.executable, SCALING, "--help"], capture_output=True, text=True)
check(p.returncode == 0 and p.stdout.startswith("usage:") and not p.stderr, "--help: usage, exit 0")
finish()
