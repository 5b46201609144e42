"""The PyTorch fp32 reference of the trainer's multiple-choice evaluation (--hellaswag):

  python3 dev/hellaswag_reference.py MODEL.bin CHOICES.bin [--device cuda|cpu] [--batch-rows N]
        [--compare TRAINER_STDOUT_LOG [--loss-tol R] [--max-flips F]]
        [--jsonl FILE.jsonl [--vocab-dir DIR]]

CHOICES.bin is what `data/tokenize --hellaswag` writes (llmc/choices.h has the format). Each
example's ending i is scored by dev/reference.py's forward on the row context + ending i: the sum
of the cross-entropy losses of the ending's tokens, and their mean. acc counts the examples whose
lowest sum is the label, acc_norm those whose lowest mean is (a tie goes to the lower index);
the completion loss is every ending's loss summed over all examples, divided by their tokens.
Prints "hellaswag_reference: N examples, acc X, acc_norm Y, completion loss Z".

--compare LOG   checks the trainer's last "step S: hellaswag acc ... (N examples)" line in LOG
                (its stdout, e.g. of ./train_gpt2cu -e MODEL.bin --eval-only --hellaswag
                CHOICES.bin) against the reference: the completion loss within --loss-tol
                (relative, default 1e-5), acc and acc_norm within --max-flips examples (default 0)
--jsonl FILE    re-encodes the JSON Lines the file was made from with tiktoken (from the
                vocabulary in --vocab-dir: $GPT2_VOCAB_DIR, else ../shared/data/gpt2) and checks
                that every example's label and tokens are the file's
Exit status: 0 when every check passes, 1 on a failed check or an input that cannot be read.
read_choices and the scoring helpers need numpy only (dev/unit/test_hellaswag_data.py imports them).
"""
import json
import math
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model_file import doc_parser  # noqa: E402  (first: one line where numpy is missing)
import numpy as np  # noqa: E402

CHOICES_MAGIC, CHOICES_VERSION, CHOICES_HEADER_INTS, CHOICES_MAX_K = 20261202, 1, 256, 64
EOT = 50256  # the pad token (any id would do: a pad sits after the row, and attention is causal)
DEFAULT_VOCAB = os.environ.get("GPT2_VOCAB_DIR") or os.path.join(HERE, "..", "..", "shared", "data", "gpt2")
# the trainer's line, e.g. "step 0: hellaswag acc 0.285000 acc_norm 0.300000 completion loss 3.456789 (200 examples, 0.31 s)"
NUM = r"([-+]?(?:nan|inf|[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?))"
TRAINER_RE = re.compile(rf"^step -?\d+: hellaswag acc {NUM} acc_norm {NUM} completion loss {NUM} \((\d+) examples(?:, [0-9.]+ s)?\)\s*$",
                        re.M | re.I)


def read_choices(path):
    """(K, examples) of a file data/tokenize --hellaswag wrote; examples: a list of (label,
    context tokens, [ending tokens] * K), token lists of ints. Checks what llmc/choices.h's
    choices_read checks (tokens against a vocabulary aside): ValueError, one line naming the file."""
    def bad(what):
        return ValueError(f"{path}: {what}")
    with open(path, "rb") as f:
        data = f.read()
    head = CHOICES_HEADER_INTS * 4
    if len(data) < head:
        raise bad(f"file too small for the {head}-byte header ({len(data)} bytes)")
    h = np.frombuffer(data[:head], dtype="<i4")
    if h[0] != CHOICES_MAGIC:
        raise bad(f"bad magic {h[0]} (expected {CHOICES_MAGIC}: a multiple-choice file from data/tokenize --hellaswag)")
    if h[1] != CHOICES_VERSION:
        raise bad(f"unsupported version {h[1]}")
    N, K, longest, n_body = (int(v) for v in h[2:6])
    if N < 1 or not 2 <= K <= CHOICES_MAX_K or n_body < 0:
        raise bad(f"bad header ({N} examples of {K} endings)")
    if len(data) != head + 2 * n_body:
        raise bad(f"size mismatch: the header says {n_body} uint16 after it, the file holds {(len(data) - head) // 2}")
    body = np.frombuffer(data[head:], dtype="<u2").tolist()  # python ints: slicing a list is fast
    examples, p, seen_longest = [], 0, 0

    def take(n, e):
        nonlocal p
        if len(body) - p < n:
            raise bad(f"example {e}: the body ends inside it")
        p += n
        return body[p - n:p]
    for e in range(N):
        label, c, *lens = take(2 + K, e)
        context = take(c, e)
        endings = [take(n, e) for n in lens]
        if not 0 <= label < K:
            raise bad(f"example {e}: label {label} is not in 0..{K - 1}")
        if c == 0:
            raise bad(f"example {e}: an empty context")
        if 0 in lens:
            raise bad(f"example {e}: ending {lens.index(0)} is empty")
        if c + max(lens) > 65535:  # each length fits a uint16, their sum need not (choice_example_problem)
            raise bad(f"example {e}: context + ending {next(i for i, n in enumerate(lens) if c + n > 65535)} exceed 65535 tokens")
        seen_longest = max([seen_longest] + [c + n for n in lens])
        examples.append((label, context, endings))
    if p != len(body):
        raise bad(f"{len(body) - p} uint16 left after the last example")
    if longest != seen_longest:
        raise bad(f"the header's longest row {longest} is not the examples' {seen_longest}")
    return K, examples


