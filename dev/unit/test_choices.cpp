// The multiple-choice file and evaluation bookkeeping (llmc/choices.h): a write/read roundtrip,
// every kind of bad example or damaged file refused with one line naming the file, the rows a
// forward pass gets, and the scores (sum vs mean per token, ties, the completion loss) against
// losses made up so that each rule decides differently.
#include "llmc/choices.h"
#include "dev/unit/check.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <unistd.h>

static std::string g_dir;
static std::vector<std::string> g_files;

static std::string temp_path(const std::string& name) {
    g_files.push_back(g_dir + "/" + name);
    return g_files.back();
}

static ChoiceExample example(int label, std::vector<uint16_t> ctx, std::vector<std::vector<uint16_t>> endings) {
    ChoiceExample x;
    x.label = label; x.context = std::move(ctx); x.endings = std::move(endings);
    return x;
}

static ChoiceSet random_set(size_t n, int K, uint32_t seed) {
    std::mt19937 rng(seed);
    ChoiceSet s;
    s.K = K;
    for (size_t e = 0; e < n; e++) {
        ChoiceExample x;
        x.label = (int)(rng() % K);
        x.context.resize(1 + rng() % 40);
        for (auto& t : x.context) t = (uint16_t)(rng() % 50257);
        x.endings.resize(K);
        for (auto& end : x.endings) {
            end.resize(1 + rng() % 20);
            for (auto& t : end) t = (uint16_t)(rng() % 50257);
            s.longest = std::max(s.longest, x.context.size() + end.size());
        }
        s.examples.push_back(x);
    }
    return s;
}

static bool same(const ChoiceSet& a, const ChoiceSet& b) {
    if (a.K != b.K || a.examples.size() != b.examples.size()) return false;
    for (size_t e = 0; e < a.examples.size(); e++) {
        const ChoiceExample &x = a.examples[e], &y = b.examples[e];
        if (x.label != y.label || x.context != y.context || x.endings != y.endings) return false;
    }
    return true;
}

static std::vector<char> file_bytes(const std::string& path) {
    std::vector<char> b;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return b;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) b.insert(b.end(), buf, buf + got);
    fclose(f);
    return b;
}

static void put_bytes(const std::string& path, const std::vector<char>& b) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(b.data(), 1, b.size(), f) != b.size()) check_report(false, "write " + path, "cannot write the test file");
    if (f) fclose(f);
}

// A refusal: false, one line, naming the file, and saying `what`.
static void expect_refused(bool ok, const std::string& err, const std::string& path, const std::string& what, const std::string& name) {
    const bool one_line = err.find('\n') == std::string::npos;
    check_report(!ok && one_line && err.rfind(path + ": ", 0) == 0 && err.find(what) != std::string::npos, name,
                 ok ? "accepted" : "got '" + err + "'");
}

static void test_roundtrip() {
    const std::string p = temp_path("set.bin");
    ChoiceSet s = random_set(57, 4, 1), back;
    std::string err;
    CHECK(choices_write(p, s, &err), "write 57 examples");
    CHECK(choices_read(p, 50257, &back, &err), "read them back");
    CHECK(same(s, back), "the same examples after the roundtrip");
    size_t longest = 0;
    for (const auto& x : s.examples) for (const auto& e : x.endings) longest = std::max(longest, x.context.size() + e.size());
    CHECK_EQ(back.longest, longest, "longest row = the longest context + ending");
    CHECK(access((p + ".tmp").c_str(), F_OK) != 0, "no .tmp file left");
    ChoiceSet five = random_set(3, 5, 2);
    CHECK(choices_write(p, five, &err) && choices_read(p, 50257, &back, &err) && same(five, back), "K = 5 too (overwrites)");
}

static void test_write_refusals() {
    const std::string p = temp_path("bad_write.bin");
    std::string err;
    ChoiceSet s;
    s.K = 4;
    expect_refused(choices_write(p, s, &err), err, p, "no examples", "write: no examples");
    s.K = 1;
    s.examples = {example(0, {1}, {{2}})};
    expect_refused(choices_write(p, s, &err), err, p, "1 endings per example", "write: K = 1");
    s.K = 2;
    s.examples = {example(0, {1}, {{2}, {3}}), example(2, {1}, {{2}, {3}})};
    expect_refused(choices_write(p, s, &err), err, p, "example 1: label 2 is not in 0..1", "write: label out of range");
    s.examples = {example(0, {}, {{2}, {3}})};
    expect_refused(choices_write(p, s, &err), err, p, "empty context", "write: empty context");
    s.examples = {example(0, {1}, {{2}, {}})};
    expect_refused(choices_write(p, s, &err), err, p, "ending 1 is empty", "write: empty ending");
    s.examples = {example(0, {1}, {{2}, {3}, {4}})};
    expect_refused(choices_write(p, s, &err), err, p, "3 endings where the first example has 2", "write: K differs");
    CHECK(access(p.c_str(), F_OK) != 0 && access((p + ".tmp").c_str(), F_OK) != 0, "write refusals leave no file");
}

