"""Unit test of the multiple-choice (HellaSwag) data path, no GPU and no torch: dev/hellaswag_fixture.py
writes valid, deterministic JSON Lines; `data/tokenize --hellaswag` turns them into the file that
llmc/choices.h describes (read back with dev/hellaswag_reference.py's read_choices), its tokens
those of `data/tokenize --ids` on the same texts (an ending with its leading space); several input
files are one set of examples in order; and the refusals (exit 1, one line "tokenize: ...", naming
FILE:LINE when about a line, nothing written, an existing OUT.bin left as it was). Also the
reference's numpy bookkeeping (rows, ending sums, ties, the trainer line it compares against).
Needs the built data/tokenize and GPT-2's vocabulary ($GPT2_VOCAB_DIR or ../shared/data/gpt2)."""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, ".."))
from check import check, finish, tokenize_and_vocab  # noqa: E402
from hellaswag_reference import (compare, ending_sums, fill_rows, parse_trainer_line, read_choices,  # noqa: E402
                                 score, CHOICES_MAGIC, CHOICES_VERSION)
import numpy as np  # noqa: E402

root = os.path.join(here, "..", "..")
FIXTURE = os.path.join(root, "dev", "hellaswag_fixture.py")
TOKENIZE, vocab = tokenize_and_vocab()
N = 40  # examples: the non-ASCII one (3) and string labels (4, 9, ...) among them
FIELDS = {"ind", "activity_label", "ctx_a", "ctx_b", "ctx", "endings", "source_id", "split", "split_type", "label"}


def run(*args):
    r = subprocess.run([TOKENIZE, *args, "--vocab", vocab], capture_output=True, text=True, errors="replace")
    return r.returncode, r.stdout, r.stderr


def fixture(out, *args):
    return subprocess.run([sys.executable, FIXTURE, out, "--text", text, "--examples", str(N), *args],
                          capture_output=True, text=True)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def ids(tmp, text_):
    """data/tokenize --ids of a file holding exactly text_ (no newline added)."""
    rc, out, err = run("--ids", write(os.path.join(tmp, "ids.txt"), text_))
    assert rc == 0, err
    return [int(t) for t in out.split()]


def line(ctx="A man sits down.", endings=("He stands.", "He eats.", "He sleeps.", "He sings."), label=0):
    return json.dumps({"ctx": ctx, "endings": list(endings), "label": label})


