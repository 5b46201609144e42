// Flash attention BACKWARD on Hopper's wgmma: the dQ and dK/dV kernels, built from the pieces of
// flash_attention_wgmma.cuh (read that file first: why wgmma, the CTA of one producer and two
// consumer warpgroups, the shared-memory descriptors and fragment layouts). Two kernels: dQ, which
// also computes delta = rowsum(dout * out) from the dO and O tiles it loads and writes it out, then
// dK/dV, which reads it. They replace flash::backward_delta_kernel, backward_dq_kernel and
// backward_dkdv_kernel (dev/cuda/attention.cu compares the two paths).
// dK/dV is launched as a programmatic dependent of dQ (see flash_backward_dkdv_wgmma).
#pragma once
#include "flash_attention_wgmma.cuh"

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)  // sm_90a fp16/bf16 builds only

namespace flash_wgmma {

// Loads from a shared-memory address (the kernels address shared memory as 32-bit offsets).
__device__ inline float2 ld_shared_f2(uint32_t addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
    return v;
}
__device__ inline x128 ld_shared_x128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return *reinterpret_cast<x128*>(&v);
}

// ---------------------------------------------------------------------------------------------
// Backward: dQ. The same CTA as the forward (producer + 2 consumer warpgroups of 64 queries; an
// item = 128 queries of one (b, h)), with lse and delta = rowsum(dout * out) known:
//   per key tile j (64 keys):  S = Q K_j^T and dP = dO V_j^T      wgmma m64n64k16 x4 each, A and B
//                                                                 from smem, both K-major
//                              P = exp(S/8 - lse), dS = P (dP - delta)   in registers, fp32
//                              dQ += dS K_j                         wgmma m64n64k16 x4, A = dS from
//                                                                 registers, B = K MN-major
//   dQ / 8 is written into dqkv (B,T,3,NH,64) at part 0 (q); the k and v parts are not touched.
// Pipelining as in the forward: S_{j+1}, dP_{j+1} and dQ += dS_j K_j are issued back to back, and
// dS_{j+1} is computed before the wait for dQ's product in the source (ptxas moves that wait up
// past most of it: 8 of the 32 exponentials stay before it in the SASS; in dK/dV, 26 of 32).
// 64-key tiles keep a consumer thread at
// ~112 accumulator registers (S, dP, dQ: 32 each; dS packed: 16).
// Persistent like the forward (one CTA per SM, the same snaking schedule over the same items: 128
// queries of one (b, h), longest first); Q and dO are double-buffered so that the producer loads
// the next item's while the consumers finish this one.
// delta = rowsum(dO * O), the correction term of the softmax backward, is computed here too, for
// the item's rows, from its dO and O tiles in shared memory, and written out for the dK/dV kernel,
// which therefore runs after this one (one pass over dout and out less than a separate kernel).
// Every tile arrives by TMA, and dQ leaves by TMA (see the forward).
// Shared memory: Q, dO, O (2 buffers x 3 x 16 KB) | K ring DQ_STAGES x 8 KB | V ring DQ_STAGES x
// 8 KB | dQ out tiles 2 x 8 KB | barriers.
constexpr int DQ_BK = 64;
constexpr int DQ_STAGES = 4;
constexpr int DQ_KV_BYTES = DQ_BK * HS * 2;  // one 64-row tile of floatX (8 KB)
constexpr int DQ_Q_OFF = 0, DQ_DO_OFF = 2 * TILE_BYTES, DQ_O_OFF = 4 * TILE_BYTES;  // + b * TILE_BYTES
constexpr int DQ_K_OFF = 6 * TILE_BYTES;
constexpr int DQ_V_OFF = DQ_K_OFF + DQ_STAGES * DQ_KV_BYTES;
constexpr int DQ_OUT_OFF = DQ_V_OFF + DQ_STAGES * DQ_KV_BYTES;  // + cw * OUT_TILE_BYTES
constexpr int DQ_BAR_OFF = DQ_OUT_OFF + 2 * OUT_TILE_BYTES;
constexpr int DQ_SMEM_BYTES = DQ_BAR_OFF + (2 * DQ_STAGES + 2) * 8 + 1024;
static_assert(DQ_KV_BYTES % 1024 == 0, "tiles must keep the 1024-byte swizzle alignment");

