"""The PyTorch peer of `train_gpt2cu --bench`: GPT-2 training steps with torch.compile, timed the
same way, so that the two can run side by side on one GPU (dev/device/peers.sh).

The model is dev/reference.py's (the same tensors, GPT-2's init) with PyTorch's fused causal
attention (F.scaled_dot_product_attention) and the lm head over the padded vocabulary (50304, as
nanoGPT and llm.c's train_gpt2.py pad it); parameters in fp32 under autocast (bf16, or fp16 with a
GradScaler), torch.compile of the loss (forward + cross-entropy), fused AdamW, gradient clipping
at 1.0. Random tokens; -d sets the tokens per optimizer step (gradient accumulation over
micro-steps, DDP's no_sync on all but the last), as the trainer's -d does. Prints the median step time of the
timed steps (CUDA events), tok/s, MFU (6N + 6LCT FLOPs per token against --peak-tflops,
989 TFLOP/s by default: the H100/H200 SXM's, as the trainer reports it there) and the peak memory, then one RESULT line.
With --ddp, under torchrun: one process per GPU, DistributedDataParallel over NCCL (B per GPU;
tok/s counts every GPU's tokens, MFU is per GPU); only rank 0 prints.
    python3 dev/torch_bench.py [-e d12] [-b 64] [-t 1024] [-d TOKENS] [--dtype bf16|fp16] [--steps 20] [--warmup 5] [--no-compile | --compile-mode MODE] [--peak-tflops 989]
    torchrun --nproc_per_node 2 dev/torch_bench.py --ddp [...]
"""
import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from configs import CONFIGS, make_config


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-e", "--model", default="d12", choices=sorted(c for c in CONFIGS if c != "tiny"))
    ap.add_argument("-b", "--batch", type=int, default=64)
    ap.add_argument("-t", "--seq", type=int, default=1024)
    ap.add_argument("-d", "--total-batch", type=int, default=0, help="tokens per optimizer step (default B*T*GPUs)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    ap.add_argument("--no-compile", action="store_true", help="eager PyTorch")
    ap.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"],
                    help="torch.compile's mode: max-autotune times Triton GEMM templates against cuBLAS for every product "
                         "(minutes of compilation), reduce-overhead / max-autotune replay CUDA graphs")
    ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel, one process per GPU (start with torchrun)")
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="the GPU's dense 16-bit peak that MFU is measured against (default: H100/H200 SXM; the trainer's "
                         "banner names its own, llmc/timing.h)")
    return ap.parse_args()


def check_args(args):
    """Bad arguments are one line and exit 1, before PyTorch is imported (dev/unit/test_cli.sh)."""
    cfg = make_config(args.model)
    for name, v in (("-b", args.batch), ("-t", args.seq), ("--steps", args.steps)):
        if v < 1:
            sys.exit(f"torch_bench: {name} {v} must be at least 1")
    if args.seq > cfg["maxT"]:
        sys.exit(f"torch_bench: -t {args.seq} is longer than the model's {cfg['maxT']} positions")
    if args.no_compile and args.compile_mode != "default":
        sys.exit(f"torch_bench: --compile-mode {args.compile_mode} with --no-compile: eager PyTorch compiles nothing")
    if not args.peak_tflops > 0:
        sys.exit(f"torch_bench: --peak-tflops {args.peak_tflops} must be above 0")
    world = 1
    if args.ddp:
        if "LOCAL_RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            sys.exit("torch_bench: --ddp needs torchrun (LOCAL_RANK / WORLD_SIZE are not set)")
        world = int(os.environ["WORLD_SIZE"])
    per_step = args.batch * args.seq * world
    total = args.total_batch or per_step
    if total % per_step:
        sys.exit(f"torch_bench: -d {total} is not a multiple of B*T*GPUs = {per_step}")
    return cfg, total // per_step


# PyTorch (and dev/reference.py, which needs it) is imported inside the functions below, not at
# the top of the file: check_args runs first, so bad arguments fail fast, without PyTorch. After
# the first import, another `import torch` only looks up the loaded module.


def setup_device(ddp):
    """This process's GPU. With --ddp it joins the NCCL process group (torchrun's environment gives
    each process its rank), then takes the GPU of its LOCAL_RANK. Returns rank, world, device."""
    import torch
    import torch.distributed as dist
    if not torch.cuda.is_available():
        sys.exit("torch_bench: no CUDA device")
    rank, world = 0, 1
    if ddp:
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return rank, world, torch.device("cuda", torch.cuda.current_device())


