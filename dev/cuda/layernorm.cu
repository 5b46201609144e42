// Checks llmc/layernorm.cuh against a float64 CPU reference, for C = 768 and C = 1600:
//   - layernorm_forward: out, mean, rstd;
//   - layernorm_residual_forward: residual = inp + add (rounded to floatX, as the kernel does),
//     then out, mean, rstd of that residual;
//   - layernorm_backward: dinp accumulated onto a non-zero initial dinp, dw/db accumulated onto
//     non-zero initial values;
//   - timing of the three at N = 16384 rows, C = 768.
// Run: make dev/cuda/layernorm_check && ./dev/cuda/layernorm_check   (PRECISION=BF16|FP32 for others)
#include "check.cuh"
#include "../../llmc/layernorm.cuh"

// out, mean, rstd (double) = LayerNorm(x) with w, b; eps 1e-5, biased variance.
static void layernorm_ref(std::vector<double>& out, std::vector<double>& mean, std::vector<double>& rstd,
                          const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                          int N, int C) {
    out.resize((size_t)N * C); mean.resize(N); rstd.resize(N);
    for (int r = 0; r < N; r++) {
        const float* xr = &x[(size_t)r * C];
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        const double s = 1.0 / std::sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)r * C + c] = (xr[c] - m) * s * w[c] + b[c];
        mean[r] = m; rstd[r] = s;
    }
}