// TMA maps (make_tile_map): qkv_q128 = qkv in 128-row boxes (Q), qkv_kv64 = qkv in 64-row boxes
// (K, V), dout128, out128 (B,T,C) in 128-row boxes, dqkv64 = the output in 64-row boxes.
__global__ void __launch_bounds__(THREADS, 1) backward_dq_kernel(const __grid_constant__ CUtensorMap qkv_q128, const __grid_constant__ CUtensorMap qkv_kv64,
                                                                 const __grid_constant__ CUtensorMap dout128, const __grid_constant__ CUtensorMap out128,
                                                                 const __grid_constant__ CUtensorMap dqkv64, float* delta, const float* lse,
                                                                 int B, int T, int NH) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ char smem_raw[];
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t q_s = base + DQ_Q_OFF, do_s = base + DQ_DO_OFF, o_s = base + DQ_O_OFF, k_s = base + DQ_K_OFF, v_s = base + DQ_V_OFF;
    const Ring<DQ_STAGES> ring{base + DQ_BAR_OFF};  // the K, V ring; the buffers: Q, dO, O
    const int BH = B * NH, nqt = (T + BQ - 1) / BQ, items = BH * nqt, C = NH * HS;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    ring.init(1);  // stages filled by TMA
    // The dK/dV kernel, launched next with programmatic dependent launch, may start now: its CTAs
    // take SMs as this kernel's CTAs leave them and wait (griddepcontrol.wait) for all of this
    // kernel's writes (delta) before they read anything (see flash_backward_dkdv_wgmma).
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    // Item w: query tile nqt-1 - rank (the longest first) of its head (item_rank, item_head); key
    // tiles 0 .. q0/64 + 1 (the second consumer's diagonal tile; the first consumer stops one tile
    // earlier). `it` counts the CTA's key tiles over all items, as in the forward.
    auto q0_of = [&](int w) { return (nqt - 1 - item_rank(w, BH, nqt)) * BQ; };

    if (wg == 0) {
        // ---------------- producer (one thread): per item Q, dO and O (into buffer n & 1), then the K, V tiles
        if (USE_SETMAXNREG) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (tid == 0) {
            int it = 0;
            for (int w = blockIdx.x, n = 0; w < items; w = next_item(w), n++) {
                const int q0 = q0_of(w), nkt = q0 / DQ_BK + 2, qb = n & 1, bh = item_head(w, BH, nqt);
                const int b = bh / NH, col = (bh % NH) * HS;  // the head's q columns (k: +C, v: +2C); in dout, out: col
                ring.wait_buffer_free(n);
                for (int j = 0; j < nkt; j++, it++) {
                    const int s = it % DQ_STAGES;
                    const uint32_t full = ring.full_of(it);
                    ring.wait_free(it);
                    mbar_arrive_expect_tx(full, (j == 0 ? 3 * TILE_BYTES : 0) + 2 * DQ_KV_BYTES);
                    if (j == 0) {
                        tma_load(q_s + qb * TILE_BYTES, &qkv_q128, col, q0, b, full);
                        tma_load(do_s + qb * TILE_BYTES, &dout128, col, q0, b, full);
                        tma_load(o_s + qb * TILE_BYTES, &out128, col, q0, b, full);
                    }
                    tma_load(k_s + s * DQ_KV_BYTES, &qkv_kv64, C + col, j * DQ_BK, b, full);
                    tma_load(v_s + s * DQ_KV_BYTES, &qkv_kv64, 2 * C + col, j * DQ_BK, b, full);
                }
            }
        }
    } else {
        // ---------------- consumers: warpgroup cw = 0, 1 owns query rows q0 + 64cw .. + 63
        if (USE_SETMAXNREG) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
        float s[32];   // S, then dS (64 x 64): chunk i = keys 8i.., s[4i + e]
        float dp[32];  // dP (64 x 64)
        float dq[32];  // dQ (64 x 64): chunk i = dims 8i..
        uint32_t ds[16];  // dS as floatX pairs: A fragments of 4 k-steps, ds[4kk + 0..3]
        const uint64_t k_desc0 = desc_kmajor(k_s), v_desc0 = desc_kmajor(v_s), k_mn_desc0 = desc_mnmajor(k_s);
        int it = 0;
        for (int w = blockIdx.x, n = 0; w < items; w = next_item(w), n++) {
            const int q0 = q0_of(w), nkt = q0 / DQ_BK + 2, bh = item_head(w, BH, nqt);
            const flash::Head hd = flash::head_at(bh, T, NH);
            const int row_a = q0 + 64 * cw + 16 * warp + g;  // this thread's rows: row_a and row_a + 8
            const uint32_t q_wg = q_s + (n & 1) * TILE_BYTES + cw * 64 * 128, do_wg = do_s + (n & 1) * TILE_BYTES + cw * 64 * 128;
            const int nmy = q0 / DQ_BK + cw + 1;  // key tiles up to this warpgroup's diagonal one
            float lse2[2], dl[2];                  // per row half: lse * log2(e) (+inf past T), delta
            // The rows' lse come from global memory: loaded here, first used after the first
            // products and delta (below), so that the load's latency hides behind them (ncu: the
            // warps waited on it for 4 % of the kernel when it was used right away).
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = row_a + 8 * h;
                lse2[h] = row < T ? lse[hd.row + row] : INFINITY;
            }
#pragma unroll
            for (int i = 0; i < 32; i++) dq[i] = 0.0f;

            // Descriptors as in the forward: built once per item (Q, dO) or kernel (K, V stage 0),
            // a tile's = that + its byte offset / 16; a 16-wide k-step is +32 bytes (K-major) or
            // +2048 (MN-major).
            const uint64_t qd = desc_kmajor(q_wg), dod = desc_kmajor(do_wg);
            auto issue_s_dp = [&](int st) {
                const uint64_t kd = k_desc0 + (st * DQ_KV_BYTES >> 4), vd = v_desc0 + (st * DQ_KV_BYTES >> 4);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) wgmma_m64n64k16_ss(s, qd + 2 * kk, kd + 2 * kk, kk > 0);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) wgmma_m64n64k16_ss(dp, dod + 2 * kk, vd + 2 * kk, kk > 0);
            };
            auto issue_dq = [&](int st) {
                const uint64_t kd = k_mn_desc0 + (st * DQ_KV_BYTES >> 4);
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    wgmma_m64n64k16_rs_tb(dq, ds[4 * kk], ds[4 * kk + 1], ds[4 * kk + 2], ds[4 * kk + 3], kd + 128 * kk);
            };
            // dS = P (dP - delta) in place of S; keys after the query (only in the diagonal tile) get 0
            auto make_ds = [&](int j) {
                const bool diag = j == nmy - 1;
                const int k0 = j * DQ_BK;
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float pe = exp2f(fmaf(s[4 * i + e], SCALE_LOG2, -lse2[e / 2]));
                        if (diag && k0 + 8 * i + 2 * t + (e & 1) > row_a + 8 * (e / 2)) pe = 0.0f;
                        s[4 * i + e] = pe * (dp[4 * i + e] - dl[e / 2]);
                    }
            };
            auto pack_ds = [&]() { pack_a_frags(ds, s); };

            ring.wait_full(it);  // with the first K, V: Q, dO, O (TMA: no proxy fence before wgmma)
            wgmma_fence();
            issue_s_dp(it % DQ_STAGES);
            wgmma_commit();
            // While S_0 and dP_0 run: delta of rows row_a (h = 0) and row_a + 8 (h = 1) from the
            // swizzled dO and O tiles; lane t of a quad takes 16-byte chunks 2t, 2t+1 of the row
            // (16 of its 64 dims), the quad's 4 lanes then add up. Rows past T are zeros: delta 0.
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = 64 * cw + 16 * warp + g + 8 * h;  // the row within the item's tiles
                float acc = 0.0f;
