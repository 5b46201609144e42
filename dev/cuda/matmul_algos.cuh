// The cuBLASLt algorithm studies of dev/cuda/matmul_check (its --algorithms, --search and
// --heuristics modes), apart from its correctness checks: which algorithm each GEMM of a GPT-2 124M
// step should run, and how cuBLASLt answers.
//   sweep_algorithms:        the untuned algorithm (cuBLASLt's single pick) against the first and
//                            the best of the plan's candidates, timed in bursts;
//   search_algorithms:       the same GEMMs timed sustained (at the power limit), over candidates
//                            beyond cuBLASLt's best-fit ranking;
//   study_heuristic_repeats: the same query asked again, with cuBLASLt's heuristics cache on and off.
// Included by dev/cuda/matmul.cu (after check.cuh).
#pragma once
#include "check.cuh"

// Every GEMM of one GPT-2 124M training step (B*T = 65536, lm head in 16384-row chunks), on random
// buffers (count = calls per step; count 0: an alternative, not part of the step).
struct StepCase { const char* name; int count; MatmulCall c; };
static std::vector<StepCase> step_cases(Context* ctx) {
    const int N = 65536, NC = 16384, C = 768, V = 50304;
    floatX* inp = random_device<floatX>(ctx, (size_t)N * 4 * C, -1, 1);
    floatX* dout = random_device<floatX>(ctx, (size_t)NC * V, -0.01f, 0.01f);  // >= N * 4C too
    floatX* w = random_device<floatX>(ctx, (size_t)V * C, -0.05f, 0.05f);
    floatX* bias = random_device<floatX>(ctx, 4 * C, -0.1f, 0.1f);
    floatX* out = dalloc<floatX>((size_t)NC * V);
    floatX* aux = random_device<floatX>(ctx, (size_t)N * 4 * C, -1, 1);
    floatX* dw = random_device<floatX>(ctx, (size_t)V * C, -0.01f, 0.01f);
    auto fwd = [&](int n, int in, int oc, bool gelu, bool has_bias) {
        MatmulCall c{out, w, inp, oc, n, in, true, false};
        if (has_bias) c.bias = bias;
        c.epilogue = gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        if (gelu) c.aux = aux;
        return c;
    };
    // weight_t: the weight as a transposed copy (A stored (k, m), op T), to see whether cuBLASLt has
    // a faster kernel for that layout (the trainer would keep such a copy)
    auto dx = [&](int n, int in, int oc, bool dgelu, bool weight_t = false) {
        MatmulCall c{out, w, dout, in, n, oc, weight_t, false};
        if (dgelu) { c.aux = aux; c.epilogue = CUBLASLT_EPILOGUE_DGELU; }
        return c;
    };
    auto dwt = [&](int n, int in, int oc) {
        MatmulCall c{dw, inp, dout, in, oc, n, false, true};
        c.beta = 1.0f;
        return c;
    };
    return {
        {"fwd qkv 768->2304 +bias", 12, fwd(N, C, 3 * C, false, true)},
        {"fwd attproj 768->768 +bias", 12, fwd(N, C, C, false, true)},
        {"fwd fc 768->3072 +bias+GELU", 12, fwd(N, C, 4 * C, true, true)},
        {"fwd fcproj 3072->768 +bias", 12, fwd(N, 4 * C, C, false, true)},
        {"fwd lm head 768->50304 (16384 rows)", 4, fwd(NC, C, V, false, false)},
        {"dinp qkv", 12, dx(N, C, 3 * C, false)},
        {"dinp attproj", 12, dx(N, C, C, false)},
        {"dinp fc", 12, dx(N, C, 4 * C, false)},
        {"dinp fcproj +DGELU", 12, dx(N, 4 * C, C, true)},
        {"  same, no DGELU (for comparison)", 0, dx(N, 4 * C, C, false)},
        {"  same +DGELU, weight transposed", 0, dx(N, 4 * C, C, true, true)},
        {"dinp lm head (16384 rows)", 4, dx(NC, C, V, false)},
        {"dW qkv", 12, dwt(N, C, 3 * C)},
        {"dW attproj", 12, dwt(N, C, C)},
        {"dW fc", 12, dwt(N, C, 4 * C)},
        {"dW fcproj", 12, dwt(N, 4 * C, C)},
        {"dW lm head (16384 rows)", 4, dwt(NC, C, V)},
    };
}

