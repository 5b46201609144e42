// GPT-2 training on NVIDIA GPUs: CUDA kernels + cuBLASLt, one floatX precision per build.
// The story of one step (see llmc/ for each layer's kernels):
//
//   tokens (B,T) - encoder -> residual (B,T,C)
//   per block:  LN1 - qkv matmul - attention - proj matmul -+- residual add + LN2 (fused)
//               fc matmul + GELU (fused) - proj matmul -+- residual add + next LN (fused)
//   LN_f - lm-head matmul (tied wte) - fused classifier (softmax + loss + dlogits)
//   backward in reverse; each finished block's gradients are announced (the multi-GPU seam)
//   update: global norm -> step decision (clip, fp16 overflow skip) -> AdamW on fp32 master weights
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <string>
#include <vector>
#include <functional>
#include <algorithm>
#include <random>
#include "llmc/common.cuh"
#include "llmc/model.h"
#include "llmc/init.cuh"
#include "llmc/encoder.cuh"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/attention.cuh"
#include "llmc/classifier.cuh"
#include "llmc/norm.cuh"
#include "llmc/adamw.cuh"
#include "llmc/loss_scale.h"
#include "llmc/checkpoint.h"
#include "llmc/comm.cuh"
#include "llmc/dataloader.h"
#include "llmc/options.h"
#include "llmc/schedule.h"
#include "llmc/timing.h"

// ----------------------------------------------------------------------------------------------
// Activations: everything forward saves for backward, plus backward's scratch, in ONE allocation.
struct Activations {
    // (L, ...) one slice per block
    floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    float *att;                // attention's saved state (attention_state_elems per block)
    // once per model
    floatX *encoded;           // (B,T,C) embedding output = block 0's input
    floatX *lnf;               // (B,T,C)
    float *lnf_mean, *lnf_rstd;// (B,T)
    floatX *logits;            // (B,T,Vp), overwritten in place by dlogits
    float *losses;             // (B,T)
    floatX *proj_out;          // (B,T,C) output of the two projection matmuls before the residual add
    // backward scratch
    floatX *dresidual;         // (B,T,C) gradient of the residual stream, accumulated block by block
    floatX *dbtc;              // (B,T,C) gradient of an LN output / attention output
    floatX *dbig;              // (B,T,4C) gradient of fch, or of qkv (3C)
    void *att_scratch;         // attention_scratch_bytes
    void* memory;
    size_t bytes;
};

// One block's activations: the ONE place that slices them, used by forward and backward.
struct BlockActs {
    floatX* input;                      // (B,T,C) residual stream entering the block
    floatX* ln1; float *ln1_mean, *ln1_rstd;
    floatX* qkv;                        // (B,T,3C)
    floatX* atty;                       // (B,T,C) attention output, heads concatenated
    float* att;                         // attention's saved state
    floatX* residual2;                  // (B,T,C) input + attention branch
    floatX* ln2; float *ln2_mean, *ln2_rstd;
    floatX* fch;                        // (B,T,4C) fc output before GELU
    floatX* fch_gelu;                   // (B,T,4C)
    floatX* residual3;                  // (B,T,C) block output
};
inline BlockActs block_acts(const Activations& a, const GPT2Config& c, int B, int T, int l) {
    const size_t btc = (size_t)B * T * c.channels, bt = (size_t)B * T;
    const size_t att = attention_state_elems(B, T, c.num_heads);
    return {l == 0 ? a.encoded : a.residual3 + (l - 1) * btc,
            a.ln1 + l * btc, a.ln1_mean + l * bt, a.ln1_rstd + l * bt,
            a.qkv + l * 3 * btc, a.atty + l * btc, a.att + l * att, a.residual2 + l * btc,
            a.ln2 + l * btc, a.ln2_mean + l * bt, a.ln2_rstd + l * bt,
            a.fch + l * 4 * btc, a.fch_gelu + l * 4 * btc, a.residual3 + l * btc};
}

