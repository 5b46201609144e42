// Checks llmc/attention.cuh against a float64 CPU causal attention, hs=64, at B=2, NH=4, T=64 and
// T=100 (not a multiple of the 64-row tiles nor of 8), then at B=2, NH=3 (an odd head count),
// T = 1, 17, 63, 65, 127, 128, 129: shorter than one tile, and either side of the 64- and 128-row
// tile edges (SMALL_T below); then T = 63 and 129 at 400 items of 128 rows, where the persistent
// wgmma kernels run several such items per CTA (PERSISTENT_EDGES); then large scores at B=2, T=256,
// NH=4, q,k ~ N(0,30) and each query's own key dominating, on the model path and the mma.sync
// kernels, with tolerances from dev/attention_numerics.py (check_large_scores; not yet run on a
// GPU). A reference whose rms is ~0 (dq,
// dk at T=1: a softmax over one key has no derivative wrt its score) is judged by the absolute
// error instead (check_close_or_abs):
//   - attention_forward / attention_backward, the model's path (flash attention in fp16/bf16
//     builds, the cuBLAS reference in FP32 builds): out; the saved state (the per-row log-sum-exp
//     for flash, the probabilities for the reference); dq, dk, dv read from dqkv (NaN-poisoned
//     beforehand); backward run twice must give bitwise-identical dqkv;
//   - attention_reference_forward / _backward (every build): out, the probabilities att incl. exact
//     zeros above the diagonal, dq, dk, dv;
//   - sm_90a fp16/bf16 builds, whose model path is the wgmma kernels: the mma.sync kernels (other
//     GPUs' model path: flash_attention_forward / _backward) at the same shapes, out, lse, dq, dk, dv;
//   - fp16/bf16 builds, at long sequences where a CPU reference would crawl: flash attention
//     against the cuBLAS reference on the GPU (B=1..4, T=1000/1024/2048, NH=12/25), relative errors
//     ||flash - ref|| / ||ref|| of out, dq, dk, dv (the reference rounds its probabilities and their
//     gradients to floatX, so this measures both: ~5e-4 fp16, ~4e-3 bf16 measured), and determinism;
//   - timing at B=8 and B=64, T=1024, NH=12, hs=64, as effective TFLOP/s counting the causal half
//     (forward 2*B*NH*T*T*hs FLOPs, backward 2.5x that), the backward also kernel by kernel (this
//     and the three studies below: attention_timing.cuh);
//   - with --lengths (sm_90a builds): the wgmma forward, dQ (+delta) and dK/dV kernels alone at
//     B*T = 64K tokens, NH=12, T = 1024 .. 16384;
//   - with --batches (sm_90a builds): the same kernels at T=1024, NH=12, B = 1 .. 64, beside the
//     busiest CTA's key tiles and items (a launch's fixed cost against its cost per tile);
//   - with --sweep: forward, backward and forward+backward of the flash path for B in {1,4,8,64},
//     T in {64,128,1000,1024,2048}, NH in {12,16,20,25}, one line per configuration (compare with
//     dev/cuda/sdpa_bench.py, PyTorch's flash attention on the same configurations).
//   - sm_90a builds (USE_WGMMA, make GPU_ARCH=90), where the model's forward, dkdv and dq are the
//     wgmma kernels (llmc/flash_attention_wgmma*.cuh) and every check above goes through them: the
//     mma.sync kernels (other GPUs' path) against them at B=4, T=1000/1024/2048, NH=12/25, and
//     both timed at B=8 and B=64, T=1024, NH=12.
//   - with --io DIR: nothing of the above; runs the model's attention on the cases that
//     dev/cuda/sdpa_check.py wrote (attention_io.cuh), which then compares it with PyTorch.
//   - with --racecheck-probe (sm_90a, FP16/BF16), only: three small kernels for compute-sanitizer's
//     racecheck, one a TMA copy read too early; with --memcheck-probe (the same), only: a freed
//     tile read by TMA and by ordinary loads, for memcheck; with --stress RUNS, only: forward +
//     backward RUNS times at three shapes beside a competing kernel that delays some CTAs, each
//     run bitwise the first (all three in attention_stress.cuh; dev/device/sanitize.sh).
// CHECK_NO_TIMING=1 (e.g. under compute-sanitizer) skips the timings and the long-sequence checks.
// Run: make dev/cuda/attention_check && ./dev/cuda/attention_check [--sweep] [--lengths] [--batches]   (PRECISION=BF16|FP32 for others)
#include "check.cuh"
#include "../../llmc/attention.cuh"
#include "attention_stress.cuh"  // --stress, --racecheck-probe, --memcheck-probe
#include "attention_timing.cuh"  // the timings, --sweep, --lengths, --batches
#include "attention_io.cuh"      // --io DIR
#include "attention_reference.cuh"  // Problem: the float64 reference and the inputs it is solved for

