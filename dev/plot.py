"""Plots loss curves (the step time, the learning rate, and HellaSwag accuracy when logged) of one
or more training runs into a PNG.

  python3 dev/plot.py RUN_DIR_OR_LOG [MORE ...] -o curves.png

Each input is a run directory (its log.jsonl is read), a log.jsonl, or the trainer's plain
stdout log. log.jsonl holds one JSON object per line:
  {"type":"step","step":N,"loss":L,"norm":G,"lr":R,"skipped":K,"ms":T,"exposed_comm_ms":E,...}
                                                                       one per optimizer step
  {"type":"eval","step":N,"val_loss":V}                                one per evaluation
  {"type":"hellaswag","step":N,"acc":A,"acc_norm":B,...}               with --hellaswag
  {"type":"sample",...}, {"type":"startup",...}                        (ignored)
From a stdout log the lines `step   12/100 | loss 3.21 | norm ... | lr 6.00e-04 ... | 101.80 ms
(fwd ... exposed comm 0.21 ...` (with "(skipped)" in them for a skipped step),
`step 100: val loss 3.05` and `step 100: hellaswag acc 0.29 acc_norm 0.30 ...` are read. Top
panel: train loss (lines) and val loss (markers) per run, the steps that were skipped (inf/nan
gradients, or the spike guard's --skip-loss-z / --skip-norm-z) as crosses; then, when any run has
them, HellaSwag's acc_norm (solid) and acc (dotted); then, when the logs have step times, the
time per step (solid) and its exposed communication (dotted: the wait for the gradient
reductions that backward did not hide, 0 on one GPU), cut at twice the slowest run's median so
the first step and checkpoint steps do not flatten the rest; last: the learning rate.
"""
import argparse, json, math, os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_losses import json_records, resumed_at  # noqa: E402  (a log.jsonl line cut by a kill, a resume: read as compare_losses does)

STEP_RE = re.compile(r"^step\s+(\d+)/\d+ \| loss (\S+) \| norm (\S+) \| lr (\S+)")
VAL_RE = re.compile(r"^step\s+(\d+): val loss (\S+)")
HS_RE = re.compile(r"^step\s+(\d+): hellaswag acc (\S+) acc_norm (\S+)")
TIME_RE = re.compile(r"\| (\S+) ms \(fwd \S+ bwd \S+ exposed comm (\S+) ")


class PlotError(Exception):
    pass


def resolve(path):
    """(file to read, label for the legend) for a run directory or a log file."""
    if os.path.isdir(path):
        log = os.path.join(path, "log.jsonl")
        if not os.path.isfile(log):
            raise PlotError(f"{path}: a directory without log.jsonl")
        return log, os.path.basename(os.path.normpath(path))
    if not os.path.isfile(path):
        raise PlotError(f"{path}: no such file or directory")
    name = os.path.basename(path)
    if name == "log.jsonl":  # <run>/log.jsonl: the run's name says more than the file's
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return path, name


def num(v):
    """A logged number: the trainer writes an inf/nan value as null."""
    return math.nan if v is None else float(v)


