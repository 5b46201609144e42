// Flash attention (FlashAttention-2 style) for head size 64, causal, fp16/bf16 on tensor cores.
//
// Why: the plain attention writes the (B,NH,T,T) score/probability matrices to memory and reads
// them back several times; at T=1024 that traffic, not the arithmetic, sets its speed. Here a
// block keeps a 128-row tile of queries on chip and streams 64-row tiles of keys/values past it,
// with the softmax computed "online" (a running max and sum per row, earlier partial results
// rescaled when the max grows). Nothing of size T x T ever reaches memory. The backward recomputes
// the probabilities from Q, K and the saved per-row log-sum-exp instead of storing them.
//
// Layout: qkv (B,T,3,NH,64) as the qkv matmul writes it; out (B,T,NH,64); lse (B,NH,T) fp32.
// Tensor cores: mma.sync m16n8k16 (fp32 accumulation), operands loaded from shared memory with
// ldmatrix. Every mma kernel is 4 warps; warp w owns rows 32w..32w+31 of the block's 128-row tile
// (two 16-row mma tiles), so all row-wise work (softmax, scaling) stays inside a warp.
//
// What sets the speed (H100/H200, mma.sync): per 16x8x16 mma a warp also reads a B operand from
// shared memory, and shared memory (128 B/clock/SM) is slower than the tensor cores. A warp that
// owns 32 rows instead of 16 uses every B fragment it loads twice, which halves the shared-memory
// traffic per FLOP; that, not the tile size as such, is why the tiles are 128 rows. The other
// costs are the exponentials (16/clock/SM: for head size 64 that is 2/3 of the mma time) and the
// fp32 softmax arithmetic, which is kept small: the 1/8 scale and log2(e) are folded into one FMA
// before exp2, and the causal mask is only applied on the tiles that straddle the diagonal.
//
// Backward = a small delta kernel (rowsum(dout * out)), then two main kernels, no atomics (so
// results are bitwise reproducible):
//   dkdv: a block per 128 KEYS; loops over the query tiles that see them; dK, dV stay in registers.
//   dq:   a block per 128 QUERIES; loops over the key tiles they see; dQ stays in registers.
// That recomputes QK^T and dO V^T once more than a single atomic-based kernel would (7 instead of
// 5 matmuls per tile pair) in exchange for determinism and simplicity.
//
// Causal load balance: a block of late queries (forward, dq) or early keys (dkdv) has the most
// tiles to visit; blocks are numbered so those start first and the short ones fill the tail.
//
// Measured (H200, dev/cuda/attention.cu, B=64 T=1024 NH=12, effective TFLOP/s with the causal
// FLOP count): forward 211 (bf16) / 214 (fp16), backward 166 / 167 (delta 0.08 ms, dkdv 0.92 ms,
// dq 0.56 ms); the 64-row, 16-rows-per-warp version before this one: 182 / 136. Every mma kernel
// uses ~242-255 registers per thread, so an SM holds 2 blocks = 8 warps, and those few warps
// cannot hide the mma -> softmax -> mma dependency inside each tile: the tensor cores idle while
// a warp does its exponentials. (Re-reading the Q fragments from shared memory to fit 3 blocks per
// SM was measured slower.) On Hopper, flash_attention_wgmma.cuh does better with wgmma (warpgroup
// MMAs that read shared memory directly and run asynchronously under the exponentials); these
// kernels are every other GPU's path and the reference the wgmma ones are checked against.
#pragma once
#include "common.cuh"
#if !defined(ENABLE_FP32)  // fp16/bf16 builds only (FP32 builds use the reference attention)

