// GPT-2 training on NVIDIA GPUs: CUDA kernels + cuBLASLt, one floatX precision per build.
// The story of one step (llmc/gpt2_step.cuh computes it; llmc/ has each layer's kernels):
//
//   tokens (B,T) - encoder -> residual (B,T,C)
//   per block:  LN1 - qkv matmul - attention - proj matmul + residual add (fused) - LN2
//               fc matmul + GELU (fused) - proj matmul + residual add (fused) - next LN
//   LN_f - lm-head matmul (tied wte) - fused classifier (softmax + loss + dlogits) - lm-head
//          backward, in chunks of tokens (the (B,T,Vp) logits never exist whole)
//   backward in reverse; each finished block's gradients are announced (the multi-GPU seam)
//   update: global norm -> step decision (clip, fp16 overflow skip) -> AdamW on fp32 master weights
// This file is the training RUN around those steps: options, setup (data, GPUs, model, GEMM
// algorithms, resume), the loop (steps, validation, samples, checkpoints, logs), and main.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <string>
#include <vector>
#include <algorithm>
#include <numeric>
#include <random>
#include <csignal>
#include <unistd.h>  // access()
#include <cuda_profiler_api.h>
#include "llmc/common.cuh"
#include "llmc/gpt2.cuh"
#include "llmc/gpt2_step.cuh"
#include "llmc/checkpoint.h"
#include "llmc/checkpoint_writer.cuh"
#include "llmc/choices.h"
#include "llmc/comm.cuh"
#include "llmc/dataloader.h"
#include "llmc/evaluate.cuh"
#include "llmc/logger.h"
#include "llmc/report.h"
#include "llmc/run_options.h"
#include "llmc/sampler.h"
#include "llmc/timing.h"
#include "llmc/tokenizer.h"
#include "llmc/train_config.h"

// ----------------------------------------------------------------------------------------------
// A training run: what main sets up, and the phases of the loop.
struct Run {
    TrainConfig tc;
    Comm comm;
    Context ctx;
    GPT2 model;
    GradReducer reducer;
    bool reduce = false;             // several GPUs: the reducer is in use
    DataLoader train, val;
    ChoiceSet choices;               // --hellaswag's examples (none: empty)
    int choice_T = 0;                // the rows they are evaluated in (choices_row_length: the longest example, rounded up to 64)
    TokenizerDecoder tok;            // rank 0's, for printing samples
    int sample_eot = -1;             // <|endoftext|>, where samples start; -1: no samples
    Logger log;
    LossScaler scaler;
    GpuPeak peak;                    // what MFU is measured against, per GPU (flops 0: unknown)
    uint64_t sample_rng = 0;
    int step = 0, steps = 0, accum = 1;
    int saved_step = -1;             // the step of the last checkpoint taken (written, or being written in the background)
    CheckpointWriter writer;         // rank 0's background checkpoint writes (llmc/checkpoint_writer.cuh)
    std::string resume_dir;          // --resume: the newest complete checkpoint, found once in setup ("": none); resume() loads
                                     // it, weights included, so build_model reads no weights then
    StartupTimes startup;            // main's start to the first step, phase by phase (rank 0 prints them)
};

// The model's shape: from a descriptor (*fresh: a new model), else from a model file's header;
// false + one line if this build's kernels cannot run it or --seq-len exceeds it.
bool model_config(const TrainConfig& tc, GPT2Config* cfg, bool* fresh, std::string* err) {
    *fresh = config_from_descriptor(tc.model, cfg);
    if (!*fresh && !model_file_read_header(tc.model, cfg, err)) {
        if (access(tc.model.c_str(), F_OK) != 0)  // a mistyped descriptor, most likely: name both readings
            *err = "option --model: '" + tc.model + "' is neither d12, d24, d36, d48 nor an existing model file";
        return false;
    }
    const std::string what = "model " + tc.model + ": ";
    if (!attention_supports(cfg->channels, cfg->num_heads)) {
        *err = what + "head size " + std::to_string(cfg->channels) + "/" + std::to_string(cfg->num_heads) +
               " is not supported by this build's attention (needs " + attention_head_sizes() + ")";
        return false;
    }
    if (!layernorm_supports(cfg->channels)) {
        *err = what + "width C=" + std::to_string(cfg->channels) + " is not supported by the LayerNorm kernels (a multiple of " +
               std::to_string(x128::size) + ", at most " + std::to_string(layernorm_max_channels()) + ")";
        return false;
    }
    if (cfg->padded_vocab_size > 65535) {   // the data's token ids are 16-bit; the embedding backward's grid needs it too
        *err = what + "padded vocabulary " + std::to_string(cfg->padded_vocab_size) + " exceeds 65535";
        return false;
    }
    if (tc.T > cfg->max_seq_len) {
        *err = "option --seq-len: " + std::to_string(tc.T) + " exceeds the model's maximum sequence length " + std::to_string(cfg->max_seq_len);
        return false;
    }
    return true;
}

// Does the run fit in its GPU's free memory? Checked before allocating (gpt2_memory_check), so
// that a micro-batch too large is one line, not a CUDA error at a cudaMalloc.
bool check_memory(const Run* r, const GPT2Config& cfg, std::string* err) {
    const TrainConfig& tc = r->tc;
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const std::string gpu = "GPU " + std::to_string(r->ctx.device) + " (" + r->ctx.props.name + ")";
    return gpt2_memory_check(cfg, tc.B, tc.T, r->comm.world, tc.zero, tc.recompute, free_b, total_b, gpu, err);
}

