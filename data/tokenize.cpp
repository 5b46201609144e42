// data/tokenize: the command-line front end of the GPT-2 encoder (data/bpe.h).
// Turns text files into token shards for the trainer, and exports the decode table.
// Run with --help for the modes.
#include "bpe.h"
#include "corpus.h"
#include "hellaswag.h"
#include "../llmc/choices.h"
#include "../llmc/options.h"
#include "../llmc/shards.h"
#include "../llmc/tokenizer.h"

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <fcntl.h>
#include <sys/stat.h>

static const char* kUsage =
R"(usage:
  data/tokenize FILE [FILE...] -o OUT_PREFIX [--val-fraction F]
      Tokenizes the FILEs, each one document prefixed by <|endoftext|>, and writes the
      shards OUT_PREFIX_train.bin and OUT_PREFIX_val.bin. The first F of the tokens
      (default 0.1) go to val, the rest to train (all tokens are held in memory). Both are
      written to .tmp files, then renamed into place one right after the other: a run that
      fails or is stopped (below) leaves the old pair as it was (but for a failed second
      rename where the filesystem cannot exchange files: its line says so), and so does a
      killed one, perhaps with a .tmp, unless killed between the two renames: then the new
      train shard can be beside the old val one. Each needs at least 2 tokens (an input and
      its target): too small a corpus is refused.
  data/tokenize FILE [FILE...] -o OUT_PREFIX --shard-tokens N [--val-tokens M]
      The same, for corpora of any size, written as it is read: the first M tokens
      (default N; 0: no val shard) go to OUT_PREFIX_val.bin, the rest to
      OUT_PREFIX_train_000000.bin, _000001.bin, ... of N tokens each, the last one N to 2N-1
      (N from 2 to 2^30); a run that fails (too small a corpus, for a shard of fewer than 2
      tokens, included) or is stopped (below) removes the shards it wrote;
      train on them with -i 'OUT_PREFIX_train_*.bin'. The trainer needs every shard
      to hold more than one step (B*T*GPUs*accumulation tokens): choose N above it.
      A run killed outright (SIGKILL, a second signal, a power loss) cannot clean up: it
      leaves the shards written so far, each one whole (renamed into place complete), but
      too few (nothing in them says so), perhaps with a .tmp. Only a finished run prints
      its last line "wrote ... training shard(s) ..." and exits 0; a rerun to the same prefix
      is refused while shards are there: remove OUT_PREFIX_val.bin, OUT_PREFIX_train_*.bin
      and their .tmp files, then rerun.
  data/tokenize --hellaswag FILE [FILE...] -o OUT.bin
      A multiple-choice evaluation set for the trainer's --hellaswag: JSON Lines, one
      example per line with "ctx" (a string), "endings" (K strings, the same K on every
      line) and "label" (the right ending's index, a number or a string of digits), as
      HellaSwag's hellaswag_val.jsonl and its Hugging Face export have them. Each ending is
      encoded with a space before it, after the context, as llm.c does; no other cleanup.
  data/tokenize --ids FILE             prints FILE's token ids
  data/tokenize --decode               reads ids from stdin, writes their bytes to stdout
  data/tokenize --export-decoder OUT   writes the id -> bytes table that the trainer loads
  data/tokenize --bench FILE           measures encoding speed on FILE (one thread)

The FILEs of -o may be JSON Lines instead (--jsonl): each line an object whose "text" field
(--field) is one document, as Hugging Face datasets export them; blank lines are skipped.
--threads encodes documents on several threads (default: the CPU count, at most 64); the shards
are the same bytes for any count (a single document uses one thread); each thread's cache of
encoded words grows to at most 256 MiB. The vocabulary (encoder.json, vocab.bpe) is read from
--vocab, else $GPT2_VOCAB_DIR, else ../shared/data/gpt2. No output may be one of the files read
(an input FILE or the vocabulary): such a run is refused before anything is written.
A run of -o stopped by SIGINT (Ctrl-C), SIGTERM or SIGHUP before its outputs are in place stops
the way a failed one does, says so in one line and exits with 128 + the signal's number (130 for
Ctrl-C); a second signal of the same kind ends it at once, as a kill would. A signal ignored when
the run starts (SIGHUP under nohup) stays ignored.)";

