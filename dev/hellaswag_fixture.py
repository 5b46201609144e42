"""Writes a synthetic HellaSwag-style JSON Lines file from a plain text file, for testing
`data/tokenize --hellaswag` and the trainer's --hellaswag evaluation without the real data set:

  python3 dev/hellaswag_fixture.py OUT.jsonl [--text FILE] [--examples N] [--seed S]

Each example's "ctx" is 2 or 3 consecutive non-empty lines of the text, the right ending is the
line after them and the 3 wrong ones are other lines drawn at random, so a model trained on the
text should pick the right one well above chance (1/4). The fields are HellaSwag's own (ind,
activity_label, ctx_a, ctx_b, ctx, endings, source_id, split, split_type, label); every 5th label
is a string of digits, as in the Hugging Face export, and example 3 (when N > 3) is non-ASCII
text (accents, CJK, an emoji), so the tokenizer's JSON and UTF-8 paths are both exercised.
The text defaults to $TINYSHAKESPEARE, else ../shared/data/tinyshakespeare.txt (from the
repository root). The same --seed always gives the same bytes.
"""
import argparse
import json
import os
import random
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_TEXT = os.environ.get("TINYSHAKESPEARE") or os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt")
K = 4             # endings per example, as in HellaSwag
UNICODE_AT = 3    # the index of the non-ASCII example
MIN_LINES = 8     # fewer non-empty lines make too few distinct contexts and distractors
# The non-ASCII example: multi-byte UTF-8 of 2, 3 and 4 bytes (the emoji, which JSON escapes as a
# surrogate pair), in the context and in the endings.
UNICODE_CTX = ("Ünïcödé: the naïve café served crème brûlée.", "日本語のテキストと中文文本 👋")
UNICODE_RIGHT = "Déjà vu: 東京 was full of emoji 🌍 and façades."
UNICODE_WRONG = ["Ελληνικά and русский text, side by side.", "한국어 텍스트。 ✅ done", "½ of the piñata fell — ¡olé!"]


def non_empty_lines(path):
    """The text's non-empty lines, stripped. Exits with one line if the file is unusable."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [s.strip() for s in f]
    except OSError as e:
        sys.exit(f"hellaswag_fixture: {path}: cannot read the text: {e.strerror}")
    except UnicodeDecodeError as e:
        sys.exit(f"hellaswag_fixture: {path}: not UTF-8 text ({e.reason} at byte {e.start})")
    lines = [s for s in lines if s]
    if len(lines) < MIN_LINES or len(set(lines)) < K:
        sys.exit(f"hellaswag_fixture: {path}: too few lines ({len(lines)} non-empty, {len(set(lines))} distinct; "
                 f"need {MIN_LINES} and {K})")
    return lines


def speaker(lines, i):
    """The activity label: the nearest speaker line ("First Citizen:") at or before line i, as
    HellaSwag labels an example with its activity; "fixture" when the text has none."""
    for j in range(i, max(-1, i - 20), -1):
        if lines[j].endswith(":") and len(lines[j]) < 40:
            return lines[j][:-1]
    return "fixture"


def make_example(ind, rng, lines, distinct):
    if ind == UNICODE_AT:
        ctx_lines, right, wrong, label_text = list(UNICODE_CTX), UNICODE_RIGHT, list(UNICODE_WRONG), "unicode"
    else:
        n_ctx = rng.choice((2, 3))
        start = rng.randrange(len(lines) - n_ctx)
        ctx_lines, right = lines[start:start + n_ctx], lines[start + n_ctx]
        label_text = speaker(lines, start)
        # 3 distinct lines other than the right one: drawn from the sorted distinct lines (a set's
        # order changes with Python's string hashing from run to run; sorted keeps --seed exact).
        wrong = [s for s in rng.sample(distinct, K) if s != right][:K - 1]
    endings = [right] + wrong
    rng.shuffle(endings)
    label = endings.index(right)  # the lines are distinct, so index finds the right one
    # HellaSwag's ctx is ctx_a + " " + ctx_b; here ctx_b is the context's last line
    ctx_a, ctx_b = " ".join(ctx_lines[:-1]), ctx_lines[-1]
    return {"ind": ind, "activity_label": label_text, "ctx_a": ctx_a, "ctx_b": ctx_b, "ctx": ctx_a + " " + ctx_b,
            "endings": endings, "source_id": f"fixture~{ind}", "split": "val", "split_type": "indomain",
            # the Hugging Face export writes labels as strings: every 5th one here, the rest ints
            "label": str(label) if ind % 5 == 4 else label}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the JSON Lines file to write")
    ap.add_argument("--text", default=DEFAULT_TEXT, help="plain text to draw the examples from")
    ap.add_argument("--examples", type=int, default=200, help="number of examples (default 200)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = ap.parse_args()
    if args.examples < 1:
        sys.exit(f"hellaswag_fixture: --examples must be at least 1, not {args.examples}")
    lines = non_empty_lines(args.text)
    distinct = sorted(set(lines))
    rng = random.Random(args.seed)  # Python's Mersenne Twister: the same draws on every platform
    examples = [make_example(i, rng, lines, distinct) for i in range(args.examples)]
    try:
        # raw UTF-8 (not \u escapes), as the real hellaswag_val.jsonl has it; "\n" line ends
        with open(args.out, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in examples)
    except OSError as e:
        sys.exit(f"hellaswag_fixture: {args.out}: cannot write: {e.strerror}")
    print(f"wrote {args.out}: {len(examples)} examples of {K} endings from {args.text} (seed {args.seed})")


if __name__ == "__main__":
    main()
