// Flash attention on Hopper's warpgroup MMA (wgmma), FlashAttention-3 style: causal, head size
// 64, fp16/bf16. This file: the design and the FORWARD (the machinery -- PTX wrappers for wgmma,
// mbarriers and TMA, shared-memory descriptors and their encoding, fragment layouts, the output
// tiles, the ring protocol, the TMA descriptors of the tensors -- is llmc/wgmma.cuh);
// flash_attention_wgmma_backward.cuh builds the dQ and dK/dV kernels from the same pieces. They
// are alternatives to the mma.sync kernels of flash_attention.cuh with the same inputs and outputs
// (the dQ kernel also computes delta, which the mma.sync path gets from its own small kernel):
//   forward:  reads qkv (B,T,3,NH,64) as the qkv matmul writes it; writes out (B,T,NH,64) and
//             lse (B,NH,T) fp32 = natural-log log-sum-exp of the scaled scores;
//   dQ:       reads qkv, dout (B,T,NH,64), out, lse; writes delta (B,NH,T) and the q part of dqkv;
//   dKdV:     reads qkv, dout, lse, delta; writes the k and v parts of dqkv.
// Used by attention_forward / attention_backward in builds for sm_90a (make GPU_ARCH=90, the
// default on Hopper: the Makefile then defines USE_WGMMA); other builds use the mma.sync kernels.
// Checked by dev/cuda/attention_check like every attention path (float64 CPU reference, the cuBLAS
// reference at B=1..4, T up to 2048, NH 12/25, bitwise-deterministic backward) and against the
// mma.sync kernels directly: the same products and roundings to floatX, the summation order may
// differ (delta's too), so dQ, dK, dV agree within 2e-3 (fp16) / 1e-2 (bf16).
// Measured on H200s, 2026-12-01 (B=64, T=1024, NH=12, TFLOP/s, bf16): forward 339-348 (321-328
// before exp2_poly and the row sums by MMA; mma.sync 214), dQ with delta 394-399 (mma.sync dQ
// alone 266-270), dK/dV 360-370 (218-220); B=8: forward 261-279, dQ 332-334, dK/dV 320-321. At the same 64K tokens and T=16384 (B=4): 415 / 475 / 469
// (attention_check --lengths). Those were timed from an idle GPU (host launch latency included);
// as GPU time (dev/cuda/check.cuh's median_ms since 2026-12-01): forward 349.6-353.9 at B=64, 289.7-291.6
// at B=8, dQ 409 / 349, dK/dV 375 / 329 (attention_check --batches: 1.32 us per key tile of the
// busiest CTA + 9-10 us per launch). TMA loads and stores gave +14 % / +24 % / +8 % at B=64, T=1024
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
//       online softmax on the fp32 S fragment in registers (the running max m per row)
//       [O | l] += P [V_j | 1]  wgmma m64n72k16 x8 (A = P rounded to floatX in REGISTERS, B = V
//                            from smem, MN-major: V is stored key-major, which is "transposed" for
//                            B; its columns 64..71 come from a tile of ones, so l = P's row sums)
//     and then say on the stage's "empty" mbarrier that the producer may refill it.
//   Why the row sums on the tensor cores: summing P on the FMA pipe cost 64 FADDs per thread and
//   tile (a fifth of the softmax's instructions), and the softmax, not the tensor cores, is what
//   the products wait for; the 8 extra columns cost 6 % more tensor work. The sums are then those
//   of P as rounded for P V (so out = sum(P V) / sum(P) with the same P; lse differs from an fp32
//   sum by at most floatX's rounding, 2^-8 in bf16, 2^-11 in fp16). Measured (bf16, 3 alternating rounds, one
//   call): forward B=64 327-330 -> 340-345 TFLOP/s, B=8 259-263 -> 271-276, T=16384 404 -> 419.
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
// 8 rows x 128 bytes = 1024 bytes and the descriptors (wgmma.cuh) assume a pattern starting at 0):
//   Q 2 x 128 x 64 (2 x 16 KB: this item's and the next's) | K ring 3 x 128 x 64 (48 KB) |
//   V ring 3 x 128 x 64 (48 KB) | out tiles 2 x 64 x 64 (16 KB) | ones 128 x 64 (16 KB) |
//   8 mbarriers = 160 KB + 64 bytes
//   -> one CTA (12 warps) per SM.
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
// first consumer's diagonal tile (its queries see only the tile's first 64 keys): no gain; a third
// consumer warpgroup (FA3's 192-query items for head size 64; dev/perf_log.md, 2026-12-01): at 512 threads
// ptxas gives each thread 128 registers, too few for this pipelined consumer, and a serial one
// (S, softmax, P V in turn) ran 316 TFLOP/s at B=64 and 213 at B=8 against this kernel's 324 / 258;
// 64-key tiles (half the diagonal's waste): 292 against 330 at B=64, the
// per-tile costs besides the products being paid twice as often; issuing the next tile's S before
// O's update, to write an item's output under it: 308-311
// against 330-332, T=16384 384 against 420 (the in-item loop gets slower).
#pragma once
#include "common.cuh"
#include "attention_schedule.h"
#include "flash_attention.cuh"
#include "wgmma.cuh"

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)  // sm_90a fp16/bf16 builds only


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
constexpr int ONES_OFF = O_OFF + 2 * OUT_TILE_BYTES;  // 128 x 64 ones: P V's columns 64..71 = the row sums of P
constexpr int BAR_OFF = ONES_OFF + TILE_BYTES;         // full[STAGES], empty[STAGES], buf_empty[2] (8 bytes each)
constexpr int SMEM_BYTES = BAR_OFF + (2 * STAGES + 2) * 8 + 1024;  // + 1024: room to align the base
constexpr int POLY_EVERY = 4;            // softmax: every 4th 8-key chunk's exp2 on the FMA pipe (exp2_poly; 0: none)
constexpr bool USE_SETMAXNREG = true;    // false: every thread keeps launch_bounds' 168 registers
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;  // 128*40 + 256*232 = 64512 = 384*168
static_assert(TILE_BYTES % 1024 == 0, "tiles must keep the 1024-byte swizzle alignment");


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