namespace flash {

constexpr int HS = 64;                      // head size (every GPT-2 size has 64)
constexpr int THREADS = 128;                // 4 warps in every kernel
constexpr int WARP_ROWS = 32;               // rows a warp owns: two 16-row mma tiles
constexpr int BLOCK_ROWS = 4 * WARP_ROWS;   // 128: queries of a forward/dq block, keys of a dkdv block
constexpr int STEP = 64;                    // rows of the streamed tiles: keys (forward, dq), queries (dkdv)
constexpr float LOG2E = 1.4426950408889634f;
constexpr float SCALE = 0.125f;             // 1/sqrt(64)
constexpr float SCALE_LOG2 = SCALE * LOG2E; // exp(x/8) = exp2(x * SCALE_LOG2)

// ---------------------------------------------------------------------------------------------
// Tensor-core primitives and the swizzled tile layout (inline PTX; the async copies are in common.cuh).

// A tile of R rows x 64 halves in shared memory, rows of 8 chunks of 16 bytes. Chunk c of row r
// is stored at chunk position c ^ (r % 8): ldmatrix reads one 16-byte chunk from each of 8
// consecutive rows, and without the XOR those 8 chunks would sit in the same banks (row stride
// 128 bytes) and be served one after another.
__device__ inline int swz(int row, int chunk) { return row * HS + ((chunk ^ (row & 7)) << 3); }

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

// Two floats as two floatX in one register, the first in the low half (the lower column); one
// cvt instruction.
__device__ inline uint32_t pack2(float lo, float hi) {
#if defined(ENABLE_BF16)
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
#else
    __half2 v = __floats2half2_rn(lo, hi);
#endif
    return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------------------------------------
// Fragments. A warp's accumulator of 16M rows x 8N columns is float[M][N][4]: mma tile (i, j)
// covers rows 16i..16i+15, columns 8j..8j+7; element e of a lane (g = lane/4, t = lane%4) is row
// 16i + g (e<2) or 16i + g + 8 (e>=2), column 8j + 2t + (e&1). The same lane pattern is the A
// operand of the next product, which is why P (or dS) is fed to the second matmul straight from
// registers, never through shared memory.

// The A operands (k = 64) of M 16-row tiles: rows row0.. of a swizzled tile.
template <int M>
__device__ inline void load_a_frags(uint32_t (&a)[M][4][4], const floatX* tile, int row0, int lane) {
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            ldsm_x4(a[i][kk], tile + swz(row0 + 16 * i + (lane % 8) + 8 * ((lane / 8) % 2), 2 * kk + lane / 16));
}

// acc (16M x 8N) += A (16M x 64, registers) @ tile[row0 .. row0+8N)^T: B[k][n] = tile[row0+n][k],
// rows of the tile are the output columns (keys in Q K^T). Each B fragment serves all M row tiles.
template <int M, int N>
__device__ inline void mma_abt(float (&acc)[M][N][4], const uint32_t (&a)[M][4][4], const floatX* tile, int row0, int lane) {
    static_assert(N % 2 == 0, "one ldmatrix.x4 loads two 8-column B fragments");
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int p = 0; p < N / 2; p++) {
            uint32_t b[4];
            ldsm_x4(b, tile + swz(row0 + 16 * p + (lane % 8) + 8 * (lane / 16), 2 * kk + (lane / 8) % 2));
#pragma unroll
            for (int i = 0; i < M; i++) {
                mma(acc[i][2 * p], a[i][kk], b[0], b[1]);
                mma(acc[i][2 * p + 1], a[i][kk], b[2], b[3]);
            }
        }
}

// acc (16M x 64) += P (16M x 16K, an fp32 accumulator rounded to floatX) @ tile[row0 .. row0+16K):
// B[k][n] = tile[row0+k][n], rows of the tile are the reduction index (keys in P V).
template <int M, int K>
__device__ inline void mma_pb(float (&acc)[M][8][4], const float (&p)[M][2 * K][4], const floatX* tile, int row0, int lane) {
#pragma unroll
    for (int kk = 0; kk < K; kk++) {
        uint32_t a[M][4];
#pragma unroll
        for (int i = 0; i < M; i++) {
            a[i][0] = pack2(p[i][2 * kk][0], p[i][2 * kk][1]);
            a[i][1] = pack2(p[i][2 * kk][2], p[i][2 * kk][3]);
            a[i][2] = pack2(p[i][2 * kk + 1][0], p[i][2 * kk + 1][1]);
            a[i][3] = pack2(p[i][2 * kk + 1][2], p[i][2 * kk + 1][3]);
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            uint32_t b[4];
            ldsm_x4_trans(b, tile + swz(row0 + 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2), 2 * q + lane / 16));
#pragma unroll
            for (int i = 0; i < M; i++) {
                mma(acc[i][2 * q], a[i], b[0], b[1]);
                mma(acc[i][2 * q + 1], a[i], b[2], b[3]);
            }
        }
    }
}

