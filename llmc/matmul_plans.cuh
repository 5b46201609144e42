// The cuBLASLt plumbing under llmc/matmul.cuh's layers: one cached plan (descriptors + chosen
// algorithm) per distinct call shape; the algorithms a shape can run (cuBLASLt's ranking and its
// single pick, asked once per shape, with stand-in pointers, and kept) and the choice among them,
// untuned or timed (--gemm-tune); the choices as text (--gemm-algos, <out>/gemm_algos.txt) and for
// the other ranks; MatmulCall, the one entry point (`matmul`); and the Context's create/destroy,
// since the context is mostly cuBLASLt state.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>
#include "common.cuh"
#include "gemm_choices.h"

// ----------------------------------------------------------------------------------------------
// cuBLASLt plumbing: one cached plan (descriptors + chosen algorithm) per distinct call shape.
// Algorithm choice. cuBLASLt ranks candidate algorithms by a model of the GPU, and its first is
// not always the fastest: on an H200, for GPT-2 124M's shapes, the best of its first 16 is up to
// 20 % faster for a few GEMMs (the lm head, dinp of qkv, dW of qkv), 7 % of all GEMM time in a
// step (dev/cuda/matmul_check --algorithms). With --gemm-tune the trainer times them once, in a
// throwaway forward+backward at startup, and keeps each shape's choice (an index into the plan's
// candidates). Timed in short bursts (1) that gains little in a step (d12 B=64: +0.1 %, -0.8 %): the
// GPU runs at its 700 W power limit during a step, where a GEMM that is faster alone at full clock
// mostly lowers the clock instead. Timed at that limit (2, matmul_tune) it gains 0.1-2.5 %
// (README). Off by default: it costs startup time and timed choices can differ between runs.
constexpr int MATMUL_CANDIDATES = 16;         // how far down cuBLASLt's ranking tuning looks
constexpr int MATMUL_MAX_CHOICES = MATMUL_CANDIDATES + 1;  // that ranking + cuBLASLt's single pick (matmul_candidates)
constexpr int MATMUL_UNTUNED = -1;            // a choice meaning "what cuBLASLt picks when asked for one algorithm"
constexpr float MATMUL_TUNE_TOLERANCE = 0.03f;  // near-ties keep the untuned algorithm (see matmul_tune)
struct MatmulCandidates {
    cublasLtMatmulHeuristicResult_t res[MATMUL_MAX_CHOICES] = {};
    int found = 0;    // how many of res are filled
    int untuned = 0;  // the index of the single pick in res
};
struct MatmulPlan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    MatmulCandidates cand;  // asked once, when the plan is created (matmul_candidates): what a choice indexes
    cublasLtMatmulAlgo_t algo;
    int choice = 0;         // index of `algo` in cand
    bool untimed = false;   // created while tuning: its first call times the candidates (matmul_tune)
};
struct MatmulPlanCache {
    std::map<MatmulKey, MatmulPlan> plans;
    int tuning = 0;                   // != 0: plans created now are timed on their first call (the mode, matmul_tune)
    bool report = false;              // matmul_tune prints each shape's timings (rank 0 of a sustained tuning)
    std::map<MatmulKey, int> pinned;  // choices to take when a plan is created (--gemm-algos: every rank; <out>/gemm_algos.txt: rank 0)
};

// The largest power of two (up to 256) that divides every pointer: cuBLASLt's heuristic assumes
// 256-byte alignment unless told otherwise, and an algorithm chosen for it can fault on less.
inline int pointer_alignment(std::initializer_list<const void*> ptrs) {
    int align = 256;
    for (const void* p : ptrs)
        if (p) while (align > 1 && ((uintptr_t)p % align) != 0) align /= 2;
    return align;
}

