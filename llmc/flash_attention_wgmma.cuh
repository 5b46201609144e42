// Flash attention on Hopper's warpgroup MMA (wgmma), FlashAttention-3 style: causal, head size
// 64, fp16/bf16. This file: the machinery (PTX wrappers for wgmma, mbarriers and TMA, shared-memory
// descriptors, the TMA descriptors of the tensors, fragment packing, the output tiles) and the FORWARD;
// flash_attention_wgmma_backward.cuh builds the dQ and dK/dV kernels from the same pieces. They
// are alternatives to the mma.sync kernels of flash_attention.cuh with the same inputs and outputs
// (the backward's delta kernel is shared):
//   forward:  reads qkv (B,T,3,NH,64) as the qkv matmul writes it; writes out (B,T,NH,64) and
//             lse (B,NH,T) fp32 = natural-log log-sum-exp of the scaled scores;
//   dQ, dKdV: read qkv, dout (B,T,NH,64), lse, delta (B,NH,T); write the q part, resp. the k and
//             v parts, of dqkv.
// Used by attention_forward / attention_backward in builds for sm_90a (make GPU_ARCH=90, the
// default on Hopper: the Makefile then defines USE_WGMMA); other builds use the mma.sync kernels.
// Checked by dev/cuda/attention_check like every attention path (float64 CPU reference, the cuBLAS
// reference at B=1..4, T up to 2048, NH 12/25, bitwise-deterministic backward) and against the
// mma.sync kernels directly: dQ, dK, dV come out bit for bit the same (same products, same order).
// Measured on H200s, 2026-12-01 (B=64, T=1024, NH=12, TFLOP/s, bf16): forward 323-327 (mma.sync
// 214), dQ with delta 394-399 (mma.sync dQ alone 266-270), dK/dV 360-370 (218-220); B=8: forward
// 266-268, dQ 332-334, dK/dV 320-321. At the same 64K tokens and T=16384 (B=4): 415 / 475 / 469
// (attention_check --lengths). TMA loads and stores gave +14 % / +24 % / +8 % at B=64, T=1024
// (before: 282 / 310 / 325, a cp.async producer of 128 threads and per-thread global stores),
// descriptors built once another 1-3 %.
//
// Why wgmma: mma.sync (flash::forward_kernel) is a warp-level 16x8x16 product whose B operand every
// warp must first load from shared memory into registers (ldmatrix), and the shared-memory
// bandwidth, not the tensor cores, then sets the speed. wgmma is issued by a WARPGROUP (4 warps,
// 128 threads) for a 64 x N x 16 product; it reads its B operand (and optionally A) straight from
// shared memory through a "matrix descriptor", asynchronously: the threads issue it, go on with
// other work, and wait for it later; meanwhile the tensor cores can serve the other warpgroup.
//
// CTA = 3 warpgroups (384 threads), PERSISTENT: one CTA per SM, looping over work items of 128
// queries of one (b, h) (see forward_kernel for why and how):
//   warpgroup 0 = PRODUCER: one of its threads has the TMA engine copy an item's Q and then its K,
//     V in 128-key tiles into a 3-stage ring of shared-memory buffers (128-byte swizzled layout);
//     each stage's "full" mbarrier completes when its bytes have landed. It needs few registers:
//     setmaxnreg gives most of its registers to the consumers.
//   warpgroups 1, 2 = CONSUMERS: each owns 64 query rows. Per key tile j:
//       S = Q K_j^T          wgmma m64n128k16 x4 (A = Q from smem, B = K from smem, K-major)
//       online softmax on the fp32 S fragment in registers (the running max m, sum l per row)
//       O += P V_j           wgmma m64n64k16 x8 (A = P rounded to floatX in REGISTERS, B = V from
//                            smem, MN-major: V is stored key-major, which is "transposed" for B)
//     and then say on the stage's "empty" mbarrier that the producer may refill it.
//   S_{j+1} = Q K_{j+1}^T and O += P_j V_j are issued back to back, as FA3's "pipelining within
//   a warpgroup" does, and the source waits for the second only after the softmax of S_{j+1}. But
//   ptxas moves that wait up, before the softmax (SASS; 2026-12-01): what overlaps in practice is
//   one warpgroup's softmax with the OTHER's products. The two consumer warpgroups are independent
//   (no barrier between them), so the warp schedulers interleave them. Forcing the source's order
//   (a branch the wait cannot cross) was measured 3-6 % slower (dev/perf_log.md).
//
//   Each consumer's 64 x 64 output tile leaves through shared memory as one TMA store.
//
// Shared memory (dynamic, 1024-byte aligned because the 128-byte swizzle pattern repeats every
// 8 rows x 128 bytes = 1024 bytes and the descriptors below assume a pattern starting at 0):
//   Q 2 x 128 x 64 (2 x 16 KB: this item's and the next's) | K ring 3 x 128 x 64 (48 KB) |
//   V ring 3 x 128 x 64 (48 KB) | out tiles 2 x 64 x 64 (16 KB) | 8 mbarriers = 144 KB + 64 bytes
//   -> one CTA (12 warps) per SM.
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
//   one 128-byte swizzle atom is 64 n-values wide x 8 k-rows; n = 64 is exactly one atom, so only
//   the k-direction stride matters: 8-key groups are 1024 bytes apart. CUTLASS's canonical form
//   calls that SBO (LBO = distance between 64-wide n atoms, unused here); both are set to 1024 so
//   the descriptor is right whichever of the two the hardware uses for the k direction. The
//   kk-th 16-key slice starts 2048*kk bytes in (two 1024-byte groups).
//
// Accumulator fragment of wgmma m64nNk16 (fp32): warp w of the warpgroup holds rows 16w..16w+15;
// lane (g = lane/4, t = lane%4) holds, for each 8-column chunk i = 0..N/8-1, d[4i + e] at row
// 16w + g + 8*(e/2), column 8i + 2t + (e&1) -- the mma.m16n8 layout repeated along N. The A
// operand from registers uses the mma.m16n8k16 A layout per warp, so the S fragment converts to
// P's A fragment in registers (no shared memory round trip), as in flash::forward_kernel.
//
// Where the rest of the speed is: the same kernels run 1.5x faster at T=16384 than at T=1024, so
// the main loop is not what holds T=1024 back; it is what every 128-query item costs once: the
// diagonal tile (computed in full, then masked: 8 of the 36 tiles of a head at T=1024), the switch
// to the next item (its first softmax has no product of its own item to hide behind; the output
// stores), and K, V streamed from DRAM again for every item (ncu: L2 hit rate 16 %). Making the
// kernels persistent took the per-item cost from ~3.9 us to ~2 us (forward +22 %, dQ +9 %, dK/dV
// +6 % at B=64); TMA took the producer's instructions (22 % of the forward's) and the output
// stores out of the memory queue the exponentials use. Measured and not kept: ping-pong ordering
// of the two consumer warpgroups' products (named barriers, as FA3): equal at T=1024, -4 % at
// T=16384; a tree-shaped max/sum in the softmax (more ILP): -12 % at T=16384; a 4-step P V for the
// first consumer's diagonal tile (its queries see only the tile's first 64 keys): no gain. Untried:
// a third consumer warpgroup (FA3's 192-query tiles for head size 64), an L2-friendlier item order
// that keeps the B=8 balance.
#pragma once
#include <cuda.h>         // CUtensorMap (the TMA descriptors); the driver function is looked up at run time
#include <cudaTypedefs.h>
#include "common.cuh"
#include "attention_schedule.h"
#include "flash_attention.cuh"

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)  // sm_90a fp16/bf16 builds only

