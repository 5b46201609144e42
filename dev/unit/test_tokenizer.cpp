// The GPT-2 encoder (data/bpe.h) against tiktoken's ids (dev/tokenizer_fixture.py wrote the
// fixtures), decode roundtrips, the decoder file (llmc/tokenizer.h), and error messages.
// Run from the repository root; the vocabulary is read from $GPT2_VOCAB_DIR, else
// ../shared/data/gpt2.
#include "data/bpe.h"
#include "llmc/tokenizer.h"
#include "dev/unit/check.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

static const char* kFixtures = "dev/unit/fixtures";
// the text `make data` tokenizes: $TINYSHAKESPEARE (make test passes its own), else the default place
static std::string shakespeare_path() {
    const char* env = getenv("TINYSHAKESPEARE");
    return env && *env ? env : "../shared/data/tinyshakespeare.txt";
}

static std::string vocab_dir() {
    const char* env = getenv("GPT2_VOCAB_DIR");
    return env && *env ? env : "../shared/data/gpt2";
}

static std::vector<int> read_ids(const std::string& path) {
    std::ifstream in(path);
    std::vector<int> ids;
    for (int id; in >> id;) ids.push_back(id);
    return ids;
}

// FNV-1a 64 over the ids as little-endian uint32, as dev/tokenizer_fixture.py computes it.
static uint64_t fnv1a64(const std::vector<int>& ids) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int id : ids)
        for (int k = 0; k < 4; k++) h = (h ^ (((uint32_t)id >> (8 * k)) & 0xFF)) * 0x100000001b3ull;
    return h;
}

static std::string utf8(uint32_t c) {
    std::string s;
    if (c < 0x80) return std::string(1, (char)c);
    if (c < 0x800) return s + (char)(0xC0 | c >> 6) + (char)(0x80 | (c & 63));
    if (c < 0x10000) return s + (char)(0xE0 | c >> 12) + (char)(0x80 | (c >> 6 & 63)) + (char)(0x80 | (c & 63));
    return s + (char)(0xF0 | c >> 18) + (char)(0x80 | (c >> 12 & 63)) + (char)(0x80 | (c >> 6 & 63)) + (char)(0x80 | (c & 63));
}

static std::string decode_all(const Gpt2Encoder& enc, const std::vector<int>& ids) {
    std::string s;
    for (int id : ids) s += enc.decoder()[id];
    return s;
}

static bool one_line_naming(const std::string& err, const std::string& name) {
    return err.find(name) != std::string::npos && err.find('\n') == std::string::npos;
}

static void test_fixture_text(Gpt2Encoder& enc) {
    std::string text, err;
    std::vector<int> got, want = read_ids(std::string(kFixtures) + "/tokenizer_ids.txt");
    bool ok = read_file(std::string(kFixtures) + "/tokenizer_text.txt", &text, &err) &&
              enc.encode(text, &got, &err);
    CHECK(ok && !want.empty(), "encode the fixture text");
    size_t diff = 0;
    while (diff < got.size() && diff < want.size() && got[diff] == want[diff]) diff++;
    check_report(got == want, "fixture text: ids identical to tiktoken",
                 "first difference at token " + std::to_string(diff) + " (" + std::to_string(got.size()) +
                 " vs " + std::to_string(want.size()) + " tokens)");
    CHECK(decode_all(enc, got) == text, "fixture text: decode(encode(x)) == x");
    std::vector<int> eot_ids;
    CHECK(enc.encode("<|endoftext|>", &eot_ids, &err) && eot_ids.size() > 1 &&
          std::find(eot_ids.begin(), eot_ids.end(), 50256) == eot_ids.end(),
          "<|endoftext|> in text is ordinary text");
    CHECK_EQ(enc.eot(), 50256, "<|endoftext|> id");
}

