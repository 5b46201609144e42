// The GPT-2 encoder: text -> token ids, identical token for token to tiktoken's "gpt2".
//
// GPT-2 tokenizes in two stages:
//  1. Pre-tokenization: a regex splits the text into pieces (words with their leading space,
//     numbers, punctuation runs, whitespace runs, common English contractions). Tokens never
//     cross piece boundaries, which keeps the vocabulary from wasting entries on "dog." etc.
//  2. Byte-level BPE inside each piece: start from one token per byte and repeatedly merge the
//     adjacent pair whose merged token has the lowest rank (the earliest-learned merge).
//     Working on bytes rather than characters means any input can be encoded, with no
//     "unknown" token, in a vocabulary of only 256 base symbols.
//
// Vocabulary files (OpenAI's originals): encoder.json maps token strings to ids, vocab.bpe
// lists the merges in rank order. Needs PCRE2 (link -lpcre2-8) and nlohmann/json.
#pragma once
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <nlohmann/json.hpp>
#include "../llmc/options.h"   // printable

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

// Reads a whole file into *data; false and a one-line "<path>: <why>" in *err on failure.
inline bool read_file(const std::string& path, std::string* data, std::string* err) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) { *err = path + ": cannot open: " + strerror(errno); return false; }
    data->clear();
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) data->append(buf, got);
    const int why = errno;   // a directory opens, and its first read fails (EISDIR)
    bool ok = !ferror(f);
    fclose(f);
    if (!ok) *err = path + ": read failed: " + strerror(why);
    return ok;
}

// A JSON parse error for an error line. nlohmann quotes the token read so far as it is ("last read:
// '...'", "number overflow parsing '...'"): for a string, all of it up to the error (kilobytes of a long
// line, a DEL byte unescaped). From there on the message goes through printable (escaped, cut at 80
// bytes): the token's own bytes cannot be told from the message's end ("'; expected ..." may follow).
inline std::string json_error_text(const nlohmann::json::exception& e) {
    const std::string what = e.what();
    for (const char* mark : {"last read: '", "number overflow parsing '"}) {
        const size_t at = what.find(mark);
        if (at != std::string::npos) return what.substr(0, at + strlen(mark)) + printable(what.substr(at + strlen(mark)));
    }
    return what;
}

// GPT-2's bytes_to_unicode. The vocabulary files are text: merges are written "a b" and
// tokens are JSON keys. Raw bytes such as spaces, newlines or control codes would make them
// ambiguous or unreadable, so every byte gets a stand-in printable character: bytes that
// already are visible Latin-1 characters stand for themselves, the other 68 (whitespace,
// control codes) become U+0100, U+0101, ... in byte order. A space is thus written "Ġ" (U+0120).
inline std::array<uint32_t, 256> bytes_to_unicode() {
    std::array<uint32_t, 256> cp{};
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; b++) {
        bool visible = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = visible ? b : 256 + n++;
    }
    return cp;
}

// A hash map from byte strings to id sequences, kept in flat arrays (open addressing,
// linear probing). The encoder looks up every piece of text here, so this is its innermost
// step: a node-based std::unordered_map costs several cache misses per lookup and an
// allocation per entry, this costs about one miss.
class PieceTable {
public:
    void clear() { slots_.assign(1 << 16, Slot{}); keys_.clear(); ids_.clear(); used_ = 0; }
    size_t bytes() const { return keys_.size() + ids_.size() * sizeof(int) + slots_.size() * sizeof(Slot); }

