// What the trainer prints and logs (llmc/report.h): the step line as users read it, every log.jsonl
// object parsed back as JSON (inf/nan as null, text escaped), the skip and stop messages, and the
// RESULT line's keys (in the order dev/scaling.py and the device scripts read them) and values
// recomputed from the timed steps: median, mean, phase means, bus bandwidth, per-rank phases; the
// communication summary and its hint (how many tokens per step would hide the reduction).
#include "llmc/report.h"
#include "dev/unit/check.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

using nlohmann::json;

static bool parses(const std::string& s, json* out) {
    *out = json::parse(s, nullptr, /*allow_exceptions=*/false);
    return !out->is_discarded();
}
static bool near(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::max(1.0, std::fabs(b)); }

// "RESULT k=v k=v ...": the keys in order, and the values
static std::vector<std::string> result_keys(const std::string& line, std::map<std::string, std::string>* kv) {
    std::istringstream in(line);
    std::string word, first;
    in >> first;
    std::vector<std::string> keys;
    while (in >> word) {
        const size_t eq = word.find('=');
        keys.push_back(word.substr(0, eq));
        (*kv)[keys.back()] = eq == std::string::npos ? "" : word.substr(eq + 1);
    }
    return keys;
}

// the step the step-line tests print, and the skip tests start from: a loss z-score, no norm z-score yet
static StepResult step_result() {
    StepResult s{};
    s.loss = 5.123456789f; s.grad_norm = 1.23456f; s.skipped = false; s.skip_reason = SKIP_NONE;
    s.loss_z = 0.25f; s.norm_z = NAN;
    s.fwd_ms = 40.04f; s.bwd_ms = 80.06f; s.exposed_ms = 0.5f; s.update_ms = 3.25f;
    return s;
}
static StepReport step_report() { return StepReport{12, 100, 6e-4, 65536, 123.456, 4247.0, 40.123, 3.4}; }

// a timed step's phases (update 1 ms)
static StepResult timed_step(float fwd, float bwd, float exposed, float comm_ms, double bytes, float last, float other) {
    StepResult r{};
    r.fwd_ms = fwd; r.bwd_ms = bwd; r.exposed_ms = exposed; r.comm_ms = comm_ms; r.comm_bytes = bytes; r.update_ms = 1;
    r.bwd_last_ms = last; r.bwd_other_ms = other;
    return r;
}
// the four timed steps the summary, per-rank and RESULT tests share
static std::vector<StepResult> timed_steps() {
    return {timed_step(10, 20, 1, 4, 2e8, 6, 5), timed_step(12, 22, 3, 6, 2e8, 8, 5),
            timed_step(11, 21, 2, 5, 2e8, 7, 5), timed_step(13, 25, 2, 5, 2e8, 9, 5)};
}
static StepTimes timed_summary() { return summarize_steps({5, 1, 4, 2}, timed_steps()); }

// text_printf: any length
static void test_text_printf() {
    const std::string longer(5000, 'x');
    CHECK(text_printf("%s|%d", longer.c_str(), 7) == longer + "|7", "text_printf: a 5000-character result is whole");
    CHECK(text_printf("%s", "").empty(), "text_printf: an empty result");
}

// the step line as printed; a skipped step marked
static void test_step_text() {
    const StepResult s = step_result();
    const StepReport rep = step_report();
    const std::string line = step_text(rep, s);
    CHECK(line == "step   12/100 | loss 5.123457 | norm 1.2346 | lr 6.00e-04 | scale 65536 | 123.46 ms (fwd 40.0 bwd 80.1 exposed comm 0.50"
                  " opt 3.25) | 4247 tok/s | MFU 40.1% | ETA 3s", "step_text: the line as printed: " + line);
    StepResult sk = s;
    sk.skipped = true; sk.skip_reason = SKIP_LOSS_SPIKE;
    CHECK(step_text(rep, sk).find("scale 65536 (skipped) |") != std::string::npos, "step_text: a skipped step is marked after the scale");
    StepReport unknown = rep;
    unknown.mfu = mfu_percent(6.0 * 124e6, 4247, 0);
    CHECK(step_text(unknown, s).find("| 4247 tok/s | MFU n/a | ETA 3s") != std::string::npos, "step_text: no known peak: MFU n/a");
}