template <int M, int N>
__device__ inline void zero(float (&acc)[M][N][4]) {
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
        for (int j = 0; j < N; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
}

// The causal mask on a fragment whose rows start at row0 and columns at col0 (absolute positions):
// masked elements become -inf, so exp2 gives exactly 0. KEY_ROWS = false: rows are queries,
// columns keys (S = Q K^T), masked where key > query. KEY_ROWS = true: the transpose (S^T = K Q^T
// in dkdv), masked where query < key. Only called on tiles that straddle the diagonal.
template <bool KEY_ROWS, int M, int N>
__device__ inline void mask_causal(float (&s)[M][N][4], int row0, int col0, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
        for (int j = 0; j < N; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = row0 + 16 * i + g + 8 * (e / 2), col = col0 + 8 * j + 2 * t + (e & 1);
                if (KEY_ROWS ? col < row : col > row) s[i][j][e] = -INFINITY;
            }
}

// Copies ROWS rows of 64 elements, rows row0.. of a (T, stride) matrix, into a swizzled tile; rows
// at or past T become zeros. Asynchronous: cp_async_commit, then cp_async_wait_all + __syncthreads
// before use. 8 consecutive threads copy one 128-byte row: coalesced.
template <int ROWS>
__device__ inline void load_rows(floatX* tile, const floatX* src, size_t stride, int row0, int T) {
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * HS / 8; i += THREADS) {
        const int r = i / 8, c = i % 8;
        const bool valid = row0 + r < T;
        cp_async16(tile + swz(r, c), src + (valid ? (size_t)(row0 + r) * stride + c * 8 : 0), valid);
    }
}

// Writes 16 rows (row0 + ...) of acc * mul (mul0 for a lane's upper row, mul1 for its lower one)
// to dst (rows of `stride` elements), skipping rows >= T.
__device__ inline void store_rows(floatX* dst, size_t stride, const float (&acc)[8][4], float mul0, float mul1,
                                  int row0, int T, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + g + 8 * h;
            if (row >= T) continue;
            const float m = h ? mul1 : mul0;
            *reinterpret_cast<uint32_t*>(dst + (size_t)row * stride + 8 * j + 2 * t) = pack2(acc[j][2 * h] * m, acc[j][2 * h + 1] * m);
        }
}

// Where one (batch, head) lives in each tensor. The forward, dk/dv and dq kernels' blockIdx.x is
// b*NH + h (the delta kernel's grid is flat).
struct Head {
    size_t qkv;     // offset of q[b, t=0, h, 0] in qkv (B,T,3,NH,64) (and dqkv); k is +C, v is +2C
    size_t out;     // offset of out[b, t=0, h, 0] in (B,T,NH,64) = (B,T,C): out, dout; rows C apart
    size_t row;     // offset of [b, h, t=0] in (B,NH,T): lse, delta
    int C;          // NH * 64
    size_t stride;  // 3C: elements between consecutive rows (t) of qkv and dqkv
};
__device__ inline Head head_at(int bh, int T, int NH) {  // bh = b * NH + h
    const int b = bh / NH, h = bh % NH, C = NH * HS;
    return Head{(size_t)b * T * 3 * C + (size_t)h * HS, (size_t)b * T * C + (size_t)h * HS, (size_t)bh * T, C, 3 * (size_t)C};
}
__device__ inline Head head_of(int T, int NH) { return head_at(blockIdx.x, T, NH); }  // grid x = b * NH + h
// The head's q, k, v rows at t=0 inside qkv (B,T,3,NH,64); rows hd.stride apart.
struct HeadQKV { const floatX *q, *k, *v; };
__device__ inline HeadQKV head_qkv(const floatX* qkv, const Head& hd) {
    const floatX* q = qkv + hd.qkv;
    return {q, q + hd.C, q + 2 * hd.C};
}

// ---------------------------------------------------------------------------------------------
// Kernels. Grid: (B*NH, T/128 rounded up), except the delta kernel.

