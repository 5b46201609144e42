// Training checkpoints (llmc/checkpoint.h): bit-exact round trip, keep_last, which directories
// count as complete, and the one-line rejection of every broken or mismatched checkpoint.
#include <unistd.h>
#include <sys/resource.h>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>
#include "llmc/checkpoint.h"
#include "dev/unit/check.h"

static GPT2Config tiny() {
    GPT2Config c;
    c.num_layers = 2; c.channels = 16; c.num_heads = 2; c.max_seq_len = 32; c.vocab_size = 100; c.padded_vocab_size = 128;
    return c;
}
static TrainState example_state(int step) {
    TrainState s{};
    s.step = step; s.adam_t = step - 10; s.loss_scale = 32768.5f; s.scaler_clean_steps = 17;
    s.loader = DataLoaderState{3, 1, 0x100000007ull, 1, 0};       // a 64-bit value with its high half set
    s.sample_rng = 0xDEADBEEFCAFEBABEull;
    s.world = 2; s.precision = 1; s.zero = 1;   // fp16: the build whose loss scale moves
    s.config = tiny();
    s.data_files = 3; s.data_tokens = 0x1000000005ull;               // 64-bit again
    s.spike.loss = {1.0 / 3.0, 4.9e-324, 2147483647};                // doubles: every bit counts (a denormal too)
    s.spike.norm = {-0.0, 0.123456789012345678, 128};
    s.bad_in_a_row = 4;                                              // of the 10 skipped steps (step - adam_t)
    return s;
}
// Arbitrary bit patterns (negative zero, denormals, NaNs with payloads too): bit-exactness is the point.
static std::vector<float> pattern(size_t n, uint64_t seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) { uint32_t b = (uint32_t)splitmix64(&seed); memcpy(&v[i], &b, 4); }
    v[0] = -0.0f; v[1] = 1e-42f;
    return v;
}
static bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
static bool same_state(const TrainState& a, const TrainState& b) {
    return a.step == b.step && a.adam_t == b.adam_t && memcmp(&a.loss_scale, &b.loss_scale, 4) == 0 &&
           a.scaler_clean_steps == b.scaler_clean_steps && a.loader.epoch == b.loader.epoch && a.loader.shard_pos == b.loader.shard_pos &&
           a.loader.block_pos == b.loader.block_pos && a.loader.micro == b.loader.micro && a.sample_rng == b.sample_rng &&
           a.world == b.world && a.precision == b.precision && a.zero == b.zero && ckpt_detail::same_config(a.config, b.config) &&
           a.data_files == b.data_files && a.data_tokens == b.data_tokens &&
           memcmp(&a.spike.loss.level, &b.spike.loss.level, 8) == 0 && memcmp(&a.spike.loss.spread2, &b.spike.loss.spread2, 8) == 0 &&
           memcmp(&a.spike.norm.level, &b.spike.norm.level, 8) == 0 && memcmp(&a.spike.norm.spread2, &b.spike.norm.spread2, 8) == 0 &&
           a.spike.loss.count == b.spike.loss.count && a.spike.norm.count == b.spike.norm.count && a.bad_in_a_row == b.bad_in_a_row;
}
static bool exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }
static void sh(const std::string& cmd) { if (system(cmd.c_str()) != 0) printf("note: '%s' failed\n", cmd.c_str()); }
static void touch(const std::string& p) { FILE* f = fopen(p.c_str(), "wb"); if (f) fclose(f); }
static void poke(const std::string& path, long off, int32_t v) {   // overwrite one int32 of a file
    FILE* f = fopen(path.c_str(), "r+b"); fseek(f, off, SEEK_SET); fwrite(&v, 4, 1, f); fclose(f);
}

// What most checks share: the temporary directory, the run directory the first checks write into
// (it does not exist yet: the first write creates it), and the arrays a checkpoint holds.
struct Fixture {
    std::string root, out;
    size_t n;                           // floats in each array (the tiny config's parameters)
    std::vector<float> master, m, v;
};

