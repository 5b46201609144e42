"""Unit test of dev/compare_losses.py on crafted logs (no GPU, no third-party packages): non-finite
losses, `-nan`/`inf` in stdout logs, steps matched by number (the last occurrence of a repeated step
counts; a resume drops what the killed run logged from its step on), log.jsonl inputs (exact values, null = non-finite), one-line errors for bad inputs (a --tol
that is not a finite number >= 0 among them), and --help."""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from check import check, finish  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare_losses.py")
LINE_RE = re.compile(r"^(OK|FAIL) (\d+) steps: step-1 rel diff \S+, max rel diff (\S+) \(tol \S+\), "
                     r"losses \S+->\S+ vs \S+->\S+$")
tmp = tempfile.mkdtemp()
atexit.register(shutil.rmtree, tmp, ignore_errors=True)


def text_log(name, losses, total=None, skipped=()):
    """A trainer stdout log; losses: [(step, value-as-printed)] in the order printed."""
    total = total or max(s for s, _ in losses)
    lines = ["train_gpt2cu: some header", "step 0: val loss 11.000000"]
    for s, v in losses:
        scale = "65536 (skipped)" if s in skipped else "65536"
        lines.append(f"step {s:4d}/{total} | loss {v} | norm 1.2345 | lr 3.00e-04 | scale {scale} | 12.34 ms | 1000 tok/s")
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def jsonl_log(name, losses, raw=None, skipped=()):
    """A log.jsonl; losses: [(step, float or None)] in the order written; raw: extra text appended."""
    lines = [json.dumps({"type": "config", "model": "d12"})]
    for s, v in losses:
        lines.append(json.dumps({"type": "step", "step": s, "loss": v, "norm": 1.0, "lr": 3e-4, "skipped": int(s in skipped)}))
        if s % 2 == 0:
            lines.append(json.dumps({"type": "eval", "step": s, "val_loss": 9.0}))
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + (raw or ""))
    return path


