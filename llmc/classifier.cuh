// The fused classifier: softmax + cross-entropy loss + the gradient of the logits, per row.
//   loss[row]   = logsumexp(logits[row, :V]) - logits[row, target]
//   dlogits     = (softmax(logits[row, :V]) - onehot(target)) * dloss;  0 in the padding columns V..Vp
// The probabilities are never stored: a row's max and sum-of-exponentials are found in one
// online pass (fp32), and the gradient is written over the logits in place in a second pass that
// reads the row again (it is still in L2). That avoids a (B,T,Vp) probability tensor, the largest
// activation of the model.
#pragma once
#include "common.cuh"

// ----------------------------------------------------------------------------------------------
// Kernels

// Online softmax statistics: the running max m and the sum s of exp(x - m) seen so far.
struct SoftmaxStats { float m, s; };
__device__ inline SoftmaxStats softmax_stats_merge(SoftmaxStats a, SoftmaxStats b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// One block per row of logits (N, Vp). losses (N) fp32 written. If dloss != 0, the row of logits
// is overwritten with its gradient (dloss is d(total loss)/d(loss[row]), e.g. scale/(B*T*steps)).
__global__ void fused_classifier_kernel(floatX* logits, float* losses, const int* targets,
                                        float dloss, int V, int Vp) {
    __shared__ SoftmaxStats shared[32];
    const size_t row = blockIdx.x;
    floatX* x = logits + row * Vp;
    SoftmaxStats st{-INFINITY, 0.0f};
    for (int c = threadIdx.x * x128::size; c < V; c += blockDim.x * x128::size) {
        // a chunk's own max first, so the running sum is rescaled once per chunk, not per element
        x128 v = load128(x + c);
        float cm = -INFINITY;
        for (int k = 0; k < x128::size && c + k < V; k++) cm = fmaxf(cm, (float)v[k]);
        const float m = fmaxf(st.m, cm);
        float s = st.s * expf(st.m - m);
        for (int k = 0; k < x128::size && c + k < V; k++) s += expf((float)v[k] - m);
        st = {m, s};
    }
    // merge across the warp, then across warps
    for (int o = 16; o > 0; o >>= 1) {
        SoftmaxStats other{__shfl_xor_sync(0xffffffff, st.m, o), __shfl_xor_sync(0xffffffff, st.s, o)};
        st = softmax_stats_merge(st, other);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) shared[warp] = st;
    __syncthreads();
    st = shared[0];
    for (int w = 1; w < warps; w++) st = softmax_stats_merge(st, shared[w]);
    const int target = targets[row];
    const float lse = st.m + logf(st.s);
    if (threadIdx.x == 0) losses[row] = lse - (float)x[target];
    if (dloss == 0.0f) return;
    __syncthreads();  // every thread has read the logits it needs before any is overwritten
    for (int c = threadIdx.x * x128::size; c < Vp; c += blockDim.x * x128::size) {
        x128 v = load128(x + c), d;
        for (int k = 0; k < x128::size; k++) {
            const int col = c + k;
            const float p = col < V ? expf((float)v[k] - lse) : 0.0f;
            d[k] = (floatX)((p - (col == target ? 1.0f : 0.0f)) * dloss);
        }
        store128(x + c, d);
    }
}

// loss_sum += sum of losses (N), in a fixed order (one block, strided then tree): deterministic.
__global__ void loss_accumulate_kernel(float* loss_sum, const float* losses, int N) {
    __shared__ float shared[32];
    float s = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += losses[i];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) *loss_sum += s;
}

// ----------------------------------------------------------------------------------------------
// Launchers

// losses (N) <- cross-entropy of logits (N, Vp) against targets (N); loss_sum += their sum.
// With dloss != 0, logits are overwritten by dloss * d(loss)/d(logits).
inline void fused_classifier(Context* ctx, floatX* logits, float* losses, float* loss_sum, const int* targets,
                             float dloss, int N, int V, int Vp) {
    fused_classifier_kernel<<<N, 1024, 0, ctx->stream>>>(logits, losses, targets, dloss, V, Vp);
    launchCheck();
    loss_accumulate_kernel<<<1, 1024, 0, ctx->stream>>>(loss_sum, losses, N);
    launchCheck();
}
