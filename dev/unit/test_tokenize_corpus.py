"""Unit test of data/tokenize's corpus modes (no GPU; needs the built data/tokenize and GPT-2's
vocabulary, $GPT2_VOCAB_DIR or ../shared/data/gpt2): JSON Lines input gives the same shards as the
same documents in text files; any --threads gives the same bytes; --shard-tokens cuts the same
token stream into shards of the asked size; and the refusals (one line, exit 1, no shard left
behind): bad JSON, a missing field, invalid UTF-8, options that do not go together, a prefix
that already has shards, a validation size that leaves nothing to train on."""
import glob
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, ".."))
from check import check, finish, tokenize_and_vocab  # noqa: E402
from model_file import map_tokens  # noqa: E402
import numpy as np  # noqa: E402

TOKENIZE, vocab = tokenize_and_vocab()


def run(*args):
    r = subprocess.run([TOKENIZE, *args, "--vocab", vocab], capture_output=True, text=True)
    return r.returncode, r.stderr


def stream(prefix, sharded):
    """The whole token stream of a prefix's shards: val first, then train in order."""
    train = sorted(glob.glob(prefix + "_train_*.bin")) if sharded else [prefix + "_train.bin"]
    return np.concatenate([map_tokens(p) for p in [prefix + "_val.bin"] + train])


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def refused(name, args, pattern, tmp):
    before = sorted(os.listdir(tmp))
    rc, err = run(*args)
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and pattern in err and sorted(os.listdir(tmp)) == before,
          f"refuses {name}: one line, exit 1, nothing written: {err.strip()}")


docs = ["First Citizen:\nBefore we proceed any further, hear me speak.\n",
        "Ünïcödé: naïve façade, 日本語 and emoji 👋 \"quoted\" \\ back\tslash\n\n",
        "   leading spaces, trailing spaces   ",
        "<|endoftext|> is plain text here. 1,000,000 3.14159 it's we'll"]
docs += [f"document {i}: " + "to be or not to be, that is the question. " * (i % 17 + 1) for i in range(300)]

