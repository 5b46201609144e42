// The trainer's option table (llmc/train_config.h): every option rejects a bad value with one line
// naming it; cross-option checks; the sampler (llmc/sampler.h) and JSON escaping (llmc/logger.h).
#include <cmath>
#include <map>
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

int main() {
    TrainConfig d;
    std::string err;
    CHECK(parse({}, &d, &err) && d.total_batch == 8 * 1024, "defaults parse; -d defaults to B*T*GPUs");
    // every numeric option: not a number, and (where bounded) out of range; one line naming it
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
    TrainConfig c;
    CHECK(!parse({"--lr-schedule", "exp"}, &c, &err) && err.find("--lr-schedule") != std::string::npos, "bad --lr-schedule");
    c = TrainConfig();
    CHECK(!parse({"--rendezvous", "udp"}, &c, &err) && err.find("--rendezvous") != std::string::npos, "bad --rendezvous");
    c = TrainConfig();
    CHECK(!parse({"--resume"}, &c, &err) && err.find("--out") != std::string::npos, "--resume needs --out");
    c = TrainConfig();
    CHECK(!parse({"-b", "4", "-t", "1024", "-d", "10000"}, &c, &err) && err.find("not a multiple of B*T*GPUs") != std::string::npos,
          "global batch not a multiple of B*T");
    c = TrainConfig();
    CHECK(!parse({"-b", "4", "-t", "1024", "-d", "12288"}, &c, &err, 2), "global batch not a multiple of B*T*GPUs (2 GPUs)");
    c = TrainConfig();
    CHECK(parse({"-b", "4", "-t", "1024", "-d", "16384"}, &c, &err, 2) && c.total_batch == 16384, "a valid global batch on 2 GPUs");
    for (const char* bad : {"1", "x:3", "2:5", "-1:3", "0:0", "0:3x"}) {
        c = TrainConfig();
        CHECK(!parse({"--debug-nan", bad}, &c, &err, 2) && err.find("--debug-nan") != std::string::npos,
              std::string("bad --debug-nan ") + bad + " on 2 GPUs");
    }
    c = TrainConfig();
    CHECK(parse({"--debug-nan", "1:3"}, &c, &err, 2) && c.debug_nan_rank == 1 && c.debug_nan_step == 3, "--debug-nan 1:3 on 2 GPUs");
    c = TrainConfig();
    CHECK(!parse({"--bogus"}, &c, &err) && err == "unknown option '--bogus' (see --help)", "unknown option");
    // --help lists every option of the table
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

    // sampler: top-1 is argmax; the distribution follows softmax; seeded reproducibility
    std::vector<float> logits = {0.0f, 2.0f, 1.0f, -1.0f};
    uint64_t rng = rng_seed(1);
    CHECK(sample_top_k(logits.data(), 4, 1, 1.0f, &rng) == 1, "top-1 is the argmax");
    std::map<int, int> counts;
    for (int i = 0; i < 20000; i++) counts[sample_top_k(logits.data(), 4, 0, 1.0f, &rng)]++;
    const double z = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
    CHECK(std::fabs(counts[1] / 20000.0 - std::exp(2.0) / z) < 0.02 && std::fabs(counts[3] / 20000.0 - std::exp(-1.0) / z) < 0.01,
          "sampling follows the softmax");
    std::map<int, int> k2;
    for (int i = 0; i < 2000; i++) k2[sample_top_k(logits.data(), 4, 2, 1.0f, &rng)]++;
    CHECK(k2.size() == 2 && k2.count(1) && k2.count(2), "top-2 only samples the two largest");
    uint64_t a = rng_seed(7), b = rng_seed(7);
    bool same = true;
    for (int i = 0; i < 100; i++) same &= sample_top_k(logits.data(), 4, 0, 0.8f, &a) == sample_top_k(logits.data(), 4, 0, 0.8f, &b);
    CHECK(same, "same seed, same samples");

    CHECK(json_string("a\"b\\c\nd\x01") == "\"a\\\"b\\\\c\\nd\\u0001\"", "JSON string escaping");
    CHECK(json_number(INFINITY) == "null" && json_number(NAN) == "null" && json_number(2.5) == "2.5", "JSON numbers: inf/nan as null");
    return check_finish();
}
