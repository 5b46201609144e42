// LayerNorm, forward and backward.
//   forward:  out = (x - mean) * rstd * w + b,  mean/rstd over the C channels of each row, eps 1e-5
//   backward: dinp += dLN/dx (dout); dw += sum_rows dout * xhat; db += sum_rows dout
// Statistics are fp32 whatever floatX is: a variance summed in fp16 would lose most of its bits.
// The residual add before each LayerNorm is not here: the projection matmul that produces the
// block's branch output adds the residual stream in its epilogue (matmul_forward's `residual`), so
// the LayerNorm reads one tensor (x) and writes one (out). (It was fused into this kernel before:
// read inp and add, write x and out, 2 tensors more per LayerNorm than now, for 1 more read in the
// matmul; 0.4 ms less per d12 micro-step at B=64, dev/perf_log.md.)
#pragma once
#include <algorithm>
#include "common.cuh"
#include "matmul.cuh"  // bias_backward, where the bias sums do not fit layernorm_backward's registers

constexpr int LN_WARPS = 4;  // rows per block of layernorm_forward_kernel (one warp per row)

// ----------------------------------------------------------------------------------------------
// Kernels

// out (N,C) with rows ld_out apart, mean (N), rstd (N) <- LN of inp (N,C). Not in place. Writes only
// columns [0,C) of out's rows (a ones column after them stays: matmul.cuh). One warp per row; the
// row is staged in shared memory so the three passes (mean, variance, normalize) read DRAM once.
// Dynamic shared memory: LN_WARPS * C * sizeof(floatX).
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* w, const floatX* b, int N, int C, int ld_out) {
    extern __shared__ char smem_raw[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * LN_WARPS + warp;
    if (row >= N) return;
    floatX* x = reinterpret_cast<floatX*>(smem_raw) + (size_t)warp * C;
    const size_t base = (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        const x128 v = load128(inp + base + c);
        for (int k = 0; k < x128::size; k++) sum += (float)v[k];
        store128(x + c, v);
    }
    const float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 v = load128(x + c);
        for (int k = 0; k < x128::size; k++) { float d = (float)v[k] - m; var += d * d; }
    }
    const float s = rsqrtf(warp_sum(var) / C + 1e-5f);
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 v = load128(x + c), wv = load128(w + c), bv = load128(b + c), o;
        for (int k = 0; k < x128::size; k++) o[k] = (floatX)(((float)v[k] - m) * s * (float)wv[k] + (float)bv[k]);
        store128(out + (size_t)row * ld_out + c, o);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// dinp (N,C) += LN backward of dout (N,C)   [in place on dinp: read, added to, written back; the
//                                              residual stream's gradient accumulates]
// partials (gridDim.x, NSETS*C) fp32 <- per block: columns [0,C) the block's sums of dout*xhat (dw),
//                                              columns [C,2C) its sums of dout (db), and with
//                                              PROJ_BIAS columns [2C,3C) its sums of the dinp it
//                                              wrote (a projection's bias gradient, layernorm_backward).
// Reads dout, inp, dinp (N,C) once each, mean/rstd (N), w (C); writes dinp once: 4 * N*C*sizeof(floatX)
// bytes of HBM traffic is the floor, and this kernel is built to stream at that floor.
//
// Layout of the work, and why:
//   - one warp per row, rows strided over the whole grid (row = global warp id + k * total warps);
//   - lane l of a warp owns the same columns of EVERY row it visits: chunk j (0..NCH-1) is columns
//     (j*32 + l)*V .. +V-1, V = x128::size. So each row is read with coalesced 16-byte loads and
//     the lane's column sums for its NCH*V columns live in REGISTERS for the whole kernel: no
//     shared memory traffic per row, no atomics. (That holds up to NCH = 7 in 16-bit, C <= 1792,
//     and 10 in fp32, C <= 1280, which cover GPT-2's widths but fp32's 1600: ptxas spills part of
//     wider rows' sums to local memory, and those run above the floor.) (Accumulating them in shared memory costs a
//     read-modify-write per element per row: measured, the PROJ_BIAS sums that way cost 0.016 ms
//     per call at C=768 in 16-bit, in registers 0.001-0.003 ms, dev/perf_log.md.)
//   - the row's dout, inp and dinp are all loaded into registers before any arithmetic: 3 row
//     loads in flight per warp (4.5 KiB at C=768, 16-bit), times 8-16 warps per SM at GPT-2's
//     widths, is what it takes to keep HBM busy (bytes in flight = bandwidth x latency). Each row
//     is read once: the two row means the normalization couples (mean of w*dout, mean of
//     w*dout*xhat) are computed from the registers, then the same registers give dinp.
//   - at the end the block's warps add their register sums into shared memory in warp order
//     (0, 1, 2, ...), and the block writes one partial row. Every sum has a fixed order for a given
//     grid, so results are bitwise reproducible run to run; layernorm_params_accumulate_kernel
//     adds the partial rows, also in a fixed order.
// NCH, the smallest of 1..8, 10, 13, 16 that is >= ceil(C / (32 V)) (the launcher's dispatch;
// columns past C are guarded), is a template parameter: per-lane arrays indexed by compile-time
// constants stay in registers (a runtime-sized loop would put them in local memory). WARPS per
// block and MIN_BLOCKS (the blocks per SM the launch bounds cut the registers for) are chosen by
// the launcher from the register estimate (ln_bwd_registers).
// Dynamic shared memory: NSETS * C floats.
constexpr int LN_BWD_WARPS = 8;
// Registers per thread are ~NSETS*NCH*V (the fp32 sums) + 12*NCH (three x128 per chunk) + 30-80
// (the row's statistics, addresses, temporaries; ptxas, 2026-12-03).
constexpr int ln_bwd_registers(int nch, int nsets) { return nsets * nch * x128::size + 12 * nch; }
constexpr int ln_bwd_min_blocks(int nch) { return ln_bwd_registers(nch, 2) <= 96 ? 2 : 1; }

template <int NCH, bool PROJ_BIAS, int MIN_BLOCKS = ln_bwd_min_blocks(NCH), int WARPS = LN_BWD_WARPS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
layernorm_backward_rows_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                               const floatX* w, const float* mean, const float* rstd, int N, int C) {
    constexpr int V = x128::size, NSETS = PROJ_BIAS ? 3 : 2;
    extern __shared__ float block_sums[];  // (NSETS*C): dw sums, db sums[, dinp sums]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float acc[NSETS][NCH][V];  // [0]: dout*xhat (dw), [1]: dout (db), [2]: dinp (the projection bias)
    for (int q = 0; q < NSETS; q++)
        for (int j = 0; j < NCH; j++)
            for (int k = 0; k < V; k++) acc[q][j][k] = 0.0f;
    const float inv_C = 1.0f / C;
#pragma unroll 1
    for (int row = blockIdx.x * WARPS + warp; row < N; row += gridDim.x * WARPS) {
        const size_t base = (size_t)row * C;
        x128 d[NCH], x[NCH], di[NCH];
        // issue every load of the row first (streaming hint: nothing here is read again soon)
        for (int j = 0; j < NCH; j++) {
            const int c = (j * 32 + lane) * V;
            if (c < C) {
                d[j] = load128cs(dout + base + c);
                x[j] = load128cs(inp + base + c);
                di[j] = load128cs(dinp + base + c);
            }
        }
        const float m = mean[row], s = rstd[row];
        // dL/dxhat = w * dout; its row mean and its row mean weighted by xhat couple the row
        float sum_dn = 0.0f, sum_dnx = 0.0f;
        for (int j = 0; j < NCH; j++) {
            const int c = (j * 32 + lane) * V;
            if (c < C) {
                const x128 wv = load128(w + c);
                for (int k = 0; k < V; k++) {
                    const float dn = (float)wv[k] * (float)d[j][k];
                    sum_dn += dn;
                    sum_dnx += dn * (((float)x[j][k] - m) * s);
                }
            }
        }
        // Keep the row PACKED across the reductions: without this fence the compiler keeps the
        // float conversions of dout and inp from the loop above alive for the loop below (2*V
        // registers per chunk instead of 8 bytes' worth), which costs occupancy. Re-converting is
        // a couple of integer ops per element.
        for (int j = 0; j < NCH; j++) {
            uint32_t* dr = reinterpret_cast<uint32_t*>(&d[j]);
            uint32_t* xr = reinterpret_cast<uint32_t*>(&x[j]);
            for (int q = 0; q < 4; q++) asm volatile("" : "+r"(dr[q]), "+r"(xr[q]));
        }
        const float mean_d = warp_sum(sum_dn) * inv_C, mean_dx = warp_sum(sum_dnx) * inv_C;
        for (int j = 0; j < NCH; j++) {
            const int c = (j * 32 + lane) * V;
            if (c < C) {
                const x128 wv = load128(w + c);
                x128 o;
                for (int k = 0; k < V; k++) {
                    const float xhat = ((float)x[j][k] - m) * s, dk = (float)d[j][k];
                    const float dn = (float)wv[k] * dk;
                    o[k] = (floatX)((float)di[j][k] + (dn - mean_d - xhat * mean_dx) * s);
                    acc[0][j][k] += dk * xhat;
                    acc[1][j][k] += dk;
                    // the value stored, as a separate pass over dinp would read it
                    if constexpr (PROJ_BIAS) acc[NSETS - 1][j][k] += (float)o[k];
                }
                store128(dinp + base + c, o);
            }
        }
    }
    // the block's partial: warp 0's sums, plus warp 1's, plus warp 2's... (one barrier per warp:
    // this runs once per block, the order is what matters)
    for (int wi = 0; wi < WARPS; wi++) {
        if (warp == wi) {
            for (int j = 0; j < NCH; j++) {
                const int c = (j * 32 + lane) * V;
                if (c < C)
                    for (int q = 0; q < NSETS; q++)
                        for (int k = 0; k < V; k++) {
                            float& t = block_sums[q * C + c + k];
                            t = wi == 0 ? acc[q][j][k] : t + acc[q][j][k];
                        }
            }
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < NSETS * C; i += blockDim.x) partials[(size_t)blockIdx.x * NSETS * C + i] = block_sums[i];
}

// out (N,C) = (inp - mean) * rstd * w + b with the saved statistics: recomputes a LayerNorm output
// in backward (--recompute 2) instead of keeping it from the forward. out's rows are ld_out apart
// (only columns [0,C) written; not in place: out and inp are different buffers). One thread per 16 bytes.
__global__ void layernorm_apply_kernel(floatX* out, const floatX* inp, const float* mean, const float* rstd,
                                       const floatX* w, const floatX* b, int N, int C, int ld_out) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= (size_t)N * C) return;
    const int row = i / C, c = i % C;
    const float m = mean[row], s = rstd[row];
    x128 x = load128(inp + i), wv = load128(w + c), bv = load128(b + c), o;
    for (int k = 0; k < x128::size; k++) o[k] = (floatX)(((float)x[k] - m) * s * (float)wv[k] + (float)bv[k]);
    store128(out + (size_t)row * ld_out + c, o);
}