// the step's log object: valid JSON, its values and keys, inf/nan as null, the skip reason
static void test_step_json() {
    const StepResult s = step_result();
    const StepReport rep = step_report();
    json j;
    const bool ok = parses(step_json(rep, s), &j);
    CHECK(ok, "step_json: valid JSON: " + step_json(rep, s));
    if (ok) {
        CHECK(j["type"] == "step" && j["step"] == 12 && j["skipped"] == 0 && j["skip"] == "", "step_json: type, step, not skipped");
        CHECK(near(j["loss"].get<double>(), (double)s.loss, 1e-9) && near(j["lr"].get<double>(), 6e-4, 1e-6) &&
              near(j["ms"].get<double>(), 123.456, 1e-6) && near(j["tok_s"].get<double>(), 4247, 1e-6) &&
              near(j["exposed_comm_ms"].get<double>(), 0.5, 1e-9), "step_json: the values (loss to 9 digits)");
        CHECK(j["norm_z"].is_null() && near(j["loss_z"].get<double>(), 0.25, 1e-9), "step_json: a z-score without statistics (NaN) is null");
        const std::vector<std::string> keys = {"type", "step", "loss", "norm", "lr", "scale", "skipped", "skip", "loss_z", "norm_z",
                                               "ms", "tok_s", "mfu", "exposed_comm_ms"};
        bool all = j.size() == keys.size();
        for (const std::string& k : keys) all = all && j.contains(k);
        CHECK(all, "step_json: the keys dev/plot.py and users read, and no others");
    }
    StepReport unknown = rep;
    unknown.mfu = mfu_percent(6.0 * 124e6, 4247, 0);
    CHECK(parses(step_json(unknown, s), &j) && j["mfu"].is_null(), "step_json: no known peak: mfu null");
    StepResult bad = s;
    bad.loss = NAN; bad.grad_norm = INFINITY; bad.skipped = true; bad.skip_reason = SKIP_NONFINITE;
    CHECK(parses(step_json(rep, bad), &j) && j["loss"].is_null() && j["norm"].is_null() && j["skipped"] == 1 && j["skip"] == "nonfinite",
          "step_json: an overflow step's nan loss and inf norm are null; skip names the reason");
    StepResult sk = s;
    sk.skipped = true; sk.skip_reason = SKIP_NORM_SPIKE;
    CHECK(parses(step_json(rep, sk), &j) && j["skip"] == "norm_spike", "step_json: skip \"norm_spike\"");
}

// why a step was skipped; the --max-bad-steps stop
static void test_skip_and_stop_text() {
    SpikeStats before{};
    before.loss.level = 5.9322; before.loss.spread2 = 0.3769 * 0.3769;
    before.norm.level = std::log(1.5); before.norm.spread2 = std::log(1.25) * std::log(1.25);
    StepResult spike = step_result();
    spike.skipped = true; spike.skip_reason = SKIP_LOSS_SPIKE; spike.loss = 16.0773f; spike.loss_z = 26.9f;
    CHECK(skip_text(150, spike, before, 6, 0) ==
          "step 150 skipped: loss 16.0773, z 26.9 against its recent level 5.9322 +- 0.3769 (--skip-loss-z 6)",
          "skip_text: a loss spike: " + skip_text(150, spike, before, 6, 0));
    spike.skip_reason = SKIP_NORM_SPIKE; spike.grad_norm = 8.98f; spike.norm_z = 6.6f;
    CHECK(skip_text(150, spike, before, 0, 5.5) ==
          "step 150 skipped: gradient norm 8.9800, z 6.6 against its recent level 1.5000 x/ 1.2500 (--skip-norm-z 5.5)",
          "skip_text: a norm spike, level and spread as factors: " + skip_text(150, spike, before, 0, 5.5));
    spike.skip_reason = SKIP_NONFINITE; spike.bad_ranks = "0,3";
    CHECK(skip_text(7, spike, before, 0, 0) == "step 7 skipped: non-finite gradients (produced on rank(s) 0,3)", "skip_text: inf/nan, the ranks");
    spike.bad_ranks = "";
    CHECK(skip_text(7, spike, before, 0, 0) ==
          "step 7 skipped: non-finite gradients (every rank's own gradients were finite: the average overflowed)",
          "skip_text: inf/nan only in the average");
    CHECK(bad_steps_text(1, spike, 7, 1) ==
          "1 step in a row skipped for inf/nan gradients (the last one from rank(s) none alone) at step 7; stopping (--max-bad-steps 1)",
          "bad_steps_text: one step, no single rank");
    spike.bad_ranks = "1";
    CHECK(bad_steps_text(3, spike, 9, 3).find("3 steps in a row") == 0 && bad_steps_text(3, spike, 9, 3).find("rank(s) 1)") != std::string::npos,
          "bad_steps_text: steps (plural), the rank");
}

