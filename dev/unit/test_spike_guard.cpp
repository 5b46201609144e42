// The spike guard's arithmetic (llmc/spike_guard.h), which the GPU runs inside the step decision:
// the level and spread against direct computations (plain means and averages while the windows
// fill, exponential averages written out as weighted sums after), the z-score and when there is
// none (too few values, zero spread, non-finite values), what a steady trend costs (z = -1), and
// the decisions, alone and over a made-up run with spikes in it.
#include "llmc/spike_guard.h"
#include "dev/unit/check.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

// the window most checks use, and the level's (shorter) averaging window
static const int W = 50, L = SPIKE_LEVEL_STEPS;

static bool close(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::max(1.0, std::fabs(b)); }

// Statistics with a known level (5) and spread (0.2), for the z-score and the caps.
static RunningStats known_stats() { return RunningStats{5.0, 0.04, 1000}; }

// The level and spread while the windows fill, against direct computations: levels[k] = the level
// after values 0..k; deviations from the level before each value; plain means and plain averages.
// Leaves in *s the statistics of these W values, which test_spread_after_window continues.
static void test_level_and_spread_while_filling(std::mt19937& rng, std::normal_distribution<double>& normal, RunningStats* s) {
    std::vector<double> xs, levels, dev2;
    bool level_ok = true, spread_ok = true;
    for (int i = 0; i < W; i++) {
        const double x = 4.0 + 0.3 * normal(rng);
        if (i > 0) dev2.push_back((x - levels.back()) * (x - levels.back()));
        xs.push_back(x);
        double level = 0;
        if (i < L) { for (double v : xs) level += v / xs.size(); }        // plain mean of all so far
        else level = levels.back() + (x - levels.back()) / L;           // then 1/8 of each new deviation
        levels.push_back(level);
        running_add(s, x, W);
        double avg = 0;
        for (double d : dev2) avg += d / dev2.size();
        level_ok = level_ok && s->count == i + 1 && close(s->level, level, 1e-12);
        spread_ok = spread_ok && close(s->spread2, i == 0 ? 0.0 : avg, 1e-10);
    }
    CHECK(level_ok, "level: the plain mean of the first 8 values, then an exponential average (weight 1/8)");
    CHECK(spread_ok, "spread^2: the plain average of the squared deviations while `window` fills (50 values)");
}

// After the window (s: its first W values): spread^2 = (1-a)^n spread^2_W + sum_k a (1-a)^(n-1-k) d_k^2
// (a = 1/window), the count, and the spread of stationary noise.
static void test_spread_after_window(std::mt19937& rng, std::normal_distribution<double>& normal, RunningStats s) {
    const double a = 1.0 / W, spread2_w = s.spread2;
    std::vector<double> later_dev2;
    for (int i = 0; i < 300; i++) {
        const double x = 4.0 + 0.3 * normal(rng);   // the same noise: no deviation of 4 spreads (no cap) in these 300
        later_dev2.push_back((x - s.level) * (x - s.level));
        running_add(&s, x, W);
    }
    double expect = std::pow(1 - a, (double)later_dev2.size()) * spread2_w;
    for (size_t k = 0; k < later_dev2.size(); k++) expect += a * std::pow(1 - a, (double)(later_dev2.size() - 1 - k)) * later_dev2[k];
    CHECK(close(s.spread2, expect, 1e-10), "after the window: spread^2 is the exponential average (weight 1/window) of squared deviations");
    CHECK_EQ(s.count, W + 300, "count: every finite value");
    // stationary noise of variance 0.09: a deviation from a level of 8 has variance 0.09 * 16/15
    CHECK(s.spread2 > 0.06 && s.spread2 < 0.14, "the spread is the noise's (spread^2 " + std::to_string(s.spread2) + ", expected ~0.096)");
}

