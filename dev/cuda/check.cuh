// Shared harness of the per-kernel checks in dev/cuda (one program per kernel family).
//   - random host inputs from one seeded std::mt19937 (normal or uniform, never zeros);
//   - to_device(): rounds a host vector to floatX IN PLACE and uploads it, so the CPU reference
//     is computed from exactly the values the GPU sees; from_device(): floatX -> float;
//   - poison(): fills outputs with 0xFF bytes (NaN in fp32, fp16 and bf16) so unwritten elements fail;
//   - check_close(): "PASS|FAIL name: rel_err=... max_abs=... (tol ...)", counted;
//   - time_ms(): CUDA events on ctx->stream, warm-up, median of N runs, prints GB/s or TFLOP/s
//     (timing_enabled(): false when CHECK_NO_TIMING=1 is set, e.g. under compute-sanitizer);
//   - check_finish(): "N passed, N failed" and the exit code.
// The Context's stream is a blocking one (it orders with cudaMemcpy/cudaMemset on the legacy
// default stream); the host<->device helpers here synchronize the device around every copy
// anyway, so that a copy never overlaps the kernels being checked or timed.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "../../llmc/common.cuh"
#include "../../llmc/matmul.cuh"  // the GEMM launchers; context_create / context_destroy (matmul_plans.cuh)

// ----------------------------------------------------------------------------------------------
// Tolerances (relative, ||out - ref|| / ||ref||), picked by the build's precision.
inline double tol_for(double fp32, double fp16, double bf16) {
#if defined(ENABLE_FP32)
    (void)fp16; (void)bf16; return fp32;
#elif defined(ENABLE_BF16)
    (void)fp32; (void)fp16; return bf16;
#else
    (void)fp32; (void)bf16; return fp16;
#endif
}
// One rounding of a floatX result (plus an fp32 accumulation before it).
inline double tol_default() { return tol_for(1e-5, 2e-3, 1.5e-2); }

// ----------------------------------------------------------------------------------------------
// Bookkeeping: pass/fail counts and the device allocations freed by check_finish().
struct CheckState { int passed = 0, failed = 0; std::vector<void*> allocs; };
inline CheckState& check_state() { static CheckState s; return s; }
inline std::mt19937& rng() { static std::mt19937 gen(20240601u); return gen; }

inline void sync() { cudaCheck(cudaDeviceSynchronize()); }

inline void check_begin(const Context& ctx, const char* family) {
    printf("dev/cuda/%s checks on %s (%d SMs), precision %s\n", family, ctx.props.name,
           ctx.props.multiProcessorCount, PRECISION_NAME);
}

// ----------------------------------------------------------------------------------------------
// Random host data.
inline std::vector<float> randn(size_t n, float stddev = 1.0f, float mean = 0.0f) {
    std::normal_distribution<float> d(mean, stddev);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng());
    return v;
}
inline std::vector<float> randu(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng());
    return v;
}
inline int randint(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi - 1)(rng()); }  // [lo, hi)

