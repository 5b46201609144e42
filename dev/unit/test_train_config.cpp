// The trainer's option table (llmc/train_config.h): every option rejects a bad value with one line
// naming it; cross-option checks; the sampler (llmc/sampler.h) and JSON escaping (llmc/logger.h).
#include <cmath>
#include <map>
#include <unistd.h>
#include "llmc/train_config.h"
#include "llmc/sampler.h"
#include "llmc/logger.h"
#include "dev/unit/check.h"

static bool parse(std::vector<std::string> args, TrainConfig* c, std::string* err, int world = 1) {
    std::vector<const char*> argv = {"train_gpt2cu"};
    for (auto& a : args) argv.push_back(a.c_str());
    bool help;
    return parse_train_config(c, (int)argv.size(), argv.data(), world, &help, err);
}

// "values inside an option's range that still make no sense": refused with one line holding `expect`
static void refuses(std::vector<std::string> args, const std::string& expect, int world = 1) {
    TrainConfig x; std::string e;
    const bool ok = parse(args, &x, &e, world);
    std::string name;
    for (auto& a : args) name += printable(a) + " ";   // (control bytes as \xNN: one line)
    check_report(!ok && e.find(expect) != std::string::npos && e.find('\n') == std::string::npos, "refused: " + name, "got '" + e + "'");
}

// resumes the run whose options.txt is `kept` (runs/a, step 50) with the command line `args`
static bool resumed(const std::string& kept, std::vector<std::string> args, TrainConfig* out, std::string* note, std::string* e) {
    std::vector<const char*> argv = {"train_gpt2cu"};
    for (auto& a : args) argv.push_back(a.c_str());
    *out = TrainConfig();
    return resume_config(out, kept, "runs/a/step_00000050/options.txt", (int)argv.size(), argv.data(), 1, note, e);
}

// resumes from the options `text` (read from opts.txt) with the command line `args`
static bool resume_with(const std::string& text, std::vector<const char*> args, std::string* n, std::string* e) {
    args.insert(args.begin(), "train_gpt2cu");
    TrainConfig x;
    return resume_config(&x, text, "opts.txt", (int)args.size(), args.data(), 1, n, e);
}

// the logits most sampler tests draw from: token 1 the largest, then 2, 0, 3
static std::vector<float> sampler_logits() { return {0.0f, 2.0f, 1.0f, -1.0f}; }

// no options: they parse, and -d defaults to B*T*GPUs
static void test_defaults() {
    TrainConfig d;
    std::string err;
    CHECK(parse({}, &d, &err) && d.total_batch == 8 * 1024, "defaults parse; -d defaults to B*T*GPUs");
}

// every numeric option: not a number, and (where bounded) out of range; one line naming it
static void test_numeric_options_reject_bad_values() {
    TrainConfig probe;
    int numeric = 0, bad_ok = 0;
    for (const Option& o : train_options(&probe)) {
        if (o.type == OPT_STRING || o.type == OPT_FLAG) continue;
        numeric++;
        const std::string flag = std::string("--") + o.name;
        TrainConfig c; std::string e1, e2;
        bool ok1 = !parse({flag, "x1"}, &c, &e1) && e1.find(flag) != std::string::npos && e1.find('\n') == std::string::npos;
        bool ok2 = true;
        if (std::isfinite(o.min)) {
            TrainConfig c2;
            char below[64]; snprintf(below, sizeof below, "%g", o.min - 1);
            ok2 = !parse({flag, below}, &c2, &e2) && e2.find("out of range") != std::string::npos && e2.find(flag) != std::string::npos;
        }
        bad_ok += ok1 && ok2;
        if (!(ok1 && ok2)) printf("  %s: '%s' / '%s'\n", flag.c_str(), e1.c_str(), e2.c_str());
    }
    check_report(bad_ok == numeric, "every numeric option rejects a bad value (" + std::to_string(numeric) + " options)");
}

// The largest micro-batch the options accept, B*T tokens, must fit an int: the model code keeps it
// in one (gpt2_step.cuh's `int BT = B * T`, the encoder's and LayerNorm's row counts, the token
// buckets' positions, gpt2_set_batch), while every product with C, Vp or 4C is taken in size_t.
// -b and -t together: 4096 * 65536 = 2^28. Raising either range past 2^31 tokens needs those ints
// widened first; this check says so before a GPU run would.
static void test_largest_micro_batch_fits_int() {
    TrainConfig probe;
    double max_b = 0, max_t = 0;
    for (const Option& o : train_options(&probe)) {
        if (o.target == &probe.B) max_b = o.max;
        if (o.target == &probe.T) max_t = o.max;
    }
    CHECK(max_b * max_t <= (double)INT_MAX, "the largest -b times the largest -t fits an int (B*T tokens)");
    TrainConfig c; std::string err;
    const bool ok = parse({"-b", std::to_string((long long)max_b), "-t", std::to_string((long long)max_t)}, &c, &err);
    CHECK(ok && c.total_batch == (long long)max_b * (long long)max_t, "the largest -b and -t parse; -d follows as B*T exactly");
}

