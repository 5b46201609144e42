// Gradient reduction under backward, the reason this project exists (on llmc/comm.cuh's
// communicator and communication stream).
//
// Backward announces each finished range of the one gradient buffer (the final LayerNorm first,
// then blocks L-1..0, the embeddings last). The reducer merges adjacent ranges into buckets of
// --bucket-mb and, for each full bucket, records an event on the compute stream, makes the
// communication stream wait for it, and reduces the bucket IN PLACE there, while the compute
// stream goes on with the blocks below. Before the optimizer the compute stream waits for the
// last reduction; that wait, timed with two events, is the EXPOSED communication: the part of the
// all-reduce that backward could not hide.
//   DDP (--zero 0): ncclAllReduce(ncclAvg) of each bucket: every rank ends with the mean gradient.
//   ZeRO-1 (--zero 1): rank r owns the contiguous shard [r*S, (r+1)*S) of the (padded) buffer and
//     keeps master weights and Adam state for it only. Each bucket is reduced (ncclReduce, in
//     place, grouped) to the owners of its pieces; after AdamW on its shard each rank all-gathers
//     the updated weights (comm_allgather_params).
//   --grad-int8 1: either of the two with the gradients sent as int8 (one fp32 scale per 128
//     values; llmc/grad_compress.cuh): about half the bytes of bf16 on the link, summed by us in fp32.
// The watchdog (llmc/comm.cuh) names the bucket whose reduction had not finished
// (grad_reducer_pending).
#pragma once
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>
#include "common.cuh"
#include "comm.cuh"
#include "grad_compress.cuh"
#include "model.h"
#include "norm.cuh"

// The gradient reducer. One per run; grad_reducer_begin_step, then grad_reducer_ready per range, then grad_reducer_finish.
struct GradReducer {
    const Comm* comm = nullptr;
    Context* ctx = nullptr;
    floatX* grads = nullptr;
    size_t total = 0;          // real parameters
    size_t shard = 0;          // ZeRO-1: elements per rank (the buffer is padded to world * shard)
    int zero = 0;
    size_t bucket_elems = 0;
    bool int8 = false;         // --grad-int8: send the gradients as int8 (llmc/grad_compress.cuh)
    GradStaging staging;       // ... through these buffers
    size_t pend_lo = 0, pend_hi = 0;  // the bucket being filled: [pend_lo, pend_hi)
    std::vector<cudaEvent_t> ready_ev, start_ev, end_ev;  // one per bucket of a step
    std::atomic<int> buckets{0};  // issued this step (the watchdog's thread reads it: grad_reducer_pending)
    cudaEvent_t wait_begin = nullptr, wait_end = nullptr, flags_done = nullptr;
    double bytes = 0;          // reduced this step (int8: the bytes of the int8 values and their scales)
    float* d_bad = nullptr;    // (world) 1 where that rank's own gradients held inf/nan, summed over ranks
    std::vector<float> bad;    // the same, on the host after the step

    // Results of the last finished step, read after the host synchronized.
    float exposed_ms() const {
        float ms = 0;
        if (buckets) cudaCheck(cudaEventElapsedTime(&ms, wait_begin, wait_end));
        return ms;
    }
    // Time the communication stream spent on the step's buckets: each bucket's inf/nan scan, its
    // collectives and, with --grad-int8, the (de)quantizing kernels (so the bus bandwidth reported
    // from it is what the reduction achieved as a whole, a little under NCCL's own).
    float comm_ms() const {
        float sum = 0;
        for (int i = 0; i < buckets; i++) { float ms; cudaCheck(cudaEventElapsedTime(&ms, start_ev[i], end_ev[i])); sum += ms; }
        return sum;
    }
};

// layout: the gradient buffer's (its ranges are what backward announces); int8: --grad-int8.
inline void grad_reducer_init(GradReducer* r, const Comm* comm, Context* ctx, floatX* grads, const ParamLayout& layout, size_t shard,
                              int zero, double bucket_mb, int max_buckets, bool int8) {
    r->comm = comm; r->ctx = ctx; r->grads = grads; r->total = layout.total; r->shard = shard; r->zero = zero;
    r->bucket_elems = grad_bucket_elems(bucket_mb);
    r->int8 = int8;
    if (int8) grad_staging_create(&r->staging, grad_bucket_max(layout, r->bucket_elems), comm->world, zero ? shard : 0);
    for (auto* v : {&r->ready_ev, &r->start_ev, &r->end_ev}) {
        v->resize(max_buckets);
        for (auto& e : *v) cudaCheck(cudaEventCreate(&e));
    }
    cudaCheck(cudaEventCreate(&r->wait_begin));
    cudaCheck(cudaEventCreate(&r->wait_end));
    cudaCheck(cudaEventCreate(&r->flags_done));
    cudaCheck(cudaMalloc(&r->d_bad, comm->world * sizeof(float)));
    r->bad.assign(comm->world, 0.0f);
}
inline void grad_reducer_free(GradReducer* r) {
    for (auto* v : {&r->ready_ev, &r->start_ev, &r->end_ev}) for (auto& e : *v) cudaCheck(cudaEventDestroy(e));
    cudaCheck(cudaEventDestroy(r->wait_begin));
    cudaCheck(cudaEventDestroy(r->wait_end));
    cudaCheck(cudaEventDestroy(r->flags_done));
    cudaCheck(cudaFree(r->d_bad));
    if (r->int8) grad_staging_free(&r->staging);
}

