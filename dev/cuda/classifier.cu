// Checks llmc/classifier.cuh (fused_classifier) against a float64 CPU softmax cross-entropy, with
// V=50257, Vp=50304 and 320 rows; the padding columns V..Vp-1 hold large garbage logits that
// must be ignored:
//   - losses, and loss_sum accumulating onto a non-zero start (twice);
//   - dlogits = dloss * (softmax - onehot), written in place; padding columns exactly 0;
//   - dloss = 0: losses computed, logits left bitwise untouched;
//   - timing (GB/s) at 8192 rows.
// Run: make dev/cuda/classifier_check && ./dev/cuda/classifier_check   (PRECISION=BF16|FP32 for others)
#include "check.cuh"
#include "../../llmc/classifier.cuh"

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "classifier");
    const int V = 50257, Vp = 50304;

    {
        const int N = 320;
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
            double mx = -1e300, s = 0;
            for (int c = 0; c < V; c++) mx = std::max(mx, (double)x[c]);
            for (int c = 0; c < V; c++) s += std::exp(x[c] - mx);
            const double lse = mx + std::log(s);
            loss[r] = lse - x[targets[r]];
            loss_total += loss[r];
            for (int c = 0; c < V; c++)
                dlogits[(size_t)r * Vp + c] = (std::exp(x[c] - lse) - (c == targets[r] ? 1.0 : 0.0)) * dloss;
        }

        // dloss = 0 first: losses only, logits untouched
        poison(d_losses, N);
        std::vector<unsigned char> before = bytes_of(d_logits, (size_t)N * Vp * sizeof(floatX));
        fused_classifier(&ctx, d_logits, d_losses, d_loss_sum, d_targets, 0.0f, N, V, Vp);
        check_close("fused_classifier dloss=0 losses", from_device_raw(d_losses, N), loss, 1e-5);
        check_true("fused_classifier dloss=0 logits untouched",
                   bytes_of(d_logits, (size_t)N * Vp * sizeof(floatX)) == before, "bitwise identical");
        check_close("fused_classifier loss_sum += sum(losses)", from_device_raw(d_loss_sum, 1),
                    std::vector<double>{5.0 + loss_total}, 1e-5);

        // with the gradient
        poison(d_losses, N);
        fused_classifier(&ctx, d_logits, d_losses, d_loss_sum, d_targets, dloss, N, V, Vp);
        check_close("fused_classifier losses", from_device_raw(d_losses, N), loss, 1e-5);
        check_close("fused_classifier loss_sum accumulates again", from_device_raw(d_loss_sum, 1),
                    std::vector<double>{5.0 + 2 * loss_total}, 1e-5);
        std::vector<float> got = from_device(d_logits, (size_t)N * Vp);
        check_close("fused_classifier dlogits", got, dlogits, tol_default());
        size_t nonzero_pad = 0;
        for (int r = 0; r < N; r++)
            for (int c = V; c < Vp; c++) nonzero_pad += got[(size_t)r * Vp + c] != 0.0f;
        check_true("fused_classifier dlogits padding V..Vp-1 == 0", nonzero_pad == 0,
                   std::to_string(nonzero_pad) + " non-zero padding entries");
    }

    // ---- timing: B*T = 8192 rows (the logits are overwritten by their gradient on each run)
    if (timing_enabled()) {
        const int N = 8192;
        floatX* logits = random_device<floatX>(&ctx, (size_t)N * Vp, -4, 4);
        std::vector<int> targets(N);
        for (auto& t : targets) t = randint(0, V);
        int* d_targets = to_device_raw(targets);
        float *losses = dalloc<float>(N), *loss_sum = random_device<float>(&ctx, 1, 0, 1);
        const double X = sizeof(floatX), bytes = 2 * X * (double)N * Vp + 8.0 * N;
        time_ms(&ctx, "fused_classifier N=8192 Vp=50304 (loss+dlogits)", bytes, 0,
                [&] { fused_classifier(&ctx, logits, losses, loss_sum, d_targets, 1.0f / N, N, V, Vp); });
        time_ms(&ctx, "fused_classifier N=8192 Vp=50304 (dloss=0)", X * (double)N * Vp + 8.0 * N, 0,
                [&] { fused_classifier(&ctx, logits, losses, loss_sum, d_targets, 0.0f, N, V, Vp); });
    }

    context_destroy(&ctx);
    return check_finish();
}
