// GPT-2 training on NVIDIA GPUs: CUDA kernels + cuBLASLt, one floatX precision per build.
// The story of one step (llmc/gpt2_step.cuh computes it; llmc/ has each layer's kernels):
//
//   tokens (B,T) - encoder -> residual (B,T,C)
//   per block:  LN1 - qkv matmul - attention - proj matmul + residual add (fused) - LN2
//               fc matmul + GELU (fused) - proj matmul + residual add (fused) - next LN
//   LN_f - lm-head matmul (tied wte) - fused classifier (softmax + loss + dlogits) - lm-head
//          backward, in chunks of 16384 tokens (activations.cuh: logit_rows), so the (B,T,Vp)
//          logits exist whole only when B*T fits one chunk
//   backward in reverse; each finished block's gradients are announced (the multi-GPU seam)
//   update: global norm -> step decision (clip; skip on inf/nan or a spike) -> AdamW on fp32 master weights
// This file is the training RUN around those steps: setup (the order of it; its pieces, with the
// Run struct, are in llmc/run_setup.cuh), checkpoints and resume, the loop (steps, validation,
// samples, logs), stop signals, and main.
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
#include <cuda_profiler_api.h>
#include "llmc/common.cuh"
#include "llmc/gpt2.cuh"
#include "llmc/gpt2_step.cuh"
#include "llmc/checkpoint.h"
#include "llmc/checkpoint_writer.cuh"
#include "llmc/choices.h"
#include "llmc/comm.cuh"
#include "llmc/grad_reducer.cuh"
#include "llmc/dataloader.h"
#include "llmc/evaluate.cuh"
#include "llmc/logger.h"
#include "llmc/report.h"
#include "llmc/run_options.h"
#include "llmc/run_setup.cuh"
#include "llmc/sampler.h"
#include "llmc/timing.h"
#include "llmc/tokenizer.h"
#include "llmc/train_config.h"

// ----------------------------------------------------------------------------------------------
// The run's state besides the weights, as a checkpoint keeps it (llmc/checkpoint.h).
TrainState train_state(const Run* r) {
    TrainState st{};
    st.step = r->step; st.adam_t = r->model.adam_t; st.spike = r->model.spike; st.bad_in_a_row = r->bad_in_a_row;
    st.loss_scale = r->scaler.scale; st.scaler_clean_steps = r->scaler.clean_steps;
    st.loader = dataloader_state(&r->train); st.sample_rng = r->sample_rng;
    st.world = r->comm.world; st.precision = PRECISION_CODE; st.zero = r->tc.zero; st.config = r->model.cfg;
    st.data_files = (int32_t)r->train.files.size();
    st.data_tokens = std::accumulate(r->train.file_tokens.begin(), r->train.file_tokens.end(), (uint64_t)0);
    return st;
}

