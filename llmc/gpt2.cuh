// The GPT2 struct: where the model's memory lives and how it is filled. The parameters and the
// four parameter-shaped buffers (grads, fp32 master, Adam m, v), the activations, the per-step
// device scalars; build/free; GPT-2's initialization, loading a model file; and the optimizer
// state streamed to and from checkpoint files (GpuState). What the model COMPUTES
// (forward, backward, update, one training step) is in gpt2_step.cuh.
#pragma once
#include <cmath>
#include <string>
#include <vector>
#include "common.cuh"
#include "model.h"
#include "activations.cuh"
#include "adamw.cuh"
#include "checkpoint.h"
#include "comm.cuh"
#include "encoder.cuh"
#include "init.cuh"
#include "norm.cuh"

// The model: parameters and the four parameter-shaped buffers, activations, per-step scalars.
struct GPT2 {
    GPT2Config cfg;
    ParamLayout layout;
    int B = 0, T = 0;                 // the micro-batch the activations are sized for
    size_t padded = 0;                // layout.total rounded up to world * 8 (equal ZeRO-1 shards)
    floatX* params = nullptr;         // (padded) the weights the kernels read; padding stays 0
    floatX* grads = nullptr;          // (padded)
    float* master = nullptr;          // fp32 weights of [shard_lo, shard_hi); == params in FP32 DDP builds
    float* adam_m = nullptr;          // [shard_lo, shard_hi)
    float* adam_v = nullptr;          // [shard_lo, shard_hi)
    size_t shard_lo = 0, shard_hi = 0;// the optimizer's range: all on one GPU and in DDP, 1/world in ZeRO-1
    size_t shard = 0;                 // ZeRO-1: padded / world
    Activations acts{};
    int* d_inputs = nullptr;          // (B,T)
    int* d_targets = nullptr;         // (B,T)
    TokenBuckets buckets;
    float* d_loss_sum = nullptr;      // (2) sum of the micro-steps' per-token losses; the ranks' stop votes (gpt2_train_step)
    float* d_sumsq = nullptr;         // (1) the gradients' sum of squares (ZeRO-1: summed over the shards)
    StepScalars* d_step = nullptr;    // (1) the step's norm, gradient multiplier, skip decision and spike
                                      // statistics, made on the GPU (norm.cuh)
    int adam_t = 0;                   // AdamW steps taken
    SpikeStats spike{};               // the spike guard's running loss and norm statistics (host; spike_guard.h)
    std::vector<cudaEvent_t> step_events;  // phase timing of gpt2_train_step
    // CUDA graphs of a training micro-step (gpt2_step.cuh, gpt2_train_step says when they are used)
    bool use_graphs = false;          // --cuda-graphs; the caller sets it after gpt2_build
    bool graphs_ready = false;        // a step has run without: every GEMM plan exists
    cudaGraphExec_t fwd_graph = nullptr, bwd_graph = nullptr;
    float fwd_graph_dloss = 0;        // the dloss the forward graph was captured with (a kernel argument)
};

// Tokens per lm-head chunk (activations_alloc): 16384 keeps that GEMM large and saves 4.9 GB at
// B=64, T=1024.
constexpr size_t DEFAULT_LOGIT_CHUNK = 16384;

// The parameter count rounded up to a multiple of world * 8: `world` equal shards (ZeRO-1), each a
// whole number of the 8-element vectors the kernels move.
inline size_t padded_param_count(size_t total, int world) { return ceil_div(total, (size_t)world * 8) * world * 8; }

// The element counts gpt2_build allocates by, shared with gpt2_memory so the two cannot drift.
struct GPT2Sizes {
    size_t padded;          // the floatX weights and gradients: the parameter count, padded
    size_t shard;           // padded / world: one rank's part with ZeRO-1
    size_t optimizer;       // elements of each fp32 optimizer buffer: a shard (ZeRO-1) or every parameter
    bool separate_master;   // false in an FP32 DDP build, where the weights are the master copy
};
inline GPT2Sizes gpt2_sizes(const GPT2Config& cfg, int world, int zero) {
    const size_t total = param_layout(cfg).total, padded = padded_param_count(total, world);
    return {padded, padded / world, zero ? padded / world : total, !(sizeof(floatX) == sizeof(float) && !zero)};
}