#pragma unroll
                for (int c = 2 * t; c < 2 * t + 2; c++) {
                    const uint32_t at = (n & 1) * TILE_BYTES + r * 128 + ((c ^ (r & 7)) << 4);
                    const x128 d = ld_shared_x128(do_s + at), o = ld_shared_x128(o_s + at);
#pragma unroll
                    for (int k = 0; k < x128::size; k++) acc = fmaf((float)d[k], (float)o[k], acc);
                }
                acc += __shfl_xor_sync(0xffffffff, acc, 1);
                acc += __shfl_xor_sync(0xffffffff, acc, 2);
                dl[h] = acc;
                if (t == 0 && row_a + 8 * h < T) delta[hd.row + row_a + 8 * h] = acc;
            }
            wgmma_wait<0>();
            fence_regs(s);
            fence_regs(dp);
#pragma unroll
            for (int h = 0; h < 2; h++) {  // not before this point (the empty asm pins it here)
                asm volatile("" : "+f"(lse2[h]));
                lse2[h] *= flash::LOG2E;
            }
            make_ds(0);
            pack_ds();
            for (int j = 1; j < nmy; j++) {
                const int st = (it + j) % DQ_STAGES, prev = (it + j - 1) % DQ_STAGES;
                ring.wait_full(it + j);
                wgmma_fence();
                issue_s_dp(st);  // S_j, dP_j          (group 1)
                wgmma_commit();
                issue_dq(prev);  // dQ += dS_{j-1} K_{j-1}  (group 2), partly overlaps make_ds below
                wgmma_commit();
                wgmma_wait<1>();
                fence_regs(s);
                fence_regs(dp);
                make_ds(j);
                wgmma_wait<0>();
                fence_regs(dq);
                ring.release(it + j - 1);
                pack_ds();
            }
            // This thread read the item's dO and O tiles with ordinary loads (delta, above), which
            // are generic-proxy accesses; the producer's next TMA load into this buffer (item n + 2)
            // is an async-proxy write. The mbarrier hand-off below orders the two only within one
            // proxy: the PTX memory model asks for a proxy fence between a generic access and a
            // later async-proxy access to the same shared memory, reads included (fence.proxy,
            // "memory model: proxies"). The loaded values were used long ago, so this cannot be
            // seen to fail today; it makes the hand-off correct by the model, not by timing.
            fence_proxy_async();
            ring.release_buffer(n);  // every read of this item's Q, dO and O is done
            const int last = (it + nmy - 1) % DQ_STAGES;
            wgmma_fence();
            issue_dq(last);
            wgmma_commit();
            // The first warpgroup does not use the item's last key tile (the second one's diagonal tile).
            if (cw == 0) ring.skip(it + nkt - 1);
            wgmma_wait<0>();
            fence_regs(dq);
            ring.release(it + nmy - 1);
            it += nkt;

            // dQ / 8 into the q part of dqkv, through the warpgroup's out tile (out_tile_*)
            const uint32_t dq_wg = base + DQ_OUT_OFF + cw * OUT_TILE_BYTES;
            out_tile_acquire(tid, 1 + cw);
            out_tile_write(dq_wg, dq, SCALE, SCALE, warp, g, t);
            out_tile_publish(1 + cw);
            if (tid == 0) tma_store(&dqkv64, dq_wg, (bh % NH) * HS, q0 + 64 * cw, bh / NH);
        }
        if (tid == 0) tma_store_wait_all();  // the shared memory it reads lives as long as the CTA
    }
