// The whole model checked against the PyTorch reference (dev/reference.py):
//   logits and loss of one forward pass, the gradient of every parameter tensor, and the losses
//   of 10 AdamW steps on the same batch (from the second on through CUDA graphs, as the trainer);
//   plus bitwise determinism of forward+backward, launched and replayed from CUDA graphs, and
//   gradient accumulation over two micro-batches and a changed loss scale under graphs.
// Run:  python3 dev/reference.py  (writes dev_data/reference_{model,state}.bin), then
//       make test_gpt2cu && ./test_gpt2cu [model file] [state file] [recompute level 0|1|2] [lm-head chunk, tokens] [1: timed GEMM algorithms]
// Tolerances per precision are in `Tolerances` below (and in the README): fp32 is checked tightly;
// fp16/bf16 round every activation to 11/8 significant bits, so they get looser bounds that still
// catch any wrong kernel (a wrong kernel gives errors of order 1, not 1e-2).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "llmc/gpt2_step.cuh"

// logits, grads: ||ours - ref|| / ||ref||; loss and each training loss: |ours - ref| / ref.
// Measured on an H200 (2026-11-30): fp32 4e-6 / 4e-6 / 1.4e-6 (losses); fp16 1.4e-3 / 1.6e-3 /
// 1.7e-3; bf16 1.1e-2 / 1.3e-2 / 5.1e-3. Ten steps that memorize one batch amplify rounding
// differences step by step, hence the looser bound on the trajectory than on one step.
struct Tolerances { float logits, loss, grads, losses; };
#if defined(ENABLE_FP32)
constexpr Tolerances TOL = {1e-4f, 1e-5f, 2e-3f, 1e-5f};
#elif defined(ENABLE_BF16)
constexpr Tolerances TOL = {3e-2f, 1e-2f, 1.5e-1f, 1.5e-2f};
#else
constexpr Tolerances TOL = {1e-2f, 3e-3f, 6e-2f, 5e-3f};
#endif

static int passed = 0, failed = 0;
static void report(bool ok, const char* what, double rel, double max_abs, double tol) {
    (ok ? passed : failed)++;
    printf("%s %-10s rel_err %.3e  max_abs %.3e  (tol %.1e)\n", ok ? "PASS" : "FAIL", what, rel, max_abs, tol);
}
// ||a - b|| / ||b|| (or ||a - b|| when b is all zeros), and max |a - b|.
static void compare(const float* a, const float* b, size_t n, double* rel, double* max_abs) {
    double num = 0, den = 0;
    *max_abs = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        num += d * d; den += (double)b[i] * b[i];
        *max_abs = std::max(*max_abs, fabs(d));
        if (!std::isfinite(a[i])) { num = INFINITY; }
    }
    *rel = den > 0 ? sqrt(num / den) : sqrt(num);
}

struct ReferenceState {
    int B, T, steps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    std::vector<int> x, y;
    std::vector<float> logits, grads, losses;  // grads: model-file order
    float loss;
};
static bool read_state(const char* path, const GPT2Config& c, ReferenceState* s, std::string* err) {
    FILE* f = fopen(path, "rb");
    if (!f) { *err = std::string(path) + ": cannot open (run: python3 dev/reference.py)"; return false; }
    int32_t h[256];
    bool ok = fread(h, sizeof(int32_t), 256, f) == 256 && h[0] == 20240327 && h[1] == 3;
    if (ok) {
        s->B = h[2]; s->T = h[3]; s->steps = h[4];
        float* hf = (float*)h;
        s->lr = hf[5]; s->beta1 = hf[6]; s->beta2 = hf[7]; s->eps = hf[8]; s->weight_decay = hf[9]; s->grad_clip = hf[10];
        const size_t bt = (size_t)s->B * s->T;
        s->x.resize(bt); s->y.resize(bt); s->logits.resize(bt * c.vocab_size);
        s->grads.resize(param_layout(c).total); s->losses.resize(s->steps);
        ok = fread(s->x.data(), sizeof(int), bt, f) == bt && fread(s->y.data(), sizeof(int), bt, f) == bt &&
             fread(s->logits.data(), sizeof(float), s->logits.size(), f) == s->logits.size() &&
             fread(&s->loss, sizeof(float), 1, f) == 1 &&
             fread(s->grads.data(), sizeof(float), s->grads.size(), f) == s->grads.size() &&
             fread(s->losses.data(), sizeof(float), s->losses.size(), f) == s->losses.size();
    }
    fclose(f);
    if (!ok) *err = std::string(path) + ": not a reference state (version 3) for this model, or truncated";
    return ok;
}

