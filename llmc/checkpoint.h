// Model files: llm.c's format, so files interchange with llm.c and dev/model_file.py.
//   header: 256 int32 = [MODEL_MAGIC, version 3 (fp32), maxT, V, L, NH, C, Vp, 0...]
//   then every parameter as fp32, tensor-major (all L ln1w, then all L ln1b, ...; see model.h)
// In memory the parameters are layer-major, so reading and writing permute; model_file_offset()
// and param_offset() give the two positions of each tensor.
// Below them: training checkpoints (a model file plus the optimizer and run state) written
// crash-safely. Host-only; unit-tested on the CPU (dev/unit/test_model.cpp, test_checkpoint.cpp).
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dataloader.h"
#include "logger.h"  // make_dirs
#include "model.h"
#include "spike_guard.h"

// A checkpoint's three arrays, as its writer and reader reach them: 0 the fp32 master weights,
// 1 Adam m, 2 Adam v, param_layout(cfg).total floats each, layer-major (memory order). They are
// reached a piece at a time, at most `chunk` floats, so that the trainer's, which live on the
// GPU(s), can pass through one small pinned host buffer (GpuState, llmc/gpt2.cuh) straight into
// the file and back: a checkpoint then needs no host copy of the whole state (d48: 18.7 GB).
// HostState below: arrays already in host memory (the tests, the fuzzers, the tools).
struct StateIO {
    size_t chunk = (size_t)1 << 60;
    std::string error;                 // why a get() returned null: the failed write's line
    virtual ~StateIO() = default;
    // writing: floats [offset, offset + count) of array `which`, valid until the next call; null if
    // they cannot be had (the write then fails with `error`). The writer asks for array 0, then 1,
    // then 2 (a ZeRO-1 GpuState gathers each once, collectively).
    virtual const float* get(int which, size_t offset, size_t count) = 0;
    // reading: the part [*lo, *hi) of array `which` this reader takes; the rest is skipped
    virtual void wanted(int which, size_t* lo, size_t* hi) { (void)which; *lo = 0; *hi = SIZE_MAX; }
    // reading: where floats [offset, offset + count) of array `which` go; put() then takes them
    virtual float* buffer(int which, size_t offset, size_t count) = 0;
    virtual void put(int which, size_t offset, size_t count) { (void)which; (void)offset; (void)count; }
};

// Arrays in host memory, seen in place (no copy): `in` for writing, `out` for reading.
struct HostState : StateIO {
    const float* in[3] = {};
    float* out[3] = {};
    static HostState writing(const float* a, const float* b = nullptr, const float* c = nullptr) { HostState h; h.in[0] = a; h.in[1] = b; h.in[2] = c; return h; }
    static HostState reading(float* a, float* b = nullptr, float* c = nullptr) { HostState h; h.out[0] = a; h.out[1] = b; h.out[2] = c; return h; }
    const float* get(int which, size_t offset, size_t) override {
        if (!in[which]) error = "checkpoint: array " + std::to_string(which) + " was not given";
        return in[which] ? in[which] + offset : nullptr;
    }
    float* buffer(int which, size_t offset, size_t) override { return out[which] + offset; }
};

// A model file's parameters (tensor-major: all L ln1w, then all L ln1b, ...) as the ranges of the
// layer-major memory they come from, {offset, count}, in the file's order.
inline std::vector<std::pair<size_t, size_t>> model_file_ranges(const GPT2Config& cfg) {
    const ParamLayout p = param_layout(cfg);
    std::vector<std::pair<size_t, size_t>> r;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        for (size_t l = 0; l < param_tensor_count(cfg, t); l++) r.push_back({param_offset(cfg, p, t, (int)l), param_tensor_elems(cfg, t)});
    return r;
}