// The log-sum-exp the forward saves. The wgmma forward (sm_90a) sums each row's probabilities on
// the tensor cores, as P rounded to floatX times a column of ones, so its sum carries P's
// rounding: |error of lse| <= floatX's unit roundoff (2^-9 bf16, 2^-11 fp16); measured rel. errors
// ~9e-5 bf16. Every other path sums P in fp32.
inline double lse_tol() {
#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
    return tol_for(1e-5, 1e-4, 5e-4);
#else
    return 1e-5;
#endif
}

// The tolerances of the float64 checks of out and of dq, dk, dv (the saved state's are fixed:
// lse_tol(), 1e-5). The defaults are those of the N(0, 1) cases; large_score_tols() below.
struct Tols {
    double out = tol_for(1e-5, 3e-3, 2e-2), grads = tol_for(2e-5, 5e-3, 2.5e-2);
};

// Below this rms a float64 reference is zero in exact arithmetic (e.g. dq and dk at T=1, where
// it is exactly 0.0), and a relative error ||out - ref|| / ||ref|| would divide by ~0.
constexpr double ZERO_REF_RMS = 1e-9;

// check_close (check.cuh: "rel_err=...", relative to ||ref||, plus its per-element outlier test),
// unless the reference is ~zero (rms < ZERO_REF_RMS): then the absolute error, passing when every
// out is finite and max |out - ref| <= abs_tol, printed as "reference ~0 ...: absolute error
// max_abs=...". abs_tol defaults to tol: the inputs are N(0, 1), so the gradients are of order 1,
// and tol is the error the relative check allows on a reference of unit scale. At T=1 the kernels'
// dq, dk are scale * p * (dp - delta) * k or q, with p = 1 and dp, delta the same dot product
// summed in two orders: ~1e-7 expected (~2e-3 in bf16 even if the saved out were off by a
// rounding), while a wrong kernel is off by order 1 or leaves the NaN poison.
static bool check_close_or_abs(const std::string& name, const std::vector<float>& out, const std::vector<double>& ref,
                               double tol, double abs_tol = -1.0) {
    if (out.size() != ref.size()) return check_true(name, false, "size mismatch");
    double sr = 0;
    for (double r : ref) sr += r * r;
    const double rms = std::sqrt(sr / std::max<size_t>(ref.size(), 1));
    if (rms >= ZERO_REF_RMS) return check_close(name, out, ref, tol);
    if (abs_tol < 0) abs_tol = tol;
    double max_abs = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(out[i])) { nonfinite++; continue; }
        max_abs = std::max(max_abs, std::fabs((double)out[i] - ref[i]));
    }
    char buf[200];
    snprintf(buf, sizeof buf, "reference ~0 (rms %.1e < %.0e): absolute error max_abs=%.3e (abs tol %.1e), %zu non-finite",
             rms, ZERO_REF_RMS, max_abs, abs_tol, nonfinite);
    return check_true(name, nonfinite == 0 && max_abs <= abs_tol, buf);
}

// dq, dk, dv parts of the device dqkv vs the reference, one check each.
static void check_dqkv(const std::string& prefix, const Problem& P, const floatX* d_dqkv, double tol) {
    const std::vector<float> got = from_device(d_dqkv, P.dqkv.size());
    const char* names[3] = {" dq", " dk", " dv"};
    for (int part = 0; part < 3; part++) {
        std::vector<float> g;
        std::vector<double> r;
        for (int bt = 0; bt < P.B * P.T; bt++)
            for (int c = 0; c < P.C; c++) {
                const size_t i = (size_t)bt * 3 * P.C + (size_t)part * P.C + c;
                g.push_back(got[i]);
                r.push_back(P.dqkv[i]);
            }
        check_close_or_abs(prefix + names[part], g, r, tol);
    }
}

// Saved probabilities (B,NH,T,T): exact zeros above the diagonal, and the values.
static void check_probabilities(const std::string& name, const Problem& P, const std::vector<float>& got, double tol) {
    size_t nonzero_future = 0;
    for (size_t r = 0; r < (size_t)P.B * P.NH * P.T; r++)
        for (int j = (int)(r % P.T) + 1; j < P.T; j++) nonzero_future += got[r * P.T + j] != 0.0f;
    check_true(name + " causal zeros", nonzero_future == 0, std::to_string(nonzero_future) + " non-zero above the diagonal");
    check_close_or_abs(name, got, P.att, tol);
}

