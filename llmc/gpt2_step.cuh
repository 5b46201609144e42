// What the GPT-2 model COMPUTES, on the buffers of llmc/gpt2.cuh: uploading a micro-batch, the
// forward pass (with the chunked lm head and the loss), the backward pass (which announces each
// finished block's gradient range: the multi-GPU seam), the update (norm, step decision, AdamW),
// one optimizer step over micro-batches with its phase timing, and the GEMM-tuning pass.
// train_gpt2.cu runs these; test_gpt2.cu checks them against the PyTorch reference.
#pragma once
#include <algorithm>
#include <csignal>     // sig_atomic_t
#include <functional>
#include <random>
#include <string>
#include <vector>
#include "common.cuh"
#include "model.h"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "attention.cuh"
#include "classifier.cuh"
#include "norm.cuh"
#include "adamw.cuh"
#include "loss_scale.h"
#include "activations.cuh"
#include "comm.cuh"
#include "grad_reducer.cuh"
#include "dataloader.h"   // random_tokens
#include "report.h"       // StepResult: what a step reports back (read after its single synchronization)
#include "gpt2.cuh"

// Uploads a micro-batch (inputs/targets in pageable host memory, rows*T each, rows = m->B and
// T = m->T unless given: the validation batches may have fewer rows, the multiple-choice
// evaluation shorter ones, never more than B*T tokens; see TokenBuckets for why pageable) and
// groups the tokens for the deterministic embedding backward. Stream-ordered: the previous
// micro-step's kernels finish before these buffers change on the device.
void gpt2_set_batch(GPT2* m, Context* ctx, const int* inputs, const int* targets, int rows = 0, int T = 0) {
    const size_t bt = (size_t)(rows > 0 ? rows : m->B) * (T > 0 ? T : m->T);
    if (bt > (size_t)m->B * m->T) { fprintf(stderr, "gpt2_set_batch: %zu tokens exceed B*T = %d*%d\n", bt, m->B, m->T); exit(EXIT_FAILURE); }
    cudaCheck(cudaMemcpyAsync(m->d_inputs, inputs, bt * sizeof(int), cudaMemcpyHostToDevice, ctx->stream));
    if (targets) cudaCheck(cudaMemcpyAsync(m->d_targets, targets, bt * sizeof(int), cudaMemcpyHostToDevice, ctx->stream));
    token_buckets_build(&m->buckets, inputs, (int)bt, ctx->stream);
}