// dw (C) += sum over p of partials[p][i], db (C) += sum over p of partials[p][C + i], and with
// nsets = 3 dbias (C) += sum over p of partials[p][2C + i]; partials (P, nsets*C) fp32 as
// layernorm_backward_rows_kernel wrote them. In place on dw, db, dbias.
// Block = 32 columns x 16 row lanes: lane y sums partial rows y, y+16, y+32, ... (coalesced across
// the 32 columns), then lane 0 adds the 16 lane sums in order: a fixed order, so deterministic,
// and 16x more threads in flight than one thread per column walking all P rows alone.
constexpr int LN_ACC_LANES = 16;
__global__ void layernorm_params_accumulate_kernel(floatX* dw, floatX* db, floatX* dbias, const float* partials,
                                                   int P, int C, int nsets) {
    __shared__ float lane_sums[LN_ACC_LANES][33];
    const int i = blockIdx.x * 32 + threadIdx.x;  // column of the partials, in [0, nsets*C)
    float acc = 0.0f;
    if (i < nsets * C)
        for (int p = threadIdx.y; p < P; p += LN_ACC_LANES) acc += partials[(size_t)p * nsets * C + i];
    lane_sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < nsets * C) {
        float t = 0.0f;
        for (int y = 0; y < LN_ACC_LANES; y++) t += lane_sums[y][threadIdx.x];
        floatX* out = i < C ? dw + i : i < 2 * C ? db + (i - C) : dbias + (i - 2 * C);
        *out = (floatX)((float)*out + t);
    }
}