// out (B,T,NH,64) and lse (B,NH,T) <- causal softmax(q k^T / 8) v, one block per 128 queries of one
// (b, h). Reads qkv (B,T,3,NH,64): the block's 128 q rows once, then k and v rows in 64-key tiles
// 0 .. (last query)/64. Static shared memory: q (16 KB) + 2 x (k, v) (32 KB) = 48 KB.
//
// Pipeline: at the top of step kt one barrier says both "tile kt has landed" (each thread waited
// for its own copies first) and "everyone is done with step kt-1", so the copy of tile kt+1 can
// then go into the buffer step kt-1 read, and runs while step kt computes. One barrier per tile.
__global__ void __launch_bounds__(THREADS, 2) forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH) {
    __shared__ __align__(128) floatX q_s[BLOCK_ROWS * HS], k_s[2][STEP * HS], v_s[2][STEP * HS];
    const Head hd = head_of(T, NH);
    const size_t stride = hd.stride;
    const HeadQKV in = head_qkv(qkv, hd);
    const floatX *q = in.q, *k = in.k, *v = in.v;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BLOCK_ROWS;  // the last (longest) query tiles first
    const int w0 = q0 + warp * WARP_ROWS;                      // the warp's first query
    const int nkt = (min(q0 + BLOCK_ROWS, T) + STEP - 1) / STEP;  // key tiles up to the block's last query

    load_rows<BLOCK_ROWS>(q_s, q, stride, q0, T);
    load_rows<STEP>(k_s[0], k, stride, 0, T);
    load_rows<STEP>(v_s[0], v, stride, 0, T);
    cp_async_commit();
    uint32_t qa[2][4][4];
    float o[2][8][4], m[2][2], l[2][2];  // m: running max of the raw scores q.k; l: running sum
    zero(o);
#pragma unroll
    for (int i = 0; i < 2; i++) { m[i][0] = m[i][1] = -INFINITY; l[i][0] = l[i][1] = 0.0f; }
    for (int kt = 0; kt < nkt; kt++) {
        const int buf = kt & 1;
        cp_async_wait_all();
        __syncthreads();
        if (kt + 1 < nkt) {
            load_rows<STEP>(k_s[buf ^ 1], k, stride, (kt + 1) * STEP, T);
            load_rows<STEP>(v_s[buf ^ 1], v, stride, (kt + 1) * STEP, T);
            cp_async_commit();
        }
        if (kt == 0) load_a_frags(qa, q_s, warp * WARP_ROWS, lane);
        const int k0 = kt * STEP;
        if (k0 >= w0 + WARP_ROWS) continue;  // every key after every query of this warp (warp-uniform)
        float s[2][8][4];
        zero(s);
        mma_abt(s, qa, k_s[buf], 0, lane);                            // S = Q K^T, raw
        if (k0 + STEP - 1 > w0) mask_causal<false>(s, w0, k0, lane);  // the diagonal tiles only
        // Online softmax, per row: the new max; rescale what was accumulated under the old one
        // (alpha = 0 on the first tile, when the old max is -inf); P = exp2(S*c - max*c), one FMA.
        float mx[2][2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i][0] = m[i][0]; mx[i][1] = m[i][1];
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) mx[i][e / 2] = fmaxf(mx[i][e / 2], s[i][j][e]);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mx[i][h] = fmaxf(mx[i][h], __shfl_xor_sync(0xffffffff, mx[i][h], 1));  // the 4 lanes of a row
                mx[i][h] = fmaxf(mx[i][h], __shfl_xor_sync(0xffffffff, mx[i][h], 2));
                const float alpha = exp2f((m[i][h] - mx[i][h]) * SCALE_LOG2);
                m[i][h] = mx[i][h];
                l[i][h] *= alpha;
#pragma unroll
                for (int j = 0; j < 8; j++) { o[i][j][2 * h] *= alpha; o[i][j][2 * h + 1] *= alpha; }
                mx[i][h] *= SCALE_LOG2;
            }
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[i][j][e] = exp2f(fmaf(s[i][j][e], SCALE_LOG2, -mx[i][e / 2]));
                    l[i][e / 2] += s[i][j][e];
                }
        }
        mma_pb<2, 4>(o, s, v_s[buf], 0, lane);  // O += P V
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            l[i][h] += __shfl_xor_sync(0xffffffff, l[i][h], 1);
            l[i][h] += __shfl_xor_sync(0xffffffff, l[i][h], 2);
        }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row0 = w0 + 16 * i;
        store_rows(out + hd.out, hd.C, o[i], 1.0f / l[i][0], 1.0f / l[i][1], row0, T, lane);
        if (t == 0)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = row0 + g + 8 * h;
                if (row < T) lse[hd.row + row] = m[i][h] * SCALE + logf(l[i][h]);  // natural log
            }
    }
}

// delta (B,NH,T) <- rowsum(dout * out) per head: the softmax backward's per-row correction term
// (sum_j P_ij dP_ij = dO_i . O_i). Reads dout, out (B,T,NH,64). One thread per (b, t, h).
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

