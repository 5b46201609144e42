// The host side of the whole-model oracle (test_gpt2.cu): the reference state file that
// dev/reference.py (and dev/convert_hf.py --check-state) write, read with every size checked, and
// the error measures the checks compare against their tolerances. Host-only (no CUDA) so the CPU
// unit tests (dev/unit/test_reference_check.cpp) can show that each measure catches what it must:
// a zeroed, doubled or swapped layer gradient, a non-finite loss, a state file that does not fit.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "model.h"
#include "shards.h"   // open_regular_file

struct ReferenceState {
    int B = 0, T = 0, steps = 0;
    float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, grad_clip = 0;
    std::vector<int> x, y;
    std::vector<float> logits, grads, losses;  // grads: model-file order
    float loss = 0;
};
constexpr int32_t REFERENCE_STATE_MAGIC = 20240327, REFERENCE_STATE_VERSION = 3;

// Reads the state for the model `c` (the model file's header). Every size comes from the header
// and the model, so the file must be exactly that long: a truncated file, or one written for
// another model (larger: its gradients would be read as far as this model's go and the rest taken
// for the training losses, which then FAIL as if the trainer were wrong) is one line here. The
// header's numbers are checked before anything is allocated from them, the tokens before the GPU
// indexes embeddings with them, and the reference's own numbers for being finite (a NaN in the
// reference would fail every check that reads it, naming the trainer).
inline bool reference_state_read(const char* path, const GPT2Config& c, ReferenceState* s, std::string* err) {
    const std::string p(path);
    size_t size = 0;
    auto file = open_regular_file(p, &size, err);   // a directory or a named pipe: refused unopened
    if (!file) { *err += " (run: python3 dev/reference.py)"; return false; }
    FILE* f = file.get();
    int32_t h[256];
    const bool got_header = fread(h, sizeof(int32_t), 256, f) == 256;
    auto fail = [&](const std::string& why) { *err = p + ": " + why; return false; };
    if (!got_header || h[0] != REFERENCE_STATE_MAGIC)
        return fail("not a reference state (no magic " + std::to_string(REFERENCE_STATE_MAGIC) + "; run: python3 dev/reference.py)");
    if (h[1] != REFERENCE_STATE_VERSION)
        return fail("reference state version " + std::to_string(h[1]) + ", expected " + std::to_string(REFERENCE_STATE_VERSION) +
                    " (run: python3 dev/reference.py)");
    const int B = h[2], T = h[3], steps = h[4];
    if (B < 1 || B > (1 << 20) || T < 1 || T > c.max_seq_len || steps < 0 || steps > (1 << 20))
        return fail("header holds B=" + std::to_string(B) + " T=" + std::to_string(T) + " steps=" + std::to_string(steps) +
                    ", need B >= 1, 1 <= T <= " + std::to_string(c.max_seq_len) + " (the model's maxT), steps >= 0");
    float hf[6];
    memcpy(hf, &h[5], sizeof hf);  // lr, beta1, beta2, eps, weight_decay, grad_clip: float bit patterns
    const bool hyper_ok = std::isfinite(hf[0]) && hf[0] >= 0 && hf[1] >= 0 && hf[1] < 1 && hf[2] >= 0 && hf[2] < 1 &&
                          std::isfinite(hf[3]) && hf[3] > 0 && std::isfinite(hf[4]) && hf[4] >= 0 && std::isfinite(hf[5]) && hf[5] >= 0;
    if (!hyper_ok) return fail("header holds impossible AdamW settings (lr, beta1, beta2, eps, weight decay, clip)");
    // the size in double first (exact below 2^53 bytes, and no size_t overflow for a huge header)
    const size_t bt = (size_t)B * T, V = c.vocab_size, n = param_layout(c).total;
    const double expect = 4.0 * (256.0 + 2.0 * bt + (double)bt * V + 1.0 + (double)n + steps);
    if ((double)size != expect)
        return fail("file is " + std::to_string(size) + " bytes, B=" + std::to_string(B) + " T=" + std::to_string(T) + " steps=" +
                    std::to_string(steps) + " with this model (L " + std::to_string(c.num_layers) + ", C " + std::to_string(c.channels) +
                    ") need " + std::to_string((long long)expect) +
                    ((double)size < expect ? " (truncated, or written for a smaller model)" : " (trailing data: written for a larger model?)"));
    s->B = B; s->T = T; s->steps = steps;
    s->lr = hf[0]; s->beta1 = hf[1]; s->beta2 = hf[2]; s->eps = hf[3]; s->weight_decay = hf[4]; s->grad_clip = hf[5];
    s->x.resize(bt); s->y.resize(bt); s->logits.resize(bt * V); s->grads.resize(n); s->losses.resize(steps);
    const bool ok = fread(s->x.data(), sizeof(int), bt, f) == bt && fread(s->y.data(), sizeof(int), bt, f) == bt &&
                    fread(s->logits.data(), sizeof(float), s->logits.size(), f) == s->logits.size() &&
                    fread(&s->loss, sizeof(float), 1, f) == 1 &&
                    fread(s->grads.data(), sizeof(float), n, f) == n &&
                    fread(s->losses.data(), sizeof(float), s->losses.size(), f) == s->losses.size();
    if (!ok) return fail("read error");
    for (size_t i = 0; i < bt; i++) {
        if (s->x[i] < 0 || s->x[i] >= c.vocab_size || s->y[i] < 0 || s->y[i] >= c.vocab_size) {
            *err = p + ": token " + std::to_string(i) + " of the batch is not in [0, V=" + std::to_string(c.vocab_size) + ")";
            return false;
        }
    }
    if (std::isfinite(s->loss) && !(s->loss > 0)) {   // a cross-entropy over V > 1 classes is above 0
        char v[32];
        snprintf(v, sizeof v, "%g", s->loss);
        *err = p + ": the reference's loss " + v + " is not positive";
        return false;
    }
    bool finite = std::isfinite(s->loss);
    for (float v : s->losses) finite = finite && std::isfinite(v);
    for (float v : s->logits) finite = finite && std::isfinite(v);
    for (float v : s->grads) finite = finite && std::isfinite(v);
    if (!finite) { *err = p + ": the reference's loss, logits, gradients or losses are not finite"; return false; }
    return true;
}