namespace ckpt_detail {
using Ranges = std::vector<std::pair<size_t, size_t>>;
// Writes array `which` to f: its `ranges` in that order, through io, a chunk at a time.
inline bool write_ranges(FILE* f, StateIO& io, int which, const Ranges& ranges) {
    for (const auto& [offset, count] : ranges)
        for (size_t at = offset, end = offset + count; at < end;) {
            const size_t k = std::min(end - at, io.chunk);
            const float* piece = io.get(which, at, k);
            if (!piece || fwrite(piece, sizeof(float), k, f) != k) return false;
            at += k;
        }
    return true;
}
// Reads array `which` from f, stored as its `ranges` in that order from f's position: the part
// io wants, a chunk at a time; the rest is skipped over. Leaves f after the last range.
inline bool read_ranges(FILE* f, StateIO& io, int which, const Ranges& ranges) {
    size_t lo, hi;
    io.wanted(which, &lo, &hi);
    off_t pos = ftello(f), at_file = pos;                // where the range starts; where f is
    if (pos < 0) return false;
    for (const auto& [offset, count] : ranges) {
        const size_t a = std::max(offset, lo), b = std::min(offset + count, hi);
        for (size_t at = a; at < b;) {
            const off_t want = pos + (off_t)((at - offset) * sizeof(float));
            if (want != at_file && fseeko(f, want, SEEK_SET) != 0) return false;   // a seek drops stdio's buffer: only when needed
            const size_t k = std::min(b - at, io.chunk);
            if (fread(io.buffer(which, at, k), sizeof(float), k, f) != k) return false;
            io.put(which, at, k);
            at += k;
            at_file = want + (off_t)(k * sizeof(float));
        }
        pos += (off_t)(count * sizeof(float));
    }
    return pos == at_file || fseeko(f, pos, SEEK_SET) == 0;
}
}  // namespace ckpt_detail

// Reads and checks the header; on success *cfg holds the model's shape.
inline bool model_file_read_header(const std::string& path, GPT2Config* cfg, std::string* err) {
    struct stat st;
    // a directory, or a named pipe (fopen would wait for a writer forever): refused unopened
    if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        *err = path + (S_ISDIR(st.st_mode) ? ": is a directory, not a model file" : ": not a regular file, not a model file");
        return false;
    }
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) { *err = path + ": cannot open: " + strerror(errno); return false; }
    int32_t h[MODEL_HEADER_INTS];
    const size_t got = fread(h, sizeof(int32_t), MODEL_HEADER_INTS, f);
    const long long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    const int why = errno;
    fclose(f);
    if (size < 0) { *err = path + ": cannot find the file's size: " + strerror(why); return false; }
    if (got != MODEL_HEADER_INTS) { *err = path + ": file too small for the 1024-byte model header"; return false; }
    if (h[0] != MODEL_MAGIC) { *err = path + ": bad magic " + std::to_string(h[0]) + " (expected " + std::to_string(MODEL_MAGIC) + "): not a model file"; return false; }
    if (h[1] != MODEL_VERSION_FP32) { *err = path + ": unsupported version " + std::to_string(h[1]) + " (expected 3: fp32 parameters)"; return false; }
    GPT2Config c;
    c.max_seq_len = h[2]; c.vocab_size = h[3]; c.num_layers = h[4]; c.num_heads = h[5]; c.channels = h[6]; c.padded_vocab_size = h[7];
    if (c.max_seq_len <= 0 || c.max_seq_len > 65536 || c.vocab_size <= 0 || c.num_layers <= 0 || c.num_layers > 1024 ||
        c.num_heads <= 0 || c.channels <= 0 || c.channels > 65536 || c.channels % c.num_heads != 0 ||
        c.padded_vocab_size < c.vocab_size || c.padded_vocab_size % 128 != 0 || c.channels % 8 != 0) {
        *err = path + ": header holds an impossible config (maxT " + std::to_string(c.max_seq_len) + ", V " + std::to_string(c.vocab_size) +
               ", Vp " + std::to_string(c.padded_vocab_size) + ", L " + std::to_string(c.num_layers) + ", NH " + std::to_string(c.num_heads) +
               ", C " + std::to_string(c.channels) + ")";
        return false;
    }
    const long long expect = (long long)sizeof(int32_t) * MODEL_HEADER_INTS + (long long)sizeof(float) * param_layout(c).total;
    if (size != expect) {
        *err = path + ": file is " + std::to_string(size) + " bytes, the header's config needs " + std::to_string(expect) +
               (size < expect ? " (truncated)" : " (trailing data)");
        return false;
    }
    *cfg = c;
    return true;
}

