// data/tokenize: the command-line front end of the GPT-2 encoder (data/bpe.h).
// Turns text files into token shards for the trainer, and exports the decode table.
// Run with --help for the modes.
#include "bpe.h"
#include "../llmc/shards.h"
#include "../llmc/tokenizer.h"

#include <cctype>
#include <chrono>
#include <cstdlib>

static const char* kUsage =
R"(usage:
  data/tokenize FILE [FILE...] -o OUT_PREFIX [--val-fraction F]
      Tokenizes the FILEs, each one document prefixed by <|endoftext|>, and writes the
      shards OUT_PREFIX_train.bin and OUT_PREFIX_val.bin. The first F of the tokens
      (default 0.1) go to val, the rest to train.
  data/tokenize --ids FILE             prints FILE's token ids
  data/tokenize --decode               reads ids from stdin, writes their bytes to stdout
  data/tokenize --export-decoder OUT   writes the id -> bytes table that the trainer loads
  data/tokenize --bench FILE           measures encoding speed on FILE (one thread)
options:
  --vocab DIR   where encoder.json and vocab.bpe are
                (default: $GPT2_VOCAB_DIR, else ../shared/data/gpt2)
  --help        this text
)";

struct Options {
    std::string mode;                 // "shards", "ids", "decode", "export", "bench", "help"
    std::vector<std::string> inputs;  // text files
    std::string out;                  // -o prefix or --export-decoder file
    std::string vocab;
    double val_fraction = 0.1;
};

static int fail(const std::string& msg) {
    fprintf(stderr, "tokenize: %s\n", msg.c_str());
    return 1;
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Whether the mode got the input files it needs: "" if so, else what is wrong.
static std::string check_inputs(const Options& o) {
    if (o.mode.empty()) return o.inputs.empty() ? "nothing to do (see --help)" : "missing -o OUT_PREFIX";
    bool one_input = o.mode == "ids" || o.mode == "bench";
    if (one_input && o.inputs.size() != 1) return "--" + o.mode + " takes exactly one FILE";
    if (o.mode == "shards" && o.inputs.empty()) return "-o needs at least one input FILE";
    if (!one_input && o.mode != "shards" && !o.inputs.empty()) return "unexpected argument '" + o.inputs[0] + "'";
    return "";
}

static bool parse_args(int argc, char** argv, Options* o, std::string* err) {
    auto set_mode = [&](const std::string& mode) {
        if (!o->mode.empty() && o->mode != mode) {
            *err = "choose one of -o, --ids, --decode, --export-decoder, --bench";
            return false;
        }
        o->mode = mode;
        return true;
    };
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        bool has_value = a == "-o" || a == "--ids" || a == "--bench" || a == "--export-decoder" ||
                         a == "--vocab" || a == "--val-fraction";
        if (has_value && i + 1 >= argc) { *err = a + " needs a value"; return false; }
        if (a == "--help" || a == "-h") { o->mode = "help"; return true; }
        if (a == "--ids" || a == "--bench") {
            if (!set_mode(a.substr(2))) return false;
            o->inputs.push_back(argv[++i]);
        } else if (a == "--decode") {
            if (!set_mode("decode")) return false;
        } else if (a == "--export-decoder" || a == "-o") {
            if (!set_mode(a == "-o" ? "shards" : "export")) return false;
            o->out = argv[++i];
        } else if (a == "--vocab") {
            o->vocab = argv[++i];
        } else if (a == "--val-fraction") {
            char* end = nullptr;
            o->val_fraction = strtod(argv[++i], &end);
            if (end == argv[i] || *end != '\0' || !(o->val_fraction >= 0 && o->val_fraction < 1)) {
                *err = std::string("--val-fraction must be a number in [0, 1), not '") + argv[i] + "'";
                return false;
            }
        } else if (a.size() > 1 && a[0] == '-') {
            *err = "unknown option '" + a + "' (see --help)";
            return false;
        } else {
            o->inputs.push_back(a);
        }
    }
    *err = check_inputs(*o);
    return err->empty();
}

static int print_ids(Gpt2Encoder& enc, const std::string& path) {
    std::vector<int> ids;
    std::string err;
    if (!enc.encode_file(path, &ids, &err)) return fail(err);
    std::string line;
    for (size_t i = 0; i < ids.size(); i++) line += (i ? " " : "") + std::to_string(ids[i]);
    line += '\n';
    return fwrite(line.data(), 1, line.size(), stdout) == line.size() ? 0 : fail("cannot write stdout");
}