    // The ids stored for `piece` (*n of them), or nullptr when it is absent.
    const int* find(std::string_view piece, uint32_t* n) const {
        const uint64_t h = hash(piece);
        for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
            const Slot& s = slots_[i];
            if (s.hash == 0) return nullptr;
            if (s.hash == h && s.key_len == piece.size() && memcmp(&keys_[s.key], piece.data(), piece.size()) == 0) {
                *n = s.n_ids;
                return &ids_[s.ids];
            }
        }
    }

    void insert(std::string_view piece, const int* ids, size_t n) {  // piece must be absent
        if (2 * (used_ + 1) > slots_.size()) grow();
        Slot s{hash(piece), (uint32_t)keys_.size(), (uint32_t)piece.size(), (uint32_t)ids_.size(), (uint32_t)n};
        keys_.append(piece);
        ids_.insert(ids_.end(), ids, ids + n);
        place(s);
        used_++;
    }

private:
    struct Slot { uint64_t hash; uint32_t key, key_len, ids, n_ids; };  // hash 0: empty

    static uint64_t hash(std::string_view s) {  // FNV-1a; pieces are short
        uint64_t h = 0xcbf29ce484222325ull;
        for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
        return (h ^ (h >> 29)) | 1;  // fold the well-mixed high bits into the index bits
    }
    void place(const Slot& s) {
        size_t i = s.hash & (slots_.size() - 1);
        while (slots_[i].hash != 0) i = (i + 1) & (slots_.size() - 1);
        slots_[i] = s;
    }
    void grow() {
        std::vector<Slot> old(2 * slots_.size(), Slot{});
        old.swap(slots_);
        for (const Slot& s : old)
            if (s.hash != 0) place(s);
    }

    std::vector<Slot> slots_;  // a power of two in size, at most half full
    std::string keys_;         // all keys, back to back
    std::vector<int> ids_;     // all id sequences, back to back
    size_t used_ = 0;
};

// (a, b) -> the token that merging the adjacent tokens a and b creates, or -1. Flat like
// PieceTable, because BPE looks up every adjacent pair of every new piece.
class PairTable {
public:
    void clear(size_t capacity) {  // room for `capacity` entries at most half full
        size_t n = 1;
        while (n < 2 * capacity) n *= 2;
        slots_.assign(n, Slot{0, 0, -1});
    }
    void insert(int a, int b, int merged) {  // (a, b) must be absent
        size_t i = index(a, b);
        while (slots_[i].merged >= 0) i = (i + 1) & (slots_.size() - 1);
        slots_[i] = Slot{a, b, merged};
    }
    int find(int a, int b) const {
        for (size_t i = index(a, b);; i = (i + 1) & (slots_.size() - 1)) {
            const Slot& s = slots_[i];
            if (s.merged < 0 || (s.a == a && s.b == b)) return s.merged;
        }
    }

private:
    struct Slot { int a, b, merged; };  // merged -1: empty
    size_t index(int a, int b) const {
        uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing
        return (h >> 32) & (slots_.size() - 1);
    }
    std::vector<Slot> slots_;
};

