// The host side of the whole-model oracle (llmc/reference_check.h, what test_gpt2.cu checks with):
//   the reference state file: read back as written; a truncated one, one written for a larger model
//   (trailing data), impossible header numbers, tokens outside the vocabulary and a non-finite
//   reference each one line, before anything is allocated from the header;
//   the gradient error: a layer's gradient zeroed, doubled, or swapped with another layer's is an
//   error of order 1 even where that layer holds a small part of the tensor's norm;
//   the training error: a loss that turned NaN, and a skipped step, fail instead of being passed over.
#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>
#include "llmc/reference_check.h"
#include "dev/unit/check.h"

static std::string tmpdir() { char t[] = "/tmp/test_reference_check_XXXXXX"; return mkdtemp(t); }

// a tiny model: L=3 (so a middle layer exists), C=8, NH=2, V=10 (Vp=128), maxT=16
static GPT2Config tiny() {
    GPT2Config c;
    c.num_layers = 3; c.channels = 8; c.num_heads = 2; c.vocab_size = 10; c.padded_vocab_size = 128; c.max_seq_len = 16;
    return c;
}

struct StateFile {
    int32_t h[256] = {};
    std::vector<int32_t> x, y;
    std::vector<float> logits, grads, losses;
    float loss = 2.3f;
    size_t drop = 0;     // bytes cut off the end
    size_t extra = 0;    // floats added at the end
};
static StateFile good_state(const GPT2Config& c, int B, int T, int steps) {
    StateFile s;
    s.h[0] = REFERENCE_STATE_MAGIC; s.h[1] = REFERENCE_STATE_VERSION; s.h[2] = B; s.h[3] = T; s.h[4] = steps;
    const float hyper[6] = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    memcpy(&s.h[5], hyper, sizeof hyper);
    const size_t bt = (size_t)B * T;
    for (size_t i = 0; i < bt; i++) { s.x.push_back((int)(i % c.vocab_size)); s.y.push_back((int)((i + 1) % c.vocab_size)); }
    s.logits.assign(bt * c.vocab_size, 0.5f);
    s.grads.resize(param_layout(c).total);
    for (size_t i = 0; i < s.grads.size(); i++) s.grads[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < steps; i++) s.losses.push_back(2.3f - 0.1f * i);
    return s;
}
static void write_state(const std::string& path, const StateFile& s) {
    std::string bytes((const char*)s.h, sizeof s.h);
    auto add = [&](const void* p, size_t n) { bytes.append((const char*)p, n); };
    add(s.x.data(), s.x.size() * 4); add(s.y.data(), s.y.size() * 4); add(s.logits.data(), s.logits.size() * 4);
    add(&s.loss, 4); add(s.grads.data(), s.grads.size() * 4); add(s.losses.data(), s.losses.size() * 4);
    bytes.resize(bytes.size() - s.drop);
    bytes.append(s.extra * 4, '\0');
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
}
// reads `s` back: true when read; *err holds the error line otherwise
static bool read_back(const std::string& path, const GPT2Config& c, const StateFile& s, ReferenceState* r, std::string* err) {
    write_state(path, s);
    err->clear();
    return reference_state_read(path.c_str(), c, r, err);
}
static bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
// `ok` evaluated before the name is built: the name shows this read's error line
static void check_line(bool ok, const std::string& name, const std::string& err) { check_report(ok, name + " (" + err + ")"); }

