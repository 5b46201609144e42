"""Reference token ids for the C++ GPT-2 encoder (data/bpe.h), made with tiktoken.

tiktoken is built from the LOCAL vocabulary files (no download), then:
  python3 dev/tokenizer_fixture.py
      writes dev/unit/fixtures/tokenizer_text.txt, tokenizer_ids.txt,
      tinyshakespeare_ids.txt ("<count> <FNV-1a 64 hash of the ids as little-endian uint32>") and
      tokenizer_classes.txt (the code points of \p{L}, \p{N} and \s in tiktoken's regex, as ranges)
  python3 dev/tokenizer_fixture.py --compare FILE [FILE...]
      runs `data/tokenize --ids FILE` and reports "identical: N tokens" or the first difference
Vocabulary: $GPT2_VOCAB_DIR, else ../shared/data/gpt2. Run from the repository root.
"""
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import need  # noqa: E402

VOCAB = os.environ.get("GPT2_VOCAB_DIR") or "../shared/data/gpt2"
SHAKESPEARE = "../shared/data/tinyshakespeare.txt"
FIXTURES = "dev/unit/fixtures"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Exercises each branch of the pre-tokenization pattern and multi-byte BPE.
TEST_TEXT = (
    "Hello, world! The café's crème brûlée costs 3.14 €, or 1234567 ¥ in 2024.\n"
    "I'm sure you'll see they'RE here; we've done it, she'd say, it's Bob's and 'tis old.\n"
    "Ünïcödé: naïve façade, Ελληνικά, русский, עברית, العربية, हिन्दी.\n"
    "日本語のテキストと中文文本，한국어 텍스트。\n"
    "Emoji: 👋🌍 🤖 👨‍👩‍👧 🇺🇸 ✅\n"
    "Spaces:   three,     five,\ttab,\t\ttwo tabs,  \t mixed, non\u00a0breaking, ideo\u3000graphic.\n"
    "Trailing spaces   \n"
    "\n\n\nThree newlines above. Windows line\r\nend.\n"
    "<|endoftext|> is plain text here, as are <|fim_prefix|> and <s></s>.\n"
    "Punctuation runs: ... !!! ??? --- *** ((())) [[]] {{}} ,,, ;;; ::: /// \\\\ ~~~ ``` '''\n"
    "Numbers: 0 00 007 1,000,000 3.14159 1e-10 -42 +7 ½ ² Ⅻ ١٢٣ 42nd v2.0\n"
    "Code: def f(x): return x**2 + 1  # comment\n    if (a && b) { c->d = e[0]; }\n"
    "URL https://example.com/path?q=1&r=2 and e-mail a.b@c.org\n"
    "       \n"
    "End with spaces and no newline   "
)


def gpt2_encoding(vocab_dir=VOCAB):
    """tiktoken's gpt2 encoding from the local vocabulary files (tiktoken would download them).
    Without tiktoken: one line naming it, exit 1."""
    tiktoken = need("dev/tokenizer_fixture.py", "tiktoken", "tiktoken")
    import tiktoken.load  # noqa: F401  (a submodule of the one just found)
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        os.path.join(vocab_dir, "vocab.bpe"), os.path.join(vocab_dir, "encoder.json"))
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def encode_file(enc, path):
    # bytes, then decode: text mode would turn "\r\n" into "\n"
    with open(path, "rb") as f:
        return enc.encode_ordinary(f.read().decode("utf-8"))


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for byte in struct.pack(f"<{len(ids)}I", *ids):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def class_ranges():
    """{"version": tiktoken's, "ranges": {"L": [(first, last), ...], "N": ..., "White_Space": ...}}: the code points that tiktoken's regex
    (the one its "gpt2" pattern runs on, with its Unicode tables) counts as \p{L}, \p{N} and \s. An
    encoding whose pattern is the class alone and whose tokens are the 256 bytes encodes only the
    characters of the class: encoding every code point at once gives them all."""
    tiktoken = need("dev/tokenizer_fixture.py", "tiktoken", "tiktoken")
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    ranks = {bytes([b]): b for b in range(256)}
    out = {}
    for name, pat in (("L", r"\p{L}"), ("N", r"\p{N}"), ("White_Space", r"\s")):
        enc = tiktoken.Encoding(name="class_" + name, pat_str=pat, mergeable_ranks=ranks, special_tokens={})
        ranges = []
        for c in map(ord, bytes(enc.encode_ordinary(every)).decode("utf-8")):
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
        out[name] = ranges
    return {"version": tiktoken.__version__, "ranges": out}


def write_fixtures(enc):
    os.makedirs(FIXTURES, exist_ok=True)
    with open(os.path.join(FIXTURES, "tokenizer_text.txt"), "wb") as f:
        f.write(TEST_TEXT.encode("utf-8"))
    ids = enc.encode_ordinary(TEST_TEXT)
    with open(os.path.join(FIXTURES, "tokenizer_ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    shakespeare = encode_file(enc, SHAKESPEARE)
    with open(os.path.join(FIXTURES, "tinyshakespeare_ids.txt"), "w") as f:
        f.write(f"{len(shakespeare)} {fnv1a64(shakespeare)}\n")
    classes = class_ranges()
    with open(os.path.join(FIXTURES, "tokenizer_classes.txt"), "w") as f:
        f.write(f"# the code points (first last, hex) of \\p{{L}}, \\p{{N}} and \\s in tiktoken {classes['version']}'s regex; "
                "dev/tokenizer_fixture.py wrote them\n")
        for name, ranges in classes["ranges"].items():
            f.writelines(f"{name} {a:04X} {b:04X}\n" for a, b in ranges)
    print(f"wrote {FIXTURES}: test text {len(ids)} tokens, tinyshakespeare {len(shakespeare)} tokens, "
          + ", ".join(f"{len(r)} ranges of {k}" for k, r in classes["ranges"].items()))


def compare(enc, paths):
    ok = True
    for path in paths:
        try:
            want = encode_file(enc, path)
        except UnicodeDecodeError as e:
            print(f"{path}: not UTF-8, tiktoken cannot encode it ({e})")
            ok = False
            continue
        run = subprocess.run(["./data/tokenize", "--ids", path], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{path}: data/tokenize failed: {run.stderr.strip()}")
            ok = False
            continue
        got = [int(t) for t in run.stdout.split()]
        diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        if got == want:
            print(f"{path}: identical: {len(want)} tokens")
            continue
        ok = False
        ctx = enc.decode(want[max(0, diff - 5):diff + 5])
        print(f"{path}: first difference at token {diff}: got {got[diff:diff + 5]}, "
              f"tiktoken {want[diff:diff + 5]} (near {ctx!r}); {len(got)} vs {len(want)} tokens")
    return ok


if __name__ == "__main__":
    encoding = gpt2_encoding()
    if sys.argv[1:2] == ["--compare"]:
        sys.exit(0 if compare(encoding, sys.argv[2:]) else 1)
    write_fixtures(encoding)