int main(int argc, char** argv) {
    const char* model_path = argc > 1 ? argv[1] : "dev_data/reference_model.bin";
    const char* state_path = argc > 2 ? argv[2] : "dev_data/reference_state.bin";
    const int recompute = argc > 3 ? atoi(argv[3]) : 0;
    const size_t logit_chunk = argc > 4 ? (size_t)atol(argv[4]) : DEFAULT_LOGIT_CHUNK;  // smaller: the chunked lm head
    const bool tune = argc > 5 && atoi(argv[5]) != 0;  // the GEMM algorithms the trainer's --gemm-tune picks
    std::string err;
    GPT2Config cfg;
    ReferenceState ref;
    if (!model_file_read_header(model_path, &cfg, &err) || !read_state(state_path, cfg, &ref, &err)) {
        fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
    }
    printf("test_gpt2cu (%s): L=%d NH=%d C=%d, B=%d T=%d, %d steps, recompute %d, lm-head chunk %zu tokens, GEMM algorithms %s\n",
           PRECISION_NAME, cfg.num_layers, cfg.num_heads, cfg.channels, ref.B, ref.T, ref.steps, recompute,
           std::min(logit_chunk, (size_t)ref.B * ref.T), tune ? "timed" : "cuBLASLt's first");
    Context ctx;
    context_create(&ctx, 0);
    GPT2 m;
    gpt2_build(&m, cfg, ref.B, ref.T, 0, 1, 0, recompute, logit_chunk);
    if (!gpt2_init_from_file(&m, &ctx, model_path, &err)) { fprintf(stderr, "error: %s\n", err.c_str()); return 1; }
    const size_t BT = (size_t)ref.B * ref.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    if (tune) {
        gpt2_tune_gemms(&m, &ctx, 1);
        int differ = 0;
        for (int c : matmul_choices(&ctx)) differ += c != 0;
        printf("     GEMM algorithms timed: %zu shapes, %d not cuBLASLt's first choice\n", matmul_choices(&ctx).size(), differ);
    }

    // 1. forward: logits (only the V real columns) and the mean loss
    gpt2_set_batch(&m, &ctx, ref.x.data(), ref.y.data());
    cudaCheck(cudaMemsetAsync(m.d_loss_sum, 0, sizeof(float), ctx.stream));
    gpt2_forward(&m, &ctx, m.B, m.T, true, 0.0f);
    // the logits buffer holds the last chunk of tokens (all of them unless a chunk was asked for)
    const size_t rows = m.acts.logit_rows, first = BT - rows;
    std::vector<float> logits(rows * Vp), got(rows * V);
    copy_from_device_as_float(logits.data(), m.acts.logits, logits.size());
    for (size_t i = 0; i < rows; i++) memcpy(&got[i * V], &logits[i * Vp], V * sizeof(float));
    double rel, max_abs;
    compare(got.data(), ref.logits.data() + first * V, got.size(), &rel, &max_abs);
    report(rel < TOL.logits, "logits", rel, max_abs, TOL.logits);
    float loss_sum;
    cudaCheck(cudaMemcpy(&loss_sum, m.d_loss_sum, sizeof(float), cudaMemcpyDeviceToHost));
    const float loss = loss_sum / BT;
    report(fabsf(loss - ref.loss) < TOL.loss * ref.loss, "loss", fabsf(loss - ref.loss) / ref.loss, fabsf(loss - ref.loss), TOL.loss);
    printf("     loss %.6f (reference %.6f)\n", loss, ref.loss);

    // 2. forward + backward twice from the same weights: bitwise identical gradients
    LossScaler scaler = LossScaler::make(USES_LOSS_SCALING);
    const size_t n = m.layout.total;
    std::vector<float> g1(n), g2(n);
    for (std::vector<float>* g : {&g1, &g2}) {
        cudaCheck(cudaMemsetAsync(m.grads, 0, n * sizeof(floatX), ctx.stream));
        cudaCheck(cudaMemsetAsync(m.d_loss_sum, 0, sizeof(float), ctx.stream));
        gpt2_forward(&m, &ctx, m.B, m.T, true, scaler.scale / BT);
        gpt2_backward(&m, &ctx, GradReadyFn());
        copy_from_device_as_float(g->data(), m.grads, n);
    }
    const bool same = memcmp(g1.data(), g2.data(), n * sizeof(float)) == 0;
    (same ? passed : failed)++;
    printf("%s backward is deterministic (two runs bitwise %s)\n", same ? "PASS" : "FAIL", same ? "identical" : "DIFFERENT");

    // 2b. the same, replayed from CUDA graphs (as gpt2_train_step does from its second step on):
    // captured and replayed, then replayed again; bitwise identical to the launches
    {
        std::vector<float> g3(n);
        cudaGraphExec_t fwd = nullptr, bwd = nullptr;
        for (int rep = 0; rep < 2; rep++) {
            cudaCheck(cudaMemsetAsync(m.grads, 0, n * sizeof(floatX), ctx.stream));
            cudaCheck(cudaMemsetAsync(m.d_loss_sum, 0, sizeof(float), ctx.stream));
            run_graph(&ctx, &fwd, false, [&] { gpt2_forward(&m, &ctx, m.B, m.T, true, scaler.scale / BT); });
            run_graph(&ctx, &bwd, false, [&] { gpt2_backward(&m, &ctx, GradReadyFn()); });
        }
        copy_from_device_as_float(g3.data(), m.grads, n);
        cudaCheck(cudaGraphExecDestroy(fwd));
        cudaCheck(cudaGraphExecDestroy(bwd));
        const bool same_graph = memcmp(g1.data(), g3.data(), n * sizeof(float)) == 0;
        (same_graph ? passed : failed)++;
        printf("%s forward + backward replayed from CUDA graphs: gradients bitwise %s\n", same_graph ? "PASS" : "FAIL",
               same_graph ? "identical" : "DIFFERENT");
    }

    // 3. every parameter gradient, per tensor (all layers together), unscaled
    for (float& v : g1) v /= scaler.scale;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        std::vector<float> a, b;
        for (size_t l = 0; l < param_tensor_count(cfg, t); l++) {
            const size_t e = param_tensor_elems(cfg, t);
            const float* pa = &g1[param_offset(cfg, m.layout, t, (int)l)];
            const float* pb = &ref.grads[model_file_offset(cfg, t, (int)l)];
            a.insert(a.end(), pa, pa + e);
            b.insert(b.end(), pb, pb + e);
        }
        compare(a.data(), b.data(), a.size(), &rel, &max_abs);
        report(rel < TOL.grads, param_tensor_name(t), rel, max_abs, TOL.grads);
    }

    // 4. training: the losses of `steps` AdamW steps on the same batch (from the second step on
    // through CUDA graphs, as the trainer runs them)
    m.use_graphs = true;
    AdamWHyper h{ref.lr, ref.beta1, ref.beta2, ref.eps, ref.weight_decay, 0};
    double worst = 0;
    for (int s = 0; s < ref.steps; s++) {
        StepResult r = gpt2_train_step(&m, &ctx, 1, [&](int, int** in, int** tg) { *in = ref.x.data(); *tg = ref.y.data(); },
                                       h, &scaler, UpdateRules{ref.grad_clip});
        const double d = fabs(r.loss - ref.losses[s]) / ref.losses[s];
        worst = std::max(worst, d);
        printf("     step %2d: loss %.6f (reference %.6f) norm %.4f%s\n", s, r.loss, ref.losses[s], r.grad_norm, r.skipped ? " SKIPPED" : "");
    }
    if (ref.steps > 0) report(worst < TOL.losses, "losses", worst, worst * ref.losses[0], TOL.losses);

    // 5. gradient accumulation and the graphs' reuse, through gpt2_train_step as the trainer runs
    // it, with learning rate 0 (the weights stay put, so every step's gradients can be compared):
    //   a. a step of two micro-batches (x, then x' = x's tokens permuted) leaves the sum of what
    //      the two backward passes give one by one (the accumulation adds, the bias gradients of
    //      the ones column too), within one rounding per added term (1e-5 fp32, 1e-2 fp16/bf16);
    //      launched and replayed from graphs, bitwise the same;
    //   b. the loss scale changed between replayed steps (the forward graph is captured again, the
    //      backward replayed): bitwise what launches give at the new scale.
    {
        std::vector<int> x2(BT), y2(BT);
        for (size_t i = 0; i < BT; i++) { x2[i] = ref.x[(i * 7 + 3) % BT]; y2[i] = ref.y[(i * 7 + 3) % BT]; }
        AdamWHyper h0 = h;
        h0.lr = 0.0f;
        const float scale = scaler.scale;
        auto batches = [&](int i, int** in, int** tg) {
            *in = i == 0 ? ref.x.data() : x2.data();
            *tg = i == 0 ? ref.y.data() : y2.data();
        };
        auto step_grads = [&](bool graphs, float at_scale) {
            m.use_graphs = graphs;
            scaler.scale = at_scale;
            gpt2_train_step(&m, &ctx, 2, batches, h0, &scaler, UpdateRules{ref.grad_clip});
            std::vector<float> g(n);
            copy_from_device_as_float(g.data(), m.grads, n);
            return g;
        };
        // one by one: each micro-batch's backward with the step's dloss, added on the host
        std::vector<float> expect(n, 0.0f), one(n);
        for (int i = 0; i < 2; i++) {
            int *in, *tg;
            batches(i, &in, &tg);
            cudaCheck(cudaMemsetAsync(m.grads, 0, n * sizeof(floatX), ctx.stream));
            gpt2_set_batch(&m, &ctx, in, tg);
            gpt2_forward(&m, &ctx, m.B, m.T, true, scale / (2.0f * BT));
            gpt2_backward(&m, &ctx, GradReadyFn());
            copy_from_device_as_float(one.data(), m.grads, n);
            for (size_t k = 0; k < n; k++) expect[k] += one[k];
        }
        const std::vector<float> launched = step_grads(false, scale), replayed = step_grads(true, scale);
        const double tol_acc = sizeof(floatX) == 4 ? 1e-5 : 1e-2;  // one rounding to floatX per added term
        compare(launched.data(), expect.data(), n, &rel, &max_abs);
        report(rel < tol_acc, "accum 2", rel, max_abs, tol_acc);
        const bool same_acc = memcmp(launched.data(), replayed.data(), n * sizeof(float)) == 0;
        (same_acc ? passed : failed)++;
        printf("%s a step of 2 micro-batches replayed from CUDA graphs: gradients bitwise %s the launches'\n",
               same_acc ? "PASS" : "FAIL", same_acc ? "equal to" : "DIFFERENT from");
        const std::vector<float> rescaled = step_grads(true, scale / 4), rescaled_launched = step_grads(false, scale / 4);
        const bool same_scale = memcmp(rescaled.data(), rescaled_launched.data(), n * sizeof(float)) == 0;
        (same_scale ? passed : failed)++;
        printf("%s the loss scale changed between replayed steps: gradients bitwise %s the launches' at the new scale\n",
               same_scale ? "PASS" : "FAIL", same_scale ? "equal to" : "DIFFERENT from");
    }

    gpt2_free(&m);
    context_destroy(&ctx);
    printf("overall okay: %d\n", failed == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
