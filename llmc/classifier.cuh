// The fused classifier: softmax + cross-entropy loss + the gradient of the logits, per row.
//   loss[row]   = logsumexp(logits[row, :V]) - logits[row, target]
//   dlogits     = (softmax(logits[row, :V]) - onehot(target)) * dloss;  0 in the padding columns V..Vp
// The probabilities are never stored: a row's max and sum of exponentials are found first, then
// the gradient is written over the logits IN PLACE. That avoids a (B,T,Vp) probability tensor,
// the largest activation of the model.
//
// What sets the speed. Per row the kernel must read Vp values and write Vp values; at GPT-2's
// vocabulary (Vp = 50304, bf16) that is 2 x 100 KB per row, 3.3 GB for a 16384-row chunk of the
// lm head, ~0.85 ms at the ~3.9 TB/s an H200 streams. Everything else has to hide under that:
//   - The row is read from HBM ONCE. A block copies its row into shared memory (100 KB in 16-bit
//     floats) with cp.async, and the three sweeps below (max, sum of exponentials, gradient) read
//     shared memory, not global memory. (The previous kernel, kept as fused_classifier_prev in
//     dev/cuda/classifier.cu, re-read the row from L2 for the gradient: 1.5x the L2 traffic.)
//   - Enough bytes in flight. HBM latency is ~1 us; to stream at 3.9 TB/s the chip needs ~4 MB of
//     reads in flight, ~30 KB per SM. cp.async copies global -> shared without going through
//     registers and without waiting for each copy, so a thread issues all of its ~13 16-byte
//     copies back to back: ~100 KB per block in flight at once. A plain load loop keeps only
//     what fits in registers in flight.
//   - Overlap. Each SM holds 2 blocks (2 x 100 KB of its 228 KB shared memory, 512 threads each);
//     while one block waits for its row, the other does arithmetic, and a row's two block-wide
//     reductions no longer leave the SM idle.
//   - The exponentials: 2 per value (one in the sum, one in the gradient), each ONE fused
//     multiply-add + ex2: e^(x - c) = 2^(x log2(e) - c log2(e)), with c log2(e) computed once.
//     The ex2 unit does 16 per clock per SM: ~0.4 ms per 16384 rows, half the memory time, hidden
//     because the two blocks of an SM are rarely in the same phase.
//   - Stores are streaming (st.global.cs): the 1.65 GB gradient cannot stay in the 50 MB L2 for the
//     next matmul anyway, so it should not evict anything on the way out.
// A row too large for that (on an H200: fp32 at GPT-2's vocabulary, 201 KB; 16-bit vocabularies
// over ~57K) keeps as much of itself in shared memory as still leaves room for 2 blocks per SM;
// the rest is read from global memory in each sweep (the later sweeps mostly hit L2).
#pragma once
#include <algorithm>
#include <type_traits>
#include "common.cuh"