// bad choices, a --resume without --out, a global batch or --debug-nan the GPU count refuses, an unknown option
static void test_cross_option_checks() {
    TrainConfig c;
    std::string err;
    CHECK(!parse({"--lr-schedule", "exp"}, &c, &err) && err == "option --lr-schedule: 'exp' is not one of cosine, linear, constant, wsd",
          "bad --lr-schedule: one line with the choices");
    c = TrainConfig();
    CHECK(!parse({"--rendezvous", "udp"}, &c, &err) && err.find("--rendezvous") != std::string::npos, "bad --rendezvous");
    c = TrainConfig();
    CHECK(!parse({"--resume"}, &c, &err) && err.find("--out") != std::string::npos, "--resume needs --out");
    // the checkpoint options without a run directory (or in a run that writes none) would be dropped in silence
    refuses({"-n", "100"}, "option --checkpoint-every needs --out (the run directory the checkpoints are written to)");
    refuses({"--keep-checkpoints", "2"}, "option --keep-checkpoints needs --out");   // given, even at its default
    refuses({"--checkpoint-async", "0"}, "option --checkpoint-async needs --out");
    refuses({"--bench", "-o", "r", "-n", "5"}, "option --checkpoint-every: not with --bench, which writes no checkpoints");
    refuses({"--eval-only", "--keep-checkpoints", "0"}, "option --keep-checkpoints: not with --eval-only, which writes no checkpoints");
    // the benchmark's options without --bench: the run would train instead of timing
    refuses({"--bench-steps", "50"}, "option --bench-steps: only with --bench");
    refuses({"--bench-warmup", "5"}, "option --bench-warmup: only with --bench");   // given, even at its default
    refuses({"--bench-profile"}, "option --bench-profile: only with --bench");
    c = TrainConfig();
    CHECK(parse({"--bench-steps", "7", "--bench", "--bench-warmup", "0", "--bench-profile"}, &c, &err) && c.bench_steps == 7 &&
              c.bench_warmup == 0 && c.bench_profile,
          "the --bench-* options with --bench, given before or after it");
    c = TrainConfig();
    CHECK(parse({"-o", "r", "-n", "100", "--keep-checkpoints", "0", "--checkpoint-async", "0"}, &c, &err) && c.checkpoint_every == 100 &&
          c.keep_checkpoints == 0, "-n, --keep-checkpoints and --checkpoint-async with --out");
    c = TrainConfig();
    c = TrainConfig();
    CHECK(!parse({"-b", "4", "-t", "1024", "-d", "10000"}, &c, &err) && err.find("not a multiple of B*T*GPUs") != std::string::npos,
          "global batch not a multiple of B*T");
    c = TrainConfig();
    CHECK(!parse({"-b", "4", "-t", "1024", "-d", "12288"}, &c, &err, 2), "global batch not a multiple of B*T*GPUs (2 GPUs)");
    c = TrainConfig();
    CHECK(parse({"-b", "4", "-t", "1024", "-d", "16384"}, &c, &err, 2) && c.total_batch == 16384, "a valid global batch on 2 GPUs");
    // (4294967296 and 4294967297 wrap to 0 and 1 through sscanf's %d: refused, not taken as rank 0 or step 1)
    for (const char* bad : {"1", "x:3", "2:5", "-1:3", "0:0", "0:3x", "4294967296:3", "0:4294967297", ":3", "0:", " 0:3", "0: 3"}) {
        c = TrainConfig();
        CHECK(!parse({"--debug-nan", bad}, &c, &err, 2) && err.find("--debug-nan") != std::string::npos,
              std::string("bad --debug-nan ") + bad + " on 2 GPUs");
    }
    c = TrainConfig();
    CHECK(parse({"--debug-nan", "1:3"}, &c, &err, 2) && c.debug_nan_rank == 1 && c.debug_nan_step == 3, "--debug-nan 1:3 on 2 GPUs");
    c = TrainConfig();
    CHECK(!parse({"--bogus"}, &c, &err) && err == "unknown option '--bogus' (see --help)", "unknown option");
}