// Reads all parameters into array 0 of `io` (param_layout(cfg).total floats, layer-major).
inline bool model_file_read_params(const std::string& path, const GPT2Config& cfg, StateIO& io, std::string* err) {
    GPT2Config file_cfg;
    if (!model_file_read_header(path, &file_cfg, err)) return false;
    if (memcmp(&file_cfg, &cfg, sizeof cfg) != 0) { *err = path + ": model config differs from the one expected"; return false; }
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) { *err = path + ": cannot open: " + strerror(errno); return false; }
    const bool ok = fseeko(f, sizeof(int32_t) * MODEL_HEADER_INTS, SEEK_SET) == 0 &&
                    ckpt_detail::read_ranges(f, io, 0, model_file_ranges(cfg));   // the file is tensor-major: read in its order
    fclose(f);
    if (!ok) { *err = path + ": read error in the parameters"; return false; }
    return true;
}
inline bool model_file_read_params(const std::string& path, const GPT2Config& cfg, float* params, std::string* err) {
    HostState h = HostState::reading(params);
    return model_file_read_params(path, cfg, h, err);
}

// Writes array 0 of `io` as a model file, atomically: to path.tmp, flushed and fsync'ed, then
// renamed over path, so a crash leaves either the old file or the new one, never half of one.
inline bool model_file_write(const std::string& path, const GPT2Config& cfg, StateIO& io, std::string* err) {
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) { *err = tmp + ": cannot create: " + strerror(errno); return false; }
    int32_t h[MODEL_HEADER_INTS] = {};
    h[0] = MODEL_MAGIC; h[1] = MODEL_VERSION_FP32; h[2] = cfg.max_seq_len; h[3] = cfg.vocab_size;
    h[4] = cfg.num_layers; h[5] = cfg.num_heads; h[6] = cfg.channels; h[7] = cfg.padded_vocab_size;
    bool ok = fwrite(h, sizeof(int32_t), MODEL_HEADER_INTS, f) == MODEL_HEADER_INTS &&
              ckpt_detail::write_ranges(f, io, 0, model_file_ranges(cfg));
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        *err = io.error.empty() ? path + ": write failed: " + strerror(errno) : io.error;
        unlink(tmp.c_str());
        return false;
    }
    return true;
}
inline bool model_file_write(const std::string& path, const GPT2Config& cfg, const float* params, std::string* err) {
    HostState h = HostState::writing(params);
    return model_file_write(path, cfg, h, err);
}

// ---------------------------------------------------------------------------------------------
// Training checkpoints: everything needed to continue a run bit-identically.
//
//   <out>/step_00001000/model.bin   the fp32 master weights, as a model file (above)
//                       state.bin   256 int32 header [CKPT_MAGIC, version 1, TrainState field by
//                                   field], then Adam m and v: n fp32 each, layer-major (memory order)
//                       options.txt the run's options, "name=value" lines (--resume continues with
//                                   them: llmc/train_config.h, resume_config)
//                       DONE        empty, written last
//
// Crash safety: a crash (or a full disk, or a killed job) at any instant must leave the previous
// checkpoints loadable and never let a half-written one be loaded. So a checkpoint is built in
// step_N.tmp/, and every file is fsync'ed: without it the data may still sit in the page cache
// when the power goes. DONE is written after the others are durable, so its presence vouches for
// them. Then the directory itself is fsync'ed: a file's NAME lives in its directory, which is a
// separate file on disk, and fsync(file) does not make the entry durable. Then one rename() makes
// step_N appear atomically, and fsync(<out>) makes that rename durable. Readers load only
// step_<digits> directories holding DONE: never a .tmp. The rename alone would protect this
// machine's readers; DONE also covers what the rename cannot, e.g. a checkpoint copied elsewhere
// file by file and cut short. (Deleting one removes DONE first, for the same reason.)