struct Options {
    std::string mode;                 // "shards", "choices", "ids", "decode", "export", "bench", "help"
    std::vector<std::string> inputs;  // text files (for --ids and --bench: their FILE)
    std::string out;                  // -o prefix, or --export-decoder's file
    std::string ids_file, bench_file, export_file;
    bool decode = false;
    std::string vocab;
    double val_fraction = 0.1;
    bool val_fraction_given = false;
    bool jsonl = false;
    bool hellaswag = false;           // -o writes a multiple-choice file (mode "choices")
    std::string field = "text";
    bool field_given = false;
    long long shard_tokens = 0;       // 0: one train and one val shard, split by val_fraction
    long long val_tokens = -1;        // -1: shard_tokens
    bool val_tokens_given = false;
    long long threads = 0;            // 0: the CPU count
};

// The one table of options: parse_args reads the command line with it, --help prints it.
static std::vector<Option> tokenize_options(Options* o) {
    return {
        {"out", 'o', OPT_STRING, &o->out, "write the FILEs' tokens as shards with this prefix (with --hellaswag: this choices file)"},
        {"val-fraction", 0, OPT_DOUBLE, &o->val_fraction, "the share of the tokens, the first ones, that go to the val shard (below 1)", 0, 1},
        {"shard-tokens", 0, OPT_INT64, &o->shard_tokens,
         "write as the FILEs are read, in train shards of N tokens, N >= 2 (not given: one train and one val shard)", 2, 1 << 30},
        {"val-tokens", 0, OPT_INT64, &o->val_tokens, "with --shard-tokens: the tokens of the val shard (-1: N, 0: none, else at least 2)",
         -1, INT32_MAX},
        {"jsonl", 0, OPT_FLAG, &o->jsonl, "the FILEs are JSON Lines (see above)"},
        {"field", 0, OPT_STRING, &o->field, "with --jsonl: the field that holds the text"},
        {"threads", 0, OPT_INT64, &o->threads, "documents encoded on N threads (not given: the CPU count, at most 64)", 1, 64},
        {"hellaswag", 0, OPT_FLAG, &o->hellaswag, "the FILEs are a multiple-choice set; -o writes the trainer's --hellaswag file"},
        {"ids", 0, OPT_STRING, &o->ids_file, "print this FILE's token ids"},
        {"decode", 0, OPT_FLAG, &o->decode, "read ids from stdin, write their bytes to stdout"},
        {"export-decoder", 0, OPT_STRING, &o->export_file, "write the id -> bytes table that the trainer loads to this file"},
        {"bench", 0, OPT_STRING, &o->bench_file, "measure the encoding speed on this FILE (one thread)"},
        {"vocab", 0, OPT_STRING, &o->vocab, "the folder of encoder.json and vocab.bpe (empty: $GPT2_VOCAB_DIR, else ../shared/data/gpt2)"},
    };
}