// A steady trend: a linear fall costs z its 8-step lag only.
static void test_linear_trend() {
    RunningStats ramp{};
    for (int i = 0; i < 2000; i++) running_add(&ramp, 10.0 - 0.003 * i, 128);
    CHECK(close(running_z(ramp, 10.0 - 0.003 * 2000, 128), -1.0, 1e-6), "an exact linear fall: z = -1 (" +
          std::to_string(running_z(ramp, 10.0 - 0.003 * 2000, 128)) + ")");
    CHECK(close(running_z(ramp, 10.0 - 0.003 * 2000 + 10 * 8 * 0.003, 128), 9.0, 1e-6), "... and a jump of 10 lags on top of it: z = 9");
}

// z, and when there is none (too few values, zero spread, non-finite values); the count's saturation.
static void test_z_and_when_there_is_none() {
    RunningStats few{};
    for (int i = 0; i < W - 1; i++) running_add(&few, 1.0 + 0.01 * i, W);
    CHECK(std::isnan(running_z(few, 100.0, W)), "no z before `window` values");
    running_add(&few, 1.5, W);
    CHECK(std::isfinite(running_z(few, 100.0, W)), "a z once there are `window` values");
    RunningStats flat{};
    for (int i = 0; i < 2 * W; i++) running_add(&flat, 3.0, W);
    CHECK(flat.spread2 == 0 && std::isnan(running_z(flat, 30.0, W)), "no z while every value was the same (spread 0)");
    const RunningStats known = known_stats();
    CHECK(close(running_z(known, 5.6, W), 3.0, 1e-12) && close(running_z(known, 4.8, W), -1.0, 1e-12), "z = (x - level) / spread");
    CHECK(std::isnan(running_z(known, NAN, W)) && std::isnan(running_z(known, INFINITY, W)), "no z of a non-finite value");
    RunningStats kept = known;
    running_add(&kept, NAN, W); running_add(&kept, INFINITY, W); running_add(&kept, -INFINITY, W);
    CHECK(kept.level == known.level && kept.spread2 == known.spread2 && kept.count == known.count,
          "non-finite values are left out of the statistics");
    RunningStats big{0.0, 1.0, 2147483647};
    running_add(&big, 1.0, W);
    CHECK(big.count == 2147483647 && close(big.level, 1.0 / L, 1e-15), "count saturates (and the level still moves by 1/8)");
}

// The decisions: the loss at level 5 +- 0.1; the norm's logarithm at level 0 +- 0.1 (norm 1, typical
// factor e^0.1); and that a step's values enter the statistics whether it is skipped or not.
static void test_decisions() {
    const SpikeGuard off{}, both{5.0f, 5.0f, W}, loss_only{5.0f, 0.0f, W};
    SpikeStats st{};
    st.loss = {5.0, 0.01, 1000}; st.norm = {0.0, 0.01, 1000};
    auto decide = [&](const SpikeGuard& g, double loss, double norm) { SpikeStats c = st; return spike_check(g, &c, loss, norm); };
    auto norm_at = [](double z) { return std::exp(0.1 * z); };
    CHECK_EQ(decide(both, 5.1, norm_at(1)).reason, (int)SKIP_NONE, "ordinary step: applied");
    CHECK_EQ(decide(both, 5.6, 1.0).reason, (int)SKIP_LOSS_SPIKE, "loss at z 6: loss spike");
    CHECK_EQ(decide(both, 5.0, norm_at(6)).reason, (int)SKIP_NORM_SPIKE, "norm at z 6 (1.82 times the level): norm spike");
    CHECK_EQ(decide(both, 5.6, norm_at(6)).reason, (int)SKIP_LOSS_SPIKE, "both: the loss is named");
    CHECK_EQ(decide(both, 5.6, INFINITY).reason, (int)SKIP_NONFINITE, "a non-finite norm comes first");
    CHECK_EQ(decide(both, 4.0, norm_at(-30)).reason, (int)SKIP_NONE, "far BELOW the level: applied");
    CHECK_EQ(decide(both, 5.49, norm_at(4.9)).reason, (int)SKIP_NONE, "z 4.9: applied at 5");
    CHECK_EQ(decide(off, 50.0, 100.0).reason, (int)SKIP_NONE, "guards off: a spike is applied");
    CHECK_EQ(decide(loss_only, 5.0, 100.0).reason, (int)SKIP_NONE, "norm guard off: a norm spike is applied");
    CHECK(close(decide(off, 5.3, 1.2).loss_z, 3.0, 1e-12) && close(decide(off, 5.3, norm_at(2)).norm_z, 2.0, 1e-12),
          "z-scores (the norm's of its logarithm) reported with the guards off");
    SpikeStats zero_norm = st;
    const SpikeCheck z0 = spike_check(both, &zero_norm, 5.0, 0.0);
    CHECK(z0.reason == SKIP_NONE && std::isnan(z0.norm_z) && zero_norm.norm.count == st.norm.count, "a norm of 0: no z, left out");
    SpikeStats after = st;
    spike_check(both, &after, 5.6, norm_at(6));
    RunningStats lref = st.loss, nref = st.norm;
    running_add(&lref, 5.6, W); running_add(&nref, 0.6, W);
    CHECK(after.loss.level == lref.level && after.loss.spread2 == lref.spread2 && close(after.norm.level, nref.level, 1e-15) &&
          after.norm.count == nref.count, "a skipped step's values still enter the statistics (the norm as its logarithm)");
}

