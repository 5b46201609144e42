// The Hopper (sm_90a) machinery the wgmma attention kernels are built from: PTX wrappers for
// mbarriers, TMA (the copy engine) and warpgroup MMA, shared-memory matrix descriptors, fragment
// packing, output tiles on their way out through TMA, the producer/consumer ring protocol, and the
// host-side TMA descriptors of the tensors. What the kernels do with them:
// flash_attention_wgmma.cuh (the forward, and why wgmma) and flash_attention_wgmma_backward.cuh.
//
// 128-byte swizzle: a tile row is 64 halves = 128 bytes = 8 chunks of 16 bytes; chunk c of row r
// lives at chunk position c ^ (r % 8) (the same pattern as flash::swz). The tensor cores read
// 8 rows x 16 bytes at a time; without the XOR those would sit in the same 4 banks.
//
// Matrix descriptor (64 bits, PTX ISA "matrix-descriptor-encode"):
//   bits  0-13 start address >> 4        bits 16-29 leading-dimension byte offset >> 4 (LBO)
//   bits 32-45 stride-dimension byte offset >> 4 (SBO)   bits 49-51 base offset (0: 1024-aligned)
//   bits 62-63 swizzle: 1 = 128-byte swizzle.
//   K-major operand (Q as A, K as B of S = Q K^T; rows = M or N, 64 contiguous halves of the
//   reduction dim each): SBO = 1024 = distance between consecutive 8-row groups; LBO is not used
//   by swizzled K-major layouts (the 16-element K slice lies inside one 128-byte row), set to 1
//   (encoded) as CUTLASS does. The k-th 16-wide slice (k = 0..3) starts 32*k bytes into the row:
//   the start address advances by 32 bytes; the hardware applies the XOR on the final address,
//   which is why the tile must be 1024-aligned.
//   MN-major operand (V as B of O = P V; B[k][n] = V[key k][dim n], rows of the smem tile are k):
//   one 128-byte swizzle atom is 64 n-values wide x 8 k-rows; the k-direction stride, 8-key
//   groups 1024 bytes apart, is SBO; LBO is the distance between 64-wide n atoms, used when N > 64
//   (the forward's N = 72 finds its columns 64..71 in a separate tile LBO bytes on; measured: with
//   the two swapped it fails). desc_mnmajor (N = 64) sets both to 1024. The kk-th 16-key slice
//   starts 2048*kk bytes in (two 1024-byte groups).
//
// Accumulator fragment of wgmma m64nNk16 (fp32): warp w of the warpgroup holds rows 16w..16w+15;
// lane (g = lane/4, t = lane%4) holds, for each 8-column chunk i = 0..N/8-1, d[4i + e] at row
// 16w + g + 8*(e/2), column 8i + 2t + (e&1) -- the mma.m16n8 layout repeated along N. The A
// operand from registers uses the mma.m16n8k16 A layout per warp, so the S fragment converts to
// P's A fragment in registers (no shared memory round trip), as in flash::forward_kernel.
//
#pragma once
#include <cuda.h>         // CUtensorMap (the TMA descriptors); the driver function is looked up at run time
#include <cudaTypedefs.h>
#include "common.cuh"
#include "flash_attention.cuh"  // flash::pack2, flash::HS

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)  // sm_90a fp16/bf16 builds only

#if defined(ENABLE_BF16)
#define WGMMA_AB_TYPE "bf16"
#else
#define WGMMA_AB_TYPE "f16"
#endif

// The accumulator operands of a wgmma: one "+f" (read and written) register per fp32 element of
// the fragment, 32 for N = 64, 64 for N = 128.
#define WGMMA_ACC8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_ACC32(d) WGMMA_ACC8(d, 0), WGMMA_ACC8(d, 8), WGMMA_ACC8(d, 16), WGMMA_ACC8(d, 24)
#define WGMMA_ACC64(d) WGMMA_ACC32(d), WGMMA_ACC8(d, 32), WGMMA_ACC8(d, 40), WGMMA_ACC8(d, 48), WGMMA_ACC8(d, 56)

