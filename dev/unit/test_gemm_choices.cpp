// The GEMM algorithm choices file (llmc/gemm_choices.h): what --gemm-tune 1 writes and
// --gemm-algos / --resume read. Round trip, and one line naming what is wrong for a file of
// another cuBLASLt/GPU, a malformed line, a choice out of range, trailing text; and which timed
// candidate tuning keeps (gemm_tune_pick).
#include "llmc/gemm_choices.h"
#include "dev/unit/check.h"

int main() {
    const std::string header = "gemm-algorithms v2 cublaslt=130100 gpu=NVIDIA_H200";
    std::map<MatmulKey, int> choices;
    choices[MatmulKey{2304, 65536, 768, 1, 0, 2, 1, 256, 0, 0, 0, 768, 776, 2304, 14}] = 3;
    choices[MatmulKey{776, 768, 65536, 0, 1, 1, 1, 256, 0, 0, 0, 776, 768, 776, 0}] = 0;
    choices[MatmulKey{64, 64, 64, 1, 0, 1, 48, 16, 4096LL << 20, 12288, 1LL << 40, 64, 64, 64, 14}] = 15;
    const std::string text = gemm_choices_text(header, choices);
    std::map<MatmulKey, int> back;
    std::string why;
    check_report(gemm_choices_parse(header, text, 16, &back, &why) && back.size() == 3, "round trip parses", why);
    bool same = back.size() == choices.size();
    for (const auto& [k, c] : choices) same &= back.count(k) && back[k] == c;
    CHECK(same, "round trip gives the same shapes (64-bit strides included) and choices");

    auto rejects = [&](const std::string& hdr, const std::string& body, const std::string& expect, const char* name) {
        std::map<MatmulKey, int> out;
        std::string w;
        const bool ok = gemm_choices_parse(hdr, body, 16, &out, &w);
        check_report(!ok && w.find(expect) != std::string::npos && w.find('\n') == std::string::npos, name, "got '" + w + "'");
    };
    rejects("gemm-algorithms v2 cublaslt=130100 gpu=NVIDIA_H100", text, "written for 'gemm-algorithms v2 cublaslt=130100 gpu=NVIDIA_H200'",
            "another GPU's file");
    rejects(header, "", "written for ''", "empty file");
    // the fuzzer's find: the file's first line was quoted raw (a NUL, a \r of a CRLF file, an escape
    // sequence went to the terminal); now escaped and cut
    rejects(header, std::string("\0\x1b[2J", 5) + "\r\n", "written for '\\x00\\x1b[2J\\x0d', this is '", "control bytes in the header quoted escaped");
    rejects(header, std::string(500, 'h') + "\n", "written for '" + std::string(120, 'h') + "...', this is '", "a long header cut at 120 bytes");
    rejects(header, "gemm-algorithms v1 cublaslt=130100 gpu=NVIDIA_H200\n2304 65536 768 1 0 2 1 256 0 0 0 3\n",
            "written for 'gemm-algorithms v1 cublaslt=130100 gpu=NVIDIA_H200'", "a v1 file (before leading dimensions and D's type were keys)");
    rejects(header, header + "\n1 2 3\n", "line 2 is not 15 key fields and a choice in [0, 16)", "short line");
    rejects(header, header + "\n1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "line 2 ", "choice out of range");
    rejects(header, header + "\n1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 -1\n", "line 2 ", "negative choice");
    rejects(header, text + "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 2 x\n", "line 5 ", "trailing text on a line");
    // values beyond a field's type: refused, not wrapped (4294967298 would be 2 through sscanf's %d)
    rejects(header, header + "\n1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 4294967298\n", "line 2 ", "a choice beyond int");
    rejects(header, header + "\n4294967360 2 3 4 5 6 7 8 9 10 11 12 13 14 15 2\n", "line 2 ", "a key field beyond int");
    rejects(header, header + "\n1 2 3 4 5 6 7 8 9 99999999999999999999 11 12 13 14 15 2\n", "line 2 ", "a stride beyond 64 bits");
    std::map<MatmulKey, int> wide;
    CHECK(gemm_choices_parse(header, header + "\n1 2 3 4 5 6 7 8 9223372036854775807 10 11 12 13 14 15 2\n", 16, &wide, &why) &&
              wide.size() == 1 && wide.begin()->first.stride_a == 9223372036854775807LL && wide.begin()->second == 2,
          "a stride at the top of 64 bits, read exactly");
    // a choice may index the single pick appended after the ranking of 16 (max_choice 17)
    std::map<MatmulKey, int> appended;
    CHECK(gemm_choices_parse(header, header + "\n1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", 17, &appended, &why) &&
              appended.begin()->second == 16, "choice 16 read where 17 candidates are allowed");

    // which timed candidate tuning keeps
    const float inf = INFINITY;
    CHECK(gemm_tune_pick({1.00f, 0.90f, 0.80f}, 0, 0.03f) == 2, "the fastest when nothing is near it");
    CHECK(gemm_tune_pick({1.00f, 0.81f, 0.80f}, 0, 0.03f) == 1, "the first within the tolerance, in cuBLASLt's order");
    CHECK(gemm_tune_pick({1.00f, 0.81f, 0.80f, 0.82f}, 3, 0.03f) == 3, "the untuned one when it is within the tolerance");
    CHECK(gemm_tune_pick({1.00f, 0.81f, 0.80f, 0.90f}, 3, 0.03f) == 1, "not the untuned one when it is slower than that");
    CHECK(gemm_tune_pick({inf, 0.81f, inf}, 0, 0.03f) == 1, "candidates that could not run are never kept");
    CHECK(gemm_tune_pick({inf, inf}, 1, 0.03f) == -1, "-1 when none ran");
    CHECK(gemm_tune_pick({}, 0, 0.03f) == -1, "-1 for no candidates");
    CHECK(gemm_tune_pick({0.5f, 0.5f}, 7, 0.03f) == 0, "an untuned index outside the list is ignored");
    return check_finish();
}
