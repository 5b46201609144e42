"""Binary file formats shared by the dev/ scripts (numpy only, no torch needed).

Model file (llm.c compatible, little-endian):
  256 x int32 header: [0]=20240326 magic, [1]=3 version (fp32 params), [2]=maxT, [3]=V,
                      [4]=L, [5]=NH, [6]=C, [7]=Vp (V padded to a multiple of 128), rest 0
  then float32 parameters, each tensor contiguous row-major, in PARAM_ORDER with the shapes
  from param_shapes(). Linear weights use PyTorch's (out, in) layout.

Token shard (llm.c, little-endian):
  256 x int32 header: [0]=20240520 magic, [1]=1 version, [2]=number of tokens; then uint16 tokens.
"""
import math
import os
import stat
import sys

try:
    import numpy as np
except ImportError as e:  # one line, as reference.need says it for PyTorch: every dev/ tool that needs numpy imports this first
    _main = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.exit(f"{os.path.relpath(_main, _root) if _main.startswith(_root + os.sep) else 'dev/model_file.py'} needs numpy (pip install numpy): {e}")

MODEL_MAGIC, MODEL_VERSION = 20240326, 3
TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1
HEADER_INTS = 256

# The order of the parameter tensors in the file; the CUDA trainer reads them in this order.
PARAM_ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]

# Hugging Face's GPT-2 names: ours <- HF's inside transformer.h.{l}, and whether it is a Conv1D
# weight, which HF stores (in, out) and we store (out, in) (dev/convert_hf.py, dev/export_hf.py)
HF_BLOCK_MAP = [("ln1w", "ln_1.weight", False), ("ln1b", "ln_1.bias", False),
                ("qkvw", "attn.c_attn.weight", True), ("qkvb", "attn.c_attn.bias", False),
                ("attprojw", "attn.c_proj.weight", True), ("attprojb", "attn.c_proj.bias", False),
                ("ln2w", "ln_2.weight", False), ("ln2b", "ln_2.bias", False),
                ("fcw", "mlp.c_fc.weight", True), ("fcb", "mlp.c_fc.bias", False),
                ("fcprojw", "mlp.c_proj.weight", True), ("fcprojb", "mlp.c_proj.bias", False)]
# and outside the blocks (transformer.{name}); wte is (V, C) in HF, (Vp, C) with zero rows here
HF_HEAD_MAP = [("wte", "wte.weight"), ("wpe", "wpe.weight"), ("lnfw", "ln_f.weight"), ("lnfb", "ln_f.bias")]


def padded_vocab(V, multiple=128):
    """V rounded up to a multiple of 128 (50257 -> 50304), so the vocab matmuls tile evenly."""
    return (V + multiple - 1) // multiple * multiple


def param_shapes(config):
    """Shapes of all parameters, per-layer tensors stacked along a leading L dimension."""
    V, maxT, L, C = config["V"], config["maxT"], config["L"], config["C"]
    Vp = config.get("Vp", padded_vocab(V))
    return {
        "wte": (Vp, C), "wpe": (maxT, C),
        "ln1w": (L, C), "ln1b": (L, C),
        "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C),
        "ln2w": (L, C), "ln2b": (L, C),
        "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
        "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
        "lnfw": (C,), "lnfb": (C,),
    }


def to_numpy_f32(t):
    """A torch tensor (any device) or array-like as a contiguous little-endian float32 array."""
    if hasattr(t, "detach"):
        t = t.detach().cpu().float().numpy()
    return np.ascontiguousarray(t, dtype="<f4")


def write_tensors(f, tensors, shapes):
    """Writes named tensors to an open binary file in PARAM_ORDER, checking each shape."""
    for name in PARAM_ORDER:
        a = to_numpy_f32(tensors[name])
        if a.shape != tuple(shapes[name]):
            raise ValueError(f"{name}: shape {a.shape}, expected {tuple(shapes[name])}")
        f.write(a.tobytes())


