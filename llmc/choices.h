// Multiple-choice completion tasks (HellaSwag and the like): the token file data/tokenize
// --hellaswag writes, and the bookkeeping of the evaluation that llmc/evaluate.cuh
// (gpt2_choice_tally) runs around plain forward passes. Host-only C++17; unit-tested
// (dev/unit/test_choices.cpp).
//
// The task: a context and K endings, one of them the right one (label). The model scores each
// ending by the cross-entropy of the ending's tokens given the context, which the forward pass
// already computes as per-token losses:
//   acc       picks the ending with the lowest SUM of its token losses (the most likely text);
//   acc_norm  the lowest MEAN per token, so a long ending is not penalized for its length (llm.c's
//             "acc_norm"; lm-evaluation-harness divides by the ending's characters instead, so
//             its acc_norm differs).
// A tie goes to the lower index. Nothing is trained on: K rows per example (context + ending i),
// one forward, the losses copied back.
//
// File, little-endian:
//   header: 256 int32 (1024 bytes)  [0] magic 20261202, [1] version 1, [2] examples N,
//                                   [3] endings per example K, [4] the longest row (context +
//                                   ending) in tokens, [5] the body's length in uint16, rest zero
//   body:   per example, uint16: label, context length, the K ending lengths, then the context's
//           tokens, then each ending's tokens in order
// Every function returns false with one line "<path>: <what is wrong>" in *err instead of
// aborting; the reader checks every length against the file, so a damaged file is refused whole.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>
#include "shards.h"   // the layout's reading and atomic writing (a 256-int32 header, then uint16)

constexpr int CHOICES_MAGIC = 20261202, CHOICES_VERSION = 1, CHOICES_HEADER_INTS = SHARD_HEADER_INTS;
constexpr int CHOICES_MAX_K = 64;   // endings per example (HellaSwag: 4)

struct ChoiceExample {
    int label = 0;                                  // the right ending, 0..K-1
    std::vector<uint16_t> context;                  // at least one token
    std::vector<std::vector<uint16_t>> endings;     // K of them, each at least one token
};

struct ChoiceSet {
    int K = 0;                                      // endings per example
    size_t longest = 0;                             // the longest context + ending, tokens
    std::vector<ChoiceExample> examples;
};

// What is wrong with example e of a set with K endings ("" when nothing is); the writer and the
// reader hold every example to the same rules.
inline std::string choice_example_problem(const ChoiceExample& x, int K) {
    if ((int)x.endings.size() != K)
        return std::to_string(x.endings.size()) + " endings where the first example has " + std::to_string(K);
    if (x.label < 0 || x.label >= K) return "label " + std::to_string(x.label) + " is not in 0.." + std::to_string(K - 1);
    if (x.context.empty()) return "an empty context (the first ending token would have nothing to be predicted from)";
    for (int i = 0; i < K; i++) {
        if (x.endings[i].empty()) return "ending " + std::to_string(i) + " is empty";
        if (x.context.size() + x.endings[i].size() > 65535) return "context + ending " + std::to_string(i) + " exceed 65535 tokens";
    }
    return "";
}

// Writes the set to `path` (a .tmp file, fsync'ed, renamed into place: a crash leaves no half
// file under the name). Checks every example first (choice_example_problem).
inline bool choices_write(const std::string& path, const ChoiceSet& s, std::string* err) {
    using shard_detail::fail;
    if (s.examples.empty()) return fail(err, path, "no examples");
    if (s.K < 2 || s.K > CHOICES_MAX_K) return fail(err, path, std::to_string(s.K) + " endings per example (2.." + std::to_string(CHOICES_MAX_K) + ")");
    if (s.examples.size() > (size_t)INT32_MAX) return fail(err, path, "more than 2^31-1 examples");
    std::vector<uint16_t> body;
    size_t longest = 0;
    for (size_t e = 0; e < s.examples.size(); e++) {
        const ChoiceExample& x = s.examples[e];
        const std::string problem = choice_example_problem(x, s.K);
        if (!problem.empty()) return fail(err, path, "example " + std::to_string(e) + ": " + problem);
        body.push_back((uint16_t)x.label);
        body.push_back((uint16_t)x.context.size());
        for (const auto& end : x.endings) body.push_back((uint16_t)end.size());
        body.insert(body.end(), x.context.begin(), x.context.end());
        for (const auto& end : x.endings) {
            body.insert(body.end(), end.begin(), end.end());
            longest = std::max(longest, x.context.size() + end.size());
        }
        if (body.size() > (size_t)INT32_MAX) return fail(err, path, "the body exceeds 2^31-1 tokens");
    }
    int32_t header[CHOICES_HEADER_INTS] = {CHOICES_MAGIC, CHOICES_VERSION, (int32_t)s.examples.size(), s.K,
                                           (int32_t)longest, (int32_t)body.size()};
    return shard_detail::write_with_header(path, header, body.data(), body.size(), err);
}

