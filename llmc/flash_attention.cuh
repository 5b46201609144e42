// Flash attention (FlashAttention-2 style) for head size 64, causal, fp16/bf16 on tensor cores.
//
// Why: the plain attention writes the (B,NH,T,T) score/probability matrices to memory and reads
// them back several times; at T=1024 that traffic, not the arithmetic, sets its speed. Here a
// block keeps a 64-row tile of queries on chip and streams 64-row tiles of keys/values past it,
// with the softmax computed "online" (a running max and sum per row, earlier partial results
// rescaled when the max grows). Nothing of size T x T ever reaches memory. The backward recomputes
// the probabilities from Q, K and the saved per-row log-sum-exp instead of storing them.
//
// Layout: qkv (B,T,3,NH,64) as the qkv matmul writes it; out (B,T,NH,64); lse (B,NH,T) fp32.
// Tensor cores: mma.sync m16n8k16 (fp32 accumulation), operands loaded from shared memory with
// ldmatrix. A block is 4 warps; warp w owns rows 16w..16w+15 of the block's 64-row tile, so all
// row-wise work (softmax, scaling) stays inside a warp.
//
// Backward = two kernels, no atomics (so results are bitwise reproducible):
//   dkdv: a block per 64 KEYS; loops over the query tiles that see them; dK, dV stay in registers.
//   dq:   a block per 64 QUERIES; loops over the key tiles they see; dQ stays in registers.
// That recomputes QK^T and dO V^T once more than a single atomic-based kernel would (7 instead of
// 5 matmuls per tile pair) in exchange for determinism and simplicity.
#pragma once
#include "common.cuh"