static void check_forward(Context* ctx, int N, int C, bool fused) {
    const std::string tag = std::string(fused ? "layernorm_residual_forward" : "layernorm_forward") + " C=" + std::to_string(C);
    std::vector<float> inp = randn((size_t)N * C, 1.0f, 0.3f), add = randn((size_t)N * C, 0.5f);
    std::vector<float> w = randn(C, 0.2f, 1.0f), b = randn(C, 0.2f);
    floatX *d_inp = to_device(inp), *d_add = to_device(add), *d_w = to_device(w), *d_b = to_device(b);
    floatX *d_out = dalloc<floatX>((size_t)N * C), *d_res = dalloc<floatX>((size_t)N * C);
    float *d_mean = dalloc<float>(N), *d_rstd = dalloc<float>(N);
    poison(d_out, (size_t)N * C); poison(d_res, (size_t)N * C); poison(d_mean, N); poison(d_rstd, N);
    std::vector<float> x = inp;
    if (fused) {
        for (size_t i = 0; i < x.size(); i++) x[i] = round_x(inp[i] + add[i]);  // the kernel's floatX residual
        layernorm_residual_forward(ctx, d_res, d_out, d_mean, d_rstd, d_inp, d_add, d_w, d_b, N, C);
    } else {
        layernorm_forward(ctx, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    }
    std::vector<double> out, mean, rstd;
    layernorm_ref(out, mean, rstd, x, w, b, N, C);
    if (fused) check_close(tag + " residual", from_device(d_res, (size_t)N * C), std::vector<double>(x.begin(), x.end()), 1e-7);
    check_close(tag + " out", from_device(d_out, (size_t)N * C), out, tol_default());
    check_close(tag + " mean", from_device_raw(d_mean, N), mean, 1e-5);
    check_close(tag + " rstd", from_device_raw(d_rstd, N), rstd, 1e-5);
}

static void check_backward(Context* ctx, int N, int C) {
    const std::string tag = "layernorm_backward C=" + std::to_string(C);
    std::vector<float> inp = randn((size_t)N * C, 1.0f, 0.3f), w = randn(C, 0.2f, 1.0f), dout = randn((size_t)N * C);
    std::vector<float> dinp0 = randn((size_t)N * C), dw0 = randn(C), db0 = randn(C);
    round_to_floatX(inp); round_to_floatX(w);
    std::vector<double> out, mean_d, rstd_d;
    std::vector<float> b(C, 0.0f);
    layernorm_ref(out, mean_d, rstd_d, inp, w, b, N, C);
    // the kernel gets fp32 statistics, as the forward saved them; the reference uses the same ones
    std::vector<float> mean(mean_d.begin(), mean_d.end()), rstd(rstd_d.begin(), rstd_d.end());
    floatX *d_inp = to_device(inp), *d_w = to_device(w), *d_dout = to_device(dout);
    floatX *d_dinp = to_device(dinp0), *d_dw = to_device(dw0), *d_db = to_device(db0);
    float *d_mean = to_device_raw(mean), *d_rstd = to_device_raw(rstd);
    layernorm_backward(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);

    std::vector<double> dinp(dinp0.begin(), dinp0.end()), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
    std::vector<double> xhat(C), dn(C);
    for (int r = 0; r < N; r++) {
        const size_t base = (size_t)r * C;
        double mean_dn = 0, mean_dnx = 0;
        for (int c = 0; c < C; c++) {
            xhat[c] = ((double)inp[base + c] - mean[r]) * rstd[r];
            dn[c] = (double)w[c] * dout[base + c];
            mean_dn += dn[c];
            mean_dnx += dn[c] * xhat[c];
            dw[c] += (double)dout[base + c] * xhat[c];
            db[c] += dout[base + c];
        }
        mean_dn /= C; mean_dnx /= C;
        for (int c = 0; c < C; c++) dinp[base + c] += (dn[c] - mean_dn - xhat[c] * mean_dnx) * rstd[r];
    }
    check_close(tag + " dinp (accumulated)", from_device(d_dinp, (size_t)N * C), dinp, tol_default());
    check_close(tag + " dw (accumulated)", from_device(d_dw, C), dw, tol_for(2e-5, 2e-3, 1.5e-2));
    check_close(tag + " db (accumulated)", from_device(d_db, C), db, tol_for(2e-5, 2e-3, 1.5e-2));
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "layernorm");
    const int N = 8 * 256;
    for (int C : {768, 1600}) {
        check_forward(&ctx, N, C, false);
        check_forward(&ctx, N, C, true);
        check_backward(&ctx, N, C);
    }

    // ---- timing: N = B*T = 16384 rows of C = 768
    if (timing_enabled()) {
        const int N = 16384, C = 768;
        const size_t n = (size_t)N * C;
        floatX *inp = random_device<floatX>(&ctx, n, -2, 2), *add = random_device<floatX>(&ctx, n, -1, 1);
        floatX *out = random_device<floatX>(&ctx, n, -1, 1), *res = random_device<floatX>(&ctx, n, -1, 1);
        floatX *dout = random_device<floatX>(&ctx, n, -1, 1), *dinp = random_device<floatX>(&ctx, n, -1, 1);
        floatX *w = random_device<floatX>(&ctx, C, 0.5f, 1.5f), *b = random_device<floatX>(&ctx, C, -1, 1);
        floatX *dw = random_device<floatX>(&ctx, C, -1, 1), *db = random_device<floatX>(&ctx, C, -1, 1);
        float *mean = dalloc<float>(N), *rstd = dalloc<float>(N);
        const double X = sizeof(floatX), stats = 8.0 * N, params = 2.0 * X * C;
        time_ms(&ctx, "layernorm_forward N=16384 C=768", 2 * X * n + stats + params, 0,
                [&] { layernorm_forward(&ctx, out, mean, rstd, inp, w, b, N, C); });
        time_ms(&ctx, "layernorm_residual_forward N=16384 C=768", 4 * X * n + stats + params, 0,
                [&] { layernorm_residual_forward(&ctx, res, out, mean, rstd, inp, add, w, b, N, C); });
        // dout, inp, dinp read; dinp written; w, mean, rstd read; dw, db read+written
        time_ms(&ctx, "layernorm_backward N=16384 C=768", 4 * X * n + stats + 3 * params, 0,
                [&] { layernorm_backward(&ctx, dinp, dw, db, dout, res, w, mean, rstd, N, C); });
    }

    context_destroy(&ctx);
    return check_finish();
}