static int fail(const std::string& msg) {
    fprintf(stderr, "tokenize: %s\n", msg.c_str());
    return 1;
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Stopping on a signal. SIGINT (Ctrl-C), SIGTERM (`kill`, a job scheduler) and SIGHUP (the terminal
// closed) would end the process where it stands, and with --shard-tokens the shards written so far
// would stay: a corpus cut short that nothing marks as such, which the trainer would train on. So
// the -o modes catch them: the handler only records the signal (it may run between any two
// instructions, in the middle of malloc or stdio, so it can touch nothing else safely: a volatile
// sig_atomic_t is what C guarantees a handler may write), and the run checks the record at safe
// points (between batches, documents, shard writes, before the final renames) and stops there the
// way a failure does: what it wrote is removed, the files it would have replaced are left as they
// were, and the exit code is 128 + the signal's number, what a shell reports for a process that
// the signal ended (130 for Ctrl-C). A second signal of the same kind ends the process at once
// (SA_RESETHAND), as a way out of a run that does not get to a check; it cleans up nothing, like
// SIGKILL, which no process can catch (kUsage says what such a run leaves).
static volatile sig_atomic_t g_stop_signal = 0;  // the signal that asked the run to stop; 0: none
static void on_stop_signal(int sig) { if (!g_stop_signal) g_stop_signal = sig; }  // (another kind after it: still the first)

// No SA_RESTART (unlike the trainer's): a read that waits on a pipe or a terminal is then cut short
// (EINTR, which the reader reports as a failed read) instead of resumed, so the run gets to its
// next check without waiting for more input. A signal the process was started ignoring (SIGHUP
// under nohup, SIGINT for a background job of a shell without job control) stays ignored.
static void catch_stop_signals() {
    struct sigaction sa = {}, old = {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(sig, &sa, nullptr);
}

// A run stopped by a signal: one line, "what" saying what it left, and the exit code 128 + N.
static int stopped(const std::string& what) {
    const int sig = g_stop_signal;
    fprintf(stderr, "tokenize: interrupted by signal %d (%s): %s\n", sig, strsignal(sig), what.c_str());
    return 128 + sig;
}

// Whether the mode got the input files it needs: "" if so, else what is wrong.
static std::string check_inputs(const Options& o) {
    if (o.mode.empty()) return o.hellaswag ? "--hellaswag needs -o OUT.bin" : o.inputs.empty() ? "nothing to do (see --help)" : "missing -o OUT_PREFIX";
    if (o.hellaswag && o.mode != "choices") return "--hellaswag goes with -o OUT.bin, not with --" + (o.mode == "export" ? std::string("export-decoder") : o.mode);
    if (o.mode == "choices" && (o.jsonl || o.field_given || o.shard_tokens > 0 || o.val_tokens_given || o.val_fraction_given || o.threads > 0))
        return "--hellaswag reads JSON Lines of its own fields and writes one file: no --jsonl, --field, --shard-tokens, --val-tokens, --val-fraction or --threads";
    bool one_input = o.mode == "ids" || o.mode == "bench";
    if (one_input && o.inputs.size() != 1) return "--" + o.mode + " takes exactly one FILE";
    const bool writes = o.mode == "shards" || o.mode == "choices";
    // an empty path would name "" (one_input) or write "_train.bin" into the working folder (-o '')
    if ((writes || o.mode == "export") && o.out.empty()) return "option " + std::string(writes ? "-o" : "--export-decoder") + ": the path is empty";
    if (one_input && o.inputs[0].empty()) return "option --" + o.mode + ": the path is empty";
    for (const std::string& f : o.inputs) if (f.empty()) return "an empty FILE argument ('')";
    if (writes && o.inputs.empty()) return "-o needs at least one input FILE";
    if (!one_input && !writes && !o.inputs.empty()) return "unexpected argument '" + o.inputs[0] + "'";
    if (o.field_given && !o.jsonl) return "--field needs --jsonl";
    if (o.val_tokens_given && o.shard_tokens == 0) return "--val-tokens needs --shard-tokens";
    if (o.val_tokens == 1)  // a shard of one token has no target for it: the trainer refuses it
        return "option --val-tokens: 1 token cannot make a val shard (an input and its target: at least 2; 0: none)";
    if (o.val_fraction_given && o.shard_tokens > 0)
        return "--val-fraction needs the whole corpus in memory; with --shard-tokens, --val-tokens sets the validation size";
    if (o.mode != "shards" && o.mode != "choices" && (o.jsonl || o.shard_tokens > 0 || o.threads > 0))
        return "--jsonl, --shard-tokens and --threads go with -o";
    return "";
}

// The command line into *o (its mode from which of -o, --ids, --decode, --export-decoder, --bench
// was given); false + one line on any problem.
static bool parse_args(int argc, char** argv, Options* o, std::string* err) {
    const std::vector<Option> table = tokenize_options(o);
    bool help = false;
    std::vector<std::string> files;
    if (!options_parse(table, argc, argv, &help, err, &files)) return false;
    if (help) { o->mode = "help"; return true; }
    const std::vector<std::string> given = options_given(table, argc, argv);
    auto was_given = [&](const char* name) { return std::find(given.begin(), given.end(), name) != given.end(); };
    const std::pair<const char*, const char*> modes[] = {{"out", "shards"}, {"ids", "ids"}, {"decode", "decode"},
                                                         {"export-decoder", "export"}, {"bench", "bench"}};
    for (const auto& [name, mode] : modes) {
        if (!was_given(name)) continue;
        if (!o->mode.empty()) { *err = "choose one of -o, --ids, --decode, --export-decoder, --bench"; return false; }
        o->mode = mode;
    }
    if (o->mode == "ids") o->inputs.push_back(o->ids_file);
    if (o->mode == "bench") o->inputs.push_back(o->bench_file);
    if (o->mode == "export") o->out = o->export_file;
    o->inputs.insert(o->inputs.end(), files.begin(), files.end());
    o->val_fraction_given = was_given("val-fraction");
    o->field_given = was_given("field");
    o->val_tokens_given = was_given("val-tokens");
    if (o->val_fraction_given && !(o->val_fraction < 1)) { *err = "option --val-fraction: must be below 1"; return false; }
    if (o->hellaswag && o->mode == "shards") o->mode = "choices";
    *err = check_inputs(*o);
    return err->empty();
}

// All of s to stdout, flushed before the exit code is chosen: a short output sits in stdio's buffer
// until exit, where a failed write (a full disk) would be lost without a word and the run exit 0.
static int write_stdout(const std::string& s) {
    if (fwrite(s.data(), 1, s.size(), stdout) == s.size() && fflush(stdout) == 0) return 0;
    return fail(std::string("cannot write stdout: ") + strerror(errno));
}

static int print_ids(Gpt2Encoder& enc, const std::string& path) {
    std::vector<int> ids;
    std::string err;
    if (!enc.encode_file(path, &ids, &err)) return fail(err);
    std::string line;
    for (size_t i = 0; i < ids.size(); i++) line += (i ? " " : "") + std::to_string(ids[i]);
    line += '\n';
    return write_stdout(line);
}

static int decode_stdin(const Gpt2Encoder& enc) {
    std::string in, out, word;
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), stdin)) > 0) in.append(buf, got);
    if (ferror(stdin)) return fail(std::string("--decode: cannot read stdin: ") + strerror(errno));  // not "no ids"
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
    return write_stdout(out);
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

