"""Unit test of dev/plot.py's log reader (no matplotlib needed; the drawing is checked only where
matplotlib is installed): log.jsonl and the trainer's stdout give the same steps, validation
losses, HellaSwag scores, step times and skipped steps; a resumed run's records replace the killed run's from its first step on; a log without
records, or with a broken line before the last, is one error; without matplotlib plot.py prints its
summary, one line saying there is no PNG and exits 1."""
import math
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, ".."))
from check import check, finish  # noqa: E402
from plot import PlotError, plot, read_run  # noqa: E402

# killed after step 2 (before its evaluation), resumed from step 1's checkpoint: step 2 again, then
# its evaluation
JSONL = """{"type":"startup","seconds":1.5,"phases":{"launch":0.5}}
{"type":"step","step":1,"loss":10.5,"norm":1.0,"lr":6e-05,"skipped":1,"skip":"loss_spike","ms":120.5,"exposed_comm_ms":3.25}
{"type":"step","step":2,"loss":9.25,"norm":1.0,"lr":0.00012,"skipped":1,"ms":99,"exposed_comm_ms":1}
{"type":"startup","seconds":1.5,"phases":{"launch":0.5}}
{"type":"step","step":2,"loss":9.125,"norm":1.0,"lr":0.00012,"ms":100.25,"exposed_comm_ms":0.5}
{"type":"eval","step":2,"val_loss":9.5}
{"type":"hellaswag","step":2,"acc":0.25,"acc_norm":0.2675,"completion_loss":7.1,"examples":400,"seconds":0.1}
{"type":"sample","step":2,"text":"x"}
"""
STDOUT = """GPT-2 L=12 NH=12 C=768 (124475904 parameters), bf16, 1 GPU(s)
step    1/2 | loss 10.500000 | norm 1.0000 | lr 6.00e-05 | scale 1 (skipped) | 120.50 ms (fwd 1 bwd 1 exposed comm 3.25 opt 1) | 1 tok/s | MFU 1% | ETA 0s
step    2/2 | loss 9.125000 | norm 1.0000 | lr 1.20e-04 | scale 1 | 100.25 ms (fwd 1 bwd 1 exposed comm 0.50 opt 1) | 1 tok/s | MFU 1% | ETA 0s
step 2: val loss 9.500000
step 2: hellaswag acc 0.250000 acc_norm 0.267500 completion loss 7.100000 (400 examples, 0.10 s)
"""