constexpr int CKPT_MAGIC = 20241130, CKPT_VERSION = 1, CKPT_HEADER_INTS = 256;
static_assert(std::numeric_limits<double>::is_iec559 && sizeof(double) == 8, "doubles are stored as their IEEE-754 bits");

struct TrainState {                 // everything besides the weights needed to continue bit-identically
    int32_t step;                   // optimizer steps completed
    int32_t adam_t;                 // AdamW's step count (skipped steps don't count: non-finite gradients or a spike)
    float loss_scale; int32_t scaler_clean_steps;   // the fp16 loss scaler
    DataLoaderState loader;
    uint64_t sample_rng;            // state of the text-sampling RNG
    int32_t world;                  // GPUs of the run that wrote it
    int32_t precision;              // 0 fp32, 1 fp16, 2 bf16 (the build's floatX)
    int32_t zero;                   // ZeRO stage of the run that wrote it (informational)
    GPT2Config config;
    // the training data the loader position refers to: shards and their tokens (0: not recorded,
    // a checkpoint from before these fields; its header holds zeros there)
    int32_t data_files;
    uint64_t data_tokens;
    SpikeStats spike;               // the spike guard's statistics (zeros in an older checkpoint: they start again)
    int32_t bad_in_a_row;           // --max-bad-steps' count: steps skipped for inf/nan gradients in a row just before
                                    // (so a resumed run stops where the uninterrupted one would; 0 in an older checkpoint)
};

