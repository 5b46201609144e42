// Checks llmc/encoder.cuh against a CPU reference, at C = 768, 64 and 1600 (B=8, T=256):
//   - encoder_forward: out = wte[tokens] + wpe[t];
//   - encoder_backward: dwte (through TokenBuckets built from random tokens with many repeats)
//     and dwpe, both accumulated onto non-zero initial gradients (rows not touched must stay);
//   - determinism: two backward runs from the same start (buckets rebuilt) give bitwise-equal
//     dwte and dwpe; and a backward captured in a CUDA graph on one batch's buckets, replayed on
//     another batch's (7 distinct tokens), equals an eager run on that batch bit for bit;
//   - B=3, T=75, C=1600: element counts that leave the last block of each kernel partly used;
//   - the pageable upload TokenBuckets relies on: the host may overwrite the source as soon as
//     cudaMemcpyAsync returns, though the copy still waits in the stream;
//   - timing at B=8, T=1024, C=768, Vp=50304.
// Run: make dev/cuda/encoder_check && ./dev/cuda/encoder_check   (PRECISION=BF16|FP32 for others)
#include "check.cuh"
#include "../../llmc/encoder.cuh"

// Holds the stream for about `cycles` clocks: what a long forward+backward does to the copies
// queued behind it.
__global__ void spin_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

// Correctness: small vocabulary, many repeated tokens, maxT > T (rows T.. stay put). One batch,
// its weights, an upstream gradient and non-zero starting gradients, on host and device.
struct EncoderCase {
    static constexpr int B = 8, T = 256, maxT = 320, V = 1000, Vp = 1024, BT = B * T;
    int C = 768;                             // the width: GPT-2 small's, and others (check_encoder)
    std::vector<int> tokens;                 // (B, T)
    std::vector<float> wte, wpe;             // (Vp, C), (maxT, C)
    std::vector<float> dout, dwte0, dwpe0;   // (B, T, C), (Vp, C), (maxT, C): the starting gradients
    int* d_tokens;
    floatX *d_wte, *d_wpe, *d_dout, *d_dwte, *d_dwpe;
    TokenBuckets tb;
};

static void encoder_case_create(EncoderCase* e, Context* ctx) {
    const int BT = EncoderCase::BT, C = e->C, V = EncoderCase::V;
    e->tokens.resize(BT);
    for (int i = 0; i < BT; i++) e->tokens[i] = randint(0, 4) == 0 ? randint(0, V) : randint(0, 24);
    e->tokens[7] = V - 1;  // the last real token
    e->tokens[BT - 1] = 0;
    e->wte = randn((size_t)EncoderCase::Vp * C);
    e->wpe = randn((size_t)EncoderCase::maxT * C);
    e->dout = randn((size_t)BT * C);
    e->dwte0 = randn((size_t)EncoderCase::Vp * C);
    e->dwpe0 = randn((size_t)EncoderCase::maxT * C);
    e->d_tokens = to_device_raw(e->tokens);
    e->d_wte = to_device(e->wte);
    e->d_wpe = to_device(e->wpe);
    e->d_dout = to_device(e->dout);
    e->d_dwte = to_device(e->dwte0);
    e->d_dwpe = to_device(e->dwpe0);
    token_buckets_create(&e->tb, BT, V);
    token_buckets_build(&e->tb, e->tokens.data(), BT, ctx->stream);
}

// The gradients reset to their starting values, the buckets built for `tokens`, one eager
// backward; out[0], out[1]: dwte's and dwpe's bytes after it.
static void encoder_backward_from_start(Context* ctx, EncoderCase* e, const std::vector<int>& tokens, std::vector<unsigned char> out[2]) {
    upload(e->d_dwte, e->dwte0);
    upload(e->d_dwpe, e->dwpe0);
    token_buckets_build(&e->tb, tokens.data(), EncoderCase::BT, ctx->stream);
    encoder_backward(ctx, e->d_dwte, e->d_dwpe, e->d_dout, e->tb, EncoderCase::B, EncoderCase::T, e->C);
    out[0] = bytes_of(e->d_dwte, (size_t)EncoderCase::Vp * e->C * sizeof(floatX));
    out[1] = bytes_of(e->d_dwpe, (size_t)EncoderCase::maxT * e->C * sizeof(floatX));
}

