// Checks llmc/norm.cuh and llmc/adamw.cuh against CPU references:
//   - norm_squared + step_decision: sum of squares, norm, clip multiplier, skip (clipping active
//     and not); an inf / a nan in the gradients -> skip=1, a loss spike (the spike guard) ->
//     skip=2, and AdamW then leaves params, master, m and v bitwise untouched;
//   - the spike guard's decisions and running statistics over a sequence of steps (losses and
//     norms with spikes in them) vs spike_check run on the host (llmc/spike_guard.h);
//   - adamw_update vs a float64 PyTorch-formula AdamW with grad multiplier = clip / loss_scale:
//     with and without decay; with a shard [lo,hi) narrower than the tensor; the strided
//     multi-instance launch (count > 1) with a shard cutting across instances; offsets, sizes and
//     shard bounds not multiples of ADAMW_VEC (the element-by-element path). Elements outside
//     what is updated must stay bitwise untouched;
//   - nonfinite_flag (the per-rank inf/nan scan before a reduction): a bucket at an odd offset with
//     non-finite neighbours, inf/nan at its first, middle and last value, the other ranks' flags kept;
//   - cast_from_master: params == (floatX) master exactly, nothing written past n;
//   - timing (GB/s) of norm_squared and adamw_update over 124M parameters.
// Run: make dev/cuda/adamw_check && ./dev/cuda/adamw_check   (PRECISION=BF16|FP32 for others)
#include "check.cuh"
#include "../../llmc/adamw.cuh"

static const size_t P = 40000;  // elements of the whole (flat) parameter buffer

// Sum of squares, norm and decision on a host copy of g vs the device.
static void check_norm(Context* ctx, std::vector<float> g, float loss_scale, float max_norm, const char* what) {
    floatX* d_g = to_device(g);
    float* d_sumsq = dalloc<float>(1);
    StepScalars* d_step = dalloc<StepScalars>(1);
    poison(d_sumsq, 1); poison(d_step, 1);
    norm_squared(ctx, d_sumsq, d_g, g.size());
    step_decision(ctx, d_step, d_sumsq, loss_scale, max_norm);
    double ss = 0;
    for (float x : g) ss += (double)x * x;
    const double norm = std::sqrt(ss) / loss_scale, clip = (max_norm > 0 && norm > max_norm) ? max_norm / norm : 1.0;
    const StepScalars s = from_device_raw(d_step, 1)[0];
    const std::string tag = std::string("norm ") + what;
    check_close(tag + " sumsq", from_device_raw(d_sumsq, 1), {ss}, 1e-5);
    check_close(tag + " grad_norm", {s.grad_norm}, {norm}, 1e-5);
    check_close(tag + " grad_multiplier", {s.grad_multiplier}, {clip / loss_scale}, 1e-5);
    check_true(tag + " skip", s.skip == 0, "skip=" + std::to_string(s.skip) + (clip < 1 ? " (clipping)" : " (no clipping)"));
}

// inject: 0, 1 = an inf, 2 = a nan gradient, 3 = a finite gradient but a loss spike (skip 2)
struct AdamCase { const char* name; size_t first, stride, n; int count; size_t lo, hi; bool decay; int inject; };

// A case's inputs on the host (whole buffers; grads rounded to floatX by the upload) and on the
// device: params and grads whole, master/m/v the shard [lo, hi) only.
struct AdamHost { std::vector<float> master, grads, m, v; };
struct AdamDevice { floatX *params, *grads; float *master, *m, *v; size_t S; StepScalars* step; };
// The float64 reference: which elements the launch updates, and their new master, m, v.
struct AdamRef { std::vector<char> updated; std::vector<double> master, m, v; };

static AdamHost draw_inputs(const AdamCase& k) {
    AdamHost x{randn(P, 0.1f), randn(P, 100.0f), randn(P, 0.1f), randu(P, 1e-4f, 0.1f)};
    if (k.inject == 1 || k.inject == 2) x.grads[k.first + 3] = k.inject == 1 ? INFINITY : NAN;
    return x;
}

static AdamDevice upload_inputs(const AdamCase& k, AdamHost& x) {
    std::vector<float> params = x.master;  // to_device rounds in place: master itself stays exact
    AdamDevice d;
    d.S = k.hi - k.lo;  // master/m/v hold the shard only
    d.params = to_device(params); d.grads = to_device(x.grads);
    d.master = to_device_raw(std::vector<float>(x.master.begin() + k.lo, x.master.begin() + k.hi));
    d.m = to_device_raw(std::vector<float>(x.m.begin() + k.lo, x.m.begin() + k.hi));
    d.v = to_device_raw(std::vector<float>(x.v.begin() + k.lo, x.v.begin() + k.hi));
    d.step = dalloc<StepScalars>(1);
    return d;
}

