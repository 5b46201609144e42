"""Unit test of data/tokenize's corpus modes (no GPU; needs the built data/tokenize and GPT-2's
vocabulary, $GPT2_VOCAB_DIR or ../shared/data/gpt2): JSON Lines input gives the same shards as the
same documents in text files; any --threads gives the same bytes; --shard-tokens cuts the same
token stream into shards of the asked size; and the refusals (one line, exit 1, no shard left
behind): bad JSON, a missing field, invalid UTF-8, options that do not go together, a prefix
that already has shards, a validation size that leaves nothing to train on, an output that is one
of the inputs or the vocabulary (also through a symlink or ./), an empty output path, a corpus
too small to give each shard 2 tokens; a failed write of the train/val pair leaves the old pair
as it was; --val-tokens -1 (the help's "N") is accepted; a run stopped by SIGINT, SIGTERM or
SIGHUP removes the shards it wrote or leaves the old output as it was (exit 128 + N, one line),
and one started with SIGHUP ignored (nohup) keeps ignoring it."""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, ".."))
from check import check, finish, tokenize_and_vocab  # noqa: E402
from model_file import map_tokens  # noqa: E402
import numpy as np  # noqa: E402

TOKENIZE, vocab = tokenize_and_vocab()


def run(*args, vocab_dir=None, cwd=None):
    r = subprocess.run([TOKENIZE, *args, "--vocab", vocab_dir or vocab], capture_output=True, text=True, errors="replace", cwd=cwd)
    return r.returncode, r.stderr


def stream(prefix, sharded):
    """The whole token stream of a prefix's shards: val first, then train in order."""
    train = sorted(glob.glob(prefix + "_train_*.bin")) if sharded else [prefix + "_train.bin"]
    return np.concatenate([map_tokens(p) for p in [prefix + "_val.bin"] + train])


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def contents(folder):
    """Every file under folder (recursively) with its bytes: what "nothing written or lost" compares."""
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            files[p] = open(p, "rb").read() if os.path.isfile(p) else os.readlink(p)
    return files


def rm(*paths):
    """Removes what a test made (files, symlinks, empty folders); a path already gone is fine."""
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            os.rmdir(p)
        elif os.path.lexists(p):
            os.remove(p)


