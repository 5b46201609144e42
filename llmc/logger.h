// The run log: one JSON object per line (JSONL) in <out>/log.jsonl, for dev/plot.py and for
// anyone's own analysis. Appends, so a resumed run continues the same file. With it, the host's
// small file and text helpers (the run directory, whole-file reads, atomic writes, printf into a
// string, JSON literals). Host-only.
#pragma once
#include <cerrno>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include "options.h"  // utf8_sequence
#include "shards.h"   // open_regular_file

// The run directory.
inline bool file_exists(const std::string& path) { struct stat st; return stat(path.c_str(), &st) == 0; }
// mkdir -p: creates path and its missing parents.
inline bool make_dirs(const std::string& path, std::string* err) {
    for (size_t i = 1; i <= path.size(); i++) {
        if (i < path.size() && path[i] != '/') continue;
        const std::string p = path.substr(0, i);
        if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) { *err = p + ": cannot create directory: " + strerror(errno); return false; }
    }
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) { *err = path + ": not a directory"; return false; }
    return true;
}

// The directory that holds `path` (no trailing slash): "." for a bare name, "/" at the root.
inline std::string parent_dir(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Would make_dirs(path) give a directory this process can use? Checked without creating anything:
// path itself, where it exists, must be a directory, writable when `write` (a run that only reads
// an existing directory, e.g. --bench reusing gemm_algos.txt, needs no more); where it does not,
// its nearest existing ancestor must be a writable directory (the missing ones get created).
inline bool dir_can_be_used(const std::string& path, bool write, std::string* err) {
    std::string p = path;
    for (;;) {
        struct stat st;
        if (stat(p.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode)) { *err = p + ": not a directory"; return false; }
            const bool needs_write = write || p != path;   // a missing directory must be created
            if (needs_write && access(p.c_str(), W_OK | X_OK) != 0) { *err = p + ": cannot write there: " + strerror(errno); return false; }
            return true;
        }
        // only "does not exist" moves on to the parent; anything else (a directory that cannot
        // be searched, a stale NFS handle) is the answer, also for "." and "/" themselves
        if ((errno != ENOENT && errno != ENOTDIR) || p == "." || p == "/") { *err = p + ": " + strerror(errno); return false; }
        while (p.size() > 1 && p.back() == '/') p.pop_back();
        p = parent_dir(p);
    }
}

// A whole (small) text file into *text; false + the reason in *err. Opened through
// open_regular_file (shards.h): a named pipe or a directory is refused before fopen, which would
// wait on a pipe for a writer.
inline bool read_text_file(const std::string& path, std::string* text, std::string* err) {
    size_t size = 0;
    auto f = open_regular_file(path, &size, err);
    if (!f) return false;
    text->clear();
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f.get())) > 0) text->append(buf, n);
    if (ferror(f.get())) { *err = path + ": read error"; return false; }
    return true;
}
// fsync on a path: works for directories too (opened read-only), which is how a directory's
// entries (names created, renamed, removed) are made durable. false + "<path>: fsync failed: why".
inline bool fsync_path(const std::string& path, std::string* err) {
    const int fd = open(path.c_str(), O_RDONLY);
    const bool ok = fd >= 0 && fsync(fd) == 0;
    if (!ok) *err = path + ": fsync failed: " + strerror(errno);
    if (fd >= 0) close(fd);
    return ok;
}

// Writes text to path.tmp, on disk (fsync) before it is renamed over path, and the rename made
// durable (fsync of the directory): a reader, also after a power loss, sees the old file or the
// new one, never an empty file in place of the old (which a rename that reaches the disk before
// the data it names would leave on some filesystems).
inline bool write_text_file_atomic(const std::string& path, const std::string& text, std::string* err) {
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) { *err = tmp + ": cannot create: " + strerror(errno); return false; }
    bool ok = fwrite(text.data(), 1, text.size(), f) == text.size() && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        *err = path + ": cannot write: " + strerror(errno);
        remove(tmp.c_str());
        return false;
    }
    return fsync_path(parent_dir(path), err);
}

// printf into a std::string (any length).
inline std::string text_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string text_printf(const char* fmt, ...) {
    va_list a, b;
    va_start(a, fmt);
    va_copy(b, a);
    const int n = vsnprintf(nullptr, 0, fmt, a);
    va_end(a);
    std::string s(n > 0 ? (size_t)n : 0, '\0');
    if (n > 0) vsnprintf(&s[0], (size_t)n + 1, fmt, b);
    va_end(b);
    return s;
}

// A JSON string literal of s (quotes, backslashes and control bytes escaped; UTF-8 as is). JSON is
// UTF-8: each invalid sequence (a sample's text is whatever bytes its tokens hold, and can end inside
// a character) becomes one U+FFFD, or the line would be no JSON.
inline std::string json_string(const std::string& s) {
    std::string o = "\"";
    for (size_t i = 0, n, bad; i < s.size(); i += n ? n : bad) {
        const unsigned char ch = (unsigned char)s[i];
        n = utf8_sequence(s, i, &bad);
        if (n == 0) o += "\xef\xbf\xbd";
        else if (n > 1) o.append(s, i, n);
        else if (ch == '"' || ch == '\\') { o += '\\'; o += (char)ch; }
        else if (ch == '\n') o += "\\n";
        else if (ch == '\t') o += "\\t";
        else if (ch < 0x20) { char buf[8]; snprintf(buf, sizeof buf, "\\u%04x", ch); o += buf; }
        else o += (char)ch;
    }
    return o + "\"";
}

// A JSON number, or null for inf/nan (which JSON cannot represent: an fp16 overflow step has them).
inline std::string json_number(double x, const char* fmt = "%.6g") {
    if (!(x == x) || x == INFINITY || x == -INFINITY) return "null";
    char buf[64];
    snprintf(buf, sizeof buf, fmt, x);
    return buf;
}

struct Logger {
    FILE* f = nullptr;
    bool open(const std::string& path, std::string* err) {
        f = fopen(path.c_str(), "a");
        if (!f) { *err = path + ": cannot open for appending: " + strerror(errno); return false; }
        return true;
    }
    void line(const std::string& json) {  // one object, flushed so a crash loses nothing written
        if (!f) return;
        fprintf(f, "%s\n", json.c_str());
        fflush(f);
    }
    void close() { if (f) fclose(f); f = nullptr; }
};