namespace flash_wgmma {

// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_90a). The device code in this namespace is only ever executed inside the
// kernels' __CUDA_ARCH_FEAT_SM90_ALL branch (make_tile_map, after it, is host code).

// mbarrier: a shared-memory 64-bit barrier with an expected arrival count and a phase bit. Once
// `count` arrivals have happened the phase completes (flips) and the count re-arms. Waiters name
// the parity of the phase they wait for: the n-th completion (n = 0, 1, ...) has parity n & 1.
__device__ inline void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ inline void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Safety net: a protocol bug (a wrong parity, a missing arrival) would hang the GPU forever;
// instead, after 2^26 polls (each try_wait suspends for a while: seconds to a minute in all) the
// thread traps, which fails the launch with an "unspecified launch failure"-type error.
__device__ inline void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    uint32_t polls = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        if (!done && ++polls == (1u << 26)) __trap();  // no printf: a call would serialize the wgmma pipeline
    } while (!done);
}
// One arrival on `bar` once all cp.async copies this thread issued so far have landed. "noinc":
// the arrival counts against the count given at init (in dK/dV: the 32 lanes of the producer's
// first warp), nothing is added.
__device__ inline void cp_async_mbar_arrive(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Ordinary stores (st.shared) write shared memory through the "generic proxy"; TMA and wgmma read
// it through the "async proxy". This fence orders the two for the executing thread: after it (and
// a barrier for the other threads' writes), what was stored is visible to a TMA store reading it.
// Ordinary READS count too: a thread that read a TMA-loaded buffer with ordinary loads fences
// before it releases the buffer to a TMA refill (the dQ kernel's dO and O tiles).
// (Tiles that TMA itself loaded need no fence before wgmma reads them: both are async proxy; nor
// does a TMA store's source before ordinary stores rewrite it: cp.async.bulk.wait_group.read.)
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ inline void st_shared_u32(uint32_t addr, uint32_t v) { asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory"); }

// TMA (the Tensor Memory Accelerator): one thread hands the copy engine a whole tile -- a box of a
// tensor described by a CUtensorMap built on the host (make_tile_map) -- and the engine moves it
// between global and shared memory by itself, in the 128-byte swizzled layout the wgmma
// descriptors read. What that replaces: 16-byte cp.async copies issued by 128 producer threads,
// ~17 instructions each with their address arithmetic, which went through the same MIO queue as
// the consumers' exponentials (ncu: the producer issued 22 % of the forward's instructions).
// Coordinates are (column, row, batch) of a (B, T, W) tensor, W innermost; rows >= T of a batch
// are out of bounds: loads fill them with zeros, stores skip them.
// Load a box into shared memory at dst; the bytes count against the transaction count of the
// mbarrier `bar` (see mbar_arrive_expect_tx), which completes once they have all landed.
__device__ inline void tma_load(uint32_t dst, const CUtensorMap* map, int col, int row, int batch, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(dst), "l"(map), "r"(col), "r"(row), "r"(batch), "r"(bar) : "memory");
}
// One arrival on `bar` that also announces `bytes` more transaction bytes: the phase completes
// when every expected arrival has happened AND that many bytes have landed.
__device__ inline void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Store the box at shared address src to global memory (asynchronously: the bulk group of the
// issuing thread tracks it). The writes to src must be fenced (fence_proxy_async) and synced first.
__device__ inline void tma_store(const CUtensorMap* map, uint32_t src, int col, int row, int batch) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 ::"l"(map), "r"(col), "r"(row), "r"(batch), "r"(src) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Wait until this thread's bulk stores have read their shared memory (the buffer may be rewritten) /
// have completed.
__device__ inline void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ inline void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// A barrier among the `threads` threads (a multiple of 32) that use barrier number id (1..15; 0 is
// __syncthreads'): one warpgroup syncs without stopping the others.
__device__ inline void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>  // wait until at most N committed groups of this warpgroup are still running
__device__ inline void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// The compiler must not read (or reuse) accumulator registers across a wgmma_wait: this empty asm
// "redefines" each register after the wait, so every later use depends on it.
template <int N>
__device__ inline void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}

// 128-byte-swizzle descriptor for a tile at shared address `addr` (1024-aligned, plus the 32-byte
// steps along K of a K-major operand).
__device__ inline uint64_t make_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    uint64_t d = 0;
    d |= (uint64_t)((addr >> 4) & 0x3FFF);
    d |= (uint64_t)((lbo_bytes >> 4) & 0x3FFF) << 16;
    d |= (uint64_t)((sbo_bytes >> 4) & 0x3FFF) << 32;
    d |= (uint64_t)1 << 62;  // 128-byte swizzle
    return d;
}
__device__ inline uint64_t desc_kmajor(uint32_t addr) { return make_desc(addr, 16, 1024); }
__device__ inline uint64_t desc_mnmajor(uint32_t addr) { return make_desc(addr, 1024, 1024); }