namespace ckpt_detail {

// The TrainState fields in their on-disk order. One list serves writing and reading, so the two
// cannot drift apart; fields are stored one by one (not the struct's bytes), so the format does
// not depend on the compiler's padding. 64-bit fields (uint64, double) take two header ints (low,
// high); header_ints() counts them (test_checkpoint checks that they fit the 256-int header).
template <class S, class F> void fields(S& s, F&& f) {
    f(s.step); f(s.adam_t); f(s.loss_scale); f(s.scaler_clean_steps);
    f(s.loader.epoch); f(s.loader.shard_pos); f(s.loader.block_pos); f(s.loader.micro);
    f(s.sample_rng); f(s.world); f(s.precision); f(s.zero);
    f(s.config.max_seq_len); f(s.config.vocab_size); f(s.config.padded_vocab_size);
    f(s.config.num_layers); f(s.config.num_heads); f(s.config.channels);
    f(s.data_files); f(s.data_tokens);   // added later: appended, so older headers read as zeros
    for (RunningStats* r : {&s.spike.loss, &s.spike.norm}) { f(r->level); f(r->spread2); f(r->count); }   // added later still
    f(s.bad_in_a_row);                                                                                     // and after that
}
inline int header_ints() {
    TrainState s{};
    int n = 2;
    fields(s, [&](auto& v) { n += (int)sizeof(v) / 4; });
    return n;
}
inline void encode(TrainState s, int32_t* h) {
    int i = 2;
    fields(s, [&](auto& v) {
        if constexpr (sizeof(v) == 8) {              // uint64 or double bits
            uint64_t u; memcpy(&u, &v, 8);
            h[i++] = (int32_t)(uint32_t)u; h[i++] = (int32_t)(uint32_t)(u >> 32);
        } else { static_assert(sizeof(v) == 4, "4-byte field"); memcpy(&h[i++], &v, 4); }   // int32 or float bits
    });
}
inline void decode(const int32_t* h, TrainState* s) {
    int i = 2;
    fields(*s, [&](auto& v) {
        if constexpr (sizeof(v) == 8) { const uint64_t u = (uint32_t)h[i] | (uint64_t)(uint32_t)h[i + 1] << 32; memcpy(&v, &u, 8); i += 2; }
        else memcpy(&v, &h[i++], 4);
    });
    s->loader.pad = 0;
}

inline std::string describe(const GPT2Config& c) {
    return "L=" + std::to_string(c.num_layers) + " C=" + std::to_string(c.channels) + " NH=" + std::to_string(c.num_heads) +
           " V=" + std::to_string(c.vocab_size) + " Vp=" + std::to_string(c.padded_vocab_size) + " maxT=" + std::to_string(c.max_seq_len);
}
inline bool same_config(const GPT2Config& a, const GPT2Config& b) { return describe(a) == describe(b); }
// Bounds that keep param_layout() from overflowing on a corrupt header.
inline bool plausible(const GPT2Config& c) {
    return c.num_layers > 0 && c.num_layers <= 1024 && c.channels > 0 && c.channels <= 65536 && c.num_heads > 0 &&
           c.vocab_size > 0 && c.padded_vocab_size >= c.vocab_size && c.padded_vocab_size <= (1 << 24) &&
           c.max_seq_len > 0 && c.max_seq_len <= 65536;
}
inline std::string precision_name(int p) { return p == 0 ? "fp32" : p == 1 ? "fp16" : p == 2 ? "bf16" : "precision-" + std::to_string(p); }

inline bool fail(std::string* err, const std::string& where, const std::string& what) { *err = where + ": " + what; return false; }
inline bool fail_errno(std::string* err, const std::string& where, const std::string& what) { return fail(err, where, what + ": " + strerror(errno)); }

// Creates `path` with what `write` writes to it (true: all of it written), flushed and fsync'ed
// before it returns.
template <class Write> bool write_synced(const std::string& path, Write&& write, std::string* err) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) return fail_errno(err, path, "cannot create");
    bool ok = write(f);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;                       // delayed write errors show up here
    return ok || fail_errno(err, path, "write failed");
}
inline bool write_synced(const std::string& path, const void* data, size_t bytes, std::string* err) {
    return write_synced(path, [&](FILE* f) { return bytes == 0 || fwrite(data, 1, bytes, f) == bytes; }, err);
}
inline int remove_entry(const char* p, const struct stat*, int, struct FTW*) { return remove(p); }
// rm -rf: depth first (files before their directory), not following symlinks. Absent is fine.
inline bool remove_tree(const std::string& path, std::string* err) {
    struct stat s;
    if (lstat(path.c_str(), &s) != 0 && errno == ENOENT) return true;
    return nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 || fail_errno(err, path, "cannot remove");
}
// Removes a checkpoint directory DONE first, so an interrupted delete leaves an incomplete
// checkpoint (ignored) rather than a "complete" one with files missing.
inline bool remove_checkpoint(const std::string& dir, std::string* err) {
    if (unlink((dir + "/DONE").c_str()) != 0 && errno != ENOENT) return fail_errno(err, dir + "/DONE", "cannot remove");
    return remove_tree(dir, err);
}
// The complete checkpoints in `out` (directories step_<digits> holding DONE), oldest step first.
// A directory that does not exist (yet) holds none.
inline bool list_complete(const std::string& out, std::vector<std::pair<long long, std::string>>* found, std::string* err) {
    DIR* d = opendir(out.c_str());
    if (!d && errno == ENOENT) return true;
    if (!d) return fail_errno(err, out, "cannot open the checkpoint directory");
    while (const dirent* e = readdir(d)) {
        const std::string name = e->d_name, dir = out + "/" + name;
        const bool numbered = name.size() >= 13 && name.size() <= 23 && name.compare(0, 5, "step_") == 0 &&
                              name.find_first_not_of("0123456789", 5) == std::string::npos;   // excludes step_N.tmp
        if (numbered && access((dir + "/DONE").c_str(), F_OK) == 0) found->push_back({std::stoll(name.substr(5)), dir});
    }
    closedir(d);
    std::sort(found->begin(), found->end());           // by step number: step_100000000 after step_99999999
    return true;
}

}  // namespace ckpt_detail

