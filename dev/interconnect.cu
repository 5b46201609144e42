// Interconnect probe: how fast can the GPUs of this machine talk to each other?
//   1. P2P matrix (like CUDA's p2pBandwidthLatencyTest): for every GPU pair, unidirectional and
//      bidirectional copy bandwidth (256 MiB copies) and latency (4-byte copies), with peer access
//      enabled (NVLink/PCIe direct) and disabled (staged through the host);
//   2. NCCL all-reduce sweep, 1 MiB .. 1 GiB, all GPUs in this one process: time, algbw and busbw
//      (busbw = algbw * 2(n-1)/n, as nccl-tests define it: the bytes each link carries, which is
//      what to compare with the link's bandwidth). Run it again under NCCL_P2P_DISABLE=1 to see the
//      fallback path.
// The last line, "ALLREDUCE_FIT alpha_us=... busbw_gbs=...", is the alpha-beta fit that
// dev/scaling.py's predictor reads: time(bytes) = alpha + bytes * 2(n-1)/n / busbw.
// Build: make dev/interconnect        Run: ./dev/interconnect [--max-mb 1024]
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>
#include "../llmc/common.cuh"

static float time_copies(int dst, int src, void* dbuf, void* sbuf, size_t bytes, int reps, bool bidir,
                         void* dbuf2, void* sbuf2, cudaStream_t s1, cudaStream_t s2) {
    cudaEvent_t a, b;
    cudaCheck(cudaSetDevice(src));
    cudaCheck(cudaEventCreate(&a)); cudaCheck(cudaEventCreate(&b));
    for (int w = 0; w < 2; w++) cudaCheck(cudaMemcpyPeerAsync(dbuf, dst, sbuf, src, bytes, s1));
    cudaCheck(cudaStreamSynchronize(s1));
    cudaCheck(cudaEventRecord(a, s1));
    if (bidir) cudaCheck(cudaStreamWaitEvent(s2, a, 0));
    for (int r = 0; r < reps; r++) {
        cudaCheck(cudaMemcpyPeerAsync(dbuf, dst, sbuf, src, bytes, s1));
        if (bidir) cudaCheck(cudaMemcpyPeerAsync(sbuf2, src, dbuf2, dst, bytes, s2));
    }
    cudaEvent_t c;
    cudaCheck(cudaEventCreate(&c));
    if (bidir) { cudaCheck(cudaEventRecord(c, s2)); cudaCheck(cudaStreamWaitEvent(s1, c, 0)); }
    cudaCheck(cudaEventRecord(b, s1));
    cudaCheck(cudaEventSynchronize(b));
    float ms;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    for (cudaEvent_t e : {a, b, c}) cudaCheck(cudaEventDestroy(e));
    return ms / reps;
}

static void p2p_matrix(int n, bool enable) {
    printf("\nP2P %s: unidirectional GB/s | bidirectional GB/s | latency us  (row = source, column = destination)\n",
           enable ? "ENABLED" : "DISABLED (staged through host)");
    const size_t big = 256 << 20, small = 4;
    std::vector<void*> buf(n), buf2(n);
    std::vector<cudaStream_t> st(n), st2(n);
    for (int i = 0; i < n; i++) {
        cudaCheck(cudaSetDevice(i));
        cudaCheck(cudaMalloc(&buf[i], big)); cudaCheck(cudaMalloc(&buf2[i], big));
        cudaCheck(cudaMemset(buf[i], i + 1, big)); cudaCheck(cudaMemset(buf2[i], i + 7, big));
        cudaCheck(cudaStreamCreate(&st[i])); cudaCheck(cudaStreamCreate(&st2[i]));
        for (int j = 0; j < n; j++) {
            int can = 0;
            if (i != j) cudaCheck(cudaDeviceCanAccessPeer(&can, i, j));
            if (i != j && can) {
                cudaError_t e = enable ? cudaDeviceEnablePeerAccess(j, 0) : cudaDeviceDisablePeerAccess(j);
                if (e != cudaErrorPeerAccessAlreadyEnabled && e != cudaErrorPeerAccessNotEnabled) cudaCheck(e);
                (void)cudaGetLastError();
            }
        }
    }
    for (int i = 0; i < n; i++) {
        std::string uni, bi, lat;
        for (int j = 0; j < n; j++) {
            char u[32], b[32], l[32];
            if (i == j) { snprintf(u, 32, "%8s", "-"); snprintf(b, 32, "%8s", "-"); snprintf(l, 32, "%7s", "-"); }
            else {
                float ms = time_copies(j, i, buf[j], buf[i], big, 10, false, nullptr, nullptr, st[i], st2[i]);
                snprintf(u, 32, "%8.1f", big / (ms * 1e-3) / 1e9);
                ms = time_copies(j, i, buf[j], buf[i], big, 10, true, buf2[j], buf2[i], st[i], st2[i]);
                snprintf(b, 32, "%8.1f", 2.0 * big / (ms * 1e-3) / 1e9);
                ms = time_copies(j, i, buf[j], buf[i], small, 200, false, nullptr, nullptr, st[i], st2[i]);
                snprintf(l, 32, "%7.2f", ms * 1e3);
            }
            uni += u; bi += b; lat += l;
        }
        printf("GPU%d  %s | %s | %s\n", i, uni.c_str(), bi.c_str(), lat.c_str());
    }
    for (int i = 0; i < n; i++) {
        cudaCheck(cudaSetDevice(i));
        cudaCheck(cudaFree(buf[i])); cudaCheck(cudaFree(buf2[i]));
        cudaCheck(cudaStreamDestroy(st[i])); cudaCheck(cudaStreamDestroy(st2[i]));
    }
}