// ----------------------------------------------------------------------------------------------
// Launchers

// out (N,C), mean (N), rstd (N) = LayerNorm(inp (N,C)) with weight/bias (C).   [nn.LayerNorm]
// out's rows are ld_out apart (0: C; ones_ld(C) for the input of a linear layer with a bias).
inline void layernorm_forward(Context* ctx, floatX* out, float* mean, float* rstd,
                              const floatX* inp, const floatX* w, const floatX* b, int N, int C, int ld_out = 0) {
    const size_t smem = (size_t)LN_WARPS * C * sizeof(floatX);
    layernorm_forward_kernel<<<ceil_div(N, LN_WARPS), LN_WARPS * 32, smem, ctx->stream>>>(out, mean, rstd, inp, w, b, N, C,
                                                                                          ld_out ? ld_out : C);
    launchCheck();
}

// out (N,C), rows ld_out apart (0: C) = LayerNorm(inp) from the statistics a forward saved.
// Overwrites columns [0,C) of out.
inline void layernorm_apply(Context* ctx, floatX* out, const floatX* inp, const float* mean, const float* rstd,
                            const floatX* w, const floatX* b, int N, int C, int ld_out = 0) {
    layernorm_apply_kernel<<<ceil_div((size_t)N * C / x128::size, 256), 256, 0, ctx->stream>>>(out, inp, mean, rstd, w, b, N, C,
                                                                                                ld_out ? ld_out : C);
    launchCheck();
}