// The model's path: attention_forward / attention_backward.
static void check_model_path(Context* ctx, const Problem& P, const Tols& tols = Tols()) {
    const int B = P.B, T = P.T, C = P.C, NH = P.NH;
    const std::string tag = shape_tag(P);
    std::vector<float> qkv = P.qkv, dout = P.dout;
    floatX *d_qkv = to_device(qkv), *d_dout = to_device(dout);
    floatX *d_out = dalloc<floatX>(P.out.size()), *d_dqkv = dalloc<floatX>(P.dqkv.size());
    float* d_state = dalloc<float>(attention_state_elems(B, T, NH));
    const size_t scratch_bytes = attention_scratch_bytes(B, T, C, NH);
    unsigned char* d_scratch = dalloc<unsigned char>(scratch_bytes);
    poison(d_out, P.out.size()); poison(d_dqkv, P.dqkv.size());
    poison(d_state, attention_state_elems(B, T, NH)); poison(d_scratch, scratch_bytes);
    attention_forward(ctx, d_out, d_state, d_qkv, d_scratch, B, T, C, NH);
    check_close_or_abs("attention_forward out" + tag, from_device(d_out, P.out.size()), P.out, tols.out);
#if defined(ENABLE_FP32)
    check_probabilities("attention_forward state (probabilities)" + tag, P, from_device_raw(d_state, P.att.size()), 1e-5);
#else
    check_close_or_abs("attention_forward state (log-sum-exp)" + tag, from_device_raw(d_state, P.lse.size()), P.lse, lse_tol());
#endif
    attention_backward(ctx, d_dqkv, d_dout, d_qkv, d_out, d_state, d_scratch, B, T, C, NH);
    check_dqkv("attention_backward" + tag, P, d_dqkv, tols.grads);
    const std::vector<unsigned char> first = bytes_of(d_dqkv, P.dqkv.size() * sizeof(floatX));
    poison(d_dqkv, P.dqkv.size());
    attention_backward(ctx, d_dqkv, d_dout, d_qkv, d_out, d_state, d_scratch, B, T, C, NH);
    check_bitwise("attention_backward deterministic (two runs)" + tag, bytes_of(d_dqkv, P.dqkv.size() * sizeof(floatX)) == first);
}

// The cuBLAS reference path with the materialized probabilities, in every build.
static void check_reference_path(Context* ctx, const Problem& P) {
    const int B = P.B, T = P.T, C = P.C, NH = P.NH;
    const std::string tag = shape_tag(P);
    std::vector<float> qkv = P.qkv, dout = P.dout;
    floatX *d_qkv = to_device(qkv), *d_dout = to_device(dout);
    floatX *d_out = dalloc<floatX>(P.out.size()), *d_att = dalloc<floatX>(P.att.size());
    floatX *d_dqkv = dalloc<floatX>(P.dqkv.size()), *d_scratch = dalloc<floatX>(attention_reference_scratch_elems(B, T, C, NH));
    poison(d_out, P.out.size()); poison(d_att, P.att.size()); poison(d_dqkv, P.dqkv.size());
    poison(d_scratch, attention_reference_scratch_elems(B, T, C, NH));
    attention_reference_forward(ctx, d_out, d_att, d_qkv, d_scratch, B, T, C, NH);
    attention_reference_backward(ctx, d_dqkv, d_dout, d_qkv, d_att, d_scratch, B, T, C, NH);
    check_close_or_abs("attention_reference_forward out" + tag, from_device(d_out, P.out.size()), P.out, tol_for(1e-5, 3e-3, 2e-2));
    check_probabilities("attention_reference_forward att" + tag, P, from_device(d_att, P.att.size()), tol_for(1e-5, 2e-3, 1.5e-2));
    check_dqkv("attention_reference_backward" + tag, P, d_dqkv, tol_for(2e-5, 5e-3, 2.5e-2));
}

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
// sm_90a builds, whose model path is the wgmma kernels: the mma.sync kernels (the model path of
// every other GPU: flash_attention_forward / flash_attention_backward) against the same float64
// reference, with the tolerances the model path gets in the builds that run them (lse: summed in
// fp32, 1e-5, as lse_tol() outside sm_90a).
static void check_mma_path(Context* ctx, const Problem& P, const Tols& tols = Tols()) {
    const int B = P.B, T = P.T, NH = P.NH;
    const std::string tag = shape_tag(P);
    std::vector<float> qkv = P.qkv, dout = P.dout;
    floatX *d_qkv = to_device(qkv), *d_dout = to_device(dout);
    floatX *d_out = dalloc<floatX>(P.out.size()), *d_dqkv = dalloc<floatX>(P.dqkv.size());
    float *d_lse = dalloc<float>(P.lse.size()), *d_delta = dalloc<float>(P.lse.size());
    poison(d_out, P.out.size()); poison(d_dqkv, P.dqkv.size()); poison(d_lse, P.lse.size()); poison(d_delta, P.lse.size());
    flash_attention_forward(ctx, d_out, d_lse, d_qkv, B, T, NH);
    check_close_or_abs("mma.sync flash_attention_forward out" + tag, from_device(d_out, P.out.size()), P.out, tols.out);
    check_close_or_abs("mma.sync flash_attention_forward lse" + tag, from_device_raw(d_lse, P.lse.size()), P.lse, 1e-5);
    flash_attention_backward(ctx, d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, NH);
    check_dqkv("mma.sync flash_attention_backward" + tag, P, d_dqkv, tols.grads);
}
#endif