// cuBLASLt algorithm choice for every GEMM of the step: the time of the algorithm the trainer
// runs untuned (cuBLASLt's single pick, in the plan's candidates) against the first of its ranking of 16
// and the best of all candidates, each timed on the same buffers; and the step totals. Says whether
// timing the candidates at startup would pay, and what taking the ranking's first instead of the
// single pick would change.
static void sweep_algorithms(Context* ctx) {
    double step_untuned = 0, step_first = 0, step_best = 0;
    for (const StepCase& k : step_cases(ctx)) {
        const MatmulPlan& p = matmul_prepare(ctx, k.c);
        const MatmulCandidates& cand = p.cand;
        const double flops = 2.0 * k.c.m * k.c.n * k.c.k;
        std::vector<float> ms(cand.found);
        int best_i = 0;
        for (int i = 0; i < cand.found; i++) {
            ms[i] = median_ms(ctx, [&] { matmul(ctx, k.c, &cand.res[i].algo); }, 15);
            if (ms[i] < ms[best_i]) best_i = i;
        }
        const float untuned = ms[cand.untuned], first = ms[0], best = ms[best_i];
        step_untuned += k.count * untuned;
        step_first += k.count * first;
        step_best += k.count * best;
        printf("ALGO %-36s m=%5d n=%5d k=%5d: untuned #%-2d %.4f ms (%5.1f TFLOP/s), first %+5.1f %%, best #%-2d of %2d %.4f ms (%5.1f TFLOP/s), %+5.1f %%\n",
               k.name, k.c.m, k.c.n, k.c.k, cand.untuned, untuned, flops / untuned / 1e9, 100.0 * (first - untuned) / untuned,
               best_i, cand.found, best, flops / best / 1e9, 100.0 * (best - untuned) / untuned);
    }
    printf("SUMMARY cuBLASLt GEMMs of one d12 B=64 step: untuned %.2f ms, the ranking's first %.2f ms (%+.1f %%), best %.2f ms (%+.1f %%)\n",
           step_untuned, step_first, 100.0 * (step_first - step_untuned) / step_untuned, step_best,
           100.0 * (step_best - step_untuned) / step_untuned);
}

// ----------------------------------------------------------------------------------------------
// --search: is there an algorithm outside cuBLASLt's best-fit ranking that does more per joule?
// For each GEMM of the step, three sources of candidates:
//   BF: the plan's candidates, the best-fit ranking's first 16 and the single pick (what --gemm-tune 2
//       chooses among);
//   ID: for every algorithm id cuBLASLt has for these types, its ranking limited to that id
//       (CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID, up to 16 each);
//   EN: every configuration we can build by hand for each id (tile x stages x cluster shape x CTA
//       swizzle, split-K 1) that cublasLtMatmulAlgoCheck accepts with our workspace (a sample
//       of at most SEARCH_ENUM_MAX when there are more).
// All are timed in a burst (median of 5); BF's 16 and the fastest SEARCH_SUSTAINED_TOP of ID and
// EN are then timed sustained as matmul_tune does (time_sustained_ms).
// One line per GEMM: BF's first and best and the overall best, sustained; and the step totals.
constexpr int SEARCH_ENUM_MAX = 400, SEARCH_SUSTAINED_TOP = 10;
struct SearchCandidate { cublasLtMatmulAlgo_t algo; char src; float burst = INFINITY, sustained = INFINITY; };

// An algorithm's configuration (llmc/matmul_plans.cuh's algo_config), labelled, for the SEARCH lines.
static std::string algo_describe(const cublasLtMatmulAlgo_t& a) {
    MatmulAlgoConfig c;
    if (!algo_config(a, &c)) return "(configuration not reported)";
    char s[160];
    snprintf(s, sizeof(s), "id=%d tile=%u stages=%u cluster=%u splitk=%d swizzle=%u custom=%u",
             (int)c[CUBLASLT_ALGO_CONFIG_ID], c[CUBLASLT_ALGO_CONFIG_TILE_ID], c[CUBLASLT_ALGO_CONFIG_STAGES_ID],
             c[CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID], (int)c[CUBLASLT_ALGO_CONFIG_SPLITK_NUM],
             c[CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING], c[CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION]);
    return s;
}
static std::vector<uint32_t> algo_cap_list(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0) return {0};
    std::vector<uint32_t> v(bytes / sizeof(uint32_t));
    cublasCheck(cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), bytes, &bytes));
    return v.empty() ? std::vector<uint32_t>{0} : v;
}