def read_run(path):
    """Returns {"step": [(step, loss, lr)], "eval": [(step, val_loss)], "hellaswag": [(step, acc,
    acc_norm)], "time": [(step, ms, exposed_comm_ms)], "skipped": [(step, loss)]} from either log
    format ("time" empty for logs without step times)."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    run = {"step": [], "eval": [], "hellaswag": [], "time": []}
    skipped = {}                                    # step -> its (latest) record was a skipped step
    top = [-1]                                      # the highest step record read so far

    def step_record(step):
        """Before a step record: where it starts a resumed run, the killed run's records (of every
        kind) from its step on are dropped, those the resumed run has not reached yet too."""
        replaced = resumed_at(skipped, step, top[0])
        if replaced:
            for key in run:
                run[key] = [r for r in run[key] if r[0] < step]
            for s in replaced:
                del skipped[s]
        top[0] = step
    first = next((l.strip() for l in lines if l.strip()), "")
    if first.startswith("{"):                       # JSONL
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            # a line cut short by a kill and continued by the resumed run's first record on the same
            # line gives that record (compare_losses reads it the same way)
            recs = json_records(line.strip())
            if not recs:
                if i == len(lines) - 1:             # a run still writing: a partial last line
                    break
                raise PlotError(f"{path}:{i + 1}: not a JSON object")
            for rec in recs:
                kind = rec.get("type") if isinstance(rec, dict) else None
                try:
                    if kind == "step":
                        step_record(int(rec["step"]))
                        run["step"].append((int(rec["step"]), num(rec["loss"]), float(rec.get("lr", math.nan))))
                        skipped[int(rec["step"])] = bool(rec.get("skipped", 0))
                        if rec.get("ms") is not None and rec.get("exposed_comm_ms") is not None:
                            run["time"].append((int(rec["step"]), float(rec["ms"]), float(rec["exposed_comm_ms"])))
                    elif kind == "eval":
                        run["eval"].append((int(rec["step"]), num(rec["val_loss"])))
                    elif kind == "hellaswag":
                        run["hellaswag"].append((int(rec["step"]), num(rec["acc"]), num(rec["acc_norm"])))
                except (KeyError, TypeError, ValueError):
                    raise PlotError(f"{path}:{i + 1}: a {kind} record without its fields")
    else:                                           # the trainer's stdout
        for line in lines:
            m = STEP_RE.match(line)
            if m:
                step_record(int(m.group(1)))
                run["step"].append((int(m.group(1)), float(m.group(2)), float(m.group(4))))
                skipped[int(m.group(1))] = "(skipped)" in line
                t = TIME_RE.search(line)
                if t:
                    run["time"].append((int(m.group(1)), float(t.group(1)), float(t.group(2))))
            m = VAL_RE.match(line)
            if m:
                run["eval"].append((int(m.group(1)), float(m.group(2))))
            m = HS_RE.match(line)
            if m:
                run["hellaswag"].append((int(m.group(1)), float(m.group(2)), float(m.group(3))))
    # a step's records of one kind logged more than once (step_record dropped the killed run's): the later wins
    for key in run:
        run[key] = sorted({r[0]: r for r in run[key]}.values())
    if not any(run[k] for k in ("step", "eval", "hellaswag")):
        raise PlotError(f"{path}: no step, eval or hellaswag records (not a trainer log?)")
    # a skipped step's cross sits at its loss, or at the last finite loss before it when that was inf/nan
    run["skipped"], last = [], math.nan
    for s, loss, _ in run["step"]:
        last = loss if math.isfinite(loss) else last
        if skipped.get(s):
            run["skipped"].append((s, last))
    return run


def median(values):
    """The upper median of an even count, as the trainer's."""
    values = sorted(values)
    return values[len(values) // 2]


def median_ms(run):
    """The run's median step time."""
    return median(t[1] for t in run["time"])


def plot(runs, out, title=None, logy=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    hs = any(run["hellaswag"] for _, run in runs)
    times = any(run["time"] for _, run in runs)
    ratios = [3] + ([1.5] if hs else []) + ([1.5] if times else []) + [1]
    fig, axes = plt.subplots(len(ratios), 1, figsize=(10, 4 + 2 * len(ratios) - 1), sharex=True,
                             gridspec_kw={"height_ratios": ratios})
    ax_loss, ax_lr = axes[0], axes[-1]
    ax_hs = axes[1] if hs else None
    ax_time = axes[-2] if times else None
    for i, (label, run) in enumerate(runs):
        color = f"C{i % 10}"
        if run["step"]:
            steps, losses, lrs = zip(*run["step"])
            ax_loss.plot(steps, losses, color=color, lw=1.2, label=f"{label} train")
            ax_lr.plot(steps, lrs, color=color, lw=1.2, label=label)
        if run["skipped"]:
            steps, losses = zip(*run["skipped"])
            ax_loss.plot(steps, losses, "x", color=color, ms=8, mew=2, label=f"{label} skipped")
        if run["eval"]:
            steps, vals = zip(*run["eval"])
            ax_loss.plot(steps, vals, "o--", color=color, ms=5, lw=0.8, label=f"{label} val")
        if run["hellaswag"]:
            steps, acc, acc_norm = zip(*run["hellaswag"])
            ax_hs.plot(steps, acc_norm, "o-", color=color, ms=4, lw=1.2, label=f"{label} acc_norm")
            ax_hs.plot(steps, acc, "o:", color=color, ms=3, lw=0.8, label=f"{label} acc")
        if run["time"]:
            steps, ms, exposed = zip(*run["time"])
            ax_time.plot(steps, ms, color=color, lw=1.0, label=f"{label} step")
            ax_time.plot(steps, exposed, ":", color=color, lw=1.0, label=f"{label} exposed comm")
    ax_loss.set_ylabel("loss")
    if logy:
        ax_loss.set_yscale("log")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize=8)
    if title:
        ax_loss.set_title(title)
    if hs:
        ax_hs.set_ylabel("HellaSwag")
        ax_hs.grid(alpha=0.3)
        ax_hs.legend(fontsize=8)
    if times:
        ax_time.set_ylim(0, 2 * max(median_ms(run) for _, run in runs if run["time"]))
        ax_time.set_ylabel("ms per step")
        ax_time.grid(alpha=0.3)
        ax_time.legend(fontsize=8)
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    ax_lr.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("inputs", nargs="+", help="run directories, log.jsonl files or stdout logs")
    ap.add_argument("-o", "--out", default="curves.png", help="PNG to write (default curves.png)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--logy", action="store_true", help="log-scale loss axis")
    args = ap.parse_args()
    try:
        runs = []
        for path in args.inputs:
            log, label = resolve(path)
            run = read_run(log)
            runs.append((label, run))
            last = f"last loss {run['step'][-1][1]:.4f} at step {run['step'][-1][0]}" if run["step"] else "no steps"
            skips = f", {len(run['skipped'])} skipped" if run["skipped"] else ""
            exposed = median(t[2] for t in run["time"]) if run["time"] else 0
            time = f", median step {median_ms(run):.2f} ms (exposed comm {exposed:.2f})" if run["time"] else ""
            print(f"{label}: {len(run['step'])} steps{skips}, {len(run['eval'])} evals, {len(run['hellaswag'])} hellaswag, {last}{time}")
        plot(runs, args.out, args.title, args.logy)
    except (PlotError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        # as dev/scaling.py: the summary above stands, the picture is left out. But the PNG is what
        # this script is for (-o only names it, curves.png by default): without it the run failed.
        print(f"matplotlib not installed: no PNG, {args.out} not written ({e})", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
