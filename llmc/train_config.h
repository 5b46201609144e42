// The trainer's settings and THE option table: parse_train_config() and --help are both driven by
// train_options(), so the usage text cannot drift from what is parsed. Host-only; unit-tested.
#pragma once
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <glob.h>
#include <unistd.h>
#include <string>
#include <utility>
#include <vector>
#include "logger.h"    // text_printf
#include "options.h"
#include "schedule.h"
#include "spike_guard.h"

struct TrainConfig {
    // model and data
    std::string model = "d12";                      // descriptor (fresh model) or model file
    std::string start_model;                        // --resume: the model the run started from (model: the checkpoint's), what options.txt keeps
    std::string train = "dev_data/tinyshakespeare_train.bin";
    std::string val = "dev_data/tinyshakespeare_val.bin";
    std::string tokenizer = "dev_data/gpt2_tokenizer.bin";
    bool shuffle = false;
    // batch
    int B = 8, T = 1024;
    long long total_batch = 0;                      // tokens per step over all GPUs; 0: B*T*GPUs
    bool total_batch_derived = false;               // it was 0 (kept as 0; on --resume: the kept -b x T x the resuming
                                                    // run's GPUs, which are the start's once a checkpoint exists)
    // optimization
    LRSchedule sched;
    int max_steps = -1;                             // -1: one epoch of the training data
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f, grad_clip = 1.0f;
    int seed = 42;
    int recompute = 0;                              // 0 none, 1 GELU, 2 GELU + LayerNorm
    int gemm_tune = 0;                              // time cuBLASLt's candidate GEMM algorithms at startup
    std::string gemm_algos;                         // take the GEMM algorithm choices from this file
    int cuda_graphs = 1;                            // replay each micro-step's forward and backward as CUDA graphs
    // evaluation, samples, outputs
    int val_every = 0, val_batches = 0;             // 0 batches: one pass over the validation data
    std::string hellaswag;                          // multiple-choice file (data/tokenize --hellaswag), "" = none
    bool eval_only = false;                         // evaluate, sample, exit: no training
    int sample_every = 0, sample_len = 64, top_k = 50;
    float top_p = 1.0f, temperature = 1.0f;
    std::string out;                                // run directory: log.jsonl + checkpoints ("" = none)
    int checkpoint_every = 0, keep_checkpoints = 2;
    int checkpoint_async = 1;                       // write checkpoints from a GPU snapshot while training goes on
    bool resume = false;
    // several GPUs
    int zero = 0;                                   // 0: DDP, 1: ZeRO-1
    float bucket_mb = 16.0f;
    int grad_int8 = 0;                              // send the gradients as int8 + a scale per 128 (llmc/grad_compress.cuh)
    std::string rendezvous = "tcp";
    float nccl_timeout = 300;                       // seconds without progress before a rank gives up
    int nccl_cta_policy = 1;                        // NCCL's CTA policy: 1 = "efficiency" (measured best)
    // faults
    int max_bad_steps = 20;                         // stop after this many inf/nan steps in a row (0: never)
    float skip_loss_z = 0, skip_norm_z = 0;         // the spike guard's thresholds (llmc/spike_guard.h; 0: off)
    int spike_window = 128;                         // ... and the steps its statistics average over
    std::string debug_nan;                          // testing: "RANK:STEP" puts a NaN in that rank's gradients
    int debug_nan_rank = -1, debug_nan_step = 0;    // parsed from debug_nan
    int debug_bad_batch = 0;                        // testing: this step trains on random tokens (a loss spike)
    // benchmark
    bool bench = false;
    int bench_warmup = 5, bench_steps = 20;
    bool bench_profile = false;                     // bracket the last step for ncu --profile-from-start off
    float peak_tflops = 0;                          // MFU's peak per GPU; 0: the datasheet's (llmc/timing.h)
    int debug_exit_after = 0;                       // tests: die like a killed process after N steps
};

