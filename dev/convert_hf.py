"""Converts a Hugging Face GPT-2 checkpoint (a save_pretrained folder) to our model file.

  python3 dev/convert_hf.py HF_DIR OUT.bin [--check-state STATE.bin -B 4 -T 64 --seed 1]
  python3 dev/convert_hf.py --selftest

HF's GPT-2 keeps its matmul weights in Conv1D modules, stored (in, out); the model file stores
every Linear weight (out, in), as PyTorch's nn.Linear does, so those four are transposed. The
per-layer tensors are stacked along a leading L dimension, and wte gets zero rows up to Vp
(V rounded up to 128); see model_file.py. lm_head is tied to wte in GPT-2, so it is not stored.

--check-state also writes a reference state (the format test_gpt2.cu reads, steps = 0) whose
logits, loss and gradients come from HF's own model on seeded random tokens, so
  ./test_gpt2cu OUT.bin STATE.bin
checks the CUDA forward and backward against transformers directly.
"""
import json, os, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_file import HEADER_INTS, HF_BLOCK_MAP, HF_HEAD_MAP, PARAM_ORDER, SelfTest, doc_parser, padded_vocab, \
    param_shapes, read_model, write_model, write_tensors  # first: one line where numpy is missing
import numpy as np
from reference import need
# PyTorch and transformers are imported inside the functions below (see dev/reference.py): --help
# and a folder that is not a GPT-2 checkpoint need neither; main says in one line when a run
# cannot have them.

STATE_MAGIC, STATE_VERSION = 20240327, 3
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "pytorch_model.bin.index.json")


class ConvertError(Exception):  # a one-line reason; main prints it and exits 1
    pass


def check_hf_dir(hf_dir):
    """Reads config.json and refuses what the trainer cannot run. Returns our config dict."""
    path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(path):
        raise ConvertError(f"{hf_dir}: no config.json (not a save_pretrained folder)")
    if not any(os.path.isfile(os.path.join(hf_dir, w)) for w in WEIGHT_FILES):
        raise ConvertError(f"{hf_dir}: no weights ({' or '.join(WEIGHT_FILES[::2])})")
    try:
        with open(path) as f:
            c = json.load(f)
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: cannot read: {e}")
    if not isinstance(c, dict):
        raise ConvertError(f"{path}: not a JSON object")
    if c.get("model_type", "gpt2") != "gpt2":
        raise ConvertError(f"{path}: model_type {c.get('model_type')!r}, only gpt2 is supported")
    # the sizes (GPT2Config's defaults where absent) are positive integers, or the checks below
    # would die on them (n_head 0: a division by zero; "768": a string) with a traceback
    sizes = {k: c.get(k, d) for k, d in (("n_positions", 1024), ("vocab_size", 50257), ("n_layer", 12),
                                         ("n_head", 12), ("n_embd", 768))}
    bad = [f"{k} {v!r}" for k, v in sizes.items() if type(v) is not int or v <= 0]
    if bad:
        raise ConvertError(f"{path}: {', '.join(bad)}: not a positive integer")
    C, NH = sizes["n_embd"], sizes["n_head"]
    # gelu_pytorch_tanh is the same function as gelu_new (the tanh approximation the trainer uses)
    act = c.get("activation_function", "gelu_new")
    problems = []
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        problems.append(f"activation_function {act!r} (the trainer computes gelu_new)")
    if C % NH != 0:
        problems.append(f"n_embd {C} is not a multiple of n_head {NH}")
    if c.get("n_inner") not in (None, 4 * C):
        problems.append(f"n_inner {c['n_inner']} (the trainer's MLP is 4*n_embd = {4 * C})")
    eps = c.get("layer_norm_epsilon", 1e-5)
    if type(eps) not in (int, float) or abs(eps - 1e-5) > 1e-12:
        problems.append(f"layer_norm_epsilon {c['layer_norm_epsilon']} (the trainer uses 1e-5)")
    if not c.get("scale_attn_weights", True) or c.get("scale_attn_by_inverse_layer_idx", False):
        problems.append("attention scaling other than 1/sqrt(head size)")
    if not c.get("tie_word_embeddings", True):
        problems.append("an lm_head not tied to wte (the trainer ties them)")
    if c.get("add_cross_attention", False):
        problems.append("cross-attention layers")
    if problems:
        raise ConvertError(f"{path}: the trainer cannot run this model: " + "; ".join(problems))
    return dict(maxT=sizes["n_positions"], V=sizes["vocab_size"], L=sizes["n_layer"], NH=NH, C=C)


