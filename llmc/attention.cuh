// Causal multi-head self-attention.
//   attention_forward / attention_backward: what the model calls. fp16/bf16 builds use flash
//   attention (flash_attention.cuh; on Hopper builds the wgmma kernels of
//   flash_attention_wgmma.cuh and flash_attention_wgmma_backward.cuh, whose dQ kernel also
//   computes delta, so the backward there is two kernels: dQ, then dK/dV);
//   FP32 builds (for checking) use the reference below.
//   attention_reference_*: the straightforward version, through cuBLAS batched matmuls and a
//   materialized (B, NH, T, T) probability matrix. Correct (exact fp32 products in FP32 builds,
//   tensor cores in the fp16/bf16 checks), but it moves T x T matrices through memory. dev/cuda/attention.cu checks flash attention against it.
//
//   qkv (B,T,3C) = [q | k | v], head h at channels h*hs..(h+1)*hs of each, hs = C/NH
//   att = softmax(q k^T / sqrt(hs), causal)      (B,NH,T,T), saved for backward in FP32 builds;
//                                                the flash kernels save only lse (B,NH,T)
//   out = att v, heads concatenated              (B,T,C)
#pragma once
#include <cmath>
#include "common.cuh"
#include "matmul.cuh"
#include "flash_attention.cuh"
#include "flash_attention_wgmma.cuh"           // Hopper (sm_90a builds: USE_WGMMA): the forward,
#include "flash_attention_wgmma_backward.cuh"  // and dQ, dK/dV

// ----------------------------------------------------------------------------------------------
// Kernels

// q, k, v (B,NH,T,hs) <- qkv (B,T,3,NH,hs), into three other buffers (not in place). One thread
// per 16-byte chunk of q.
__global__ void attention_permute_kernel(floatX* q, floatX* k, floatX* v, const floatX* qkv, int B, int T, int NH, int hs) {
    const size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)B * NH * T * hs) return;
    const int d = idx % hs, t = (idx / hs) % T, h = (idx / ((size_t)hs * T)) % NH, b = idx / ((size_t)hs * T * NH);
    const int C = NH * hs;
    const floatX* src = qkv + ((size_t)b * T + t) * 3 * C + h * hs + d;
    store128(q + idx, load128(src));
    store128(k + idx, load128(src + C));
    store128(v + idx, load128(src + 2 * C));
}

// dqkv (B,T,3,NH,hs) <- dq, dk, dv (B,NH,T,hs): the inverse of attention_permute_kernel, into
// another buffer (not in place).
__global__ void attention_unpermute_qkv_kernel(floatX* dqkv, const floatX* dq, const floatX* dk, const floatX* dv,
                                               int B, int T, int NH, int hs) {
    const size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)B * NH * T * hs) return;
    const int d = idx % hs, t = (idx / hs) % T, h = (idx / ((size_t)hs * T)) % NH, b = idx / ((size_t)hs * T * NH);
    const int C = NH * hs;
    floatX* dst = dqkv + ((size_t)b * T + t) * 3 * C + h * hs + d;
    store128(dst, load128(dq + idx));
    store128(dst + C, load128(dk + idx));
    store128(dst + 2 * C, load128(dv + idx));
}

// Between (B,NH,T,hs) and (B,T,NH,hs) = (B,T,C), two different buffers (not in place). TO_BTC:
// y -> out; else out -> y.
template <bool TO_BTC>
__global__ void attention_heads_kernel(floatX* y, floatX* out, int B, int T, int NH, int hs) {
    const size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)B * NH * T * hs) return;
    const int d = idx % hs, t = (idx / hs) % T, h = (idx / ((size_t)hs * T)) % NH, b = idx / ((size_t)hs * T * NH);
    floatX* o = out + ((size_t)b * T + t) * NH * hs + h * hs + d;
    if (TO_BTC) store128(o, load128(y + idx));
    else store128(y + idx, load128(o));
}

// In place on att (B*NH*T rows of T): row t of each (b,h) becomes softmax over columns 0..t of
// the scores; columns > t (the future) become 0. One warp per row, fp32 max/sum.
__global__ void softmax_causal_forward_kernel(floatX* att, int rows, int T) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    floatX* a = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, (float)a[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) sum += expf((float)a[j] - mx);
    const float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32) a[j] = (floatX)(j <= t ? expf((float)a[j] - mx) * inv : 0.0f);
}

