// The bias-gradient and ones-column studies of dev/cuda/matmul_check, apart from its correctness
// checks: what the bias gradient costs each way the trainer could compute it.
//   time_bias_backward: bias_backward at GPT-2 124M's step (B*T = 65536) against the previous
//       kernels (kept here for that only), and against cuBLASLt's fused epilogues (BGRADB on the
//       dweight GEMM, DGELU_BGRAD on the dinp GEMM after a GELU), in the timed part of the checks;
//   study_ones_column (--ones-column): the linear layers with the bias gradient out of the
//       weight-gradient GEMM (an input with the ones column) against a dense input.
// Included by dev/cuda/matmul.cu (after check.cuh).
#pragma once
#include "check.cuh"
// ----------------------------------------------------------------------------------------------
// The previous bias backward, for the timing comparison only: block 32 x 8, one 16-byte load per
// thread per iteration, rows strided over a grid of ~2 blocks per SM; then one thread per column
// summing all the partial rows.
__global__ void bias_backward_partial_kernel_prev(float* partials, const floatX* dout, int N, int OC) {
    __shared__ float smem[8][32 * x128::size];
    const int col0 = (blockIdx.x * 32 + threadIdx.x) * x128::size;
    float acc[x128::size] = {};
    if (col0 < OC) {
        for (int row = blockIdx.y * 8 + threadIdx.y; row < N; row += gridDim.y * 8) {
            x128 d = load128cs(dout + (size_t)row * OC + col0);
            for (int k = 0; k < x128::size; k++) acc[k] += (float)d[k];
        }
    }
    for (int k = 0; k < x128::size; k++) smem[threadIdx.y][threadIdx.x * x128::size + k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && col0 < OC) {
        for (int k = 0; k < x128::size; k++) {
            float s = 0.0f;
            for (int y = 0; y < 8; y++) s += smem[y][threadIdx.x * x128::size + k];
            partials[(size_t)blockIdx.y * OC + col0 + k] = s;
        }
    }
}
__global__ void reduce_partials_accumulate_kernel_prev(floatX* out, const float* partials, int P, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int p = 0; p < P; p++) s += partials[(size_t)p * n + i];
    out[i] = (floatX)((float)out[i] + s);
}
static void bias_backward_prev(Context* ctx, floatX* dbias, const floatX* dout, int N, int OC) {
    const int col_blocks = (int)ceil_div(OC, 32 * x128::size);
    int row_blocks = (int)std::max<size_t>(1, 2 * (size_t)ctx->props.multiProcessorCount / col_blocks);
    row_blocks = std::min<int>(row_blocks, (int)std::min<size_t>(ceil_div(N, 8), ctx->scratch_elems / OC));
    bias_backward_partial_kernel_prev<<<dim3(col_blocks, row_blocks), dim3(32, 8), 0, ctx->stream>>>(ctx->scratch, dout, N, OC);
    launchCheck();
    reduce_partials_accumulate_kernel_prev<<<ceil_div(OC, 256), 256, 0, ctx->stream>>>(dbias, ctx->scratch, row_blocks, OC);
    launchCheck();
}