inline void activations_alloc(Activations* a, const GPT2Config& c, int B, int T) {
    const size_t L = c.num_layers, btc = (size_t)B * T * c.channels, bt = (size_t)B * T;
    struct Item { void** ptr; size_t bytes; };
    const size_t X = sizeof(floatX), F = sizeof(float);
    const Item items[] = {
        {(void**)&a->ln1, L * btc * X}, {(void**)&a->qkv, L * 3 * btc * X}, {(void**)&a->atty, L * btc * X},
        {(void**)&a->att, L * attention_state_elems(B, T, c.num_heads) * F},
        {(void**)&a->residual2, L * btc * X}, {(void**)&a->ln2, L * btc * X},
        {(void**)&a->fch, L * 4 * btc * X}, {(void**)&a->fch_gelu, L * 4 * btc * X}, {(void**)&a->residual3, L * btc * X},
        {(void**)&a->ln1_mean, L * bt * F}, {(void**)&a->ln1_rstd, L * bt * F},
        {(void**)&a->ln2_mean, L * bt * F}, {(void**)&a->ln2_rstd, L * bt * F},
        {(void**)&a->encoded, btc * X}, {(void**)&a->lnf, btc * X}, {(void**)&a->lnf_mean, bt * F}, {(void**)&a->lnf_rstd, bt * F},
        {(void**)&a->logits, bt * c.padded_vocab_size * X}, {(void**)&a->losses, bt * F}, {(void**)&a->proj_out, btc * X},
        {(void**)&a->dresidual, btc * X}, {(void**)&a->dbtc, btc * X}, {(void**)&a->dbig, 4 * btc * X},
        {(void**)&a->att_scratch, attention_scratch_bytes(B, T, c.channels, c.num_heads)},
    };
    auto align = [](size_t n) { return (n + 255) / 256 * 256; };  // every tensor 256-byte aligned
    a->bytes = 0;
    for (const Item& it : items) a->bytes += align(it.bytes);
    cudaCheck(cudaMalloc(&a->memory, a->bytes));
    char* p = (char*)a->memory;
    for (const Item& it : items) { *it.ptr = p; p += align(it.bytes); }
}

// ----------------------------------------------------------------------------------------------
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
    float* adam_v = nullptr;
    size_t shard_lo = 0, shard_hi = 0;// the optimizer's range: all on one GPU and in DDP, 1/world in ZeRO-1
    size_t shard = 0;                 // ZeRO-1: padded / world
    Activations acts{};
    int* d_inputs = nullptr;          // (B,T)
    int* d_targets = nullptr;         // (B,T)
    TokenBuckets buckets;
    float* d_loss_sum = nullptr;      // sum of the micro-steps' per-token losses
    float* d_sumsq = nullptr;         // the gradients' sum of squares
    StepScalars* d_step = nullptr;
    int adam_t = 0;                   // AdamW steps taken
    std::vector<cudaEvent_t> step_events;  // phase timing of gpt2_train_step
};

// Allocates everything for cfg and micro-batch (B,T); with zero = 1 the optimizer state only for
// rank's shard of `world`. The weights are left to gpt2_init_*.
void gpt2_build(GPT2* m, const GPT2Config& cfg, int B, int T, int rank = 0, int world = 1, int zero = 0) {
    m->cfg = cfg; m->layout = param_layout(cfg); m->B = B; m->T = T;
    m->padded = ceil_div(m->layout.total, (size_t)world * 8) * world * 8;
    m->shard = m->padded / world;
    m->shard_lo = zero ? (size_t)rank * m->shard : 0;
    m->shard_hi = zero ? std::min(m->shard_lo + m->shard, m->layout.total) : m->layout.total;
    const size_t n = m->padded, ns = m->shard_hi - m->shard_lo;
    cudaCheck(cudaMalloc(&m->params, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&m->grads, n * sizeof(floatX)));
    cudaCheck(cudaMemset(m->params, 0, n * sizeof(floatX)));
    if (sizeof(floatX) == sizeof(float) && !zero) m->master = (float*)m->params;  // fp32: the weights are the master copy
    else cudaCheck(cudaMalloc(&m->master, ns * sizeof(float)));
    cudaCheck(cudaMalloc(&m->adam_m, ns * sizeof(float)));
    cudaCheck(cudaMalloc(&m->adam_v, ns * sizeof(float)));
    cudaCheck(cudaMemset(m->adam_m, 0, ns * sizeof(float)));
    cudaCheck(cudaMemset(m->adam_v, 0, ns * sizeof(float)));
    cudaCheck(cudaMemset(m->grads, 0, n * sizeof(floatX)));
    activations_alloc(&m->acts, cfg, B, T);
    cudaCheck(cudaMalloc(&m->d_inputs, (size_t)B * T * sizeof(int)));
    cudaCheck(cudaMalloc(&m->d_targets, (size_t)B * T * sizeof(int)));
    token_buckets_create(&m->buckets, B * T, cfg.padded_vocab_size);
    cudaCheck(cudaMalloc(&m->d_loss_sum, sizeof(float)));
    cudaCheck(cudaMalloc(&m->d_sumsq, sizeof(float)));
    cudaCheck(cudaMalloc(&m->d_step, sizeof(StepScalars)));
}

void gpt2_free(GPT2* m) {
    cudaCheck(cudaFree(m->params)); cudaCheck(cudaFree(m->grads));
    if ((void*)m->master != (void*)m->params) cudaCheck(cudaFree(m->master));
    cudaCheck(cudaFree(m->adam_m)); cudaCheck(cudaFree(m->adam_v));
    cudaCheck(cudaFree(m->acts.memory));
    cudaCheck(cudaFree(m->d_inputs)); cudaCheck(cudaFree(m->d_targets));
    token_buckets_free(&m->buckets);
    cudaCheck(cudaFree(m->d_loss_sum)); cudaCheck(cudaFree(m->d_sumsq)); cudaCheck(cudaFree(m->d_step));
    for (cudaEvent_t e : m->step_events) cudaCheck(cudaEventDestroy(e));
}