// The model of shape `cfg` (model_config): a descriptor builds a fresh one (`fresh`), anything
// else is read as a model file.
bool build_model(Run* r, const GPT2Config& cfg, bool fresh, std::string* err) {
    const TrainConfig& tc = r->tc;
    if (!check_memory(r, cfg, err)) return false;
    gpt2_build(&r->model, cfg, tc.B, tc.T, r->comm.rank, r->comm.world, tc.zero, tc.recompute);
    // on several GPUs too: only the last micro-step's backward (the one that issues the
    // reductions) runs without a graph (gpt2_train_step)
    r->model.use_graphs = tc.cuda_graphs != 0;
    if (!r->resume_dir.empty()) return true;   // its model.bin is read once, by resume(), with the optimizer state
    if (fresh) { gpt2_init_random(&r->model, &r->ctx, tc.seed); return true; }
    return gpt2_init_from_file(&r->model, &r->ctx, tc.model, err);
}

TrainState train_state(const Run* r) {
    TrainState st{};
    st.step = r->step; st.adam_t = r->model.adam_t; st.spike = r->model.spike;
    st.loss_scale = r->scaler.scale; st.scaler_clean_steps = r->scaler.clean_steps;
    st.loader = dataloader_state(&r->train); st.sample_rng = r->sample_rng;
    st.world = r->comm.world; st.precision = PRECISION_CODE; st.zero = r->tc.zero; st.config = r->model.cfg;
    st.data_files = (int32_t)r->train.files.size();
    st.data_tokens = std::accumulate(r->train.file_tokens.begin(), r->train.file_tokens.end(), (uint64_t)0);
    return st;
}

// exit() during a background checkpoint write (an error of the main thread, e.g. a bad token in
// the data: comm_fail) waits for the write first: the checkpoint taken before the error is kept,
// and the writer is done with CUDA and stdio before exit() tears them down. An exit handler, like
// a signal handler, reaches nothing but a global. It is registered at the first background write,
// after the CUDA runtime's own exit handlers, so it runs before them.
static CheckpointWriter* exit_writer = nullptr;
static void finish_write_on_exit() {
    if (exit_writer && exit_writer->thread.joinable()) exit_writer->thread.join();
}

// Checkpoint: every rank takes part (ZeRO-1 gathers the optimizer shards); rank 0 writes. Where
// its GPU has room, rank 0 copies the state into a snapshot there and writes it in the background
// (llmc/checkpoint_writer.cuh); else it streams the state from the GPU into the files (GpuState)
// while the run waits. Its line says what the checkpoint cost the run: the state's size, the
// time on the GPU(s) (copies, gathers), and the writing, in the background or not (in the
// foreground the other ranks wait that long: in ZeRO-1 in the gathers, else in the next step's
// all-reduce).
void save_checkpoint(Run* r) {
    const size_t n = r->model.layout.total;
    const double gb = 3.0 * sizeof(float) * n / 1e9;
    CheckpointWriter* w = &r->writer;
    const bool rank0 = r->comm.rank == 0;
    if (rank0 && r->tc.checkpoint_async && !w->decided) {
        printf("%s\n", checkpoint_writer_setup(w, 3 * r->model.padded * sizeof(float), STATE_CHUNK_FLOATS).c_str());
        if (w->snapshot) { exit_writer = w; std::atexit(finish_write_on_exit); }
    }
    GpuState io(&r->model, &r->ctx, &r->comm, r->tc.zero);
    io.step = r->step;
    r->saved_step = r->step;
    if (!rank0) { io.follow(); return; }   // ZeRO-1: the gathers rank 0's write makes (none in DDP)
    const long long t0 = steady_ms();
    std::string err;
    const TrainState st = train_state(r);
    const std::string out = r->tc.out, options = train_options_text(r->tc);
    const int keep = r->tc.keep_checkpoints, step = r->step, world = r->comm.world;
    if (!w->snapshot) {
        if (!checkpoint_write(out, st, io, keep, &err, options)) comm_fail(&r->comm, err);
        printf("checkpoint: %s/step_%08d (%.2f GB: %.2f s from the GPU%s, %.2f s to write and sync)\n", out.c_str(), step, gb, io.gpu_s,
               world > 1 ? "s" : "", (steady_ms() - t0) / 1e3 - io.gpu_s);
        return;
    }
    if (!checkpoint_writer_wait(w, &err)) comm_fail(&r->comm, err);   // one write at a time
    const long long t1 = steady_ms();
    io.snapshot(w->snapshot);
    const long long t2 = steady_ms();
    char waited[64] = "";
    if (t1 - t0 >= 10) snprintf(waited, sizeof waited, " after waiting %.2f s for the previous write", (t1 - t0) / 1e3);
    const std::string after = waited;
    checkpoint_writer_start(w, r->ctx.device, r->model.padded, STATE_CHUNK_FLOATS,
        [=](StateIO& s, std::string* e) { return checkpoint_write(out, st, s, keep, e, options); },
        [=] {
            printf("checkpoint: %s/step_%08d (%.2f GB: %.2f s to snapshot on the GPU%s%s, %.2f s to write and sync in the background)\n",
                   out.c_str(), step, gb, (t2 - t1) / 1e3, world > 1 ? "s" : "", after.c_str(), (steady_ms() - t2) / 1e3);
            fflush(stdout);
        });
}