// The files the mode writes, each with the "<path>.tmp" it is written to first: -o's shards
// (with --shard-tokens, the train shards of the prefix that exist now: those the run could
// overwrite), -o's choices file, or --export-decoder's file.
static std::vector<std::string> outputs_of(const Options& o) {
    std::vector<std::string> out;
    auto add = [&](const std::string& p) { out.push_back(p); out.push_back(p + ".tmp"); };
    if (o.mode == "choices" || o.mode == "export") add(o.out);
    if (o.mode != "shards") return out;
    const ShardStream names(o.out, 0, 0);
    add(names.val_name());
    if (!o.shard_tokens) { add(o.out + "_train.bin"); return out; }
    for (const std::string& pattern : {names.train_glob(), names.train_glob() + ".tmp"}) {
        glob_t g;
        if (glob(pattern.c_str(), 0, nullptr, &g) == 0) out.insert(out.end(), g.gl_pathv, g.gl_pathv + g.gl_pathc);
        globfree(&g);
    }
    return out;
}

// Before anything is written: "" when no file the mode writes is one that it reads (an input FILE,
// or the vocabulary's encoder.json and vocab.bpe), else the one line naming both. Files are compared
// by device and inode, so a symlink, a hard link or another spelling of the path (./x, a/../x) is
// caught too. An input FILE that does not exist is reported here as well: in shard mode the run
// itself could otherwise create it (as a shard) before reading it.
static std::string output_problem(const Options& o, const std::string& vocab) {
    if (o.mode != "shards" && o.mode != "choices" && o.mode != "export") return "";
    std::vector<std::pair<std::string, struct stat>> outputs;  // those that exist: a new file cannot be an input
    for (const std::string& out : outputs_of(o)) {
        struct stat st;
        if (stat(out.c_str(), &st) == 0) outputs.emplace_back(out, st);
    }
    std::vector<std::pair<std::string, std::string>> reads;  // (path, how the error names it)
    for (const std::string& f : o.inputs) reads.emplace_back(f, "the input " + f);
    for (const char* v : {"/encoder.json", "/vocab.bpe"}) reads.emplace_back(vocab + v, "the vocabulary's " + vocab + v);
    for (size_t i = 0; i < reads.size(); i++) {
        struct stat in;
        if (stat(reads[i].first.c_str(), &in) != 0) {
            if (i < o.inputs.size()) return reads[i].first + ": cannot open: " + strerror(errno);
            continue;  // a missing vocabulary file: loading it names it
        }
        for (const auto& [out, st] : outputs)
            if (st.st_dev == in.st_dev && st.st_ino == in.st_ino)
                return "option " + std::string(o.mode == "export" ? "--export-decoder" : "-o") + ": it would write " + out +
                       ", which is " + reads[i].second + (out == reads[i].first ? "" : " (the same file)") + "; write elsewhere";
    }
    return "";
}