def load_hf(hf_dir):
    """GPT2LMHeadModel in fp32 with HF's plain (eager) attention, in eval mode."""
    from transformers import GPT2LMHeadModel
    try:
        model = GPT2LMHeadModel.from_pretrained(hf_dir, attn_implementation="eager")
    except Exception as e:  # one line whatever went wrong inside transformers
        raise ConvertError(f"{hf_dir}: transformers cannot load it: {str(e).splitlines()[0]}")
    return model.float().eval()  # recent transformers keep the checkpoint's dtype by default


def hf_to_params(sd, config):
    """HF state dict (name -> tensor) -> our params (name -> tensor in model-file shapes)."""
    import torch
    L, V, C = config["L"], config["V"], config["C"]
    get = lambda name: sd["transformer." + name].detach().float().cpu()
    p = {ours: get(hf) for ours, hf in HF_HEAD_MAP}
    wte = torch.zeros(padded_vocab(V), C)
    wte[:V] = p["wte"]   # rows V..Vp-1 are never a token: zero, as in our own init
    p["wte"] = wte
    for ours, hf, transpose in HF_BLOCK_MAP:
        layers = [get(f"h.{l}.{hf}") for l in range(L)]
        p[ours] = torch.stack([t.t() if transpose else t for t in layers]).contiguous()
    return p


def convert(hf_dir, out_path):
    """Writes the model file; returns (config, params, the loaded HF model)."""
    config = check_hf_dir(hf_dir)
    model = load_hf(hf_dir)
    params = hf_to_params(model.state_dict(), config)
    shapes = param_shapes(config)
    for name in PARAM_ORDER:   # a config.json that disagrees with the weights ends here
        if tuple(params[name].shape) != tuple(shapes[name]):
            raise ConvertError(f"{hf_dir}: {name} has shape {tuple(params[name].shape)}, "
                               f"config.json implies {tuple(shapes[name])}")
    write_model(out_path, params, config)
    return config, params, model


def write_check_state(model, config, path, B, T, seed):
    """HF's logits, loss and gradients on seeded random tokens, as test_gpt2.cu reads them."""
    import torch
    import torch.nn.functional as F
    V = config["V"]
    if not 1 <= T <= config["maxT"] or B < 1:
        raise ConvertError(f"need B >= 1 and 1 <= T <= n_positions = {config['maxT']} (got B={B} T={T})")
    tokens = torch.randint(0, V, (B * T + 1,), generator=torch.Generator().manual_seed(seed))
    x, y = tokens[:-1].view(B, T), tokens[1:].view(B, T)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False   # true fp32 matmuls on the GPU
    torch.backends.cudnn.allow_tf32 = False
    model = model.to(device)
    model.zero_grad(set_to_none=True)
    logits = model(x.to(device)).logits.float()             # (B, T, V); no labels: our own loss
    loss = F.cross_entropy(logits.view(-1, V), y.to(device).view(-1))
    loss.backward()
    # lm_head.weight IS transformer.wte.weight, so wte's gradient holds both contributions
    if model.lm_head.weight is not model.transformer.wte.weight:
        raise ConvertError("lm_head is not tied to wte in the loaded model")
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)) for n, t in model.named_parameters()}
    g = hf_to_params(grads, config)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:5] = [STATE_MAGIC, STATE_VERSION, B, T, 0]
    # lr, beta1, beta2, eps, weight_decay, grad_clip: unused with steps = 0, the trainer's defaults
    header[5:11] = np.array([6e-4, 0.9, 0.95, 1e-8, 0.1, 1.0], dtype="<f4").view("<i4")
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(x.numpy().astype("<i4").tobytes())
        f.write(y.numpy().astype("<i4").tobytes())
        f.write(logits.detach().cpu().numpy().astype("<f4").tobytes())
        f.write(np.array([loss.item()], dtype="<f4").tobytes())
        write_tensors(f, g, param_shapes(config))
    model.to("cpu")
    return x, y, logits.detach().cpu(), loss.item(), g


