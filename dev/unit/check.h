// A minimal unit-test harness for the CPU-side tests in dev/unit.
// Each test program prints one line per check ("PASS name" / "FAIL name: why") and
// a last line "N passed, N failed"; it exits non-zero when any check failed.
// dev/run_tests.sh runs every program and adds the counts up.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

struct CheckCounts { int passed = 0, failed = 0; };
inline CheckCounts& check_counts() { static CheckCounts c; return c; }

inline void check_report(bool ok, const std::string& name, const std::string& why = "") {
    if (ok) { check_counts().passed++; printf("PASS %s\n", name.c_str()); }
    else    { check_counts().failed++; printf("FAIL %s: %s\n", name.c_str(), why.c_str()); }
}
#define CHECK(cond, name) check_report((cond), (name), "expected " #cond)
#define CHECK_EQ(a, b, name) do { auto _a = (a); auto _b = (b); \
    check_report(_a == _b, (name), "got " + std::to_string(_a) + ", expected " + std::to_string(_b)); } while (0)

inline int check_finish() {
    printf("%d passed, %d failed\n", check_counts().passed, check_counts().failed);
    return check_counts().failed == 0 ? 0 : 1;
}
