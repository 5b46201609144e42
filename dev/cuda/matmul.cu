// Checks llmc/matmul.cuh against float64 CPU references:
//   - matmul_forward with bias; with the GELU epilogue (pre_gelu and the tanh-GELU output);
//   - matmul_backward: dinp, dweight accumulated onto non-zero, dbias accumulated; and with
//     pre_gelu (DGELU: dinp multiplied by GELU'(pre_gelu));
//   - bias_backward alone (row count not a multiple of 8, column count not a multiple of a block);
//   - matmul_rowmajor, batched with padded strides, for the four transpose combinations (beta=0
//     onto a NaN-poisoned C) and once with beta != 0;
//   - timing of matmul_forward (+GELU) and matmul_backward at N=B*T=16384, C=768, OC=3072.
// Run: make dev/cuda/matmul_check && ./dev/cuda/matmul_check   (PRECISION=BF16|FP32 for others)
#include "check.cuh"

static const double kS = 0.7978845608028654;  // sqrt(2/pi)
static double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kS * (x + 0.044715 * x * x * x))); }
static double gelu_grad(double x) {
    const double t = std::tanh(kS * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kS * (1.0 + 3.0 * 0.044715 * x * x);
}

// out (N, OC) = inp (N, C) @ w (OC, C)^T [+ bias]
static std::vector<double> linear_ref(const std::vector<float>& inp, const std::vector<float>& w,
                                      const std::vector<float>* bias, int N, int C, int OC) {
    std::vector<double> out((size_t)N * OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? (*bias)[o] : 0.0;
            for (int c = 0; c < C; c++) s += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = s;
        }
    return out;
}

static void check_linear(Context* ctx) {
    const int N = 256, C = 384, OC = 1152;
    const double tol = tol_default();
    std::vector<float> inp = randn((size_t)N * C), w = randn((size_t)OC * C, 1.0f / std::sqrt((float)C)), bias = randn(OC, 0.5f);
    floatX *d_inp = to_device(inp), *d_w = to_device(w), *d_bias = to_device(bias);
    floatX *d_out = dalloc<floatX>((size_t)N * OC), *d_pre = dalloc<floatX>((size_t)N * OC);
    const std::vector<double> ref = linear_ref(inp, w, &bias, N, C, OC);

    poison(d_out, (size_t)N * OC);
    matmul_forward(ctx, d_out, d_inp, d_w, d_bias, N, C, OC);
    check_close("matmul_forward +bias", from_device(d_out, (size_t)N * OC), ref, tol);

    poison(d_out, (size_t)N * OC); poison(d_pre, (size_t)N * OC);
    matmul_forward(ctx, d_out, d_inp, d_w, d_bias, N, C, OC, d_pre);
    std::vector<double> ref_gelu(ref.size());
    for (size_t i = 0; i < ref.size(); i++) ref_gelu[i] = gelu(ref[i]);
    check_close("matmul_forward +bias GELU pre_gelu", from_device(d_pre, (size_t)N * OC), ref, tol);
    check_close("matmul_forward +bias GELU out", from_device(d_out, (size_t)N * OC), ref_gelu, tol_for(5e-5, 2e-3, 1.5e-2));

    // backward, plain and with DGELU. pre_gelu (N, C) is what produced inp = GELU(pre_gelu).
    std::vector<float> dout = randn((size_t)N * OC), dw0 = randn((size_t)OC * C), db0 = randn(OC), pre = randn((size_t)N * C);
    floatX *d_dout = to_device(dout), *d_dinp = dalloc<floatX>((size_t)N * C), *d_pre_in = to_device(pre);
    floatX *d_dw = dalloc<floatX>((size_t)OC * C), *d_db = dalloc<floatX>(OC);
    std::vector<double> dinp((size_t)N * C, 0.0), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            const double d = dout[(size_t)n * OC + o];
            db[o] += d;
            for (int c = 0; c < C; c++) {
                dinp[(size_t)n * C + c] += d * w[(size_t)o * C + c];
                dw[(size_t)o * C + c] += d * inp[(size_t)n * C + c];
            }
        }
    for (int gelu_fused = 0; gelu_fused < 2; gelu_fused++) {
        const std::string tag = gelu_fused ? "matmul_backward DGELU" : "matmul_backward";
        upload(d_dw, dw0); upload(d_db, db0);
        poison(d_dinp, (size_t)N * C);
        matmul_backward(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, gelu_fused ? d_pre_in : nullptr);
        std::vector<double> ref_dinp = dinp;
        if (gelu_fused) for (size_t i = 0; i < ref_dinp.size(); i++) ref_dinp[i] *= gelu_grad(pre[i]);
        check_close(tag + " dinp", from_device(d_dinp, (size_t)N * C), ref_dinp, tol_for(5e-5, 2e-3, 1.5e-2));
        check_close(tag + " dweight (accumulated)", from_device(d_dw, (size_t)OC * C), dw, tol);
        check_close(tag + " dbias (accumulated)", from_device(d_db, OC), db, tol);
    }
}