// The StepScalars the update reads: made by norm_squared + step_decision for the injected cases,
// else a plain step with multiplier mult.
static void decide_step(Context* ctx, const AdamCase& k, const AdamDevice& d, float loss_scale, float mult) {
    if (k.inject) {  // the decision as the trainer makes it
        float* d_sumsq = dalloc<float>(1);
        norm_squared(ctx, d_sumsq, d.grads, P);
        if (k.inject == 3) {   // loss 9 (9000 over 1000 tokens) against a level of 5 +- 0.1: z = 40
            float* d_loss = to_device_raw(std::vector<float>{9000.0f});
            SpikeStats st{};
            st.loss = {5.0, 0.01, 200};
            step_decision(ctx, d.step, d_sumsq, loss_scale, 1.0f, d_loss, 1000.0, SpikeGuard{6.0f, 0.0f, 128}, st);
        } else {
            step_decision(ctx, d.step, d_sumsq, loss_scale, 1.0f);
        }
    } else {
        StepScalars s{1.0f, mult, 0};
        cudaCheck(cudaMemcpy(d.step, &s, sizeof(s), cudaMemcpyHostToDevice));
    }
}

// A skipped step: the reason it was skipped, and params, master, m, v bitwise as they were.
static void check_skipped_step(const AdamCase& k, const AdamDevice& d, const std::vector<unsigned char>& params0,
                               const std::vector<unsigned char> (&state0)[3], const std::string& tag) {
    const StepScalars s = from_device_raw(d.step, 1)[0];
    if (k.inject == 3)
        check_true("loss spike: skip", s.skip == SKIP_LOSS_SPIKE && std::isfinite(s.grad_norm) && std::fabs(s.loss_z - 40.0f) < 1e-3f,
                   "skip=" + std::to_string(s.skip) + " loss_z=" + std::to_string(s.loss_z));
    else
        check_true(std::string("norm with ") + (k.inject == 1 ? "an inf" : "a nan") + " gradient: skip", s.skip == 1 && !std::isfinite(s.grad_norm),
                   "skip=" + std::to_string(s.skip) + " grad_norm=" + std::to_string(s.grad_norm));
    const size_t S = d.S;
    const bool same = bytes_of(d.params, P * sizeof(floatX)) == params0 && bytes_of(d.master, S * 4) == state0[0] &&
                      bytes_of(d.m, S * 4) == state0[1] && bytes_of(d.v, S * 4) == state0[2];
    check_bitwise(tag + " params/master/m/v untouched after a skipped step", same);
}

// reference, over the updated set: instances y = 0..count-1, elements i, inside [lo, hi)
static AdamRef adamw_reference(const AdamCase& k, const AdamWHyper& h, float mult, const AdamHost& x) {
    std::vector<char> updated(P, 0);
    std::vector<double> ref_master(x.master.begin(), x.master.end()), ref_m(x.m.begin(), x.m.end()), ref_v(x.v.begin(), x.v.end());
    const double bc1 = 1 - std::pow((double)h.beta1, h.t), bc2 = 1 - std::pow((double)h.beta2, h.t);
    const double wd = k.decay ? h.weight_decay : 0.0;
    for (int y = 0; y < k.count; y++)
        for (size_t i = 0; i < k.n; i++) {
            const size_t idx = k.first + y * k.stride + i;
            if (idx < k.lo || idx >= k.hi) continue;
            updated[idx] = 1;
            const double g = (double)x.grads[idx] * mult, w = x.master[idx];
            ref_m[idx] = h.beta1 * ref_m[idx] + (1 - h.beta1) * g;
            ref_v[idx] = h.beta2 * ref_v[idx] + (1 - h.beta2) * g * g;
            ref_master[idx] = w - h.lr * ((ref_m[idx] / bc1) / (std::sqrt(ref_v[idx] / bc2) + h.eps) + wd * w);
        }
    return {std::move(updated), std::move(ref_master), std::move(ref_m), std::move(ref_v)};
}

