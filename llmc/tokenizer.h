// The decode side of the GPT-2 tokenizer, as the trainer needs it to print samples.
//
// The trainer only turns ids back into bytes, so it reads a small binary table instead of
// the vocabulary JSON and merge list (which data/bpe.h needs to encode). The file format
// is llm.c's gpt2_tokenizer.bin:
//
//   header: 256 uint32  [0] magic 20240328, [1] version 2, [2] vocab_size, [3] eot token id
//   then, for id = 0 .. vocab_size-1: one uint8 length followed by that many raw bytes
//
// A token's bytes are not necessarily valid UTF-8 on their own (byte-level BPE can split a
// multi-byte character across tokens), so decode() returns raw bytes; only a whole decoded
// sequence is meaningful text. Host-only C++17.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include "shards.h"   // open_regular_file

constexpr uint32_t TOKENIZER_MAGIC = 20240328, TOKENIZER_VERSION = 2, TOKENIZER_HEADER_INTS = 256;

struct TokenizerDecoder {
    // Loads the table; on failure returns false and sets *err to one line naming the file.
    bool load(const std::string& path, std::string* err) {
        size_t size;
        auto f = open_regular_file(path, &size, err);
        if (!f) return false;
        uint32_t header[TOKENIZER_HEADER_INTS];
        if (fread(header, sizeof(uint32_t), TOKENIZER_HEADER_INTS, f.get()) != TOKENIZER_HEADER_INTS)
            return fail(err, path, "file too small for the 1024-byte header");
        if (header[0] != TOKENIZER_MAGIC)
            return fail(err, path, "bad magic " + std::to_string(header[0]) + " (expected " +
                                   std::to_string(TOKENIZER_MAGIC) + ")");
        if (header[1] != TOKENIZER_VERSION)
            return fail(err, path, "unsupported version " + std::to_string(header[1]) +
                                   " (expected " + std::to_string(TOKENIZER_VERSION) + ")");
        uint32_t n = header[2], eot = header[3];
        if (n == 0 || n > (1u << 24))  // a bound so a corrupt header cannot ask for gigabytes
            return fail(err, path, "implausible vocab_size " + std::to_string(n));
        if (eot >= n)
            return fail(err, path, "eot token " + std::to_string(eot) + " is outside the vocabulary of " +
                                   std::to_string(n));
        // every token takes at least 2 bytes (its length, then at least one byte): a header that
        // claims more tokens than the file can hold is refused before the table is allocated
        const uint64_t least = sizeof header + 2ull * n;
        if ((uint64_t)size < least)
            return fail(err, path, "truncated: a vocabulary of " + std::to_string(n) + " tokens needs at least " +
                                   std::to_string(least) + " bytes, the file holds " + std::to_string(size));
        std::vector<std::string> tokens(n);
        for (uint32_t id = 0; id < n; id++) {
            unsigned char len = 0;
            const std::string where = "token " + std::to_string(id) + " of " + std::to_string(n);
            if (fread(&len, 1, 1, f.get()) != 1) return fail(err, path, "truncated at " + where);
            if (len == 0) return fail(err, path, where + " has length 0");
            tokens[id].resize(len);
            if (fread(&tokens[id][0], 1, len, f.get()) != len) return fail(err, path, "truncated at " + where);
        }
        if (fgetc(f.get()) != EOF)
            return fail(err, path, "unexpected bytes after the last of " + std::to_string(n) + " tokens");
        tokens_ = std::move(tokens);
        eot_ = (int)eot;
        return true;
    }

    // The raw bytes of token `id`; "" for ids outside the vocabulary, so a sampler bug shows
    // up as missing text rather than a crash.
    const std::string& decode(int id) const {
        static const std::string empty;
        return id >= 0 && (size_t)id < tokens_.size() ? tokens_[id] : empty;
    }
    int vocab_size() const { return (int)tokens_.size(); }
    int eot() const { return eot_; }

private:
    static bool fail(std::string* err, const std::string& path, const std::string& what) {
        if (err) *err = path + ": " + what;
        return false;
    }
    std::vector<std::string> tokens_;
    int eot_ = -1;
};

inline std::string decode_tokens(const TokenizerDecoder& dec, const int* ids, size_t n) {
    std::string text;
    for (size_t i = 0; i < n; i++) text += dec.decode(ids[i]);
    return text;
}

// Writes the table that TokenizerDecoder::load reads (data/tokenize --export-decoder).
// Written to "<path>.tmp" and renamed into place, so a failed export never leaves a partial file.
inline bool tokenizer_write(const std::string& path, const std::vector<std::string>& tokens, int eot,
                            std::string* err) {
    auto fail = [&](const std::string& what) { if (err) *err = path + ": " + what; return false; };
    if (eot < 0 || (size_t)eot >= tokens.size()) return fail("eot token outside the vocabulary");
    for (size_t id = 0; id < tokens.size(); id++)
        if (tokens[id].empty() || tokens[id].size() > 255)
            return fail("token " + std::to_string(id) + " has " + std::to_string(tokens[id].size()) +
                        " bytes; the format stores 1..255");
    uint32_t header[TOKENIZER_HEADER_INTS] = {TOKENIZER_MAGIC, TOKENIZER_VERSION,
                                              (uint32_t)tokens.size(), (uint32_t)eot};
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) return fail(std::string("cannot create the .tmp file: ") + strerror(errno));
    bool ok = fwrite(header, sizeof(uint32_t), TOKENIZER_HEADER_INTS, f) == TOKENIZER_HEADER_INTS;
    for (size_t id = 0; ok && id < tokens.size(); id++) {
        unsigned char len = (unsigned char)tokens[id].size();
        ok = fwrite(&len, 1, 1, f) == 1 && fwrite(tokens[id].data(), 1, len, f) == len;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved_errno = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) { ok = false; saved_errno = errno; }
    if (ok && rename(tmp.c_str(), path.c_str()) != 0) { ok = false; saved_errno = errno; }
    if (!ok) { remove(tmp.c_str()); return fail(std::string("write failed: ") + strerror(saved_errno)); }
    return true;
}