// --make OUT STEP WORLD PRECISION [SHARDS TOKENS]: writes one small checkpoint (tiny config;
// the training data it records: none unless given) and exits: how dev/unit/test_cli.sh gives
// the trainer's --resume real checkpoints to refuse
static int make_checkpoint(int argc, char** argv) {
    TrainState st = example_state(atoi(argv[3]));
    st.world = atoi(argv[4]); st.precision = atoi(argv[5]);
    if (st.precision != 1) { st.loss_scale = 1.0f; st.scaler_clean_steps = 0; }   // only fp16 scales its loss
    st.data_files = argc == 8 ? atoi(argv[6]) : 0;
    st.data_tokens = argc == 8 ? strtoull(argv[7], nullptr, 10) : 0;
    const std::vector<float> w = pattern(param_layout(st.config).total, 1);
    std::string e;
    if (checkpoint_write(argv[2], st, w.data(), w.data(), w.data(), 0, &e)) return 0;
    fprintf(stderr, "%s\n", e.c_str());
    return 1;
}

// The header's layout: the fields fit, and an older header (without the spike guard and the bad-step
// count, its last 11 ints) still reads.
static void test_header_layout() {
    CHECK(ckpt_detail::header_ints() <= CKPT_HEADER_INTS, "the state fields fit the header (" +
          std::to_string(ckpt_detail::header_ints()) + " of " + std::to_string(CKPT_HEADER_INTS) + " ints)");
    // a header from before the spike guard (zeros where its statistics go) reads as "nothing seen yet"
    int32_t h[CKPT_HEADER_INTS] = {};
    ckpt_detail::encode(example_state(5), h);
    for (int i = ckpt_detail::header_ints() - 11; i < ckpt_detail::header_ints(); i++) h[i] = 0;
    TrainState old{}, expect = example_state(5);
    ckpt_detail::decode(h, &old);
    expect.spike = SpikeStats{};
    expect.bad_in_a_row = 0;
    CHECK(same_state(old, expect), "an older header: the spike guard's statistics and the bad-step count read as zeros, the rest as written");
}

// Round trip: the first checkpoint of fx.out (step 1000), its files, and every bit back.
static void test_round_trip(const Fixture& fx) {
    const size_t n = fx.n;
    std::string err;
    const TrainState st = example_state(1000);
    CHECK(checkpoint_write(fx.out, st, fx.master.data(), fx.m.data(), fx.v.data(), 0, &err), "write a checkpoint");
    const std::string ck = fx.out + "/step_00001000";
    CHECK(exists(ck + "/model.bin") && exists(ck + "/state.bin") && exists(ck + "/DONE"), "step_00001000 holds model.bin, state.bin, DONE");
    CHECK(!exists(ck + ".tmp") && !exists(ck + "/model.bin.tmp"), "no .tmp left behind");
    std::string found;
    CHECK(checkpoint_find_latest(fx.out, &found, &err) && found == ck, "find_latest finds it");
    TrainState hdr{}, got{};
    CHECK(checkpoint_read_state(ck, &hdr, &err) && same_state(hdr, st), "read_state: every field back");
    std::vector<float> master2(n), m2(n), v2(n);
    CHECK(checkpoint_read(ck, st, &got, master2.data(), m2.data(), v2.data(), &err), "read the checkpoint");
    CHECK(same_state(got, st) && bits_equal(master2, fx.master) && bits_equal(m2, fx.m) && bits_equal(v2, fx.v), "round trip is bit-exact");
    CHECK(!exists(ck + "/options.txt"), "no options.txt when none are given");
}

