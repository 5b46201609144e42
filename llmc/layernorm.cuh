// LayerNorm, forward and backward, the forward optionally fused with the residual add before it.
//   forward:  out = (x - mean) * rstd * w + b,  mean/rstd over the C channels of each row, eps 1e-5
//             x = inp, or (fused) x = residual_out = inp + add   [the residual stream's update]
//   backward: dinp += dLN/dx (dout); dw += sum_rows dout * xhat; db += sum_rows dout
// Statistics are fp32 whatever floatX is: a variance summed in fp16 would lose most of its bits.
// The fused forward reads the two tensors once and writes the residual and the normalized output,
// instead of one kernel for the add and another that re-reads its output.
#pragma once
#include "common.cuh"

constexpr int LN_WARPS = 4;  // rows per block in both kernels (one warp per row)

// ----------------------------------------------------------------------------------------------
// Kernels

// out (N,C), mean (N), rstd (N) <- LN of x (N,C), where x = inp, or with ADD: x = inp + add,
// also written to residual_out (N,C) (may alias inp: each element is read before it is written).
// One warp per row; the row is staged in shared memory so the three passes (mean, variance,
// normalize) read DRAM once. Dynamic shared memory: LN_WARPS * C * sizeof(floatX).
template <bool ADD>
__global__ void layernorm_forward_kernel(floatX* residual_out, floatX* out, float* mean, float* rstd,
                                         const floatX* inp, const floatX* add,
                                         const floatX* w, const floatX* b, int N, int C) {
    extern __shared__ char smem_raw[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * LN_WARPS + warp;
    if (row >= N) return;
    floatX* x = reinterpret_cast<floatX*>(smem_raw) + (size_t)warp * C;
    const size_t base = (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
        x128 v = load128(inp + base + c);
        if (ADD) {
            x128 a = load128(add + base + c);
            for (int k = 0; k < x128::size; k++) v[k] = (floatX)((float)v[k] + (float)a[k]);
            store128(residual_out + base + c, v);
        }
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
        store128(out + base + c, o);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// dinp (N,C) += LN backward of dout (N,C) [in place on dinp: the residual gradient accumulates];
// partials (gridDim.x, 2, C) fp32 <- this block's sums of dout*xhat (dw) and dout (db).
// One warp per row, rows strided over the grid; each warp keeps its own fp32 dw/db sums in shared
// memory (lane-owned columns: no two lanes touch one word, so no atomics and a fixed order).
// Dynamic shared memory: LN_WARPS * 2 * C floats.
__global__ void layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                          const floatX* w, const float* mean, const float* rstd, int N, int C) {
    extern __shared__ float smem_f[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* dw_acc = smem_f + (size_t)warp * 2 * C;
    float* db_acc = dw_acc + C;
    for (int c = lane; c < 2 * C; c += 32) dw_acc[c] = 0.0f;
    __syncwarp();  // the loop below hands columns to lanes differently
    for (int row = blockIdx.x * LN_WARPS + warp; row < N; row += gridDim.x * LN_WARPS) {
        const size_t base = (size_t)row * C;
        const float m = mean[row], s = rstd[row];
        // dL/dxhat = w * dout; the two row means below are what the normalization couples
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
    // the block's partial: the warps' sums added in warp order
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        float acc = 0.0f;
        for (int wi = 0; wi < LN_WARPS; wi++) acc += smem_f[(size_t)wi * 2 * C + c];
        partials[(size_t)blockIdx.x * 2 * C + c] = acc;
    }
}

// out (N,C) = (inp - mean) * rstd * w + b with the saved statistics: recomputes a LayerNorm output
// in backward (--recompute 2) instead of keeping it from the forward. One thread per 16 bytes.
__global__ void layernorm_apply_kernel(floatX* out, const floatX* inp, const float* mean, const float* rstd,
                                       const floatX* w, const floatX* b, int N, int C) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= (size_t)N * C) return;
    const int row = i / C, c = i % C;
    const float m = mean[row], s = rstd[row];
    x128 x = load128(inp + i), wv = load128(w + c), bv = load128(b + c), o;
    for (int k = 0; k < x128::size; k++) o[k] = (floatX)(((float)x[k] - m) * s * (float)wv[k] + (float)bv[k]);
    store128(out + i, o);
}

// out (n) += sum over p of partials[p * stride + i]: the ordered final step of the dw/db sums.
__global__ void layernorm_params_accumulate_kernel(floatX* dw, floatX* db, const float* partials, int P, int C) {
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

// ----------------------------------------------------------------------------------------------
// Launchers

// out (N,C), mean (N), rstd (N) = LayerNorm(inp (N,C)) with weight/bias (C).   [nn.LayerNorm]
inline void layernorm_forward(Context* ctx, floatX* out, float* mean, float* rstd,
                              const floatX* inp, const floatX* w, const floatX* b, int N, int C) {
    const size_t smem = (size_t)LN_WARPS * C * sizeof(floatX);
    layernorm_forward_kernel<false><<<ceil_div(N, LN_WARPS), LN_WARPS * 32, smem, ctx->stream>>>(
        nullptr, out, mean, rstd, inp, nullptr, w, b, N, C);
    launchCheck();
}

// residual_out (N,C) = inp + add;  out, mean, rstd = LayerNorm(residual_out).   [x = x + f(x); ln(x)]
inline void layernorm_residual_forward(Context* ctx, floatX* residual_out, floatX* out, float* mean, float* rstd,
                                       const floatX* inp, const floatX* add, const floatX* w, const floatX* b,
                                       int N, int C) {
    const size_t smem = (size_t)LN_WARPS * C * sizeof(floatX);
    layernorm_forward_kernel<true><<<ceil_div(N, LN_WARPS), LN_WARPS * 32, smem, ctx->stream>>>(
        residual_out, out, mean, rstd, inp, add, w, b, N, C);
    launchCheck();
}

// out (N,C) = LayerNorm(inp) from the statistics a forward saved. Overwrites out.
inline void layernorm_apply(Context* ctx, floatX* out, const floatX* inp, const float* mean, const float* rstd,
                            const floatX* w, const floatX* b, int N, int C) {
    layernorm_apply_kernel<<<ceil_div((size_t)N * C / x128::size, 256), 256, 0, ctx->stream>>>(out, inp, mean, rstd, w, b, N, C);
    launchCheck();
}

// dinp (N,C) += dLN/dinp; dw (C), db (C) += their gradients. inp is the forward's input (N,C).
inline void layernorm_backward(Context* ctx, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                               const floatX* inp, const floatX* w, const float* mean, const float* rstd,
                               int N, int C) {
    const size_t smem = (size_t)LN_WARPS * 2 * C * sizeof(float);
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int blocks = (int)std::min<size_t>(ceil_div(N, LN_WARPS), 2 * (size_t)ctx->props.multiProcessorCount);
    blocks = (int)std::min<size_t>(blocks, ctx->scratch_elems / (2 * (size_t)C));
    layernorm_backward_kernel<<<blocks, LN_WARPS * 32, smem, ctx->stream>>>(dinp, ctx->scratch, dout, inp, w, mean, rstd, N, C);
    launchCheck();
    layernorm_params_accumulate_kernel<<<ceil_div(C, 256), 256, 0, ctx->stream>>>(dw, db, ctx->scratch, blocks, C);
    launchCheck();
}