// What gpt2_build allocates on each GPU, in bytes, computed without allocating (the trainer checks
// it against the GPU's free memory first, and prints it).
struct GPT2Memory {
    size_t weights_grads;  // the floatX weights and their gradients (padded)
    size_t optimizer;      // fp32 master weights (none in an FP32 DDP build: the weights are them), Adam m and v; a shard with ZeRO-1
    size_t activations;    // activations_bytes
    size_t transient;      // a full fp32 copy of the weights while initializing, resuming or (ZeRO-1) checkpointing
    size_t total() const { return weights_grads + optimizer + activations + transient; }
};
inline GPT2Memory gpt2_memory(const GPT2Config& cfg, int B, int T, int world = 1, int zero = 0, int recompute = 0,
                              size_t logit_chunk = DEFAULT_LOGIT_CHUNK) {
    const GPT2Sizes z = gpt2_sizes(cfg, world, zero);
    return {2 * z.padded * sizeof(floatX), (z.separate_master ? 3 : 2) * z.optimizer * sizeof(float),
            activations_bytes(cfg, B, T, recompute, logit_chunk), z.padded * sizeof(float)};
}

// Does a run of micro-batch B fit in `free_b` bytes of `gpu` ("GPU 0 (NVIDIA H200)")? false + one
// line: what it needs, part by part, and what would fit (the largest -b, at this --recompute or
// else at 2; --recompute 2; --zero 1). total_batch: -d as given, which a suggested -b must divide
// into whole micro-steps (b*T*world); 0 where -d follows -b (any b).
// `reserve`: what the libraries may still allocate (cuBLASLt, CUDA graphs, the reducer's events and
// flags; on several GPUs NCCL's connection buffers, which it allocates at the first collective,
// after this check), plus buffers[zero] (--grad-int8's staging buffers, llmc/grad_compress.cuh:
// their size with DDP and with ZeRO-1; {0, 0} without it).
// NCCL's share: a run's device memory on 2 and on 4 H200s less the same run's on one GPU
// (dev/results/scaling_{2,4}xH200.csv, device_mem_gb, same micro-batch, DDP, where the model's
// allocation is the same): 0.90 GB over NVLink, 0.42 GB with NCCL_P2P_DISABLE=1. 1 GiB is kept.
constexpr size_t LIBRARY_RESERVE = (size_t)256 << 20, NCCL_RESERVE = (size_t)1 << 30;
inline bool gpt2_memory_check(const GPT2Config& cfg, int B, int T, int world, int zero, int recompute, size_t free_b, size_t total_b,
                              const std::string& gpu, std::string* err, const size_t buffers[2], long long total_batch = 0) {
    auto reserve_for = [&](int z) { return LIBRARY_RESERVE + (world > 1 ? NCCL_RESERVE : 0) + buffers[z]; };
    const size_t reserve = reserve_for(zero);
    auto fits = [&](int b, int rc, int z) { return gpt2_memory(cfg, b, T, world, z, rc).total() + reserve_for(z) <= free_b; };
    const GPT2Memory m = gpt2_memory(cfg, B, T, world, zero, recompute);
    if (m.total() + reserve <= free_b) return true;
    char line[512];
    snprintf(line, sizeof line, "the run needs %.2f GB on %s, which has %.2f GB free of %.2f: weights+grads %.2f, optimizer %.2f, "
             "activations %.2f (B=%d, T=%d, --recompute %d), fp32 weights while loading or saving %.2f, libraries%s%s %.2f",
             (m.total() + reserve) / 1e9, gpu.c_str(), free_b / 1e9, total_b / 1e9, m.weights_grads / 1e9, m.optimizer / 1e9,
             m.activations / 1e9, B, T, recompute, m.transient / 1e9, world > 1 ? " (NCCL's included)" : "",
             buffers[zero] ? " and --grad-int8's buffers" : "",
             reserve / 1e9);
    *err = line;
    std::vector<std::string> what_fits;
    auto largest_b = [&](int rc) {   // the largest -b below B that fits and that -d takes in whole micro-steps; 0: none
        int b = B - 1;
        while (b >= 1 && (!fits(b, rc, zero) || (total_batch > 0 && total_batch % ((long long)b * T * world) != 0))) b--;
        return b;
    };
    const int b = largest_b(recompute);
    if (b >= 1) what_fits.push_back("-b " + std::to_string(b) + " fits");
    if (recompute < 2 && fits(B, 2, zero)) {
        what_fits.push_back("--recompute 2 fits at B=" + std::to_string(B));
    } else if (recompute < 2 && b < 1) {
        const int b2 = largest_b(2);
        if (b2 >= 1) what_fits.push_back("-b " + std::to_string(b2) + " --recompute 2 fits");
    }
    if (!zero && world > 1 && fits(B, recompute, 1)) what_fits.push_back("--zero 1 fits");
    if (what_fits.empty())
        what_fits.push_back(world > 1 && !zero ? "not even -b 1 fits (try --zero 1 and --recompute 2)" : "not even -b 1 fits");
    for (size_t i = 0; i < what_fits.size(); i++) *err += (i ? ", " : "; ") + what_fits[i];
    return false;
}

