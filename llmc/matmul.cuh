// Matrix multiplies through cuBLASLt, with bias and GELU fused into the epilogue, and the
// bias-gradient reduction (a kernel of our own, deterministic and accumulating).
//
// Row-major vs column-major: our tensors are row-major, cuBLASLt is column-major. A row-major
// (R, K) buffer IS a column-major (K, R) matrix, so out = inp @ W^T, row-major (BT, OC), is
// computed as the column-major product out^T (OC, BT) = W^T... i.e. A = W (read transposed),
// B = inp. Each launcher below spells out its m, n, k.
#pragma once
#include <algorithm>
#include <map>
#include <tuple>
#include "common.cuh"

// ----------------------------------------------------------------------------------------------
// Kernels

// dbias partial sums: partials (gridDim.y, OC) fp32 <- sums over row chunks of dout (N, OC).
// Block = 32 x 8 threads: threadIdx.x picks a group of x128::size columns, threadIdx.y one of 8
// row lanes; blockIdx.y picks a strided set of rows. Fixed summation order -> deterministic.
__global__ void bias_backward_partial_kernel(float* partials, const floatX* dout, int N, int OC) {
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
    // the 8 row lanes of each column are summed by the threads with threadIdx.y == 0
    if (threadIdx.y == 0 && col0 < OC) {
        for (int k = 0; k < x128::size; k++) {
            float s = 0.0f;
            for (int y = 0; y < 8; y++) s += smem[y][threadIdx.x * x128::size + k];
            partials[(size_t)blockIdx.y * OC + col0 + k] = s;
        }
    }
}

// out (n) = GELU_tanh(inp (n)): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Used only to
// recompute the MLP's GELU output in backward (--recompute): the forward GELU is fused into the
// fc matmul's epilogue.
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= n) return;
    x128 x = load128cs(inp + i), o;
    for (int k = 0; k < x128::size; k++) {
        const float v = (float)x[k];
        o[k] = (floatX)(0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))));
    }
    store128(out + i, o);
}

// out (n) += sum over p of partials (P, n), in order p = 0..P-1. In place on out.
// Shared by every "sum these rows then accumulate into a gradient" step (bias, LayerNorm).
__global__ void reduce_partials_accumulate_kernel(floatX* out, const float* partials, int P, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int p = 0; p < P; p++) s += partials[(size_t)p * n + i];
    out[i] = (floatX)((float)out[i] + s);
}

// ----------------------------------------------------------------------------------------------
// cuBLASLt plumbing: one cached plan (descriptors + chosen algorithm) per distinct call shape.
struct MatmulKey {
    int m, n, k, trans_a, trans_b, epilogue, batch, align;
    long long stride_a, stride_b, stride_d;
    bool operator<(const MatmulKey& o) const {
        return std::tie(m, n, k, trans_a, trans_b, epilogue, batch, align, stride_a, stride_b, stride_d) <
               std::tie(o.m, o.n, o.k, o.trans_a, o.trans_b, o.epilogue, o.batch, o.align, o.stride_a, o.stride_b, o.stride_d);
    }
};
struct MatmulPlan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};
struct MatmulPlanCache { std::map<MatmulKey, MatmulPlan> plans; };

// The largest power of two (up to 256) that divides every pointer: cuBLASLt's heuristic assumes
// 256-byte alignment unless told otherwise, and an algorithm chosen for it can fault on less.
inline int pointer_alignment(std::initializer_list<const void*> ptrs) {
    int align = 256;
    for (const void* p : ptrs)
        if (p) while (align > 1 && ((uintptr_t)p % align) != 0) align /= 2;
    return align;
}