namespace classifier {

constexpr int THREADS = 512;               // one block per row
constexpr int WARPS = THREADS / 32;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// A chunk: the K = x128::size values of 16 bytes, 8 (fp16/bf16) or 4 (fp32). The kernel moves a
// chunk as a uint4 of raw bits, four 32-bit words, and converts only where it computes: kept as
// an array of 8 separate 16-bit values, the compiler shuffles halves between registers (PRMT)
// wherever two loads of a chunk (shared or global memory) meet.
constexpr int K = x128::size;
// The same 32 bits seen as another type (a register move, no conversion).
template <class To, class From>
__device__ inline To bits_as(const From& f) {
    static_assert(sizeof(To) == sizeof(From), "bits_as: sizes differ");
    To t;
    memcpy(&t, &f, sizeof(To));
    return t;
}

// The K values of a chunk as floats (exact). bf16 -> fp32 is a 16-bit shift of the bits (one
// integer op per value); fp16 converts pairs.
__device__ inline void unpack(const uint4& c, float (&f)[K]) {
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
    for (int q = 0; q < 4; q++) {
        if constexpr (std::is_same_v<floatX, __nv_bfloat16>) {
            f[2 * q] = __uint_as_float(w[q] << 16);              // element 2q: the low half
            f[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);  // element 2q+1: the high half
        } else if constexpr (std::is_same_v<floatX, __half>) {
            const float2 t = __half22float2(bits_as<__half2>(w[q]));
            f[2 * q] = t.x;
            f[2 * q + 1] = t.y;
        } else {
            f[q] = __uint_as_float(w[q]);
        }
    }
}
// The max of a chunk. The max of 16-bit values is exact in 16 bits, so it is taken on packed pairs
// (one instruction per 2 values) and only the last pair is converted.
__device__ inline float chunk_max(const uint4& c) {
    if constexpr (sizeof(floatX) == 2) {
        using Pair = std::conditional_t<std::is_same_v<floatX, __nv_bfloat16>, __nv_bfloat162, __half2>;
        const Pair m = __hmax2(__hmax2(bits_as<Pair>(c.x), bits_as<Pair>(c.y)),
                               __hmax2(bits_as<Pair>(c.z), bits_as<Pair>(c.w)));
        return fmaxf((float)m.x, (float)m.y);
    } else {
        return fmaxf(fmaxf(__uint_as_float(c.x), __uint_as_float(c.y)),
                     fmaxf(__uint_as_float(c.z), __uint_as_float(c.w)));
    }
}
// Rounds K floats to floatX (round to nearest) and stores them with one streaming 16-byte store
// (st.global.cs, evict-first: the gradient is written once and not read again while in L2).
// Built as four 32-bit words so that fp16/bf16 pairs are converted and packed by one instruction.
__device__ inline void store_cs(floatX* p, const float (&d)[K]) {
    uint32_t w[4];
    for (int q = 0; q < 4; q++) {
        if constexpr (std::is_same_v<floatX, __nv_bfloat16>) {
            w[q] = bits_as<uint32_t>(__floats2bfloat162_rn(d[2 * q], d[2 * q + 1]));
        } else if constexpr (std::is_same_v<floatX, __half>) {
            w[q] = bits_as<uint32_t>(__floats2half2_rn(d[2 * q], d[2 * q + 1]));
        } else {
            w[q] = __float_as_uint(d[q]);
        }
    }
    __stcs(reinterpret_cast<int4*>(p), make_int4((int)w[0], (int)w[1], (int)w[2], (int)w[3]));
}

// ----------------------------------------------------------------------------------------------
// Kernels

// One block of THREADS per row of logits (N, Vp), N = gridDim.x. Reads logits (N, Vp) and
// targets (N); writes losses (N) fp32; if dloss != 0, overwrites logits IN PLACE with
// (softmax - onehot) * dloss (dloss = d(total loss)/d(loss[row]), e.g. scale/(B*T)), zeros in
// the padding columns V..Vp-1. With dloss == 0 the logits are not written at all.
// Requires Vp * sizeof(floatX) % 16 == 0 (16-byte chunks; the launcher checks it).
// Dynamic shared memory: 2 * WARPS floats (the reductions), then the row's first `cached` chunks
// (classifier_cached_chunks(): normally all ceil(V / K) chunks that hold columns < V).
// Thread t owns chunks t, t + THREADS, t + 2*THREADS, ...: a warp's 32 chunks are 512 contiguous
// bytes (coalesced in global memory, conflict-free in shared memory), and in the three sweeps a
// thread reads only the chunks it copied itself, so they need no barrier after the copy; thread
// 0's read of the target's logit comes after the reductions' __syncthreads.
// Deterministic: every sum is over a fixed set in a fixed order.
__global__ void __launch_bounds__(THREADS, 2)
    cross_entropy_dlogits_kernel(floatX* logits, float* losses, const int* targets, float dloss, int V, int Vp,
                                 int cached) {
    extern __shared__ __align__(16) unsigned char smem[];
    float* reduce_smem = reinterpret_cast<float*>(smem);                     // 2 * WARPS floats
    uint4* row_smem = reinterpret_cast<uint4*>(smem + 2 * WARPS * sizeof(float));  // 128 B on: aligned

    const size_t row = blockIdx.x;
    floatX* x = logits + row * Vp;
    const int chunks = Vp / K;                 // the whole row, padding included
    const int valid_chunks = (V + K - 1) / K;  // chunks with at least one column < V
    const int target = targets[row];

    for (int i = threadIdx.x; i < cached; i += THREADS) cp_async16(row_smem + i, x + i * K);
    cp_async_commit();
    cp_async_wait_all();
    // chunk i of the row: from shared memory if it was copied there, else from global memory
    const uint4* xg = reinterpret_cast<const uint4*>(x);
    auto chunk = [&](int i) { return i < cached ? row_smem[i] : xg[i]; };

    // Sweep 1: this thread's max. Only the one chunk that straddles V needs per-column tests.
    float m = -INFINITY;
    for (int i = threadIdx.x; i < valid_chunks; i += THREADS) {
        const uint4 v = chunk(i);
        if ((i + 1) * K <= V) {
            m = fmaxf(m, chunk_max(v));
        } else {
            float f[K];
            unpack(v, f);
            for (int k = 0; k < K; k++) if (i * K + k < V) m = fmaxf(m, f[k]);
        }
    }
    // Sweep 2: this thread's sum of exp(x - m), one FMA + ex2 per value; each chunk's terms are
    // added as a tree (independent adds, instead of a chain of dependent ones).
    const float m_log2 = m == -INFINITY ? 0.0f : m * LOG2E;  // a thread without columns: s = 0
    float s = 0.0f;
    for (int i = threadIdx.x; i < valid_chunks; i += THREADS) {
        float e[K];
        unpack(chunk(i), e);
        if ((i + 1) * K <= V) {
            for (int k = 0; k < K; k++) e[k] = exp2f(fmaf(e[k], LOG2E, -m_log2));
        } else {
            for (int k = 0; k < K; k++) e[k] = i * K + k < V ? exp2f(fmaf(e[k], LOG2E, -m_log2)) : 0.0f;
        }
        for (int w = K / 2; w > 0; w /= 2)
            for (int k = 0; k < w; k++) e[k] += e[k + w];
        s += e[0];
    }

    // The row's statistics, in log2 units (2^(x log2 e) = e^x): its max M2 = max * log2(e) first
    // (shuffles across the warp, then the warps' maxima through shared memory), then its sum S of
    // 2^(x log2 e - M2), each thread's s rescaled once from its own max to the row's. Two block
    // reductions of one float, rather than one of (max, sum) pairs, whose every merge costs two
    // exponentials: with 16 warps that was ~20% on top of the 2 exponentials per value.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float* warp_max_smem = reduce_smem;
    float* warp_sum_smem = reduce_smem + WARPS;
    float M = warp_max(m);
    if (lane == 0) warp_max_smem[warp] = M;
    __syncthreads();  // also: every thread's cp.async copies are now visible to every thread
    M = warp_max_smem[0];
    for (int w = 1; w < WARPS; w++) M = fmaxf(M, warp_max_smem[w]);
    const float M2 = M * LOG2E;
    // m == M gives m_log2 == M2 exactly (the same product): that thread's scale is exactly 1.
    // A NaN logit makes s, hence S and the loss, NaN, as it should. The max skips NaNs (fmaxf,
    // __hmax2), so a thread whose columns are ALL NaN (or NaN and -inf) keeps m = -inf, like a
    // thread without columns: its s (NaN; 0 for the others) is added as it is, not dropped.
    float S = warp_sum(m == -INFINITY ? s : s * exp2f(m_log2 - M2));
    if (lane == 0) warp_sum_smem[warp] = S;
    __syncthreads();
    S = warp_sum_smem[0];
    for (int w = 1; w < WARPS; w++) S += warp_sum_smem[w];
    const float lse2 = M2 + log2f(S);  // log2 of sum(2^(x log2 e)): lse = lse2 * ln 2
    if (threadIdx.x == 0) {
        const floatX xt = target / K < cached ? reinterpret_cast<const floatX*>(row_smem)[target] : x[target];
        losses[row] = lse2 * LN2 - (float)xt;
    }
    if (dloss == 0.0f) return;
    // Part of the row is read from global memory: thread 0 must have read x[target] before any
    // thread overwrites it; and each thread reads its global chunks before it writes them.
    if (cached < valid_chunks) __syncthreads();

    // Sweep 3: the gradient, written over the row. Only the chunk holding the target and the one
    // straddling V need per-column tests; padding chunks are zeros without reading anything.
    for (int i = threadIdx.x; i < chunks; i += THREADS) {
        const int c0 = i * K;
        float d[K];
        if (c0 >= V) {
            for (int k = 0; k < K; k++) d[k] = 0.0f;
        } else {
            unpack(chunk(i), d);
            if (c0 + K <= V && (unsigned)(target - c0) >= (unsigned)K) {
                for (int k = 0; k < K; k++) d[k] = exp2f(fmaf(d[k], LOG2E, -lse2)) * dloss;
            } else {
                for (int k = 0; k < K; k++) {
                    const int col = c0 + k;
                    const float p = col < V ? exp2f(fmaf(d[k], LOG2E, -lse2)) : 0.0f;
                    d[k] = (p - (col == target ? 1.0f : 0.0f)) * dloss;
                }
            }
        }
        store_cs(x + c0, d);
    }
}

// loss_sum (1) += sum of losses (N), in a fixed order (one block, strided then tree): deterministic.
// Not in place; losses only read.
__global__ void loss_accumulate_kernel(float* loss_sum, const float* losses, int N) {
    __shared__ float shared[32];
    float s = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += losses[i];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) *loss_sum += s;
}

}  // namespace classifier

