// Checks llmc/init.cuh, the two kernels the weights' initialization (gpt2_init_random) is made of,
// which no other check or test runs (test_gpt2cu loads its weights from a file); which tensor gets
// which of them, at what std or value, is param_init (llmc/model.h), tested in dev/unit/test_model.cpp:
//   - init_normal: n = 2^20 + 3 samples at std 0.02 (GPT-2's), all finite; the sample mean within
//     5 standard errors of 0; the sample std within 1 % of 0.02 (its standard error is 0.07 %: a
//     wrong scale such as std/sqrt(2) or 2 std is off by 30 % or more); the kurtosis within 0.05
//     of a normal's 3 (a uniform gives 1.8; its standard error is ~0.005) and the share of |x| > 2 std
//     within 0.3 percentage points of 4.55 %; nothing written past n (the partial last block);
//   - reproducible: the same (seed, stream) again gives the same bits; a launch of the first 1000
//     elements only gives the same bits as those of the large one (the value of element i does not
//     depend on the launch: the trainer's ranks and its restarts rely on that);
//   - another stream id and another seed give other values: correlation with the first within
//     5 / sqrt(n) of 0, and almost no equal values;
//   - fill: every element the value (1.0f, the LayerNorm weights; 0.0f, the biases), nothing
//     written past n.
// Run: make dev/cuda/init_check && ./dev/cuda/init_check   (precision-independent: fp32 buffers)
#include "check.cuh"
#include "../../llmc/init.cuh"

static std::string fmt(const char* f, double a, double b = 0, double c = 0) {
    char buf[160];
    snprintf(buf, sizeof buf, f, a, b, c);
    return buf;
}

static void check_init_normal(Context* ctx) {
    const size_t n = (1u << 20) + 3, pad = 64;
    const float sd = 0.02f;
    const uint64_t seed = 1337, stream_id = 4096 * 3 + 5;   // as gpt2_init_random numbers a tensor: type * 4096 + layer
    float* d = dalloc<float>(n + pad);
    poison(d, n + pad);
    init_normal(ctx, d, n, sd, seed, stream_id);
    const std::vector<float> x = from_device_raw(d, n);
    size_t nonfinite = 0, beyond2 = 0;
    double s1 = 0, s2 = 0, s4 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(x[i])) { nonfinite++; continue; }
        s1 += x[i];
        beyond2 += std::fabs(x[i]) > 2 * sd;
    }
    const double mean = s1 / n;
    for (size_t i = 0; i < n; i++) {
        const double c = x[i] - mean;
        s2 += c * c;
        s4 += c * c * c * c;
    }
    const double var = s2 / (n - 1), stdev = std::sqrt(var), kurt = s4 / n / (var * var), share = (double)beyond2 / n;
    const double se_mean = sd / std::sqrt((double)n), rel_std = std::fabs(stdev - sd) / sd;
    check_true("init_normal n=2^20+3 std=0.02: all finite", nonfinite == 0, std::to_string(nonfinite) + " non-finite");
    check_true("init_normal: mean within 5 standard errors of 0", std::fabs(mean) <= 5 * se_mean,
               fmt("mean %.3e (5 standard errors: %.1e)", mean, 5 * se_mean));
    check_true("init_normal: std within 1 % of 0.02", rel_std <= 0.01, fmt("std %.6f, rel_err=%.3e (tol 1.0e-02)", stdev, rel_std));
    check_true("init_normal: kurtosis within 0.05 of 3 (normal, not uniform: 1.8)", std::fabs(kurt - 3.0) <= 0.05, fmt("kurtosis %.4f", kurt));
    check_true("init_normal: share of |x| > 2 std within 0.3 points of 4.55 %", std::fabs(share - 0.0455) <= 0.003,
               fmt("%.3f %%", 100 * share));
    check_untouched_past("init_normal: the 64 elements past n untouched", d, n, pad);

    // reproducible, and independent of the launch: the same call again; the first 1000 alone
    float* d2 = dalloc<float>(n);
    init_normal(ctx, d2, n, sd, seed, stream_id);
    const bool again = bytes_of(d2, n * 4) == bytes_of(d, n * 4);
    check_true("init_normal: the same seed and stream again, the same bits", again, again ? "bitwise identical" : "differ");
    poison(d2, n);
    init_normal(ctx, d2, 1000, sd, seed, stream_id);
    const bool prefix = bytes_of(d2, 1000 * 4) == bytes_of(d, 1000 * 4);
    check_true("init_normal: a launch of 1000 elements gives the large launch's first 1000", prefix, prefix ? "bitwise identical" : "differ");

    // other stream ids and seeds: other values (uncorrelated)
    const struct { const char* name; uint64_t seed, stream; } others[] = {
        {"the next stream id (the next layer)", seed, stream_id + 1},
        {"another seed", seed + 1, stream_id},
    };
    for (const auto& o : others) {
        init_normal(ctx, d2, n, sd, o.seed, o.stream);
        const std::vector<float> y = from_device_raw(d2, n);
        double sxy = 0, syy = 0, sy = 0;
        size_t equal = 0;
        for (size_t i = 0; i < n; i++) { sy += y[i]; equal += y[i] == x[i]; }
        const double my = sy / n;
        for (size_t i = 0; i < n; i++) { sxy += (x[i] - mean) * (y[i] - my); syy += (y[i] - my) * (y[i] - my); }
        const double r = sxy / std::sqrt(s2 * syy);
        check_true(std::string("init_normal: ") + o.name + " gives other values", std::fabs(r) <= 5 / std::sqrt((double)n) && equal < 100,
                   fmt("correlation %.2e (bound %.1e), %.0f equal values", r, 5 / std::sqrt((double)n), (double)equal));
    }
}

static void check_fill(Context* ctx) {
    const size_t n = 100003, pad = 64;
    float* d = dalloc<float>(n + pad);
    for (float value : {1.0f, 0.0f}) {
        poison(d, n + pad);
        fill(ctx, d, n, value);
        const std::vector<float> x = from_device_raw(d, n);
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++) wrong += x[i] != value;
        const std::string tag = "fill n=100003 value " + fmt("%g", value);
        check_true(tag + ": every element", wrong == 0, std::to_string(wrong) + " wrong");
        check_untouched_past(tag + ": the 64 elements past n untouched", d, n, pad);
    }
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "init");
    check_init_normal(&ctx);
    check_fill(&ctx);
    context_destroy(&ctx);
    return check_finish();
}