#else
    (void)qkv_q128; (void)qkv_kv64; (void)dout128; (void)out128; (void)dqkv64; (void)delta; (void)lse; (void)B; (void)T; (void)NH;
#endif
}

// ---------------------------------------------------------------------------------------------
// Backward: dK, dV. An item = 128 keys of one (b, h) (2 consumer warpgroups of 64 keys), which
// stream the query tiles from their own (diagonal) one to the end:
//   per query tile j (64 queries):  S^T = K Q_j^T and dP^T = V dO_j^T     wgmma m64n64k16 x4 each,
//                                                                       A and B from smem, K-major
//                                   P^T = exp(S^T/8 - lse), dS^T = P^T (dP^T - delta)   (per column)
//                                   dV += P^T dO_j, dK += dS^T Q_j      wgmma m64n64k16 x4 each, A
//                                                                       from registers, B MN-major
//   dK / 8 and dV go into the k and v parts of dqkv (B,T,3,NH,64); the q part is not touched.
// Q, dO, K, V tiles arrive by TMA (see the forward); lse and delta of each
// query tile travel with it through the ring, copied by the producer's first warp (4-byte
// cp.async; padding rows past T are zeros, and so are their q and dout rows, so they add exactly
// nothing).
// Persistent like the forward: items are 128 keys of one (b, h), the first keys (which see the
// most queries) first, in the same snaking schedule; K and V are double-buffered.
// dK and dV are stored straight from the fragments: through shared-memory tiles and TMA stores,
// as the forward and dQ do, ptxas runs out of registers here (216 bytes of spills, every wgmma
// serialized), and an item's 8.5 query tiles on average make its store a small part of it.
// Shared memory: K, V (2 buffers x 2 x 16 KB) | Q, dO rings KV_STAGES x 8 KB each | lse, delta
// rings KV_STAGES x 256 B each | barriers.
constexpr int KV_BQ = 64;
constexpr int KV_STAGES = 4;
constexpr int KV_QT_BYTES = KV_BQ * HS * 2;  // one 64-row tile of floatX (8 KB)
constexpr int KV_K_OFF = 0, KV_V_OFF = 2 * TILE_BYTES, KV_Q_OFF = 4 * TILE_BYTES;  // K, V: + b * TILE_BYTES
constexpr int KV_DO_OFF = KV_Q_OFF + KV_STAGES * KV_QT_BYTES;
constexpr int KV_LSE_OFF = KV_DO_OFF + KV_STAGES * KV_QT_BYTES;
constexpr int KV_DL_OFF = KV_LSE_OFF + KV_STAGES * KV_BQ * 4;
constexpr int KV_BAR_OFF = KV_DL_OFF + KV_STAGES * KV_BQ * 4;
constexpr int KV_SMEM_BYTES = KV_BAR_OFF + (2 * KV_STAGES + 2) * 8 + 1024;
static_assert(KV_QT_BYTES % 1024 == 0, "tiles must keep the 1024-byte swizzle alignment");