// Sets the weights from all of them in fp32 on the device (layout.total): the floatX copy, and
// this rank's shard of the master copy.
void gpt2_set_weights(GPT2* m, Context* ctx, const float* full) {
    cast_from_master(ctx, m->params, full, m->layout.total);
    if ((void*)m->master != (void*)m->params)
        cudaCheck(cudaMemcpyAsync(m->master, full + m->shard_lo, (m->shard_hi - m->shard_lo) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, ctx->stream));
    cudaCheck(cudaStreamSynchronize(ctx->stream));
}

// GPT-2's initialization from a seed: N(0, 0.02) for embeddings and matmul weights, the two
// residual projections scaled by 1/sqrt(2L) (each block adds to the residual stream twice, so
// this keeps its variance from growing with depth), zero biases, LayerNorm weight 1. The same
// seed gives the same weights on every rank.
void gpt2_init_random(GPT2* m, Context* ctx, uint64_t seed) {
    const GPT2Config& c = m->cfg;
    float* w;  // all weights in fp32, then cast and sharded
    cudaCheck(cudaMalloc(&w, m->layout.total * sizeof(float)));
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        for (size_t l = 0; l < param_tensor_count(c, t); l++) {
            float* p = w + param_offset(c, m->layout, t, (int)l);
            size_t n = param_tensor_elems(c, t);
            const uint64_t stream_id = (uint64_t)t * 4096 + l;
            if (t == P_LN1W || t == P_LN2W || t == P_LNFW) fill(ctx, p, n, 1.0f);
            else if (t == P_WTE || t == P_WPE || t == P_QKVW || t == P_FCW) init_normal(ctx, p, n, 0.02f, seed, stream_id);
            else if (t == P_ATTPROJW || t == P_FCPROJW) init_normal(ctx, p, n, 0.02f / sqrtf(2.0f * c.num_layers), seed, stream_id);
            else fill(ctx, p, n, 0.0f);
        }
    // the padding rows of wte (tokens V..Vp-1) never occur: keep them 0
    fill(ctx, w + (size_t)c.vocab_size * c.channels, (size_t)(c.padded_vocab_size - c.vocab_size) * c.channels, 0.0f);
    gpt2_set_weights(m, ctx, w);
    cudaCheck(cudaFree(w));
}

// Loads the weights of a model file whose header matched m->cfg.
bool gpt2_init_from_file(GPT2* m, Context* ctx, const std::string& path, std::string* err) {
    std::vector<float> host(m->layout.total);
    if (!model_file_read_params(path, m->cfg, host.data(), err)) return false;
    float* w;
    cudaCheck(cudaMalloc(&w, host.size() * sizeof(float)));
    cudaCheck(cudaMemcpyAsync(w, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, ctx->stream));
    gpt2_set_weights(m, ctx, w);
    cudaCheck(cudaFree(w));
    return true;
}

// Uploads a micro-batch (inputs/targets in pageable host memory, B*T each; see TokenBuckets for
// why pageable) and groups the tokens for the deterministic embedding backward. Stream-ordered:
// the previous micro-step's kernels finish before these buffers change on the device.
void gpt2_set_batch(GPT2* m, Context* ctx, const int* inputs, const int* targets) {
    const size_t bt = (size_t)m->B * m->T;
    cudaCheck(cudaMemcpyAsync(m->d_inputs, inputs, bt * sizeof(int), cudaMemcpyHostToDevice, ctx->stream));
    if (targets) cudaCheck(cudaMemcpyAsync(m->d_targets, targets, bt * sizeof(int), cudaMemcpyHostToDevice, ctx->stream));
    token_buckets_build(&m->buckets, inputs, (int)bt, ctx->stream);
}