// A step taken: the updated elements against the reference, everything else bitwise untouched.
static void check_updated_step(const AdamCase& k, const AdamHost& x, const AdamRef& ref, const AdamDevice& d,
                               const std::vector<unsigned char>& params0, const std::string& tag) {
    const size_t S = d.S;
    const std::vector<float> got_p = from_device(d.params, P), got_master = from_device_raw(d.master, S);
    const std::vector<float> got_m = from_device_raw(d.m, S), got_v = from_device_raw(d.v, S);
    // updated elements: the update (master - master0) vs the reference's, m, v; and params must
    // be exactly the kernel's own new master rounded to floatX
    std::vector<float> o_upd, o_m, o_v;
    std::vector<double> r_upd, r_m, r_v;
    const std::vector<unsigned char> params1 = bytes_of(d.params, P * sizeof(floatX));
    size_t changed_outside = 0, params_mismatch = 0;
    const size_t X = sizeof(floatX);
    for (size_t idx = 0; idx < P; idx++) {
        if (!ref.updated[idx]) {
            changed_outside += memcmp(&params0[idx * X], &params1[idx * X], X) != 0;
            if (idx >= k.lo && idx < k.hi)
                changed_outside += got_master[idx - k.lo] != x.master[idx] || got_m[idx - k.lo] != x.m[idx] ||
                                   got_v[idx - k.lo] != x.v[idx];
            continue;
        }
        const size_t j = idx - k.lo;
        o_upd.push_back(got_master[j] - x.master[idx]); r_upd.push_back(ref.master[idx] - x.master[idx]);
        o_m.push_back(got_m[j]); r_m.push_back(ref.m[idx]);
        o_v.push_back(got_v[j]); r_v.push_back(ref.v[idx]);
        params_mismatch += got_p[idx] != round_x(got_master[j]);
    }
    check_close(tag + " update (master - master0)", o_upd, r_upd, 1e-5);
    check_close(tag + " m", o_m, r_m, 1e-5);
    check_close(tag + " v", o_v, r_v, 1e-5);
    check_true(tag + " params == (floatX) master", params_mismatch == 0, std::to_string(params_mismatch) + " mismatches");
    check_true(tag + " outside untouched", changed_outside == 0, std::to_string(changed_outside) + " elements changed");
}

static void check_adamw(Context* ctx, const AdamCase& k) {
    AdamWHyper h{0.05f, 0.9f, 0.999f, 1e-8f, 0.1f, 0};
    adamw_set_step(&h, 5);
    const float loss_scale = 128.0f, mult = 0.7f / loss_scale;  // clip 0.7
    AdamHost x = draw_inputs(k);
    const AdamDevice d = upload_inputs(k, x);
    decide_step(ctx, k, d, loss_scale, mult);
    const std::vector<unsigned char> params0 = bytes_of(d.params, P * sizeof(floatX));
    const std::vector<unsigned char> state0[3] = {bytes_of(d.master, d.S * 4), bytes_of(d.m, d.S * 4), bytes_of(d.v, d.S * 4)};
    adamw_update(ctx, d.params, d.master, d.grads, d.m, d.v, k.first, k.stride, k.n, k.count, k.lo, k.hi, h, k.decay, d.step);
    const std::string tag = std::string("adamw ") + k.name;
    if (k.inject) {
        check_skipped_step(k, d, params0, state0, tag);
        return;
    }
    check_updated_step(k, x, adamw_reference(k, h, mult, x), d, params0, tag);
}

