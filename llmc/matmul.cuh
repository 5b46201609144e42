// Matrix multiplies through cuBLASLt, with bias and GELU fused into the epilogue, and the bias
// gradient: one more output row of the weight-gradient GEMM where the input carries a ones column
// (below), else a reduction kernel of our own (deterministic and accumulating).
//
// Row-major vs column-major: our tensors are row-major, cuBLASLt is column-major. A row-major
// (R, K) buffer IS a column-major (K, R) matrix, so out = inp @ W^T, row-major (BT, OC), is
// computed as the column-major product out^T (OC, BT) = W (OC, C) @ inp^T (C, BT): W's row-major
// (OC, C) buffer is column-major (C, OC), so A = that buffer with op T; inp's row-major (BT, C)
// buffer is column-major (C, BT), so B = it with op N. Each launcher below spells out its m, n, k.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>
#include "common.cuh"
#include "gemm_choices.h"

// ----------------------------------------------------------------------------------------------
// Kernels

// Column sums of dout (N, OC) row-major, the bias gradient, in two deterministic steps:
//   bias_backward_partial_kernel:     partials (gridDim.y, OC) fp32 <- sums over row slabs
//   reduce_partials_accumulate_kernel: dbias (OC) += sum of the partial rows, in order
// The first reads dout once (N * OC * sizeof(floatX) bytes, the whole cost) and writes a few
// hundred partial rows (~1 MiB); it must stream at HBM speed, and that takes bytes in flight.
//
// bias_backward_partial_kernel. Not in place; dout is only read.
// Block = 32 x BIAS_ROW_LANES threads. threadIdx.x picks 16 bytes of columns (x128::size of them;
// a warp covers 32 * x128::size adjacent columns of a row, 512 contiguous bytes: coalesced),
// threadIdx.y one of the row lanes. blockIdx.x picks the column tile, blockIdx.y a contiguous slab
// of rows_per_block rows; lane y sums rows y, y + LANES, y + 2 LANES, ... of the slab.
// Why this shape:
//   - the inner loop issues 4 independent 16-byte loads before it adds any of them, and the grid
//     is one full wave (every block resident at once, as many per SM as the occupancy calculator
//     allows: ~1500 threads at 38 registers): ~96 KiB in flight per SM, above what HBM's latency
//     x bandwidth asks (~20-30 KiB per SM), where one load per thread at 16 warps per SM (the
//     previous launch: 2 blocks of 256 per SM) left the memory system partly idle;
//   - a contiguous slab per block (rather than rows strided over the grid) keeps each block's
//     reads sequential in memory, and the slab is a multiple of 4 * LANES rows so the unrolled
//     loop covers all but the last slab's tail;
//   - each thread adds its rows in ascending order, the lanes are added in lane order through
//     shared memory, the slabs in slab order by the reduce kernel: every sum has a fixed order
//     (no atomics), so the gradient is bitwise reproducible.
constexpr int BIAS_ROW_LANES = 8;
constexpr int BIAS_UNROLL = 4;
__global__ void __launch_bounds__(32 * BIAS_ROW_LANES)
bias_backward_partial_kernel(float* partials, const floatX* dout, int N, int OC, int rows_per_block) {
    constexpr int V = x128::size;
    __shared__ float lane_sums[BIAS_ROW_LANES][32 * V];
    const int col0 = (blockIdx.x * 32 + threadIdx.x) * V;
    const int r_end = min(N, ((int)blockIdx.y + 1) * rows_per_block);
    float acc[V] = {};
    if (col0 < OC) {
        const floatX* col = dout + col0;
        int r = blockIdx.y * rows_per_block + threadIdx.y;
        for (; r + (BIAS_UNROLL - 1) * BIAS_ROW_LANES < r_end; r += BIAS_UNROLL * BIAS_ROW_LANES) {
            x128 d[BIAS_UNROLL];
            for (int u = 0; u < BIAS_UNROLL; u++) d[u] = load128cs(col + (size_t)(r + u * BIAS_ROW_LANES) * OC);
            for (int u = 0; u < BIAS_UNROLL; u++)
                for (int k = 0; k < V; k++) acc[k] += (float)d[u][k];
        }
        for (; r < r_end; r += BIAS_ROW_LANES) {
            const x128 d = load128cs(col + (size_t)r * OC);
            for (int k = 0; k < V; k++) acc[k] += (float)d[k];
        }
    }
    for (int k = 0; k < V; k++) lane_sums[threadIdx.y][threadIdx.x * V + k] = acc[k];
    __syncthreads();
    // 32 * V columns, LANES lane sums each: every thread of the block finishes some columns
    for (int c = threadIdx.y * 32 + threadIdx.x; c < 32 * V; c += 32 * BIAS_ROW_LANES) {
        const int col = blockIdx.x * 32 * V + c;
        if (col < OC) {
            float s = 0.0f;
            for (int y = 0; y < BIAS_ROW_LANES; y++) s += lane_sums[y][c];
            partials[(size_t)blockIdx.y * OC + col] = s;
        }
    }
}