static void state_file_checks() {
    const GPT2Config c = tiny();
    const std::string dir = tmpdir(), path = dir + "/state.bin";
    ReferenceState r;
    std::string err;
    StateFile s = good_state(c, 2, 3, 4);
    check_line(read_back(path, c, s, &r, &err) && r.B == 2 && r.T == 3 && r.steps == 4 && r.x == std::vector<int>(s.x.begin(), s.x.end()) &&
          r.grads == s.grads && r.losses == s.losses && r.loss == s.loss && r.lr == 3e-4f && r.grad_clip == 1.0f,
          "a state read back as written", err);
    StateFile z = good_state(c, 2, 3, 0);
    check_line(read_back(path, c, z, &r, &err) && r.steps == 0 && r.losses.empty(), "steps = 0 (convert_hf.py's check state) reads", err);

    StateFile t = s; t.drop = 4;
    check_line(!read_back(path, c, t, &r, &err) && has(err, "truncated") && has(err, path), "a truncated state: one line", err);
    // a state for a model with more gradients: the old reader took the surplus for the losses
    StateFile l = s; l.extra = 1;
    check_line(!read_back(path, c, l, &r, &err) && has(err, "trailing data"), "a state with trailing data: one line", err);
    GPT2Config bigger = c; bigger.num_layers = 4;
    write_state(path, good_state(bigger, 2, 3, 4));
    check_line(!reference_state_read(path.c_str(), c, &r, &err) && has(err, "larger model"),
          "a state written for a larger model (L=4 read as L=3): one line", err);
    GPT2Config smaller = c; smaller.num_layers = 2;
    write_state(path, good_state(smaller, 2, 3, 4));
    check_line(!reference_state_read(path.c_str(), c, &r, &err) && has(err, "truncated"), "a state for a smaller model: one line", err);

    const struct { int B, T, steps; const char* what; } bad[] = {
        {0, 3, 4, "B = 0"}, {-2, 3, 4, "B < 0"}, {2, 0, 4, "T = 0"}, {2, 17, 4, "T above maxT"}, {2, 3, -1, "steps < 0"},
        {1 << 30, 16, 4, "B = 2^30 (no allocation of B*T*V floats)"}};
    for (const auto& b : bad) {
        StateFile h = s; h.h[2] = b.B; h.h[3] = b.T; h.h[4] = b.steps;
        check_line(!read_back(path, c, h, &r, &err) && has(err, "header holds"), std::string("header with ") + b.what + ": one line", err);
    }
    StateFile big = s; big.h[2] = 1 << 20; big.h[3] = 16;   // in range, but the file is far too small for it
    check_line(!read_back(path, c, big, &r, &err) && has(err, "truncated"), "header B*T larger than the file: one line", err);
    StateFile nanlr = s; const float nan = NAN; memcpy(&nanlr.h[5], &nan, 4);
    check_line(!read_back(path, c, nanlr, &r, &err) && has(err, "AdamW"), "a NaN learning rate in the header: one line", err);
    StateFile magic = s; magic.h[0] = MODEL_MAGIC;   // a model file given as the state
    check_line(!read_back(path, c, magic, &r, &err) && has(err, "not a reference state"), "a model file as the state: one line", err);
    StateFile version = s; version.h[1] = 2;
    check_line(!read_back(path, c, version, &r, &err) && has(err, "version 2"), "another version: one line", err);
    StateFile tok = s; tok.x[5] = c.vocab_size;
    check_line(!read_back(path, c, tok, &r, &err) && has(err, "token 5"), "an input token = V: one line", err);
    StateFile tgt = s; tgt.y[0] = -1;
    check_line(!read_back(path, c, tgt, &r, &err) && has(err, "token 0"), "a negative target: one line", err);
    StateFile nl = s; nl.losses[2] = NAN;
    check_line(!read_back(path, c, nl, &r, &err) && has(err, "not finite"), "a NaN in the reference's losses: one line", err);
    StateFile ng = s; ng.grads[17] = INFINITY;
    check_line(!read_back(path, c, ng, &r, &err) && has(err, "not finite"), "an inf in the reference's gradients: one line", err);
    // a cross-entropy of 0 (or below) is no reference's: said as such, not as "not finite"
    StateFile zl = s; zl.loss = 0.0f;
    check_line(!read_back(path, c, zl, &r, &err) && has(err, "loss 0 is not positive") && !has(err, "finite"),
               "a reference loss of 0: one line saying so", err);

    check_line(!reference_state_read((dir + "/missing.bin").c_str(), c, &r, &err) && has(err, "cannot open") && has(err, "reference.py"),
          "a missing state: one line naming reference.py", err);
    check_line(!reference_state_read(dir.c_str(), c, &r, &err) && has(err, "not a regular file"), "a directory: one line", err);
    unlink(path.c_str());
    rmdir(dir.c_str());
}