// EN: the hand-built configurations of algorithm `a` that cublasLtMatmulAlgoCheck accepts for plan p
// within our workspace (tile x stages x cluster shape x CTA swizzle, split-K 1).
static void enumerate_configs(Context* ctx, const MatmulPlan& p, const cublasLtMatmulAlgo_t& a, std::vector<SearchCandidate>* out) {
    const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                                 CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                 CUBLASLT_CLUSTER_SHAPE_1x4x1};
    uint32_t swizzle_max = 0;
    size_t w = 0;
    cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_max, sizeof(swizzle_max), &w);
    for (uint32_t tile : algo_cap_list(a, CUBLASLT_ALGO_CAP_TILE_IDS))
        for (uint32_t stages : algo_cap_list(a, CUBLASLT_ALGO_CAP_STAGES_IDS))
            for (uint16_t cl : clusters)
                for (uint32_t swz = 0; swz <= std::min(swizzle_max, 1u); swz++) {
                    cublasLtMatmulAlgo_t c = a;
                    int32_t splitk = 1;
                    cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
                    cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages));
                    cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof(cl));
                    cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz));
                    cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk));
                    cublasLtMatmulHeuristicResult_t chk;
                    if (cublasLtMatmulAlgoCheck(ctx->lt, p.desc, p.a, p.b, p.d, p.d, &c, &chk) != CUBLAS_STATUS_SUCCESS) continue;
                    if (chk.workspaceSize > ctx->lt_workspace_size) continue;
                    out->push_back({c, 'E'});
                }
}

// ID and EN for every algorithm id: ID's ranked candidates go to *cands (their count to *n_id), EN's
// accepted configurations to *enumerated.
static void search_by_id(Context* ctx, const MatmulPlan& p, const int* ids, int n_ids, std::vector<SearchCandidate>* cands,
                         int* n_id, std::vector<SearchCandidate>* enumerated) {
    // ID: the ranking limited to each algorithm id
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ctx->lt_workspace_size, sizeof(ctx->lt_workspace_size)));
    uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof(mode)));
    *n_id = 0;
    for (int i = 0; i < n_ids; i++) {
        cublasLtMatmulAlgo_t a;
        if (cublasLtMatmulAlgoInit(ctx->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUBLAS_FLOATX, CUBLAS_FLOATX, CUBLAS_FLOATX,
                                   CUBLAS_FLOATX, ids[i], &a) != CUBLAS_STATUS_SUCCESS) continue;
        cublasLtMatmulHeuristicResult_t r[16];
        r[0].algo = a;
        int got = 0;
        if (cublasLtMatmulAlgoGetHeuristic(ctx->lt, p.desc, p.a, p.b, p.d, p.d, pref, 16, r, &got) == CUBLAS_STATUS_SUCCESS)
            for (int j = 0; j < got; j++)
                if (r[j].state == CUBLAS_STATUS_SUCCESS) { cands->push_back({r[j].algo, 'I'}); (*n_id)++; }
        enumerate_configs(ctx, p, a, enumerated);
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
}

// Times the candidates: every one in a burst, then sustained all of BF (the first n_bf) and the
// fastest SEARCH_SUSTAINED_TOP of the rest.
static void time_candidates(Context* ctx, const MatmulPlan& p, const StepCase& k, std::vector<SearchCandidate>& cands, int n_bf) {
    auto launch = [&](const cublasLtMatmulAlgo_t& a) { return matmul_launch(ctx, p, k.c, a); };
    // burst screen
    for (SearchCandidate& c : cands) {
        if (launch(c.algo) != CUBLAS_STATUS_SUCCESS) { cudaGetLastError(); continue; }
        cudaCheck(cudaStreamSynchronize(ctx->stream));
        c.burst = median_ms(ctx, [&] { cublasCheck(launch(c.algo)); }, 5);
    }
    // sustained: all of BF, the fastest of the rest
    std::vector<int> order;
    for (int i = n_bf; i < (int)cands.size(); i++) if (std::isfinite(cands[i].burst)) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return cands[a].burst < cands[b].burst; });
    if ((int)order.size() > SEARCH_SUSTAINED_TOP) order.resize(SEARCH_SUSTAINED_TOP);
    for (int i = 0; i < n_bf; i++) order.push_back(i);
    for (int i : order) {
        SearchCandidate& c = cands[i];
        if (!std::isfinite(c.burst)) continue;
        c.sustained = time_sustained_ms(ctx, [&] { cublasCheck(launch(c.algo)); }, c.burst);
    }
}

