// Options (llmc/options.h, train_config.h): byte 0 picks a mode, the rest split at NULs: 0 the trainer's argv
// (parse_train_config; its options.txt must apply back the same), 1 options_apply_text, 2 resume_config (part 1
// the options.txt, the rest argv), 3 options_parse of a table of every type. Errors must be one readable line (no
// control byte; in mode 2 one line: a --train path is named as given), accepted
// configs hold B, T >= 1 and a positive multiple of B*T*GPUs tokens per step. Seeds: written here.
#include "llmc/train_config.h"
#include "dev/fuzz/fuzz_common.h"

static std::string joined(std::vector<std::string> parts, char mode) {
    std::string s(1, mode);
    for (size_t i = 0; i < parts.size(); i++) s += (i ? std::string(1, '\0') : "") + parts[i];
    return s;
}

FUZZ_SEEDS(dir) {
    TrainConfig tc;
    std::string err;
    const char* argv[] = {"train_gpt2cu", "-b", "4", "-t", "64", "--lr-schedule", "wsd", "-x", "100"};
    bool help;
    if (!parse_train_config(&tc, 9, argv, 1, &help, &err)) seed_fail(err);
    const std::string text = train_options_text(tc);
    write_file(dir + "/argv_0", joined({"-b", "4", "-t", "64", "--lr=3e-4", "-d", "512", "--shuffle", "--debug-nan", "0:3",
                                        "--skip-loss-z", "5", "-o", "out", "--resume", "--top-p", "0.9"}, 0));
    write_file(dir + "/argv_1", joined({"--eval-only", "-e", "d24", "-i", "a*.bin", "--zero=1", "--bucket-mb", "1e-3", "-h"}, 8));
    write_file(dir + "/text_0", std::string(1, 1) + text);
    write_file(dir + "/text_1", std::string(1, 1) + "lr=1e400\r\nbatch=+8\nfoo=bar\n=\nshuffle=on\n");
    write_file(dir + "/resume_0", joined({text, "-o", "r", "--resume", "-x", "200", "-b", "2"}, 2));
    write_file(dir + "/table_0", joined({"file", "-n", "5", "--real", "2.5e-310", "--big", "-9223372036854775808", "--s=", "-f", "--", "-"}, 7));
}

// What every accepted configuration holds (the trainer divides by these): else abort.
static void check_config(const TrainConfig& c, int world) {
    const long long bt = (long long)c.B * c.T * world;
    if (c.B < 1 || c.T < 1 || c.total_batch < bt || c.total_batch % bt != 0 || c.total_batch / bt > 1000000) abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] % 4, world = 1 + (data[0] >> 2) % 8;
    const std::string rest((const char*)data + 1, size - 1);
    std::vector<std::string> parts;
    for (size_t pos = 0;;) {
        const size_t end = std::min(rest.find('\0', pos), rest.size());
        parts.push_back(rest.substr(pos, end - pos));
        if (end == rest.size()) break;
        pos = end + 1;
    }
    // resume_config globs --train: a pattern like /*/*/*/*/*/* walks the whole filesystem (slow as
    // asked, not a defect), so arguments with more than 2 glob characters are not tried
    for (const std::string& p : parts)
        if (std::count_if(p.begin(), p.end(), [](char ch) { return ch == '*' || ch == '?' || ch == '['; }) > 2) return 0;
    std::vector<const char*> argv = {"train_gpt2cu"};
    for (size_t i = mode == 2 ? 1 : 0; i < parts.size(); i++) argv.push_back(parts[i].c_str());
    std::string err, note;
    bool help = false;
    TrainConfig tc;
    if (mode == 0) {
        options_given(train_options(&tc), (int)argv.size(), argv.data());
        if (!parse_train_config(&tc, (int)argv.size(), argv.data(), world, &help, &err)) { fuzz_check_error(err, ""); return 0; }
        if (help) return 0;
        check_config(tc, world);
        // what a checkpoint keeps applies back to the same options
        const std::string text = train_options_text(tc);
        TrainConfig back;
        if (!options_apply_text(train_options(&back), text, "options.txt", &err)) { fprintf(stderr, "%s\n", err.c_str()); abort(); }
        if (train_options_text(back) != text) abort();
    } else if (mode == 1) {
        std::vector<std::string> unknown;
        if (!options_apply_text(train_options(&tc), rest, "options.txt", &err, data[0] & 4 ? &unknown : nullptr)) {
            fuzz_check_error(err, "options.txt: ");
        }
    } else if (mode == 2) {
        for (size_t i = 1; i < argv.size(); i++)   // configure_run answers --help before any resume_config
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 0;
        if (!resume_config(&tc, parts[0], "options.txt", (int)argv.size(), argv.data(), world, &note, &err, (int)(data[0] >> 2) - 1)) {
            fuzz_note(err);   // (a --train that differs is named as given: a path, like every path in an error)
            if (err.find('\n') != std::string::npos && err.rfind("option --train: ", 0) != 0) abort();
        } else check_config(tc, world);
    } else {
        struct { int i = 0; long long l = 0; float f = 0; double d = 0; std::string s; bool b = false; } v;
        const std::vector<Option> table = {{"num", 'n', OPT_INT, &v.i, "int", -5, 1e9}, {"big", 0, OPT_INT64, &v.l, "int64"},
                                           {"flt", 0, OPT_FLOAT, &v.f, "float", 0, 1}, {"real", 'r', OPT_DOUBLE, &v.d, "double"},
                                           {"s", 0, OPT_STRING, &v.s, "string"}, {"flag", 'f', OPT_FLAG, &v.b, "flag"}};
        std::vector<std::string> positional;
        if (!options_parse(table, (int)argv.size(), argv.data(), &help, &err, data[0] & 4 ? &positional : nullptr)) {
            fuzz_check_error(err, "");
        }
        for (const Option& o : table) option_value_exact(o), option_value_string(o);
    }
    return 0;
}
