"""PyTorch scaled_dot_product_attention (flash backend), causal, head size 64: the side-by-side
reference for dev/cuda/attention.cu's flash-attention timings. Same FLOP convention: forward
2*B*NH*T*T*hs (the causal half of 4*B*NH*T*T*hs), forward+backward 3.5x that.
Run on the GPU machine:  python3 dev/cuda/sdpa_bench.py [--dtype fp16|bf16]"""
import argparse
import torch
import torch.nn.functional as F

def bench(fn, reps=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    args = ap.parse_args()
    dt = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    hs = 64
    for B, NH, T in [(64, 12, 1024), (8, 12, 1024), (8, 12, 2048), (16, 25, 1024)]:
        q, k, v = (torch.randn(B, NH, T, hs, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
        do = torch.randn(B, NH, T, hs, device="cuda", dtype=dt)
        flops_fwd = 2 * B * NH * T * T * hs
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            fwd = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            def fb():
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                o.backward(do)
            fwdbwd = bench(fb)
        print(f"SDPA {args.dtype} B={B:3d} NH={NH:2d} T={T:5d}: forward {fwd:7.3f} ms {flops_fwd / fwd / 1e9:6.1f} TFLOP/s | "
              f"fwd+bwd {fwdbwd:7.3f} ms {3.5 * flops_fwd / fwdbwd / 1e9:6.1f} TFLOP/s")

if __name__ == "__main__":
    main()