static void search_algorithms(Context* ctx) {
    int ids[256], n_ids = 0;
    cublasCheck(cublasLtMatmulAlgoGetIds(ctx->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUBLAS_FLOATX, CUBLAS_FLOATX,
                                         CUBLAS_FLOATX, CUBLAS_FLOATX, 256, ids, &n_ids));
    printf("SEARCH %d algorithm ids:", n_ids);
    for (int i = 0; i < n_ids; i++) printf(" %d", ids[i]);
    printf("\n");
    double tot_untuned = 0, tot_bf = 0, tot_all = 0;
    for (const StepCase& k : step_cases(ctx)) {
        if (k.count == 0) continue;
        MatmulPlan& p = matmul_prepare(ctx, k.c);
        std::vector<SearchCandidate> cands;
        const MatmulCandidates& bf = p.cand;
        for (int i = 0; i < bf.found; i++) cands.push_back({bf.res[i].algo, 'B'});
        const int n_bf = (int)cands.size();
        int n_id = 0;
        std::vector<SearchCandidate> enumerated;
        search_by_id(ctx, p, ids, n_ids, &cands, &n_id, &enumerated);
        const int n_en_valid = (int)enumerated.size();
        if ((int)enumerated.size() > SEARCH_ENUM_MAX) {  // an even sample, deterministic
            std::vector<SearchCandidate> s;
            for (int i = 0; i < SEARCH_ENUM_MAX; i++) s.push_back(enumerated[(size_t)i * enumerated.size() / SEARCH_ENUM_MAX]);
            enumerated.swap(s);
        }
        cands.insert(cands.end(), enumerated.begin(), enumerated.end());
        time_candidates(ctx, p, k, cands, n_bf);
        int bf_best = 0, all_best = 0;
        for (int i = 0; i < (int)cands.size(); i++) {
            if (i < n_bf && cands[i].sustained < cands[bf_best].sustained) bf_best = i;
            if (cands[i].sustained < cands[all_best].sustained) all_best = i;
        }
        const int u = bf.untuned;
        const float untuned = cands[u].sustained, bf_ms = cands[bf_best].sustained, all = cands[all_best].sustained;
        tot_untuned += k.count * untuned; tot_bf += k.count * bf_ms; tot_all += k.count * all;
        printf("SEARCH %-36s m=%5d n=%5d k=%5d: %d BF, %d ID, %d EN valid (%zu timed); sustained ms: untuned #%d %.4f, BF best #%d %.4f (%+.1f %%), "
               "best %c %.4f (%+.1f %% vs untuned, %+.1f %% vs BF best) burst %.4f [%s]\n",
               k.name, k.c.m, k.c.n, k.c.k, n_bf, n_id, n_en_valid, enumerated.size(), u, untuned, bf_best, bf_ms, 100.0 * (bf_ms - untuned) / untuned,
               cands[all_best].src, all, 100.0 * (all - untuned) / untuned, 100.0 * (all - bf_ms) / bf_ms, cands[all_best].burst,
               algo_describe(cands[all_best].algo).c_str());
        printf("SEARCH   untuned [%s]; BF best [%s]\n", algo_describe(cands[u].algo).c_str(), algo_describe(cands[bf_best].algo).c_str());
        fflush(stdout);
    }
    printf("SUMMARY sustained GEMM ms of one d12 B=64 step: cuBLASLt's single pick (untuned) %.2f, best of its candidates %.2f (%+.1f %%), best found %.2f (%+.1f %%)\n",
           tot_untuned, tot_bf, 100.0 * (tot_bf - tot_untuned) / tot_untuned, tot_all, 100.0 * (tot_all - tot_untuned) / tot_untuned);
}

