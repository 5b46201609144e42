// Gradients sent over the link as int8 (--grad-int8 1): about half the bytes of a bf16 all-reduce,
// a quarter of an fp32 one, for links where the reduction, not the compute, sets the step's time
// (NCCL_P2P_DISABLE=1, PCIe, several nodes over Ethernet: the seed's "2 GPUs are barely faster than 1").
//
// Why not just all-reduce int8: NCCL would add the int8 values themselves (overflow, no common
// scale). So the sum is done by us, in fp32, in two phases that each move the data once:
//   1. reduce-scatter by hand: the bucket is cut into one piece per owner rank; every rank sends
//      each piece, quantized, to its owner (ncclSend/ncclRecv, grouped); the owner adds its own
//      exact values and the dequantized pieces of all other ranks, in rank order (deterministic),
//      and multiplies the sum by 1 / (rank count);
//   2. DDP: the owner quantizes its averaged piece, the pieces are all-gathered (ncclAllGather,
//      int8 + scales) and every rank, the owner too, dequantizes the whole bucket into its
//      gradients, so all ranks hold the same bits. ZeRO-1 stops after phase 1: only a shard's owner
//      needs its averaged gradient (its pieces are the shards, as in the uncompressed ncclReduce).
//
// Quantization: groups of QGROUP = 128 consecutive values share one fp32 scale, absmax / 127;
// q = round(v / scale) in [-127, 127]. Each quantization errs by at most half a step, 1/254 of its
// group's largest value. A rank's contribution to another rank's piece goes through one (when it
// is sent); the owner's own contribution through none; DDP then rounds the average once more (the
// all-gather), ZeRO-1 does not. A group whose largest value is below QGROUP_TINY is sent as zeros
// (127 / absmax would overflow; gradients that small are zeros for any update). A group holding
// inf or nan gets a nan scale, so all of its 128 values turn nan where they arrive (DDP: on every
// rank; ZeRO-1: in the owner's shard); the step is skipped all the same, by the per-rank flags
// taken before the reduction (llmc/grad_reducer.cuh) and the gradient norm. Bytes on the wire per value:
// 1 + 4/128.
//
// Layout in the staging buffers: a piece takes a slot of int8 values, a multiple of QGROUP (its
// length rounded up; with DDP every piece the same slot, as ncclAllGather needs), and slot /
// QGROUP scales; the values past a piece's end count as 0.
#pragma once
#include <algorithm>   // std::max({...}), std::min (grad_bucket_max)
#include <cstdint>
#include <vector>
#include "common.cuh"
#include "model.h"

constexpr int QGROUP = 128;   // values per scale: one warp, 4 values per lane
constexpr float QGROUP_TINY = 1e-30f;   // a group's largest value below this: sent as zeros

inline size_t qgroup_slot(size_t n) { return ceil_div(n, QGROUP) * QGROUP; }

// ----------------------------------------------------------------------------------------------
// Kernels: quantize and reduce give one warp to each group of 128 values, lane l holding values
// 4l..4l+3 (grid-stride over groups); dequantize is one thread per value (grid-stride).

// Quantizes the warp's 4 values per lane (v) as group g: q[g*128 + 4*lane ...] and, from lane 0, s[g].
__device__ inline void quantize_group(const float v[4], int8_t* q, float* s, size_t g) {
    const int lane = threadIdx.x % 32;
    float amax = 0.0f;
    bool bad = false;
    for (int k = 0; k < 4; k++) { amax = fmaxf(amax, fabsf(v[k])); bad |= !isfinite(v[k]); }
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    bad = __any_sync(0xffffffffu, bad);   // fmaxf drops a nan: test finiteness separately
    const bool zeros = bad || amax < QGROUP_TINY;
    // __fdiv_rn, not '/': under --use_fast_math '/' is div.approx.ftz.f32, which returns 0 for a
    // divisor above 2^126 (~8.5e37, finite in bf16 and fp32). Such a group was sent as zeros with a
    // finite scale: a huge finite gradient vanished on every rank, and the norm no longer showed it.
    const float inv = zeros ? 0.0f : __fdiv_rn(127.0f, amax);
    char4 out;
    signed char* o8 = reinterpret_cast<signed char*>(&out);
    for (int k = 0; k < 4; k++) o8[k] = (signed char)__float2int_rn(fminf(fmaxf(v[k] * inv, -127.0f), 127.0f));
    *reinterpret_cast<char4*>(q + g * QGROUP + 4 * lane) = out;
    if (lane == 0) s[g] = bad ? __int_as_float(0x7fc00000) : zeros ? 0.0f : amax / 127.0f;
}

