// Checks llmc/layernorm.cuh against a float64 CPU reference, for C = 768 and C = 1600 (and the
// backward also at C = 1024 and 1280; at 999 rows both, and the forward at 1 row of 64), and at 1000 rows of the widths at the
// edges of layernorm_supports: 64, 192 and the widest (4096; 2048 in FP32):
//   - layernorm_forward: out, mean, rstd;
//   - layernorm_backward: dinp accumulated onto a non-zero initial dinp, dw/db accumulated onto
//     non-zero initial values, and a projection's bias gradient (dproj_bias: the column sums of
//     the dinp it leaves; summed in the kernel at C = 768, 1024 and (16-bit) 1280, by
//     bias_backward at 1600); without dproj_bias the same dinp bits and dw/db checked again;
//   - layernorm_backward is bitwise reproducible (two runs from the same inputs), also for a row
//     count that is not a multiple of the rows a block takes;
//   - timing of the forward and backward at N = 65536 rows (GPT-2 124M's B*T = 64*1024), C = 768
//     and C = 1600, with and without dproj_bias, next to bias_backward's separate pass; the
//     backward against the previous kernel (kept below for that only).
// Run: make dev/cuda/layernorm_check && ./dev/cuda/layernorm_check   (PRECISION=BF16|FP32 for others)
#include "check.cuh"
#include "../../llmc/layernorm.cuh"

