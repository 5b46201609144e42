// Dynamic loss scaling for fp16 training (host logic; the overflow flag comes from the device).
// fp16 gradients underflow: values below 6e-8 become 0. Multiplying the loss by a large scale S
// multiplies every gradient by S and lifts them into range; AdamW divides S back out. Too large
// an S overflows to inf instead, so: start high (2^16), halve and skip the update on any inf/nan,
// double after `growth_interval` clean steps in a row. bf16/fp32 need none of this (scale 1).
#pragma once

struct LossScaler {
    bool enabled = false;
    float scale = 1.0f;
    int clean_steps = 0;           // consecutive steps without overflow
    int growth_interval = 1000;
    float min_scale = 1.0f;        // never scale below 1: at that point overflow is a real problem
    float max_scale = 16777216.0f; // 2^24

    static LossScaler make(bool enabled, float initial = 65536.0f) {
        LossScaler s;
        s.enabled = enabled;
        s.scale = enabled ? initial : 1.0f;
        return s;
    }
    // Called once per step with whether the gradients overflowed. Returns true if the update was
    // (or must be) skipped.
    bool update(bool overflow) {
        if (!enabled) return overflow;
        if (overflow) {
            scale = scale * 0.5f < min_scale ? min_scale : scale * 0.5f;
            clean_steps = 0;
            return true;
        }
        if (++clean_steps >= growth_interval) {
            scale = scale * 2.0f > max_scale ? max_scale : scale * 2.0f;
            clean_steps = 0;
        }
        return false;
    }
};
