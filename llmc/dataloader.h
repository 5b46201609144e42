// The data loader: token shards (llmc/shards.h) matched by a glob, read as a stream of
// (B, T) micro-batches. The stream is cut into optimizer steps of world*accum windows of B*T
// tokens (the global batch); rank r's micro-step i reads window i*world + r of the step. So the
// ranks read disjoint data, and 1 GPU with accumulation 2N sees exactly the samples of N GPUs
// with accumulation 2 (also where a shard ends): the samples of a step do not depend on the GPU
// count. A step never straddles two shards: a shard's tail shorter than a step is skipped.
//
// Epochs and shuffling. Each shard is cut into "step blocks", one optimizer step of tokens each
// (floor((tokens-1)/step_tokens) of them: the +1 is the last target). Epoch e visits every shard
// once and every block of a shard once. With shuffle on, the shard order of epoch e is a
// permutation seeded by (seed, e), and the block order inside a shard is one seeded by
// (seed, e, shard); without it both are the identity (blocks in order, shards in glob order).
// Whole blocks are shuffled, never the windows inside one, so the rank slicing above still holds.
// The permutations are computed independently by every rank, with no communication, so they must
// come out the same everywhere: they depend only on the seed, the epoch, the shard and the block
// count, which depends on the global batch (B*T*world*accum) alone, never on rank, world or accum
// separately. So shuffling keeps "1 GPU x accum 2N == N GPUs x accum 2" true step for step.
// We use our own generator (splitmix64) and Fisher-Yates, because std::shuffle and the std
// distributions are implementation-defined: another standard library would shuffle differently.
//
// The position (DataLoaderState) is four integers, saved in checkpoints: restoring it and
// continuing gives exactly the batches an uninterrupted run would have read.
//
// The validation set (ValidationSet, at the end) is read another way: every row of T+1 tokens of
// its shards, so that the validation loss covers the same tokens on any GPU count.
// Host-only; unit-tested on the CPU.
#pragma once
#include <glob.h>
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>
#include "shards.h"

// Where the loader stands: the NEXT micro-batch it reads. Plain old data (stored in checkpoints).
struct DataLoaderState {
    uint64_t epoch;      // epochs completed
    uint64_t shard_pos;  // index into this epoch's shard order
    uint64_t block_pos;  // index into the current shard's block order
    int32_t micro;       // next micro-step of the current step (0..accum-1)
    int32_t pad;         // zero; makes the size a multiple of 8 with no hidden padding
};

struct DataLoader {
    int B = 0, T = 0, rank = 0, world = 1, accum = 1, vocab = 0;
    bool shuffle = false;
    uint64_t seed = 0;
    std::vector<std::string> files;        // glob order (sorted): the shard index is the position here
    std::vector<size_t> file_tokens;       // tokens per shard
    std::vector<size_t> file_blocks;       // step blocks per shard
    DataLoaderState at{};                  // the position (see above)
    std::vector<uint32_t> shard_order;     // this epoch's shards, as indices into files
    std::vector<uint32_t> block_order;     // the current shard's blocks, as block numbers
    std::vector<uint16_t> window;          // B*T+1 tokens
    std::vector<int> inputs, targets;      // (B,T) each: targets are inputs shifted by one
};

// --- a small deterministic RNG: the same numbers on every machine and compiler ---------------