namespace flash {

constexpr int HS = 64;       // head size (every GPT-2 size has 64)
constexpr int TILE = 64;     // rows per tile, queries and keys alike
constexpr int THREADS = 128; // 4 warps x 16 rows
constexpr float LOG2E = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------
// Tensor-core and async-copy primitives (inline PTX).

// A tile of 64 rows x 64 halves in shared memory, rows of 8 chunks of 16 bytes. Chunk c of row r
// is stored at chunk position c ^ (r % 8): ldmatrix reads one 16-byte chunk from each of 8
// consecutive rows, and without the XOR those 8 chunks would sit in the same banks (row stride
// 128 bytes) and be served one after another.
__device__ inline int swz(int row, int chunk) { return row * HS + ((chunk ^ (row & 7)) << 3); }

__device__ inline uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16-byte global->shared copy that bypasses registers; src_bytes = 0 fills zeros (rows past T).
__device__ inline void cp_async16(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Four 8x8 16-bit matrices from shared memory; lane l gives the address of row l%8 of matrix l/8.
__device__ inline void ldsm_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ inline void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

// c (16x8 fp32) += a (16x16, row) * b (16x8, col)
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(ENABLE_BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two floats as two floatX in one register, the first in the low half (the lower column).
__device__ inline uint32_t pack2(float lo, float hi) {
    floatX v[2] = {(floatX)lo, (floatX)hi};
    return *reinterpret_cast<uint32_t*>(v);
}

// ---------------------------------------------------------------------------------------------
// Fragment helpers. Per warp, a 16x64 fp32 accumulator is float[8][4]: n-tile j covers columns
// 8j..8j+7; element e of a lane (g = lane/4, t = lane%4) is row g (e<2) or g+8 (e>=2), column
// 8j + 2t + (e&1). The same lane pattern is the A operand of the next product, which is why P
// (or dS) can be fed to the second matmul straight from registers.

// Loads the calling warp's 16 rows (row0..row0+15) of a swizzled tile as A operands, k = 64.
__device__ inline void load_a_frags(uint32_t (&a)[4][4], const floatX* tile, int row0, int lane) {
    for (int kk = 0; kk < 4; kk++)
        ldsm_x4(a[kk], tile + swz(row0 + (lane % 8) + 8 * ((lane / 8) % 2), 2 * kk + lane / 16));
}

// acc (16x64) += A (16x64, registers) @ tile^T, i.e. B[k][n] = tile[n][k]: rows of the tile are
// the output columns (keys in Q K^T).
__device__ inline void mma_a_tileT(float (&acc)[8][4], const uint32_t (&a)[4][4], const floatX* tile, int lane) {
    for (int kk = 0; kk < 4; kk++)
        for (int p = 0; p < 4; p++) {
            uint32_t b[4];
            ldsm_x4(b, tile + swz(16 * p + (lane % 8) + 8 * (lane / 16), 2 * kk + (lane / 8) % 2));
            mma(acc[2 * p], a[kk], b[0], b[1]);
            mma(acc[2 * p + 1], a[kk], b[2], b[3]);
        }
}

// acc (16x64) += P (16x64 fp32 accumulator, rounded to floatX) @ tile, i.e. B[k][n] = tile[k][n]:
// rows of the tile are the reduction index (keys in P V).
__device__ inline void mma_p_tile(float (&acc)[8][4], const float (&p)[8][4], const floatX* tile, int lane) {
    for (int kk = 0; kk < 4; kk++) {
        const uint32_t a[4] = {pack2(p[2 * kk][0], p[2 * kk][1]), pack2(p[2 * kk][2], p[2 * kk][3]),
                               pack2(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        for (int q = 0; q < 4; q++) {
            uint32_t b[4];
            ldsm_x4_trans(b, tile + swz(16 * kk + (lane % 8) + 8 * ((lane / 8) % 2), 2 * q + lane / 16));
            mma(acc[2 * q], a, b[0], b[1]);
            mma(acc[2 * q + 1], a, b[2], b[3]);
        }
    }
}

__device__ inline void zero(float (&acc)[8][4]) {
    for (int j = 0; j < 8; j++) for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
}

// Copies 64 rows of 64 elements, rows row0.. of a (T, stride) matrix, into a swizzled tile; rows
// at or past T become zeros. Asynchronous: cp_async_commit + cp_async_wait + __syncthreads before use.
__device__ inline void load_tile(floatX* tile, const floatX* src, size_t stride, int row0, int T) {
    for (int i = threadIdx.x; i < TILE * HS / 8; i += THREADS) {
        const int r = i / 8, c = i % 8;
        const bool valid = row0 + r < T;
        cp_async16(tile + swz(r, c), src + (valid ? (size_t)(row0 + r) * stride + c * 8 : 0), valid);
    }
}

// Writes the warp's 16 rows (row0 + ...) of acc * mul to dst (rows of `stride`), skipping rows >= T.
__device__ inline void store_rows(floatX* dst, size_t stride, const float (&acc)[8][4], float mul0, float mul1,
                                  int row0, int T, int lane) {
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 8; j++)
        for (int h = 0; h < 2; h++) {
            const int row = row0 + g + 8 * h;
            if (row >= T) continue;
            const float m = h ? mul1 : mul0;
            *reinterpret_cast<uint32_t*>(dst + (size_t)row * stride + 8 * j + 2 * t) = pack2(acc[j][2 * h] * m, acc[j][2 * h + 1] * m);
        }
}

// ---------------------------------------------------------------------------------------------
// Kernels. Grid: (B*NH, T/64 rounded up). blockIdx.x = b*NH + h.

// out (B,T,NH,64) and lse (B,NH,T) <- causal softmax(q k^T / 8) v. Query tiles are taken last
// first: under the causal mask they are the most work, and starting them first evens out the tail.
__global__ void __launch_bounds__(THREADS) forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH) {
    __shared__ __align__(128) floatX q_s[TILE * HS], k_s[2][TILE * HS], v_s[2][TILE * HS];
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS;
    const int qt = gridDim.y - 1 - blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const size_t stride = 3 * (size_t)C;
    const floatX* q = qkv + (size_t)b * T * stride + h * HS;
    const floatX* k = q + C;
    const floatX* v = q + 2 * C;
    const float sl2 = 0.125f * LOG2E;  // 1/sqrt(64), and base 2 so exp2 can be used

    load_tile(q_s, q, stride, qt * TILE, T);
    load_tile(k_s[0], k, stride, 0, T);
    load_tile(v_s[0], v, stride, 0, T);
    cp_async_commit();
    uint32_t qa[4][4];
    float o[8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    zero(o);
    for (int kt = 0; kt <= qt; kt++) {
        if (kt < qt) {  // prefetch the next K/V tile into the other buffer while this one computes
            load_tile(k_s[(kt + 1) % 2], k, stride, (kt + 1) * TILE, T);
            load_tile(v_s[(kt + 1) % 2], v, stride, (kt + 1) * TILE, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt == 0) load_a_frags(qa, q_s, 16 * warp, lane);
        float s[8][4];
        zero(s);
        mma_a_tileT(s, qa, k_s[kt % 2], lane);
        // scale, causal mask (diagonal tile only), and the online softmax update per row
        float mx[2] = {m[0], m[1]};
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 4; e++) {
                const int row = qt * TILE + 16 * warp + g + 8 * (e / 2), col = kt * TILE + 8 * j + 2 * t + (e & 1);
                s[j][e] = (kt == qt && col > row) ? -INFINITY : s[j][e] * sl2;
                mx[e / 2] = fmaxf(mx[e / 2], s[j][e]);
            }
        for (int h2 = 0; h2 < 2; h2++) {
            mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffff, mx[h2], 1));
            mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffff, mx[h2], 2));
            const float alpha = exp2f(m[h2] - mx[h2]);  // rescales what was summed under the old max
            l[h2] *= alpha;
            for (int j = 0; j < 8; j++) { o[j][2 * h2] *= alpha; o[j][2 * h2 + 1] *= alpha; }
            m[h2] = mx[h2];
        }
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 4; e++) {
                s[j][e] = exp2f(s[j][e] - m[e / 2]);
                l[e / 2] += s[j][e];
            }
        mma_p_tile(o, s, v_s[kt % 2], lane);
        __syncthreads();  // the next iteration's prefetch overwrites the buffer just read
    }
    for (int h2 = 0; h2 < 2; h2++) {
        l[h2] += __shfl_xor_sync(0xffffffff, l[h2], 1);
        l[h2] += __shfl_xor_sync(0xffffffff, l[h2], 2);
    }
    const int row0 = qt * TILE + 16 * warp;
    store_rows(out + (size_t)b * T * C + h * HS, C, o, 1.0f / l[0], 1.0f / l[1], row0, T, lane);
    if (t == 0)
        for (int h2 = 0; h2 < 2; h2++) {
            const int row = row0 + g + 8 * h2;
            if (row < T) lse[(size_t)bh * T + row] = (m[h2] + log2f(l[h2])) / LOG2E;  // natural log
        }
}