// out (n) = GELU_tanh(inp (n)): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); out == inp is
// allowed (each thread reads its 16 bytes before writing them). Used only to
// recompute the MLP's GELU output in backward (--recompute): the forward GELU is fused into the
// fc matmul's epilogue, and what backward reads should not depend on which of the two wrote it.
// --use_fast_math compiles tanhf to tanh.approx.f32, yet in FP32 this kernel is within 4.4e-8 of
// the epilogue's output (1.3e-6 of float64); an exact form, x / (1 + exp(-2u)), came to 4.5e-8 of
// float64 but 2.2e-6 of the epilogue (matmul_check, one H200, 2026-12-04), so tanhf stays.
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

// The ones column. The bias gradient is dbias (OC) = sum over rows of dout (N, OC) = dout^T @ 1,
// and the weight gradient dW (OC, C) = dout^T @ inp (N, C): the same product with one more column
// of ones appended to inp. So a linear layer whose input is stored with that column (rows of
// ones_ld(C): C values, then 1, then zeros) gets its bias gradient from the weight-gradient GEMM
// as one more output row, m = C + ONES_ROWS instead of C: ~1 % more GEMM work instead of
// bias_backward's separate pass over dout (N * OC values; 0.07-0.09 ms next to the ~0.45 ms weight
// gradients of the qkv and fc layers at N = 65536). The GEMM writes (OC, C + ONES_ROWS) in fp32 to a
// scratch buffer, and wgrad_accumulate_kernel adds it into dW and dbias. The kernels that write
// such an input (LayerNorm's) write only the C values of each row; ones_column_init writes the rest
// once. The row stride is a multiple of 128 bytes: with rows of C + 8 elements (16-byte multiples)
// the forward GEMMs that read the input lost about what the backward gained (d12 B=64 BF16:
// +0.45 % tok/s against +1.05 % with 128-byte rows; dev/perf_log.md, 2026-12-01). An odd m
// (C + 1) is no option: cuBLASLt's kernels for it are 4-5x slower.
constexpr int ONES_ROWS = 8;
inline int ones_ld(int C) {  // the row stride: C + ONES_ROWS (what the GEMM reads of each row) rounded up to 128 bytes
    const int align = 128 / (int)sizeof(floatX);  // elements per 128 bytes
    return (C + ONES_ROWS + align - 1) / align * align;
}

// Columns [C, ld) of inp (N rows, row stride ld) <- 1, 0, 0, ...: the ones column and its padding.
__global__ void ones_column_init_kernel(floatX* inp, size_t N, int C, int ld) {
    const size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    for (int c = C; c < ld; c++) inp[row * ld + c] = (floatX)(c == C ? 1.0f : 0.0f);
}

// dweight (OC, C) += ext[:, 0:C], dbias (OC) += ext[:, C]; ext (OC, ld) fp32 is the weight-gradient
// GEMM's output with the bias gradient as its column C. One thread per 16 bytes of dweight; C a
// multiple of x128::size. In place on dweight and dbias.
__global__ void wgrad_accumulate_kernel(floatX* dweight, floatX* dbias, const float* ext, int OC, int C, int ld) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= (size_t)OC * C) return;
    const int o = i / C, c = i % C;
    const float* e = ext + (size_t)o * ld + c;
    x128 w = load128(dweight + i);
    for (int k = 0; k < x128::size; k++) w[k] = (floatX)((float)w[k] + e[k]);
    store128(dweight + i, w);
    if (c == 0) dbias[o] = (floatX)((float)dbias[o] + ext[(size_t)o * ld + C]);
}