// The spike guard over 120 steps (window 32; both guards on, at z = 4): noisy
// losses falling from 6 and norms around 1, with spikes in the loss (steps 50, 90), the norm (70)
// and both (100), and a non-finite norm (80). Each step's decision is made on the device from the
// statistics the previous one returned (as the trainer carries them) and on the host by
// spike_check from its own: the same reasons at every step, the z-scores and statistics equal to
// rounding. The spikes must be the steps skipped for them.
static void check_spike_guard(Context* ctx) {
    const SpikeGuard g{4.0f, 4.0f, 32};
    const double tokens = 8192;
    std::mt19937 rng(7);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    float* d_sumsq = dalloc<float>(1);
    float* d_loss = dalloc<float>(1);
    StepScalars* d_step = dalloc<StepScalars>(1);
    SpikeStats dev{}, host{};
    int mismatched = 0, expected_ok = 0;
    double worst_z = 0, worst_stat = 0;
    for (int i = 0; i < 120; i++) {
        float loss = 6.0f - 0.01f * i + 0.05f * noise(rng), norm = 1.0f + 0.1f * noise(rng);
        if (i == 50 || i == 90 || i == 100) loss += 3.0f;
        if (i == 70 || i == 100) norm *= 8.0f;
        if (i == 80) norm = INFINITY;
        const float loss_sum = (float)(loss * tokens), sumsq = norm * norm;
        cudaCheck(cudaMemcpy(d_loss, &loss_sum, sizeof loss_sum, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_sumsq, &sumsq, sizeof sumsq, cudaMemcpyHostToDevice));
        step_decision(ctx, d_step, d_sumsq, 1.0f, 1.0f, d_loss, tokens, g, dev);
        const StepScalars s = from_device_raw(d_step, 1)[0];
        dev = s.stats;
        const SpikeCheck c = spike_check(g, &host, (double)loss_sum / tokens, s.grad_norm);   // the device's sqrtf (fast-math)
        mismatched += s.skip != c.reason;
        const int expect = i == 80 ? SKIP_NONFINITE : (i == 50 || i == 90 || i == 100) ? SKIP_LOSS_SPIKE : i == 70 ? SKIP_NORM_SPIKE : SKIP_NONE;
        expected_ok += s.skip == expect;
        for (auto [a, b] : {std::pair<double, double>{s.loss_z, c.loss_z}, {s.norm_z, c.norm_z}})
            if (std::isfinite(b)) worst_z = std::max(worst_z, std::fabs(a - b) / std::max(1.0, std::fabs(b)));
        for (auto [a, b] : {std::pair<double, double>{dev.loss.level, host.loss.level}, {dev.loss.spread2, host.loss.spread2},
                            {dev.norm.level, host.norm.level}, {dev.norm.spread2, host.norm.spread2}})
            worst_stat = std::max(worst_stat, std::fabs(a - b) / std::max(1e-30, std::fabs(b)));
        mismatched += dev.loss.count != host.loss.count || dev.norm.count != host.norm.count;
    }
    check_true("spike guard: device decisions == host spike_check (120 steps)", mismatched == 0, std::to_string(mismatched) + " differ");
    check_true("spike guard: the spikes (and only they) skipped as expected", expected_ok == 120, std::to_string(120 - expected_ok) + " steps not");
    char buf[64];
    snprintf(buf, sizeof buf, "worst %.3g", worst_z);
    check_true("spike guard: z-scores (float) within 1e-6 of the host's", worst_z < 1e-6, buf);
    snprintf(buf, sizeof buf, "worst %.3g", worst_stat);
    check_true("spike guard: running statistics within 1e-12 of the host's", worst_stat < 1e-12, buf);
}

// nonfinite_flag (llmc/norm.cuh): the per-rank inf/nan scan of a bucket before the reduction
// (grad_reducer.cuh: flag = d_bad + rank, zeroed by the caller). The bucket: n = 100003 values
// (not a multiple of the grid's threads) starting 3 elements into the buffer (any alignment),
// with inf just before it and just after it (must not be read as part of it). The flags around
// the rank's must stay as they are; an all-finite bucket must leave the rank's flag as it was.
static void check_nonfinite_flag(Context* ctx) {
    const size_t n = 100003, before = 3, after = 16;
    const int sms = ctx->props.multiProcessorCount, rank = 2;
    std::vector<float> g = randn(before + n + after);
    for (size_t i = 0; i < before; i++) g[i] = INFINITY;
    for (size_t i = before + n; i < g.size(); i++) g[i] = NAN;
    floatX* d_g = to_device(g);
    float* d_flags = dalloc<float>(4);
    const std::vector<float> start = {0.25f, 0.5f, 0.0f, 0.75f};   // flags[rank] = 0, as the caller zeroes it
    // (name, index into the bucket set non-finite (n: none), the value)
    const struct { const char* name; size_t at; float value; } cases[] = {
        {"all finite (the neighbours inf/nan): flag stays 0", n, 0.0f},
        {"inf at the last value (the tail)", n - 1, INFINITY},
        {"nan at the first value", 0, NAN},
        {"-inf in the middle", n / 2 + 1, -INFINITY},
    };
    for (const auto& c : cases) {
        std::vector<float> h = g;
        if (c.at < n) h[before + c.at] = c.value;
        upload(d_g, h);
        cudaCheck(cudaMemcpy(d_flags, start.data(), 4 * sizeof(float), cudaMemcpyHostToDevice));
        nonfinite_flag(d_flags + rank, d_g + before, n, sms, ctx->stream);
        const std::vector<float> f = from_device_raw(d_flags, 4);
        const float want = c.at < n ? 1.0f : 0.0f;
        const bool ok = f[rank] == want && f[0] == start[0] && f[1] == start[1] && f[3] == start[3];
        check_true(std::string("nonfinite_flag n=100003 at offset 3: ") + c.name, ok,
                   "flag " + std::to_string(f[rank]) + " (want " + std::to_string(want) + "), other ranks' flags " +
                       (f[0] == start[0] && f[1] == start[1] && f[3] == start[3] ? "untouched" : "WRITTEN"));
    }
}

