// Model files: llm.c's format, so files interchange with llm.c and dev/model_file.py.
//   header: 256 int32 = [MODEL_MAGIC, version 3 (fp32), maxT, V, L, NH, C, Vp, 0...]
//   then every parameter as fp32, tensor-major (all L ln1w, then all L ln1b, ...; see model.h)
// In memory the parameters are layer-major, so reading and writing permute; model_file_offset()
// and param_offset() give the two positions of each tensor. Host-only; unit-tested on the CPU.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>
#include "model.h"

// Reads and checks the header; on success *cfg holds the model's shape.
inline bool model_file_read_header(const std::string& path, GPT2Config* cfg, std::string* err) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) { *err = path + ": cannot open: " + strerror(errno); return false; }
    int32_t h[MODEL_HEADER_INTS];
    const size_t got = fread(h, sizeof(int32_t), MODEL_HEADER_INTS, f);
    fseek(f, 0, SEEK_END);
    const long long size = ftell(f);
    fclose(f);
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

// Reads all parameters into `params` (param_layout(cfg).total floats, layer-major).
inline bool model_file_read_params(const std::string& path, const GPT2Config& cfg, float* params, std::string* err) {
    GPT2Config file_cfg;
    if (!model_file_read_header(path, &file_cfg, err)) return false;
    if (memcmp(&file_cfg, &cfg, sizeof cfg) != 0) { *err = path + ": model config differs from the one expected"; return false; }
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) { *err = path + ": cannot open: " + strerror(errno); return false; }
    const ParamLayout p = param_layout(cfg);
    bool ok = fseek(f, sizeof(int32_t) * MODEL_HEADER_INTS, SEEK_SET) == 0;
    for (int t = 0; ok && t < NUM_PARAM_TENSORS; t++)      // the file is tensor-major: read in its order
        for (size_t l = 0; ok && l < param_tensor_count(cfg, t); l++) {
            const size_t n = param_tensor_elems(cfg, t);
            ok = fread(params + param_offset(cfg, p, t, (int)l), sizeof(float), n, f) == n;
        }
    fclose(f);
    if (!ok) { *err = path + ": read error in the parameters"; return false; }
    return true;
}

// Writes the model file atomically: to path.tmp, flushed and fsync'ed, then renamed over path, so
// a crash leaves either the old file or the new one, never half of one.
inline bool model_file_write(const std::string& path, const GPT2Config& cfg, const float* params, std::string* err) {
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) { *err = tmp + ": cannot create: " + strerror(errno); return false; }
    int32_t h[MODEL_HEADER_INTS] = {};
    h[0] = MODEL_MAGIC; h[1] = MODEL_VERSION_FP32; h[2] = cfg.max_seq_len; h[3] = cfg.vocab_size;
    h[4] = cfg.num_layers; h[5] = cfg.num_heads; h[6] = cfg.channels; h[7] = cfg.padded_vocab_size;
    bool ok = fwrite(h, sizeof(int32_t), MODEL_HEADER_INTS, f) == MODEL_HEADER_INTS;
    const ParamLayout p = param_layout(cfg);
    for (int t = 0; ok && t < NUM_PARAM_TENSORS; t++)
        for (size_t l = 0; ok && l < param_tensor_count(cfg, t); l++) {
            const size_t n = param_tensor_elems(cfg, t);
            ok = fwrite(params + param_offset(cfg, p, t, (int)l), sizeof(float), n, f) == n;
        }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        *err = path + ": write failed: " + strerror(errno);
        unlink(tmp.c_str());
        return false;
    }
    return true;
}