// out (n) += sum over p of partials (P, n). In place on out.
// Block = 32 columns x REDUCE_LANES row lanes: lane y sums partial rows y, y + LANES, ... (each warp
// reads 32 adjacent floats of a row: coalesced), then lane 0 adds the lane sums in lane order.
// A fixed order (deterministic) with LANES times the threads of one-thread-per-column, which
// walked all P rows alone at a handful of loads in flight.
// Used by bias_backward.
constexpr int REDUCE_LANES = 16;
__global__ void reduce_partials_accumulate_kernel(floatX* out, const float* partials, int P, int n) {
    __shared__ float lane_sums[REDUCE_LANES][33];
    const int i = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (i < n)
        for (int p = threadIdx.y; p < P; p += REDUCE_LANES) acc += partials[(size_t)p * n + i];
    lane_sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < n) {
        float s = 0.0f;
        for (int y = 0; y < REDUCE_LANES; y++) s += lane_sums[y][threadIdx.x];
        out[i] = (floatX)((float)out[i] + s);
    }
}

// ----------------------------------------------------------------------------------------------
// cuBLASLt plumbing: one cached plan (descriptors + chosen algorithm) per distinct call shape.
struct MatmulPlan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    int choice = 0;        // index of `algo` in matmul_candidates for this shape
    bool untimed = false;  // created while tuning: its first call times the candidates (matmul_tune)
};
// Algorithm choice. cuBLASLt ranks candidate algorithms by a model of the GPU, and its first is
// not always the fastest: on an H200, for GPT-2 124M's shapes, the best of its first 16 is up to
// 20 % faster for a few GEMMs (the lm head, dinp of qkv, dW of qkv), 7 % of all GEMM time in a
// step (dev/cuda/matmul_check --algorithms). With --gemm-tune the trainer times them once, in a
// throwaway forward+backward at startup, and keeps each shape's choice (an index into
// matmul_candidates). Timed in short bursts (1) that gains little in a step (d12 B=64: +0.1 %, -0.8 %): the
// GPU runs at its 700 W power limit during a step, where a GEMM that is faster alone at full clock
// mostly lowers the clock instead. Timed at that limit (2, matmul_tune) it gains 0.1-2.5 %
// (README). Off by default: it costs startup time and timed choices can differ between runs.
struct MatmulPlanCache {
    std::map<MatmulKey, MatmulPlan> plans;
    int tuning = 0;                   // != 0: plans created now are timed on their first call (the mode, matmul_tune)
    bool report = false;              // matmul_tune prints each shape's timings (rank 0 of a sustained tuning)
    std::map<MatmulKey, int> pinned;  // choices to take when a plan is created (--gemm-algos: every rank; <out>/gemm_algos.txt: rank 0)
};
constexpr int MATMUL_CANDIDATES = 16;         // how far down cuBLASLt's ranking tuning looks
constexpr int MATMUL_MAX_CHOICES = MATMUL_CANDIDATES + 1;  // that ranking + cuBLASLt's single pick (matmul_candidates)
constexpr int MATMUL_UNTUNED = -1;            // a choice meaning "what cuBLASLt picks when asked for one algorithm"
constexpr float MATMUL_TUNE_TOLERANCE = 0.03f;  // near-ties keep the untuned algorithm (see matmul_tune)

// The largest power of two (up to 256) that divides every pointer: cuBLASLt's heuristic assumes
// 256-byte alignment unless told otherwise, and an algorithm chosen for it can fault on less.
inline int pointer_alignment(std::initializer_list<const void*> ptrs) {
    int align = 256;
    for (const void* p : ptrs)
        if (p) while (align > 1 && ((uintptr_t)p % align) != 0) align /= 2;
    return align;
}

// Whether an epilogue reads or writes the descriptor's bias pointer (the BIAS bit; the bias
// gradient variants) and its aux pointer (bit 128: the GELU/ReLU input or mask).
inline bool epilogue_uses_bias(int e) {
    return (e & CUBLASLT_EPILOGUE_BIAS) || e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_DRELU_BGRAD ||
           e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
inline bool epilogue_uses_aux(int e) { return (e & 128) != 0; }

// The bias or aux pointer a plan's descriptor holds (attr: CUBLASLT_MATMUL_DESC_BIAS_POINTER or
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), and setting it.
inline const void* matmul_desc_pointer(const MatmulPlan& p, cublasLtMatmulDescAttributes_t attr) {
    const void* v = nullptr;
    size_t written = 0;
    cublasCheck(cublasLtMatmulDescGetAttribute(p.desc, attr, &v, sizeof(v), &written));
    return v;
}
inline void matmul_set_desc_pointer(const MatmulPlan& p, cublasLtMatmulDescAttributes_t attr, const void* v) {
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, attr, &v, sizeof(v)));
}

