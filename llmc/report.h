// What a run reports, as text: the line each step prints and the object it logs, why a step was
// skipped, the evaluations' lines, and the RESULT summary that benchmarks and dev/scaling.py read.
// Host-only (dev/unit/test_report checks it): the trainer decides when to print, this header
// what. Rank 0 prints; only the per-rank phase times need every rank (train_gpt2.cu sums them).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "logger.h"        // json_number, json_string, text_printf
#include "spike_guard.h"   // SpikeStats, SkipReason
#include "timing.h"        // GpuPeak, mfu_percent

// What one optimizer step returns (llmc/gpt2_step.cuh, gpt2_train_step): identical on every rank,
// except the phase times, which are the rank's own.
struct StepResult {
    float loss, grad_norm;
    bool skipped;
    int skip_reason;        // SkipReason (llmc/spike_guard.h)
    float loss_z, norm_z;   // the spike guard's measures of this step (NaN: no statistics yet)
    std::string bad_ranks;  // skipped: the ranks whose own gradients held inf/nan ("0" on one GPU)
    // the compute stream's phases, and comm_ms: the communication stream's time on the reductions
    // (grad_reducer.cuh: the collectives with their inf/nan scans and, int8, (de)quantizing)
    float fwd_ms = 0, bwd_ms = 0, exposed_ms = 0, update_ms = 0, comm_ms = 0;
    // The last micro-step's backward (the one the reduction overlaps) and the mean backward of the
    // others: their difference is what the concurrent communication costs the compute (-1: accum 1)
    float bwd_last_ms = 0, bwd_other_ms = -1;
    double comm_bytes = 0;
    int stop_votes = 0;     // ranks whose caller asked to stop during this step (summed with the loss)
};

// The run banner's line saying what MFU is measured against (llmc/timing.h's peaks).
inline std::string peak_text(const GpuPeak& p, const std::string& name, int cc_major, int cc_minor, bool fp32) {
    if (p.flops <= 0)
        return text_printf("MFU: n/a (no datasheet peak known for %s, sm_%d%d; --peak-tflops sets one)", name.c_str(), cc_major, cc_minor);
    if (p.part == "--peak-tflops") return text_printf("MFU against %.1f TFLOP/s per GPU (--peak-tflops)", p.flops / 1e12);
    return text_printf("MFU against %.1f TFLOP/s per GPU (%s datasheet, dense %s)", p.flops / 1e12, p.part.c_str(),
                       fp32 ? "fp32, no tensor cores" : "16-bit tensor cores");
}

// ----------------------------------------------------------------------------------------------
// One training step: the run's side of it (the StepResult is the step's).
struct StepReport {
    int step, steps;          // steps done (this one included), and the run's length
    double lr, scale;         // the learning rate it used; the FP16 loss scale after it (1: none)
    double ms, tok_s, mfu;    // its time on the compute stream, tokens/s and MFU (%) from that time (NaN: no peak known)
    double eta_s;             // the rest of the run at the mean step time so far
};

// The console line: "step   12/100 | loss ... | ETA 3s".
inline std::string step_text(const StepReport& r, const StepResult& s) {
    return text_printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | scale %.0f%s | %.2f ms (fwd %.1f bwd %.1f exposed comm %.2f"
                       " opt %.2f) | %.0f tok/s | MFU %s | ETA %.0fs",
                       r.step, r.steps, s.loss, s.grad_norm, r.lr, r.scale, s.skipped ? " (skipped)" : "", r.ms, s.fwd_ms, s.bwd_ms,
                       s.exposed_ms, s.update_ms, r.tok_s, std::isnan(r.mfu) ? "n/a" : text_printf("%.1f%%", r.mfu).c_str(), r.eta_s);
}

// log.jsonl's object for the step (inf/nan values as null; "skip": skip_reason_name).
inline std::string step_json(const StepReport& r, const StepResult& s) {
    return "{\"type\":\"step\",\"step\":" + std::to_string(r.step) + ",\"loss\":" + json_number(s.loss, "%.9g") +
           ",\"norm\":" + json_number(s.grad_norm) + ",\"lr\":" + json_number(r.lr) + ",\"scale\":" + json_number(r.scale) +
           ",\"skipped\":" + std::to_string((int)s.skipped) + ",\"skip\":\"" + skip_reason_name(s.skip_reason) +
           "\",\"loss_z\":" + json_number(s.loss_z) + ",\"norm_z\":" + json_number(s.norm_z) + ",\"ms\":" + json_number(r.ms) +
           ",\"tok_s\":" + json_number(r.tok_s) + ",\"mfu\":" + json_number(r.mfu) + ",\"exposed_comm_ms\":" + json_number(s.exposed_ms) + "}";
}

