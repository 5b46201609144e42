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
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>  // access
#include "llmc/gpt2_step.cuh"
#include "llmc/options.h"
#include "llmc/reference_check.h"

// logits: ||ours - ref|| / ||ref||; grads: the same per tensor and layer, the worst layer's;
// loss: |ours - ref| / ref; each training loss: |ours - ref| / the initial loss (check_training
// says why). Measured on an H200 (2026-12-04, the reference's d12 B=4 T=64): fp32 3.8e-6 / 4.0e-6
// / 1.5e-6 (losses); fp16 1.3e-3 / 1.5e-3 / 1.8e-3; bf16 1.1e-2 / 1.3e-2 / 3.2e-3 (the README also
// lists `run.sh shapes`' other widths and lengths); the worst single layer's gradient: fp32 4.6e-6,
// fp16 1.7e-3, bf16 1.4e-2. Ten steps that memorize one batch amplify rounding differences step
// by step, hence the looser bound on the trajectory than on one step. fp32's gradient bound is
// ~20x what it measures, as its others are (2e-3, 400x, let a gradient off by 0.1% through).
struct Tolerances { float logits, loss, grads, losses; };
#if defined(ENABLE_FP32)
constexpr Tolerances TOL = {1e-4f, 1e-5f, 1e-4f, 1e-5f};
#elif defined(ENABLE_BF16)
constexpr Tolerances TOL = {3e-2f, 1e-2f, 1.5e-1f, 1.5e-2f};
#else
constexpr Tolerances TOL = {1e-2f, 3e-3f, 6e-2f, 5e-3f};
#endif

static int passed = 0, failed = 0;  // the tally of the checks below
static void report(bool ok, const char* what, double rel, double max_abs, double tol) {
    (ok ? passed : failed)++;
    printf("%s %-10s rel_err %.3e  max_abs %.3e  (tol %.1e)\n", ok ? "PASS" : "FAIL", what, rel, max_abs, tol);
}
// a check that two gradient vectors are bitwise equal: "<what>: gradients bitwise <equal|DIFFERENT>"
static void report_bitwise(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    const bool same = a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    (same ? passed : failed)++;
    printf("%s %s: gradients bitwise %s\n", same ? "PASS" : "FAIL", what, same ? "equal" : "DIFFERENT");
}
// what every check reads: the model (built for the reference's batch), its context, the reference
struct Fixture {
    GPT2Config cfg;
    ReferenceState ref;
    Context ctx;
    GPT2 m;
    LossScaler scaler = LossScaler::make(USES_LOSS_SCALING);
    size_t BT() const { return (size_t)ref.B * ref.T; }
    size_t n() const { return m.layout.total; }  // parameters (= gradients)
};

// The model's gradients after one forward + backward of the batch set last, at dloss = `dloss`.
static std::vector<float> forward_backward(Fixture* f, float dloss) {
    std::vector<float> g(f->n());
    cudaCheck(cudaMemsetAsync(f->m.grads, 0, f->n() * sizeof(floatX), f->ctx.stream));
    cudaCheck(cudaMemsetAsync(f->m.d_loss_sum, 0, sizeof(float), f->ctx.stream));
    gpt2_forward(&f->m, &f->ctx, f->m.B, f->m.T, true, dloss);
    gpt2_backward(&f->m, &f->ctx, GradReadyFn());
    copy_from_device_as_float(g.data(), f->m.grads, f->n());
    return g;
}