// ----------------------------------------------------------------------------------------------
// Device buffers and copies.
template <class T>
inline T* dalloc(size_t n) {
    T* p = nullptr;
    cudaCheck(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    check_state().allocs.push_back(p);
    return p;
}
inline float round_x(float x) { return (float)(floatX)x; }
inline void round_to_floatX(std::vector<float>& h) { for (auto& x : h) x = round_x(x); }
// h is rounded to floatX in place (so references use the GPU's values), then uploaded to dst.
inline void upload(floatX* dst, std::vector<float>& h) {
    round_to_floatX(h);
    sync();
    copy_to_device_as_floatX(dst, h.data(), h.size());
    sync();
}
inline floatX* to_device(std::vector<float>& h) {
    floatX* d = dalloc<floatX>(h.size());
    upload(d, h);
    return d;
}
template <class T>
inline T* to_device_raw(const std::vector<T>& h) {  // fp32 / int / struct data, as is
    T* d = dalloc<T>(h.size());
    sync();
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    sync();
    return d;
}
inline std::vector<float> from_device(const floatX* d, size_t n) {
    std::vector<float> h(n);
    sync();
    copy_from_device_as_float(h.data(), d, n);
    return h;
}
template <class T>
inline std::vector<T> from_device_raw(const T* d, size_t n) {
    std::vector<T> h(n);
    sync();
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
// Bit patterns, for "bitwise identical" and "left untouched" checks.
inline std::vector<unsigned char> bytes_of(const void* d, size_t bytes) {
    return from_device_raw(static_cast<const unsigned char*>(d), bytes);
}
template <class T>
inline void poison(T* d, size_t n) {
    sync();
    cudaCheck(cudaMemset(d, 0xFF, n * sizeof(T)));
    sync();
}

// ----------------------------------------------------------------------------------------------
// Checks.
inline bool check_true(const std::string& name, bool ok, const std::string& detail) {
    (ok ? check_state().passed : check_state().failed)++;
    printf("%s %s: %s\n", ok ? "PASS" : "FAIL", name.c_str(), detail.c_str());
    return ok;
}
// A bitwise comparison, its detail following the result (a fixed "bitwise identical" would be
// printed under a FAIL too).
inline bool check_bitwise(const std::string& name, bool same) {
    return check_true(name, same, same ? "bitwise identical" : "NOT bitwise identical");
}
// d[n, n + pad) still hold poison()'s 0xFF bytes: a kernel whose last block is only partly used
// wrote nothing past the end of its output.
template <class T>
inline bool check_untouched_past(const std::string& name, const T* d, size_t n, size_t pad) {
    const std::vector<unsigned char> b = bytes_of(d + n, pad * sizeof(T));
    const bool kept = std::all_of(b.begin(), b.end(), [](unsigned char x) { return x == 0xFF; });
    return check_true(name, kept, kept ? "still poisoned" : "written");
}
// out vs ref: passes when every out is finite, rel_err <= tol, and no single element is off by
// more than 8 * tol * (|ref| + rms(ref)) (catches a wrong row that the norm would dilute).
inline bool check_close(const std::string& name, const std::vector<float>& out, const std::vector<double>& ref,
                        double tol) {
    if (out.size() != ref.size()) return check_true(name, false, "size mismatch");
    const size_t n = ref.size();
    double se = 0, sr = 0, max_abs = 0;
    size_t nonfinite = 0, outliers = 0, first_bad = n;
    for (size_t i = 0; i < n; i++) sr += ref[i] * ref[i];
    const double rms = std::sqrt(sr / std::max<size_t>(n, 1));
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(out[i])) { nonfinite++; if (first_bad == n) first_bad = i; continue; }
        const double d = std::fabs((double)out[i] - ref[i]);
        se += d * d;
        max_abs = std::max(max_abs, d);
        if (d > 8 * tol * (std::fabs(ref[i]) + rms)) { outliers++; if (first_bad == n) first_bad = i; }
    }
    const double rel = std::sqrt(se) / std::max(std::sqrt(sr), 1e-30);
    const bool ok = nonfinite == 0 && outliers == 0 && rel <= tol;
    (ok ? check_state().passed : check_state().failed)++;
    printf("%s %s: rel_err=%.3e max_abs=%.3e (tol %.1e)\n", ok ? "PASS" : "FAIL", name.c_str(), rel, max_abs, tol);
    if (!ok && first_bad < n)
        printf("    %zu non-finite, %zu outliers; first at [%zu]: got %.6g, want %.6g\n", nonfinite, outliers,
               first_bad, out[first_bad], ref[first_bad]);
    return ok;
}