static void check_bias_backward(Context* ctx) {
    const int N = 1000, OC = 1152 + 64;  // N % 8 != 0; OC not a multiple of 32 * x128::size
    std::vector<float> dout = randn((size_t)N * OC), db0 = randn(OC);
    floatX *d_dout = to_device(dout), *d_db = to_device(db0);
    bias_backward(ctx, d_db, d_dout, N, OC);
    std::vector<double> ref(db0.begin(), db0.end());
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) ref[o] += dout[(size_t)n * OC + o];
    check_close("bias_backward (accumulated, N=1000)", from_device(d_db, OC), ref, tol_default());
}

// C[b] (M,N) = alpha * opX(X[b]) @ opY(Y[b]) + beta * C[b], batch 3, strides padded past the matrices.
static void check_rowmajor(Context* ctx, bool tx, bool ty, float beta) {
    const int M = 64, N = 96, K = 80, batch = 3, pad = 64;
    const float alpha = 0.5f;
    const long long sx = (long long)M * K + pad, sy = (long long)K * N + pad, sc = (long long)M * N + pad;
    std::vector<float> X = randn(sx * batch), Y = randn(sy * batch), C0 = randn(sc * batch);
    floatX *d_x = to_device(X), *d_y = to_device(Y), *d_c = to_device(C0);
    if (beta == 0.0f) poison(d_c, sc * batch);  // beta = 0 must not read C
    matmul_rowmajor(ctx, d_c, d_x, d_y, M, N, K, tx, ty, alpha, beta, batch, sx, sy, sc);
    std::vector<float> got = from_device(d_c, sc * batch), out;
    std::vector<double> ref;
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++) {
                    const double x = X[b * sx + (tx ? (size_t)k * M + i : (size_t)i * K + k)];
                    const double y = Y[b * sy + (ty ? (size_t)j * K + k : (size_t)k * N + j)];
                    s += x * y;
                }
                const size_t ci = b * sc + (size_t)i * N + j;
                ref.push_back(alpha * s + beta * C0[ci]);
                out.push_back(got[ci]);
            }
    char name[96];
    snprintf(name, sizeof(name), "matmul_rowmajor batched trans_x=%d trans_y=%d beta=%g", tx, ty, beta);
    check_close(name, out, ref, tol_default());
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "matmul");
    check_linear(&ctx);
    check_bias_backward(&ctx);
    for (int t = 0; t < 4; t++) check_rowmajor(&ctx, t & 1, t & 2, 0.0f);
    check_rowmajor(&ctx, false, false, 0.5f);

    // ---- timing at GPT-2 small MLP shapes
    if (timing_enabled()) {
        const int N = 16384, C = 768, OC = 3072;
        floatX *inp = random_device<floatX>(&ctx, (size_t)N * C, -1, 1), *w = random_device<floatX>(&ctx, (size_t)OC * C, -0.05f, 0.05f);
        floatX *bias = random_device<floatX>(&ctx, OC, -0.1f, 0.1f), *out = dalloc<floatX>((size_t)N * OC);
        floatX *pre = dalloc<floatX>((size_t)N * OC), *dinp = dalloc<floatX>((size_t)N * C);
        floatX *dw = random_device<floatX>(&ctx, (size_t)OC * C, -0.01f, 0.01f), *db = random_device<floatX>(&ctx, OC, -0.01f, 0.01f);
        const double flops = 2.0 * N * C * OC;
        time_ms(&ctx, "matmul_forward +bias N=16384 C=768 OC=3072", 0, flops,
                [&] { matmul_forward(&ctx, out, inp, w, bias, N, C, OC); });
        time_ms(&ctx, "matmul_forward +bias+GELU N=16384 C=768 OC=3072", 0, flops,
                [&] { matmul_forward(&ctx, out, inp, w, bias, N, C, OC, pre); });
        floatX* dout = random_device<floatX>(&ctx, (size_t)N * OC, -0.01f, 0.01f);
        time_ms(&ctx, "matmul_backward (dinp,dw,db) N=16384 C=768 OC=3072", 0, 2 * flops,
                [&] { matmul_backward(&ctx, dinp, dw, db, dout, inp, w, N, C, OC); });
        const double X = sizeof(floatX);
        time_ms(&ctx, "bias_backward N=16384 OC=3072", X * ((double)N * OC + 2.0 * OC), 0,
                [&] { bias_backward(&ctx, db, dout, N, OC); });
    }

    context_destroy(&ctx);
    return check_finish();
}