// values inside an option's range that still make no sense are refused; their sensible neighbours parse
static void test_values_in_range_that_make_no_sense() {
    refuses({"-x", "0"}, "option --max-steps: 0 is not a step count");
    refuses({"--beta1", "1"}, "option --beta1: must be below 1");
    refuses({"--beta2", "1"}, "option --beta2: must be below 1");
    refuses({"--eps", "0"}, "option --eps: must be above 0");
    refuses({"-b", "1", "-t", "1", "-d", "4294967297"}, "micro-steps of B*T*GPUs tokens per step, more than the 1000000 allowed");
    refuses({"--skip-loss-z", "0.5"}, "option --skip-loss-z: 0.5 would skip a large share of ordinary steps (every z above it): 0 (off) or at least 1");
    refuses({"--skip-norm-z", "0.99"}, "option --skip-norm-z: 0.99 would skip");
    refuses({"--spike-window", "15"}, "option --spike-window: 15 is out of range [16, 1000000]");
    // a refused text value is shown with its control bytes as \xNN, so the error stays one line (found by fuzzing)
    refuses({"--lr-schedule", "cos\nine"}, "option --lr-schedule: 'cos\\x0aine' is not one of");
    refuses({"--rendezvous", "udp\n"}, "option --rendezvous: 'udp\\x0a' is not tcp or file:PATH");
    // file: without a PATH: rank 0 wrote the id to "./.tmp", could not rename it to "", and the
    // other ranks polled "" for 120 s; refused before any GPU work instead
    refuses({"--rendezvous", "file:"}, "option --rendezvous: 'file:' names no PATH (file:PATH: the id file every rank reads)");
    refuses({"--debug-nan", "0\n:3"}, "option --debug-nan: '0\\x0a:3' is not RANK:STEP");
    // options.txt is one option a line: a value with a line break would split there, and its
    // rest would read as another option on --resume (found by fuzzing the round trip)
    refuses({"-i", "a.bin\nlr=0.5"}, "option --train: 'a.bin\\x0alr=0.5' holds a line break, which the options a run keeps");
    refuses({"--tokenizer", "t.bin\r"}, "option --tokenizer: 't.bin\\x0d' holds a line break");
    TrainConfig c;
    std::string err;
    CHECK(parse({"--skip-loss-z", "6", "--skip-norm-z", "1", "--spike-window", "16"}, &c, &err) && c.skip_loss_z == 6 &&
          c.skip_norm_z == 1 && c.spike_window == 16, "--skip-loss-z 6 --skip-norm-z 1 --spike-window 16");
    CHECK(option_on_resume("skip-loss-z") == OnResume::kept && option_on_resume("skip-norm-z") == OnResume::kept &&
          option_on_resume("spike-window") == OnResume::kept && option_on_resume("debug-bad-batch") == OnResume::not_kept,
          "--resume keeps the spike guard's options (they may change), not --debug-bad-batch");
    c = TrainConfig();
    CHECK(parse({}, &c, &err) && c.skip_loss_z == 0 && c.skip_norm_z == 0 && c.spike_window == 128, "the spike guard is off by default");
    c = TrainConfig();
    CHECK(parse({"--val-batches", "3", "-x", "-1", "--beta2", "0.999"}, &c, &err, 2) && c.val_batches == 3,
          "--val-batches 3 on 2 GPUs (batches of the validation set's rows, not per GPU: any count)");
}

// what a checkpoint keeps (options.txt) reads back exactly, and a bad file is one line naming it.
// Returns the kept text of *run, which the resume tests below start from.
static std::string test_options_txt(TrainConfig* run) {
    std::string err;
    CHECK(parse({"-b", "16", "-t", "256", "-d", "8192", "-l", "0.00061234567", "--warmup", "10", "-x", "100", "-v", "25",
                 "--shuffle", "-o", "runs/a", "--debug-exit-after", "7", "--lr-schedule", "linear"}, run, &err), "a run's options");
    const std::string kept = train_options_text(*run);
    CHECK(kept.find("lr=0.0006123457\n") != std::string::npos && kept.find("shuffle=on\n") != std::string::npos &&
          kept.find("total-batch-tokens=8192\n") != std::string::npos, "kept: exact floats, flags on/off, the resolved -d");
    CHECK(kept.find("\nout=") == std::string::npos && kept.find("resume=") == std::string::npos &&
          kept.find("debug-exit-after=") == std::string::npos && kept.find("bench") == std::string::npos,
          "not kept: --out, --resume, the test and benchmark options");
    TrainConfig back;
    CHECK(options_apply_text(train_options(&back), kept, "options.txt", &err) && train_options_text(back) == kept,
          "options.txt reads back to the same options");
    CHECK(!options_apply_text(train_options(&back), "lr=0.1\nnope=3\n", "f/options.txt", &err) &&
          err == "f/options.txt: 'nope=3' is not NAME=VALUE of a known option", "options.txt: an unknown name is one line naming the file");
    CHECK(!options_apply_text(train_options(&back), "shuffle=yes\n", "f/options.txt", &err) &&
          err.find("f/options.txt: 'shuffle=yes': a flag is on or off") == 0, "options.txt: a bad flag value");
    CHECK(!options_apply_text(train_options(&back), "batch=0\n", "f/options.txt", &err) &&
          err.find("f/options.txt: option --batch: 0 is out of range") == 0, "options.txt: a value out of range");
    return kept;
}

// --resume merges options.txt with the command line: a defining option may only be given again unchanged
static void test_resume_merges_kept_options(const TrainConfig& run, const std::string& kept) {
    TrainConfig r; std::string note, err;
    CHECK(resumed(kept, {"-o", "runs/a", "--resume"}, &r, &note, &err) && r.B == 16 && r.T == 256 && r.total_batch == 8192 &&
          r.sched.lr == run.sched.lr && r.sched.warmup == 10 && r.max_steps == 100 && r.val_every == 25 && r.shuffle &&
          r.sched.kind == "linear" && r.resume && r.out == "runs/a" && r.debug_exit_after == 0 && note.empty(),
          "--resume alone continues with every kept option (not the test ones)");
    CHECK(resumed(kept, {"-o", "runs/a", "--resume", "-b", "8", "-v", "10", "-l", "0.00061234567"}, &r, &note, &err) && r.B == 8 &&
          r.val_every == 10 && r.total_batch == 8192, "given again: the same value of a defining option, new values of the others");
    CHECK(!resumed(kept, {"-o", "runs/a", "--resume", "-l", "3e-4"}, &r, &note, &err) &&
          err.find("option --lr: 0.0003 differs from 0.0006123457, which the run being resumed was started with "
                   "(runs/a/step_00000050/options.txt)") == 0 && err.find('\n') == std::string::npos,
          "a different learning rate is refused, naming the option, both values and the file");
    for (std::vector<std::string> a : {std::vector<std::string>{"-t", "128", "-d", "8192"}, {"-d", "16384"}, {"--seed", "1"},
                                       {"--warmup", "0"}, {"-i", "other_*.bin"}, {"--lr-schedule", "cosine"}}) {
        a.insert(a.begin(), {"-o", "runs/a", "--resume"});
        CHECK(!resumed(kept, a, &r, &note, &err) && err.find("differs from") != std::string::npos, "refused on resume: " + a[3] + " " + a[4]);
    }
    CHECK(resumed(kept, {"-o", "runs/a", "--resume", "--lr-decay-frac", "0.3"}, &r, &note, &err) && r.sched.decay_frac == 0.3f,
          "--lr-decay-frac may change on resume when the schedule is not wsd (it has no effect there)");
    // a damaged options.txt's value quoted escaped (found by dev/fuzz/fuzz_checkpoint: a NUL in train= ended the
    // message there, a \r would send the cursor back)
    CHECK(!resumed(kept + std::string("train=a\0\r*.bin\n", 15), {"-o", "runs/a", "--resume", "-i", "b.bin"}, &r, &note, &err) &&
          err.find("option --train: b.bin differs from a\\x00\\x0d*.bin, which") == 0, "a differing value from a damaged options.txt: both quoted escaped");
}

