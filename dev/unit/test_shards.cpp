// Token shard format (llmc/shards.h): a write/read roundtrip, and every kind of damaged file
// rejected with one line that names the file.
#include "llmc/shards.h"
#include "dev/unit/check.h"

#include <algorithm>
#include <cstdlib>
#include <unistd.h>
#include <vector>

static std::string g_dir;                 // the mkdtemp directory
static std::vector<std::string> g_files;  // created there, removed at the end

static std::string temp_path(const std::string& name) {
    g_files.push_back(g_dir + "/" + name);
    return g_files.back();
}

// Writes a shard by hand: `header_tokens` in the header, `body_tokens` tokens after it.
static std::string write_raw(const std::string& name, int magic, int version, int header_tokens,
                             size_t body_tokens) {
    std::string path = temp_path(name);
    std::vector<int32_t> header(SHARD_HEADER_INTS, 0);
    header[0] = magic; header[1] = version; header[2] = header_tokens;
    std::vector<uint16_t> body(body_tokens, 7);
    FILE* f = fopen(path.c_str(), "wb");
    bool ok = f && fwrite(header.data(), 4, header.size(), f) == header.size() &&
              (body.empty() || fwrite(body.data(), 2, body.size(), f) == body.size());
    if (f) ok = (fclose(f) == 0) && ok;
    if (!ok) check_report(false, "write " + name, "cannot write the test file");
    return path;
}

// The header check fails with one line that names the file and says `what`.
static void expect_reject(const std::string& name, const std::string& path, const std::string& what) {
    size_t n = 12345;
    std::string err;
    bool ok = shard_read_header(path, &n, &err);
    bool good = !ok && err.rfind(path + ": ", 0) == 0 && err.find(what) != std::string::npos &&
                err.find('\n') == std::string::npos && n == 12345;
    check_report(good, "rejects " + name, ok ? "accepted" : "message: " + err);
    printf("  %s\n", err.c_str());
}

static void test_roundtrip() {
    std::vector<uint16_t> tokens(5000);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(i * 40503u);  // all 16 bits used
    std::string path = temp_path("roundtrip.bin"), err;
    CHECK(shard_write(path, tokens.data(), tokens.size(), &err), "shard_write");
    CHECK(access((path + ".tmp").c_str(), F_OK) != 0, "atomic write leaves no .tmp behind");
    size_t n = 0;
    CHECK(shard_read_header(path, &n, &err), "shard_read_header of a written shard");
    CHECK_EQ(n, tokens.size(), "token count from the header");
    std::vector<uint16_t> back(tokens.size());
    CHECK(shard_read_tokens(path, 0, n, back.data(), &err) && back == tokens, "read back all tokens");
    std::vector<uint16_t> part(100);
    CHECK(shard_read_tokens(path, 1234, 100, part.data(), &err) &&
          std::equal(part.begin(), part.end(), tokens.begin() + 1234), "read back tokens [1234, 1334)");
    bool past = shard_read_tokens(path, 4950, 51, part.data(), &err);
    CHECK(!past && err.rfind(path, 0) == 0, "reading past the end fails naming the file");
    // Rewriting replaces the file whole.
    CHECK(shard_write(path, tokens.data(), 10, &err) && shard_read_header(path, &n, &err) && n == 10,
          "rewrite over an existing shard");
    std::string empty = temp_path("zero.bin");
    CHECK(shard_write(empty, tokens.data(), 0, &err) && shard_read_header(empty, &n, &err) && n == 0,
          "a shard of zero tokens");
}

static void test_write_errors() {
    std::string err, big = temp_path("too_big.bin");
    uint16_t dummy = 0;  // never read: the size check comes first
    bool ok = shard_write(big, &dummy, (size_t)INT32_MAX + 1, &err);
    CHECK(!ok && err.rfind(big + ": ", 0) == 0 && access(big.c_str(), F_OK) != 0,
          "shard_write refuses more than INT32_MAX tokens");
    std::string nodir = g_dir + "/no/such/dir/x.bin";
    ok = shard_write(nodir, &dummy, 1, &err);
    CHECK(!ok && err.find(nodir) != std::string::npos && err.find('\n') == std::string::npos,
          "shard_write into a missing directory fails with one line");
    printf("  %s\n", err.c_str());
}

static void test_rejections() {
    expect_reject("missing file", g_dir + "/does_not_exist.bin", "cannot open: No such file");
    expect_reject("a directory", g_dir, "not a regular file");
    // a named pipe with no writer: fopen would wait for one; it is refused before it is opened
    const std::string fifo = temp_path("fifo.bin");
    CHECK(mkfifo(fifo.c_str(), 0600) == 0, "create a named pipe");
    expect_reject("a named pipe (refused, not waited on)", fifo, "not a regular file");
    std::string empty = temp_path("empty.bin");
    FILE* f = fopen(empty.c_str(), "wb");
    CHECK(f && fclose(f) == 0, "create an empty file");
    expect_reject("empty file", empty, "file too small for the 1024-byte header");
    // A valid shard cut short mid-token, as a crash or a full disk would leave it.
    std::string cut = write_raw("cut.bin", SHARD_MAGIC, SHARD_VERSION, 1000, 1000);
    CHECK(truncate(cut.c_str(), SHARD_HEADER_BYTES + 2 * 1000 - 3) == 0, "truncate a shard");
    expect_reject("truncated shard", cut, "truncated: header says 1000 tokens, file holds 998 and a stray byte");
    std::string half = temp_path("half_header.bin");
    CHECK(truncate(cut.c_str(), 500) == 0 && rename(cut.c_str(), half.c_str()) == 0, "cut inside the header");
    expect_reject("file cut inside the header", half, "file too small for the 1024-byte header");
    expect_reject("wrong magic", write_raw("magic.bin", 123, SHARD_VERSION, 10, 10),
                  "bad magic 123 (expected 20240520)");
    expect_reject("wrong version", write_raw("version.bin", SHARD_MAGIC, 2, 10, 10),
                  "unsupported version 2 (expected 1)");
    expect_reject("header count larger than the file", write_raw("larger.bin", SHARD_MAGIC, SHARD_VERSION, 1000, 900),
                  "truncated: header says 1000 tokens, file holds 900");
    expect_reject("header count smaller than the file", write_raw("smaller.bin", SHARD_MAGIC, SHARD_VERSION, 1000, 1100),
                  "size mismatch: header says 1000 tokens, file holds 1100");
    expect_reject("negative count", write_raw("negative.bin", SHARD_MAGIC, SHARD_VERSION, -5, 0),
                  "negative token count -5");
    std::vector<uint16_t> out(10);
    std::string err, bad = g_dir + "/magic.bin";
    CHECK(!shard_read_tokens(bad, 0, 10, out.data(), &err) && err.rfind(bad + ": bad magic", 0) == 0,
          "shard_read_tokens validates the header too");
}

int main() {
    char tmpl[] = "/tmp/test_shards_XXXXXX";
    if (!mkdtemp(tmpl)) { check_report(false, "mkdtemp", strerror(errno)); return check_finish(); }
    g_dir = tmpl;
    test_roundtrip();
    test_write_errors();
    test_rejections();
    for (const std::string& f : g_files) { remove(f.c_str()); remove((f + ".tmp").c_str()); }
    CHECK(rmdir(g_dir.c_str()) == 0, "temp directory cleaned up");
    return check_finish();
}
