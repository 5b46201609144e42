// Interconnect probe: how fast can the GPUs of this machine talk to each other?
//   1. P2P matrix (like CUDA's p2pBandwidthLatencyTest): for every GPU pair, unidirectional and
//      bidirectional copy bandwidth (256 MiB copies) and latency (4-byte copies), with peer access
//      enabled (NVLink/PCIe direct) and disabled (staged through the host);
//   2. NCCL all-reduce sweep, 1 MiB .. 1 GiB: time, algbw and busbw (busbw = algbw * 2(n-1)/n, as
//      nccl-tests define it: the bytes each link carries, which is what to compare with the link's
//      bandwidth). Run it again under NCCL_P2P_DISABLE=1 to see the fallback path.
// Started alone it drives every GPU from this one process. Started as the trainer is, one process
// per GPU (mpirun -np N, or RANK/WORLD_SIZE/LOCAL_RANK with MASTER_ADDR/MASTER_PORT: llmc/comm.cuh),
// it runs only the sweep, each process on its GPU, and measures whatever transport NCCL picks for
// where the ranks are: across nodes, the network (dev/device/own_host.sh makes every rank a node
// of its own, to measure NCCL's socket transport on one machine).
// The last line, "ALLREDUCE_FIT alpha_us=... busbw_gbs=...", is the alpha-beta fit that
// dev/scaling.py's predictor reads: time(bytes) = alpha + bytes * 2(n-1)/n / busbw ("no all-reduce
// fit: why" instead where the sweep fixes no bandwidth: one size, or times that do not grow with it).
// Build: make dev/interconnect        Run: ./dev/interconnect [--max-mb 1024]
//                                          mpirun -np 2 ./dev/interconnect [--max-mb 1024]
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>
#include "../llmc/common.cuh"
#include "../llmc/comm.cuh"
#include "../llmc/options.h"
#include "../llmc/timing.h"   // allreduce_fit

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
// The ranks of the sweep that this process drives: every GPU (one process) or its own GPU (one
// process per GPU; comm then gathers the other processes' times).
struct SweepRanks {
    int world = 0;                  // ranks in the all-reduce
    std::vector<int> devs;          // this process's GPUs, one communicator each
    std::vector<ncclComm_t> comms;
    const Comm* comm = nullptr;     // one process per GPU only
};

// The slowest rank's time per all-reduce of `reps` back-to-back ones (an all-reduce is done when
// every rank is done).
static float time_allreduces(const SweepRanks& r, const std::vector<void*>& buf, const std::vector<cudaStream_t>& st,
                             std::vector<cudaEvent_t>& a, std::vector<cudaEvent_t>& b, size_t count, int reps) {
    const size_t n = r.devs.size();
    for (size_t i = 0; i < n; i++) { cudaCheck(cudaSetDevice(r.devs[i])); cudaCheck(cudaEventRecord(a[i], st[i])); }
    for (int k = 0; k < reps; k++) {
        ncclCheck(ncclGroupStart());
        for (size_t i = 0; i < n; i++) ncclCheck(ncclAllReduce(buf[i], buf[i], count, ncclBfloat16, ncclSum, r.comms[i], st[i]));
        ncclCheck(ncclGroupEnd());
    }
    for (size_t i = 0; i < n; i++) { cudaCheck(cudaSetDevice(r.devs[i])); cudaCheck(cudaEventRecord(b[i], st[i])); }
    float worst = 0;
    for (size_t i = 0; i < n; i++) {
        cudaCheck(cudaEventSynchronize(b[i]));
        float ms; cudaCheck(cudaEventElapsedTime(&ms, a[i], b[i]));
        worst = std::max(worst, ms);
    }
    if (r.comm) {  // the other processes' times: each fills its own slot of a sum over ranks
        std::vector<float> all(r.world, 0.0f);
        all[r.comm->rank] = worst;
        comm_sum_host_floats(r.comm, &all, st[0]);
        worst = *std::max_element(all.begin(), all.end());
    }
    return worst / reps;
}

// Prints the sweep (rank 0 only, when there are several processes) and the alpha-beta fit.
static void allreduce_sweep(const SweepRanks& r, size_t max_mb) {
    const int n = r.world;
    const bool speak = !r.comm || r.comm->rank == 0;
    const char* p2p = getenv("NCCL_P2P_DISABLE");
    if (speak)
        printf("\nNCCL all-reduce (sum, bf16), %d GPUs, %s, NCCL_P2P_DISABLE=%s\n%12s %10s %10s %10s\n", n,
               r.comm ? "one process per GPU" : "one process", p2p ? p2p : "unset", "size", "time us", "algbw GB/s", "busbw GB/s");
    const size_t max_bytes = max_mb << 20, local = r.devs.size();
    std::vector<void*> buf(local);
    std::vector<cudaStream_t> st(local);
    std::vector<cudaEvent_t> a(local), b(local);
    for (size_t i = 0; i < local; i++) {
        cudaCheck(cudaSetDevice(r.devs[i]));
        cudaCheck(cudaMalloc(&buf[i], max_bytes));
        cudaCheck(cudaMemset(buf[i], 0, max_bytes));
        cudaCheck(cudaStreamCreate(&st[i]));
        cudaCheck(cudaEventCreate(&a[i])); cudaCheck(cudaEventCreate(&b[i]));
    }
    std::vector<std::pair<double, double>> sweep;  // (bytes, seconds) of every size
    for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 2) {
        const size_t count = bytes / 2;
        time_allreduces(r, buf, st, a, b, count, 3);  // warm-up
        const float ms = time_allreduces(r, buf, st, a, b, count, bytes >= (256u << 20) ? 5 : 20);
        const double algbw = bytes / (ms * 1e-3) / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        if (speak) printf("%9.1f MiB %10.1f %10.1f %10.1f\n", bytes / 1048576.0, ms * 1e3, algbw, busbw);   // (2^20 bytes; GB/s: 1e9)
        sweep.push_back({(double)bytes, ms * 1e-3});
    }
    // least squares t = alpha + bytes * 2(n-1)/n / busbw over the sweep (llmc/timing.h); none where
    // the sweep fixes no bandwidth (one size, or times that do not grow with it)
    const AllReduceFit fit = allreduce_fit(sweep, n);
    if (speak && fit.ok)
        printf("ALLREDUCE_FIT gpus=%d p2p_disable=%s alpha_us=%.1f busbw_gbs=%.1f\n", n, p2p ? p2p : "0", fit.alpha_s * 1e6,
               fit.busbw_gbs);
    else if (speak)
        printf("no all-reduce fit: %s\n", fit.why.c_str());
    for (size_t i = 0; i < local; i++) {
        cudaCheck(cudaSetDevice(r.devs[i]));
        cudaCheck(cudaFree(buf[i])); cudaCheck(cudaStreamDestroy(st[i]));
        cudaCheck(cudaEventDestroy(a[i])); cudaCheck(cudaEventDestroy(b[i]));
    }
}