#if defined(ENABLE_BF16)
#define WGMMA_AB_TYPE "bf16"
#else
#define WGMMA_AB_TYPE "f16"
#endif

namespace flash_wgmma {

using flash::HS;
using flash::SCALE;
using flash::SCALE_LOG2;

constexpr int BQ = 128;                  // queries per CTA: 2 consumer warpgroups x 64 rows
constexpr int BK = 128;                  // keys per streamed tile (BK == BQ: the last tile is the diagonal one)
constexpr int STAGES = 3;                // depth of the K/V ring
constexpr int THREADS = 384;             // warpgroup 0 producer, 1 and 2 consumers
constexpr int TILE_BYTES = 128 * HS * 2; // one 128-row tile of floatX (16 KB)
constexpr int Q_OFF = 0;                              // + b * TILE_BYTES: two Q buffers (b = item & 1)
constexpr int K_OFF = 2 * TILE_BYTES;                 // + s * TILE_BYTES
constexpr int V_OFF = K_OFF + STAGES * TILE_BYTES;    // + s * TILE_BYTES
constexpr int OUT_TILE_BYTES = 64 * HS * 2;           // one consumer warpgroup's 64 output rows (8 KB)
constexpr int O_OFF = V_OFF + STAGES * TILE_BYTES;     // + cw * OUT_TILE_BYTES: the output tiles on their way out
constexpr int BAR_OFF = O_OFF + 2 * OUT_TILE_BYTES;   // full[STAGES], empty[STAGES], q_empty[2] (8 bytes each)
constexpr int SMEM_BYTES = BAR_OFF + (2 * STAGES + 2) * 8 + 1024;  // + 1024: room to align the base
constexpr bool USE_SETMAXNREG = true;    // false: every thread keeps launch_bounds' 168 registers
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;  // 128*40 + 256*232 = 64512 = 384*168
static_assert(TILE_BYTES % 1024 == 0, "tiles must keep the 1024-byte swizzle alignment");

// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_90a). Everything below is only ever executed inside the kernel's
// __CUDA_ARCH_FEAT_SM90_ALL branch.

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
// the arrival counts against the count given at init (128 producer threads), nothing is added.
__device__ inline void cp_async_mbar_arrive(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Ordinary stores (st.shared) write shared memory through the "generic proxy"; TMA and wgmma read
// it through the "async proxy". This fence orders the two for the executing thread: after it (and
// a barrier for the other threads' writes), what was stored is visible to a TMA store reading it.
// (Tiles that TMA itself loaded need no fence before wgmma reads them: both are async proxy.)
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
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (64 x 64 fp32) += A (64 x 16, registers: a0..a3 as in mma.m16n8k16, warp w of the warpgroup
// holding rows 16w..16w+15) * B (16 x 64, smem desc, MN-major: imm-trans-b = 1). Asynchronous.
__device__ inline void wgmma_m64n64k16_rs_tb(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "n"(1));
}

// 64 x 64 fp32 accumulator (+)= A (64 x 16, smem desc) * B (16 x 64, smem desc, K-major).
__device__ inline void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." WGMMA_AB_TYPE "." WGMMA_AB_TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// ---------------------------------------------------------------------------------------------
// The pieces both kernels share.

// An fp32 accumulator fragment (64 rows x N/4 columns, chunk i = columns 8i..8i+7 at acc[4i + e])
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
//   and is that stage's (it / STAGES)-th use. full[s] completes when the producer's 128 threads'
//   copies into stage s have landed; empty[s] when all 256 consumer threads are done with it.
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
    // Thread 0 initializes every barrier; then the whole CTA syncs. full_arrivals: 128 when the
    // producer's 128 threads fill a stage with cp.async (filled), 1 when one thread fills it by TMA
    // (mbar_arrive_expect_tx on full_of(it), then the tma_loads).
    __device__ void init(int full_arrivals = 128) const {
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

// ---------------------------------------------------------------------------------------------
// The kernel is PERSISTENT: one CTA per SM, each looping over work items (one item = 128 queries
// of one (b, h)), because at T=1024 a CTA's own start and end cost as much as its middle. Measured
// (B*T = 64K, NH=12): 222 TFLOP/s at T=1024 but 412 at T=16384 with one CTA per item -- the items
// are short (1..8 key tiles), and every CTA paid a launch, a cold wait for Q and the first K, V
// from memory, and an epilogue, with the SM's tensor cores idle. Here the producer runs ahead into
// the next item (its Q into the other Q buffer, its K, V into the same ring), so the consumers
// find their next item's data already in shared memory when they finish the current one.
//
// Which CTA takes which item, in what order: llmc/attention_schedule.h (a static "snake" over the
// items, longest first; head-major for short sequences).
using attn_sched::item_head;
using attn_sched::item_rank;
struct FwdItem { int bh, q0, nkt; };
__device__ inline FwdItem fwd_item(int w, int BH, int nqt) {
    const int q0 = (nqt - 1 - item_rank(w, BH, nqt)) * BQ;
    return {item_head(w, BH, nqt), q0, q0 / BK + 1};  // key tiles 0..q0/BK; the last one is the diagonal tile (BK == BQ)
}
__device__ inline int next_item(int w) {  // this CTA's item after w (the first is blockIdx.x)
    return attn_sched::next_item(w, blockIdx.x, gridDim.x);
}

__global__ void __launch_bounds__(THREADS, 1) forward_kernel(const __grid_constant__ CUtensorMap qkv_map, const __grid_constant__ CUtensorMap out_map,
                                                             float* lse, int B, int T, int NH) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ char smem_raw[];
    const uint32_t base = smem_base_1024(smem_raw);  // every access below goes through shared addresses
    const uint32_t q_s = base + Q_OFF, k_s = base + K_OFF, v_s = base + V_OFF, o_s = base + O_OFF;
    const Ring<STAGES> ring{base + BAR_OFF};  // the K, V ring; the buffers: Q

    const int BH = B * NH, nqt = (T + BQ - 1) / BQ, items = BH * nqt;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;

    ring.init(1);  // stages filled by TMA: one arrival (with the byte count) each

    if (wg == 0) {
        // ---------------- producer: one thread hands the TMA engine each tile (qkv_map: boxes of
        // 128 rows x 64 columns of qkv as (B, T, 3C)); the other 127 have nothing to do.
        if (USE_SETMAXNREG) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (tid == 0) {
            const int C = NH * HS;
            int it = 0;
            for (int w = blockIdx.x, n = 0; w < items; w = next_item(w), n++) {
                const FwdItem item = fwd_item(w, BH, nqt);
                const int b = item.bh / NH, col = (item.bh % NH) * HS;  // the head's q columns; k +C, v +2C
                ring.wait_buffer_free(n);
                for (int j = 0; j < item.nkt; j++, it++) {
                    const int s = it % STAGES;
                    const uint32_t full = ring.full_of(it);
                    ring.wait_free(it);
                    mbar_arrive_expect_tx(full, (j == 0 ? 3 : 2) * TILE_BYTES);
                    if (j == 0) tma_load(q_s + (n & 1) * TILE_BYTES, &qkv_map, col, item.q0, b, full);  // Q rides with the first tile
                    tma_load(k_s + s * TILE_BYTES, &qkv_map, C + col, j * BK, b, full);
                    tma_load(v_s + s * TILE_BYTES, &qkv_map, 2 * C + col, j * BK, b, full);
                }
            }
        }
        // Every load lands before the consumers finish (they wait for each), so the CTA cannot exit
        // with one in flight.
    } else {
        // ---------------- consumers: warpgroup cw = 0, 1 owns query rows q0 + 64cw .. + 63 of each item.
        // One software pipeline over the flat sequence of the CTA's key tiles, ACROSS items: the
        // first S product of item n+1 is issued together with the last O += P V of item n, and
        // runs while item n's output is written; no step of the pipeline drains at an item's end.
        if (USE_SETMAXNREG) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
        const int row_off = 64 * cw + 16 * warp + g;  // this thread's rows: q0 + row_off and + 8

        float s[64];  // S (64 x 128): chunk i = keys 8i.., s[4i + e]
        float o[32];  // O (64 x 64):  chunk i = dims 8i.., o[4i + e]
        uint32_t p[32];  // P (64 x 128) as floatX pairs: A fragments of 8 k-steps, p[4kk + 0..3]
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // per row h: running max (raw score), sum (per-thread partial)

        // The descriptors of the first Q buffer (this warpgroup's 64 rows), K and V stage 0, built
        // once: a tile's is that plus its byte offset / 16 (the start-address field, bits 0-13,
        // cannot carry over: shared addresses are < 2^18).
        const uint64_t q_desc0 = desc_kmajor(q_s + cw * 64 * 128), k_desc0 = desc_kmajor(k_s), v_desc0 = desc_mnmajor(v_s);
        // S = Q K^T for the tile in stage st: 4 k-steps of 16 head dims (32 bytes along each row).
        auto issue_s = [&](int qb, int st) {
            const uint64_t qd = q_desc0 + (qb * TILE_BYTES >> 4), kd = k_desc0 + (st * TILE_BYTES >> 4);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_m64n128k16_ss(s, qd + 2 * kk, kd + 2 * kk, kk > 0);
        };
        // O += P V for the tile in stage st: 8 k-steps of 16 keys (2048 bytes of V each).
        auto issue_pv = [&](int st) {
            const uint64_t vd = v_desc0 + (st * TILE_BYTES >> 4);
#pragma unroll
            for (int kk = 0; kk < 8; kk++)
                wgmma_m64n64k16_rs_tb(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], vd + 128 * kk);
        };
        // Online softmax of S for key tile k0.. of the rows q0 + row_off (+8), in place (S becomes
        // unnormalized P, fp32). Returns alpha per row = exp(old max - new max), O's rescale factor.
        auto softmax = [&](bool diagonal, int k0, int row_a, float (&alpha)[2]) {
            if (diagonal) {  // key > query -> -inf (exp2 gives exactly 0)
#pragma unroll
                for (int i = 0; i < 16; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (k0 + 8 * i + 2 * t + (e & 1) > row_a + 8 * (e / 2)) s[4 * i + e] = -INFINITY;
            }
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int i = 0; i < 16; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) mx[e / 2] = fmaxf(mx[e / 2], s[4 * i + e]);
            float mc[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                // a row's 128 columns are spread over the 4 lanes t = 0..3 of a quad
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
                // every row has an unmasked key in every tile it visits (key q0 <= its query), so
                // mx is finite; on an item's first tile m = -inf and alpha = exp2(-inf) = 0.
                alpha[h] = exp2f((m[h] - mx[h]) * SCALE_LOG2);
                m[h] = mx[h];
                l[h] *= alpha[h];
                mc[h] = mx[h] * SCALE_LOG2;
            }
#pragma unroll
            for (int i = 0; i < 16; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[4 * i + e] = exp2f(fmaf(s[4 * i + e], SCALE_LOG2, -mc[e / 2]));
                    l[e / 2] += s[4 * i + e];
                }
        };
        // out = O / l, lse = max * scale + ln(l) for the item's rows, from the row state (mm, ll);
        // out through the warpgroup's shared-memory tile and a TMA store (out_tile_*).
        const uint32_t o_wg = o_s + cw * OUT_TILE_BYTES;
        const int bar_wg = 1 + cw;  // named barrier of this warpgroup
        auto epilogue = [&](const FwdItem& item, const float (&mm)[2], float (&ll)[2]) {
#pragma unroll
            for (int h = 0; h < 2; h++) {  // l was a per-thread partial sum until here
                ll[h] += __shfl_xor_sync(0xffffffff, ll[h], 1);
                ll[h] += __shfl_xor_sync(0xffffffff, ll[h], 2);
            }
            out_tile_acquire(tid, bar_wg);
            out_tile_write(o_wg, o, 1.0f / ll[0], 1.0f / ll[1], warp, g, t);
            const flash::Head hd = flash::head_at(item.bh, T, NH);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = item.q0 + row_off + 8 * h;
                if (t == 0 && row < T) lse[hd.row + row] = mm[h] * SCALE + logf(ll[h]);
            }
            out_tile_publish(bar_wg);
            if (tid == 0) tma_store(&out_map, o_wg, (item.bh % NH) * HS, item.q0 + 64 * cw, item.bh / NH);
        };

        // `it` counts the CTA's key tiles over all items (tile it sits in stage it % STAGES).
        // S_it = Q K^T of tile it, issued once its stage is full; the S fragment is rewritten
        // by the softmax, so fence and wait exactly as the pipeline below needs.
        auto issue_s_of = [&](int it, int n) {
            ring.wait_full(it);  // TMA wrote the tile through the async proxy, which wgmma reads: no proxy fence
            wgmma_fence();  // s, o, p were written by ordinary instructions since the last wgmma
            issue_s(n & 1, it % STAGES);
            wgmma_commit();
        };
        int w = blockIdx.x, n = 0, it = 0;
        FwdItem item = fwd_item(w, BH, nqt);
        float alpha[2];
        // The CTA's first tile: S, softmax, P (O is still zero: its alpha is irrelevant).
        issue_s_of(0, 0);
        wgmma_wait<0>();
        fence_regs(s);
        softmax(item.nkt == 1, 0, item.q0 + row_off, alpha);
        pack_a_frags(p, s);
        while (true) {
            // Item n, tile 0 done (P in p). Tiles 1 .. nkt-1: S_j and O += P_{j-1} V_{j-1} back
            // to back, then the softmax of S_j (which ptxas schedules after the wait for both).
            for (int j = 1; j < item.nkt; j++) {
                const int prev = (it + j - 1) % STAGES;
                issue_s_of(it + j, n);
                issue_pv(prev);
                wgmma_commit();
                wgmma_wait<1>();  // S_j done (groups complete in order)
                fence_regs(s);
                softmax(j == item.nkt - 1, j * BK, item.q0 + row_off, alpha);
                wgmma_wait<0>();  // O += P_{j-1} V_{j-1} done: stage prev is free, O may be rescaled
                fence_regs(o);
                ring.release(it + j - 1);
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    o[2 * i] *= alpha[(i & 1)];  // o[4c + e]: e/2 = row half; index 2i covers e = 0,1 (i even) or 2,3
                    o[2 * i + 1] *= alpha[(i & 1)];
                }
                pack_a_frags(p, s);
            }
            ring.release_buffer(n);  // every S product of item n is done: its Q buffer is free
            const int last = (it + item.nkt - 1) % STAGES;
            it += item.nkt;
            const FwdItem done = item;
            w = next_item(w);
            if (w >= items) break;
            // The next item's S_0 with this item's last O += P V; its softmax while that runs;
            // then this item's output.
            item = fwd_item(w, BH, nqt);
            n++;
            issue_s_of(it, n);
            issue_pv(last);
            wgmma_commit();
            wgmma_wait<1>();
            fence_regs(s);
            float m_done[2], l_done[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                m_done[h] = m[h], l_done[h] = l[h];
                m[h] = -INFINITY, l[h] = 0.0f;
            }
            softmax(item.nkt == 1, 0, item.q0 + row_off, alpha);
            wgmma_wait<0>();
            fence_regs(o);
            ring.release(it - 1);
            epilogue(done, m_done, l_done);
#pragma unroll
            for (int i = 0; i < 32; i++) o[i] = 0.0f;
            pack_a_frags(p, s);
        }
        // The last item's last O += P V, and its output.
        const int last = (it - 1) % STAGES;
        wgmma_fence();
        issue_pv(last);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        ring.release(it - 1);  // not needed by anyone; keeps the protocol uniform
        epilogue(item, m, l);
        if (tid == 0) tma_store_wait_all();  // the shared memory it reads lives as long as the CTA
    }
#else
    (void)qkv_map; (void)out_map; (void)lse; (void)B; (void)T; (void)NH;
#endif
}

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

// out (B,T,C), lse (B,NH,T) <- causal self-attention of qkv (B,T,3C), head size 64: the same
// contract as flash_attention_forward. Only in sm_90a builds (USE_WGMMA).
inline void flash_attention_forward_wgmma(Context* ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, int NH) {
    using namespace flash_wgmma;
    cudaCheck(cudaFuncSetAttribute(forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
    const int C = NH * flash::HS;
    const CUtensorMap qkv_map = make_tile_map(ctx, qkv, B, T, 3 * C, BK), out_map = make_tile_map(ctx, out, B, T, C, 64);
    const int items = B * NH * ceil_div(T, BQ);  // persistent: one CTA per SM (or per item, if fewer)
    forward_kernel<<<std::min(items, ctx->props.multiProcessorCount), THREADS, SMEM_BYTES, ctx->stream>>>(qkv_map, out_map, lse, B, T, NH);
    launchCheck();
}

#endif  // USE_WGMMA && !ENABLE_FP32
