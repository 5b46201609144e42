// What the libFuzzer harnesses in dev/fuzz share (dev/fuzz/run.sh builds and runs them):
//   fuzz_dir()       this process's own scratch directory under /tmp (made on first use, removed
//                    at exit): the readers take paths, so every input is written to one fixed file
//                    there before it is read;
//   write_file()     bytes to a file, replacing it;
//   fuzz_note()      prints a reader's error line when FUZZ_VERBOSE is set (to see what an input hits);
//   seed mode        `fuzz_X --seeds DIR` writes valid inputs of the harness's format into DIR
//                    (made with the project's own writers) and exits, instead of fuzzing:
//                    define FUZZ_SEEDS(dir) { ... } and the harness gets LLVMFuzzerInitialize.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ftw.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

inline int fuzz_remove_entry(const char* p, const struct stat*, int, struct FTW*) { return remove(p); }
inline void fuzz_remove_tree(const std::string& path) { nftw(path.c_str(), fuzz_remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

inline const std::string& fuzz_dir() {
    static const std::string dir = [] {
        char t[] = "/tmp/llmc_fuzz_XXXXXX";
        if (!mkdtemp(t)) { perror("mkdtemp"); abort(); }
        std::string d = t;
        static std::string at_exit_dir;
        at_exit_dir = d;
        atexit([] { fuzz_remove_tree(at_exit_dir); });
        return d;
    }();
    return dir;
}

inline void write_file(const std::string& path, const void* data, size_t size) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) { perror(path.c_str()); abort(); }
}
inline void write_file(const std::string& path, const std::string& s) { write_file(path, s.data(), s.size()); }
inline std::string read_all(const std::string& path) {
    std::string s;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) { perror(path.c_str()); abort(); }
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    fclose(f);
    return s;
}

inline void fuzz_note(const std::string& line) {
    static const bool verbose = getenv("FUZZ_VERBOSE") != nullptr;
    if (verbose) fprintf(stderr, "%s\n", line.c_str());
}

// An error line as the user will see it: not empty, one line, no control byte (a \r or an escape
// sequence would rewrite the terminal: whatever a reader quotes from a file goes through printable),
// at most 600 bytes (a reader quotes a cut of a bad value, never all of it).
inline bool fuzz_readable_line(const std::string& err) {
    if (err.empty() || err.size() > 600) return false;
    for (unsigned char c : err) if (c < 0x20 || c == 0x7f) return false;
    return true;
}

// A reader's error: noted (FUZZ_VERBOSE), and abort() unless it is a readable line that starts with
// PREFIX (the path of the file it read, and ": ", or ":" when a line number follows).
inline void fuzz_check_error(const std::string& err, const std::string& prefix) {
    fuzz_note(err);
    if (!fuzz_readable_line(err) || err.rfind(prefix, 0) != 0) abort();
}

// The GPT-2 vocabulary's directory for the harnesses that encode: $GPT2_VOCAB_DIR, else ../shared/data/gpt2.
inline std::string fuzz_vocab_dir() {
    const char* env = getenv("GPT2_VOCAB_DIR");
    return env && *env ? env : "../shared/data/gpt2";
}

// A seed writer's failure: the message, exit 1 (run.sh reports it).
inline void seed_fail(const std::string& what) { fprintf(stderr, "seed writer: %s\n", what.c_str()); exit(1); }

// --seeds DIR: call write_seeds(DIR) and exit 0. Any other command line is libFuzzer's.
#define FUZZ_SEEDS(dir_param)                                                          \
    static void write_seeds(const std::string& dir_param);                             \
    extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {                     \
        if (*argc == 3 && strcmp((*argv)[1], "--seeds") == 0) {                        \
            mkdir((*argv)[2], 0755);                                                   \
            write_seeds((*argv)[2]);                                                   \
            exit(0);                                                                   \
        }                                                                              \
        return 0;                                                                      \
    }                                                                                  \
    static void write_seeds(const std::string& dir_param)