// Waits for rank 0's background checkpoint write, if one is in progress (poll: only if it has
// ended); a failed write ends the run with its line.
void wait_for_checkpoint(Run* r, bool poll = false) {
    std::string err;
    if (r->comm.rank == 0 && !(poll ? checkpoint_writer_poll(&r->writer, &err) : checkpoint_writer_wait(&r->writer, &err)))
        comm_fail(&r->comm, err);
}

// The run's options (llmc/run_options.h): the command line's, or on --resume the run's own merged
// with it. false + one line in *err on a problem; *help for --help.
bool configure(Run* r, int argc, const char* const* argv, bool* help, std::string* err) {
    std::string note;
    if (!configure_run(&r->tc, r->comm.world, PRECISION_CODE, argc, argv, help, &note, err)) return false;
    if (!note.empty() && r->comm.rank == 0) printf("%s\n", note.c_str());
    return true;
}

// --resume: the newest complete checkpoint in --out, bit for bit where the run left off.
// With no complete checkpoint at all (the run was killed before its first one finished), the run
// starts from step 0, so a requeue script can always pass --resume; a checkpoint that exists but
// cannot be used is an error, never a silent fresh start.
bool resume(Run* r, std::string* err) {
    if (r->resume_dir.empty()) {
        if (r->comm.rank == 0) printf("note: no complete checkpoint in %s: starting from step 0\n", r->tc.out.c_str());
        return true;
    }
    const std::string& dir = r->resume_dir;
    TrainState st, expect = train_state(r);
    GpuState io(&r->model, &r->ctx, &r->comm, r->tc.zero);   // straight from the files into the GPU
    if (!checkpoint_read(dir, expect, &st, io, err)) return false;
    io.commit_weights();
    r->step = st.step; r->model.adam_t = st.adam_t; r->model.spike = st.spike;
    r->scaler.scale = st.loss_scale; r->scaler.clean_steps = st.scaler_clean_steps;
    r->sample_rng = st.sample_rng;
    if (!dataloader_restore(&r->train, st.loader, err)) return false;
    if (r->comm.rank == 0) printf("resumed from %s at step %d\n", dir.c_str(), st.step);
    return true;
}

// The GEMM algorithms (--gemm-tune, --gemm-algos). Rank 0 takes its choices from a file (the
// --gemm-algos file, else <out>/gemm_algos.txt when a run directory holds one: always on --resume)
// or times them (gpt2_tune_gemms); every rank then adopts rank 0's, so all ranks, and a resumed
// run, compute with the same algorithms. A tuned run with --out keeps its choices there.
bool choose_gemm_algorithms(Run* r, std::string* err) {
    const TrainConfig& tc = r->tc;
    const std::string kept = tc.out.empty() ? "" : tc.out + "/gemm_algos.txt";
    // a resumed run reuses its kept choices, tuned or not now (every rank reads --out on --resume)
    const bool reuse = tc.resume && !kept.empty() && file_exists(kept);
    if (!tc.gemm_tune && tc.gemm_algos.empty() && !reuse) return true;
    Context* ctx = &r->ctx;
    const bool rank0 = r->comm.rank == 0;
    std::string from;  // the file this rank took its choices from ("" = none: timed, or untimed); only rank 0 reads <out>/gemm_algos.txt
    if (!tc.gemm_algos.empty()) {  // every rank checks the named file, so a bad one fails them all alike
        std::string text, why;
        std::map<MatmulKey, int> pinned;
        if (!read_text_file(tc.gemm_algos, &text, err)) { *err = "option --gemm-algos: " + *err; return false; }
        if (!matmul_choices_parse(ctx, text, &pinned, &why)) { *err = "option --gemm-algos: " + tc.gemm_algos + ": " + why; return false; }
        ctx->plans->pinned = pinned;
        from = tc.gemm_algos;
    } else if (rank0 && !kept.empty() && file_exists(kept)) {
        std::string text, why;
        if (read_text_file(kept, &text, &why) && matmul_choices_parse(ctx, text, &ctx->plans->pinned, &why)) from = kept;
        else printf("note: %s not used (%s)%s\n", kept.c_str(), why.c_str(), tc.gemm_tune ? ": timing the GEMM algorithms again" : "");
    }
    comm_watch(&r->comm, 0, "choosing GEMM algorithms (rank 0's choices to every rank)");
    const double t0 = steady_ms();
    ctx->plans->report = rank0 && tc.gemm_tune == 2;
    // pinned shapes are not timed; the other ranks time nothing when rank 0 has its choices from a file
    std::vector<float> rank0_file = {rank0 && !from.empty() ? 1.0f : 0.0f};
    comm_sum_host_floats(&r->comm, &rank0_file, ctx->stream);
    // the timing is local work (~35 s for --gemm-tune 2), not a wait on peers: no deadline over it
    comm_unwatch(&r->comm);
    gpt2_tune_gemms(&r->model, ctx, (uint32_t)tc.seed + 17, rank0 || rank0_file[0] == 0.0f ? tc.gemm_tune : 0);
    comm_watch(&r->comm, 0, "choosing GEMM algorithms (rank 0's choices to every rank)");
    // rank 0's choices to every rank: a sum to which the others add zeros, once every rank knows
    // that all have the same number of plans (the same model makes the same calls): the sums of n
    // and of n^2 are world*n and world*n^2 only when every rank's n is the same
    std::vector<int> mine = matmul_choices(ctx);
    const size_t n = mine.size();
    std::vector<float> count = {(float)n, (float)n * (float)n};
    comm_sum_host_floats(&r->comm, &count, ctx->stream);
    if (count[0] != (float)n * r->comm.world || count[1] != (float)n * (float)n * r->comm.world) {
        comm_unwatch(&r->comm);
        *err = "GEMM algorithms: the ranks made different matmul calls";
        return false;
    }
    std::vector<float> h(n, 0.0f);
    if (rank0) for (size_t i = 0; i < n; i++) h[i] = (float)mine[i];
    comm_sum_host_floats(&r->comm, &h, ctx->stream);
    comm_unwatch(&r->comm);
    std::vector<int> chosen(n);
    int differ = 0;
    for (size_t i = 0; i < n; i++) { chosen[i] = (int)h[i]; differ += chosen[i] != 0; }
    matmul_set_choices(ctx, chosen);
    if (rank0) {
        printf("GEMM algorithms: %zu shapes, %d not cuBLASLt's first choice (%s, %.1f s)\n", n, differ,
               !from.empty() ? ("from " + from).c_str() : tc.gemm_tune ? "timed" : "untimed", (steady_ms() - t0) / 1e3);
        if (from.empty() && tc.gemm_tune && !kept.empty() && !write_text_file_atomic(kept, matmul_choices_text(ctx), err)) return false;
    }
    return true;
}

