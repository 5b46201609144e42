"""Writes one of our model files (a checkpoint's model.bin, or any model file) as a Hugging Face
GPT-2 save_pretrained folder, so a model trained here loads in transformers:

  python3 dev/export_hf.py runs/x/step_00001000/model.bin OUT_DIR [--vocab-dir ../shared/data/gpt2]
  python3 -c "from transformers import GPT2LMHeadModel as M; M.from_pretrained('OUT_DIR')"
  python3 dev/export_hf.py --selftest [--vocab-dir DIR]

OUT_DIR gets config.json and model.safetensors (float32, the model file's values exactly); with
--vocab-dir (the folder of GPT-2's encoder.json and vocab.bpe) also the tokenizer files
(vocab.json, merges.txt, tokenizer_config.json), so AutoTokenizer.from_pretrained(OUT_DIR) works.
The inverse of dev/convert_hf.py: the four Conv1D weights are transposed back to HF's (in, out),
the per-layer stacks split into transformer.h.{l}, wte cut from Vp to V rows (the padding rows are
never a token), lm_head left out (tied to wte). Dropout is 0 in config.json: the trainer trains
without it. numpy only; the safetensors file is written by hand (an 8-byte header length, a JSON
header, the raw tensors). OUT_DIR must not exist or be empty: nothing is overwritten; the folder
is written under a temporary name and renamed when complete.
"""
import json, os, shutil, struct, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_file import HF_BLOCK_MAP, HF_HEAD_MAP, SelfTest, doc_parser, padded_vocab, param_shapes, read_model, write_model  # first: one line where numpy is missing
import numpy as np

GPT2_VOCAB = 50257  # the tokenizer files only describe GPT-2's own vocabulary


class ExportError(Exception):  # a one-line reason; main prints it and exits 1
    pass


def hf_tensors(config, params):
    """Our params (model-file shapes) -> HF GPT2LMHeadModel's state dict names and shapes."""
    t = {}
    for ours, hf in HF_HEAD_MAP:
        t["transformer." + hf] = params[ours][:config["V"]] if ours == "wte" else params[ours]
    for l in range(config["L"]):
        for ours, hf, transpose in HF_BLOCK_MAP:
            a = params[ours][l]
            t[f"transformer.h.{l}.{hf}"] = a.T if transpose else a
    return {k: np.ascontiguousarray(v, dtype="<f4") for k, v in t.items()}


def hf_config(config):
    """config.json for transformers' GPT2Config, matching what the trainer computes."""
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": config["V"], "n_positions": config["maxT"], "n_ctx": config["maxT"],
        "n_embd": config["C"], "n_layer": config["L"], "n_head": config["NH"], "n_inner": None,
        "activation_function": "gelu_new",          # the tanh approximation, as the trainer's GELU
        "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,  # trained without dropout
        "scale_attn_weights": True, "tie_word_embeddings": True,
        # <|endoftext|>, where the vocabulary is GPT-2's (or larger)
        "bos_token_id": 50256 if config["V"] > 50256 else None,
        "eos_token_id": 50256 if config["V"] > 50256 else None, "torch_dtype": "float32",
    }


def write_safetensors(path, tensors):
    """The safetensors layout: u64 little-endian header size, the JSON header (name -> dtype, shape,
    byte range in the data), padded with spaces to a multiple of 8, then the tensors back to back."""
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    header["__metadata__"] = {"format": "pt"}  # transformers asks for it
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in tensors.values():
            a.tofile(f)  # no copy (a d48 model is 6 GB in fp32)