// The input FILEs as an error names them: the one file, or the first and how many more.
static std::string inputs_named(const std::vector<std::string>& inputs) {
    return inputs.size() == 1 ? inputs[0] : inputs[0] + " and " + std::to_string(inputs.size() - 1) + " more file(s)";
}

// The line for a corpus too small to split into shards of at least 2 tokens each (a shard needs
// an input token and its target: the trainer refuses one of fewer).
static std::string too_few_tokens(const Options& o, size_t n, size_t val, size_t train, const std::string& hint) {
    return inputs_named(o.inputs) + ": " + std::to_string(n) + (n == 1 ? " token" : " tokens") + ", too few: the val shard would hold " + std::to_string(val) +
           " and the train shard(s) " + std::to_string(train) + ", each needs at least 2 (an input and its target)" + hint;
}

// Writes shards paths[0] and paths[1] as a pair: both go to their .tmp files first, and are renamed
// into place only once both are complete. The first is put in place by exchanging it with the file
// already there (renameat2 RENAME_EXCHANGE), so that if the second rename fails the old one can be
// put back: on any failure the temporaries are removed and the old pair is left as it was, never
// a new shard beside an old one. (On a filesystem that cannot exchange files, the first is renamed
// over the old one; only a failure of the second rename then leaves the pair mismatched, and the
// line says so.) A stop signal recorded by the time both are written: false with *err empty, the
// temporaries removed (the last check: the two renames follow each other whatever comes after it).
static bool write_pair(const std::string paths[2], const uint16_t* const tokens[2], const size_t n[2], std::string* err) {
    const std::string tmps[2] = {paths[0] + ".tmp", paths[1] + ".tmp"};
    bool created[2] = {false, false};   // the .tmp files this run wrote (and so may remove)
    auto drop = [&] { for (int i = 0; i < 2; i++) if (created[i]) remove(tmps[i].c_str()); };
    for (int i = 0; i < 2; i++)   // (a failed write removes its own .tmp, or never created it)
        if (!(created[i] = shard_write(paths[i], tokens[i], n[i], err, /*tmp_only=*/true))) { drop(); return false; }
    if (g_stop_signal) { drop(); err->clear(); return false; }
    auto rename_failed = [&](int i) { *err = paths[i] + ": cannot rename " + tmps[i] + " into place: " + strerror(errno); };
    struct stat old;  // RENAME_EXCHANGE would swap a directory in too: only a file is exchanged (a plain rename refuses a directory)
    const bool had_old = lstat(paths[0].c_str(), &old) == 0;
    const bool exchanged = had_old && !S_ISDIR(old.st_mode) &&
                           renameat2(AT_FDCWD, tmps[0].c_str(), AT_FDCWD, paths[0].c_str(), RENAME_EXCHANGE) == 0;
    if (!exchanged && rename(tmps[0].c_str(), paths[0].c_str()) != 0) { rename_failed(0); drop(); return false; }
    // now paths[0] is the new shard; tmps[0] holds the old one if exchanged, else nothing
    created[0] = exchanged;
    if (rename(tmps[1].c_str(), paths[1].c_str()) != 0) {
        rename_failed(1);
        if (exchanged && renameat2(AT_FDCWD, tmps[0].c_str(), AT_FDCWD, paths[0].c_str(), RENAME_EXCHANGE) == 0) {
            // the old shard back in place; tmps[0] holds the new one again (drop removes it)
        } else if (!had_old) {
            remove(paths[0].c_str());  // there was none: none again
        } else {
            created[0] = false;  // if exchanged, tmps[0] still holds the old shard: keep it
            *err += " (" + paths[0] + " was already replaced" + (exchanged ? "; the old one is " + tmps[0] : std::string()) + ")";
        }
        drop();
        return false;
    }
    if (exchanged) remove(tmps[0].c_str());  // the old shard
    return true;
}