// ----------------------------------------------------------------------------------------------
// Forward: logits for the uploaded batch. With targets, per-token losses (and loss_sum += their
// sum); with dloss != 0 the logits are replaced by dloss * dloss/dlogits, ready for backward.
void gpt2_forward(GPT2* m, Context* ctx, bool with_targets, float dloss) {
    const GPT2Config& c = m->cfg;
    const int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, L = c.num_layers, BT = B * T;
    Activations& a = m->acts;
    HeadTailTensors<floatX> head = head_tail_tensors(m->params, c, m->layout);

    encoder_forward(ctx, a.encoded, m->d_inputs, head.wte, head.wpe, B, T, C);
    BlockTensors<floatX> w0 = block_tensors(m->params, c, m->layout, 0);
    layernorm_forward(ctx, a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, w0.ln1w, w0.ln1b, BT, C);
    for (int l = 0; l < L; l++) {
        BlockTensors<floatX> w = block_tensors(m->params, c, m->layout, l);
        BlockActs x = block_acts(a, c, B, T, l);
        matmul_forward(ctx, x.qkv, x.ln1, w.qkvw, w.qkvb, BT, C, 3 * C);
        attention_forward(ctx, x.atty, x.att, x.qkv, a.att_scratch, B, T, C, NH);
        matmul_forward(ctx, a.proj_out, x.atty, w.attprojw, w.attprojb, BT, C, C);
        layernorm_residual_forward(ctx, x.residual2, x.ln2, x.ln2_mean, x.ln2_rstd, x.input, a.proj_out,
                                   w.ln2w, w.ln2b, BT, C);
        matmul_forward(ctx, x.fch_gelu, x.ln2, w.fcw, w.fcb, BT, C, 4 * C, /*pre_gelu=*/x.fch);
        matmul_forward(ctx, a.proj_out, x.fch_gelu, w.fcprojw, w.fcprojb, BT, 4 * C, C);
        // the residual add closes the block; the next LayerNorm (block l+1's LN1, or LN_f) is fused into it
        if (l + 1 < L) {
            BlockTensors<floatX> wn = block_tensors(m->params, c, m->layout, l + 1);
            BlockActs xn = block_acts(a, c, B, T, l + 1);
            layernorm_residual_forward(ctx, x.residual3, xn.ln1, xn.ln1_mean, xn.ln1_rstd, x.residual2, a.proj_out,
                                       wn.ln1w, wn.ln1b, BT, C);
        } else {
            layernorm_residual_forward(ctx, x.residual3, a.lnf, a.lnf_mean, a.lnf_rstd, x.residual2, a.proj_out,
                                       head.lnfw, head.lnfb, BT, C);
        }
    }
    matmul_forward(ctx, a.logits, a.lnf, head.wte, nullptr, BT, C, c.padded_vocab_size);
    if (with_targets)
        fused_classifier(ctx, a.logits, a.losses, m->d_loss_sum, m->d_targets, dloss, BT, c.vocab_size, c.padded_vocab_size);
}

// The multi-GPU seam: backward calls this, on the compute stream's timeline, each time a
// contiguous range of the gradient buffer is final for this step. Single GPU passes nothing.
typedef std::function<void(ElemRange)> GradReadyFn;

// Backward: gradients of everything, ACCUMULATED into m->grads (zeroed by the caller at the start
// of a step). Needs the forward's activations with dlogits in place of the logits.
void gpt2_backward(GPT2* m, Context* ctx, const GradReadyFn& ready) {
    const GPT2Config& c = m->cfg;
    const int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, L = c.num_layers, BT = B * T;
    Activations& a = m->acts;
    HeadTailTensors<floatX> head = head_tail_tensors(m->params, c, m->layout);
    HeadTailTensors<floatX> dhead = head_tail_tensors(m->grads, c, m->layout);

    // lm head (tied to wte): dlnf = dlogits @ wte, dwte += dlogits^T @ lnf
    matmul_backward(ctx, a.dbtc, dhead.wte, nullptr, a.logits, a.lnf, head.wte, BT, C, c.padded_vocab_size);
    cudaCheck(cudaMemsetAsync(a.dresidual, 0, (size_t)BT * C * sizeof(floatX), ctx->stream));
    BlockActs last = block_acts(a, c, B, T, L - 1);
    layernorm_backward(ctx, a.dresidual, dhead.lnfw, dhead.lnfb, a.dbtc, last.residual3, head.lnfw,
                       a.lnf_mean, a.lnf_rstd, BT, C);
    if (ready) ready(tail_range(m->layout));
    for (int l = L - 1; l >= 0; l--) {
        BlockTensors<floatX> w = block_tensors(m->params, c, m->layout, l);
        BlockTensors<floatX> dw = block_tensors(m->grads, c, m->layout, l);
        BlockActs x = block_acts(a, c, B, T, l);
        // dresidual = d(residual3). MLP branch: fcproj, then fc with GELU' fused into the dgrad.
        matmul_backward(ctx, a.dbig, dw.fcprojw, dw.fcprojb, a.dresidual, x.fch_gelu, w.fcprojw, BT, 4 * C, C,
                        /*pre_gelu=*/x.fch);
        matmul_backward(ctx, a.dbtc, dw.fcw, dw.fcb, a.dbig, x.ln2, w.fcw, BT, C, 4 * C);
        layernorm_backward(ctx, a.dresidual, dw.ln2w, dw.ln2b, a.dbtc, x.residual2, w.ln2w, x.ln2_mean, x.ln2_rstd, BT, C);
        // dresidual = d(residual2). Attention branch.
        matmul_backward(ctx, a.dbtc, dw.attprojw, dw.attprojb, a.dresidual, x.atty, w.attprojw, BT, C, C);
        attention_backward(ctx, a.dbig, a.dbtc, x.qkv, x.atty, x.att, a.att_scratch, B, T, C, NH);
        matmul_backward(ctx, a.dbtc, dw.qkvw, dw.qkvb, a.dbig, x.ln1, w.qkvw, BT, C, 3 * C);
        layernorm_backward(ctx, a.dresidual, dw.ln1w, dw.ln1b, a.dbtc, x.input, w.ln1w, x.ln1_mean, x.ln1_rstd, BT, C);
        // dresidual = d(block input). Block l's gradients are final.
        if (ready) ready(block_range(m->layout, l));
    }
    encoder_backward(ctx, dhead.wte, dhead.wpe, a.dresidual, m->buckets, B, T, C);
    if (ready) ready(head_range(m->layout));
}