inline std::vector<Option> train_options(TrainConfig* c) {
    return {
        {"model", 'e', OPT_STRING, &c->model, "d12|d24|d36|d48 (new model, GPT-2 init) or a model file to start from"},
        {"train", 'i', OPT_STRING, &c->train, "training token shards (glob)"},
        {"val", 'j', OPT_STRING, &c->val, "validation token shards (glob)"},
        {"tokenizer", 0, OPT_STRING, &c->tokenizer, "decoder file for printing samples (make data writes it)"},
        {"shuffle", 0, OPT_FLAG, &c->shuffle, "shuffle the shard order and the order of the step-sized blocks in each shard every epoch (seeded by --seed)"},
        {"batch", 'b', OPT_INT, &c->B, "micro-batch size per GPU", 1, 4096},
        {"seq-len", 't', OPT_INT, &c->T, "sequence length", 1, 65536},
        {"total-batch-tokens", 'd', OPT_INT64, &c->total_batch, "tokens per optimizer step over all GPUs (0: B*T*GPUs)", 0, 1e12},
        {"lr", 'l', OPT_FLOAT, &c->sched.lr, "peak learning rate", 0, 10},
        {"warmup", 'w', OPT_INT, &c->sched.warmup, "linear warmup steps", 0, 1e9},
        {"lr-schedule", 0, OPT_STRING, &c->sched.kind, "cosine|linear|constant decay after warmup, or wsd: constant, then a linear decay over the last --lr-decay-frac of the steps"},
        {"lr-decay-frac", 0, OPT_FLOAT, &c->sched.decay_frac, "wsd: the share of --max-steps, at the end, over which the learning rate decays", 0.01, 1},
        {"lr-final", 'q', OPT_FLOAT, &c->sched.final_frac, "final learning rate as a fraction of the peak", 0, 1},
        {"max-steps", 'x', OPT_INT, &c->max_steps, "optimizer steps, >= 1 (-1: one epoch of --train)", -1, 1e9},
        {"beta1", 0, OPT_FLOAT, &c->beta1, "AdamW beta1, in [0, 1)", 0, 1},
        {"beta2", 0, OPT_FLOAT, &c->beta2, "AdamW beta2, in [0, 1)", 0, 1},
        {"eps", 0, OPT_FLOAT, &c->eps, "AdamW epsilon (> 0)", 0, 1},
        {"weight-decay", 'c', OPT_FLOAT, &c->weight_decay, "AdamW weight decay (2-D weights only)", 0, 10},
        {"grad-clip", 0, OPT_FLOAT, &c->grad_clip, "clip the global gradient norm to this (0: off)", 0, 1e9},
        {"seed", 0, OPT_INT, &c->seed, "seed of initialization, shuffling, sampling, --bench tokens", 0, 2147483647},
        {"recompute", 'r', OPT_INT, &c->recompute, "recompute in backward to save memory: 0 none, 1 GELU, 2 GELU+LayerNorm", 0, 2},
        {"gemm-tune", 0, OPT_INT, &c->gemm_tune, "1: time cuBLASLt's first 16 algorithms per GEMM shape at startup (~1 s) and keep the fastest (kept in <out>/gemm_algos.txt for --resume); 2: the same, each timed after running 0.2 s back to back, at the clock the GPU's power limit leaves (~35 s; 0.1-2.5 % faster steps under that limit); 0: cuBLASLt's first choice", 0, 2},
        {"cuda-graphs", 0, OPT_INT, &c->cuda_graphs, "1: from the second step on, replay each micro-step's forward and backward as CUDA graphs (one launch instead of ~300: pays at small batches); 0: launch every kernel", 0, 1},
        {"gemm-algos", 0, OPT_STRING, &c->gemm_algos, "use the GEMM algorithm choices in this file (a run's <out>/gemm_algos.txt): bitwise-repeatable runs"},
        {"val-every", 'v', OPT_INT, &c->val_every, "validation loss every N steps (0: only at the end)", 0, 1e9},
        {"val-batches", 0, OPT_INT, &c->val_batches, "validation batches of B sequences of T tokens, all GPUs together (0: one pass, every such sequence --val holds); the same tokens on any GPU count", 0, 1e9},
        {"hellaswag", 0, OPT_STRING, &c->hellaswag, "HellaSwag-style multiple-choice file (data/tokenize --hellaswag writes it): its accuracy with every validation loss (empty: none)"},
        {"eval-only", 0, OPT_FLAG, &c->eval_only, "no training: the validation loss, --hellaswag and a sample of the model (-e), then exit (writes nothing: no --out)"},
        {"sample-every", 's', OPT_INT, &c->sample_every, "print a sampled text every N steps (0: only at the end)", 0, 1e9},
        {"sample-len", 'g', OPT_INT, &c->sample_len, "tokens per sample (0: no samples)", 0, 65536},
        {"top-k", 0, OPT_INT, &c->top_k, "sample from the k most likely tokens (0: all)", 0, 1000000},
        {"top-p", 0, OPT_FLOAT, &c->top_p, "sample from the fewest most likely tokens whose probability adds up to this (nucleus sampling; 1: all)", 0.01, 1},
        {"temperature", 0, OPT_FLOAT, &c->temperature, "sampling temperature", 1e-3, 100},
        {"out", 'o', OPT_STRING, &c->out, "run directory for log.jsonl, checkpoints and gemm_algos.txt, created if missing (empty: none; --bench keeps only gemm_algos.txt there)"},
        {"checkpoint-every", 'n', OPT_INT, &c->checkpoint_every, "write a checkpoint every N steps (0: only at the end)", 0, 1e9},
        {"keep-checkpoints", 0, OPT_INT, &c->keep_checkpoints, "keep the newest K checkpoints (0: all)", 0, 1e6},
        {"checkpoint-async", 0, OPT_INT, &c->checkpoint_async, "1: write checkpoints in the background, from a snapshot of the state on the GPU (12 bytes per parameter, where free), while training goes on; 0: the run waits for each write", 0, 1},
        {"resume", 0, OPT_FLAG, &c->resume, "continue from the newest complete checkpoint in --out (none yet: start at step 0)"},
        {"zero", 'z', OPT_INT, &c->zero, "0: DDP (all-reduce); 1: ZeRO-1 (optimizer state sharded over GPUs)", 0, 1},
        {"bucket-mb", 0, OPT_FLOAT, &c->bucket_mb, "gradient reduction bucket, MiB (0: one per block)", 0, 1e6},
        {"grad-int8", 0, OPT_INT, &c->grad_int8, "1: send the gradients over the link as int8 with one fp32 scale per 128 values, summed in fp32 (about half the bytes of bf16: for slow links, e.g. NCCL_P2P_DISABLE=1 or several nodes; each rounding within 1/254 of its group's largest value: at most two per value with DDP, one with ZeRO-1); 0: in the training precision", 0, 1},
        {"rendezvous", 0, OPT_STRING, &c->rendezvous, "without mpirun: tcp (MASTER_ADDR/MASTER_PORT) or file:PATH"},
        {"nccl-timeout", 0, OPT_FLOAT, &c->nccl_timeout, "seconds a rank waits for its peers before it aborts (0: forever); above any checkpoint write", 0, 1e7},
        {"nccl-cta-policy", 0, OPT_INT, &c->nccl_cta_policy, "sets NCCL_CTA_POLICY: 1 efficiency (fewer SMs taken from the backward the reduction overlaps), 0 NCCL's default, 2 zero-CTA; -1 leaves the environment's", -1, 2},
        {"max-bad-steps", 0, OPT_INT, &c->max_bad_steps, "stop after N steps in a row skipped for inf/nan gradients (spike skips between them neither count nor break the row) (0: never)", 0, 1e9},
        {"skip-loss-z", 0, OPT_FLOAT, &c->skip_loss_z, "skip the update of a step whose loss lies more than Z typical deviations above its recent level (a z-score, see llmc/spike_guard.h; 0: off)", 0, 1e6},
        {"skip-norm-z", 0, OPT_FLOAT, &c->skip_norm_z, "the same for the gradient norm, measured by its logarithm (0: off)", 0, 1e6},
        {"spike-window", 0, OPT_INT, &c->spike_window, "--skip-loss-z/--skip-norm-z: steps the typical deviation averages over, and the steps seen before either decides", SPIKE_MIN_WINDOW, 1e6},
        {"bench", 0, OPT_FLAG, &c->bench, "benchmark on random tokens: no data files needed"},
        {"bench-warmup", 0, OPT_INT, &c->bench_warmup, "--bench: untimed steps first", 0, 1e6},
        {"bench-steps", 0, OPT_INT, &c->bench_steps, "--bench: timed steps", 1, 1e6},
        {"bench-profile", 0, OPT_FLAG, &c->bench_profile, "--bench: profile only the last step (ncu --profile-from-start off)"},
        {"peak-tflops", 0, OPT_FLOAT, &c->peak_tflops, "the GPU's peak TFLOP/s that MFU is measured against (0: the datasheet's dense 16-bit tensor-core rate, or fp32's in FP32 builds, for the GPUs llmc/timing.h knows)", 0, 1e6},
        {"debug-exit-after", 0, OPT_INT, &c->debug_exit_after, "testing: exit abruptly (no cleanup, code 137) after N steps, once a checkpoint due then is written", 0, 1e9},
        {"debug-nan", 0, OPT_STRING, &c->debug_nan, "testing: RANK:STEP puts a NaN into RANK's gradients from step STEP on"},
        {"debug-bad-batch", 0, OPT_INT, &c->debug_bad_batch, "testing: step N trains on random tokens on every rank (a loss spike; 0: none)", 0, 1e9},
    };
}

