"""The PyTorch peer of `train_gpt2cu --bench`: GPT-2 training steps with torch.compile, timed the
same way, so that the two can run side by side on one GPU (dev/device/peers.sh).

The model is dev/reference.py's (the same tensors, GPT-2's init) with PyTorch's fused causal
attention (F.scaled_dot_product_attention) and the lm head over the padded vocabulary (50304, as
nanoGPT and llm.c's train_gpt2.py pad it); parameters in fp32 under autocast (bf16, or fp16 with a
GradScaler), torch.compile of the loss (forward + cross-entropy), fused AdamW, gradient clipping
at 1.0. Random tokens, one micro-step per optimizer step. Prints the median step time of the
timed steps (CUDA events), tok/s, MFU (6N + 6LCT FLOPs per token against 989 TFLOP/s, as the
trainer reports it) and the peak memory, then one RESULT line.
    python3 dev/torch_bench.py [-e d12] [-b 64] [-t 1024] [--dtype bf16|fp16] [--steps 20] [--warmup 5] [--no-compile]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import CONFIGS, forward, init_params, make_config


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-e", "--model", default="d12", choices=sorted(c for c in CONFIGS if c != "tiny"))
    ap.add_argument("-b", "--batch", type=int, default=64)
    ap.add_argument("-t", "--seq", type=int, default=1024)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    ap.add_argument("--no-compile", action="store_true", help="eager PyTorch")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_bench: no CUDA device")
    cfg = make_config(args.model)
    B, T = args.batch, args.seq
    if T > cfg["maxT"]:
        sys.exit(f"torch_bench: -t {T} is longer than the model's {cfg['maxT']} positions")
    dev = torch.device("cuda")
    params = {k: v.to(dev).requires_grad_(True) for k, v in init_params(cfg, 1337).items()}
    n_params = sum(v.numel() for v in params.values())
    Vp = params["wte"].shape[0]
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    opt = torch.optim.AdamW(params.values(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=args.dtype == "fp16")

    def loss_fn(x, y):
        with torch.autocast("cuda", dtype=dtype):
            logits = forward(params, cfg, x, sdpa=True, padded_logits=True)
            return F.cross_entropy(logits.view(-1, Vp), y.view(-1))

    step_loss = loss_fn if args.no_compile else torch.compile(loss_fn)
    gen = torch.Generator(device=dev).manual_seed(0)

    def step():
        x = torch.randint(0, cfg["V"], (B, T), device=dev, generator=gen)
        y = torch.randint(0, cfg["V"], (B, T), device=dev, generator=gen)
        loss = step_loss(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    tok_s = B * T / (ms / 1e3)
    L, C = cfg["L"], cfg["C"]
    mfu = tok_s * (6 * n_params + 6 * L * C * T) / 989e12 * 100
    mem = torch.cuda.max_memory_allocated() / 1e9
    mode = "eager" if args.no_compile else "torch.compile"
    print(f"{args.model} B={B} T={T} {args.dtype} {mode}: {ms:.2f} ms/step (median of {args.steps}), {tok_s:,.0f} tok/s, "
          f"MFU {mfu:.2f} %, peak memory {mem:.2f} GB, last loss {loss.item():.4f}")
    print(f"RESULT trainer=pytorch mode={mode} precision={args.dtype} model={args.model} B={B} T={T} "
          f"tok_per_s={tok_s:.0f} mfu={mfu:.2f} median_ms={ms:.3f} device_mem_gb={mem:.2f}")


if __name__ == "__main__":
    main()