// A StateIO as the GPU's (GpuState) behaves: every piece through one small staging buffer (chunk
// floats, copied in and out), a shard [lo, hi) of arrays 1 and 2 on reading; it records the order
// in which the writer asked for the arrays and what the reader put where.
struct StagedState : StateIO {
    const float* in[3] = {};
    std::vector<float> out[3], stage;
    size_t lo = 0, hi = SIZE_MAX;
    std::vector<int> order;           // array of each get(), in call order
    size_t put_floats = 0;
    int fail_array = -1;              // get() of this array returns null (a source that failed)
    explicit StagedState(size_t c) : stage(c) { chunk = c; }
    const float* get(int which, size_t offset, size_t count) override {
        if (count > chunk) abort();
        if (which == fail_array) { error = "staged: array " + std::to_string(which) + " cannot be had"; return nullptr; }
        order.push_back(which);
        memcpy(stage.data(), in[which] + offset, count * sizeof(float));
        return stage.data();
    }
    void wanted(int which, size_t* l, size_t* h) override { *l = which == 0 ? 0 : lo; *h = which == 0 ? SIZE_MAX : hi; }
    float* buffer(int, size_t, size_t count) override { if (count > chunk) abort(); return stage.data(); }
    void put(int which, size_t offset, size_t count) override {
        memcpy(out[which].data() + offset, stage.data(), count * sizeof(float));
        put_floats += count;
    }
};
static bool same_file(const std::string& a, const std::string& b) {
    std::string x, y, err;
    return read_text_file(a, &x, &err) && read_text_file(b, &y, &err) && x == y;
}

// Streamed through a staging buffer of 7 floats (no range a multiple of it): the files are byte
// for byte those of the in-place writer, the arrays are asked for in order 0, 1, 2, and a reader
// that wants a shard of Adam's m and v gets exactly that shard and all of the weights.
static void test_streamed(const Fixture& fx, const std::string& ck) {
    const size_t n = fx.n;
    std::string err;
    StagedState w(7);
    w.in[0] = fx.master.data(); w.in[1] = fx.m.data(); w.in[2] = fx.v.data();
    CHECK(checkpoint_write(fx.root + "/staged", example_state(1000), w, 0, &err), "write a checkpoint through a 7-float staging buffer");
    const std::string sk = fx.root + "/staged/step_00001000";
    CHECK(same_file(sk + "/model.bin", ck + "/model.bin") && same_file(sk + "/state.bin", ck + "/state.bin"),
          "its model.bin and state.bin are byte for byte the in-place writer's");
    CHECK(std::is_sorted(w.order.begin(), w.order.end()) && w.order.front() == 0 && w.order.back() == 2,
          "the writer asks for array 0, then 1, then 2 (ZeRO-1 gathers each once)");
    StagedState r(7);
    const float sentinel = -12345.0f;
    for (auto& o : r.out) o.assign(n, sentinel);
    r.lo = n / 3 + 1; r.hi = 2 * n / 3 + 5;                  // a shard that starts and ends mid-chunk
    TrainState got{};
    CHECK(checkpoint_read(ck, example_state(1000), &got, r, &err), "read it back through the staging buffer, a shard of m and v");
    bool shard_ok = bits_equal(r.out[0], fx.master) && r.put_floats == n + 2 * (r.hi - r.lo);
    for (size_t i = 0; i < n; i++) {
        const bool in = i >= r.lo && i < r.hi;
        shard_ok = shard_ok && (in ? memcmp(&r.out[1][i], &fx.m[i], 4) == 0 && memcmp(&r.out[2][i], &fx.v[i], 4) == 0
                                   : r.out[1][i] == sentinel && r.out[2][i] == sentinel);
    }
    CHECK(shard_ok, "the weights whole, m and v exactly in the shard, nothing else read");
    StagedState bad(7);
    bad.in[0] = fx.master.data(); bad.in[1] = fx.m.data(); bad.in[2] = fx.v.data();
    bad.fail_array = 2;   // Adam v cannot be had: state.bin fails after model.bin was written
    std::string found;
    CHECK(!checkpoint_write(fx.root + "/failed", example_state(1000), bad, 0, &err) && err == "staged: array 2 cannot be had" &&
          !exists(fx.root + "/failed/step_00001000.tmp") && !checkpoint_find_latest(fx.root + "/failed", &found, &err),
          "a source that fails mid-write: its own error line, no checkpoint, no .tmp left");
    HostState partial = HostState::writing(fx.master.data());   // m and v not given
    CHECK(!checkpoint_write(fx.root + "/partial", example_state(1000), partial, 0, &err) && err == "checkpoint: array 1 was not given",
          "a HostState without Adam's arrays: a clean error, not a null dereference");
}

