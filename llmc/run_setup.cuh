// A training run's state (Run) and the pieces of its setup: the options (configure, which main
// calls), then, in the order train_gpt2.cu's setup() calls them, the model's shape, the data
// (training, validation, --hellaswag), the --gemm-algos file (once the communicator is made), the
// memory check and the model, where samples start, the run's first lines, and the GEMM
// algorithms. Everything here runs before the first step
// (ranks_agree also once at the end, for the last checkpoint: finish_checkpoint); the step loop,
// checkpoints and stop signals stay in train_gpt2.cu.
#pragma once
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>
#include <unistd.h>  // access()
#include "common.cuh"
#include "gpt2.cuh"
#include "gpt2_step.cuh"
#include "checkpoint.h"
#include "checkpoint_writer.cuh"
#include "choices.h"
#include "comm.cuh"
#include "grad_reducer.cuh"
#include "dataloader.h"
#include "logger.h"
#include "report.h"
#include "run_options.h"
#include "timing.h"
#include "tokenizer.h"
#include "train_config.h"

// A training run: what main sets up, and the phases of the loop.
struct Run {
    TrainConfig tc;
    Comm comm;
    Context ctx;
    GPT2 model;
    GradReducer reducer;
    bool reduce = false;             // several GPUs: the reducer is in use
    DataLoader train;
    ValidationSet val;               // --val's rows (llmc/dataloader.h)
    ChoiceSet choices;               // --hellaswag's examples (none: empty)
    int choice_T = 0;                // the rows they are evaluated in (choices_row_length: the longest
                                     // example rounded up to 64, at most T; unrounded where B*T has no
                                     // room for K such rows)
    TokenizerDecoder tok;            // rank 0's, for printing samples
    int sample_eot = -1;             // <|endoftext|>, where samples start; -1: no samples
    Logger log;
    LossScaler scaler;
    GpuPeak peak;                    // what MFU is measured against, per GPU (flops 0: unknown)
    uint64_t sample_rng = 0;
    int step = 0, steps = 0, accum = 1;
    int bad_in_a_row = 0;            // steps skipped for inf/nan gradients in a row (--max-bad-steps; checkpoints keep it)
    int saved_step = -1;             // the step of the last checkpoint taken (written, or being written in the background)
    CheckpointWriter writer;         // rank 0's background checkpoint writes (llmc/checkpoint_writer.cuh)
    std::string resume_dir;          // --resume: the newest complete checkpoint, found once in setup ("": none); resume() loads
                                     // it, weights included, so build_model reads no weights then
    StartupTimes startup;            // main's start to the first step, phase by phase (rank 0 prints them)
};