// 1. forward: logits (only the V real columns) and the mean loss
static void check_forward(Fixture* f) {
    GPT2& m = f->m;
    ReferenceState& ref = f->ref;
    const size_t BT = f->BT(), V = f->cfg.vocab_size, Vp = f->cfg.padded_vocab_size;
    gpt2_set_batch(&m, &f->ctx, ref.x.data(), ref.y.data());
    cudaCheck(cudaMemsetAsync(m.d_loss_sum, 0, sizeof(float), f->ctx.stream));
    gpt2_forward(&m, &f->ctx, m.B, m.T, true, 0.0f);
    // the logits buffer holds the last chunk of tokens (all of them unless a chunk was asked for)
    // in its first rows: BT - first of them, fewer than logit_rows when the chunk does not divide
    // BT (the rows after them are the chunk before's, left over)
    const size_t first = (BT - 1) / m.acts.logit_rows * m.acts.logit_rows, rows = BT - first;
    std::vector<float> logits(rows * Vp), got(rows * V);
    copy_from_device_as_float(logits.data(), m.acts.logits, logits.size());
    for (size_t i = 0; i < rows; i++) memcpy(&got[i * V], &logits[i * Vp], V * sizeof(float));
    double rel, max_abs;
    rel_error(got.data(), ref.logits.data() + first * V, got.size(), &rel, &max_abs);
    report(rel < TOL.logits, "logits", rel, max_abs, TOL.logits);
    float loss_sum;
    cudaCheck(cudaMemcpy(&loss_sum, m.d_loss_sum, sizeof(float), cudaMemcpyDeviceToHost));
    const float loss = loss_sum / BT;
    report(fabsf(loss - ref.loss) < TOL.loss * ref.loss, "loss", fabsf(loss - ref.loss) / ref.loss, fabsf(loss - ref.loss), TOL.loss);
    printf("     loss %.6f (reference %.6f)\n", loss, ref.loss);
}

// 2. forward + backward twice from the same weights: bitwise identical gradients; then the same
// replayed from CUDA graphs (as gpt2_train_step does from its second step on): captured and
// replayed, then replayed again, bitwise identical to the launches. Returns the (scaled) gradients.
static std::vector<float> check_determinism(Fixture* f) {
    const float dloss = f->scaler.scale / f->BT();
    const std::vector<float> g1 = forward_backward(f, dloss), g2 = forward_backward(f, dloss);
    report_bitwise(g1, g2, "backward is deterministic, two runs");
    cudaGraphExec_t fwd = nullptr, bwd = nullptr;
    for (int rep = 0; rep < 2; rep++) {
        cudaCheck(cudaMemsetAsync(f->m.grads, 0, f->n() * sizeof(floatX), f->ctx.stream));
        cudaCheck(cudaMemsetAsync(f->m.d_loss_sum, 0, sizeof(float), f->ctx.stream));
        run_graph(&f->ctx, &fwd, false, [&] { gpt2_forward(&f->m, &f->ctx, f->m.B, f->m.T, true, dloss); });
        run_graph(&f->ctx, &bwd, false, [&] { gpt2_backward(&f->m, &f->ctx, GradReadyFn()); });
    }
    std::vector<float> g3(f->n());
    copy_from_device_as_float(g3.data(), f->m.grads, f->n());
    cudaCheck(cudaGraphExecDestroy(fwd));
    cudaCheck(cudaGraphExecDestroy(bwd));
    report_bitwise(g3, g1, "forward + backward replayed from CUDA graphs vs launched");
    return g1;
}

// 3. every parameter gradient against the reference, per tensor and layer (grad_error says why
// per layer); `g` is scaled by the loss scale
static void check_grads(const Fixture& f, std::vector<float> g) {
    for (float& v : g) v /= f.scaler.scale;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const GradError e = grad_error(f.cfg, f.m.layout, g.data(), f.ref.grads.data(), t);
        report(e.rel < TOL.grads, param_tensor_name(t), e.rel, e.max_abs, TOL.grads);
        if (is_block_tensor(t)) printf("     %s: worst layer %d\n", param_tensor_name(t), e.worst_layer);
    }
}