// Allocates everything for cfg and micro-batch (B,T); with zero = 1 the optimizer state only for
// rank's shard of `world`. The weights are left to gpt2_init_*.
inline void gpt2_build(GPT2* m, const GPT2Config& cfg, int B, int T, int rank = 0, int world = 1, int zero = 0, int recompute = 0,
                       size_t logit_chunk = DEFAULT_LOGIT_CHUNK) {
    const GPT2Sizes z = gpt2_sizes(cfg, world, zero);
    m->cfg = cfg; m->layout = param_layout(cfg); m->B = B; m->T = T;
    m->padded = z.padded;
    m->shard = z.shard;
    m->shard_lo = zero ? (size_t)rank * m->shard : 0;
    m->shard_hi = zero ? std::min(m->shard_lo + m->shard, m->layout.total) : m->layout.total;
    const size_t n = z.padded, ns = z.optimizer;
    cudaCheck(cudaMalloc(&m->params, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&m->grads, n * sizeof(floatX)));
    cudaCheck(cudaMemset(m->params, 0, n * sizeof(floatX)));
    if (!z.separate_master) m->master = (float*)m->params;  // fp32 DDP: the weights are the master copy
    else cudaCheck(cudaMalloc(&m->master, ns * sizeof(float)));
    cudaCheck(cudaMalloc(&m->adam_m, ns * sizeof(float)));
    cudaCheck(cudaMalloc(&m->adam_v, ns * sizeof(float)));
    cudaCheck(cudaMemset(m->adam_m, 0, ns * sizeof(float)));
    cudaCheck(cudaMemset(m->adam_v, 0, ns * sizeof(float)));
    cudaCheck(cudaMemset(m->grads, 0, n * sizeof(floatX)));
    if ((void*)m->master != (void*)m->params) cudaCheck(cudaMemset(m->master, 0, ns * sizeof(float)));
    activations_alloc(&m->acts, cfg, B, T, recompute, logit_chunk);
    cudaCheck(cudaMalloc(&m->d_inputs, (size_t)B * T * sizeof(int)));
    cudaCheck(cudaMalloc(&m->d_targets, (size_t)B * T * sizeof(int)));
    token_buckets_create(&m->buckets, B * T, cfg.padded_vocab_size);
    cudaCheck(cudaMalloc(&m->d_loss_sum, 2 * sizeof(float)));
    cudaCheck(cudaMalloc(&m->d_sumsq, sizeof(float)));
    cudaCheck(cudaMalloc(&m->d_step, sizeof(StepScalars)));
    // the decision kernel writes the fields, not the padding between them; the host copies the
    // whole struct back every step, so zero it once (else compute-sanitizer's initcheck reports
    // the copy reading bytes never written)
    cudaCheck(cudaMemset(m->d_step, 0, sizeof(StepScalars)));
}

inline void gpt2_free(GPT2* m) {
    cudaCheck(cudaFree(m->params)); cudaCheck(cudaFree(m->grads));
    if ((void*)m->master != (void*)m->params) cudaCheck(cudaFree(m->master));
    cudaCheck(cudaFree(m->adam_m)); cudaCheck(cudaFree(m->adam_v));
    cudaCheck(cudaFree(m->acts.memory));
    cudaCheck(cudaFree(m->d_inputs)); cudaCheck(cudaFree(m->d_targets));
    token_buckets_free(&m->buckets);
    cudaCheck(cudaFree(m->d_loss_sum)); cudaCheck(cudaFree(m->d_sumsq)); cudaCheck(cudaFree(m->d_step));
    for (cudaEvent_t e : m->step_events) cudaCheck(cudaEventDestroy(e));
    if (m->fwd_graph) cudaCheck(cudaGraphExecDestroy(m->fwd_graph));
    if (m->bwd_graph) cudaCheck(cudaGraphExecDestroy(m->bwd_graph));
}