// Why step `step` was skipped: the ranks with non-finite gradients, or how far the spike lay from
// the running statistics as they were before the step (`before`; the thresholds as given).
inline std::string skip_text(int step, const StepResult& s, const SpikeStats& before, double skip_loss_z, double skip_norm_z) {
    if (s.skip_reason == SKIP_NONFINITE)
        return text_printf("step %d skipped: non-finite gradients (%s)", step,
                           s.bad_ranks.empty() ? "every rank's own gradients were finite: the average overflowed"
                                               : ("produced on rank(s) " + s.bad_ranks).c_str());
    if (s.skip_reason == SKIP_LOSS_SPIKE)
        return text_printf("step %d skipped: loss %.4f, z %.1f against its recent level %.4f +- %.4f (--skip-loss-z %g)", step, s.loss,
                           s.loss_z, before.loss.level, std::sqrt(before.loss.spread2), skip_loss_z);
    // the norm's statistics are of its logarithm: a level and a typical factor
    return text_printf("step %d skipped: gradient norm %.4f, z %.1f against its recent level %.4f x/ %.4f (--skip-norm-z %g)", step,
                       s.grad_norm, s.norm_z, std::exp(before.norm.level), std::exp(std::sqrt(before.norm.spread2)), skip_norm_z);
}

// The error that stops a run after `in_a_row` steps skipped for inf/nan gradients (--max-bad-steps).
inline std::string bad_steps_text(int in_a_row, const StepResult& last, int step, int max_bad_steps) {
    return text_printf("%d step%s in a row skipped for inf/nan gradients (the last one from rank(s) %s) at step %d; "
                       "stopping (--max-bad-steps %d)", in_a_row, in_a_row == 1 ? "" : "s",
                       last.bad_ranks.empty() ? "none alone" : last.bad_ranks.c_str(), step, max_bad_steps);
}

// ----------------------------------------------------------------------------------------------
// Evaluations and samples: each a console text and a log.jsonl object.
inline std::string val_text(int step, double loss) { return text_printf("step %d: val loss %.6f", step, loss); }
inline std::string val_json(int step, double loss) {
    return "{\"type\":\"eval\",\"step\":" + std::to_string(step) + ",\"val_loss\":" + json_number(loss, "%.9g") + "}";
}

// --hellaswag: accuracy (right when the ending with the lowest summed completion loss is the
// label), normalized accuracy (the lowest mean loss per token), the mean completion loss per
// token, over `examples` examples in `seconds`.
struct ChoiceScores { double acc, acc_norm, loss, examples, seconds; };
inline std::string hellaswag_text(int step, const ChoiceScores& c) {
    return text_printf("step %d: hellaswag acc %.6f acc_norm %.6f completion loss %.6f (%.0f examples, %.2f s)", step, c.acc,
                       c.acc_norm, c.loss, c.examples, c.seconds);
}
inline std::string hellaswag_json(int step, const ChoiceScores& c) {
    return "{\"type\":\"hellaswag\",\"step\":" + std::to_string(step) + ",\"acc\":" + json_number(c.acc, "%.9g") +
           ",\"acc_norm\":" + json_number(c.acc_norm, "%.9g") + ",\"completion_loss\":" + json_number(c.loss, "%.9g") +
           ",\"examples\":" + std::to_string((long long)c.examples) + ",\"seconds\":" + json_number(c.seconds) + "}";
}

inline std::string sample_text(int step, const std::string& text) { return "step " + std::to_string(step) + ": sample ---\n" + text + "\n---"; }
inline std::string sample_json(int step, const std::string& text) {
    return "{\"type\":\"sample\",\"step\":" + std::to_string(step) + ",\"text\":" + json_string(text) + "}";
}