// 4. training: the losses of `steps` AdamW steps on the same batch (from the second step on
// through CUDA graphs, as the trainer runs them). Each step's error is measured as a fraction of
// the initial loss (~ln V), not of that step's loss: the steps memorize the one batch, and at
// GPT-2's larger widths the loss falls to ~2e-4 within 10 steps (d48's C=1600, B=2, T=64), where
// |ours - ref| / ref would measure the rounding of a number near zero (2e-7 absolute read as
// 1e-3), not whether the model trained the same way.
static void check_training(Fixture* f, const AdamWHyper& h) {
    ReferenceState& ref = f->ref;
    f->m.use_graphs = true;
    std::vector<float> losses;
    std::vector<bool> skipped;
    for (int s = 0; s < ref.steps; s++) {
        StepResult r = gpt2_train_step(&f->m, &f->ctx, 1, [&](int, int** in, int** tg) { *in = ref.x.data(); *tg = ref.y.data(); },
                                       h, &f->scaler, UpdateRules{ref.grad_clip});
        losses.push_back(r.loss);
        skipped.push_back(r.skipped);
        printf("     step %2d: loss %.6f (reference %.6f) norm %.4f%s\n", s, r.loss, ref.losses[s], r.grad_norm, r.skipped ? " SKIPPED" : "");
    }
    // infinite when a loss is not finite or a step was skipped (losses_error)
    const double worst = losses_error(losses, skipped, ref.losses);
    if (ref.steps > 0) report(worst < TOL.losses, "losses", worst, worst * ref.losses[0], TOL.losses);
}

// 5. gradient accumulation and the graphs' reuse, through gpt2_train_step as the trainer runs
// it, with learning rate 0 (the weights stay put, so every step's gradients can be compared):
//   a. a step of two micro-batches (x, then x' = x's tokens permuted) leaves the sum of what
//      the two backward passes give one by one (the accumulation adds, the bias gradients of
//      the ones column too), within one rounding per added term (1e-5 fp32, 1e-2 fp16/bf16);
//      launched and replayed from graphs, bitwise the same;
//   b. the loss scale changed between replayed steps (the forward graph is captured again, the
//      backward replayed): bitwise what launches give at the new scale.
static void check_accumulation(Fixture* f, const AdamWHyper& h) {
    ReferenceState& ref = f->ref;
    const size_t BT = f->BT(), n = f->n();
    std::vector<int> x2(BT), y2(BT);
    for (size_t i = 0; i < BT; i++) { x2[i] = ref.x[(i * 7 + 3) % BT]; y2[i] = ref.y[(i * 7 + 3) % BT]; }
    AdamWHyper h0 = h;
    h0.lr = 0.0f;
    const float scale = f->scaler.scale;
    auto batches = [&](int i, int** in, int** tg) {
        *in = i == 0 ? ref.x.data() : x2.data();
        *tg = i == 0 ? ref.y.data() : y2.data();
    };
    auto step_grads = [&](bool graphs, float at_scale) {
        f->m.use_graphs = graphs;
        f->scaler.scale = at_scale;
        gpt2_train_step(&f->m, &f->ctx, 2, batches, h0, &f->scaler, UpdateRules{ref.grad_clip});
        std::vector<float> g(n);
        copy_from_device_as_float(g.data(), f->m.grads, n);
        return g;
    };
    // one by one: each micro-batch's backward with the step's dloss, added on the host
    std::vector<float> expect(n, 0.0f);
    for (int i = 0; i < 2; i++) {
        int *in, *tg;
        batches(i, &in, &tg);
        gpt2_set_batch(&f->m, &f->ctx, in, tg);
        const std::vector<float> one = forward_backward(f, scale / (2.0f * BT));
        for (size_t k = 0; k < n; k++) expect[k] += one[k];
    }
    const std::vector<float> launched = step_grads(false, scale), replayed = step_grads(true, scale);
    const double tol_acc = sizeof(floatX) == 4 ? 1e-5 : 1e-2;  // one rounding to floatX per added term
    double rel, max_abs;
    rel_error(launched.data(), expect.data(), n, &rel, &max_abs);
    report(rel < tol_acc, "accum 2", rel, max_abs, tol_acc);
    report_bitwise(replayed, launched, "a step of 2 micro-batches replayed from CUDA graphs vs launched");
    const std::vector<float> rescaled = step_grads(true, scale / 4), rescaled_launched = step_grads(false, scale / 4);
    report_bitwise(rescaled, rescaled_launched, "the loss scale changed between replayed steps vs launched at the new scale");
}