// --hellaswag: every rank reads the examples (the file must be where all ranks see it) and
// checks that one example's K rows fit a forward pass of B*T tokens.
bool open_choices(Run* r, const GPT2Config& cfg, std::string* err) {
    const TrainConfig& tc = r->tc;
    if (!choices_read(tc.hellaswag, cfg.vocab_size, &r->choices, err)) { *err = "option --hellaswag: " + *err; return false; }
    const ChoiceSet& s = r->choices;
    const std::string what = "option --hellaswag: " + tc.hellaswag + ": ";
    if (s.longest > (size_t)tc.T) {
        *err = what + "the longest example (context + ending) is " + std::to_string(s.longest) + " tokens, more than --seq-len " + std::to_string(tc.T);
        return false;
    }
    r->choice_T = choices_row_length(s, tc.B, tc.T);
    if (r->choice_T == 0) {
        *err = what + "one example is " + std::to_string(s.K) + " rows of " + std::to_string(s.longest) + " tokens, more than B*T = " +
               std::to_string((size_t)tc.B * tc.T) + " (raise -b)";
        return false;
    }
    if (r->comm.rank == 0)
        printf("hellaswag: %zu examples of %d endings from %s, rows of %d tokens, %zu examples per forward pass\n", s.examples.size(), s.K,
               tc.hellaswag.c_str(), r->choice_T, (size_t)tc.B * tc.T / r->choice_T / s.K);
    return true;
}

// The training, validation and --hellaswag data of a run that trains or evaluates (not --bench),
// and the check that --out does not already hold another run.
bool open_data(Run* r, const GPT2Config& cfg, std::string* err) {
    const TrainConfig& tc = r->tc;
    if (!tc.eval_only && !dataloader_open(&r->train, tc.train, tc.B, tc.T, r->comm.rank, r->comm.world, r->accum, cfg.vocab_size, tc.shuffle, tc.seed, err)) {
        *err = "option --train: " + *err;
        if (tc.train == TrainConfig().train && !file_exists(tc.train)) *err += " (prepare the default dataset with: make data)";
        return false;
    }
    if (!tc.eval_only && tc.max_steps < 0 && dataloader_steps_per_epoch(&r->train) > (size_t)INT32_MAX) {
        *err = tc.train + ": one epoch is " + std::to_string(dataloader_steps_per_epoch(&r->train)) + " steps, more than 2^31-1: set --max-steps";
        return false;
    }
    // validation batches of B rows, or fewer where the validation data is small
    int val_rows;
    if (!dataloader_rows_that_fit(tc.val, tc.B, tc.T, r->comm.world, 1, &val_rows, err) ||
        !dataloader_open(&r->val, tc.val, std::max(val_rows, 1), tc.T, r->comm.rank, r->comm.world, 1, cfg.vocab_size, false, 0, err)) {
        *err = "option --val: " + *err;
        return false;
    }
    // a validation loss on tokens the model trains on measures nothing (glob_files: canonical, sorted)
    if (!tc.eval_only) {
        const std::vector<std::string> train = glob_files(tc.train);
        for (const std::string& v : glob_files(tc.val))
            if (std::binary_search(train.begin(), train.end(), v)) { *err = "option --val: " + v + " is also one of --train's files"; return false; }
    }
    if (val_rows < tc.B && r->comm.rank == 0)
        printf("note: validation batches of %d rows of %d tokens per GPU: %s is too small for %d\n", val_rows, tc.T, tc.val.c_str(), tc.B);
    if (!tc.hellaswag.empty() && !open_choices(r, cfg, err)) return false;
    std::string latest, none;
    if (!tc.out.empty() && !tc.resume && (file_exists(tc.out + "/log.jsonl") || checkpoint_find_latest(tc.out, &latest, &none))) {
        *err = tc.out + ": already holds a run (log.jsonl or checkpoints); use --resume to continue it, or another --out";
        return false;
    }
    return true;
}

