// The encoder: token embedding + position embedding.
//   forward:  out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]
//   backward: dwpe[t,:] += sum_b dout[b,t,:];  dwte[v,:] += sum over (b,t) with tokens[b,t]==v of dout[b,t,:]
// The wte backward is a scatter-add: many positions share a token. Atomics would make the sum's
// order (and so its rounding) change from run to run; instead the host groups positions by token
// (it has the tokens anyway) and each token's positions are summed in a fixed order.
#pragma once
#include <vector>
#include "common.cuh"

// ----------------------------------------------------------------------------------------------
// Kernels

// out (B,T,C) = wte[tokens] (Vp,C) + wpe (maxT,C), only written; tokens (B,T), wte and wpe only
// read. One thread per 16-byte chunk of out.
__global__ void encoder_forward_kernel(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                                       int BT, int T, int C) {
    const size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)BT * C) return;
    const int bt = idx / C, c = idx % C, t = bt % T;
    x128 e = load128(wte + (size_t)tokens[bt] * C + c), p = load128(wpe + (size_t)t * C + c), o;
    for (int k = 0; k < x128::size; k++) o[k] = (floatX)((float)e[k] + (float)p[k]);
    store128(out + idx, o);
}

// dwpe (maxT,C) rows 0..T-1 += sum over b of dout (B,T,C). One thread per (t, 16-byte chunk).
__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    const size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)T * C) return;
    float acc[x128::size] = {};
    for (int b = 0; b < B; b++) {
        x128 d = load128(dout + (size_t)b * T * C + idx);
        for (int k = 0; k < x128::size; k++) acc[k] += (float)d[k];
    }
    x128 w = load128(dwpe + idx);
    for (int k = 0; k < x128::size; k++) w[k] = (floatX)((float)w[k] + acc[k]);
    store128(dwpe + idx, w);
}

// dwte (Vp,C) += per-token sums of dout (B,T,C). Block (x = chunk of C, y = one distinct token):
// positions[bucket_start[u] .. bucket_start[u+1]) are the (b*T+t) where token bucket_token[u] occurs,
// for u < *num_unique; blocks of larger u return at once (a CUDA graph's grid covers the most
// distinct tokens any batch can have, while it replays batches with fewer).
__global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const int* positions,
                                            const int* bucket_start, const int* bucket_token, const int* num_unique, int C) {
    const int u = blockIdx.y;
    if (u >= *num_unique) return;
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (c >= C) return;
    float acc[x128::size] = {};
    for (int i = bucket_start[u]; i < bucket_start[u + 1]; i++) {
        x128 d = load128(dout + (size_t)positions[i] * C + c);
        for (int k = 0; k < x128::size; k++) acc[k] += (float)d[k];
    }
    floatX* row = dwte + (size_t)bucket_token[u] * C + c;
    x128 w = load128(row);
    for (int k = 0; k < x128::size; k++) w[k] = (floatX)((float)w[k] + acc[k]);
    store128(row, w);
}

