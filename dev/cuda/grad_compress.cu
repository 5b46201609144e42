// Checks llmc/grad_compress.cuh (--grad-int8) on one GPU, the ranks simulated by buffers and the
// NCCL transfers by copies (the NCCL calls themselves run in dev/ranks_check.sh and multi_gpu.sh int8):
//   - quantize + dequantize: every value within half a step (its group's absmax / 254) of the
//     input; an all-zero group gives zeros; a group with inf or nan gets a nan scale (so the
//     non-finite value reaches the reduced gradients), the other groups' scales stay finite;
//   - the DDP pipeline (2, 3 and 4 ranks; buckets not a multiple of 128, a short last piece,
//     empty pieces; groups of very different magnitudes; the staging buffers poisoned first):
//     every rank ends with the same bits, within the bound of the roundings of the exact mean, a
//     second run repeats the bits, and an inf on one rank turns its group, and only it, nan on every rank;
//   - the ZeRO-1 pipeline (2, 3 and 4 ranks; a bucket across shards whose boundaries are not
//     multiples of 128, one inside a shard, the whole buffer): each owner's part within one
//     rounding of the exact mean; every other value untouched;
//   - timing of the three kernels on 16M values (a 32 MB bf16 bucket).
// Run: make dev/cuda/grad_compress_check && ./dev/cuda/grad_compress_check   (PRECISION=BF16|FP32 for others)
#include <type_traits>
#include "check.cuh"
#include "../../llmc/grad_compress.cuh"

// Random gradients whose groups differ in size by up to e^±6 (as a layer's do), never zero.
static std::vector<float> grad_like(size_t n) {
    std::vector<float> v = randn(n);
    std::normal_distribution<float> mag(0.0f, 2.0f);
    for (size_t g = 0; g < n; g += QGROUP) {
        const float m = std::exp(std::max(-6.0f, std::min(6.0f, mag(rng()))));
        for (size_t i = g; i < std::min(n, g + QGROUP); i++) v[i] *= m;
    }
    return v;
}
static std::string text_rel(double rel, double tol) {
    char b[64];
    snprintf(b, sizeof b, "rel_err=%.3e (tol %.1e)", rel, tol);
    return b;
}
static double group_absmax(const std::vector<float>& v, size_t g) {
    double m = 0;
    for (size_t i = g * QGROUP; i < std::min(v.size(), (g + 1) * QGROUP); i++) m = std::max(m, std::fabs((double)v[i]));
    return m;
}
// ||got - ref|| / ||ref|| against tol. (check_close's per-value outlier test does not fit here: a
// small value in a group of large ones errs by up to its group's step; the bound checks cover that.)
static void check_rel_err(const std::string& name, const std::vector<float>& got, const std::vector<double>& ref, double tol) {
    double se = 0, sr = 0;
    for (size_t i = 0; i < ref.size(); i++) { se += (got[i] - ref[i]) * (got[i] - ref[i]); sr += ref[i] * ref[i]; }
    const double rel = std::sqrt(se / sr);
    check_true(name, rel <= tol, text_rel(rel, tol));
}
// The slack allowed on top of the rounding bound: fp32 arithmetic, and the final floatX rounding.
static double out_rounding(double ref) { return std::fabs(ref) * tol_for(1e-6, 1.0 / 1024, 1.0 / 128) + 1e-30; }

// Value i came back within half a quantization step of its group (plus the output's rounding).
static bool within_half_step(const std::vector<float>& x, const std::vector<float>& y, size_t i) {
    const double bound = group_absmax(x, i / QGROUP) / 254.0 * (1 + 1e-6) + out_rounding(x[i]);
    return std::fabs((double)y[i] - x[i]) <= bound;
}