// Whether the checkpoint ck (example_state(1000)) fits this run's data, GPU count and precision.
static void test_same_data_and_fits_run(const std::string& ck) {
    std::string err;
    const TrainState st = example_state(1000);
    CHECK(checkpoint_same_data(ck, st, 3, 0x1000000005ull, &err) && !checkpoint_same_data(ck, st, 4, 0x1000000005ull, &err) &&
          err == ck + ": the run read 3 training shards of 68719476741 tokens; --train now matches 4 of 68719476741 (shards added, "
                      "removed or rewritten?): its data position would not fit" &&
          !checkpoint_same_data(ck, st, 3, 7, &err), "same_data: another shard count or token count, one line");
    TrainState unrecorded = st;
    unrecorded.data_files = 0;
    CHECK(checkpoint_same_data(ck, unrecorded, 9, 9, &err), "same_data: a checkpoint that recorded no data is not checked");
    CHECK(checkpoint_fits_run(ck, st, 1, 2, &err) && !checkpoint_fits_run(ck, st, 1, 4, &err) &&
          err == ck + ": checkpoint written by 2 GPUs, this run has 4" && !checkpoint_fits_run(ck, st, 2, 2, &err) &&
          err == ck + ": checkpoint written by a fp16 build, this is a bf16 build", "fits_run: another GPU count or precision, one line");
}

// The files themselves: options.txt as given, model.bin a plain model file, state.bin's header and size
// (ck: the round trip's checkpoint).
static void test_checkpoint_files(const Fixture& fx, const std::string& ck) {
    const size_t n = fx.n;
    std::string err;
    const TrainState st = example_state(1000);
    std::string opts;
    CHECK(checkpoint_write(fx.root + "/opts", st, fx.master.data(), fx.m.data(), fx.v.data(), 0, &err, "lr=0.0006\nseed=7\n") &&
          read_text_file(fx.root + "/opts/step_00001000/options.txt", &opts, &err) && opts == "lr=0.0006\nseed=7\n",
          "the run's options go to options.txt, as given");
    std::vector<float> from_model(n);
    CHECK(model_file_read_params(ck + "/model.bin", tiny(), from_model.data(), &err) && bits_equal(from_model, fx.master), "model.bin is a plain model file");
    FILE* f = fopen((ck + "/state.bin").c_str(), "rb");
    int32_t h[4] = {};
    CHECK(fread(h, 4, 4, f) == 4 && h[0] == 20241130 && h[1] == 1 && h[2] == 1000 && h[3] == 990, "state.bin header: magic, version, step, adam_t");
    fseek(f, 0, SEEK_END);
    CHECK_EQ((long long)ftell(f), (long long)(1024 + 8 * n), "state.bin size: header + m + v");
    fclose(f);
}