static void test_read_refusals() {
    const std::string good = temp_path("good.bin"), p = temp_path("damaged.bin");
    std::string err;
    ChoiceSet s = random_set(4, 4, 3), out;
    choices_write(good, s, &err);
    const std::vector<char> bytes = file_bytes(good);
    auto with = [&](std::vector<char> b, const std::string& what, const std::string& name, int vocab = 50257) {
        put_bytes(p, b);
        expect_refused(choices_read(p, vocab, &out, &err), err, p, what, "read: " + name);
    };
    expect_refused(choices_read(temp_path("missing.bin"), 50257, &out, &err), err, g_dir + "/missing.bin", "cannot open", "read: missing file");
    expect_refused(choices_read(g_dir, 50257, &out, &err), err, g_dir, "not a regular file", "read: a directory");
    with(std::vector<char>(bytes.begin(), bytes.begin() + 100), "too small for the 1024-byte header", "short header");
    std::vector<char> b = bytes;
    b[0] ^= 1;
    with(b, "bad magic", "bad magic");
    b = bytes; b[4] = 2;
    with(b, "unsupported version 2", "version");
    with(std::vector<char>(bytes.begin(), bytes.end() - 2), "size mismatch", "truncated by one token");
    b = bytes; b.push_back(0); b.push_back(0);
    with(b, "size mismatch", "one token too many");
    b = bytes; b[16] += 1;   // header [4]: the longest row
    with(b, "the header's longest row", "wrong longest row");
    b = bytes; b[8] = 3;     // header [2]: 3 examples where 4 are written
    with(b, "uint16 left after the last example", "fewer examples in the header than in the body");
    b = bytes; b[8] = 5;
    with(b, "example 4: the body ends inside it", "more examples in the header than in the body");
    // a header that claims more examples than the body could hold is refused before anything is
    // allocated for them (2^31-1 examples would be ~120 GB of vectors)
    b = std::vector<char>(bytes.begin(), bytes.begin() + 1024);
    const int32_t huge = INT32_MAX, none = 0;
    memcpy(b.data() + 8, &huge, 4); memcpy(b.data() + 20, &none, 4);
    with(b, "bad header: 2147483647 examples of 4 endings need at least", "2^31-1 examples in an empty body");
    b = bytes; b[1024] = 9; b[1025] = 0;  // example 0's label
    with(b, "example 0: label 9 is not in 0..3", "label out of range");
    with(bytes, "is not below the model's vocabulary of 10", "token beyond the vocabulary", 10);
}

static void test_rows() {
    ChoiceSet s;
    s.K = 2;
    s.examples = {example(1, {10, 11}, {{20}, {30, 31, 32}}), example(0, {12}, {{21, 22}, {33}})};
    const int T = 6, pad = 99;
    std::vector<int> in(2 * 2 * T), tg(in.size());
    choices_fill_rows(s, 0, 2, T, pad, in.data(), tg.data());
    const std::vector<int> want_in = {10, 11, 20, 99, 99, 99,   10, 11, 30, 31, 32, 99,
                                      12, 21, 22, 99, 99, 99,   12, 33, 99, 99, 99, 99};
    const std::vector<int> want_tg = {11, 20, 99, 99, 99, 99,   11, 30, 31, 32, 99, 99,
                                      21, 22, 99, 99, 99, 99,   33, 99, 99, 99, 99, 99};
    CHECK(in == want_in, "rows: context + ending i, padded");
    CHECK(tg == want_tg, "rows: targets = the next input, pad where the row ends");
    choices_fill_rows(s, 1, 1, T, pad, in.data(), tg.data());
    CHECK(std::vector<int>(in.begin(), in.begin() + 2 * T) == std::vector<int>(want_in.begin() + 2 * T, want_in.end()),
          "rows: from example `first` on");
}