// 2^x for x <= 0 on the FMA and integer pipes instead of the MUFU (special-function) unit, as
// FlashAttention-4 does. Why: at head size 64 one score costs 2 x 64 x 2 = 256 tensor-core FLOPs
// (S and P V), which an SM does in 1/16 clock -- and one MUFU.EX2, of which an SM does 16 per
// clock, also takes 1/16 clock. The exponentials are as long as the products, so moving some of
// them to the FMA pipe (which is otherwise lightly used here) shortens the softmax.
// Method: x = j + f with j = round(x) (adding 1.5 * 2^23 rounds x to an integer in the low
// mantissa bits of t), 2^f for f in [-1/2, 1/2] by a degree-3 minimax polynomial (max relative
// error 7.5e-5, below fp16's and bf16's rounding of P), and 2^j added to the exponent field by an
// integer shift-add. x is clamped at -126 so that the exponent field cannot wrap: a masked score
// (-inf) gives a value <= 2^-125 (~1e-38; below x = -125 the result leaves the normal floats and
// is only bounded) instead of 0, nothing next to a row sum >= 1.
// Measured (H200, bf16, attention_check, 3 alternating rounds, 2026-12-01): a quarter of the
// exponentials here (POLY_EVERY = 4; 8 instructions each instead of one MUFU.EX2): forward B=64
// 324.8 -> 335.8 TFLOP/s, B=8 262.0 -> 268.8; an eighth: no gain (316-324 / 252-262); a third or a
// half: slower (305 / 295 at B=64) -- the FMA pipe and the issue slots then become the limit.
// With the row sums on the tensor cores (64 FADDs fewer per tile), again a quarter is best:
// 347.3-347.4 against 340.0-341.4 for 5 in 16 and 321-323 for a half. The
// backward kernels do 1.5-2x more tensor work per exponential (3 or 4 products against 2), and
// there the polynomial only costs: backward B=64 279.0 TFLOP/s with MUFU.EX2 alone, 276.5 with a
// quarter in dQ, 272.6 with a quarter in dK/dV, 268.4 in both, 270.9 an eighth in both, 251.0 a half
// (bf16, means of 3 alternating rounds, 2026-12-01, dev/perf_log.md), so they keep MUFU.EX2.
__device__ __forceinline__ float exp2_poly(float x) {
    x = fmaxf(x, -126.0f);
    constexpr float ROUND = 12582912.0f;  // 1.5 * 2^23: the ulp of t is 1
    const float t = __fadd_rn(x, ROUND);
    const float f = __fsub_rn(x, __fsub_rn(t, ROUND));  // x - round(x), in [-1/2, 1/2]
    const float p = fmaf(fmaf(fmaf(0.05517097935f, f, 0.2426097095f), f, 0.6932609677f), f, 0.9999281764f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));  // low bits of t = round(x)
}

