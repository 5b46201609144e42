// What a model is measured by, between training steps or alone (--eval-only), on the buffers of
// llmc/gpt2.cuh and the forward pass of llmc/gpt2_step.cuh (no backward, no update): the mean loss
// over validation batches, the accuracy on multiple-choice examples (llmc/choices.h), and a
// sampled text. Every rank calls each of them: the first two end in a sum over the ranks, and
// the sampler keeps every rank's random state the same. The first two renew the watchdog's
// deadline per forward pass, so a long evaluation is not taken for a hang (the sampler waits on
// no peer). train_gpt2.cu prints and logs them.
#pragma once
#include <algorithm>
#include <string>
#include <vector>
#include "common.cuh"
#include "choices.h"
#include "comm.cuh"
#include "dataloader.h"
#include "gpt2.cuh"
#include "gpt2_step.cuh"
#include "sampler.h"

// Mean loss per token over the first `batches` batches of B rows of the validation set (all
// ranks together; llmc/dataloader.h's ValidationSet: rank r takes batches r, r + world, ...), the
// same rows every time and on any GPU count. Each batch's summed loss (one fp32 value) keeps its
// own slot through the sum over the ranks, so it arrives unrounded, and the batches are added in
// their order in double (validation_mean_loss): the same bits on 1 GPU and on N wherever the
// batches' own sums are (the same GPU model and GEMM algorithms). (Per-rank partial sums, rounded
// to fp32 and added in fp32 across the ranks, moved the printed last digit with the GPU count;
// one fp32 sum over thousands of batches would lose more.)
inline float gpt2_validation_loss(GPT2* m, Context* ctx, const Comm* comm, ValidationSet* val, size_t batches, int step) {
    const size_t B = (size_t)m->B, rows = std::min(batches * B, val->rows);
    std::string err;
    std::vector<float> sums = validation_rank_sums(rows, B, comm->rank, comm->world, [&](size_t first, size_t n) {
        comm_watch(comm, step, "evaluation (validation loss)");
        if (!validation_read(val, first, n, &err)) comm_fail(comm, err);
        gpt2_set_batch(m, ctx, val->inputs.data(), val->targets.data(), (int)n);
        cudaCheck(cudaMemsetAsync(m->d_loss_sum, 0, sizeof(float), ctx->stream));
        gpt2_forward(m, ctx, (int)n, m->T, true, 0.0f);
        float batch;
        cudaCheck(cudaMemcpyAsync(&batch, m->d_loss_sum, sizeof batch, cudaMemcpyDeviceToHost, ctx->stream));
        cudaCheck(cudaStreamSynchronize(ctx->stream));
        return batch;
    });
    comm_watch(comm, step, "evaluation (validation loss)");   // (a rank may have had no batch)
    comm_sum_host_floats(comm, &sums, ctx->stream);   // every rank's slots, exactly (the others' are 0)
    comm_unwatch(comm);
    return (float)validation_mean_loss(sums, rows, m->T);
}

// The multiple-choice tally of the examples of `s`, in rows of Tc tokens (choices_row_length),
// padded with `pad`. Each rank scores a contiguous slice, as many examples per forward pass as
// B*T tokens hold (K rows each), and the tallies are summed over the ranks. Nothing collective
// happens inside the loop, so the ranks' slices may differ by one example (or be empty).
inline ChoiceTally gpt2_choice_tally(GPT2* m, Context* ctx, const Comm* comm, const ChoiceSet& s, int Tc, int pad, int step) {
    const int K = s.K, per_pass = (int)((size_t)m->B * m->T / Tc / K);
    const size_t n = s.examples.size(), lo = n * comm->rank / comm->world, hi = n * (comm->rank + 1) / comm->world;
    std::vector<int> inputs((size_t)per_pass * K * Tc), targets(inputs.size());
    std::vector<float> losses(inputs.size());
    ChoiceTally t;
    for (size_t e = lo; e < hi; e += per_pass) {
        comm_watch(comm, step, "evaluation (--hellaswag)");
        const size_t count = std::min<size_t>(per_pass, hi - e);
        const int rows = (int)count * K;
        choices_fill_rows(s, e, count, Tc, pad, inputs.data(), targets.data());
        gpt2_set_batch(m, ctx, inputs.data(), targets.data(), rows, Tc);
        gpt2_forward(m, ctx, rows, Tc, true, 0.0f);
        cudaCheck(cudaMemcpyAsync(losses.data(), m->acts.losses, (size_t)rows * Tc * sizeof(float), cudaMemcpyDeviceToHost, ctx->stream));
        cudaCheck(cudaStreamSynchronize(ctx->stream));
        choices_score(s, e, count, Tc, losses.data(), &t);
    }
    std::vector<float> sums = {(float)t.examples, (float)t.correct, (float)t.correct_norm, (float)t.loss_sum, (float)t.loss_tokens};
    comm_watch(comm, step, "evaluation (--hellaswag: summing over the ranks)");
    comm_sum_host_floats(comm, &sums, ctx->stream);
    comm_unwatch(comm);
    return ChoiceTally{sums[0], sums[1], sums[2], sums[3], sums[4]};
}

// `len` tokens sampled one by one after `start` (B=1 forwards of growing length, the last T tokens
// when longer than T; top-k, top-p and temperature as llmc/sampler.h, its state in *rng). Every
// rank samples the same tokens, so that none waits in its next collective while rank 0 samples.
inline std::vector<int> gpt2_sample(GPT2* m, Context* ctx, int start, int len, int top_k, float top_p, float temperature,
                                    uint64_t* rng) {
    const int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    std::vector<int> toks = {start};
    std::vector<float> logits(Vp);
    for (int i = 0; i < len; i++) {
        const int t = std::min<int>((int)toks.size(), m->T);
        cudaCheck(cudaMemcpyAsync(m->d_inputs, toks.data() + toks.size() - t, t * sizeof(int), cudaMemcpyHostToDevice, ctx->stream));
        gpt2_forward(m, ctx, 1, t, false, 0.0f);
        copy_from_device_as_float(logits.data(), m->acts.logits + (size_t)(t - 1) * Vp, Vp);
        toks.push_back(sample_token(logits.data(), V, top_k, top_p, temperature, rng));
    }
    return std::vector<int>(toks.begin() + 1, toks.end());
}