// Where samples start (<|endoftext|>), or -1 for no samples: rank 0 reads the decoder and tells
// every rank (collective), since every rank draws the samples.
void share_sample_start(Run* r) {
    const TrainConfig& tc = r->tc;
    const bool rank0 = r->comm.rank == 0;
    std::vector<float> eot = {-1.0f};
    if (!tc.bench && tc.sample_len > 0 && rank0) {
        std::string terr;
        if (r->tok.load(tc.tokenizer, &terr)) eot[0] = (float)r->tok.eot();
        else printf("note: no samples: %s (make data writes it)\n", terr.c_str());
    }
    if (!rank0) eot[0] = 0.0f;  // the sum is rank 0's value
    comm_watch(&r->comm, 0, "startup (where samples start, rank 0's to every rank)");
    comm_sum_host_floats(&r->comm, &eot, r->ctx.stream);
    comm_unwatch(&r->comm);
    r->sample_eot = (int)eot[0];
}

// The run's first lines (rank 0): model, precision, GPUs, batch, and the memory per GPU.
void print_run(const Run* r) {
    const TrainConfig& tc = r->tc;
    const GPT2* m = &r->model;
    const GPT2Memory mem = gpt2_memory(m->cfg, tc.B, tc.T, r->comm.world, tc.zero, tc.recompute);
    printf("GPT-2 L=%d NH=%d C=%d (%zu parameters), %s, %d GPU(s) via %s%s, B=%d T=%d, %lld tokens/step (accumulation %d), %s\n"
           "memory per GPU: weights+grads %.2f GB, optimizer (fp32 master, m, v) %.2f GB%s, activations %.2f GB (recompute %d)\n",
           m->cfg.num_layers, m->cfg.num_heads, m->cfg.channels, m->layout.total, PRECISION_NAME, r->comm.world,
           r->comm.launcher.c_str(), tc.zero ? ", ZeRO-1" : "", tc.B, tc.T, tc.total_batch, r->accum, r->ctx.props.name,
           mem.weights_grads / 1e9, mem.optimizer / 1e9, tc.zero ? " (this rank's shard)" : "", mem.activations / 1e9, tc.recompute);
    printf("%s\n", peak_text(r->peak, r->ctx.props.name, r->ctx.props.major, r->ctx.props.minor, sizeof(floatX) == 4).c_str());
}

// Everything before the first step. false + one line in *err on any problem.
bool setup(Run* r, std::string* err) {
    TrainConfig& tc = r->tc;
    const bool rank0 = r->comm.rank == 0;
    r->accum = (int)(tc.total_batch / ((long long)tc.B * tc.T * r->comm.world));
    GPT2Config cfg;
    bool fresh;
    if (!model_config(tc, &cfg, &fresh, err)) return false;
    if (tc.eval_only && fresh && rank0) printf("note: --eval-only of a new, randomly initialized %s (-e names no model file)\n", tc.model.c_str());
    r->startup.mark("launch", steady_ms());   // MPI_Init (or the launch variables), the options, the model file's header
    if (!tc.bench && !open_data(r, cfg, err)) return false;
    if (!tc.bench) r->startup.mark("data", steady_ms());
    // the run directory is made later (after the model is built); a bad one is refused before any GPU work
    if (!tc.out.empty() && rank0 && !dir_can_be_used(tc.out, !tc.bench || tc.gemm_tune > 0, err)) { *err = "option --out: " + *err; return false; }
    if (!context_create(&r->ctx, r->comm.local_rank, err)) return false;
    r->startup.mark("CUDA", steady_ms());   // the context, cuBLASLt
    r->peak = tc.peak_tflops > 0 ? GpuPeak{tc.peak_tflops * 1e12, "--peak-tflops"}
                                 : gpu_peak(r->ctx.props.major, r->ctx.props.minor, r->ctx.props.name, sizeof(floatX) == 4);
    if (!comm_init(&r->comm, tc.rendezvous, tc.nccl_timeout, tc.nccl_cta_policy, err)) return false;
    if (r->comm.world > 1) r->startup.mark("NCCL", steady_ms());   // the id exchange and ncclCommInitRank
    if (tc.resume && !tc.bench && !tc.out.empty()) {   // (resume_options made --model the checkpoint's model.bin)
        std::vector<std::pair<long long, std::string>> found;   // the complete checkpoints, oldest first
        if (!ckpt_detail::list_complete(tc.out, &found, err)) return false;
        if (!found.empty()) r->resume_dir = found.back().second;
    }
    if (!build_model(r, cfg, fresh, err)) return false;
    GPT2* m = &r->model;
    r->reduce = r->comm.world > 1;
    if (r->reduce) {
        grad_reducer_init(&r->reducer, &r->comm, &r->ctx, m->grads, m->layout.total, m->shard, tc.zero, tc.bucket_mb, m->cfg.num_layers + 3);
        comm_set_pending(&r->comm, [r] { return grad_reducer_pending(&r->reducer); });
    }
    r->scaler = LossScaler::make(USES_LOSS_SCALING);
    r->sample_rng = rng_seed(tc.seed);
    r->steps = tc.eval_only ? 0
               : tc.bench ? tc.bench_warmup + tc.bench_steps
                          : tc.max_steps > 0 ? tc.max_steps : (int)std::max<size_t>(1, dataloader_steps_per_epoch(&r->train));
    share_sample_start(r);
    cudaCheck(cudaDeviceSynchronize());   // the initialization's kernels run asynchronously: count them here, not in step 1
    r->startup.mark("model", steady_ms());   // memory, the weights (random or read), the decoder for samples
    // the run directory; in bench mode only a tuned run's gemm_algos.txt goes there
    if (!tc.out.empty() && rank0 && !make_dirs(tc.out, err)) return false;
    if (!tc.bench && !tc.out.empty()) {
        if (tc.resume && !resume(r, err)) return false;
        if (tc.resume) r->startup.mark("resume", steady_ms());
        if (rank0 && !r->log.open(tc.out + "/log.jsonl", err)) return false;
        // the run's options, for a --resume before its first checkpoint (resume_options)
        if (rank0 && !write_text_file_atomic(tc.out + "/options.txt", train_options_text(tc), err)) return false;
    }
    if (rank0) print_run(r);
    if (!choose_gemm_algorithms(r, err)) return false;
    r->startup.mark("GEMM algorithms", steady_ms());
    if (rank0) {
        printf("%s\n", startup_text(r->startup).c_str());
        r->log.line(startup_json(r->startup));
    }
    return true;
}