// ----------------------------------------------------------------------------------------------
// Update: norm, decision, AdamW per parameter tensor (decay on the 2-D ones only). In ZeRO-1 the
// norm is summed over the ranks' shards and the updated shards are all-gathered afterwards.
void gpt2_update(GPT2* m, Context* ctx, const Comm* comm, int zero, AdamWHyper h, float loss_scale, float max_norm) {
    const GPT2Config& c = m->cfg;
    norm_squared(ctx, m->d_sumsq, m->grads + m->shard_lo, m->shard_hi - m->shard_lo);
    if (zero) comm_sum_floats(comm, m->d_sumsq, 1, ctx->stream);
    step_decision(ctx, m->d_step, m->d_sumsq, loss_scale, max_norm);
    adamw_set_step(&h, ++m->adam_t);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const size_t first = param_offset(c, m->layout, t, 0);
        adamw_update(ctx, m->params, m->master, m->grads, m->adam_m, m->adam_v, first, m->layout.block_elems,
                     param_tensor_elems(c, t), (int)param_tensor_count(c, t), m->shard_lo, m->shard_hi,
                     h, param_tensor_decays(t), m->d_step);
    }
    if (zero) comm_allgather_params(comm, m->params, m->shard, ctx->stream);
}

// What one step reports back to the host (read after the step's single synchronization).
struct StepResult {
    float loss, grad_norm;
    bool skipped;
    float fwd_ms = 0, bwd_ms = 0, exposed_ms = 0, update_ms = 0, comm_ms = 0;  // compute-stream phases
    double comm_bytes = 0;
};

// One optimizer step over `accum` micro-batches: next_batch(i) must fill inputs/targets (B*T
// each, host) for micro-step i. The loss is the mean over all accum*B*T tokens of all ranks.
// With a reducer (several GPUs) the last micro-step's backward hands it every finished range.
StepResult gpt2_train_step(GPT2* m, Context* ctx, int accum, const std::function<void(int, int**, int**)>& next_batch,
                           const AdamWHyper& h, LossScaler* scaler, float max_norm, const Comm* comm = nullptr,
                           GradReducer* reducer = nullptr) {
    const int BT = m->B * m->T, world = comm ? comm->world : 1;
    std::vector<cudaEvent_t>& ev = m->step_events;  // step start, [2 per micro-step], wait end, update end
    while (ev.size() < (size_t)(2 * accum + 3)) { ev.emplace_back(); cudaCheck(cudaEventCreate(&ev.back())); }
    cudaCheck(cudaEventRecord(ev[0], ctx->stream));
    cudaCheck(cudaMemsetAsync(m->grads, 0, m->padded * sizeof(floatX), ctx->stream));
    cudaCheck(cudaMemsetAsync(m->d_loss_sum, 0, sizeof(float), ctx->stream));
    const float dloss = scaler->scale / ((float)BT * accum);  // d(mean loss)/d(token loss), times the loss scale
    if (reducer) grad_reducer_begin_step(reducer);
    GradReadyFn ready;
    if (reducer) ready = [reducer](ElemRange r) { grad_reducer_ready(reducer, r); };
    for (int i = 0; i < accum; i++) {
        int *inputs, *targets;
        next_batch(i, &inputs, &targets);
        gpt2_set_batch(m, ctx, inputs, targets);
        gpt2_forward(m, ctx, true, dloss);
        cudaCheck(cudaEventRecord(ev[2 * i + 1], ctx->stream));
        gpt2_backward(m, ctx, i == accum - 1 ? ready : GradReadyFn());
        cudaCheck(cudaEventRecord(ev[2 * i + 2], ctx->stream));
    }
    if (reducer) grad_reducer_finish(reducer);
    cudaCheck(cudaEventRecord(ev[2 * accum + 1], ctx->stream));
    gpt2_update(m, ctx, comm, reducer ? reducer->zero : 0, h, scaler->scale, max_norm);
    if (comm) comm_sum_floats(comm, m->d_loss_sum, 1, ctx->stream);
    cudaCheck(cudaEventRecord(ev[2 * accum + 2], ctx->stream));
    StepScalars s;
    float loss_sum;
    cudaCheck(cudaMemcpyAsync(&s, m->d_step, sizeof s, cudaMemcpyDeviceToHost, ctx->stream));
    cudaCheck(cudaMemcpyAsync(&loss_sum, m->d_loss_sum, sizeof loss_sum, cudaMemcpyDeviceToHost, ctx->stream));
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    if (s.skip) m->adam_t--;  // a skipped step did not advance Adam's bias corrections
    scaler->update(s.skip != 0);
    StepResult r{loss_sum / ((float)BT * accum * world), s.grad_norm, s.skip != 0};
    for (int i = 0; i < accum; i++) {
        float f, b;
        cudaCheck(cudaEventElapsedTime(&f, ev[2 * i], ev[2 * i + 1]));
        cudaCheck(cudaEventElapsedTime(&b, ev[2 * i + 1], ev[2 * i + 2]));
        r.fwd_ms += f; r.bwd_ms += b;
    }
    cudaCheck(cudaEventElapsedTime(&r.update_ms, ev[2 * accum + 1], ev[2 * accum + 2]));
    if (reducer) { r.exposed_ms = reducer->exposed_ms(); r.comm_ms = reducer->comm_ms(); r.comm_bytes = reducer->bytes; }
    return r;
}