// keep_last, and what counts as complete (in fx.out, which holds the round trip's step 1000).
static void test_keep_last(const Fixture& fx) {
    const std::string& out = fx.out;
    const size_t n = fx.n;
    const TrainState st = example_state(1000);
    std::string err, found;
    sh("mkdir -p " + out + "/step_00000500 " + out + "/step_00009000 " + out + "/step_00009500.tmp " + out + "/notes");
    touch(out + "/step_00009500.tmp/DONE");   // a .tmp never counts, even with a DONE inside
    CHECK(checkpoint_write(out, example_state(2000), fx.master.data(), fx.m.data(), fx.v.data(), 2, &err) &&
          checkpoint_write(out, example_state(3000), fx.master.data(), fx.m.data(), fx.v.data(), 2, &err), "write steps 2000 and 3000, keep_last 2");
    CHECK(!exists(out + "/step_00001000") && exists(out + "/step_00002000/DONE") && exists(out + "/step_00003000/DONE"), "keep_last deletes the older");
    CHECK(exists(out + "/step_00000500") && exists(out + "/step_00009000") && exists(out + "/step_00009500.tmp") && exists(out + "/notes"),
          "keep_last leaves incomplete and other directories alone");
    CHECK(checkpoint_find_latest(out, &found, &err) && found == out + "/step_00003000", "find_latest skips a dir without DONE and a .tmp dir");
    // rewriting a step (e.g. a rerun) replaces it; a stale .tmp from a crashed write is cleared
    std::vector<float> m3 = pattern(n, 4), master2(n), m2(n), v2(n);
    TrainState got{};
    // (and a stale .old, where a crashed rewrite had moved the previous copy aside)
    sh("mkdir -p " + out + "/step_00003000.tmp " + out + "/step_00003000.old && touch " + out + "/step_00003000.tmp/junk " + out +
       "/step_00003000.old/junk");
    CHECK(checkpoint_write(out, example_state(3000), fx.master.data(), m3.data(), fx.v.data(), 2, &err), "rewrite step 3000 over a stale .tmp");
    CHECK(checkpoint_read(out + "/step_00003000", st, &got, master2.data(), m2.data(), v2.data(), &err) && bits_equal(m2, m3) &&
          !exists(out + "/step_00003000.tmp") && !exists(out + "/step_00003000.old"), "the rewrite replaced it, the copy it moved aside gone");
}

// The numerically largest step, not the alphabetically largest name, is the latest and is kept.
static void test_latest_is_numerically_largest(const Fixture& fx) {
    std::string err, found;
    const std::string out2 = fx.root + "/run2";
    for (int s : {9, 10, 99999999, 100000000}) checkpoint_write(out2, example_state(s), fx.master.data(), fx.m.data(), fx.v.data(), 0, &err);
    CHECK(checkpoint_find_latest(out2, &found, &err) && found == out2 + "/step_100000000", "find_latest picks the numerically largest step");
    CHECK(checkpoint_write(out2, example_state(11), fx.master.data(), fx.m.data(), fx.v.data(), 1, &err) &&
          exists(out2 + "/step_100000000") && !exists(out2 + "/step_00000011"), "keep_last keeps the newest by step, not the one just written");
}

// Checks that reading dir (as expect) is refused with one line that names where and says what.
static void rejects(const std::string& name, const std::string& dir, const TrainState& expect, const std::string& where,
                    const std::string& what, size_t n) {
    TrainState s{};
    std::string e;
    std::vector<float> master2(n), m2(n), v2(n);
    const bool ok = checkpoint_read(dir, expect, &s, master2.data(), m2.data(), v2.data(), &e);
    check_report(!ok && e.find(where + ": ") == 0 && e.find(what) != std::string::npos && e.find('\n') == std::string::npos,
                 "rejects " + name, "got '" + e + "'");
}
// A copy, named name, of the good checkpoint at step 1000 of out3, to break.
static std::string broken(const std::string& out3, const std::string& name) {
    const std::string good = out3 + "/step_00001000", d = out3 + "/" + name;
    sh("cp -r " + good + " " + d);
    return d;
}
// Writes the good checkpoint (example_state(1000)) at step 1000 of out3 that the rejections break copies of.
static void write_good(const Fixture& fx, const std::string& out3) {
    std::string err;
    checkpoint_write(out3, example_state(1000), fx.master.data(), fx.m.data(), fx.v.data(), 0, &err);
}