// Evaluation, sample, checkpoint: whichever is due after `r->step` steps (llmc/evaluate.cuh
// computes the first two; --val-batches batches of all ranks together, or one pass over --val).
void after_step(Run* r, bool last) {
    const TrainConfig& tc = r->tc;
    GPT2* m = &r->model;
    auto due = [&](int every) { return last || (every > 0 && r->step % every == 0); };
    wait_for_checkpoint(r, true);   // a background write that failed ends the run here
    if (due(tc.val_every)) {
        const size_t batches = tc.val_batches > 0 ? (size_t)(tc.val_batches / r->comm.world) : dataloader_steps_per_epoch(&r->val);
        const float v = gpt2_validation_loss(m, &r->ctx, &r->comm, &r->val, batches, r->step);
        if (r->comm.rank == 0) {
            printf("%s\n", val_text(r->step, v).c_str());
            r->log.line(val_json(r->step, v));
        }
        if (!r->choices.examples.empty()) {
            const double t0 = steady_ms();
            const ChoiceTally t = gpt2_choice_tally(m, &r->ctx, &r->comm, r->choices, r->choice_T, std::max(r->sample_eot, 0), r->step);
            const ChoiceScores c{t.correct / t.examples, t.correct_norm / t.examples, t.loss_sum / t.loss_tokens, t.examples,
                                 (steady_ms() - t0) / 1e3};
            if (r->comm.rank == 0) {
                printf("%s\n", hellaswag_text(r->step, c).c_str());
                r->log.line(hellaswag_json(r->step, c));
            }
        }
    }
    if (due(tc.sample_every) && r->sample_eot >= 0) {
        const std::vector<int> toks = gpt2_sample(m, &r->ctx, r->sample_eot, tc.sample_len, tc.top_k, tc.top_p, tc.temperature,
                                                   &r->sample_rng);
        const std::string text = r->comm.rank == 0 ? decode_tokens(r->tok, toks.data(), toks.size()) : "";
        if (r->comm.rank == 0) {
            printf("%s\n", sample_text(r->step, text).c_str());
            r->log.line(sample_json(r->step, text));
        }
    }
    if (!tc.out.empty() && due(tc.checkpoint_every)) save_checkpoint(r);
}

// The RESULT line (llmc/report.h) over the timed steps, which rank 0 prints. Collective: the
// per-rank phase times are summed over the ranks (each adds its own into a table of zeros).
void print_result(Run* r, const std::vector<float>& ms, const std::vector<StepResult>& timed, double flops_tok, double peak) {
    const int n = r->comm.world;
    std::string per_rank;
    if (n > 1) {
        std::vector<float> h = rank_phase_slots(timed, r->accum, n, r->comm.rank);
        comm_watch(&r->comm, r->step, "the per-rank phase times (end of the run)");
        comm_sum_host_floats(&r->comm, &h, r->ctx.stream);
        comm_unwatch(&r->comm);
        per_rank = rank_phase_fields(h, n);
    }
    if (r->comm.rank != 0) return;
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const RunShape shape{PRECISION_NAME, r->model.cfg.num_layers, r->model.cfg.channels, n, r->tc.zero, r->tc.B, r->tc.T, r->accum,
                         r->tc.total_batch, flops_tok, peak, (total_b - free_b) / 1e9};
    printf("%s\n", result_line(shape, summarize_steps(ms, timed), per_rank).c_str());
}