// a wsd run: its decay fraction defines it; --top-p may change
static void test_resume_wsd_decay_frac() {
    TrainConfig w;
    std::string note, err;
    CHECK(parse({"--lr-schedule", "wsd", "--lr-decay-frac", "0.25", "--top-p", "0.95"}, &w, &err) && w.sched.kind == "wsd" &&
          w.sched.decay_frac == 0.25f && w.top_p == 0.95f, "--lr-schedule wsd --lr-decay-frac 0.25 --top-p 0.95");
    const std::string text = train_options_text(w);
    std::vector<const char*> a1 = {"train_gpt2cu", "-o", "r", "--resume", "--lr-decay-frac", "0.3"};
    TrainConfig x;
    CHECK(!resume_config(&x, text, "r/options.txt", (int)a1.size(), a1.data(), 1, &note, &err) &&
          err.find("option --lr-decay-frac: 0.3 differs from 0.25") == 0, "a wsd run's --lr-decay-frac is refused with another value");
    std::vector<const char*> a2 = {"train_gpt2cu", "-o", "r", "--resume", "--top-p", "0.5"};
    CHECK(resume_config(&x, text, "r/options.txt", (int)a2.size(), a2.data(), 1, &note, &err) && x.top_p == 0.5f &&
          x.sched.decay_frac == 0.25f, "--top-p may change on resume; the kept decay fraction stays");
}

// a wsd run's changed --max-steps: whether the learning rate jumps where the checkpoint resumes
static void test_resume_wsd_max_steps_note() {
    TrainConfig w100;
    std::string note, err;
    CHECK(parse({"--lr-schedule", "wsd", "-x", "100"}, &w100, &err), "a wsd run of 100 steps (decay over the last 20)");
    const std::string t100 = train_options_text(w100);
    auto extended = [&](const char* steps, int at, std::string* n) {
        std::vector<const char*> a = {"train_gpt2cu", "-o", "r", "--resume", "-x", steps};
        TrainConfig y;
        return resume_config(&y, t100, "r/options.txt", (int)a.size(), a.data(), 1, n, &err, at) && y.max_steps == atoi(steps);
    };
    CHECK(extended("200", 40, &note) && note.find("now runs over the new count (at step 41, where it resumes, its learning rate is "
                                                  "the same either way: 6.000e-04)") != std::string::npos && note.find('\n') == std::string::npos,
          "wsd extended before its decay: one note, no jump");
    CHECK(extended("200", 90, &note) && note.find("\nnote: at step 91, where it resumes, the wsd learning rate jumps from 2.700e-04 to "
                                                  "6.000e-04: the decay over the last 20 of 100 steps began at step 81; a wsd run "
                                                  "extends without a jump only from a checkpoint before that") != std::string::npos,
          "wsd extended after its decay began: the jump, and where the decay began");
    CHECK(extended("70", 60, &note) && note.find("jumps from 6.000e-04 to 3.857e-04: over 70 steps the decay (the last 14) starts at "
                                                 "step 57, before this checkpoint") != std::string::npos,
          "wsd shortened to start its decay before the checkpoint: the jump down");
    CHECK(extended("200", -1, &note) && note.find("where it resumes") == std::string::npos, "no checkpoint yet (options.txt): no jump to report");
    CHECK(extended("60", 70, &note) && note.find("where it resumes") == std::string::npos,
          "a checkpoint past the new --max-steps: nothing to report about the rate (the run says it has no steps to run)");
}

// A resumed run loads its checkpoint's model.bin, but what it keeps (options.txt) is the model it
// started from: a later resume that finds no checkpoint (moved away) starts from that, not from a
// path of a checkpoint that is gone
static void test_resume_keeps_start_model() {
    TrainConfig c;
    c.model = "/runs/a/step_00000010/model.bin";
    c.start_model = "d12";
    const std::string text = train_options_text(c);
    CHECK(("\n" + text).find("\nmodel=d12\n") != std::string::npos && text.find("step_00000010") == std::string::npos,
          "options.txt keeps the model a resumed run started from, not its checkpoint's");
}