// Rejections of an incomplete, cut short or lengthened checkpoint: one line naming the file or directory.
static void test_rejects_incomplete_or_truncated(const Fixture& fx, const std::string& out3) {
    const size_t n = fx.n;
    const TrainState st = example_state(1000);
    std::string err;
    TrainState got{};
    std::string d = broken(out3, "no_done");
    unlink((d + "/DONE").c_str());
    rejects("a checkpoint without DONE", d, st, d, "incomplete checkpoint (no DONE marker)", n);
    CHECK(!checkpoint_read_state(d, &got, &err) && err == d + ": incomplete checkpoint (no DONE marker)", "read_state also refuses it");
    d = broken(out3, "crashed");                 // a crash mid-write that still left DONE: state.bin cut short
    CHECK(truncate((d + "/state.bin").c_str(), 1024 + 4 * n) == 0, "truncate state.bin");
    rejects("a truncated state.bin", d, st, d + "/state.bin", "(truncated)", n);
    d = broken(out3, "tiny");
    CHECK(truncate((d + "/state.bin").c_str(), 100) == 0, "truncate state.bin to 100 bytes");
    rejects("a state.bin shorter than its header", d, st, d + "/state.bin", "truncated: 100 bytes", n);
    d = broken(out3, "trailing");
    sh("printf 'xxxx' >> " + d + "/state.bin");
    rejects("a state.bin with trailing data", d, st, d + "/state.bin", "(trailing data)", n);
}

// Rejections of a corrupt state.bin header or a wrong or missing model.bin: one line naming the file.
static void test_rejects_corrupt_header_or_model(const Fixture& fx, const std::string& out3) {
    const size_t n = fx.n;
    const TrainState st = example_state(1000);
    std::string err;
    std::string d = broken(out3, "magic");
    poke(d + "/state.bin", 0, 12345);
    rejects("a wrong magic", d, st, d + "/state.bin", "bad magic 12345", n);
    d = broken(out3, "version");
    poke(d + "/state.bin", 4, 2);
    rejects("a wrong version", d, st, d + "/state.bin", "unsupported version 2", n);
    // the spike guard's statistics are the 10 ints before the header's last (the bad-step count):
    // loss (level, spread^2: 2 each; count), then norm
    const int spike_at = ckpt_detail::header_ints() - 11;
    d = broken(out3, "spike_count");
    poke(d + "/state.bin", 4L * (spike_at + 4), -5);
    rejects("negative spike-guard count", d, st, d + "/state.bin", "impossible spike-guard statistics (count -5", n);
    d = broken(out3, "spike_huge");                               // a count of -5 beside a level of ~1e300:
    poke(d + "/state.bin", 4L * (spike_at + 4), -5);
    poke(d + "/state.bin", 4L * (spike_at + 1), 0x7e4fffff);        // the loss level's high half
    {
        TrainState s{};
        std::string e;
        std::vector<float> a(n), b(n), c(n);
        const bool refused = !checkpoint_read(d, st, &s, a.data(), b.data(), c.data(), &e);
        CHECK(refused && e.size() < 300 && e.find("level 2.67877e+300,") != std::string::npos,
              "impossible spike-guard statistics with a huge level: a short line ('" + e + "')");
    }
    d = broken(out3, "spike_nan");
    poke(d + "/state.bin", 4L * (spike_at + 6), 0x7ff80000);   // the norm level's high half: a NaN
    rejects("a NaN spike-guard level", d, st, d + "/state.bin", "impossible spike-guard statistics", n);
    // the training counters: step 1000 with AdamW at 1001 (more updates than steps), a NaN loss scale
    d = broken(out3, "adam_t");
    poke(d + "/state.bin", 4L * 3, 1001);
    rejects("AdamW's step beyond the step", d, st, d + "/state.bin", "impossible training state (step 1000, AdamW step 1001,", n);
    d = broken(out3, "bad_in_a_row");   // 11 inf/nan steps in a row, where only 10 steps were skipped (step 1000, AdamW 990)
    poke(d + "/state.bin", 4L * (ckpt_detail::header_ints() - 1), 11);
    rejects("more bad steps in a row than skipped steps", d, st, d + "/state.bin", "AdamW step 990, bad steps in a row 11,", n);
    d = broken(out3, "bad_negative");
    poke(d + "/state.bin", 4L * (ckpt_detail::header_ints() - 1), -1);
    rejects("a negative bad-step count", d, st, d + "/state.bin", "bad steps in a row -1,", n);
    d = broken(out3, "loss_scale");
    poke(d + "/state.bin", 4L * 4, 0x7fc00000);
    rejects("a NaN loss scale", d, st, d + "/state.bin", "impossible training state (step 1000, AdamW step 990, bad steps in a row 4, loss scale nan", n);
    d = broken(out3, "bf16_scaled");   // the header's precision (int 16) made bf16's, whose loss scale stays 1
    poke(d + "/state.bin", 4L * 16, 2);
    rejects("a bf16 checkpoint with a loss scale", d, st, d + "/state.bin",
            "impossible training state (step 1000, AdamW step 990, bad steps in a row 4, loss scale 32768.500000, clean steps 17, GPUs 2, precision 2", n);
    d = broken(out3, "model_config");
    GPT2Config other = tiny();
    other.vocab_size = 90;
    std::vector<float> other_w(param_layout(other).total);
    model_file_write(d + "/model.bin", other, other_w.data(), &err);
    rejects("model.bin config != state config", d, st, d + "/model.bin", "differs from state.bin's", n);
    d = broken(out3, "no_model");
    unlink((d + "/model.bin").c_str());
    rejects("a missing model.bin", d, st, d + "/model.bin", "cannot open", n);
    d = broken(out3, "state_dir");   // a state.bin that is a directory: said so, not "truncated: 4096 bytes"
    sh("rm " + d + "/state.bin && mkdir " + d + "/state.bin");
    rejects("a state.bin that is a directory", d, st, d + "/state.bin", "not a regular file", n);
}