// Fused bias gradients, measured, not used. cuBLASLt can write the column sums of an operand or
// of the result as a "bias gradient" in the epilogue of a GEMM the backward runs anyway:
//   BGRADB: the dweight GEMM (column-major m=C, n=OC, k=N, A = inp, B = dout transposed) also
//           writes the sums of op(B) = the bias gradient of the same layer;
//   DGELU_BGRAD: the dinp GEMM of the layer after a GELU (m=4C, n=N, k=C, D = dinp * GELU'(aux))
//           also writes the sums of D over n = the bias gradient of the layer before the GELU.
// Both overwrite (an accumulating dbias would still need an add). Prints whether cuBLASLt has an
// algorithm, the time against the plain GEMM, whether two runs give the same bits, and how far
// the sums are from bias_backward's. D, A, B column-major with leading dimensions = their rows.
struct FusedBiasGemm {
    const char* label;
    cublasLtEpilogue_t epi;
    int m, n, k;
    bool trans_a, trans_b;
    const floatX *a, *b;
    floatX* d;
    float beta;
    const floatX* aux;  // DGELU_BGRAD: the pre-GELU (m, n)
};
static void time_fused_bias(Context* ctx, const FusedBiasGemm& g, cudaDataType_t bias_type, float plain_ms, const std::vector<float>& ref_db) {
    const char* tname = bias_type == CUDA_R_32F ? "fp32" : "floatX";
    const int nb = g.epi == CUBLASLT_EPILOGUE_BGRADB ? g.n : g.m;  // length of the bias gradient
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    void* bias = bias_type == CUDA_R_32F ? (void*)dalloc<float>(nb) : (void*)dalloc<floatX>(nb);
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epi, sizeof(g.epi)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (g.aux) {
        const int64_t aux_ld = g.m;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    const bool type_ok = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)) == CUBLAS_STATUS_SUCCESS;
    const int a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
    const int b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUBLAS_FLOATX, a_rows, a_cols, a_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUBLAS_FLOATX, b_rows, b_cols, b_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, CUBLAS_FLOATX, g.m, g.n, g.m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx->lt_workspace_size, sizeof(ctx->lt_workspace_size)));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, la, lb, ld, ld, pref, 1, &res, &found);
    char name[160];
    snprintf(name, sizeof(name), "%s (%s bias) m=%d n=%d k=%d", g.label, tname, g.m, g.n, g.k);
    auto destroy = [&] {
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        cublasCheck(cublasLtMatrixLayoutDestroy(la));
        cublasCheck(cublasLtMatrixLayoutDestroy(lb));
        cublasCheck(cublasLtMatrixLayoutDestroy(ld));
        cublasCheck(cublasLtMatmulDescDestroy(desc));
    };
    if (!type_ok || st != CUBLAS_STATUS_SUCCESS || found == 0) {
        printf("FUSED %s: no algorithm (type attribute %s, heuristic status %d, found %d)\n", name, type_ok ? "ok" : "refused", (int)st, found);
        destroy();
        return;
    }
    const float alpha = 1.0f;
    auto launch = [&] {
        return cublasLtMatmul(ctx->lt, desc, &alpha, g.a, la, g.b, lb, &g.beta, g.d, ld, g.d, ld, &res.algo,
                              ctx->lt_workspace, ctx->lt_workspace_size, ctx->stream);
    };
    const cublasStatus_t first = launch();  // an experiment: a refusal is reported, not fatal
    if (first != CUBLAS_STATUS_SUCCESS) {
        printf("FUSED %s: cublasLtMatmul refused it (%s)\n", name, cublasGetStatusString(first));
        destroy();
        return;
    }
    auto run = [&] { cublasCheck(launch()); };
    const float ms = time_ms(ctx, name, 0, 2.0 * g.m * g.n * g.k, run);
    printf("FUSED %s: %+.4f ms against the plain GEMM\n", name, ms - plain_ms);
    run();
    const std::vector<unsigned char> b1 = bytes_of(bias, nb * (bias_type == CUDA_R_32F ? 4 : sizeof(floatX)));
    run();
    const std::vector<unsigned char> b2 = bytes_of(bias, b1.size());
    std::vector<float> got(nb);
    if (bias_type == CUDA_R_32F) got = from_device_raw((const float*)bias, nb);
    else got = from_device((const floatX*)bias, nb);
    double se = 0, sr = 0;
    for (int i = 0; i < nb; i++) { se += (got[i] - ref_db[i]) * (got[i] - ref_db[i]); sr += (double)ref_db[i] * ref_db[i]; }
    printf("FUSED %s: two runs %s; rel diff to bias_backward's sum %.3e\n", name, b1 == b2 ? "bitwise identical" : "DIFFER",
           std::sqrt(se / std::max(sr, 1e-30)));
    destroy();
}

// The same in the training precision's bias type and, where that is not fp32, in fp32, against the
// reference column sums of src (N, n) that bias_backward computes (into scratch, zeroed first).
// For DGELU_BGRAD, src is the plain GEMM's output: call it after timing the plain one.
static void time_fused_bias_both(Context* ctx, const FusedBiasGemm& g, float plain_ms, floatX* scratch, const floatX* src, int N, int n) {
    cudaCheck(cudaMemsetAsync(scratch, 0, n * sizeof(floatX), ctx->stream));
    bias_backward(ctx, scratch, src, N, n);
    const std::vector<float> ref_db = from_device(scratch, n);
    time_fused_bias(ctx, g, CUBLAS_FLOATX, plain_ms, ref_db);
    if (CUBLAS_FLOATX != CUDA_R_32F) time_fused_bias(ctx, g, CUDA_R_32F, plain_ms, ref_db);
}

