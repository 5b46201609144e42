// The spike guard (--skip-loss-z, --skip-norm-z): a step whose loss or gradient norm lies far above
// what the run has been producing is not applied. Long runs meet such steps: a batch of garbage
// (a corrupt document, a page of base64) gives a loss far above its neighbours and a gradient that
// can throw the weights off for thousands of steps, or for good. Skipping that one update costs one
// batch; applying it can cost the run.
//
// "Far above" is measured against the run's recent behaviour, in two parts:
//   level  the recent value: an exponential average over ~8 steps, which follows the trend of a
//          falling loss closely (it lags a steady trend by 7 steps' change);
//   spread the typical deviation of a value from the level before it: the root of the average
//          squared deviation over ~`window` steps;
// and z = (x - level) / spread, x itself not yet included. Per finite value x (count: the values
// before it, s: the spread):
//   count 0:  level = x, s^2 = 0
//   else:     d = x - level,  s^2   += (min(d^2, 4^2 s^2) - s^2) / min(count, window)
//                             level += clamp(d, -16 s, 16 s) / min(count + 1, 8)
// The first 8 levels are plain means and the first `window` spreads plain averages, then
// exponential averages. The caps apply once 8 values have been seen (and while s > 0): a
// deviation counts into the spread as at most 4 spreads and moves the level by at most 16/8
// spreads, so one spike loosens the guard for the next ones neither through the spread nor
// through a raised level that every ordinary step after it would then lie far below (uncapped, a
// loss of 16 among losses of 3 +- 0.05 hid a spike of z = 10 for the next ~150 steps; one tiny
// gradient norm made the 9 ordinary ones after it look like spikes). No decision before `window`
// values, nor while the spread is 0.
// Why two speeds: against one average over the whole window (llm.c's outlier detector takes the
// mean and standard deviation of the last 128 values), a falling loss is itself an outlier of size
// of its own drop over the window, which inflates the spread; measured from a level that follows
// the trend, a steady fall costs z only its 8-step lag (an exactly linear fall gives every step
// z = -1), and a spike stands out against the noise alone.
// The gradient norm's statistics are those of its logarithm: a norm changes by factors (from a
// random initialization it falls tenfold within tens of steps, and a spike is a multiple of the
// usual norm), so its deviations are measured as ratios; the loss, a log-probability already, by
// differences. (Measured: on a d12 from a random initialization, with the norm itself, steps
// 1-50's fall of the norm still made up most of the spread 100 steps later, and a batch of random
// tokens that multiplied the norm by 5.7 scored z = 3.8; the loss of that batch scored 27.)
// Every finite value enters the statistics, a skipped one too (as in llm.c): the level catches up
// with a lasting change, which then stops being an outlier instead of being refused for ever. At
// --skip-loss-z 6, a lasting jump of the loss by 1 (noise 0.02; window 128: 50 spreads) is skipped
// for ~15 steps, by 2 (100 spreads) for ~23, by 10 for ~47. Such a streak ends by itself: with no update applied
// the loss stops moving, and the level catches up. So spike skips do not count towards the
// trainer's --max-bad-steps (which is for inf/nan gradients; bad_streak below), nor do they end
// a streak of those. What the guard cannot tell from a spike: noise that suddenly grows by
// orders of magnitude (the spread grows by at most ~6 % per step at window 128, ~40 % at 16),
// flagged until the spread has caught up.
//
// The decision runs on the GPU, inside the update's step decision (llmc/norm.cuh), so no
// round-trip to the host sits between backward and the update; the statistics come back with the
// step's other scalars, and travel with checkpoints (llmc/checkpoint.h). Plain C++ (host and
// device), so that a CPU unit test (dev/unit/test_spike_guard.cpp) checks the arithmetic.
#pragma once
#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define SPIKE_HD __host__ __device__
#else
#define SPIKE_HD
#endif

// The running statistics of one series (see above). All zero: nothing seen yet.
struct RunningStats {
    double level;    // the recent value: z's reference point
    double spread2;  // the capped average squared deviation from the level: z's unit, squared
    int32_t count;   // finite values seen (saturates at INT32_MAX)
};
struct SpikeStats { RunningStats loss, norm; };   // norm: of log(gradient norm)

