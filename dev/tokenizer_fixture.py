"""Reference token ids for the C++ GPT-2 encoder (data/bpe.h), made with tiktoken.

tiktoken is built from the LOCAL vocabulary files (no download), then:
  python3 dev/tokenizer_fixture.py
      writes dev/unit/fixtures/tokenizer_text.txt, tokenizer_ids.txt,
      tinyshakespeare_ids.txt ("<count> <FNV-1a 64 hash of the ids as little-endian uint32>") and
      tokenizer_classes.txt (the code points of \p{L}, \p{N} and \s in tiktoken's regex, as ranges),
      tokenizer_cases.jsonl (short texts encoded one by one: {"text": ..., "ids": [...]} a line) and
      tokenizer_runs.txt (runs of one character: "<code point, hex> <times> <count> <FNV-1a 64 hash>")
  python3 dev/tokenizer_fixture.py --compare FILE [FILE...]
      runs `data/tokenize --ids FILE` and reports "identical: N tokens" or the first difference
Vocabulary: $GPT2_VOCAB_DIR, else ../shared/data/gpt2. Run from the repository root.
"""
import json
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


# Short texts, each encoded on its own (so each one's start and end are a text's): cases of a
# differential test against tiktoken (random texts of these kinds) that TEST_TEXT lacks.
def tricky_cases():
    # white space of every kind, and look-alikes that are not white space to tiktoken
    ws = [" ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u200a", "\u2028",
          "\u2029", "\u202f", "\u205f", "\u3000", "\x1c", "\x1f", "\u180e", "\u200b", "\ufeff"]
    cases = []
    for w in ws:
        cases += [w, w * 3, f"a{w}b", f"a{w}{w}b", f"a{w} b", f"a {w}b", f"x{w}", f"{w}x", f"{w}'s", f"1{w}2", f"!{w}!", f"a{w} "]
    # contractions: odd case, other apostrophes (U+2019, U+02BC, U+FF07), not at a piece's start
    cases += ["'s", "'S", "'LL", "'Re", "'rE", "'ve", "'VE", "'m", "'M", "'d", "'t", "'T", "\u2019s", "\u2019LL", "\u02bcs",
              "\uff07s", "''s", "'sa", "x's", "X'S", "x'LL", " 's", "1's", "!'s", "'s'", "'ll've", "don't", "DON'T",
              "I\u2019M", "we'RE", "'", "''", "'x"]
    # numbers: 1 to 20 digits, separators, other scripts' digits, fractions, superscripts, Roman numerals
    cases += ["1" * n for n in range(1, 21)]
    cases += ["3.14159", "1,000,000", " 42", "x42", "42x", "\u0663\u0664\u0665", "\uff11\uff12\uff13", "\u00bd", "\u216b",
              "\u00b2\u00b3", "\U0001d7cf\U0001d7d0", "\u2460\u2461", "\u3007", "x\u00b2"]
    # letters of many scripts: Greek, Cyrillic, Hebrew, Arabic, Devanagari, Thai, CJK, Hangul, Georgian,
    # Armenian, Ethiopic, Mongolian, Tibetan, Gothic, mathematical bold, CJK Extension B
    cases += ["\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac", "\u0440\u0443\u0441\u0441\u043a\u0438\u0439",
              "\u05e2\u05d1\u05e8\u05d9\u05ea", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "\u0939\u093f\u0928\u094d\u0926\u0940",
              "\u0e44\u0e17\u0e22", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4", "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8",
              "\u0540\u0561\u0575", "\u12a0\u121b\u122d\u129b", "\u182e\u1823\u1829", "\u0f56\u0f7c\u0f51",
              "\U00010330\U00010331", "\U0001d400\U0001d401", "\U00020000\U00020001"]
    # combining marks, joiners and variation selectors, also at a piece's start
    cases += ["e\u0301", "\u0301", " \u0301a", "a\u0308\u0308", "\u0915\u093f", "x\u20dd", "\u200d", "a\u200db", "\ufe0f",
              "9\ufe0f\u20e3", "\u200c\u200c", " \u0301"]
    # emoji: ZWJ family, flags, variation selector, keycap, skin tone, rainbow flag, tag sequence
    cases += ["\U0001f44b", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5",
              "\u2764\ufe0f", "1\ufe0f\u20e3", "\U0001f44d\U0001f3fd", "\U0001f3f3\ufe0f\u200d\U0001f308",
              "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", " \U0001f916!"]
    # NUL and other controls, private use, specials, noncharacters, the last code point, a tag
    cases += ["\x00", "a\x00b", "\x00 \x00", "\x00\x00\x00", "\x01\x7f", "\x80\x9f", "\ue000", "\ufffd", "\uffff",
              "\U0010ffff", "\U000e0001"]
    # the special token's text is plain text (encode_ordinary)
    cases += ["<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", " <|endoftext|>", "<|endoftext|>\n"]
    # letters and numbers of Unicode 15.0-16.0: U+1C89 Cyrillic TJE, CJK Ext. H and I, Kawi, Nag Mundari,
    # Garay digits, Kaktovik numerals, Egyptian hieroglyphs Ext-A, U+A7CB Latin ramshorn, Todhri
    cases += ["\u1c89's", "\u1c89\u1c8a", "x\U00031350!", "\U00031350\U00031351", "!\U0002ebf0", "\U00011f04's",
              "\U0001e4d0 \U0001e4f1", "\U00010d40\U00010d41", "1\U0001d2c0", "\U00013460!", "\ua7cb's", " \U000105c0."]
    # runs of one character (BPE's worst case; 500 keeps the fixture small)
    cases += [" " * 500 + "x", "a" * 500, "7" * 500, "\n" * 500, "\r\n" * 250, "!" * 500, "\u00e9" * 500, "\u3000" * 500, " " * 500]
    return cases


# Runs of 100,000 of one character: one piece each (but the newlines: pieces of two), BPE's worst
# case and the longest match the split pattern makes. A space, a letter, a digit, punctuation, a
# newline, a Latin-1 letter, a CJK ideograph, letters and a number of Unicode 15-16 (U+31350,
# U+1C89, U+10D40), the ideographic space, an emoji.
RUN_CHARS = [0x20, 0x61, 0x37, 0x21, 0x0A, 0xE9, 0x4E2D, 0x31350, 0x1C89, 0x10D40, 0x3000, 0x1F600]
RUN_LENGTH = 100_000


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
    cases = tricky_cases()
    with open(os.path.join(FIXTURES, "tokenizer_cases.jsonl"), "w") as f:
        for text in cases:
            f.write(json.dumps({"text": text, "ids": enc.encode_ordinary(text)}) + "\n")
    with open(os.path.join(FIXTURES, "tokenizer_runs.txt"), "w") as f:
        for c in RUN_CHARS:
            run = enc.encode_ordinary(chr(c) * RUN_LENGTH)
            f.write(f"{c:04X} {RUN_LENGTH} {len(run)} {fnv1a64(run)}\n")
    classes = class_ranges()
    with open(os.path.join(FIXTURES, "tokenizer_classes.txt"), "w") as f:
        f.write(f"# the code points (first last, hex) of \\p{{L}}, \\p{{N}} and \\s in tiktoken {classes['version']}'s regex; "
                "dev/tokenizer_fixture.py wrote them\n")
        for name, ranges in classes["ranges"].items():
            f.writelines(f"{name} {a:04X} {b:04X}\n" for a, b in ranges)
    print(f"wrote {FIXTURES}: test text {len(ids)} tokens, tinyshakespeare {len(shakespeare)} tokens, {len(cases)} cases, {len(RUN_CHARS)} runs, "
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