// ----------------------------------------------------------------------------------------------
// --ones-column: matmul_backward with an input that carries the ones column (the bias gradient
// out of the weight-gradient GEMM) against the same call on a dense input (the dW GEMM, then
// bias_backward over dout), and matmul_forward reading either input, at GPT-2 124M's four linear
// layers with N = 65536 (a d12 B=64 micro-step). Each timed in a burst (median) and sustained (at
// the power limit, time_sustained_ms), since a training step runs at that limit.
static void study_ones_column(Context* ctx) {
    const int N = 65536;
    const int shapes[4][3] = {{768, 2304, 0}, {768, 768, 0}, {768, 3072, 1}, {3072, 768, 0}};  // (C, OC, GELU): qkv, attproj, fc, fcproj
    floatX* dout = random_device<floatX>(ctx, (size_t)N * 3072, -1, 1);
    floatX* inp = random_device<floatX>(ctx, (size_t)N * ones_ld(3072), -1, 1);  // dense (N, C) or rows of ones_ld(C)
    floatX* dinp = dalloc<floatX>((size_t)N * 3072);
    floatX* out = dalloc<floatX>((size_t)N * 3072);
    floatX* pre = dalloc<floatX>((size_t)N * 3072);
    floatX* w = random_device<floatX>(ctx, (size_t)3072 * 768, -0.05f, 0.05f);
    floatX* dw = random_device<floatX>(ctx, (size_t)3072 * 768, -0.01f, 0.01f);
    floatX* b = random_device<floatX>(ctx, 3072, -0.1f, 0.1f);
    floatX* db = random_device<floatX>(ctx, 3072, -0.01f, 0.01f);
    float* wgrad = dalloc<float>((size_t)3072 * ones_ld(768));
    double sum[2][2] = {};  // [backward, forward][dense, ones column], sustained
    for (auto& sh : shapes) {
        const int C = sh[0], OC = sh[1], LD = ones_ld(C);
        floatX* p = sh[2] ? pre : nullptr;
        ones_column_init(ctx->stream, inp, N, C);  // the dense runs read the same memory as (N, C)
        for (int ones = 0; ones < 2; ones++) {
            const int ld = ones ? LD : 0;
            char name[128];
            auto bwd = [&] { matmul_backward(ctx, dinp, dw, db, dout, inp, w, N, C, OC, nullptr, ld, wgrad); };
            auto fwd = [&] { matmul_forward(ctx, out, inp, w, b, N, C, OC, p, nullptr, ld); };
            snprintf(name, sizeof(name), "matmul_backward C=%d OC=%d %s", C, OC, ones ? "ones column" : "dense");
            const float tb = time_ms(ctx, name, 0, 4.0 * N * C * OC, bwd), sb = time_sustained_ms(ctx, bwd, tb);
            snprintf(name, sizeof(name), "matmul_forward C=%d OC=%d%s %s", C, OC, p ? " GELU" : "", ones ? "ones column" : "dense");
            const float tf = time_ms(ctx, name, 0, 2.0 * N * C * OC, fwd), sf = time_sustained_ms(ctx, fwd, tf);
            printf("ONES C=%d OC=%d %-11s backward %.4f burst %.4f sustained | forward %.4f burst %.4f sustained\n",
                   C, OC, ones ? "ones column" : "dense", tb, sb, tf, sf);
            sum[0][ones] += sb; sum[1][ones] += sf;
        }
    }
    printf("ONES SUMMARY the 4 layers, sustained ms: backward dense %.4f, ones column %.4f (%+.4f); forward dense %.4f, "
           "ones column %.4f (%+.4f); x12 layers: %+.3f ms per d12 B=64 micro-step\n", sum[0][0], sum[0][1], sum[0][1] - sum[0][0],
           sum[1][0], sum[1][1], sum[1][1] - sum[1][0], 12 * (sum[0][1] - sum[0][0] + sum[1][1] - sum[1][0]));
}

