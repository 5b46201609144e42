// Shared by every CUDA file of the project (trainer, test, dev/cuda checks):
//   - floatX, the one floating type of weights/activations/gradients, chosen at compile time;
//   - cudaCheck / cublasCheck / ncclCheck: every CUDA, cuBLAS and NCCL call is checked (the
//     collectives of training through llmc/comm.cuh's comm_nccl_check, which names the rank);
//   - launchCheck(): called after every <<<>>> launch (a cudaLaunchKernelEx is in cudaCheck
//     instead), so a bad launch is reported where it happened;
//   - gpu_for_rank: which GPU a process uses, and one line saying why none can (no GPU, or one this
//     build has no code for);
//   - Packed128: 16-byte vector loads/stores, the access width that saturates HBM;
//   - Context: stream, cuBLASLt handle + workspace, device properties. No mutable globals.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cctype>
#include <string>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#ifdef USE_NCCL
#include <nccl.h>
#endif

// ----------------------------------------------------------------------------------------------
// Precision. FP16 is the default (Makefile PRECISION=FP16|BF16|FP32 defines one of these).
// Accumulations that need range (LayerNorm statistics, softmax, loss, norms, optimizer state)
// are fp32 whatever floatX is.
#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
constexpr int PRECISION_CODE = 0;  // as checkpoints record it
constexpr cudaDataType_t CUBLAS_FLOATX = CUDA_R_32F;
#elif defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
constexpr int PRECISION_CODE = 2;
constexpr cudaDataType_t CUBLAS_FLOATX = CUDA_R_16BF;
#else
#ifndef ENABLE_FP16
#define ENABLE_FP16
#endif
typedef __half floatX;
#define PRECISION_NAME "fp16"
constexpr int PRECISION_CODE = 1;
constexpr cudaDataType_t CUBLAS_FLOATX = CUDA_R_16F;
#endif
// Only the fp16 build needs loss scaling: bf16 has fp32's exponent range, fp32 is fp32.
constexpr bool USES_LOSS_SCALING = sizeof(floatX) == 2 && CUBLAS_FLOATX == CUDA_R_16F;

// ----------------------------------------------------------------------------------------------
// Error checking: print where, what, and exit. These are for CUDA/library failures (bugs or a
// broken machine), not for user errors, which get their own one-line messages.
inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "CUDA error at %s:%d: %s\n", file, line, cudaGetErrorString(err));
        exit(EXIT_FAILURE);
    }
}
inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuBLAS error at %s:%d: %s\n", file, line, cublasGetStatusString(status));
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)
// After a <<<...>>> launch: catches bad configurations (too many threads, too much shared memory).
#define launchCheck() cuda_check(cudaGetLastError(), __FILE__, __LINE__)
#ifdef USE_NCCL
inline void nccl_check(ncclResult_t status, const char* file, int line) {
    if (status != ncclSuccess) {
        fprintf(stderr, "NCCL error at %s:%d: %s\n", file, line, ncclGetErrorString(status));
        exit(EXIT_FAILURE);
    }
}
#define ncclCheck(status) nccl_check((status), __FILE__, __LINE__)
#endif

// ----------------------------------------------------------------------------------------------
// Which GPU, and can this build run on it? The two ways a GPU cannot work for a user get one line
// in the user's terms, instead of a CUDA error at some file:line (or "no kernel image is
// available" at the first launch): no GPU visible (no driver, a driver older than the CUDA this
// was built with, CUDA_VISIBLE_DEVICES hiding them), or a GPU this build has no code for. The
// Makefile compiles for one GPU_ARCH, as machine code only: sm_90a runs on compute capability 9.0
// alone (not 8.x, not 10.x), and sm_80 code does not run on 9.0.
__global__ void gpu_probe_kernel() {}

#define LLMC_STRINGIFY(...) #__VA_ARGS__
#define LLMC_XSTRINGIFY(...) LLMC_STRINGIFY(__VA_ARGS__)
// The architectures this binary has kernels for, "sm_90" from nvcc's __CUDA_ARCH_LIST__ "900".
inline std::string build_gpu_archs() {
    const std::string list = LLMC_XSTRINGIFY(__CUDA_ARCH_LIST__);
    std::string out, num;
    for (size_t i = 0; i <= list.size(); i++) {
        if (i < list.size() && isdigit((unsigned char)list[i])) { num += list[i]; continue; }
        if (!num.empty()) out += (out.empty() ? "sm_" : ", sm_") + std::to_string(std::stoi(num) / 10);
        num.clear();
    }
    return out;
}

// "13.0" from CUDA's 13000.
inline std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// The number of GPUs this process sees (> 0); false + one line when it sees none.
inline bool gpu_count(int* n, std::string* err) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();  // not sticky: clear it
    if (e == cudaSuccess && count > 0) { *n = count; return true; }
    int driver = 0, runtime = 0;   // for the message only: no driver leaves `driver` 0, which it reports
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    const char* visible = getenv("CUDA_VISIBLE_DEVICES");
    *err = std::string("no usable CUDA GPU: ") + (e == cudaSuccess ? "none found" : cudaGetErrorString(e)) + " (driver: " +
           (driver > 0 ? "supports CUDA " + cuda_version_text(driver) : std::string("none installed")) + "; this build: CUDA " +
           cuda_version_text(runtime) + (visible ? std::string("; CUDA_VISIBLE_DEVICES=\"") + visible + "\"" : std::string("")) + ")";
    return false;
}