// One process, every GPU: one communicator per GPU (ncclCommInitAll).
static void sweep_all_gpus(int n, size_t max_mb) {
    SweepRanks r;
    r.world = n;
    r.comms.resize(n);
    for (int i = 0; i < n; i++) r.devs.push_back(i);
    ncclCheck(ncclCommInitAll(r.comms.data(), n, r.devs.data()));
    allreduce_sweep(r, max_mb);
    for (ncclComm_t c : r.comms) ncclCheck(ncclCommDestroy(c));
}
#endif

// One process per GPU (the trainer's launchers): this rank's GPU, the trainer's communicator setup
// (rank 0's NCCL id by MPI, or over TCP from MASTER_ADDR:MASTER_PORT with the env launch).
static int sweep_one_process_per_gpu(Comm* c, size_t max_mb) {
    int device;
    std::string err;
    if (!gpu_for_rank(c->local_rank, &device, &err) || !comm_init(c, "tcp", 0, -1, &err)) comm_fail(c, err);
    if (c->rank == 0) printf("%d ranks (%s launch), one process per GPU: the all-reduce sweep only\n", c->world, c->launcher.c_str());
#ifdef USE_NCCL
    SweepRanks r;
    r.world = c->world;
    r.devs = {device};
    r.comms = {c->nccl};
    r.comm = c;
    allreduce_sweep(r, max_mb);
#else
    (void)max_mb;
#endif
    comm_free(c);
    return 0;
}

// One process, every GPU of the machine: the P2P matrix (unless skip_p2p) and the sweep. false +
// one line in *err when no GPU can be used.
static bool probe_all_gpus(size_t max_mb, bool skip_p2p, std::string* err) {
    int n = 0;
    if (!gpu_count(&n, err)) return false;
    printf("%d GPU(s)\n", n);
    for (int i = 0; i < n; i++) { cudaDeviceProp p; cudaCheck(cudaGetDeviceProperties(&p, i)); printf("GPU%d: %s\n", i, p.name); }
    for (int i = 0; i < n; i++)
        if (!gpu_runs_build(i, err)) return false;
    if (n < 2) { printf("one GPU: nothing to measure between GPUs\n"); return true; }
    if (!skip_p2p) { p2p_matrix(n, true); p2p_matrix(n, false); }
#ifdef USE_NCCL
    sweep_all_gpus(n, max_mb);
#else
    (void)max_mb;
    printf("built without NCCL: no all-reduce sweep\n");
#endif
    return true;
}

int main(int argc, char** argv) {
    Comm comm;
    {
        std::string err;
        if (!comm_launch(&comm, &argc, &argv, &err)) { fprintf(stderr, "error: %s\n", err.c_str()); return 1; }
    }
    long long max_mb = 1024;  // the sweep's largest all-reduce, MiB (1 MiB .. 64 GiB)
    bool skip_p2p = false;
    for (int i = 1; i < argc; i++) {
        std::string err;
        if (!strcmp(argv[i], "--max-mb") && i + 1 < argc) {
            if (!option_set(Option{"max-mb", 0, OPT_INT64, &max_mb, "", 1, 65536}, "--max-mb", argv[++i], &err)) {
                if (comm.rank == 0) fprintf(stderr, "error: %s\n", err.c_str());
                comm_free(&comm);
                return 1;
            }
        } else if (!strcmp(argv[i], "--no-p2p-matrix")) {
            skip_p2p = true;
        } else {
            if (comm.rank == 0) fprintf(stderr, "usage: %s [--max-mb N] [--no-p2p-matrix]\n", argv[0]);
            comm_free(&comm);
            return 1;
        }
    }
    if (comm.world > 1) return sweep_one_process_per_gpu(&comm, max_mb);
    std::string err;
    const bool ok = probe_all_gpus(max_mb, skip_p2p, &err);
    if (!ok) fprintf(stderr, "error: %s\n", err.c_str());
    comm_free(&comm);  // (MPI_Finalize under mpirun -np 1)
    return ok ? 0 : 1;
}