// DGELU_BGRAD: fcproj's dinp GEMM (N, 4C) = dout (N, C) @ W (C, 4C), times GELU'(pre), whose
// column sums are fc's bias gradient (the 3072-wide bias_backward of time_bias_backward).
static void time_dgelu_bgrad(Context* ctx, const floatX* dout, floatX* db0, int N) {
    const int C = 768, C4 = 3072;
    floatX* w = random_device<floatX>(ctx, (size_t)C * C4, -0.03f, 0.03f);
    floatX* pre = random_device<floatX>(ctx, (size_t)N * C4, -2, 2);
    floatX* dinp = dalloc<floatX>((size_t)N * C4);
    MatmulCall dx{dinp, w, dout, C4, N, C, /*trans_a=*/false, /*trans_b=*/false};
    dx.aux = pre;
    dx.epilogue = CUBLASLT_EPILOGUE_DGELU;
    const float t_gemm = time_ms(ctx, "dinp GEMM + DGELU (plain) m=3072 n=65536 k=768", 0, 2.0 * N * C * C4, [&] { matmul(ctx, dx); });
    const FusedBiasGemm dgelu_bgrad{"dinp GEMM+DGELU_BGRAD", CUBLASLT_EPILOGUE_DGELU_BGRAD, C4, N, C, false, false, w, dout, dinp, 0.0f, pre};
    time_fused_bias_both(ctx, dgelu_bgrad, t_gemm, db0, dinp, N, C4);
}

// ---- bias backward at GPT-2 124M's step (B*T = 65536): new vs previous kernels, and BGRADB
static void time_bias_backward(Context* ctx) {
    const int N = 65536;
    const double X = sizeof(floatX);
    floatX* dout = random_device<floatX>(ctx, (size_t)N * 3072, -1, 1);
    floatX* inp = random_device<floatX>(ctx, (size_t)N * 3072, -1, 1);
    floatX* dw = random_device<floatX>(ctx, (size_t)3072 * 768, -0.01f, 0.01f);
    floatX* db = random_device<floatX>(ctx, 3072, -0.01f, 0.01f);
    floatX* db0 = dalloc<floatX>(3072);
    float sum_new = 0, sum_old = 0, sum_gemm = 0;
    const int shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};  // (C, OC): qkv, attproj, fc, fcproj
    for (auto& sh : shapes) {
        const int C = sh[0], OC = sh[1];
        const double bytes = X * ((double)N * OC + 2.0 * OC);
        char name[96];
        snprintf(name, sizeof(name), "bias_backward N=%d OC=%d", N, OC);
        const float t_new = time_ms(ctx, name, bytes, 0, [&] { bias_backward(ctx, db, dout, N, OC); });
        snprintf(name, sizeof(name), "bias_backward (previous kernel) N=%d OC=%d", N, OC);
        const float t_old = time_ms(ctx, name, bytes, 0, [&] { bias_backward_prev(ctx, db, dout, N, OC); });
        sum_new += t_new; sum_old += t_old;
        // BGRADB: the plain dweight GEMM, then the fused one (reference: bias_backward onto zeros)
        snprintf(name, sizeof(name), "dW GEMM (plain, beta=1) C=%d OC=%d", C, OC);
        MatmulCall dwc{dw, inp, dout, C, OC, N, /*trans_a=*/false, /*trans_b=*/true};
        dwc.beta = 1.0f;
        const float t_gemm = time_ms(ctx, name, 0, 2.0 * N * C * OC, [&] { matmul(ctx, dwc); });
        sum_gemm += t_gemm;
        const FusedBiasGemm bgradb{"dW GEMM+BGRADB", CUBLASLT_EPILOGUE_BGRADB, C, OC, N, false, true, inp, dout, dw, 1.0f, nullptr};
        time_fused_bias_both(ctx, bgradb, t_gemm, db0, dout, N, OC);
    }
    time_dgelu_bgrad(ctx, dout, db0, N);
    printf("SUMMARY one layer's 4 bias_backward calls at N=65536: %.4f ms (previous %.4f ms, %.2fx); x12 layers: %.3f ms (previous %.3f ms); the 4 dW GEMMs: %.4f ms\n",
           sum_new, sum_old, sum_old / sum_new, 12 * sum_new, 12 * sum_old, sum_gemm);
}