// out (B,T,NH,64) via out_map, lse (B,NH,T) <- causal attention of qkv (B,T,3,NH,64) via qkv_map
// (both written, nothing in place). Persistent: each CTA takes (b, h, 128-query tile) items
// (next_item); warpgroup 0 loads K/V tiles by TMA into the ring, warpgroups 1 and 2 each own 64
// of the 128 query rows (the design at the top of this file).
__global__ void __launch_bounds__(THREADS, 1) forward_kernel(const __grid_constant__ CUtensorMap qkv_map, const __grid_constant__ CUtensorMap out_map,
                                                             float* lse, int B, int T, int NH) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ char smem_raw[];
    const uint32_t base = smem_base_1024(smem_raw);  // every access below goes through shared addresses
    const uint32_t q_s = base + Q_OFF, k_s = base + K_OFF, v_s = base + V_OFF, o_s = base + O_OFF;
    const Ring<STAGES> ring{base + BAR_OFF};  // the K, V ring; the buffers: Q

    const int BH = B * NH, nqt = (T + BQ - 1) / BQ, items = BH * nqt;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;

    // The ones tile (every element 1, so its swizzle does not matter), written through the generic
    // proxy and read by wgmma through the async one: fenced, then ordered by init's __syncthreads.
    const uint32_t ones2 = flash::pack2(1.0f, 1.0f);
    for (int i = threadIdx.x; i < TILE_BYTES / 4; i += THREADS) st_shared_u32(base + ONES_OFF + 4 * i, ones2);
    fence_proxy_async();
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
        float lsum[4];  // P V's columns 64..71 (P times the ones tile): the row sums l, lsum[e] at row e/2
        uint32_t p[32];  // P (64 x 128) as floatX pairs: A fragments of 8 k-steps, p[4kk + 0..3]
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) lsum[i] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY};  // per row h: running max (raw score)

        // The descriptors of the first Q buffer (this warpgroup's 64 rows), K and V stage 0, built
        // once: a tile's is that plus its byte offset / 16 (the start-address field, bits 0-13,
        // cannot carry over: shared addresses are < 2^18).
        // V's descriptor: the second 64-wide n atom (columns 64..71) is the ones tile, LBO bytes on;
        // per stage the start address moves forward and LBO back by the same amount.
        const uint64_t q_desc0 = desc_kmajor(q_s + cw * 64 * 128), k_desc0 = desc_kmajor(k_s),
                       v_desc0 = make_desc(v_s, base + ONES_OFF - v_s, 1024);
        // S = Q K^T for the tile in stage st: 4 k-steps of 16 head dims (32 bytes along each row).
        auto issue_s = [&](int qb, int st) {
            const uint64_t qd = q_desc0 + (qb * TILE_BYTES >> 4), kd = k_desc0 + (st * TILE_BYTES >> 4);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_m64n128k16_ss(s, qd + 2 * kk, kd + 2 * kk, kk > 0);
        };
        // O += P V for the tile in stage st: 8 k-steps of 16 keys (2048 bytes of V each).
        auto issue_pv = [&](int st) {
            const uint64_t off = st * TILE_BYTES >> 4, vd = v_desc0 + off - (off << 16);
#pragma unroll
            for (int kk = 0; kk < 8; kk++)
                wgmma_m64n72k16_rs_tb(o, lsum, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], vd + 128 * kk);
        };
        // Online softmax of S for key tile k0.. of the rows q0 + row_off (+8), in place (S becomes
        // unnormalized P, fp32). Returns alpha per row = exp((old max - new max) / 8), O's rescale
        // factor (the maxima are of raw scores; 8 = sqrt(head size)).
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
                mc[h] = mx[h] * SCALE_LOG2;
            }
#pragma unroll
            for (int i = 0; i < 16; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float x = fmaf(s[4 * i + e], SCALE_LOG2, -mc[e / 2]);
                    s[4 * i + e] = (POLY_EVERY > 0 && i % POLY_EVERY == POLY_EVERY - 1) ? exp2_poly(x) : exp2f(x);
                }
        };
        // out = O / l, lse = max * scale + ln(l) for the item's rows, from its maxima mm and lsum;
        // out through the warpgroup's shared-memory tile and a TMA store (out_tile_*).
        const uint32_t o_wg = o_s + cw * OUT_TILE_BYTES;
        const int bar_wg = 1 + cw;  // named barrier of this warpgroup
        auto epilogue = [&](const FwdItem& item, const float (&mm)[2]) {
            const float ll[2] = {lsum[0], lsum[2]};  // the whole row's sum (columns 64 + 2t + 0/1 are equal)
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
                fence_regs(lsum);
                ring.release(it + j - 1);
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    o[2 * i] *= alpha[(i & 1)];  // o[4c + e]: e/2 = row half; index 2i covers e = 0,1 (i even) or 2,3
                    o[2 * i + 1] *= alpha[(i & 1)];
                }
#pragma unroll
                for (int e = 0; e < 4; e++) lsum[e] *= alpha[e / 2];
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
            float m_done[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                m_done[h] = m[h];
                m[h] = -INFINITY;
            }
            softmax(item.nkt == 1, 0, item.q0 + row_off, alpha);
            wgmma_wait<0>();
            fence_regs(o);
            fence_regs(lsum);
            ring.release(it - 1);
            epilogue(done, m_done);
#pragma unroll
            for (int i = 0; i < 32; i++) o[i] = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) lsum[i] = 0.0f;
            pack_a_frags(p, s);
        }
        // The last item's last O += P V, and its output.
        const int last = (it - 1) % STAGES;
        wgmma_fence();
        issue_pv(last);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(lsum);
        ring.release(it - 1);  // not needed by anyone; keeps the protocol uniform
        epilogue(item, m);
        if (tid == 0) tma_store_wait_all();  // the shared memory it reads lives as long as the CTA
    }
#else
    (void)qkv_map; (void)out_map; (void)lse; (void)B; (void)T; (void)NH;
#endif
}

}  // namespace flash_wgmma

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