// ----------------------------------------------------------------------------------------------
// Forward of the uploaded batch of B x T tokens (at most what was allocated; sampling runs B=1).
// The lm head works in chunks of acts.logit_rows tokens (activations.cuh says why); after it the
// logits buffer holds the LAST chunk's logits, so a caller that reads logits must keep B*T within
// one chunk. With targets: per-token losses, and loss_sum += their sum. With dloss != 0 (training)
// each chunk's logits become dloss * dloss/dlogits and the head's backward runs on them at once:
// dlnf -> acts.dbtc, dwte += ...; gpt2_backward continues from there (it needs B, T = m->B, m->T).
void gpt2_forward(GPT2* m, Context* ctx, int B, int T, bool with_targets, float dloss) {
    const GPT2Config& c = m->cfg;
    const int C = c.channels, NH = c.num_heads, L = c.num_layers, BT = B * T, LD = ones_ld(C);
    Activations& a = m->acts;
    HeadTailTensors<floatX> head = head_tail_tensors(m->params, c, m->layout);

    encoder_forward(ctx, a.encoded, m->d_inputs, head.wte, head.wpe, B, T, C);
    BlockTensors<floatX> w0 = block_tensors(m->params, c, m->layout, 0);
    layernorm_forward(ctx, a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, w0.ln1w, w0.ln1b, BT, C, LD);
    for (int l = 0; l < L; l++) {
        BlockTensors<floatX> w = block_tensors(m->params, c, m->layout, l);
        BlockActs x = block_acts(a, c, B, T, l);
        matmul_forward(ctx, x.qkv, x.ln1, w.qkvw, w.qkvb, BT, C, 3 * C, nullptr, nullptr, LD);
        attention_forward(ctx, x.atty, x.att, x.qkv, a.att_scratch, B, T, C, NH);
        // each projection adds its output to the residual stream in its epilogue
        matmul_forward(ctx, x.residual2, x.atty, w.attprojw, w.attprojb, BT, C, C, nullptr, /*residual=*/x.input);
        layernorm_forward(ctx, x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2w, w.ln2b, BT, C, LD);
        matmul_forward(ctx, x.fch_gelu, x.ln2, w.fcw, w.fcb, BT, C, 4 * C, /*pre_gelu=*/x.fch, nullptr, LD);
        matmul_forward(ctx, x.residual3, x.fch_gelu, w.fcprojw, w.fcprojb, BT, 4 * C, C, nullptr, /*residual=*/x.residual2);
        // the block's output feeds the next block's LN1, or LN_f
        if (l + 1 < L) {
            BlockTensors<floatX> wn = block_tensors(m->params, c, m->layout, l + 1);
            BlockActs xn = block_acts(a, c, B, T, l + 1);
            layernorm_forward(ctx, xn.ln1, xn.ln1_mean, xn.ln1_rstd, x.residual3, wn.ln1w, wn.ln1b, BT, C, LD);
        } else {
            layernorm_forward(ctx, a.lnf, a.lnf_mean, a.lnf_rstd, x.residual3, head.lnfw, head.lnfb, BT, C);
        }
    }
    // lm head (tied to wte), chunk by chunk: logits = lnf @ wte^T; loss; dlogits in place;
    // dlnf = dlogits @ wte; dwte += dlogits^T @ lnf
    const size_t rows = a.logit_rows;
    if (!with_targets && (size_t)BT > rows) {
        fprintf(stderr, "gpt2_forward: %d tokens without targets exceed the %zu-token logits chunk\n", BT, rows);
        exit(EXIT_FAILURE);
    }
    HeadTailTensors<floatX> dhead = head_tail_tensors(m->grads, c, m->layout);
    for (size_t r0 = 0; r0 < (size_t)BT; r0 += rows) {
        const int n = (int)std::min(rows, BT - r0);
        matmul_forward(ctx, a.logits, a.lnf + r0 * C, head.wte, nullptr, n, C, c.padded_vocab_size);
        if (!with_targets) continue;
        fused_classifier(ctx, a.logits, a.losses + r0, m->d_loss_sum, m->d_targets + r0, dloss, n, c.vocab_size, c.padded_vocab_size);
        if (dloss != 0.0f)
            matmul_backward(ctx, a.dbtc + r0 * C, dhead.wte, nullptr, a.logits, a.lnf + r0 * C, head.wte, n, C, c.padded_vocab_size);
    }
}

// The multi-GPU seam: backward calls this, on the compute stream's timeline, each time a
// contiguous range of the gradient buffer is final for this step. Single GPU passes nothing.
typedef std::function<void(ElemRange)> GradReadyFn;

