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
#include <vector>
#include "common.cuh"
#include "matmul_plans.cuh"  // MatmulCall, matmul(): plans, algorithm choice, tuning; context_create

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
// Launchers

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