inline MatmulPlan& matmul_plan(Context* ctx, const MatmulKey& key) {
    auto it = ctx->plans->plans.find(key);
    if (it != ctx->plans->plans.end()) return it->second;
    MatmulPlan p;
    // fp32 accumulation for every precision; the FP32 build does not use TF32 (it is for checking)
    cublasCheck(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key.epilogue;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ld = key.m;  // the aux (pre-GELU) matrix has D's shape
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    // Column-major shapes: A is (m,k) after op, stored (k,m) when transposed; likewise B.
    const int a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
    const int b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
    cublasCheck(cublasLtMatrixLayoutCreate(&p.a, CUBLAS_FLOATX, a_rows, a_cols, a_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.b, CUBLAS_FLOATX, b_rows, b_cols, b_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.d, CUBLAS_FLOATX, key.m, key.n, key.m));
    if (key.batch > 1) {
        const std::pair<cublasLtMatrixLayout_t, long long> layouts[3] = {{p.a, key.stride_a}, {p.b, key.stride_b}, {p.d, key.stride_d}};
        for (auto& [layout, stride] : layouts) {
            int32_t count = key.batch;
            int64_t s = stride;
            cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
            cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof(s)));
        }
    }
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ctx->lt_workspace_size, sizeof(ctx->lt_workspace_size)));
    uint32_t align = key.align;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(ctx->lt, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) {
        fprintf(stderr, "cuBLASLt has no algorithm for m=%d n=%d k=%d transa=%d transb=%d epilogue=%d batch=%d align=%d\n",
                key.m, key.n, key.k, key.trans_a, key.trans_b, key.epilogue, key.batch, key.align);
        exit(EXIT_FAILURE);
    }
    p.algo = result.algo;
    return ctx->plans->plans.emplace(key, p).first->second;
}

// D (m,n) = alpha * op(A) op(B) [+ bias (m)] [GELU, saving the pre-GELU to aux] + beta * D,
// all column-major; or, with epilogue DGELU, D = (op(A) op(B)) * GELU'(aux).
struct MatmulCall {
    floatX* d; const floatX* a; const floatX* b;
    int m, n, k;
    bool trans_a, trans_b;
    float alpha = 1.0f, beta = 0.0f;
    const floatX* bias = nullptr;  // (m), broadcast over columns
    floatX* aux = nullptr;         // (m, n): GELU input, written (forward) or read (backward)
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    int batch = 1;
    long long stride_a = 0, stride_b = 0, stride_d = 0;
};
inline void matmul(Context* ctx, const MatmulCall& c) {
    MatmulKey key{c.m, c.n, c.k, c.trans_a, c.trans_b, (int)c.epilogue, c.batch,
                  pointer_alignment({c.d, c.a, c.b, c.bias, c.aux}), c.stride_a, c.stride_b, c.stride_d};
    MatmulPlan& p = matmul_plan(ctx, key);
    if (c.bias) cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
    if (c.aux) cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c.aux, sizeof(c.aux)));
    cublasCheck(cublasLtMatmul(ctx->lt, p.desc, &c.alpha, c.a, p.a, c.b, p.b, &c.beta, c.d, p.d, c.d, p.d,
                               &p.algo, ctx->lt_workspace, ctx->lt_workspace_size, ctx->stream));
}

// Row-major view: C (M,N) = alpha * opX(X) @ opY(Y) + beta * C, opX(X) (M,K), opY(Y) (K,N), each
// op a transpose when its flag is set; `batch` independent products at the given element strides.
// Read as column-major, C^T = opY(Y)^T opX(X)^T: so A = Y, B = X, and m, n swap.
inline void matmul_rowmajor(Context* ctx, floatX* C, const floatX* X, const floatX* Y, int M, int N, int K,
                            bool trans_x, bool trans_y, float alpha = 1.0f, float beta = 0.0f,
                            int batch = 1, long long stride_x = 0, long long stride_y = 0, long long stride_c = 0) {
    MatmulCall c{C, Y, X, N, M, K, trans_y, trans_x, alpha, beta};
    c.batch = batch; c.stride_a = stride_y; c.stride_b = stride_x; c.stride_d = stride_c;
    matmul(ctx, c);
}

// ----------------------------------------------------------------------------------------------
// Launchers

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)      [nn.Linear]
// With pre_gelu != nullptr: pre_gelu (N, OC) = that, and out = GELU_tanh(pre_gelu), in one pass.
inline void matmul_forward(Context* ctx, floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                           int N, int C, int OC, floatX* pre_gelu = nullptr) {
    MatmulCall c{out, weight, inp, OC, N, C, /*trans_a=*/true, /*trans_b=*/false};
    c.bias = bias;
    if (pre_gelu) { c.aux = pre_gelu; c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX; }
    else if (bias) c.epilogue = CUBLASLT_EPILOGUE_BIAS;
    matmul(ctx, c);
}