// ||a - b|| / ||b|| (or ||a - b|| when b is all zeros), and max |a - b|; a non-finite value in
// `a` makes the error infinite (a NaN would otherwise compare as neither above nor below a tolerance).
inline void rel_error(const float* a, const float* b, size_t n, double* rel, double* max_abs) {
    double num = 0, den = 0;
    *max_abs = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        num += d * d; den += (double)b[i] * b[i];
        *max_abs = std::max(*max_abs, fabs(d));
        if (!std::isfinite(a[i])) { num = INFINITY; *max_abs = INFINITY; }
    }
    *rel = den > 0 ? sqrt(num / den) : sqrt(num);
}

// The error of one parameter tensor's gradient: the WORST of its instances (layers), each measured
// against its own norm. One measure over all L layers together would be dominated by the layers of
// large gradient: at the reference's d12 the last layer holds 8% of qkvb's gradient norm, so that
// layer's gradient zeroed (or doubled) would move the all-layer error by only 0.08, inside BF16's
// tolerance; and adjacent layers' bias gradients are so alike (the residual stream's gradient
// changes little from one layer to the next) that two of them swapped moved attprojb's by 0.04.
// `ours`: layer-major (the trainer's buffer), `ref`: model-file order (the state file's).
struct GradError { double rel = 0, max_abs = 0; int worst_layer = 0; };
inline GradError grad_error(const GPT2Config& c, const ParamLayout& layout, const float* ours, const float* ref, int t) {
    GradError g;
    const size_t e = param_tensor_elems(c, t);
    for (size_t l = 0; l < param_tensor_count(c, t); l++) {
        double rel, max_abs;
        rel_error(ours + param_offset(c, layout, t, (int)l), ref + model_file_offset(c, t, (int)l), e, &rel, &max_abs);
        g.max_abs = std::max(g.max_abs, max_abs);
        // !(rel <= g.rel): a NaN (a NaN in the reference; the reader refuses one) is the worst too
        if (!(rel <= g.rel)) { g.rel = rel; g.worst_layer = (int)l; }
    }
    return g;
}

// The training check's error: the worst step's |ours - ref| / ref[0] (test_gpt2.cu says why the
// initial loss), infinite when a step's loss is not finite (std::max keeps its first argument
// against a NaN, so a trajectory that turned NaN would otherwise report the steps before it) or
// when the trainer skipped a step (the reference never skips; a skipped last step would leave
// every reported loss as the reference's).
inline double losses_error(const std::vector<float>& ours, const std::vector<bool>& skipped, const std::vector<float>& ref) {
    if (ours.size() != ref.size() || skipped.size() != ref.size()) return INFINITY;
    double worst = 0;
    for (size_t s = 0; s < ref.size(); s++) {
        const double d = fabs((double)ours[s] - ref[s]) / ref[0];
        if (!std::isfinite(d) || skipped[s]) return INFINITY;
        worst = std::max(worst, d);
    }
    return worst;
}