// -d left at 0 is kept as 0 (B*T*GPUs where the run resumes: before its first checkpoint a
// run may come back on another GPU count); an option the merge makes wrong names the file
static void test_resume_derived_total_batch() {
    TrainConfig d0;
    std::string note, err;
    CHECK(parse({"-b", "2", "-t", "64", "--val-batches", "3"}, &d0, &err) && d0.total_batch == 128 &&
          train_options_text(d0).find("\ntotal-batch-tokens=0\n") != std::string::npos, "-d derived from B*T*GPUs is kept as 0");
    const std::string text = train_options_text(d0);
    std::vector<const char*> argv2 = {"train_gpt2cu", "-o", "r", "--resume", "--val-batches", "4"};
    TrainConfig x;
    CHECK(resume_config(&x, text, "r/options.txt", (int)argv2.size(), argv2.data(), 2, &note, &err) && x.total_batch == 256 &&
          train_options_text(x).find("\ntotal-batch-tokens=0\n") != std::string::npos,
          "resumed on 2 GPUs: B*T*2 tokens per step, and the resumed run keeps -d at 0 in turn");
    TrainConfig d;   // an explicit -d of 128 tokens: B*T*GPUs = 2*64*4 = 512 on 4 GPUs does not divide it
    CHECK(parse({"-b", "2", "-t", "64", "-d", "128"}, &d, &err), "an explicit -d 128 at -b 2 -t 64");
    const std::string text_d = train_options_text(d);
    std::vector<const char*> argv3 = {"train_gpt2cu", "-o", "r", "--resume"};
    CHECK(!resume_config(&x, text_d, "r/options.txt", (int)argv3.size(), argv3.data(), 4, &note, &err) &&
          err == "option --total-batch-tokens: 128 is not a multiple of B*T*GPUs = 2*64*4 = 512 "
                 "(the options kept in r/options.txt included)", "a kept option the new GPU count refuses: the message names the file");
}

// a kept value this build refuses (a range narrowed since): refused unless the command line replaces it
static void test_kept_value_out_of_range(const std::string& kept_rel) {
    std::string note, err;
    std::string narrowed = kept_rel, tight = kept_rel;
    const size_t at = narrowed.find("\nspike-window=128\n"), t_at = tight.find("\nseq-len=");
    CHECK(at != std::string::npos && t_at != std::string::npos, "options.txt holds spike-window=128 and seq-len");
    narrowed.replace(at, 18, "\nspike-window=8\n");
    tight.replace(t_at, tight.find('\n', t_at + 1) - t_at, "\nseq-len=0");
    CHECK(!resume_with(narrowed, {"-o", "r", "--resume"}, &note, &err) &&
          err.find("opts.txt: option --spike-window: 8 is out of range") == 0, "a kept value out of range, not replaced: refused, naming the file");
    TrainConfig x;
    std::vector<const char*> a = {"train_gpt2cu", "-o", "r", "--resume", "--spike-window=32"};
    CHECK(resume_config(&x, narrowed, "opts.txt", (int)a.size(), a.data(), 1, &note, &err) && x.spike_window == 32,
          "a kept value out of range that the command line replaces: resumed with the new value");
    CHECK(!resume_with(tight, {"-o", "r", "--resume", "-t", "64"}, &note, &err) && err.find("opts.txt: option --seq-len: 0") == 0,
          "an option the run is defined by (--seq-len) out of range: refused even when given again");
    // a kept value too large for its int, replaced: read unchecked, it must not be converted to int
    // (undefined behaviour, found by fuzzing); the new value is taken
    std::string huge = kept_rel;
    const size_t b_at = huge.find("\nbatch=");
    huge.replace(b_at, huge.find('\n', b_at + 1) - b_at, "\nbatch=66666666666");
    std::vector<const char*> b = {"train_gpt2cu", "-o", "r", "--resume", "-b", "2"};
    CHECK(b_at != std::string::npos && resume_config(&x, huge, "opts.txt", (int)b.size(), b.data(), 1, &note, &err) && x.B == 2,
          "a kept batch=66666666666 (beyond int) that the command line replaces: resumed with the new value");
    // a kept batch=-4 replaced by -b 2: the run's tokens per step (-d left derived) would come out
    // as -4*T: refused, not resumed with a negative count (found by fuzzing)
    huge.replace(b_at, huge.find('\n', b_at + 1) - b_at, "\nbatch=-4");
    check_report(!resume_config(&x, huge, "opts.txt", (int)b.size(), b.data(), 1, &note, &err) &&
                     err.find("option --total-batch-tokens: -") == 0 && err.find(" is negative") != std::string::npos &&
                     err.find("opts.txt") != std::string::npos,
                 "a kept batch=-4 replaced by -b 2: its negative tokens per step refused, naming the file", "got '" + err + "'");
}

