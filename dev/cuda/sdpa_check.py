"""Correctness of our attention against PyTorch, side by side with PyTorch's own flash attention.

For every B in {1,4,8}, T in {64,128,1000,1024,2048}, NH in {12,16,20,25} (head size 64, causal):
random q, k, v, dout (standard normal, rounded to the build's precision) go through
  ours:  `attention_check --io DIR` (the trainer's attention_forward + attention_backward; on
         Hopper builds the wgmma kernels),
  SDPA:  torch scaled_dot_product_attention with the flash backend, in the same precision,
  exact: a float64 attention (explicit masked softmax, autograd) on the same rounded inputs,
and the relative errors ||x - exact|| / ||exact|| of out, dq, dk, dv are printed for ours and for
SDPA. A case passes when all four of ours are within the tolerance (fp16 2e-3, bf16 1e-2: the
precisions' rounding, as the issue states them) -- and the table says how ours compares with SDPA.
The C++ side (dev/cuda/attention.cu) checks the same kernels against its own float64 CPU and cuBLAS
references; this is the check against an independent implementation.

Run on the GPU machine, with a binary of the matching precision:
  python3 dev/cuda/sdpa_check.py --binary build/bf16/attention_check --dtype bf16 [--quick] [--dir D]
  --quick: B=1 and 8, T=1000 and 1024, NH=12 and 25 only.
Exit status 0 when every case passes; the last line is "N passed, N failed" (`make test` runs it
on a GPU machine with torch, in fp16/bf16 builds)."""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from reference import need  # noqa: E402  (one line where PyTorch is missing, as every tool of dev/; numpy too)
import numpy as np  # noqa: E402
torch = need("dev/cuda/sdpa_check.py", "torch", "PyTorch")
import torch.nn.functional as F  # noqa: E402

HS = 64
TOL = {"fp16": 2e-3, "bf16": 1e-2}
PRECISION_CODE = {torch.float16: 1, torch.bfloat16: 2}  # attention_check --io's header


def to_file_bits(x):
    """A floatX tensor as int16 bit patterns (numpy has no bfloat16)."""
    return x.contiguous().view(torch.int16).cpu().numpy()


def from_file_bits(a, dtype, shape):
    return torch.from_numpy(a.copy()).view(dtype).reshape(shape)


def write_case(path, qkv, dout):
    B, T, _, NH, _ = qkv.shape
    with open(path, "wb") as f:
        np.array([PRECISION_CODE[qkv.dtype], B, T, NH], dtype=np.int32).tofile(f)
        to_file_bits(qkv).tofile(f)
        to_file_bits(dout).tofile(f)


def read_case(path, dtype, B, T, NH):
    a = np.fromfile(path, dtype=np.int16)
    n_out = B * T * NH * HS
    if a.size != 4 * n_out:
        sys.exit(f"{path}: {a.size * 2} bytes, expected {8 * n_out}")
    return from_file_bits(a[:n_out], dtype, (B, T, NH, HS)), from_file_bits(a[n_out:], dtype, (B, T, 3, NH, HS))


def exact_attention(q, k, v, dout):
    """float64 causal attention and its gradients; q, k, v, dout (B,NH,T,HS) float64."""
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    T = q.shape[2]
    s = (q @ k.transpose(-1, -2)) / HS ** 0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ v
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    return out.detach(), dq, dk, dv


def sdpa_attention(q, k, v, dout):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    return out.detach(), dq, dk, dv


def rel_err(x, ref):
    x = x.double()
    return ((x - ref).norm() / ref.norm()).item()


def main():
    # autograd's worker thread says so before its first cuBLAS call; it then sets the context itself
    warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True, help="attention_check built with the matching PRECISION")
    ap.add_argument("--dtype", required=True, choices=["fp16", "bf16"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", help="where the case files go (default: a temporary directory, removed after)")
    args = ap.parse_args()
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"--binary {args.binary}: not an executable file")
    dt = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    if args.quick:
        configs = [(B, T, NH) for B in (1, 8) for T in (1000, 1024) for NH in (12, 25)]
    else:
        configs = [(B, T, NH) for B in (1, 4, 8) for T in (64, 128, 1000, 1024, 2048) for NH in (12, 16, 20, 25)]
    tmp = None if args.dir else tempfile.TemporaryDirectory()
    d = args.dir or tmp.name
    os.makedirs(d, exist_ok=True)

    inputs = []
    for i, (B, T, NH) in enumerate(configs):
        g = torch.Generator(device="cuda").manual_seed(1000 + i)
        qkv = torch.randn(B, T, 3, NH, HS, device="cuda", generator=g).to(dt)
        dout = torch.randn(B, T, NH, HS, device="cuda", generator=g).to(dt)
        write_case(os.path.join(d, f"case_{i}.in"), qkv, dout)
        inputs.append((qkv.cpu(), dout.cpu()))
    r = subprocess.run([args.binary, "--io", d], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{args.binary} --io {d} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()}")

    tol = TOL[args.dtype]
    names = ("out", "dq", "dk", "dv")
    print(f"attention vs float64, {args.dtype}, causal, hs=64: relative error ours / SDPA flash (tolerance for ours {tol:g})")
    passed = failed = 0
    worst_ratio = 0.0
    for i, (B, T, NH) in enumerate(configs):
        qkv, dout = (x.cuda() for x in inputs[i])
        ours_out, ours_dqkv = read_case(os.path.join(d, f"case_{i}.out"), dt, B, T, NH)
        ours = (ours_out.cuda(), ours_dqkv[:, :, 0].cuda(), ours_dqkv[:, :, 1].cuda(), ours_dqkv[:, :, 2].cuda())
        q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))  # (B,NH,T,HS)
        do = dout.transpose(1, 2)
        exact = exact_attention(q.double(), k.double(), v.double(), do.double())
        sdpa = sdpa_attention(q, k, v, do)
        # ours are (B,T,NH,HS); the references (B,NH,T,HS)
        e_ours = [rel_err(o.transpose(1, 2), x) for o, x in zip(ours, exact)]
        e_sdpa = [rel_err(s, x) for s, x in zip(sdpa, exact)]
        ok = all(np.isfinite(e) and e <= tol for e in e_ours)
        passed, failed = passed + ok, failed + (not ok)
        worst_ratio = max(worst_ratio, max(a / b for a, b in zip(e_ours, e_sdpa)))
        cols = "  ".join(f"{n} {a:.2e} / {b:.2e}" for n, a, b in zip(names, e_ours, e_sdpa))
        print(f"{'PASS' if ok else 'FAIL'} B={B} T={T:4d} NH={NH:2d}  {cols}")
        del exact, sdpa
        torch.cuda.empty_cache()
    print(f"SUMMARY sdpa_check {args.dtype}: ours / SDPA error ratio at most {worst_ratio:.2f}")
    print(f"{passed} passed, {failed} failed")
    if tmp:
        tmp.cleanup()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