static void check_encoder_forward(Context* ctx, const EncoderCase& e, double tol) {
    const int BT = EncoderCase::BT, C = e.C, T = EncoderCase::T;
    floatX* d_out = dalloc<floatX>((size_t)BT * C);
    poison(d_out, (size_t)BT * C);
    encoder_forward(ctx, d_out, e.d_tokens, e.d_wte, e.d_wpe, EncoderCase::B, T, C);
    std::vector<double> ref((size_t)BT * C);
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++)
            ref[(size_t)bt * C + c] = (double)e.wte[(size_t)e.tokens[bt] * C + c] + e.wpe[(size_t)(bt % T) * C + c];
    check_close("encoder_forward C=" + std::to_string(C), from_device(d_out, (size_t)BT * C), ref, tol);
}

// backward, accumulating onto non-zero gradients
static void check_encoder_backward(Context* ctx, EncoderCase* e, double tol) {
    const int BT = EncoderCase::BT, C = e->C, T = EncoderCase::T;
    encoder_backward(ctx, e->d_dwte, e->d_dwpe, e->d_dout, e->tb, EncoderCase::B, T, C);
    std::vector<double> ref_wte(e->dwte0.begin(), e->dwte0.end()), ref_wpe(e->dwpe0.begin(), e->dwpe0.end());
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) {
            const double d = e->dout[(size_t)bt * C + c];
            ref_wte[(size_t)e->tokens[bt] * C + c] += d;
            ref_wpe[(size_t)(bt % T) * C + c] += d;
        }
    check_close("encoder_backward dwte (accumulated) C=" + std::to_string(C), from_device(e->d_dwte, (size_t)EncoderCase::Vp * C), ref_wte, tol);
    check_close("encoder_backward dwpe (accumulated) C=" + std::to_string(C), from_device(e->d_dwpe, (size_t)EncoderCase::maxT * C), ref_wpe, tol);
}

// determinism: the same start twice, buckets rebuilt in between
static void check_encoder_deterministic(Context* ctx, EncoderCase* e) {
    std::vector<unsigned char> runs[2][2];
    for (int r = 0; r < 2; r++) encoder_backward_from_start(ctx, e, e->tokens, runs[r]);
    check_bitwise("encoder_backward deterministic dwte (two runs) C=" + std::to_string(e->C), runs[0][0] == runs[1][0]);
    check_bitwise("encoder_backward deterministic dwpe (two runs) C=" + std::to_string(e->C), runs[0][1] == runs[1][1]);
}

// in a CUDA graph (as the trainer replays its backward): captured while the buckets hold
// this batch, replayed after they were rebuilt for a batch of only 7 distinct tokens;
// must equal an eager run on that batch bit for bit
static void check_encoder_graph_replay(Context* ctx, EncoderCase* e) {
    std::vector<int> few(EncoderCase::BT);
    for (int& t : few) t = randint(0, 7);
    std::vector<unsigned char> eager[2], replayed[2];
    encoder_backward_from_start(ctx, e, few, eager);
    upload(e->d_dwte, e->dwte0);
    upload(e->d_dwpe, e->dwpe0);
    token_buckets_build(&e->tb, e->tokens.data(), EncoderCase::BT, ctx->stream);
    cudaGraphExec_t exec = graph_capture(ctx, [&] {
        encoder_backward(ctx, e->d_dwte, e->d_dwpe, e->d_dout, e->tb, EncoderCase::B, EncoderCase::T, e->C);
    });
    token_buckets_build(&e->tb, few.data(), EncoderCase::BT, ctx->stream);
    cudaCheck(cudaGraphLaunch(exec, ctx->stream));
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    replayed[0] = bytes_of(e->d_dwte, (size_t)EncoderCase::Vp * e->C * sizeof(floatX));
    replayed[1] = bytes_of(e->d_dwpe, (size_t)EncoderCase::maxT * e->C * sizeof(floatX));
    cudaCheck(cudaGraphExecDestroy(exec));
    check_true("encoder_backward replayed in a CUDA graph captured on another batch C=" + std::to_string(e->C),
               eager[0] == replayed[0] && eager[1] == replayed[1], "bitwise equal to an eager run on the new batch");
}

