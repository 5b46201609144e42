"""PyTorch scaled_dot_product_attention (flash backend), causal, head size 64: the side-by-side
reference for dev/cuda/attention.cu's flash-attention timings (`attention_check --sweep`). Same
configurations (B in {1,4,8,64}, T in {64,128,1000,1024,2048}, NH in {12,16,20,25}) and the same
FLOP convention: forward 2*B*NH*T*T*hs (the causal half of 4*B*NH*T*T*hs), backward 2.5x that,
forward+backward 3.5x. Backward is timed alone (autograd.grad on a kept graph, no accumulation into .grad), as the .cu times it.
PyTorch's layout is (B,NH,T,hs) where ours reads qkv (B,T,3,NH,hs): the same work either way.
Correctness of our kernels: attention.cu (CPU float64 and cuBLAS references) and sdpa_check.py
(against a float64 attention, side by side with this SDPA).
Run on the GPU machine:  python3 dev/cuda/sdpa_bench.py [--dtype fp16|bf16] [--quick] [--sync-timing]
  --quick: only B=8 and B=64 at T=1024, NH=12 (the shapes of the GPT-2 small training step)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from reference import need  # noqa: E402  (one line where PyTorch is missing, as every tool of dev/)
torch = need("dev/cuda/sdpa_bench.py", "torch", "PyTorch")
import torch.nn.functional as F  # noqa: E402


def bench(fn, reps, sync_each=False):
    """Median ms of fn() (GPU time), each run between its own pair of events. The runs are queued
    behind torch.cuda._sleep, which holds the stream until Python has enqueued all of them, so the
    events measure the GPU's time for fn() and not Python's dispatch (at B=8 SDPA's forward takes
    about as long on the GPU as its dispatch on the host); dev/cuda/check.cuh's median_ms (used by
    attention_check's timings) does the same.
    If enqueueing took longer than the hold, the hold doubles and the runs are repeated.
    sync_each (--sync-timing): event, fn(), event, synchronize per run, the host's latency included."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    s = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    e = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    hold_s = 0.02
    while True:
        t0 = time.perf_counter()
        if not sync_each:
            torch.cuda._sleep(int(hold_s * 2.0e9))  # cycles; at most ~2 GHz, so at least hold_s seconds
        for r in range(reps):
            s[r].record(); fn(); e[r].record()
            if sync_each:
                torch.cuda.synchronize()
        enqueue_s = time.perf_counter() - t0
        torch.cuda.synchronize()
        if sync_each or enqueue_s < 0.5 * hold_s or hold_s > 2:
            break
        hold_s *= 2
    return sorted(s[r].elapsed_time(e[r]) for r in range(reps))[reps // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sync-timing", action="store_true", help="time each run from an idle GPU (host latency included)")
    args = ap.parse_args()
    dt = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    hs = 64
    if args.quick:
        configs = [(8, 1024, 12), (64, 1024, 12)]
    else:
        configs = [(B, T, NH) for B in (1, 4, 8, 64) for T in (64, 128, 1000, 1024, 2048) for NH in (12, 16, 20, 25)]
    print(f"SDPA {args.dtype} flash backend (causal, hs=64): effective TFLOP/s, forward 2*B*NH*T*T*hs FLOPs, backward 2.5x; "
          f"timing: {'each run from an idle GPU' if args.sync_timing else 'GPU time, runs queued behind a hold'}")
    for B, T, NH in configs:
        q, k, v = (torch.randn(B, NH, T, hs, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
        do = torch.randn(B, NH, T, hs, device="cuda", dtype=dt)
        flops = 2 * B * NH * T * T * hs
        reps = 10 if flops > 1e11 else 20
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            fwd = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps, args.sync_timing)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            bwd = bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), reps, args.sync_timing)
        print(f"SDPA B={B:2d} T={T:4d} NH={NH:2d}  fwd {fwd:8.4f} ms {flops / fwd / 1e9:6.1f} TFLOP/s | "
              f"bwd {bwd:8.4f} ms {2.5 * flops / bwd / 1e9:6.1f} TFLOP/s | fwd+bwd {3.5 * flops / (fwd + bwd) / 1e9:6.1f} TFLOP/s",
              flush=True)
        del q, k, v, do, o


if __name__ == "__main__":
    main()