// Writes <out_dir>/step_<8-digit step>/ crash-safely (see above), then deletes all but the newest
// keep_last complete checkpoints (keep_last <= 0 keeps all). `io` gives the master weights, Adam
// m and v (param_layout(st.config).total floats each, layer-major), in that order; `options` (the
// run's options) goes to options.txt, not written when empty.
inline bool checkpoint_write(const std::string& out_dir, const TrainState& st, StateIO& io, int keep_last, std::string* err,
                             const std::string& options = "") {
    using namespace ckpt_detail;
    if (st.step < 0) return fail(err, out_dir, "negative step " + std::to_string(st.step));
    char name[32];
    snprintf(name, sizeof name, "step_%08d", (int)st.step);
    const std::string final_dir = out_dir + "/" + name, tmp = final_dir + ".tmp";
    if (!make_dirs(out_dir, err) || !remove_tree(tmp, err)) return false;   // a .tmp left by a crashed write
    if (mkdir(tmp.c_str(), 0755) != 0) return fail_errno(err, tmp, "cannot create directory");
    int32_t h[CKPT_HEADER_INTS] = {CKPT_MAGIC, CKPT_VERSION};
    encode(st, h);
    const Ranges all = {{0, param_layout(st.config).total}};
    const auto state = [&](FILE* f) {
        return fwrite(h, sizeof h, 1, f) == 1 && write_ranges(f, io, 1, all) && write_ranges(f, io, 2, all);
    };
    // This step written before (a rerun): that copy is moved aside (step_N.old, a name never
    // listed as complete) rather than deleted, put back if the new one cannot take its place,
    // and deleted only once the new one has.
    const std::string old = final_dir + ".old";
    struct stat sb;
    const bool rerun = lstat(final_dir.c_str(), &sb) == 0;
    const auto swap_in = [&] {
        if (!remove_tree(old, err)) return false;
        if (rerun && rename(final_dir.c_str(), old.c_str()) != 0) return fail_errno(err, final_dir, "cannot move aside to " + old);
        if (rename(tmp.c_str(), final_dir.c_str()) == 0) return true;
        fail_errno(err, tmp, "cannot rename to " + final_dir);
        if (rerun) rename(old.c_str(), final_dir.c_str());
        return false;
    };
    const bool ok = model_file_write(tmp + "/model.bin", st.config, io, err) &&
                    write_synced(tmp + "/state.bin", state, err) &&
                    (options.empty() || write_synced(tmp + "/options.txt", options.data(), options.size(), err)) &&
                    write_synced(tmp + "/DONE", nullptr, 0, err) && fsync_path(tmp, err) && swap_in() &&
                    fsync_path(out_dir, err) && (!rerun || remove_checkpoint(old, err));
    if (!ok) {
        if (!io.error.empty()) *err = io.error;   // the source's own words, not the write's errno
        std::string ignored;
        remove_tree(tmp, &ignored);
        return false;
    }
    if (keep_last <= 0) return true;
    std::vector<std::pair<long long, std::string>> found;   // the complete ones, oldest first
    if (!list_complete(out_dir, &found, err)) return false;
    for (size_t i = 0; i + (size_t)keep_last < found.size(); i++)
        if (!remove_checkpoint(found[i].second, err)) return false;
    return true;
}

inline bool checkpoint_write(const std::string& out_dir, const TrainState& st, const float* master, const float* adam_m,
                             const float* adam_v, int keep_last, std::string* err, const std::string& options = "") {
    HostState h = HostState::writing(master, adam_m, adam_v);
    return checkpoint_write(out_dir, st, h, keep_last, err, options);
}