// dK, dV (written into dqkv (B,T,3,NH,64) at parts 1, 2) for one block of 128 keys. Reads the
// block's k, v rows once, then, for every 64-query tile at or after its first key, q and dout
// rows and their lse, delta (B,NH,T). Per tile, in 16-query chunks (warp = 32 keys x 16 queries):
//   S^T = K Q^T, P^T = exp(S^T/8 - lse[query]), dP^T = V dO^T, dS^T = P^T (dP^T - delta[query])
//   dV += P^T dO,  dK += dS^T Q / 8
// The 16-query chunks keep S^T and dP^T at 16 registers each next to the 128 of dK and dV.
// Dynamic shared memory: k, v (2 x 16 KB) + 2 x (q, dout) (32 KB) + 2 x 2 x 64 floats.
__global__ void __launch_bounds__(THREADS, 2) backward_dkdv_kernel(floatX* dqkv, const floatX* qkv, const floatX* dout,
                                                                   const float* lse, const float* delta, int T, int NH) {
    extern __shared__ __align__(128) char smem[];
    floatX* k_s = (floatX*)smem;                    // [BLOCK_ROWS * HS]
    floatX* v_s = k_s + BLOCK_ROWS * HS;            // [BLOCK_ROWS * HS]
    floatX* q_s = v_s + BLOCK_ROWS * HS;            // [2][STEP * HS]
    floatX* do_s = q_s + 2 * STEP * HS;             // [2][STEP * HS]
    float* lse_s = (float*)(do_s + 2 * STEP * HS);  // [2][STEP], in base 2
    float* dl_s = lse_s + 2 * STEP;                 // [2][STEP]
    const Head hd = head_of(T, NH);
    const size_t stride = hd.stride;
    const HeadQKV in = head_qkv(qkv, hd);
    const floatX *q = in.q, *k = in.k, *v = in.v;
    const floatX* dO = dout + hd.out;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
    const int k0 = blockIdx.y * BLOCK_ROWS;  // the first keys see the most queries: they go first
    const int kw0 = k0 + warp * WARP_ROWS;   // the warp's first key
    const int qt0 = k0 / STEP, nq = (T + STEP - 1) / STEP;

    auto load_q_tile = [&](int qt, int buf) {
        load_rows<STEP>(q_s + buf * STEP * HS, q, stride, qt * STEP, T);
        load_rows<STEP>(do_s + buf * STEP * HS, dO, hd.C, qt * STEP, T);
        for (int i = threadIdx.x; i < STEP; i += THREADS) {  // plain loads: small, read after the barrier
            const int row = qt * STEP + i;
            lse_s[buf * STEP + i] = row < T ? lse[hd.row + row] * LOG2E : INFINITY;  // padding rows: P = 0
            dl_s[buf * STEP + i] = row < T ? delta[hd.row + row] : 0.0f;
        }
    };
    load_rows<BLOCK_ROWS>(k_s, k, stride, k0, T);
    load_rows<BLOCK_ROWS>(v_s, v, stride, k0, T);
    load_q_tile(qt0, 0);
    cp_async_commit();
    uint32_t ka[2][4][4], va[2][4][4];
    float dk[2][8][4], dv[2][8][4];
    zero(dk); zero(dv);
    for (int qt = qt0; qt < nq; qt++) {
        const int buf = (qt - qt0) & 1;
        cp_async_wait_all();
        __syncthreads();  // tile qt landed, and step qt-1 is done with the other buffer
        if (qt + 1 < nq) { load_q_tile(qt + 1, buf ^ 1); cp_async_commit(); }
        if (qt == qt0) { load_a_frags(ka, k_s, warp * WARP_ROWS, lane); load_a_frags(va, v_s, warp * WARP_ROWS, lane); }
        const floatX* qs = q_s + buf * STEP * HS;
        const floatX* dos = do_s + buf * STEP * HS;
        const float* lse2 = lse_s + buf * STEP;
        const float* dl = dl_s + buf * STEP;
#pragma unroll
        for (int c = 0; c < STEP / 16; c++) {
            const int c0 = qt * STEP + 16 * c;       // the chunk's first query
            if (c0 + 15 < kw0) continue;             // every query before every key of this warp
            float s[2][2][4], dp[2][2][4];
            zero(s); zero(dp);
            mma_abt(s, ka, qs, 16 * c, lane);    // S^T (keys x queries)
            mma_abt(dp, va, dos, 16 * c, lane);  // dP^T
            if (c0 < kw0 + WARP_ROWS - 1) mask_causal<true>(s, kw0, c0, lane);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int col = 16 * c + 8 * j + 2 * t;
                const float2 ls = *reinterpret_cast<const float2*>(lse2 + col);
                const float2 d = *reinterpret_cast<const float2*>(dl + col);
#pragma unroll
                for (int i = 0; i < 2; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float pe = exp2f(fmaf(s[i][j][e], SCALE_LOG2, -((e & 1) ? ls.y : ls.x)));
                        s[i][j][e] = pe;
                        dp[i][j][e] = pe * (dp[i][j][e] - ((e & 1) ? d.y : d.x));  // dS^T
                    }
            }
            mma_pb<2, 1>(dv, s, dos, 16 * c, lane);  // dV += P^T dO
            mma_pb<2, 1>(dk, dp, qs, 16 * c, lane);  // dK += dS^T Q
        }
    }
    floatX* dst = dqkv + hd.qkv;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        store_rows(dst + hd.C, stride, dk[i], SCALE, SCALE, kw0 + 16 * i, T, lane);
        store_rows(dst + 2 * hd.C, stride, dv[i], 1.0f, 1.0f, kw0 + 16 * i, T, lane);
    }
}