// ----------------------------------------------------------------------------------------------
// Startup: where the time before the first step went, on rank 0's clock (a slow MPI launch, NCCL's
// initialization across nodes, a large model file, GEMM tuning). Each phase runs from the previous
// mark (the first: `begin`) to its own, so the phases add up to the whole.
struct StartupTimes {
    double begin_ms = 0, last_ms = 0;
    std::vector<std::pair<std::string, double>> phases;   // name, seconds
    void start(double now_ms) { begin_ms = last_ms = now_ms; phases.clear(); }
    void mark(const std::string& name, double now_ms) { phases.emplace_back(name, (now_ms - last_ms) / 1e3); last_ms = now_ms; }
    double total_s() const { return (last_ms - begin_ms) / 1e3; }
};
// "startup 2.41 s (launch 0.35, data 0.01, CUDA 0.52, model 1.21, GEMM algorithms 0.32)"
inline std::string startup_text(const StartupTimes& t) {
    std::string s = text_printf("startup %.2f s (", t.total_s());
    for (size_t i = 0; i < t.phases.size(); i++) s += text_printf("%s%s %.2f", i ? ", " : "", t.phases[i].first.c_str(), t.phases[i].second);
    return s + ")";
}
// log.jsonl: {"type":"startup","seconds":2.41,"phases":{"launch":0.35,...}}
inline std::string startup_json(const StartupTimes& t) {
    std::string s = "{\"type\":\"startup\",\"seconds\":" + json_number(t.total_s()) + ",\"phases\":{";
    for (size_t i = 0; i < t.phases.size(); i++) s += (i ? "," : "") + json_string(t.phases[i].first) + ":" + json_number(t.phases[i].second);
    return s + "}}";
}

// ----------------------------------------------------------------------------------------------
// The RESULT line: the timed steps summarized.

// Medians and means over the timed steps (rank 0's phase times).
struct StepTimes {
    size_t steps = 0;
    double median_ms = 0, mean_ms = 0;  // the step on the compute stream: the median (the upper one of an even count) and the mean
    double fwd = 0, bwd = 0, opt = 0, exposed = 0, comm_ms = 0, comm_bytes = 0, bwd_last = 0, bwd_other = 0;  // means
};
// ms: each timed step's time; timed: its result (same length, at least one).
inline StepTimes summarize_steps(std::vector<float> ms, const std::vector<StepResult>& timed) {
    StepTimes t;
    t.steps = ms.size();
    // The median step, and the mean (tokens over time). They differ when step times are not one
    // cluster: on several GPUs at their power limit, steps were seen to alternate between two speeds
    // 3 % apart, and the median of such a series is the fastest of the slow ones.
    std::sort(ms.begin(), ms.end());
    t.median_ms = ms[ms.size() / 2];
    for (float v : ms) t.mean_ms += v / ms.size();
    for (const StepResult& s : timed) {
        t.exposed += s.exposed_ms; t.comm_ms += s.comm_ms; t.comm_bytes += s.comm_bytes; t.fwd += s.fwd_ms; t.bwd += s.bwd_ms;
        t.opt += s.update_ms; t.bwd_last += s.bwd_last_ms; t.bwd_other += s.bwd_other_ms;
    }
    for (double* v : {&t.exposed, &t.comm_ms, &t.comm_bytes, &t.fwd, &t.bwd, &t.opt, &t.bwd_last, &t.bwd_other}) *v /= timed.size();
    return t;
}

// nccl-tests' bus bandwidth (GB/s) of moving `bytes` in `ms`: what each link carries, comparable
// across GPU counts (an all-reduce moves 2(n-1)/n of the data over each link; ZeRO-1's reduces to
// each piece's owner move it once; its all-gather of the weights, on the compute stream, is not
// counted). 0 when nothing was timed.
inline double bus_bandwidth_gbs(double bytes, double ms, int world, bool zero) {
    const double algbw = ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0;
    return algbw * (zero ? 1.0 : 2.0 * (world - 1) / world);
}

// What the RESULT line says about the run besides its times.
struct RunShape {
    const char* precision;
    int layers, channels, gpus, zero, B, T, accum;
    long long total_batch;   // tokens per optimizer step, all GPUs
    double flops_per_token;  // training FLOPs (flops_per_token in llmc/model.h)
    double peak_flops;       // of all GPUs together (0: unknown: mfu=nan)
    double device_mem_gb;    // in use on rank 0's GPU at the end
    int grad_int8 = 0;       // --grad-int8: the gradients went over the link as int8 (comm bytes: those)
    double int8_ratio = 0;   // without it: the bytes --grad-int8 1 would send per byte sent now (0: not known)
};