#ifdef USE_NCCL
static void allreduce_sweep(int n, size_t max_mb) {
    const char* p2p = getenv("NCCL_P2P_DISABLE");
    printf("\nNCCL all-reduce (sum, bf16), %d GPUs, NCCL_P2P_DISABLE=%s\n%12s %10s %10s %10s\n", n, p2p ? p2p : "unset",
           "size", "time us", "algbw GB/s", "busbw GB/s");
    std::vector<ncclComm_t> comms(n);
    std::vector<int> devs(n);
    for (int i = 0; i < n; i++) devs[i] = i;
    ncclCheck(ncclCommInitAll(comms.data(), n, devs.data()));
    const size_t max_bytes = max_mb << 20;
    std::vector<void*> buf(n);
    std::vector<cudaStream_t> st(n);
    std::vector<cudaEvent_t> a(n), b(n);
    for (int i = 0; i < n; i++) {
        cudaCheck(cudaSetDevice(i));
        cudaCheck(cudaMalloc(&buf[i], max_bytes));
        cudaCheck(cudaMemset(buf[i], 0, max_bytes));
        cudaCheck(cudaStreamCreate(&st[i]));
        cudaCheck(cudaEventCreate(&a[i])); cudaCheck(cudaEventCreate(&b[i]));
    }
    std::vector<std::pair<double, double>> fit;  // (bytes, seconds) of the sizes >= 1 MiB
    for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 2) {
        const size_t count = bytes / 2;
        auto run = [&](int reps) {
            for (int i = 0; i < n; i++) { cudaCheck(cudaSetDevice(i)); cudaCheck(cudaEventRecord(a[i], st[i])); }
            for (int r = 0; r < reps; r++) {
                ncclCheck(ncclGroupStart());
                for (int i = 0; i < n; i++) ncclCheck(ncclAllReduce(buf[i], buf[i], count, ncclBfloat16, ncclSum, comms[i], st[i]));
                ncclCheck(ncclGroupEnd());
            }
            for (int i = 0; i < n; i++) { cudaCheck(cudaSetDevice(i)); cudaCheck(cudaEventRecord(b[i], st[i])); }
            float worst = 0;
            for (int i = 0; i < n; i++) {
                cudaCheck(cudaEventSynchronize(b[i]));
                float ms; cudaCheck(cudaEventElapsedTime(&ms, a[i], b[i]));
                worst = std::max(worst, ms);
            }
            return worst / reps;
        };
        run(3);
        const int reps = bytes >= (256u << 20) ? 5 : 20;
        const float ms = run(reps);
        const double algbw = bytes / (ms * 1e-3) / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        printf("%10.1f MB %10.1f %10.1f %10.1f\n", bytes / 1048576.0, ms * 1e3, algbw, busbw);
        fit.push_back({(double)bytes * 2.0 * (n - 1) / n, ms * 1e-3});
    }
    // least squares t = alpha + x / busbw over the sweep, x = the bytes each link carries
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (auto [x, y] : fit) { sx += x; sy += y; sxx += x * x; sxy += x * y; }
    const double k = fit.size(), slope = (k * sxy - sx * sy) / (k * sxx - sx * sx), alpha = (sy - slope * sx) / k;
    printf("ALLREDUCE_FIT gpus=%d p2p_disable=%s alpha_us=%.1f busbw_gbs=%.1f\n", n, p2p ? p2p : "0",
           std::max(alpha, 0.0) * 1e6, 1.0 / slope / 1e9);
    for (int i = 0; i < n; i++) {
        cudaCheck(cudaSetDevice(i));
        cudaCheck(cudaFree(buf[i])); cudaCheck(cudaStreamDestroy(st[i]));
        cudaCheck(cudaEventDestroy(a[i])); cudaCheck(cudaEventDestroy(b[i]));
        ncclCheck(ncclCommDestroy(comms[i]));
    }
}
#endif

int main(int argc, char** argv) {
    size_t max_mb = 1024;
    bool skip_p2p = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-mb") && i + 1 < argc) max_mb = strtoull(argv[++i], nullptr, 10);
        else if (!strcmp(argv[i], "--no-p2p-matrix")) skip_p2p = true;
        else { fprintf(stderr, "usage: %s [--max-mb N] [--no-p2p-matrix]\n", argv[0]); return 1; }
    }
    int n = 0;
    cudaCheck(cudaGetDeviceCount(&n));
    printf("%d GPU(s)\n", n);
    for (int i = 0; i < n; i++) { cudaDeviceProp p; cudaCheck(cudaGetDeviceProperties(&p, i)); printf("GPU%d: %s\n", i, p.name); }
    if (n < 2) { printf("one GPU: nothing to measure between GPUs\n"); return 0; }
    if (!skip_p2p) { p2p_matrix(n, true); p2p_matrix(n, false); }
#ifdef USE_NCCL
    allreduce_sweep(n, max_mb);
#else
    printf("built without NCCL: no all-reduce sweep\n");
#endif
    return 0;
}