with tempfile.TemporaryDirectory() as tmp:
    texts = []
    for i, d in enumerate(docs):
        p = os.path.join(tmp, f"doc{i:03d}.txt")
        with open(p, "w", encoding="utf-8") as f:
            f.write(d)
        texts.append(p)
    jl = os.path.join(tmp, "docs.jsonl")
    with open(jl, "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "text": d}, ensure_ascii=(i % 2 == 0)) + "\n")
            if i == 2:
                f.write("\n")  # a blank line: skipped
    out = os.path.join(tmp, "out")
    os.mkdir(out)
    rc1, e1 = run(*texts, "-o", os.path.join(out, "files"), "--threads", "1")
    rc2, e2 = run(jl, "--jsonl", "-o", os.path.join(out, "jsonl"), "--threads", "4")
    check(rc1 == 0 and rc2 == 0, f"text files and JSON Lines tokenized: {e2.strip()}")
    check(all(same_bytes(os.path.join(out, "files" + s), os.path.join(out, "jsonl" + s)) for s in ("_train.bin", "_val.bin")),
          f"{len(docs)} documents as JSON Lines (4 threads) = as text files (1 thread): the same shard bytes")
    n = len(stream(os.path.join(out, "files"), False))
    check(n > 30000 and len(map_tokens(os.path.join(out, "files_val.bin"))) == int(0.1 * n), f"{n} tokens, the first 10 % to val")
    with open(os.path.join(tmp, "other.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps({"body": d}) + "\n")
    rc, _ = run(os.path.join(tmp, "other.jsonl"), "--jsonl", "--field", "body", "-o", os.path.join(out, "field"))
    check(rc == 0 and same_bytes(os.path.join(out, "files_train.bin"), os.path.join(out, "field_train.bin")), "--field body")
    # shards: the same stream, cut at 1000 tokens after 777 of validation
    for threads in ("1", "3"):
        prefix = os.path.join(out, "sh" + threads)
        rc, err = run(jl, "--jsonl", "-o", prefix, "--shard-tokens", "1000", "--val-tokens", "777", "--threads", threads)
        sizes = [len(map_tokens(p)) for p in sorted(glob.glob(prefix + "_train_*.bin"))]
        ok = rc == 0 and len(map_tokens(prefix + "_val.bin")) == 777 and all(s == 1000 for s in sizes[:-1]) and 1000 <= sizes[-1] < 2000
        check(ok and np.array_equal(stream(prefix, True), stream(os.path.join(out, "files"), False)),
              f"--shard-tokens 1000 --val-tokens 777, {threads} thread(s): {len(sizes)} train shards of 1000, the last {sizes[-1]}, the same token stream")
    check(all(same_bytes(a, b) for a, b in zip(sorted(glob.glob(os.path.join(out, "sh1_*"))), sorted(glob.glob(os.path.join(out, "sh3_*"))))),
          "shards with 1 and 3 threads: the same bytes")
    rc, _ = run(jl, "--jsonl", "-o", os.path.join(out, "dflt"), "--shard-tokens", "5000")
    check(rc == 0 and len(map_tokens(os.path.join(out, "dflt_val.bin"))) == 5000, "--val-tokens defaults to --shard-tokens")
    rc, err = run(jl, "--jsonl", "-o", os.path.join(out, "noval"), "--shard-tokens", "5000", "--val-tokens", "0")
    check(rc == 0 and not os.path.exists(os.path.join(out, "noval_val.bin")) and "no validation shard" in err and
          np.array_equal(np.concatenate([map_tokens(p) for p in sorted(glob.glob(os.path.join(out, "noval_train_*.bin")))]),
                         stream(os.path.join(out, "files"), False)), "--val-tokens 0: every token in the train shards")
    # more than one batch (a thread's batch is 8 MiB of text): the tokens left over from one batch
    # carried into the next, 1 thread against 2, the same bytes
    many = os.path.join(tmp, "many.jsonl")
    with open(many, "w") as f:
        r = 0
        while f.tell() < 20 << 20:
            f.writelines(json.dumps({"text": f"{r}.{i} " + d}) + "\n" for i, d in enumerate(docs))
            r += 1
    for threads in ("1", "2"):
        rc, err = run(many, "--jsonl", "-o", os.path.join(out, "many" + threads), "--shard-tokens", "700000", "--threads", threads)
    files1 = sorted(glob.glob(os.path.join(out, "many1_*")))
    check(rc == 0 and len(files1) > 3 and all(same_bytes(a, a.replace("many1_", "many2_")) for a in files1),
          f"20 MiB of JSON Lines (3 batches on 1 thread, 2 on 2): {len(files1)} shards, the same bytes")
    os.remove(many)
    with open(os.path.join(tmp, "empty.jsonl"), "w") as f:
        f.write("\n  \n")
    # refusals
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"text": "fine"}\n{"text": "cut\n')
    refused("a line that is not JSON", (bad, "--jsonl", "-o", os.path.join(tmp, "r1")), "bad.jsonl:2: not JSON", tmp)
    with open(bad, "w") as f:
        f.write('{"text": "fine"}\n{"body": "x"}\n')
    refused("a line without the field", (bad, "--jsonl", "-o", os.path.join(tmp, "r2")), 'bad.jsonl:2: no string field "text"', tmp)
    with open(bad, "w") as f:
        f.write('["text"]\n')
    refused("a line that is not an object", (bad, "--jsonl", "-o", os.path.join(tmp, "r3")), "(not a JSON object)", tmp)
    with open(os.path.join(tmp, "bad.txt"), "wb") as f:
        f.write(b"ok text \xff\xfe not UTF-8")
    refused("invalid UTF-8 in a text file", (texts[0], os.path.join(tmp, "bad.txt"), "-o", os.path.join(tmp, "r4")), "bad.txt: invalid UTF-8", tmp)
    # a failure after shards were written removes them: ~9 MiB of documents (more than one thread's
    # 8 MiB batch, so the first batch's shards are on disk when the reader meets the bad line)
    big = os.path.join(tmp, "late.jsonl")
    lines = [json.dumps({"text": d}) + "\n" for d in docs]
    n_lines = 0
    with open(big, "w") as f:
        while f.tell() < 9 << 20:
            f.writelines(lines)
            n_lines += len(lines)
        f.write("not json\n")
    refused("a bad line after 8 MiB of shards were written", (big, "--jsonl", "-o", os.path.join(tmp, "r5"), "--shard-tokens", "300000",
            "--threads", "1"), f"late.jsonl:{n_lines + 1}: not JSON", tmp)
    os.remove(big)
    refused("--field without --jsonl", (texts[0], "--field", "body", "-o", os.path.join(tmp, "r6")), "--field needs --jsonl", tmp)
    refused("--val-fraction with --shard-tokens", (texts[0], "--val-fraction", "0.2", "--shard-tokens", "10", "-o", os.path.join(tmp, "r7")),
            "with --shard-tokens, --val-tokens sets the validation size", tmp)
    refused("--val-tokens without --shard-tokens", (texts[0], "--val-tokens", "10", "-o", os.path.join(tmp, "r8")), "--val-tokens needs --shard-tokens", tmp)
    refused("--shard-tokens 0", (texts[0], "--shard-tokens", "0", "-o", os.path.join(tmp, "r9")), "option --shard-tokens: 0 is out of range [1, 1073741824]", tmp)
    refused("--threads 0", (texts[0], "--threads", "0", "-o", os.path.join(tmp, "r10")), "option --threads: 0 is out of range [1, 64]", tmp)
    refused("--val-tokens above the corpus", (jl, "--jsonl", "--shard-tokens", "100", "--val-tokens", "99999999", "-o", os.path.join(tmp, "r11")),
            "no training shard written (lower --val-tokens)", tmp)
    with open(bad, "wb") as f:
        f.write(b'{"text": "a"}\n{"text": "b"}\x00junk\n{"text": "c"}\n')
    refused("a NUL byte in a JSON Lines file", (bad, "--jsonl", "-o", os.path.join(tmp, "r12")), "bad.jsonl:2: a NUL byte", tmp)
    refused("an input without documents", (os.path.join(tmp, "empty.jsonl"), "--jsonl", "-o", os.path.join(tmp, "r13")),
            "no documents in the input", tmp)
    refused("--threads with --ids", ("--ids", texts[0], "--threads", "2"), "--jsonl, --shard-tokens and --threads go with -o", tmp)
    before = {p: open(p, "rb").read() for p in glob.glob(os.path.join(out, "sh1_*"))}
    refused("a prefix that already has shards", (jl, "--jsonl", "--shard-tokens", "100", "-o", os.path.join(out, "sh1")),
            "sh1_val.bin: shards with this prefix exist", tmp)
    check(before == {p: open(p, "rb").read() for p in glob.glob(os.path.join(out, "sh1_*"))}, "the existing shards left as they were")
    os.remove(os.path.join(out, "sh1_val.bin"))
    refused("a prefix that has train shards only", (jl, "--jsonl", "--shard-tokens", "100", "-o", os.path.join(out, "sh1")),
            "sh1_train_000000.bin: shards with this prefix exist", tmp)
    odd = os.path.join(tmp, "odd[1]")  # glob characters in the prefix are the prefix's own
    rc, _ = run(jl, "--jsonl", "--shard-tokens", "5000", "-o", odd)
    refused("a prefix with glob characters that already has shards", (jl, "--jsonl", "--shard-tokens", "100", "-o", odd),
            "odd[1]_val.bin: shards with this prefix exist", tmp)
    os.remove(odd + "_val.bin")
    refused("the same, its train shards only", (jl, "--jsonl", "--shard-tokens", "100", "-o", odd),
            "odd[1]_train_000000.bin: shards with this prefix exist", tmp)
finish()