// ----------------------------------------------------------------------------------------------
// Launchers

// How many of a row's ceil(V / x128::size) 16-byte chunks cross_entropy_dlogits_kernel keeps in
// shared memory: all of them if they fit in what leaves room for 2 blocks per SM (GPT-2's
// vocabulary in fp16/bf16: 100 KB of the H200's 228 KB), else as many as fit there (fp32: 57%).
inline int classifier_cached_chunks(const Context* ctx, int V) {
    const size_t reduce_bytes = 2 * classifier::WARPS * sizeof(float);
    const size_t half_sm = ctx->props.sharedMemPerMultiprocessor / 2 - ctx->props.reservedSharedMemPerBlock;
    const size_t per_block = std::min((size_t)ctx->props.sharedMemPerBlockOptin, half_sm);
    const size_t fit = per_block > reduce_bytes ? (per_block - reduce_bytes) / sizeof(x128) : 0;
    return (int)std::min(ceil_div((size_t)V, x128::size), fit);
}

// losses (N) <- cross-entropy of logits (N, Vp) against targets (N); loss_sum (1) += their sum.
// With dloss != 0, logits are overwritten in place by dloss * d(loss)/d(logits) (0 in padding).
inline void fused_classifier(Context* ctx, floatX* logits, float* losses, float* loss_sum, const int* targets,
                             float dloss, int N, int V, int Vp) {
    using namespace classifier;
    if (V < 1 || V > Vp || Vp % x128::size != 0) {
        fprintf(stderr, "fused_classifier: need 1 <= V <= Vp and Vp a multiple of %d (V=%d Vp=%d)\n",
                x128::size, V, Vp);
        exit(EXIT_FAILURE);
    }
    if (N <= 0) return;
    const int cached = classifier_cached_chunks(ctx, V);
    const size_t smem = 2 * WARPS * sizeof(float) + (size_t)cached * sizeof(x128);
    cudaCheck(cudaFuncSetAttribute(cross_entropy_dlogits_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    // the largest shared-memory carveout of the unified L1/shared memory: 2 blocks (rows) per SM
    cudaCheck(cudaFuncSetAttribute(cross_entropy_dlogits_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared));
    cross_entropy_dlogits_kernel<<<N, THREADS, smem, ctx->stream>>>(logits, losses, targets, dloss, V, Vp, cached);
    launchCheck();
    loss_accumulate_kernel<<<1, 1024, 0, ctx->stream>>>(loss_sum, losses, N);
    launchCheck();
}
