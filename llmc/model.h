// GPT-2's shape: the config, the parameter tensors and where each lives in the one flat buffer.
// Host-only (no CUDA) so the CPU unit tests cover it.
//
// Memory layout of every parameter-shaped buffer (params, grads, fp32 master, Adam m, Adam v):
//
//   [ wte (Vp,C) | wpe (maxT,C) | block 0 | block 1 | ... | block L-1 | lnfw (C) | lnfb (C) ]
//   block l = [ ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb ]
//
// Layer-major, so "the gradients of block l" is ONE contiguous byte range. Backward finishes the
// blocks from L-1 down to 0; each finished block is a range that the multi-GPU code can start
// reducing while the blocks below are still computing. The model FILE keeps llm.c's
// tensor-major order (all L qkvw together, ...) so model files interchange; model_file_offset()
// maps between the two.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <string>

struct GPT2Config {
    int max_seq_len = 1024;        // maxT: rows of wpe
    int vocab_size = 50257;        // V: real tokens
    int padded_vocab_size = 50304; // Vp: V rounded up to 128, so the lm-head matmul tiles evenly
    int num_layers = 12;           // L
    int num_heads = 12;            // NH
    int channels = 768;            // C
};

// "d12" -> GPT-2 124M, "d24" -> 350M, "d36" -> 774M, "d48" -> 1558M. Returns false if unknown.
inline bool config_from_descriptor(const std::string& d, GPT2Config* cfg) {
    GPT2Config c;
    if (d == "d12") { c.num_layers = 12; c.num_heads = 12; c.channels = 768; }
    else if (d == "d24") { c.num_layers = 24; c.num_heads = 16; c.channels = 1024; }
    else if (d == "d36") { c.num_layers = 36; c.num_heads = 20; c.channels = 1280; }
    else if (d == "d48") { c.num_layers = 48; c.num_heads = 25; c.channels = 1600; }
    else return false;
    *cfg = c;
    return true;
}

// The parameter tensors, in the order of the model file (llm.c's order).
enum ParamTensor {
    P_WTE, P_WPE,
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB,
    P_LNFW, P_LNFB,
    NUM_PARAM_TENSORS
};
constexpr int FIRST_BLOCK_TENSOR = P_LN1W, LAST_BLOCK_TENSOR = P_FCPROJB;
constexpr int BLOCK_TENSORS = LAST_BLOCK_TENSOR - FIRST_BLOCK_TENSOR + 1;

