// Activations: everything forward saves for backward, plus backward's scratch, in ONE allocation
// sized from the config, B and T. block_acts() is the one function that slices it per block.
//
// The LayerNorm outputs ln1 and ln2 feed the qkv and fc layers, whose bias gradients come out of
// their weight-gradient GEMMs (matmul.cuh, "the ones column"): their rows are ones_ld(C) apart,
// C values then the ones column, set once here (nothing writes those columns again).
//
// Recompute (--recompute) trades compute for memory: level 1 keeps ONE (B,T,4C) GELU output shared
// by all blocks (backward recomputes it from the saved pre-GELU fch), level 2 also keeps one LN1
// and one LN2 output (backward recomputes them from the saved residual, mean and rstd).
#pragma once
#include "common.cuh"
#include "model.h"
#include "attention.cuh"
#include "matmul.cuh"

struct Activations {
    int recompute = 0;
    // (L, ...) one slice per block (fch_gelu, ln1, ln2: one shared slice when recomputed)
    floatX *ln1, *ln2;         // (L, B,T, ones_ld(C)): C values and the ones column per row
    size_t ln_rows;            // rows of ln1 (and of ln2): L*B*T, or B*T at --recompute 2
    floatX *qkv;               // (L, B,T,3C)
    floatX *atty, *residual2;  // (L, B,T,C) each
    floatX *fch;               // (L, B,T,4C)
    floatX *fch_gelu;          // (L, B,T,4C), or (B,T,4C) when recomputed
    floatX *residual3;         // (L, B,T,C)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;  // (L, B,T) each
    float *att;                // attention's saved state (attention_state_elems per block)
    // once per model
    floatX *encoded;           // (B,T,C) embedding output = block 0's input
    floatX *lnf;               // (B,T,C)
    float *lnf_mean, *lnf_rstd;// (B,T)
    size_t logit_rows;         // tokens the lm head handles at once: min(B*T, max(logit chunk, T))
    floatX *logits;            // (logit_rows,Vp) one chunk of tokens, overwritten in place by dlogits
    float *losses;             // (B,T)
    // backward scratch
    floatX *dresidual;         // (B,T,C) gradient of the residual stream, accumulated block by block
    floatX *dbtc;              // (B,T,C) gradient of an LN output / attention output / LN_f output
    floatX *dbig;              // (B,T,4C) gradient of fch, or of qkv (3C)
    float *wgrad;              // (4C, C + ONES_ROWS) fp32: a weight gradient and its bias gradient (matmul_backward)
    void *att_scratch;         // attention_scratch_bytes
    void* memory;
    size_t bytes;
};

// One block's activations: the ONE place that slices them, used by forward and backward.
struct BlockActs {
    floatX* input;                      // (B,T,C) residual stream entering the block
    floatX* ln1; float *ln1_mean, *ln1_rstd;  // ln1, ln2: (B,T,C) in rows of ones_ld(C)
    floatX* qkv;                        // (B,T,3C)
    floatX* atty;                       // (B,T,C) attention output, heads concatenated
    float* att;                         // attention's saved state
    floatX* residual2;                  // (B,T,C) input + attention branch
    floatX* ln2; float *ln2_mean, *ln2_rstd;
    floatX* fch;                        // (B,T,4C) fc output before GELU
    floatX* fch_gelu;                   // (B,T,4C)
    floatX* residual3;                  // (B,T,C) block output
};
// B, T may be smaller than what was allocated (sampling, evaluation): the slices shrink with them.
inline BlockActs block_acts(const Activations& a, const GPT2Config& c, int B, int T, int l) {
    const size_t btc = (size_t)B * T * c.channels, bt = (size_t)B * T, btl = bt * ones_ld(c.channels);
    const size_t att = attention_state_elems(B, T, c.num_heads);
    const size_t lg = a.recompute >= 1 ? 0 : l, ll = a.recompute >= 2 ? 0 : l;  // shared slices when recomputed
    return {l == 0 ? a.encoded : a.residual3 + (l - 1) * btc,
            a.ln1 + ll * btl, a.ln1_mean + l * bt, a.ln1_rstd + l * bt,
            a.qkv + l * 3 * btc, a.atty + l * btc, a.att + l * att, a.residual2 + l * btc,
            a.ln2 + ll * btl, a.ln2_mean + l * bt, a.ln2_rstd + l * bt,
            a.fch + l * 4 * btc, a.fch_gelu + lg * 4 * btc, a.residual3 + l * btc};
}