// A failure during a background checkpoint write waits for the write first, so the checkpoint
// taken before the failure is kept (llmc/checkpoint_writer.cuh): exit() from the main thread (an
// error: a bad token in the data, a CUDA error) through an exit handler, which joins the writer,
// so it is also done with CUDA and stdio before exit() tears them down; and comm_fail and the
// watchdog (a peer died or hangs), through Comm::before_exit, which waits for the write's end, at
// most CHECKPOINT_EXIT_WAIT_S, before they end the process: the watchdog and comm_fail under
// mpirun without exit handlers (_exit, MPI_Abort), comm_fail otherwise with exit(), whose handler
// then must not wait again (without end, should the disk hang) once that wait has given up and
// said the write is left incomplete. Exit handlers, like signal handlers, reach nothing but
// globals. The exit handler is registered at the first background write, after the CUDA
// runtime's own, so it runs before them.
static std::atomic<CheckpointWriter*> exit_writer{nullptr};
static std::atomic<bool> exit_wait_gave_up{false};
constexpr double CHECKPOINT_EXIT_WAIT_S = 300;
static void finish_write_on_exit() {
    CheckpointWriter* w = exit_writer;
    if (!w || !w->thread.joinable()) return;
    if (exit_wait_gave_up) {   // the writer still uses CUDA and stdio: end without tearing them down under it
        fflush(stdout);
        _exit(EXIT_FAILURE);   // only failures exit() with a write in flight (the normal end has joined it)
    }
    w->thread.join();
}
static void finish_write_before_failing() {   // any thread
    const CheckpointWriter* w = exit_writer;
    if (!w || !w->in_flight) return;
    printf("note: waiting for the background checkpoint write to end before exiting (at most %.0f s)\n", CHECKPOINT_EXIT_WAIT_S);
    fflush(stdout);
    if (!checkpoint_writer_drain(w, CHECKPOINT_EXIT_WAIT_S)) {
        exit_wait_gave_up = true;
        printf("note: the checkpoint write had not ended after %.0f s: it is left incomplete (--resume takes the one before)\n",
               CHECKPOINT_EXIT_WAIT_S);
    }
    fflush(stdout);
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
        if (w->snapshot) {
            exit_writer = w;
            std::atexit(finish_write_on_exit);
            r->comm.before_exit = finish_write_before_failing;
        }
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

// The end: rank 0's last background checkpoint write is waited for and whether it failed shared
// (collective), so that then every rank exits non-zero, not rank 0 alone while the others, with
// the environment launch, go on to a teardown that waits for it.
void finish_checkpoint(Run* r) {
    std::string err;
    const bool ok = r->comm.rank != 0 || checkpoint_writer_wait(&r->writer, &err);
    if (!ranks_agree(r, ok, "to write its last checkpoint", &err, r->step, "the end (whether rank 0's last checkpoint write failed)"))
        comm_fail(&r->comm, err);
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
    r->step = st.step; r->model.adam_t = st.adam_t; r->model.spike = st.spike; r->bad_in_a_row = st.bad_in_a_row;
    r->scaler.scale = st.loss_scale; r->scaler.clean_steps = st.scaler_clean_steps;
    r->sample_rng = st.sample_rng;
    if (!dataloader_restore(&r->train, st.loader, err)) { *err = dir + "/state.bin: " + *err; return false; }
    if (r->comm.rank == 0) printf("resumed from %s at step %d\n", dir.c_str(), st.step);
    return true;
}

// --resume: every rank lists --out itself. Where the ranks do not see the same directory (--out
// on each node's own disk, or a node's stale view of a network filesystem) they would resume from
// different steps, each GPU silently training other weights. Collective: each rank's newest
// complete step (-1: none) to every rank; false + one line unless all are the same.
bool resume_steps_agree(Run* r, long long step, std::string* err) {
    const int n = r->comm.world, me = r->comm.rank;
    if (n == 1) return true;
    std::vector<float> h(2 * (size_t)n, 0.0f);   // step + 1 in two parts of 20 bits, each exact in a float
    h[2 * (size_t)me] = (float)((step + 1) >> 20);
    h[2 * (size_t)me + 1] = (float)((step + 1) & 0xfffff);
    comm_watch(&r->comm, 0, "startup (each rank's newest checkpoint, --resume)");
    comm_sum_host_floats(&r->comm, &h, r->ctx.stream);
    comm_unwatch(&r->comm);
    auto seen = [](long long s) { return s < 0 ? std::string("no complete checkpoint") : "step " + std::to_string(s); };
    for (int i = 0; i < n; i++) {
        const long long s = ((long long)h[2 * (size_t)i] << 20) + (long long)h[2 * (size_t)i + 1] - 1;
        if (s == step) continue;
        *err = "option --resume: in " + r->tc.out + " rank " + std::to_string(i) + " finds " + seen(s) + ", rank " + std::to_string(me) +
               " " + seen(step) + ": every rank must see the same --out (a filesystem all nodes share)";
        return false;
    }
    return true;
}

// The run directory (rank 0 makes it, opens the log and writes the options) and --resume from it
// (every rank reads its part). Rank-local: false + one line in *err on this rank's failure.
bool run_directory(Run* r, std::string* err) {
    const TrainConfig& tc = r->tc;
    const bool rank0 = r->comm.rank == 0;
    // in bench mode only a tuned run's gemm_algos.txt goes there
    if (!tc.out.empty() && rank0 && !make_dirs(tc.out, err)) return false;
    if (tc.bench || tc.out.empty()) return true;
    if (tc.resume && !resume(r, err)) return false;
    if (rank0 && !r->log.open(tc.out + "/log.jsonl", err)) return false;
    // the run's options, for a --resume before its first checkpoint (resume_options)
    return !rank0 || write_text_file_atomic(tc.out + "/options.txt", train_options_text(tc), err);
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
    if (!read_gemm_algos(r, err)) return false;   // before anything is written to --out
    if (tc.resume && !tc.bench && !tc.out.empty()) {   // (resume_options made --model the checkpoint's model.bin)
        std::vector<std::pair<long long, std::string>> found;   // the complete checkpoints, oldest first
        if (!ckpt_detail::list_complete(tc.out, &found, err)) return false;
        if (!found.empty()) r->resume_dir = found.back().second;
        if (!resume_steps_agree(r, found.empty() ? -1 : found.back().first, err)) return false;
    }
    if (!ranks_agree(r, build_model(r, cfg, fresh, err), "to build the model (its GPU's memory, or the model file)", err)) return false;
    GPT2* m = &r->model;
    r->reduce = r->comm.world > 1;
    if (r->reduce) {
        grad_reducer_init(&r->reducer, &r->comm, &r->ctx, m->grads, m->layout, m->shard, tc.zero, tc.bucket_mb, m->cfg.num_layers + 3,
                          tc.grad_int8 != 0);
        comm_set_pending(&r->comm, [r] { return grad_reducer_pending(&r->reducer); });
    }
    r->scaler = LossScaler::make(USES_LOSS_SCALING);
    r->sample_rng = rng_seed(tc.seed);
    r->steps = tc.eval_only ? 0
               : tc.bench ? tc.bench_warmup + tc.bench_steps
                          : tc.max_steps > 0 ? tc.max_steps : (int)std::max<size_t>(1, dataloader_steps_per_epoch(&r->train));
    if (!tc.bench && !tc.eval_only && tc.sched.warmup > r->steps && rank0)
        printf("note: --warmup %d is longer than the run's %d steps: the learning rate never reaches --lr\n", tc.sched.warmup, r->steps);
    share_sample_start(r);
    cudaCheck(cudaDeviceSynchronize());   // the initialization's kernels run asynchronously: count them here, not in step 1
    r->startup.mark("model", steady_ms());   // memory, the weights (random or read), the decoder for samples
    if (!ranks_agree(r, run_directory(r, err), "to prepare --out (or to resume from it)", err)) return false;
    if (tc.resume && !tc.bench && !tc.out.empty()) r->startup.mark("resume", steady_ms());
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
// computes the first two; --val-batches batches of B rows, all ranks together, or one pass over --val).
void after_step(Run* r, bool last) {
    const TrainConfig& tc = r->tc;
    GPT2* m = &r->model;
    auto due = [&](int every) { return last || (every > 0 && r->step % every == 0); };
    wait_for_checkpoint(r, true);   // a background write that failed ends the run here
    if (due(tc.val_every)) {
        const size_t batches = tc.val_batches > 0 ? (size_t)tc.val_batches : validation_batches(&r->val, tc.B);
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
            // fwrite, not printf's %s: a sample may hold a NUL byte (token 188), which %s would stop at
            const std::string shown = sample_text(r->step, text) + "\n";
            fwrite(shown.data(), 1, shown.size(), stdout);
            r->log.line(sample_json(r->step, text));
        }
    }
    if (!tc.out.empty() && due(tc.checkpoint_every)) save_checkpoint(r);
}

// What the RESULT line says about the run besides its times; device_mem_gb: rank 0's GPU now.
RunShape run_shape(const Run* r, double flops_tok, double peak) {
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    return RunShape{PRECISION_NAME, r->model.cfg.num_layers, r->model.cfg.channels, r->comm.world, r->tc.zero, r->tc.B, r->tc.T, r->accum,
                    r->tc.total_batch, flops_tok, peak, (total_b - free_b) / 1e9, r->tc.grad_int8,
                    (1.0 + (double)sizeof(float) / QGROUP) / sizeof(floatX)};   // int8 values + a scale per QGROUP
}

// The RESULT line (llmc/report.h) over the timed steps, which rank 0 prints last, after the
// communication's summary and which rank the others wait for (several GPUs). Collective: the per-rank phase times are summed over the
// ranks (each adds its own into a table of zeros).
void print_result(Run* r, const std::vector<float>& ms, const std::vector<StepResult>& timed, double flops_tok, double peak) {
    const int n = r->comm.world;
    std::string per_rank, balance;
    if (n > 1) {
        std::vector<float> h = rank_phase_slots(timed, r->accum, n, r->comm.rank);
        comm_watch(&r->comm, r->step, "the per-rank phase times (end of the run)");
        comm_sum_host_floats(&r->comm, &h, r->ctx.stream);
        comm_unwatch(&r->comm);
        per_rank = rank_phase_fields(h, n);
        balance = rank_balance_text(h, n, r->accum);
    }
    if (r->comm.rank != 0) return;
    const RunShape shape = run_shape(r, flops_tok, peak);
    const StepTimes times = summarize_steps(ms, timed);
    const std::string comm = comm_summary_text(shape, times);   // on several GPUs: where the communication went
    if (!comm.empty()) printf("%s\n%s\n", comm.c_str(), balance.c_str());
    printf("%s\n", result_line(shape, times, per_rank).c_str());
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
            // a long run on several GPUs says early where its communication goes (the end says it again)
            if (!tc.bench && r->comm.world > 1 && timed.size() == 10 && r->step + 10 <= r->steps) {
                const std::string comm = comm_summary_text(run_shape(r, flops_tok, peak), summarize_steps(timed_ms, timed));
                printf("over steps %d-%d: %s\n", r->step - 9, r->step, comm.c_str());
            }
        }
        // every rank has the same StepResult (the flags, the loss and the norm are global), so all stop together
        r->bad_in_a_row = bad_streak(r->bad_in_a_row, s.skip_reason);
        if (tc.max_bad_steps > 0 && r->bad_in_a_row >= tc.max_bad_steps) {
            if (r->comm.rank == 0) fprintf(stderr, "error: %s\n", bad_steps_text(r->bad_in_a_row, s, r->step, tc.max_bad_steps).c_str());
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
    const bool configured = configure(&r, argc, argv, &help, &err);
    const LaunchVerdict v = comm_launch_verdict(&r.comm, !configured);
    if (v.any_failed) {
        if (v.say_why) fprintf(stderr, "%serror: %s\n", r.comm.rank ? ("rank " + std::to_string(r.comm.rank) + ": ").c_str() : "", err.c_str());
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
    finish_checkpoint(&r);
    checkpoint_writer_free(&r.writer);
    exit_writer = nullptr;   // r ends with main, before the exit handlers run
    r.log.close();
    if (r.reduce) {
        comm_set_pending(&r.comm, {});   // the watchdog, armed over comm_free, must not query the freed events
        grad_reducer_free(&r.reducer);
    }
    gpt2_free(&r.model);
    context_destroy(&r.ctx);
    comm_free(&r.comm);
    return rc;
}