// dQ (written into dqkv (B,T,3,NH,64) at part 0) for one block of 128 queries. Reads the block's
// q and dout rows and their lse, delta once, then k, v rows in 64-key tiles up to its last query.
// Per tile, in halves of 32 keys (warp = 32 queries x 32 keys):
//   S = Q K^T, P = exp(S/8 - lse), dP = dO V^T, dS = P (dP - delta),  dQ += dS K / 8
// Dynamic shared memory: q, dout (2 x 16 KB) + 2 x (k, v) (32 KB).
__global__ void __launch_bounds__(THREADS, 2) backward_dq_kernel(floatX* dqkv, const floatX* qkv, const floatX* dout,
                                                                 const float* lse, const float* delta, int T, int NH) {
    extern __shared__ __align__(128) char smem[];
    floatX* q_s = (floatX*)smem;               // [BLOCK_ROWS * HS]
    floatX* do_s = q_s + BLOCK_ROWS * HS;      // [BLOCK_ROWS * HS]
    floatX* k_s = do_s + BLOCK_ROWS * HS;      // [2][STEP * HS]
    floatX* v_s = k_s + 2 * STEP * HS;         // [2][STEP * HS]
    const Head hd = head_of(T, NH);
    const size_t stride = hd.stride;
    const HeadQKV in = head_qkv(qkv, hd);
    const floatX *q = in.q, *k = in.k, *v = in.v;
    const floatX* dO = dout + hd.out;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BLOCK_ROWS;  // the last (longest) query tiles first
    const int w0 = q0 + warp * WARP_ROWS;
    const int nkt = (min(q0 + BLOCK_ROWS, T) + STEP - 1) / STEP;
    float lse2[2][2], dl[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = w0 + 16 * i + g + 8 * h;
            lse2[i][h] = row < T ? lse[hd.row + row] * LOG2E : INFINITY;
            dl[i][h] = row < T ? delta[hd.row + row] : 0.0f;
        }
    load_rows<BLOCK_ROWS>(q_s, q, stride, q0, T);
    load_rows<BLOCK_ROWS>(do_s, dO, hd.C, q0, T);
    load_rows<STEP>(k_s, k, stride, 0, T);
    load_rows<STEP>(v_s, v, stride, 0, T);
    cp_async_commit();
    uint32_t qa[2][4][4], da[2][4][4];
    float dq[2][8][4];
    zero(dq);
    for (int kt = 0; kt < nkt; kt++) {
        const int buf = kt & 1;
        cp_async_wait_all();
        __syncthreads();
        if (kt + 1 < nkt) {
            load_rows<STEP>(k_s + (buf ^ 1) * STEP * HS, k, stride, (kt + 1) * STEP, T);
            load_rows<STEP>(v_s + (buf ^ 1) * STEP * HS, v, stride, (kt + 1) * STEP, T);
            cp_async_commit();
        }
        if (kt == 0) { load_a_frags(qa, q_s, warp * WARP_ROWS, lane); load_a_frags(da, do_s, warp * WARP_ROWS, lane); }
        const floatX* ks = k_s + buf * STEP * HS;
        const floatX* vs = v_s + buf * STEP * HS;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int c0 = kt * STEP + 32 * half;  // the first key of this half
            if (c0 >= w0 + WARP_ROWS) break;       // every key after every query of this warp
            float s[2][4][4], dp[2][4][4];
            zero(s); zero(dp);
            mma_abt(s, qa, ks, 32 * half, lane);   // S = Q K^T
            mma_abt(dp, da, vs, 32 * half, lane);  // dP = dO V^T
            if (c0 + 31 > w0) mask_causal<false>(s, w0, c0, lane);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float pe = exp2f(fmaf(s[i][j][e], SCALE_LOG2, -lse2[i][e / 2]));
                        s[i][j][e] = pe * (dp[i][j][e] - dl[i][e / 2]);  // dS
                    }
            mma_pb<2, 2>(dq, s, ks, 32 * half, lane);  // dQ += dS K
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) store_rows(dqkv + hd.qkv, stride, dq[i], SCALE, SCALE, w0 + 16 * i, T, lane);
}

}  // namespace flash

