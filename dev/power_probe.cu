// Study tool (dev/device/power_probe.sh runs it): does a memory-bound kernel that occupies FEWER SMs leave more of the GPU's power budget
// to the GEMM that follows it? A training step runs at the 700 W limit, where the SM clock is what
// the power leaves; the memory-bound kernels (LayerNorm, classifier, AdamW) stream DRAM at ~4 TB/s,
// which a fraction of the SMs may already reach, while the rest of the SMs burn clocked power.
// Each run repeats, for `seconds`, one bf16 GEMM (8192^3, ~1.1 TFLOP) followed by one 1 GiB -> 1 GiB
// copy whose grid is `ctas` blocks of 1024 threads (grid-stride: a block stays on its SM), and prints
// the median time of an iteration, of its GEMM and of its copy, after a warm-up of a third of the run.
//   power_probe ctas [seconds=6] [mode=mix|copy|gemm]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include "../llmc/common.cuh"

// out[i] = in[i] for n 16-byte vectors ; grid-stride so that a block's
// SM streams until the end. Four loads in flight per thread before their stores: a few SMs must keep
// ~2-4 MB of requests outstanding to reach DRAM's bandwidth (Little's law at ~0.6 us latency).
__global__ void copy_vec16_kernel(const int4* __restrict__ in, int4* __restrict__ out, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
        int4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = i + u * stride < n ? __ldcs(in + i + u * stride) : int4{};
#pragma unroll
        for (int u = 0; u < 4; u++) if (i + u * stride < n) __stcs(out + i + u * stride, v[u]);
    }
}

__global__ void fill_kernel(__nv_bfloat16* p, size_t n, unsigned seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        p[i] = __float2bfloat16(((h & 0xffff) / 65536.0f - 0.5f));  // random, never zeros: real switching
    }
}

int main(int argc, char** argv) {
    const char* usage = "usage: power_probe ctas [seconds=6] [mode=mix|copy|gemm]\n";
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) { printf("%s", usage); return 0; }
    if (argc < 2) { fprintf(stderr, "%s", usage); return 2; }
    // numbers only, read once (atoi/atof took --help for 0 and 6s for 6)
    double num[2] = {0.0, 6.0};   // ctas, seconds
    for (int i = 1; i < argc && i <= 2; i++) {
        char* end = nullptr;
        num[i - 1] = strtod(argv[i], &end);
        if (end == argv[i] || *end) { fprintf(stderr, "power_probe: '%s' is not a number (%s)\n", argv[i], i == 1 ? "ctas" : "seconds"); return 2; }
    }
    if (!(num[0] >= 1 && num[0] < 1e9) || !(num[1] > 0)) { fprintf(stderr, "power_probe: ctas and seconds must be positive (ctas below 1e9)\n"); return 2; }
    const int ctas = (int)num[0];   // (in int range: checked above)
    const double seconds = num[1];
    const char* mode = argc > 3 ? argv[3] : "mix";
    bool do_gemm = strcmp(mode, "copy") != 0, do_copy = strcmp(mode, "gemm") != 0;
    if (strcmp(mode, "mix") != 0 && strcmp(mode, "copy") != 0 && strcmp(mode, "gemm") != 0) {
        fprintf(stderr, "power_probe: mode '%s' is not mix, copy or gemm\n", mode); return 2;
    }

    const int n = 8192;
    const size_t copy_bytes = (size_t)1 << 30, nvec = copy_bytes / 16;
    __nv_bfloat16 *a, *b, *c;
    int4 *src, *dst;
    cudaCheck(cudaMalloc(&a, (size_t)n * n * 2));
    cudaCheck(cudaMalloc(&b, (size_t)n * n * 2));
    cudaCheck(cudaMalloc(&c, (size_t)n * n * 2));
    cudaCheck(cudaMalloc(&src, copy_bytes));
    cudaCheck(cudaMalloc(&dst, copy_bytes));
    fill_kernel<<<1024, 256>>>(a, (size_t)n * n, 1u);
    fill_kernel<<<1024, 256>>>(b, (size_t)n * n, 2u);
    fill_kernel<<<1024, 256>>>((__nv_bfloat16*)src, copy_bytes / 2, 3u);
    cudaCheck(cudaGetLastError());
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    float one = 1.0f, zero = 0.0f;
    cudaEvent_t ev[3];
    for (auto& e : ev) cudaCheck(cudaEventCreate(&e));

    std::vector<float> it_ms, gemm_ms, copy_ms;
    double elapsed = 0.0;
    while (elapsed < seconds * 1000.0) {
        cudaCheck(cudaEventRecord(ev[0]));
        if (do_gemm)
            cublasCheck(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                                     &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        cudaCheck(cudaEventRecord(ev[1]));
        if (do_copy) copy_vec16_kernel<<<ctas, 1024>>>(src, dst, nvec);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaEventRecord(ev[2]));
        cudaCheck(cudaEventSynchronize(ev[2]));
        float g, cp;
        cudaCheck(cudaEventElapsedTime(&g, ev[0], ev[1]));
        cudaCheck(cudaEventElapsedTime(&cp, ev[1], ev[2]));
        elapsed += g + cp;
        if (elapsed > seconds * 1000.0 / 3.0) { it_ms.push_back(g + cp); gemm_ms.push_back(g); copy_ms.push_back(cp); }
    }
    auto median = [](std::vector<float> v) { std::sort(v.begin(), v.end()); return v.empty() ? 0.0f : v[v.size() / 2]; };
    float mg = median(gemm_ms), mc = median(copy_ms);
    printf("RESULT mode=%s ctas=%d iters=%zu iter_ms=%.4f gemm_ms=%.4f copy_ms=%.4f gemm_tflops=%.1f copy_tbps=%.3f\n",
           mode, ctas, it_ms.size(), median(it_ms), mg, mc, do_gemm ? 2.0 * n * n * (double)n / (mg * 1e9) : 0.0,
           do_copy ? 2.0 * copy_bytes / (mc * 1e9) : 0.0);
    cublasCheck(cublasDestroy(h));
    return 0;
}