static void test_scores() {
    // one example, context of 3 tokens, endings of 1 and 4 tokens: ending 1 has the larger sum but
    // the smaller mean, so acc and acc_norm pick differently
    ChoiceSet s;
    s.K = 2;
    s.examples = {example(1, {1, 2, 3}, {{4}, {5, 6, 7, 8}})};
    const int T = 8;
    std::vector<float> losses(2 * T, 100.0f);   // 100 where no ending token is predicted: never read
    losses[0 * T + 2] = 2.0f;                                                         // ending 0: sum 2, mean 2
    for (int t = 2; t <= 5; t++) losses[1 * T + t] = 1.0f;                            // ending 1: sum 4, mean 1
    ChoiceTally t;
    choices_score(s, 0, 1, T, losses.data(), &t);
    CHECK(t.examples == 1 && t.correct == 0 && t.correct_norm == 1, "acc by the sum, acc_norm by the mean per token");
    CHECK(std::fabs(t.loss_sum - 6.0) < 1e-9 && t.loss_tokens == 5, "completion loss: every ending's tokens, only theirs");
    // a tie goes to the lower index
    s.examples = {example(0, {1}, {{4}, {5}})};
    std::vector<float> tie(2 * T, 3.0f);
    ChoiceTally u;
    choices_score(s, 0, 1, T, tie.data(), &u);
    CHECK(u.correct == 1 && u.correct_norm == 1, "a tie goes to the lower index");
    s.examples[0].label = 1;
    ChoiceTally v;
    choices_score(s, 0, 1, T, tie.data(), &v);
    CHECK(v.correct == 0 && v.correct_norm == 0, "a tie is not the higher index");
}

static void test_row_length() {
    ChoiceSet s = random_set(1, 4, 9);
    s.longest = 69;
    CHECK_EQ(choices_row_length(s, 8, 1024), 128, "rows: the longest rounded up to 64");
    CHECK_EQ(choices_row_length(s, 4, 100), 100, "rows: at most T");
    CHECK_EQ(choices_row_length(s, 3, 128), 69, "rows: the longest itself where 4 rounded rows exceed B*T");
    CHECK_EQ(choices_row_length(s, 2, 128), 0, "rows: 0 where not even 4 rows of the longest fit");
    CHECK_EQ(choices_row_length(s, 64, 64), 0, "rows: 0 where the longest exceeds T");
}

// The bookkeeping end to end: random examples, rows filled, made-up per-position losses, scores
// against a direct computation from the examples alone.
static void test_against_direct() {
    ChoiceSet s = random_set(40, 4, 7);
    const int T = (int)(s.longest + 3);
    std::vector<int> in(s.examples.size() * 4 * T), tg(in.size());
    choices_fill_rows(s, 0, s.examples.size(), T, 0, in.data(), tg.data());
    // loss of predicting token y after token x: a fixed function of the pair
    auto f = [](int x, int y) { return (float)((x * 7 + y * 13) % 101) / 10.0f; };
    std::vector<float> losses(in.size());
    for (size_t i = 0; i < in.size(); i++) losses[i] = f(in[i], tg[i]);
    ChoiceTally t;
    choices_score(s, 0, 20, T, losses.data(), &t);
    choices_score(s, 20, 20, T, losses.data() + (size_t)20 * 4 * T, &t);
    double correct = 0, correct_norm = 0, loss_sum = 0, tokens = 0;
    for (const auto& x : s.examples) {
        double best_s = 1e30, best_m = 1e30;
        int is = -1, im = -1;
        for (int i = 0; i < 4; i++) {
            double sum = f(x.context.back(), x.endings[i][0]);
            for (size_t k = 1; k < x.endings[i].size(); k++) sum += f(x.endings[i][k - 1], x.endings[i][k]);
            const double mean = sum / x.endings[i].size();
            if (sum < best_s) { best_s = sum; is = i; }
            if (mean < best_m) { best_m = mean; im = i; }
            loss_sum += sum; tokens += x.endings[i].size();
        }
        correct += is == x.label; correct_norm += im == x.label;
    }
    CHECK(t.examples == 40 && t.correct == correct && t.correct_norm == correct_norm, "40 examples, two passes: the direct counts");
    CHECK(std::fabs(t.loss_sum - loss_sum) < 1e-6 * loss_sum && t.loss_tokens == tokens, "40 examples: the direct completion loss");
}

int main() {
    char tmpl[] = "/tmp/test_choices_XXXXXX";
    if (!mkdtemp(tmpl)) { printf("FAIL mkdtemp\n0 passed, 1 failed\n"); return 1; }
    g_dir = tmpl;
    test_roundtrip();
    test_write_refusals();
    test_read_refusals();
    test_rows();
    test_scores();
    test_row_length();
    test_against_direct();
    for (const auto& f : g_files) { remove(f.c_str()); remove((f + ".tmp").c_str()); }
    rmdir(g_dir.c_str());
    return check_finish();
}
