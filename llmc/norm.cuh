// The global gradient norm and the per-step decision made from it, on the device:
//   norm  = ||grads|| / loss_scale                  (the unscaled gradient's L2 norm)
//   skip  = norm is inf or nan                      (fp16 overflow somewhere: don't update)
//           or, with the spike guard on, the step's loss or norm is an outlier (llmc/spike_guard.h)
//   mult  = min(1, max_norm / (norm + 1e-6)) / loss_scale   (what AdamW multiplies each gradient by;
//           torch.nn.utils.clip_grad_norm_'s rule, the +1e-6 included)
// Keeping the decision on the device means no host round-trip sits between backward and the
// update; the host reads the norm, the decision and the guard's statistics afterwards, to log them,
// steer the loss scale and pass the statistics to the next step.
// On several GPUs every rank must take the same decision, so the norm must be the same bits on
// every rank. In DDP each rank reduces the same gradients (after the all-reduce) on a grid that
// does not depend on the GPU (NORM_BLOCKS), hence in the same order, even on GPUs of different SM
// counts; in ZeRO-1 each rank reduces its own shard and the NCCL sum hands every rank the same total.
#pragma once
#include "common.cuh"
#include "spike_guard.h"

struct StepScalars {
    float grad_norm;        // unscaled global norm (inf/nan when the gradients overflowed)
    float grad_multiplier;  // clip factor / loss scale
    int skip;               // a SkipReason; not 0: leave the weights and the optimizer state as they are
    float loss_z, norm_z;   // the step's loss and log(norm) as z-scores against their recent levels (NaN: none yet)
    SpikeStats stats;       // the running statistics, this step's values added
};

// ----------------------------------------------------------------------------------------------
// Kernels

// partials (gridDim.x) <- each block's sum of squares of g (n) over a fixed strided set of 16-byte
// chunks (g only read).
// The chunk -> block assignment depends only on n and the grid size, so the sum is reproducible.
__global__ void norm_squared_partial_kernel(float* partials, const floatX* g, size_t n) {
    __shared__ float shared[32];
    float acc = 0.0f;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size; i < n;
         i += (size_t)gridDim.x * blockDim.x * x128::size) {
        x128 v = load128(g + i);
        for (int k = 0; k < x128::size; k++) { float x = (float)v[k]; acc += x * x; }
    }
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// sumsq <- sum of partials (P), one block, fixed order.
__global__ void sum_partials_kernel(float* sumsq, const float* partials, int P) {
    __shared__ float shared[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < P; i += blockDim.x) acc += partials[i];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) *sumsq = acc;
}

// One thread. *out (one StepScalars) <- the step's norm, multiplier, decision and statistics, from
// *sumsq (only read). loss = *loss_sum / tokens (NaN without loss_sum: no loss guard); `stats`
// are the running statistics before this step (a kernel argument: the host keeps them between
// steps).
__global__ void step_decision_kernel(StepScalars* out, const float* sumsq, float loss_scale, float max_norm,
                                     const float* loss_sum, double tokens, SpikeGuard guard, SpikeStats stats) {
    const float norm = sqrtf(*sumsq) / loss_scale;
    const double loss = loss_sum ? *loss_sum / tokens : (double)NAN;
    const SpikeCheck c = spike_check(guard, &stats, loss, norm);
    const float clip = max_norm > 0.0f ? fminf(1.0f, max_norm / (norm + 1e-6f)) : 1.0f;
    *out = {norm, c.reason ? 0.0f : clip / loss_scale, c.reason, (float)c.loss_z, (float)c.norm_z, stats};
}

// *flag <- 1 if any of g (n) is inf or nan (else left alone): the per-rank check that, before the
// gradients are averaged over the GPUs, tells WHICH rank produced a non-finite value (after the
// all-reduce every rank holds the nan). Any alignment; several blocks may write the same 1.
__global__ void nonfinite_flag_kernel(float* flag, const floatX* g, size_t n) {
    bool bad = false;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        bad |= !isfinite((float)g[i]);
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1.0f;
}

// ----------------------------------------------------------------------------------------------
// Launchers

// *flag (one float on the device) <- 1 if any of g (n) is inf or nan, else left as it was (the
// caller zeroes it); g only read.
inline void nonfinite_flag(float* flag, const floatX* g, size_t n, int sms, cudaStream_t stream) {
    nonfinite_flag_kernel<<<2 * sms, 512, 0, stream>>>(flag, g, n);
    launchCheck();
}

// sumsq (one float on the device) = sum of g[i]^2 over g (n), n a multiple of x128::size.
// 2 per SM of a 132-SM H100/H200 (what 2 * SMs gave there before it was fixed: the same bits; on
// GPUs of other SM counts the norm's last bits changed with it)
constexpr int NORM_BLOCKS = 264;
inline void norm_squared(Context* ctx, float* sumsq, const floatX* g, size_t n) {
    norm_squared_partial_kernel<<<NORM_BLOCKS, 512, 0, ctx->stream>>>(ctx->scratch, g, n);
    launchCheck();
    sum_partials_kernel<<<1, 1024, 0, ctx->stream>>>(sumsq, ctx->scratch, NORM_BLOCKS);
    launchCheck();
}

// out <- the step decision from the global sum of squares (see the top of this file) and, for the
// spike guard, the step's summed token loss over `tokens` tokens (loss_sum may be null: no loss)
// and the running statistics before this step.
inline void step_decision(Context* ctx, StepScalars* out, const float* sumsq, float loss_scale, float max_norm,
                          const float* loss_sum = nullptr, double tokens = 1.0, const SpikeGuard& guard = {},
                          const SpikeStats& stats = {}) {
    step_decision_kernel<<<1, 1, 0, ctx->stream>>>(out, sumsq, loss_scale, max_norm, loss_sum, tokens, guard, stats);
    launchCheck();
}