// d (64 x 128 fp32, the accumulator fragment) (+)= A (64 x 16, smem desc) * B (16 x 128, smem desc, K-major).
// scale_d = 0: d = A*B (the old d is ignored), 1: d += A*B. Asynchronous: see wgmma_commit / wgmma_wait.
__device__ inline void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : WGMMA_ACC64(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (64 x 64 fp32) += A (64 x 16, registers: a0..a3 as in mma.m16n8k16, warp w of the warpgroup
// holding rows 16w..16w+15) * B (16 x 64, smem desc, MN-major: imm-trans-b = 1). Asynchronous.
__device__ inline void wgmma_m64n64k16_rs_tb(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : WGMMA_ACC32(d)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "n"(1));
}

// The same with N = 72: d (64 x 64) and d2 (64 x 8, columns 64..71: d2[e] at row 16w + g + 8*(e/2),
// column 64 + 2t + (e&1)) += A * B, B (16 x 72) MN-major as two 64-wide atoms, the second LBO
// bytes after the first (the descriptor's bits 16-29).
__device__ inline void wgmma_m64n72k16_rs_tb(float (&d)[32], float (&d2)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n72k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}, {%36, %37, %38, %39}, %40, p, 1, 1, 1;\n}\n"
        : WGMMA_ACC32(d),
          "+f"(d2[0]), "+f"(d2[1]), "+f"(d2[2]), "+f"(d2[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b));
}