// Whether an epilogue reads or writes the descriptor's bias pointer (the BIAS bit; the bias
// gradient variants) and its aux pointer (bit 128: the GELU/ReLU input or mask).
inline bool epilogue_uses_bias(int e) {
    return (e & CUBLASLT_EPILOGUE_BIAS) || e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_DRELU_BGRAD ||
           e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
inline bool epilogue_uses_aux(int e) { return (e & 128) != 0; }

// The bias or aux pointer a plan's descriptor holds (attr: CUBLASLT_MATMUL_DESC_BIAS_POINTER or
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), and setting it.
inline const void* matmul_desc_pointer(const MatmulPlan& p, cublasLtMatmulDescAttributes_t attr) {
    const void* v = nullptr;
    size_t written = 0;
    cublasCheck(cublasLtMatmulDescGetAttribute(p.desc, attr, &v, sizeof(v), &written));
    return v;
}
inline void matmul_set_desc_pointer(const MatmulPlan& p, cublasLtMatmulDescAttributes_t attr, const void* v) {
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, attr, &v, sizeof(v)));
}

// cuBLASLt's best `want` algorithms (its own ranking, first = what it expects to be fastest) for
// the plan's descriptors, with our workspace and the key's alignment; returns how many it gave.
// The heuristic also reads the bias and aux pointers on the descriptor (never dereferenced) to
// infer their alignment. When a plan is created its descriptor holds none, and an element-aligned
// bias is ranked differently from none (seen on an H200: 8 candidates against 2), so the answer
// could include algorithms that assume more alignment than the calls will have. The query
// therefore sees stand-ins of exactly the key's alignment (addresses inside our workspace, never
// touched), and the descriptor gets its own pointers back.
inline int matmul_heuristics(Context* ctx, const MatmulPlan& p, const MatmulKey& key, int want,
                             cublasLtMatmulHeuristicResult_t* results) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ctx->lt_workspace_size, sizeof(ctx->lt_workspace_size)));
    uint32_t align = key.align;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
    const cublasLtMatmulDescAttributes_t ptr_attrs[2] = {CUBLASLT_MATMUL_DESC_BIAS_POINTER, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER};
    const bool uses[2] = {epilogue_uses_bias(key.epilogue), epilogue_uses_aux(key.epilogue)};
    const void* saved[2] = {nullptr, nullptr};
    const void* stand_in = (const char*)ctx->lt_workspace + key.align;  // the workspace is 256-aligned
    for (int i = 0; i < 2; i++)
        if (uses[i]) { saved[i] = matmul_desc_pointer(p, ptr_attrs[i]); matmul_set_desc_pointer(p, ptr_attrs[i], stand_in); }
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(ctx->lt, p.desc, p.a, p.b, p.d, p.d, pref, want, results, &found));
    for (int i = 0; i < 2; i++)
        if (uses[i]) matmul_set_desc_pointer(p, ptr_attrs[i], saved[i]);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    return found;
}

// An algorithm's configuration: its nine CUBLASLT_ALGO_CONFIG_* attributes in enum order (algorithm
// id, tile, split-K, reduction scheme, CTA swizzling, custom option, stages, inner shape, cluster
// shape), which is what cuBLASLt runs. Two algorithms are the same when these are: the opaque
// struct holds more bytes than that, and an answer from cuBLASLt's heuristics cache (from the
// third time the same question is asked, seen on an H100 and an H200) has other values in them for
// the very same configuration (dev/cuda/matmul_check --heuristics), so comparing bytes calls it
// another one.
// (An attribute cuBLASLt does not report makes algo_config false, and same_algo compares bytes.)
using MatmulAlgoConfig = std::array<uint32_t, 9>;
inline bool algo_config(const cublasLtMatmulAlgo_t& a, MatmulAlgoConfig* v) {
    bool ok = true;
    for (int i = 0; i < (int)v->size(); i++) {
        const auto attr = (cublasLtMatmulAlgoConfigAttributes_t)i;
        const bool u16 = attr == CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID || attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID;
        size_t written = 0;
        (*v)[i] = 0;
        ok = ok && cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &(*v)[i], u16 ? 2 : 4, &written) == CUBLAS_STATUS_SUCCESS;
    }
    return ok;
}
inline bool same_algo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
    MatmulAlgoConfig ca, cb;
    if (algo_config(a, &ca) && algo_config(b, &cb)) return ca == cb;
    return memcmp(&a, &b, sizeof(a)) == 0;
}

