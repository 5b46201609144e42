// Unit test of the activation memory plan (llmc/activations.cuh): host code, so it runs on a
// machine without a GPU (built by nvcc only for the headers' kernels; no CUDA call is made: the
// layout is computed against a made-up base address, nothing is allocated). For d12..d48, odd and
// even B and T, every --recompute level and lm-head chunks that do and do not divide B*T:
//   - every tensor starts 256-byte aligned, and the allocation's `bytes` ends after the last;
//   - every slice block_acts hands forward and backward (for every layer) lies inside its own
//     tensor, at the allocated (B,T) and at the smaller shapes evaluation and sampling run
//     (fewer rows; shorter rows; more, shorter rows for the multiple-choice rows): a slice that
//     ran into the next tensor would be a buffer used for two things at once;
//   - the ones column is initialized (ln_rows rows) under every row a slice of ln1/ln2 reads;
//   - the logits | dbig region holds a full lm-head chunk, dbig's (B,T,4C) and (B,T,3C);
//   - at --recompute 1 all layers share one fch_gelu, at 2 also one ln1 and one ln2; else none.
#include <algorithm>
#include <cstdint>
#include <vector>
#include "dev/unit/check.h"
#include "llmc/gpt2.cuh"

// The tensors' start addresses, sorted: a tensor's extent is [its start, the next start or the end).
struct Extents {
    std::vector<uintptr_t> starts;
    uintptr_t end;
    // does [p, p + bytes) lie inside the tensor that starts at `start`?
    bool inside(uintptr_t start, const void* p, size_t bytes) const {
        const auto it = std::upper_bound(starts.begin(), starts.end(), start);
        const uintptr_t limit = it == starts.end() ? end : *it, q = (uintptr_t)p;
        return q >= start && q + bytes <= limit;
    }
};