// TMA maps (make_tile_map): qkv_kv128 = qkv in 128-row boxes (K, V), qkv_q64 = qkv in 64-row
// boxes (Q), dout64 (B,T,C) in 64-row boxes.
__global__ void __launch_bounds__(THREADS, 1) backward_dkdv_kernel(const __grid_constant__ CUtensorMap qkv_kv128, const __grid_constant__ CUtensorMap qkv_q64,
                                                                   const __grid_constant__ CUtensorMap dout64, floatX* dqkv,
                                                                   const float* lse, const float* delta, int B, int T, int NH) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ char smem_raw[];
    const uint32_t base = smem_base_1024(smem_raw);
    const uint32_t k_s = base + KV_K_OFF, v_s = base + KV_V_OFF, q_s = base + KV_Q_OFF, do_s = base + KV_DO_OFF;
    const uint32_t lse_s = base + KV_LSE_OFF, dl_s = base + KV_DL_OFF;
    const Ring<KV_STAGES> ring{base + KV_BAR_OFF};  // the Q, dO, lse, delta ring; the buffers: K, V
    const int BH = B * NH, nkt = (T + BQ - 1) / BQ, items = BH * nkt, nqt = (T + KV_BQ - 1) / KV_BQ, C = NH * HS;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    ring.init(33);  // a stage is full after the TMA bytes (1 arrival) and the 32 lanes' lse, delta copies
    // Launched as a programmatic dependent of the dQ kernel: everything above overlapped its last
    // CTAs; from here on its results (delta) are complete and visible. A no-op otherwise.
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    // Item w: keys k0 = rank * 128 .. of its head (item_rank, item_head); query tiles first ..
    // first + nq - 1, the first one being the diagonal tile of the first consumer. `it` counts the
    // CTA's query tiles.
    auto k0_of = [&](int w) { return item_rank(w, BH, nkt) * BQ; };

    if (wg == 0) {
        // ---------------- producer (its first warp): per item K, V (into buffer n & 1), then per
        // query tile q, dout (lane 0, TMA) and lse, delta (every lane, 2 + 2 values)
        if (USE_SETMAXNREG) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (tid < 32) {
            int it = 0;
            for (int w = blockIdx.x, n = 0; w < items; w = next_item(w), n++) {
                const int k0 = k0_of(w), first = k0 / KV_BQ, nq = nqt - first, kb = n & 1, bh = item_head(w, BH, nkt);
                const int b = bh / NH, col = (bh % NH) * HS;  // the head's q columns (k: +C, v: +2C); in dout: col
                const size_t row0 = (size_t)bh * T;           // the head's lse and delta rows
                ring.wait_buffer_free(n);
                for (int i = 0; i < nq; i++, it++) {
                    const int s = it % KV_STAGES, q0 = (first + i) * KV_BQ;
                    const uint32_t full = ring.full_of(it);
                    ring.wait_free(it);
                    if (tid == 0) {
                        mbar_arrive_expect_tx(full, (i == 0 ? 2 * TILE_BYTES : 0) + 2 * KV_QT_BYTES);
                        if (i == 0) {
                            tma_load(k_s + kb * TILE_BYTES, &qkv_kv128, C + col, k0, b, full);
                            tma_load(v_s + kb * TILE_BYTES, &qkv_kv128, 2 * C + col, k0, b, full);
                        }
                        tma_load(q_s + s * KV_QT_BYTES, &qkv_q64, col, q0, b, full);
                        tma_load(do_s + s * KV_QT_BYTES, &dout64, col, q0, b, full);
                    }
#pragma unroll 1
                    for (int c = 0; c < 4; c++) {  // c = 0, 1: lse rows tid, tid + 32; c = 2, 3: delta
                        const int rr = tid + 32 * (c & 1), r = q0 + rr;
                        const float* src = (c < 2 ? lse : delta) + row0;
                        const uint32_t dst = (c < 2 ? lse_s : dl_s) + s * KV_BQ * 4 + rr * 4;
                        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(r < T ? src + r : src),
                                     "r"(r < T ? 4 : 0) : "memory");
                    }
                    ring.filled(it);
                }
            }
            asm volatile("cp.async.wait_all;\n" ::: "memory");
        }
    } else {
        // ---------------- consumers: warpgroup cw = 0, 1 owns keys k0 + 64cw .. + 63; its first
        // query tile is its diagonal one (index cw in the item's sequence)
        if (USE_SETMAXNREG) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
        float s[32];   // S^T, then P^T (64 keys x 64 queries): chunk i = queries 8i.., s[4i + e]
        float dp[32];  // dP^T, then dS^T
        float dk[32], dv[32];  // (64 keys x 64 dims): chunk i = dims 8i..
        uint32_t pa[16], da[16];  // P^T, dS^T as floatX A fragments of 4 k-steps (queries)
        const uint64_t q_desc0 = desc_kmajor(q_s), do_desc0 = desc_kmajor(do_s), q_mn_desc0 = desc_mnmajor(q_s), do_mn_desc0 = desc_mnmajor(do_s);
        int it = 0;
        for (int w = blockIdx.x, n = 0; w < items; w = next_item(w), n++) {
            const int k0 = k0_of(w), first = k0 / KV_BQ, nq = nqt - first, bh = item_head(w, BH, nkt);
            const int row_a = k0 + 64 * cw + 16 * warp + g;  // this thread's keys: row_a and row_a + 8
            const uint32_t k_wg = k_s + (n & 1) * TILE_BYTES + cw * 64 * 128, v_wg = v_s + (n & 1) * TILE_BYTES + cw * 64 * 128;
            // The second warpgroup never uses the item's first query tile (all of its queries come
            // before its keys).
            if (cw == 1 && nq > 0) ring.skip(it);
#pragma unroll
            for (int i = 0; i < 32; i++) { dk[i] = 0.0f; dv[i] = 0.0f; }

            // Descriptors as in the dQ kernel: K, V once per item, Q and dO stage 0 once.
            const uint64_t kd = desc_kmajor(k_wg), vd = desc_kmajor(v_wg);
            auto issue_s_dp = [&](int st) {
                const uint64_t qd = q_desc0 + (st * KV_QT_BYTES >> 4), dod = do_desc0 + (st * KV_QT_BYTES >> 4);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) wgmma_m64n64k16_ss(s, kd + 2 * kk, qd + 2 * kk, kk > 0);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) wgmma_m64n64k16_ss(dp, vd + 2 * kk, dod + 2 * kk, kk > 0);
            };
            auto issue_dv_dk = [&](int st) {
                const uint64_t qd = q_mn_desc0 + (st * KV_QT_BYTES >> 4), dod = do_mn_desc0 + (st * KV_QT_BYTES >> 4);
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    wgmma_m64n64k16_rs_tb(dv, pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3], dod + 128 * kk);
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    wgmma_m64n64k16_rs_tb(dk, da[4 * kk], da[4 * kk + 1], da[4 * kk + 2], da[4 * kk + 3], qd + 128 * kk);
            };
            // P^T and dS^T in place of S^T and dP^T; in the diagonal tile, queries before the key get 0
            auto make_p_ds = [&](int i, int st) {
                const bool diag = i == cw;
                const int q0 = (first + i) * KV_BQ;
#pragma unroll
                for (int c = 0; c < 8; c++) {
                    const float2 l = ld_shared_f2(lse_s + st * KV_BQ * 4 + (8 * c + 2 * t) * 4);
                    const float2 d = ld_shared_f2(dl_s + st * KV_BQ * 4 + (8 * c + 2 * t) * 4);
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float le = (e & 1) ? l.y : l.x, de = (e & 1) ? d.y : d.x;
                        float pe = exp2f(fmaf(s[4 * c + e], SCALE_LOG2, -le * flash::LOG2E));
                        if (diag && q0 + 8 * c + 2 * t + (e & 1) < row_a + 8 * (e / 2)) pe = 0.0f;
                        s[4 * c + e] = pe;
                        dp[4 * c + e] = pe * (dp[4 * c + e] - de);
                    }
                }
            };
            auto pack = [&]() {
#pragma unroll
                for (int kk = 0; kk < 4; kk++) { pack_a_step(pa, s, kk); pack_a_step(da, dp, kk); }
            };

            if (cw < nq) {
                const int st0 = (it + cw) % KV_STAGES;
                ring.wait_full(it + cw);  // TMA: no proxy fence before wgmma
                wgmma_fence();
                issue_s_dp(st0);
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(s);
                fence_regs(dp);
                make_p_ds(cw, st0);
                pack();
                for (int i = cw + 1; i < nq; i++) {
                    const int st = (it + i) % KV_STAGES, prev = (it + i - 1) % KV_STAGES;
                    ring.wait_full(it + i);
                    wgmma_fence();
                    issue_s_dp(st);      // S^T_i, dP^T_i                 (group 1)
                    wgmma_commit();
                    issue_dv_dk(prev);   // dV, dK += tile i-1's products  (group 2), mostly overlaps make_p_ds
                    wgmma_commit();
                    wgmma_wait<1>();
                    fence_regs(s);
                    fence_regs(dp);
                    make_p_ds(i, st);
                    wgmma_wait<0>();
                    fence_regs(dv);
                    fence_regs(dk);
                    ring.release(it + i - 1);
                    pack();
                }
                ring.release_buffer(n);  // every product reading this item's K and V is done
                const int last = (it + nq - 1) % KV_STAGES;
                wgmma_fence();
                issue_dv_dk(last);
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(dv);
                fence_regs(dk);
                ring.release(it + nq - 1);
            } else {
                ring.release_buffer(n);
            }
            it += nq;

            floatX* dst = dqkv + flash::head_at(bh, T, NH).qkv;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = row_a + 8 * h;
                if (row >= T) continue;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const size_t at = (size_t)row * 3 * C + 8 * i + 2 * t;
                    *reinterpret_cast<uint32_t*>(dst + C + at) = flash::pack2(dk[4 * i + 2 * h] * SCALE, dk[4 * i + 2 * h + 1] * SCALE);
                    *reinterpret_cast<uint32_t*>(dst + 2 * C + at) = flash::pack2(dv[4 * i + 2 * h], dv[4 * i + 2 * h + 1]);
                }
            }
        }
    }