// evaluations and samples: the printed line and the log object of each
static void test_eval_and_sample() {
    json j;
    CHECK(val_text(50, 4.1234567) == "step 50: val loss 4.123457", "val_text");
    CHECK(parses(val_json(50, 4.1234567), &j) && j["type"] == "eval" && j["step"] == 50 && near(j["val_loss"].get<double>(), 4.1234567, 1e-8),
          "val_json");
    const ChoiceScores c{0.25, 0.3, 2.5, 10042, 12.345};
    CHECK(hellaswag_text(60, c) == "step 60: hellaswag acc 0.250000 acc_norm 0.300000 completion loss 2.500000 (10042 examples, 12.35 s)",
          "hellaswag_text: " + hellaswag_text(60, c));
    CHECK(parses(hellaswag_json(60, c), &j) && j["type"] == "hellaswag" && j["examples"] == 10042 && j["acc"] == 0.25 &&
          j["acc_norm"] == 0.3 && j["completion_loss"] == 2.5 && near(j["seconds"].get<double>(), 12.345, 1e-6), "hellaswag_json");
    const std::string text = "He said \"no\"\n\tand \\ left\x01 \xc3\xa9";
    CHECK(sample_text(5, text) == "step 5: sample ---\n" + text + "\n---", "sample_text: the text between two marker lines");
    CHECK(parses(sample_json(5, text), &j) && j["type"] == "sample" && j["text"] == text,
          "sample_json: quotes, newline, tab, backslash, a control byte and UTF-8 come back as written");
    // A sample's bytes need not be UTF-8: byte-level BPE tokens can hold part of a character, and a
    // sample can end inside one or (an untrained model) hold any bytes. Each invalid sequence becomes
    // one U+FFFD, as tiktoken's decode (errors="replace") gives it; written raw, the line was no JSON.
    const std::string cut = "caf\xe6\x97", stray = "a\x80\xff" "b\xed\xa0\x80" "c\xf0\x9f\x91\x8b\xc3";
    CHECK(parses(sample_json(6, cut), &j) && j["text"] == "caf\xef\xbf\xbd",
          "sample_json: a sample that ends inside a character is JSON, the cut character one U+FFFD");
    CHECK(parses(sample_json(7, stray), &j) &&
          j["text"] == "a\xef\xbf\xbd\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "c\xf0\x9f\x91\x8b\xef\xbf\xbd",
          "sample_json: stray bytes and a surrogate's bytes each one U+FFFD (Python's errors=\"replace\"), UTF-8 kept");
}

// the startup line and object: the phases between marks, adding up to the whole
static void test_startup() {
    StartupTimes t;
    t.start(1000);
    t.mark("launch", 1350);
    t.mark("CUDA", 1870);
    t.mark("GEMM algorithms", 3410);
    CHECK(startup_text(t) == "startup 2.41 s (launch 0.35, CUDA 0.52, GEMM algorithms 1.54)", "startup_text: " + startup_text(t));
    json j;
    CHECK(parses(startup_json(t), &j) && j["type"] == "startup" && near(j["seconds"].get<double>(), 2.41, 1e-9) && j["phases"].size() == 3 &&
          near(j["phases"]["launch"].get<double>(), 0.35, 1e-9) && near(j["phases"]["GEMM algorithms"].get<double>(), 1.54, 1e-9),
          "startup_json: the total and each phase by name");
    t.start(5);
    CHECK(startup_text(t) == "startup 0.00 s ()" && parses(startup_json(t), &j) && j["phases"].empty(), "startup with no phases");
}

// the timed steps summarized: median, mean, each phase's mean
static void test_summarize_steps() {
    const std::vector<StepResult> timed = timed_steps();
    const StepTimes t = timed_summary();
    CHECK(t.steps == 4 && t.median_ms == 4 && t.mean_ms == 3, "summarize_steps: an even count's median is the upper one; the mean");
    CHECK(summarize_steps({3, 1, 2}, {timed[0], timed[1], timed[2]}).median_ms == 2, "summarize_steps: an odd count's median");
    CHECK(t.fwd == 11.5 && t.bwd == 22 && t.exposed == 2 && t.comm_ms == 5 && t.comm_bytes == 2e8 && t.opt == 1 && t.bwd_last == 7.5 &&
          t.bwd_other == 5, "summarize_steps: each phase's mean");
}

