// Parameter initialization on the device, reproducible from a seed.
// Normal samples come from a counter-based generator: element i of a tensor draws from
// hash(seed, tensor id, i), so the values do not depend on the launch shape or on the order in
// which tensors are initialized, and a 1.5B-parameter model initializes in milliseconds.
#pragma once
#include "common.cuh"

// A 64-bit mix (splitmix64's finalizer): consecutive inputs give unrelated outputs.
__device__ inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}
// out (n): out[i] = N(0, std) sample number i of stream `stream_id` under `seed` (Box-Muller);
// a pure function of (seed, stream_id, i), so any launch shape gives the same weights.
__global__ void init_normal_kernel(float* out, size_t n, float std, uint64_t seed, uint64_t stream_id) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ULL + mix64(stream_id * 0x632be59bd9b4e019ULL + i));
    const float u1 = ((r >> 40) + 1.0f) / 16777217.0f;          // (0, 1]: log is finite
    const float u2 = ((r & 0xffffffULL) + 0.5f) / 16777216.0f;  // [0, 1] (cospi(2) = cospi(0))
    // fmaxf: --use_fast_math's logf may come out a hair above 0 for u1 just below 1, and the
    // square root of the negative product would be NaN
    out[i] = std * sqrtf(fmaxf(0.0f, -2.0f * logf(u1))) * cospif(2.0f * u2);
}
// out (n) = value, every element.
__global__ void fill_kernel(float* out, size_t n, float value) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}

inline void init_normal(Context* ctx, float* out, size_t n, float std, uint64_t seed, uint64_t stream_id) {
    if (n == 0) return;   // (a grid of 0 blocks is a launch error)
    init_normal_kernel<<<ceil_div(n, 256), 256, 0, ctx->stream>>>(out, n, std, seed, stream_id);
    launchCheck();
}
inline void fill(Context* ctx, float* out, size_t n, float value) {
    if (n == 0) return;
    fill_kernel<<<ceil_div(n, 256), 256, 0, ctx->stream>>>(out, n, value);
    launchCheck();
}