// cast_from_master (llmc/adamw.cuh): params <- (floatX) master after initializing or loading;
// n = 100003 (the last block's tail), 32 poisoned elements past n must stay.
static void check_cast_from_master(Context* ctx) {
    const size_t n = 100003, pad = 32;
    const std::vector<float> master = randn(n, 0.5f);
    float* d_master = to_device_raw(master);
    floatX* d_params = dalloc<floatX>(n + pad);
    poison(d_params, n + pad);
    cast_from_master(ctx, d_params, d_master, n);
    const std::vector<float> got = from_device(d_params, n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += got[i] != round_x(master[i]);
    check_true("cast_from_master n=100003: params == (floatX) master", wrong == 0, std::to_string(wrong) + " of 100003 differ");
    check_untouched_past("cast_from_master: the 32 elements past n untouched", d_params, n, pad);
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "adamw");
    // ---- norm and step decision (loss scale 1024; max_norm 0 disables clipping)
    check_norm(&ctx, randn(1 << 20), 1024.0f, 0.5f, "(clipping)");
    check_norm(&ctx, randn(1 << 20), 1024.0f, 0.0f, "(max_norm=0)");
    check_norm(&ctx, randn(1000000, 0.01f), 1.0f, 1000.0f, "(below max_norm)");

    // ---- AdamW: {name, first, stride, n, count, lo, hi, decay, inject}
    const AdamCase cases[] = {
        {"full shard, decay", 1000, 0, 5000, 1, 0, P, true, 0},
        {"full shard, no decay", 1000, 0, 5000, 1, 0, P, false, 0},
        {"shard [2500,4500) inside the tensor", 1000, 0, 5000, 1, 2500, 4500, true, 0},
        {"4 strided instances, shard [4000,20000)", 300, 7000, 5000, 4, 4000, 20000, true, 0},
        {"4 strided instances, full shard, no decay", 300, 7000, 5000, 4, 0, P, false, 0},
        {"skip (inf gradient)", 300, 7000, 5000, 4, 0, P, true, 1},
        {"skip (nan gradient)", 1000, 0, 5000, 1, 0, P, true, 2},
        {"skip (loss spike)", 300, 7000, 5000, 4, 0, P, true, 3},
        // adamw_kernel's element-by-element path: every case above has first, stride, n, lo and
        // hi multiples of ADAMW_VEC, so only the vector path ever updated an element there
        {"n=4998 (the last thread's 2 elements one by one)", 1000, 0, 4998, 1, 0, P, true, 0},
        {"first=1001, shard [2501,4503) (element by element)", 1001, 0, 4998, 1, 2501, 4503, true, 0},
        {"3 strided instances, stride 7001, n=4999, shard [3001,17003)", 301, 7001, 4999, 3, 3001, 17003, false, 0},
    };
    for (const AdamCase& k : cases) check_adamw(&ctx, k);
    check_spike_guard(&ctx);
    check_nonfinite_flag(&ctx);
    check_cast_from_master(&ctx);

    // ---- timing over GPT-2 small's 124M parameters
    if (timing_enabled()) {
        const size_t n = 124475904;  // 124M, a multiple of 16
        floatX *params = random_device<floatX>(&ctx, n, -0.1f, 0.1f), *grads = random_device<floatX>(&ctx, n, -1, 1);
        float *master = random_device<float>(&ctx, n, -0.1f, 0.1f), *m = random_device<float>(&ctx, n, -0.01f, 0.01f);
        float *v = random_device<float>(&ctx, n, 0.0f, 0.01f), *sumsq = dalloc<float>(1);
        StepScalars* step = dalloc<StepScalars>(1);
        AdamWHyper h{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0};
        adamw_set_step(&h, 1);
        const double X = sizeof(floatX);
        time_ms(&ctx, "norm_squared + step_decision n=124M", X * n, 0, [&] {
            norm_squared(&ctx, sumsq, grads, n);
            step_decision(&ctx, step, sumsq, 1.0f, 1.0f);
        });
        // grads, master, m, v read; params, master, m, v written
        time_ms(&ctx, "adamw_update n=124M", (2 * X + 24.0) * n, 0, [&] {
            adamw_update(&ctx, params, master, grads, m, v, 0, 0, n, 1, 0, n, h, true, step);
        });
    }

    context_destroy(&ctx);
    return check_finish();
}