// bus bandwidth from the timed communication, by GPU count and ZeRO stage
static void test_bus_bandwidth() {
    CHECK(bus_bandwidth_gbs(2e8, 5, 1, false) == 0, "bus bandwidth: 0 on one GPU (nothing crosses a link)");
    CHECK(near(bus_bandwidth_gbs(2e8, 5, 2, false), 40, 1e-12), "bus bandwidth: 2 GPUs, all-reduce: the algorithm bandwidth (2e8 B in 5 ms)");
    CHECK(near(bus_bandwidth_gbs(2e8, 5, 4, false), 60, 1e-12), "bus bandwidth: 4 GPUs, all-reduce: 2(n-1)/n = 1.5 times it");
    CHECK(near(bus_bandwidth_gbs(2e8, 5, 4, true), 40, 1e-12), "bus bandwidth: ZeRO-1 moves the data once");
    CHECK(bus_bandwidth_gbs(2e8, 0, 2, false) == 0, "bus bandwidth: 0 when no communication was timed");
}

// per-rank phases: each rank fills its own column, the collective sum gives every rank's.
// Returns the RESULT line's per-rank fields of two ranks, for test_result_line.
static std::string test_rank_phase_fields() {
    const std::vector<float> rank0 = rank_phase_slots(timed_steps(), 4, 2, 0),
                             rank1 = rank_phase_slots({timed_step(20, 0, 0, 0, 0, 30, 10)}, 4, 2, 1);
    std::vector<float> sum(rank0.size());
    for (size_t i = 0; i < sum.size(); i++) sum[i] = rank0[i] + rank1[i];  // what the collective sum gives
    CHECK(rank0.size() == 6 && rank0[1] == 0 && rank0[3] == 0 && rank0[5] == 0 && rank1[0] == 0 && rank1[2] == 0 && rank1[4] == 0,
          "rank_phase_slots: (3, world), each rank fills only its own column");
    const std::string per_rank = rank_phase_fields(sum, 2);
    CHECK(per_rank == " rank_fwd_ms=2.875,5.000 rank_bwd_other_ms=5.000,10.000 rank_bwd_last_ms=7.500,30.000",
          "rank_phase_fields: forward per micro-step (11.5/4), other and last backward, rank by rank: " + per_rank);
    CHECK(rank_balance_text(sum, 2, 4) == "ranks: forward + the backward no reduction overlaps per micro-step 7.88 ms (rank 0, the fastest) to "
                                       "15.00 ms (rank 1, the slowest, +90.5 %): every step waits for the slowest",
          "rank_balance_text: forward + other backward per rank, fastest to slowest: " + rank_balance_text(sum, 2, 4));
    CHECK(rank_balance_text({3, 2, 4, -1, -1, -1, 5, 6, 7}, 3, 1) == "ranks: forward per micro-step 2.00 ms (rank 1, the fastest) to 4.00 ms "
                                                                 "(rank 2, the slowest, +100.0 %): every step waits for the slowest",
          "rank_balance_text: one micro-step (no other backward): the forward alone; any rank can be either end");
    CHECK(rank_balance_text({1, -1, 2}, 1, 1).empty(), "rank_balance_text: nothing on one GPU");
    return per_rank;
}