// x (n) -> q (slot(n)) and s (slot(n) / 128). Not in place. q must be 4-byte aligned.
__global__ void quantize_groups_kernel(const floatX* x, size_t n, int8_t* q, float* s) {
    const size_t groups = (n + QGROUP - 1) / QGROUP, warps = (size_t)gridDim.x * blockDim.x / 32;
    const int lane = threadIdx.x % 32;
    for (size_t g = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; g < groups; g += warps) {
        float v[4];
        for (int k = 0; k < 4; k++) {
            const size_t i = g * QGROUP + 4 * lane + k;
            v[k] = i < n ? (float)x[i] : 0.0f;
        }
        quantize_group(v, q, s, g);
    }
}

// The owner's sum of one piece (n values): for each value, rank r's term is own[i] where r == rank,
// else recv[r*stride + i] * rs[(r*stride + i) / 128]; the terms are added in rank order, in fp32,
// and the sum multiplied by 1 / world. Then: out (n, may be null) <- the average in floatX; q, s (may be
// null) <- the average quantized (slot(n) / slot(n)/128). stride: a multiple of 128; recv's slot
// `rank` is not read, so q and s may point into it (DDP: the owner's piece of the all-gather).
__global__ void reduce_piece_kernel(const floatX* own, const int8_t* recv, const float* rs, size_t stride, size_t n, int world,
                                    int rank, floatX* out, int8_t* q, float* s) {
    const size_t groups = (n + QGROUP - 1) / QGROUP, warps = (size_t)gridDim.x * blockDim.x / 32;
    const int lane = threadIdx.x % 32;
    const float inv_world = 1.0f / world;
    for (size_t g = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; g < groups; g += warps) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const size_t i0 = g * QGROUP + 4 * lane;
        for (int r = 0; r < world; r++) {
            if (r == rank) {
                for (int k = 0; k < 4; k++) acc[k] += i0 + k < n ? (float)own[i0 + k] : 0.0f;
            } else {
                const char4 c = *reinterpret_cast<const char4*>(recv + r * stride + i0);
                const float scale = rs[(r * stride) / QGROUP + g];
                acc[0] += c.x * scale; acc[1] += c.y * scale; acc[2] += c.z * scale; acc[3] += c.w * scale;
            }
        }
        for (int k = 0; k < 4; k++) acc[k] *= inv_world;
        if (out)
            for (int k = 0; k < 4; k++)
                if (i0 + k < n) out[i0 + k] = (floatX)acc[k];
        if (q) quantize_group(acc, q, s, g);
    }
}

// out (n) <- q[i] * s[i / 128]. Not in place.
__global__ void dequantize_groups_kernel(const int8_t* q, const float* s, size_t n, floatX* out) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = (floatX)((float)q[i] * s[i / QGROUP]);
}

// ----------------------------------------------------------------------------------------------
// Launchers (stream: the communication stream in the trainer). Memory-bound and short: quantize and
// reduce run at most 2 blocks of 8 warps per SM, dequantize 2 blocks of 16 warps per SM, so they
// take part of each SM, not all of it, from the backward they run beside.

inline int grad_compress_blocks(size_t warps_needed, int sms) {
    return (int)std::max<size_t>(1, std::min<size_t>(ceil_div(warps_needed, 8), 2 * (size_t)sms));
}
inline void quantize_groups(const floatX* x, size_t n, int8_t* q, float* s, int sms, cudaStream_t stream) {
    if (n == 0) return;
    quantize_groups_kernel<<<grad_compress_blocks(ceil_div(n, QGROUP), sms), 256, 0, stream>>>(x, n, q, s);
    launchCheck();
}
inline void reduce_piece(const floatX* own, const int8_t* recv, const float* rs, size_t stride, size_t n, int world, int rank,
                         floatX* out, int8_t* q, float* s, int sms, cudaStream_t stream) {
    if (n == 0) return;
    reduce_piece_kernel<<<grad_compress_blocks(ceil_div(n, QGROUP), sms), 256, 0, stream>>>(own, recv, rs, stride, n, world, rank,
                                                                                             out, q, s);
    launchCheck();
}
inline void dequantize_groups(const int8_t* q, const float* s, size_t n, floatX* out, int sms, cudaStream_t stream) {
    if (n == 0) return;
    dequantize_groups_kernel<<<2 * sms, 512, 0, stream>>>(q, s, n, out);
    launchCheck();
}