#if !defined(ENABLE_FP32)
// ||a - b|| / ||b|| and max |a - b| over the elements of part `part` (0 q, 1 k, 2 v) of (B*T, 3C)
// arrays, or over whole arrays when part < 0.
static void rel_err(const std::vector<float>& a, const std::vector<float>& b, int C, int part, double& rel, double& max_abs) {
    double se = 0, sr = 0;
    max_abs = 0;
    const size_t n = a.size();
    for (size_t i = 0; i < n; i++) {
        if (part >= 0 && (int)((i / C) % 3) != part) continue;
        const double d = (double)a[i] - b[i];
        se += d * d;
        sr += (double)b[i] * b[i];
        max_abs = std::max(max_abs, std::isfinite(d) ? std::fabs(d) : INFINITY);
    }
    rel = std::isfinite(se) ? std::sqrt(se) / std::max(std::sqrt(sr), 1e-30) : INFINITY;
}

// Flash attention vs the cuBLAS reference on the GPU at one (B, T, NH); optionally determinism.
static void check_flash_vs_reference(Context* ctx, int B, int T, int NH, bool determinism) {
    const int hs = 64, C = NH * hs;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    floatX* qkv = random_device<floatX>(ctx, nqkv, -1.5f, 1.5f);
    floatX* dout = random_device<floatX>(ctx, nout, -1.0f, 1.0f);
    floatX *out_f = dalloc<floatX>(nout), *out_r = dalloc<floatX>(nout);
    floatX *dqkv_f = dalloc<floatX>(nqkv), *dqkv_r = dalloc<floatX>(nqkv);
    float* state = dalloc<float>(attention_state_elems(B, T, NH));
    unsigned char* scratch = dalloc<unsigned char>(attention_scratch_bytes(B, T, C, NH));
    floatX* att = dalloc<floatX>((size_t)B * NH * T * T);
    floatX* ref_scratch = dalloc<floatX>(attention_reference_scratch_elems(B, T, C, NH));
    poison(out_f, nout); poison(dqkv_f, nqkv);
    attention_forward(ctx, out_f, state, qkv, scratch, B, T, C, NH);
    attention_backward(ctx, dqkv_f, dout, qkv, out_f, state, scratch, B, T, C, NH);
    attention_reference_forward(ctx, out_r, att, qkv, ref_scratch, B, T, C, NH);
    attention_reference_backward(ctx, dqkv_r, dout, qkv, att, ref_scratch, B, T, C, NH);
    const std::vector<float> of = from_device(out_f, nout), orf = from_device(out_r, nout);
    const std::vector<float> df = from_device(dqkv_f, nqkv), dr = from_device(dqkv_r, nqkv);
    double rel[4], mx[4];
    rel_err(of, orf, C, -1, rel[0], mx[0]);
    for (int part = 0; part < 3; part++) rel_err(df, dr, C, part, rel[part + 1], mx[part + 1]);
    const double tol = tol_for(0, 5e-3, 3e-2);
    char buf[256];
    snprintf(buf, sizeof buf, "rel_err out %.2e dq %.2e dk %.2e dv %.2e (max_abs %.2e %.2e %.2e %.2e; tol %.0e)",
             rel[0], rel[1], rel[2], rel[3], mx[0], mx[1], mx[2], mx[3], tol);
    const std::string name = "flash vs cuBLAS reference B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH);
    check_true(name, rel[0] <= tol && rel[1] <= tol && rel[2] <= tol && rel[3] <= tol, buf);
    if (determinism) {
        const std::vector<unsigned char> first = bytes_of(dqkv_f, nqkv * sizeof(floatX));
        poison(dqkv_f, nqkv);
        attention_backward(ctx, dqkv_f, dout, qkv, out_f, state, scratch, B, T, C, NH);
        check_bitwise(name + " backward deterministic (two runs)", bytes_of(dqkv_f, nqkv * sizeof(floatX)) == first);
    }
    // free now: the next configuration allocates its own
    for (void* p : {(void*)qkv, (void*)dout, (void*)out_f, (void*)out_r, (void*)dqkv_f, (void*)dqkv_r, (void*)state,
                    (void*)scratch, (void*)att, (void*)ref_scratch}) {
        cudaCheck(cudaFree(p));
        auto& a = check_state().allocs;
        a.erase(std::find(a.begin(), a.end(), p));
    }
}
#endif

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
// The forward's polynomial 2^x (flash_wgmma::exp2_poly, used for a quarter of its exponentials)
// against exp2 in double on x in [-140, 0]: max relative error where the result is a normal float
// (x >= -125; 7.5e-5 by design), and 0 <= result <= 2^-124 below, where the clamp at -126 and
// the exponent field's end take over.
__global__ void exp2_poly_kernel(float* y, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = flash_wgmma::exp2_poly(x[i]);
}
static void check_exp2_poly() {
    std::vector<float> x = randu(1 << 20, -140.0f, 0.0f);
    for (float v : {0.0f, -0.5f, -1.0f, -125.0f, -125.5f, -126.0f, -127.0f, -INFINITY}) x.push_back(v);
    const int n = (int)x.size();
    float* dy = dalloc<float>(n);
    const float* dx = to_device_raw(x);
    exp2_poly_kernel<<<ceil_div(n, 256), 256>>>(dy, dx, n);
    launchCheck();
    const std::vector<float> y = from_device_raw(dy, n);
    double worst = 0.0;
    bool tail_ok = true;
    for (int i = 0; i < n; i++) {
        if (x[i] >= -125.0f) worst = std::max(worst, std::fabs(y[i] / std::exp2((double)x[i]) - 1.0));
        else tail_ok = tail_ok && y[i] >= 0.0f && y[i] <= std::ldexp(1.0f, -124);
    }
    char detail[96];
    snprintf(detail, sizeof detail, "max rel err %.2e (tol 1e-4); below -125 in [0, 2^-124]: %s", worst, tail_ok ? "yes" : "no");
    check_true("exp2_poly vs exp2 on [-140, 0]", worst < 1e-4 && tail_ok, detail);
}