// the RESULT line: its keys in the order dev/scaling.py and the device scripts read them, and the values
static void test_result_line(const std::string& per_rank) {
    const StepTimes t = timed_summary();
    const RunShape shape{"bf16", 12, 768, 2, 0, 64, 1024, 4, 524288, 6.0 * 124e6, 2 * 989e12, 24.25};
    const std::string res = result_line(shape, t, per_rank);
    std::map<std::string, std::string> kv;
    const std::vector<std::string> keys = result_keys(res, &kv);
    const std::vector<std::string> want = {"precision", "model", "gpus", "zero", "B", "T", "accum", "total_batch", "steps", "median_ms",
                                           "tok_per_s", "mean_ms", "tok_per_s_mean", "mfu", "fwd_ms", "bwd_ms", "opt_ms",
                                           "exposed_comm_ms", "exposed_comm_pct", "comm_ms", "comm_mb", "busbw_gbs", "bwd_last_ms",
                                           "bwd_other_ms", "device_mem_gb", "rank_fwd_ms", "rank_bwd_other_ms", "rank_bwd_last_ms"};
    CHECK(res.rfind("RESULT ", 0) == 0 && keys == want, "result_line: 'RESULT ' then the keys in their order: " + res);
    const double tok_s = 524288 / 4e-3;
    CHECK(kv["precision"] == "bf16" && kv["model"] == "L12C768" && kv["gpus"] == "2" && kv["total_batch"] == "524288" && kv["steps"] == "4" &&
          kv["median_ms"] == "4.000" && kv["mean_ms"] == "3.000", "result_line: the run's shape and step times");
    CHECK(std::stod(kv["tok_per_s"]) == std::round(tok_s) && std::stod(kv["tok_per_s_mean"]) == std::round(524288 / 3e-3),
          "result_line: tokens/s of the median step and of the mean");
    CHECK(near(std::stod(kv["mfu"]), 100.0 * 6.0 * 124e6 * tok_s / (2 * 989e12), 0.01 / 100), "result_line: MFU from the median step");
    CHECK(kv["exposed_comm_pct"] == "66.67" && kv["comm_mb"] == "200.0" && kv["busbw_gbs"] == "40.0" && kv["device_mem_gb"] == "24.25", "result_line: exposed share of the mean step (2 of 3 ms), MB, bus bandwidth, memory");
    // the exposed share is of the same steps' time as the exposed ms (both means): one step stalled
    // on a peer must not make it "of the median step", which the stall is not in (nine steps of
    // 100 ms with 1 ms exposed and one of 1100 ms with 1001: 101 of 200 ms on average, 50.5 %, as
    // the communication summary's line says; of the 100 ms median it would be 101 %)
    std::vector<float> stall_ms(9, 100.0f);
    std::vector<StepResult> stall(9, timed_step(30, 68, 1, 2, 2e8, 68, -1));
    stall_ms.push_back(1100.0f);
    stall.push_back(timed_step(30, 68, 1001, 1002, 2e8, 68, -1));
    const StepTimes ts = summarize_steps(stall_ms, stall);
    RunShape shape1 = shape;
    shape1.accum = 1;
    kv.clear();
    result_keys(result_line(shape1, ts, ""), &kv);
    CHECK(ts.median_ms == 100 && kv["exposed_comm_ms"] == "101.000" && kv["exposed_comm_pct"] == "50.50" &&
              comm_summary_text(shape1, ts).find("not hidden under the backward: 50.5 % of the step") != std::string::npos,
          "result_line: exposed share of the timed steps' time (mean over mean), as the summary says: exposed_comm_pct=" +
              kv["exposed_comm_pct"]);
    const RunShape one{"fp16", 12, 768, 1, 0, 64, 1024, 8, 524288, 6.0 * 124e6, 0, 1};
    const std::string res1 = result_line(one, t, "");
    kv.clear();
    const std::vector<std::string> keys1 = result_keys(res1, &kv);
    CHECK(keys1.size() == want.size() - 3 && kv["mfu"] == "nan" && kv["busbw_gbs"] == "0.0",
          "result_line: one GPU, unknown peak: no per-rank fields, mfu=nan, no bus bandwidth");
}