with tempfile.TemporaryDirectory() as tmp:
    def write(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    a, b = read_run(write("log.jsonl", JSONL)), read_run(write("stdout.log", STDOUT))
    check(a["step"] == [(1, 10.5, 6e-05), (2, 9.125, 0.00012)], f"jsonl: the steps, a repeated step's later record ({a['step']})")
    check(a["eval"] == [(2, 9.5)] and a["hellaswag"] == [(2, 0.25, 0.2675)], f"jsonl: eval and hellaswag ({a['eval']}, {a['hellaswag']})")
    check(a["skipped"] == [(1, 10.5)], f"jsonl: the skipped steps, as the latest record of each says ({a['skipped']})")
    check(a["time"] == [(1, 120.5, 3.25), (2, 100.25, 0.5)], f"jsonl: each step's time and exposed communication, the later record's ({a['time']})")
    nulls = read_run(write("null.jsonl", '{"type":"step","step":1,"loss":9.5,"skipped":0}\n{"type":"step","step":2,"loss":null,"norm":null,"skipped":1}\n'))
    check(math.isnan(nulls["step"][1][1]) and nulls["skipped"] == [(2, 9.5)] and nulls["time"] == [],
          f"jsonl: a null (inf/nan) loss reads as nan; its skipped cross sits at the last finite loss; no times ({nulls['skipped']})")
    check(b == a, f"stdout log: the same records as log.jsonl ({b})")
    # resumed from step 1 after a kill at step 3: what the killed run logged from step 2 on (steps,
    # times, evaluations, skips) is gone, also step 3, which the resumed run has not reached yet; it
    # was plotted as the curve's end, and summarized as the run's last loss
    behind = read_run(write("behind.jsonl", "".join(
        '{"type":"step","step":%d,"loss":%s,"lr":1e-4,"skipped":%d,"ms":100,"exposed_comm_ms":1}\n' % r
        for r in [(1, 10, 0), (2, 9, 0), (3, 8, 1)]) + '{"type":"eval","step":2,"val_loss":8.5}\n'
        '{"type":"hellaswag","step":3,"acc":0.25,"acc_norm":0.25}\n{"type":"step","step":2,"loss":7.5,"lr":1e-4,"skipped":0}\n'))
    check(behind["step"] == [(1, 10.0, 1e-4), (2, 7.5, 1e-4)] and behind["eval"] == [] and behind["hellaswag"] == []
          and behind["skipped"] == [] and behind["time"] == [(1, 100.0, 1.0)],
          f"jsonl: a resume behind the killed run's last step drops the killed run's records from its step on ({behind})")
    behind_text = read_run(write("behind.log", STDOUT + STDOUT.splitlines()[2].replace("9.125000", "8.000000") + "\n"))
    check(behind_text["step"] == [(1, 10.5, 6e-05), (2, 8.0, 0.00012)] and behind_text["eval"] == [] and behind_text["hellaswag"] == [],
          f"stdout log: the same ({behind_text})")
    nan_eval = read_run(write("nan_eval.jsonl", '{"type":"step","step":1,"loss":9.5}\n{"type":"eval","step":1,"val_loss":null}\n'))
    check(len(nan_eval["eval"]) == 1 and math.isnan(nan_eval["eval"][0][1]), "jsonl: a null (nan) validation loss reads as nan, not an error")
    cut = read_run(write("cut.jsonl", '{"type":"step","step":1,"loss":9.5}\n{"type":"st{"type":"step","step":2,"loss":9.25}\n'
                                      '{"type":"step","step":3,"loss":9.0}\n'))
    check([r[0] for r in cut["step"]] == [1, 2, 3], f"jsonl: a line cut by a kill, continued by the resumed run's record: that record read ({cut['step']})")
    only_hs = read_run(write("hs.log", STDOUT.splitlines()[-1] + "\n"))
    check(only_hs["hellaswag"] == [(2, 0.25, 0.2675)] and not only_hs["step"], "an --eval-only log (a hellaswag line alone) is a run")
    for name, text, what in [("empty.log", "nothing here\n", "no step, eval or hellaswag records"),
                             ("broken.jsonl", '{"type":"step","step":1,"loss":1}\n{broken\n{"type":"step","step":2,"loss":1}\n', "broken.jsonl:2: not a JSON object"),
                             ("fields.jsonl", '{"type":"hellaswag","step":1,"acc":0.5}\n', "fields.jsonl:1: a hellaswag record without its fields")]:
        try:
            read_run(write(name, text))
            check(False, f"{name}: refused")
        except PlotError as e:
            check(what in str(e) and "\n" not in str(e), f"{name}: one error line ({e})")
    # plot.py without matplotlib (blocked, so this runs where it is installed too): the summary, one
    # line saying there is no PNG, exit 1 (the PNG is its product), an earlier PNG left as it was
    script = os.path.join(here, "..", "plot.py")
    blocked = "import runpy, sys; sys.modules['matplotlib'] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    earlier = write("earlier.png", "an earlier picture")
    log = write("run.log", STDOUT)
    for what, opts in [("-o earlier.png", ["-o", earlier]), ("no -o (curves.png)", [])]:
        p = subprocess.run([sys.executable, "-c", blocked, script, log] + opts, capture_output=True, text=True, cwd=tmp)
        check(p.returncode == 1 and p.stdout == "run.log: 2 steps, 1 skipped, 1 evals, 1 hellaswag, last loss 9.1250 at step 2, median step 120.50 ms (exposed comm 3.25)\n"
              and p.stderr.count("\n") == 1 and p.stderr.startswith(f"matplotlib not installed: no PNG, {opts[1] if opts else 'curves.png'} not written")
              and open(earlier).read() == "an earlier picture" and not os.path.exists(os.path.join(tmp, "curves.png")),
              f"without matplotlib, {what}: the summary, one line, exit 1, nothing written ({p.stdout.strip()} / {p.stderr.strip()})")
    p = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
    check(p.returncode == 0 and p.stdout.startswith("usage:") and not p.stderr, "--help: usage, exit 0")
    try:
        import matplotlib  # noqa: F401
        out = os.path.join(tmp, "curves.png")
        plot([("a", a), ("b", read_run(write("nohs.jsonl", JSONL.replace('"type":"hellaswag"', '"type":"other"'))))], out)
        check(os.path.getsize(out) > 1000, "a PNG with the HellaSwag and time panels")
        plot([("nulls", nulls)], out)
        check(os.path.getsize(out) > 1000, "a PNG without them (a log without step times or HellaSwag)")
    except ImportError:
        print("note: matplotlib not installed: the drawing is not checked")
finish()