// The options: thresholds in spreads (0: that guard off) and the spread's averaging window.
struct SpikeGuard {
    float loss_z = 0, norm_z = 0;
    int window = 128;
};
constexpr int SPIKE_LEVEL_STEPS = 8;   // the level's averaging window
constexpr double SPIKE_CAP_Z = 4;      // the largest deviation, in spreads, that counts into the spread
constexpr double SPIKE_LEVEL_CAP_Z = 16;   // ... and that moves the level
constexpr int SPIKE_MIN_WINDOW = 16;   // --spike-window's least: below it ordinary noise makes false alarms

// Why a step was not applied (StepScalars::skip; 0: it was).
enum SkipReason : int { SKIP_NONE = 0, SKIP_NONFINITE = 1, SKIP_LOSS_SPIKE = 2, SKIP_NORM_SPIKE = 3 };
inline const char* skip_reason_name(int r) {   // as log.jsonl's "skip" field writes it
    return r == SKIP_NONE ? "" : r == SKIP_NONFINITE ? "nonfinite" : r == SKIP_LOSS_SPIKE ? "loss_spike" : r == SKIP_NORM_SPIKE ? "norm_spike" : "?";
}
// --max-bad-steps' count after a step that ended for `reason`: inf/nan gradients add one, an
// applied step ends the streak, a spike skip leaves it as it is (see above).
inline int bad_streak(int streak, int reason) {
    return reason == SKIP_NONFINITE ? streak + 1 : reason == SKIP_NONE ? 0 : streak;
}

// How many spreads x lies above the level of `s`; NaN (no decision) before `window` values, while
// the spread is 0, or for a non-finite x.
SPIKE_HD inline double running_z(const RunningStats& s, double x, int window) {
    if (s.count < window || !(s.spread2 > 0) || !isfinite(x)) return NAN;
    return (x - s.level) / sqrt(s.spread2);
}

// Adds x to the statistics (a non-finite x is left out).
SPIKE_HD inline void running_add(RunningStats* s, double x, int window) {
    if (!isfinite(x)) return;
    const int32_t n = s->count;
    if (n == 0) {
        s->level = x; s->spread2 = 0;
    } else {
        const double d = x - s->level, spread = sqrt(s->spread2);
        const bool capped = n >= SPIKE_LEVEL_STEPS && spread > 0;
        const double dc = capped ? fmin(fmax(d, -SPIKE_LEVEL_CAP_Z * spread), SPIKE_LEVEL_CAP_Z * spread) : d;
        const double d2 = capped ? fmin(d * d, SPIKE_CAP_Z * SPIKE_CAP_Z * s->spread2) : d * d;
        s->spread2 += (d2 - s->spread2) / (n < window ? n : window);
        s->level += dc / (n < SPIKE_LEVEL_STEPS - 1 ? n + 1 : SPIKE_LEVEL_STEPS);
    }
    if (n < INT32_MAX) s->count = n + 1;
}

struct SpikeCheck {
    int reason;             // SkipReason
    double loss_z, norm_z;  // NaN where no decision was possible
};

// One step's decision from its mean loss and (unscaled) gradient norm, then both added to the
// statistics (the norm as its logarithm). Non-finite gradients come first (nothing to apply), then
// the loss, then the norm.
SPIKE_HD inline SpikeCheck spike_check(const SpikeGuard& g, SpikeStats* st, double loss, double norm) {
    const double log_norm = log(norm);   // -inf for a norm of 0, NaN for a NaN: left out, no z
    SpikeCheck c{SKIP_NONE, running_z(st->loss, loss, g.window), running_z(st->norm, log_norm, g.window)};
    if (!isfinite(norm)) c.reason = SKIP_NONFINITE;
    else if (g.loss_z > 0 && c.loss_z > g.loss_z) c.reason = SKIP_LOSS_SPIKE;   // NaN compares false: no decision
    else if (g.norm_z > 0 && c.norm_z > g.norm_z) c.reason = SKIP_NORM_SPIKE;
    running_add(&st->loss, loss, g.window);
    running_add(&st->norm, log_norm, g.window);
    return c;
}