// The model's shape: from a descriptor (*fresh: a new model), else from a model file's header;
// false + one line if this build's kernels cannot run it or --seq-len exceeds it.
inline bool model_config(const TrainConfig& tc, GPT2Config* cfg, bool* fresh, std::string* err) {
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

// Collective: a failure only some ranks meet (their GPU's free memory, a file only some nodes see,
// rank 0's last checkpoint write) goes to every rank, so that all exit together. Without it the
// failing rank exits alone and the others wait in the next collective (or the communicator's
// teardown) until --nccl-timeout: over NVLink or shared memory nothing tells them a peer has
// exited (over sockets its closed connection does). `ok`: this rank's own outcome (its line in
// *err). false on every rank when any failed; a rank that did not fail gets a line naming the
// first that did. Under mpirun such a rank first gives the failing one a moment: its comm_fail
// (MPI_Abort) usually ends the job before this second line is printed, so the reason comes first
// or alone. step, phase (a string literal): for the watchdog's line, should a peer never vote.
inline bool ranks_agree(const Run* r, bool ok, const char* what, std::string* err, int step = 0,
                        const char* phase = "startup (whether every rank got this far)") {
    const int n = r->comm.world;
    if (n == 1) return ok;
    std::vector<float> failed((size_t)n, 0.0f);
    failed[(size_t)r->comm.rank] = ok ? 0.0f : 1.0f;
    comm_watch(&r->comm, step, phase);
    comm_sum_host_floats(&r->comm, &failed, r->ctx.stream);
    comm_unwatch(&r->comm);
    if (!ok) return false;
    for (int i = 0; i < n; i++) {
        if (failed[(size_t)i] == 0.0f) continue;
        if (r->comm.launcher == "mpi") std::this_thread::sleep_for(std::chrono::seconds(2));
        *err = "rank " + std::to_string(i) + " failed " + what + ": its own line says why";
        return false;
    }
    return true;
}

// Does the run fit in its GPU's free memory? Checked before allocating (gpt2_memory_check), so
// that a micro-batch too large is one line, not a CUDA error at a cudaMalloc.
inline bool check_memory(const Run* r, const GPT2Config& cfg, std::string* err) {
    const TrainConfig& tc = r->tc;
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const std::string gpu = "GPU " + std::to_string(r->ctx.device) + " (" + r->ctx.props.name + ")";
    size_t buffers[2] = {0, 0};   // --grad-int8's staging with DDP and with ZeRO-1 (several GPUs only: one reduces nothing)
    const int world = r->comm.world;
    if (tc.grad_int8 && world > 1) {
        const size_t max_n = grad_bucket_max(param_layout(cfg), grad_bucket_elems(tc.bucket_mb));
        buffers[0] = grad_staging_size(max_n, world, 0).bytes(world);
        buffers[1] = grad_staging_size(max_n, world, gpt2_sizes(cfg, world, 1).shard).bytes(world);
    }
    return gpt2_memory_check(cfg, tc.B, tc.T, world, tc.zero, tc.recompute, free_b, total_b, gpu, err, buffers,
                             tc.total_batch_derived ? 0 : tc.total_batch);
}

// The model of shape `cfg` (model_config): a descriptor builds a fresh one (`fresh`), anything
// else is read as a model file.
inline bool build_model(Run* r, const GPT2Config& cfg, bool fresh, std::string* err) {
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

// The run's options (llmc/run_options.h): the command line's, or on --resume the run's own merged
// with it. false + one line in *err on a problem; *help for --help.
inline bool configure(Run* r, int argc, const char* const* argv, bool* help, std::string* err) {
    std::string note;
    if (!configure_run(&r->tc, r->comm.world, PRECISION_CODE, argc, argv, help, &note, err)) return false;
    if (!note.empty() && r->comm.rank == 0) printf("%s\n", note.c_str());
    return true;
}

// --gemm-algos: every rank reads and checks the named file (collective: a bad one fails them all
// alike) and pins its choices for the GEMM plans. setup() calls it before the run directory is
// written: refused after, it left log.jsonl in --out, and the same command with the file's name
// corrected was then refused too ("already holds a run"). Needs the CUDA context (the file's
// header names the GPU and cuBLASLt's version) and the communicator.
inline bool read_gemm_algos(Run* r, std::string* err) {
    const TrainConfig& tc = r->tc;
    if (tc.gemm_algos.empty()) return true;
    std::string text, why;
    std::map<MatmulKey, int> pinned;
    bool read = read_text_file(tc.gemm_algos, &text, err);
    if (!read) *err = "option --gemm-algos: " + *err;
    else if (!(read = matmul_choices_parse(&r->ctx, text, &pinned, &why))) *err = "option --gemm-algos: " + tc.gemm_algos + ": " + why;
    if (!ranks_agree(r, read, "to read --gemm-algos", err)) return false;
    r->ctx.plans->pinned = pinned;
    return true;
}

// The GEMM algorithms (--gemm-tune, --gemm-algos). Rank 0 takes its choices from a file (the
// --gemm-algos file, else <out>/gemm_algos.txt when a run directory holds one: always on --resume)
// or times them (gpt2_tune_gemms); every rank then adopts rank 0's, so all ranks, and a resumed
// run, compute with the same algorithms. A tuned run with --out keeps its choices there.
inline bool choose_gemm_algorithms(Run* r, std::string* err) {
    const TrainConfig& tc = r->tc;
    const std::string kept = tc.out.empty() ? "" : tc.out + "/gemm_algos.txt";
    // a resumed run reuses its kept choices, tuned or not now (every rank reads --out on --resume)
    const bool reuse = tc.resume && !kept.empty() && file_exists(kept);
    if (!tc.gemm_tune && tc.gemm_algos.empty() && !reuse) return true;
    Context* ctx = &r->ctx;
    const bool rank0 = r->comm.rank == 0;
    std::string from;  // the file this rank took its choices from ("" = none: timed, or untimed); only rank 0 reads <out>/gemm_algos.txt
    if (!tc.gemm_algos.empty()) {  // read and pinned on every rank before the run directory was written (read_gemm_algos)
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
inline bool open_choices(Run* r, const GPT2Config& cfg, std::string* err) {
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
inline bool open_data(Run* r, const GPT2Config& cfg, std::string* err) {
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
    // the validation set: every row of T+1 tokens in --val, the same on any GPU count and -b
    if (!validation_open(&r->val, tc.val, tc.T, cfg.vocab_size, err)) {
        *err = "option --val: " + *err;
        return false;
    }
    // a validation loss on tokens the model trains on measures nothing (glob_files: canonical, sorted)
    if (!tc.eval_only) {
        const std::vector<std::string> train = glob_files(tc.train);
        for (const std::string& v : glob_files(tc.val))
            if (std::binary_search(train.begin(), train.end(), v)) { *err = "option --val: " + v + " is also one of --train's files"; return false; }
    }
    // --val-batches beyond one pass would count rows twice
    const size_t pass = validation_batches(&r->val, tc.B);
    if ((size_t)tc.val_batches > pass) {
        *err = "option --val-batches: " + std::to_string(tc.val_batches) + " batches, but one pass over " + tc.val + " is " +
               std::to_string(pass) + " (its " + std::to_string(r->val.rows) + " rows of " + std::to_string(tc.T) + " tokens, " +
               std::to_string(tc.B) + " a batch); 0 evaluates one pass";
        return false;
    }
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
inline void share_sample_start(Run* r) {
    const TrainConfig& tc = r->tc;
    const bool rank0 = r->comm.rank == 0;
    std::vector<float> eot = {-1.0f};
    if (!tc.bench && tc.sample_len > 0 && rank0) {
        std::string terr;
        const int V = r->model.cfg.vocab_size;
        if (!r->tok.load(tc.tokenizer, &terr))
            printf("note: no samples: %s (make data writes it)\n", terr.c_str());
        else if (r->tok.vocab_size() != V)   // its <|endoftext|> might be no token of the model, its text garbage
            printf("note: no samples: %s decodes a vocabulary of %d tokens, the model's has %d\n", tc.tokenizer.c_str(),
                   r->tok.vocab_size(), V);
        else
            eot[0] = (float)r->tok.eot();
    }
    if (!rank0) eot[0] = 0.0f;  // the sum is rank 0's value
    comm_watch(&r->comm, 0, "startup (where samples start, rank 0's to every rank)");
    comm_sum_host_floats(&r->comm, &eot, r->ctx.stream);
    comm_unwatch(&r->comm);
    r->sample_eot = (int)eot[0];
}

// The run's first lines (rank 0): model, precision, GPUs, batch, and the memory per GPU.
inline void print_run(const Run* r) {
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