// paths are kept absolute; the training data is the same when its glob matches the same files.
// Runs in a temporary directory (and cds back out of it) since the glob is relative to it.
static void test_paths_kept_absolute() {
    std::string note, err;
    char tmpl[] = "/tmp/test_train_config[1]_XXXXXX";   // glob characters in the working directory
    const std::string dir = mkdtemp(tmpl);
    FILE* f = fopen((dir + "/shard_0.bin").c_str(), "wb");
    if (f) fclose(f);
    char home[PATH_MAX];
    const bool have_home = getcwd(home, sizeof home) != nullptr;
    if (chdir(dir.c_str()) != 0) printf("note: chdir %s failed\n", dir.c_str());
    TrainConfig rel;
    CHECK(parse({"-i", "shard_*.bin", "--rendezvous", "file:/x/id"}, &rel, &err), "a run on a relative glob");
    const std::string kept_rel = train_options_text(rel);
    std::string escaped;
    for (char ch : dir) { if (ch == '[' || ch == ']') escaped += '\\'; escaped += ch; }
    CHECK(kept_rel.find("\ntrain=" + escaped + "/shard_*.bin\n") != std::string::npos && kept_rel.find("rendezvous=") == std::string::npos,
          "kept: the glob made absolute (the directory's own [ ] escaped); --rendezvous (one launch's) not kept");
    CHECK(glob_files(escaped + "/shard_*.bin").size() == 1, "the kept glob matches the file from anywhere");
    CHECK(resume_with(kept_rel, {"-o", "r", "--resume", "-i", "./shard_0.bin"}, &note, &err), "-i naming the same file another way is the same data");
    test_kept_value_out_of_range(kept_rel);
    FILE* g = fopen((dir + "/shard_1.bin").c_str(), "wb");
    if (g) fclose(g);
    CHECK(!resume_with(kept_rel, {"-o", "r", "--resume", "-i", "shard_1.bin"}, &note, &err) && err.find("option --train:") == 0,
          "-i naming another file is refused");
    const std::string glob_abs = escaped + "/shard_*.bin";
    CHECK(resume_with(kept_rel + "old-option=3\n", {"-o", "r", "--resume", "-i", glob_abs.c_str()}, &note, &err) &&
          note == "note: opts.txt: option 'old-option' is not one of this build's: ignored", "an option this build does not know: ignored, with a note");
    if ((have_home && chdir(home) != 0) || system(("rm -rf " + dir).c_str()) != 0) printf("note: could not clean up %s\n", dir.c_str());
}

// --max-steps may change on resume, with a note on what that does to the schedule
static void test_resume_extends_max_steps(const std::string& kept) {
    TrainConfig r; std::string note, err;
    CHECK(resumed(kept, {"-o", "runs/a", "--resume", "-x", "200"}, &r, &note, &err) && r.max_steps == 200 &&
          note == "note: --max-steps 200, the run was started with 100: its linear learning-rate schedule now runs over the new count",
          "--max-steps extends a run, with a note on the schedule");
}

// --help lists every option of the table
static void test_help_lists_every_option() {
    char* buf = nullptr; size_t len = 0;
    FILE* mem = open_memstream(&buf, &len);
    TrainConfig h;
    options_help(mem, TRAIN_USAGE, train_options(&h));
    fclose(mem);
    std::string help(buf, len);
    free(buf);
    bool all = true;
    for (const Option& o : train_options(&h)) all &= help.find(std::string("--") + o.name) != std::string::npos;
    CHECK(all, "--help lists every option");
}

// sampler: top-1 is argmax; the distribution follows softmax; seeded reproducibility
static void test_sampler_top_k(uint64_t* rng) {
    const std::vector<float> logits = sampler_logits();
    CHECK(sample_token(logits.data(), 4, 1, 1.0f, 1.0f, rng) == 1, "top-1 is the argmax");
    std::map<int, int> counts;
    for (int i = 0; i < 20000; i++) counts[sample_token(logits.data(), 4, 0, 1.0f, 1.0f, rng)]++;
    const double z = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
    CHECK(std::fabs(counts[1] / 20000.0 - std::exp(2.0) / z) < 0.02 && std::fabs(counts[3] / 20000.0 - std::exp(-1.0) / z) < 0.01,
          "sampling follows the softmax");
    std::map<int, int> k2;
    for (int i = 0; i < 2000; i++) k2[sample_token(logits.data(), 4, 2, 1.0f, 1.0f, rng)]++;
    CHECK(k2.size() == 2 && k2.count(1) && k2.count(2), "top-2 only samples the two largest");
    uint64_t a = rng_seed(7), b = rng_seed(7);
    bool same = true;
    for (int i = 0; i < 100; i++) same &= sample_token(logits.data(), 4, 0, 1.0f, 0.8f, &a) == sample_token(logits.data(), 4, 0, 1.0f, 0.8f, &b);
    CHECK(same, "same seed, same samples");
}

// top-p: probabilities 0.5, 0.3, 0.15, 0.05 (token 2, 0, 1, 3): 0.6 keeps tokens 2 and 0 (0.8
// reaches it, 0.5 does not), in the proportion 5:3; 0.45 keeps token 2 alone
static void test_sampler_top_p(uint64_t* rng) {
    const std::vector<float> pl = {std::log(0.3f), std::log(0.15f), std::log(0.5f), std::log(0.05f)};
    std::map<int, int> nucleus;
    for (int i = 0; i < 20000; i++) nucleus[sample_token(pl.data(), 4, 0, 0.6f, 1.0f, rng)]++;
    CHECK(nucleus.size() == 2 && std::fabs(nucleus[2] / 20000.0 - 0.625) < 0.02, "top-p 0.6: the two most likely, 5:3 (" +
          std::to_string(nucleus[2]) + " of 20000 the most likely)");
    bool alone = true;
    for (int i = 0; i < 200; i++) alone &= sample_token(pl.data(), 4, 0, 0.45f, 1.0f, rng) == 2;
    CHECK(alone, "top-p 0.45: the most likely alone");
    std::map<int, int> both;
    for (int i = 0; i < 2000; i++) both[sample_token(pl.data(), 4, 3, 0.99f, 1.0f, rng)]++;
    CHECK(both.size() == 3 && !both.count(3), "top-k 3 then top-p 0.99: the three most likely (top-k applies first)");
}

