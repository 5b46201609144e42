// The --hellaswag multiple-choice file (llmc/choices.h; its reader is host-only): the input is
// written as the file and read by choices_read (vocabulary 50257); a set it accepts is then packed
// and scored as the trainer's evaluation does on the host (choices_row_length for B=8, T=128,
// choices_fill_rows, choices_score on made-up losses). Seeds: small sets (choices_write).
#include "llmc/choices.h"
#include "dev/fuzz/fuzz_common.h"

static const int VOCAB = 50257, B = 8, T = 128;

FUZZ_SEEDS(dir) {
    std::string err;
    for (int K : {2, 4}) {
        ChoiceSet s;
        s.K = K;
        for (int e = 0; e < 3; e++) {
            ChoiceExample x;
            x.label = e % K;
            x.context.assign(1 + e * 5, (uint16_t)(100 + e));
            for (int i = 0; i < K; i++) {
                x.endings.emplace_back(1 + (e + i) % 4, (uint16_t)(VOCAB - 1 - i));
                s.longest = std::max(s.longest, x.context.size() + x.endings.back().size());
            }
            s.examples.push_back(x);
        }
        if (!choices_write(dir + "/choices_k" + std::to_string(K) + ".bin", s, &err)) seed_fail(err);
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = fuzz_dir() + "/choices.bin";
    write_file(path, data, size);
    ChoiceSet s;
    std::string err;
    if (!choices_read(path, VOCAB, &s, &err)) {
        fuzz_check_error(err, path + ": ");
        return 0;
    }
    if (s.K < 2 || s.K > CHOICES_MAX_K || s.examples.empty()) abort();
    const int Tc = choices_row_length(s, B, T);
    if (Tc == 0) return 0;
    if ((size_t)Tc < s.longest || Tc > T) abort();
    const int per_pass = B * T / Tc / s.K;
    std::vector<int> inputs((size_t)per_pass * s.K * Tc), targets(inputs.size());
    std::vector<float> losses(inputs.size());
    for (size_t i = 0; i < losses.size(); i++) losses[i] = (float)(i % 7);
    ChoiceTally t;
    for (size_t e = 0; e < s.examples.size(); e += per_pass) {
        const size_t count = std::min<size_t>(per_pass, s.examples.size() - e);
        choices_fill_rows(s, e, count, Tc, 0, inputs.data(), targets.data());
        choices_score(s, e, count, Tc, losses.data(), &t);
    }
    if (t.examples != (double)s.examples.size() || t.correct > t.examples || t.correct_norm > t.examples) abort();
    return 0;
}
