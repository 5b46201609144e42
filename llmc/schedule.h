// Learning-rate schedules. Host-only; unit-tested on the CPU.
//   linear warmup from lr/warmup to lr over `warmup` steps, then decay to lr*final_frac by
//   max_steps: "cosine" (half a cosine period), "linear", "constant" (no decay), or "wsd"
//   (warmup-stable-decay: the peak held until the last decay_frac of max_steps, at least one step,
//   then a linear decay that reaches lr*final_frac AT the last step; cosine and linear reach it
//   one step after the last, as the PyTorch reference's schedule does). WSD's point: until its
//   decay starts, a run can be extended (--resume with a larger --max-steps) without having spent
//   any of its learning rate on a schedule it no longer follows.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>

struct LRSchedule {
    std::string kind = "cosine";
    float lr = 6e-4f;
    int warmup = 0;
    int max_steps = 1;
    float final_frac = 0.0f;
    float decay_frac = 0.2f;   // wsd: the share of max_steps at the end over which it decays
};

inline bool lr_schedule_kind_valid(const std::string& k) { return k == "cosine" || k == "linear" || k == "constant" || k == "wsd"; }

// The 0-based step at which the decay starts: after warmup; for wsd, decay_frac of max_steps
// (at least one step) before the end. (For warmup >= max_steps or "constant": no decay at all.)
inline int lr_decay_start(const LRSchedule& s) {
    if (s.kind != "wsd") return s.warmup;
    const int decay_steps = std::max(1, (int)std::lround((double)s.decay_frac * s.max_steps));
    return std::max(s.warmup, s.max_steps - decay_steps);
}

// The learning rate of 0-based step `step`.
inline float lr_at(const LRSchedule& s, int step) {
    if (step < s.warmup) return s.lr * (float)(step + 1) / (float)s.warmup;
    if (s.kind == "constant" || s.max_steps <= s.warmup) return s.lr;
    const bool wsd = s.kind == "wsd";
    const int start = lr_decay_start(s);
    if (step < start) return s.lr;   // (start < max_steps: warmup < max_steps here, and a decay takes >= 1 step)
    float progress = (float)(step - start + (wsd ? 1 : 0)) / (float)(s.max_steps - start);
    progress = progress < 0.0f ? 0.0f : (progress > 1.0f ? 1.0f : progress);
    const float min_lr = s.lr * s.final_frac;
    const float decay = s.kind == "cosine" ? 0.5f * (1.0f + cosf((float)M_PI * progress)) : 1.0f - progress;   // linear, wsd
    return min_lr + (s.lr - min_lr) * decay;
}