// ----------------------------------------------------------------------------------------------
// The previous backward, for the timing comparison only: one warp per row, each warp's dw/db sums
// in shared memory (LN_WARPS * 2 * C floats a block, lane-strided: 8-way bank conflicts), a grid
// of 2 blocks per SM, and one thread per column summing all the partial rows.
__global__ void layernorm_backward_smem_sums_kernel_prev(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                                         const floatX* w, const float* mean, const float* rstd, int N, int C) {
    extern __shared__ float smem_f[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* dw_acc = smem_f + (size_t)warp * 2 * C;
    float* db_acc = dw_acc + C;
    for (int c = lane; c < 2 * C; c += 32) dw_acc[c] = 0.0f;
    __syncwarp();
    for (int row = blockIdx.x * LN_WARPS + warp; row < N; row += gridDim.x * LN_WARPS) {
        const size_t base = (size_t)row * C;
        const float m = mean[row], s = rstd[row];
        float mean_d = 0.0f, mean_dx = 0.0f;
        for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
            x128 d = load128(dout + base + c), x = load128(inp + base + c), wv = load128(w + c);
            for (int k = 0; k < x128::size; k++) {
                float dn = (float)wv[k] * (float)d[k];
                mean_d += dn;
                mean_dx += dn * ((float)x[k] - m) * s;
            }
        }
        mean_d = warp_sum(mean_d) / C;
        mean_dx = warp_sum(mean_dx) / C;
        for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
            x128 d = load128(dout + base + c), x = load128(inp + base + c), wv = load128(w + c);
            x128 di = load128(dinp + base + c);
            for (int k = 0; k < x128::size; k++) {
                const float xhat = ((float)x[k] - m) * s, dk = (float)d[k];
                const float dn = (float)wv[k] * dk;
                di[k] = (floatX)((float)di[k] + (dn - mean_d - xhat * mean_dx) * s);
                dw_acc[c + k] += dk * xhat;
                db_acc[c + k] += dk;
            }
            store128(dinp + base + c, di);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        float acc = 0.0f;
        for (int wi = 0; wi < LN_WARPS; wi++) acc += smem_f[(size_t)wi * 2 * C + c];
        partials[(size_t)blockIdx.x * 2 * C + c] = acc;
    }
}
__global__ void layernorm_params_accumulate_kernel_prev(floatX* dw, floatX* db, const float* partials, int P, int C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int p = 0; p < P; p++) {
        sw += partials[(size_t)p * 2 * C + i];
        sb += partials[(size_t)p * 2 * C + C + i];
    }
    dw[i] = (floatX)((float)dw[i] + sw);
    db[i] = (floatX)((float)db[i] + sb);
}
static void layernorm_backward_prev(Context* ctx, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                                    const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N, int C) {
    const size_t smem = (size_t)LN_WARPS * 2 * C * sizeof(float);
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(layernorm_backward_smem_sums_kernel_prev, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int blocks = (int)std::min<size_t>(ceil_div(N, LN_WARPS), 2 * (size_t)ctx->props.multiProcessorCount);
    blocks = (int)std::min<size_t>(blocks, ctx->scratch_elems / (2 * (size_t)C));
    layernorm_backward_smem_sums_kernel_prev<<<blocks, LN_WARPS * 32, smem, ctx->stream>>>(dinp, ctx->scratch, dout, inp, w, mean, rstd, N, C);
    launchCheck();
    layernorm_params_accumulate_kernel_prev<<<ceil_div(C, 256), 256, 0, ctx->stream>>>(dw, db, ctx->scratch, blocks, C);
    launchCheck();
}
// The llmc kernel at C = 768 with the other register budget (1 <-> 2 blocks per SM), to show the
// choice ln_bwd_min_blocks makes is the faster one.
constexpr int NCH_768 = 768 / (32 * x128::size);
constexpr int MINB_768_OTHER = 3 - ln_bwd_min_blocks(NCH_768);
static void layernorm_backward_768_other_budget(Context* ctx, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                                                const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N) {
    const int P = layernorm_backward_launch_kernel<NCH_768, false, MINB_768_OTHER, LN_BWD_WARPS>(ctx, dinp, ctx->scratch, dout, inp, w,
                                                                                               mean, rstd, N, 768);
    layernorm_params_accumulate_kernel<<<ceil_div(2 * 768, 32), dim3(32, LN_ACC_LANES), 0, ctx->stream>>>(dw, db, nullptr, ctx->scratch, P, 768, 2);
    launchCheck();
}

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

static void check_forward(Context* ctx, int N, int C) {
    const std::string tag = "layernorm_forward C=" + std::to_string(C);
    std::vector<float> inp = randn((size_t)N * C, 1.0f, 0.3f), w = randn(C, 0.2f, 1.0f), b = randn(C, 0.2f);
    round_to_floatX(inp);  // the reference normalizes what the kernel reads
    floatX *d_inp = to_device(inp), *d_w = to_device(w), *d_b = to_device(b), *d_out = dalloc<floatX>((size_t)N * C);
    float *d_mean = dalloc<float>(N), *d_rstd = dalloc<float>(N);
    poison(d_out, (size_t)N * C); poison(d_mean, N); poison(d_rstd, N);
    layernorm_forward(ctx, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    std::vector<double> out, mean, rstd;
    layernorm_ref(out, mean, rstd, inp, w, b, N, C);
    check_close(tag + " out", from_device(d_out, (size_t)N * C), out, tol_default());
    check_close(tag + " mean", from_device_raw(d_mean, N), mean, 1e-5);
    check_close(tag + " rstd", from_device_raw(d_rstd, N), rstd, 1e-5);

    // into rows ld = C + 8 apart (an input with the ones column, matmul.cuh): the same values, and
    // the 8 columns after each row's C untouched; likewise layernorm_apply from the saved statistics
    const int ld = C + 8;
    floatX* d_out_ld = dalloc<floatX>((size_t)N * ld);
    for (int apply = 0; apply < 2; apply++) {
        const std::string t = tag + (apply ? " layernorm_apply" : "") + " into rows of C+8";
        poison(d_out_ld, (size_t)N * ld);
        const std::vector<float> before = from_device(d_out_ld, (size_t)N * ld);
        if (apply) layernorm_apply(ctx, d_out_ld, d_inp, d_mean, d_rstd, d_w, d_b, N, C, ld);
        else layernorm_forward(ctx, d_out_ld, d_mean, d_rstd, d_inp, d_w, d_b, N, C, ld);
        const std::vector<float> got = from_device(d_out_ld, (size_t)N * ld);
        std::vector<float> rows((size_t)N * C);
        bool pad_kept = true;
        for (int r = 0; r < N; r++) {
            std::copy(&got[(size_t)r * ld], &got[(size_t)r * ld] + C, &rows[(size_t)r * C]);
            for (int c = C; c < ld; c++) pad_kept &= memcmp(&got[(size_t)r * ld + c], &before[(size_t)r * ld + c], sizeof(float)) == 0;
        }
        check_close(t + " out", rows, out, tol_default());
        check_true(t + ": the padding untouched", pad_kept, pad_kept ? "unchanged" : "written");
    }
}

static void check_backward(Context* ctx, int N, int C) {
    const std::string tag = "layernorm_backward C=" + std::to_string(C);
    std::vector<float> inp = randn((size_t)N * C, 1.0f, 0.3f), w = randn(C, 0.2f, 1.0f), dout = randn((size_t)N * C);
    std::vector<float> dinp0 = randn((size_t)N * C), dw0 = randn(C), db0 = randn(C), dpb0 = randn(C);
    round_to_floatX(inp); round_to_floatX(w);
    std::vector<double> out, mean_d, rstd_d;
    std::vector<float> b(C, 0.0f);
    layernorm_ref(out, mean_d, rstd_d, inp, w, b, N, C);
    // the kernel gets fp32 statistics, as the forward saved them; the reference uses the same ones
    std::vector<float> mean(mean_d.begin(), mean_d.end()), rstd(rstd_d.begin(), rstd_d.end());
    floatX *d_inp = to_device(inp), *d_w = to_device(w), *d_dout = to_device(dout);
    floatX *d_dinp = to_device(dinp0), *d_dw = to_device(dw0), *d_db = to_device(db0), *d_dpb = to_device(dpb0);
    float *d_mean = to_device_raw(mean), *d_rstd = to_device_raw(rstd);
    layernorm_backward(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, d_dpb);

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
    // the projection bias: column sums of dinp as the kernel left it (the reference sums the
    // reference dinp; the kernel sums its own rounded values, which differ by floatX's rounding)
    std::vector<double> dpb(dpb0.begin(), dpb0.end());
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) dpb[c] += dinp[(size_t)r * C + c];
    check_close(tag + " dinp (accumulated)", from_device(d_dinp, (size_t)N * C), dinp, tol_default());
    check_close(tag + " dw (accumulated)", from_device(d_dw, C), dw, tol_for(2e-5, 2e-3, 1.5e-2));
    check_close(tag + " db (accumulated)", from_device(d_db, C), db, tol_for(2e-5, 2e-3, 1.5e-2));
    check_close(tag + " projection bias = column sums of dinp (accumulated)", from_device(d_dpb, C), dpb, tol_for(2e-5, 2e-3, 1.5e-2));

    // bitwise reproducible: the same inputs again give the same bits
    const auto run_bytes = [&](bool proj_bias) {
        upload(d_dinp, dinp0); upload(d_dw, dw0); upload(d_db, db0); upload(d_dpb, dpb0);
        layernorm_backward(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, proj_bias ? d_dpb : nullptr);
        std::vector<unsigned char> b = bytes_of(d_dinp, (size_t)N * C * sizeof(floatX)), bw = bytes_of(d_dw, C * sizeof(floatX)),
                                   bb = bytes_of(d_db, C * sizeof(floatX)), bp = bytes_of(d_dpb, C * sizeof(floatX));
        b.insert(b.end(), bw.begin(), bw.end());
        b.insert(b.end(), bb.begin(), bb.end());
        b.insert(b.end(), bp.begin(), bp.end());
        return b;
    };
    const std::vector<unsigned char> first = run_bytes(true), second = run_bytes(true);
    check_true(tag + " bitwise reproducible", first == second, first == second ? "two runs identical" : "two runs differ");
    // without the projection bias (the kernel then runs another grid: the launcher's other
    // configuration): dinp the same bits, dw and db against the reference (not the same bits: their
    // partial sums group differently), and the bias untouched
    const std::vector<unsigned char> plain = run_bytes(false);
    check_close(tag + " without the projection bias: dw (accumulated)", from_device(d_dw, C), dw, tol_for(2e-5, 2e-3, 1.5e-2));
    check_close(tag + " without the projection bias: db (accumulated)", from_device(d_db, C), db, tol_for(2e-5, 2e-3, 1.5e-2));
    const size_t nd = (size_t)N * C * sizeof(floatX);
    std::vector<float> dpb0x = dpb0;
    round_to_floatX(dpb0x);
    const bool same = std::equal(first.begin(), first.begin() + nd, plain.begin()) && from_device(d_dpb, C) == dpb0x;
    check_true(tag + " without the projection bias: the same dinp bits, the bias untouched", same, same ? "as expected" : "differ");
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "layernorm");
    const int N = 8 * 256;
    for (int C : {768, 1600}) {
        check_forward(&ctx, N, C);
        check_backward(&ctx, N, C);
    }
    check_backward(&ctx, 999, 768);  // fewer rows than warps in the grid, and not a multiple of 8
    // the forward's last block only partly used (999 = 249 blocks of LN_WARPS = 4 rows, + 3; every
    // other forward case has N a multiple of 4, so the row guard was never taken), and one row
    // (sampling's first token: B = T = 1); forward and layernorm_apply both
    check_forward(&ctx, 999, 768);
    check_forward(&ctx, 1, 64);
    check_backward(&ctx, 1000, 1024);
    check_backward(&ctx, N, 1280);  // d36's width: the widest whose bias sums fit the registers in 16-bit
    // the edges of layernorm_supports: one head's width (a warp's lanes only partly used), 192 (not
    // a multiple of a warp's 32 x128 chunks), and the widest supported (4096; 2048 in FP32)
    for (int C : {64, 192, layernorm_max_channels()}) {
        check_forward(&ctx, 1000, C);
        check_backward(&ctx, 1000, C);
    }

    // ---- timing: N = B*T = 65536 rows (GPT-2 124M at B=64, T=1024) of C = 768, then C = 1600
    if (timing_enabled()) {
        for (int C : {768, 1600}) {
            const int N = 65536;
            const size_t n = (size_t)N * C;
            floatX *inp = random_device<floatX>(&ctx, n, -2, 2), *out = random_device<floatX>(&ctx, n, -1, 1);
            floatX *dout = random_device<floatX>(&ctx, n, -1, 1), *dinp = random_device<floatX>(&ctx, n, -1, 1);
            floatX *w = random_device<floatX>(&ctx, C, 0.5f, 1.5f), *b = random_device<floatX>(&ctx, C, -1, 1);
            floatX *dw = random_device<floatX>(&ctx, C, -1, 1), *db = random_device<floatX>(&ctx, C, -1, 1);
            float *mean = dalloc<float>(N), *rstd = dalloc<float>(N);
            const double X = sizeof(floatX), stats = 8.0 * N, params = 2.0 * X * C;
            const std::string shape = " N=65536 C=" + std::to_string(C);
            // (also gives the backward real statistics)
            time_ms(&ctx, ("layernorm_forward" + shape).c_str(), 2 * X * n + stats + params, 0,
                    [&] { layernorm_forward(&ctx, out, mean, rstd, inp, w, b, N, C); });
            // dout, inp, dinp read; dinp written; w, mean, rstd read; dw, db read+written
            const double bytes = 4 * X * n + stats + 3 * params;
            const float t_new = time_ms(&ctx, ("layernorm_backward" + shape).c_str(), bytes, 0,
                                        [&] { layernorm_backward(&ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
            // + the projection bias: the same DRAM traffic, and the separate column-sum pass over dinp
            // it replaces would read N*C more
            floatX* dpb = random_device<floatX>(&ctx, C, -1, 1);
            const float t_pb = time_ms(&ctx, ("layernorm_backward + projection bias" + shape).c_str(), bytes, 0,
                                       [&] { layernorm_backward(&ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C, dpb); });
            const float t_sep = time_ms(&ctx, ("bias_backward, the separate pass" + shape).c_str(), X * n + X * C, 0,
                                        [&] { bias_backward(&ctx, dpb, dinp, N, C); });
            printf("PROJ_BIAS layernorm_backward%s: %.4f ms, and bias_backward %.4f ms; with dproj_bias %.4f ms\n", shape.c_str(), t_new, t_sep, t_pb);
            const float t_old = time_ms(&ctx, ("layernorm_backward (previous kernel)" + shape).c_str(), bytes, 0,
                                        [&] { layernorm_backward_prev(&ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
            if (C == 768)
                time_ms(&ctx, ("layernorm_backward (other reg budget)" + shape).c_str(), bytes, 0,
                        [&] { layernorm_backward_768_other_budget(&ctx, dinp, dw, db, dout, inp, w, mean, rstd, N); });
            printf("SPEEDUP layernorm_backward%s: %.2fx (%.4f ms -> %.4f ms)\n", shape.c_str(), t_old / t_new, t_old, t_new);
        }
    }

    context_destroy(&ctx);
    return check_finish();
}
