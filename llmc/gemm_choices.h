// The GEMM algorithm choices as text: what `--gemm-tune 1` or `2` keeps in <out>/gemm_algos.txt and
// `--gemm-algos FILE` reads (llmc/matmul_plans.cuh makes and applies the choices). Host-only, unit-tested
// (dev/unit/test_gemm_choices.cpp).
//   line 1:   a header naming what the choices are valid for (cuBLASLt's version and the GPU:
//             another one ranks its algorithms differently), written and compared as a whole;
//   line 2..: one matmul shape per line, MatmulKey's 15 fields, then the choice: an index into
//             the shape's candidate algorithms (matmul_candidates: cuBLASLt's ranking, then its
//             single pick when the ranking lacks it), in [0, max_choice).
#pragma once
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>
#include "options.h"   // printable

// One distinct matmul call shape (column-major, as cuBLASLt sees it), the pointers' alignment,
// the leading dimensions of A, B and D (their row counts when stored densely) and D's data type
// (a cudaDataType_t: the training precision's, or fp32).
struct MatmulKey {
    int m, n, k, trans_a, trans_b, epilogue, batch, align;
    long long stride_a, stride_b, stride_d;
    int lda, ldb, ldd, d_type;
    bool operator<(const MatmulKey& o) const {
        return std::tie(m, n, k, trans_a, trans_b, epilogue, batch, align, stride_a, stride_b, stride_d, lda, ldb, ldd, d_type) <
               std::tie(o.m, o.n, o.k, o.trans_a, o.trans_b, o.epilogue, o.batch, o.align, o.stride_a, o.stride_b, o.stride_d,
                        o.lda, o.ldb, o.ldd, o.d_type);
    }
};

inline std::string gemm_choices_text(const std::string& header, const std::map<MatmulKey, int>& choices) {
    std::string t = header + "\n";
    char line[256];
    for (const auto& [k, choice] : choices) {
        snprintf(line, sizeof line, "%d %d %d %d %d %d %d %d %lld %lld %lld %d %d %d %d %d\n", k.m, k.n, k.k, k.trans_a, k.trans_b,
                 k.epilogue, k.batch, k.align, k.stride_a, k.stride_b, k.stride_d, k.lda, k.ldb, k.ldd, k.d_type, choice);
        t += line;
    }
    return t;
}

// gemm_choices_text's output into *choices. false + the reason (one line) when the header is not
// `header` or a line is not 15 key fields and a choice in [0, max_choice).
inline bool gemm_choices_parse(const std::string& header, const std::string& text, int max_choice,
                               std::map<MatmulKey, int>* choices, std::string* why) {
    std::istringstream in(text);
    std::string first, line;
    std::getline(in, first);
    if (first != header) {
        *why = "written for '" + printable(first, 120) + "', this is '" + header + "'";   // a file's bytes, quoted: control bytes escaped
        return false;
    }
    for (int n = 2; std::getline(in, line); n++) {
        // 16 whole numbers separated by blanks, nothing else; the int fields must fit an int (read
        // as 64-bit first: a value beyond int is refused, not wrapped as sscanf's %d would)
        long long v[16];
        int got = 0;
        std::istringstream fields(line);
        while (got < 16 && fields >> v[got]) got++;
        bool ok = got == 16 && (fields >> std::ws).eof();
        for (int i = 0; ok && i < 16; i++)
            if ((i < 8 || i > 10) && (v[i] < INT_MIN || v[i] > INT_MAX)) ok = false;
        const int choice = ok ? (int)v[15] : -1;
        if (!ok || choice < 0 || choice >= max_choice) {
            *why = "line " + std::to_string(n) + " is not 15 key fields and a choice in [0, " + std::to_string(max_choice) + ")";
            return false;
        }
        MatmulKey k{(int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5], (int)v[6], (int)v[7],
                    v[8], v[9], v[10], (int)v[11], (int)v[12], (int)v[13], (int)v[14]};
        (*choices)[k] = choice;
    }
    return true;
}

// Which timed candidate tuning keeps (llmc/matmul_plans.cuh, matmul_tune): ms[i] is candidate i's time in
// cuBLASLt's order, INFINITY where it could not run; `untuned` indexes the algorithm that runs
// without tuning. That one when it is within `tolerance` (a fraction) of the fastest, else the
// first within it: a near-tie is timing noise, and resolving it this way means tuning changes an
// algorithm only where the timing says it gains, and alike on every run of one machine. -1 when
// none ran.
inline int gemm_tune_pick(const std::vector<float>& ms, int untuned, float tolerance) {
    float best = INFINITY;
    for (float t : ms) best = t < best ? t : best;
    if (!(best < INFINITY)) return -1;
    const float near = best * (1.0f + tolerance);
    if (untuned >= 0 && untuned < (int)ms.size() && ms[untuned] <= near) return untuned;
    for (int i = 0; i < (int)ms.size(); i++)
        if (ms[i] <= near) return i;
    return -1;  // not reached: the fastest is within its own tolerance
}