def run(a, b, tol=None):
    args = [sys.executable, SCRIPT, a, b] + (["--tol", str(tol)] if tol is not None else [])
    p = subprocess.run(args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def verdict(rc, out):
    m = LINE_RE.match(out.strip())
    return (m.group(1), int(m.group(2)), m.group(3)) if m and out.count("\n") == 1 else None


base = [(1, "10.950000"), (2, "9.500000"), (3, "8.250000"), (4, "7.125000")]

# 1a. a non-finite loss in one log only must FAIL; both non-finite at the same step is equal
a = text_log("a.log", base)
b = text_log("b_nan.log", [(1, "10.950000"), (2, "nan"), (3, "8.250000"), (4, "7.125000")], skipped=(2,))
rc, out, _ = run(a, b, 0.01)
check(rc == 1 and out.startswith("FAIL 4 steps") and "max rel diff inf" in out, "nan in B only (not the first step): FAIL")
rc, out, _ = run(b, a, 0.01)
check(rc == 1 and out.startswith("FAIL 4 steps"), "nan in A only: FAIL")
b_inf = text_log("b_inf.log", [(1, "10.950000"), (2, "9.500000"), (3, "inf"), (4, "7.125000")], skipped=(3,))
rc, out, _ = run(a, b_inf, 1.0)
check(rc == 1 and out.startswith("FAIL"), "inf in one log, even at --tol 1: FAIL")
rc, out, _ = run(b, text_log("b_nan2.log", [(1, "10.950000"), (2, "-nan"), (3, "8.250000"), (4, "7.125000")], skipped=(2,)), 0)
check(rc == 0 and verdict(rc, out) == ("OK", 4, "0.00e+00"), "nan and -nan at a step both runs skipped: equal (OK at --tol 0)")
rc, out, _ = run(b_inf, text_log("b_ninf.log", [(1, "10.950000"), (2, "9.500000"), (3, "-inf"), (4, "7.125000")], skipped=(3,)), 0)
check(rc == 0 and out.startswith("OK 4 steps"), "inf and -inf at a step both runs skipped: both non-finite, equal")
rc, out, _ = run(b, text_log("b_nan3.log", [(1, "10.950000"), (2, "nan"), (3, "8.250000"), (4, "7.125000")]), 0)
check(rc == 1 and "max rel diff inf" in out, "nan at the same step, skipped by one run only: FAIL")
# two runs that diverged alike (nan from step 3 on, every such step skipped) are no check passed
d1 = text_log("d1.log", [(1, "10.950000"), (2, "9.500000"), (3, "nan"), (4, "nan")], skipped=(3, 4))
d2 = text_log("d2.log", [(1, "10.950000"), (2, "9.500000"), (3, "nan"), (4, "nan")], skipped=(3, 4))
rc, out, _ = run(d1, d2, 0)
check(rc == 1 and out.startswith("FAIL 4 steps") and out.strip().endswith("; the last loss is not finite"),
      f"both runs ending in nan: FAIL ({out.strip()})")

# 1b. -nan / nan / inf in the stdout regex: the step is read, not dropped
from importlib import util  # noqa: E402
spec = util.spec_from_file_location("compare_losses", SCRIPT)
cl = util.module_from_spec(spec)
spec.loader.exec_module(cl)
got = cl.losses(text_log("c.log", [(1, "5.000000"), (2, "-nan"), (3, "inf"), (4, "-inf"), (5, "nan"), (6, "4.000000")]))
check(isinstance(got, dict) and sorted(got) == [1, 2, 3, 4, 5, 6], "stdout log: -nan, inf, -inf, nan steps all read")
check(isinstance(got, dict) and got.get(6) == 4.0 and all(got.get(s) != got.get(s) for s in (2, 5))
      and got.get(3) == float("inf") and got.get(4) == float("-inf"), "stdout log: the non-finite values kept as such")
rc, out, _ = run(a, text_log("a_minus_nan.log", [(1, "10.950000"), (2, "-nan"), (3, "8.250000"), (4, "7.125000")]), 0.01)
check(rc == 1 and out.startswith("FAIL 4 steps"), "-nan in one stdout log: 4 steps compared, FAIL")

# 1c. steps matched by number: different step sets FAIL; the last occurrence of a step counts
rc, out, _ = run(a, text_log("shifted.log", [(1, "10.950000"), (2, "9.500000"), (3, "8.250000"), (5, "7.125000")]), 0)
check(rc == 1 and out.startswith("FAIL") and "only in A: 4" in out and "only in B: 5" in out,
      "same count, other step numbers: FAIL naming them")
resumed = text_log("resumed.log", [(1, "10.950000"), (2, "9.500000"), (3, "1.000000"), (4, "2.000000"),
                                   (3, "8.250000"), (4, "7.125000")])
rc, out, _ = run(a, resumed, 0)
check(rc == 0 and verdict(rc, out) == ("OK", 4, "0.00e+00"), "stdout log, killed + resumed from step 2: last occurrences equal")
rc, out, _ = run(resumed, a, 0)
check(rc == 0 and out.startswith("OK 4 steps"), "the same, the resumed log first")
stale = text_log("stale.log", [(1, "10.950000"), (2, "9.500000"), (3, "8.250000"), (4, "7.125000"), (3, "8.250001")])
rc, out, _ = run(a, stale, 0)
check(rc == 1 and out.startswith("FAIL"), "a repeated step with another loss last: FAIL")
# a resume from an earlier step supersedes what the killed run logged from there on, also the steps
# the resumed run has not reached (yet): those were of a run whose state is gone, and counting them
# reported a resumed run stopped at step 3 as matching to step 4, with the killed run's last loss
behind = text_log("behind.log", [(1, "10.950000"), (2, "9.500000"), (3, "8.250000"), (4, "7.125000"), (2, "9.500000"), (3, "8.250000")])
rc, out, _ = run(a, behind, 0)
check(rc == 1 and out.startswith("FAIL: 4 vs 3 steps") and "only in A: 4" in out,
      f"a resumed run behind the killed one's last step: the killed run's later steps dropped ({out.strip()})")
rc, out, _ = run(text_log("a3.log", base[:3]), behind, 0)
check(rc == 0 and verdict(rc, out) == ("OK", 3, "0.00e+00"), f"the same against the first 3 steps: OK ({out.strip()})")
rc, out, _ = run(a, text_log("short.log", base[:3]), 0)
check(rc == 1 and out.startswith("FAIL") and "only in A: 4" in out, "a step missing from B: FAIL")

# 1d. log.jsonl: type=step records, exact values, null = non-finite, detected by suffix or content
ja = jsonl_log("a.jsonl", [(1, 10.95), (2, 9.5), (3, 8.25), (4, 7.125)])
jb = jsonl_log("b.jsonl", [(1, 10.95), (2, 9.5), (3, 8.2500001), (4, 7.125)])   # equal at 6 decimals
rc, out, _ = run(ja, jb, 0)
check(rc == 1 and out.startswith("FAIL 4 steps"), "log.jsonl at --tol 0: a difference in the 8th digit FAILs")
rc, out, _ = run(a, text_log("b6.log", [(1, "10.950000"), (2, "9.500000"), (3, "8.250000"), (4, "7.125000")]), 0)
check(rc == 0, "(the same losses at 6 decimals: the stdout logs cannot tell)")
rc, out, _ = run(ja, jsonl_log("a2.jsonl", [(1, 10.95), (2, 9.5), (3, 8.25), (4, 7.125)]), 0)
check(rc == 0 and verdict(rc, out) == ("OK", 4, "0.00e+00"), "log.jsonl: equal runs OK at --tol 0 (eval/config records ignored)")
rc, out, _ = run(ja, a, 0)
check(rc == 0 and out.startswith("OK 4 steps"), "log.jsonl against a stdout log")
jn = jsonl_log("n.jsonl", [(1, 10.95), (2, None), (3, 8.25), (4, 7.125)], skipped=(2,))
rc, out, _ = run(ja, jn, 0.5)
check(rc == 1 and out.startswith("FAIL"), "log.jsonl: null (inf/nan) against a number FAILs")
rc, out, _ = run(jn, b, 0)
check(rc == 0 and out.startswith("OK 4 steps"), "log.jsonl null against a stdout nan at a step both skipped: equal")
jr = jsonl_log("r.jsonl", [(1, 10.95), (2, 9.5), (3, 1.0), (4, 2.0), (2, 9.5), (3, 8.25), (4, 7.125)])
rc, out, _ = run(ja, jr, 0)
check(rc == 0 and out.startswith("OK 4 steps"), "log.jsonl appended by a resume: the last record of each step counts")
jbehind = jsonl_log("behind.jsonl", [(1, 10.95), (2, 9.5), (3, 8.25), (4, 99.0), (2, 9.5), (3, 8.25)])
rc, out, _ = run(ja, jbehind, 0)
check(rc == 1 and out.startswith("FAIL: 4 vs 3 steps") and "only in A: 4" in out,
      f"log.jsonl: a resumed run behind the killed one: the killed run's step 4 dropped ({out.strip()})")
# a record cut short by a kill, the next run's first record on the same line
cut = jsonl_log("cut.jsonl", [(1, 10.95), (2, 9.5), (3, 1.0)],
                raw='{"type":"step","step":4,"lo' + json.dumps({"type": "step", "step": 3, "loss": 8.25}) + "\n"
                + json.dumps({"type": "step", "step": 4, "loss": 7.125}) + "\n")
rc, out, _ = run(ja, cut, 0)
check(rc == 0 and out.startswith("OK 4 steps"), "log.jsonl with a line cut by a kill: the rest read")
by_content = os.path.join(tmp, "log_as.txt")
with open(jb) as f, open(by_content, "w") as g:
    g.write(f.read())
rc, out, _ = run(ja, by_content, 0)
check(rc == 1 and out.startswith("FAIL 4 steps"), "JSONL detected by content (no .jsonl suffix)")
run_dir = os.path.join(tmp, "run")
os.makedirs(run_dir)
with open(ja) as f, open(os.path.join(run_dir, "log.jsonl"), "w") as g:
    g.write(f.read())
rc, out, _ = run(run_dir, ja, 0)
check(rc == 0 and out.startswith("OK 4 steps"), "a run directory: its log.jsonl")

# 1e. missing / empty inputs and bad arguments: one line, non-zero exit
empty = os.path.join(tmp, "empty.log")
open(empty, "w").close()
rc, out, err = run(a, os.path.join(tmp, "nope.log"))
check(rc == 2 and out.count("\n") == 1 and out.startswith("FAIL") and "nope.log" in out and not err, "missing file: one FAIL line, exit 2")
rc, out, err = run(empty, a)
check(rc == 2 and out.count("\n") == 1 and "empty.log" in out and "no step losses" in out and not err, "empty file: one line, exit 2")
nosteps = os.path.join(tmp, "nosteps.log")
with open(nosteps, "w") as f:
    f.write("error: something went wrong\n")
rc, out, err = run(nosteps, nosteps)
check(rc == 2 and out.count("\n") == 1 and "no step losses" in out, "two logs without steps: one line, non-zero")
rc, out, err = run(os.path.join(tmp, "none.jsonl"), a)
check(rc == 2 and out.count("\n") == 1 and not err, "missing .jsonl: one line, exit 2")
for name, argv in [("no arguments", []), ("one file", [a]), ("--tol without a number", [a, a, "--tol"]),
                   ("--tol abc", [a, a, "--tol", "abc"]), ("unknown option", [a, a, "--tolerance", "1"])]:
    p = subprocess.run([sys.executable, SCRIPT] + argv, capture_output=True, text=True)
    check(p.returncode == 2 and p.stderr.count("\n") == 1 and not p.stdout, f"{name}: one line on stderr, exit 2")
# a tolerance that would pass every comparison (inf) or none (nan, negative) is refused, not used
for tol in ("inf", "nan", "-1", "1e400", "-0.001"):
    p = subprocess.run([sys.executable, SCRIPT, a, b, "--tol", tol], capture_output=True, text=True)
    check(p.returncode == 2 and not p.stdout and p.stderr == f"compare_losses.py: --tol {tol} is not a finite number >= 0\n",
          f"--tol {tol}: one line on stderr, exit 2, nothing compared ({p.stdout.strip()}{p.stderr.strip()})")
for flag in ("--help", "-h"):
    p = subprocess.run([sys.executable, SCRIPT, flag], capture_output=True, text=True)
    check(p.returncode == 0 and p.stdout.startswith("usage: compare_losses.py A B [--tol X]") and "Exit status" in p.stdout
          and not p.stderr, f"{flag}: the usage and the description on stdout, exit 0")

# the OK line's format (other scripts grep it) and the default tolerance
rc, out, _ = run(a, text_log("near.log", [(1, "10.960000"), (2, "9.500000"), (3, "8.250000"), (4, "7.125000")]))
check(rc == 0 and verdict(rc, out) is not None and "(tol 0.005)" in out and "losses 10.9500->7.1250 vs 10.9600->7.1250" in out,
      "OK line: step-1 / max rel diff, tol, first->last losses")
finish()
