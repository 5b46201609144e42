"""Plain-PyTorch fp32 GPT-2: the reference that test_gpt2.cu is checked against.

Writes <out>/reference_model.bin (the initial weights, llm.c model format, see model_file.py)
and <out>/reference_state.bin (a batch, its logits, loss, gradients and the training losses):
  256 x int32 header: [0]=20240327 magic, [1]=3 version, [2]=B, [3]=T, [4]=num_steps,
                      [5..10] float32 bit patterns: lr, beta1, beta2, eps, weight_decay, grad_clip
  x (B*T int32), y (B*T int32), logits (B*T*V float32, unpadded), loss (1 float32),
  gradients at the initial weights (float32, model-file order and shapes, wte padded to Vp rows),
  losses of num_steps training steps on the same batch (num_steps float32).

The model is written functionally over the stacked parameter tensors of the model file, so
what the script trains is exactly what it writes: no re-layout between PyTorch and C++.
"""
import argparse, importlib, math, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_file import PARAM_ORDER, padded_vocab, param_shapes, write_model, read_model, \
    read_tokens, write_tensors, HEADER_INTS  # first: one line where numpy is missing
import numpy as np
from configs import CONFIGS, make_config

STATE_MAGIC, STATE_VERSION = 20240327, 3

# PyTorch is imported inside the functions below, not at the top of the file (as in
# dev/torch_bench.py): --help and bad arguments need no PyTorch, and a run without it is one line
# (need). After the first import, another `import torch` only looks up the loaded module. The
# scripts that import this file (train_reference.py, convert_hf.py, torch_bench.py, ...) do the same.


def need(script, module, name):
    """module, imported; where it cannot be, the one line "<script> needs <name> (pip install
    <module>): <why>" and exit 1. Called once the arguments are checked, before the first use."""
    try:
        return importlib.import_module(module)
    except (ImportError, OSError) as e:  # OSError: installed, but a shared library of it is missing
        sys.exit(f"{script} needs {name} (pip install {module}): {e}")


def init_params(config, seed):
    """GPT-2's init, drawn on the CPU from torch.manual_seed(seed) so it is reproducible."""
    import torch
    torch.manual_seed(seed)
    L, C, V = config["L"], config["C"], config["V"]
    shapes = param_shapes(config)
    # The two projections that write into the residual stream get std scaled by 1/sqrt(2L),
    # so the variance of the residual stream does not grow with depth (2 adds per layer).
    residual_std = 0.02 / math.sqrt(2 * L)
    p = {}
    for name in PARAM_ORDER:
        shape = shapes[name]
        if name in ("lnfw", "ln1w", "ln2w"):
            p[name] = torch.ones(shape)                 # LayerNorm gain 1
        elif name.endswith("b"):
            p[name] = torch.zeros(shape)                # biases and LayerNorm shifts 0
        elif name in ("attprojw", "fcprojw"):
            p[name] = torch.randn(shape) * residual_std
        else:                                           # wte, wpe, qkvw, fcw
            p[name] = torch.randn(shape) * 0.02
    # Vp padding: the vocab dimension is padded to a multiple of 128 so the CUDA matmuls tile
    # evenly. Rows V..Vp-1 are never a token and their logits are never used, so they stay
    # zero: zero gradient, zero Adam update, and weight decay of zero is zero.
    p["wte"][V:] = 0
    return p


def forward(p, config, idx, sdpa=False, padded_logits=False):
    """idx (B,T) int64 -> logits (B,T,V). Plain fp32 ops, math attention (no SDPA).
    For speed (dev/torch_bench.py): sdpa=True uses PyTorch's fused causal attention, and
    padded_logits=True returns all Vp columns (the padded rows of wte give zero logits)."""
    import torch
    import torch.nn.functional as F
    B, T = idx.shape
    L, NH, C, V = config["L"], config["NH"], config["C"], config["V"]
    hs = C // NH
    causal = None if sdpa else torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
    # wte is used twice (tied weights): here as the token embedding and below as the output
    # projection. Autograd sums both contributions into wte.grad: a scatter-add into the rows
    # of the input tokens plus the dense lm-head gradient; the CUDA trainer must add both too.
    x = p["wte"][idx] + p["wpe"][:T]
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = F.linear(h, p["qkvw"][l], p["qkvb"][l])                  # (B,T,3C) = [q | k | v]
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))     # (B,NH,T,T)
            att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)  # position t sees 0..t
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)                          # heads back side by side
        x = x + F.linear(y, p["attprojw"][l], p["attprojb"][l])
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        x = x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    return x @ (p["wte"] if padded_logits else p["wte"][:V]).t()       # padded rows excluded (by default)