#else
    (void)qkv_kv128; (void)qkv_q64; (void)dout64; (void)dqkv; (void)lse; (void)delta; (void)B; (void)T; (void)NH;
#endif
}

}  // namespace flash_wgmma

// The dq part of dqkv (B,T,3C) (the k, v parts untouched) from dout (B,T,C), qkv, out (B,T,C) and
// the forward's lse (B,NH,T); also writes delta (B,NH,T) = rowsum(dout * out), which
// flash_backward_dkdv_wgmma needs: run this one first.
inline void flash_backward_dq_wgmma(Context* ctx, floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv,
                                    const floatX* out, const float* lse, int B, int T, int NH) {
    using namespace flash_wgmma;
    cudaCheck(cudaFuncSetAttribute(backward_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, DQ_SMEM_BYTES));
    const int C = NH * flash::HS;
    const CUtensorMap qkv_q128 = make_tile_map(ctx, qkv, B, T, 3 * C, BQ), qkv_kv64 = make_tile_map(ctx, qkv, B, T, 3 * C, DQ_BK);
    const CUtensorMap dout128 = make_tile_map(ctx, dout, B, T, C, BQ), out128 = make_tile_map(ctx, out, B, T, C, BQ);
    const CUtensorMap dqkv64 = make_tile_map(ctx, dqkv, B, T, 3 * C, 64);
    const int items = B * NH * ceil_div(T, BQ);  // persistent: one CTA per SM (or per item, if fewer)
    backward_dq_kernel<<<std::min(items, ctx->props.multiProcessorCount), THREADS, DQ_SMEM_BYTES, ctx->stream>>>(
        qkv_q128, qkv_kv64, dout128, out128, dqkv64, delta, lse, B, T, NH);
    launchCheck();
}