static void check_roundtrip(Context* ctx) {
    const size_t n = 100003;   // not a multiple of 128
    std::vector<float> x = grad_like(n);
    for (size_t i = 5 * QGROUP; i < 6 * QGROUP; i++) x[i] = 0.0f;   // one all-zero group
    for (size_t i = 7 * QGROUP; i < 8 * QGROUP; i++) x[i] *= 1e-33f;  // one below QGROUP_TINY (zero in FP16)
    // one near the top of the range, absmax 2e38 > 2^126 (bf16 and fp32 only: inf in fp16): there
    // a fast-math 127 / absmax is 0, and the group came back as zeros
    constexpr bool huge_group = !std::is_same_v<floatX, __half>;
    if (huge_group) {
        const double f = 2e38 / group_absmax(x, 11);
        for (size_t i = 11 * QGROUP; i < 12 * QGROUP; i++) x[i] = (float)(x[i] * f);
    }
    floatX* d_x = to_device(x);
    const size_t slot = qgroup_slot(n);
    int8_t* d_q = dalloc<int8_t>(slot);
    float* d_s = dalloc<float>(slot / QGROUP);
    floatX* d_y = dalloc<floatX>(n);
    poison(d_y, n);
    const int sms = ctx->props.multiProcessorCount;
    quantize_groups(d_x, n, d_q, d_s, sms, ctx->stream);
    dequantize_groups(d_q, d_s, n, d_y, sms, ctx->stream);
    const std::vector<float> y = from_device(d_y, n);
    size_t over = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        if (i / QGROUP == 7) continue;   // checked below
        if (!within_half_step(x, y, i)) { over++; if (first == n) first = i; }
    }
    check_true("quantize + dequantize within half a step", over == 0,
               over ? std::to_string(over) + " values over, first [" + std::to_string(first) + "]: " + std::to_string(y[first]) +
                          " for " + std::to_string(x[first])
                    : "100003 values, groups of 128");
    bool zeros = true;
    for (size_t i = 5 * QGROUP; i < 6 * QGROUP; i++) zeros &= y[i] == 0.0f;
    check_true("an all-zero group stays zero", zeros, "group 5");
    bool tiny = true;
    for (size_t i = 7 * QGROUP; i < 8 * QGROUP; i++) tiny &= y[i] == 0.0f;
    check_true("a group below QGROUP_TINY is sent as zeros", tiny, "group 7, values ~1e-33");
    if (huge_group) {   // (also covered by "within half a step" above; this line names the case)
        size_t off = 0;
        for (size_t i = 11 * QGROUP; i < 12 * QGROUP; i++) off += !within_half_step(x, y, i);
        check_true("a group of absmax 2e38 (above 2^126) within half a step, not zeros", off == 0,
                   std::to_string(off) + " of 128 values off (y[0] = " + std::to_string(y[11 * QGROUP]) + " for " +
                       std::to_string(x[11 * QGROUP]) + ")");
    }

    // a group with an inf and one with a nan: nan scales there, the others unchanged
    x[3 * QGROUP + 7] = INFINITY;
    x[9 * QGROUP + 100] = NAN;
    upload(d_x, x);
    quantize_groups(d_x, n, d_q, d_s, sms, ctx->stream);
    dequantize_groups(d_q, d_s, n, d_y, sms, ctx->stream);
    const std::vector<float> s = from_device_raw(d_s, slot / QGROUP), y2 = from_device(d_y, n);
    bool flagged = std::isnan(s[3]) && std::isnan(s[9]) && std::isnan(y2[3 * QGROUP]) && std::isnan(y2[9 * QGROUP + 5]);
    bool others = true;
    for (size_t g = 0; g < slot / QGROUP; g++)
        if (g != 3 && g != 9) others &= std::isfinite(s[g]);
    check_true("a non-finite value gives its group a nan scale", flagged && others, "groups 3 (inf) and 9 (nan)");
}

// The ranks' buffers for one bucket: gradients, send staging, receive staging.
struct SimRank {
    std::vector<float> g;
    floatX* d_g;
    GradStaging st;
};

