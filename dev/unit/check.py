"""The Python unit tests' counterpart of dev/unit/check.h: check() prints PASS/FAIL per assertion,
finish() the "N passed, N failed" line dev/run_tests.sh reads, and exits non-zero on a failure."""
import sys

_counts = {"passed": 0, "failed": 0}


def check(ok, name):
    _counts["passed" if ok else "failed"] += 1
    print(("PASS " if ok else "FAIL ") + name)


def finish():
    print(f"{_counts['passed']} passed, {_counts['failed']} failed")
    sys.exit(1 if _counts["failed"] else 0)