def clip_grad_norm(params, max_norm):
    """torch.nn.utils.clip_grad_norm_'s rule (scale all grads by min(1, max_norm/(norm+1e-6))),
    but with the global norm summed in float64: on the CPU torch's fp32 vector_norm of a 38M
    element tensor (wte's grad) comes out ~0.3% low, which visibly changes the later losses."""
    import torch
    grads = [p.grad for p in params]
    norm = torch.sqrt(sum(g.double().pow(2).sum() for g in grads))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0).float()
    for g in grads:
        g.mul_(scale)
    return norm


def hf_cross_check(p, config, x, logits):
    """Loads the same weights into transformers' GPT2LMHeadModel and compares logits."""
    import torch
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("HF cross-check skipped: transformers is not importable")
        return
    L, V = config["L"], config["V"]
    hf_config = GPT2Config(n_positions=config["maxT"], n_embd=config["C"], n_layer=L,
                           n_head=config["NH"], vocab_size=V, activation_function="gelu_new",
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                           layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    hf_config._attn_implementation = "eager"  # HF's plain softmax attention, not SDPA
    model = GPT2LMHeadModel(hf_config).to(x.device).eval()
    # HF's Conv1D stores weights as (in, out): the transpose of our Linear (out, in).
    ours = {"transformer.wte.weight": p["wte"][:V], "transformer.wpe.weight": p["wpe"],
            "transformer.ln_f.weight": p["lnfw"], "transformer.ln_f.bias": p["lnfb"]}
    for l in range(L):
        for hf, name, transpose in [("ln_1.weight", "ln1w", 0), ("ln_1.bias", "ln1b", 0),
                                    ("attn.c_attn.weight", "qkvw", 1), ("attn.c_attn.bias", "qkvb", 0),
                                    ("attn.c_proj.weight", "attprojw", 1), ("attn.c_proj.bias", "attprojb", 0),
                                    ("ln_2.weight", "ln2w", 0), ("ln_2.bias", "ln2b", 0),
                                    ("mlp.c_fc.weight", "fcw", 1), ("mlp.c_fc.bias", "fcb", 0),
                                    ("mlp.c_proj.weight", "fcprojw", 1), ("mlp.c_proj.bias", "fcprojb", 0)]:
            t = p[name][l]
            ours[f"transformer.h.{l}.{hf}"] = t.t() if transpose else t
    hf_params = dict(model.named_parameters())  # lm_head.weight is tied to wte: listed once
    assert set(hf_params) == set(ours), f"HF parameter names differ: {set(hf_params) ^ set(ours)}"
    with torch.no_grad():
        for name, t in ours.items():
            hf_params[name].copy_(t)
        hf_logits = model(x).logits
    err = (hf_logits - logits).abs().max().item()
    print(f"HF cross-check: max abs logits error {err:.3e} (transformers GPT2LMHeadModel)")
    assert err < 1e-4, f"HF logits differ from the reference by {err}"


# The AdamW settings and the clipping threshold of the reference run (the state file's header
# records them, so test_gpt2.cu repeats the same steps).
BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 0.9, 0.95, 1e-8, 0.1, 1.0
# Weight decay only on the matrices (embeddings and Linear weights; per-layer ones are
# stacked to 3-D here), none on biases and LayerNorm params, as GPT-2 trainers do.
DECAY_NAMES = ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="d12", choices=list(CONFIGS))
    ap.add_argument("--layers", type=int, default=None,
                    help="fewer (or more) layers than the config has, its widths kept: d48's C=1600, "
                         "NH=25 checked at 2 layers in a fraction of the 1.5B parameters' memory and time")
    ap.add_argument("-B", type=int, default=4)
    ap.add_argument("-T", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--tokens", default=None, help="llm.c token shard for the batch (else random)")
    ap.add_argument("--out", default="dev_data")
    return ap.parse_args()


def check_args(args, config):
    """Exits with a one-line message when the sizes do not fit the model."""
    if not (1 <= args.T <= config["maxT"] and args.B >= 1 and args.steps >= 1):
        sys.exit(f"need 1 <= T <= {config['maxT']} for {args.config}, B >= 1 and steps >= 1")
    if args.layers is not None and not 1 <= args.layers <= 1000:
        sys.exit(f"--layers must be in [1, 1000], got {args.layers}")


def pick_device():
    """The GPU when there is one, else the CPU; fp32 either way."""
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False   # keep every matmul true fp32
    torch.backends.cudnn.allow_tf32 = False
    return device


def print_settings(args, config, device):
    V, Vp = config["V"], padded_vocab(config["V"])
    print(f"config {args.config}: L={config['L']} NH={config['NH']} C={config['C']} "
          f"maxT={config['maxT']} V={V} Vp={Vp}; B={args.B} T={args.T} steps={args.steps} lr={args.lr} "
          f"seed={args.seed} device={device}")


def make_batch(args, V, device):
    """The batch: B*T+1 consecutive tokens; y is x shifted by one, as in language modelling."""
    import torch
    B, T = args.B, args.T
    if args.tokens:
        tokens = torch.from_numpy(read_tokens(args.tokens, B * T + 1)).long()
        if tokens.max() >= V:
            sys.exit(f"{args.tokens}: token id {tokens.max().item()} is not below V={V}")
    else:
        # Its own generator, seeded from --seed: the batch neither uses nor moves the global RNG.
        tokens = torch.randint(0, V, (B * T + 1,), generator=torch.Generator().manual_seed(args.seed))
    x = tokens[:-1].view(B, T).to(device)
    y = tokens[1:].view(B, T).to(device)
    return x, y


def write_initial_model(out, cpu_params, config):
    """Writes <out>/reference_model.bin and checks that reading it back gives the same tensors."""
    os.makedirs(out, exist_ok=True)
    model_path = os.path.join(out, "reference_model.bin")
    write_model(model_path, cpu_params, config)
    _, back = read_model(model_path)  # the file must give back exactly what was written
    assert all(np.array_equal(back[n], cpu_params[n].numpy()) for n in PARAM_ORDER), "roundtrip"
    return model_path


def build_optimizer(cpu_params, device, lr):
    """Trainable copies of the initial weights on the device, and their AdamW."""
    import torch
    # A copy: the optimizer updates params in place, cpu_params keep the initial weights.
    params = {n: t.clone().to(device).requires_grad_(True) for n, t in cpu_params.items()}
    decay = [params[n] for n in DECAY_NAMES]
    no_decay = [t for n, t in params.items() if n not in DECAY_NAMES]
    # foreach=False, fused=False: PyTorch's single-tensor AdamW, one parameter at a time.
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=lr, betas=(BETA1, BETA2), eps=EPS,
                                  foreach=False, fused=False)
    return params, optimizer