def read_safetensors(path):
    """F32 tensors of a safetensors file, name -> numpy array (the self-test reads the export back)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        if h["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {h['dtype']}, expected F32")
        b, e = h["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(h["shape"])
    return out


def export(model_path, out_dir, vocab_dir=None):
    """Writes out_dir; returns (config, the HF tensors)."""
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ExportError(f"{out_dir}: exists and is not an empty folder (nothing is overwritten)")
    try:
        config, params = read_model(model_path)
    except OSError as e:
        raise ExportError(f"{model_path}: cannot read: {e.strerror}")
    except ValueError as e:
        raise ExportError(str(e))
    vocab = None
    if vocab_dir is not None:
        if config["V"] != GPT2_VOCAB:
            raise ExportError(f"--vocab-dir: the model's vocabulary has {config['V']} tokens, GPT-2's tokenizer {GPT2_VOCAB}")
        vocab = [os.path.join(vocab_dir, f) for f in ("encoder.json", "vocab.bpe")]
        for f in vocab:
            if not os.path.isfile(f):
                raise ExportError(f"--vocab-dir: {f}: no such file")
    tensors = hf_tensors(config, params)
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export_hf_", dir=parent)
    try:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(hf_config(config), f, indent=2)
        write_safetensors(os.path.join(tmp, "model.safetensors"), tensors)
        if vocab:
            shutil.copyfile(vocab[0], os.path.join(tmp, "vocab.json"))   # the same files, HF's names
            shutil.copyfile(vocab[1], os.path.join(tmp, "merges.txt"))
            with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
                json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": config["maxT"],
                           "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                           "unk_token": "<|endoftext|>", "add_prefix_space": False}, f, indent=2)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would keep the model from other users
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return config, tensors


def _random_params(config):
    """Random params (seed 0, scale 0.05) in the model file's shapes, wte's padding rows zero."""
    rng = np.random.default_rng(0)
    shapes = param_shapes(dict(config, Vp=padded_vocab(config["V"])))
    params = {n: (rng.standard_normal(s) * 0.05).astype("<f4") for n, s in shapes.items()}
    params["wte"][config["V"]:] = 0  # as the trainer keeps them
    return params


def _check_tensors(check, back, tensors, params, config):
    """The safetensors read back: HF's names, wte cut to V rows, wpe and ln_f as they are, and every
    layer's tensors, the four Conv1D weights transposed to (in, out)."""
    check(sorted(back) == sorted(tensors) and len(back) == 4 + 12 * config["L"], f"{len(back)} tensors, HF's names")
    check(np.array_equal(back["transformer.wte.weight"], params["wte"][:config["V"]]), "wte cut to V rows")
    check(all(np.array_equal(back["transformer." + hf], params[ours]) for ours, hf in HF_HEAD_MAP[1:]), "wpe, ln_f")
    for ours, hf, tr in HF_BLOCK_MAP:
        ok = all(np.array_equal(back[f"transformer.h.{l}.{hf}"], params[ours][l].T if tr else params[ours][l])
                 for l in range(config["L"]))
        check(ok, f"{hf} (every layer{', transposed to (in, out)' if tr else ''})")


def _check_config_files(check, out, config, vocab_dir):
    """config.json describes the model; with a vocabulary, the three tokenizer files are there."""
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    check((c["n_layer"], c["n_head"], c["n_embd"], c["n_positions"], c["vocab_size"]) == (2, 4, 64, 64, config["V"])
          and c["activation_function"] == "gelu_new", "config.json")
    if vocab_dir:
        check(all(os.path.isfile(os.path.join(out, f)) for f in ("vocab.json", "merges.txt", "tokenizer_config.json")),
              "tokenizer files")


def _check_refusals(check, model, out, tmp):
    """Each bad input is refused with a one-line ExportError, and none leaves anything in tmp."""
    for what, args, expect in [
            ("an existing, non-empty OUT_DIR", (model, out), "is not an empty folder"),
            ("a file that is not a model file", (os.path.join(out, "model.safetensors"), os.path.join(tmp, "x")), "bad magic"),
            ("a file shorter than the header", (os.path.join(out, "config.json"), os.path.join(tmp, "x")), "too short"),
            ("a missing model file", (os.path.join(tmp, "none.bin"), os.path.join(tmp, "y")), "cannot read"),
            ("--vocab-dir without the vocabulary", (model, os.path.join(tmp, "z"), tmp), "no such file")]:
        try:
            export(*args)
            check(False, f"refuses {what}")
        except ExportError as e:
            check(expect in str(e) and "\n" not in str(e), f"refuses {what}: {e}")
    check(sorted(os.listdir(tmp)) == ["hf", "model.bin"], "nothing left behind by the refusals")


def _write_fails_halfway(path, tensors):
    """Stands in for write_safetensors: a few bytes written, then the disk is full."""
    with open(path, "wb") as f:
        f.write(b"partial")
    raise OSError(28, "No space left on device")


def _check_failed_write(check, model, tmp):
    """A write that fails halfway raises, and its temporary folder is removed (no half export)."""
    global write_safetensors  # export() looks the name up in this module's globals at each call
    saved = write_safetensors
    write_safetensors = _write_fails_halfway
    try:
        export(model, os.path.join(tmp, "w"))
        check(False, "a failed write raises")
    except OSError:
        check(sorted(os.listdir(tmp)) == ["hf", "model.bin"], "a write failing halfway leaves no folder behind")
    finally:
        write_safetensors = saved