// The algorithms a choice indexes: cuBLASLt's ranking of MATMUL_CANDIDATES, and then, when it is
// not among them, the one algorithm it gives when asked for one. Both queries are needed because
// cuBLASLt's answer depends on how many algorithms it is asked for (a query for k < 16 is not
// always the first k of the query for 16). The single pick is what the trainer runs untuned,
// measured as such for every figure in the README; the ranking is what tuning times. Asked ONCE
// per shape, when its plan is created (matmul_plan), and kept in the plan, so a choice index names
// the same algorithm when it is timed, chosen again, or written out, by construction: cuBLASLt
// need not answer the same question alike twice (seen on an H100: from the third asking, answers
// from its heuristics cache, with other bytes for the same configurations; see same_algo). A file
// read back, or another rank, asks the same questions in the same order (plans are created on the
// first forward+backward); dev/device/run.sh algos checks that a run with a tuned run's file
// repeats its losses to the bit.
inline MatmulCandidates matmul_candidates(Context* ctx, const MatmulPlan& p, const MatmulKey& key) {
    MatmulCandidates c;
    c.found = matmul_heuristics(ctx, p, key, MATMUL_CANDIDATES, c.res);
    cublasLtMatmulHeuristicResult_t one = {};
    if (matmul_heuristics(ctx, p, key, 1, &one) == 1) {
        c.untuned = c.found;
        for (int i = 0; i < c.found; i++)
            if (same_algo(c.res[i].algo, one.algo)) { c.untuned = i; break; }
        if (c.untuned == c.found) c.res[c.found++] = one;
    }
    return c;
}

// Sets the plan's algorithm to the `choice`-th of its candidates (MATMUL_UNTUNED: the single
// pick; the last one when it has fewer, which only a different cuBLASLt or GPU than the choice was
// made on can cause).
inline void matmul_choose(MatmulPlan& p, int choice) {
    p.choice = choice == MATMUL_UNTUNED ? p.cand.untuned : std::min(choice, p.cand.found - 1);
    p.algo = p.cand.res[p.choice].algo;
}

inline MatmulPlan& matmul_plan(Context* ctx, const MatmulKey& key) {
    auto it = ctx->plans->plans.find(key);
    if (it != ctx->plans->plans.end()) return it->second;
    MatmulPlan p;
    // fp32 accumulation for every precision; the FP32 build does not use TF32 (it is for checking)
    cublasCheck(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key.epilogue;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (epilogue_uses_aux(epi)) {
        int64_t ld = key.m;  // the aux (pre-GELU) matrix has D's shape
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    // Column-major shapes: A is (m,k) after op, stored (k,m) when transposed; likewise B.
    const int a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
    const int b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
    cublasCheck(cublasLtMatrixLayoutCreate(&p.a, CUBLAS_FLOATX, a_rows, a_cols, key.lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.b, CUBLAS_FLOATX, b_rows, b_cols, key.ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.d, (cudaDataType_t)key.d_type, key.m, key.n, key.ldd));
    if (key.batch > 1) {
        const std::pair<cublasLtMatrixLayout_t, long long> layouts[3] = {{p.a, key.stride_a}, {p.b, key.stride_b}, {p.d, key.stride_d}};
        for (auto& [layout, stride] : layouts) {
            int32_t count = key.batch;
            int64_t s = stride;
            cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
            cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof(s)));
        }
    }
    p.cand = matmul_candidates(ctx, p, key);
    if (p.cand.found == 0) {
        fprintf(stderr, "cuBLASLt has no algorithm for m=%d n=%d k=%d transa=%d transb=%d epilogue=%d batch=%d align=%d\n",
                key.m, key.n, key.k, key.trans_a, key.trans_b, key.epilogue, key.batch, key.align);
        exit(EXIT_FAILURE);
    }
    const auto pin = ctx->plans->pinned.find(key);
    const bool pinned = pin != ctx->plans->pinned.end();
    matmul_choose(p, pinned ? pin->second : MATMUL_UNTUNED);
    p.untimed = ctx->plans->tuning && !pinned;
    return ctx->plans->plans.emplace(key, p).first->second;
}