// cuBLASLt's best `want` algorithms (its own ranking, first = what it expects to be fastest) for
// the plan's descriptors, with our workspace and the key's alignment; returns how many it gave.
// The heuristic also reads the bias and aux pointers on the descriptor (never dereferenced) to
// infer their alignment, and the descriptor holds whatever it was last given: nothing when the
// plan is created, the last call's pointers later. An element-aligned bias is ranked differently
// from none (seen on an H200: 8 candidates against 2), so a choice made at one moment could name
// another algorithm at the next. The query therefore sees stand-ins of exactly the key's alignment
// (addresses inside our workspace, never touched) and the descriptor gets its own pointers back:
// one key, one ranking, whenever it is asked.
inline int matmul_heuristics(Context* ctx, const MatmulPlan& p, const MatmulKey& key, int want,
                             cublasLtMatmulHeuristicResult_t* results) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ctx->lt_workspace_size, sizeof(ctx->lt_workspace_size)));
    uint32_t align = key.align;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
    const cublasLtMatmulDescAttributes_t ptr_attrs[2] = {CUBLASLT_MATMUL_DESC_BIAS_POINTER, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER};
    const bool uses[2] = {epilogue_uses_bias(key.epilogue), epilogue_uses_aux(key.epilogue)};
    const void* saved[2] = {nullptr, nullptr};
    const void* stand_in = (const char*)ctx->lt_workspace + key.align;  // the workspace is 256-aligned
    for (int i = 0; i < 2; i++)
        if (uses[i]) { saved[i] = matmul_desc_pointer(p, ptr_attrs[i]); matmul_set_desc_pointer(p, ptr_attrs[i], stand_in); }
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(ctx->lt, p.desc, p.a, p.b, p.d, p.d, pref, want, results, &found));
    for (int i = 0; i < 2; i++)
        if (uses[i]) matmul_set_desc_pointer(p, ptr_attrs[i], saved[i]);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    return found;
}

inline bool same_algo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) { return memcmp(&a, &b, sizeof(a)) == 0; }

// The algorithms a choice indexes: cuBLASLt's ranking of MATMUL_CANDIDATES, and then, when it is
// not among them, the one algorithm it gives when asked for one. Both queries are needed because
// cuBLASLt's answer depends on how many algorithms it is asked for (seen on an H200 in all three
// precisions: a query for k < 16 is not always the first k of the query for 16; for d12's dinp
// fcproj +DGELU in FP16/BF16 the single pick is not the ranking's first). The single pick is what
// the trainer runs untuned, measured as such for every figure in the README; the ranking is what
// tuning times. One list for both means a choice index names the same algorithm when it is timed,
// written to a file, read back, or adopted by another rank.
struct MatmulCandidates {
    cublasLtMatmulHeuristicResult_t res[MATMUL_MAX_CHOICES] = {};  // zeroed: same_algo compares every byte
    int found = 0;    // how many of res are filled
    int untuned = 0;  // the index of the single pick in res
};
inline MatmulCandidates matmul_candidates(Context* ctx, const MatmulPlan& p, const MatmulKey& key) {
    MatmulCandidates c;
    c.found = matmul_heuristics(ctx, p, key, MATMUL_CANDIDATES, c.res);
    cublasLtMatmulHeuristicResult_t one = {};
    if (matmul_heuristics(ctx, p, key, 1, &one) == 1) {
        c.untuned = c.found;
        for (int i = 0; i < c.found; i++)
            if (same_algo(c.res[i].algo, one.algo)) { c.untuned = i; break; }
        if (c.untuned == c.found) c.res[c.found++] = one;
    }
    return c;
}