// Stopping on request. SIGTERM (a scheduler's preemption, `kill`), SIGINT (Ctrl-C) and SIGUSR1
// (Slurm's `--signal=USR1@SECONDS` before the time limit) do not end the process at once: the
// handler only records the signal, the step in progress finishes, and after it every rank stops
// together, because each rank's request travels with the step's loss all-reduce
// (gpt2_train_step's stop_vote), so one rank's signal is enough. With --out a checkpoint of that
// step is written first; the exit code is EXIT_STOPPED, and --resume goes on from there. A second
// signal of the same kind ends the process at once (SA_RESETHAND). Under mpirun, signal a rank's
// process: OpenMPI 4.1.6's mpirun does not pass SIGUSR1 on, and it sends SIGTERM too late for a
// checkpoint unless given time (README, "Stopping a run cleanly").
// One of the trainer's two mutable globals (with exit_writer): a signal handler can reach nothing else.
static volatile sig_atomic_t stop_signal = 0;
constexpr int EXIT_STOPPED = 4;
static void on_stop_signal(int sig) { stop_signal = sig; }

// A signal the process was started ignoring (SIGINT for a shell's background job, `nohup`) stays ignored.
void install_stop_signals() {
    struct sigaction sa = {}, old = {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;  // restart interrupted system calls (file reads, sockets)
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1})
        if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(sig, &sa, nullptr);
}

// After the step in which some rank was asked to stop: rank 0's line, the checkpoint (collective).
void stop_on_request(Run* r, int votes) {
    const bool saves = !r->tc.bench && !r->tc.out.empty();
    if (saves && r->saved_step != r->step) save_checkpoint(r);
    wait_for_checkpoint(r);
    if (r->comm.rank != 0) return;
    const std::string what = stop_signal ? std::string(strsignal(stop_signal)) + " (signal " + std::to_string(stop_signal) + ")" : "a stop signal";
    const std::string then = saves ? "the checkpoint is in " + r->tc.out + ": continue with --resume" : "nothing saved (no --out)";
    printf("stopping after step %d of %d: %s reached %d of %d rank(s); %s\n", r->step, r->steps, what.c_str(), votes, r->comm.world,
           then.c_str());
    fflush(stdout);
}

// Where a step's micro-batches come from: the training shards, or uniform random tokens in
// --bench, with the two --debug faults on top. gpt2_train_step calls it once per micro-step i.
//   --debug-nan RANK:STEP: from that step on, a NaN in one gradient of block 0 on that rank,
//     written after the step zeroed the gradients (backward accumulates onto it).
//   --debug-bad-batch STEP: that step's batches are random tokens (read in place of the data's,
//     which the loader still consumes): a loss spike, as a corrupt document gives.
struct BatchSource {
    Run* r;
    std::mt19937 bench_rng;           // --bench's tokens: a stream of its own per rank
    std::vector<int> in, tg;          // (B, T) --bench's inputs and targets
    std::vector<int> bad_in, bad_tg;  // (B, T) --debug-bad-batch's
    explicit BatchSource(Run* run)
        : r(run), bench_rng((uint32_t)run->tc.seed + 1000u * (uint32_t)run->comm.rank), in((size_t)run->tc.B * run->tc.T), tg(in.size()),
          bad_in(in.size()), bad_tg(in.size()) {}
    void operator()(int i, int** inputs, int** targets) {
        const TrainConfig& tc = r->tc;
        GPT2* m = &r->model;
        if (i == 0 && r->comm.rank == tc.debug_nan_rank && r->step + 1 >= tc.debug_nan_step) {
            const floatX nan = (floatX)NAN;
            cudaCheck(cudaMemcpyAsync(m->grads + block_range(m->layout, 0).offset, &nan, sizeof nan, cudaMemcpyHostToDevice, r->ctx.stream));
            cudaCheck(cudaStreamSynchronize(r->ctx.stream));  // `nan` lives on this stack frame
        }
        if (tc.bench) {
            random_tokens(&bench_rng, m->cfg.vocab_size, &in, &tg);
            *inputs = in.data(); *targets = tg.data();
        } else {
            std::string err;
            if (!dataloader_next(&r->train, &err)) comm_fail(&r->comm, err);
            *inputs = r->train.inputs.data(); *targets = r->train.targets.data();
        }
        if (r->step + 1 == tc.debug_bad_batch) {
            std::mt19937 bad_rng(tc.seed + 7919u * (r->comm.rank * r->accum + i));
            random_tokens(&bad_rng, m->cfg.vocab_size, &bad_in, &bad_tg);
            *inputs = bad_in.data(); *targets = bad_tg.data();
        }
    }
};

// One optimizer step, timed with events on the compute stream (ms: forward to update, of all
// micro-steps); r->step counts it. The watchdog's deadline covers everything that waits on peers.
StepResult timed_step(Run* r, BatchSource* batches, const AdamWHyper& h, float* ms) {
    const TrainConfig& tc = r->tc;
    const UpdateRules rules{tc.grad_clip, {tc.skip_loss_z, tc.skip_norm_z, tc.spike_window}};
    const bool profiled = tc.bench_profile && r->step == r->steps - 1;
    if (profiled) cudaCheck(cudaProfilerStart());
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0)); cudaCheck(cudaEventCreate(&t1));
    comm_watch(&r->comm, r->step + 1, "training step (forward, backward, gradient reduction, update)");
    cudaCheck(cudaEventRecord(t0, r->ctx.stream));
    const StepResult s = gpt2_train_step(&r->model, &r->ctx, r->accum, std::ref(*batches), h, &r->scaler, rules, &r->comm,
                                         r->reduce ? &r->reducer : nullptr, &stop_signal);
    cudaCheck(cudaEventRecord(t1, r->ctx.stream));
    cudaCheck(cudaEventSynchronize(t1));
    comm_unwatch(&r->comm);
    if (profiled) cudaCheck(cudaProfilerStop());
    cudaCheck(cudaEventElapsedTime(ms, t0, t1));
    cudaCheck(cudaEventDestroy(t0)); cudaCheck(cudaEventDestroy(t1));
    r->step++;
    return s;
}