// the communication summary on several GPUs: the measured line, and the hint of how many tokens
// per step would hide an exposed reduction (an estimate that keeps the exposed time as measured)
static void test_comm_summary() {
    StepTimes t;
    t.fwd = 40; t.bwd = 80; t.opt = 5; t.exposed = 125; t.comm_ms = 130; t.comm_bytes = 249e6;   // accum 1: 120 ms of compute
    const RunShape two{"bf16", 12, 768, 2, 0, 4, 1024, 1, 8192, 6.0 * 124e6, 0, 10};
    RunShape one = two;
    one.gpus = 1;
    CHECK(comm_summary_text(one, t).empty(), "comm_summary_text: nothing on one GPU");
    CHECK(near(exposed_pct_at(t, 1, 1), 50, 1e-12) && near(exposed_pct_at(t, 1, 64), 100.0 * 125 / (64 * 120 + 130), 1e-12),
          "exposed_pct_at: the exposed time kept, the compute times k");
    // 125 / (120 k + 130) <= 2 % needs k >= 51: the next power of two is 64 micro-steps, 524288 tokens
    CHECK(comm_summary_text(two, t) ==
              "communication: 249 MB of gradients reduced per step in 130.00 ms (1.9 GB/s bus bandwidth); 125.00 ms of it not hidden "
              "under the backward: 50.0 % of the step\n"
              "hint: each step reduces the same 249 MB however many tokens it holds, so more tokens per step hide it: -d 524288 "
              "(64 micro-steps of 4x1024 per GPU) would leave about 1.6 % exposed (an estimate; a larger batch also changes the "
              "optimization: GPT-2 used 524288 tokens)",
          "comm_summary_text: 50 % exposed: the smallest power-of-two -d that leaves <= 2 %: " + comm_summary_text(two, t));
    RunShape accum4 = two;   // the same compute per micro-step, measured with 4 micro-steps: the same answer
    accum4.accum = 4; accum4.total_batch = 32768;
    StepTimes t4 = t;
    t4.fwd *= 4; t4.bwd *= 4;
    const MoreTokens m4 = more_tokens_for(accum4, t4, 2.0, 4LL << 20);
    CHECK(m4.reaches && m4.total_batch == 524288 && m4.accum == 64, "more_tokens_for: measured at accum 4, the compute per micro-step is a quarter");
    t4.bwd_last = 23.5; t4.bwd_other = 20;
    CHECK(comm_summary_text(accum4, t4).find("; the backward it overlaps took 3.50 ms more than the others (interference)\n") != std::string::npos &&
              comm_summary_text(two, t).find("interference") == std::string::npos,
          "comm_summary_text: with several micro-steps, the interference (last backward - the others'); none with one");
    StepTimes slow = t;
    slow.exposed = 10000;   // even 512 micro-steps leave 10000 / (61440 + 10005) = 14 %
    const std::string s = comm_summary_text(two, slow);
    CHECK(s.find("hint: ") != std::string::npos && s.find("; even -d 4194304 would leave about 14.0 % of the step exposed: the link is the limit (an estimate)") != std::string::npos,
          "comm_summary_text: the largest step within 4194304 tokens, and that the link is the limit: " + s);
    StepTimes hidden = t;
    hidden.exposed = 5;     // 5 / 130 = 3.8 %: no hint
    const std::string h = comm_summary_text(two, hidden);
    CHECK(h.find("3.8 % of the step") != std::string::npos && h.find('\n') == std::string::npos, "comm_summary_text: <= 5 % exposed: no hint: " + h);
    RunShape big = two;     // already at 4194304 tokens: no larger step to suggest
    big.total_batch = 4LL << 20; big.accum = 512;
    StepTimes tb = t;
    tb.fwd *= 512; tb.bwd *= 512; tb.exposed = 20000;
    CHECK(comm_summary_text(big, tb).find('\n') == std::string::npos && more_tokens_for(big, tb, 2.0, 4LL << 20).total_batch == 0,
          "comm_summary_text: a step at the largest size: no hint");
    RunShape four = two, zero = two;   // 4 GPUs: an all-reduce's bus bandwidth is 1.5 x the algorithm's, ZeRO-1's reduce 1 x
    four.gpus = zero.gpus = 4;
    zero.zero = 1;
    CHECK(comm_summary_text(four, hidden).find("(2.9 GB/s bus bandwidth)") != std::string::npos &&
              comm_summary_text(zero, hidden).find("(1.9 GB/s bus bandwidth)") != std::string::npos,
          "comm_summary_text: the bus bandwidth of DDP's all-reduce and of ZeRO-1's reduce on 4 GPUs");
    RunShape i8 = two;      // --grad-int8: the bytes are the int8 values and scales, and the lines say so
    i8.grad_int8 = 1;
    CHECK(comm_summary_text(i8, hidden).find("communication: 249 MB of gradients (as int8, with their scales) reduced per step") == 0 &&
              result_line(i8, hidden, " rank_fwd_ms=1,2").find(" device_mem_gb=10.00 grad_int8=1 rank_fwd_ms=1,2") != std::string::npos &&
              result_line(two, hidden, "").find("grad_int8") == std::string::npos,
          "comm_summary_text, result_line: --grad-int8 named (the RESULT field only when on)");
    // without --grad-int8, an exposed reduction also gets the hint of the bytes int8 would send
    // (bf16: 1 + 4/128 bytes per value for 2): after the -d hint, alone where there is none, never
    // where the reduction is hidden or int8 is already on
    RunShape off = two;
    off.int8_ratio = (1.0 + 4.0 / 128) / 2;
    const std::string both = comm_summary_text(off, t);
    const std::string int8_line = "\nhint: keeping the batch, --grad-int8 1 would send the gradients as int8 with a scale per 128 values: "
                                  "about 128 MB per step instead of 249, each value rounded to within 1/254 of its group's largest "
                                  "(README, \"Several GPUs\")";
    CHECK(both == comm_summary_text(two, t) + int8_line, "comm_summary_text: the -d hint, then the --grad-int8 one: " + both);
    RunShape off_big = big;
    off_big.int8_ratio = off.int8_ratio;
    CHECK(comm_summary_text(off_big, tb) == comm_summary_text(big, tb) + int8_line,
          "comm_summary_text: no larger step to suggest, the --grad-int8 hint alone: " + comm_summary_text(off_big, tb));
    RunShape on = off;
    on.grad_int8 = 1;
    CHECK(comm_summary_text(off, hidden).find("--grad-int8") == std::string::npos &&
              comm_summary_text(on, t).find("--grad-int8") == std::string::npos,
          "comm_summary_text: no --grad-int8 hint where the reduction hides (<= 5 %) or with --grad-int8 1 already");
}

