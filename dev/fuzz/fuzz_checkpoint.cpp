// Checkpoints (llmc/checkpoint.h, run_options.h): byte 0 picks a file of a valid tiny checkpoint (0 model.bin,
// 1 state.bin, 2 options.txt; 3/4 overwrite only the start of state.bin/model.bin), the rest replaces it; read as
// --resume does: checkpoint_read_state, checkpoint_read, dataloader_restore, configure_run. Seeds: the valid files
// (checkpoint_write); "@DIR@" in options.txt stands for this process's scratch directory.
#include "llmc/run_options.h"
#include "dev/fuzz/fuzz_common.h"

static const char* const FILES[] = {"model.bin", "state.bin", "options.txt"};

struct Setup {
    std::string out, ck, train;
    TrainState st{};
    size_t n = 0;
    std::string valid[3];   // the files' valid bytes
};

static GPT2Config tiny() {
    GPT2Config c;
    c.num_layers = 1; c.channels = 8; c.num_heads = 2; c.max_seq_len = 8; c.vocab_size = 50; c.padded_vocab_size = 128;
    return c;
}
static std::vector<const char*> resume_argv(const Setup& s) {
    return {"train_gpt2cu", "-o", s.out.c_str(), "--resume", "-i", s.train.c_str()};
}

static const Setup& setup() {
    static Setup s = [] {
        Setup s;
        s.out = fuzz_dir() + "/run";
        s.ck = s.out + "/step_00000007";
        s.train = fuzz_dir() + "/train.bin";
        std::vector<uint16_t> tokens(200);
        for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(i * 7 % 50);
        std::string err;
        if (!shard_write(s.train, tokens.data(), tokens.size(), &err)) seed_fail(err);
        TrainConfig tc;
        std::vector<const char*> argv = {"train_gpt2cu", "-i", s.train.c_str(), "-b", "1", "-t", "4", "-d", "8", "-x", "20",
                                         "-o", s.out.c_str(), "--lr-schedule", "wsd"};
        bool help;
        if (!parse_train_config(&tc, (int)argv.size(), argv.data(), 1, &help, &err)) seed_fail(err);
        s.st.step = 7; s.st.adam_t = 7; s.st.loss_scale = 1; s.st.world = 1; s.st.precision = 1;
        s.st.loader = DataLoaderState{1, 0, 3, 1, 0};
        s.st.config = tiny();
        s.st.data_files = 1; s.st.data_tokens = tokens.size();
        s.st.spike.loss = {3.5, 0.25, 7};
        s.n = param_layout(s.st.config).total;
        std::vector<float> w(s.n);
        for (size_t i = 0; i < s.n; i++) w[i] = (float)i / 64;
        if (!checkpoint_write(s.out, s.st, w.data(), w.data(), w.data(), 0, &err, train_options_text(tc))) seed_fail(err);
        for (int i = 0; i < 3; i++) s.valid[i] = read_all(s.ck + "/" + FILES[i]);
        // the valid checkpoint reads back and resumes
        TrainState got;
        std::vector<float> a(s.n), b(s.n), c(s.n);
        TrainConfig rc;
        std::string note;
        const std::vector<const char*> ra = resume_argv(s);
        if (!checkpoint_read(s.ck, s.st, &got, a.data(), b.data(), c.data(), &err) ||
            !configure_run(&rc, 1, 1, (int)ra.size(), ra.data(), &help, &note, &err))
            seed_fail("the valid checkpoint does not read back: " + err);
        return s;
    }();
    return s;
}

// s with every `from` replaced by `to`.
static std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
    return s;
}

FUZZ_SEEDS(dir) {
    const Setup& s = setup();
    for (int i = 0; i < 3; i++) write_file(dir + "/" + FILES[i], std::string(1, (char)i) + replace_all(s.valid[i], fuzz_dir(), "@DIR@"));
    write_file(dir + "/state_header", std::string(1, 3) + s.valid[1].substr(0, 1024));
    write_file(dir + "/model_header", std::string(1, 4) + s.valid[0].substr(0, 1024));
}

static void one_line(const std::string& err) {
    fuzz_note(err);
    if (!fuzz_readable_line(err)) abort();
}

// What every accepted configuration holds (the trainer divides by these): else abort.
static void check_config(const TrainConfig& c, int world) {
    const long long bt = (long long)c.B * c.T * world;
    if (c.B < 1 || c.T < 1 || c.total_batch < bt || c.total_batch % bt != 0 || c.total_batch / bt > 1000000) abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const Setup& s = setup();
    if (size < 1) return 0;
    const int mode = data[0] % 5, which = mode == 3 ? 1 : mode == 4 ? 0 : mode;
    const std::string file = s.ck + "/" + FILES[which];
    // options.txt's train= is globbed: /*/*/*/*/*/* would walk the whole filesystem (slow as asked,
    // not a defect), so an options.txt with more than 4 glob characters is not tried
    if (which == 2 && std::count_if(data + 1, data + size, [](uint8_t ch) { return ch == '*' || ch == '?' || ch == '['; }) > 4) return 0;
    if (which == 2) write_file(file, replace_all(std::string((const char*)data + 1, size - 1), "@DIR@", fuzz_dir()));
    else if (mode >= 3) write_file(file, std::string((const char*)data + 1, std::min(size - 1, s.valid[which].size())) +
                                         s.valid[which].substr(std::min(size - 1, s.valid[which].size())));
    else write_file(file, data + 1, size - 1);
    std::string err;
    TrainState st{};
    if (checkpoint_read_state(s.ck, &st, &err)) {
        TrainState got{};
        std::vector<float> master(s.n), m(s.n), v(s.n);
        if (checkpoint_read(s.ck, s.st, &got, master.data(), m.data(), v.data(), &err)) {
            // the position, as the trainer restores it (on the loader of the run's own batch shape)
            DataLoader dl;
            if (!dataloader_open(&dl, s.train, 1, 4, 0, 1, 2, got.config.vocab_size, false, 42, &err)) abort();
            if (!dataloader_restore(&dl, got.loader, &err)) one_line(err);
            else if (!dataloader_next(&dl, &err)) abort();
        } else one_line(err);
    } else one_line(err);
    TrainConfig tc;
    bool help;
    std::string note;
    const std::vector<const char*> argv = resume_argv(s);
    err.clear();
    if (!configure_run(&tc, 1, 1, (int)argv.size(), argv.data(), &help, &note, &err)) one_line(err);
    else check_config(tc, 1);
    write_file(file, s.valid[which]);
    return 0;
}