// Not thread-safe (encode() updates the cache and PCRE2's match data): one per thread.
class Gpt2Encoder {
public:
    // GPT-2's pre-tokenization pattern (OpenAI's encoder.py, tiktoken's "gpt2"):
    //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    // with \s spelled out as what it means in tiktoken: Unicode's White_Space property.
    // PCRE2's own \s also matches U+180E MONGOLIAN VOWEL SEPARATOR (white space no longer
    // since Unicode 6.3), and \p{White_Space} needs PCRE2 10.40 or later.
    // \p{L} and \p{N} are each PCRE2's plus the letters (numbers) that Unicode 15.0 to 16.0 added
    // (new_letters, new_numbers): tiktoken's regex (0.14.0: Rust's regex crate) has Unicode 16.0
    // tables, PCRE2 10.42's are of Unicode 14.0, where those are unassigned code points. Without
    // them "\x{1C89}'s" (a Cyrillic letter of Unicode 16) split as "\x{1C89}'" + "s" (one run of
    // "punctuation") where tiktoken has "\x{1C89}" + "'s", and CJK Extension H and I characters
    // joined the punctuation beside them. A PCRE2 with tables newer than tiktoken's would differ
    // the other way: test_tokenizer compares the classes with tiktoken's, code point by code point.
    // Written (?:\p{L}|[...]) and [^...](?<![...]) rather than as one class [\p{L}...]: PCRE2's
    // JIT tries a class's items one by one: the one class made the split of English text 30% slower,
    // these forms 5%. Their runs are possessive (++, as in tiktoken's own gpt2 pattern; the same
    // pieces, since nothing follows a run in its alternative): a greedy + keeps a backtracking
    // point per character on PCRE2's JIT stack (32 KiB), and a run of 1,365 letters failed with
    // "JIT stack limit reached"; possessive, a run of 20 million takes none.
    static std::string white_space() {
        return R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
    }
    static std::string new_letters() {
        return R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65})"
               R"(\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B}\x{1138E})"
               R"(\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10})"
               R"(\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D})"
               R"(\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D})"
               R"(\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
    }
    static std::string new_numbers() {
        return R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59}\x{16130}-\x{16139})"
               R"(\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";
    }
    static std::string pattern() {
        const std::string ws = white_space(), letter = "(?:\\p{L}|[" + new_letters() + "])",
                          number = "(?:\\p{N}|[" + new_numbers() + "])",
                          other = "(?:[^" + ws + "\\p{L}\\p{N}](?<![" + new_letters() + new_numbers() + "]))";
        return "'s|'t|'re|'ve|'m|'ll|'d| ?" + letter + "++| ?" + number + "++| ?" + other + "++|[" + ws + "]+(?![^" + ws +
               "])|[" + ws + "]+";
    }
    // pattern() compiled as encode() runs it (test_tokenizer matches with it too); nullptr and the
    // PCRE2 error code in *code on failure. UTF mode validates the subject; UCP makes \s, \p{L},
    // \p{N} follow Unicode, as in tiktoken. Every character matches some alternative, so each
    // piece starts exactly where the last one ended: ANCHORED saves the search for a start. (It
    // must be given here, not to pcre2_match, where it would turn the JIT off.)
    static pcre2_code* compile_split_pattern(int* code) {
        PCRE2_SIZE at = 0;
        const std::string pat = pattern();
        pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.c_str()), pat.size(),
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, code, &at, nullptr);
        if (re) pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // when JIT is unavailable pcre2_match interprets
        return re;
    }
    static constexpr size_t kProgressBytes = 1 << 20;    // encode() reports progress this often
    using Progress = std::function<void(size_t bytes_done)>;

    Gpt2Encoder() = default;
    Gpt2Encoder(const Gpt2Encoder&) = delete;
    Gpt2Encoder& operator=(const Gpt2Encoder&) = delete;
    ~Gpt2Encoder() { pcre2_match_data_free(match_); pcre2_code_free(re_); }  // both accept nullptr

    // Loads <dir>/encoder.json and <dir>/vocab.bpe. One-line error naming the file on failure.
    bool load(const std::string& dir, std::string* err) {
        nlohmann::json vocab;
        std::string text, json_path = dir + "/encoder.json", merges_path = dir + "/vocab.bpe";
        if (!read_file(json_path, &text, err)) return false;
        try { vocab = nlohmann::json::parse(text); }
        catch (const nlohmann::json::exception& e) { return fail(err, json_path, json_error_text(e)); }
        if (!load_tokens(vocab, json_path, err)) return false;
        if (!read_file(merges_path, &text, err) || !check_merges(text, vocab, merges_path, err)) return false;
        reset_cache();
        build_pair_table();
        return compile_pattern(err);
    }

    // Appends the ids of `text` to *out. tiktoken's encode_ordinary: "<|endoftext|>" in the
    // text is ordinary text. Fails (leaving *out as it was) on invalid UTF-8, with a message
    // "<source>: invalid UTF-8 at byte offset N (...)". Calls progress every kProgressBytes.
    bool encode(std::string_view text, std::vector<int>* out, std::string* err,
                const std::string& source = "<text>", const Progress& progress = nullptr) {
        const size_t out_size = out->size();
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        // The first call validates the UTF-8 of the whole text; the later ones skip that (it
        // would make the loop quadratic).
        uint32_t options = 0;
        size_t next_report = kProgressBytes;
        for (size_t pos = 0; pos < text.size();) {
            int rc = pcre2_match(re_, subject, text.size(), pos, options, match_, nullptr);
            if (rc < 0) { out->resize(out_size); return match_error(rc, pos, source, err); }
            options |= PCRE2_NO_UTF_CHECK;
            size_t end = pcre2_get_ovector_pointer(match_)[1];
            if (end - pos > (size_t)INT32_MAX) {  // bpe() indexes a piece with int
                out->resize(out_size);
                return fail(err, source, "a single piece of over 2 GiB at byte offset " + std::to_string(pos));
            }
            append_piece(text.substr(pos, end - pos), out);
            pos = end;
            if (progress && pos >= next_report) { progress(pos); next_report = pos + kProgressBytes; }
        }
        return true;
    }

    // Reads and encodes a file; errors name the file.
    bool encode_file(const std::string& path, std::vector<int>* out, std::string* err,
                     const Progress& progress = nullptr) {
        std::string text;
        return read_file(path, &text, err) && encode(text, out, err, path, progress);
    }

    const std::vector<std::string>& decoder() const { return tokens_; }  // id -> raw bytes
    int vocab_size() const { return (int)tokens_.size(); }
    int eot() const { return eot_; }