#ifndef TESTING
// ----------------------------------------------------------------------------------------------
// The command line: ONE table drives both the parser and --help.
struct TrainConfig {
    std::string model = "d12";                      // descriptor or model file
    std::string train = "dev_data/tinyshakespeare_train.bin";
    int B = 8, T = 1024;
    long long total_batch = 0;                      // tokens per step over all GPUs; 0: B*T*GPUs
    LRSchedule sched;
    int max_steps = -1;                             // -1: one epoch of the training data
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f, grad_clip = 1.0f;
    int seed = 42;
    int zero = 0;                                   // ZeRO stage: 0 (DDP) or 1
    float bucket_mb = 16.0f;                        // gradient all-reduce bucket size
    std::string rendezvous = "tcp";                 // NCCL id exchange of an env-var launch
    bool bench = false;
    int bench_warmup = 5, bench_steps = 20;
};

std::vector<Option> train_options(TrainConfig* c) {
    return {
        {"model", 'e', OPT_STRING, &c->model, "d12|d24|d36|d48 (new model) or a model file to start from"},
        {"train", 'i', OPT_STRING, &c->train, "training token shards (glob)"},
        {"batch", 'b', OPT_INT, &c->B, "micro-batch size per GPU", 1, 4096},
        {"seq-len", 't', OPT_INT, &c->T, "sequence length", 1, 65536},
        {"total-batch-tokens", 'd', OPT_INT64, &c->total_batch, "tokens per optimizer step over all GPUs (0: B*T*GPUs)", 0, 1e12},
        {"lr", 'l', OPT_FLOAT, &c->sched.lr, "peak learning rate", 0, 10},
        {"warmup", 'w', OPT_INT, &c->sched.warmup, "linear warmup steps", 0, 1e9},
        {"lr-schedule", 0, OPT_STRING, &c->sched.kind, "cosine|linear|constant decay after warmup"},
        {"lr-final", 'q', OPT_FLOAT, &c->sched.final_frac, "final learning rate as a fraction of the peak", 0, 1},
        {"max-steps", 'x', OPT_INT, &c->max_steps, "optimizer steps (-1: one epoch)", -1, 1e9},
        {"beta1", 0, OPT_FLOAT, &c->beta1, "AdamW beta1", 0, 1},
        {"beta2", 0, OPT_FLOAT, &c->beta2, "AdamW beta2", 0, 1},
        {"eps", 0, OPT_FLOAT, &c->eps, "AdamW epsilon", 0, 1},
        {"weight-decay", 'c', OPT_FLOAT, &c->weight_decay, "AdamW weight decay (2-D weights only)", 0, 10},
        {"grad-clip", 0, OPT_FLOAT, &c->grad_clip, "clip the global gradient norm to this (0: off)", 0, 1e9},
        {"seed", 0, OPT_INT, &c->seed, "seed of the initialization and of --bench tokens", 0, 2147483647},
        {"zero", 'z', OPT_INT, &c->zero, "0: DDP (all-reduce); 1: ZeRO-1 (optimizer state sharded over GPUs)", 0, 1},
        {"bucket-mb", 0, OPT_FLOAT, &c->bucket_mb, "gradient reduction bucket, MiB (0: one per block)", 0, 1e6},
        {"rendezvous", 0, OPT_STRING, &c->rendezvous, "without mpirun: tcp (MASTER_ADDR/MASTER_PORT) or file:PATH"},
        {"bench", 0, OPT_FLAG, &c->bench, "benchmark on random tokens: no data files needed"},
        {"bench-warmup", 0, OPT_INT, &c->bench_warmup, "--bench: untimed steps first", 0, 1e6},
        {"bench-steps", 0, OPT_INT, &c->bench_steps, "--bench: timed steps", 1, 1e6},
    };
}