inline constexpr const char* TRAIN_USAGE = "usage: [mpirun -np N] train_gpt2cu [options]";
// What --help prints after the options: how a run is launched and how it ends.
inline constexpr const char* TRAIN_ENDINGS =
    "Launch: mpirun -np N (one rank per GPU), or without mpirun from the environment, as torchrun or Slurm set it:\n"
    "RANK/WORLD_SIZE/LOCAL_RANK or SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, with MASTER_ADDR/MASTER_PORT (--rendezvous tcp).\n"
    "Stopping: SIGTERM, SIGINT (Ctrl-C) or SIGUSR1, sent to any one rank, let the step finish; then every rank stops,\n"
    "a checkpoint is written (with --out) and -o DIR --resume continues. A second signal ends the process at once.\n"
    "Exit codes: 0 done; 1 an error, which one line names (an option, an input file, no usable GPU, a CUDA or NCCL\n"
    "failure); 2 --max-bad-steps steps in a row skipped for inf/nan gradients; 3 a peer rank died or hung\n"
    "(--nccl-timeout); 4 stopped by a signal.";

// The checks across options (and the derived fields: -d 0 becomes B*T*GPUs, --debug-nan's parts)
// for a run on `world` GPUs, after every option is set. false + one line in *err on a problem.
inline bool check_train_config(TrainConfig* c, int world, std::string* err) {
    if (!lr_schedule_kind_valid(c->sched.kind)) {
        *err = "option --lr-schedule: '" + printable(c->sched.kind) + "' is not one of cosine, linear, constant, wsd";
        return false;
    }
    if (c->rendezvous != "tcp" && c->rendezvous.rfind("file:", 0) != 0) {
        *err = "option --rendezvous: '" + printable(c->rendezvous) + "' is not tcp or file:PATH";
        return false;
    }
    // an empty PATH: rank 0 would write "./.tmp" and fail to rename it to "", the others poll "" for 120 s
    if (c->rendezvous == "file:") {
        *err = "option --rendezvous: 'file:' names no PATH (file:PATH: the id file every rank reads)";
        return false;
    }
    if (!c->debug_nan.empty()) {
        // RANK:STEP, each a whole number (strtoll: sscanf's %d would wrap a value beyond int)
        auto whole = [](const std::string& text, long long* v) {
            char* end = nullptr;
            errno = 0;
            *v = strtoll(text.c_str(), &end, 10);
            return !text.empty() && !isspace((unsigned char)text[0]) && end == text.c_str() + text.size() && errno == 0;
        };
        const size_t colon = c->debug_nan.find(':');
        long long rank = -1, step = 0;
        if (colon == std::string::npos || !whole(c->debug_nan.substr(0, colon), &rank) ||
            !whole(c->debug_nan.substr(colon + 1), &step) || rank < 0 || rank >= world || step < 1 || step > INT_MAX) {
            *err = "option --debug-nan: '" + printable(c->debug_nan) + "' is not RANK:STEP with 0 <= RANK < " + std::to_string(world) + " and STEP >= 1";
            return false;
        }
        c->debug_nan_rank = (int)rank;
        c->debug_nan_step = (int)step;
    }
    if (c->max_steps == 0) { *err = "option --max-steps: 0 is not a step count (-1: one epoch of --train)"; return false; }
    for (const auto& [name, z] : {std::pair<const char*, float>{"skip-loss-z", c->skip_loss_z}, {"skip-norm-z", c->skip_norm_z}})
        if (z > 0 && z < 1) {
            char buf[160];
            snprintf(buf, sizeof buf, "option --%s: %g would skip a large share of ordinary steps (every z above it): 0 (off) or at least 1", name, z);
            *err = buf;
            return false;
        }
    if (c->beta1 >= 1 || c->beta2 >= 1) {
        *err = std::string("option --") + (c->beta1 >= 1 ? "beta1" : "beta2") + ": must be below 1 (AdamW divides by 1 - beta^t)";
        return false;
    }
    if (c->eps <= 0) { *err = "option --eps: must be above 0 (AdamW divides by sqrt(v) + eps, and v is 0 where a gradient is)"; return false; }
    if (c->resume && c->out.empty()) { *err = "option --resume needs --out (the run directory to resume from)"; return false; }
    if (c->bench && c->resume) { *err = "option --resume: not with --bench (a benchmark starts from -e's model and saves nothing)"; return false; }
    if (c->eval_only && (!c->out.empty() || c->resume || c->bench)) {
        *err = std::string("option --eval-only: only evaluates -e's model and writes nothing; not with ") +
               (c->bench ? "--bench" : c->resume ? "--resume" : "--out");
        return false;
    }
    // options.txt keeps the options one per line: a line break in a value would split it (and the
    // rest would read as other options on --resume)
    for (const Option& o : train_options(c))
        if (o.type == OPT_STRING && ((std::string*)o.target)->find_first_of("\r\n") != std::string::npos) {
            *err = std::string("option --") + o.name + ": '" + printable(*(std::string*)o.target) +
                   "' holds a line break, which the options a run keeps (options.txt, one per line) cannot hold";
            return false;
        }
    const long long bt = (long long)c->B * c->T * world;
    if (c->total_batch == 0) { c->total_batch = bt; c->total_batch_derived = true; }
    if (c->total_batch < 0) {   // not from -d (its range is checked) but from resume_config: a kept -b below 1 times T*GPUs
        *err = "option --total-batch-tokens: " + std::to_string(c->total_batch) + " is negative: not a count of tokens per step";
        return false;
    }
    if (c->total_batch % bt != 0) {
        *err = "option --total-batch-tokens: " + std::to_string(c->total_batch) + " is not a multiple of B*T*GPUs = " +
               std::to_string(c->B) + "*" + std::to_string(c->T) + "*" + std::to_string(world) + " = " + std::to_string(bt);
        return false;
    }
    if (c->total_batch / bt > 1000000) {
        *err = "option --total-batch-tokens: " + std::to_string(c->total_batch) + " is " + std::to_string(c->total_batch / bt) +
               " micro-steps of B*T*GPUs tokens per step, more than the 1000000 allowed";
        return false;
    }
    return true;
}

