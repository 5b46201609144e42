// Checks llmc/classifier.cuh (fused_classifier) against a float64 CPU softmax cross-entropy, with
// V=50257, Vp=50304 and 320 rows; the padding columns V..Vp-1 hold large garbage logits that
// must be ignored:
//   - losses, and loss_sum accumulating onto a non-zero start (twice);
//   - dlogits = dloss * (softmax - onehot), written in place; padding columns exactly 0;
//   - dloss = 0: losses computed, logits left bitwise untouched;
// the same for a small vocabulary (V=999, Vp=1024: most threads of a row own no column) and a
// large one (V=120000, Vp=120064: only the first part of the row fits in shared memory, the rest
// is read from global memory; in the fp32 build that is already the case at V=50257);
//   - determinism: two runs on the same 2048 rows give bitwise identical losses, loss_sum, dlogits;
//   - NaN logits (a chunk of them, all one thread's columns at V=999; and a single one): the row's
//     loss and dlogits NaN, the other rows' as the reference;
//   - timing at the trainer's chunk, N=16384 rows (B*T of a 124M step is 4 of them): the kernel
//     against the previous one (fused_classifier_prev below, kept only here for the comparison),
//     whose losses it must also match; prints ms, GB/s (bytes: the row read once, the gradient
//     written once) and a SPEEDUP line; INFO lines say how much of a row sits in shared memory and
//     how many blocks (rows) share an SM.
// Run: make dev/cuda/classifier_check && ./dev/cuda/classifier_check   (PRECISION=BF16|FP32 for others)
#include "check.cuh"
#include "../../llmc/classifier.cuh"