// top-p 1 is the plain top-k sampler: same tokens from the same seed
static void test_sampler_top_p_one_is_top_k() {
    const std::vector<float> logits = sampler_logits();
    uint64_t c1 = rng_seed(9), c2 = rng_seed(9);
    bool unchanged = true;
    for (int i = 0; i < 200; i++) {   // one random number per token, drawn as the top-k softmax draw did
        const int x = sample_token(logits.data(), 4, 3, 1.0f, 0.9f, &c1);
        std::vector<double> p(3);
        const int order[3] = {1, 2, 0};
        double sum = 0;
        for (int j = 0; j < 3; j++) sum += p[j] = std::exp((logits[order[j]] - logits[1]) / 0.9);
        double u = rng_uniform(&c2) * sum;
        int y = order[2];
        for (int j = 0; j < 3; j++) { u -= p[j]; if (u < 0) { y = order[j]; break; } }
        unchanged &= x == y;
    }
    CHECK(unchanged, "top-p 1: one random number per token, the top-k softmax draw as before");
}

// a broken model's logits: NaN counts as -inf, +inf is taken greedily
static void test_sampler_nonfinite_logits(uint64_t* rng) {
    const std::vector<float> with_nan = {NAN, 1.0f, 3.0f, NAN}, with_inf = {0.0f, INFINITY, 1.0f, NAN}, all_nan = {NAN, NAN};
    bool finite_only = true;
    for (int i = 0; i < 200; i++) {
        const int t = sample_token(with_nan.data(), 4, 0, 0.9f, 1.0f, rng), u = sample_token(with_nan.data(), 4, 0, 1.0f, 1.0f, rng);
        finite_only &= (t == 1 || t == 2) && (u == 1 || u == 2);
    }
    CHECK(finite_only && sample_token(with_inf.data(), 4, 0, 0.5f, 1.0f, rng) == 1 &&
          (unsigned)sample_token(all_nan.data(), 2, 0, 0.5f, 1.0f, rng) < 2u, "NaN logits are never drawn; +inf is; all-NaN stays in range");
    // a token taken greedily still uses up its random number, so a rank whose logits overflowed
    // stays in step with one whose did not
    uint64_t a = rng_seed(3), b = rng_seed(3);
    sample_token(with_inf.data(), 4, 0, 1.0f, 1.0f, &a);
    sample_token(with_nan.data(), 4, 0, 1.0f, 1.0f, &b);
    CHECK(a == b, "one random number per token, also for a +inf logit taken greedily");
}

// A run without -d resumed with another -b keeps its tokens per step (more or fewer micro-steps);
// a -b whose B*T*GPUs does not divide them is refused
static void test_resume_new_batch_keeps_step_tokens() {
    TrainConfig d0;
    std::string note, err;
    CHECK(parse({"-b", "4", "-t", "64"}, &d0, &err), "a run of -b 4 -t 64, -d derived (256 tokens per step)");
    const std::string text = train_options_text(d0);
    TrainConfig x;
    CHECK(resumed(text, {"-o", "r", "--resume", "-b", "2"}, &x, &note, &err) && x.B == 2 && x.total_batch == 256,
          "resumed with -b 2: 256 tokens per step still, now two micro-steps of 128");
    check_report(!resumed(text, {"-o", "r", "--resume", "-b", "8"}, &x, &note, &err) &&
              err.find("option --total-batch-tokens: 256 is not a multiple of B*T*GPUs = 8*64*1 = 512") == 0,
          "resumed with -b 8: B*T*GPUs above the run's tokens per step is refused, naming both", "got '" + err + "'");
    CHECK(resumed(text, {"-o", "r", "--resume"}, &x, &note, &err) && x.total_batch == 256 &&
              train_options_text(x).find("\ntotal-batch-tokens=0\n") != std::string::npos,
          "resumed with the same -b: -d stays derived");
}

// options.txt lines a run never writes (one invocation's options), and CRLF or control bytes
static void test_resume_options_txt_oddities() {
    TrainConfig d0, x;
    std::string note, err;
    CHECK(parse({"-b", "4", "-t", "64"}, &d0, &err), "a run of -b 4 -t 64");
    const std::string text = train_options_text(d0);
    check_report(resumed(text + "bench=on\ndebug-nan=0:1\neval-only=on\n", {"-o", "r", "--resume"}, &x, &note, &err) && !x.bench &&
              x.debug_nan.empty() && !x.eval_only && note.find("option 'bench' belongs to one invocation (a run never keeps it): ignored") != std::string::npos,
          "bench=on, debug-nan, eval-only in options.txt: ignored with a note, not applied", "got '" + note + err + "'");
    std::string crlf;
    for (char ch : text) { if (ch == '\n') crlf += '\r'; crlf += ch; }
    check_report(resumed(crlf, {"-o", "r", "--resume"}, &x, &note, &err) && x.B == 4 && x.T == 64, "an options.txt with CRLF line ends", "got '" + err + "'");
    check_report(!resumed(text + std::string("\0\x01\x02\xff\n", 5), {"-o", "r", "--resume"}, &x, &note, &err) &&
              err == "runs/a/step_00000050/options.txt: '\\x00\\x01\\x02\\xff' is not NAME=VALUE of a known option",
          "control bytes in a line: shown as \\xNN, one line", "got '" + err + "'");
}