inline void grad_reducer_begin_step(GradReducer* r) {
    r->buckets = 0; r->bytes = 0; r->pend_lo = r->pend_hi = 0;
    cudaCheck(cudaMemsetAsync(r->d_bad, 0, r->comm->world * sizeof(float), r->ctx->stream));
}

// For the watchdog's message: the first bucket of this step whose reduction has not finished.
inline std::string grad_reducer_pending(const GradReducer* r) {
    for (int i = 0; i < r->buckets; i++)
        if (cudaEventQuery(r->end_ev[i]) == cudaErrorNotReady)
            return "gradient " + std::string(r->zero ? "reduce (ZeRO-1)" : "all-reduce") + " of bucket " + std::to_string(i + 1) +
                   " of " + std::to_string(r->buckets) + " issued so far";
    return "";
}

#ifdef USE_NCCL
// --grad-int8: bucket [lo, hi) reduced as int8 in two phases (llmc/grad_compress.cuh), on the
// communication stream. Returns the bucket's bytes as int8 values + scales, its pieces padded to
// their slots: what the bus bandwidth's formula takes as the size of the data reduced.
inline double grad_reduce_int8(GradReducer* r, size_t lo, size_t hi) {
    const Comm* c = r->comm;
    const int me = c->rank, W = c->world, sms = r->ctx->props.multiProcessorCount;
    const GradStaging& g = r->staging;
    const std::vector<GradPiece> pieces = grad_pieces(lo, hi, W, r->zero ? r->shard : 0);
    const GradPiece* mine = nullptr;
    double bytes = 0;
    for (const GradPiece& p : pieces) {   // 1. what goes to the other owners, quantized
        if (p.owner == me) mine = &p;
        else quantize_groups(r->grads + p.a, p.b - p.a, g.send + p.staged, g.send_scales + p.staged / QGROUP, sms, c->stream);
        bytes += p.slot * (1.0 + 4.0 / QGROUP);
    }
    const char* what = r->zero ? "issuing an int8 gradient reduce (ZeRO-1)" : "issuing an int8 gradient all-reduce";
    comm_nccl_check(c, ncclGroupStart(), what);   // ... sent to them; each owner receives its piece from every rank
    for (const GradPiece& p : pieces) {
        if (p.a == p.b) continue;   // (every rank cuts the bucket alike, so both sides skip it)
        if (p.owner != me) {
            comm_nccl_check(c, ncclSend(g.send + p.staged, p.slot, ncclInt8, p.owner, c->nccl, c->stream), what);
            comm_nccl_check(c, ncclSend(g.send_scales + p.staged / QGROUP, p.slot / QGROUP, ncclFloat, p.owner, c->nccl, c->stream), what);
            continue;
        }
        for (int s = 0; s < W; s++) {
            if (s == me) continue;
            comm_nccl_check(c, ncclRecv(g.recv + s * p.slot, p.slot, ncclInt8, s, c->nccl, c->stream), what);
            comm_nccl_check(c, ncclRecv(g.recv_scales + s * p.slot / QGROUP, p.slot / QGROUP, ncclFloat, s, c->nccl, c->stream), what);
        }
    }
    comm_nccl_check(c, ncclGroupEnd(), what);
    if (mine == nullptr) return bytes;
    // 2. the owner's average: ZeRO-1 keeps it (its shard); DDP quantizes it into its slot of the
    //    all-gather, and every rank (the owner too) takes the whole bucket from there
    const size_t slot = mine->slot;
    reduce_piece(r->grads + mine->a, g.recv, g.recv_scales, slot, mine->b - mine->a, W, me, r->zero ? r->grads + mine->a : nullptr,
                 r->zero ? nullptr : g.recv + me * slot, r->zero ? nullptr : g.recv_scales + me * slot / QGROUP, sms, c->stream);
    if (r->zero) return bytes;
    comm_nccl_check(c, ncclGroupStart(), what);
    comm_nccl_check(c, ncclAllGather(g.recv + me * slot, g.recv, slot, ncclInt8, c->nccl, c->stream), what);
    comm_nccl_check(c, ncclAllGather(g.recv_scales + me * slot / QGROUP, g.recv_scales, slot / QGROUP, ncclFloat, c->nccl, c->stream), what);
    comm_nccl_check(c, ncclGroupEnd(), what);
    dequantize_groups(g.recv, g.recv_scales, hi - lo, r->grads + lo, sms, c->stream);
    return bytes;
}
#endif