// DDP (shard 0) or ZeRO-1 (shard > 0) over `world` simulated ranks, bucket [lo, hi) of a buffer of
// `total` values: the trainer's grad_reduce_int8 with each ncclSend/ncclRecv pair and
// ncclAllGather done as a device copy.
static void simulate(Context* ctx, std::vector<SimRank>& ranks, size_t lo, size_t hi, size_t shard) {
    const int W = (int)ranks.size(), sms = ctx->props.multiProcessorCount;
    const std::vector<GradPiece> pieces = grad_pieces(lo, hi, W, shard);
    for (int r = 0; r < W; r++)
        for (const GradPiece& p : pieces)
            if (p.owner != r)
                quantize_groups(ranks[r].d_g + p.a, p.b - p.a, ranks[r].st.send + p.staged, ranks[r].st.send_scales + p.staged / QGROUP,
                                sms, ctx->stream);
    for (const GradPiece& p : pieces) {
        if (p.a == p.b) continue;
        for (int s = 0; s < W; s++) {
            if (s == p.owner) continue;
            GradStaging &from = ranks[s].st, &to = ranks[p.owner].st;
            cudaCheck(cudaMemcpyAsync(to.recv + s * p.slot, from.send + p.staged, p.slot, cudaMemcpyDeviceToDevice, ctx->stream));
            cudaCheck(cudaMemcpyAsync(to.recv_scales + s * p.slot / QGROUP, from.send_scales + p.staged / QGROUP,
                                      p.slot / QGROUP * sizeof(float), cudaMemcpyDeviceToDevice, ctx->stream));
        }
    }
    for (const GradPiece& p : pieces) {
        GradStaging& st = ranks[p.owner].st;
        const size_t slot = p.slot;
        reduce_piece(ranks[p.owner].d_g + p.a, st.recv, st.recv_scales, slot, p.b - p.a, W, p.owner,
                     shard ? ranks[p.owner].d_g + p.a : nullptr, shard ? nullptr : st.recv + p.owner * slot,
                     shard ? nullptr : st.recv_scales + p.owner * slot / QGROUP, sms, ctx->stream);
    }
    if (shard) return;
    const size_t slot = pieces[0].slot;
    for (int o = 0; o < W; o++)       // all-gather: owner o's slot to every other rank
        for (int r = 0; r < W; r++) {
            if (r == o) continue;
            cudaCheck(cudaMemcpyAsync(ranks[r].st.recv + o * slot, ranks[o].st.recv + o * slot, slot, cudaMemcpyDeviceToDevice, ctx->stream));
            cudaCheck(cudaMemcpyAsync(ranks[r].st.recv_scales + o * slot / QGROUP, ranks[o].st.recv_scales + o * slot / QGROUP,
                                      slot / QGROUP * sizeof(float), cudaMemcpyDeviceToDevice, ctx->stream));
        }
    for (int r = 0; r < W; r++) dequantize_groups(ranks[r].st.recv, ranks[r].st.recv_scales, hi - lo, ranks[r].d_g + lo, sms, ctx->stream);
}

static std::vector<SimRank> make_ranks(int W, size_t total, size_t max_n, size_t shard) {
    std::vector<SimRank> ranks(W);
    for (SimRank& r : ranks) {
        r.g = grad_like(total);
        r.d_g = to_device(r.g);
        grad_staging_create(&r.st, max_n, W, shard);
    }
    return ranks;
}
static void free_ranks(std::vector<SimRank>& ranks) { for (SimRank& r : ranks) grad_staging_free(&r.st); }

// The bound on |result - exact mean| of value i: each sender's rounding (its group's absmax / 254)
// divided by W, plus (DDP) the rounding of the average (the mean's group absmax / 254, bounded via
// the senders' absmax), plus fp32 and floatX slack.
static double pipeline_bound(const std::vector<SimRank>& ranks, size_t i, size_t group_base, int owner, bool twice, double mean) {
    const int W = (int)ranks.size();
    double send = 0, avg_absmax = 0;
    for (int s = 0; s < W; s++) {
        std::vector<float> grp(ranks[s].g.begin() + group_base, ranks[s].g.begin() + std::min(ranks[s].g.size(), group_base + QGROUP));
        const double m = group_absmax(grp, 0);
        if (s != owner) send += m / 254.0;
        avg_absmax += m / W;
    }
    (void)i;
    return send / W * (1 + 1e-5) + (twice ? (avg_absmax + send / W) / 254.0 * (1 + 1e-5) : 0) + out_rounding(mean) + 1e-7 * avg_absmax;
}