// ----------------------------------------------------------------------------------------------
// Host: how a bucket [lo, hi) of the gradient buffer is cut into pieces, one per owner.
//   DDP (shard 0): world pieces of `slot` = slot(ceil(n / world)) values each (the last ones shorter
//     or empty), piece j owned by rank j, staged at j * slot: equal slots, as ncclAllGather needs.
//   ZeRO-1: the bucket cut at the shard boundaries (rank r owns [r*shard, (r+1)*shard)), each piece
//     staged after the previous one's slot.
struct GradPiece {
    int owner;
    size_t a, b;      // [a, b) of the gradient buffer (a == b: empty)
    size_t staged;    // offset of its int8 values in the send buffer (a multiple of 128)
    size_t slot;      // its slot: values sent (b - a rounded up; DDP: the common slot)
};
inline std::vector<GradPiece> grad_pieces(size_t lo, size_t hi, int world, size_t shard) {
    std::vector<GradPiece> pieces;
    if (shard == 0) {
        const size_t slot = qgroup_slot(ceil_div(hi - lo, (size_t)world));
        for (int j = 0; j < world; j++) {
            const size_t a = std::min(hi, lo + j * slot), b = std::min(hi, lo + (j + 1) * slot);
            pieces.push_back({j, a, b, j * slot, slot});
        }
        return pieces;
    }
    size_t staged = 0;
    for (size_t a = lo; a < hi;) {
        const int owner = (int)(a / shard);
        const size_t b = std::min(hi, (owner + 1) * shard);
        pieces.push_back({owner, a, b, staged, qgroup_slot(b - a)});
        staged += qgroup_slot(b - a);
        a = b;
    }
    return pieces;
}

// The gradient reducer's buckets (llmc/grad_reducer.cuh): --bucket-mb in values, and the largest bucket a
// step can hold (a bucket closes once it holds bucket_elems, so it is at most that plus one of the
// ranges backward announces, less one).
inline size_t grad_bucket_elems(double bucket_mb) { return (size_t)(bucket_mb * 1024 * 1024 / sizeof(floatX)); }
inline size_t grad_bucket_max(const ParamLayout& layout, size_t bucket_elems) {
    const size_t max_range = std::max({layout.head_elems, layout.block_elems, layout.total - layout.tail_offset});
    return std::min(layout.total, bucket_elems + max_range);
}

// The staging buffers for buckets of up to max_n values: the send buffer (every piece of a bucket,
// quantized) and the receive buffer (world slots of the largest piece one rank owns; DDP: also the
// all-gather's), each int8 values + fp32 scales.
struct GradStaging {
    int8_t *send = nullptr, *recv = nullptr;
    float *send_scales = nullptr, *recv_scales = nullptr;
    size_t send_elems = 0, recv_slot = 0;
    size_t bytes(int world) const {   // int8 values, and a float per 128 of them
        const size_t values = send_elems + world * recv_slot;
        return values + values / QGROUP * sizeof(float);
    }
};
// Their sizes (nothing allocated): what the memory check counts.
inline GradStaging grad_staging_size(size_t max_n, int world, size_t shard) {
    GradStaging g;
    g.send_elems = qgroup_slot(max_n) + (size_t)world * QGROUP;   // each piece rounds up by < 128
    g.recv_slot = qgroup_slot(shard == 0 ? ceil_div(max_n, (size_t)world) : std::min(max_n, shard));
    return g;
}
inline void grad_staging_create(GradStaging* g, size_t max_n, int world, size_t shard) {
    *g = grad_staging_size(max_n, world, shard);
    cudaCheck(cudaMalloc(&g->send, g->send_elems));
    cudaCheck(cudaMalloc(&g->send_scales, g->send_elems / QGROUP * sizeof(float)));
    cudaCheck(cudaMalloc(&g->recv, world * g->recv_slot));
    cudaCheck(cudaMalloc(&g->recv_scales, world * g->recv_slot / QGROUP * sizeof(float)));
}
inline void grad_staging_free(GradStaging* g) {
    for (void* p : {(void*)g->send, (void*)g->recv, (void*)g->send_scales, (void*)g->recv_scales}) cudaCheck(cudaFree(p));
    *g = GradStaging();
}