// delta (B,NH,T) <- rowsum(dout * out) per head: the softmax backward's per-row correction term
// (sum_j P_ij dP_ij = dO_i . O_i). One thread per (b, t, h).
__global__ void backward_delta_kernel(float* delta, const floatX* dout, const floatX* out, int B, int T, int NH) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * NH) return;
    const int h = i % NH, bt = i / NH, b = bt / T, t = bt % T;
    const floatX* d = dout + i * HS;
    const floatX* o = out + i * HS;
    float acc = 0.0f;
    for (int c = 0; c < HS; c += x128::size) {
        x128 dv = load128(d + c), ov = load128(o + c);
        for (int k = 0; k < x128::size; k++) acc += (float)dv[k] * (float)ov[k];
    }
    delta[((size_t)b * NH + h) * T + t] = acc;
}

// dK, dV for one 64-key tile (rows of this block = keys). For each query tile at or after it:
//   S^T = K Q^T, P^T = exp(S^T/8 - lse[query]), dP^T = V dO^T, dS^T = P^T (dP^T - delta[query])
//   dV += P^T dO,  dK += dS^T Q / 8
// Dynamic shared memory: k, v tiles + 2 x (q, dout) tiles + 2 x 2 x 64 floats.
__global__ void __launch_bounds__(THREADS) backward_dkdv_kernel(floatX* dqkv, const floatX* qkv, const floatX* dout,
                                                                const float* lse, const float* delta, int T, int NH) {
    extern __shared__ __align__(128) char smem[];
    floatX* k_s = (floatX*)smem;
    floatX* v_s = k_s + TILE * HS;
    floatX* q_s = v_s + TILE * HS;         // [2][TILE*HS]
    floatX* do_s = q_s + 2 * TILE * HS;    // [2][TILE*HS]
    float* lse_s = (float*)(do_s + 2 * TILE * HS);  // [2][TILE], in base 2
    float* dl_s = lse_s + 2 * TILE;                 // [2][TILE]
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS;
    const int kt = blockIdx.y, nq = gridDim.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const size_t stride = 3 * (size_t)C;
    const floatX* q = qkv + (size_t)b * T * stride + h * HS;
    const floatX* k = q + C;
    const floatX* v = q + 2 * C;
    const floatX* dO = dout + (size_t)b * T * C + h * HS;
    const float* lse_bh = lse + (size_t)bh * T;
    const float* dl_bh = delta + (size_t)bh * T;
    const float sl2 = 0.125f * LOG2E;

    auto load_q_tile = [&](int qt, int buf) {
        load_tile(q_s + buf * TILE * HS, q, stride, qt * TILE, T);
        load_tile(do_s + buf * TILE * HS, dO, C, qt * TILE, T);
        for (int i = threadIdx.x; i < TILE; i += THREADS) {   // plain loads: small, read after the barrier
            const int row = qt * TILE + i;
            lse_s[buf * TILE + i] = row < T ? lse_bh[row] * LOG2E : INFINITY;  // padding rows: P = 0
            dl_s[buf * TILE + i] = row < T ? dl_bh[row] : 0.0f;
        }
    };
    load_tile(k_s, k, stride, kt * TILE, T);
    load_tile(v_s, v, stride, kt * TILE, T);
    load_q_tile(kt, 0);
    cp_async_commit();
    uint32_t ka[4][4], va[4][4];
    float dk[8][4], dv[8][4];
    zero(dk); zero(dv);
    for (int qt = kt; qt < nq; qt++) {
        const int buf = (qt - kt) % 2;
        if (qt + 1 < nq) { load_q_tile(qt + 1, 1 - buf); cp_async_commit(); cp_async_wait<1>(); }
        else cp_async_wait<0>();
        __syncthreads();
        if (qt == kt) { load_a_frags(ka, k_s, 16 * warp, lane); load_a_frags(va, v_s, 16 * warp, lane); }
        const floatX* qs = q_s + buf * TILE * HS;
        const floatX* dos = do_s + buf * TILE * HS;
        float p[8][4], dp[8][4];
        zero(p); zero(dp);
        mma_a_tileT(p, ka, qs, lane);    // S^T (keys x queries)
        mma_a_tileT(dp, va, dos, lane);  // dP^T
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 4; e++) {
                const int key = kt * TILE + 16 * warp + g + 8 * (e / 2), qcol = 8 * j + 2 * t + (e & 1);
                const bool masked = qt * TILE + qcol < key;  // query before key: not attended
                const float pe = masked ? 0.0f : exp2f(p[j][e] * sl2 - lse_s[buf * TILE + qcol]);
                p[j][e] = pe;
                dp[j][e] = pe * (dp[j][e] - dl_s[buf * TILE + qcol]);  // dS^T
            }
        mma_p_tile(dv, p, dos, lane);   // dV += P^T dO
        mma_p_tile(dk, dp, qs, lane);   // dK += dS^T Q
        __syncthreads();
    }
    floatX* dst = dqkv + (size_t)b * T * stride + h * HS;
    store_rows(dst + C, stride, dk, 0.125f, 0.125f, kt * TILE + 16 * warp, T, lane);
    store_rows(dst + 2 * C, stride, dv, 1.0f, 1.0f, kt * TILE + 16 * warp, T, lane);
}