// ---------------------------------------------------------------------------------------------
// Launchers

// out (B,T,C), lse (B,NH,T) <- causal self-attention of qkv (B,T,3C), head size 64.
inline void flash_attention_forward(Context* ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, int NH) {
    dim3 grid(B * NH, ceil_div(T, flash::BLOCK_ROWS));
    flash::forward_kernel<<<grid, flash::THREADS, 0, ctx->stream>>>(out, lse, qkv, T, NH);
    launchCheck();
}

// The backward's three kernels, each on its own (dev/cuda/attention.cu also times them one by one).
// delta (B,NH,T) fp32 <- rowsum(dout * out) per head; dout, out (B,T,C) only read.
inline void flash_backward_delta(Context* ctx, float* delta, const floatX* dout, const floatX* out, int B, int T, int NH) {
    const size_t n = (size_t)B * T * NH;
    flash::backward_delta_kernel<<<ceil_div(n, 256), 256, 0, ctx->stream>>>(delta, dout, out, B, T, NH);
    launchCheck();
}
// The dk, dv parts of dqkv (B,T,3C) overwritten, its q part untouched; reads qkv (B,T,3C), dout
// (B,T,C), lse and delta (B,NH,T) fp32 (from flash_backward_delta: run that first).
inline void flash_backward_dkdv(Context* ctx, floatX* dqkv, const float* delta, const floatX* dout, const floatX* qkv,
                                const float* lse, int B, int T, int NH) {
    using namespace flash;
    const size_t smem = (2 * BLOCK_ROWS + 4 * STEP) * HS * sizeof(floatX) + 4 * STEP * sizeof(float);
    cudaCheck(cudaFuncSetAttribute(backward_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    backward_dkdv_kernel<<<dim3(B * NH, ceil_div(T, BLOCK_ROWS)), THREADS, smem, ctx->stream>>>(dqkv, qkv, dout, lse, delta, T, NH);
    launchCheck();
}
// The dq part of dqkv (B,T,3C) overwritten, its k, v parts untouched; reads the same as
// flash_backward_dkdv.
inline void flash_backward_dq(Context* ctx, floatX* dqkv, const float* delta, const floatX* dout, const floatX* qkv,
                              const float* lse, int B, int T, int NH) {
    using namespace flash;
    const size_t smem = (2 * BLOCK_ROWS + 4 * STEP) * HS * sizeof(floatX);
    cudaCheck(cudaFuncSetAttribute(backward_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    backward_dq_kernel<<<dim3(B * NH, ceil_div(T, BLOCK_ROWS)), THREADS, smem, ctx->stream>>>(dqkv, qkv, dout, lse, delta, T, NH);
    launchCheck();
}

// dqkv (B,T,3C) <- gradient given dout (B,T,C), with qkv, out, lse from the forward.
// delta (B,NH,T) fp32 is scratch. Overwrites dqkv.
inline void flash_attention_backward(Context* ctx, floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv,
                                     const floatX* out, const float* lse, int B, int T, int NH) {
    flash_backward_delta(ctx, delta, dout, out, B, T, NH);
    flash_backward_dkdv(ctx, dqkv, delta, dout, qkv, lse, B, T, NH);
    flash_backward_dq(ctx, dqkv, delta, dout, qkv, lse, B, T, NH);
}
#endif  // !ENABLE_FP32