def write_model(path, params, config):
    """params: dict name -> tensor (wte already padded to Vp rows); config: maxT, V, L, NH, C."""
    Vp = padded_vocab(config["V"])
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = [MODEL_MAGIC, MODEL_VERSION, config["maxT"], config["V"],
                  config["L"], config["NH"], config["C"], Vp]
    # through a temporary name: a write that fails halfway (a tensor of the wrong shape, a full
    # disk) leaves no partial model file, and an existing one at `path` as it was
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            write_tensors(f, params, param_shapes(dict(config, Vp=Vp)))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read_model(path):
    """Returns (config, params) with params a dict name -> float32 numpy array.
    Raises ValueError with a one-line message when the file is not a valid fp32 model file."""
    mode = os.stat(path).st_mode  # a directory, or a named pipe (open would wait for a writer forever):
    if not stat.S_ISREG(mode):    # refused unopened, as llmc/checkpoint.h does
        raise ValueError(f"{path}: {'is a directory' if stat.S_ISDIR(mode) else 'not a regular file'}, not a model file")
    with open(path, "rb") as f:
        head = f.read(HEADER_INTS * 4)
        data = f.read()
    if len(head) != HEADER_INTS * 4:
        raise ValueError(f"{path}: too short for the {HEADER_INTS}-int32 header")
    header = np.frombuffer(head, dtype="<i4")
    if header[0] != MODEL_MAGIC:
        raise ValueError(f"{path}: bad magic {header[0]} (expected {MODEL_MAGIC}, a model file)")
    if header[1] != MODEL_VERSION:
        raise ValueError(f"{path}: version {header[1]} not supported (expected {MODEL_VERSION}, fp32)")
    maxT, V, L, NH, C, Vp = (int(v) for v in header[2:8])
    if min(maxT, V, L, NH, C) <= 0 or C % NH != 0 or Vp < V:
        raise ValueError(f"{path}: bad sizes maxT={maxT} V={V} L={L} NH={NH} C={C} Vp={Vp}")
    config = dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)
    shapes = param_shapes(config)
    # math.prod counts in Python's unbounded ints: np.prod's int64 wraps on a corrupt header's sizes
    # and can land on the file's length, which then fails later with no file named
    expected = sum(math.prod(s) for s in shapes.values()) * 4
    if len(data) != expected:
        raise ValueError(f"{path}: {len(data)} parameter bytes, expected {expected} for this config")
    flat = np.frombuffer(data, dtype="<f4")
    params, offset = {}, 0
    for name in PARAM_ORDER:
        n = math.prod(shapes[name])
        params[name] = flat[offset:offset + n].reshape(shapes[name]).copy()
        offset += n
    return config, params


def read_shard_header(f, path):
    """The token count from an open shard's header; ValueError (one line naming path) if it is none."""
    head = f.read(HEADER_INTS * 4)
    header = np.frombuffer(head, dtype="<i4") if len(head) == HEADER_INTS * 4 else None
    if header is None or header[0] != TOKENS_MAGIC or header[1] != TOKENS_VERSION:
        raise ValueError(f"{path}: not a token shard (magic {TOKENS_MAGIC}, version {TOKENS_VERSION})")
    return int(header[2])


def read_tokens(path, count=None):
    """Reads an llm.c token shard; returns the first `count` tokens (all when None) as int32."""
    with open(path, "rb") as f:
        n = read_shard_header(f, path)
        if count is not None and count > n:
            raise ValueError(f"{path}: has {n} tokens, need {count}")
        tokens = np.frombuffer(f.read(2 * (n if count is None else count)), dtype="<u2")
    if tokens.size != (n if count is None else count):
        raise ValueError(f"{path}: truncated, header says {n} tokens")
    return tokens.astype(np.int32)


def map_tokens(path):
    """Memory-maps a whole llm.c token shard: returns its tokens as a read-only uint16 array.
    Checks the header and that the file size matches it exactly, as llmc/shards.h does."""
    with open(path, "rb") as f:
        n = read_shard_header(f, path)
        f.seek(0, 2)
        size = f.tell()
    if n < 0 or size != HEADER_INTS * 4 + 2 * n:
        raise ValueError(f"{path}: header says {n} tokens, file holds {(size - HEADER_INTS * 4) // 2}")
    if n == 0:
        return np.zeros(0, dtype="<u2")
    return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_INTS * 4, shape=(n,))


# --- shared by the two converters (convert_hf.py, export_hf.py): their command line and self-test

def doc_parser(doc):
    """An ArgumentParser whose description is the docstring's first line and whose epilog is the
    rest (from its third line), printed as written."""
    import argparse
    return argparse.ArgumentParser(description=doc.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog="\n".join(doc.splitlines()[2:]))


class SelfTest:
    """A --selftest's checks: check(ok, what) prints PASS/FAIL (or hands them to report, e.g.
    dev/unit/check.py's check in CI) and counts the failures; summary(name) prints the last line
    and returns that count."""
    def __init__(self, report=None):
        self.failures, self.report = 0, report

    def __call__(self, ok, what):
        self.failures += 0 if ok else 1
        if self.report:
            self.report(ok, what)
        else:
            print(f"{'PASS' if ok else 'FAIL'} {what}")

    def summary(self, name):
        print(f"{'FAIL' if self.failures else 'PASS'} {name} self-test ({self.failures} failed)")
        return self.failures
