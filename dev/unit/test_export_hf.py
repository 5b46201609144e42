"""Unit test of dev/export_hf.py (no GPU; numpy only): its self-test (a random model file exported,
read back, every tensor's name, shape and layout checked; the refusals), with GPT-2's tokenizer
files from $GPT2_VOCAB_DIR (default ../shared/data/gpt2) when they are there, and the command
line: one "wrote" line on success, one error line and exit 1 on a bad input. transformers' own
loading of the export is checked on the GPU machine (dev/device/loop_run.sh export), where torch is."""
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, ".."))
from check import check, finish  # noqa: E402
import export_hf  # noqa: E402
from model_file import param_shapes, padded_vocab, write_model  # noqa: E402
import numpy as np  # noqa: E402

vocab = os.environ.get("GPT2_VOCAB_DIR", os.path.join(here, "..", "..", "..", "shared", "data", "gpt2"))
if not os.path.isfile(os.path.join(vocab, "encoder.json")):
    print(f"note: {vocab}: no GPT-2 vocabulary, the tokenizer files are not checked")
    vocab = None
export_hf.selftest(vocab, report=check)

script = os.path.join(here, "..", "export_hf.py")
with tempfile.TemporaryDirectory() as tmp:
    config = dict(maxT=16, V=300, L=1, NH=2, C=32)
    shapes = param_shapes(dict(config, Vp=padded_vocab(config["V"])))
    write_model(os.path.join(tmp, "m.bin"), {n: np.ones(s, dtype="<f4") for n, s in shapes.items()}, config)
    r = subprocess.run([sys.executable, script, os.path.join(tmp, "m.bin"), os.path.join(tmp, "out")],
                       capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.startswith("wrote ") and "V=300" in r.stdout, f"export of a tiny model: {r.stdout.strip()}")
    r = subprocess.run([sys.executable, script, os.path.join(tmp, "m.bin"), os.path.join(tmp, "o2"), "--vocab-dir", tmp],
                       capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr.count("\n") == 1 and "300 tokens" in r.stderr and not os.path.exists(os.path.join(tmp, "o2")),
          f"--vocab-dir with a non-GPT-2 vocabulary: one line, exit 1, nothing written: {r.stderr.strip()}")
    r = subprocess.run([sys.executable, script, os.path.join(tmp, "none.bin"), os.path.join(tmp, "o3")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), f"missing model file: {r.stderr.strip()}")
    # a named pipe with no writer: open() would wait for one forever; refused unopened, as the trainer does
    fifo = os.path.join(tmp, "fifo.bin")
    os.mkfifo(fifo)
    try:
        r = subprocess.run([sys.executable, script, fifo, os.path.join(tmp, "o4")], capture_output=True, text=True, timeout=30)
        ok, said = r.returncode == 1 and r.stderr.count("\n") == 1 and fifo + ": not a regular file" in r.stderr, r.stderr.strip()
    except subprocess.TimeoutExpired:
        ok, said = False, "still waiting on the pipe after 30 s"
    check(ok and not os.path.exists(os.path.join(tmp, "o4")), f"a named pipe as the model file: one line, exit 1 ({said})")
    # a header whose sizes overflow 64 bits: C=2^17, L=2147465898 and this Vp make the parameter
    # count wrap around int64 to exactly C, so a reader counting in int64 takes this 512 KiB file for a
    # match; it must say the file does not fit its header (naming it), not fail later in a reshape
    from model_file import HEADER_INTS, MODEL_MAGIC, MODEL_VERSION  # noqa: E402
    wrap = os.path.join(tmp, "wrap.bin")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = [MODEL_MAGIC, MODEL_VERSION, 1, 1, 2147465898, 1, 2 ** 17, 1279324]
    with open(wrap, "wb") as f:
        f.write(header.tobytes() + np.zeros(2 ** 17, dtype="<f4").tobytes())
    r = subprocess.run([sys.executable, script, wrap, os.path.join(tmp, "o5")], capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: {wrap}: ") and "expected" in r.stderr
          and not os.path.exists(os.path.join(tmp, "o5")), f"a header whose sizes overflow int64: one line naming the file ({r.stderr.strip()})")
    # write_model failing halfway (its last tensor of the wrong shape) leaves the file there as it was, and no .tmp
    kept = os.path.join(tmp, "m.bin")
    before = open(kept, "rb").read()
    bad = {n: np.ones(s, dtype="<f4") for n, s in shapes.items()}
    last = list(shapes)[-1]
    bad[last] = np.ones((1,), dtype="<f4")
    try:
        write_model(kept, bad, config)
        raised = ""
    except ValueError as e:
        raised = str(e)
    check(raised.startswith(last) and open(kept, "rb").read() == before and not os.path.exists(kept + ".tmp"),
          f"write_model failing at its last tensor: the existing file unchanged, no .tmp ({raised})")
finish()