// A good checkpoint refused by a run of another model, precision or GPU count; expect's other fields ignored.
static void test_rejects_another_run(const Fixture& fx, const std::string& out3) {
    const size_t n = fx.n;
    const TrainState st = example_state(1000);
    const std::string good = out3 + "/step_00001000";
    std::string err;
    TrainState run = st, got{};
    run.config.num_layers = 3;
    rejects("another model config", good, run, good,
            "model config mismatch: checkpoint has L=2 C=16 NH=2 V=100 Vp=128 maxT=32, this run L=3 C=16", n);
    run = st;
    run.precision = 2;
    rejects("another precision", good, run, good, "checkpoint written by a fp16 build, this is a bf16 build", n);
    run = st;
    run.world = 1;
    rejects("another GPU count", good, run, good, "checkpoint written by 2 GPUs, this run has 1", n);
    run = st;
    run.step = 5; run.zero = 0; run.loader = DataLoaderState{};
    std::vector<float> master2(n), m2(n), v2(n);
    CHECK(checkpoint_read(good, run, &got, master2.data(), m2.data(), v2.data(), &err) && same_state(got, st), "expect's other fields are ignored");
}

// Directories with no checkpoint (empty, missing) and one that cannot be written: one line each.
static void test_no_checkpoint_directories(const Fixture& fx) {
    const std::string& root = fx.root;
    const TrainState st = example_state(1000);
    std::string err, found;
    sh("mkdir -p " + root + "/empty");
    CHECK(!checkpoint_find_latest(root + "/empty", &found, &err) && err == root + "/empty: no complete checkpoint (step_*/DONE)", "find_latest: none");
    CHECK(!checkpoint_find_latest(root + "/missing", &found, &err) && err.find(root + "/missing: no complete checkpoint") == 0 &&
          err.find('\n') == std::string::npos, "find_latest: missing directory");
    std::vector<std::pair<long long, std::string>> none;
    CHECK(ckpt_detail::list_complete(root + "/missing", &none, &err) && none.empty(),
          "a directory not created yet holds no checkpoints (--resume on a rank that gets there first)");
    CHECK(!checkpoint_write("/proc/no_such_dir", st, fx.master.data(), fx.m.data(), fx.v.data(), 0, &err) && err.find("/proc/no_such_dir") == 0 &&
          err.find('\n') == std::string::npos, "write into an impossible directory: one line");
}