// ----------------------------------------------------------------------------------------------
// The previous kernel, for the timing comparison only. One block of 1024 threads per row of
// logits (N, Vp): pass 1 reads the row from global memory with an online max/sum (an expf per
// value plus one per chunk); pass 2 reads the row again (from L2, if it is still there) and
// computes expf again to write the gradient in place. losses (N) written; logits overwritten
// with (softmax - onehot) * dloss when dloss != 0.
struct SoftmaxStatsPrev { float m, s; };
__device__ inline SoftmaxStatsPrev softmax_stats_merge_prev(SoftmaxStatsPrev a, SoftmaxStatsPrev b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__global__ void fused_classifier_kernel_prev(floatX* logits, float* losses, const int* targets,
                                             float dloss, int V, int Vp) {
    __shared__ SoftmaxStatsPrev shared[32];
    const size_t row = blockIdx.x;
    floatX* x = logits + row * Vp;
    SoftmaxStatsPrev st{-INFINITY, 0.0f};
    for (int c = threadIdx.x * x128::size; c < V; c += blockDim.x * x128::size) {
        x128 v = load128(x + c);
        float cm = -INFINITY;
        for (int k = 0; k < x128::size && c + k < V; k++) cm = fmaxf(cm, (float)v[k]);
        const float m = fmaxf(st.m, cm);
        float s = st.s * expf(st.m - m);
        for (int k = 0; k < x128::size && c + k < V; k++) s += expf((float)v[k] - m);
        st = {m, s};
    }
    for (int o = 16; o > 0; o >>= 1) {
        SoftmaxStatsPrev other{__shfl_xor_sync(0xffffffff, st.m, o), __shfl_xor_sync(0xffffffff, st.s, o)};
        st = softmax_stats_merge_prev(st, other);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) shared[warp] = st;
    __syncthreads();
    st = shared[0];
    for (int w = 1; w < warps; w++) st = softmax_stats_merge_prev(st, shared[w]);
    const int target = targets[row];
    const float lse = st.m + logf(st.s);
    if (threadIdx.x == 0) losses[row] = lse - (float)x[target];
    if (dloss == 0.0f) return;
    __syncthreads();
    for (int c = threadIdx.x * x128::size; c < Vp; c += blockDim.x * x128::size) {
        x128 v = load128(x + c), d;
        for (int k = 0; k < x128::size; k++) {
            const int col = c + k;
            const float p = col < V ? expf((float)v[k] - lse) : 0.0f;
            d[k] = (floatX)((p - (col == target ? 1.0f : 0.0f)) * dloss);
        }
        store128(x + c, d);
    }
}
inline void fused_classifier_prev(Context* ctx, floatX* logits, float* losses, float* loss_sum, const int* targets,
                                  float dloss, int N, int V, int Vp) {
    fused_classifier_kernel_prev<<<N, 1024, 0, ctx->stream>>>(logits, losses, targets, dloss, V, Vp);
    launchCheck();
    classifier::loss_accumulate_kernel<<<1, 1024, 0, ctx->stream>>>(loss_sum, losses, N);
    launchCheck();
}

// The float64 log-sum-exp of a row's first V logits (its loss is this minus the target's logit).
static double reference_lse(const float* x, int V) {
    double mx = -1e300, s = 0;
    for (int c = 0; c < V; c++) mx = std::max(mx, (double)x[c]);
    for (int c = 0; c < V; c++) s += std::exp(x[c] - mx);
    return mx + std::log(s);
}

// ----------------------------------------------------------------------------------------------
// Correctness of one shape against the float64 CPU reference. tag is appended to every check name.
static void check_shape(Context& ctx, int N, int V, int Vp, const std::string& tag) {
    const float dloss = 1024.0f / N;  // like loss_scale / (B*T): lifts the fp16 gradients out of subnormals
    std::vector<float> logits = randn((size_t)N * Vp, 2.0f);
    for (int r = 0; r < N; r++)
        for (int c = V; c < Vp; c++) logits[(size_t)r * Vp + c] = 20.0f + (float)(c % 7);  // must not count
    std::vector<int> targets(N);
    for (auto& t : targets) t = randint(0, V);
    targets[0] = 0; targets[1] = V - 1; targets[2] = V - 8;
    floatX* d_logits = to_device(logits);
    int* d_targets = to_device_raw(targets);
    float *d_losses = dalloc<float>(N), *d_loss_sum = to_device_raw(std::vector<float>{5.0f});

    std::vector<double> loss(N), dlogits((size_t)N * Vp, 0.0);
    double loss_total = 0;
    for (int r = 0; r < N; r++) {
        const float* x = &logits[(size_t)r * Vp];
        const double lse = reference_lse(x, V);
        loss[r] = lse - x[targets[r]];
        loss_total += loss[r];
        for (int c = 0; c < V; c++)
            dlogits[(size_t)r * Vp + c] = (std::exp(x[c] - lse) - (c == targets[r] ? 1.0 : 0.0)) * dloss;
    }

    // dloss = 0 first: losses only, logits untouched
    poison(d_losses, N);
    std::vector<unsigned char> before = bytes_of(d_logits, (size_t)N * Vp * sizeof(floatX));
    fused_classifier(&ctx, d_logits, d_losses, d_loss_sum, d_targets, 0.0f, N, V, Vp);
    check_close("fused_classifier dloss=0 losses" + tag, from_device_raw(d_losses, N), loss, 1e-5);
    check_bitwise("fused_classifier dloss=0 logits untouched" + tag, bytes_of(d_logits, (size_t)N * Vp * sizeof(floatX)) == before);
    check_close("fused_classifier loss_sum += sum(losses)" + tag, from_device_raw(d_loss_sum, 1),
                std::vector<double>{5.0 + loss_total}, 1e-5);

    // with the gradient
    poison(d_losses, N);
    fused_classifier(&ctx, d_logits, d_losses, d_loss_sum, d_targets, dloss, N, V, Vp);
    check_close("fused_classifier losses" + tag, from_device_raw(d_losses, N), loss, 1e-5);
    check_close("fused_classifier loss_sum accumulates again" + tag, from_device_raw(d_loss_sum, 1),
                std::vector<double>{5.0 + 2 * loss_total}, 1e-5);
    std::vector<float> got = from_device(d_logits, (size_t)N * Vp);
    check_close("fused_classifier dlogits" + tag, got, dlogits, tol_default());
    size_t nonzero_pad = 0;
    for (int r = 0; r < N; r++)
        for (int c = V; c < Vp; c++) nonzero_pad += got[(size_t)r * Vp + c] != 0.0f;
    check_true("fused_classifier dlogits padding V..Vp-1 == 0" + tag, nonzero_pad == 0,
               std::to_string(nonzero_pad) + " non-zero padding entries");
}

// ---- NaN logits: a NaN must make its row's loss NaN. With V=999 each thread owns at most one
// 16-byte chunk, so a chunk of NaNs is ALL of its thread's columns: that thread's max stays -inf
// (the max skips NaNs), and its NaN sum was dropped as if it had no columns (the loss came out
// finite). Row 1: one chunk of NaNs; row 2: a single NaN (its thread's other values finite);
// rows 0 and 3 clean and as the reference. With dloss the NaN rows' gradients are NaN too.
static void check_nan_logits(Context* ctx) {
    const int N = 4, V = 999, Vp = 1024, K = x128::size;
    std::vector<float> logits = randn((size_t)N * Vp, 2.0f);
    for (int c = 5 * K; c < 6 * K; c++) logits[(size_t)1 * Vp + c] = NAN;
    logits[(size_t)2 * Vp + 7 * K + 1] = NAN;
    const std::vector<int> targets = {3, 0, 0, V - 1};
    floatX* d_logits = to_device(logits);
    int* d_targets = to_device_raw(targets);
    float *d_losses = dalloc<float>(N), *d_loss_sum = to_device_raw(std::vector<float>{0.0f});
    for (float dloss : {0.0f, 1.0f / N}) {
        upload(d_logits, logits);
        poison(d_losses, N);
        fused_classifier(ctx, d_logits, d_losses, d_loss_sum, d_targets, dloss, N, V, Vp);
        const std::vector<float> l = from_device_raw(d_losses, N);
        const std::string tag = std::string("fused_classifier NaN logits (V=999") + (dloss != 0 ? ", dloss)" : ", dloss=0)");
        check_true(tag + ": a chunk of NaNs makes the row's loss NaN", std::isnan(l[1]), "loss " + std::to_string(l[1]));
        check_true(tag + ": one NaN makes the row's loss NaN", std::isnan(l[2]), "loss " + std::to_string(l[2]));
        bool clean = true;
        for (int r : {0, 3})
            clean &= std::fabs(l[r] - (reference_lse(&logits[(size_t)r * Vp], V) - logits[(size_t)r * Vp + targets[r]])) < 1e-4;
        check_true(tag + ": the other rows' losses as the reference", clean, "rows 0 and 3");
        if (dloss != 0) {
            const std::vector<float> g = from_device(d_logits, (size_t)N * Vp);
            size_t nan_rows_finite = 0, clean_rows_nonfinite = 0;
            for (int r = 0; r < N; r++)
                for (int c = 0; c < V; c++) {
                    const bool fin = std::isfinite(g[(size_t)r * Vp + c]);
                    if (r == 1 || r == 2) nan_rows_finite += fin;
                    else clean_rows_nonfinite += !fin;
                }
            check_true(tag + ": the NaN rows' dlogits all NaN, the others finite", nan_rows_finite == 0 && clean_rows_nonfinite == 0,
                       std::to_string(nan_rows_finite) + " finite in the NaN rows, " + std::to_string(clean_rows_nonfinite) +
                           " non-finite in the others");
        }
    }
}

// where the kernel keeps a row: all of it in shared memory, or its first part
static std::string row_placement(Context* ctx, int v) {
    const int cached = classifier_cached_chunks(ctx, v), all = (int)ceil_div(v, x128::size);
    return cached == all ? std::string("row in shared memory")
                         : std::to_string(cached) + " of " + std::to_string(all) + " chunks in shared memory";
}

// ---- determinism: the same inputs twice give the same bits (losses, loss_sum, dlogits)
static void check_determinism(Context* ctx, int V, int Vp) {
    const int N = 2048;
    const size_t n = (size_t)N * Vp, bytes = n * sizeof(floatX);
    floatX* pristine = random_device<floatX>(ctx, n, -4, 4);
    floatX* logits = dalloc<floatX>(n);
    std::vector<int> targets(N);
    for (auto& t : targets) t = randint(0, V);
    int* d_targets = to_device_raw(targets);
    float *losses = dalloc<float>(N), *loss_sum = dalloc<float>(1);
    std::vector<unsigned char> out[2][3];
    for (int run = 0; run < 2; run++) {
        sync();
        cudaCheck(cudaMemcpy(logits, pristine, bytes, cudaMemcpyDeviceToDevice));
        const float start = 5.0f;
        cudaCheck(cudaMemcpy(loss_sum, &start, sizeof(float), cudaMemcpyHostToDevice));
        sync();
        poison(losses, N);
        fused_classifier(ctx, logits, losses, loss_sum, d_targets, 1.0f / N, N, V, Vp);
        out[run][0] = bytes_of(losses, N * sizeof(float));
        out[run][1] = bytes_of(loss_sum, sizeof(float));
        out[run][2] = bytes_of(logits, bytes);
    }
    check_bitwise("fused_classifier deterministic: losses (2 runs, N=2048)", out[0][0] == out[1][0]);
    check_bitwise("fused_classifier deterministic: loss_sum", out[0][1] == out[1][1]);
    check_bitwise("fused_classifier deterministic: dlogits", out[0][2] == out[1][2]);
}

// how many blocks (rows) share an SM, given the shared memory a row takes at this V
static void print_occupancy(Context* ctx, int V) {
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, classifier::cross_entropy_dlogits_kernel, classifier::THREADS,
        2 * classifier::WARPS * sizeof(float) + (size_t)classifier_cached_chunks(ctx, V) * sizeof(x128)));
    printf("INFO cross_entropy_dlogits_kernel: %d threads per block (row), %d blocks per SM\n",
           classifier::THREADS, per_sm);
}