static void grad_error_checks() {
    const GPT2Config c = tiny();
    const ParamLayout p = param_layout(c);
    // a reference whose last layer holds a small part (5%) of every block tensor's norm, as the
    // last layer's share is smallest in the real reference (8% of qkvb's at d12)
    std::vector<float> ref(p.total), ours(p.total);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        for (size_t l = 0; l < param_tensor_count(c, t); l++)
            for (size_t i = 0; i < param_tensor_elems(c, t); i++) {
                const float v = (float)((i * 7 + l * 3 + t) % 11) - 5.0f + 0.5f;
                const float share = l == 2 ? 0.05f : 1.0f;
                ref[model_file_offset(c, t, (int)l) + i] = v * share;
                ours[param_offset(c, p, t, (int)l) + i] = v * share;
            }
    auto worst = [&](const std::vector<float>& g) {
        double w = 0;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) w = std::max(w, grad_error(c, p, g.data(), ref.data(), t).rel);
        return w;
    };
    CHECK(worst(ours) == 0.0, "the reference's own gradients, layer-major: error 0 (offsets map file order to memory)");
    const double tol = 0.15;  // BF16's gradient tolerance, the loosest
    auto edit = [&](int t, int l, float factor) {
        std::vector<float> g = ours;
        float* q = &g[param_offset(c, p, t, l)];
        for (size_t i = 0; i < param_tensor_elems(c, t); i++) q[i] *= factor;
        return grad_error(c, p, g.data(), ref.data(), t);
    };
    GradError zeroed = edit(P_QKVB, 2, 0.0f), doubled = edit(P_FCPROJB, 2, 2.0f);
    CHECK(zeroed.rel >= 1.0 - 1e-9 && zeroed.worst_layer == 2, "the last layer's qkvb gradient zeroed: error 1, layer 2 named");
    CHECK(doubled.rel >= 1.0 - 1e-9 && doubled.rel > tol, "the last layer's fcprojb gradient doubled: error 1");
    CHECK(edit(P_LNFB, 0, 0.0f).rel >= 1.0 - 1e-9 && edit(P_WTE, 0, 2.0f).rel >= 1.0 - 1e-9 && edit(P_WPE, 0, -1.0f).rel >= 2.0 - 1e-9,
          "lnfb zeroed, wte doubled, wpe negated: caught (tensors outside the blocks)");
    // swapped: layers 1 and 2 of attprojw (the big layer's gradient where the small one's belongs)
    std::vector<float> sw = ours;
    const size_t e = param_tensor_elems(c, P_ATTPROJW);
    std::swap_ranges(&sw[param_offset(c, p, P_ATTPROJW, 1)], &sw[param_offset(c, p, P_ATTPROJW, 1)] + e, &sw[param_offset(c, p, P_ATTPROJW, 2)]);
    CHECK(grad_error(c, p, sw.data(), ref.data(), P_ATTPROJW).rel > 1.0, "two layers' attprojw gradients swapped: error above 1");
    // all layers measured together (the old measure) would have let the zeroed layer pass
    double num = 0, den = 0;
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; i < param_tensor_elems(c, P_QKVB); i++) {
            const double b = ref[model_file_offset(c, P_QKVB, (int)l) + i];
            num += l == 2 ? b * b : 0; den += b * b;
        }
    CHECK(std::sqrt(num / den) < tol, "(the all-layer measure of that zeroed layer is below BF16's tolerance: why per layer)");
    std::vector<float> nan = ours;
    nan[param_offset(c, p, P_LN2W, 1) + 3] = NAN;
    GradError ne = grad_error(c, p, nan.data(), ref.data(), P_LN2W);
    CHECK(std::isinf(ne.rel) && !(ne.rel < tol) && ne.worst_layer == 1, "a NaN in a gradient: error inf, its layer named");
}

static void losses_error_checks() {
    const std::vector<float> ref = {10.0f, 9.0f, 8.0f, 7.0f};
    const std::vector<bool> none(4, false);
    CHECK(std::fabs(losses_error({10.0f, 9.01f, 8.0f, 7.02f}, none, ref) - 0.002) < 1e-6, "the worst step's error over the initial loss");
    const double n = losses_error({10.0f, 9.0f, NAN, NAN}, none, ref);
    CHECK(std::isinf(n) && !(n < 1e-5), "losses that turn NaN after step 1: error inf (std::max would have kept 0)");
    CHECK(std::isinf(losses_error({10.0f, 9.0f, 8.0f, 7.0f}, {false, false, false, true}, ref)),
          "a skipped last step, its loss the reference's: error inf (the reference never skips)");
    CHECK(std::isinf(losses_error({10.0f, 9.0f}, {false, false}, ref)), "fewer steps than the reference: error inf");
    CHECK(losses_error({}, {}, {}) == 0.0, "no steps (a check state of convert_hf.py): error 0");
}

int main() {
    state_file_checks();
    grad_error_checks();
    losses_error_checks();
    return check_finish();
}
