// Throughput figures: model FLOPs utilization against the GPU's dense peak. Host-only.
#pragma once
#include <cstring>

// Dense tensor-core peak (FLOP/s) for 16-bit inputs by compute capability, and the plain fp32
// peak for FP32 builds (which use no tensor cores: this repo's fp32 matmuls are exact fp32).
// Datasheet numbers for the SXM parts; 0 when unknown (MFU is then not printed).
inline double peak_flops(int cc_major, int cc_minor, const char* name, bool fp32) {
    (void)name;
    if (cc_major == 9 && cc_minor == 0) return fp32 ? 67e12 : 989e12;   // H100 / H200 SXM
    if (cc_major == 8 && cc_minor == 0) return fp32 ? 19.5e12 : 312e12; // A100
    if (cc_major == 8 && cc_minor == 9) return fp32 ? 82.6e12 : 165e12; // L40S/4090 class (dense fp16, fp32 acc)
    if (cc_major == 10) return fp32 ? 80e12 : 2250e12;                  // B200
    return 0.0;
}