// "RESULT key=value ..." (one line, no newline); per_rank: rank_phase_fields' text ("" on one GPU).
// exposed_comm_pct is the mean exposed time over the mean step (the timed steps' exposed time over
// their time, as tok_per_s_mean and dev/scaling.py's step ms): not over the median step, which a
// step stalled on its peers is not in, and against which a mean could exceed 100 %.
inline std::string result_line(const RunShape& r, const StepTimes& t, const std::string& per_rank) {
    const double tok_s = r.total_batch / (t.median_ms / 1e3), mfu = mfu_percent(r.flops_per_token, tok_s, r.peak_flops);
    return text_printf("RESULT precision=%s model=L%dC%d gpus=%d zero=%d B=%d T=%d accum=%d total_batch=%lld steps=%zu median_ms=%.3f "
                       "tok_per_s=%.0f mean_ms=%.3f tok_per_s_mean=%.0f mfu=%.2f fwd_ms=%.3f bwd_ms=%.3f opt_ms=%.3f exposed_comm_ms=%.3f "
                       "exposed_comm_pct=%.2f comm_ms=%.3f comm_mb=%.1f busbw_gbs=%.1f bwd_last_ms=%.3f bwd_other_ms=%.3f device_mem_gb=%.2f%s%s",
                       r.precision, r.layers, r.channels, r.gpus, r.zero, r.B, r.T, r.accum, r.total_batch, t.steps, t.median_ms, tok_s,
                       t.mean_ms, r.total_batch / (t.mean_ms / 1e3), mfu, t.fwd, t.bwd, t.opt, t.exposed, 100.0 * t.exposed / t.mean_ms,
                       t.comm_ms, t.comm_bytes / 1e6, bus_bandwidth_gbs(t.comm_bytes, t.comm_ms, r.gpus, r.zero != 0), t.bwd_last,
                       t.bwd_other, r.device_mem_gb, r.grad_int8 ? " grad_int8=1" : "", per_rank.c_str());
}

// ----------------------------------------------------------------------------------------------
// Where the communication went, in words, on several GPUs: before the RESULT line, and once after
// the first ten timed steps of a long training run. The seed of this project is "2 GPUs are barely
// faster than 1", and the answer is in these numbers.

// A step with more tokens: how much of it the gradient reduction would leave exposed. A step
// reduces the same gradients once, under the last micro-step's backward, however many micro-steps
// come before it; so with k micro-steps in place of `accum` the exposed time stays as measured and
// only the compute grows: k * (forward + backward per micro-step) + update + exposed. An estimate:
// it ignores that the reduction's kernels also slow the backward they overlap (interference).
inline double exposed_pct_at(const StepTimes& t, int accum, double k) {
    const double micro = (t.fwd + t.bwd) / accum, step = k * micro + t.opt + t.exposed;
    return step > 0 ? 100.0 * t.exposed / step : 0;
}

// The suggestion: the smallest power-of-two multiple of the step's tokens (so still a multiple of
// B*T*GPUs, as -d must be) whose estimate is at most target_pct (reaches), else the largest one
// within max_tokens; total_batch 0 when twice the step's tokens is already beyond max_tokens.
struct MoreTokens { long long total_batch = 0; int accum = 0; double pct = 0; bool reaches = false; };
inline MoreTokens more_tokens_for(const RunShape& r, const StepTimes& t, double target_pct, long long max_tokens) {
    MoreTokens m;
    for (long long f = 2; r.total_batch * f <= max_tokens; f *= 2) {
        m = {r.total_batch * f, (int)(r.accum * f), exposed_pct_at(t, r.accum, (double)r.accum * f), false};
        if (m.pct <= target_pct) { m.reaches = true; break; }
    }
    return m;
}

// The second hint, for a batch that must stay as it is: --grad-int8 1 and the bytes it would send
// (only the bytes: what they save in time depends on the link and on how much of the reduction
// the backward already hides).
inline std::string int8_hint_text(const RunShape& r, const StepTimes& t) {
    if (r.grad_int8 || r.int8_ratio <= 0) return "";
    return text_printf("\nhint: keeping the batch, --grad-int8 1 would send the gradients as int8 with a scale per 128 values: "
                       "about %.0f MB per step instead of %.0f, each value rounded to within 1/254 of its group's largest "
                       "(README, \"Several GPUs\")", t.comm_bytes * r.int8_ratio / 1e6, t.comm_bytes / 1e6);
}