// dQ for one 64-query tile (rows = queries). For each key tile at or before it:
//   S = Q K^T, P = exp(S/8 - lse), dP = dO V^T, dS = P (dP - delta),  dQ += dS K / 8
// Dynamic shared memory: q, dout tiles + 2 x (k, v) tiles.
__global__ void __launch_bounds__(THREADS) backward_dq_kernel(floatX* dqkv, const floatX* qkv, const floatX* dout,
                                                              const float* lse, const float* delta, int T, int NH) {
    extern __shared__ __align__(128) char smem[];
    floatX* q_s = (floatX*)smem;
    floatX* do_s = q_s + TILE * HS;
    floatX* k_s = do_s + TILE * HS;   // [2][TILE*HS]
    floatX* v_s = k_s + 2 * TILE * HS; // [2][TILE*HS]
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS;
    const int qt = gridDim.y - 1 - blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const size_t stride = 3 * (size_t)C;
    const floatX* q = qkv + (size_t)b * T * stride + h * HS;
    const floatX* k = q + C;
    const floatX* v = q + 2 * C;
    const floatX* dO = dout + (size_t)b * T * C + h * HS;
    const float sl2 = 0.125f * LOG2E;
    float lse2[2], dl[2];
    for (int h2 = 0; h2 < 2; h2++) {
        const int row = qt * TILE + 16 * warp + g + 8 * h2;
        lse2[h2] = row < T ? lse[(size_t)bh * T + row] * LOG2E : INFINITY;
        dl[h2] = row < T ? delta[(size_t)bh * T + row] : 0.0f;
    }
    load_tile(q_s, q, stride, qt * TILE, T);
    load_tile(do_s, dO, C, qt * TILE, T);
    load_tile(k_s, k, stride, 0, T);
    load_tile(v_s, v, stride, 0, T);
    cp_async_commit();
    uint32_t qa[4][4], da[4][4];
    float dq[8][4];
    zero(dq);
    for (int kt = 0; kt <= qt; kt++) {
        const int buf = kt % 2;
        if (kt < qt) {
            load_tile(k_s + (1 - buf) * TILE * HS, k, stride, (kt + 1) * TILE, T);
            load_tile(v_s + (1 - buf) * TILE * HS, v, stride, (kt + 1) * TILE, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt == 0) { load_a_frags(qa, q_s, 16 * warp, lane); load_a_frags(da, do_s, 16 * warp, lane); }
        const floatX* ks = k_s + buf * TILE * HS;
        float s[8][4], dp[8][4];
        zero(s); zero(dp);
        mma_a_tileT(s, qa, ks, lane);                        // S = Q K^T
        mma_a_tileT(dp, da, v_s + buf * TILE * HS, lane);    // dP = dO V^T
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 4; e++) {
                const int row = qt * TILE + 16 * warp + g + 8 * (e / 2), col = kt * TILE + 8 * j + 2 * t + (e & 1);
                const float pe = col > row ? 0.0f : exp2f(s[j][e] * sl2 - lse2[e / 2]);
                s[j][e] = pe * (dp[j][e] - dl[e / 2]);        // dS
            }
        mma_p_tile(dq, s, ks, lane);   // dQ += dS K
        __syncthreads();
    }
    store_rows(dqkv + (size_t)b * T * stride + h * HS, stride, dq, 0.125f, 0.125f, qt * TILE + 16 * warp, T, lane);
}

}  // namespace flash