// Sets the weights from all of them in fp32 on the device (layout.total): the floatX copy, and
// this rank's shard of the master copy.
inline void gpt2_set_weights(GPT2* m, Context* ctx, const float* full) {
    cast_from_master(ctx, m->params, full, m->layout.total);
    if ((void*)m->master != (void*)m->params)
        cudaCheck(cudaMemcpyAsync(m->master, full + m->shard_lo, (m->shard_hi - m->shard_lo) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, ctx->stream));
    cudaCheck(cudaStreamSynchronize(ctx->stream));
}

// GPT-2's initialization from a seed, tensor by tensor as param_init (llmc/model.h) says: N(0, 0.02)
// for embeddings and matmul weights, 1/sqrt(2L) of that for the two residual projections, LayerNorm
// weights 1, biases 0. The same seed gives the same weights on every rank.
inline void gpt2_init_random(GPT2* m, Context* ctx, uint64_t seed) {
    const GPT2Config& c = m->cfg;
    float* w;  // all weights in fp32, then cast and sharded
    cudaCheck(cudaMalloc(&w, m->layout.total * sizeof(float)));
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        for (size_t l = 0; l < param_tensor_count(c, t); l++) {
            float* p = w + param_offset(c, m->layout, t, (int)l);
            const size_t n = param_tensor_elems(c, t);
            const ParamInit how = param_init(c, t);   // GPT-2's rule for this tensor (llmc/model.h)
            if (how.normal) init_normal(ctx, p, n, how.value, seed, param_init_stream(t, l));
            else fill(ctx, p, n, how.value);
        }
    // the padding rows of wte (tokens V..Vp-1) never occur: keep them 0
    fill(ctx, w + (size_t)c.vocab_size * c.channels, (size_t)(c.padded_vocab_size - c.vocab_size) * c.channels, 0.0f);
    gpt2_set_weights(m, ctx, w);
    cudaCheck(cudaFree(w));
}

// count floats from the GPU into pinned host memory, on `stream`, waited for. Returns the CUDA
// error rather than ending the process: the background writer's thread must not exit().
inline cudaError_t copy_to_host(float* pinned, const float* src, size_t count, cudaStream_t stream) {
    const cudaError_t e = cudaMemcpyAsync(pinned, src, count * sizeof(float), cudaMemcpyDeviceToHost, stream);
    return e != cudaSuccess ? e : cudaStreamSynchronize(stream);
}

// The pieces a checkpoint's state passes through host memory in: 16M floats, 64 MB.
constexpr size_t STATE_CHUNK_FLOATS = (size_t)16 << 20;

// The model's optimizer state as a checkpoint's writer and reader reach it (StateIO,
// checkpoint.h): array 0 the fp32 master weights, 1 Adam m, 2 Adam v, layout.total floats each.
// Every piece passes through ONE pinned host buffer of `chunk` floats (64 MB): the save streams
// from the GPU into the file and a resume from the file into the GPU, with no host copy of the
// whole state. Why pinned: the GPU's copy engine reads and writes only page-locked memory, so a
// copy to pageable memory is staged by the driver, and into fresh pages it also takes the page
// faults (d48's 18.7 GB went at ~1.4 GB/s that way; pinned copies run at PCIe speed).
//   Saving: in ZeRO-1 on several GPUs each rank holds a shard of every array, so before the writer
//   reads an array it is all-gathered into one full device buffer, a collective: rank 0 gathers
//   on the writer's first get() of each array, and the other ranks call follow(), which joins
//   the same three gathers (waiting while rank 0 writes the previous array). snapshot() makes
//   the same three gathers, into a snapshot (llmc/checkpoint_writer.cuh) instead.
//   Reading (a resume, a model file): array 0 goes whole into a temporary fp32 device buffer that
//   commit_weights() casts into the floatX weights and this rank's master shard; of arrays 1 and 2
//   only this rank's shard [shard_lo, shard_hi) is read.
struct GpuState : StateIO {
    GPT2* m; Context* ctx; const Comm* comm;
    bool zero;                        // ZeRO-1 on several GPUs: the arrays are sharded
    int step = 0;                     // for the watchdog's line, should a gather hang
    float* pinned = nullptr;          // (chunk) the host side of every copy
    float* full = nullptr;            // (padded) saving with ZeRO-1: the gathered array; reading: the fp32 weights
    int gathered = -1;                // the array gathered last when saving (ZeRO-1)
    const float* gathered_at = nullptr;   // where it was gathered to
    double gpu_s = 0;                 // time in gathers and copies (the checkpoint line's "from the GPU")