private:
    static constexpr size_t kMaxCacheBytes = 256 << 20;  // bounds the cache's memory
    static constexpr size_t kMaxCachedPieceBytes = 256;  // longer pieces rarely repeat

    static bool fail(std::string* err, const std::string& path, const std::string& what) {
        *err = path + ": " + what;
        return false;
    }

    // Maps the stand-in characters of a vocabulary string back to raw bytes. All stand-ins
    // are below U+0200, i.e. one or two bytes of UTF-8.
    static bool unicode_to_bytes(const std::string& s, std::string* bytes) {
        static const std::array<int, 512> to_byte = [] {
            std::array<int, 512> t;
            t.fill(-1);
            auto cp = bytes_to_unicode();
            for (int b = 0; b < 256; b++) t[cp[b]] = b;
            return t;
        }();
        bytes->clear();
        for (size_t i = 0; i < s.size(); i++) {
            uint32_t c = (unsigned char)s[i];
            if (c >= 0xC0 && c < 0xE0 && i + 1 < s.size() && (s[i + 1] & 0xC0) == 0x80)
                c = ((c & 0x1F) << 6) | (s[++i] & 0x3F);
            else if (c >= 0x80) return false;
            if (c >= to_byte.size() || to_byte[c] < 0) return false;
            bytes->push_back((char)to_byte[c]);
        }
        return true;
    }

    // encoder.json: ids must be exactly 0..N-1, with "<|endoftext|>" among them.
    bool load_tokens(const nlohmann::json& vocab, const std::string& path, std::string* err) {
        if (!vocab.is_object() || vocab.empty()) return fail(err, path, "expected an object of token: id");
        std::vector<std::string> tokens(vocab.size());
        std::vector<bool> seen(vocab.size(), false);
        for (const auto& item : vocab.items()) {
            const auto& v = item.value();
            int64_t id = v.is_number_integer() ? v.get<int64_t>() : -1;
            if (id < 0 || (size_t)id >= tokens.size() || seen[id])
                return fail(err, path, "token ids must be 0.." + std::to_string(tokens.size() - 1) +
                                       ", each once (bad: " + printable(v.dump()) + ")");  // a value may be long
            seen[id] = true;
            if (!unicode_to_bytes(item.key(), &tokens[id]))
                return fail(err, path, "token " + std::to_string(id) + " has a character outside GPT-2's byte alphabet");
        }
        auto eot = vocab.find("<|endoftext|>");
        if (eot == vocab.end()) return fail(err, path, "no <|endoftext|> token");
        if (tokens.size() < 257) return fail(err, path, "too few tokens (" + std::to_string(tokens.size()) + ")");
        for (int id = 0; id < 256; id++) {  // ids 0..255 must be the 256 single bytes
            if (tokens[id].size() != 1) return fail(err, path, "ids 0..255 must be the single-byte tokens");
            byte_token_[(unsigned char)tokens[id][0]] = id;
        }
        tokens_ = std::move(tokens);
        eot_ = eot->get<int>();
        return true;
    }

    // tiktoken ranks a candidate merge by the id of the token it would create; OpenAI's
    // encoder ranks it by the merge's line in vocab.bpe. The two agree because merge n
    // created token 256+n, which this checks (as tiktoken's loader does), so the ids alone
    // serve as ranks from here on.
    bool check_merges(const std::string& text, const nlohmann::json& vocab, const std::string& path,
                      std::string* err) {
        size_t n = 0, line_no = 0;
        for (size_t pos = 0; pos < text.size();) {
            size_t eol = std::min(text.find('\n', pos), text.size());
            std::string line = text.substr(pos, eol - pos);
            pos = eol + 1;
            line_no++;
            // a CRLF copy (a Windows checkout) reads as the original, as it does for Hugging Face's
            // loader: no merge can hold a real \r, since bytes_to_unicode gives it a stand-in
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
            size_t sp = line.find(' ');
            auto it = vocab.end();
            if (sp != std::string::npos && line.find(' ', sp + 1) == std::string::npos)
                it = vocab.find(line.substr(0, sp) + line.substr(sp + 1));
            // the line quoted through printable: it may be anything (a whole encoder.json given as
            // vocab.bpe is one line of a megabyte; a control byte would reach the terminal)
            if (it == vocab.end() || it->get<int64_t>() != (int64_t)(256 + n))
                return fail(err, path, "line " + std::to_string(line_no) + ": \"" + printable(line) +
                                       "\" is not the merge that made token " + std::to_string(256 + n));
            n++;
        }
        if (256 + n + 1 != tokens_.size())
            return fail(err, path, std::to_string(n) + " merges, but encoder.json has " +
                                   std::to_string(tokens_.size()) + " tokens (expected 256 + merges + 1)");
        return true;
    }

    // tiktoken merges ANY adjacent pair that concatenates to a token, not only the pairs listed
    // in vocab.bpe, so every split of every token into two tokens goes into the table (except
    // <|endoftext|>'s: special tokens never come from merging). Runs while the cache holds
    // exactly the tokens, so that it serves as the bytes -> id map.
    void build_pair_table() {
        std::vector<std::array<int, 3>> pairs;  // (a, b, merged), collected first to size the table
        uint32_t n;
        for (int id = 0; id < (int)tokens_.size(); id++) {
            std::string_view bytes = tokens_[id];
            for (size_t k = 1; id != eot_ && k < bytes.size(); k++) {
                const int *a = cache_.find(bytes.substr(0, k), &n), *b = cache_.find(bytes.substr(k), &n);
                if (a && b) pairs.push_back({*a, *b, id});
            }
        }
        pair_merge_.clear(pairs.size());
        for (const auto& [a, b, merged] : pairs) pair_merge_.insert(a, b, merged);
    }

    // The cache maps a piece to its ids. Text repeats the same words over and over, so after
    // the first pages almost every piece is found here and BPE rarely runs. It starts with every
    // token: a piece that is a whole token is its own encoding (tiktoken checks this first too).
    void reset_cache() {
        cache_.clear();
        for (int id = 0; id < (int)tokens_.size(); id++)
            if (id != eot_) cache_.insert(tokens_[id], &id, 1);
    }

    void append_piece(std::string_view piece, std::vector<int>* out) {
        uint32_t n = 0;
        if (const int* ids = cache_.find(piece, &n)) { out->insert(out->end(), ids, ids + n); return; }
        const size_t begin = out->size();
        bpe(piece, out);
        if (piece.size() > kMaxCachedPieceBytes) return;
        if (cache_.bytes() > kMaxCacheBytes) reset_cache();
        cache_.insert(piece, out->data() + begin, out->size() - begin);
    }

    // Byte-level BPE of one piece, appended to *out. Equivalent to tiktoken's loop (merge the
    // lowest-ranked adjacent pair, the leftmost on ties, until none merges) but with a heap and
    // a linked list, so a pathological piece (a megabyte of spaces) costs O(n log n), not O(n^2).
    void bpe(std::string_view piece, std::vector<int>* out) {
        const int n = (int)piece.size();
        tok_.resize(n); next_.resize(n); prev_.resize(n);
        for (int i = 0; i < n; i++) {
            tok_[i] = byte_token_[(unsigned char)piece[i]];
            next_[i] = i + 1;
            prev_[i] = i - 1;
        }
        heap_.clear();
        // Candidates are (rank, position); lower rank first, then the leftmost.
        auto push = [&](int i) {
            if (i < 0 || next_[i] >= n) return;
            int rank = pair_merge_.find(tok_[i], tok_[next_[i]]);
            if (rank < 0) return;
            heap_.push_back((uint64_t)rank << 32 | (uint32_t)i);
            std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
        };
        for (int i = 0; i + 1 < n; i++) push(i);
        while (!heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
            int rank = (int)(heap_.back() >> 32), i = (int)(uint32_t)heap_.back();
            heap_.pop_back();
            // Stale if either side has changed since: a grown part makes a longer byte
            // string, hence a different token and rank.
            if (tok_[i] < 0 || next_[i] >= n || pair_merge_.find(tok_[i], tok_[next_[i]]) != rank) continue;
            int j = next_[i];  // i absorbs j; j leaves the list
            tok_[i] = rank, tok_[j] = -1, next_[i] = next_[j];
            if (next_[j] < n) prev_[next_[j]] = i;
            push(prev_[i]);
            push(i);
        }
        for (int i = 0; i < n; i = next_[i]) out->push_back(tok_[i]);
    }

    bool compile_pattern(std::string* err) {
        int code = 0;
        pcre2_match_data_free(match_);
        pcre2_code_free(re_);
        re_ = compile_split_pattern(&code);
        if (!re_) return fail(err, "pcre2_compile", pcre2_message(code));
        match_ = pcre2_match_data_create_from_pattern(re_, nullptr);
        return match_ != nullptr || fail(err, "pcre2_match_data_create", "out of memory");
    }

    static std::string pcre2_message(int code) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(code, buf, sizeof(buf));
        return reinterpret_cast<const char*>(buf);
    }

    // After a UTF-8 error PCRE2 reports where the bad character starts.
    bool match_error(int rc, size_t pos, const std::string& source, std::string* err) {
        bool utf = rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21;
        return fail(err, source, (utf ? "invalid UTF-8 at byte offset " : "pre-tokenizer failed at byte offset ") +
                                 std::to_string(utf ? pcre2_get_startchar(match_) : pos) + " (" + pcre2_message(rc) + ")");
    }

    std::vector<std::string> tokens_;                   // id -> raw bytes
    int eot_ = -1;
    std::array<int, 256> byte_token_{};                 // byte -> its single-byte token
    PairTable pair_merge_;                              // (a, b) -> merged token (= rank)
    PieceTable cache_;                                  // piece -> ids
    std::vector<int> tok_, next_, prev_;                // bpe() scratch, reused across calls
    std::vector<uint64_t> heap_;
    pcre2_code* re_ = nullptr;
    pcre2_match_data* match_ = nullptr;
};
