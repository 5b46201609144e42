// Throughput figures: model FLOPs utilization (MFU) against the GPU's datasheet peak, and the
// alpha-beta fit of dev/interconnect's all-reduce sweep. Host-only.
//
// MFU = the model's training FLOPs per second / the GPU's peak. The peak is the datasheet's
// dense tensor-core rate for 16-bit inputs with fp32 accumulation (what our GEMMs use), or the
// plain fp32 rate for FP32 builds (their matmuls are exact fp32: no tensor cores). One compute
// capability covers parts of very different peaks (an H100 PCIe runs 756 TFLOP/s, an H100 SXM
// 989), so the part is told apart by the words of its name. An unknown GPU has no peak: MFU is
// then "n/a" (NaN) unless --peak-tflops gives one.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
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

// dev/interconnect's fit of its all-reduce sweep on n ranks: time(bytes) = alpha + bytes * 2(n-1)/n
// / busbw, least squares over the (bytes, seconds) of the sweep (what dev/scaling.py's predictor
// reads; alpha clamped at 0). ok false, with why, where the sweep fixes no bandwidth: fewer than
// two sizes (--max-mb 1: 0/0), one rank (nothing crosses a link), or times that do not grow with
// the size (a slope <= 0, whose inverse is no bandwidth: sizes all latency-bound, as 1 and 2 MiB
// on 4 H200s, 29.0 and 28.7 us, which fitted "busbw_gbs=-5242.9").
struct AllReduceFit {
    bool ok = false;
    double alpha_s = 0, busbw_gbs = 0;
    std::string why;
};
inline AllReduceFit allreduce_fit(const std::vector<std::pair<double, double>>& bytes_seconds, int n) {
    AllReduceFit f;
    if (n < 2) { f.why = "one rank: nothing crosses a link"; return f; }
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& [bytes, s] : bytes_seconds) {
        const double x = bytes * 2.0 * (n - 1) / n;   // the bytes each link carries
        sx += x; sy += s; sxx += x * x; sxy += x * s;
    }
    const double k = (double)bytes_seconds.size(), spread = k * sxx - sx * sx;
    if (k < 2 || !(spread > 0)) { f.why = "fewer than two sizes in the sweep (a larger --max-mb)"; return f; }
    const double slope = (k * sxy - sx * sy) / spread;   // seconds per byte on a link
    if (!(slope > 0) || !std::isfinite(slope)) {
        f.why = "the times do not grow with the size (latency-bound sizes: a larger --max-mb)";
        return f;
    }
    f.ok = true;
    f.alpha_s = std::max((sy - slope * sx) / k, 0.0);
    f.busbw_gbs = 1.0 / slope / 1e9;
    return f;
}