// Backward: gradients of everything, ACCUMULATED into m->grads (zeroed by the caller at the start
// of a step, before the forward, which already did the lm head's part: dwte, and dlnf in acts.dbtc).
void gpt2_backward(GPT2* m, Context* ctx, const GradReadyFn& ready) {
    const GPT2Config& c = m->cfg;
    const int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, L = c.num_layers, BT = B * T, LD = ones_ld(C);
    Activations& a = m->acts;
    HeadTailTensors<floatX> head = head_tail_tensors(m->params, c, m->layout);
    HeadTailTensors<floatX> dhead = head_tail_tensors(m->grads, c, m->layout);

    cudaCheck(cudaMemsetAsync(a.dresidual, 0, (size_t)BT * C * sizeof(floatX), ctx->stream));
    BlockActs last = block_acts(a, c, B, T, L - 1);
    // The two projections' bias gradients are the column sums of the residual stream's gradient
    // where their outputs were added (fcproj: d(residual3), attproj: d(residual2)); the LayerNorm
    // backward that writes that gradient sums them as it goes (layernorm_backward's dproj_bias).
    layernorm_backward(ctx, a.dresidual, dhead.lnfw, dhead.lnfb, a.dbtc, last.residual3, head.lnfw,
                       a.lnf_mean, a.lnf_rstd, BT, C, block_tensors(m->grads, c, m->layout, L - 1).fcprojb);
    if (ready) ready(tail_range(m->layout));
    for (int l = L - 1; l >= 0; l--) {
        BlockTensors<floatX> w = block_tensors(m->params, c, m->layout, l);
        BlockTensors<floatX> dw = block_tensors(m->grads, c, m->layout, l);
        BlockActs x = block_acts(a, c, B, T, l);
        // dresidual = d(residual3). MLP branch: fcproj (GELU' fused into its dgrad: dbig = d(fch)), then fc.
        if (a.recompute >= 1) gelu_forward(ctx, x.fch_gelu, x.fch, (size_t)BT * 4 * C);
        if (a.recompute >= 2) layernorm_apply(ctx, x.ln2, x.residual2, x.ln2_mean, x.ln2_rstd, w.ln2w, w.ln2b, BT, C, LD);
        matmul_backward(ctx, a.dbig, dw.fcprojw, nullptr, a.dresidual, x.fch_gelu, w.fcprojw, BT, 4 * C, C,
                        /*pre_gelu=*/x.fch);
        matmul_backward(ctx, a.dbtc, dw.fcw, dw.fcb, a.dbig, x.ln2, w.fcw, BT, C, 4 * C, nullptr, LD, a.wgrad);
        layernorm_backward(ctx, a.dresidual, dw.ln2w, dw.ln2b, a.dbtc, x.residual2, w.ln2w, x.ln2_mean, x.ln2_rstd, BT, C,
                           dw.attprojb);
        // dresidual = d(residual2). Attention branch.
        matmul_backward(ctx, a.dbtc, dw.attprojw, nullptr, a.dresidual, x.atty, w.attprojw, BT, C, C);
        attention_backward(ctx, a.dbig, a.dbtc, x.qkv, x.atty, x.att, a.att_scratch, B, T, C, NH);
        if (a.recompute >= 2) layernorm_apply(ctx, x.ln1, x.input, x.ln1_mean, x.ln1_rstd, w.ln1w, w.ln1b, BT, C, LD);
        matmul_backward(ctx, a.dbtc, dw.qkvw, dw.qkvb, a.dbig, x.ln1, w.qkvw, BT, C, 3 * C, nullptr, LD, a.wgrad);
        // d(block input) is d(residual3) of block l-1: block l-1's fcproj bias gradient
        layernorm_backward(ctx, a.dresidual, dw.ln1w, dw.ln1b, a.dbtc, x.input, w.ln1w, x.ln1_mean, x.ln1_rstd, BT, C,
                           l > 0 ? block_tensors(m->grads, c, m->layout, l - 1).fcprojb : nullptr);
        // dresidual = d(block input). Block l's gradients are final (and block l-1's fcproj bias).
        if (ready) ready(block_range(m->layout, l));
    }
    encoder_backward(ctx, dhead.wte, dhead.wpe, a.dresidual, m->buckets, B, T, C);
    if (ready) ready(head_range(m->layout));
}

// ----------------------------------------------------------------------------------------------
// Update: norm, decision, AdamW per parameter tensor (decay on the 2-D ones only). In ZeRO-1 the
// norm is summed over the ranks' shards and the updated shards are all-gathered afterwards.
// d_loss_sum must hold the step's summed token loss over all ranks (`tokens` tokens): the spike
// guard decides on it (the decision and the statistics come back in m->d_step).
struct UpdateRules {
    float max_norm = 0;   // clip the global gradient norm to this (0: off)
    SpikeGuard spike;     // skip outlier steps (llmc/spike_guard.h; off by default)
};
void gpt2_update(GPT2* m, Context* ctx, const Comm* comm, int zero, AdamWHyper h, float loss_scale, const UpdateRules& rules,
                 double tokens) {
    const GPT2Config& c = m->cfg;
    norm_squared(ctx, m->d_sumsq, m->grads + m->shard_lo, m->shard_hi - m->shard_lo);
    if (zero) comm_sum_floats(comm, m->d_sumsq, 1, ctx->stream);
    step_decision(ctx, m->d_step, m->d_sumsq, loss_scale, rules.max_norm, m->d_loss_sum, tokens, rules.spike, m->spike);
    adamw_set_step(&h, ++m->adam_t);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const size_t first = param_offset(c, m->layout, t, 0);
        adamw_update(ctx, m->params, m->master, m->grads, m->adam_m, m->adam_v, first, m->layout.block_elems,
                     param_tensor_elems(c, t), (int)param_tensor_count(c, t), m->shard_lo, m->shard_hi,
                     h, param_tensor_decays(t), m->d_step);
    }
    if (zero) comm_allgather_params(comm, m->params, m->shard, ctx->stream);
}

