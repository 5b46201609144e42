// Token shards: the on-disk format of tokenized training data, compatible with llm.c.
//
//   header: 256 int32 (1024 bytes)  [0] magic 20240520, [1] version 1, [2] number of tokens,
//                                   the rest zero (room for future fields)
//   body:   the tokens as uint16, little-endian (GPT-2's 50257 ids fit in 16 bits)
//
// Host-only C++17. Every function returns false and sets *err to one line
// "<path>: <what is wrong>" instead of aborting, so callers decide how to fail.
// The file size must match the header exactly: a shard cut short by a crashed writer or a
// full disk is caught when it is opened, not as garbage tokens halfway through training.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shards.h reads and writes the little-endian format with plain fread/fwrite"
#endif

constexpr int SHARD_MAGIC = 20240520, SHARD_VERSION = 1, SHARD_HEADER_INTS = 256;
constexpr size_t SHARD_HEADER_BYTES = SHARD_HEADER_INTS * sizeof(int32_t);

namespace shard_detail {

struct FileCloser { void operator()(FILE* f) const { fclose(f); } };
using File = std::unique_ptr<FILE, FileCloser>;

inline bool fail(std::string* err, const std::string& path, const std::string& what) {
    if (err) *err = path + ": " + what;
    return false;
}

}  // namespace shard_detail

// fopen(path, "rb") for a regular file only, with its size: a path that is not one is refused
// before it is opened, since fopen would block on a named pipe until something writes to it, and
// "opens" a directory whose first read then fails. nullptr + one line "<path>: <why>" in *err.
inline std::unique_ptr<FILE, shard_detail::FileCloser> open_regular_file(const std::string& path, size_t* size, std::string* err) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) { shard_detail::fail(err, path, std::string("cannot open: ") + strerror(errno)); return nullptr; }
    if (!S_ISREG(st.st_mode)) { shard_detail::fail(err, path, "not a regular file"); return nullptr; }
    std::unique_ptr<FILE, shard_detail::FileCloser> f(fopen(path.c_str(), "rb"));
    if (!f || fstat(fileno(f.get()), &st) != 0) { shard_detail::fail(err, path, std::string("cannot open: ") + strerror(errno)); return nullptr; }
    *size = (size_t)st.st_size;
    return f;
}

namespace shard_detail {

// What is wrong with a shard of `size` bytes whose header is h ("" when nothing is).
inline std::string header_problem(const int32_t* h, size_t size) {
    if (h[0] != SHARD_MAGIC)
        return "bad magic " + std::to_string(h[0]) + " (expected " + std::to_string(SHARD_MAGIC) + ")";
    if (h[1] != SHARD_VERSION)
        return "unsupported version " + std::to_string(h[1]) + " (expected " + std::to_string(SHARD_VERSION) + ")";
    if (h[2] < 0) return "negative token count " + std::to_string(h[2]);
    size_t claimed = (size_t)h[2], body = size - SHARD_HEADER_BYTES, held = body / sizeof(uint16_t);
    if (claimed * sizeof(uint16_t) == body) return "";
    return std::string(claimed > held ? "truncated: " : "size mismatch: ") + "header says " +
           std::to_string(claimed) + " tokens, file holds " + std::to_string(held) +
           (body % sizeof(uint16_t) ? " and a stray byte" : "");
}

// Opens a file of this layout (a 256-int32 header, then uint16 values: shards, and llmc/choices.h's
// multiple-choice sets) and reads its header into `header`, leaving the file after it; *size: the
// file's bytes. Checks only that it is a regular file with a whole header. nullptr + *err on a problem.
inline File open_with_header(const std::string& path, int32_t* header, size_t* size, std::string* err) {
    File f = open_regular_file(path, size, err);
    if (!f) return nullptr;
    if (*size < SHARD_HEADER_BYTES) {
        fail(err, path, "file too small for the 1024-byte header (" + std::to_string(*size) + " bytes)");
        return nullptr;
    }
    if (fread(header, sizeof(int32_t), SHARD_HEADER_INTS, f.get()) != (size_t)SHARD_HEADER_INTS) {
        fail(err, path, "cannot read the header");
        return nullptr;
    }
    return f;
}

// The first half of write_with_header: header and body to "<path>.tmp", flushed to disk, not
// renamed; on failure the .tmp file is removed (a .tmp that could not be created, e.g. a
// directory of that name, is left alone).
inline bool write_tmp_with_header(const std::string& path, const int32_t* header, const uint16_t* body, size_t n,
                                  std::string* err) {
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) return fail(err, path, std::string("cannot create the .tmp file: ") + strerror(errno));
    bool ok = fwrite(header, sizeof(int32_t), SHARD_HEADER_INTS, f) == (size_t)SHARD_HEADER_INTS &&
              (n == 0 || fwrite(body, sizeof(uint16_t), n, f) == n) &&
              fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved_errno = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) { ok = false; saved_errno = errno; }  // delayed write errors show here
    if (!ok) {
        remove(tmp.c_str());
        return fail(err, path, std::string("write failed: ") + strerror(saved_errno));
    }
    return true;
}

