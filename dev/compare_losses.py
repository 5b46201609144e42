"""Compares the per-step training losses of two train_gpt2cu runs.
   python3 dev/compare_losses.py A B [--tol 0.005]
A and B are each a stdout log (`step N/M | loss X | ...` lines, 6 decimals; dev/train_reference.py
prints the same), a log.jsonl (the trainer's -o DIR/log.jsonl, or train_reference.py --log: the
"type":"step" records, 9 significant digits, exact for a float; null = inf/nan), or a run directory
(its log.jsonl). A file is read as JSONL when its name ends in .jsonl or its first line is a JSON
object. Steps are matched by number, not position, and the two step sets must be equal. A run resumed after
a kill appends to its log: from the step it resumed at on, its records replace the killed run's,
also those of steps it has not reached (yet), so a step logged more than once counts with its LAST
occurrence, and a resumed run that stopped before the killed one's last step ends where it stopped. Losses that are both non-finite (inf/nan) at a step count as equal only where both runs
skipped that step (" (skipped)" on the line, "skipped":1 in JSONL); otherwise, and where only one is,
a difference of inf. A run whose last loss is not finite FAILs, whatever the other did: two runs
that diverged alike are not a check passed. Prints the relative difference at the first step both
hold, the largest over all steps, and OK/FAIL against --tol (default 0.5 %, the multi-GPU issue's
bound for 20-step curves).
Exit status: 0 OK, 1 FAIL, 2 an input that cannot be compared (one line: FAIL: ...)."""
import json
import math
import os
import re
import sys

STEP_RE = re.compile(r"^step\s+(\d+)/\d+ \| loss ([-+]?(?:nan|inf(?:inity)?|[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?))(?=[\s|]|$)",
                     re.M | re.I)


class InputError(Exception):
    pass


def json_records(line):
    """The JSON objects of one log.jsonl line. A line cut short by a kill and continued by the next
    run's first line (`{"type":"st{"type":"step",...}`) yields what can be parsed of it."""
    try:
        return [json.loads(line)]
    except ValueError:
        out, dec = [], json.JSONDecoder()
        for m in re.finditer(r"\{", line):
            try:
                obj, end = dec.raw_decode(line, m.start())
            except ValueError:
                continue
            if end == len(line.rstrip()):
                out.append(obj)
                break
        return out


def resumed_at(steps, step, top):
    """A log's steps go up by one, except where a run resumed (from its checkpoint at step - 1) and
    appended to the killed run's log: there `step` is at most the highest read so far, `top`. Returns
    the steps read before that the resumed run replaces, step and later, also those it has not
    reached (yet): the killed run's steps past its last checkpoint belong to no run that went on."""
    return [s for s in steps if s >= step] if step <= top else []


def _add_step(out, skipped, top, step, loss, was_skipped):
    """One step record into out ({step: loss}) and skipped, after dropping what a resume at this
    step replaces (resumed_at); returns the new highest step read."""
    for s in resumed_at(out, step, top):
        del out[s]
        skipped.discard(s)
    out[step] = loss
    (skipped.add if was_skipped else skipped.discard)(step)
    return step


def _jsonl_losses(text, skipped):
    out, top = {}, -1
    for line in text.splitlines():
        if not line.strip():
            continue
        for rec in json_records(line.strip()):
            if not isinstance(rec, dict) or rec.get("type") != "step" or "step" not in rec or "loss" not in rec:
                continue
            loss = math.nan if rec["loss"] is None else float(rec["loss"])
            top = _add_step(out, skipped, top, int(rec["step"]), loss, rec.get("skipped"))
    return out


def _text_losses(text, skipped):
    out, top = {}, -1
    for m in STEP_RE.finditer(text):   # later lines overwrite
        end = text.find("\n", m.end())
        top = _add_step(out, skipped, top, int(m.group(1)), float(m.group(2)),
                        "(skipped)" in text[m.end():end if end >= 0 else len(text)])
    return out