// The newest complete checkpoint in out_dir.
inline bool checkpoint_find_latest(const std::string& out_dir, std::string* ckpt_dir, std::string* err) {
    std::vector<std::pair<long long, std::string>> found;
    if (!ckpt_detail::list_complete(out_dir, &found, err)) return false;
    if (found.empty()) return ckpt_detail::fail(err, out_dir, "no complete checkpoint (step_*/DONE)");
    *ckpt_dir = found.back().second;
    return true;
}

// Reads and checks state.bin's header and size, without the bulk data (to check before allocating).
inline bool checkpoint_read_state(const std::string& ckpt_dir, TrainState* st, std::string* err) {
    using namespace ckpt_detail;
    if (access((ckpt_dir + "/DONE").c_str(), F_OK) != 0) return fail(err, ckpt_dir, "incomplete checkpoint (no DONE marker)");
    const std::string path = ckpt_dir + "/state.bin";
    size_t bytes;
    auto f = open_regular_file(path, &bytes, err);   // (llmc/shards.h)
    if (!f) return false;
    const long long size = (long long)bytes;
    int32_t h[CKPT_HEADER_INTS];
    const size_t got = fread(h, sizeof(int32_t), CKPT_HEADER_INTS, f.get());
    f.reset();
    if (got != CKPT_HEADER_INTS) return fail(err, path, "truncated: " + std::to_string(size) + " bytes, too small for the 1024-byte header");
    if (h[0] != CKPT_MAGIC) return fail(err, path, "bad magic " + std::to_string(h[0]) + " (expected " + std::to_string(CKPT_MAGIC) + "): not a checkpoint state file");
    if (h[1] != CKPT_VERSION) return fail(err, path, "unsupported version " + std::to_string(h[1]) + " (expected " + std::to_string(CKPT_VERSION) + ")");
    TrainState s{};
    decode(h, &s);
    if (!plausible(s.config)) return fail(err, path, "header holds an impossible config (" + describe(s.config) + ")");
    for (const RunningStats& r : {s.spike.loss, s.spike.norm})
        if (r.count < 0 || !std::isfinite(r.level) || !std::isfinite(r.spread2) || r.spread2 < 0)
            return fail(err, path, "header holds impossible spike-guard statistics (count " + std::to_string(r.count) +   // %g: a
                                   text_printf(", level %.6g, spread^2 %.6g)", r.level, r.spread2));           // 1e300 is not 300 digits
    // counters that only grow from 0 (AdamW's skips no step it did not count, and no more steps were
    // skipped in a row than were skipped), a loss scale the scaler can reach ([1, 2^24]; 1, and no
    // clean steps, without fp16), a known precision and a run of >= 1 GPU
    if (s.step < 0 || s.adam_t < 0 || s.adam_t > s.step || s.bad_in_a_row < 0 || s.bad_in_a_row > s.step - s.adam_t ||
        !(s.loss_scale >= 1.0f && s.loss_scale <= 16777216.0f) || s.scaler_clean_steps < 0 ||
        (s.precision != 1 && (s.loss_scale != 1.0f || s.scaler_clean_steps != 0)) || s.world < 1 || s.precision < 0 || s.precision > 2 || s.data_files < 0)
        return fail(err, path, "header holds an impossible training state (step " + std::to_string(s.step) + ", AdamW step " +
                               std::to_string(s.adam_t) + ", bad steps in a row " + std::to_string(s.bad_in_a_row) +
                               ", loss scale " + std::to_string(s.loss_scale) + ", clean steps " +
                               std::to_string(s.scaler_clean_steps) + ", GPUs " + std::to_string(s.world) + ", precision " +
                               std::to_string(s.precision) + ", shards " + std::to_string(s.data_files) + ")");
    const long long expect = sizeof h + 2LL * sizeof(float) * param_layout(s.config).total;
    if ((long long)size != expect)
        return fail(err, path, "file is " + std::to_string(size) + " bytes, header + Adam m and v need " + std::to_string(expect) +
                               (size < expect ? " (truncated)" : " (trailing data)"));
    *st = s;
    return true;
}