def refused(name, args, pattern, tmp, **kw):
    before = contents(tmp)
    rc, err = run(*args, **kw)
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and pattern in err and contents(tmp) == before,
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
    # JSON Lines that data/tokenize --jsonl refuses: what the file holds, the error it must name
    bad_lines = [("a line that is not JSON", '{"text": "fine"}\n{"text": "cut\n', "bad.jsonl:2: not JSON"),
                 ("a line without the field", '{"text": "fine"}\n{"body": "x"}\n', 'bad.jsonl:2: no string field "text"'),
                 ("a line that is not an object", '["text"]\n', "(not a JSON object)"),
                 ("a null text", '{"text": "fine"}\n{"text": null}\n', 'bad.jsonl:2: no string field "text"'),
                 ("a lone surrogate escape", '{"text": "fine"}\n{"text": "half a pair \\ud800 here"}\n', "bad.jsonl:2: not JSON")]
    for i, (name, text, pattern) in enumerate(bad_lines):
        with open(bad, "w") as f:
            f.write(text)
        refused(name, (bad, "--jsonl", "-o", os.path.join(tmp, f"r_jsonl{i}")), pattern, tmp)
    # a Latin-1 byte in a JSON line: the error quotes what was read as \xNN, so the line itself is
    # UTF-8 (it held the raw byte, which a reader of stderr as text could not decode)
    with open(bad, "wb") as f:
        f.write(b'{"text": "fine"}\n{"text": "caf\xe9 au lait"}\n')
    refused("a Latin-1 byte in a JSON line", (bad, "--jsonl", "-o", os.path.join(tmp, "r_latin1")), "bad.jsonl:2: not JSON", tmp)
    rc, err = run(bad, "--jsonl", "-o", os.path.join(tmp, "r_latin1"))
    check("'\"caf\\xe9 '" in err and "\ufffd" not in err, f"the Latin-1 byte quoted as \\xe9, the line UTF-8: {err.strip()}")
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
    refused("--shard-tokens 0", (texts[0], "--shard-tokens", "0", "-o", os.path.join(tmp, "r9")), "option --shard-tokens: 0 is out of range [2, 1073741824]", tmp)
    refused("--shard-tokens 1 (a shard of 1 token has no target)", (texts[0], "--shard-tokens", "1", "-o", os.path.join(tmp, "r9")),
            "option --shard-tokens: 1 is out of range [2, 1073741824]", tmp)
    refused("--threads 0", (texts[0], "--threads", "0", "-o", os.path.join(tmp, "r10")), "option --threads: 0 is out of range [1, 64]", tmp)
    refused("--val-tokens above the corpus", (jl, "--jsonl", "--shard-tokens", "100", "--val-tokens", "99999999", "-o", os.path.join(tmp, "r11")),
            "and the train shard(s) 0, each needs at least 2 (an input and its target); lower --val-tokens", tmp)
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
    # an output that is one of the files read: refused before anything is written, whatever the mode,
    # the same file found by device and inode (a symlink, ./, a leftover .tmp name)
    hs = os.path.join(tmp, "hs.jsonl")
    with open(hs, "w") as f:
        f.write(json.dumps({"ctx": "To be, or not to be", "endings": ["that is the question.", "a horse."], "label": 0}) + "\n")
    refused("--hellaswag X.jsonl -o X.jsonl", ("--hellaswag", hs, "-o", hs), f"option -o: it would write {hs}, which is the input {hs}", tmp)
    refused("--hellaswag -o the input spelt with ./", ("--hellaswag", "hs.jsonl", "-o", "./hs.jsonl"), "which is the input hs.jsonl (the same file)",
            tmp, cwd=tmp)
    os.symlink("hs.jsonl", os.path.join(tmp, "hs_link.jsonl"))
    refused("--hellaswag -o a symlink to the input", ("--hellaswag", hs, "-o", os.path.join(tmp, "hs_link.jsonl")),
            f"which is the input {hs} (the same file)", tmp)
    refused("--hellaswag reading the symlink, -o the file", ("--hellaswag", os.path.join(tmp, "hs_link.jsonl"), "-o", hs), "(the same file)", tmp)
    os.link(hs, os.path.join(tmp, "hs_hard.jsonl"))
    refused("--hellaswag -o a hard link to the input", ("--hellaswag", hs, "-o", os.path.join(tmp, "hs_hard.jsonl")), "(the same file)", tmp)
    rm(os.path.join(tmp, "hs_link.jsonl"), os.path.join(tmp, "hs_hard.jsonl"))
    rc, _ = run(*texts, "-o", os.path.join(tmp, "pair"))
    check(rc == 0, "a pair to read back")
    refused("-o PREFIX with PREFIX_val.bin as an input", (os.path.join(tmp, "pair_val.bin"), "-o", os.path.join(tmp, "pair")),
            "it would write " + os.path.join(tmp, "pair_val.bin") + ", which is the input", tmp)
    shutil.copy(texts[4], os.path.join(tmp, "pair_train.bin.tmp"))  # an input under the name of a temporary the run writes
    refused("-o PREFIX with PREFIX_train.bin.tmp as an input", (os.path.join(tmp, "pair_train.bin.tmp"), "-o", os.path.join(tmp, "pair")),
            "pair_train.bin.tmp, which is the input", tmp)
    rm(os.path.join(tmp, "pair_train.bin.tmp"))
    rc, _ = run(jl, "--jsonl", "--shard-tokens", "5000", "-o", os.path.join(tmp, "shin"))
    refused("--shard-tokens -o PREFIX with one of PREFIX's train shards as an input",
            (os.path.join(tmp, "shin_train_000000.bin"), texts[0], "--shard-tokens", "100", "-o", os.path.join(tmp, "shin")),
            "shin_train_000000.bin, which is the input", tmp)
    rm(*glob.glob(os.path.join(tmp, "shin_*")))
    refused("a missing input, before anything is written", (texts[0], os.path.join(tmp, "nope.txt"), "-o", os.path.join(tmp, "r14")),
            "nope.txt: cannot open: No such file or directory", tmp)
    # the vocabulary is read too: a copy of it here, so that a regression cannot touch the real one
    vcopy = os.path.join(tmp, "vocab")
    os.mkdir(vcopy)
    for v in ("encoder.json", "vocab.bpe"):
        shutil.copy(os.path.join(vocab, v), vcopy)
    os.symlink(os.path.join(vcopy, "encoder.json"), os.path.join(tmp, "enc_link.json"))
    refused("--export-decoder onto encoder.json", ("--export-decoder", os.path.join(vcopy, "encoder.json")),
            "option --export-decoder: it would write " + os.path.join(vcopy, "encoder.json") + ", which is the vocabulary's", tmp, vocab_dir=vcopy)
    refused("--export-decoder onto a symlink to encoder.json", ("--export-decoder", os.path.join(tmp, "enc_link.json")),
            "which is the vocabulary's " + os.path.join(vcopy, "encoder.json") + " (the same file)", tmp, vocab_dir=vcopy)
    os.symlink(os.path.join(vcopy, "vocab.bpe"), os.path.join(tmp, "vb_val.bin"))
    refused("-o PREFIX whose val shard is a symlink to vocab.bpe", (texts[0], "-o", os.path.join(tmp, "vb")), "which is the vocabulary's", tmp,
            vocab_dir=vcopy)
    refused("--hellaswag -o vocab.bpe", ("--hellaswag", hs, "-o", os.path.join(vcopy, "vocab.bpe")), "which is the vocabulary's", tmp, vocab_dir=vcopy)
    rc, err = run("--export-decoder", os.path.join(tmp, "dec.bin"), vocab_dir=vcopy)
    check(rc == 0 and os.path.getsize(os.path.join(tmp, "dec.bin")) > 0, f"--export-decoder elsewhere still writes: {err.strip()}")
    rm(*(os.path.join(tmp, p) for p in ("dec.bin", "vb_val.bin", "enc_link.json")))
    shutil.rmtree(vcopy)
    # empty output paths: one line naming the option (-o '' would write _train.bin into the working folder)
    refused("--export-decoder ''", ("--export-decoder", ""), "option --export-decoder: the path is empty", tmp, cwd=tmp)
    refused("-o ''", (texts[0], "-o", ""), "option -o: the path is empty", tmp, cwd=tmp)
    refused("--hellaswag -o ''", ("--hellaswag", hs, "-o", ""), "option -o: the path is empty", tmp, cwd=tmp)
    refused("--ids ''", ("--ids", ""), "option --ids: the path is empty", tmp, cwd=tmp)
    refused("an empty FILE", (texts[0], "", "-o", os.path.join(tmp, "r15")), "an empty FILE argument", tmp)
    # the train/val pair replaced together or not at all: a failure writing or renaming either one
    # leaves the old pair (and no temporary) behind; a good run replaces both (make data's reruns)
    pair = {p: open(p, "rb").read() for p in (os.path.join(tmp, "pair_train.bin"), os.path.join(tmp, "pair_val.bin"))}
    for blocker in ("pair_train.bin.tmp", "pair_val.bin.tmp"):
        os.mkdir(os.path.join(tmp, blocker))
        refused(f"a pair whose {blocker} cannot be created (a directory there)", (texts[5], "-o", os.path.join(tmp, "pair")),
                f"{os.path.join(tmp, blocker[:-4])}: cannot create the .tmp file: Is a directory", tmp)
        rm(os.path.join(tmp, blocker))
    check(pair == {p: open(p, "rb").read() for p in pair}, "the old pair left as it was")
    os.mkdir(os.path.join(tmp, "pq_val.bin"))  # the second rename fails: the first, done, is undone
    shutil.copy(os.path.join(tmp, "pair_train.bin"), os.path.join(tmp, "pq_train.bin"))
    refused("a pair whose val shard cannot be renamed into place", (texts[5], "-o", os.path.join(tmp, "pq")),
            "pq_val.bin: cannot rename " + os.path.join(tmp, "pq_val.bin.tmp") + " into place", tmp)
    rm(os.path.join(tmp, "pq_train.bin"))
    refused("the same, with no old train shard", (texts[5], "-o", os.path.join(tmp, "pq")), "pq_val.bin: cannot rename", tmp)
    rm(os.path.join(tmp, "pq_val.bin"))
    os.mkdir(os.path.join(tmp, "pq_train.bin"))
    refused("a pair whose train shard is a directory", (texts[5], "-o", os.path.join(tmp, "pq")), "pq_train.bin: cannot rename", tmp)
    rm(os.path.join(tmp, "pq_train.bin"))
    rc, err = run(texts[5], texts[6], "-o", os.path.join(tmp, "pair"))
    n_new = len(stream(os.path.join(tmp, "pair"), False))
    check(rc == 0 and n_new < len(np.frombuffer(pair[os.path.join(tmp, "pair_train.bin")], np.uint16)) and
          not glob.glob(os.path.join(tmp, "*.tmp")), f"a good run replaces the pair ({n_new} tokens now), no .tmp left: {err.strip()}")
    # too small a corpus: each shard needs 2 tokens (an input and its target). "a" + " a" * (k-1) is
    # k tokens, and <|endoftext|> one more; the default split gives val int(0.1 * n): 2 from n = 20
    def tiny(k):
        p = os.path.join(tmp, f"tiny{k}.txt")
        with open(p, "w") as f:
            f.write("a" + " a" * (k - 1) if k else "")
        return p
    check(len(subprocess.run([TOKENIZE, "--ids", tiny(19), "--vocab", vocab], capture_output=True, text=True).stdout.split()) == 19,
          "the tiny inputs' token counts (19 tokens in tiny19.txt)")
    refused("an empty input", (tiny(0), "-o", os.path.join(tmp, "r16")),
            "tiny0.txt: 1 token, too few: the val shard would hold 0 and the train shard(s) 1, each needs at least 2", tmp)
    refused("19 tokens (val would hold 1)", (tiny(18), "-o", os.path.join(tmp, "r16")), "19 tokens, too few: the val shard would hold 1 and", tmp)
    refused("several tiny files", (tiny(4), tiny(5), "-o", os.path.join(tmp, "r16")), "tiny4.txt and 1 more file(s): 11 tokens, too few", tmp)
    refused("--val-fraction 0 (an empty val shard)", (texts[0], "--val-fraction", "0", "-o", os.path.join(tmp, "r16")), "the val shard would hold 0", tmp)
    rc, err = run(tiny(19), "-o", os.path.join(tmp, "t20"))
    check(rc == 0 and len(map_tokens(os.path.join(tmp, "t20_val.bin"))) == 2 and len(map_tokens(os.path.join(tmp, "t20_train.bin"))) == 18,
          f"20 tokens: val 2, train 18: {err.strip()}")
    refused("--shard-tokens: an empty input (all of it in val)", (tiny(0), "--shard-tokens", "5", "-o", os.path.join(tmp, "r17")),
            "tiny0.txt: 1 token, too few: the val shard would hold 1 and the train shard(s) 0", tmp)
    refused("--shard-tokens 5: 6 tokens (a 1-token train shard)", (tiny(5), "--shard-tokens", "5", "-o", os.path.join(tmp, "r17")),
            "6 tokens, too few: the val shard would hold 5 and the train shard(s) 1, each needs at least 2 (an input and its target); lower --val-tokens", tmp)
    refused("--shard-tokens --val-tokens 0: an empty input", (tiny(0), "--shard-tokens", "5", "--val-tokens", "0", "-o", os.path.join(tmp, "r17")),
            "the val shard would hold 0 and the train shard(s) 1", tmp)
    refused("--val-tokens 1", (texts[0], "--shard-tokens", "5", "--val-tokens", "1", "-o", os.path.join(tmp, "r17")),
            "option --val-tokens: 1 token cannot make a val shard", tmp)
    rc, err = run(tiny(6), "--shard-tokens", "5", "-o", os.path.join(tmp, "t7"))
    check(rc == 0 and len(map_tokens(os.path.join(tmp, "t7_val.bin"))) == 5 and len(map_tokens(os.path.join(tmp, "t7_train_000000.bin"))) == 2,
          f"--shard-tokens 5: 7 tokens: val 5, train 2: {err.strip()}")
    # --val-tokens -1: the help's "-1: N", the default, accepted when given
    rc, _ = run(jl, "--jsonl", "-o", os.path.join(out, "m1"), "--shard-tokens", "5000", "--val-tokens", "-1")
    check(rc == 0 and all(same_bytes(a, a.replace("m1_", "dflt_")) for a in glob.glob(os.path.join(out, "m1_*"))) and
          len(glob.glob(os.path.join(out, "m1_*"))) == len(glob.glob(os.path.join(out, "dflt_*"))), "--val-tokens -1 = no --val-tokens (N)")
    help_text = subprocess.run([TOKENIZE, "--help"], capture_output=True, text=True).stdout
    check("(-1: N, 0: none, else at least 2) [-1]" in help_text, "--help's --val-tokens row names -1, 0 and the default -1")
    refused("--val-tokens -2", (texts[0], "--shard-tokens", "5", "--val-tokens", "-2", "-o", os.path.join(tmp, "r18")),
            "option --val-tokens: -2 is out of range [-1, 2147483647]", tmp)
    refused("--val-tokens -1 without --shard-tokens", (texts[0], "--val-tokens", "-1", "-o", os.path.join(tmp, "r18")),
            "--val-tokens needs --shard-tokens", tmp)
    refused("--hellaswag with --val-tokens -1", ("--hellaswag", hs, "--val-tokens", "-1", "-o", os.path.join(tmp, "r18")), "no --jsonl", tmp)
    # --ids and --decode write stdout: ids back to the same bytes; a write that fails (a full disk) is
    # an error even when the output is short enough to sit in stdio's buffer until exit (it was lost
    # there with exit 0), and so is a stdin that cannot be read (it decoded as nothing, exit 0)
    ids = subprocess.run([TOKENIZE, "--ids", texts[1], "--vocab", vocab], capture_output=True).stdout
    back = subprocess.run([TOKENIZE, "--decode", "--vocab", vocab], input=ids, capture_output=True)
    check(back.returncode == 0 and back.stdout == open(texts[1], "rb").read(), "--ids then --decode: the file's bytes")
    if os.path.exists("/dev/full"):
        for name, args, stdin in (("--ids", ("--ids", texts[1]), None), ("--decode", ("--decode",), ids)):
            with open("/dev/full", "wb") as full:
                r = subprocess.run([TOKENIZE, *args, "--vocab", vocab], input=stdin, stdout=full, stderr=subprocess.PIPE, text=stdin is None)
            err = r.stderr if stdin is None else r.stderr.decode(errors="replace")
            check(r.returncode == 1 and err.count("\n") == 1 and "tokenize: cannot write stdout" in err,
                  f"{name} into a full disk (/dev/full): one line, exit 1: {err.strip()}")
    folder = os.open(tmp, os.O_RDONLY)   # a directory opens, and its first read fails (EISDIR)
    r = subprocess.run([TOKENIZE, "--decode", "--vocab", vocab], stdin=folder, capture_output=True, text=True)
    os.close(folder)
    check(r.returncode == 1 and r.stderr.count("\n") == 1 and "--decode: cannot read stdin" in r.stderr and not r.stdout,
          f"--decode from a stdin that cannot be read: one line, exit 1: {r.stderr.strip()}")
    # stopped by a signal: a --shard-tokens run caught mid-corpus removes the shards it wrote (no
    # corpus cut short is left to train on); the other -o modes leave the old output as it was; one
    # line, exit 128 + the signal's number. The input is a named pipe that this test writes: opening
    # it for writing returns only once the run has opened it (its handler is in place by then), and
    # the run gets nothing more than what the test wrote until the signal, so it is caught mid-run
    # every time: waiting to read more, or still writing the shards of what it got.
    fifo, sig_dir = os.path.join(tmp, "slow.jsonl"), os.path.join(tmp, "sig")
    os.mkdir(sig_dir)

    def signalled(sig, args, data, ready=lambda: True, ignored=()):
        """data/tokenize reading the pipe (then args), fed data; sig once ready(), then the input's
        end: (exit code, stderr). The stop signals start at their default disposition (a test run
        as a shell's background job would pass SIGINT on ignored), or ignored if in `ignored`."""
        def dispositions():
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(s, signal.SIG_IGN if s in ignored else signal.SIG_DFL)
        os.mkfifo(fifo)
        p = subprocess.Popen([TOKENIZE, fifo, *args, "--vocab", vocab], stderr=subprocess.PIPE, text=True, errors="replace",
                             preexec_fn=dispositions)
        w = os.open(fifo, os.O_WRONLY)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
            deadline = time.monotonic() + 30
            while not ready() and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            p.send_signal(sig)
        except BrokenPipeError:
            pass  # the run ended early: the checks say how
        os.close(w)  # the end of the input: a run whose read began just after the signal stops at its next check
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        os.remove(fifo)
        return p.returncode, err

    with open(os.path.join(sig_dir, "keep.txt"), "w") as f:  # files that are not the run's: left alone
        f.write("not the run's\n")
    shutil.copy(os.path.join(out, "dflt_val.bin"), os.path.join(sig_dir, "other_train_000000.bin"))
    before = contents(sig_dir)
    batch = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    # one thread's batch (8 MiB), encoded and written as ~20 shards while the rest waits in the pipe
    data = batch * ((8 << 20) // len(batch) + 2)
    prefix = os.path.join(sig_dir, "c")
    rc, err = signalled(signal.SIGINT, ("--jsonl", "--shard-tokens", "100000", "--threads", "1", "-o", prefix), data,
                        ready=lambda: glob.glob(prefix + "_train_*.bin"))
    wrote = err.split("removed the ")[-1].split(" ")[0]
    check(rc == 130 and len(err.strip().splitlines()) == 1 and "tokenize: interrupted by signal 2 (Interrupt): removed the " in err and
          wrote.isdigit() and int(wrote) >= 2 and contents(sig_dir) == before,
          f"SIGINT mid-corpus with --shard-tokens: exit 130, one line, the shards it wrote removed (no .tmp left), "
          f"the other files as they were: {err.strip()}")
    rc, _ = run(texts[0], texts[1], "-o", os.path.join(sig_dir, "pair"))
    before = contents(sig_dir)
    rc, err = signalled(signal.SIGTERM, ("--jsonl", "--threads", "1", "-o", os.path.join(sig_dir, "pair")), batch)
    check(rc == 143 and len(err.strip().splitlines()) == 1 and "interrupted by signal 15 (Terminated): nothing written (" in err and
          contents(sig_dir) == before, f"SIGTERM without --shard-tokens: exit 143, one line, the old pair as it was, no .tmp: {err.strip()}")
    rc, _ = run("--hellaswag", hs, "-o", os.path.join(sig_dir, "hs.bin"))
    before = contents(sig_dir)
    rc, err = signalled(signal.SIGHUP, ("--hellaswag", "-o", os.path.join(sig_dir, "hs.bin")), open(hs, "rb").read())
    check(rc == 129 and "interrupted by signal 1 (Hangup): nothing written (" in err and contents(sig_dir) == before,
          f"SIGHUP in --hellaswag: exit 129, the old file as it was: {err.strip()}")
    rc, err = signalled(signal.SIGHUP, ("--jsonl", "--shard-tokens", "5000", "-o", os.path.join(sig_dir, "nohup")), batch,
                        ignored=(signal.SIGHUP,))
    check(rc == 0 and "wrote " in err and glob.glob(os.path.join(sig_dir, "nohup_train_*.bin")),
          f"SIGHUP ignored from the start (nohup): still ignored, the run completes: {err.strip()}")
finish()