// Issues the pending bucket on the communication stream, after what the compute stream has done so far.
inline void grad_reducer_flush(GradReducer* r) {
    if (r->pend_hi == r->pend_lo) return;
    if (r->buckets == (int)r->ready_ev.size()) comm_fail(r->comm, "gradient reducer: more buckets than events");
    const int i = r->buckets++;
    const size_t lo = r->pend_lo, hi = std::min(r->pend_hi, r->total);
    cudaCheck(cudaEventRecord(r->ready_ev[i], r->ctx->stream));
    cudaCheck(cudaStreamWaitEvent(r->comm->stream, r->ready_ev[i], 0));
    cudaCheck(cudaEventRecord(r->start_ev[i], r->comm->stream));
    nonfinite_flag(r->d_bad + r->comm->rank, r->grads + lo, hi - lo, r->ctx->props.multiProcessorCount, r->comm->stream);
    double bytes = (double)(hi - lo) * sizeof(floatX);
#ifdef USE_NCCL
    if (r->int8) {
        bytes = grad_reduce_int8(r, lo, hi);
    } else if (r->zero == 0) {
        comm_nccl_check(r->comm, ncclAllReduce(r->grads + lo, r->grads + lo, hi - lo, NCCL_FLOATX, ncclAvg, r->comm->nccl, r->comm->stream),
                        "issuing a gradient all-reduce");
    } else {
        // each piece of the bucket goes to the rank that owns it, in place, averaged there
        comm_nccl_check(r->comm, ncclGroupStart(), "issuing a gradient reduce (ZeRO-1)");
        for (const GradPiece& p : grad_pieces(lo, hi, r->comm->world, r->shard))
            comm_nccl_check(r->comm, ncclReduce(r->grads + p.a, r->grads + p.a, p.b - p.a, NCCL_FLOATX, ncclAvg, p.owner, r->comm->nccl,
                                                r->comm->stream),
                            "issuing a gradient reduce (ZeRO-1)");
        comm_nccl_check(r->comm, ncclGroupEnd(), "issuing a gradient reduce (ZeRO-1)");
    }
#endif
    cudaCheck(cudaEventRecord(r->end_ev[i], r->comm->stream));
    r->bytes += bytes;
    r->pend_lo = r->pend_hi = 0;
}

// backward's seam: range [offset, offset+count) of the gradients is final. Ranges arrive from the
// top of the buffer down, each adjacent to the one before, so a bucket is one contiguous range.
inline void grad_reducer_ready(GradReducer* r, ElemRange range) {
    if (r->pend_hi == r->pend_lo) { r->pend_lo = range.offset; r->pend_hi = range.offset + range.count; }
    else {
        if (range.offset + range.count != r->pend_lo) comm_fail(r->comm, "gradient reducer: ranges not adjacent");
        r->pend_lo = range.offset;
    }
    if (r->pend_hi - r->pend_lo >= r->bucket_elems) grad_reducer_flush(r);
}

// After backward's last range: issue the rest, and make the compute stream wait for all of it
// (the wait is bracketed by events: that interval is the exposed communication).
// The per-rank non-finite flags are summed over the ranks last (tiny), so every rank can name the
// rank(s) whose gradients went bad.
inline void grad_reducer_finish(GradReducer* r) {
    grad_reducer_flush(r);
    if (r->buckets == 0) return;
#ifdef USE_NCCL
    comm_nccl_check(r->comm, ncclAllReduce(r->d_bad, r->d_bad, r->comm->world, ncclFloat, ncclSum, r->comm->nccl, r->comm->stream),
                    "issuing the all-reduce of the non-finite flags");
#endif
    cudaCheck(cudaEventRecord(r->flags_done, r->comm->stream));
    cudaCheck(cudaEventRecord(r->wait_begin, r->ctx->stream));
    cudaCheck(cudaStreamWaitEvent(r->ctx->stream, r->flags_done, 0));
    cudaCheck(cudaEventRecord(r->wait_end, r->ctx->stream));
}

// Queues the copy of the flags to the host, at the end of the step (a copy to pageable memory
// blocks the host until it is done, so nothing else must be waiting to be queued behind it).
inline void grad_reducer_read_flags(GradReducer* r) {
    cudaCheck(cudaMemcpyAsync(r->bad.data(), r->d_bad, r->comm->world * sizeof(float), cudaMemcpyDeviceToHost, r->ctx->stream));
}

// After the step's synchronization: the ranks whose own gradients held inf/nan ("" if none).
inline std::string grad_reducer_bad_ranks(const GradReducer* r) {
    std::string s;
    for (int i = 0; i < r->comm->world; i++)
        if (r->bad[i] > 0) s += (s.empty() ? "" : ",") + std::to_string(i);
    return s;
}