// Returns 0 to go on, 1 to exit successfully (--help), -1 on an error (printed by rank 0).
int parse_train_config(TrainConfig* c, int argc, char** argv, const Comm& comm) {
    std::vector<Option> opts = train_options(c);
    bool help = false;
    std::string err;
    const char* usage = "usage: [mpirun -np N] train_gpt2cu [options]    (GPT-2 training, " PRECISION_NAME " build)";
    if (!options_parse(opts, argc, argv, &help, &err)) {
        if (comm.rank == 0) fprintf(stderr, "error: %s\n", err.c_str());
        return -1;
    }
    if (help) { if (comm.rank == 0) options_help(stdout, usage, opts); return 1; }
    if (!lr_schedule_kind_valid(c->sched.kind)) err = "option --lr-schedule: '" + c->sched.kind + "' is not one of cosine, linear, constant";
    const long long bt = (long long)c->B * c->T * comm.world;
    if (c->total_batch == 0) c->total_batch = bt;
    if (err.empty() && c->total_batch % bt != 0)
        err = "option --total-batch-tokens: " + std::to_string(c->total_batch) + " is not a multiple of B*T*GPUs = " +
              std::to_string(c->B) + "*" + std::to_string(c->T) + "*" + std::to_string(comm.world) + " = " + std::to_string(bt);
    if (!err.empty()) { if (comm.rank == 0) fprintf(stderr, "error: %s\n", err.c_str()); return -1; }
    return 0;
}

// The model: a descriptor builds a fresh one, anything else is read as a model file.
bool build_model(GPT2* m, Context* ctx, const TrainConfig& tc, const Comm& comm, std::string* err) {
    GPT2Config cfg;
    const bool fresh = config_from_descriptor(tc.model, &cfg);
    if (!fresh && !model_file_read_header(tc.model, &cfg, err)) return false;
    if (!attention_supports(cfg.channels, cfg.num_heads)) {
        *err = "model " + tc.model + ": head size " + std::to_string(cfg.channels / cfg.num_heads) + " is not supported by this build's attention (needs 64)";
        return false;
    }
    if (tc.T > cfg.max_seq_len) {
        *err = "option --seq-len: " + std::to_string(tc.T) + " exceeds the model's maximum sequence length " + std::to_string(cfg.max_seq_len);
        return false;
    }
    gpt2_build(m, cfg, tc.B, tc.T, comm.rank, comm.world, tc.zero);
    if (fresh) { gpt2_init_random(m, ctx, tc.seed); return true; }
    return gpt2_init_from_file(m, ctx, tc.model, err);
}

// The step loop shared by training and --bench. `next` fills one micro-batch of this rank.
int run_steps(GPT2* m, Context* ctx, const Comm& comm, GradReducer* reducer, const TrainConfig& tc, int steps,
              int timed_from, const std::function<bool(int**, int**)>& next) {
    const int accum = (int)(tc.total_batch / ((long long)tc.B * tc.T * comm.world));
    LossScaler scaler = LossScaler::make(USES_LOSS_SCALING);
    LRSchedule sched = tc.sched;
    sched.max_steps = steps;
    const double flops_tok = flops_per_token(m->cfg, tc.T);
    const double peak = comm.world * peak_flops(ctx->props.major, ctx->props.minor, ctx->props.name, sizeof(floatX) == 4);
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0)); cudaCheck(cudaEventCreate(&t1));
    std::vector<float> timed_ms;
    std::vector<StepResult> timed;
    bool data_ok = true;
    for (int step = 0; step < steps && data_ok; step++) {
        AdamWHyper h{lr_at(sched, step), tc.beta1, tc.beta2, tc.eps, tc.weight_decay, 0};
        cudaCheck(cudaEventRecord(t0, ctx->stream));
        StepResult r = gpt2_train_step(m, ctx, accum, [&](int, int** in, int** tg) { data_ok = data_ok && next(in, tg); },
                                       h, &scaler, tc.grad_clip, &comm, reducer);
        cudaCheck(cudaEventRecord(t1, ctx->stream));
        cudaCheck(cudaEventSynchronize(t1));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, t0, t1));
        if (step >= timed_from) { timed_ms.push_back(ms); timed.push_back(r); }
        const double tok_s = tc.total_batch / (ms / 1e3);
        if (comm.rank == 0)
            printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | scale %.0f%s | %.2f ms (fwd %.1f bwd %.1f exposed comm %.2f"
                   " opt %.2f) | %.0f tok/s | MFU %.1f%%\n",
                   step + 1, steps, r.loss, r.grad_norm, h.lr, scaler.scale, r.skipped ? " (skipped)" : "", ms, r.fwd_ms,
                   r.bwd_ms, r.exposed_ms, r.update_ms, tok_s, peak > 0 ? 100.0 * flops_tok * tok_s / peak : 0.0);
    }
    cudaCheck(cudaEventDestroy(t0)); cudaCheck(cudaEventDestroy(t1));
    if (!data_ok) return 1;
    if (!timed_ms.empty() && comm.rank == 0) {
        std::vector<float> sorted = timed_ms;
        std::sort(sorted.begin(), sorted.end());
        const double med = sorted[sorted.size() / 2], tok_s = tc.total_batch / (med / 1e3);
        double exposed = 0, comm_ms = 0, bytes = 0, fwd = 0, bwd = 0, opt = 0;
        for (const StepResult& r : timed) {
            exposed += r.exposed_ms; comm_ms += r.comm_ms; bytes += r.comm_bytes; fwd += r.fwd_ms; bwd += r.bwd_ms; opt += r.update_ms;
        }
        for (double* v : {&exposed, &comm_ms, &bytes, &fwd, &bwd, &opt}) *v /= timed.size();
        // nccl-tests' bus bandwidth: what each link carries, comparable across GPU counts
        const double algbw = comm_ms > 0 ? bytes / (comm_ms * 1e-3) / 1e9 : 0, busbw = algbw * 2.0 * (comm.world - 1) / comm.world;
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        printf("RESULT precision=%s model=L%dC%d gpus=%d zero=%d B=%d T=%d accum=%d total_batch=%lld steps=%zu median_ms=%.3f "
               "tok_per_s=%.0f mfu=%.2f fwd_ms=%.3f bwd_ms=%.3f opt_ms=%.3f exposed_comm_ms=%.3f exposed_comm_pct=%.2f "
               "comm_ms=%.3f comm_mb=%.1f busbw_gbs=%.1f device_mem_gb=%.2f\n",
               PRECISION_NAME, m->cfg.num_layers, m->cfg.channels, comm.world, tc.zero, tc.B, tc.T, accum, tc.total_batch,
               timed_ms.size(), med, tok_s, peak > 0 ? 100.0 * flops_tok * tok_s / peak : 0.0, fwd, bwd, opt, exposed,
               100.0 * exposed / med, comm_ms, bytes / 1e6, busbw, (total_b - free_b) / 1e9);
    }
    return 0;
}