// 64 x 64 fp32 accumulator (+)= A (64 x 16, smem desc) * B (16 x 64, smem desc, K-major).
__device__ inline void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : WGMMA_ACC32(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// ---------------------------------------------------------------------------------------------
// The pieces both kernels share.

// An fp32 accumulator fragment (64 rows x 2N columns, chunk i = columns 8i..8i+7 at acc[4i + e])
// as floatX A operands of the next product over those columns: k-step kk covers chunks 2kk (a0:
// row g, a1: row g+8) and 2kk+1 (a2: row g, a3: row g+8), exactly the mma.m16n8k16 A layout, so
// P and dS go from one product to the next without touching shared memory.
template <int N>
__device__ inline void pack_a_step(uint32_t (&a)[N / 2], const float (&acc)[N], int kk) {  // k-step kk alone
    a[4 * kk + 0] = flash::pack2(acc[8 * kk + 0], acc[8 * kk + 1]);
    a[4 * kk + 1] = flash::pack2(acc[8 * kk + 2], acc[8 * kk + 3]);
    a[4 * kk + 2] = flash::pack2(acc[8 * kk + 4], acc[8 * kk + 5]);
    a[4 * kk + 3] = flash::pack2(acc[8 * kk + 6], acc[8 * kk + 7]);
}
template <int N>
__device__ inline void pack_a_frags(uint32_t (&a)[N / 2], const float (&acc)[N]) {
#pragma unroll
    for (int kk = 0; kk < N / 8; kk++) pack_a_step(a, acc, kk);
}
// A warpgroup's 64 x 64 output tile leaves through shared memory: its fp32 accumulator fragment,
// scaled (rows g: scale0, rows g + 8: scale1), is written as floatX into the 128-byte-swizzled
// 8 KB tile at `tile`, which then goes out as ONE TMA store. Written straight from the fragment it
// would be 16 four-byte global stores per thread, each touching 8 rows, which clog the memory
// queue the next item's exponentials wait in (ncu on the forward: ~7 % of the consumers' time).
// Protocol, per warpgroup (named barrier `bar`, thread tid 0 issues): out_tile_acquire (the
// previous store from this tile has read it), out_tile_write for each fragment, out_tile_publish
// (fence + barrier), then tid 0: tma_store; once at the end tid 0: tma_store_wait_all.
__device__ inline void out_tile_acquire(int tid, int bar) {
    if (tid == 0) tma_store_wait_read();
    named_barrier_sync(bar, 128);
}
__device__ inline void out_tile_write(uint32_t tile, const float (&acc)[32], float scale0, float scale1, int warp, int g, int t) {
    // Row r = 16 warp + g (+ 8: 1024 bytes on), dims 8i + 2t, +1: 16-byte chunk i ^ (r % 8) = i ^ g.
    // The tile is 1024-aligned, so the chunk bits (4..6) of `row` hold g, and XOR-ing i << 4 in
    // swizzles. The empty asm makes `row` opaque: otherwise the compiler computes the 16 addresses
    // (which depend only on the thread) once, before the main loop, and keeps them in registers
    // there, which pushed the dK/dV kernel into spills.
    uint32_t row = tile + (16 * warp + g) * 128 + (g << 4) + 4 * t;
    asm volatile("" : "+r"(row));
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float sc = h ? scale1 : scale0;
#pragma unroll
        for (int i = 0; i < 8; i++)
            st_shared_u32((row + 1024 * h) ^ (i << 4), flash::pack2(acc[4 * i + 2 * h] * sc, acc[4 * i + 2 * h + 1] * sc));
    }
}
__device__ inline void out_tile_publish(int bar) {
    fence_proxy_async();  // written through the generic proxy; TMA reads through the async one
    named_barrier_sync(bar, 128);
}
// The barriers of a persistent kernel and the protocol on them, in tile and item numbers. In
// shared memory at `full`: full[STAGES] | empty[STAGES] | buf_empty[2] (8 bytes each).
//   The ring: tile number `it`, counted over all of the CTA's items, lives in stage it % STAGES
//   and is that stage's (it / STAGES)-th use. full[s] completes when the producer's copies into
//   stage s have landed (its TMA bytes, and any cp.async arrivals: see init); empty[s] when all 256
//   consumer threads are done with it.
//   The double-buffered part (Q of the forward; Q, dO, O of dQ; K, V of dK/dV): item number n
//   uses buffer n & 1, its (n / 2)-th use; buf_empty[b] completes when the 256 consumer threads
//   are done with it.
// An mbarrier phase n has parity n & 1 (see mbar_wait).
template <int STAGES>
struct Ring {
    uint32_t full;
    __device__ uint32_t empty() const { return full + 8 * STAGES; }
    __device__ uint32_t buf_empty() const { return full + 16 * STAGES; }
    __device__ uint32_t full_of(int it) const { return full + 8 * (it % STAGES); }
    // Thread 0 initializes every barrier; then the whole CTA syncs. full_arrivals: how many arrivals
    // complete a stage: 1 when one thread fills it by TMA (mbar_arrive_expect_tx on full_of(it),
    // then the tma_loads: the forward and dQ), 33 in dK/dV (that TMA arrival, plus the 32 lanes
    // whose cp.async copies bring lse and delta).
    __device__ void init(int full_arrivals) const {
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                mbar_init(full + 8 * s, full_arrivals);
                mbar_init(empty() + 8 * s, 256);
            }
            mbar_init(buf_empty(), 256);
            mbar_init(buf_empty() + 8, 256);
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        __syncthreads();
    }
    // Producer: wait until tile it's stage is free (the consumers are done with tile it - STAGES) /
    // until item n's buffer is free (done with item n - 2); say tile it's copies are issued (the
    // barrier completes when they have landed).
    __device__ void wait_free(int it) const {
        if (it >= STAGES) mbar_wait(empty() + 8 * (it % STAGES), (it / STAGES - 1) & 1);
    }
    __device__ void wait_buffer_free(int n) const {
        if (n >= 2) mbar_wait(buf_empty() + 8 * (n & 1), (n / 2 - 1) & 1);
    }
    __device__ void filled(int it) const { cp_async_mbar_arrive(full + 8 * (it % STAGES)); }
    // Consumers: wait until tile it has landed; release tile it's stage / item n's buffer; skip a
    // tile this warpgroup does not use (released once full, so that the arrival cannot count
    // towards the stage's previous use).
    __device__ void wait_full(int it) const { mbar_wait(full + 8 * (it % STAGES), (it / STAGES) & 1); }
    __device__ void release(int it) const { mbar_arrive(empty() + 8 * (it % STAGES)); }
    __device__ void release_buffer(int n) const { mbar_arrive(buf_empty() + 8 * (n & 1)); }
    __device__ void skip(int it) const {
        wait_full(it);
        release(it);
    }
};
// The 1024-aligned start of the dynamic shared memory (the 128-byte swizzle pattern repeats every
// 1024 bytes and the descriptors assume it starts at 0; the declared alignment of dynamic shared
// memory is not something to rely on, so every kernel's size includes 1024 bytes of slack).
__device__ inline uint32_t smem_base_1024(const void* smem_raw) { return (smem_u32(smem_raw) + 1023u) & ~1023u; }

}  // namespace flash_wgmma