// Options that mean something only beside another: the checkpoint options where checkpoints are
// written (with --out, in a run that trains), the --bench-* options with --bench. Given without
// it they would be dropped in silence: a user who asked for a checkpoint every 100 steps would
// learn only after a crash that there are none, and `--bench-steps 50` without --bench trains on
// the data instead of timing. So they are refused when GIVEN on the command line (their defaults
// are fine anywhere). false + one line.
inline bool check_dependent_options(const TrainConfig& c, int argc, const char* const* argv, std::string* err) {
    TrainConfig names;   // options_given reads only the table's names
    for (const std::string& name : options_given(train_options(&names), argc, argv)) {
        if (name.rfind("bench-", 0) == 0 && !c.bench) {
            *err = "option --" + name + ": only with --bench (this run trains; it times no benchmark)";
            return false;
        }
        if (name != "checkpoint-every" && name != "keep-checkpoints" && name != "checkpoint-async") continue;
        if (c.bench || c.eval_only) {
            *err = "option --" + name + ": not with " + (c.bench ? "--bench" : "--eval-only") + ", which writes no checkpoints";
            return false;
        }
        if (c.out.empty()) { *err = "option --" + name + " needs --out (the run directory the checkpoints are written to)"; return false; }
    }
    return true;
}

// Parses and checks the options for a run on `world` GPUs. Returns false with one line in *err
// on any problem; sets *help for -h/--help (the caller prints options_help and exits 0).
inline bool parse_train_config(TrainConfig* c, int argc, const char* const* argv, int world, bool* help, std::string* err) {
    if (!options_parse(train_options(c), argc, argv, help, err)) return false;
    return *help || (check_dependent_options(*c, argc, argv, err) && check_train_config(c, world, err));
}