// One instantiation of the backward: dinp (N,C) += its gradient, the partial rows (blocks, NSETS*C)
// fp32 into `partials` (ctx->scratch); one resident wave of blocks, at most as many as partials
// has rows for. Returns the block count (the rows layernorm_params_accumulate_kernel adds).
template <int NCH, bool PROJ_BIAS, int MIN_BLOCKS, int WARPS>
inline int layernorm_backward_launch_kernel(Context* ctx, floatX* dinp, float* partials, const floatX* dout,
                                            const floatX* inp, const floatX* w, const float* mean, const float* rstd,
                                            int N, int C) {
    const auto kernel = layernorm_backward_rows_kernel<NCH, PROJ_BIAS, MIN_BLOCKS, WARPS>;
    const int nsets = PROJ_BIAS ? 3 : 2;
    const size_t smem = nsets * (size_t)C * sizeof(float);
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, WARPS * 32, smem));
    // one resident wave: every block loops over rows, so more blocks would only add partial rows
    size_t blocks = std::min<size_t>((size_t)std::max(per_sm, 1) * ctx->props.multiProcessorCount, ceil_div(N, WARPS));
    blocks = std::max<size_t>(1, std::min<size_t>(blocks, ctx->scratch_elems / (nsets * (size_t)C)));
    kernel<<<(int)blocks, WARPS * 32, smem, ctx->stream>>>(dinp, partials, dout, inp, w, mean, rstd, N, C);
    launchCheck();
    return (int)blocks;
}