// ---------------------------------------------------------------------------------------------
// Launchers

// out (B,T,C), lse (B,NH,T) <- causal self-attention of qkv (B,T,3C), head size 64.
inline void flash_attention_forward(Context* ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, int NH) {
    dim3 grid(B * NH, ceil_div(T, flash::TILE));
    flash::forward_kernel<<<grid, flash::THREADS, 0, ctx->stream>>>(out, lse, qkv, T, NH);
    launchCheck();
}

// dqkv (B,T,3C) <- gradient given dout (B,T,C), with qkv, out, lse from the forward.
// delta (B,NH,T) fp32 is scratch. Overwrites dqkv.
inline void flash_attention_backward(Context* ctx, floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv,
                                     const floatX* out, const float* lse, int B, int T, int NH) {
    using namespace flash;
    const size_t n = (size_t)B * T * NH;
    backward_delta_kernel<<<ceil_div(n, 256), 256, 0, ctx->stream>>>(delta, dout, out, B, T, NH);
    launchCheck();
    dim3 grid(B * NH, ceil_div(T, TILE));
    const size_t smem_kv = 6 * TILE * HS * sizeof(floatX) + 4 * TILE * sizeof(float);
    const size_t smem_q = 6 * TILE * HS * sizeof(floatX);
    cudaCheck(cudaFuncSetAttribute(backward_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    cudaCheck(cudaFuncSetAttribute(backward_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    backward_dkdv_kernel<<<grid, THREADS, smem_kv, ctx->stream>>>(dqkv, qkv, dout, lse, delta, T, NH);
    launchCheck();
    backward_dq_kernel<<<grid, THREADS, smem_q, ctx->stream>>>(dqkv, qkv, dout, lse, delta, T, NH);
    launchCheck();
}