def train(params, optimizer, config, x, y, steps):
    """`steps` training steps on the one batch (x, y). Returns the initial state (logits, loss and
    gradients at the initial weights, before any update) and the loss of every step."""
    import torch.nn.functional as F
    V = config["V"]
    t0 = time.time()
    losses = []
    for step in range(steps):
        logits = forward(params, config, x)
        loss = F.cross_entropy(logits.view(-1, V), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:  # the initial state the CUDA test compares against
            logits0, loss0 = logits.detach().cpu(), loss.item()
            grads0 = {n: t.grad.detach().cpu().clone() for n, t in params.items()}
            print(f"initial loss {loss0:.6f} (ln V = {math.log(V):.6f})")
        norm = clip_grad_norm(params.values(), GRAD_CLIP)
        optimizer.step()
        losses.append(loss.item())
        print(f"step {step}: loss {losses[-1]:.6f}  grad norm {norm.item():.6f}")
    print(f"{steps} steps in {time.time() - t0:.1f} s")
    return (logits0, loss0, grads0), losses


def write_state(args, config, x, y, initial, losses):
    """Writes <out>/reference_state.bin in the layout the module docstring describes."""
    logits0, loss0, grads0 = initial
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:5] = [STATE_MAGIC, STATE_VERSION, args.B, args.T, args.steps]
    # The float settings go into the int32 header as their float32 bit patterns (.view).
    header[5:11] = np.array([args.lr, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP], dtype="<f4").view("<i4")
    state_path = os.path.join(args.out, "reference_state.bin")
    with open(state_path, "wb") as f:
        f.write(header.tobytes())
        f.write(x.cpu().numpy().astype("<i4").tobytes())
        f.write(y.cpu().numpy().astype("<i4").tobytes())
        f.write(logits0.numpy().astype("<f4").tobytes())          # (B,T,V), unpadded
        f.write(np.array([loss0], dtype="<f4").tobytes())
        write_tensors(f, grads0, param_shapes(config))             # wte grad has Vp rows
        f.write(np.array(losses, dtype="<f4").tobytes())
    return state_path


def main():
    args = parse_args()
    config = make_config(args.config)
    check_args(args, config)
    if args.layers is not None:
        config["L"] = args.layers   # the model file's header carries L: test_gpt2cu builds what it reads
    need("dev/reference.py", "torch", "PyTorch")
    device = pick_device()
    print_settings(args, config, device)
    x, y = make_batch(args, config["V"], device)
    cpu_params = init_params(config, args.seed)
    model_path = write_initial_model(args.out, cpu_params, config)
    params, optimizer = build_optimizer(cpu_params, device, args.lr)
    initial, losses = train(params, optimizer, config, x, y, args.steps)
    state_path = write_state(args, config, x, y, initial, losses)
    print(f"wrote {model_path} and {state_path}")
    logits0 = initial[0]
    hf_cross_check({n: t.to(device) for n, t in cpu_params.items()}, config, x, logits0.to(device))


if __name__ == "__main__":
    main()