// Reads a file choices_write wrote; every token must be below vocab_size (the model's).
inline bool choices_read(const std::string& path, int vocab_size, ChoiceSet* s, std::string* err) {
    using shard_detail::fail;
    int32_t h[CHOICES_HEADER_INTS];
    size_t size = 0;
    shard_detail::File f = shard_detail::open_with_header(path, h, &size, err);
    if (!f) return false;
    std::vector<uint16_t> body;
    std::string problem;
    if (h[0] != CHOICES_MAGIC)
        problem = "bad magic " + std::to_string(h[0]) + " (expected " + std::to_string(CHOICES_MAGIC) +
                  ": a multiple-choice file from data/tokenize --hellaswag)";
    else if (h[1] != CHOICES_VERSION) problem = "unsupported version " + std::to_string(h[1]);
    else if (h[2] < 1 || h[3] < 2 || h[3] > CHOICES_MAX_K || h[5] < 0)
        problem = "bad header (" + std::to_string(h[2]) + " examples of " + std::to_string(h[3]) + " endings)";
    else if ((size_t)h[2] * (3 + 2 * (size_t)h[3]) > (size_t)h[5])  // each example: label, K+1 lengths, >= K+1 tokens (none empty)
        problem = "bad header: " + std::to_string(h[2]) + " examples of " + std::to_string(h[3]) + " endings need at least " +
                  std::to_string((size_t)h[2] * (3 + 2 * (size_t)h[3])) + " uint16, the body holds " + std::to_string(h[5]);
    else if (size != SHARD_HEADER_BYTES + (size_t)h[5] * sizeof(uint16_t))
        problem = "size mismatch: the header says " + std::to_string(h[5]) + " uint16 after it, the file holds " +
                  std::to_string((size - SHARD_HEADER_BYTES) / sizeof(uint16_t));
    else {
        body.resize((size_t)h[5]);
        if (!body.empty() && fread(body.data(), sizeof(uint16_t), body.size(), f.get()) != body.size()) problem = "read failed";
    }
    if (!problem.empty()) return fail(err, path, problem);
    ChoiceSet out;
    out.K = h[3];
    out.examples.resize((size_t)h[2]);
    size_t p = 0;
    auto take = [&](size_t n, std::vector<uint16_t>* into) {  // n uint16 of the body, or false
        if (body.size() - p < n) return false;
        into->assign(body.begin() + p, body.begin() + p + n);
        p += n;
        return true;
    };
    for (size_t e = 0; e < out.examples.size(); e++) {
        ChoiceExample& x = out.examples[e];
        std::vector<uint16_t> lens;
        const std::string where = "example " + std::to_string(e) + ": ";
        if (!take(2 + (size_t)out.K, &lens)) return fail(err, path, where + "the body ends inside it");
        x.label = lens[0];
        x.context.resize(lens[1]);
        x.endings.resize(out.K);
        if (!take(lens[1], &x.context)) return fail(err, path, where + "the body ends inside it");
        for (int i = 0; i < out.K; i++) {
            if (!take(lens[2 + i], &x.endings[i])) return fail(err, path, where + "the body ends inside it");
            out.longest = std::max(out.longest, x.context.size() + x.endings[i].size());
        }
        problem = choice_example_problem(x, out.K);
        if (!problem.empty()) return fail(err, path, where + problem);
        for (int i = -1; i < out.K; i++)
            for (uint16_t t : i < 0 ? x.context : x.endings[i])
                if (t >= vocab_size) return fail(err, path, where + "token " + std::to_string(t) + " is not below the model's vocabulary of " + std::to_string(vocab_size));
    }
    if (p != body.size()) return fail(err, path, std::to_string(body.size() - p) + " uint16 left after the last example");
    if ((size_t)h[4] != out.longest)
        return fail(err, path, "the header's longest row " + std::to_string(h[4]) + " is not the examples' " + std::to_string(out.longest));
    *s = std::move(out);
    return true;
}