static void check_encoder(Context* ctx, double tol, int C) {
    EncoderCase e;
    e.C = C;
    encoder_case_create(&e, ctx);
    check_encoder_forward(ctx, e, tol);
    check_encoder_backward(ctx, &e, tol);
    check_encoder_deterministic(ctx, &e);
    check_encoder_graph_replay(ctx, &e);
    token_buckets_free(&e.tb);
}

// Sizes whose element counts are not multiples of a block: every EncoderCase launch has B*T = 2048
// and T = 256 rows, so the forward's and the wpe backward's grids (256 threads of one x128 each)
// divide exactly and their `idx >= ...` guards were never taken. Here B = 3, T = 75, C = 1600:
// in 16-bit, forward 45000 chunks (175 full blocks + 200), wpe 15000 (58 + 152), wte 200 chunks
// per row (6 blocks of 32 + 8); FP32 has twice the chunks, with partial last blocks too. Also what the evaluation's shorter batches (fewer rows, T < maxT) run.
// out has 64 poisoned elements past B*T*C that must stay; dwte and dwpe accumulate onto non-zero.
static void check_encoder_tails(Context* ctx, double tol) {
    const int B = 3, T = 75, maxT = 80, C = 1600, V = 50, Vp = 64, BT = B * T;
    const size_t pad = 64;
    std::vector<int> tokens(BT);
    for (int& t : tokens) t = randint(0, V);
    std::vector<float> wte = randn((size_t)Vp * C), wpe = randn((size_t)maxT * C), dout = randn((size_t)BT * C);
    std::vector<float> dwte0 = randn((size_t)Vp * C), dwpe0 = randn((size_t)maxT * C);
    int* d_tokens = to_device_raw(tokens);
    floatX *d_wte = to_device(wte), *d_wpe = to_device(wpe), *d_dout = to_device(dout);
    floatX *d_dwte = to_device(dwte0), *d_dwpe = to_device(dwpe0), *d_out = dalloc<floatX>((size_t)BT * C + pad);
    poison(d_out, (size_t)BT * C + pad);
    encoder_forward(ctx, d_out, d_tokens, d_wte, d_wpe, B, T, C);
    std::vector<double> ref((size_t)BT * C);
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) ref[(size_t)bt * C + c] = (double)wte[(size_t)tokens[bt] * C + c] + wpe[(size_t)(bt % T) * C + c];
    check_close("encoder_forward B=3 T=75 C=1600 (partial last block)", from_device(d_out, (size_t)BT * C), ref, tol);
    check_untouched_past("encoder_forward B=3 T=75 C=1600: the 64 elements past B*T*C untouched", d_out, (size_t)BT * C, pad);
    TokenBuckets tb;
    token_buckets_create(&tb, BT, Vp);
    token_buckets_build(&tb, tokens.data(), BT, ctx->stream);
    encoder_backward(ctx, d_dwte, d_dwpe, d_dout, tb, B, T, C);
    std::vector<double> ref_wte(dwte0.begin(), dwte0.end()), ref_wpe(dwpe0.begin(), dwpe0.end());
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) {
            ref_wte[(size_t)tokens[bt] * C + c] += dout[(size_t)bt * C + c];
            ref_wpe[(size_t)(bt % T) * C + c] += dout[(size_t)bt * C + c];
        }
    check_close("encoder_backward dwte (accumulated) B=3 T=75 C=1600", from_device(d_dwte, (size_t)Vp * C), ref_wte, tol);
    check_close("encoder_backward dwpe (accumulated; rows 75..79 kept) B=3 T=75 C=1600", from_device(d_dwpe, (size_t)maxT * C), ref_wpe, tol);
    token_buckets_free(&tb);
}