def read_check_state(path, config):
    """The inverse of write_check_state (for the self-test)."""
    with open(path, "rb") as f:
        h = np.frombuffer(f.read(HEADER_INTS * 4), dtype="<i4")
        B, T = int(h[2]), int(h[3])
        x = np.frombuffer(f.read(4 * B * T), dtype="<i4").reshape(B, T).copy()
        y = np.frombuffer(f.read(4 * B * T), dtype="<i4").reshape(B, T).copy()
        logits = np.frombuffer(f.read(4 * B * T * config["V"]), dtype="<f4").reshape(B, T, -1)
        loss = float(np.frombuffer(f.read(4), dtype="<f4")[0])
        grads = {}
        for name, shape in param_shapes(config).items():
            grads[name] = np.frombuffer(f.read(4 * int(np.prod(shape))), dtype="<f4").reshape(shape)
        rest = f.read()
    return h, x, y, logits, loss, grads, rest


def _random_hf_model():
    """A small GPT2LMHeadModel in the trainer's configuration (gelu_new, no dropout), every
    parameter randomized from seed 0."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    hf_cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=50257,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(hf_cfg)
    with torch.no_grad():  # HF's init has unit LN gains and zero biases: randomize everything
        for t in model.parameters():
            t.add_(torch.randn_like(t) * 0.05)
    return model


def _check_model_file(check, cfg, p, hf):
    """The model file read back against HF's state dict: the header, wte padded to Vp with zero
    rows, wpe and ln_f as they are, every layer stacked, the four Conv1D weights transposed."""
    check(cfg["Vp"] == 50304 and (cfg["L"], cfg["NH"], cfg["C"], cfg["maxT"], cfg["V"]) == (2, 4, 64, 64, 50257),
          f"model file header {cfg}")
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    ok = np.array_equal(p["wte"][:50257], sd["transformer.wte.weight"]) and not p["wte"][50257:].any()
    check(ok, "wte (padded to Vp with zero rows)")
    for ours, hf_name in HF_HEAD_MAP[1:]:  # wpe, ln_f
        check(np.array_equal(p[ours], sd["transformer." + hf_name]), ours)
    for ours, hf_name, tr in HF_BLOCK_MAP:
        hf_layers = [sd[f"transformer.h.{l}.{hf_name}"] for l in range(2)]
        check(all(np.array_equal(p[ours][l], a.T if tr else a) for l, a in enumerate(hf_layers)),
              f"{ours} (all layers{', transposed' if tr else ''})")


def _check_reference_forward(check, cfg, p, hf):
    """Our reference forward on the converted weights against HF's own forward. Returns the
    weights as torch tensors (for the check state's gradients)."""
    import torch
    import reference
    tp = {n: torch.from_numpy(a) for n, a in p.items()}
    idx = torch.randint(0, 50257, (2, 64), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        err = (reference.forward(tp, cfg, idx) - hf(idx).logits).abs().max().item()
    check(err < 1e-4, f"reference.forward logits vs HF: max abs err {err:.2e}")
    return tp


def _check_state(check, hf, config, cfg, tp, state):
    """The check state written from HF, read back, against reference.py's forward and autograd on
    the same tokens (wte's gradient holds both uses of the tied weight)."""
    import torch
    import torch.nn.functional as F
    import reference
    write_check_state(hf, config, state, B=2, T=16, seed=1)
    h, x, y, logits, loss, grads, rest = read_check_state(state, cfg)
    check(list(h[:5]) == [STATE_MAGIC, STATE_VERSION, 2, 16, 0] and rest == b"", "state header, size, steps = 0")
    tp = {n: t.clone().requires_grad_(True) for n, t in tp.items()}
    ref_logits = reference.forward(tp, cfg, torch.from_numpy(x).long())
    ref_loss = F.cross_entropy(ref_logits.view(-1, 50257), torch.from_numpy(y).long().view(-1))
    ref_loss.backward()
    check(np.abs(ref_logits.detach().numpy() - logits).max() < 1e-4 and abs(ref_loss.item() - loss) < 1e-5,
          f"state logits and loss {loss:.6f} vs reference.py {ref_loss.item():.6f}")
    worst = max(np.abs(tp[n].grad.numpy() - grads[n]).max() / (np.abs(grads[n]).max() + 1e-30)
                for n in PARAM_ORDER)
    check(worst < 1e-4, f"state gradients vs reference.py autograd (tied wte): worst rel err {worst:.2e}")
    check(not grads["wte"][50257:].any(), "wte gradient's padded rows are zero")


def _check_refusals(check, hf_dir, tmp, out):
    """A config.json with an activation the trainer lacks, and a folder without config.json, are
    refused with a ConvertError."""
    with open(os.path.join(hf_dir, "config.json")) as f:
        bad = dict(json.load(f), activation_function="relu")
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(bad, f)
    for what, d in [("activation relu", hf_dir), ("folder without config.json", tmp)]:
        try:
            convert(d, out)
            check(False, f"refuses {what}")
        except ConvertError as e:
            check(True, f"refuses {what}: {e}")


def selftest():
    """Small random HF GPT-2 -> safetensors -> model file -> compare; returns the failure count."""
    check = SelfTest()
    model = _random_hf_model()
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = os.path.join(tmp, "hf")
        model.save_pretrained(hf_dir)
        check(os.path.isfile(os.path.join(hf_dir, "model.safetensors")), "save_pretrained wrote model.safetensors")
        out = os.path.join(tmp, "model.bin")
        config, _, hf = convert(hf_dir, out)
        cfg, p = read_model(out)
        _check_model_file(check, cfg, p, hf)
        tp = _check_reference_forward(check, cfg, p, hf)
        _check_state(check, hf, config, cfg, tp, os.path.join(tmp, "state.bin"))
        _check_refusals(check, hf_dir, tmp, out)
    return check.summary("convert_hf")


def need_packages():
    """PyTorch and transformers, or one line saying which is missing and exit 1."""
    need("dev/convert_hf.py", "torch", "PyTorch")
    need("dev/convert_hf.py", "transformers", "transformers")


def main():
    ap = doc_parser(__doc__)
    ap.add_argument("hf_dir", nargs="?", help="save_pretrained folder (config.json + weights)")
    ap.add_argument("out", nargs="?", help="model file to write")
    ap.add_argument("--check-state", metavar="STATE.bin", help="also write HF's reference state here")
    ap.add_argument("-B", type=int, default=4, help="--check-state batch size")
    ap.add_argument("-T", type=int, default=64, help="--check-state sequence length")
    ap.add_argument("--seed", type=int, default=1, help="--check-state token seed")
    ap.add_argument("--selftest", action="store_true", help="convert a small random model and check it")
    args = ap.parse_args()
    if args.selftest:
        need_packages()
        return 1 if selftest() else 0
    if not args.hf_dir or not args.out:
        ap.error("HF_DIR and OUT.bin are required (or --selftest)")
    try:
        if not os.path.isdir(args.hf_dir):
            raise ConvertError(f"{args.hf_dir}: not a folder")
        maxT = check_hf_dir(args.hf_dir)["maxT"]
        if args.check_state and not (args.B >= 1 and 1 <= args.T <= maxT):
            raise ConvertError(f"--check-state needs B >= 1 and 1 <= T <= n_positions = {maxT}")
        need_packages()
        config, params, model = convert(args.hf_dir, args.out)
        n = sum(t.numel() for t in params.values())
        print(f"wrote {args.out}: L={config['L']} NH={config['NH']} C={config['C']} maxT={config['maxT']} "
              f"V={config['V']} Vp={padded_vocab(config['V'])}, {n} parameters")
        if config["C"] // config["NH"] != 64:
            print(f"note: head size {config['C'] // config['NH']}; the fp16/bf16 builds' flash attention needs 64")
        if args.check_state:
            _, _, _, loss, _ = write_check_state(model, config, args.check_state, args.B, args.T, args.seed)
            print(f"wrote {args.check_state}: B={args.B} T={args.T} seed={args.seed}, HF loss {loss:.6f}; "
                  f"check with: ./test_gpt2cu {args.out} {args.check_state}")
    except (ConvertError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