// The logits are the largest activation by far ((B,T,Vp): 6.6 GB at B=64, T=1024), but no one needs
// all of them at once: the forward computes them `logit_chunk` tokens at a time and, when training,
// turns each chunk into dlogits and runs the lm head's backward on it right away (see gpt2_forward).
// dbig (backward only, after the last dlogits were consumed) is never live together with the
// logits, so the two share one region.
// The layout of the one allocation: its size in bytes, and with `base` the tensors' pointers into it.
inline size_t activations_layout(Activations* a, const GPT2Config& c, int B, int T, int recompute, size_t logit_chunk, char* base) {
    const size_t L = c.num_layers, btc = (size_t)B * T * c.channels, bt = (size_t)B * T, btl = bt * ones_ld(c.channels);
    const size_t LG = recompute >= 1 ? 1 : L, LL = recompute >= 2 ? 1 : L;
    a->recompute = recompute;
    a->ln_rows = LL * bt;
    a->logit_rows = std::min(bt, std::max(logit_chunk, (size_t)T));  // sampling needs one sequence's logits
    const size_t shared_region = std::max(a->logit_rows * c.padded_vocab_size, 4 * btc);  // logits | dbig
    struct Item { void** ptr; size_t bytes; };
    const size_t X = sizeof(floatX), F = sizeof(float);
    const Item items[] = {
        {(void**)&a->ln1, LL * btl * X}, {(void**)&a->qkv, L * 3 * btc * X}, {(void**)&a->atty, L * btc * X},
        {(void**)&a->att, L * attention_state_elems(B, T, c.num_heads) * F},
        {(void**)&a->residual2, L * btc * X}, {(void**)&a->ln2, LL * btl * X},
        {(void**)&a->fch, L * 4 * btc * X}, {(void**)&a->fch_gelu, LG * 4 * btc * X}, {(void**)&a->residual3, L * btc * X},
        {(void**)&a->ln1_mean, L * bt * F}, {(void**)&a->ln1_rstd, L * bt * F},
        {(void**)&a->ln2_mean, L * bt * F}, {(void**)&a->ln2_rstd, L * bt * F},
        {(void**)&a->encoded, btc * X}, {(void**)&a->lnf, btc * X}, {(void**)&a->lnf_mean, bt * F}, {(void**)&a->lnf_rstd, bt * F},
        {(void**)&a->logits, shared_region * X}, {(void**)&a->losses, bt * F},
        {(void**)&a->dresidual, btc * X}, {(void**)&a->dbtc, btc * X},
        {(void**)&a->att_scratch, attention_scratch_bytes(B, T, c.channels, c.num_heads)},
        {(void**)&a->wgrad, 4 * (size_t)c.channels * (c.channels + ONES_ROWS) * F},
    };
    auto align = [](size_t n) { return (n + 255) / 256 * 256; };  // every tensor 256-byte aligned
    size_t bytes = 0;
    for (const Item& it : items) {
        if (base) *it.ptr = base + bytes;
        bytes += align(it.bytes);
    }
    return bytes;
}

// What activations_alloc would allocate, without allocating (the trainer's memory check).
inline size_t activations_bytes(const GPT2Config& c, int B, int T, int recompute, size_t logit_chunk) {
    Activations a;
    return activations_layout(&a, c, B, T, recompute, logit_chunk, nullptr);
}

inline void activations_alloc(Activations* a, const GPT2Config& c, int B, int T, int recompute, size_t logit_chunk) {
    a->bytes = activations_layout(a, c, B, T, recompute, logit_chunk, nullptr);
    cudaCheck(cudaMalloc(&a->memory, a->bytes));
    activations_layout(a, c, B, T, recompute, logit_chunk, (char*)a->memory);
    a->dbig = a->logits;
    ones_column_init(0, a->ln1, a->ln_rows, c.channels);
    ones_column_init(0, a->ln2, a->ln_rows, c.channels);
    cudaCheck(cudaDeviceSynchronize());
}

