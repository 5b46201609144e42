// Checks llmc/attention.cuh against a float64 CPU causal attention (B=2, NH=4, hs=64; T=64 and
// T=100, the latter not a multiple of the 64-row tiles nor of 8):
//   - attention_forward / attention_backward, the model's path (flash attention in fp16/bf16
//     builds, the cuBLAS reference in FP32 builds): out; the saved state (the per-row log-sum-exp
//     for flash, the probabilities for the reference); dq, dk, dv read from dqkv (NaN-poisoned
//     beforehand); backward run twice must give bitwise-identical dqkv;
//   - attention_reference_forward / _backward (every build): out, the probabilities att incl. exact
//     zeros above the diagonal, dq, dk, dv;
//   - timing at B=8, T=1024, NH=12, hs=64, as effective TFLOP/s counting the causal half
//     (forward 2*B*NH*T*T*hs FLOPs, backward 2.5x that).
// Run: make dev/cuda/attention_check && ./dev/cuda/attention_check   (PRECISION=BF16|FP32 for others)
#include "check.cuh"
#include "../../llmc/attention.cuh"

// The float64 CPU reference for one problem: inputs (rounded to floatX) and every output.
struct Problem {
    int B, T, NH, hs, C;
    std::vector<float> qkv, dout;
    std::vector<double> out, lse, att, dqkv;  // lse (B,NH,T) natural log of the scaled scores
};

