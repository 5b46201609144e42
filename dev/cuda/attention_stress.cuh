// What compute-sanitizer cannot check of the attention, and the test that stands in for it
// (attention_check's --racecheck-probe, --memcheck-probe and --stress; dev/device/sanitize.sh).
// The wgmma kernels move their tiles with TMA (the copy engine) and hand them over with mbarriers.
// The probes show that neither racecheck (TMA's writes to shared memory) nor memcheck (TMA's reads
// of global memory) sees those copies, so the tools' clean results cover only the kernels'
// ordinary accesses; the stress test checks the hand-offs instead, by disturbing their timing and
// requiring the same bits every run (dev/perf_log.md, 2026-12-02).
#pragma once
#include <random>
#include <tuple>
#include "check.cuh"
#include "../../llmc/attention.cuh"

// --stress N: the model's attention forward + backward N times at each of three shapes, each run
// on NaN-poisoned outputs and beside a competing kernel that a second stream launches just before
// it: a random number of blocks (0 .. one per SM), each holding 120 KB of shared memory -- so no
// attention CTA fits beside it on that SM -- for a random 2-50 us. The persistent attention kernels
// then start some of their CTAs late, which moves every producer/consumer hand-off (mbarrier
// waits, TMA copies, the wgmma pipeline) in time against the others. Every run's out, saved
// state and dqkv must be bitwise the first run's. This is the check racecheck cannot make
// (--racecheck-probe: it does not see TMA's writes): a hand-off that relied on timing, not on its
// barrier, would show up here as a run that differs. (In sm_90a builds --stress then runs the
// probe kernels as often: how often a TMA copy read before its wait actually reads wrong.)
constexpr int STRESS_SMEM = 120 * 1024;
// (check.cuh's hold_stream_kernel holds a stream with one sleeping thread; this one holds SMs.)
__global__ void occupy_sm_kernel(unsigned long long ns) {
    extern __shared__ char held[];  // only its size matters: it keeps other CTAs off this SM
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    if (t == 0) held[0] = 0;  // (never: the timer is not 0; keeps the allocation)
}
// count[0] += the number of 32-bit words where a and b differ.
__global__ void count_diff_kernel(unsigned int* count, const uint32_t* a, const uint32_t* b, size_t n) {
    unsigned int d = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) d += a[i] != b[i];
    d = __reduce_add_sync(0xffffffffu, d);
    if (threadIdx.x % 32 == 0 && d) atomicAdd(count, d);
}
static void stress_attention(Context* ctx, int runs, int B, int T, int NH) {
    const int C = NH * 64;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nstate = attention_state_elems(B, T, NH);
    floatX* qkv = random_device<floatX>(ctx, nqkv, -1.5f, 1.5f);
    floatX* dout = random_device<floatX>(ctx, nout, -1.0f, 1.0f);
    floatX *out = dalloc<floatX>(nout), *dqkv = dalloc<floatX>(nqkv), *out0 = dalloc<floatX>(nout), *dqkv0 = dalloc<floatX>(nqkv);
    float *state = dalloc<float>(nstate), *state0 = dalloc<float>(nstate);
    unsigned char* scratch = dalloc<unsigned char>(attention_scratch_bytes(B, T, C, NH));
    unsigned int* diffs = dalloc<unsigned int>(runs);  // per run: words of out, state, dqkv that differ
    cudaCheck(cudaMemset(diffs, 0, runs * sizeof(unsigned int)));
    cudaStream_t other;
    cudaCheck(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    cudaEvent_t go;
    cudaCheck(cudaEventCreateWithFlags(&go, cudaEventDisableTiming));
    cudaCheck(cudaFuncSetAttribute(occupy_sm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, STRESS_SMEM));
    const auto run = [&] {
        cudaCheck(cudaMemsetAsync(out, 0xFF, nout * sizeof(floatX), ctx->stream));
        cudaCheck(cudaMemsetAsync(state, 0xFF, nstate * sizeof(float), ctx->stream));
        cudaCheck(cudaMemsetAsync(dqkv, 0xFF, nqkv * sizeof(floatX), ctx->stream));
        attention_forward(ctx, out, state, qkv, scratch, B, T, C, NH);
        attention_backward(ctx, dqkv, dout, qkv, out, state, scratch, B, T, C, NH);
    };
    run();
    cudaCheck(cudaMemcpyAsync(out0, out, nout * sizeof(floatX), cudaMemcpyDeviceToDevice, ctx->stream));
    cudaCheck(cudaMemcpyAsync(state0, state, nstate * sizeof(float), cudaMemcpyDeviceToDevice, ctx->stream));
    cudaCheck(cudaMemcpyAsync(dqkv0, dqkv, nqkv * sizeof(floatX), cudaMemcpyDeviceToDevice, ctx->stream));
    std::mt19937 pick(1234);
    const int sms = ctx->props.multiProcessorCount;
    for (int r = 0; r < runs; r++) {
        // the competitor starts once everything before this run is done, then this run's work
        // queues behind nothing but the poisoning
        cudaCheck(cudaEventRecord(go, ctx->stream));
        cudaCheck(cudaStreamWaitEvent(other, go, 0));
        const int blocks = (int)(pick() % (sms + 1));
        const unsigned long long ns = 2000 + pick() % 48000;
        if (blocks > 0) {
            occupy_sm_kernel<<<blocks, 32, STRESS_SMEM, other>>>(ns);
            launchCheck();
        }
        run();
        for (auto [a, b, words] : {std::tuple<const void*, const void*, size_t>{out, out0, nout * sizeof(floatX) / 4},
                                   {state, state0, nstate}, {dqkv, dqkv0, nqkv * sizeof(floatX) / 4}}) {
            count_diff_kernel<<<264, 256, 0, ctx->stream>>>(diffs + r, (const uint32_t*)a, (const uint32_t*)b, words);
            launchCheck();
        }
    }
    const std::vector<unsigned int> d = from_device_raw(diffs, runs);
    size_t bad_runs = 0, words = 0;
    for (unsigned int v : d) { bad_runs += v != 0; words += v; }
    char name[160], detail[160];
    snprintf(name, sizeof name, "stress B=%d T=%d NH=%d: %d runs of forward+backward beside a competing kernel", B, T, NH, runs);
    snprintf(detail, sizeof detail, "%zu runs differ from the first (%zu words of out, state, dqkv)", bad_runs, words);
    check_true(name, bad_runs == 0, detail);
    cudaCheck(cudaEventDestroy(go));
    cudaCheck(cudaStreamDestroy(other));
}

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
// --racecheck-probe: what compute-sanitizer's racecheck sees of a TMA copy into shared memory.
// One CTA of 128 threads reads a 64 x 64 tile of floatX from shared memory (each thread sums every
// 128th 32-bit word), after the tile was written there three ways, one kernel each:
//   probe_tma_waited_kernel:     thread 0 hands the copy to TMA (as the wgmma kernels' producer
//                                does); every thread waits on the mbarrier first. Correct.
//   probe_tma_unwaited_kernel:   the same, but the threads read before they wait: a real race
//                                (they may read the tile before the copy lands).
//   probe_store_unsynced_kernel: thread 0 writes the tile with ordinary stores, and the others
//                                read it with no barrier between: a real race, the control.
// Under `compute-sanitizer --tool racecheck` the control must be reported; whether the unwaited
// TMA copy is says whether racecheck sees TMA's writes at all, i.e. how much its "0 hazards" on the
// wgmma kernels (whose tiles TMA writes and wgmma reads) covers. Without the tool, the waited
// kernel's sum is checked against the host's (the probe itself works); --stress runs all three
// many times and counts the races' wrong sums (whether repetition exposes such a race at all).
constexpr int PROBE_ROWS = 64, PROBE_TILE_BYTES = PROBE_ROWS * flash::HS * (int)sizeof(floatX);
constexpr int PROBE_SMEM = PROBE_TILE_BYTES + 1024 + 8;  // the tile, 1024-aligned (128-byte swizzle), then its mbarrier
enum ProbeWrite { PROBE_TMA_WAITED, PROBE_TMA_UNWAITED, PROBE_STORE_UNSYNCED };
template <ProbeWrite W>
__device__ void racecheck_probe(const CUtensorMap* map, const floatX* src, float* sum) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace flash_wgmma;
    extern __shared__ char smem_raw[];
    const uint32_t tile = smem_base_1024(smem_raw), bar = tile + PROBE_TILE_BYTES;
    const uint32_t* words = reinterpret_cast<const uint32_t*>(smem_raw + (tile - smem_u32(smem_raw)));
    const int nwords = PROBE_TILE_BYTES / 4;
    // the tile starts as garbage (huge values: 0x7F7F is 3.4e38 in bf16, NaN in fp16), not as what
    // the previous probe left in this SM's shared memory, so a read too early gives a wrong sum;
    // written through the generic proxy before TMA (the async one) overwrites it: fenced
    for (int i = threadIdx.x; i < nwords; i += blockDim.x) st_shared_u32(tile + 4 * i, 0x7F7F7F7Fu);
    fence_proxy_async();
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (W == PROBE_STORE_UNSYNCED) {
            const uint32_t* g = reinterpret_cast<const uint32_t*>(src);
            for (int i = 0; i < nwords; i++) st_shared_u32(tile + 4 * i, g[i]);
            mbar_arrive(bar);  // (only so that every kernel ends the same way, below)
        } else {
            mbar_arrive_expect_tx(bar, PROBE_TILE_BYTES);
            tma_load(tile, map, 0, 0, 0, bar);
        }
    }
    if (W == PROBE_TMA_WAITED) mbar_wait(bar, 0);
    float s = 0.0f;
    for (int i = threadIdx.x; i < nwords; i += blockDim.x) {
        const uint32_t v = words[i];  // two floatX; their sum does not depend on the swizzle
        floatX pair[2];
        memcpy(pair, &v, sizeof v);
        s += (float)pair[0] + (float)pair[1];
    }
    mbar_wait(bar, 0);  // no CTA may exit with a copy into its shared memory still in flight
    atomicAdd(sum, s);