// Writes the shards: documents read a batch at a time (DocumentReader), encoded on the threads,
// then either kept (default: the val split is a fraction of the final count, so the whole token
// stream stays in memory, 2 bytes a token) or cut into shards as they come (--shard-tokens).
static int write_shards(const std::string& vocab, const Options& o) {
    ShardStream stream(o.out, (size_t)(o.val_tokens < 0 ? o.shard_tokens : o.val_tokens), (size_t)o.shard_tokens);
    if (o.shard_tokens) {
        const std::string old = stream.existing();
        if (!old.empty()) return fail(old + ": shards with this prefix exist; remove them first (a glob would mix the two corpora)");
    }
    // text files are one document each: no more threads than files
    size_t n_threads = o.threads ? (size_t)o.threads : std::min<size_t>(64, std::max(1u, std::thread::hardware_concurrency()));
    if (!o.jsonl) n_threads = std::min(n_threads, o.inputs.size());
    std::vector<std::unique_ptr<Gpt2Encoder>> encoders(n_threads);
    std::vector<std::string> errors(n_threads);
    {   // one encoder per thread, loaded in parallel (each reads the vocabulary files)
        std::vector<std::thread> loaders;
        for (size_t t = 0; t < n_threads; t++)
            loaders.emplace_back([&, t] { encoders[t] = std::make_unique<Gpt2Encoder>(); encoders[t]->load(vocab, &errors[t]); });
        for (auto& l : loaders) l.join();
        for (const std::string& e : errors) if (!e.empty()) return fail(e);
    }
    if (encoders[0]->vocab_size() > 65536) return fail("token ids do not fit the shards' uint16");
    const size_t kReportEvery = 64u << 20, kBatchBytes = n_threads * (8u << 20);
    auto t0 = std::chrono::steady_clock::now();
    DocumentReader reader(o.inputs, o.jsonl, o.field);
    const std::string val = stream.val_name(), train = o.out + "_train.bin";  // (train: without --shard-tokens)
    // stopped by a signal: in shard mode the shards already written are removed, as on a failure;
    // without --shard-tokens nothing is written before write_pair
    auto interrupted = [&] {
        if (!o.shard_tokens) return stopped("nothing written (" + train + " and " + val + " are as they were)");
        const size_t wrote = stream.train_shards() + (stream.val_tokens() > 0 ? 1 : 0);
        stream.remove_written();
        return stopped(wrote ? "removed the " + std::to_string(wrote) + " shard(s) this run wrote (a partial corpus)"
                             : std::string("no shard written yet"));
    };
    // in shard mode, a failure removes the shards already written: no partial corpus is left (a
    // failure once a signal came is reported as the signal: an interrupted read fails with EINTR)
    auto failed = [&](const std::string& e) {
        if (g_stop_signal) return interrupted();
        stream.remove_written();
        return fail(e);
    };
    std::vector<Document> docs;
    std::vector<uint16_t> tokens, fresh;  // shard mode: tokens, what the stream holds; fresh, a batch's
    std::string err;
    size_t n_tokens = 0, next_report = kReportEvery;
    // a signal is looked for after each batch is read (reading a slow input can take long) and
    // encoded, and in shard mode between shard writes: one batch can fill many shards, so its tokens
    // go to the stream a shard's worth at a time (the same shards: they depend only on the stream)
    while (!g_stop_signal && reader.next_batch(&docs, kBatchBytes, &err) && !g_stop_signal) {
        std::vector<uint16_t>& into = o.shard_tokens ? fresh : tokens;
        const size_t before = into.size();
        if (!encode_documents(encoders, docs, &into, &err)) return failed(err);
        n_tokens += into.size() - before;
        if (o.shard_tokens) {
            const size_t step = (size_t)o.shard_tokens;
            for (size_t at = 0; at < fresh.size() && !g_stop_signal; at += step) {
                tokens.insert(tokens.end(), fresh.begin() + at, fresh.begin() + std::min(fresh.size(), at + step));
                if (!stream.add(&tokens, &err)) return failed(err);
            }
            fresh.clear();
        }
        if (reader.bytes_read() >= next_report) {
            next_report = reader.bytes_read() + kReportEvery;
            fprintf(stderr, "tokenized %zu MiB, %zu documents, %zu tokens, %.1f Mtok/s\n", reader.bytes_read() >> 20,
                    reader.documents(), n_tokens, n_tokens / seconds_since(t0) / 1e6);
        }
    }
    if (g_stop_signal) return interrupted();
    if (!err.empty()) return failed(err);
    if (reader.documents() == 0) return fail("no documents in the input (empty JSON Lines files, or only blank lines)");
    const double s = seconds_since(t0), mib = reader.bytes_read() / 1048576.0;
    if (o.shard_tokens) {
        if (!stream.finish(&tokens, &err)) return failed(err);
        // the last check: a signal during the last shards still stops the run (a signal after this
        // comes too late: the run, complete, ends as usual)
        if (g_stop_signal) return interrupted();
        // a tiny corpus: all of it in the val shard (fewer tokens than --val-tokens), or a train
        // shard of 1 token; ShardStream's shards otherwise hold at least --shard-tokens >= 2
        if (stream.train_tokens() < 2 || (stream.val_tokens() > 0 && stream.val_tokens() < 2))
            return failed(too_few_tokens(o, n_tokens, stream.val_tokens(), stream.train_tokens(),
                                         stream.val_tokens() > 0 && n_tokens >= 4 ? "; lower --val-tokens" : ""));
        const std::string val_note = stream.val_tokens() ? val + " (" + std::to_string(stream.val_tokens()) + " tokens)"
                                                         : std::string("no validation shard (--val-tokens 0)");
        fprintf(stderr, "wrote %s and %zu training shard(s) %s .. %s (%zu tokens) from %zu document(s), "
                "%.1f MiB in %.2f s, %.2f Mtok/s on %zu thread(s)\n", val_note.c_str(),
                stream.train_shards(), stream.train_name(0).c_str(), stream.train_name(stream.train_shards() - 1).c_str(),
                stream.train_tokens(), reader.documents(), mib, s, n_tokens / s / 1e6, n_threads);
        return 0;
    }
    const size_t n_val = (size_t)(o.val_fraction * (double)tokens.size()), n_train = tokens.size() - n_val;
    if (n_val < 2 || n_train < 2) return fail(too_few_tokens(o, tokens.size(), n_val, n_train, ""));
    const std::string paths[2] = {train, val};
    const uint16_t* const parts[2] = {tokens.data() + n_val, tokens.data()};
    const size_t sizes[2] = {n_train, n_val};
    if (!write_pair(paths, parts, sizes, &err)) return err.empty() ? interrupted() : fail(err);
    fprintf(stderr, "wrote %s (%zu tokens) and %s (%zu tokens) from %zu document(s), %.1f MiB in %.2f s, %.2f Mtok/s on %zu thread(s)\n",
            train.c_str(), n_train, val.c_str(), n_val, reader.documents(), mib, s, tokens.size() / s / 1e6, n_threads);
    return 0;
}

