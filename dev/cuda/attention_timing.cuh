// attention_check's timings: the model's attention at GPT-2 small's shapes (always, unless
// CHECK_NO_TIMING), and the studies that only flags ask for: --sweep (the flash path over B, T, NH),
// --lengths and --batches (sm_90a: the wgmma kernels one by one). Effective TFLOP/s count the causal
// half: forward 2*B*NH*T*T*hs FLOPs, backward 2.5x that.
#pragma once
#include <algorithm>
#include <string>
#include "check.cuh"
#include "../../llmc/attention.cuh"

// B=8 and B=64, T=1024, NH=12, hs=64: forward and backward as the model runs them, the backward
// kernel by kernel (and in sm_90a builds the mma.sync kernels the wgmma ones replace), and at B=8
// the cuBLAS reference for comparison.
static void time_gpt2_small(Context* ctx) {
    for (int B : {8, 64}) {
        const int T = 1024, NH = 12, hs = 64, C = NH * hs;
        floatX* qkv = random_device<floatX>(ctx, (size_t)B * T * 3 * C, -1.5f, 1.5f);
        floatX* dout = random_device<floatX>(ctx, (size_t)B * T * C, -1, 1);
        floatX *out = dalloc<floatX>((size_t)B * T * C), *dqkv = dalloc<floatX>((size_t)B * T * 3 * C);
        float* state = dalloc<float>(attention_state_elems(B, T, NH));
        unsigned char* scratch = dalloc<unsigned char>(attention_scratch_bytes(B, T, C, NH));
        const double flops = 2.0 * B * NH * (double)T * T * hs;
        const std::string shape = " B=" + std::to_string(B) + " T=1024 NH=12 hs=64";
        time_ms(ctx, ("attention_forward" + shape).c_str(), 0, flops,
                [&] { attention_forward(ctx, out, state, qkv, scratch, B, T, C, NH); });
#if defined(USE_WGMMA) && !defined(ENABLE_FP32)  // the model's forward is the wgmma kernel; the mma.sync one for comparison
        time_ms(ctx, ("  flash forward mma.sync (not used here)" + shape).c_str(), 0, flops,
                [&] { flash_attention_forward(ctx, out, state, qkv, B, T, NH); });
        attention_forward(ctx, out, state, qkv, scratch, B, T, C, NH);  // the backward below reads these
#endif
        time_ms(ctx, ("attention_backward" + shape).c_str(), 0, 2.5 * flops,
                [&] { attention_backward(ctx, dqkv, dout, qkv, out, state, scratch, B, T, C, NH); });
#if !defined(ENABLE_FP32)  // the backward's kernels one by one; TFLOP/s of the matmuls each does (dkdv 4, dq 3)
        float* delta = (float*)scratch;
        time_ms(ctx, ("  flash backward delta" + shape).c_str(), 2.0 * B * T * C * sizeof(floatX) + B * NH * T * 4.0, 0,
                [&] { flash_backward_delta(ctx, delta, dout, out, B, T, NH); });
        time_ms(ctx, ("  flash backward dkdv (4 matmuls)" + shape).c_str(), 0, 2.0 * flops,
                [&] { flash_backward_dkdv(ctx, dqkv, delta, dout, qkv, state, B, T, NH); });
        time_ms(ctx, ("  flash backward dq (3 matmuls)" + shape).c_str(), 0, 1.5 * flops,
                [&] { flash_backward_dq(ctx, dqkv, delta, dout, qkv, state, B, T, NH); });
#if defined(USE_WGMMA)  // the model's dkdv and dq on Hopper
        time_ms(ctx, ("  flash backward dkdv wgmma (4 matmuls)" + shape).c_str(), 0, 2.0 * flops,
                [&] { flash_backward_dkdv_wgmma(ctx, dqkv, delta, dout, qkv, state, B, T, NH); });
        time_ms(ctx, ("  flash backward dq wgmma (3 matmuls, + delta)" + shape).c_str(), 0, 1.5 * flops,
                [&] { flash_backward_dq_wgmma(ctx, dqkv, delta, dout, qkv, out, state, B, T, NH); });
#endif
        if (B == 8) {  // in FP32 builds the model's path is the reference: timed above
            floatX* att = dalloc<floatX>((size_t)B * NH * T * T);
            floatX* ref_scratch = dalloc<floatX>(attention_reference_scratch_elems(B, T, C, NH));
            time_ms(ctx, "attention_reference_forward B=8 T=1024 NH=12", 0, flops,
                    [&] { attention_reference_forward(ctx, out, att, qkv, ref_scratch, B, T, C, NH); });
            time_ms(ctx, "attention_reference_backward B=8 T=1024 NH=12", 0, 2.5 * flops,
                    [&] { attention_reference_backward(ctx, dqkv, dout, qkv, att, ref_scratch, B, T, C, NH); });
        }
#endif
    }
}

