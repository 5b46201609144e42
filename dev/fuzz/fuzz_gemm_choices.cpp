// The GEMM algorithm choices file (llmc/gemm_choices.h), as --gemm-algos reads it: the input is
// written as the file, read whole (read_text_file) and parsed by gemm_choices_parse against a
// fixed header; what parses is written again (gemm_choices_text) and must parse back the same.
// Seeds: gemm_choices_text of a few shapes.
#include "llmc/gemm_choices.h"
#include "llmc/logger.h"
#include "dev/fuzz/fuzz_common.h"

static const std::string HEADER = "gemm-algorithms v2 cublaslt=130100 gpu=NVIDIA_H200";
static const int MAX_CHOICE = 16;

FUZZ_SEEDS(dir) {
    std::map<MatmulKey, int> c;
    c[MatmulKey{2304, 65536, 768, 1, 0, 2, 1, 256, 0, 0, 0, 768, 776, 2304, 14}] = 3;
    write_file(dir + "/one.txt", gemm_choices_text(HEADER, c));
    c[MatmulKey{64, 64, 64, 1, 0, 1, 48, 16, 4096LL << 20, 12288, 1LL << 40, 64, 64, 64, 14}] = 15;
    c[MatmulKey{-1, 0, 2147483647, 0, 1, 1, 1, 256, -9223372036854775807LL, 0, 0, 776, 768, 776, 0}] = 0;
    write_file(dir + "/three.txt", gemm_choices_text(HEADER, c));
    write_file(dir + "/header_only.txt", HEADER + "\n");
}

static bool same(const MatmulKey& a, const MatmulKey& b) { return !(a < b) && !(b < a); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = fuzz_dir() + "/gemm_algos.txt";
    write_file(path, data, size);
    std::string text, why;
    if (!read_text_file(path, &text, &why)) abort();
    std::map<MatmulKey, int> choices;
    if (!gemm_choices_parse(HEADER, text, MAX_CHOICE, &choices, &why)) {
        fuzz_note(why);
        if (!fuzz_readable_line(why)) abort();   // the caller puts the file's path in front of it
        return 0;
    }
    std::map<MatmulKey, int> back;
    if (!gemm_choices_parse(HEADER, gemm_choices_text(HEADER, choices), MAX_CHOICE, &back, &why) || back.size() != choices.size()) abort();
    for (auto a = choices.begin(), b = back.begin(); a != choices.end(); ++a, ++b)
        if (!same(a->first, b->first) || a->second != b->second || a->second < 0 || a->second >= MAX_CHOICE) abort();
    return 0;
}
