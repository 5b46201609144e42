// The data loader: token shards (llmc/shards.h) matched by a glob, read as a stream of
// (B, T) micro-batches. The stream is cut into optimizer steps of world*accum windows of B*T
// tokens (the global batch); rank r's micro-step i reads window i*world + r of the step. So the
// ranks read disjoint data, and 1 GPU with accumulation 2N sees exactly the samples of N GPUs
// with accumulation 2 (also where a shard ends): the samples of a step do not depend on the GPU
// count. A step never straddles two shards: a shard's tail shorter than a step is skipped.
// Host-only; unit-tested on the CPU.
#pragma once
#include <glob.h>
#include <cstdint>
#include <string>
#include <vector>
#include "shards.h"

struct DataLoader {
    int B = 0, T = 0, rank = 0, world = 1, accum = 1, vocab = 0;
    std::vector<std::string> files;
    std::vector<size_t> file_tokens;
    size_t shard = 0, pos = 0;             // current shard and the offset of the current step in it
    int micro = 0;                         // next micro-step of the current step
    std::vector<uint16_t> window;          // B*T+1 tokens
    std::vector<int> inputs, targets;      // (B,T) each: targets are inputs shifted by one
};

// Opens every shard the glob matches and checks their headers. false + one-line err on failure.
inline size_t dataloader_step_tokens(const DataLoader* dl) { return (size_t)dl->B * dl->T * dl->world * dl->accum; }

inline bool dataloader_open(DataLoader* dl, const std::string& pattern, int B, int T, int rank, int world, int accum,
                            int vocab, std::string* err) {
    *dl = DataLoader{};
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world; dl->accum = accum; dl->vocab = vocab;
    glob_t g;
    if (glob(pattern.c_str(), 0, nullptr, &g) != 0 || g.gl_pathc == 0) {
        *err = pattern + ": no file matches";
        globfree(&g);
        return false;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) dl->files.push_back(g.gl_pathv[i]);
    globfree(&g);
    const size_t need = dataloader_step_tokens(dl) + 1;
    for (const std::string& f : dl->files) {
        size_t n;
        if (!shard_read_header(f, &n, err)) return false;
        if (n < need) {
            *err = f + ": holds " + std::to_string(n) + " tokens, fewer than one optimizer step needs (" + std::to_string(need) + ")";
            return false;
        }
        dl->file_tokens.push_back(n);
    }
    dl->window.resize((size_t)B * T + 1);
    dl->inputs.resize((size_t)B * T);
    dl->targets.resize((size_t)B * T);
    return true;
}

inline void dataloader_reset(DataLoader* dl) { dl->shard = 0; dl->pos = 0; dl->micro = 0; }

// Fills inputs/targets with this rank's next micro-batch; a new step moves to the next shard
// (wrapping around after the last) when the current one has no full step left.
inline bool dataloader_next(DataLoader* dl, std::string* err) {
    const size_t bt = (size_t)dl->B * dl->T, step = dataloader_step_tokens(dl);
    if (dl->micro == 0 && dl->pos + step + 1 > dl->file_tokens[dl->shard]) {
        dl->shard = (dl->shard + 1) % dl->files.size();
        dl->pos = 0;
    }
    const std::string& f = dl->files[dl->shard];
    const size_t start = dl->pos + ((size_t)dl->micro * dl->world + dl->rank) * bt;
    if (!shard_read_tokens(f, start, bt + 1, dl->window.data(), err)) return false;
    for (size_t i = 0; i <= bt; i++)
        if (dl->window[i] >= dl->vocab) {
            *err = f + ": token " + std::to_string(dl->window[i]) + " at position " + std::to_string(start + i) +
                   " is not below the vocabulary size " + std::to_string(dl->vocab);
            return false;
        }
    for (size_t i = 0; i < bt; i++) { dl->inputs[i] = dl->window[i]; dl->targets[i] = dl->window[i + 1]; }
    if (++dl->micro == dl->accum) { dl->micro = 0; dl->pos += step; }
    return true;
}