// What TokenBuckets and gpt2_set_batch rely on: cudaMemcpyAsync from pageable memory has
// the data when it returns (staged, or copied after the driver waited for the stream), so the
// host may overwrite the source at once though the copy is queued behind a long kernel. On a
// machine where the GPU reads pageable memory directly (cudaDevAttrPageableMemoryAccess) the
// device could get the overwritten data instead: this check would then fail.
static void check_pageable_upload(Context* ctx) {
    const size_t n = 1 << 20;
    std::vector<int> host(n), back(n);
    for (size_t i = 0; i < n; i++) host[i] = (int)(i * 2654435761u);
    const std::vector<int> sent = host;
    int* d = dalloc<int>(n);
    int pageable = 0;
    cudaCheck(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0));
    spin_kernel<<<1, 1, 0, ctx->stream>>>(200000000LL);  // ~0.1 s
    launchCheck();
    cudaCheck(cudaMemcpyAsync(d, host.data(), n * sizeof(int), cudaMemcpyHostToDevice, ctx->stream));
    for (size_t i = 0; i < n; i++) host[i] = -1;     // the next batch, written right away
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    cudaCheck(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
    check_true("pageable upload staged at return", back == sent,
               std::string(back == sent ? "the device got the data as it was at the call" : "the device got the overwritten data") +
               " (cudaDevAttrPageableMemoryAccess=" + std::to_string(pageable) + ")");
}

// Timing at GPT-2 small scale
static void time_encoder(Context* ctx) {
    const int B = 8, T = 1024, C = 768, V = 50257, Vp = 50304, BT = B * T;
    std::vector<int> tokens(BT);
    for (auto& t : tokens) t = randint(0, V);
    int* d_tokens = to_device_raw(tokens);
    floatX* d_wte = random_device<floatX>(ctx, (size_t)Vp * C, -1.0f, 1.0f);
    floatX* d_wpe = random_device<floatX>(ctx, (size_t)T * C, -1.0f, 1.0f);
    floatX* d_out = random_device<floatX>(ctx, (size_t)BT * C, -1.0f, 1.0f);
    floatX* d_dwte = random_device<floatX>(ctx, (size_t)Vp * C, -1.0f, 1.0f);
    floatX* d_dwpe = random_device<floatX>(ctx, (size_t)T * C, -1.0f, 1.0f);
    TokenBuckets tb;
    token_buckets_create(&tb, BT, V);
    token_buckets_build(&tb, tokens.data(), BT, ctx->stream);
    const double X = sizeof(floatX), btc = (double)BT * C, tc = (double)T * C;
    time_ms(ctx, "encoder_forward B=8 T=1024 C=768", X * (2 * btc + tc) + 4.0 * BT, 0,
            [&] { encoder_forward(ctx, d_out, d_tokens, d_wte, d_wpe, B, T, C); });
    // dout read, dwpe read+written, the dwte rows of the distinct tokens read+written
    const double rows = tb.num_unique;
    time_ms(ctx, "encoder_backward B=8 T=1024 C=768", X * (btc + 2 * tc + 2 * rows * C) + 4.0 * 3 * BT, 0,
            [&] { encoder_backward(ctx, d_dwte, d_dwpe, d_out, tb, B, T, C); });
    token_buckets_free(&tb);
}

int main() {
    Context ctx;
    context_create(&ctx, 0);
    check_begin(ctx, "encoder");
    // GPT-2 small's width; one head's (fewer x128 chunks than the wte kernel's threads); d48's
    // (1600: chunks not a multiple of the threads)
    for (int C : {768, 64, 1600}) check_encoder(&ctx, tol_default(), C);
    check_encoder_tails(&ctx, tol_default());
    check_pageable_upload(&ctx);
    if (timing_enabled()) time_encoder(&ctx);
    context_destroy(&ctx);
    return check_finish();
}