// Can this build's kernels run on `device`? false + one line naming the GPU, its compute
// capability and the architectures this binary has code for.
inline bool gpu_runs_build(int device, std::string* err) {
    cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, device));
    cudaCheck(cudaSetDevice(device));
    cudaFuncAttributes a;
    const cudaError_t e = cudaFuncGetAttributes(&a, gpu_probe_kernel);
    (void)cudaGetLastError();  // the missing image is reported below, not left for the next check
    if (e == cudaSuccess) return true;
    const std::string cc = std::to_string(p.major) + std::to_string(p.minor);
    *err = "GPU " + std::to_string(device) + " (" + p.name + ") has compute capability " + std::to_string(p.major) + "." +
           std::to_string(p.minor) + ", and this build has code for " + build_gpu_archs() + " only (" + cudaGetErrorString(e) +
           "): rebuild on this machine (make clean, then make: the Makefile reads the GPU's compute capability) or with GPU_ARCH=" + cc;
    return false;
}

// A process's GPU: local_rank's among those visible (one rank per GPU; with more local ranks than
// GPUs they share, which NCCL refuses), checked as above.
inline bool gpu_for_rank(int local_rank, int* device, std::string* err) {
    int n = 0;
    if (!gpu_count(&n, err)) return false;
    *device = local_rank % n;
    return gpu_runs_build(*device, err);
}

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// ----------------------------------------------------------------------------------------------
// Packed128: 16 bytes of T viewed as an array, loaded/stored with one 128-bit instruction.
// Kernels that stream tensors use it so every thread moves 16 bytes per access.
template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
    __device__ T& operator[](int i) { return v[i]; }
    __device__ const T& operator[](int i) const { return v[i]; }
};
typedef Packed128<floatX> x128;
typedef Packed128<float> f128;

template <class T>
__device__ inline Packed128<T> load128(const T* p) { return *reinterpret_cast<const Packed128<T>*>(p); }
// Streaming load: the data is read once, don't keep it in L1/L2 at the expense of reused data.
template <class T>
__device__ inline Packed128<T> load128cs(const T* p) {
    int4 r = __ldcs(reinterpret_cast<const int4*>(p));
    return *reinterpret_cast<Packed128<T>*>(&r);
}
template <class T>
__device__ inline void store128(T* p, const Packed128<T>& x) { *reinterpret_cast<Packed128<T>*>(p) = x; }

// Asynchronous global -> shared copies (sm_80+): the data goes to shared memory without passing
// through registers, so a thread can issue many copies back to back and compute while they fly.
__device__ inline uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// 16 bytes; .cg caches them in L2 only. valid = false writes 16 zero bytes instead (rows past the end).
__device__ inline void cp_async16(void* smem, const void* gmem, bool valid = true) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(__cvta_generic_to_global(gmem)), "r"(valid ? 16 : 0));
}
// Closes a group of copies; cp_async_wait_all waits for every group this thread committed (its own
// copies only: other threads see them after a __syncthreads). The "memory" clobber keeps the
// compiler from moving shared-memory reads above the wait.
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Reductions over a warp (32 lanes) with shuffles; every lane gets the result.
__device__ inline float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o);
    return x;
}
__device__ inline float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, o));
    return x;
}
// Sum over a whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `shared` must hold 32 floats. Ends with a barrier so `shared` can be reused right away.
__device__ inline float block_sum(float x, float* shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    x = warp_sum(x);
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    x = lane < warps ? shared[lane] : 0.0f;
    x = warp_sum(x);
    __syncthreads();
    return x;
}

// ----------------------------------------------------------------------------------------------
// The run context: everything a launcher needs besides its tensors. One per process/GPU.
struct Context {
    int device = 0;
    cudaDeviceProp props{};
    cudaStream_t stream = nullptr;        // the compute stream: every kernel of a step but the reductions (Comm's stream)
    cublasLtHandle_t lt = nullptr;
    void* lt_workspace = nullptr;         // cuBLASLt scratch; 32 MiB is what Hopper kernels ask for
    size_t lt_workspace_size = 0;
    struct MatmulPlanCache* plans = nullptr;  // algorithm choices per matmul shape (matmul_plans.cuh)
    float* scratch = nullptr;             // fp32 partial sums of the deterministic reductions
    size_t scratch_elems = 0;
    void* tensor_map_encode = nullptr;    // the driver's cuTensorMapEncodeTiled (sm_90a attention's TMA), looked up on first use
};

// context_create / context_destroy live in matmul_plans.cuh: the context is mostly cuBLASLt state.

// The launches that `launches` makes on ctx->stream, recorded (stream capture: nothing runs) and
// instantiated as an executable CUDA graph, which cudaGraphLaunch then replays as one launch.
template <class F>
inline cudaGraphExec_t graph_capture(Context* ctx, F&& launches) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    launches();
    cudaCheck(cudaStreamEndCapture(ctx->stream, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    cudaCheck(cudaGraphDestroy(graph));
    return exec;
}

// ----------------------------------------------------------------------------------------------
// Host helpers for tests, checks and the sampler (one row of logits per sampled token): fp32 <->
// floatX copies between host and device.
// Both synchronize the device first: results of every stream are final before they are read.
inline void copy_to_device_as_floatX(floatX* dst, const float* src, size_t n) {
    cudaCheck(cudaDeviceSynchronize());
    floatX* tmp = (floatX*)malloc(n * sizeof(floatX));
    if (!tmp) { fprintf(stderr, "out of host memory (%zu elements)\n", n); exit(EXIT_FAILURE); }
    for (size_t i = 0; i < n; i++) tmp[i] = (floatX)src[i];
    cudaCheck(cudaMemcpy(dst, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize());
    free(tmp);
}
inline void copy_from_device_as_float(float* dst, const floatX* src, size_t n) {
    floatX* tmp = (floatX*)malloc(n * sizeof(floatX));
    if (!tmp) { fprintf(stderr, "out of host memory (%zu elements)\n", n); exit(EXIT_FAILURE); }
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(tmp, src, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    free(tmp);
}