// In place on datt (rows of T): dscore[j] = att[j] * (datt[j] - sum_k att[k] datt[k]), the
// softmax Jacobian applied to datt; 0 above the diagonal.
__global__ void softmax_causal_backward_kernel(floatX* datt, const floatX* att, int rows, int T) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int t = row % T;
    floatX* d = datt + (size_t)row * T;
    const floatX* a = att + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += (float)a[j] * (float)d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) d[j] = (floatX)(j <= t ? (float)a[j] * ((float)d[j] - dot) : 0.0f);
}

// ----------------------------------------------------------------------------------------------
// Launchers

// Scratch of the reference (shared by all layers): q, k, v, then y (forward) or dy, dq, dk, dv
// (backward): 7 x (B,T,C), plus one (B,NH,T,T) scores matrix.
inline size_t attention_reference_scratch_elems(int B, int T, int C, int NH) { return 7 * (size_t)B * T * C + (size_t)B * NH * T * T; }

// out (B,T,C), att (B,NH,T,T) <- causal self-attention of qkv (B,T,3C).
inline void attention_reference_forward(Context* ctx, floatX* out, floatX* att, const floatX* qkv, floatX* scratch,
                              int B, int T, int C, int NH) {
    const int hs = C / NH;
    const size_t n = (size_t)B * T * C, blocks = ceil_div(n / x128::size, 256);
    floatX *q = scratch, *k = q + n, *v = k + n, *y = v + n;
    attention_permute_kernel<<<blocks, 256, 0, ctx->stream>>>(q, k, v, qkv, B, T, NH, hs);
    launchCheck();
    // scores = q k^T / sqrt(hs): (T,T) per (b,h)
    matmul_rowmajor(ctx, att, q, k, T, T, hs, false, true, 1.0f / sqrtf((float)hs), 0.0f,
                    B * NH, (long long)T * hs, (long long)T * hs, (long long)T * T);
    softmax_causal_forward_kernel<<<ceil_div((size_t)B * NH * T, 8), 256, 0, ctx->stream>>>(att, B * NH * T, T);
    launchCheck();
    // y = att v: (T,hs) per (b,h)
    matmul_rowmajor(ctx, y, att, v, T, hs, T, false, false, 1.0f, 0.0f,
                    B * NH, (long long)T * T, (long long)T * hs, (long long)T * hs);
    attention_heads_kernel<true><<<blocks, 256, 0, ctx->stream>>>(y, out, B, T, NH, hs);
    launchCheck();
}

// dqkv (B,T,3C) <- gradient of the attention given dout (B,T,C); qkv and att as saved by forward.
// Overwrites dqkv.
inline void attention_reference_backward(Context* ctx, floatX* dqkv, floatX* dout, const floatX* qkv, const floatX* att,
                               floatX* scratch, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t n = (size_t)B * T * C, blocks = ceil_div(n / x128::size, 256);
    floatX *q = scratch, *k = q + n, *v = k + n, *dy = v + n, *dq = dy + n, *dk = dq + n, *dv = dk + n, *datt = dv + n;
    const long long sTh = (long long)T * hs, sTT = (long long)T * T;
    attention_permute_kernel<<<blocks, 256, 0, ctx->stream>>>(q, k, v, qkv, B, T, NH, hs);
    launchCheck();
    attention_heads_kernel<false><<<blocks, 256, 0, ctx->stream>>>(dy, dout, B, T, NH, hs);
    launchCheck();
    matmul_rowmajor(ctx, datt, dy, v, T, T, hs, false, true, 1.0f, 0.0f, B * NH, sTh, sTh, sTT);   // datt = dy v^T
    matmul_rowmajor(ctx, dv, att, dy, T, hs, T, true, false, 1.0f, 0.0f, B * NH, sTT, sTh, sTh);   // dv = att^T dy
    softmax_causal_backward_kernel<<<ceil_div((size_t)B * NH * T, 8), 256, 0, ctx->stream>>>(datt, att, B * NH * T, T);
    launchCheck();
    matmul_rowmajor(ctx, dq, datt, k, T, hs, T, false, false, scale, 0.0f, B * NH, sTT, sTh, sTh); // dq = ds k
    matmul_rowmajor(ctx, dk, datt, q, T, hs, T, true, false, scale, 0.0f, B * NH, sTT, sTh, sTh);  // dk = ds^T q
    attention_unpermute_qkv_kernel<<<blocks, 256, 0, ctx->stream>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    launchCheck();
}