// Short texts encoded one by one against tiktoken's ids (tokenizer_cases.jsonl: white space of every
// kind around words, numbers and punctuation and at a text's end, odd contractions, marks at a
// piece's start, emoji sequences, NULs, "<|endoftext|>" as text, Unicode 15-16 letters, runs of 500).
static void test_cases(Gpt2Encoder& enc) {
    std::ifstream in(std::string(kFixtures) + "/tokenizer_cases.jsonl");
    size_t n = 0, differ = 0, roundtrip = 0;
    std::string line, err, first;
    while (std::getline(in, line)) {
        nlohmann::json j;
        try { j = nlohmann::json::parse(line); } catch (const nlohmann::json::exception&) { differ++; continue; }
        const std::string text = j.value("text", std::string());
        const std::vector<int> want = j.value("ids", std::vector<int>());
        std::vector<int> got;
        n++;
        if (!enc.encode(text, &got, &err) || got != want) {
            if (differ++ == 0) first = "\"" + printable(text) + "\" (case " + std::to_string(n) + ")";
        } else if (decode_all(enc, got) == text) {
            roundtrip++;
        }
    }
    CHECK(n > 400, "read the cases fixture (tokenizer_cases.jsonl)");
    check_report(differ == 0, std::to_string(n) + " short texts: ids identical to tiktoken",
                 std::to_string(differ) + " differ, the first " + first);
    CHECK_EQ(roundtrip, n - differ, "short texts: decode(encode(x)) == x");
}

// Runs of 100,000 of one character (tokenizer_runs.txt: the count and hash of tiktoken's ids): the
// longest pieces the split pattern makes, and BPE's worst case. A greedy run in the pattern kept a
// backtracking point per character on PCRE2's JIT stack: 1,365 letters or digits, or 4,095
// punctuation characters, failed with "JIT stack limit reached".
static void test_runs(Gpt2Encoder& enc) {
    std::ifstream in(std::string(kFixtures) + "/tokenizer_runs.txt");
    size_t runs = 0, times = 0, want_n = 0;
    uint64_t want_hash = 0;
    std::string hex;
    while (in >> hex >> times >> want_n >> want_hash) {
        const uint32_t c = (uint32_t)std::stoul(hex, nullptr, 16);
        std::string text, one = utf8(c), err;
        for (size_t i = 0; i < times; i++) text += one;
        std::vector<int> ids;
        const bool ok = enc.encode(text, &ids, &err);
        check_report(ok && ids.size() == want_n && fnv1a64(ids) == want_hash && decode_all(enc, ids) == text,
                     std::to_string(times) + " x U+" + hex + ": ids identical to tiktoken, decode(encode(x)) == x",
                     ok ? std::to_string(ids.size()) + " tokens, tiktoken " + std::to_string(want_n) : err);
        runs++;
    }
    CHECK(runs >= 12, "read the runs fixture (tokenizer_runs.txt)");
}

static void test_shakespeare(Gpt2Encoder& enc, const std::string& text) {
    std::vector<int> ids;
    std::string err;
    CHECK(enc.encode(text, &ids, &err), "encode tinyshakespeare");
    std::ifstream in(std::string(kFixtures) + "/tinyshakespeare_ids.txt");
    size_t want_n = 0;
    uint64_t want_hash = 0;
    in >> want_n >> want_hash;
    CHECK_EQ(ids.size(), want_n, "tinyshakespeare: token count matches tiktoken");
    CHECK_EQ(fnv1a64(ids), want_hash, "tinyshakespeare: ids hash matches tiktoken");
    CHECK(decode_all(enc, ids) == text, "tinyshakespeare: decode(encode(x)) == x");
}