with tempfile.TemporaryDirectory() as tmp:
    # the text to draw from: tinyshakespeare as the Makefile passes it, else a made-up one
    text = os.environ.get("TINYSHAKESPEARE") or os.path.join(root, "..", "shared", "data", "tinyshakespeare.txt")
    if not os.path.exists(text):
        print(f"note: {text} not found; the fixture draws from a made-up text")
        text = write(os.path.join(tmp, "text.txt"), "".join(f"SPEAKER {i % 7}:\nline number {i} of the text.\n\n" for i in range(500)))

    # --- the fixture generator
    jl, again = os.path.join(tmp, "fix.jsonl"), os.path.join(tmp, "again.jsonl")
    r1, r2 = fixture(jl), fixture(again)
    check(r1.returncode == 0 and r2.returncode == 0 and read(jl) == read(again), f"fixture: two runs, the same bytes ({r1.stderr.strip()})")
    r3 = fixture(again, "--seed", "2")
    check(r3.returncode == 0 and read(again) != read(jl), "fixture: another --seed, other examples")
    lines = read(jl).decode("utf-8").split("\n")
    try:
        rows = [json.loads(s) for s in lines[:-1]]
    except ValueError:
        rows = []
    check(len(lines) == N + 1 and lines[-1] == "" and len(rows) == N, f"fixture: {N} lines, each valid JSON")
    check(all(set(x) == FIELDS and x["split"] == "val" and x["ind"] == i and x["ctx"] == x["ctx_a"] + " " + x["ctx_b"]
              for i, x in enumerate(rows)) and rows, "fixture: HellaSwag's fields, ctx = ctx_a + ' ' + ctx_b")
    check(all(len(x["endings"]) == 4 and len(set(x["endings"])) == 4 and all(isinstance(e, str) and e for e in x["endings"])
              for x in rows) and rows, "fixture: 4 distinct non-empty endings per example")
    labels = [int(x["label"]) for x in rows]
    check(all(0 <= v < 4 for v in labels) and len(set(labels)) > 1, f"fixture: labels in 0..3, not all the same ({labels[:10]}...)")
    check(all(isinstance(x["label"], str) == (i % 5 == 4) for i, x in enumerate(rows)) and rows,
          "fixture: every 5th label a string of digits, the rest ints")
    check(rows and not rows[3]["ctx"].isascii() and not all(e.isascii() for e in rows[3]["endings"]) and "👋" in read(jl).decode(),
          "fixture: example 3 non-ASCII (raw UTF-8, an emoji)")
    r = subprocess.run([sys.executable, FIXTURE, os.path.join(tmp, "x.jsonl"), "--text", os.path.join(tmp, "missing.txt")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "missing.txt" in r.stderr, f"fixture refuses a missing text: {r.stderr.strip()}")
    r = subprocess.run([sys.executable, FIXTURE, os.path.join(tmp, "x.jsonl"), "--text", write(os.path.join(tmp, "short.txt"), "one\n\ntwo\n")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "too few lines" in r.stderr, f"fixture refuses a short text: {r.stderr.strip()}")

    # --- data/tokenize --hellaswag, read back
    out = os.path.join(tmp, "out")
    os.mkdir(out)
    bin_ = os.path.join(out, "fix.bin")
    rc, _, err = run("--hellaswag", jl, "-o", bin_)
    check(rc == 0 and os.listdir(out) == ["fix.bin"], f"--hellaswag: exit 0, the file and no .tmp ({err.strip()})")
    try:
        K, ex = read_choices(bin_)
    except (ValueError, OSError) as e:
        K, ex = 0, []
        print(f"read_choices: {e}")
    h = np.fromfile(bin_, dtype="<i4", count=256)
    check(K == 4 and len(ex) == N and [x[0] for x in ex] == labels, f"read_choices: {len(ex)} examples, K={K}, the JSONL's labels")
    longest = max((len(c) + len(e) for _, c, es in ex for e in es), default=-1)
    body = sum(2 + K + len(c) + sum(len(e) for e in es) for _, c, es in ex)
    check(list(h[:6]) == [CHOICES_MAGIC, CHOICES_VERSION, N, 4, longest, body] and not h[6:].any() and
          os.path.getsize(bin_) == 1024 + 2 * body, f"header: magic, version, {N}, 4, longest row {longest}, body {body} uint16 = the file's size, rest zero")

    # --- tokens: data/tokenize --ids of the same texts
    hello = ids(tmp, "Hello world")
    check(hello == [15496, 995], f"--ids 'Hello world' = [15496, 995], no <|endoftext|> first ({hello})")
    for e in (0, 3, 4, N - 1):
        ok = bool(ex) and ex[e][1] == ids(tmp, rows[e]["ctx"]) and all(ex[e][2][i] == ids(tmp, " " + s) for i, s in enumerate(rows[e]["endings"]))
        check(ok, f"example {e}: context = --ids of ctx, each ending = --ids of ' ' + ending ({len(ex[e][1]) if ex else 0} context tokens)")
    # the same examples written differently: \u escapes (the emoji as a surrogate pair), CRLF line
    # ends and blank lines between examples give the same file
    escaped = "".join(json.dumps(x, ensure_ascii=True) + "\r\n" + ("\n \t\r\n" if i % 7 == 0 else "") for i, x in enumerate(rows))
    rc, _, err = run("--hellaswag", write(os.path.join(tmp, "esc.jsonl"), escaped), "-o", os.path.join(out, "esc.bin"))
    check(rc == 0 and read(os.path.join(out, "esc.bin")) == read(bin_), f"\\u escapes, CRLF and blank lines: the same bytes {err.strip()}")

    # --- two input files: their examples one after the other
    a = write(os.path.join(tmp, "a.jsonl"), "".join(s + "\n" for s in lines[:15]))
    b = write(os.path.join(tmp, "b.jsonl"), "".join(s + "\n" for s in lines[15:N]))
    rc1, _, _ = run("--hellaswag", a, b, "-o", os.path.join(out, "ab.bin"))
    rc2, _, _ = run("--hellaswag", b, a, "-o", os.path.join(out, "ba.bin"))
    ba = read_choices(os.path.join(out, "ba.bin"))[1] if rc2 == 0 else []
    check(rc1 == 0 and read(os.path.join(out, "ab.bin")) == read(bin_), "two files (15 + 25 examples): the same bytes as the one file")
    check(rc2 == 0 and ba == ex[15:] + ex[:15], "the other order: the second file's examples first")

    # --- refusals: exit 1, one line "tokenize: ...", naming FILE:LINE when about a line, nothing written
    bad = os.path.join(tmp, "bad.jsonl")

    def refused(name, content, where, args=None, want=None):
        if content is not None:
            write(bad, content)
        before = sorted(os.listdir(out))
        rc, _, err = run(*(args or ("--hellaswag", bad, "-o", os.path.join(out, "r.bin"))))
        msgs = err.strip().splitlines()
        ok = rc == 1 and len(msgs) == 1 and msgs[0].startswith("tokenize: ") and where in msgs[0] and (want is None or want in msgs[0])
        check(ok and sorted(os.listdir(out)) == before, f"refuses {name}: exit {rc}, one line, nothing written: {err.strip()}")

    good = line() + "\n"
    refused("a line that is not JSON", good + '{"ctx": "cut\n', bad + ":2: ", want="not JSON")
    refused('a line without "ctx"', good + json.dumps({"endings": ["a", "b", "c", "d"], "label": 0}) + "\n", bad + ":2: ", want='"ctx"')
    refused('"endings" not an array', good + json.dumps({"ctx": "x", "endings": "a b c d", "label": 0}) + "\n", bad + ":2: ", want='"endings"')
    refused('an ending that is not a string', good + json.dumps({"ctx": "x", "endings": ["a", 1, "c", "d"], "label": 0}) + "\n", bad + ":2: ")
    refused("3 endings after a first line of 4", good + line(endings=("a", "b", "c")) + "\n", bad + ":2: ", want="3 endings")
    refused("label 4 of 4 endings", good + "\n" + line(label=4) + "\n", bad + ":3: ", want="label 4")  # blank lines count
    refused('label "x"', line(label="x") + "\n", bad + ":1: ", want='"label"')
    refused("label -1", good + line(label=-1) + "\n", bad + ":2: ", want='"label"')
    refused('label "1.5"', good + line(label="1.5") + "\n", bad + ":2: ", want='"label"')
    refused('a line without "label"', good + json.dumps({"ctx": "x", "endings": ["a", "b", "c", "d"]}) + "\n", bad + ":2: ")
    refused('an empty ctx ""', good + line(ctx="") + "\n", bad + ":2: ", want="empty context")
    # a JSON error quotes the string read so far through printable: cut at 80 bytes, a DEL as \x7f (found by
    # dev/fuzz/fuzz_hellaswag_jsonl: nlohmann's message held all of it, raw, so a long line made a long message)
    for name, ctx, want in (("a long ctx", "x" * 5000, "xxx..."), ("a DEL", "x\x7f", "x\\x7f<U+0001>'")):
        write(bad, good + '{"ctx": "' + ctx + '\x01", "endings": ["a", "b", "c", "d"], "label": 0}\n')
        rc, _, err = run("--hellaswag", bad, "-o", os.path.join(out, "r.bin"))
        check(rc == 1 and len(err) < 400 and want in err and "\x7f" not in err and err.startswith("tokenize: " + bad + ":2: not JSON"),
              f"a control byte after {name}: one short readable line: {err.strip()}")
    refused("only blank lines", "\n  \n\t\r\n", "tokenize: ", want="no examples")
    refused("invalid UTF-8 in ctx", good.encode() + b'{"ctx": "caf\xe9 \xff", "endings": ["a", "b", "c", "d"], "label": 0}\n', bad + ":2: ")
    k3 = write(os.path.join(tmp, "k3.jsonl"), line(endings="abc") + "\n")
    refused("3 endings in a second file after 4 in the first", None, k3 + ":1: ", ("--hellaswag", jl, k3, "-o", os.path.join(out, "r.bin")),
            want="3 endings")
    refused("--hellaswag without -o", None, "tokenize: ", ("--hellaswag", jl), want="-o")
    refused("--hellaswag with --jsonl", None, "tokenize: ", ("--hellaswag", jl, "--jsonl", "-o", os.path.join(out, "r.bin")), want="--jsonl")
    refused("a missing input file", None, "nope.jsonl", ("--hellaswag", os.path.join(tmp, "nope.jsonl"), "-o", os.path.join(out, "r.bin")))

    # --- an existing OUT.bin is replaced on success only
    before = read(bin_)
    rc, _, _ = run("--hellaswag", write(bad, good + "not json\n"), "-o", bin_)
    check(rc == 1 and read(bin_) == before and sorted(os.listdir(out)) == ["ab.bin", "ba.bin", "esc.bin", "fix.bin"],
          "a refused input leaves the existing OUT.bin as it was, and no .tmp")
    rc, _, _ = run("--hellaswag", a, "-o", bin_)
    check(rc == 0 and read_choices(bin_)[1] == ex[:15], "a good input replaces it")

    # --- read_choices refuses damaged files, one line naming the file
    good_bytes = read(os.path.join(out, "ab.bin"))
    damaged = {"truncated": good_bytes[:-2], "bad magic": b"\0" * 4 + good_bytes[4:], "short": good_bytes[:100],
               "a wrong longest row": good_bytes[:16] + np.int32(longest + 1).tobytes() + good_bytes[20:],
               "a label of 4": good_bytes[:1024] + np.uint16(4).tobytes() + good_bytes[1026:]}
    for name, data in damaged.items():
        path = write(os.path.join(tmp, "damaged.bin"), data)
        try:
            read_choices(path)
            msg = ""
        except ValueError as e:
            msg = str(e)
        check(msg.startswith(path + ": ") and "\n" not in msg, f"read_choices refuses {name}: {msg}")
    # a row longer than 65535 tokens (context 65535 + an ending of 1): choices_read refuses it
    # ("context + ending 0 exceed 65535 tokens"), so the reference must too
    head = np.zeros(256, dtype="<i4")
    head[:6] = [CHOICES_MAGIC, CHOICES_VERSION, 1, 2, 65536, 2 + 2 + 65535 + 2]
    path = write(os.path.join(tmp, "long.bin"), head.tobytes() + np.array([0, 65535, 1, 1] + [5] * 65535 + [6, 7], dtype="<u2").tobytes())
    try:
        read_choices(path)
        msg = ""
    except ValueError as e:
        msg = str(e)
    check(msg == path + ": example 0: context + ending 0 exceed 65535 tokens", f"read_choices refuses a row of 65536 tokens, as choices_read: {msg}")

# --- the reference's bookkeeping (numpy): row layout, which losses an ending sums, ties
toy = [(1, [10, 11, 12], [[20], [21, 22], [23, 24, 25]]), (0, [30], [[40, 41], [42], [43]])]
inputs, targets = fill_rows(toy, 3, 0, 6, 7, 50256)
check(list(inputs[1]) == [10, 11, 12, 21, 22, 50256, 50256] and list(targets[1]) == [11, 12, 21, 22, 50256, 50256, 50256] and
      list(inputs[5]) == [30, 43] + [50256] * 5, "fill_rows: context + ending, then the pad; targets one ahead")
sums = ending_sums(toy, 3, 0, targets.astype(np.float32))  # loss := the target: each sum is its ending's tokens
check(sums == [20, 43, 72, 81, 42, 43], f"ending_sums: the losses at c-1..c+len-2 predict exactly the ending ({sums})")
# example 0 (label 1): the lowest sum 0 (wrong), the lowest mean 2 (3, 2, 1.5: wrong); example 1
# (label 0): the lowest sum 1 (wrong), the lowest mean 0 (1, 1.5, 1.5: right); 16.5 over 10 tokens
s = score(toy, [[3.0, 4.0, 4.5], [2.0, 1.5, 1.5]])
check(s["examples"] == 2 and s["acc"] == 0.0 and s["acc_norm"] == 0.5 and abs(s["loss"] - 16.5 / 10) < 1e-12, f"score: acc, acc_norm, loss ({s})")
# ties: example 0's sums 4 = 4 at endings 1 and 2 (label 1), example 1's means 1 = 1 = 1 (label 0):
# both right only when a tie goes to the lower index
s = score(toy, [[5.0, 4.0, 4.0], [2.0, 1.0, 1.0]])
check(s["acc"] == 0.5 and s["acc_norm"] == 0.5, f"score: ties go to the lower index ({s})")
log = ("step 0: hellaswag acc 0.100000 acc_norm 0.100000 completion loss 9.000000 (200 examples)\nnoise\n"
       "step 5: hellaswag acc 0.285000 acc_norm 0.300000 completion loss 3.456789 (200 examples, 0.31 s)\n")
got = parse_trainer_line(log)
check(got == {"acc": 0.285, "acc_norm": 0.3, "loss": 3.456789, "examples": 200} and parse_trainer_line("no line\n") is None,
      "the trainer's line: the last one parsed, none in a log without one")
ref = {"examples": 200, "acc": 0.29, "acc_norm": 0.3, "loss": 3.4568}
res = [ok for ok, _ in compare(ref, got, 1e-5, 0)]
res1 = [ok for ok, _ in compare(ref, got, 1e-5, 1)]
check(res == [True, True, False, True] and res1 == [True] * 4, "compare: 1 flip fails with --max-flips 0, passes with 1")
check(not compare(ref, dict(got, loss=float("nan")), 1, 0)[1][0], "compare: a nan completion loss fails")
finish()