// Sets the plan's algorithm to the `choice`-th of matmul_candidates (MATMUL_UNTUNED: its single
// pick; the last one when it has fewer, which only a different cuBLASLt or GPU than the choice was
// made on can cause).
inline void matmul_choose(Context* ctx, MatmulPlan& p, const MatmulKey& key, int choice) {
    const MatmulCandidates c = matmul_candidates(ctx, p, key);
    if (c.found == 0) {
        fprintf(stderr, "cuBLASLt has no algorithm for m=%d n=%d k=%d transa=%d transb=%d epilogue=%d batch=%d align=%d\n",
                key.m, key.n, key.k, key.trans_a, key.trans_b, key.epilogue, key.batch, key.align);
        exit(EXIT_FAILURE);
    }
    p.choice = choice == MATMUL_UNTUNED ? c.untuned : std::min(choice, c.found - 1);
    p.algo = c.res[p.choice].algo;
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
    if (epilogue_uses_aux(epi)) {
        int64_t ld = key.m;  // the aux (pre-GELU) matrix has D's shape
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    // Column-major shapes: A is (m,k) after op, stored (k,m) when transposed; likewise B.
    const int a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
    const int b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
    cublasCheck(cublasLtMatrixLayoutCreate(&p.a, CUBLAS_FLOATX, a_rows, a_cols, key.lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.b, CUBLAS_FLOATX, b_rows, b_cols, key.ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.d, (cudaDataType_t)key.d_type, key.m, key.n, key.ldd));
    if (key.batch > 1) {
        const std::pair<cublasLtMatrixLayout_t, long long> layouts[3] = {{p.a, key.stride_a}, {p.b, key.stride_b}, {p.d, key.stride_d}};
        for (auto& [layout, stride] : layouts) {
            int32_t count = key.batch;
            int64_t s = stride;
            cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
            cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof(s)));
        }
    }
    const auto pin = ctx->plans->pinned.find(key);
    const bool pinned = pin != ctx->plans->pinned.end();
    matmul_choose(ctx, p, key, pinned ? pin->second : MATMUL_UNTUNED);
    p.untimed = ctx->plans->tuning && !pinned;
    return ctx->plans->plans.emplace(key, p).first->second;
}

