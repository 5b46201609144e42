// Text sampling on the host: a small seeded RNG and top-k / top-p / temperature sampling from one
// row of logits. Host-only; unit-tested. The RNG's whole state is one uint64, so checkpoints save it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

// xorshift64*: tiny state, good enough for sampling; returns a float in [0, 1).
inline float rng_uniform(uint64_t* state) {
    uint64_t x = *state;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *state = x;
    return (float)((x * 0x2545F4914F6CDD1DULL) >> 40) / 16777216.0f;
}
inline uint64_t rng_seed(uint64_t seed) { return seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL; }  // never 0

// Samples a token from logits[0..V): softmax(logits / temperature) restricted to the top_k
// largest (top_k <= 0 or >= V: all of them), and of those to the fewest most likely whose
// probability adds up to top_p (nucleus sampling; top_p >= 1: all of them), as Hugging Face's
// generate() applies them: temperature, then top-k, then top-p (where logits tie at the k-th
// largest, top-k keeps exactly k of them, not all as Hugging Face does). One random number per
// token, always (so ranks stay in step). A NaN logit counts as -inf; a +inf one (or no finite
// one at all) is taken as it is, greedily.
inline int sample_token(const float* logits, int V, int top_k, float top_p, float temperature, uint64_t* rng) {
    std::vector<int> idx(V);
    for (int i = 0; i < V; i++) idx[i] = i;
    int k = (top_k <= 0 || top_k > V) ? V : top_k;
    auto key = [&](int i) { return logits[i] == logits[i] ? logits[i] : -INFINITY; };   // a strict weak order, NaN or not
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return key(a) > key(b); });
    const float mx = key(idx[0]);
    const double draw = rng_uniform(rng);
    if (!std::isfinite(mx)) return idx[0];
    std::vector<double> p(k);
    double sum = 0;
    for (int i = 0; i < k; i++) sum += p[i] = std::exp((double)(key(idx[i]) - mx) / temperature);
    if (top_p < 1.0f) {   // the nucleus: the first n (most likely first) whose share reaches top_p
        double cum = p[0];   // the most likely always stays
        int n = 1;
        while (n < k && cum < top_p * sum) cum += p[n++];
        k = n; sum = cum;
    }
    double u = draw * sum;
    for (int i = 0; i < k; i++) {
        u -= p[i];
        if (u < 0) return idx[i];
    }
    return idx[k - 1];
}