// ----------------------------------------------------------------------------------------------
// CUDA graphs. A training micro-step launches ~300 kernels (and cuBLASLt calls); at small batches
// each does a few microseconds of work, less than the host needs to launch it, and the GPU waits
// for the host. A graph is the same launches recorded once (stream capture) and replayed by one
// call. Everything a replay reads must then be where and what it was at capture: the buffers are
// (allocated once, for B x T), the GEMM plans are (the first step runs without graphs and creates
// them), the batch is uploaded before the replay into the same buffers, the embedding backward's
// grid covers any batch (encoder_backward). What is not: dloss, a kernel argument of the loss
// (it follows the FP16 loss scale), so the forward is captured again when it changes; and the
// reduction calls of the last micro-step on several GPUs, whose backward therefore runs without a
// graph. Replays compute exactly what the launches would: the same kernels in the same order.
inline void run_graph(Context* ctx, cudaGraphExec_t* exec, bool capture, const std::function<void()>& launches) {
    if (capture || !*exec) {
        if (*exec) cudaCheck(cudaGraphExecDestroy(*exec));
        *exec = graph_capture(ctx, launches);
    }
    cudaCheck(cudaGraphLaunch(*exec, ctx->stream));
}

// One optimizer step over `accum` micro-batches: next_batch(i, &inputs, &targets) must point
// inputs and targets at host arrays of B*T tokens each for micro-step i (copied to the GPU before
// the next call). The loss is the mean over all accum*B*T tokens of all ranks.
// With a reducer (several GPUs) the last micro-step's backward hands it every finished range.
// A skipped step (non-finite gradients, or a spike: rules.spike) leaves the weights, Adam's state
// and step count as they were; only non-finite gradients lower the FP16 loss scale.
// *stop_vote: nonzero when this rank's caller wants to stop (the signal's number); read once the
// step's work is issued and summed over the ranks in the loss's all-reduce, so every rank gets the
// same StepResult::stop_votes and can stop after the same step, at no extra collective.
StepResult gpt2_train_step(GPT2* m, Context* ctx, int accum, const std::function<void(int, int**, int**)>& next_batch,
                           const AdamWHyper& h, LossScaler* scaler, const UpdateRules& rules, const Comm* comm = nullptr,
                           GradReducer* reducer = nullptr, const volatile sig_atomic_t* stop_vote = nullptr) {
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
    const bool graphs = m->use_graphs && m->graphs_ready;
    for (int i = 0; i < accum; i++) {
        int *inputs, *targets;
        next_batch(i, &inputs, &targets);
        gpt2_set_batch(m, ctx, inputs, targets);
        if (graphs) {
            run_graph(ctx, &m->fwd_graph, dloss != m->fwd_graph_dloss, [&] { gpt2_forward(m, ctx, m->B, m->T, true, dloss); });
            m->fwd_graph_dloss = dloss;
        } else {
            gpt2_forward(m, ctx, m->B, m->T, true, dloss);
        }
        cudaCheck(cudaEventRecord(ev[2 * i + 1], ctx->stream));
        const bool reduces = reducer && i == accum - 1;
        if (graphs && !reduces) run_graph(ctx, &m->bwd_graph, false, [&] { gpt2_backward(m, ctx, GradReadyFn()); });
        else gpt2_backward(m, ctx, reduces ? ready : GradReadyFn());
        cudaCheck(cudaEventRecord(ev[2 * i + 2], ctx->stream));
    }
    m->graphs_ready = true;
    if (reducer) grad_reducer_finish(reducer);
    cudaCheck(cudaEventRecord(ev[2 * accum + 1], ctx->stream));
    const float vote = stop_vote && *stop_vote ? 1.0f : 0.0f;  // (pageable: staged before the call returns)
    cudaCheck(cudaMemcpyAsync(m->d_loss_sum + 1, &vote, sizeof vote, cudaMemcpyHostToDevice, ctx->stream));
    if (comm) comm_sum_floats(comm, m->d_loss_sum, 2, ctx->stream);   // before the update: the spike guard reads the loss
    gpt2_update(m, ctx, comm, reducer ? reducer->zero : 0, h, scaler->scale, rules, (double)BT * accum * world);
    cudaCheck(cudaEventRecord(ev[2 * accum + 2], ctx->stream));
    StepScalars s;
    float sums[2];  // the loss, the stop votes
    cudaCheck(cudaMemcpyAsync(&s, m->d_step, sizeof s, cudaMemcpyDeviceToHost, ctx->stream));
    cudaCheck(cudaMemcpyAsync(sums, m->d_loss_sum, sizeof sums, cudaMemcpyDeviceToHost, ctx->stream));
    if (reducer) grad_reducer_read_flags(reducer);
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    if (s.skip) m->adam_t--;  // a skipped step did not advance Adam's bias corrections
    scaler->update(s.skip == SKIP_NONFINITE);
    m->spike = s.stats;
    StepResult r{sums[0] / ((float)BT * accum * world), s.grad_norm, s.skip != 0, s.skip, s.loss_z, s.norm_z};
    r.stop_votes = (int)sums[1];
    if (s.skip == SKIP_NONFINITE) r.bad_ranks = reducer ? grad_reducer_bad_ranks(reducer) : "0";
    for (int i = 0; i < accum; i++) {
        float f, b;
        cudaCheck(cudaEventElapsedTime(&f, ev[2 * i], ev[2 * i + 1]));
        cudaCheck(cudaEventElapsedTime(&b, ev[2 * i + 1], ev[2 * i + 2]));
        r.fwd_ms += f; r.bwd_ms += b;
        if (i == accum - 1) r.bwd_last_ms = b;
    }
    if (accum > 1) r.bwd_other_ms = (r.bwd_ms - r.bwd_last_ms) / (accum - 1);
    cudaCheck(cudaEventElapsedTime(&r.update_ms, ev[2 * accum + 1], ev[2 * accum + 2]));
    if (reducer) { r.exposed_ms = reducer->exposed_ms(); r.comm_ms = reducer->comm_ms(); r.comm_bytes = reducer->bytes; }
    return r;
}

// GEMM algorithm tuning (matmul_plans.cuh): one forward+backward at the model's own shapes on random
// tokens, in which every matmul plan created times cuBLASLt's candidate algorithms on its first
// call (mode 1 or 2, matmul_tune's; with 0 it only creates the plans). A throwaway pass: it leaves garbage in the
// activations and gradients (a step zeroes the gradients first) and touches neither the weights
// nor the optimizer state. Plans that already exist, or are pinned (a choices file), keep theirs.
void gpt2_tune_gemms(GPT2* m, Context* ctx, uint32_t seed, int mode = 1) {
    std::mt19937 rng(seed);
    std::vector<int> in((size_t)m->B * m->T), tg(in.size());
    random_tokens(&rng, m->cfg.vocab_size, &in, &tg);
    gpt2_set_batch(m, ctx, in.data(), tg.data());
    ctx->plans->tuning = mode;
    gpt2_forward(m, ctx, m->B, m->T, true, 1.0f / ((float)m->B * m->T));
    gpt2_backward(m, ctx, GradReadyFn());
    ctx->plans->tuning = 0;
    cudaCheck(cudaStreamSynchronize(ctx->stream));
}