// Whether a run of `precision` on `world` GPUs can continue the checkpoint whose state is `s`;
// false + one line naming `ckpt_dir` if not.
inline bool checkpoint_fits_run(const std::string& ckpt_dir, const TrainState& s, int precision, int world, std::string* err) {
    using namespace ckpt_detail;
    if (s.precision != precision)
        return fail(err, ckpt_dir, "checkpoint written by a " + precision_name(s.precision) + " build, this is a " + precision_name(precision) + " build");
    if (s.world != world)
        return fail(err, ckpt_dir, "checkpoint written by " + std::to_string(s.world) + (s.world == 1 ? " GPU" : " GPUs") +
                                   ", this run has " + std::to_string(world));
    return true;
}

// Whether the training data now (`files` shards holding `tokens` tokens) is the data the
// checkpoint's loader position refers to: the same count of shards and tokens (not checked when
// the checkpoint recorded none). false + one line naming `ckpt_dir` if not.
inline bool checkpoint_same_data(const std::string& ckpt_dir, const TrainState& s, size_t files, size_t tokens, std::string* err) {
    if (s.data_files == 0 || (s.data_files == (int32_t)files && s.data_tokens == (uint64_t)tokens)) return true;
    return ckpt_detail::fail(err, ckpt_dir, "the run read " + std::to_string(s.data_files) + " training shards of " +
                             std::to_string(s.data_tokens) + " tokens; --train now matches " + std::to_string(files) + " of " +
                             std::to_string(tokens) + " (shards added, removed or rewritten?): its data position would not fit");
}

// Reads a whole checkpoint: the state, the master weights (model.bin) and Adam's m and v, into
// `io`'s arrays 0, 1, 2 (the part of each that io wants). `expect` carries this run's config,
// precision and world (its other fields are ignored); a checkpoint that differs in any of them is
// refused before any array is read.
inline bool checkpoint_read(const std::string& ckpt_dir, const TrainState& expect, TrainState* st, StateIO& io, std::string* err) {
    using namespace ckpt_detail;
    TrainState s;
    GPT2Config mc;
    const std::string model = ckpt_dir + "/model.bin", state = ckpt_dir + "/state.bin";
    if (!checkpoint_read_state(ckpt_dir, &s, err) || !model_file_read_header(model, &mc, err)) return false;
    if (!same_config(mc, s.config)) return fail(err, model, "config " + describe(mc) + " differs from state.bin's " + describe(s.config));
    if (!same_config(s.config, expect.config))
        return fail(err, ckpt_dir, "model config mismatch: checkpoint has " + describe(s.config) + ", this run " + describe(expect.config));
    if (!checkpoint_fits_run(ckpt_dir, s, expect.precision, expect.world, err)) return false;
    if (!model_file_read_params(model, s.config, io, err)) return false;
    const Ranges all = {{0, param_layout(s.config).total}};
    FILE* f = fopen(state.c_str(), "rb");
    if (!f) return fail_errno(err, state, "cannot open");
    const bool ok = fseeko(f, sizeof(int32_t) * CKPT_HEADER_INTS, SEEK_SET) == 0 && read_ranges(f, io, 1, all) && read_ranges(f, io, 2, all);
    fclose(f);
    if (!ok) return fail(err, state, "read error in Adam m/v");
    *st = s;
    return true;
}
inline bool checkpoint_read(const std::string& ckpt_dir, const TrainState& expect, TrainState* st, float* master,
                            float* adam_m, float* adam_v, std::string* err) {
    HostState h = HostState::reading(master, adam_m, adam_v);
    return checkpoint_read(ckpt_dir, expect, st, h, err);
}