// The row length the evaluation packs examples in, for forward passes of B*T tokens: the longest
// example rounded up to a whole number of 64-token tiles (at most T), or the longest itself where
// B*T has no room for K such rows; 0 when not even that fits, or the longest exceeds T.
inline int choices_row_length(const ChoiceSet& s, size_t B, size_t T) {
    if (s.longest > T) return 0;
    size_t t = std::min(T, (s.longest + 63) / 64 * 64);
    if (B * T < (size_t)s.K * t) t = s.longest;
    return B * T < (size_t)s.K * t ? 0 : (int)t;
}

// Rows of T tokens for the n examples from `first`: example first+j's ending i is row j*K + i,
// inputs = context + ending i, then `pad`; targets[t] = inputs[t+1] (`pad` where the row ends:
// those positions' losses are never read). inputs and targets hold n*K*T each. T >= s.longest.
inline void choices_fill_rows(const ChoiceSet& s, size_t first, size_t n, int T, int pad, int* inputs, int* targets) {
    for (size_t j = 0; j < n; j++) {
        const ChoiceExample& x = s.examples[first + j];
        for (int i = 0; i < s.K; i++) {
            const size_t row = (j * s.K + i) * (size_t)T;
            int* in = inputs + row;
            std::fill(in, in + T, pad);
            std::copy(x.context.begin(), x.context.end(), in);
            std::copy(x.endings[i].begin(), x.endings[i].end(), in + x.context.size());
            const size_t used = x.context.size() + x.endings[i].size();
            for (int t = 0; t < T; t++) targets[row + t] = (size_t)t + 1 < used ? in[t + 1] : pad;
        }
    }
}

struct ChoiceTally {
    double examples = 0, correct = 0, correct_norm = 0;  // acc = correct / examples, acc_norm = correct_norm / examples
    double loss_sum = 0, loss_tokens = 0;                // every ending's token losses, right or not
};

// Scores the n examples from `first` from the forward's per-token losses of the rows
// choices_fill_rows made (losses[row*T + t]: the loss of predicting inputs[t+1] at position t).
// Ending i's tokens sit at positions c .. c+len-1 (c: the context's length), so their losses are
// at positions c-1 .. c+len-2.
inline void choices_score(const ChoiceSet& s, size_t first, size_t n, int T, const float* losses, ChoiceTally* tally) {
    for (size_t j = 0; j < n; j++) {
        const ChoiceExample& x = s.examples[first + j];
        const size_t c = x.context.size();
        int best_sum = 0, best_mean = 0;
        double lowest_sum = 0, lowest_mean = 0;
        for (int i = 0; i < s.K; i++) {
            const float* row = losses + (j * s.K + i) * (size_t)T;
            const size_t len = x.endings[i].size();
            double sum = 0;
            for (size_t t = c - 1; t < c - 1 + len; t++) sum += row[t];
            const double mean = sum / (double)len;
            if (i == 0 || sum < lowest_sum) { lowest_sum = sum; best_sum = i; }
            if (i == 0 || mean < lowest_mean) { lowest_mean = mean; best_mean = i; }
            tally->loss_sum += sum;
            tally->loss_tokens += (double)len;
        }
        tally->examples += 1;
        tally->correct += best_sum == x.label;
        tally->correct_norm += best_mean == x.label;
    }
}