// The lines (empty on one GPU): the bytes each step reduces, the time the reduction took (comm_ms)
// and its bus bandwidth, what of it the backward did not hide, with several micro-steps how much
// longer the backward it overlaps took than the others; and, where the exposed part is more than 5 % of the step,
// how many tokens per step (-d) would bring it to 2 % or less, and what --grad-int8 1 would send.
inline std::string comm_summary_text(const RunShape& r, const StepTimes& t) {
    if (r.gpus <= 1) return "";
    const double pct = exposed_pct_at(t, r.accum, r.accum);
    std::string s = text_printf("communication: %.0f MB of gradients%s reduced per step in %.2f ms (%.1f GB/s bus bandwidth); "
                                "%.2f ms of it not hidden under the backward: %.1f %% of the step",
                                t.comm_bytes / 1e6, r.grad_int8 ? " (as int8, with their scales)" : "", t.comm_ms, bus_bandwidth_gbs(t.comm_bytes, t.comm_ms, r.gpus, r.zero != 0),
                                t.exposed, pct);
    if (r.accum > 1)   // what the hidden part costs: the reduction's kernels share the SMs with that backward
        s += text_printf("; the backward it overlaps took %.2f ms more than the others (interference)", t.bwd_last - t.bwd_other);
    if (pct <= 5) return s;
    constexpr long long max_tokens = 4LL << 20;   // 8 x GPT-2's 524288-token batch
    const MoreTokens m = more_tokens_for(r, t, 2.0, max_tokens);
    if (m.total_batch == 0) return s + int8_hint_text(r, t);
    s += text_printf("\nhint: each step reduces the same %.0f MB however many tokens it holds", t.comm_bytes / 1e6);
    if (!m.reaches)
        s += text_printf("; even -d %lld would leave about %.1f %% of the step exposed: the link is the limit (an estimate)",
                         m.total_batch, m.pct);
    else
        s += text_printf(", so more tokens per step hide it: -d %lld (%d micro-steps of %dx%d per GPU) would leave about %.1f %% "
                         "exposed (an estimate; a larger batch also changes the optimization: GPT-2 used 524288 tokens)",
                         m.total_batch, m.accum, r.B, r.T, m.pct);
    return s + int8_hint_text(r, t);
}

// Each rank's mean forward, other backward and last backward per micro-step (ms): on several GPUs
// every step waits for the slowest rank, and these say which one it is and in which phase (a rank
// ahead of its peer may show the wait in its last backward, under which its reductions wait for
// the peer's buckets). rank_phase_slots: rank `rank`'s own values in a (3, world) table of zeros,
// which a sum over the ranks fills; rank_phase_fields: the filled table as RESULT fields
// " rank_fwd_ms=r0,r1,... rank_bwd_other_ms=... rank_bwd_last_ms=...".
inline std::vector<float> rank_phase_slots(const std::vector<StepResult>& timed, int accum, int world, int rank) {
    std::vector<float> h(3 * (size_t)world, 0.0f);
    for (const StepResult& s : timed) {
        h[rank] += s.fwd_ms / accum / timed.size();
        h[world + rank] += s.bwd_other_ms / timed.size();
        h[2 * world + rank] += s.bwd_last_ms / timed.size();
    }
    return h;
}
inline std::string rank_phase_fields(const std::vector<float>& h, int world) {
    std::string out;
    const char* names[3] = {"rank_fwd_ms", "rank_bwd_other_ms", "rank_bwd_last_ms"};
    for (int f = 0; f < 3; f++) {
        out += std::string(" ") + names[f] + "=";
        for (int i = 0; i < world; i++) out += text_printf("%s%.3f", i ? "," : "", h[(size_t)f * world + i]);
    }
    return out;
}

// Which rank the others wait for, from the filled table of a run of `accum` micro-steps per step:
// each rank's compute per micro-step, the forward plus the backward passes that no reduction
// overlaps (with one micro-step there are none: the forward alone), slowest against fastest. A synchronous step runs at the slowest
// rank's pace, so a spread of p % costs the others about that much; on machines whose GPUs
// differ under their power limit this, not the link, is what separates N GPUs from N x one.
inline std::string rank_balance_text(const std::vector<float>& h, int world, int accum) {
    if (world <= 1) return "";
    const bool other = accum > 1;
    int fast = 0, slow = 0;
    auto compute = [&](int i) { return h[i] + (other ? h[world + i] : 0.0f); };
    for (int i = 1; i < world; i++) {
        if (compute(i) < compute(fast)) fast = i;
        if (compute(i) > compute(slow)) slow = i;
    }
    return text_printf("ranks: %s per micro-step %.2f ms (rank %d, the fastest) to %.2f ms (rank %d, the slowest, +%.1f %%): every step "
                       "waits for the slowest", other ? "forward + the backward no reduction overlaps" : "forward",
                       compute(fast), fast, compute(slow), slow, compute(fast) > 0 ? 100.0 * (compute(slow) / compute(fast) - 1) : 0.0);
}