// A deviation counts into the spread as at most SPIKE_CAP_Z spreads (here 6 and 60 spreads: both
// count as 4), into the level as up to 16, and neither is capped before 8 values have been seen.
static void test_deviation_caps() {
    const RunningStats known = known_stats();
    RunningStats six = known, sixty = known;
    running_add(&six, 5.0 + 6 * 0.2, W); running_add(&sixty, 5.0 + 60 * 0.2, W);
    const double capped = 0.04 + (16 * 0.04 - 0.04) / W;
    CHECK(close(six.spread2, capped, 1e-12) && close(sixty.spread2, capped, 1e-12) && sixty.level > six.level,
          "a spike's deviation counts into the spread as 4 spreads (into the level as up to 16)");
    RunningStats early{};
    running_add(&early, 1.0, W); running_add(&early, 1.1, W); running_add(&early, 100.0, W);
    CHECK(close(early.spread2, (0.01 + (100.0 - 1.05) * (100.0 - 1.05)) / 2, 1e-12) && close(early.level, 102.1 / 3, 1e-12),
          "no caps before 8 values have been seen");
    RunningStats lvl = known;
    running_add(&lvl, 5.0 + 100 * 0.2, W);
    CHECK(close(lvl.level, 5.0 + 16 * 0.2 / L, 1e-12), "a deviation of 100 spreads moves the level as one of 16 would");
}

// One spike does not blind the guard to the next: a loss of 16 among 3 +- 0.05, then spikes
// of z ~10 (3.5) 1, 5, 10 and 50 steps later, each on its own copy of the statistics.
static void test_spike_after_spike(std::mt19937& rng, std::normal_distribution<double>& normal) {
    RunningStats base{};
    for (int i = 0; i < 300; i++) running_add(&base, 3.0 + 0.05 * normal(rng), 128);
    running_add(&base, 16.0, 128);
    double weakest = 1e9;
    for (int after = 1; after <= 50; after++) {
        if (after == 1 || after == 5 || after == 10 || after == 50) weakest = std::min(weakest, running_z(base, 3.5, 128));
        running_add(&base, 3.0 + 0.05 * normal(rng), 128);
    }
    CHECK(weakest > 6, "after a loss of 16 among 3 +- 0.05, a spike of 0.5 1-50 steps later still scores z > 6 (weakest " +
          std::to_string(weakest) + ")");
}

// Nor does a tiny outlier make the ordinary steps after it look like spikes: one gradient
// norm of 1e-10 among norms of 1 x/ e^0.1 (log statistics, as spike_check keeps them).
static void test_tiny_outlier(std::mt19937& rng, std::normal_distribution<double>& normal) {
    SpikeStats s2{};
    const SpikeGuard g2{0.0f, 6.0f, 128};
    int false_skips = 0;
    for (int i = 0; i < 400; i++) {
        const double norm = i == 300 ? 1e-10 : std::exp(0.1 * normal(rng));
        false_skips += spike_check(g2, &s2, 3.0, norm).reason != SKIP_NONE;
    }
    CHECK_EQ(false_skips, 0, "one norm of 1e-10 among norms around 1: no step skipped after it");
}