def losses(path, skipped=None):
    """{step: loss} of a stdout log, a log.jsonl or a run directory; the last occurrence of a step
    counts, and a resume drops the killed run's steps from the one it resumed at (resumed_at).
    skipped (a set): gets the steps the run skipped."""
    if os.path.isdir(path):
        path = os.path.join(path, "log.jsonl")
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    skipped = set() if skipped is None else skipped
    out = _jsonl_losses(text, skipped) if path.endswith(".jsonl") or first.startswith("{") else _text_losses(text, skipped)
    if not out:
        raise InputError(f"{path}: no step losses")
    return out


def rel_diff(x, y, both_skipped=True):
    """|x - y| / |x|; both non-finite: 0 (equal) where both runs skipped the step, else inf; one
    non-finite: inf."""
    fx, fy = math.isfinite(x), math.isfinite(y)
    if not fx or not fy:
        return 0.0 if not fx and not fy and both_skipped else math.inf
    if x == y:
        return 0.0
    return abs(x - y) / abs(x) if x != 0 else math.inf


def _steps_text(steps):
    s = sorted(steps)
    return ", ".join(str(x) for x in s[:5]) + (f", ... ({len(s)})" if len(s) > 5 else "")


def compare(a, b, tol, skipped_a=None, skipped_b=None):
    """(ok, line) for two {step: loss} dicts and the steps each run skipped (None: every step, as if
    marked, so only the last-loss rule is left)."""
    if set(a) != set(b):
        only_a, only_b = set(a) - set(b), set(b) - set(a)
        parts = [f"only in A: {_steps_text(only_a)}"] if only_a else []
        parts += [f"only in B: {_steps_text(only_b)}"] if only_b else []
        return False, f"FAIL: {len(a)} vs {len(b)} steps, the step numbers differ ({'; '.join(parts)})"
    steps = sorted(a)
    la, lb = [a[s] for s in steps], [b[s] for s in steps]
    both = [(skipped_a is None or s in skipped_a) and (skipped_b is None or s in skipped_b) for s in steps]
    rel = [rel_diff(x, y, k) for x, y, k in zip(la, lb, both)]
    worst = max(rel)     # no NaN in rel: rel_diff returns 0 or inf for non-finite losses
    diverged = not (math.isfinite(la[-1]) and math.isfinite(lb[-1]))
    ok = worst <= tol and not diverged
    return ok, (f"{'OK' if ok else 'FAIL'} {len(steps)} steps: step-{steps[0]} rel diff {rel[0]:.2e}, max rel diff {worst:.2e} "
                f"(tol {tol:g}), losses {la[0]:.4f}->{la[-1]:.4f} vs {lb[0]:.4f}->{lb[-1]:.4f}"
                + ("; the last loss is not finite" if diverged else ""))


def main(argv):
    usage = "usage: compare_losses.py A B [--tol X]   (A, B: stdout logs, log.jsonl files or run directories)"
    files, tol, i = [], 0.005, 0
    while i < len(argv):
        if argv[i] == "--tol":
            try:
                tol = float(argv[i + 1])
            except (IndexError, ValueError):
                print(f"compare_losses.py: --tol needs a number; {usage}", file=sys.stderr)
                return 2
            if not (math.isfinite(tol) and tol >= 0):  # inf would pass every comparison, nan or < 0 none
                print(f"compare_losses.py: --tol {argv[i + 1]} is not a finite number >= 0", file=sys.stderr)
                return 2
            i += 2
        elif argv[i] in ("-h", "--help"):
            print(f"{usage}\n\n{__doc__}")
            return 0
        elif argv[i].startswith("--"):
            print(f"compare_losses.py: unknown option {argv[i]}; {usage}", file=sys.stderr)
            return 2
        else:
            files.append(argv[i])
            i += 1
    if len(files) != 2:
        print(f"compare_losses.py: {len(files)} file(s) given, 2 needed; {usage}", file=sys.stderr)
        return 2
    try:
        skipped_a, skipped_b = set(), set()
        a, b = losses(files[0], skipped_a), losses(files[1], skipped_b)
    except InputError as e:
        print(f"FAIL: {e}")
        return 2
    ok, line = compare(a, b, tol, skipped_a, skipped_b)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