// The pre-tokenization pattern's character classes against tiktoken's (the fixture holds the code
// points of \p{L}, \p{N} and \s in tiktoken's regex), for every code point c, through the pattern
// itself (Gpt2Encoder::compile_split_pattern): its first piece of "a"+c is all of it iff c is a
// letter, of "1"+c iff c is a number, of "\t"+c iff c is white space, and of "!"+c iff c is none
// of the three. PCRE2's own tables (Unicode 14.0 in 10.42) lack the letters and numbers added
// since, which tiktoken's (Unicode 16.0) have: 9,272 letters and 120 numbers differed.
static void test_classes() {
    std::vector<bool> in[3] = {std::vector<bool>(0x110000), std::vector<bool>(0x110000), std::vector<bool>(0x110000)};
    const char* names[3] = {"L", "N", "White_Space"};
    std::ifstream f(std::string(kFixtures) + "/tokenizer_classes.txt");
    std::string line;
    size_t ranges = 0;
    while (std::getline(f, line)) {
        std::istringstream ss(line);
        std::string name;
        uint32_t a = 0, b = 0;
        if (line.empty() || line[0] == '#' || !(ss >> name >> std::hex >> a >> b) || b >= 0x110000) continue;
        for (int k = 0; k < 3; k++)
            if (name == names[k]) { for (uint32_t c = a; c <= b; c++) in[k][c] = true; ranges++; }
    }
    CHECK(ranges > 800, "read the classes fixture (tokenizer_classes.txt)");
    int code = 0;
    pcre2_code* re = Gpt2Encoder::compile_split_pattern(&code);
    if (!re) { check_report(false, "compile the pattern", std::to_string(code)); return; }
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
    auto whole = [&](const std::string& s) {
        return pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) > 0 &&
               pcre2_get_ovector_pointer(md)[1] == s.size();
    };
    const char* before[4] = {"a", "1", "\t", "!"};
    const char* what[4] = {"letters (\\p{L})", "numbers (\\p{N})", "white space (\\s)", "other characters ([^\\s\\p{L}\\p{N}])"};
    size_t differ[4] = {0, 0, 0, 0};
    std::string first[4];
    for (uint32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        const std::string ch = utf8(c);
        const bool want[4] = {in[0][c], in[1][c], in[2][c], !in[0][c] && !in[1][c] && !in[2][c]};
        for (int k = 0; k < 4; k++)
            if (whole(before[k] + ch) != want[k] && differ[k]++ < 4) {
                char hex[16];
                snprintf(hex, sizeof hex, " U+%04X", c);
                first[k] += hex;
            }
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    for (int k = 0; k < 4; k++)
        check_report(differ[k] == 0, std::string("the pattern's ") + what[k] + ": tiktoken's, code point by code point",
                     std::to_string(differ[k]) + " code points differ, the first:" + first[k]);
}

// Exports the decoder table, loads it the trainer's way, and checks it byte for byte.
static void test_decoder_file(Gpt2Encoder& enc, const std::string& dir, const std::string& text) {
    std::string path = dir + "/tokenizer.bin", err;
    CHECK(tokenizer_write(path, enc.decoder(), enc.eot(), &err), "export the decoder file");
    TokenizerDecoder dec;
    CHECK(dec.load(path, &err), "load the decoder file");
    CHECK_EQ(dec.vocab_size(), 50257, "decoder vocab_size");
    CHECK_EQ(dec.eot(), 50256, "decoder eot");
    bool same = dec.vocab_size() == enc.vocab_size();
    for (int id = 0; same && id < dec.vocab_size(); id++) same = dec.decode(id) == enc.decoder()[id];
    CHECK(same, "every token's bytes survive the export");
    CHECK(dec.decode(-1).empty() && dec.decode(50257).empty(), "out-of-range ids decode to \"\"");
    std::vector<int> ids;
    CHECK(enc.encode(text, &ids, &err) && decode_tokens(dec, ids.data(), ids.size()) == text,
          "decode_tokens(encode(x)) == x through the file");
    // A damaged file is refused with one line naming it.
    std::string cut = dir + "/cut.bin";
    std::string bytes;
    read_file(path, &bytes, &err);
    std::ofstream(cut, std::ios::binary).write(bytes.data(), bytes.size() / 2);
    CHECK(!dec.load(cut, &err) && one_line_naming(err, cut) && err.find("truncated") != std::string::npos,
          "a truncated decoder file is rejected");
    printf("  %s\n", err.c_str());
    // A header that claims more tokens than the file can hold (2 bytes each at least) is refused
    // from the file's size, before a table of that many tokens is allocated (2^24: 512 MiB of
    // strings for a 1026-byte file, as fuzzing found).
    uint32_t header[TOKENIZER_HEADER_INTS] = {TOKENIZER_MAGIC, TOKENIZER_VERSION, 1u << 24, 0};
    std::ofstream(cut, std::ios::binary).write((const char*)header, sizeof header).write("\x01" "a", 2);
    CHECK(!dec.load(cut, &err) && one_line_naming(err, cut) &&
          err.find("truncated: a vocabulary of 16777216 tokens needs at least 33555456 bytes, the file holds 1026") != std::string::npos,
          "a header claiming more tokens than the file holds is refused before allocating them");
    printf("  %s\n", err.c_str());
    CHECK(!dec.load(dir, &err) && one_line_naming(err, dir) && err.find("not a regular file") != std::string::npos,
          "a directory as the decoder file: not a regular file");
    const std::string fifo = dir + "/fifo.bin";   // with no writer, fopen would wait: refused before
    CHECK(mkfifo(fifo.c_str(), 0600) == 0 && !dec.load(fifo, &err) && one_line_naming(err, fifo) &&
              err.find("not a regular file") != std::string::npos,
          "a named pipe as the decoder file: refused, not waited on");
    remove(fifo.c_str());
    remove(path.c_str());
    remove(cut.c_str());
}

