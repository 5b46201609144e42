// The option table parser (llmc/options.h), LR schedules (llmc/schedule.h) and the fp16 loss
// scaler (llmc/loss_scale.h).
#include <cmath>
#include "llmc/options.h"
#include "llmc/schedule.h"
#include "llmc/loss_scale.h"
#include "dev/unit/check.h"

struct Cfg { int b = 4; long long d = 0; float lr = 1e-3f; std::string name = "x"; bool flag = false; };
static std::vector<Option> table(Cfg* c) {
    return {{"batch", 'b', OPT_INT, &c->b, "batch", 1, 64}, {"total", 'd', OPT_INT64, &c->d, "tokens", 0, 1e12},
            {"lr", 'l', OPT_FLOAT, &c->lr, "lr", 0, 1}, {"name", 0, OPT_STRING, &c->name, "name"},
            {"flag", 'f', OPT_FLAG, &c->flag, "flag"}};
}
static bool parse(std::vector<const char*> args, Cfg* c, std::string* err, bool* help = nullptr) {
    args.insert(args.begin(), "prog");
    bool h;
    return options_parse(table(c), (int)args.size(), args.data(), help ? help : &h, err);
}

int main() {
    Cfg c; std::string err;
    CHECK(parse({"-b", "8", "--total=524288", "--lr", "3e-4", "--name", "abc", "-f"}, &c, &err) && c.b == 8 &&
          c.d == 524288 && std::fabs(c.lr - 3e-4f) < 1e-9 && c.name == "abc" && c.flag, "parses long, short, = and flags");
    {   // the options a command line sets, as the parser reads them (a value is not an option)
        Cfg t;
        std::vector<const char*> args = {"prog", "-b", "8", "--total=5", "bogus", "-f", "--name", "-b", "--lr", "0.1"};
        const std::vector<std::string> given = options_given(table(&t), (int)args.size(), args.data());
        CHECK((given == std::vector<std::string>{"batch", "total", "flag", "name", "lr"}),
              "options_given: short, long, = and flag forms by their long names; '-b' as --name's value is no option");
    }
    auto rejects = [](std::vector<const char*> args, const std::string& expect, const char* name) {
        Cfg c; std::string err;
        bool ok = parse(args, &c, &err);
        check_report(!ok && err.find(expect) != std::string::npos && err.find('\n') == std::string::npos, name, "got '" + err + "'");
    };
    rejects({"--nope"}, "unknown option '--nope'", "unknown long option");
    rejects({"-z", "1"}, "unknown option '-z'", "unknown short option");
    rejects({"-b"}, "option --batch needs a value", "missing value");
    rejects({"-b", "abc"}, "option --batch: 'abc' is not an integer", "non-integer");
    rejects({"-b", "2.5"}, "is not an integer", "fraction for an integer");
    rejects({"--lr", "x1"}, "is not a number", "non-number");
    rejects({"--lr", "nan"}, "is not a number", "nan rejected");
    rejects({"-b", "0"}, "out of range [1, 64]", "below range");
    rejects({"-b", "65"}, "out of range", "above range");
    rejects({"--flag=1"}, "takes no value", "flag with a value");
    rejects({"-b", "99999999999999999999"}, "option --batch: 99999999999999999999 is out of range [1, 64]",
            "an integer too large for 64 bits is out of range, not 'not an integer'");
    rejects({"-b", " 8"}, "option --batch: ' 8' is not an integer", "leading space refused like a trailing one");
    rejects({"--lr", "1e-50"}, "option --lr: 1e-50 is too close to 0 to be held as a 32-bit float",
            "a float option does not round a non-zero value to 0");
    rejects({"--lr", "1e-400"}, "option --lr: 1e-400 is too close to 0 to be held", "below even a double's range");
    rejects({"--lr", "1e400"}, "option --lr: 1e400 is out of range [0, 1]", "above a double's range");
    rejects({"-d", "1e3"}, "is not an integer", "an exponent for an integer");
    rejects({"--lr", "1e-40"}, "option --lr: 1e-40 is below a 32-bit float's normal range (the GPU would read it as 0)",
            "a subnormal float option (held, but fast math reads it as 0)");
    rejects({"--name", "--flag"}, "option --name needs a value, and the next argument is the option --flag (a value that starts with - goes as --name=VALUE)",
            "a text option does not take the next option as its value");
    rejects({"--name", "-b", "4"}, "the next argument is the option -b", "... nor a short one");
    {
        Cfg t; std::string e;
        CHECK(parse({"--name=--flag", "--lr", "-0"}, &t, &e) && t.name == "--flag" && !t.flag && t.lr == 0 && !std::signbit(t.lr),
              "--name=VALUE takes a value that starts with -; -0 is held as 0 (options.txt would keep '-0')");
        CHECK(parse({"--name", "-x.txt"}, &t, &e) && t.name == "-x.txt", "a value that starts with - but names no option is a value");
    }
    {   // a bad number is quoted cut, as every bad value is (printable): a 1000-digit value made a
        // 1000-byte line, and an integer's line was cut by its buffer before it said the range
        const std::string tiny = "0." + std::string(1000, '0') + "1", huge = "1" + std::string(300, '0');
        Cfg t; std::string e1, e2;
        const bool small = !parse({"--lr", tiny.c_str()}, &t, &e1) && e1.size() < 200 && e1.find("option --lr: 0.000") == 0 &&
                           e1.find("... is too close to 0 to be held as a 32-bit float") != std::string::npos;
        check_report(small, "a 1000-digit number too close to 0: quoted cut, the reason kept", "got " + std::to_string(e1.size()) + " bytes");
        const bool large = !parse({"-b", huge.c_str()}, &t, &e2) && e2.size() < 200 && e2.find("... is out of range [1, 64]") != std::string::npos;
        check_report(large, "a 301-digit integer: quoted cut, and the range still said", "got '" + e2 + "'");
    }
    rejects({"--no\npe\x1b"}, "unknown option '--no\\x0ape\\x1b' (see --help)",
            "an unknown option with a newline (found by fuzzing): control bytes as \\xNN, one line");
    {
        Cfg t; std::string e;
        CHECK(parse({"--lr", "0", "-b", "+8"}, &t, &e) && t.lr == 0 && t.b == 8, "0 stays a valid float; +8 an integer");
    }
    bool help = false;
    CHECK(parse({"-b", "2", "--help"}, &c, &err, &help) && help, "--help detected");
    {   // positional arguments (data/tokenize's input files) and doubles
        double x = 0.1;
        long long big = 0;
        std::vector<Option> t = {{"x", 0, OPT_DOUBLE, &x, "x", 0, 1}, {"big", 0, OPT_INT64, &big, "big", 1, 1 << 30}};
        std::vector<const char*> args = {"prog", "a.txt", "--x", "0.30000000000000004", "b.txt"};
        std::vector<std::string> files;
        bool h;
        CHECK(options_parse(t, (int)args.size(), args.data(), &h, &err, &files) && x == 0.30000000000000004 &&
              (files == std::vector<std::string>{"a.txt", "b.txt"}), "positional arguments collected; a double read exactly");
        CHECK(option_value_exact(t[0]) == "0.30000000000000004", "option_value_exact of a double: the digits that read back");
        std::vector<const char*> unknown = {"prog", "a.txt", "-q"};
        CHECK(!options_parse(t, 3, unknown.data(), &h, &err, &files) && err == "unknown option '-q' (see --help)",
              "with positional arguments, an unknown option is still an error");
        std::vector<const char*> range = {"prog", "--big", "0"};
        CHECK(!options_parse(t, 3, range.data(), &h, &err) && err == "option --big: 0 is out of range [1, 1073741824]",
              "an integer's range printed in whole numbers");
        CHECK(!options_parse(t, 2, args.data(), &h, &err), "without a place for them, positional arguments are errors");
    }
    {   // a value must fit the option's type also where the table leaves the range open (found by
        // fuzzing: resume_config reads kept values without their ranges, and 66666666666 was
        // converted to int: undefined behaviour), and a 64-bit integer is read exactly, not through a double
        int n = 0;
        long long big = 0;
        std::vector<Option> t = {{"n", 0, OPT_INT, &n, "n"}, {"big", 0, OPT_INT64, &big, "big"}};
        std::vector<const char*> beyond = {"prog", "--n", "66666666666"}, ends = {"prog", "--n", "-2147483648", "--big", "9223372036854775807"},
                                 exact = {"prog", "--big", "9007199254740993"};
        bool h;
        CHECK(!options_parse(t, 3, beyond.data(), &h, &err) && err == "option --n: 66666666666 is out of range [-2147483648, 2147483647]" &&
              n == 0, "an int option without a range: a value beyond int's is out of range");
        CHECK(options_parse(t, 5, ends.data(), &h, &err) && n == INT_MIN && big == LLONG_MAX, "the ends of int's and long long's ranges");
        CHECK(options_parse(t, 3, exact.data(), &h, &err) && big == 9007199254740993LL, "2^53 + 1 read exactly");
    }

    LRSchedule s; s.lr = 1.0f; s.warmup = 10; s.max_steps = 110; s.final_frac = 0.1f;
    CHECK(std::fabs(lr_at(s, 0) - 0.1f) < 1e-6 && std::fabs(lr_at(s, 9) - 1.0f) < 1e-6, "warmup is linear to the peak");
    CHECK(std::fabs(lr_at(s, 60) - 0.55f) < 1e-5, "cosine midpoint");
    CHECK(std::fabs(lr_at(s, 110) - 0.1f) < 1e-6 && std::fabs(lr_at(s, 500) - 0.1f) < 1e-6, "cosine ends at the final fraction");
    s.kind = "linear";
    CHECK(std::fabs(lr_at(s, 35) - (0.1f + 0.9f * 0.75f)) < 1e-5, "linear decay");
    s.kind = "constant";
    CHECK(lr_at(s, 80) == 1.0f, "constant");
    CHECK(!lr_schedule_kind_valid("exp") && lr_schedule_kind_valid("cosine") && lr_schedule_kind_valid("wsd"), "schedule names");
    // wsd: warmup 10, the peak through 0-based step 79, then the last 20 of 100 steps (80..99)
    // decay linearly, step 99 at the final fraction 0.1
    LRSchedule w; w.kind = "wsd"; w.lr = 1.0f; w.warmup = 10; w.max_steps = 100; w.final_frac = 0.1f; w.decay_frac = 0.2f;
    CHECK(std::fabs(lr_at(w, 4) - 0.5f) < 1e-6 && lr_at(w, 10) == 1.0f && lr_at(w, 79) == 1.0f, "wsd: warmup, then the peak held");
    CHECK(std::fabs(lr_at(w, 80) - (0.1f + 0.9f * 0.95f)) < 1e-6 && std::fabs(lr_at(w, 89) - 0.55f) < 1e-6 &&
          std::fabs(lr_at(w, 99) - 0.1f) < 1e-6 && std::fabs(lr_at(w, 500) - 0.1f) < 1e-6,
          "wsd: linear over the last 20 steps, the last one at the final fraction");
    w.decay_frac = 1.0f;
    CHECK(std::fabs(lr_at(w, 99) - 0.1f) < 1e-6 && std::fabs(lr_at(w, 10) - (0.1f + 0.9f * 89.0f / 90.0f)) < 1e-6,
          "wsd with --lr-decay-frac 1: a linear decay from the end of warmup (it never starts before)");
    w.decay_frac = 0.2f; w.max_steps = 200;
    CHECK(lr_at(w, 159) == 1.0f && lr_at(w, 160) < 1.0f && std::fabs(lr_at(w, 199) - 0.1f) < 1e-6, "wsd: a larger max_steps moves the decay later");
    w.max_steps = 5; w.warmup = 0; w.decay_frac = 0.05f;   // 0.25 of a step rounds to 0: still one
    CHECK(lr_at(w, 3) == 1.0f && std::fabs(lr_at(w, 4) - 0.1f) < 1e-6, "wsd: a decay shorter than a step still takes the last one");

    LossScaler ls = LossScaler::make(true);
    CHECK(ls.scale == 65536.0f, "loss scale starts at 2^16");
    CHECK(ls.update(true) && ls.scale == 32768.0f, "overflow halves and skips");
    for (int i = 0; i < 999; i++) ls.update(false);
    CHECK(ls.scale == 32768.0f, "no growth before 1000 clean steps");
    CHECK(!ls.update(false) && ls.scale == 65536.0f, "doubles after 1000 clean steps");
    ls.update(false); ls.update(true);
    CHECK(ls.clean_steps == 0 && ls.scale == 32768.0f, "overflow resets the clean count");
    LossScaler off = LossScaler::make(false);
    CHECK(off.scale == 1.0f && !off.update(false) && off.update(true) && off.scale == 1.0f, "disabled scaler stays at 1");
    return check_finish();
}