// The mma.sync kernels (flash_attention_forward, flash_backward_dq/dkdv: other GPUs' path) vs the
// model's wgmma kernels at one (B, T, NH): out, lse and the q, k, v parts of dqkv. The same products
// with the same roundings to floatX; only the summation order differs. The wgmma dQ kernel also
// computes delta (which the mma.sync path gets from flash_backward_delta): compared too, and then
// both backward paths run on the wgmma kernel's delta, so dq, dk, dv differ only by the summation
// order: compared within 2e-3 (fp16) / 1e-2 (bf16).
static void check_mma_vs_wgmma(Context* ctx, int B, int T, int NH) {
    const int hs = 64, C = NH * hs;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    floatX* qkv = random_device<floatX>(ctx, nqkv, -1.5f, 1.5f);
    floatX* dout = random_device<floatX>(ctx, nout, -1.0f, 1.0f);
    floatX *out_w = dalloc<floatX>(nout), *out_f = dalloc<floatX>(nout);
    floatX *dqkv_w = dalloc<floatX>(nqkv), *dqkv_f = dalloc<floatX>(nqkv);
    float *lse_w = dalloc<float>(nlse), *lse_f = dalloc<float>(nlse), *delta = dalloc<float>(nlse), *delta_f = dalloc<float>(nlse);
    poison(out_f, nout); poison(lse_f, nlse); poison(dqkv_w, nqkv); poison(dqkv_f, nqkv); poison(delta, nlse);
    flash_attention_forward_wgmma(ctx, out_w, lse_w, qkv, B, T, NH);
    flash_attention_forward(ctx, out_f, lse_f, qkv, B, T, NH);
    flash_backward_dq_wgmma(ctx, dqkv_w, delta, dout, qkv, out_w, lse_w, B, T, NH);  // writes delta
    flash_backward_delta(ctx, delta_f, dout, out_w, B, T, NH);
    flash_backward_dq(ctx, dqkv_f, delta, dout, qkv, lse_w, B, T, NH);
    flash_backward_dkdv_wgmma(ctx, dqkv_w, delta, dout, qkv, lse_w, B, T, NH);
    flash_backward_dkdv(ctx, dqkv_f, delta, dout, qkv, lse_w, B, T, NH);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> ow = from_device(out_w, nout), of = from_device(out_f, nout);
    const std::vector<float> lw = from_device_raw(lse_w, nlse), lf = from_device_raw(lse_f, nlse);
    const std::vector<float> gw = from_device(dqkv_w, nqkv), gf = from_device(dqkv_f, nqkv);
    const std::vector<float> dw = from_device_raw(delta, nlse), df = from_device_raw(delta_f, nlse);
    double rel_o, mx_o, rel_l, mx_l, rel_d, mx_d, rel_q, mx_q, rel_k, mx_k, rel_v, mx_v;
    rel_err(of, ow, C, -1, rel_o, mx_o);
    rel_err(lf, lw, C, -1, rel_l, mx_l);
    rel_err(df, dw, C, -1, rel_d, mx_d);
    rel_err(gf, gw, C, 0, rel_q, mx_q);
    rel_err(gf, gw, C, 1, rel_k, mx_k);
    rel_err(gf, gw, C, 2, rel_v, mx_v);
    const double tol = tol_for(0, 2e-3, 1e-2), tol_l = lse_tol(), tol_d = 1e-5;
    const std::string shape = " B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH);
    char buf[256];
    snprintf(buf, sizeof buf, "rel_err out %.2e (max_abs %.2e, tol %.0e) lse %.2e (max_abs %.2e, tol %.0e)", rel_o, mx_o,
             tol, rel_l, mx_l, tol_l);
    check_true("mma.sync forward vs wgmma forward" + shape, rel_o <= tol && rel_l <= tol_l, buf);
    snprintf(buf, sizeof buf, "rel_err %.2e (max_abs %.2e, tol %.0e)", rel_d, mx_d, tol_d);
    check_true("flash_backward_delta vs wgmma dq's delta" + shape, rel_d <= tol_d, buf);
    snprintf(buf, sizeof buf, "rel_err dq %.2e (max_abs %.2e, tol %.0e)", rel_q, mx_q, tol);
    check_true("mma.sync dq vs wgmma dq" + shape, rel_q <= tol, buf);
    snprintf(buf, sizeof buf, "rel_err dk %.2e (max_abs %.2e) dv %.2e (max_abs %.2e), tol %.0e", rel_k, mx_k, rel_v, mx_v, tol);
    check_true("mma.sync dkdv vs wgmma dkdv" + shape, rel_k <= tol && rel_v <= tol, buf);
    for (void* p : {(void*)qkv, (void*)dout, (void*)out_w, (void*)out_f, (void*)dqkv_w, (void*)dqkv_f, (void*)lse_w, (void*)lse_f, (void*)delta, (void*)delta_f}) {
        cudaCheck(cudaFree(p));
        auto& a = check_state().allocs;
        a.erase(std::find(a.begin(), a.end(), p));
    }
}
#endif