// A disk that fills up mid-write, as a file size limit gives it (EFBIG where ENOSPC would be): cut
// off in model.bin, early in state.bin and 3 bytes before its end, each write fails with one line
// naming the file, leaves no .tmp, and the checkpoint before it stays the newest complete one.
static void test_disk_full(const Fixture& fx) {
    const std::string out = fx.root + "/full";
    std::string err, found;
    CHECK(checkpoint_write(out, example_state(1000), fx.master.data(), fx.m.data(), fx.v.data(), 1, &err), "write step 1000");
    void (*old)(int) = signal(SIGXFSZ, SIG_IGN);   // past the limit write() fails instead of the process dying
    struct rlimit saved;
    getrlimit(RLIMIT_FSIZE, &saved);
    const long long model = 1024 + 4LL * (long long)fx.n, state = 1024 + 8LL * (long long)fx.n;
    int step = 1000;
    for (const auto& [limit, file] : {std::pair<long long, const char*>{model / 2, "model.bin"}, {model + 16, "state.bin"}, {state - 3, "state.bin"}}) {
        struct rlimit r = saved;
        r.rlim_cur = (rlim_t)limit;
        setrlimit(RLIMIT_FSIZE, &r);
        step += 1000;
        const bool wrote = checkpoint_write(out, example_state(step), fx.master.data(), fx.m.data(), fx.v.data(), 1, &err);
        setrlimit(RLIMIT_FSIZE, &saved);
        char name[32];
        snprintf(name, sizeof name, "/step_%08d", step);
        CHECK(!wrote && err.find(out + name + ".tmp/" + file + ": write failed: ") == 0 && err.find('\n') == std::string::npos &&
              !exists(out + name + ".tmp") && !exists(out + name) && checkpoint_find_latest(out, &found, &err) &&
              found == out + "/step_00001000",
              std::string("disk full at byte ") + std::to_string(limit) + " (" + file + "): one line, no .tmp, step 1000 still the newest");
    }
    signal(SIGXFSZ, old);
}

int main(int argc, char** argv) {
    // the sub-process mode dev/unit/test_cli.sh uses (see make_checkpoint)
    if ((argc == 6 || argc == 8) && std::string(argv[1]) == "--make") return make_checkpoint(argc, argv);
    char t[] = "/tmp/test_checkpoint_XXXXXX";
    const std::string root = mkdtemp(t);
    const size_t n = param_layout(tiny()).total;
    const Fixture fx{root, root + "/run", n, pattern(n, 1), pattern(n, 2), pattern(n, 3)};

    test_header_layout();
    test_round_trip(fx);
    const std::string ck = fx.out + "/step_00001000";   // the round trip's checkpoint
    test_same_data_and_fits_run(ck);
    test_streamed(fx, ck);
    test_checkpoint_files(fx, ck);
    test_keep_last(fx);                  // after the two above: it deletes their step 1000
    test_latest_is_numerically_largest(fx);
    const std::string out3 = root + "/run3";
    write_good(fx, out3);
    test_rejects_incomplete_or_truncated(fx, out3);
    test_rejects_corrupt_header_or_model(fx, out3);
    test_rejects_another_run(fx, out3);
    test_no_checkpoint_directories(fx);
    test_disk_full(fx);
    sh("rm -rf " + root);
    return check_finish();
}
