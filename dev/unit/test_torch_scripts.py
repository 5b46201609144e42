"""Unit test of the PyTorch scripts' command lines without PyTorch (dev/reference.py,
train_reference.py, convert_hf.py, precision_power.py, torch_bench.py, cuda/sdpa_check.py,
cuda/sdpa_bench.py; numpy only, no GPU; and tokenizer_fixture.py without tiktoken): --help works; bad
arguments and inputs are refused before PyTorch is needed; a run that needs PyTorch (or, for
convert_hf.py, transformers) is one line naming the script and the package, exit 1, nothing
written. torch and transformers are blocked in the scripts' interpreter (None in sys.modules), so
this tests the same where they are installed; numpy too, last: every tool that needs it says so in one line."""
import os
import subprocess
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, ".."))
from check import check, finish  # noqa: E402
from model_file import HEADER_INTS, TOKENS_MAGIC, TOKENS_VERSION, padded_vocab, param_shapes, write_model  # noqa: E402

DEV = os.path.normpath(os.path.join(here, ".."))
# runs sys.argv[2] with its arguments, the modules named in sys.argv[1] (comma-separated) blocked
BLOCKED = ("import runpy, sys\n"
           "for m in filter(None, sys.argv[1].split(',')):\n"
           "    sys.modules[m] = None\n"
           "sys.argv = sys.argv[2:]\n"
           "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def run(script, args, blocked="torch,transformers", cwd=None):
    p = subprocess.run([sys.executable, "-c", BLOCKED, blocked, os.path.join(DEV, script)] + list(args),
                       capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def one_line(rc, out, err, start, code=1):
    """exit code `code`, nothing on stdout, one stderr line starting with `start`."""
    return rc == code and not out and err.count("\n") == 1 and err.startswith(start)


def needs(script, package="PyTorch", pip="torch"):
    return f"dev/{script} needs {package} (pip install {pip}): "


with tempfile.TemporaryDirectory() as tmp:
    # a tiny model file and a token shard: inputs train_reference.py accepts
    config = dict(maxT=16, V=300, L=1, NH=2, C=32)
    model = os.path.join(tmp, "model.bin")
    shapes = param_shapes(dict(config, Vp=padded_vocab(config["V"])))
    write_model(model, {n: np.zeros(s, dtype="<f4") for n, s in shapes.items()}, config)
    shard = os.path.join(tmp, "shard.bin")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = [TOKENS_MAGIC, TOKENS_VERSION, 1000]
    with open(shard, "wb") as f:
        f.write(header.tobytes() + (np.arange(1000) % config["V"]).astype("<u2").tobytes())
    # a folder that passes convert_hf.py's checks of config.json (the weights are never read here)
    hf = os.path.join(tmp, "hf")
    os.makedirs(hf)
    with open(os.path.join(hf, "config.json"), "w") as f:
        f.write('{"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 16, "vocab_size": 300}')
    open(os.path.join(hf, "model.safetensors"), "w").close()

    for script in ("reference.py", "train_reference.py", "convert_hf.py", "precision_power.py"):
        rc, out, err = run(script, ["--help"])
        check(rc == 0 and out.startswith("usage:") and not err, f"{script} --help without PyTorch: usage, exit 0 ({err.strip()[-200:]})")

    # reference.py: its sizes checked first; a run is one line, and no <out> folder
    ref_out = os.path.join(tmp, "ref")
    rc, out, err = run("reference.py", ["--config", "tiny", "-T", "0", "--out", ref_out])
    check(one_line(rc, out, err, "need 1 <= T <= 64 for tiny"), f"reference.py -T 0: one line before PyTorch ({err.strip()})")
    rc, out, err = run("reference.py", ["--config", "d48", "--layers", "0", "--out", ref_out])
    check(one_line(rc, out, err, "--layers must be in [1, 1000], got 0") and not os.path.exists(ref_out),
          f"reference.py --layers 0: one line before PyTorch, nothing written ({err.strip()})")
    rc, out, err = run("reference.py", ["--config", "tiny", "-B", "2", "-T", "16", "--out", ref_out])
    check(one_line(rc, out, err, needs("reference.py")) and not os.path.exists(ref_out),
          f"reference.py without PyTorch: one line, exit 1, nothing written ({err.strip()})")

    # train_reference.py: the model file and the shards read first; a run is one line, no --log
    log = os.path.join(tmp, "log.jsonl")
    good = ["-e", model, "-i", shard, "-B", "2", "-T", "16", "-x", "2", "--log", log]
    rc, out, err = run("train_reference.py", ["-e", os.path.join(tmp, "none.bin"), "-i", shard])
    check(one_line(rc, out, err, "error: ") and "none.bin" in err, f"train_reference.py, missing model file: one line ({err.strip()})")
    rc, out, err = run("train_reference.py", good[:3] + [os.path.join(tmp, "no_shards_*.bin")] + good[4:])
    check(one_line(rc, out, err, "error: ") and "no file matches" in err, f"train_reference.py, no shard: one line ({err.strip()})")
    rc, out, err = run("train_reference.py", good)
    check(one_line(rc, out, err, needs("train_reference.py")) and not os.path.exists(log),
          f"train_reference.py without PyTorch: one line, exit 1, no log written ({err.strip()})")

    # convert_hf.py: the folder checked first; PyTorch, then transformers, needed for a run
    conv = os.path.join(tmp, "conv.bin")
    rc, out, err = run("convert_hf.py", [os.path.join(tmp, "nope"), conv])
    check(one_line(rc, out, err, "error: ") and "nope: not a folder" in err, f"convert_hf.py, missing folder: one line ({err.strip()})")
    rc, out, err = run("convert_hf.py", [hf, conv])
    check(one_line(rc, out, err, needs("convert_hf.py")) and not os.path.exists(conv),
          f"convert_hf.py without PyTorch: one line, exit 1, nothing written ({err.strip()})")
    # a config.json whose sizes are not positive integers, or that is not an object: one line naming
    # it, before PyTorch is needed (not a ZeroDivisionError, TypeError or AttributeError traceback)
    for what, text in [("n_head 0", '{"n_head": 0}'), ("n_embd as a string", '{"n_embd": "768"}'),
                       ("n_layer -1", '{"n_layer": -1}'), ("n_positions 1.5", '{"n_positions": 1.5}'),
                       ("layer_norm_epsilon null", '{"layer_norm_epsilon": null}'),
                       ("a JSON list", '[1]')]:
        bad_hf = os.path.join(tmp, "bad_hf")
        os.makedirs(bad_hf, exist_ok=True)
        with open(os.path.join(bad_hf, "config.json"), "w") as f:
            f.write(text)
        open(os.path.join(bad_hf, "model.safetensors"), "w").close()
        rc, out, err = run("convert_hf.py", [bad_hf, conv])
        check(one_line(rc, out, err, "error: " + os.path.join(bad_hf, "config.json") + ": ") and not os.path.exists(conv),
              f"convert_hf.py, config.json with {what}: one line naming it, nothing written ({err.strip()[-300:]})")
    rc, out, err = run("convert_hf.py", ["--selftest"])
    check(one_line(rc, out, err, needs("convert_hf.py")), f"convert_hf.py --selftest without PyTorch: one line ({err.strip()})")
    try:
        import torch  # noqa: F401  (where it is installed: transformers alone missing)
        rc, out, err = run("convert_hf.py", [hf, conv], blocked="transformers")
        check(one_line(rc, out, err, needs("convert_hf.py", "transformers", "transformers")) and not os.path.exists(conv),
              f"convert_hf.py without transformers: one line, exit 1, nothing written ({err.strip()})")
    except ImportError:
        pass

    # precision_power.py: no input files; a run is one line
    rc, out, err = run("precision_power.py", ["--seconds", "1"])
    check(one_line(rc, out, err, needs("precision_power.py")), f"precision_power.py without PyTorch: one line ({err.strip()})")

    # torch_bench.py: --help and its arguments without PyTorch; a run is one line
    rc, out, err = run("torch_bench.py", ["--help"])
    check(rc == 0 and out.startswith("usage:") and not err, f"torch_bench.py --help without PyTorch: usage, exit 0 ({err.strip()[-200:]})")
    rc, out, err = run("torch_bench.py", ["-b", "4", "-t", "64", "-d", "1000"])
    check(one_line(rc, out, err, "torch_bench: -d 1000 is not a multiple"), f"torch_bench.py, bad -d without PyTorch: one line ({err.strip()})")
    rc, out, err = run("torch_bench.py", ["--no-compile", "--compile-mode", "max-autotune"])
    check(one_line(rc, out, err, "torch_bench: --compile-mode max-autotune with --no-compile"), f"torch_bench.py, --compile-mode with --no-compile: one line ({err.strip()})")
    rc, out, err = run("torch_bench.py", ["-b", "4", "-t", "64"])
    check(one_line(rc, out, err, needs("torch_bench.py")), f"torch_bench.py without PyTorch: one line ({err.strip()})")

    # the attention's PyTorch tools (GPU-machine only): one line without PyTorch
    for script in ("cuda/sdpa_check.py", "cuda/sdpa_bench.py"):
        rc, out, err = run(script, ["--quick"])
        check(one_line(rc, out, err, needs(script)), f"{script} without PyTorch: one line ({err.strip()})")

    # tokenizer_fixture.py without tiktoken: one line, nothing written (--compare writes nothing anyway)
    rc, out, err = run("tokenizer_fixture.py", ["--compare", os.path.join(tmp, "none.txt")], blocked="tiktoken")
    check(one_line(rc, out, err, needs("tokenizer_fixture.py", "tiktoken", "tiktoken")),
          f"tokenizer_fixture.py without tiktoken: one line ({err.strip()})")

    # without numpy (the README: "a tool whose package is missing says so in one line"): every tool
    # that needs it, directly or through model_file.py / reference.py, says so in one line, exit 1
    for script, args in (("export_hf.py", [model, os.path.join(tmp, "exp")]), ("convert_hf.py", [hf, os.path.join(tmp, "c.bin")]),
                         ("reference.py", []), ("train_reference.py", ["-e", model, "-i", shard]),
                         ("hellaswag_reference.py", [model, shard]), ("tokenizer_fixture.py", []),
                         ("torch_bench.py", []), ("precision_power.py", []), ("cuda/sdpa_check.py", ["--quick"]),
                         ("cuda/sdpa_bench.py", []), ("attention_numerics.py", ["--brief"])):
        rc, out, err = run(script, args, blocked="numpy,torch,transformers,tiktoken")
        check(one_line(rc, out, err, needs(script, "numpy", "numpy")), f"{script} without numpy: one line ({err.strip()[-300:]})")
    check(not os.path.exists(os.path.join(tmp, "exp")) and not os.path.exists(os.path.join(tmp, "c.bin")),
          "without numpy: export_hf.py and convert_hf.py wrote nothing")
finish()