// ---- the command line

// What the command line asks for. At most one mode runs, the first of: --io DIR, a probe
// (--racecheck-probe before --memcheck-probe), --stress RUNS; otherwise the default checks, with
// --sweep / --lengths / --batches adding to the timings. (A probe in a build without TMA is
// refused before any of them: probe_needs_missing_tma.)
struct Options {
    bool sweep = false, lengths = false, batches = false, racecheck_probe = false, memcheck_probe = false;
    int stress_runs = 0;
    const char* io_dir = nullptr;
};

// Fills *opt from argv; prints the usage line and returns false on an unknown or incomplete option
// (--io without DIR, --stress without a count > 0).
static bool parse_options(int argc, char** argv, Options* opt) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sweep") == 0) opt->sweep = true;
        else if (strcmp(argv[i], "--lengths") == 0) opt->lengths = true;
        else if (strcmp(argv[i], "--batches") == 0) opt->batches = true;
        else if (strcmp(argv[i], "--io") == 0 && i + 1 < argc) opt->io_dir = argv[++i];
        else if (strcmp(argv[i], "--racecheck-probe") == 0) opt->racecheck_probe = true;
        else if (strcmp(argv[i], "--memcheck-probe") == 0) opt->memcheck_probe = true;
        else if (strcmp(argv[i], "--stress") == 0 && i + 1 < argc && (opt->stress_runs = atoi(argv[i + 1])) > 0) i++;
        else {
            fprintf(stderr, "usage: %s [--sweep] [--lengths] [--batches] | --io DIR | --racecheck-probe | --memcheck-probe | --stress RUNS (> 0)\n", argv[0]);
            return false;
        }
    }
    return true;
}

// True (after saying why) when a probe is asked of a build without the TMA kernels. Called before
// any GPU work, so the refusal costs no context.
static bool probe_needs_missing_tma(const Options& opt) {
#if !defined(USE_WGMMA) || defined(ENABLE_FP32)
    if (opt.racecheck_probe || opt.memcheck_probe) {  // (before any GPU work)
        fprintf(stderr, "%s: TMA needs an sm_90a build in FP16 or BF16 (this one has no wgmma kernels)\n",
                opt.racecheck_probe ? "--racecheck-probe" : "--memcheck-probe");
        return true;
    }
#endif
    return false;
}

// ---- the modes

// --io DIR: runs the listed cases (attention_io.cuh) and counts them; true if all ran.
static bool run_io_cases(Context* ctx, const char* io_dir, const std::vector<IoCase>& cases) {
    const bool ok = io_run(ctx, cases);
    if (ok) printf("--io %s: %zu cases\n", io_dir, cases.size());
    return ok;
}

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
// --racecheck-probe or --memcheck-probe: one probe for compute-sanitizer (attention_stress.cuh).
static void run_probe(Context* ctx, const Options& opt) {
    if (opt.racecheck_probe) {
        check_begin(*ctx, "attention --racecheck-probe");
        racecheck_probe_run(ctx, 1);
    } else {
        check_begin(*ctx, "attention --memcheck-probe");
        memcheck_probe_run(ctx);
    }
}
#endif