// The TMA descriptor of a (B, T, W) floatX tensor at `base` (rows of W elements, W innermost) for
// boxes of box_rows rows x 64 columns, 128-byte swizzled in shared memory (the layout of every
// tile here); out-of-bounds rows (>= T within a batch) read as zeros and are not written.
// cuTensorMapEncodeTiled is a driver function: it is looked up through the runtime once per
// context, so the build links no libcuda.
inline CUtensorMap make_tile_map(Context* ctx, const floatX* base, int B, int T, int W, int box_rows) {
    if (!ctx->tensor_map_encode) {
        cudaDriverEntryPointQueryResult found;
        cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ctx->tensor_map_encode, 12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !ctx->tensor_map_encode) {
            fprintf(stderr, "attention: the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)\n");
            exit(EXIT_FAILURE);
        }
    }
#if defined(ENABLE_BF16)
    const CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
#else
    const CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
#endif
    const cuuint64_t dims[3] = {(cuuint64_t)W, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[2] = {(cuuint64_t)W * sizeof(floatX), (cuuint64_t)T * W * sizeof(floatX)};  // bytes, dims 1 and 2
    const cuuint32_t box[3] = {(cuuint32_t)flash::HS, (cuuint32_t)box_rows, 1}, unit[3] = {1, 1, 1};
    CUtensorMap map;
    const CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)ctx->tensor_map_encode)(
        &map, type, 3, (void*)base, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "attention: cuTensorMapEncodeTiled failed (%d) for a (%d, %d, %d) tensor at %p, box %d x 64\n", (int)r, B, T, W, (const void*)base, box_rows);
        exit(EXIT_FAILURE);
    }
    return map;
}

#endif  // USE_WGMMA && !ENABLE_FP32
