"""The training run of train_gpt2cu, in plain PyTorch: the reference for the loss-curve comparison.

  python3 dev/train_reference.py --model INIT.bin --train 'dev_data/tinyshakespeare_train.bin' \\
      -B 8 -T 1024 -d 8192 -x 100 --lr 6e-4 --warmup 10 --lr-schedule cosine --lr-final 0.0 \\
      --weight-decay 0.1 --grad-clip 1.0 [--dtype fp32|bf16-autocast|fp16-autocast] > ref.log
  python3 dev/compare_losses.py ref.log train.log --tol 0.005   (dev/device/loop_run.sh: BF16 against
      fp32 at 0.5 %, FP16 against --dtype fp16-autocast at 0.75 %)

Same model (dev/reference.py's forward over the model file's tensors), same batches (the
trainer's data loader with shuffle off, on 1 GPU), same loss (mean over the step's tokens), same
learning rate (llmc/schedule.h, in float32), same AdamW (decay on the 2-D tensors only) and the
same global-norm clipping, so the printed `step N/M | loss ...` lines should track the trainer's.
The data loader: the shards the glob matches, in sorted order, are each cut into step blocks of
d = B*T*accum tokens (floor((tokens-1)/d) of them, the +1 being the last target); step k reads
the next block; micro-step i of a step reads tokens [start + i*B*T, start + i*B*T + B*T + 1).
After a shard's last block the next shard follows, after the last shard the first again.
"""
import argparse, ctypes, ctypes.util, glob, json, math, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_file import map_tokens, read_model  # first: one line where numpy is missing
import numpy as np
from reference import clip_grad_norm, forward, need
# PyTorch is imported inside the functions below (see dev/reference.py): --help, bad arguments and
# unreadable inputs need no PyTorch, and main says in one line when a run cannot have it.

try:  # the C library's cosf, so that the schedule comes out bit-identical to the C++ one
    _libm = ctypes.CDLL(ctypes.util.find_library("m"))
    _libm.cosf.argtypes, _libm.cosf.restype = [ctypes.c_float], ctypes.c_float
    cosf = _libm.cosf
except (OSError, AttributeError, TypeError):  # no libm: within an ulp of it
    cosf = math.cos
DECAY = ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw")  # the 2-D tensors (llmc/model.h)


def lr_at(step, lr, warmup, max_steps, kind, final_frac):
    """llmc/schedule.h's lr_at, step by step in float32 as the C++ computes it (0-based step)."""
    f = np.float32
    if step < warmup:
        return f(lr) * f(step + 1) / f(warmup)
    if kind == "constant" or max_steps <= warmup:
        return f(lr)
    progress = f(step - warmup) / f(max_steps - warmup)
    progress = min(max(progress, f(0)), f(1))
    min_lr = f(lr) * f(final_frac)
    decay = f(1) - progress if kind == "linear" else f(0.5) * (f(1) + f(cosf(f(math.pi) * progress)))
    return min_lr + (f(lr) - min_lr) * decay