// out (n) = GELU_tanh(inp (n)), n a multiple of x128::size. Overwrites out.
inline void gelu_forward(Context* ctx, floatX* out, const floatX* inp, size_t n) {
    gelu_forward_kernel<<<ceil_div(n / x128::size, 256), 256, 0, ctx->stream>>>(out, inp, n);
    launchCheck();
}

// dbias (OC) += column sums of dout (N, OC). Deterministic: per-block partials in fp32, then an
// ordered reduction (reduce_partials_accumulate_kernel).
inline void bias_backward(Context* ctx, floatX* dbias, const floatX* dout, int N, int OC) {
    const int col_blocks = (int)ceil_div(OC, 32 * x128::size);
    int row_blocks = (int)std::max<size_t>(1, 2 * (size_t)ctx->props.multiProcessorCount / col_blocks);
    row_blocks = std::min<int>(row_blocks, (int)std::min<size_t>(ceil_div(N, 8), ctx->scratch_elems / OC));
    bias_backward_partial_kernel<<<dim3(col_blocks, row_blocks), dim3(32, 8), 0, ctx->stream>>>(ctx->scratch, dout, N, OC);
    launchCheck();
    reduce_partials_accumulate_kernel<<<ceil_div(OC, 256), 256, 0, ctx->stream>>>(dbias, ctx->scratch, row_blocks, OC);
    launchCheck();
}

// Backward of out = inp @ weight^T + bias, given dout (N, OC):
//   dinp (N, C) = dout @ weight        (overwritten; with pre_gelu: times GELU'(pre_gelu), i.e. the
//                                       GELU that produced inp is differentiated in the epilogue)
//   dweight (OC, C) += dout^T @ inp    (accumulates across micro-steps)
//   dbias (OC) += sum over rows of dout
inline void matmul_backward(Context* ctx, floatX* dinp, floatX* dweight, floatX* dbias,
                            const floatX* dout, const floatX* inp, const floatX* weight,
                            int N, int C, int OC, floatX* pre_gelu = nullptr) {
    MatmulCall dx{dinp, weight, dout, C, N, OC, /*trans_a=*/false, /*trans_b=*/false};
    if (pre_gelu) { dx.aux = pre_gelu; dx.epilogue = CUBLASLT_EPILOGUE_DGELU; }
    matmul(ctx, dx);
    MatmulCall dw{dweight, inp, dout, C, OC, N, /*trans_a=*/false, /*trans_b=*/true};
    dw.beta = 1.0f;
    matmul(ctx, dw);
    if (dbias) bias_backward(ctx, dbias, dout, N, OC);
}

// ----------------------------------------------------------------------------------------------
// The context (here because it is mostly cuBLASLt state).
inline void context_create(Context* ctx, int device) {
    ctx->device = device;
    cudaCheck(cudaSetDevice(device));
    cudaCheck(cudaGetDeviceProperties(&ctx->props, device));
    // a blocking stream: plain cudaMemcpy (legacy default stream) waits for its work, and vice versa
    cudaCheck(cudaStreamCreate(&ctx->stream));
    cublasCheck(cublasLtCreate(&ctx->lt));
    ctx->lt_workspace_size = 32 << 20;
    cudaCheck(cudaMalloc(&ctx->lt_workspace, ctx->lt_workspace_size));
    ctx->plans = new MatmulPlanCache;
    // scratch for fp32 partial sums: a few per SM and column tile is all any reduction here uses
    ctx->scratch_elems = (size_t)64 * ctx->props.multiProcessorCount * 1024;
    cudaCheck(cudaMalloc(&ctx->scratch, ctx->scratch_elems * sizeof(float)));
}
inline void context_destroy(Context* ctx) {
    for (auto& [key, p] : ctx->plans->plans) {
        cublasCheck(cublasLtMatmulDescDestroy(p.desc));
        cublasCheck(cublasLtMatrixLayoutDestroy(p.a));
        cublasCheck(cublasLtMatrixLayoutDestroy(p.b));
        cublasCheck(cublasLtMatrixLayoutDestroy(p.d));
    }
    delete ctx->plans;
    cudaCheck(cudaFree(ctx->scratch));
    cudaCheck(cudaFree(ctx->lt_workspace));
    cublasCheck(cublasLtDestroy(ctx->lt));
    cudaCheck(cudaStreamDestroy(ctx->stream));
    *ctx = Context{};
}