// ---- timing at the trainer's lm-head chunk: 16384 rows (the logits are overwritten by their
// gradient on each run; the values do not change the work)
static void time_classifier(Context* ctx, int V, int Vp) {
    const int N = 16384;
    floatX* logits = random_device<floatX>(ctx, (size_t)N * Vp, -4, 4);
    std::vector<int> targets(N);
    for (auto& t : targets) t = randint(0, V);
    int* d_targets = to_device_raw(targets);
    float *losses = dalloc<float>(N), *losses_prev = dalloc<float>(N);
    float* loss_sum = random_device<float>(ctx, 1, 0, 1);

    // same losses as the previous kernel on the same (untouched: dloss = 0) logits
    fused_classifier_prev(ctx, logits, losses_prev, loss_sum, d_targets, 0.0f, N, V, Vp);
    fused_classifier(ctx, logits, losses, loss_sum, d_targets, 0.0f, N, V, Vp);
    const std::vector<float> lp = from_device_raw(losses_prev, N);
    check_close("fused_classifier losses vs _prev (N=16384)", from_device_raw(losses, N),
                std::vector<double>(lp.begin(), lp.end()), 1e-5);
    print_occupancy(ctx, V);

    const double X = sizeof(floatX), bytes = 2 * X * (double)N * Vp + 8.0 * N, bytes0 = X * (double)N * Vp + 8.0 * N;
    const float prev = time_ms(ctx, "fused_classifier_prev N=16384 (loss+dlogits)", bytes, 0,
                               [&] { fused_classifier_prev(ctx, logits, losses, loss_sum, d_targets, 1.0f / N, N, V, Vp); });
    const float now = time_ms(ctx, "fused_classifier N=16384 (loss+dlogits)", bytes, 0,
                              [&] { fused_classifier(ctx, logits, losses, loss_sum, d_targets, 1.0f / N, N, V, Vp); });
    const float prev0 = time_ms(ctx, "fused_classifier_prev N=16384 (dloss=0)", bytes0, 0,
                                [&] { fused_classifier_prev(ctx, logits, losses, loss_sum, d_targets, 0.0f, N, V, Vp); });
    const float now0 = time_ms(ctx, "fused_classifier N=16384 (dloss=0)", bytes0, 0,
                               [&] { fused_classifier(ctx, logits, losses, loss_sum, d_targets, 0.0f, N, V, Vp); });
    printf("SPEEDUP fused_classifier vs _prev, N=16384 V=%d Vp=%d: loss+dlogits %.3fx (%.4f -> %.4f ms), "
           "dloss=0 %.3fx (%.4f -> %.4f ms)\n", V, Vp, prev / now, prev, now, prev0 / now0, prev0, now0);
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "classifier");
    const int V = 50257, Vp = 50304;
    printf("INFO V=%d: %s\n", V, row_placement(&ctx, V).c_str());

    check_shape(ctx, 320, V, Vp, "");
    check_shape(ctx, 16, 999, 1024, " [V=999 Vp=1024, " + row_placement(&ctx, 999) + "]");
    check_shape(ctx, 8, 120000, 120064, " [V=120000 Vp=120064, " + row_placement(&ctx, 120000) + "]");
    check_determinism(&ctx, V, Vp);
    check_nan_logits(&ctx);
    if (timing_enabled()) time_classifier(&ctx, V, Vp);

    context_destroy(&ctx);
    return check_finish();
}
