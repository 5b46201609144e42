// AdamW with fp32 master weights (PyTorch's torch.optim.AdamW, decoupled weight decay):
//   g = grad * mult                       (mult = clip factor / loss scale, from StepScalars)
//   m = b1 m + (1-b1) g;   v = b2 v + (1-b2) g^2
//   w = w - lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * w )
//   param = (floatX) w                    (the low-precision copy the forward pass reads)
// The master copy is what accumulates the small updates: an fp16/bf16 weight would round most of
// an update of size lr*1e-3 away. The cast back happens in the same kernel, so the weights are
// read and written once per step.
#pragma once
#include "common.cuh"
#include "norm.cuh"

struct AdamWHyper {
    float lr, beta1, beta2, eps, weight_decay;
    int t;               // 1-based step count
    float bc1 = 1, bc2 = 1;  // bias corrections 1 - beta^t, computed on the host in double: a
                         // per-element powf (fast-math __powf) is off by ~5e-5 relative
};
inline void adamw_set_step(AdamWHyper* h, int t) {
    h->t = t;
    h->bc1 = (float)(1.0 - pow((double)h->beta1, t));
    h->bc2 = (float)(1.0 - pow((double)h->beta2, t));
}

// ----------------------------------------------------------------------------------------------
// Kernels

// Updates instances blockIdx.y = 0..count-1 of one parameter tensor of n elements each, found at
// first + y * stride in the flat buffers. params/grads are indexed by the global element index;
// master/m/v hold only [lo, hi) (this rank's shard; everything on one GPU) and are indexed by
// (index - lo). Elements outside [lo, hi) are left alone.
__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                             size_t first, size_t stride, size_t n, size_t lo, size_t hi,
                             AdamWHyper h, float weight_decay, const StepScalars* step) {
    if (step->skip) return;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t idx = first + blockIdx.y * stride + i;
    if (idx < lo || idx >= hi) return;
    const size_t j = idx - lo;
    const float g = (float)grads[idx] * step->grad_multiplier;
    const float mj = h.beta1 * m[j] + (1.0f - h.beta1) * g;
    const float vj = h.beta2 * v[j] + (1.0f - h.beta2) * g * g;
    m[j] = mj;
    v[j] = vj;
    float w = master[j];
    w -= h.lr * ((mj / h.bc1) / (sqrtf(vj / h.bc2) + h.eps) + weight_decay * w);
    master[j] = w;
    params[idx] = (floatX)w;
}

// ----------------------------------------------------------------------------------------------
// Launchers

// One AdamW update of `count` instances of an n-element tensor (see adamw_kernel), decayed or not.
inline void adamw_update(Context* ctx, floatX* params, float* master, const floatX* grads, float* m, float* v,
                         size_t first, size_t stride, size_t n, int count, size_t lo, size_t hi,
                         const AdamWHyper& h, bool decay, const StepScalars* step) {
    dim3 grid(ceil_div(n, 256), count);
    adamw_kernel<<<grid, 256, 0, ctx->stream>>>(params, master, grads, m, v, first, stride, n, lo, hi, h,
                                                 decay ? h.weight_decay : 0.0f, step);
    launchCheck();
}

// params (n) <- (floatX) master (n): after initialization or loading, the weights the kernels read.
__global__ void cast_from_master_kernel(floatX* params, const float* master, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) params[i] = (floatX)master[i];
}
inline void cast_from_master(Context* ctx, floatX* params, const float* master, size_t n) {
    cast_from_master_kernel<<<ceil_div(n, 256), 256, 0, ctx->stream>>>(params, master, n);
    launchCheck();
}
