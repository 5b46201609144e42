"""The Python unit tests' counterpart of dev/unit/check.h: check() prints PASS/FAIL per assertion,
finish() the "N passed, N failed" line dev/run_tests.sh reads, and exits non-zero on a failure;
tokenize_and_vocab() what the tests of data/tokenize start from."""
import os
import sys

_counts = {"passed": 0, "failed": 0}


def check(ok, name):
    _counts["passed" if ok else "failed"] += 1
    print(("PASS " if ok else "FAIL ") + name)


def finish():
    print(f"{_counts['passed']} passed, {_counts['failed']} failed")
    sys.exit(1 if _counts["failed"] else 0)


def tokenize_and_vocab():
    """(the built data/tokenize, GPT-2's vocabulary folder: $GPT2_VOCAB_DIR, else ../shared/data/gpt2
    beside the repository). A test of data/tokenize without the binary is one failed check."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    tokenize = os.path.join(root, "data", "tokenize")
    if not os.access(tokenize, os.X_OK):
        check(False, "data/tokenize is built (make data/tokenize)")
        finish()
    return tokenize, os.environ.get("GPT2_VOCAB_DIR") or os.path.join(root, "..", "shared", "data", "gpt2")