// MFU's peak: the datasheet row for the part (variants of one compute capability told apart by
// the words of the name), fp32's in FP32 builds, none for an unknown GPU; the banner's line.
static void test_gpu_peak() {
    struct Case { int major, minor; const char* name; bool fp32; double tflops; const char* part; };
    const Case cases[] = {
        {9, 0, "NVIDIA H200", false, 989, "H100/H200 SXM"},
        {9, 0, "NVIDIA H100 80GB HBM3", false, 989, "H100/H200 SXM"},
        {9, 0, "NVIDIA H200", true, 67, "H100/H200 SXM"},
        {9, 0, "NVIDIA H100 PCIe", false, 756, "H100 PCIe"},
        {9, 0, "NVIDIA H100 NVL", false, 835, "H100 NVL"},
        {9, 0, "NVIDIA H20", false, 148, "H20"},       // sm_90 too, but a sixth of an H100 SXM's tensor rate
        {9, 0, "NVIDIA H20", true, 44, "H20"},
        {9, 0, "NVIDIA H200 NVL", true, 60, "H200 NVL"},
        {8, 0, "NVIDIA A100-SXM4-80GB", false, 312, "A100"},
        {8, 0, "NVIDIA A100 80GB PCIe", true, 19.5, "A100"},
        {8, 0, "NVIDIA A30", false, 165, "A30"},
        {8, 9, "NVIDIA L40S", false, 362, "L40S"},
        {8, 9, "NVIDIA L40", false, 181, "L40"},
        {8, 9, "NVIDIA L4", false, 121, "L4"},
        {8, 9, "NVIDIA GeForce RTX 4090", false, 165, "GeForce RTX 4090"},
        {10, 0, "NVIDIA B200", false, 2250, "B200"},
        {8, 6, "NVIDIA GeForce RTX 3090", false, 0, ""},   // not in the table: unknown, not a neighbour's peak
        {8, 9, "NVIDIA RTX 6000 Ada Generation", false, 0, ""},
        {7, 0, "Tesla V100-SXM2-16GB", false, 0, ""},
    };
    for (const Case& c : cases) {
        const GpuPeak p = gpu_peak(c.major, c.minor, c.name, c.fp32);
        CHECK(near(p.flops, c.tflops * 1e12, 1e-12) && p.part == c.part,
              std::string("gpu_peak: ") + c.name + (c.fp32 ? " (fp32)" : "") + " -> " + std::to_string(p.flops / 1e12) + " " + p.part);
    }
    CHECK(std::isnan(mfu_percent(1e9, 1e5, 0)) && near(mfu_percent(6e8, 1e6, 1e15), 60.0, 1e-12), "mfu_percent: NaN without a peak");
    CHECK(peak_text(gpu_peak(9, 0, "NVIDIA H200", false), "NVIDIA H200", 9, 0, false) ==
              "MFU against 989.0 TFLOP/s per GPU (H100/H200 SXM datasheet, dense 16-bit tensor cores)",
          "peak_text: a known part");
    CHECK(peak_text(GpuPeak{}, "NVIDIA GeForce RTX 3090", 8, 6, false) ==
              "MFU: n/a (no datasheet peak known for NVIDIA GeForce RTX 3090, sm_86; --peak-tflops sets one)",
          "peak_text: an unknown GPU names itself and the option");
    CHECK(peak_text(GpuPeak{71e12, "--peak-tflops"}, "NVIDIA GeForce RTX 3090", 8, 6, false) ==
              "MFU against 71.0 TFLOP/s per GPU (--peak-tflops)", "peak_text: the option's peak");
}