// ----------------------------------------------------------------------------------------------
// --heuristics: does cuBLASLt give the same algorithms when asked the same question again? For a
// few shapes, each on a fresh plan, four rounds of the two queries matmul_candidates makes (its
// ranking of MATMUL_CANDIDATES, then a query for one), printed as each algorithm's configuration
// (algo_config: id/tile/split-K/reduction/swizzling/custom/stages/inner shape/cluster shape), and
// how many differ from round 0 in bytes and in configuration; then the same on fresh shapes with
// cuBLASLt's heuristics cache turned off. Seen on an H100 (2026-12-05): with the cache on, from
// round 1 (the third asking) every algorithm differs in bytes, none in configuration; off, none.
// On an H200 (same day) the same, except that one of the three questions (fwd +bias, 256-byte
// aligned) kept its bytes too: which cached answers change bytes is not to be relied on either way.
static std::string algo_config_text(const cublasLtMatmulAlgo_t& a) {
    MatmulAlgoConfig config;
    if (!algo_config(a, &config)) return "(configuration not reported)";
    std::string s;
    for (uint32_t v : config) s += (s.empty() ? "" : "/") + std::to_string(v);
    return s;
}
static void study_heuristic_repeats(Context* ctx) {
    const int C = 768;
    floatX* inp = random_device<floatX>(ctx, (size_t)8192 * 4 * C, -1, 1);
    floatX* w = random_device<floatX>(ctx, (size_t)4 * C * C, -0.05f, 0.05f);
    floatX* bias = random_device<floatX>(ctx, 4 * C + 1, -0.1f, 0.1f);
    floatX* aux = random_device<floatX>(ctx, (size_t)8192 * 4 * C, -1, 1);
    floatX* out = dalloc<floatX>((size_t)8192 * 4 * C);
    size_t capacity = 0;
    cublasCheck(cublasLtHeuristicsCacheGetCapacity(&capacity));
    for (int cache = 1; cache >= 0; cache--) {
        if (!cache) cublasCheck(cublasLtHeuristicsCacheSetCapacity(0));
        const int N = cache ? 8192 : 4096;  // fresh shapes for the second pass
        MatmulCall fwd_bias{out, w, inp, 4 * C, N, C, true, false};
        fwd_bias.bias = bias;
        fwd_bias.epilogue = CUBLASLT_EPILOGUE_BIAS;
        MatmulCall fwd_bias_odd = fwd_bias;
        fwd_bias_odd.bias = bias + 1;  // aligned to one element only
        MatmulCall dinp_dgelu{out, w, inp, C, N, 4 * C, false, false};
        dinp_dgelu.aux = aux;
        dinp_dgelu.epilogue = CUBLASLT_EPILOGUE_DGELU;
        const std::pair<const char*, MatmulCall> cases[] = {
            {"fwd +bias", fwd_bias}, {"fwd +bias (bias element-aligned)", fwd_bias_odd}, {"dinp +DGELU", dinp_dgelu}};
        for (const auto& [name, c] : cases) {
            const MatmulKey key = matmul_key(c);
            MatmulPlan& p = matmul_prepare(ctx, c);
            printf("HEUR %s N=%d align=%d heuristics cache %s: at plan creation choice #%d %s\n", name, N, key.align,
                   cache ? "on" : "off", p.choice, algo_config_text(p.algo).c_str());
            std::vector<cublasLtMatmulHeuristicResult_t> first;
            for (int r = 0; r < 4; r++) {
                cublasLtMatmulHeuristicResult_t res[MATMUL_CANDIDATES] = {}, one = {};
                const int found = matmul_heuristics(ctx, p, key, MATMUL_CANDIDATES, res);
                const int n_one = matmul_heuristics(ctx, p, key, 1, &one);
                if (r == 0) first.assign(res, res + found);
                std::string ranking;
                int bytes = found == (int)first.size() ? 0 : -1, config = bytes;
                for (int i = 0; i < found; i++) {
                    ranking += " " + algo_config_text(res[i].algo);
                    if (bytes < 0) continue;
                    bytes += memcmp(&res[i].algo, &first[i].algo, sizeof(res[i].algo)) != 0;
                    config += !same_algo(res[i].algo, first[i].algo);
                }
                int at_bytes = -1, at = -1;
                for (int i = found - 1; i >= 0; i--) {
                    if (memcmp(&res[i].algo, &one.algo, sizeof(one.algo)) == 0) at_bytes = i;
                    if (same_algo(res[i].algo, one.algo)) at = i;
                }
                printf("HEUR   round %d: ranking of %d (against round 0: %d differ in bytes, %d in configuration)%s\n", r, found,
                       bytes, config, r == 0 ? ranking.c_str() : "");
                printf("HEUR   round %d: single pick (%d) %s: the ranking's #%d by configuration, #%d by bytes\n", r, n_one,
                       algo_config_text(one.algo).c_str(), at, at_bytes);
            }
        }
    }
    cublasCheck(cublasLtHeuristicsCacheSetCapacity(capacity));
}