#if !defined(ENABLE_FP32)
// The model's attention path over B x T x NH; buffers sized once for the largest configuration.
static void sweep(Context* ctx) {
    const int Bs[] = {1, 4, 8, 64}, Ts[] = {64, 128, 1000, 1024, 2048}, NHs[] = {12, 16, 20, 25}, hs = 64;
    const size_t max_bt = 64 * 2048, max_c = 25 * hs;
    floatX* qkv = random_device<floatX>(ctx, max_bt * 3 * max_c, -1.5f, 1.5f);
    floatX* dout = random_device<floatX>(ctx, max_bt * max_c, -1.0f, 1.0f);
    floatX *out = dalloc<floatX>(max_bt * max_c), *dqkv = dalloc<floatX>(max_bt * 3 * max_c);
    float* state = dalloc<float>(attention_state_elems(64, 2048, 25));
    unsigned char* scratch = dalloc<unsigned char>(attention_scratch_bytes(64, 2048, 25 * hs, 25));
    printf("SWEEP %s attention (causal, hs=64): effective TFLOP/s, forward 2*B*NH*T*T*hs FLOPs, backward 2.5x\n",
           PRECISION_NAME);
    for (int B : Bs)
        for (int T : Ts)
            for (int NH : NHs) {
                const int C = NH * hs;
                const double flops = 2.0 * B * NH * (double)T * T * hs;
                const int reps = flops > 1e11 ? 10 : 20;
                attention_forward(ctx, out, state, qkv, scratch, B, T, C, NH);
                const float f = median_ms(ctx, [&] { attention_forward(ctx, out, state, qkv, scratch, B, T, C, NH); }, reps);
                const float b = median_ms(ctx, [&] { attention_backward(ctx, dqkv, dout, qkv, out, state, scratch, B, T, C, NH); }, reps);
                printf("SWEEP B=%2d T=%4d NH=%2d  fwd %8.4f ms %6.1f TFLOP/s | bwd %8.4f ms %6.1f TFLOP/s | fwd+bwd %6.1f TFLOP/s\n",
                       B, T, NH, f, flops / f / 1e9, b, 2.5 * flops / b / 1e9, 3.5 * flops / (f + b) / 1e9);
            }
}
#endif

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
// The Hopper kernels one by one at a fixed 64K tokens (B*T) and NH=12, from T=1024 to T=16384: the
// longer the sequence, the fewer and longer the work items, so this separates what the main loops
// reach from what each item costs once (the kernels' head comments quote it).
static void lengths(Context* ctx) {
    const int NH = 12, hs = 64, C = NH * hs;
    const size_t bt = 65536;
    floatX* qkv = random_device<floatX>(ctx, bt * 3 * C, -1.5f, 1.5f);
    floatX* dout = random_device<floatX>(ctx, bt * C, -1.0f, 1.0f);
    floatX *out = dalloc<floatX>(bt * C), *dqkv = dalloc<floatX>(bt * 3 * C);
    float *lse = dalloc<float>(bt * NH), *delta = dalloc<float>(bt * NH);
    printf("LENGTHS %s wgmma kernels, B*T = 65536, NH=12: TFLOP/s of each kernel's matmuls (causal)\n", PRECISION_NAME);
    for (int T : {1024, 2048, 4096, 16384}) {
        const int B = (int)(bt / T);
        const double flops = 2.0 * B * NH * (double)T * T * hs;
        const float f = median_ms(ctx, [&] { flash_attention_forward_wgmma(ctx, out, lse, qkv, B, T, NH); }, 20);
        const float q = median_ms(ctx, [&] { flash_backward_dq_wgmma(ctx, dqkv, delta, dout, qkv, out, lse, B, T, NH); }, 20);
        const float kv = median_ms(ctx, [&] { flash_backward_dkdv_wgmma(ctx, dqkv, delta, dout, qkv, lse, B, T, NH); }, 20);
        printf("LENGTHS B=%2d T=%5d  forward %7.4f ms %6.1f | dq (+delta) %7.4f ms %6.1f | dkdv %7.4f ms %6.1f\n", B, T, f,
               flops / f / 1e9, q, 1.5 * flops / q / 1e9, kv, 2.0 * flops / kv / 1e9);
    }
}
#endif

