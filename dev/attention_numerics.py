#!/usr/bin/env python3
"""The flash-attention kernels' arithmetic, emulated in numpy, against a float64 reference.

What for: dev/cuda/attention.cu's tolerances. Its inputs are N(0,1), so scores stay small; this
measures what the kernels' roundings give at large scores (nearly one-hot softmax rows, the online
softmax's rescale factor underflowing, the log-sum-exp far from 0), without a GPU; and, for
information, dq's sensitivity to an offset common to every key (inputs_key_offset). The errors are
those of the arithmetic below, not measurements of the kernels; a kernel defect would not show.

Emulated (per head, all heads of a problem at once; hs = 64, causal; X = the build's 16-bit type):
  inputs q, k, v, dout rounded to X (as check.cuh's to_device); products of X values are exact in
  fp32, so every tensor-core product is an fp32 matmul of X values (its summation order aside).
  forward, online softmax over key tiles (mma.sync: 64 keys, wgmma: 128), per row:
      mx = max(m, rowmax(S)) (S raw, fp32), alpha = exp2((m - mx) * c), c = fp32(log2(e)) / 8,
      P = exp2(fma(S, c, -fp32(mx * c)))   (ex2.approx.ftz: results below 2^-126 flush to 0;
          wgmma: every 4th 8-key chunk of a tile by exp2_poly, bit-exact below, clamped at -126)
      l = l * alpha + rowsum(P)            (mma.sync: fp32 P; wgmma: P rounded to X, by the MMA)
      O = O * alpha + X(P) @ V             (fp32)
    out = X(O * (1/l)), lse = fp32(m/8 + ln l)   (fp32, natural log)
  backward: delta = rowsum(dout * out) in fp32 from the ROUNDED out (both paths),
      P = exp2(fma(S, c, -fp32(lse * log2e))), dP = dO V^T, dS = P (dP - delta)   (fp32)
      dV = X(X(P)^T dO), dK = X(X(dS)^T Q / 8), dQ = X(X(dS) K / 8)
  the cuBLAS reference path (attention_reference_*; the model's path in FP32 builds): cublas_path.
Not modelled: the MMAs' summation order, the approximate ex2/lg2/rcp of --use_fast_math beyond
  rounding to fp32 (errors ~1e-7, far below X's rounding), cuBLAS's algorithm choice.
Metric: dev/cuda/check.cuh's check_close over the whole tensor: rel = ||x - ref|| / ||ref||, and
  "out8" = max |x - ref| / (8 (|ref| + rms(ref))), which must also be <= tol (its outlier test);
  a case passes at tol >= max(rel, out8). A reference with rms < 1e-9 is judged by max |x - ref|
  (check_close_or_abs), printed as "abs".
Run: python3 dev/attention_numerics.py [--fp32] [--seed N] [--brief] [--seeds N]   (~10 s; --seeds 20: ~5 min)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_file import doc_parser  # first: one line where numpy is missing
import numpy as np

HS = 64
LOG2E = np.float32(1.4426950408889634)
C2 = np.float32(LOG2E / np.float32(8))  # flash::SCALE_LOG2 (exact: a power-of-two division)


def round_bf16(x):
    """float32 -> bfloat16 -> float32, round to nearest even (__float2bfloat16_rn; no NaNs here)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def round_fp16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def f32(x):
    return np.asarray(x, np.float64).astype(np.float32)


def ex2(x):
    """ex2.approx.ftz.f32, modelled as exp2 rounded to fp32 with results below 2^-126 flushed."""
    with np.errstate(over="ignore"):
        y = f32(np.exp2(np.asarray(x, np.float64)))
    return np.where(y < np.float32(2.0**-126), np.float32(0), y)


def exp2_poly(x):
    """flash_wgmma::exp2_poly, bit for bit (fp32 adds round to nearest; fmaf rounded once)."""
    x = np.maximum(np.asarray(x, np.float32), np.float32(-126))
    R = np.float32(12582912.0)
    t = (x + R).astype(np.float32)
    f = (x - (t - R).astype(np.float32)).astype(np.float32)
    p = f32(np.float64(np.float32(0.05517097935)) * f + np.float64(np.float32(0.2426097095)))
    p = f32(p.astype(np.float64) * f + np.float64(np.float32(0.6932609677)))
    p = f32(p.astype(np.float64) * f + np.float64(np.float32(0.9999281764)))
    bits = (p.view(np.int32).astype(np.int64) + (t.view(np.int32).astype(np.int64) << 23)) & 0xFFFFFFFF
    return bits.astype(np.uint32).view(np.float32)