int main(int argc, char** argv) {
    Comm comm;
    comm_launch(&comm, &argc, &argv);
    TrainConfig tc;
    if (int r = parse_train_config(&tc, argc, argv, comm)) { comm_free(&comm); return r > 0 ? 0 : 1; }
    std::string err;
    DataLoader loader;
    const int accum = (int)(tc.total_batch / ((long long)tc.B * tc.T * comm.world));
    if (!tc.bench && !dataloader_open(&loader, tc.train, tc.B, tc.T, comm.rank, comm.world, accum, 50257, &err)) {
        if (tc.train == TrainConfig().train) err += " (prepare the default dataset with: make data)";
        comm_fail(&comm, err);
    }
    int devices = 0;
    cudaCheck(cudaGetDeviceCount(&devices));
    Context ctx;
    context_create(&ctx, comm.local_rank % devices);
    if (!comm_init(&comm, tc.rendezvous, &err)) comm_fail(&comm, err);
    GPT2 model;
    if (!build_model(&model, &ctx, tc, comm, &err)) comm_fail(&comm, err);
    GradReducer reducer;
    if (comm.world > 1)
        grad_reducer_init(&reducer, &comm, &ctx, model.grads, model.layout.total, model.shard, tc.zero, tc.bucket_mb, model.cfg.num_layers + 3);
    if (comm.rank == 0)
        printf("GPT-2 L=%d NH=%d C=%d (%zu parameters), %s, %d GPU(s) via %s%s, B=%d T=%d, %lld tokens/step, %s\n"
               "memory per GPU: weights+grads %.2f GB, optimizer (fp32 master, m, v) %.2f GB%s, activations %.2f GB\n",
               model.cfg.num_layers, model.cfg.num_heads, model.cfg.channels, model.layout.total, PRECISION_NAME, comm.world,
               comm.launcher.c_str(), tc.zero ? ", ZeRO-1" : "", tc.B, tc.T, tc.total_batch, ctx.props.name,
               2.0 * model.padded * sizeof(floatX) / 1e9, 3.0 * (model.shard_hi - model.shard_lo) * sizeof(float) / 1e9,
               tc.zero ? " (this rank's shard)" : "", model.acts.bytes / 1e9);
    int rc;
    if (tc.bench) {
        std::mt19937 rng(tc.seed + 1000 * comm.rank);
        std::vector<int> in((size_t)tc.B * tc.T), tg(in.size());
        rc = run_steps(&model, &ctx, comm, comm.world > 1 ? &reducer : nullptr, tc, tc.bench_warmup + tc.bench_steps,
                       tc.bench_warmup, [&](int** i, int** t) {
            for (size_t k = 0; k < in.size(); k++) { in[k] = rng() % model.cfg.vocab_size; tg[k] = rng() % model.cfg.vocab_size; }
            *i = in.data(); *t = tg.data();
            return true;
        });
    } else {
        size_t epoch_tokens = 0;
        for (size_t n : loader.file_tokens) epoch_tokens += n;
        const int steps = tc.max_steps > 0 ? tc.max_steps : (int)std::max<size_t>(1, epoch_tokens / tc.total_batch);
        rc = run_steps(&model, &ctx, comm, comm.world > 1 ? &reducer : nullptr, tc, steps, std::min(steps - 1, 1), [&](int** i, int** t) {
            if (!dataloader_next(&loader, &err)) comm_fail(&comm, err);
            *i = loader.inputs.data(); *t = loader.targets.data();
            return true;
        });
    }
    if (comm.world > 1) grad_reducer_free(&reducer);
    gpt2_free(&model);
    context_destroy(&ctx);
    comm_free(&comm);
    return rc;
}
#endif