// --resume continues a run with the options it was started with: every checkpoint keeps them
// (options.txt, train_options_text) and resume_config() merges them with the command line:
//   same      what defines the training (the data and its order, the tokens of a step, the
//             optimizer and its schedule, the seed): left out, the kept value; given, it must
//             equal it (a different value is a different run, and would silently continue it);
//   kept      the other settings of a run: left out, the kept value; given, the new one (e.g. -b
//             at the same -d: the same samples per step; --max-steps extends a run, and a decaying
//             learning rate then runs its schedule over the new count);
//   not_kept  what belongs to one invocation: --out, --resume, --rendezvous, --eval-only, the
//             benchmark and test options.
// Paths are kept absolute, so a run resumes from any directory; the training data counts as the
// same when its glob matches the same files.
enum class OnResume { same, kept, not_kept };
inline OnResume option_on_resume(const std::string& name) {
    static const char* const same[] = {"train", "shuffle", "seq-len", "total-batch-tokens", "lr", "warmup", "lr-schedule",
                                       "lr-final", "lr-decay-frac", "beta1", "beta2", "eps", "weight-decay", "grad-clip", "seed"};
    static const char* const not_kept[] = {"out", "resume", "rendezvous", "bench", "bench-warmup", "bench-steps", "bench-profile",
                                           "debug-exit-after", "debug-nan", "debug-bad-batch", "eval-only"};
    for (const char* n : same) if (name == n) return OnResume::same;
    for (const char* n : not_kept) if (name == n) return OnResume::not_kept;
    return OnResume::kept;
}
// `path` made absolute against the working directory; for a glob pattern (`glob`), the working
// directory's own glob characters escaped, so that they match themselves.
inline std::string absolute_path(const std::string& path, bool glob = false) {
    char cwd[PATH_MAX];
    if (path.empty() || path[0] == '/' || !getcwd(cwd, sizeof cwd)) return path;
    std::string dir;
    for (const char* p = cwd; *p; p++) {
        if (glob && strchr("[]*?\\", *p)) dir += '\\';
        dir += *p;
    }
    return dir + "/" + path;
}
// The files a glob matches, each as its canonical path (symlinks and ./.. resolved), sorted.
inline std::vector<std::string> glob_files(const std::string& pattern) {
    std::vector<std::string> files;
    glob_t g;
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char real[PATH_MAX];
            files.push_back(realpath(g.gl_pathv[i], real) ? real : g.gl_pathv[i]);
        }
    globfree(&g);
    std::sort(files.begin(), files.end());
    return files;
}