// ----------------------------------------------------------------------------------------------
// CHECK_NO_TIMING=1 skips the timing runs (e.g. under compute-sanitizer, where they would crawl).
inline bool timing_enabled() {
    const char* e = getenv("CHECK_NO_TIMING");
    return !(e && *e && strcmp(e, "0") != 0);
}
// Holds a stream: one thread spins until `ns` nanoseconds of the GPU's global timer have passed.
__global__ void hold_stream_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { __nanosleep(1000); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
// CHECK_SYNC_TIMING=1: time each run from an idle GPU (the previous way; see median_ms).
inline bool sync_timing() {
    const char* e = getenv("CHECK_SYNC_TIMING");
    return e && *e && strcmp(e, "0") != 0;
}
// Median milliseconds over `reps` runs of fn() (which launches on ctx->stream), after warm-up runs.
// Each run is bracketed by its own pair of events. What the pair measures is the GPU's time for
// fn(), as in a training step, where the host runs ahead and the next kernel is always queued:
// a kernel launched onto an idle GPU would also be charged the host's launch latency (the time
// between the start event reaching the GPU and the launch behind it; ~5 us, which is 10 % of a
// 50 us attention kernel). So the runs are queued behind a kernel that holds the stream until the
// host has enqueued all of them (NVBench's "blocking kernel"); if the host was slower than the
// hold, the hold doubles and the runs are repeated. CHECK_SYNC_TIMING=1 times each run from an idle
// GPU instead (event, fn(), event, synchronize), which includes that latency.
template <class F>
inline float median_ms(Context* ctx, F&& fn, int reps = 25) {
    std::vector<cudaEvent_t> start(reps), stop(reps);
    for (int r = 0; r < reps; r++) {
        cudaCheck(cudaEventCreate(&start[r]));
        cudaCheck(cudaEventCreate(&stop[r]));
    }
    for (int i = 0; i < 3; i++) fn();
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    const bool sync_each = sync_timing();
    for (unsigned long long hold_ns = 5000000ull;; hold_ns *= 2) {
        const auto t0 = std::chrono::steady_clock::now();
        if (!sync_each) {
            hold_stream_kernel<<<1, 1, 0, ctx->stream>>>(hold_ns);
            cudaCheck(cudaGetLastError());
        }
        for (int r = 0; r < reps; r++) {
            cudaCheck(cudaEventRecord(start[r], ctx->stream));
            fn();
            cudaCheck(cudaEventRecord(stop[r], ctx->stream));
            if (sync_each) cudaCheck(cudaEventSynchronize(stop[r]));
        }
        const double enqueue_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        cudaCheck(cudaStreamSynchronize(ctx->stream));
        if (sync_each || enqueue_ns < 0.5 * hold_ns || hold_ns > 2000000000ull) break;  // else: the GPU may have waited for the host
    }
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; r++) {
        cudaCheck(cudaEventElapsedTime(&ms[r], start[r], stop[r]));
        cudaCheck(cudaEventDestroy(start[r]));
        cudaCheck(cudaEventDestroy(stop[r]));
    }
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}

// Timing with a TIME line: median_ms, then bandwidth and throughput from what fn() must move and
// compute. bytes: each input read once + each output written once; flops: the useful arithmetic.
template <class F>
inline float time_ms(Context* ctx, const char* name, double bytes, double flops, F&& fn, int reps = 25) {
    const float med = median_ms(ctx, fn, reps);
    printf("TIME %-46s %9.4f ms", name, med);
    if (bytes > 0) printf("  %8.1f GB/s", bytes / (med * 1e-3) / 1e9);
    if (flops > 0) printf("  %7.1f TFLOP/s", flops / (med * 1e-3) / 1e12);
    printf("\n");
    return med;
}

// sum (one float, zeroed first) += every element of x (n, a multiple of x128::size), read with
// ordinary 16-byte loads (as layernorm_forward reads its input): the sanitizer probes' plain reader
// (matmul --initcheck-probe, attention --memcheck-probe).
__global__ void sum_all_kernel(float* sum, const floatX* x, size_t n) {
    float acc = 0.0f;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size; i < n; i += (size_t)gridDim.x * blockDim.x * x128::size) {
        const x128 v = load128(x + i);
        for (int k = 0; k < x128::size; k++) acc += (float)v[k];
    }
    atomicAdd(sum, acc);
}

// Device-side fill for the timing runs (host generation of ~1e8 values would dominate the run).
template <class T>
__global__ void fill_uniform_kernel(T* d, size_t n, float lo, float hi, unsigned long long seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long z = (i + 1) * 0x9E3779B97F4A7C15ull + seed;  // splitmix64 finalizer
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        d[i] = (T)(lo + (hi - lo) * u);
    }
}
template <class T>
inline T* random_device(Context* ctx, size_t n, float lo, float hi) {
    T* d = dalloc<T>(n);
    fill_uniform_kernel<<<1024, 256, 0, ctx->stream>>>(d, n, lo, hi, (unsigned long long)rng()());
    launchCheck();
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    return d;
}

// Last line of every program: the counts, and the exit code (non-zero on any failure).
inline int check_finish() {
    sync();
    cudaCheck(cudaGetLastError());
    for (void* p : check_state().allocs) cudaCheck(cudaFree(p));
    check_state().allocs.clear();
    printf("%d passed, %d failed\n", check_state().passed, check_state().failed);
    return check_state().failed == 0 ? 0 : 1;
}