// splitmix64 (Steele, Lea, Flood 2014): adds a constant and scrambles; fast and well mixed.
inline uint64_t splitmix64(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// A generator state for the key (seed, a, b): each part is scrambled in, so neighbouring keys
// (epoch 3 vs 4) give unrelated streams.
inline uint64_t rng_key(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t s = seed;
    s = splitmix64(&s) ^ a;
    s = splitmix64(&s) ^ b;
    return splitmix64(&s);
}
// Uniform in [0, n). Plain x % n would favour small values slightly; draws below 2^64 mod n
// are rejected so that every residue is hit by the same number of 64-bit values.
inline uint64_t rng_below(uint64_t* s, uint64_t n) {
    const uint64_t reject_below = (0 - n) % n;  // == 2^64 mod n
    uint64_t x;
    do x = splitmix64(s); while (x < reject_below);
    return x % n;
}
// A batch of random tokens in [0, vocab), input and target drawn in turn from `rng`: the data of
// --bench, of GEMM tuning's pass, and of --debug-bad-batch's spike. (std::mt19937: a fixed
// algorithm, so the same tokens on every machine.)
inline void random_tokens(std::mt19937* rng, int vocab, std::vector<int>* inputs, std::vector<int>* targets) {
    for (size_t k = 0; k < inputs->size(); k++) {
        (*inputs)[k] = (int)((*rng)() % vocab);
        (*targets)[k] = (int)((*rng)() % vocab);
    }
}
// 0..n-1, shuffled by Fisher-Yates with the stream of `key` when shuffle is on.
inline std::vector<uint32_t> permutation(size_t n, bool shuffle, uint64_t key) {
    std::vector<uint32_t> p(n);
    for (size_t i = 0; i < n; i++) p[i] = (uint32_t)i;
    for (size_t i = n; shuffle && i > 1; i--) std::swap(p[i - 1], p[rng_below(&key, i)]);
    return p;
}

// --- the loader ------------------------------------------------------------------------------

inline size_t dataloader_step_tokens(const DataLoader* dl) { return (size_t)dl->B * dl->T * dl->world * dl->accum; }
inline size_t dataloader_steps_per_epoch(const DataLoader* dl) {
    size_t n = 0;
    for (size_t b : dl->file_blocks) n += b;
    return n;
}
// The shard order of `epoch`; the tag ~0 keeps its key apart from every (epoch, shard) key below.
inline std::vector<uint32_t> dataloader_shard_order(const DataLoader* dl, uint64_t epoch) {
    return permutation(dl->files.size(), dl->shuffle, rng_key(dl->seed, epoch, ~0ull));
}
// Index into files of the shard being read now.
inline size_t dataloader_file(const DataLoader* dl) { return dl->shard_order[dl->at.shard_pos]; }
// Computes the block order of the current shard (when the position enters a new shard).
inline void dataloader_plan_shard(DataLoader* dl) {
    const size_t f = dataloader_file(dl);
    dl->block_order = permutation(dl->file_blocks[f], dl->shuffle, rng_key(dl->seed, dl->at.epoch, f));
}

// Back to the start: epoch 0, its first shard, its first block.
inline void dataloader_reset(DataLoader* dl) {
    dl->at = DataLoaderState{};
    dl->shard_order = dataloader_shard_order(dl, 0);
    dataloader_plan_shard(dl);
}

// The shards the glob matches (sorted) and the tokens each holds, from their checked headers.
// false + one-line err when nothing matches or a header is bad.
inline bool dataloader_shards(const std::string& pattern, std::vector<std::string>* files, std::vector<size_t>* tokens, std::string* err) {
    if (pattern.empty()) { *err = "an empty file pattern"; return false; }
    glob_t g;
    if (glob(pattern.c_str(), 0, nullptr, &g) != 0 || g.gl_pathc == 0) {
        *err = pattern + ": no file matches";
        globfree(&g);
        return false;
    }
    files->assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    tokens->clear();
    for (const std::string& f : *files) {
        size_t n;
        if (!shard_read_header(f, &n, err)) return false;
        tokens->push_back(n);
    }
    return true;
}

// Opens every shard the glob matches and checks their headers. false + one-line err on failure.
inline bool dataloader_open(DataLoader* dl, const std::string& pattern, int B, int T, int rank, int world, int accum,
                            int vocab, bool shuffle, uint64_t seed, std::string* err) {
    *dl = DataLoader{};
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world; dl->accum = accum; dl->vocab = vocab;
    dl->shuffle = shuffle; dl->seed = seed;
    if (!dataloader_shards(pattern, &dl->files, &dl->file_tokens, err)) return false;
    const size_t step = dataloader_step_tokens(dl);
    for (size_t i = 0; i < dl->files.size(); i++) {
        const size_t n = dl->file_tokens[i];
        if (n < step + 1) {
            *err = dl->files[i] + ": holds " + std::to_string(n) + " tokens, fewer than one step reads: B*T*GPUs*accumulation + 1 = " +
                   std::to_string(B) + "*" + std::to_string(T) + "*" + std::to_string(world) + "*" + std::to_string(accum) +
                   " + 1 = " + std::to_string(step + 1) + " (the +1: the last position's target)";
            return false;
        }
        dl->file_blocks.push_back((n - 1) / step);
    }
    dl->window.resize((size_t)B * T + 1);
    dl->inputs.resize((size_t)B * T);
    dl->targets.resize((size_t)B * T);
    dataloader_reset(dl);
    return true;
}

inline DataLoaderState dataloader_state(const DataLoader* dl) { return dl->at; }

// Moves to the position `s` (as dataloader_state returned it, possibly in another process).
// Checks only that it is in range for this data and batch shape (false + one-line err if not):
// that the data, the tokens per step, the shuffle and the seed are the saved run's is --resume's
// job (llmc/train_config.h, resume_config).
inline bool dataloader_restore(DataLoader* dl, const DataLoaderState& s, std::string* err) {
    const std::string what = "data loader state (epoch " + std::to_string(s.epoch) + ", shard " + std::to_string(s.shard_pos) +
                             ", block " + std::to_string(s.block_pos) + ", micro-step " + std::to_string(s.micro) + "): ";
    if (s.shard_pos >= dl->files.size()) {
        *err = what + "shard out of range, the glob matches " + std::to_string(dl->files.size()) + " shards";
        return false;
    }
    if (s.micro < 0 || s.micro >= dl->accum) {
        *err = what + "micro-step out of range, accumulation is " + std::to_string(dl->accum);
        return false;
    }
    std::vector<uint32_t> order = dataloader_shard_order(dl, s.epoch);
    const size_t f = order[s.shard_pos];
    if (s.block_pos >= dl->file_blocks[f]) {
        *err = what + "block out of range, " + dl->files[f] + " holds " + std::to_string(dl->file_blocks[f]) +
               " steps of " + std::to_string(dataloader_step_tokens(dl)) + " tokens (other data or batch shape?)";
        return false;
    }
    dl->at = s;
    dl->at.pad = 0;
    dl->shard_order = std::move(order);
    dataloader_plan_shard(dl);
    return true;
}

// Moves the position one micro-step on: to the next block after a step's last micro-step, to the
// next shard after a shard's last block, to the next epoch (and its new shard order) after the last shard.
inline void dataloader_advance(DataLoader* dl) {
    DataLoaderState& at = dl->at;
    if (++at.micro < dl->accum) return;
    at.micro = 0;
    if (++at.block_pos < dl->file_blocks[dataloader_file(dl)]) return;
    at.block_pos = 0;
    if (++at.shard_pos == dl->files.size()) {
        at.shard_pos = 0;
        at.epoch++;
        dl->shard_order = dataloader_shard_order(dl, at.epoch);
    }
    dataloader_plan_shard(dl);
}

// Reads `count` tokens of shard `f` from token `start` into `out`, checking that each is below
// `vocab` (an id beyond it would index past the embedding table). false + one line naming the
// file (and the position of a bad id). The training stream and the validation set both read so.
inline bool read_tokens_checked(const std::string& f, size_t start, size_t count, int vocab, uint16_t* out, std::string* err) {
    if (!shard_read_tokens(f, start, count, out, err)) return false;
    for (size_t i = 0; i < count; i++)
        if (out[i] >= vocab) {
            *err = f + ": token " + std::to_string(out[i]) + " at position " + std::to_string(start + i) +
                   " is not below the vocabulary size " + std::to_string(vocab);
            return false;
        }
    return true;
}

// Fills inputs/targets with this rank's next micro-batch. On failure the position stays put.
inline bool dataloader_next(DataLoader* dl, std::string* err) {
    const size_t bt = (size_t)dl->B * dl->T, step = dataloader_step_tokens(dl);
    const std::string& f = dl->files[dataloader_file(dl)];
    const size_t block_start = (size_t)dl->block_order[dl->at.block_pos] * step;
    const size_t start = block_start + ((size_t)dl->at.micro * dl->world + dl->rank) * bt;
    if (!read_tokens_checked(f, start, bt + 1, dl->vocab, dl->window.data(), err)) return false;
    for (size_t i = 0; i < bt; i++) { dl->inputs[i] = dl->window[i]; dl->targets[i] = dl->window[i + 1]; }
    dataloader_advance(dl);
    return true;
}

// --- the validation set -----------------------------------------------------------------------
// The validation loss is measured over every row of T+1 tokens (T inputs and their T targets)
// that the --val shards hold: row k of a shard is its tokens [k*T, k*T + T], so a shard of n
// tokens holds floor((n-1)/T) rows (a tail shorter than a row is left out), taken in glob order.
// Why not the training stream above: its step blocks of B*T*GPUs tokens leave out a tail whose
// length depends on B and on the GPU count, so "one pass" would cover other tokens on 1 and on 4
// GPUs, and their losses would not be comparable. These rows depend on the data and T alone.
// A batch is up to B consecutive rows of that list (it may span two shards): batch i covers
// rows [i*B, i*B + B), the last one fewer, and rank r evaluates batches r, r + world, ...; the
// ranks' sums of token losses add up to the loss of the same rows on any GPU count and any -b.
struct ValidationSet {
    int T = 0, vocab = 0;
    std::vector<std::string> files;      // glob order (sorted)
    std::vector<size_t> file_rows;       // rows per shard
    size_t rows = 0;                     // over all shards
    std::vector<uint16_t> window;        // one read: consecutive rows of one shard and the last target
    std::vector<int> inputs, targets;    // (n, T) each: the rows validation_read read last
};

// Opens the shards the glob matches (checked headers). false + one line when nothing matches, a
// header is bad, or not one shard holds a row of T+1 tokens.
inline bool validation_open(ValidationSet* v, const std::string& pattern, int T, int vocab, std::string* err) {
    *v = ValidationSet{};
    v->T = T; v->vocab = vocab;
    std::vector<size_t> tokens;
    if (!dataloader_shards(pattern, &v->files, &tokens, err)) return false;
    size_t most = 0;
    for (size_t n : tokens) {
        v->file_rows.push_back(n == 0 ? 0 : (n - 1) / (size_t)T);
        v->rows += v->file_rows.back();
        most = std::max(most, n);
    }
    if (v->rows == 0) {
        *err = pattern + ": no shard holds one row of T + 1 = " + std::to_string((size_t)T + 1) + " tokens (the largest holds " +
               std::to_string(most) + "): nothing to validate on at -t " + std::to_string(T);
        return false;
    }
    return true;
}

// Batches of up to B rows in one pass over the set (all GPUs together).
inline size_t validation_batches(const ValidationSet* v, int B) { return (v->rows + (size_t)B - 1) / (size_t)B; }

// Reads rows [first, first + n) of the set into inputs/targets ((n, T) each). Rows that lie in one
// shard are consecutive tokens there, so each shard's part is one read of its rows*T + 1 tokens.
// false + one line naming the file on a read error or a token id not below the vocabulary.
inline bool validation_read(ValidationSet* v, size_t first, size_t n, std::string* err) {
    const size_t T = (size_t)v->T;
    v->inputs.resize(n * T);
    v->targets.resize(n * T);
    size_t done = 0, f = 0, row = first;   // row: the next row to read, counted over all shards
    while (done < n) {
        while (f < v->files.size() && row >= v->file_rows[f]) row -= v->file_rows[f++];   // the shard it lies in
        if (f == v->files.size()) { *err = "validation rows " + std::to_string(first) + ".." + std::to_string(first + n) +
                                           ": beyond the " + std::to_string(v->rows) + " rows of the set"; return false; }
        const size_t take = std::min(n - done, v->file_rows[f] - row), start = row * T, count = take * T + 1;
        v->window.resize(count);
        if (!read_tokens_checked(v->files[f], start, count, v->vocab, v->window.data(), err)) return false;
        for (size_t r = 0; r < take; r++)   // row r's inputs are tokens [r*T, r*T + T), its targets one further
            for (size_t t = 0; t < T; t++) {
                v->inputs[(done + r) * T + t] = v->window[r * T + t];
                v->targets[(done + r) * T + t] = v->window[r * T + t + 1];
            }
        done += take;
        row += take;
    }
    return true;
}

// The validation loss's pass over the first `rows` rows in batches of B (batch k: rows
// [k*B, min((k+1)*B, rows))) on rank `rank` of `world`: it evaluates batches rank, rank + world, ...
// with batch_loss(first, n), their summed token loss, and returns one slot per batch: each of its
// own batches' sum, 0 in the other ranks' slots. Summed over the ranks (validation_mean_loss),
// every slot is one rank's value plus zeros, which is exact: the sums reach every rank unrounded.
template <class BatchLoss>
std::vector<float> validation_rank_sums(size_t rows, size_t B, int rank, int world, BatchLoss batch_loss) {
    std::vector<float> sums((rows + B - 1) / B, 0.0f);
    for (size_t k = (size_t)rank; k < sums.size(); k += (size_t)world) {
        const size_t first = k * B;
        sums[k] = batch_loss(first, std::min(B, rows - first));
    }
    return sums;
}
// The mean token loss of `rows` rows of T tokens from the batches' summed losses (all ranks' slots
// summed), added in batch order in double: the same bits on any GPU count.
inline double validation_mean_loss(const std::vector<float>& batch_sums, size_t rows, int T) {
    double sum = 0;
    for (float s : batch_sums) sum += s;
    return sum / ((double)rows * T);
}