// Writes a file of this layout atomically: header and body go to "<path>.tmp", are flushed to
// disk, and only then renamed over `path`. rename() is atomic, so a reader (or a rerun after a
// crash) sees either the old file or the complete new one, never a half-written one.
inline bool write_with_header(const std::string& path, const int32_t* header, const uint16_t* body, size_t n,
                              std::string* err) {
    if (!write_tmp_with_header(path, header, body, n, err)) return false;
    const std::string tmp = path + ".tmp";
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        const int saved_errno = errno;
        remove(tmp.c_str());
        return fail(err, path, std::string("cannot rename the .tmp file into place: ") + strerror(saved_errno));
    }
    return true;
}

// Opens a shard and checks its header against its size, leaving the file at the first token.
// Returns nullptr (and sets *err) on any problem.
inline File open_checked(const std::string& path, size_t* num_tokens, std::string* err) {
    int32_t header[SHARD_HEADER_INTS];
    size_t size = 0;
    File f = open_with_header(path, header, &size, err);
    if (!f) return nullptr;
    std::string problem = header_problem(header, size);
    if (!problem.empty()) { fail(err, path, problem); return nullptr; }
    *num_tokens = (size_t)header[2];
    return f;
}

}  // namespace shard_detail

// Validates the header of `path` against its file size and returns the token count.
inline bool shard_read_header(const std::string& path, size_t* num_tokens, std::string* err) {
    return shard_detail::open_checked(path, num_tokens, err) != nullptr;
}

// Reads tokens [start, start+count) into out.
inline bool shard_read_tokens(const std::string& path, size_t start, size_t count, uint16_t* out,
                              std::string* err) {
    size_t n = 0;
    shard_detail::File f = shard_detail::open_checked(path, &n, err);
    if (!f) return false;
    if (start > n || count > n - start)  // written this way so start+count cannot overflow
        return shard_detail::fail(err, path, "cannot read " + std::to_string(count) +
            " tokens from token " + std::to_string(start) + ": the shard holds " + std::to_string(n));
    if (fseeko(f.get(), (off_t)(SHARD_HEADER_BYTES + start * sizeof(uint16_t)), SEEK_SET) != 0)
        return shard_detail::fail(err, path, "cannot seek to token " + std::to_string(start));
    if (count > 0 && fread(out, sizeof(uint16_t), count, f.get()) != count)
        return shard_detail::fail(err, path, "read failed at token " + std::to_string(start));
    return true;
}

// Writes a complete shard atomically (shard_detail::write_with_header); with tmp_only, only to
// "<path>.tmp", flushed to disk, for a caller that renames several files into place together
// (data/tokenize's train/val pair).
inline bool shard_write(const std::string& path, const uint16_t* tokens, size_t n, std::string* err, bool tmp_only = false) {
    if (n > (size_t)INT32_MAX)
        return shard_detail::fail(err, path, std::to_string(n) +
                                  " tokens do not fit the header's int32 count; split the data");
    int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)n};
    return tmp_only ? shard_detail::write_tmp_with_header(path, header, tokens, n, err)
                    : shard_detail::write_with_header(path, header, tokens, n, err);
}