// D (m,n) = alpha * op(A) op(B) + beta * C [+ bias (m)] [GELU, saving the pre-GELU to aux],
// all column-major, C = D (accumulating in place) unless `c` is given; or, with epilogue DGELU,
// D = (op(A) op(B)) * GELU'(aux). A and B in the training precision; D (and C) in it too, or in
// fp32 (d_type). Leading dimensions 0 mean dense storage (each matrix's stored row count).
struct MatmulCall {
    void* d; const floatX* a; const floatX* b;
    int m, n, k;
    bool trans_a, trans_b;
    float alpha = 1.0f, beta = 0.0f;
    const floatX* bias = nullptr;  // (m), broadcast over columns
    floatX* aux = nullptr;         // (m, n): GELU input, written (forward) or read (backward)
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    int batch = 1;
    long long stride_a = 0, stride_b = 0, stride_d = 0;
    const void* c = nullptr;       // (m, n), D's layout: the beta * C term read from here, not from D
    int lda = 0, ldb = 0, ldd = 0;
    cudaDataType_t d_type = CUBLAS_FLOATX;
    const void* c_or_d() const { return c ? c : d; }
};
inline MatmulKey matmul_key(const MatmulCall& c) {
    const int a_rows = c.trans_a ? c.k : c.m, b_rows = c.trans_b ? c.n : c.k;
    return MatmulKey{c.m, c.n, c.k, c.trans_a, c.trans_b, (int)c.epilogue, c.batch,
                     pointer_alignment({c.d, c.a, c.b, c.bias, c.aux, c.c}), c.stride_a, c.stride_b, c.stride_d,
                     c.lda ? c.lda : a_rows, c.ldb ? c.ldb : b_rows, c.ldd ? c.ldd : c.m, (int)c.d_type};
}
// The plan for the call, with this call's bias and aux pointers set on its descriptor.
inline MatmulPlan& matmul_prepare(Context* ctx, const MatmulCall& c) {
    MatmulPlan& p = matmul_plan(ctx, matmul_key(c));
    if (c.bias) matmul_set_desc_pointer(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
    if (c.aux) matmul_set_desc_pointer(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
    return p;
}
// One launch of the call with the given algorithm on the prepared plan; cuBLASLt's status (an
// algorithm being tried may be refused).
inline cublasStatus_t matmul_launch(Context* ctx, const MatmulPlan& p, const MatmulCall& c, const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(ctx->lt, p.desc, &c.alpha, c.a, p.a, c.b, p.b, &c.beta, c.c_or_d(), p.d, c.d, p.d,
                          &algo, ctx->lt_workspace, ctx->lt_workspace_size, ctx->stream);
}
// Times every algorithm of the plan's candidates on this call's own buffers and keeps the untuned one
// (cuBLASLt's single pick) unless another is more than MATMUL_TUNE_TOLERANCE faster, then the
// first-ranked one within that tolerance of the fastest: a near-tie goes to the untuned algorithm
// and cuBLASLt's order rather than to timing noise, so runs on the same machine choose alike and
// tuning changes an algorithm only where the timing says it gains. With beta != 0 (accumulation)
// the output is garbage afterwards, which is why tuning happens only in a throwaway
// pass (gpt2_tune_gemms). Two ways to time (ctx->plans->tuning):
//   1 (burst): median of 5 runs after 2 warm-up runs, each alone on the stream: the time at
//     whatever clock the work before left the GPU at, up to its highest (too few runs to meet
//     the power limit themselves).
//   2 (sustained): the candidate runs back to back for MATMUL_SUSTAIN_MS first, then the mean of
//     the next ~MATMUL_SUSTAIN_MS / 2 of runs. A training step runs at the GPU's power limit,
//     where the clock drops until the power fits; a GEMM that is faster at the highest clock but
//     spends more energy per call can be slower there. This times each candidate at the clock it
//     gets itself under that limit, which ranks them by energy per call as much as by speed.
//     ~0.3 s per candidate: ~35 s for GPT-2's 15 shapes, for ~1 % more tok/s (README).
constexpr float MATMUL_SUSTAIN_MS = 200.0f;
// Mean ms per run() (which launches on ctx->stream) after MATMUL_SUSTAIN_MS of runs back to back,
// over the next ~MATMUL_SUSTAIN_MS / 2; burst_ms (one run's time, roughly) sizes the two loops.
template <class F>
inline float time_sustained_ms(Context* ctx, F&& run, float burst_ms) {
    const int warm = std::min(20000, (int)std::ceil(MATMUL_SUSTAIN_MS / std::max(burst_ms, 1e-3f)));
    const int timed = std::max(1, warm / 2);
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    for (int r = 0; r < warm; r++) run();
    cudaCheck(cudaEventRecord(t0, ctx->stream));
    for (int r = 0; r < timed; r++) run();
    cudaCheck(cudaEventRecord(t1, ctx->stream));
    cudaCheck(cudaEventSynchronize(t1));
    float total;
    cudaCheck(cudaEventElapsedTime(&total, t0, t1));
    cudaCheck(cudaEventDestroy(t0));
    cudaCheck(cudaEventDestroy(t1));
    return total / timed;
}
inline void matmul_tune(Context* ctx, MatmulPlan& p, const MatmulCall& c) {
    p.untimed = false;
    const int mode = ctx->plans->tuning;
    const MatmulKey key = matmul_key(c);
    const MatmulCandidates& cand = p.cand;
    const int found = cand.found;
    const cublasLtMatmulHeuristicResult_t* res = cand.res;  // at least one: matmul_plan exits on none
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    std::vector<float> burst(found, INFINITY), sustained(found, INFINITY);
    for (int i = 0; i < found; i++) {
        auto run = [&] { return matmul_launch(ctx, p, c, res[i].algo); };
        if (run() != CUBLAS_STATUS_SUCCESS || run() != CUBLAS_STATUS_SUCCESS) continue;  // not usable here
        float ms[5];
        for (float& m : ms) {
            cudaCheck(cudaEventRecord(t0, ctx->stream));
            cublasCheck(run());
            cudaCheck(cudaEventRecord(t1, ctx->stream));
            cudaCheck(cudaEventSynchronize(t1));
            cudaCheck(cudaEventElapsedTime(&m, t0, t1));
        }
        std::sort(ms, ms + 5);
        burst[i] = ms[2];
        if (mode == 2) sustained[i] = time_sustained_ms(ctx, [&] { cublasCheck(run()); }, burst[i]);
    }
    cudaCheck(cudaEventDestroy(t0));
    cudaCheck(cudaEventDestroy(t1));
    const std::vector<float>& t = mode == 2 ? sustained : burst;
    const int chosen = gemm_tune_pick(t, cand.untuned, MATMUL_TUNE_TOLERANCE);
    if (chosen < 0) return;  // none could run here: keep the untuned algorithm
    p.choice = chosen;
    p.algo = res[chosen].algo;
    if (ctx->plans->report) {
        const int u = cand.untuned, b = p.choice;
        printf("gemm-tune m=%d n=%d k=%d ta=%d tb=%d epilogue=%d: untuned (#%d of %d) %.4f ms burst, %.4f sustained; "
               "chosen #%d %.4f burst, %.4f sustained (%+.1f %% sustained)\n", key.m, key.n, key.k, key.trans_a, key.trans_b,
               key.epilogue, u, found, burst[u], sustained[u], b, burst[b], sustained[b], 100.0 * (sustained[b] - sustained[u]) / sustained[u]);
    }
}

// Runs the call with `algo` (default: the plan's; a plan created while tuning is timed first).
inline void matmul(Context* ctx, const MatmulCall& c, const cublasLtMatmulAlgo_t* algo = nullptr) {
    MatmulPlan& p = matmul_prepare(ctx, c);
    if (p.untimed && !algo) matmul_tune(ctx, p, c);
    cublasCheck(matmul_launch(ctx, p, c, algo ? *algo : p.algo));
}

// ----------------------------------------------------------------------------------------------
// The choices, to hand them to the other ranks or keep them in a file. Plans are listed in key
// order, which is the same on every rank: the same model makes the same calls.
inline std::vector<int> matmul_choices(const Context* ctx) {
    std::vector<int> v;
    for (const auto& [key, p] : ctx->plans->plans) v.push_back(p.choice);
    return v;
}
inline void matmul_set_choices(Context* ctx, const std::vector<int>& choices) {
    size_t i = 0;
    for (auto& [key, p] : ctx->plans->plans) {
        if (i == choices.size()) break;
        const int choice = choices[i++];
        if (choice != p.choice) matmul_choose(p, choice);
    }
}
// Text form (llmc/gemm_choices.h): a header naming what the choices are valid for (cuBLASLt's
// version, the GPU), then one line per shape: the key's fields and the choice.
inline std::string matmul_choices_header(const Context* ctx) {
    std::string gpu = ctx->props.name;
    for (char& ch : gpu) if (ch == ' ') ch = '_';
    return "gemm-algorithms v2 cublaslt=" + std::to_string(cublasLtGetVersion()) + " gpu=" + gpu;
}
inline std::string matmul_choices_text(const Context* ctx) {
    std::map<MatmulKey, int> choices;
    for (const auto& [k, p] : ctx->plans->plans) choices[k] = p.choice;
    return gemm_choices_text(matmul_choices_header(ctx), choices);
}
// The choices in `text` (matmul_choices_text's format) into *pinned; false + the reason when it
// is not that format or was written for another cuBLASLt or GPU (whose rankings differ).
inline bool matmul_choices_parse(const Context* ctx, const std::string& text, std::map<MatmulKey, int>* pinned, std::string* why) {
    return gemm_choices_parse(matmul_choices_header(ctx), text, MATMUL_MAX_CHOICES, pinned, why);
}

// ----------------------------------------------------------------------------------------------
// The context.
// The context on local_rank's GPU (gpu_for_rank: local_rank modulo the visible GPUs; a tool on one
// GPU passes 0). No usable GPU: false + gpu_for_rank's line in *err (the trainer reports it per
// rank), or without err that line and exit 1.
inline bool context_create(Context* ctx, int local_rank, std::string* err = nullptr) {
    std::string why;
    int device;
    if (!gpu_for_rank(local_rank, &device, &why)) {
        if (err) { *err = why; return false; }
        fprintf(stderr, "error: %s\n", why.c_str());
        exit(EXIT_FAILURE);
    }
    ctx->device = device;
    cudaCheck(cudaSetDevice(device));
    cudaCheck(cudaGetDeviceProperties(&ctx->props, device));
    // a blocking stream: plain cudaMemcpy (legacy default stream) waits for its work, and vice versa
    cudaCheck(cudaStreamCreate(&ctx->stream));
    cublasCheck(cublasLtCreate(&ctx->lt));
    ctx->lt_workspace_size = 32 << 20;
    cudaCheck(cudaMalloc(&ctx->lt_workspace, ctx->lt_workspace_size));
    ctx->plans = new MatmulPlanCache;
    // scratch for fp32 partial sums: a few per SM and column tile is all any reduction here uses
    ctx->scratch_elems = (size_t)64 * ctx->props.multiProcessorCount * 1024;
    cudaCheck(cudaMalloc(&ctx->scratch, ctx->scratch_elems * sizeof(float)));
    return true;
}
inline void context_destroy(Context* ctx) {
    for (auto& [key, p] : ctx->plans->plans) {
        cublasCheck(cublasLtMatmulDescDestroy(p.desc));
        cublasCheck(cublasLtMatrixLayoutDestroy(p.a));
        cublasCheck(cublasLtMatrixLayoutDestroy(p.b));
        cublasCheck(cublasLtMatrixLayoutDestroy(p.d));
    }
    delete ctx->plans;
    cudaCheck(cudaFree(ctx->scratch));
    cudaCheck(cudaFree(ctx->lt_workspace));
    cublasCheck(cublasLtDestroy(ctx->lt));
    cudaCheck(cudaStreamDestroy(ctx->stream));
    *ctx = Context{};
}