#if defined(USE_WGMMA) && !defined(ENABLE_FP32)
// --batches: the wgmma kernels at T=1024, NH=12 for B = 1 .. 64, next to what the schedule gives
// the busiest CTA (key tiles and items; llmc/attention_schedule.h): time against that load
// separates a launch's fixed cost (start, first loads, the last item's end) from the cost per tile.
static void batches(Context* ctx) {
    const int NH = 12, hs = 64, C = NH * hs, T = 1024, nt = T / 128, G = ctx->props.multiProcessorCount;
    const size_t max_bt = 64 * (size_t)T;
    floatX* qkv = random_device<floatX>(ctx, max_bt * 3 * C, -1.5f, 1.5f);
    floatX* dout = random_device<floatX>(ctx, max_bt * C, -1.0f, 1.0f);
    floatX *out = dalloc<floatX>(max_bt * C), *dqkv = dalloc<floatX>(max_bt * 3 * C);
    float *lse = dalloc<float>(max_bt * NH), *delta = dalloc<float>(max_bt * NH);
    printf("BATCHES %s wgmma kernels, T=1024, NH=12, %d SMs: busiest CTA's key tiles / items (forward), TFLOP/s\n",
           PRECISION_NAME, G);
    for (int B : {1, 2, 4, 8, 16, 32, 64}) {
        const int BH = B * NH, items = BH * nt, g = std::min(items, G);
        int max_tiles = 0, max_items = 0;
        for (int c = 0; c < g; c++) {
            int tiles = 0, n = 0;
            for (int w = c; w < items; w = attn_sched::next_item(w, c, g), n++) tiles += nt - attn_sched::item_rank(w, BH, nt);
            max_tiles = std::max(max_tiles, tiles), max_items = std::max(max_items, n);
        }
        const double flops = 2.0 * B * NH * (double)T * T * hs;
        const float f = median_ms(ctx, [&] { flash_attention_forward_wgmma(ctx, out, lse, qkv, B, T, NH); }, 20);
        const float q = median_ms(ctx, [&] { flash_backward_dq_wgmma(ctx, dqkv, delta, dout, qkv, out, lse, B, T, NH); }, 20);
        const float kv = median_ms(ctx, [&] { flash_backward_dkdv_wgmma(ctx, dqkv, delta, dout, qkv, lse, B, T, NH); }, 20);
        printf("BATCHES B=%2d tiles %3d items %2d  forward %7.4f ms %6.1f | dq (+delta) %7.4f ms %6.1f | dkdv %7.4f ms %6.1f\n", B,
               max_tiles, max_items, f, flops / f / 1e9, q, 1.5 * flops / q / 1e9, kv, 2.0 * flops / kv / 1e9);
    }
}
#endif