static int decode_stdin(const Gpt2Encoder& enc) {
    std::string in, out, word;
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), stdin)) > 0) in.append(buf, got);
    in += ' ';  // so the last id ends like the others
    for (char c : in) {
        if (!isspace((unsigned char)c)) { word += c; continue; }
        if (word.empty()) continue;
        char* end = nullptr;
        long id = strtol(word.c_str(), &end, 10);
        if (*end != '\0' || id < 0 || id >= enc.vocab_size())
            return fail("--decode: '" + word + "' is not a token id (0.." + std::to_string(enc.vocab_size() - 1) + ")");
        out += enc.decoder()[id];
        word.clear();
    }
    return fwrite(out.data(), 1, out.size(), stdout) == out.size() ? 0 : fail("cannot write stdout");
}

// Encoding speed: the first pass fills the piece cache; the repeats (about one second's
// worth) show the steady state of a long run.
static int bench(Gpt2Encoder& enc, const std::string& path) {
    std::string text, err;
    std::vector<int> ids;
    if (!read_file(path, &text, &err)) return fail(err);
    auto t0 = std::chrono::steady_clock::now();
    if (!enc.encode(text, &ids, &err, path)) return fail(err);
    double first = seconds_since(t0);
    size_t n = ids.size(), passes = 0;
    t0 = std::chrono::steady_clock::now();
    while (passes == 0 || seconds_since(t0) < 1.0) {
        ids.clear();
        enc.encode(text, &ids, &err, path);
        passes++;
    }
    double rep = seconds_since(t0) / passes;
    printf("%s: %zu bytes, %zu tokens; first pass %.2f Mtok/s (%.1f ms), then %.2f Mtok/s (%.1f ms, %zu passes)\n",
           path.c_str(), text.size(), n, n / first / 1e6, first * 1e3, n / rep / 1e6, rep * 1e3, passes);
    return 0;
}

// Writes the shards. The whole token stream stays in memory, 2 bytes a token, because the
// val split is a fraction of the final count; each file's ids are narrowed once it is done.
static int write_shards(Gpt2Encoder& enc, const Options& o) {
    if (enc.vocab_size() > 65536) return fail("token ids do not fit the shards' uint16");
    const size_t kReportEvery = 16u << 20;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<uint16_t> tokens;
    std::string err;
    size_t bytes_before = 0, next_report = kReportEvery;
    for (const std::string& path : o.inputs) {
        std::vector<int> ids = {enc.eot()};  // each document starts with <|endoftext|>, as in llm.c
        auto progress = [&](size_t done) {
            size_t bytes = bytes_before + done, n = tokens.size() + ids.size();
            if (bytes < next_report) return;
            next_report = bytes + kReportEvery;
            fprintf(stderr, "tokenized %zu MiB, %zu tokens, %.1f Mtok/s\n", bytes >> 20, n, n / seconds_since(t0) / 1e6);
        };
        std::string text;
        if (!read_file(path, &text, &err) || !enc.encode(text, &ids, &err, path, progress)) return fail(err);
        tokens.insert(tokens.end(), ids.begin(), ids.end());
        bytes_before += text.size();
    }
    size_t n_val = (size_t)(o.val_fraction * (double)tokens.size());
    const std::string val = o.out + "_val.bin", train = o.out + "_train.bin";
    if (!shard_write(val, tokens.data(), n_val, &err) ||
        !shard_write(train, tokens.data() + n_val, tokens.size() - n_val, &err)) return fail(err);
    double s = seconds_since(t0);
    fprintf(stderr, "wrote %s (%zu tokens) and %s (%zu tokens) from %zu file(s), %.1f MiB in %.2f s, %.2f Mtok/s\n",
            train.c_str(), tokens.size() - n_val, val.c_str(), n_val, o.inputs.size(),
            bytes_before / 1048576.0, s, tokens.size() / s / 1e6);
    return 0;
}

int main(int argc, char** argv) {
    Options o;
    std::string err;
    if (!parse_args(argc, argv, &o, &err)) return fail(err);
    if (o.mode == "help") { fputs(kUsage, stdout); return 0; }
    const char* env = getenv("GPT2_VOCAB_DIR");
    std::string vocab = !o.vocab.empty() ? o.vocab : env && *env ? env : "../shared/data/gpt2";
    Gpt2Encoder enc;
    if (!enc.load(vocab, &err)) return fail(err);
    if (o.mode == "ids") return print_ids(enc, o.inputs[0]);
    if (o.mode == "decode") return decode_stdin(enc);
    if (o.mode == "bench") return bench(enc, o.inputs[0]);
    if (o.mode == "export") return tokenizer_write(o.out, enc.decoder(), enc.eot(), &err) ? 0 : fail(err);
    return write_shards(enc, o);
}