// --out checked before any GPU work (llmc/logger.h): the nearest existing ancestor decides
static void test_dir_can_be_used() {
    char tmpl[] = "/tmp/dcbuXXXXXX";
    const std::string dir = mkdtemp(tmpl);
    std::string err;
    FILE* f = fopen((dir + "/file").c_str(), "w");
    if (f) fclose(f);
    CHECK(dir_can_be_used(dir, true, &err) && dir_can_be_used(dir + "/new/deeper/", true, &err) && dir_can_be_used("relative/x", true, &err),
          "an existing directory, a missing one under it (trailing slash), a relative path");
    CHECK(!dir_can_be_used(dir + "/file/run", true, &err) && err == dir + "/file: not a directory", "a path under a file: names the file");
    const std::string long_name = dir + "/" + std::string(300, 'a') + "/run";
    CHECK(!dir_can_be_used(long_name, true, &err) && err.find("File name too long") != std::string::npos,
          "an error other than 'missing' (a name too long) is the answer, not a reason to look further up");
    rmdir((dir + "/file").c_str()); remove((dir + "/file").c_str()); rmdir(dir.c_str());
}

// options.txt values: a NUL inside a number is not its end; long text cut on a UTF-8 boundary
static void test_option_text_bytes() {
    TrainConfig x;
    std::string err;
    CHECK(!options_apply_text(train_options(&x), std::string("lr=0.5\0garbage\n", 15), "o.txt", &err) &&
              err == "o.txt: option --lr: '0.5\\x00garbage' is not a number", "a NUL inside a number: refused, shown as \\x00");
    const std::string cut = printable(std::string(79, 'a') + "\xc3\xa9" + "zz");
    CHECK(cut == std::string(79, 'a') + "\xc3\xa9...", "printable: a 2-byte UTF-8 character that straddles byte 80 finished, then cut");
    const std::string nuls = printable(std::string(500, '\0')), stray = printable(std::string(500, '\x80'));
    CHECK(nuls.size() == 80 + 3 && nuls.rfind("\\x00...") == 76 && stray.size() == 80 + 3 && stray.rfind("\\x80...") == 76,
          "printable: the result is bounded, not the text (500 NULs, 500 stray continuation bytes: 20 of each shown)");
    CHECK(printable("caf\xc3\xa9\x1b") == "caf\xc3\xa9\\x1b", "printable: UTF-8 kept, an escape byte shown as \\x1b");
    // bytes of no valid UTF-8 sequence, as \xNN: a message of them was no UTF-8 (a Latin-1 file's
    // line quoted by data/tokenize --jsonl); a character cut short, an overlong form, a surrogate
    const std::string latin1 = printable("caf\xe9 \xff"), cut_short = printable("a\xe2\x82"), overlong = printable("\xc0\xaf\xed\xa0\x80");
    CHECK(latin1 == "caf\\xe9 \\xff" && cut_short == "a\\xe2\\x82" && overlong == "\\xc0\\xaf\\xed\\xa0\\x80",
          "printable: invalid UTF-8 escaped byte by byte: " + latin1 + " " + cut_short + " " + overlong);
    CHECK(printable("\xe2\x82\xac \xf0\x9f\x91\x8b") == "\xe2\x82\xac \xf0\x9f\x91\x8b", "printable: 3- and 4-byte characters kept");
}

// JSON escaping (llmc/logger.h): strings escaped, inf/nan written as null
static void test_json() {
    CHECK(json_string("a\"b\\c\nd\x01") == "\"a\\\"b\\\\c\\nd\\u0001\"", "JSON string escaping");
    CHECK(json_number(INFINITY) == "null" && json_number(NAN) == "null" && json_number(2.5) == "2.5", "JSON numbers: inf/nan as null");
}

int main() {
    test_defaults();
    test_numeric_options_reject_bad_values();
    test_largest_micro_batch_fits_int();
    test_cross_option_checks();
    test_values_in_range_that_make_no_sense();

    TrainConfig run;   // a run's options; what its checkpoint keeps is what the resume tests start from
    const std::string kept = test_options_txt(&run);
    test_resume_merges_kept_options(run, kept);
    test_resume_wsd_decay_frac();
    test_resume_wsd_max_steps_note();
    test_resume_derived_total_batch();
    test_resume_keeps_start_model();
    test_resume_new_batch_keeps_step_tokens();
    test_resume_options_txt_oddities();
    test_paths_kept_absolute();
    test_resume_extends_max_steps(kept);
    test_help_lists_every_option();

    // one random stream through the sampler tests, in this order: a check's name prints a count drawn from it
    uint64_t rng = rng_seed(1);
    test_sampler_top_k(&rng);
    test_sampler_top_p(&rng);
    test_sampler_top_p_one_is_top_k();
    test_sampler_nonfinite_logits(&rng);

    test_dir_can_be_used();
    test_option_text_bytes();
    test_json();
    return check_finish();
}