// ----------------------------------------------------------------------------------------------
// What the model uses. `state` is what forward saves per layer for backward, fp32: the per-row
// log-sum-exp (B,NH,T) for flash attention; the probabilities (B,NH,T,T) in FP32 builds.
//   attention_forward:  out (B,T,C) and state <- causal self-attention of qkv (B,T,3C); both
//                       overwritten, qkv only read. scratch (attention_scratch_bytes): FP32 builds'
//                       q, k, v and y (B,T,C) each; unused by flash attention.
//   attention_backward: dqkv (B,T,3C) <- the gradient of qkv given dout (B,T,C), overwritten (not
//                       accumulated, not in place); dout, qkv, out (flash only) and state only read.
//                       scratch: flash, delta (B,NH,T) fp32, overwritten; FP32 builds, the
//                       reference backward's buffers.
#if defined(ENABLE_FP32)
// the permutes move x128::size elements at a time inside a head
inline bool attention_supports(int C, int NH) { return C % NH == 0 && (C / NH) % x128::size == 0; }
inline const char* attention_head_sizes() { return "a multiple of 4"; }
inline size_t attention_state_elems(int B, int T, int NH) { return (size_t)B * NH * T * T; }
inline size_t attention_scratch_bytes(int B, int T, int C, int NH) { return attention_reference_scratch_elems(B, T, C, NH) * sizeof(floatX); }
inline void attention_forward(Context* ctx, floatX* out, float* state, const floatX* qkv, void* scratch, int B, int T, int C, int NH) {
    attention_reference_forward(ctx, out, state, qkv, (floatX*)scratch, B, T, C, NH);
}
inline void attention_backward(Context* ctx, floatX* dqkv, floatX* dout, const floatX* qkv, const floatX* out,
                               const float* state, void* scratch, int B, int T, int C, int NH) {
    (void)out;
    attention_reference_backward(ctx, dqkv, dout, qkv, state, (floatX*)scratch, B, T, C, NH);
}
#else
inline bool attention_supports(int C, int NH) { return C == NH * flash::HS; }
inline const char* attention_head_sizes() { return "64"; }
inline size_t attention_state_elems(int B, int T, int NH) { return (size_t)B * NH * T; }
inline size_t attention_scratch_bytes(int B, int T, int C, int NH) { (void)C; return (size_t)B * NH * T * sizeof(float); }
inline void attention_forward(Context* ctx, floatX* out, float* state, const floatX* qkv, void* scratch, int B, int T, int C, int NH) {
    (void)scratch;
    // the trainer checks attention_supports when it reads the model's shape; this guards other callers
    if (C != NH * flash::HS) { fprintf(stderr, "flash attention needs head size %d, got C/NH = %d/%d\n", flash::HS, C, NH); exit(EXIT_FAILURE); }
#if defined(USE_WGMMA)
    flash_attention_forward_wgmma(ctx, out, state, qkv, B, T, NH);
#else
    flash_attention_forward(ctx, out, state, qkv, B, T, NH);
#endif
}
inline void attention_backward(Context* ctx, floatX* dqkv, floatX* dout, const floatX* qkv, const floatX* out,
                               const float* state, void* scratch, int B, int T, int C, int NH) {
    (void)C;
#if defined(USE_WGMMA)
    float* delta = (float*)scratch;
    flash_backward_dq_wgmma(ctx, dqkv, delta, dout, qkv, out, state, B, T, NH);  // writes delta
    flash_backward_dkdv_wgmma(ctx, dqkv, delta, dout, qkv, state, B, T, NH);
#else
    flash_attention_backward(ctx, dqkv, (float*)scratch, dout, qkv, out, state, B, T, NH);
#endif
}
#endif