// The staging buffers filled with 0xFF (int8 -1, nan scales) before a run: a value or scale the
// pipeline fails to write or transfer shows as a wrong or nan result.
static void poison_staging(std::vector<SimRank>& ranks) {
    const int W = (int)ranks.size();
    for (SimRank& r : ranks) {
        poison(r.st.send, r.st.send_elems);
        poison(r.st.send_scales, r.st.send_elems / QGROUP);
        poison(r.st.recv, W * r.st.recv_slot);
        poison(r.st.recv_scales, W * r.st.recv_slot / QGROUP);
    }
}

// DDP over W simulated ranks, bucket [lo, hi) of a buffer of `total` values.
static void check_ddp(Context* ctx, int W, size_t total, size_t lo, size_t hi) {
    const size_t n = hi - lo;
    const std::string what = "DDP, " + std::to_string(W) + " ranks, bucket of " + std::to_string(n) + ": ";
    std::vector<SimRank> ranks = make_ranks(W, total, n, 0);
    std::vector<std::vector<float>> before(W);
    for (int r = 0; r < W; r++) before[r] = ranks[r].g;
    poison_staging(ranks);
    simulate(ctx, ranks, lo, hi, 0);
    std::vector<std::vector<unsigned char>> bits(W);   // the bucket's bytes on each rank
    bool same = true;
    for (int r = 0; r < W; r++) {
        bits[r] = bytes_of(ranks[r].d_g + lo, n * sizeof(floatX));
        same &= bits[r] == bits[0];
    }
    check_true(what + "every rank holds the same bits", same, "");
    const std::vector<float> got = from_device(ranks[0].d_g, total);
    const std::vector<GradPiece> pieces = grad_pieces(lo, hi, W, 0);
    std::vector<double> ref(n);
    size_t over = 0, outside = 0;
    for (size_t i = lo; i < hi; i++) {
        double mean = 0;
        for (int r = 0; r < W; r++) mean += before[r][i];
        mean /= W;
        ref[i - lo] = mean;
        const GradPiece* p = &pieces[0];
        for (const GradPiece& q : pieces) if (i >= q.a && i < q.b) p = &q;
        const size_t base = p->a + (i - p->a) / QGROUP * QGROUP;   // the groups start at the piece
        if (!(std::fabs(got[i] - mean) <= pipeline_bound(ranks, i, base, p->owner, true, mean))) over++;
    }
    for (size_t i = 0; i < total; i++)
        if ((i < lo || i >= hi) && got[i] != before[0][i]) outside++;
    check_true(what + "within the roundings' bound of the exact mean", over == 0, std::to_string(over) + " values over the bound");
    check_true(what + "values outside the bucket untouched", outside == 0, std::to_string(outside) + " changed");
    check_rel_err(what + "reduced bucket vs exact mean", std::vector<float>(got.begin() + lo, got.begin() + hi), ref, 2e-2);
    // determinism: the same inputs, the staging poisoned again, give the same bits
    for (int r = 0; r < W; r++) upload(ranks[r].d_g, ranks[r].g = before[r]);
    poison_staging(ranks);
    simulate(ctx, ranks, lo, hi, 0);
    check_true(what + "a second run repeats the bits", bytes_of(ranks[0].d_g + lo, n * sizeof(floatX)) == bits[0], "rank 0");
    // an inf on the last rank: its group is nan on every rank after the reduction, the rest finite
    if (n > 2 * QGROUP) {
        std::vector<float> g = before[W - 1];
        const size_t at = pieces[0].a + QGROUP + 5;   // in piece 0's second group
        g[at] = INFINITY;
        for (int r = 0; r < W; r++) upload(ranks[r].d_g, ranks[r].g = (r == W - 1 ? g : before[r]));
        poison_staging(ranks);
        simulate(ctx, ranks, lo, hi, 0);
        bool ok = true;
        for (int r = 0; r < W; r++) {
            const std::vector<float> v = from_device(ranks[r].d_g + lo, n);
            for (size_t i = 0; i < n; i++) {
                const bool in_group = lo + i >= pieces[0].a + QGROUP && lo + i < pieces[0].a + 2 * QGROUP;
                ok &= in_group ? std::isnan(v[i]) : std::isfinite(v[i]);
            }
        }
        check_true(what + "an inf on one rank makes its group nan on every rank, nothing else", ok, "");
    }
    free_ranks(ranks);
}

