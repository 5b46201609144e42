// Learning-rate schedules. Host-only; unit-tested on the CPU.
//   linear warmup from lr/warmup to lr over `warmup` steps, then decay to lr*final_frac by
//   max_steps: "cosine" (half a cosine period), "linear", or "constant" (no decay).
#pragma once
#include <cmath>
#include <string>

struct LRSchedule {
    std::string kind = "cosine";
    float lr = 6e-4f;
    int warmup = 0;
    int max_steps = 1;
    float final_frac = 0.0f;
};

inline bool lr_schedule_kind_valid(const std::string& k) { return k == "cosine" || k == "linear" || k == "constant"; }

// The learning rate of 0-based step `step`.
inline float lr_at(const LRSchedule& s, int step) {
    if (step < s.warmup) return s.lr * (float)(step + 1) / (float)s.warmup;
    if (s.kind == "constant" || s.max_steps <= s.warmup) return s.lr;
    float progress = (float)(step - s.warmup) / (float)(s.max_steps - s.warmup);
    progress = progress < 0.0f ? 0.0f : (progress > 1.0f ? 1.0f : progress);
    const float min_lr = s.lr * s.final_frac;
    const float decay = s.kind == "linear" ? 1.0f - progress : 0.5f * (1.0f + cosf((float)M_PI * progress));
    return min_lr + (s.lr - min_lr) * decay;
}