static Problem reference(int B, int T, int NH, int hs) {
    Problem P{B, T, NH, hs, NH * hs};
    const int C = P.C;
    P.qkv = randn((size_t)B * T * 3 * C);
    P.dout = randn((size_t)B * T * C);
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

// dq, dk, dv parts of the device dqkv vs the reference, one check each.
static void check_dqkv(const std::string& prefix, const Problem& P, const floatX* d_dqkv, double tol) {
    const std::vector<float> got = from_device(d_dqkv, P.dqkv.size());
    const char* names[3] = {" dq", " dk", " dv"};
    for (int part = 0; part < 3; part++) {
        std::vector<float> g;
        std::vector<double> r;
        for (int bt = 0; bt < P.B * P.T; bt++)
            for (int c = 0; c < P.C; c++) {
                const size_t i = (size_t)bt * 3 * P.C + (size_t)part * P.C + c;
                g.push_back(got[i]);
                r.push_back(P.dqkv[i]);
            }
        check_close(prefix + names[part], g, r, tol);
    }
}

// Saved probabilities (B,NH,T,T): exact zeros above the diagonal, and the values.
static void check_probabilities(const std::string& name, const Problem& P, const std::vector<float>& got, double tol) {
    size_t nonzero_future = 0;
    for (size_t r = 0; r < (size_t)P.B * P.NH * P.T; r++)
        for (int j = (int)(r % P.T) + 1; j < P.T; j++) nonzero_future += got[r * P.T + j] != 0.0f;
    check_true(name + " causal zeros", nonzero_future == 0, std::to_string(nonzero_future) + " non-zero above the diagonal");
    check_close(name, got, P.att, tol);
}

// The model's path: attention_forward / attention_backward.
static void check_model_path(Context* ctx, const Problem& P) {
    const int B = P.B, T = P.T, C = P.C, NH = P.NH;
    const std::string tag = " T=" + std::to_string(T);
    std::vector<float> qkv = P.qkv, dout = P.dout;
    floatX *d_qkv = to_device(qkv), *d_dout = to_device(dout);
    floatX *d_out = dalloc<floatX>(P.out.size()), *d_dqkv = dalloc<floatX>(P.dqkv.size());
    float* d_state = dalloc<float>(attention_state_elems(B, T, NH));
    const size_t scratch_bytes = attention_scratch_bytes(B, T, C, NH);
    unsigned char* d_scratch = dalloc<unsigned char>(scratch_bytes);
    poison(d_out, P.out.size()); poison(d_dqkv, P.dqkv.size());
    poison(d_state, attention_state_elems(B, T, NH)); poison(d_scratch, scratch_bytes);
    attention_forward(ctx, d_out, d_state, d_qkv, d_scratch, B, T, C, NH);
    check_close("attention_forward out" + tag, from_device(d_out, P.out.size()), P.out, tol_for(1e-5, 3e-3, 2e-2));
#if defined(ENABLE_FP32)
    check_probabilities("attention_forward state (probabilities)" + tag, P, from_device_raw(d_state, P.att.size()), 1e-5);
#else
    check_close("attention_forward state (log-sum-exp)" + tag, from_device_raw(d_state, P.lse.size()), P.lse, 1e-5);
#endif
    attention_backward(ctx, d_dqkv, d_dout, d_qkv, d_out, d_state, d_scratch, B, T, C, NH);
    check_dqkv("attention_backward" + tag, P, d_dqkv, tol_for(2e-5, 5e-3, 2.5e-2));
    const std::vector<unsigned char> first = bytes_of(d_dqkv, P.dqkv.size() * sizeof(floatX));
    poison(d_dqkv, P.dqkv.size());
    attention_backward(ctx, d_dqkv, d_dout, d_qkv, d_out, d_state, d_scratch, B, T, C, NH);
    check_true("attention_backward deterministic" + tag,
               bytes_of(d_dqkv, P.dqkv.size() * sizeof(floatX)) == first, "two runs bitwise identical");
}

// The cuBLAS reference path with the materialized probabilities, in every build.
static void check_reference_path(Context* ctx, const Problem& P) {
    const int B = P.B, T = P.T, C = P.C, NH = P.NH;
    const std::string tag = " T=" + std::to_string(T);
    std::vector<float> qkv = P.qkv, dout = P.dout;
    floatX *d_qkv = to_device(qkv), *d_dout = to_device(dout);
    floatX *d_out = dalloc<floatX>(P.out.size()), *d_att = dalloc<floatX>(P.att.size());
    floatX *d_dqkv = dalloc<floatX>(P.dqkv.size()), *d_scratch = dalloc<floatX>(attention_reference_scratch_elems(B, T, C, NH));
    poison(d_out, P.out.size()); poison(d_att, P.att.size()); poison(d_dqkv, P.dqkv.size());
    poison(d_scratch, attention_reference_scratch_elems(B, T, C, NH));
    attention_reference_forward(ctx, d_out, d_att, d_qkv, d_scratch, B, T, C, NH);
    attention_reference_backward(ctx, d_dqkv, d_dout, d_qkv, d_att, d_scratch, B, T, C, NH);
    check_close("attention_reference_forward out" + tag, from_device(d_out, P.out.size()), P.out, tol_for(1e-5, 3e-3, 2e-2));
    check_probabilities("attention_reference_forward att" + tag, P, from_device(d_att, P.att.size()), tol_for(1e-5, 2e-3, 1.5e-2));
    check_dqkv("attention_reference_backward" + tag, P, d_dqkv, tol_for(2e-5, 5e-3, 2.5e-2));
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "attention");
    for (int T : {64, 100}) {
        const Problem P = reference(2, T, 4, 64);
        check_model_path(&ctx, P);
        check_reference_path(&ctx, P);
    }

    // ---- timing at GPT-2 small shapes
    if (timing_enabled()) {
        const int B = 8, T = 1024, NH = 12, hs = 64, C = NH * hs;
        floatX* qkv = random_device<floatX>(&ctx, (size_t)B * T * 3 * C, -1.5f, 1.5f);
        floatX* dout = random_device<floatX>(&ctx, (size_t)B * T * C, -1, 1);
        floatX *out = dalloc<floatX>((size_t)B * T * C), *dqkv = dalloc<floatX>((size_t)B * T * 3 * C);
        float* state = dalloc<float>(attention_state_elems(B, T, NH));
        unsigned char* scratch = dalloc<unsigned char>(attention_scratch_bytes(B, T, C, NH));
        const double flops = 2.0 * B * NH * (double)T * T * hs;
        time_ms(&ctx, "attention_forward B=8 T=1024 NH=12 hs=64", 0, flops,
                [&] { attention_forward(&ctx, out, state, qkv, scratch, B, T, C, NH); });
        time_ms(&ctx, "attention_backward B=8 T=1024 NH=12 hs=64", 0, 2.5 * flops,
                [&] { attention_backward(&ctx, dqkv, dout, qkv, out, state, scratch, B, T, C, NH); });
#if !defined(ENABLE_FP32)  // in FP32 builds the model's path is the reference: timed above
        floatX* att = dalloc<floatX>((size_t)B * NH * T * T);
        floatX* ref_scratch = dalloc<floatX>(attention_reference_scratch_elems(B, T, C, NH));
        time_ms(&ctx, "attention_reference_forward B=8 T=1024 NH=12", 0, flops,
                [&] { attention_reference_forward(&ctx, out, att, qkv, ref_scratch, B, T, C, NH); });
        time_ms(&ctx, "attention_reference_backward B=8 T=1024 NH=12", 0, 2.5 * flops,
                [&] { attention_reference_backward(&ctx, dqkv, dout, qkv, att, ref_scratch, B, T, C, NH); });
#endif
    }

    context_destroy(&ctx);
    return check_finish();
}