// The options a checkpoint keeps, as options_text lines; paths absolute (a model given as a
// descriptor such as d12 is not a path, and stays as it is).
inline std::string train_options_text(TrainConfig c) {
    for (std::string* p : {&c.train, &c.val}) *p = absolute_path(*p, true);
    if (c.total_batch_derived) c.total_batch = 0;
    for (std::string* p : {&c.tokenizer, &c.gemm_algos, &c.hellaswag}) *p = absolute_path(*p);
    if (!c.start_model.empty()) c.model = c.start_model;   // not the checkpoint this invocation resumed from
    if (access(c.model.c_str(), F_OK) == 0) c.model = absolute_path(c.model);
    return options_text(train_options(&c), [](const char* name) { return option_on_resume(name) != OnResume::not_kept; });
}

// This run's options on --resume: the kept ones (`kept_text`, read from `where`) with the command
// line on top, as option_on_resume says. false + one line in *err on a bad file, a bad option, or a
// `same` option given with another value; *note: a line to print, or "". at_step: the checkpoint's
// step (-1: none yet), where a changed --max-steps takes effect.
inline bool resume_config(TrainConfig* c, const std::string& kept_text, const std::string& where, int argc,
                          const char* const* argv, int world, std::string* note, std::string* err, int at_step = -1) {
    TrainConfig kept;
    std::vector<std::string> unknown, ignored;
    // Line by line: a kept option that the command line gives again may hold a value this build
    // no longer accepts (a range narrowed since the run started); the new value replaces it, so it
    // does not refuse the resume (`kept` reads it unchecked: the run's value, for the notes and
    // checks below). `same` options must be valid.
    const std::vector<std::string> given = options_given(train_options(&kept), argc, argv);
    const auto is_given = [&](const std::string& name) { return std::find(given.begin(), given.end(), name) != given.end(); };
    for (size_t pos = 0; pos < kept_text.size();) {
        const size_t end = std::min(kept_text.find('\n', pos), kept_text.size());
        const std::string line = kept_text.substr(pos, end - pos), name = line.substr(0, line.find('='));
        pos = end + 1;
        if (option_on_resume(name) == OnResume::not_kept) {   // never written by a run: a hand edit (bench=on would
            ignored.push_back(name);                          // turn the resumed run into a benchmark)
            continue;
        }
        std::string why;
        if (options_apply_text(train_options(&kept), line, where, &why, &unknown)) continue;
        if (option_on_resume(name) != OnResume::kept || !is_given(name)) {
            *err = why;
            return false;
        }
        std::vector<Option> unchecked = train_options(&kept);
        for (Option& o : unchecked) { o.min = -INFINITY; o.max = INFINITY; }
        options_apply_text(unchecked, line, where, &why);   // (not even a number: the default stays)
    }
    TrainConfig merged = kept;   // before kept's -d is resolved: a -d left at 0 stays 0 (derived) in merged
    if (kept.total_batch == 0) kept.total_batch = (long long)kept.B * kept.T * world;   // as check_train_config resolves it
    // A run started without -d keeps its tokens per step when -b alone changes: the new -b changes
    // the micro-batch (and the micro-steps per step), not the step, as it does with -d given.
    if (merged.total_batch == 0 && is_given("batch") && !is_given("total-batch-tokens")) merged.total_batch = kept.total_batch;
    bool help;
    if (!parse_train_config(&merged, argc, argv, world, &help, err)) {
        *err += " (the options kept in " + where + " included)";
        return false;
    }
    const std::vector<Option> was = train_options(&kept), now = train_options(&merged);
    for (size_t i = 0; i < was.size(); i++) {
        if (option_on_resume(was[i].name) != OnResume::same || option_value_exact(was[i]) == option_value_exact(now[i])) continue;
        if (was[i].target == &kept.sched.decay_frac && kept.sched.kind != "wsd") continue;   // only wsd uses it
        if (was[i].target == &kept.train && !glob_files(kept.train).empty() && glob_files(kept.train) == glob_files(merged.train)) continue;
        // (escaped: options.txt is a file and may hold anything; 200 bytes: two long paths must still differ)
        *err = std::string("option --") + was[i].name + ": " + printable(option_value_exact(now[i]), 200) + " differs from " +
               printable(option_value_exact(was[i]), 200) + ", which the run being resumed was started with (" + where +
               "); leave it out to continue that run, or start a new one in another --out";
        return false;
    }
    note->clear();
    if (merged.max_steps != kept.max_steps && merged.sched.kind != "constant")
        *note = "note: --max-steps " + std::to_string(merged.max_steps) + ", the run was started with " + std::to_string(kept.max_steps) +
                ": its " + merged.sched.kind + " learning-rate schedule now runs over the new count";
    if (!note->empty() && merged.sched.kind == "wsd" && at_step >= 0 && kept.max_steps > 0 && at_step < merged.max_steps) {
        // what makes wsd extensible: before its decay the step's rate is the peak either way
        LRSchedule was = kept.sched, now = merged.sched;
        was.max_steps = kept.max_steps; now.max_steps = merged.max_steps;
        const float a = lr_at(was, at_step), b = lr_at(now, at_step);
        const int from_was = lr_decay_start(was), from_now = lr_decay_start(now);
        if (a == b)
            *note += text_printf(" (at step %d, where it resumes, its learning rate is the same either way: %.3e)", at_step + 1, a);
        else if (at_step >= from_was)
            *note += text_printf("\nnote: at step %d, where it resumes, the wsd learning rate jumps from %.3e to %.3e: the decay over "
                                 "the last %d of %d steps began at step %d; a wsd run extends without a jump only from a checkpoint "
                                 "before that", at_step + 1, a, b, kept.max_steps - from_was, kept.max_steps, from_was + 1);
        else
            *note += text_printf("\nnote: at step %d, where it resumes, the wsd learning rate jumps from %.3e to %.3e: over %d "
                                 "steps the decay (the last %d) starts at step %d, before this checkpoint", at_step + 1, a, b,
                                 merged.max_steps, merged.max_steps - from_now, from_now + 1);
    }
    for (const std::string& u : unknown)
        *note += std::string(note->empty() ? "" : "\n") + "note: " + where + ": option '" + u + "' is not one of this build's: ignored";
    for (const std::string& u : ignored)
        *note += std::string(note->empty() ? "" : "\n") + "note: " + where + ": option '" + u +
                 "' belongs to one invocation (a run never keeps it): ignored";
    *c = merged;
    return true;
}