def _check_folder_mode(check, out):
    """The export's folder gets the umask's mode, not mkdtemp's 0700."""
    mode = os.stat(out).st_mode & 0o777
    umask = os.umask(0)  # os.umask sets a new mask and returns the old one: put it back at once
    os.umask(umask)
    check(mode == 0o777 & ~umask, f"the folder's mode follows the umask ({oct(mode)})")


def _check_in_transformers(check, model, out, tmp, params, config, vocab_dir):
    """Where torch and transformers are installed: GPT2LMHeadModel loads the export and its logits
    match dev/reference.py's on the model file, dev/convert_hf.py turns the export back into the
    same model file bitwise, and (with a vocabulary) AutoTokenizer loads the tokenizer files."""
    try:
        import torch
        from transformers import GPT2LMHeadModel
    except ImportError:
        print("note: torch or transformers not installed: transformers' loading not checked")
        return
    import reference, convert_hf
    hf = GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").float().eval()
    idx = torch.randint(0, config["V"], (2, 64), generator=torch.Generator().manual_seed(3))
    tp = {n: torch.from_numpy(a) for n, a in params.items()}
    with torch.no_grad():
        err = (reference.forward(tp, dict(config, Vp=padded_vocab(config["V"])), idx) - hf(idx).logits).abs().max().item()
    check(err < 1e-4, f"GPT2LMHeadModel.from_pretrained(OUT_DIR) logits vs reference.py: max abs err {err:.2e}")
    again = os.path.join(tmp, "again.bin")
    convert_hf.convert(out, again)
    with open(model, "rb") as a, open(again, "rb") as b:
        check(a.read() == b.read(), "dev/convert_hf.py on the export: bitwise the same model file")
    if vocab_dir:
        _check_tokenizer(check, out, vocab_dir)


def _check_tokenizer(check, out, vocab_dir):
    """AutoTokenizer on the exported tokenizer files encodes a mixed text as tiktoken's gpt2 does
    from the same vocabulary files (or, without tiktoken, at least loads and encodes)."""
    from transformers import AutoTokenizer
    text = "Hello world, it's 2026: naïve café — 東京!"
    ids = AutoTokenizer.from_pretrained(out).encode(text)
    try:
        from tokenizer_fixture import gpt2_encoding  # tiktoken, from the same local files
        check(ids == gpt2_encoding(vocab_dir).encode_ordinary(text), f"AutoTokenizer(OUT_DIR) = tiktoken gpt2 ({len(ids)} ids)")
    except ImportError:
        check(len(ids) > 0, "AutoTokenizer(OUT_DIR) loads (tiktoken not installed)")


def selftest(vocab_dir=None, report=None):
    """A small random model file -> export -> read back; with torch and transformers installed also
    GPT2LMHeadModel.from_pretrained against dev/reference.py's forward on the same file, and the
    round trip through dev/convert_hf.py (bitwise the same model file). Each check goes to
    report(ok, what) (dev/unit/check.py's check in CI) or is printed. Returns the failure count."""
    check = SelfTest(report)
    config = dict(maxT=64, V=GPT2_VOCAB, L=2, NH=4, C=64)
    params = _random_params(config)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.bin")
        write_model(model, params, config)
        out = os.path.join(tmp, "hf")
        _, tensors = export(model, out, vocab_dir)
        _check_tensors(check, read_safetensors(os.path.join(out, "model.safetensors")), tensors, params, config)
        _check_config_files(check, out, config, vocab_dir)
        _check_refusals(check, model, out, tmp)
        _check_failed_write(check, model, tmp)
        _check_folder_mode(check, out)
        _check_in_transformers(check, model, out, tmp, params, config, vocab_dir)
    return check.summary("export_hf")


def main():
    ap = doc_parser(__doc__)
    ap.add_argument("model", nargs="?", help="model file (e.g. a checkpoint's model.bin)")
    ap.add_argument("out_dir", nargs="?", help="folder to write (must not exist or be empty)")
    ap.add_argument("--vocab-dir", help="folder with GPT-2's encoder.json and vocab.bpe: also write the tokenizer")
    ap.add_argument("--selftest", action="store_true", help="export a small random model and check it")
    args = ap.parse_args()
    if args.selftest:
        return 1 if selftest(args.vocab_dir) else 0
    if not args.model or not args.out_dir:
        ap.error("MODEL and OUT_DIR are required (or --selftest)")
    try:
        config, tensors = export(args.model, args.out_dir, args.vocab_dir)
    except (ExportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    n = sum(a.size for a in tensors.values())
    print(f"wrote {args.out_dir}: L={config['L']} NH={config['NH']} C={config['C']} maxT={config['maxT']} "
          f"V={config['V']}, {n} parameters{', tokenizer' if args.vocab_dir else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