def fma32(a, b, c):
    """fmaf: a*b+c rounded once (a, b fp32: the product is exact in float64)."""
    return f32(np.asarray(a, np.float64) * np.float64(b) + np.asarray(c, np.float64))


def causal_mask(T):
    return np.tril(np.ones((T, T), bool))


def reference(q, k, v, do):
    """float64, as dev/cuda/attention.cu's reference(): out, lse, dq, dk, dv (heads first)."""
    q, k, v, do = (a.astype(np.float64) for a in (q, k, v, do))
    T = q.shape[1]
    s = q @ k.transpose(0, 2, 1) / 8.0
    s = np.where(causal_mask(T), s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    l = e.sum(-1, keepdims=True)
    p = e / l
    out = p @ v
    lse = (m + np.log(l))[..., 0]
    dp = do @ v.transpose(0, 2, 1)
    dot = (p * dp).sum(-1, keepdims=True)
    ds = p * (dp - dot) / 8.0
    return dict(out=out, lse=lse, att=p, dq=ds @ k, dk=ds.transpose(0, 2, 1) @ q, dv=p.transpose(0, 2, 1) @ do)


def flash(q, k, v, do, X, wgmma, delta_from_fp32_out=False):
    """The kernels' arithmetic (module docstring). X: the rounding to the 16-bit type."""
    H, T, _ = q.shape
    BK = 128 if wgmma else 64
    mask = causal_mask(T)
    S = (q @ k.transpose(0, 2, 1)).astype(np.float32)  # raw scores, fp32
    m = np.full((H, T), -np.inf, np.float32)
    l = np.zeros((H, T), np.float32)
    O = np.zeros((H, T, HS), np.float32)
    rows = np.arange(T)
    alpha_underflows = 0
    for k0 in range(0, T, BK):
        ks = slice(k0, min(k0 + BK, T))
        # mma.sync: a warp visits a tile if it holds a row >= k0 (its masked entries: exp2(-inf) = 0).
        # wgmma: an item of 128 rows visits tiles 0..q0/128 (BK = BQ): row r visits k0 <= r.
        visit = rows >= k0
        s = np.where(mask[:, ks], S[:, :, ks], np.float32(-np.inf))
        mx = np.where(visit, np.maximum(m, s.max(-1)), m)
        with np.errstate(invalid="ignore"):
            a = ex2(f32((m - mx).astype(np.float32) * C2))
        a = np.where(visit, a, np.float32(1))
        alpha_underflows += int(((a == 0) & np.isfinite(m) & visit).sum())
        mc = f32(mx.astype(np.float64) * np.float64(C2))
        x = fma32(s, C2, -mc[..., None])
        p = ex2(x)
        if wgmma:  # POLY_EVERY = 4: chunks i % 4 == 3 of the tile's 8-key chunks
            poly = ((np.arange(ks.stop - ks.start) // 8) % 4) == 3
            p = np.where(poly, exp2_poly(x), p)
        p = np.where(visit[..., None], p, np.float32(0))
        pr = X(p)
        l = f32(l * a + (pr if wgmma else p).sum(-1, dtype=np.float32))
        O = f32(O * a[..., None] + pr @ v[:, ks])
        m = mx
    inv_l = f32(np.float32(1) / l)
    out32 = f32(O * inv_l[..., None])
    out = X(out32)
    lse = f32(m * np.float32(0.125) + f32(np.log(l.astype(np.float64))))
    # backward
    delta = ((out32 if delta_from_fp32_out else out) * do).sum(-1, dtype=np.float32)
    lse2 = f32(lse.astype(np.float64) * np.float64(LOG2E))
    P = ex2(fma32(S, C2, -lse2[..., None]))
    P = np.where(mask, P, np.float32(0))
    dP = (do @ v.transpose(0, 2, 1)).astype(np.float32)
    dS = f32(P * f32(dP - delta[..., None]))
    dSr, Pr = X(dS), X(P)
    dq = X(f32((dSr @ k).astype(np.float32) * np.float32(0.125)))
    dk = X(f32((dSr.transpose(0, 2, 1) @ q).astype(np.float32) * np.float32(0.125)))
    dv = X((Pr.transpose(0, 2, 1) @ do).astype(np.float32))
    return dict(out=out, lse=lse, dq=dq, dk=dk, dv=dv), alpha_underflows


def cublas_path(q, k, v, do, X):
    """attention_reference_forward/_backward (cuBLAS, fp32 accumulation, no TF32), every tensor
    between kernels rounded to X (identity in FP32 builds): S/8, softmax with fast-math expf
    (ex2.approx(x * log2e)), att, y = att V; datt = dy V^T, dS = att (datt - rowsum(att datt)),
    dQ = dS K / 8, dK = dS^T Q / 8, dV = att^T dy."""
    T = q.shape[1]
    mask = causal_mask(T)
    s = X(f32((q @ k.transpose(0, 2, 1)).astype(np.float32) * np.float32(0.125)))
    s = np.where(mask, s, np.float32(-np.inf))
    mx = s.max(-1, keepdims=True)
    e = np.where(mask, ex2(f32((s - mx).astype(np.float32) * LOG2E)), np.float32(0))  # __expf
    att = X(f32(e * f32(np.float32(1) / e.sum(-1, keepdims=True, dtype=np.float32))))
    out = X((att @ v).astype(np.float32))
    datt = X((do @ v.transpose(0, 2, 1)).astype(np.float32))
    dot = (att * datt).sum(-1, keepdims=True, dtype=np.float32)
    dS = X(f32(att * f32(datt - dot)))
    return dict(out=out, att=att, dq=X(f32((dS @ k).astype(np.float32) * np.float32(0.125))),
                dk=X(f32((dS.transpose(0, 2, 1) @ q).astype(np.float32) * np.float32(0.125))),
                dv=X((att.transpose(0, 2, 1) @ do).astype(np.float32))), 0


def metric(x, ref):
    """check_close's numbers: (rel, out8), or ('abs', max_abs) for a ~zero reference."""
    x, ref = np.asarray(x, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    if not np.all(np.isfinite(x)):
        return ("nonfinite", int((~np.isfinite(x)).sum()))
    rms = np.sqrt(np.mean(ref * ref))
    d = np.abs(x - ref)
    if rms < 1e-9:
        return ("abs", d.max())
    return (np.linalg.norm(x - ref) / np.linalg.norm(ref), (d / (8 * (np.abs(ref) + rms))).max())


# ---- inputs: (B*NH heads, T, 64) each, already rounded to X

def inputs_normal(rng, H, T, X):
    """The check's inputs: qkv, dout N(0, 1)."""
    return [X(rng.standard_normal((H, T, HS)).astype(np.float32)) for _ in range(4)]


def inputs_scaled(rng, H, T, X, sigma2):
    """q, k ~ N(0, sigma2): the scaled scores q.k/8 have standard deviation sigma2; v, dout N(0, 1)."""
    q, k, v, do = (rng.standard_normal((H, T, HS)).astype(np.float32) for _ in range(4))
    g = np.float32(np.sqrt(sigma2))
    return [X(q * g), X(k * g), X(v), X(do)]


def inputs_dominant(rng, H, T, X, a2=800.0):
    """Each query's own key dominates: q_t = k_t = a u_t, |u_t| ~ 1, so s_tt ~ a2 and the other
    scores a2 * N(0, 1/64): margins of hundreds (P of the others exactly 0 in fp32, the running max
    jumping by > 87 between tiles, so alpha = exp(m_old - m_new) underflows to 0)."""
    u = rng.standard_normal((H, T, HS)).astype(np.float32) / np.float32(8)
    qk = X(u * np.float32(np.sqrt(8 * a2)))
    return [qk, qk.copy(), X(rng.standard_normal((H, T, HS)).astype(np.float32)),
            X(rng.standard_normal((H, T, HS)).astype(np.float32))]


def inputs_key_offset(rng, H, T, X, offset):
    """qkv, dout N(0, 1), then `offset` added to every element of every key: each score of a row
    moves by the same q.offset/8, which the softmax ignores (a key bias does this). Exactly,
    dq = sum_j dS_j k_j is unchanged, as a row's dS sums to 0; the 16-bit dS does not, so the
    offset leaks into dq (not into dk, dv). Not a case of attention_check: every backward that
    rounds dS to 16 bits has it (PyTorch's flash SDPA too)."""
    q, k, v, do = (rng.standard_normal((H, T, HS)).astype(np.float32) for _ in range(4))
    return [X(q), X(k + np.float32(offset)), X(v), X(do)]


def fmt(mv):
    if mv[0] == "abs":
        return "abs %.1e" % mv[1]
    if mv[0] == "nonfinite":
        return "NONFINITE %d" % mv[1]
    return "%.2e (out8 %.1e)" % mv


MODES = {"mma": "mma.sync kernels (non-Hopper model path)", "wgmma": "wgmma kernels (sm_90a model path)",
         "cublas": "cuBLAS reference path (attention_reference_*; FP32 builds' model path)"}


def run_case(label, q, k, v, do, X, mode, brief=True):
    """One line: the largest |score|, rows whose alpha underflowed to 0, then per tensor check_close's
    rel (out8); for the flash kernels, unless brief, also dq, dk with delta from an unrounded (fp32) out."""
    ref = reference(q, k, v, do)
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) / 8
    smax = np.abs(np.where(causal_mask(q.shape[1]), s, 0)).max()
    if mode == "cublas":
        got, und = cublas_path(q, k, v, do, X)
        names = ["out", "att", "dq", "dk", "dv"]
    else:
        got, und = flash(q, k, v, do, X, wgmma=(mode == "wgmma"))
        names = ["out", "lse", "dq", "dk", "dv"]
    res = {n: metric(got[n], ref[n]) for n in names}
    cols = "  ".join("%s %s" % (n, fmt(res[n])) for n in names)
    extra = ""
    if mode != "cublas" and not brief:  # how much of dq, dk is out's rounding: delta from the fp32 out
        g2, _ = flash(q, k, v, do, X, wgmma=(mode == "wgmma"), delta_from_fp32_out=True)
        extra = "  | delta from fp32 out: dq %s dk %s" % (fmt(metric(g2["dq"], ref["dq"])), fmt(metric(g2["dk"], ref["dk"])))
    if label:
        print("%-34s |s|max %6.1f alpha=0 %5d  %s%s" % (label, smax, und, cols, extra))
    return res


def cases(rng, X):
    """(label, inputs) of every case: (a) the check's N(0,1) shapes; (b) large scores; (c) a common
    offset in the keys (last, so the cases before draw the same inputs as without it)."""
    for B, T, NH in [(2, 64, 4), (2, 100, 4), (2, 17, 3), (2, 129, 3), (8, 63, 50), (4, 129, 50)]:
        yield "N(0,1) B=%d T=%d NH=%d" % (B, T, NH), inputs_normal(rng, B * NH, T, X)
    # B=2 NH=4 T=256: two wgmma key tiles, four mma.sync ones
    for sigma2 in (10, 30, 100):
        yield "q,k ~ N(0,%d) B=2 T=256 NH=4" % sigma2, inputs_scaled(rng, 8, 256, X, sigma2)
    yield "own key dominates B=2 T=256 NH=4", inputs_dominant(rng, 8, 256, X)
    for offset in (4, 16):
        yield "keys + %d B=2 T=256 NH=4" % offset, inputs_key_offset(rng, 8, 256, X, offset)


def main():
    ap = doc_parser(__doc__)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fp32", action="store_true", help="the FP32 build (its model path: the cuBLAS one)")
    ap.add_argument("--brief", action="store_true", help="without the delta-from-fp32-out columns")
    ap.add_argument("--seeds", type=int, default=0, help="only the worst max(rel, out8) per tensor of each case over this many seeds")
    args = ap.parse_args()
    types = [("fp32", f32)] if args.fp32 else [("bf16", round_bf16), ("fp16", round_fp16)]
    modes = ["cublas"] if args.fp32 else ["mma", "wgmma", "cublas"]
    for tname, X in types:
        for mode in modes:
            print("== %s, %s" % (tname, MODES[mode]))
            if args.seeds == 0:
                for label, inp in cases(np.random.default_rng(args.seed), X):
                    run_case(label, *inp, X, mode, brief=args.brief)
                continue
            worst = {}
            for seed in range(args.seeds):
                for label, inp in cases(np.random.default_rng(seed), X):
                    for n, r in run_case(None, *inp, X, mode).items():
                        v = r[1] if r[0] in ("abs", "nonfinite") else max(r)
                        w = worst.setdefault(label, {})
                        w[n] = max(w.get(n, 0.0), v if r[0] != "nonfinite" else np.inf)
            for label, w in worst.items():
                print("%-34s worst of %d seeds: %s" % (label, args.seeds, "  ".join("%s %.2e" % kv for kv in w.items())))


if __name__ == "__main__":
    main()