// an optional numeric argument: `argv[i]` if given, else `dflt`; an integer in [lo, hi] (read by
// the trainer's own option parser, llmc/options.h) or one line and exit 2
static long long arg_or(int argc, char** argv, int i, const char* name, long long dflt, long long lo, long long hi) {
    if (argc <= i) return dflt;
    long long v = 0;
    std::string err;
    if (!option_set(Option{name, 0, OPT_INT64, &v, "", (double)lo, (double)hi}, name, argv[i], &err)) {
        fprintf(stderr, "error: %s (argument %d) must be an integer in [%lld, %lld], got '%s'\n", name, i, lo, hi, argv[i]);
        exit(2);
    }
    return v;
}

int main(int argc, char** argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: %s [MODEL_FILE [STATE_FILE [RECOMPUTE 0|1|2 [LM_HEAD_CHUNK_TOKENS [1: time the GEMM algorithms]]]]]\n"
               "defaults: dev_data/reference_model.bin dev_data/reference_state.bin 0 %zu 0 (python3 dev/reference.py writes the two files)\n",
               argv[0], DEFAULT_LOGIT_CHUNK);
        return 0;
    }
    const char* model_path = argc > 1 ? argv[1] : "dev_data/reference_model.bin";
    const char* state_path = argc > 2 ? argv[2] : "dev_data/reference_state.bin";
    const int recompute = (int)arg_or(argc, argv, 3, "recompute level", 0, 0, 2);
    const size_t logit_chunk = (size_t)arg_or(argc, argv, 4, "lm-head chunk (tokens)", DEFAULT_LOGIT_CHUNK, 1, 1LL << 30);
    const bool tune = arg_or(argc, argv, 5, "timed GEMM algorithms (0|1)", 0, 0, 1) != 0;
    std::string err;
    Fixture f;
    if (!model_file_read_header(model_path, &f.cfg, &err)) {   // as a missing state says (reference_state_read): which script writes it
        fprintf(stderr, "error: %s%s\n", err.c_str(), access(model_path, F_OK) != 0 ? " (run: python3 dev/reference.py)" : "");
        return 1;
    }
    if (!reference_state_read(state_path, f.cfg, &f.ref, &err)) {
        fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
    }
    const ReferenceState& ref = f.ref;
    context_create(&f.ctx, 0);
    gpt2_build(&f.m, f.cfg, ref.B, ref.T, 0, 1, 0, recompute, logit_chunk);
    printf("test_gpt2cu (%s): L=%d NH=%d C=%d, B=%d T=%d, %d steps, recompute %d, lm-head chunk %zu tokens, GEMM algorithms %s\n",
           PRECISION_NAME, f.cfg.num_layers, f.cfg.num_heads, f.cfg.channels, ref.B, ref.T, ref.steps, recompute,
           f.m.acts.logit_rows, tune ? "timed" : "cuBLASLt's first");   // the chunk in use: at least T, at most B*T
    if (!gpt2_init_from_file(&f.m, &f.ctx, model_path, &err)) { fprintf(stderr, "error: %s\n", err.c_str()); return 1; }
    if (tune) {
        gpt2_tune_gemms(&f.m, &f.ctx, 1);
        int differ = 0;
        for (int c : matmul_choices(&f.ctx)) differ += c != 0;
        printf("     GEMM algorithms timed: %zu shapes, %d not cuBLASLt's first choice\n", matmul_choices(&f.ctx).size(), differ);
    }
    const AdamWHyper h{ref.lr, ref.beta1, ref.beta2, ref.eps, ref.weight_decay, 0};
    check_forward(&f);
    check_grads(f, check_determinism(&f));
    check_training(&f, h);
    check_accumulation(&f, h);
    gpt2_free(&f.m);
    context_destroy(&f.ctx);
    printf("overall okay: %d\n", failed == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