// D (m,n) = alpha * op(A) op(B) + beta * C [+ bias (m)] [GELU, saving the pre-GELU to aux],
// all column-major, C = D (accumulating in place) unless `c` is given; or, with epilogue DGELU,
// D = (op(A) op(B)) * GELU'(aux). A and B in the training precision; D (and C) in it too, or in
// fp32 (d_type). Leading dimensions 0 mean dense storage (each matrix's stored row count).
struct MatmulCall {
    void* d; const floatX* a; const floatX* b;
    int m, n, k;
    bool trans_a, trans_b;
    float alpha = 1.0f, beta = 0.0f;
    const floatX* bias = nullptr;  // (m), broadcast over columns
    floatX* aux = nullptr;         // (m, n): GELU input, written (forward) or read (backward)
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    int batch = 1;
    long long stride_a = 0, stride_b = 0, stride_d = 0;
    const void* c = nullptr;       // (m, n), D's layout: the beta * C term read from here, not from D
    int lda = 0, ldb = 0, ldd = 0;
    cudaDataType_t d_type = CUBLAS_FLOATX;
    const void* c_or_d() const { return c ? c : d; }
};
inline MatmulKey matmul_key(const MatmulCall& c) {
    const int a_rows = c.trans_a ? c.k : c.m, b_rows = c.trans_b ? c.n : c.k;
    return MatmulKey{c.m, c.n, c.k, c.trans_a, c.trans_b, (int)c.epilogue, c.batch,
                     pointer_alignment({c.d, c.a, c.b, c.bias, c.aux, c.c}), c.stride_a, c.stride_b, c.stride_d,
                     c.lda ? c.lda : a_rows, c.ldb ? c.ldb : b_rows, c.ldd ? c.ldd : c.m, (int)c.d_type};
}
// The plan for the call, with this call's bias and aux pointers set on its descriptor.
inline MatmulPlan& matmul_prepare(Context* ctx, const MatmulCall& c) {
    MatmulPlan& p = matmul_plan(ctx, matmul_key(c));
    if (c.bias) matmul_set_desc_pointer(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
    if (c.aux) matmul_set_desc_pointer(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
    return p;
}
// One launch of the call with the given algorithm on the prepared plan; cuBLASLt's status (an
// algorithm being tried may be refused).
inline cublasStatus_t matmul_launch(Context* ctx, const MatmulPlan& p, const MatmulCall& c, const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(ctx->lt, p.desc, &c.alpha, c.a, p.a, c.b, p.b, &c.beta, c.c_or_d(), p.d, c.d, p.d,
                          &algo, ctx->lt_workspace, ctx->lt_workspace_size, ctx->stream);
}
// Times every algorithm of matmul_candidates on this call's own buffers and keeps the untuned one
// (cuBLASLt's single pick) unless another is more than MATMUL_TUNE_TOLERANCE faster, then the
// first-ranked one within that tolerance of the fastest: a near-tie goes to the untuned algorithm
// and cuBLASLt's order rather than to timing noise, so runs on the same machine choose alike and
// tuning changes an algorithm only where the timing says it gains. With beta != 0 (accumulation)
// the output is garbage afterwards, which is why tuning happens only in a throwaway
// pass (gpt2_tune_gemms). Two ways to time (ctx->plans->tuning):
//   1 (burst): median of 5 runs after 2 warm-up runs, each alone on the stream: the time at
//     whatever clock the work before left the GPU at, up to its highest (too few runs to meet
//     the power limit themselves).
//   2 (sustained): the candidate runs back to back for MATMUL_SUSTAIN_MS first, then the mean of
//     the next ~MATMUL_SUSTAIN_MS / 2 of runs. A training step runs at the GPU's power limit,
//     where the clock drops until the power fits; a GEMM that is faster at the highest clock but
//     spends more energy per call can be slower there. This times each candidate at the clock it
//     gets itself under that limit, which ranks them by energy per call as much as by speed.
//     ~0.3 s per candidate: ~35 s for GPT-2's 15 shapes, for ~1 % more tok/s (README).
constexpr float MATMUL_SUSTAIN_MS = 200.0f;
// Mean ms per run() (which launches on ctx->stream) after MATMUL_SUSTAIN_MS of runs back to back,
// over the next ~MATMUL_SUSTAIN_MS / 2; burst_ms (one run's time, roughly) sizes the two loops.
template <class F>
inline float time_sustained_ms(Context* ctx, F&& run, float burst_ms) {
    const int warm = std::min(20000, (int)std::ceil(MATMUL_SUSTAIN_MS / std::max(burst_ms, 1e-3f)));
    const int timed = std::max(1, warm / 2);
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    for (int r = 0; r < warm; r++) run();
    cudaCheck(cudaEventRecord(t0, ctx->stream));
    for (int r = 0; r < timed; r++) run();
    cudaCheck(cudaEventRecord(t1, ctx->stream));
    cudaCheck(cudaEventSynchronize(t1));
    float total;
    cudaCheck(cudaEventElapsedTime(&total, t0, t1));
    cudaCheck(cudaEventDestroy(t0));
    cudaCheck(cudaEventDestroy(t1));
    return total / timed;
}
inline void matmul_tune(Context* ctx, MatmulPlan& p, const MatmulCall& c) {
    p.untimed = false;
    const int mode = ctx->plans->tuning;
    const MatmulKey key = matmul_key(c);
    const MatmulCandidates cand = matmul_candidates(ctx, p, key);
    const int found = cand.found;
    const cublasLtMatmulHeuristicResult_t* res = cand.res;
    if (found == 0) return;
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    std::vector<float> burst(found, INFINITY), sustained(found, INFINITY);
    for (int i = 0; i < found; i++) {
        auto run = [&] { return matmul_launch(ctx, p, c, res[i].algo); };
        if (run() != CUBLAS_STATUS_SUCCESS || run() != CUBLAS_STATUS_SUCCESS) continue;  // not usable here
        float ms[5];
        for (float& m : ms) {
            cudaCheck(cudaEventRecord(t0, ctx->stream));
            cublasCheck(run());
            cudaCheck(cudaEventRecord(t1, ctx->stream));
            cudaCheck(cudaEventSynchronize(t1));
            cudaCheck(cudaEventElapsedTime(&m, t0, t1));
        }
        std::sort(ms, ms + 5);
        burst[i] = ms[2];
        if (mode == 2) sustained[i] = time_sustained_ms(ctx, [&] { cublasCheck(run()); }, burst[i]);
    }
    cudaCheck(cudaEventDestroy(t0));
    cudaCheck(cudaEventDestroy(t1));
    const std::vector<float>& t = mode == 2 ? sustained : burst;
    const int chosen = gemm_tune_pick(t, cand.untuned, MATMUL_TUNE_TOLERANCE);
    if (chosen < 0) return;  // none could run here: keep the untuned algorithm
    p.choice = chosen;
    p.algo = res[chosen].algo;
    if (ctx->plans->report) {
        const int u = cand.untuned, b = p.choice;
        printf("gemm-tune m=%d n=%d k=%d ta=%d tb=%d epilogue=%d: untuned (#%d of %d) %.4f ms burst, %.4f sustained; "
               "chosen #%d %.4f burst, %.4f sustained (%+.1f %% sustained)\n", key.m, key.n, key.k, key.trans_a, key.trans_b,
               key.epilogue, u, found, burst[u], sustained[u], b, burst[b], sustained[b], 100.0 * (sustained[b] - sustained[u]) / sustained[u]);
    }
}

// Runs the call with `algo` (default: the plan's; a plan created while tuning is timed first).
inline void matmul(Context* ctx, const MatmulCall& c, const cublasLtMatmulAlgo_t* algo = nullptr) {
    MatmulPlan& p = matmul_prepare(ctx, c);
    if (p.untimed && !algo) matmul_tune(ctx, p, c);
    cublasCheck(matmul_launch(ctx, p, c, algo ? *algo : p.algo));
}

// ----------------------------------------------------------------------------------------------
// The choices, to hand them to the other ranks or keep them in a file. Plans are listed in key
// order, which is the same on every rank: the same model makes the same calls.
inline std::vector<int> matmul_choices(const Context* ctx) {
    std::vector<int> v;
    for (const auto& [key, p] : ctx->plans->plans) v.push_back(p.choice);
    return v;
}
inline void matmul_set_choices(Context* ctx, const std::vector<int>& choices) {
    size_t i = 0;
    for (auto& [key, p] : ctx->plans->plans) {
        if (i == choices.size()) break;
        const int choice = choices[i++];
        if (choice != p.choice) matmul_choose(ctx, p, key, choice);
    }
}
// Text form (llmc/gemm_choices.h): a header naming what the choices are valid for (cuBLASLt's
// version, the GPU), then one line per shape: the key's fields and the choice.
inline std::string matmul_choices_header(const Context* ctx) {
    std::string gpu = ctx->props.name;
    for (char& ch : gpu) if (ch == ' ') ch = '_';
    return "gemm-algorithms v2 cublaslt=" + std::to_string(cublasLtGetVersion()) + " gpu=" + gpu;
}
inline std::string matmul_choices_text(const Context* ctx) {
    std::map<MatmulKey, int> choices;
    for (const auto& [k, p] : ctx->plans->plans) choices[k] = p.choice;
    return gemm_choices_text(matmul_choices_header(ctx), choices);
}
// The choices in `text` (matmul_choices_text's format) into *pinned; false + the reason when it
// is not that format or was written for another cuBLASLt or GPU (whose rankings differ).
inline bool matmul_choices_parse(const Context* ctx, const std::string& text, std::map<MatmulKey, int>* pinned, std::string* why) {
    return gemm_choices_parse(matmul_choices_header(ctx), text, MATMUL_MAX_CHOICES, pinned, why);
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
// inp's rows are ld_inp apart (0: C; ones_ld(C) for an input with the ones column).
// With pre_gelu != nullptr: pre_gelu (N, OC) = that, and out = GELU_tanh(pre_gelu), in one pass.
// With residual != nullptr (refused with pre_gelu): out = residual (N, OC) + that, the residual
// stream's update, added in fp32 in the epilogue and rounded once (the model passes a new tensor
// as out: backward needs the stream before and after the block's branch). A projection that writes
// the residual stream this way reads one more tensor, and the LayerNorm after it reads one and
// writes one fewer than a fused add + LayerNorm would.
inline void matmul_forward(Context* ctx, floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                           int N, int C, int OC, floatX* pre_gelu = nullptr, const floatX* residual = nullptr, int ld_inp = 0) {
    // cuBLASLt would apply the GELU to the sum, without a word: a caller's bug
    if (pre_gelu && residual) { fprintf(stderr, "matmul_forward: pre_gelu and residual cannot be used together\n"); exit(EXIT_FAILURE); }
    MatmulCall c{out, weight, inp, OC, N, C, /*trans_a=*/true, /*trans_b=*/false};
    c.ldb = ld_inp;
    c.bias = bias;
    if (residual) { c.c = residual; c.beta = 1.0f; }
    if (pre_gelu) { c.aux = pre_gelu; c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX; }
    else if (bias) c.epilogue = CUBLASLT_EPILOGUE_BIAS;
    matmul(ctx, c);
}

// out (n) = GELU_tanh(inp (n)), n a multiple of x128::size. Overwrites out.
inline void gelu_forward(Context* ctx, floatX* out, const floatX* inp, size_t n) {
    gelu_forward_kernel<<<ceil_div(n / x128::size, 256), 256, 0, ctx->stream>>>(out, inp, n);
    launchCheck();
}

// dbias (OC) += column sums of dout (N, OC). Deterministic: per-slab partials in fp32, then an
// ordered reduction (reduce_partials_accumulate_kernel). OC a multiple of x128::size.
inline void bias_backward(Context* ctx, floatX* dbias, const floatX* dout, int N, int OC) {
    const int col_blocks = (int)ceil_div(OC, 32 * x128::size);
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bias_backward_partial_kernel, 32 * BIAS_ROW_LANES, 0));
    // one full wave of blocks; each takes a slab of rows, a multiple of the unrolled step
    const size_t wave = (size_t)std::max(per_sm, 1) * ctx->props.multiProcessorCount;
    const size_t row_blocks_target = std::max<size_t>(1, wave / col_blocks);
    const size_t step = BIAS_UNROLL * BIAS_ROW_LANES;
    size_t rows_per_block = ceil_div(ceil_div(N, row_blocks_target), step) * step;
    // never more partial rows than the scratch holds
    rows_per_block = std::max(rows_per_block, ceil_div(ceil_div(N, ctx->scratch_elems / OC), step) * step);
    const int row_blocks = (int)ceil_div(N, rows_per_block);
    bias_backward_partial_kernel<<<dim3(col_blocks, row_blocks), dim3(32, BIAS_ROW_LANES), 0, ctx->stream>>>(
        ctx->scratch, dout, N, OC, (int)rows_per_block);
    launchCheck();
    reduce_partials_accumulate_kernel<<<ceil_div(OC, 32), dim3(32, REDUCE_LANES), 0, ctx->stream>>>(dbias, ctx->scratch, row_blocks, OC);
    launchCheck();
}

// Backward of out = inp @ weight^T + bias, given dout (N, OC):
//   dinp (N, C) = dout @ weight        (overwritten; with pre_gelu: times GELU'(pre_gelu), i.e. the
//                                       GELU that produced inp is differentiated in the epilogue)
//   dweight (OC, C) += dout^T @ inp    (accumulates across micro-steps)
//   dbias (OC) += sum over rows of dout
// inp's rows are ld_inp apart (0: C). With ld_inp = ones_ld(C), inp carries the ones column and
// the bias gradient comes out of the weight-gradient GEMM, through wgrad_scratch (OC, C + ONES_ROWS)
// fp32 (overwritten); otherwise bias_backward sums dout.
inline void matmul_backward(Context* ctx, floatX* dinp, floatX* dweight, floatX* dbias,
                            const floatX* dout, const floatX* inp, const floatX* weight,
                            int N, int C, int OC, floatX* pre_gelu = nullptr, int ld_inp = 0, float* wgrad_scratch = nullptr) {
    MatmulCall dx{dinp, weight, dout, C, N, OC, /*trans_a=*/false, /*trans_b=*/false};
    if (pre_gelu) { dx.aux = pre_gelu; dx.epilogue = CUBLASLT_EPILOGUE_DGELU; }
    matmul(ctx, dx);
    if (dbias && ld_inp == ones_ld(C)) {
        if (!wgrad_scratch) { fprintf(stderr, "matmul_backward: an input with the ones column needs wgrad_scratch\n"); exit(EXIT_FAILURE); }
        // ext (OC, C + ONES_ROWS) fp32 = dout^T @ [inp | 1 | 0...]: column-major (C + ONES_ROWS, OC)
        MatmulCall dw{wgrad_scratch, inp, dout, C + ONES_ROWS, OC, N, /*trans_a=*/false, /*trans_b=*/true};
        dw.lda = ld_inp;
        dw.d_type = CUDA_R_32F;
        matmul(ctx, dw);
        wgrad_accumulate_kernel<<<ceil_div((size_t)OC * C / x128::size, 256), 256, 0, ctx->stream>>>(dweight, dbias, wgrad_scratch, OC, C, C + ONES_ROWS);
        launchCheck();
        return;
    }
    MatmulCall dw{dweight, inp, dout, C, OC, N, /*trans_a=*/false, /*trans_b=*/true};
    dw.lda = ld_inp;
    dw.beta = 1.0f;
    matmul(ctx, dw);
    if (dbias) bias_backward(ctx, dbias, dout, N, OC);
}

// Columns [C, ones_ld(C)) of inp (N rows of ones_ld(C)) <- the ones column and its zero padding.
inline void ones_column_init(cudaStream_t stream, floatX* inp, size_t N, int C) {
    ones_column_init_kernel<<<ceil_div(N, 256), 256, 0, stream>>>(inp, N, C, ones_ld(C));
    launchCheck();
}

// ----------------------------------------------------------------------------------------------
// The context (here because it is mostly cuBLASLt state).
// The context on local_rank's GPU (gpu_for_rank: local_rank modulo the visible GPUs; a tool on one
// GPU passes 0). No usable GPU: false + gpu_for_rank's line in *err (the trainer reports it per
// rank), or without err that line and exit 1.
inline bool context_create(Context* ctx, int local_rank, std::string* err = nullptr) {
    std::string why;
    int device;
    if (!gpu_for_rank(local_rank, &device, &why)) {
        if (err) { *err = why; return false; }
        fprintf(stderr, "error: %s\n", why.c_str());
        exit(EXIT_FAILURE);
    }
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
    return true;
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