// ZeRO-1 over W simulated ranks with shards of `shard` values, bucket [lo, hi).
static void check_zero1(Context* ctx, int W, size_t shard, size_t lo, size_t hi) {
    const size_t total = W * shard;
    const std::string what = "ZeRO-1, " + std::to_string(W) + " ranks, bucket [" + std::to_string(lo) + ", " + std::to_string(hi) + "): ";
    std::vector<SimRank> ranks = make_ranks(W, total, hi - lo, shard);
    std::vector<std::vector<float>> before(W);
    for (int r = 0; r < W; r++) before[r] = ranks[r].g;
    poison_staging(ranks);
    simulate(ctx, ranks, lo, hi, shard);
    size_t over = 0, changed = 0;
    std::vector<float> got_all;
    std::vector<double> ref_all;
    for (int o = 0; o < W; o++) {
        const std::vector<float> got = from_device(ranks[o].d_g, total);
        for (size_t i = 0; i < total; i++) {
            const bool own = i / shard == (size_t)o && i >= lo && i < hi;
            if (!own) { changed += got[i] != before[o][i]; continue; }
            double mean = 0;
            for (int r = 0; r < W; r++) mean += before[r][i];
            mean /= W;
            const size_t a = std::max(lo, o * shard), base = a + (i - a) / QGROUP * QGROUP;
            if (!(std::fabs(got[i] - mean) <= pipeline_bound(ranks, i, base, o, false, mean))) over++;
            got_all.push_back(got[i]);
            ref_all.push_back(mean);
        }
    }
    check_true(what + "each owner's part within one rounding of the exact mean", over == 0, std::to_string(over) + " values over the bound");
    check_true(what + "values outside the owner's part untouched", changed == 0, std::to_string(changed) + " changed");
    check_rel_err(what + "owners' parts vs exact mean", got_all, ref_all, 1.5e-2);
    free_ranks(ranks);
}

static void time_kernels(Context* ctx) {
    const size_t n = 16u << 20;   // 16M values: a 32 MB bf16 bucket
    const int sms = ctx->props.multiProcessorCount, W = 2;
    floatX* x = random_device<floatX>(ctx, n, -1.0f, 1.0f);
    int8_t* q = dalloc<int8_t>(n);
    float* s = dalloc<float>(n / QGROUP);
    int8_t* recv = dalloc<int8_t>(n);
    float* rs = dalloc<float>(n / QGROUP);
    quantize_groups(x, n, recv, rs, sms, ctx->stream);
    const double scales = n / QGROUP * 4.0;
    time_ms(ctx, "quantize_groups (16M values)", n * sizeof(floatX) + n + scales, 0,
            [&] { quantize_groups(x, n, q, s, sms, ctx->stream); });
    time_ms(ctx, "reduce_piece, 2 ranks, DDP (8M values)", n / 2 * sizeof(floatX) + n / 2 + n / 2 + scales, 0,
            [&] { reduce_piece(x, recv, rs, n / 2, n / 2, W, 0, nullptr, recv, rs, sms, ctx->stream); });
    time_ms(ctx, "dequantize_groups (16M values)", n + scales + n * sizeof(floatX), 0,
            [&] { dequantize_groups(q, s, n, x, sms, ctx->stream); });
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "grad_compress");
    check_roundtrip(&ctx);
    check_ddp(&ctx, 3, 300000, 1237, 291237);   // a bucket inside the buffer, its last piece short
    check_ddp(&ctx, 2, 100000, 0, 100000);
    check_ddp(&ctx, 4, 70000, 5000, 65001);
    check_ddp(&ctx, 3, 5000, 100, 400);         // pieces of 128, 128, 44
    check_ddp(&ctx, 3, 5000, 100, 102);         // 2 values: the owners of pieces 1 and 2 get nothing
    check_zero1(&ctx, 3, 100032, 50001, 270000);   // across all three shards, boundaries not multiples of 128
    check_zero1(&ctx, 2, 100000, 10, 99999);       // inside one shard
    check_zero1(&ctx, 4, 30001, 0, 120004);        // the whole buffer
    if (timing_enabled()) time_kernels(&ctx);
    context_destroy(&ctx);
    return check_finish();
}