// --hellaswag: the examples of the JSON Lines FILEs, in order, as one multiple-choice file.
static int write_choices(const std::string& vocab, const Options& o) {
    Gpt2Encoder enc;
    std::string err;
    if (!enc.load(vocab, &err)) return fail(err);
    if (enc.vocab_size() > 65536) return fail("token ids do not fit the file's uint16");
    const auto t0 = std::chrono::steady_clock::now();
    DocumentReader reader(o.inputs, /*jsonl=*/true, "ctx");
    ChoiceSet set;
    std::vector<Document> docs;
    while (!g_stop_signal && reader.next_batch(&docs, 8u << 20, &err))
        for (const Document& d : docs) {
            if (g_stop_signal) break;
            set.examples.emplace_back();
            if (!choice_example(d, enc, &set.K, &set.examples.back(), &err)) return fail(err);
        }
    // the last check (choices_write renames the file into place: a signal from then on comes too
    // late, and the run ends as usual); checked first, as an interrupted read fails with EINTR
    if (g_stop_signal) return stopped("nothing written (" + o.out + " is as it was)");
    if (!err.empty()) return fail(err);
    if (set.examples.empty()) return fail("no examples in the input (empty files, or only blank lines)");
    if (!choices_write(o.out, set, &err)) return fail(err);
    size_t tokens = 0, longest = 0;
    for (const ChoiceExample& x : set.examples)
        for (const auto& e : x.endings) { tokens += x.context.size() + e.size(); longest = std::max(longest, x.context.size() + e.size()); }
    fprintf(stderr, "wrote %s: %zu examples of %d endings (%zu tokens in all rows, the longest %zu) in %.2f s\n", o.out.c_str(),
            set.examples.size(), set.K, tokens, longest, seconds_since(t0));
    return 0;
}

int main(int argc, char** argv) {
    Options o;
    std::string err;
    if (!parse_args(argc, argv, &o, &err)) return fail(err);
    if (o.mode == "help") { options_help(stdout, kUsage, tokenize_options(&o)); return 0; }
    const char* env = getenv("GPT2_VOCAB_DIR");
    std::string vocab = !o.vocab.empty() ? o.vocab : env && *env ? env : "../shared/data/gpt2";
    err = output_problem(o, vocab);
    if (!err.empty()) return fail(err);
    // -o's modes, which can run long, stop cleanly on a signal (--export-decoder writes one small file in a moment)
    if (o.mode == "shards" || o.mode == "choices") catch_stop_signals();
    if (o.mode == "shards") return write_shards(vocab, o);  // loads one encoder per thread
    if (o.mode == "choices") return write_choices(vocab, o);
    Gpt2Encoder enc;
    if (!enc.load(vocab, &err)) return fail(err);
    if (o.mode == "ids") return print_ids(enc, o.inputs[0]);
    if (o.mode == "decode") return decode_stdin(enc);
    if (o.mode == "bench") return bench(enc, o.inputs[0]);
    return tokenizer_write(o.out, enc.decoder(), enc.eot(), &err) ? 0 : fail(err);  // "export"
}