// --stress RUNS: forward + backward RUNS times at three shapes beside a competing kernel, each run
// bitwise the first (attention_stress.cuh).
static void run_stress(Context* ctx, int runs) {
    check_begin(*ctx, "attention --stress");
    stress_attention(ctx, runs, 4, 1024, 12);  // GPT-2 small's shape
    stress_attention(ctx, runs, 1, 2048, 25);  // few items, long rows: most CTAs idle or late
    stress_attention(ctx, runs, 3, 100, 12);   // partial tiles
#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
    racecheck_probe_run(ctx, runs);  // the control: do races of this kind show when repeated?
#endif
}

// Every path that has a float64 check, at one shape.
static void check_against_cpu(Context* ctx, const Problem& P) {
    check_model_path(ctx, P);
    check_reference_path(ctx, P);
#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
    check_mma_path(ctx, P);
#endif
}

// ---- large attention scores (every case above has qkv ~ N(0, 1): scaled scores |q.k|/8 < ~6)
// Two cases at B=2, T=256, NH=4 (two 128-key tiles of the wgmma forward, four 64-key tiles of the
// mma.sync one), against the same float64 reference:
//   LARGE: q, k ~ N(0, 30) (v, dout N(0, 1)): scaled scores with standard deviation 30, |s| up to
//     ~160, most rows nearly one-hot (the top score ~7 above the next in the median row; the
//     largest probability > 0.99 in ~65 % of rows), log-sum-exp from ~-35 to ~150.
//     There dS = P (dP - delta) cancels, and delta = rowsum(dout * out) comes from out rounded to
//     floatX, so dq and dk carry out's rounding (every FlashAttention-2 backward does);
//   DOMINANT: q_t = k_t = 10 z_t, z ~ N(0, 1): each query's own key scores ~800 (>= ~400), the
//     others ~N(0, 100^2) and >= ~160 lower, so every other probability is exactly 0 in fp32 and
//     the running maximum jumps by hundreds at the diagonal tile: the forward's rescale factor
//     alpha = exp(m_old - m_new) underflows to 0 (emulated: in 1536 of the 2048 rows with 64-key
//     tiles, 1024 with 128). Exactly: out = v, dv = dout, dq = dk = 0 (the reference is ~0:
//     judged by the absolute error, check_close_or_abs). No NaN may appear.
// The cuBLAS reference path is not checked on them in fp16/bf16 builds: it rounds the scores to
// floatX before the softmax (bf16: |s| ~ 160 to within 0.5), an error the flash kernels do not
// have (emulated: dq, dk off by 7e-2 rel. at LARGE in bf16). In FP32 builds it is the model path.
// Tolerances (large_score_tols): from dev/attention_numerics.py, a numpy emulation of the
// kernels' arithmetic (inputs and P, dS, out rounded to floatX, fp32 accumulation, exp2 with the
// 1/8 and log2(e) folded in, exp2_poly, lse and delta as the kernels form them; the FP32 build's
// cuBLAS path likewise) against float64. check_close passes at tol >= max(rel_err, out8), out8 =
// max |x - ref| / (8 (|ref| + rms)) being its outlier test. Worst of 20 seeds at LARGE
// (`python3 dev/attention_numerics.py --seeds 20`, and `--fp32 --seeds 20`), both kernel families:
//   dq, dk  bf16 1.54e-2, fp16 2.49e-3, FP32 1.19e-5 (N(0, 1) cases at T=64: 3.5e-3, 5.2e-4, 3.6e-7);
//     one seed's rel_err in bf16 7.4e-3 against 2.6e-3 at N(0, 1); with delta taken from an
//     unrounded (fp32) out it would be 2.5e-3: the excess is out's rounding, as expected;
//   out bf16 1.1e-3, fp16 1.5e-4, FP32 5.1e-6; lse <= 2.6e-6 (wgmma, bf16); dv below N(0, 1)'s;
//   DOMINANT: out, dv exact, lse ~1e-7, dq, dk absolute error <= 4.4e-5 (fp16).
// So dq, dk, dv get about twice the worst: 3e-2 bf16 (the N(0, 1) cases' 2.5e-2 would leave 1.6x),
// 5e-3 fp16 (as N(0, 1): 2.0x), 2.5e-5 FP32 (N(0, 1): 2e-5); out keeps the N(0, 1) tolerance
// (>= 2x). These tolerances come from the emulation alone: NOT YET RUN ON A GPU.
static Tols large_score_tols() {
    Tols t;
    t.grads = tol_for(2.5e-5, 5e-3, 3e-2);
    return t;
}

// The model's path and (sm_90a fp16/bf16) the mma.sync kernels on one large-score problem.
static void check_large_scores(Context* ctx, const Problem& P) {
    const Tols tols = large_score_tols();
    check_model_path(ctx, P, tols);
#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
    check_mma_path(ctx, P, tols);
#endif
}