static void test_errors(Gpt2Encoder& enc, const std::string& dir) {
    std::string bad = dir + "/bad_utf8.txt", err;
    std::ofstream(bad, std::ios::binary) << "caf\xc3\xa9 ok\n\xff oops";
    std::vector<int> ids = {1, 2, 3};
    CHECK(!enc.encode_file(bad, &ids, &err) && one_line_naming(err, bad) &&
          err.find("invalid UTF-8 at byte offset 9") != std::string::npos && ids.size() == 3,
          "invalid UTF-8 is rejected naming the file and offset");
    printf("  %s\n", err.c_str());
    remove(bad.c_str());
    Gpt2Encoder missing;
    std::string nodir = dir + "/no_vocab_here";
    CHECK(!missing.load(nodir, &err) && one_line_naming(err, nodir + "/encoder.json"),
          "a missing vocabulary directory gives one line naming the file");
    printf("  %s\n", err.c_str());
}

// A load error that stays one readable line, whatever the vocabulary files held: it names the file,
// holds no control byte (a \r, a DEL), and quotes at most a short cut of the file's text.
static bool readable_line(const std::string& err, const std::string& name) {
    for (unsigned char c : err) if (c < 0x20 || c == 0x7f) return false;
    return err.rfind(name + ": ", 0) == 0 && err.size() < name.size() + 300;
}