// A lasting jump of the loss (+1 over noise 0.02) is skipped for a while, then followed.
static void test_lasting_jump(std::mt19937& rng, std::normal_distribution<double>& normal) {
    SpikeStats s3{};
    const SpikeGuard g3{6.0f, 0.0f, 128};
    int skipped_in_a_row = 0, skipped_late = 0;
    for (int i = 0; i < 500; i++) {
        const double loss = 3.0 + (i >= 300 ? 1.0 : 0.0) + 0.02 * normal(rng);
        const bool skip = spike_check(g3, &s3, loss, 1.0).reason != SKIP_NONE;
        if (i >= 300 && i < 360 && skip) skipped_in_a_row++;
        if (i >= 360) skipped_late += skip;
    }
    CHECK(skipped_in_a_row >= 5 && skipped_in_a_row <= 20 && skipped_late == 0,
          "a lasting jump of 50 spreads: skipped " + std::to_string(skipped_in_a_row) + " times (5-20), then never (" +
          std::to_string(skipped_late) + ")");
}

// A made-up run: 1000 steps of a noisy loss falling fast, then slowly; spikes at three steps,
// exactly which are skipped.
static void test_made_up_run(std::mt19937& rng, std::normal_distribution<double>& normal) {
    SpikeStats run{};
    const SpikeGuard g{6.0f, 6.0f, 128};
    std::vector<int> skipped;
    double worst_ordinary = -1e9;
    for (int i = 0; i < 1000; i++) {
        double loss = 6.0 * std::exp(-i / 150.0) + 3.0 + 0.03 * normal(rng), norm = 0.8 + 0.05 * normal(rng);
        const bool spike = i == 200 || i == 500 || i == 800;
        if (i == 200 || i == 800) loss += 1.5;   // at step 200 the spread still holds the fast fall: z ~8
        if (i == 500) norm *= 3;
        const SpikeCheck c = spike_check(g, &run, loss, norm);
        if (c.reason != SKIP_NONE) skipped.push_back(i);
        if (!spike && i >= 128) worst_ordinary = std::max(worst_ordinary, std::max(c.loss_z, c.norm_z));
    }
    CHECK(skipped == (std::vector<int>{200, 500, 800}), "a run of 1000 steps: exactly the three spikes skipped (" +
          std::to_string(skipped.size()) + " skipped; the ordinary steps' largest z " + std::to_string(worst_ordinary) + ")");
}

// --max-bad-steps' count: inf/nan steps add, applied steps reset, spike skips leave it.
static void test_bad_streak() {
    int streak = 0;
    for (int reason : {SKIP_NONFINITE, SKIP_LOSS_SPIKE, SKIP_NONFINITE, SKIP_NORM_SPIKE, SKIP_NONFINITE}) streak = bad_streak(streak, reason);
    CHECK_EQ(streak, 3, "inf/nan steps with spike skips between them: a row of 3");
    CHECK(bad_streak(streak, SKIP_NONE) == 0 && bad_streak(0, SKIP_LOSS_SPIKE) == 0, "an applied step ends the row; spikes alone start none");
}

int main() {
    // one noise source, shared in this order, so each test draws the values it always drew
    // (the distribution keeps a spare value between calls: it is shared too, not made anew)
    std::mt19937 rng(3);
    std::normal_distribution<double> normal(0.0, 1.0);
    RunningStats s{};
    test_level_and_spread_while_filling(rng, normal, &s);
    test_spread_after_window(rng, normal, s);
    test_linear_trend();
    test_z_and_when_there_is_none();
    test_decisions();
    test_deviation_caps();
    test_spike_after_spike(rng, normal);
    test_tiny_outlier(rng, normal);
    test_lasting_jump(rng, normal);
    test_made_up_run(rng, normal);
    test_bad_streak();
    return check_finish();
}