// The short sequences of the float64 checks (B=2, NH=3): below one 64-row tile (1, 17), either
// side of the 64-row tile edge (63, 65) and at and either side of the 128-row one (127, 128, 129).
// T=1: the only key's probability is 1, so dq and dk are exactly 0 (the absolute error judges them).
constexpr int SMALL_T[] = {1, 17, 63, 65, 127, 128, 129};

// The same edges in the persistent kernels' loop: at SMALL_T's B=2, NH=3 there are at most 12
// items (128 rows of one head each), so every CTA of the wgmma kernels runs one item and stops:
// those edges never meet the ring, the double buffers and their mbarrier phases in the middle of
// a CTA's run. At 400 items a 132-SM GPU gives each CTA 3 or 4 (the last round partial):
//   T=63:  dQ's second key tile lies wholly past T (a TMA box entirely out of bounds), and each
//          dK/dV item has one query tile, so its second warpgroup takes the skip-and-release path;
//   T=129: dK/dV items of three and of one query tile alternate in a CTA (ring phases across items
//          of different lengths), and the last query item's fourth dQ key tile lies past T.
struct PersistentShape { int B, T, NH; };
constexpr PersistentShape PERSISTENT_EDGES[] = {{8, 63, 50}, {4, 129, 50}};

// The default checks: every path against the float64 CPU reference at T=64 and 100; then, on
// sm_90a, the polynomial exp2 and (timings enabled) mma.sync vs wgmma; then (fp16/bf16, timings
// enabled) flash vs the cuBLAS reference at long sequences; then the float64 checks at SMALL_T and
// PERSISTENT_EDGES; then the large-score cases (check_large_scores).
static void run_default_checks(Context* ctx) {
    check_begin(*ctx, "attention");
    for (int T : {64, 100}) check_against_cpu(ctx, reference(2, T, 4, 64));
#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
    check_exp2_poly();
    if (timing_enabled())
        for (int T : {1000, 1024, 2048})
            for (int NH : {12, 25}) check_mma_vs_wgmma(ctx, 4, T, NH);
#endif
#if !defined(ENABLE_FP32)  // in FP32 builds the model's path is the reference
    if (timing_enabled()) {
        int i = 0;
        for (int T : {1000, 1024, 2048})
            for (int NH : {12, 25}) {
                check_flash_vs_reference(ctx, 1 + i % 4, T, NH, i == 3);
                i++;
            }
    }
#endif
    // last, so that every check above draws the same random inputs as before these were added
    for (int T : SMALL_T) check_against_cpu(ctx, reference(2, T, 3, 64));
    for (const PersistentShape& p : PERSISTENT_EDGES) check_against_cpu(ctx, reference(p.B, p.T, p.NH, 64));
    check_large_scores(ctx, reference_large_scores(2, 256, 4, 30.0f));
    check_large_scores(ctx, reference_own_key_dominates(2, 256, 4));
}

// ---- timing at GPT-2 small shapes, then the studies the options ask for (attention_timing.cuh);
// a build without the kernels a study needs says so instead.
static void run_timings(Context* ctx, const Options& opt) {
    time_gpt2_small(ctx);
#if !defined(ENABLE_FP32)
    if (opt.sweep) sweep(ctx);
#else
    if (opt.sweep) printf("--sweep: flash attention only (fp16/bf16 builds)\n");
#endif
#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
    if (opt.lengths) lengths(ctx);
    if (opt.batches) batches(ctx);
#else
    if (opt.lengths || opt.batches) printf("--lengths, --batches: the wgmma kernels only (sm_90a fp16/bf16 builds)\n");
#endif
}

// Every mode but --io, which main runs itself: a probe, else --stress, else the default checks and
// (unless CHECK_NO_TIMING) the timings. The caller destroys the context, then check_finish().
static void run_checks(Context* ctx, const Options& opt) {
#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
    if (opt.racecheck_probe || opt.memcheck_probe) {
        run_probe(ctx, opt);
        return;
    }
#endif
    if (opt.stress_runs > 0) {
        run_stress(ctx, opt.stress_runs);
        return;
    }
    run_default_checks(ctx);
    if (timing_enabled()) run_timings(ctx, opt);
}

int main(int argc, char** argv) {
    Options opt;
    if (!parse_options(argc, argv, &opt)) return 2;
    if (probe_needs_missing_tma(opt)) return 2;
    std::vector<IoCase> cases;
    if (opt.io_dir && !io_list(opt.io_dir, &cases)) return 1;  // a bad or missing case file: before any GPU work too
    Context ctx;
    context_create(&ctx, 0);
    if (opt.io_dir) {  // PyTorch's cases only (dev/cuda/sdpa_check.py); no checks of its own
        const bool ok = run_io_cases(&ctx, opt.io_dir, cases);
        context_destroy(&ctx);
        return ok ? 0 : 1;
    }
    run_checks(&ctx, opt);
    context_destroy(&ctx);
    return check_finish();
}