// Damaged vocabulary files (found by dev/fuzz/fuzz_bpe_vocab): vocab.bpe's bad line, a bad id's
// value and a JSON parse error's token were quoted whole and raw, so that an encoder.json given as
// vocab.bpe (one line of a megabyte) made a megabyte error line, and a CRLF vocab.bpe's \r sent the
// cursor back over the message.
static void test_vocab_errors(const std::string& vocab, const std::string& dir) {
    std::string json, err;
    const std::string vdir = dir + "/vocab", json_path = vdir + "/encoder.json", bpe_path = vdir + "/vocab.bpe";
    if (mkdir(vdir.c_str(), 0755) != 0 || !read_file(vocab + "/encoder.json", &json, &err)) {
        check_report(false, "damaged vocabularies: set up", err);
        return;
    }
    auto load = [&](const std::string& json_text, const std::string& bpe_text) {
        std::ofstream(json_path, std::ios::binary) << json_text;
        std::ofstream(bpe_path, std::ios::binary) << bpe_text;
        Gpt2Encoder enc;
        const bool ok = enc.load(vdir, &err);
        printf("  %s\n", err.c_str());
        return ok;
    };
    CHECK(!load(json, json) && readable_line(err, bpe_path) && err.find(": line 1: \"{") != std::string::npos &&
          err.find("...\" is not the merge that made token 256") != std::string::npos,
          "encoder.json given as vocab.bpe: one short line quoting the start of the bad line");
    CHECK(!load(json, "#version: 0.2\r\n\xc4\xa0 t\x0b\r\n") && readable_line(err, bpe_path) &&
          err.find("line 2: \"\xc4\xa0 t\\x0b\" is not the merge") != std::string::npos,
          "a control byte in a vocab.bpe line: escaped");
    // a CRLF copy of vocab.bpe (a Windows checkout) loads and encodes as the original
    std::string bpe, crlf;
    if (read_file(vocab + "/vocab.bpe", &bpe, &err))
        for (char c : bpe) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    bool crlf_ok = !crlf.empty() && load(json, crlf);
    std::vector<int> a, b;
    Gpt2Encoder orig, copy;
    const std::string text = "Hello there,\r\n the thin man's caf\xc3\xa9 12345";
    crlf_ok = crlf_ok && orig.load(vocab, &err) && copy.load(vdir, &err) && orig.encode(text, &a, &err) &&
              copy.encode(text, &b, &err) && a == b && a.size() > 5;
    CHECK(crlf_ok, "a CRLF vocab.bpe: loads, encodes as the original");
    CHECK(!load("{\"" + std::string(5000, 'a') + "\x7f\x01\"}", "") && readable_line(err, json_path) &&
          err.find("last read: '\"aaaa") != std::string::npos && err.find("...") != std::string::npos,
          "a JSON error after a long string: its token cut, the DEL escaped");
    std::string ids = "[0";
    for (int i = 0; i < 2000; i++) ids += ",0";
    CHECK(!load("{\"a\": " + ids + "]}", "") && readable_line(err, json_path) && err.find("(bad: [0,0,0,") != std::string::npos,
          "a long bad id value: cut");
    remove(json_path.c_str());
    remove(bpe_path.c_str());
    rmdir(vdir.c_str());
}

// Prints the speed; a shared or slow machine must not fail the tests, so nothing is checked.
static void report_speed(const std::string& vocab, const std::string& text) {
    Gpt2Encoder enc;
    std::string err;
    std::vector<int> ids;
    if (!enc.load(vocab, &err)) return;
    for (int pass = 0; pass < 2; pass++) {  // the first pass fills the cache, the second reuses it
        ids.clear();
        auto t0 = std::chrono::steady_clock::now();
        enc.encode(text, &ids, &err);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        printf("INFO encode speed on tinyshakespeare, one core, %s cache: %.2f M tokens/s\n",
               pass == 0 ? "cold" : "warm", ids.size() / s / 1e6);
    }
}

int main() {
    Gpt2Encoder enc;
    std::string err, shakespeare;
    const std::string vocab = vocab_dir();
    if (!enc.load(vocab, &err)) { check_report(false, "load the vocabulary", err); return check_finish(); }
    check_report(true, "load the vocabulary");
    if (!read_file(shakespeare_path(), &shakespeare, &err)) check_report(false, "read tinyshakespeare", err);
    char tmpl[] = "/tmp/test_tokenizer_XXXXXX";
    if (!mkdtemp(tmpl)) { check_report(false, "mkdtemp", strerror(errno)); return check_finish(); }
    const std::string dir = tmpl;
    test_fixture_text(enc);
    test_shakespeare(enc, shakespeare);
    test_cases(enc);
    test_runs(enc);
    test_classes();
    test_decoder_file(enc, dir, shakespeare);
    test_errors(enc, dir);
    test_vocab_errors(vocab, dir);
    CHECK(rmdir(dir.c_str()) == 0, "temp directory cleaned up");
    report_speed(vocab, shakespeare);
    return check_finish();
}