// ----------------------------------------------------------------------------------------------
// Token buckets for the deterministic wte backward, built on the host from the batch's tokens.
struct TokenBuckets {
    int num_unique = 0;
    int max_unique = 0;  // min(B*T, vocabulary): the most distinct tokens a batch can have
    // host side: plain (pageable) memory on purpose. cudaMemcpyAsync from pageable memory copies the
    // data to a staging buffer before it returns, so the next batch may rebuild these right away.
    std::vector<int> h_positions, h_start, h_token, count;
    int *d_positions = nullptr, *d_start = nullptr, *d_token = nullptr;  // device copies, sized for B*T
    int* d_num_unique = nullptr;  // num_unique on the device (read by the kernel, so a graph can replay it)
};
inline void token_buckets_create(TokenBuckets* tb, int BT, int V) {
    tb->h_positions.resize(BT); tb->h_start.resize(BT + 1); tb->h_token.resize(BT);
    tb->count.assign(V, 0);
    tb->max_unique = std::min(BT, V);
    cudaCheck(cudaMalloc(&tb->d_positions, BT * sizeof(int)));
    cudaCheck(cudaMalloc(&tb->d_start, (BT + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&tb->d_token, BT * sizeof(int)));
    cudaCheck(cudaMalloc(&tb->d_num_unique, sizeof(int)));
}
inline void token_buckets_free(TokenBuckets* tb) {
    cudaCheck(cudaFree(tb->d_positions)); cudaCheck(cudaFree(tb->d_start)); cudaCheck(cudaFree(tb->d_token)); cudaCheck(cudaFree(tb->d_num_unique));
}
// A counting sort of positions by token (stable: positions stay in increasing order within a
// token), then an async upload on `stream`.
inline void token_buckets_build(TokenBuckets* tb, const int* tokens, int BT, cudaStream_t stream) {
    std::vector<int>& count = tb->count;
    for (int i = 0; i < BT; i++) count[tokens[i]]++;
    int u = 0, pos = 0;
    for (int i = 0; i < BT; i++) {           // distinct tokens in order of first appearance
        int v = tokens[i];
        if (count[v] > 0) {
            tb->h_token[u] = v; tb->h_start[u] = pos; pos += count[v];
            count[v] = -(u + 1);             // mark: token v is bucket u
            u++;
        }
    }
    tb->h_start[u] = pos;
    tb->num_unique = u;
    std::vector<int> fill(tb->h_start.begin(), tb->h_start.begin() + u);
    for (int i = 0; i < BT; i++) tb->h_positions[fill[-count[tokens[i]] - 1]++] = i;
    for (int i = 0; i < u; i++) count[tb->h_token[i]] = 0;
    cudaCheck(cudaMemcpyAsync(tb->d_positions, tb->h_positions.data(), BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaMemcpyAsync(tb->d_start, tb->h_start.data(), (u + 1) * sizeof(int), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaMemcpyAsync(tb->d_token, tb->h_token.data(), u * sizeof(int), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaMemcpyAsync(tb->d_num_unique, &tb->num_unique, sizeof(int), cudaMemcpyHostToDevice, stream));
}

// ----------------------------------------------------------------------------------------------
// Launchers

// out (B,T,C) = wte[tokens] + wpe[0..T). tokens (B,T) on the device. Overwrites out.
inline void encoder_forward(Context* ctx, floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                            int B, int T, int C) {
    const size_t chunks = (size_t)B * T * C / x128::size;
    encoder_forward_kernel<<<ceil_div(chunks, 256), 256, 0, ctx->stream>>>(out, tokens, wte, wpe, B * T, T, C);
    launchCheck();
}

// dwte (Vp,C) and dwpe (maxT,C) += the embedding gradients from dout (B,T,C). Accumulates.
// Launched while ctx->stream is being captured into a CUDA graph, the wte kernel's grid covers
// tb.max_unique buckets, so that the graph stays right for every later batch; otherwise this
// batch's tb.num_unique.
inline void encoder_backward(Context* ctx, floatX* dwte, floatX* dwpe, const floatX* dout, const TokenBuckets& tb,
                             int B, int T, int C) {
    const size_t chunks = (size_t)T * C / x128::size;
    encoder_backward_wpe_kernel<<<ceil_div(chunks, 256), 256, 0, ctx->stream>>>(dwpe, dout, B, T, C);
    launchCheck();
    const int threads = 32;
    cudaStreamCaptureStatus capture;
    cudaCheck(cudaStreamIsCapturing(ctx->stream, &capture));
    dim3 grid(ceil_div(C / x128::size, threads), capture == cudaStreamCaptureStatusActive ? tb.max_unique : tb.num_unique);
    encoder_backward_wte_kernel<<<grid, threads, 0, ctx->stream>>>(dwte, dout, tb.d_positions, tb.d_start, tb.d_token,
                                                                     tb.d_num_unique, C);
    launchCheck();
}
