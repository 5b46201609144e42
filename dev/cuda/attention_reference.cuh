// attention_check's float64 CPU reference: a Problem is one attention's inputs (rounded to floatX)
// and every output the kernels are checked against (out, the log-sum-exp, the probabilities, dqkv),
// computed in double; with the inputs of each kind of case (N(0, 1); large scores).
#pragma once
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>
#include "check.cuh"

// The float64 CPU reference for one problem: inputs (rounded to floatX) and every output.
struct Problem {
    int B, T, NH, hs, C;
    std::vector<float> qkv, dout;
    std::vector<double> out, lse, att, dqkv;  // lse (B,NH,T) natural log of the scaled scores
    std::string label;                        // after the shape in every check's name ("" for N(0, 1) inputs)
};

// Fills P's outputs from its inputs P.qkv, P.dout (rounded to floatX here, in place).
static Problem solve(Problem P) {
    const int B = P.B, T = P.T, NH = P.NH, hs = P.hs, C = P.C;
    round_to_floatX(P.qkv);
    round_to_floatX(P.dout);
    P.out.assign((size_t)B * T * C, 0.0); P.lse.assign((size_t)B * NH * T, 0.0);
    P.att.assign((size_t)B * NH * T * T, 0.0); P.dqkv.assign((size_t)B * T * 3 * C, 0.0);
    std::vector<double> p(T), dp(T);
    const double scale = 1.0 / std::sqrt((double)hs);
    auto at = [&](int b, int t, int part, int h) { return ((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * hs; };
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* q = &P.qkv[at(b, t, 0, h)];
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float* k = &P.qkv[at(b, j, 1, h)];
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    p[j] = s * scale;
                    mx = std::max(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) { p[j] = std::exp(p[j] - mx); sum += p[j]; }
                for (int j = 0; j <= t; j++) p[j] /= sum;
                P.lse[((size_t)b * NH + h) * T + t] = mx + std::log(sum);
                // forward: y[t] = sum_j p[j] v[j]; backward: dp[j] = dy[t].v[j], dv[j] += p[j] dy[t]
                const float* dy = &P.dout[((size_t)b * T + t) * C + (size_t)h * hs];
                double dot = 0;
                for (int j = 0; j <= t; j++) {
                    P.att[(((size_t)b * NH + h) * T + t) * T + j] = p[j];
                    const float* v = &P.qkv[at(b, j, 2, h)];
                    double s = 0;
                    for (int d = 0; d < hs; d++) {
                        P.out[((size_t)b * T + t) * C + (size_t)h * hs + d] += p[j] * v[d];
                        s += (double)dy[d] * v[d];
                        P.dqkv[at(b, j, 2, h) + d] += p[j] * dy[d];
                    }
                    dp[j] = s;
                    dot += p[j] * s;
                }
                // ds[j] = p[j] (dp[j] - dot); dq[t] += scale ds[j] k[j]; dk[j] += scale ds[j] q[t]
                for (int j = 0; j <= t; j++) {
                    const double ds = p[j] * (dp[j] - dot) * scale;
                    const float* k = &P.qkv[at(b, j, 1, h)];
                    for (int d = 0; d < hs; d++) {
                        P.dqkv[at(b, t, 0, h) + d] += ds * k[d];
                        P.dqkv[at(b, j, 1, h) + d] += ds * q[d];
                    }
                }
            }
    return P;
}

// A problem's inputs qkv (B,T,3C) and dout (B,T,C), both N(0, 1), in that order from the one
// random stream (so every case drawn after another sees the same inputs as before), unsolved.
static Problem draw(int B, int T, int NH, int hs) {
    Problem P{B, T, NH, hs, NH * hs};
    P.qkv = randn((size_t)B * T * 3 * P.C);
    P.dout = randn((size_t)B * T * P.C);
    return P;
}

// The reference for qkv, dout ~ N(0, 1).
static Problem reference(int B, int T, int NH, int hs) { return solve(draw(B, T, NH, hs)); }

// " B=.. T=.. NH=..", the shape in every check's name
static std::string shape_tag(const Problem& P) {
    return " B=" + std::to_string(P.B) + " T=" + std::to_string(P.T) + " NH=" + std::to_string(P.NH) + P.label;
}

// The large-score problems (attention.cu's "large attention scores" section says why and what):
// LARGE: qkv, dout ~ N(0, 1), then q and k (columns 0 .. 2C of each row) times sqrt(sigma2).
static Problem reference_large_scores(int B, int T, int NH, float sigma2) {
    Problem P = draw(B, T, NH, 64);
    const float g = std::sqrt(sigma2);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int c = 0; c < 2 * P.C; c++) P.qkv[r * 3 * P.C + c] *= g;
    char label[64];
    snprintf(label, sizeof label, " large scores (q,k ~ N(0,%g))", sigma2);
    P.label = label;
    return solve(std::move(P));
}

// DOMINANT: qkv, dout ~ N(0, 1), then q = 10 q and k = q (each query's own key wins by hundreds).
static Problem reference_own_key_dominates(int B, int T, int NH) {
    Problem P = draw(B, T, NH, 64);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int c = 0; c < P.C; c++) {
            float* row = &P.qkv[r * 3 * P.C];
            row[c] *= 10.0f;
            row[P.C + c] = row[c];
        }
    P.label = " own key dominates (q = k = 10 N(0,1))";
    return solve(std::move(P));
}
