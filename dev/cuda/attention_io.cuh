// attention_check --io DIR: the exchange with dev/cuda/sdpa_check.py, which compares the model's
// attention with PyTorch's.
#pragma once
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "check.cuh"
#include "../../llmc/attention.cuh"

// --io DIR: the model's attention on inputs PyTorch made, for dev/cuda/sdpa_check.py (which
// compares the outputs with a float64 attention and with scaled_dot_product_attention). The cases
// are DIR/case_<i>.in for i = 0, 1, ... while they exist: int32 {precision: 0 fp32, 1 fp16, 2 bf16;
// B, T, NH}, then qkv (B,T,3C) and dout (B,T,C) as floatX (the build's precision). Each gets
// attention_forward and attention_backward (the trainer's path), written to DIR/case_<i>.out: out
// (B,T,C), then dqkv (B,T,3C), as floatX.
struct IoCase { std::string in, out; int B, T, NH; };

// The cases in DIR, every header and size checked before any GPU work (so a bad file costs
// nothing and CI can test these errors): false after one line naming the file that is wrong.
static bool io_list(const std::string& dir, std::vector<IoCase>* cases) {
    const int32_t precision = strcmp(PRECISION_NAME, "fp32") == 0 ? 0 : strcmp(PRECISION_NAME, "fp16") == 0 ? 1 : 2;
    for (int i = 0;; i++) {
        const std::string base = dir + "/case_" + std::to_string(i);
        IoCase c{base + ".in", base + ".out", 0, 0, 0};
        FILE* f = fopen(c.in.c_str(), "rb");
        if (!f) break;
        int32_t hdr[4];
        const bool hdr_ok = fread(hdr, sizeof(hdr), 1, f) == 1;
        fseek(f, 0, SEEK_END);
        const long size = ftell(f);
        fclose(f);
        const char* why = !hdr_ok ? "shorter than its 16-byte header"
                          : hdr[0] != precision ? "its precision is not this build's (" PRECISION_NAME ")"
                          : hdr[1] < 1 || hdr[2] < 1 || hdr[3] < 1 ? "B, T, NH must be positive" : nullptr;
        if (!why) {
            c.B = hdr[1], c.T = hdr[2], c.NH = hdr[3];
            if ((size_t)size != 16 + 4 * (size_t)c.B * c.T * c.NH * 64 * sizeof(floatX)) why = "size is not 16 + 4*B*T*NH*64*sizeof(floatX) bytes";
        }
        if (why) { fprintf(stderr, "%s: %s\n", c.in.c_str(), why); return false; }
        cases->push_back(c);
    }
    if (cases->empty()) { fprintf(stderr, "%s/case_0.in: cannot be opened (no cases)\n", dir.c_str()); return false; }
    return true;
}

// Runs the listed cases; false after one line if an output cannot be written.
static bool io_run(Context* ctx, const std::vector<IoCase>& cases) {
    for (const IoCase& c : cases) {
        const int B = c.B, T = c.T, NH = c.NH, C = NH * 64;
        const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
        std::vector<floatX> h_qkv(n_qkv), h_dout(n_out);
        FILE* f = fopen(c.in.c_str(), "rb");
        const bool read_ok = f && fseek(f, 16, SEEK_SET) == 0 && fread(h_qkv.data(), sizeof(floatX), n_qkv, f) == n_qkv &&
                             fread(h_dout.data(), sizeof(floatX), n_out, f) == n_out;
        if (f) fclose(f);
        if (!read_ok) { fprintf(stderr, "%s: could not be read\n", c.in.c_str()); return false; }
        floatX *qkv, *dout, *out, *dqkv;
        float* state;
        unsigned char* scratch;
        cudaCheck(cudaMalloc(&qkv, n_qkv * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dqkv, n_qkv * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dout, n_out * sizeof(floatX)));
        cudaCheck(cudaMalloc(&out, n_out * sizeof(floatX)));
        cudaCheck(cudaMalloc(&state, attention_state_elems(B, T, NH) * sizeof(float)));
        cudaCheck(cudaMalloc(&scratch, attention_scratch_bytes(B, T, C, NH)));
        cudaCheck(cudaMemcpy(qkv, h_qkv.data(), n_qkv * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dout, h_dout.data(), n_out * sizeof(floatX), cudaMemcpyHostToDevice));
        attention_forward(ctx, out, state, qkv, scratch, B, T, C, NH);
        attention_backward(ctx, dqkv, dout, qkv, out, state, scratch, B, T, C, NH);
        cudaCheck(cudaMemcpy(h_dout.data(), out, n_out * sizeof(floatX), cudaMemcpyDeviceToHost));  // h_dout now holds out
        cudaCheck(cudaMemcpy(h_qkv.data(), dqkv, n_qkv * sizeof(floatX), cudaMemcpyDeviceToHost));   // h_qkv now holds dqkv
        for (void* p : {(void*)qkv, (void*)dqkv, (void*)dout, (void*)out, (void*)state, (void*)scratch}) cudaCheck(cudaFree(p));
        FILE* g = fopen(c.out.c_str(), "wb");
        const bool written = g && fwrite(h_dout.data(), sizeof(floatX), n_out, g) == n_out &&
                             fwrite(h_qkv.data(), sizeof(floatX), n_qkv, g) == n_qkv;
        if (!g || fclose(g) != 0 || !written) { fprintf(stderr, "%s: could not be written\n", c.out.c_str()); return false; }
    }
    return true;
}