// Launches the kernel for NCH chunks; *blocks_out = the partial rows written. Returns whether the
// projection bias was summed: with proj_bias, where the third sum set fits the registers (16-bit
// C <= 1280, fp32 C <= 1024), the kernel runs 4 warps per block and at least 3 blocks per SM (2
// where the registers are more): at GPT-2's widths 12 or 8 warps per SM, about as fast as the
// kernel without it (0.124 against 0.122 ms at C=768, bf16); wider rows would spill, and the
// caller sums dinp apart.
template <int NCH, int MIN_BLOCKS = ln_bwd_min_blocks(NCH)>
inline bool layernorm_backward_launch(Context* ctx, bool proj_bias, floatX* dinp, float* partials, int* blocks_out,
                                      const floatX* dout, const floatX* inp, const floatX* w, const float* mean,
                                      const float* rstd, int N, int C) {
    constexpr int regs = ln_bwd_registers(NCH, 3);
    if constexpr (regs <= 192)
        if (proj_bias) {
            *blocks_out = layernorm_backward_launch_kernel<NCH, true, regs <= 108 ? 3 : 2, 4>(ctx, dinp, partials, dout, inp, w,
                                                                                             mean, rstd, N, C);
            return true;
        }
    *blocks_out = layernorm_backward_launch_kernel<NCH, false, MIN_BLOCKS, LN_BWD_WARPS>(ctx, dinp, partials, dout, inp, w,
                                                                                         mean, rstd, N, C);
    return false;
}

// The widths the LayerNorm kernels take: a multiple of x128::size, at most 16 * 32 * x128::size
// (4096 in 16-bit, 2048 in fp32: the largest NCH instantiated, 16, sets the limit, and the
// forward's shared memory fits it; widths past 1792 / 1280 spill, see the backward's comment). The trainer checks a model against this before building it.
inline bool layernorm_supports(int C) { return C > 0 && C % x128::size == 0 && C <= 16 * 32 * x128::size; }
inline int layernorm_max_channels() { return 16 * 32 * x128::size; }

// dinp (N,C) += dLN/dinp; dw (C), db (C) += their gradients. inp is the forward's input (N,C).
// C as layernorm_supports says. dproj_bias (C), when not null, += the column sums of dinp as this
// call leaves it. Why: dinp is the residual stream's gradient, and the stream's gradient is the
// gradient of every tensor added to it, so where a projection's output was added its column sums
// are that projection's bias gradient. Summed here while dinp is in registers, it costs no
// separate pass over dinp (N*C values, 0.03 ms at N=65536, C=768), where the registers allow.
inline void layernorm_backward(Context* ctx, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                               const floatX* inp, const floatX* w, const float* mean, const float* rstd,
                               int N, int C, floatX* dproj_bias = nullptr) {
    const bool pb = dproj_bias != nullptr;
    const int nch = (int)ceil_div(C, 32 * x128::size);
    int P = 0;
    bool summed = false;
    float* part = ctx->scratch;
    // the chunk counts GPT-2's widths need (768, 1024, 1280, 1600 in 16-bit and fp32), then a few above
    if (nch <= 1) summed = layernorm_backward_launch<1>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 2) summed = layernorm_backward_launch<2>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 3) summed = layernorm_backward_launch<3>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 4) summed = layernorm_backward_launch<4>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 5) summed = layernorm_backward_launch<5>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 6) summed = layernorm_backward_launch<6>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 7) summed = layernorm_backward_launch<7>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 8) summed = layernorm_backward_launch<8>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 10) summed = layernorm_backward_launch<10>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 13) summed = layernorm_backward_launch<13>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else if (nch <= 16) summed = layernorm_backward_launch<16>(ctx, pb, dinp, part, &P, dout, inp, w, mean, rstd, N, C);
    else {
        fprintf(stderr, "layernorm_backward: C=%d is wider than this kernel supports (%d)\n", C, layernorm_max_channels());
        exit(EXIT_FAILURE);
    }
    const int nsets = summed ? 3 : 2;
    layernorm_params_accumulate_kernel<<<ceil_div(nsets * (size_t)C, 32), dim3(32, LN_ACC_LANES), 0, ctx->stream>>>(
        dw, db, dproj_bias, part, P, C, nsets);
    launchCheck();
    if (pb && !summed) bias_backward(ctx, dproj_bias, dinp, N, C);  // (after the kernel above: both use ctx->scratch)
}
