// Throughput figures: model FLOPs utilization (MFU) against the GPU's datasheet peak. Host-only.
//
// MFU = the model's training FLOPs per second / the GPU's peak. The peak is the datasheet's
// dense tensor-core rate for 16-bit inputs with fp32 accumulation (what our GEMMs use), or the
// plain fp32 rate for FP32 builds (their matmuls are exact fp32: no tensor cores). One compute
// capability covers parts of very different peaks (an H100 PCIe runs 756 TFLOP/s, an H100 SXM
// 989), so the part is told apart by the words of its name. An unknown GPU has no peak: MFU is
// then "n/a" (NaN) unless --peak-tflops gives one.
#pragma once
#include <cmath>
#include <string>
#include <vector>

struct GpuPeak {
    double flops = 0;   // per GPU, FLOP/s; 0: unknown
    std::string part;   // which datasheet row it came from ("" when unknown)
};

// The name's words, split at spaces and dashes: "NVIDIA A100-SXM4-80GB" -> NVIDIA A100 SXM4 80GB.
inline std::vector<std::string> gpu_name_words(const std::string& name) {
    std::vector<std::string> words;
    std::string w;
    for (char ch : name + " ") {
        if (ch == ' ' || ch == '-') { if (!w.empty()) words.push_back(w); w.clear(); }
        else w += ch;
    }
    return words;
}

// Datasheet peaks (dense: the "with sparsity" figures halved). The first row whose compute
// capability matches and whose words all occur in the device name wins, so variants come before
// the row that covers the rest of their capability (words "" matches any name).
inline GpuPeak gpu_peak(int cc_major, int cc_minor, const std::string& name, bool fp32) {
    struct Row { int major, minor; const char* words[2]; double tflops16, tflops32; const char* part; };
    static const Row rows[] = {
        {9, 0, {"H100", "PCIe"}, 756, 51, "H100 PCIe"},
        {9, 0, {"H800", "PCIe"}, 756, 51, "H800 PCIe"},
        {9, 0, {"H100", "NVL"}, 835, 60, "H100 NVL"},
        {9, 0, {"H200", "NVL"}, 835, 60, "H200 NVL"},
        {9, 0, {"H20", ""}, 148, 44, "H20"},   // sm_90 as well: the row below would count it at 989
        {9, 0, {"", ""}, 989, 67, "H100/H200 SXM"},
        {8, 0, {"A30", ""}, 165, 10.3, "A30"},
        {8, 0, {"", ""}, 312, 19.5, "A100"},
        {8, 6, {"A10", ""}, 125, 31.2, "A10"},
        {8, 6, {"A40", ""}, 149.7, 37.4, "A40"},
        {8, 9, {"L40S", ""}, 362, 91.6, "L40S"},
        {8, 9, {"L40", ""}, 181, 90.5, "L40"},
        {8, 9, {"L4", ""}, 121, 30.3, "L4"},
        {8, 9, {"4090", ""}, 165, 82.6, "GeForce RTX 4090"},
        {10, 0, {"GB200", ""}, 2500, 80, "GB200"},
        {10, 0, {"", ""}, 2250, 80, "B200"},
    };
    const std::vector<std::string> words = gpu_name_words(name);
    auto has = [&](const char* w) {
        if (!*w) return true;
        for (const std::string& x : words) if (x == w) return true;
        return false;
    };
    for (const Row& r : rows)
        if (r.major == cc_major && r.minor == cc_minor && has(r.words[0]) && has(r.words[1]))
            return GpuPeak{(fp32 ? r.tflops32 : r.tflops16) * 1e12, r.part};
    return GpuPeak{};
}

// MFU in percent: flops_per_token * tok_s against `peak` FLOP/s (all GPUs together); NaN when
// the peak is unknown (0), so no figure is ever printed against a made-up peak.
inline double mfu_percent(double flops_per_token, double tok_s, double peak) {
    return peak > 0 ? 100.0 * flops_per_token * tok_s / peak : NAN;
}