int main() {
    const char* descs[] = {"d12", "d24", "d36", "d48"};
    const int shapes[][2] = {{1, 1}, {3, 77}, {5, 1023}, {4, 1024}, {64, 1024}};
    const size_t chunks[] = {1, 100, 16384, (size_t)1 << 30};
    char* const base = reinterpret_cast<char*>((uintptr_t)1 << 40);   // never dereferenced
    int layouts = 0, aligned = 0, slices_bad = 0, ones_bad = 0, bytes_bad = 0, head_bad = 0, sharing_bad = 0;
    std::string first_bad;
    auto bad = [&](int* counter, const std::string& what) { if ((*counter)++ == 0 && first_bad.empty()) first_bad = what; };
    for (const char* d : descs) {
        GPT2Config c;
        config_from_descriptor(d, &c);
        const size_t C = c.channels, Vp = c.padded_vocab_size, LD = ones_ld(c.channels), X = sizeof(floatX), F = sizeof(float);
        for (const auto& s : shapes)
            for (size_t chunk : chunks)
                for (int rc = 0; rc <= 2; rc++) {
                    const int B = s[0], T = s[1];
                    const size_t bt = (size_t)B * T;
                    Activations a;
                    const size_t bytes = activations_layout(&a, c, B, T, rc, chunk, base);
                    a.dbig = a.logits;   // as activations_alloc does
                    layouts++;
                    const std::string tag = std::string(d) + " B=" + std::to_string(B) + " T=" + std::to_string(T) +
                                            " chunk=" + std::to_string(chunk) + " recompute=" + std::to_string(rc);
                    const void* tensors[] = {a.ln1, a.qkv, a.atty, a.att, a.residual2, a.ln2, a.fch, a.fch_gelu, a.residual3,
                                             a.ln1_mean, a.ln1_rstd, a.ln2_mean, a.ln2_rstd, a.encoded, a.lnf, a.lnf_mean,
                                             a.lnf_rstd, a.logits, a.losses, a.dresidual, a.dbtc, a.att_scratch, a.wgrad};
                    Extents e;
                    bool al = true;
                    for (const void* p : tensors) { e.starts.push_back((uintptr_t)p); al &= ((uintptr_t)p - (uintptr_t)base) % 256 == 0; }
                    std::sort(e.starts.begin(), e.starts.end());
                    e.end = (uintptr_t)base + bytes;
                    aligned += al && e.starts.back() < e.end && std::adjacent_find(e.starts.begin(), e.starts.end()) == e.starts.end();
                    auto in = [&](const void* t, const void* p, size_t n) { return e.inside((uintptr_t)t, p, n); };
                    // once per model (the allocated shape)
                    const bool model_ok = in(a.encoded, a.encoded, bt * C * X) && in(a.lnf, a.lnf, bt * C * X) &&
                                          in(a.lnf_mean, a.lnf_mean, bt * F) && in(a.lnf_rstd, a.lnf_rstd, bt * F) &&
                                          in(a.losses, a.losses, bt * F) && in(a.dresidual, a.dresidual, bt * C * X) &&
                                          in(a.dbtc, a.dbtc, bt * C * X) &&
                                          in(a.att_scratch, a.att_scratch, attention_scratch_bytes(B, T, c.channels, c.num_heads)) &&
                                          in(a.wgrad, a.wgrad, 4 * C * (C + ONES_ROWS) * F);
                    if (!model_ok) bad(&slices_bad, tag + ": a once-per-model tensor");
                    // the lm head: every chunk gpt2_forward runs, then dbig in backward
                    const bool head_ok = a.logit_rows >= 1 && a.logit_rows <= bt && a.logit_rows >= std::min(bt, (size_t)T) &&
                                         in(a.logits, a.logits, a.logit_rows * Vp * X) && in(a.logits, a.dbig, 4 * bt * C * X);
                    if (!head_ok) bad(&head_bad, tag + ": the logits | dbig region");
                    // forward and backward at the allocated shape; evaluation's fewer and shorter rows; sampling's one row
                    const int Tc = std::min(T, 64);
                    const int sub[][2] = {{B, T}, {std::max(1, B / 2), T}, {B, std::max(1, T / 2)}, {1, T}, {1, 1},
                                          {(int)(bt / Tc), Tc}};
                    for (const auto& u : sub) {
                        const int b = u[0], t = u[1];
                        const size_t ubt = (size_t)b * t, btc = ubt * C;
                        const std::string at = tag + " at (" + std::to_string(b) + "," + std::to_string(t) + ")";
                        for (int l = 0; l < c.num_layers; l++) {
                            const BlockActs x = block_acts(a, c, b, t, l);
                            const bool ok = (l == 0 ? in(a.encoded, x.input, btc * X) : in(a.residual3, x.input, btc * X)) &&
                                            in(a.ln1, x.ln1, ubt * LD * X) && in(a.ln1_mean, x.ln1_mean, ubt * F) &&
                                            in(a.ln1_rstd, x.ln1_rstd, ubt * F) && in(a.qkv, x.qkv, 3 * btc * X) &&
                                            in(a.atty, x.atty, btc * X) &&
                                            in(a.att, x.att, attention_state_elems(b, t, c.num_heads) * F) &&
                                            in(a.residual2, x.residual2, btc * X) && in(a.ln2, x.ln2, ubt * LD * X) &&
                                            in(a.ln2_mean, x.ln2_mean, ubt * F) && in(a.ln2_rstd, x.ln2_rstd, ubt * F) &&
                                            in(a.fch, x.fch, 4 * btc * X) && in(a.fch_gelu, x.fch_gelu, 4 * btc * X) &&
                                            in(a.residual3, x.residual3, btc * X);
                            if (!ok) bad(&slices_bad, at + " layer " + std::to_string(l));
                            // the rows of ones_ld(C) that activations_alloc gave a ones column
                            const size_t ln_end = a.ln_rows * LD * X;
                            if ((size_t)((char*)x.ln1 - (char*)a.ln1) + ubt * LD * X > ln_end ||
                                (size_t)((char*)x.ln2 - (char*)a.ln2) + ubt * LD * X > ln_end)
                                bad(&ones_bad, at + " layer " + std::to_string(l));
                            // the shared slices: one per model at the recompute levels that share them, one per layer otherwise
                            const BlockActs x0 = block_acts(a, c, b, t, 0);
                            if (l > 0 && ((x.fch_gelu == x0.fch_gelu) != (rc >= 1) || (x.ln1 == x0.ln1) != (rc >= 2) ||
                                          (x.ln2 == x0.ln2) != (rc >= 2) || x.fch == x0.fch || x.qkv == x0.qkv))
                                bad(&sharing_bad, at + " layer " + std::to_string(l));
                        }
                        // sampling (no targets) needs the whole row's logits in one chunk
                        if (b == 1 && (size_t)t > a.logit_rows) bad(&head_bad, at + ": one sequence exceeds the logits chunk");
                    }
                    if (activations_bytes(c, B, T, rc, chunk) != bytes) bad(&bytes_bad, tag + ": activations_bytes != the layout's");
                }
    }
    if (!first_bad.empty()) printf("    first failure: %s\n", first_bad.c_str());
    CHECK_EQ(aligned, layouts, "every tensor 256-byte aligned, distinct, inside the allocation");
    CHECK_EQ(slices_bad, 0, "every layer's slice inside its own tensor, at the allocated and the smaller shapes");
    CHECK_EQ(ones_bad, 0, "ln1/ln2 slices only read rows whose ones column was initialized");
    CHECK_EQ(head_bad, 0, "the logits | dbig region holds a chunk's logits and dbig; a sequence fits one chunk");
    CHECK_EQ(sharing_bad, 0, "--recompute 1 shares fch_gelu, 2 also ln1 and ln2; nothing else is shared");
    CHECK_EQ(bytes_bad, 0, "activations_bytes (the memory check) is the allocation's size");
    return check_finish();
}