    // comm: may be null when zero_stage is 0 (no collective then)
    GpuState(GPT2* model, Context* c, const Comm* cm, int zero_stage) : m(model), ctx(c), comm(cm), zero(zero_stage && cm && cm->world > 1) {
        chunk = STATE_CHUNK_FLOATS;
    }
    ~GpuState() {
        if (pinned) cudaCheck(cudaFreeHost(pinned));
        if (full) cudaCheck(cudaFree(full));
    }
    float* host() {
        if (!pinned) cudaCheck(cudaMallocHost(&pinned, chunk * sizeof(float)));
        return pinned;
    }
    float* device_full() {
        if (!full) cudaCheck(cudaMalloc(&full, m->padded * sizeof(float)));
        return full;
    }
    // saving: array `which` whole on this GPU: its own without ZeRO-1; with it, all-gathered
    // (collectively, each array once, in order 0, 1, 2) into `into` (padded floats; null: `full`)
    const float* array(int which, float* into = nullptr) {
        const float* own[3] = {m->master, m->adam_m, m->adam_v};
        if (!zero) return own[which];
        if (gathered != which) {
            if (which != gathered + 1) comm_fail(comm, "checkpoint: the optimizer state gathered out of order");
            if (!into) into = device_full();
            const long long t0 = steady_ms();
            comm_watch(comm, step, "checkpoint (gathering the optimizer state)");
#ifdef USE_NCCL
            comm_nccl_check(comm, ncclAllGather(own[which], into, m->shard, ncclFloat, comm->nccl, ctx->stream),
                            "gathering the optimizer shards (ZeRO-1)");
#endif
            cudaCheck(cudaStreamSynchronize(ctx->stream));
            comm_unwatch(comm);
            gathered = which;
            gathered_at = into;
            gpu_s += (steady_ms() - t0) / 1e3;
        }
        return gathered_at;
    }
    // the ranks that do not write: the same collectives as the writer's gets (none without ZeRO-1)
    void follow() { if (zero) for (int which = 0; which < 3; which++) array(which); }
    const float* get(int which, size_t offset, size_t count) override {
        const float* src = array(which);
        const long long t0 = steady_ms();
        cudaCheck(copy_to_host(host(), src + offset, count, ctx->stream));
        gpu_s += (steady_ms() - t0) / 1e3;
        return pinned;
    }
    // the whole state into dst (on this GPU: 3 arrays of `padded` floats, master, m, v): ZeRO-1
    // gathers each straight into its place (collective: the other ranks follow()); without it,
    // a device-to-device copy of this rank's own arrays
    void snapshot(float* dst) {
        for (int which = 0; which < 3; which++) {
            float* to = dst + which * m->padded;
            const float* src = array(which, to);
            if (src != to) cudaCheck(cudaMemcpyAsync(to, src, m->layout.total * sizeof(float), cudaMemcpyDeviceToDevice, ctx->stream));
        }
        cudaCheck(cudaStreamSynchronize(ctx->stream));
    }
    void wanted(int which, size_t* lo, size_t* hi) override {
        *lo = which == 0 ? 0 : m->shard_lo;
        *hi = which == 0 ? m->layout.total : m->shard_hi;
    }
    float* buffer(int, size_t, size_t) override { return host(); }
    void put(int which, size_t offset, size_t count) override {
        float* dst = which == 0 ? device_full() + offset : (which == 1 ? m->adam_m : m->adam_v) + (offset - m->shard_lo);
        cudaCheck(cudaMemcpyAsync(dst, pinned, count * sizeof(float), cudaMemcpyHostToDevice, ctx->stream));
        cudaCheck(cudaStreamSynchronize(ctx->stream));   // the pinned buffer is refilled next
    }
    // reading: array 0, now whole in `full`, becomes the weights (floatX) and this rank's master shard
    void commit_weights() { gpt2_set_weights(m, ctx, device_full()); }
};

// Loads the weights of a model file whose header matched m->cfg.
inline bool gpt2_init_from_file(GPT2* m, Context* ctx, const std::string& path, std::string* err) {
    GpuState io(m, ctx, nullptr, 0);
    if (!model_file_read_params(path, m->cfg, io, err)) return false;
    io.commit_weights();
    return true;
}