class Batches:
    """llmc/dataloader.h with shuffle off, one rank: yields each step's micro-batches."""

    def __init__(self, pattern, B, T, step_tokens, vocab):
        self.files = sorted(glob.glob(pattern))  # glob(3)'s order: byte-wise sorted paths
        if not self.files:
            raise ValueError(f"{pattern}: no file matches")
        self.B, self.T, self.step, self.vocab = B, T, step_tokens, vocab
        self.tokens = [map_tokens(f) for f in self.files]
        for f, t in zip(self.files, self.tokens):
            if len(t) < step_tokens + 1:
                raise ValueError(f"{f}: holds {len(t)} tokens, fewer than one optimizer step needs ({step_tokens + 1})")
        self.blocks = [(len(t) - 1) // step_tokens for t in self.tokens]
        self.shard, self.block = 0, 0

    def steps_per_epoch(self):
        return sum(self.blocks)

    def next_step(self, accum):
        """The (x, y) int64 pairs, (B, T) each, of the next optimizer step's accum micro-steps."""
        import torch
        bt, toks, out = self.B * self.T, self.tokens[self.shard], []
        for i in range(accum):
            start = self.block * self.step + i * bt
            w = np.asarray(toks[start:start + bt + 1], dtype=np.int64)
            if w.max() >= self.vocab:
                bad = int(np.argmax(w >= self.vocab))
                raise ValueError(f"{self.files[self.shard]}: token {w[bad]} at position {start + bad} "
                                 f"is not below the vocabulary size {self.vocab}")
            w = torch.from_numpy(w)
            out.append((w[:-1].view(self.B, self.T), w[1:].view(self.B, self.T)))
        self.block += 1
        if self.block == self.blocks[self.shard]:
            self.block, self.shard = 0, (self.shard + 1) % len(self.files)
        return out


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("-e", "--model", required=True, help="initial model file (model_file.py format, e.g. from convert_hf.py)")
    ap.add_argument("-i", "--train", default="dev_data/tinyshakespeare_train.bin", help="training token shards (glob)")
    ap.add_argument("-B", "-b", "--batch", dest="B", type=int, default=8, help="micro-batch size")
    ap.add_argument("-T", "-t", "--seq-len", dest="T", type=int, default=1024, help="sequence length")
    ap.add_argument("-d", "--total-batch-tokens", type=int, default=0, help="tokens per optimizer step (0: B*T)")
    ap.add_argument("-x", "--max-steps", type=int, default=-1, help="optimizer steps (-1: one epoch of --train)")
    ap.add_argument("-l", "--lr", type=float, default=6e-4, help="peak learning rate")
    ap.add_argument("-w", "--warmup", type=int, default=0, help="linear warmup steps")
    ap.add_argument("--lr-schedule", default="cosine", choices=["cosine", "linear", "constant"])
    ap.add_argument("-q", "--lr-final", type=float, default=0.0, help="final lr as a fraction of the peak")
    ap.add_argument("-c", "--weight-decay", type=float, default=0.1, help="AdamW weight decay (2-D tensors only)")
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--grad-clip", type=float, default=1.0, help="clip the global gradient norm (0: off)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16-autocast", "fp16-autocast"],
                    help="fp32 (TF32 off), or bf16/fp16 autocast around the forward; fp16 with the trainer's "
                         "dynamic loss scaling (2^16, halve and skip on inf/nan, double after 1000 clean steps)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--log", default=None, help="also write the trainer's log.jsonl step records here")
    return ap.parse_args()


def tokens_per_step(args):
    """-d, the tokens of one optimizer step, and accum, the micro-steps of B*T tokens it takes."""
    B, T = args.B, args.T
    d = args.total_batch_tokens or B * T
    if B < 1 or T < 1 or d % (B * T) != 0:
        raise ValueError(f"-d {d} is not a positive multiple of B*T = {B}*{T} = {B * T}")
    return d, d // (B * T)


def pick_device(args):
    """The device (--device, else cuda when available) and the autocast dtype (None: plain fp32)."""
    import torch
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.backends.cuda.matmul.allow_tf32 = False   # fp32 means fp32: no TF32 matmuls
    torch.backends.cudnn.allow_tf32 = False
    half = {"bf16-autocast": torch.bfloat16, "fp16-autocast": torch.float16}.get(args.dtype)
    return device, half