#endif
}
__global__ void probe_tma_waited_kernel(const __grid_constant__ CUtensorMap map, const floatX* src, float* sum) {
    racecheck_probe<PROBE_TMA_WAITED>(&map, src, sum);
}
__global__ void probe_tma_unwaited_kernel(const __grid_constant__ CUtensorMap map, const floatX* src, float* sum) {
    racecheck_probe<PROBE_TMA_UNWAITED>(&map, src, sum);
}
__global__ void probe_store_unsynced_kernel(const __grid_constant__ CUtensorMap map, const floatX* src, float* sum) {
    racecheck_probe<PROBE_STORE_UNSYNCED>(&map, src, sum);
}
// Each probe kernel `runs` times; the waited copy's sum must be the host's every time; for the two
// races, how many runs read a wrong sum (with --stress: whether such a race shows at all when run
// over and over, the stress's own sensitivity).
static void racecheck_probe_run(Context* ctx, int runs) {
    std::vector<float> h = randn((size_t)PROBE_ROWS * flash::HS);
    floatX* src = to_device(h);  // rounded to floatX in h too
    double host = 0.0;
    for (float v : h) host += v;
    const CUtensorMap map = make_tile_map(ctx, src, 1, PROBE_ROWS, flash::HS, PROBE_ROWS);
    float* sums = dalloc<float>(3 * (size_t)runs);
    cudaCheck(cudaMemset(sums, 0, 3 * (size_t)runs * sizeof(float)));
    struct { void (*kernel)(CUtensorMap, const floatX*, float*); const char* name; } probes[] = {
        {probe_tma_waited_kernel, "TMA copy, read after the mbarrier wait"},
        {probe_tma_unwaited_kernel, "TMA copy, read before the mbarrier wait (a race)"},
        {probe_store_unsynced_kernel, "thread 0's stores, read with no barrier (a race)"}};
    for (int i = 0; i < 3; i++) {
        cudaCheck(cudaFuncSetAttribute(probes[i].kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, PROBE_SMEM));
        for (int r = 0; r < runs; r++) {
            probes[i].kernel<<<1, 128, PROBE_SMEM, ctx->stream>>>(map, src, sums + (size_t)i * runs + r);
            launchCheck();
        }
    }
    const std::vector<float> got = from_device_raw(sums, 3 * (size_t)runs);
    int wrong[3] = {0, 0, 0};
    float first_wrong[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        for (int r = 0; r < runs; r++) {
            const float v = got[(size_t)i * runs + r];
            if (!(std::fabs(v - host) <= 1e-3 * (1.0 + std::fabs(host))) && wrong[i]++ == 0) first_wrong[i] = v;
        }
    for (int i = 1; i < 3; i++)
        printf("  probe, %s: %d of %d runs read a wrong sum%s (host %.4f)\n", probes[i].name, wrong[i], runs,
               wrong[i] ? (" (the first: " + std::to_string(first_wrong[i]) + ")").c_str() : "", host);
    check_true(std::string("probe, ") + probes[0].name + ": the sum = the host's in every run", wrong[0] == 0,
               std::to_string(wrong[0]) + " of " + std::to_string(runs) + " runs wrong");
}

// --memcheck-probe: whether compute-sanitizer's memcheck sees TMA's reads of global memory. An
// 8 KB tile is uploaded, its TMA map built, and the allocation freed; then the freed tile is read
// twice, by probe_tma_waited_kernel (TMA, as the wgmma kernels' producer reads q, k, v) and by
// sum_all_kernel (check.cuh; ordinary loads: the control). Under `compute-sanitizer --tool
// memcheck` both reads must be reported as invalid; if only the control is, memcheck's "0 errors"
// on the wgmma kernels says nothing about their TMA copies. Meant for the tool only: without it, freed memory
// is read (the pool usually keeps it mapped, and nothing is checked).
static void memcheck_probe_run(Context* ctx) {
    float* sums = dalloc<float>(2);
    cudaCheck(cudaMemset(sums, 0, 2 * sizeof(float)));
    std::vector<float> h = randn((size_t)PROBE_ROWS * flash::HS);
    floatX* tile = to_device(h);
    const CUtensorMap map = make_tile_map(ctx, tile, 1, PROBE_ROWS, flash::HS, PROBE_ROWS);
    sync();
    cudaCheck(cudaFree(tile));
    auto& allocs = check_state().allocs;
    allocs.erase(std::find(allocs.begin(), allocs.end(), (void*)tile));
    cudaCheck(cudaFuncSetAttribute(probe_tma_waited_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, PROBE_SMEM));
    probe_tma_waited_kernel<<<1, 128, PROBE_SMEM, ctx->stream>>>(map, tile, sums);
    launchCheck();
    sum_all_kernel<<<1, 128, 0, ctx->stream>>>(sums + 1, tile, (size_t)PROBE_ROWS * flash::HS);
    launchCheck();
    const std::vector<float> got = from_device_raw(sums, 2);
    printf("  memcheck probe: the freed tile read by TMA (sum %.4f) and by ordinary loads (sum %.4f); "
           "under memcheck both must be reported\n", got[0], got[1]);
}
#endif