# --- the evaluation's bookkeeping, in numpy (the same rules as llmc/choices.h); rows are numbered
# globally: example e's ending i is row e*K + i

def fill_rows(examples, K, first, n, T, pad):
    """Rows first..first+n-1 as (inputs, targets), int64 (n, T): inputs = context + ending, then
    pad; targets[t] = inputs[t+1], pad where the row ends (those losses are never read)."""
    inputs = np.full((n, T), pad, dtype=np.int64)
    targets = np.full((n, T), pad, dtype=np.int64)
    for j in range(n):
        _, context, endings = examples[(first + j) // K]
        row = context + endings[(first + j) % K]
        inputs[j, :len(row)] = row
        targets[j, :len(row) - 1] = row[1:]
    return inputs, targets


def ending_sums(examples, K, first, losses):
    """Each row's ending loss: losses (n, T) per position (the loss of predicting inputs[t+1] at
    t) of rows first.., summed over the ending's tokens, which sit at c..c+len-1 (c: the
    context's length), so their losses at c-1..c+len-2. float64 sums, as the trainer's."""
    out = []
    for j in range(len(losses)):
        _, context, endings = examples[(first + j) // K]
        c, n = len(context), len(endings[(first + j) % K])
        out.append(float(np.sum(losses[j, c - 1:c - 1 + n], dtype=np.float64)))
    return out


def score(examples, sums):
    """acc, acc_norm and completion loss from sums[e][i] (example e's ending i's loss sum)."""
    correct = correct_norm = tokens = 0
    total = 0.0
    for (label, _, endings), s in zip(examples, sums):
        means = [s[i] / len(endings[i]) for i in range(len(endings))]
        best = best_norm = 0
        for i in range(1, len(s)):  # strictly lower only: a tie goes to the lower index
            best = i if s[i] < s[best] else best
            best_norm = i if means[i] < means[best_norm] else best_norm
        correct += best == label
        correct_norm += best_norm == label
        total += sum(s)
        tokens += sum(len(x) for x in endings)
    n = len(examples)
    return {"examples": n, "acc": correct / n, "acc_norm": correct_norm / n, "loss": total / tokens}


def parse_trainer_line(text):
    """The trainer's last hellaswag line in text as a dict (acc, acc_norm, loss, examples), or None."""
    found = TRAINER_RE.findall(text)
    if not found:
        return None
    acc, acc_norm, loss, n = found[-1]
    return {"acc": float(acc), "acc_norm": float(acc_norm), "loss": float(loss), "examples": int(n)}


def compare(ref, got, loss_tol, max_flips):
    """[(ok, line)] per quantity: the trainer's numbers (got) against the reference's (ref)."""
    n = ref["examples"]
    rel = abs(got["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-30)
    out = [(got["examples"] == n, f"examples: trainer {got['examples']}, reference {n}"),
           (rel <= loss_tol,  # false for a nan
            f"completion loss: trainer {got['loss']:.6f}, reference {ref['loss']:.6f}, relative difference {rel:.2e} (at most {loss_tol:g})")]
    for key in ("acc", "acc_norm"):
        flips = abs(got[key] - ref[key]) * n  # the trainer prints 6 decimals: round to whole examples
        out.append((round(flips) <= max_flips if math.isfinite(flips) else False,
                    f"{key}: trainer {got[key]:.6f}, reference {ref[key]:.6f}, |difference| x {n} = {flips:.2f} examples (at most {max_flips})"))
    return out


def jsonl_examples(path, vocab_dir):
    """The examples of a JSON Lines file as data/tokenize --hellaswag encodes them, with tiktoken:
    context = ctx, ending = " " + ending, nothing else; blank lines skipped."""
    try:
        import tiktoken  # noqa: F401  (gpt2_encoding's; imported only for --jsonl)
    except ImportError as e:
        raise ValueError(f"--jsonl needs tiktoken ({e})")
    from tokenizer_fixture import gpt2_encoding
    enc = gpt2_encoding(vocab_dir)
    out = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\n")
                if not line.strip(" \t\r"):
                    continue
                x = json.loads(line)
                out.append((int(x["label"]), enc.encode_ordinary(x["ctx"]),
                            [enc.encode_ordinary(" " + e) for e in x["endings"]]))
            except (ValueError, KeyError, TypeError) as e:  # UnicodeDecodeError and JSON errors are ValueErrors
                raise ValueError(f"{path}:{lineno}: cannot read the example ({type(e).__name__}: {e})")
    return out


def check_jsonl(examples, path, vocab_dir):
    """(ok, line): the JSON Lines re-encoded with tiktoken against the file's examples."""
    want = jsonl_examples(path, vocab_dir)
    if len(want) != len(examples):
        return False, f"--jsonl {path}: {len(want)} examples, the file has {len(examples)}"
    for e, (a, b) in enumerate(zip(examples, want)):
        for what, x, y in (("label", a[0], b[0]), ("context", a[1], b[1]), ("endings", a[2], b[2])):
            if x != y:
                return False, f"--jsonl {path}: example {e}: {what} differs: file {x}, tiktoken {y}"
    return True, f"--jsonl {path}: the {len(want)} examples re-encoded with tiktoken are the file's, token for token"


def evaluate(model_path, K, examples, device, batch_rows):
    """Runs reference.forward (fp32) over all K rows per example; returns score()'s dict."""
    import torch
    import torch.nn.functional as F
    import reference
    from model_file import read_model
    torch.backends.cuda.matmul.allow_tf32 = False  # true fp32 matmuls
    torch.backends.cudnn.allow_tf32 = False
    config, params = read_model(model_path)
    V, T = config["V"], max(len(x[1]) + len(e) for x in examples for e in x[2])
    if T > config["maxT"]:
        raise ValueError(f"{model_path}: the longest row has {T} tokens, the model's maxT is {config['maxT']}")
    top = max(max(x[1] + sum(x[2], [])) for x in examples)
    if top >= V:
        raise ValueError(f"token {top} is not below the model's vocabulary of {V}")
    p = {n: torch.from_numpy(a).to(device) for n, a in params.items()}
    pad = EOT if EOT < V else 0
    rows, sums, t0 = len(examples) * K, [], time.time()
    with torch.no_grad():
        for first in range(0, rows, batch_rows):
            n = min(batch_rows, rows - first)
            inputs, targets = (torch.from_numpy(a).to(device) for a in fill_rows(examples, K, first, n, T, pad))
            logits = reference.forward(p, config, inputs)
            losses = F.cross_entropy(logits.view(-1, V), targets.view(-1), reduction="none").view(n, T)
            sums += ending_sums(examples, K, first, losses.cpu().numpy())
    print(f"model {model_path}: L={config['L']} C={config['C']} V={V}; {rows} rows of {T} tokens on {device} "
          f"in {time.time() - t0:.1f} s")
    return score(examples, [sums[e * K:(e + 1) * K] for e in range(len(examples))])


def main():
    ap = doc_parser(__doc__)
    ap.add_argument("model", help="model file (fp32, e.g. a checkpoint's model.bin)")
    ap.add_argument("choices", help="multiple-choice file from data/tokenize --hellaswag")
    ap.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when available")
    ap.add_argument("--batch-rows", type=int, default=64, help="rows (context + one ending) per forward (default 64)")
    ap.add_argument("--compare", metavar="LOG", help="the trainer's stdout to check against the reference")
    ap.add_argument("--loss-tol", type=float, default=1e-5, help="relative completion loss tolerance (default 1e-5)")
    ap.add_argument("--max-flips", type=int, default=0, help="examples acc and acc_norm may differ by (default 0)")
    ap.add_argument("--jsonl", metavar="FILE", help="the JSON Lines CHOICES was made from: re-encode and compare")
    ap.add_argument("--vocab-dir", default=DEFAULT_VOCAB, help="GPT-2's encoder.json and vocab.bpe, for --jsonl")
    args = ap.parse_args()
    if args.batch_rows < 1:
        ap.error("--batch-rows must be at least 1")
    failures = 0
    try:
        K, examples = read_choices(args.choices)
        if args.jsonl:
            ok, line = check_jsonl(examples, args.jsonl, args.vocab_dir)
            print(("PASS " if ok else "FAIL ") + line)
            failures += not ok
        got = None
        if args.compare:  # read before the forward: a log without the line fails at once
            with open(args.compare, errors="replace") as f:
                got = parse_trainer_line(f.read())
            if got is None:
                print(f"FAIL --compare {args.compare}: no 'step S: hellaswag acc ... (N examples)' line")
                return 1
        try:
            import torch
        except ImportError:
            raise ValueError("torch is not installed (needed for the forward)")
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        ref = evaluate(args.model, K, examples, device, args.batch_rows)
    except (ValueError, OSError) as e:
        print(f"hellaswag_reference: {e}", file=sys.stderr)
        return 1
    print(f"hellaswag_reference: {ref['examples']} examples, acc {ref['acc']:.6f}, acc_norm {ref['acc_norm']:.6f}, "
          f"completion loss {ref['loss']:.6f}")
    if got is not None:
        for ok, line in compare(ref, got, args.loss_tol, args.max_flips):
            print(("PASS " if ok else "FAIL ") + line)
            failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