def build_optimizer(params, args):
    """AdamW with weight decay on the 2-D tensors (DECAY) only, as the trainer does."""
    import torch
    return torch.optim.AdamW(
        [{"params": [params[n] for n in DECAY], "weight_decay": args.weight_decay},
         {"params": [t for n, t in params.items() if n not in DECAY], "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, foreach=False, fused=False)


def set_lr(optimizer, step, steps, args):
    """This step's learning rate (the trainer's schedule), set on every parameter group."""
    lr = lr_at(step, args.lr, args.warmup, steps, args.lr_schedule, args.lr_final)
    for group in optimizer.param_groups:
        group["lr"] = float(lr)
    return lr


def accumulate_gradients(params, config, micro_batches, accum, device, half, scale):
    """Forward and backward of each micro-batch, the gradients adding up in .grad. Returns the sum
    of the micro-batches' losses (a device tensor: no sync with the GPU per micro-step)."""
    import torch
    import torch.nn.functional as F
    loss_sum = torch.zeros((), device=device)
    for x, y in micro_batches:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type=device.type, dtype=half or torch.float32, enabled=half is not None):
            logits = forward(params, config, x)
        loss = F.cross_entropy(logits.float().view(-1, config["V"]), y.view(-1))  # mean over B*T tokens
        (loss * scale / accum).backward()   # accumulated: the mean over all the step's tokens (scaled)
        loss_sum += loss.detach()
    return loss_sum


def unscale_and_clip(params, scale, grad_clip):
    """Divides the loss scale out of the gradients, clips their global norm (if grad_clip > 0) and
    returns the norm before clipping (inf or nan when a gradient overflowed)."""
    if scale != 1.0:
        for t in params.values():
            t.grad.div_(scale)
    if grad_clip > 0:
        return clip_grad_norm(params.values(), grad_clip).item()
    return math.sqrt(sum(t.grad.double().pow(2).sum().item() for t in params.values()))


def next_loss_scale(scale, clean, skipped):
    """llmc/loss_scale.h's rule: halve on an inf/nan step, double after 1000 clean steps in a row."""
    scale, clean = (max(scale / 2, 1.0), 0) if skipped else (scale, clean + 1)
    if clean >= 1000:
        scale, clean = min(scale * 2, 2.0 ** 24), 0
    return scale, clean


def report_step(log, step, steps, loss, norm, lr, skipped, ms, d):
    """The `step N/M | loss ...` line, and the trainer's log.jsonl record when there is a --log."""
    print(f"step {step + 1:4d}/{steps} | loss {loss:.6f} | norm {norm:.4f} | lr {float(lr):.2e}"
          f"{' (skipped)' if skipped else ''} | {ms:.2f} ms | {d / (ms / 1e3):.0f} tok/s", flush=True)
    if log:
        log.write(json.dumps({"type": "step", "step": step + 1, "loss": loss, "norm": norm, "lr": float(lr),
                              "skipped": int(skipped), "ms": ms, "tok_s": d / (ms / 1e3)}) + "\n")
        log.flush()


def train(args, config, data, params, optimizer, device, half, steps, d, accum):
    """The training loop: `steps` optimizer steps of accum micro-steps each, one line per step."""
    import torch
    # fp16's small gradients would underflow to zero without a loss scale; fp32 and bf16 use 1
    scale, clean = (65536.0 if args.dtype == "fp16-autocast" else 1.0), 0
    log = open(args.log, "w") if args.log else None
    for step in range(steps):
        lr = set_lr(optimizer, step, steps, args)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = accumulate_gradients(params, config, data.next_step(accum), accum, device, half, scale)
        norm = unscale_and_clip(params, scale, args.grad_clip)
        skipped = not math.isfinite(norm)       # the trainer skips a step with an inf/nan norm
        if not skipped:
            optimizer.step()
        if args.dtype == "fp16-autocast":
            scale, clean = next_loss_scale(scale, clean, skipped)
        loss = loss_sum.item() / accum
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        report_step(log, step, steps, loss, norm, lr, skipped, ms, d)
    if log:
        log.close()


def main():
    args = parse_args()
    B, T = args.B, args.T
    d, accum = tokens_per_step(args)
    config, arrays = read_model(args.model)
    if T > config["maxT"]:
        raise ValueError(f"-T {T} exceeds the model's maximum sequence length {config['maxT']}")
    data = Batches(args.train, B, T, d, config["V"])
    steps = args.max_steps if args.max_steps > 0 else max(1, data.steps_per_epoch())

    torch = need("dev/train_reference.py", "torch", "PyTorch")  # the inputs are checked: now the run needs it
    device, half = pick_device(args)
    params = {n: torch.from_numpy(a).to(device).requires_grad_(True) for n, a in arrays.items()}
    optimizer = build_optimizer(params, args)
    n_params = sum(t.numel() for t in params.values())
    print(f"reference GPT-2 L={config['L']} NH={config['NH']} C={config['C']} ({n_params} parameters), "
          f"{args.dtype}, {device}, B={B} T={T}, {d} tokens/step (accumulation {accum}), {steps} steps, "
          f"{len(data.files)} shard(s), {data.steps_per_epoch()} steps per epoch", flush=True)
    train(args, config, data, params, optimizer, device, half, steps, d, accum)


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