// The dk, dv parts of dqkv (B,T,3C) (the q part untouched): the contract of flash_backward_dkdv.
inline void flash_backward_dkdv_wgmma(Context* ctx, floatX* dqkv, const float* delta, const floatX* dout, const floatX* qkv,
                                      const float* lse, int B, int T, int NH) {
    using namespace flash_wgmma;
    cudaCheck(cudaFuncSetAttribute(backward_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, KV_SMEM_BYTES));
    const int C = NH * flash::HS;
    const CUtensorMap qkv_kv128 = make_tile_map(ctx, qkv, B, T, 3 * C, BQ), qkv_q64 = make_tile_map(ctx, qkv, B, T, 3 * C, KV_BQ);
    const CUtensorMap dout64 = make_tile_map(ctx, dout, B, T, C, KV_BQ);
    const int items = B * NH * ceil_div(T, BQ);  // persistent: one CTA per SM (or per item, if fewer)
    // Programmatic dependent launch: this kernel's CTAs start (launch, shared-memory setup) while
    // the dQ kernel before it on the stream finishes its last items, and wait for its completion
    // inside (griddepcontrol.wait): the gap between the two kernels shrinks to nothing.
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(std::min(items, ctx->props.multiProcessorCount));
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = KV_SMEM_BYTES;
    cfg.stream = ctx->stream;
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = pdl;
    cfg.numAttrs = 1;
    cudaCheck(cudaLaunchKernelEx(&cfg, backward_dkdv_kernel, qkv_kv128, qkv_q64, dout64, dqkv, lse, delta, B, T, NH));
}

#endif  // USE_WGMMA && !ENABLE_FP32