// The step loop of training and --bench; a RESULT line with the medians at the end. Returns the
// exit code: 2 when --max-bad-steps skipped steps came in a row, EXIT_STOPPED after a stop signal.
int run_loop(Run* r) {
    const TrainConfig& tc = r->tc;
    LRSchedule sched = tc.sched;
    sched.max_steps = r->steps;
    const double flops_tok = flops_per_token(r->model.cfg, tc.T);
    const double peak = r->comm.world * r->peak.flops;
    const int timed_from = tc.bench ? tc.bench_warmup : r->step + std::min(r->steps - r->step - 1, 1);
    if (tc.eval_only) { after_step(r, true); return 0; }   // the evaluations and the sample of a last step
    if (!tc.bench && r->step >= r->steps && r->comm.rank == 0)
        printf("note: the run is at step %d of %d: no steps to run (a larger --max-steps extends it)\n", r->step, r->steps);
    BatchSource batches(r);
    install_stop_signals();
    bool stopped = false;
    int bad_in_a_row = 0;
    std::vector<float> timed_ms;
    std::vector<StepResult> timed;
    double elapsed_s = 0;
    for (int done = 1; r->step < r->steps; done++) {
        const AdamWHyper h{lr_at(sched, r->step), tc.beta1, tc.beta2, tc.eps, tc.weight_decay, 0};
        const SpikeStats before = r->model.spike;
        float ms;
        const StepResult s = timed_step(r, &batches, h, &ms);
        elapsed_s += ms / 1e3;
        if (r->step > timed_from) { timed_ms.push_back(ms); timed.push_back(s); }
        if (r->comm.rank == 0) {
            const double tok_s = tc.total_batch / (ms / 1e3), mfu = mfu_percent(flops_tok, tok_s, peak);
            const StepReport rep{r->step, r->steps, h.lr, r->scaler.scale, ms, tok_s, mfu, elapsed_s / done * (r->steps - r->step)};
            printf("%s\n", step_text(rep, s).c_str());
            fflush(stdout);
            r->log.line(step_json(rep, s));
            if (s.skipped) printf("%s\n", skip_text(r->step, s, before, tc.skip_loss_z, tc.skip_norm_z).c_str());
        }
        // every rank has the same StepResult (the flags, the loss and the norm are global), so all stop together
        bad_in_a_row = bad_streak(bad_in_a_row, s.skip_reason);
        if (tc.max_bad_steps > 0 && bad_in_a_row >= tc.max_bad_steps) {
            if (r->comm.rank == 0) fprintf(stderr, "error: %s\n", bad_steps_text(bad_in_a_row, s, r->step, tc.max_bad_steps).c_str());
            return 2;
        }
        if (!tc.bench) after_step(r, r->step == r->steps);
        if (s.stop_votes > 0 && r->step < r->steps) { stop_on_request(r, s.stop_votes); stopped = true; break; }
        if (tc.debug_exit_after > 0 && r->step == tc.debug_exit_after) {   // as if killed, once the step's checkpoint is written
            wait_for_checkpoint(r);
            fflush(stdout);
            _exit(137);
        }
    }
    if (!timed_ms.empty()) print_result(r, timed_ms, timed, flops_tok, peak);
    return stopped ? EXIT_STOPPED : 0;
}

int main(int argc, char** argv) {
    Run r;
    r.startup.start(steady_ms());
    std::string err;
    if (!comm_launch(&r.comm, &argc, &argv, &err)) { fprintf(stderr, "error: %s\n", err.c_str()); return 1; }
    bool help = false;
    if (!configure(&r, argc, argv, &help, &err)) {
        if (r.comm.rank == 0) fprintf(stderr, "error: %s\n", err.c_str());
        comm_free(&r.comm);
        return 1;
    }
    if (help) {
        if (r.comm.rank == 0) {
            TrainConfig defaults;
            options_help(stdout, TRAIN_USAGE, train_options(&defaults));
            printf("\n%s\nbuild: precision %s\n", TRAIN_ENDINGS, PRECISION_NAME);
        }
        comm_free(&r.comm);
        return 0;
    }
    if (!setup(&r, &err)) comm_fail(&r.comm, err);
    const int rc = run_loop(&r);
    wait_for_checkpoint(&r);
    checkpoint_writer_free(&r.writer);
    exit_writer = nullptr;   // r ends with main, before the exit handlers run
    r.log.close();
    if (r.reduce) grad_reducer_free(&r.reducer);
    gpt2_free(&r.model);
    context_destroy(&r.ctx);
    comm_free(&r.comm);
    return rc;
}
