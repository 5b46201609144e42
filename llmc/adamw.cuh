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

// One element's update (the formula at the top of this file); m, v, w (the master weight) in place.
__device__ inline void adamw_element(float g, float& m, float& v, float& w, const AdamWHyper& h, float weight_decay) {
    m = h.beta1 * m + (1.0f - h.beta1) * g;
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    w -= h.lr * ((m / h.bc1) / (sqrtf(v / h.bc2) + h.eps) + weight_decay * w);
}

// ADAMW_VEC consecutive elements per thread, moved with one load/store per array where aligned.
// The kernel is pure streaming (per element: read a floatX gradient and fp32 m, v, master; write
// m, v, master and the floatX weight: 28 bytes in bf16/fp16), so what sets its speed is bytes in
// flight: one 2-byte and three 4-byte accesses per thread ran at 3.5 TB/s on an H200, four
// elements per thread at 4.04 TB/s (adamw_check, 124M parameters; d48's optimizer 13.4 -> 11.7 ms).
constexpr int ADAMW_VEC = 4;
template <class T>
struct alignas(ADAMW_VEC * sizeof(T)) AdamWVec { T v[ADAMW_VEC]; };

// Updates instances blockIdx.y = 0..count-1 of one parameter tensor of n elements each, found at
// first + y * stride in the flat buffers. params/grads are indexed by the global element index;
// master/m/v hold only [lo, hi) (this rank's shard; everything on one GPU) and are indexed by
// (index - lo). Elements outside [lo, hi) are left alone. Thread t of the instance takes elements
// ADAMW_VEC*t .. +ADAMW_VEC-1: one vector access per array when all of them are to be updated and
// both the global index and the shard offset are multiples of ADAMW_VEC (always, for GPT-2's
// tensors and shards), else element by element. Same arithmetic either way.
__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                             size_t first, size_t stride, size_t n, size_t lo, size_t hi,
                             AdamWHyper h, float weight_decay, const StepScalars* step) {
    if (step->skip) return;
    const size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * ADAMW_VEC;
    if (i0 >= n) return;
    const size_t idx0 = first + blockIdx.y * stride + i0;
    const float mult = step->grad_multiplier;
    if (i0 + ADAMW_VEC <= n && idx0 >= lo && idx0 + ADAMW_VEC <= hi && idx0 % ADAMW_VEC == 0 && lo % ADAMW_VEC == 0) {
        const size_t j0 = idx0 - lo;
        const AdamWVec<floatX> g = *reinterpret_cast<const AdamWVec<floatX>*>(grads + idx0);
        AdamWVec<float> mv = *reinterpret_cast<AdamWVec<float>*>(m + j0), vv = *reinterpret_cast<AdamWVec<float>*>(v + j0),
                        wv = *reinterpret_cast<AdamWVec<float>*>(master + j0);
        AdamWVec<floatX> p;
#pragma unroll
        for (int k = 0; k < ADAMW_VEC; k++) {
            adamw_element((float)g.v[k] * mult, mv.v[k], vv.v[k], wv.v[k], h, weight_decay);
            p.v[k] = (floatX)wv.v[k];
        }
        *reinterpret_cast<AdamWVec<float>*>(m + j0) = mv;
        *reinterpret_cast<AdamWVec<float>*>(v + j0) = vv;
        *reinterpret_cast<AdamWVec<float>*>(master + j0) = wv;
        *reinterpret_cast<AdamWVec<floatX>*>(params + idx0) = p;
        return;
    }
    for (int k = 0; k < ADAMW_VEC && i0 + k < n; k++) {
        const size_t idx = idx0 + k;
        if (idx < lo || idx >= hi) continue;
        const size_t j = idx - lo;
        float mj = m[j], vj = v[j], w = master[j];
        adamw_element((float)grads[idx] * mult, mj, vj, w, h, weight_decay);
        m[j] = mj;
        v[j] = vj;
        master[j] = w;
        params[idx] = (floatX)w;
    }
}

// ----------------------------------------------------------------------------------------------
// Launchers

// One AdamW update of `count` instances of an n-element tensor (see adamw_kernel), decayed or not.
inline void adamw_update(Context* ctx, floatX* params, float* master, const floatX* grads, float* m, float* v,
                         size_t first, size_t stride, size_t n, int count, size_t lo, size_t hi,
                         const AdamWHyper& h, bool decay, const StepScalars* step) {
    dim3 grid(ceil_div(n, 256 * ADAMW_VEC), count);
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