// dev/interconnect's all-reduce fit (llmc/timing.h): the recorded sweeps give their recorded fits;
// a sweep that fixes no bandwidth gives none (it printed alpha_us=nan busbw_gbs=nan for one size, and
// busbw_gbs=-5242.9 for 1 and 2 MiB on 4 H200s, whose times do not grow)
static void test_allreduce_fit() {
    auto sweep = [](std::vector<double> us) {   // 1 MiB, 2 MiB, ... in microseconds
        std::vector<std::pair<double, double>> s;
        for (size_t i = 0; i < us.size(); i++) s.push_back({(double)(1ull << (20 + i)), us[i] * 1e-6});
        return s;
    };
    // dev/results/interconnect_2xH200.txt and _4xH200.txt, P2P on: 1 MiB .. 1 GiB
    const AllReduceFit two = allreduce_fit(sweep({15.3, 27.6, 32.7, 45.9, 74.7, 134.4, 245.6, 464.0, 894.9, 1680.2, 3212.1}), 2);
    const AllReduceFit four = allreduce_fit(sweep({29.0, 28.7, 40.5, 59.1, 94.4, 172.0, 322.4, 609.8, 1187.5, 2312.1, 4524.1}), 4);
    CHECK(two.ok && near(two.alpha_s * 1e6, 37.2, 0.05 / 37.2) && near(two.busbw_gbs, 334.4, 0.05 / 334.4) && four.ok &&
              near(four.alpha_s * 1e6, 32.8, 0.05 / 32.8) && near(four.busbw_gbs, 357.0, 0.05 / 357.0),
          "allreduce_fit: the recorded sweeps' fits (2 GPUs: 37.2 us, 334.4 GB/s; 4 GPUs: 32.8 us, 357.0 GB/s): " +
              text_printf("%.2f %.2f, %.2f %.2f", two.alpha_s * 1e6, two.busbw_gbs, four.alpha_s * 1e6, four.busbw_gbs));
    // 4 H200s without P2P: the intercept is below 0, alpha 0
    const AllReduceFit off = allreduce_fit(sweep({98.0, 134.8, 222.3, 404.5, 843.6, 2055.9, 4034.2, 8036.6, 15811.8, 31747.5, 64126.8}), 4);
    CHECK(off.ok && off.alpha_s == 0 && near(off.busbw_gbs, 25.2, 0.05 / 25.2), "allreduce_fit: a negative intercept is alpha 0 (4 GPUs, P2P off)");
    const AllReduceFit one_size = allreduce_fit(sweep({29.0}), 4), flat = allreduce_fit(sweep({29.0, 28.7}), 4),
                       empty = allreduce_fit({}, 2), one_rank = allreduce_fit(sweep({10, 20, 40}), 1);
    CHECK(!one_size.ok && one_size.why == "fewer than two sizes in the sweep (a larger --max-mb)" && !empty.ok,
          "allreduce_fit: one size (--max-mb 1) or none: no fit, not nan: " + one_size.why);
    CHECK(!flat.ok && flat.why == "the times do not grow with the size (latency-bound sizes: a larger --max-mb)",
          "allreduce_fit: 1 and 2 MiB on 4 GPUs (--max-mb 2), times not growing: no fit, not a negative bandwidth: " + flat.why);
    CHECK(!one_rank.ok && one_rank.why == "one rank: nothing crosses a link", "allreduce_fit: one rank: no fit");
}

// log.jsonl that cannot be opened: one line with the path and the system's reason.
static void test_logger_open_error() {
    Logger log;
    std::string err;
    const std::string path = "/nonexistent_test_report_dir/log.jsonl";
    CHECK(!log.open(path, &err) && err == path + ": cannot open for appending: No such file or directory",
          "Logger::open: a missing directory is one line naming the file and why");
}

int main() {
    test_logger_open_error();
    test_gpu_peak();
    test_allreduce_fit();
    test_text_printf();
    test_step_text();
    test_step_json();
    test_skip_and_stop_text();
    test_eval_and_sample();
    test_startup();
    test_summarize_steps();
    test_bus_bandwidth();
    const std::string per_rank = test_rank_phase_fields();
    test_result_line(per_rank);
    test_comm_summary();
    return check_finish();
}