inline const char* param_tensor_name(int t) {
    static const char* const names[NUM_PARAM_TENSORS] = {
        "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    return names[t];
}
inline bool is_block_tensor(int t) { return t >= FIRST_BLOCK_TENSOR && t <= LAST_BLOCK_TENSOR; }
// Weight decay applies to the 2-D tensors (embeddings and matmul weights), not biases or LN.
inline bool param_tensor_decays(int t) {
    return t == P_WTE || t == P_WPE || t == P_QKVW || t == P_ATTPROJW || t == P_FCW || t == P_FCPROJW;
}

// Elements of ONE instance of tensor t (one layer's worth for block tensors).
inline size_t param_tensor_elems(const GPT2Config& c, int t) {
    const size_t C = c.channels, Vp = c.padded_vocab_size, maxT = c.max_seq_len;
    switch (t) {
        case P_WTE: return Vp * C;                       // (Vp, C)
        case P_WPE: return maxT * C;                     // (maxT, C)
        case P_LN1W: case P_LN1B: return C;              // (C)
        case P_QKVW: return 3 * C * C;                   // (3C, C)
        case P_QKVB: return 3 * C;                       // (3C)
        case P_ATTPROJW: return C * C;                   // (C, C)
        case P_ATTPROJB: return C;                       // (C)
        case P_LN2W: case P_LN2B: return C;              // (C)
        case P_FCW: return 4 * C * C;                    // (4C, C)
        case P_FCB: return 4 * C;                        // (4C)
        case P_FCPROJW: return C * 4 * C;                // (C, 4C)
        case P_FCPROJB: return C;                        // (C)
        case P_LNFW: case P_LNFB: return C;              // (C)
    }
    return 0;
}
// How many instances: L for block tensors, 1 otherwise.
inline size_t param_tensor_count(const GPT2Config& c, int t) { return is_block_tensor(t) ? c.num_layers : 1; }

// How a fresh model's tensor t starts (GPT-2's initialization, as dev/reference.py's init_params
// and llm.c do it): embeddings and matmul weights N(0, 0.02); the two projections that add into
// the residual stream (attprojw, fcprojw) N(0, 0.02 / sqrt(2L)): the L blocks add into it 2L times
// and each add grows its variance, so the scale keeps the sum from growing with depth; LayerNorm
// weights 1 (the identity scale) and every bias 0. wte's padded rows V..Vp-1 are 0 whatever this
// says: those tokens never occur. gpt2_init_random (llmc/gpt2.cuh) carries this out on the GPU.
struct ParamInit {
    bool normal;   // true: N(0, value) samples; false: every element = value
    float value;
};
inline ParamInit param_init(const GPT2Config& c, int t) {
    switch (t) {
        case P_WTE: case P_WPE: case P_QKVW: case P_FCW: return {true, 0.02f};
        case P_ATTPROJW: case P_FCPROJW: return {true, 0.02f / sqrtf(2.0f * c.num_layers)};
        case P_LN1W: case P_LN2W: case P_LNFW: return {false, 1.0f};
        default: return {false, 0.0f};   // the biases
    }
}
// The random stream instance `layer` of tensor t draws from (init_normal, llmc/init.cuh): a
// distinct id for every instance while L < 4096 (a model file allows at most 1024 layers).
inline uint64_t param_init_stream(int t, size_t layer) { return (uint64_t)t * 4096 + layer; }

// The layout of the flat parameter buffer (see the top of this file).
struct ParamLayout {
    size_t head_elems = 0;   // wte + wpe
    size_t block_elems = 0;  // one transformer block
    size_t tail_offset = 0;  // lnfw, lnfb
    size_t total = 0;        // everything
    size_t offset_in_block[NUM_PARAM_TENSORS] = {};
};
inline ParamLayout param_layout(const GPT2Config& c) {
    ParamLayout p;
    p.head_elems = param_tensor_elems(c, P_WTE) + param_tensor_elems(c, P_WPE);
    for (int t = FIRST_BLOCK_TENSOR; t <= LAST_BLOCK_TENSOR; t++) {
        p.offset_in_block[t] = p.block_elems;
        p.block_elems += param_tensor_elems(c, t);
    }
    p.tail_offset = p.head_elems + (size_t)c.num_layers * p.block_elems;
    p.total = p.tail_offset + 2 * (size_t)c.channels;
    return p;
}
// Offset (in elements) of instance `layer` of tensor t in the flat memory buffer.
inline size_t param_offset(const GPT2Config& c, const ParamLayout& p, int t, int layer) {
    switch (t) {
        case P_WTE: return 0;
        case P_WPE: return param_tensor_elems(c, P_WTE);
        case P_LNFW: return p.tail_offset;
        case P_LNFB: return p.tail_offset + c.channels;
        default: return p.head_elems + (size_t)layer * p.block_elems + p.offset_in_block[t];
    }
}
// Offset (in elements) of instance `layer` of tensor t in the model FILE (tensor-major order).
inline size_t model_file_offset(const GPT2Config& c, int t, int layer) {
    size_t off = 0;
    for (int u = 0; u < t; u++) off += param_tensor_count(c, u) * param_tensor_elems(c, u);
    return off + (size_t)layer * param_tensor_elems(c, t);
}
// The element range of block l's gradients, and of the head (wte, wpe) and tail (lnf): the units in
// which backward announces finished gradients.
struct ElemRange { size_t offset, count; };
inline ElemRange block_range(const ParamLayout& p, int l) { return {p.head_elems + (size_t)l * p.block_elems, p.block_elems}; }
inline ElemRange head_range(const ParamLayout& p) { return {0, p.head_elems}; }
inline ElemRange tail_range(const ParamLayout& p) { return {p.tail_offset, p.total - p.tail_offset}; }

// Views of one block's tensors inside a parameter-shaped buffer of element type T.
// The ONE place that slices a block: forward and backward both call it (the optimizer and the
// initialization go tensor by tensor through param_offset, which this is built on).
template <class T>
struct BlockTensors {
    T *ln1w, *ln1b;          // (C), (C)
    T *qkvw, *qkvb;          // (3C, C), (3C)
    T *attprojw, *attprojb;  // (C, C), (C)
    T *ln2w, *ln2b;          // (C), (C)
    T *fcw, *fcb;            // (4C, C), (4C)
    T *fcprojw, *fcprojb;    // (C, 4C), (C)
};
template <class T>
inline BlockTensors<T> block_tensors(T* base, const GPT2Config& c, const ParamLayout& p, int l) {
    auto at = [&](int t) { return base + param_offset(c, p, t, l); };
    return {at(P_LN1W), at(P_LN1B), at(P_QKVW), at(P_QKVB), at(P_ATTPROJW), at(P_ATTPROJB),
            at(P_LN2W), at(P_LN2B), at(P_FCW), at(P_FCB), at(P_FCPROJW), at(P_FCPROJB)};
}
template <class T>
struct HeadTailTensors {
    T *wte, *wpe;    // (Vp, C), (maxT, C)
    T *lnfw, *lnfb;  // (C), (C)
};
template <class T>
inline HeadTailTensors<T> head_tail_tensors(T* base, const GPT2Config& c, const ParamLayout& p) {
    return {base + param_offset(c, p, P_WTE, 0), base + param_offset(c, p, P_WPE, 0),
            base + param_offset(c, p, P_LNFW, 0), base + param_offset(c, p, P_LNFB, 0)};
}

// Model FLOPs per token for one training step (forward + backward): 6 per parameter (2 forward,
// 4 backward), as PaLM's appendix counts, plus attention's 6·L·C·T (QK^T and AV: PaLM's 12·L·C·T
// halved for the causal mask, as llm.c counts). N is every parameter incl. the padded vocab rows
// and wpe, as llm.c counts, so MFU figures compare with llm.c's.
inline double flops_per_token(const GPT2Config& c, int T) {
    const double N = (double)param_layout(c).total;
    return 6.0 * N + 6.0 * c.num_layers * (double)c.channels * T;
}

// Model file header (llm.c-compatible): 256 int32, then fp32 parameters in file order.
constexpr int MODEL_MAGIC = 20240326, MODEL_VERSION_FP32 = 3, MODEL_HEADER_INTS = 256;