def build_model(cfg, dtype, dev):
    """reference.py's GPT-2 (its init, seed 1337) on dev as a Module whose forward is the mean loss
    under autocast to dtype ("bf16" or "fp16")."""
    import torch
    import torch.nn.functional as F
    from reference import forward, init_params

    class GPT2Loss(torch.nn.Module):
        """reference.py's tensors as parameters (what DDP reduces); forward = the mean loss."""

        def __init__(self, tensors, dtype):
            super().__init__()
            self.dtype = dtype
            self.p = torch.nn.ParameterDict({k: torch.nn.Parameter(v) for k, v in tensors.items()})

        def forward(self, x, y):
            with torch.autocast("cuda", dtype=self.dtype):
                logits = forward(self.p, cfg, x, sdpa=True, padded_logits=True)
                return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))

    dtype = torch.bfloat16 if dtype == "bf16" else torch.float16
    return GPT2Loss({k: v.to(dev) for k, v in init_params(cfg, 1337).items()}, dtype)


def build_optimizer(model, dtype):
    """Fused AdamW, and a GradScaler that only does something for fp16: bf16 has fp32's exponent
    range, so its gradients need no loss scaling."""
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == "fp16")
    return opt, scaler


def wrap_model(model, args, dev):
    """What a step calls: the model, compiled unless --no-compile, then wrapped in DDP with --ddp
    (DDP around the compiled module). torch.compile is lazy: it compiles on the first call."""
    import torch
    from torch.nn.parallel import DistributedDataParallel
    step_loss = model if args.no_compile else torch.compile(model, mode=args.compile_mode)
    if args.ddp:
        step_loss = DistributedDataParallel(step_loss, device_ids=[dev.index])
    return step_loss


def make_train_step(args, cfg, accum, model, step_loss, opt, scaler, dev, rank):
    """A function doing one optimizer step on random tokens (accum micro-steps); returns the
    last micro-step's loss."""
    import torch
    B, T = args.batch, args.seq
    gen = torch.Generator(device=dev).manual_seed(rank)  # each rank its own batch

    def step():
        for i in range(accum):
            x = torch.randint(0, cfg["V"], (B, T), device=dev, generator=gen)
            y = torch.randint(0, cfg["V"], (B, T), device=dev, generator=gen)
            last = i == accum - 1
            # no_sync: DDP skips its all-reduce and the gradients add up locally; the last
            # micro-step's backward all-reduces (averages over the GPUs) the accumulated sum.
            with step_loss.no_sync() if args.ddp and not last else contextlib.nullcontext():
                loss = step_loss(x, y)
                scaler.scale(loss / accum).backward()
        scaler.unscale_(opt)  # true gradients (fp16: the loss scale divided out) before clipping
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def timed_steps(step, warmup, steps):
    """warmup untimed steps, then steps timed one by one with CUDA events (the GPU stream's time
    between the two events around a step). Returns the times in ms and the last loss."""
    import torch
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()  # the peak reported is that of the timed steps
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times, loss


def print_results(args, cfg, accum, world, n_params, times, loss):
    """The summary line and the RESULT line (median step time, tok/s, MFU, peak memory)."""
    import torch
    B, T = args.batch, args.seq
    total = accum * B * T * world
    ms = sorted(times)[len(times) // 2]
    tok_s = total / (ms / 1e3)
    L, C = cfg["L"], cfg["C"]
    mfu = tok_s / world * (6 * n_params + 6 * L * C * T) / (args.peak_tflops * 1e12) * 100
    mem = torch.cuda.max_memory_allocated() / 1e9
    compiled = "torch.compile" + ("" if args.compile_mode == "default" else ":" + args.compile_mode)
    mode = ("eager" if args.no_compile else compiled) + ("+DDP" if args.ddp else "")
    print(f"{args.model} B={B} T={T} x {accum} micro-steps {args.dtype} {mode} on {world} GPU(s): {ms:.2f} ms/step (median of {args.steps}), "
          f"{tok_s:,.0f} tok/s, MFU {mfu:.2f} % per GPU, peak memory {mem:.2f} GB, last loss {loss.item():.4f}")
    print(f"RESULT trainer=pytorch mode={mode} precision={args.dtype} model={args.model} B={B} T={T} total_batch={total} world={world} "
          f"tok_per_s={tok_s:.0f} mfu={mfu:.2f} median_ms={ms:.3f} device_mem_gb={mem:.2f}")


def main():
    args = parse_args()
    cfg, accum = check_args(args)
    from reference import need
    need("dev/torch_bench.py", "torch", "PyTorch")  # the arguments are checked: now the run needs it
    rank, world, dev = setup_device(args.ddp)  # the process group exists before the model
    model = build_model(cfg, args.dtype, dev)
    n_params = sum(v.numel() for v in model.parameters())
    opt, scaler = build_optimizer(model, args.dtype)
    step_loss = wrap_model(model, args, dev)
    step = make_train_step(args, cfg, accum, model, step_loss, opt, scaler, dev, rank)
    times, loss = timed_steps(step, args.warmup, args.steps)
    if rank == 0:  # only rank 0 prints
        print_results(args, cfg, accum, world, n_params, times, loss)
    if args.ddp:
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
