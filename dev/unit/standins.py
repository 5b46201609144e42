"""What the device-script tests share (dev/unit/test_device_scripts.py, test_rank_scripts.py): a
temporary copy of the repository layout a script needs, stand-in programs written into it, and
the script run there (no GPU, no third-party packages)."""
import atexit
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from check import check as _check, finish  # noqa: E402,F401  (finish: for the tests that import this)


def check(ok, name, detail=""):
    """check(), and on a failure what the script printed (detail)."""
    _check(ok, name)
    if not ok and detail:
        print("    " + str(detail).replace("\n", "\n    "))


ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TMP = tempfile.mkdtemp()
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
_trees = [0]


def write(path, text, exe=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if exe:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def tree(*scripts):
    """A fresh copy of the repository layout the scripts need: dev/device/<scripts>, gpu_power.sh,
    ab_means.sh, wait_line.sh, gpu_count.sh, dev/compare_losses.py. Returns its root."""
    _trees[0] += 1
    root = os.path.join(TMP, f"repo{_trees[0]}")
    for rel in [f"dev/device/{s}" for s in scripts] + ["dev/device/gpu_power.sh", "dev/device/ab_means.sh", "dev/device/wait_line.sh",
                                                      "dev/device/gpu_count.sh", "dev/compare_losses.py"]:
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), os.path.join(root, rel))
    return root


def _default_interrupts():
    """In the child before exec: SIGINT and SIGQUIT back to their defaults. A shell without job
    control starts its background commands (`make test &` in a script) with both ignored, children
    inherit that, and a shell cannot trap a signal it was started ignoring: the scripts' SIGINT
    handling (stop_signal.sh's tests) would then be tested against a signal that never arrives."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def sh(root, script, args=(), env=None, timeout=120, where="dev/device"):
    """Runs <root>/<where>/<script> from root, OUT=<root>/out, with SIGINT and SIGQUIT at their
    defaults (_default_interrupts); returns (exit code, stdout, stderr)."""
    e = dict(os.environ, OUT=os.path.join(root, "out"))
    e.pop("CUDA_VISIBLE_DEVICES", None)   # the stand-in nvidia-smi's GPUs, unless `env` hides some
    e.update(env or {})
    p = subprocess.run(["bash", f"{where}/{script}"] + list(args), cwd=root, env=e, capture_output=True, text=True,
                       timeout=timeout, preexec_fn=_default_interrupts)
    return p.returncode, p.stdout, p.stderr


def lines_with(out, prefix):
    return [line for line in out.splitlines() if line.startswith(prefix)]


def gpu_tools(root, gpus=None):
    """Stand-ins in <root>/tools: mpirun (drops its options, exports STANDIN_RANKS = its -np and
    OMPI_COMM_WORLD_RANK=0, runs the command in its own process, after STANDIN_MPIRUN_DELAY seconds
    if set: a real mpirun takes a while to start its ranks) and, when `gpus` is given, nvidia-smi
    listing that many GPUs. Returns a PATH with them first."""
    write(os.path.join(root, "tools/mpirun"), "#!/usr/bin/env bash\nn=1\n"
          "while [[ $1 == -* ]]; do case $1 in -np) n=$2; shift 2;; -x|--bind-to) shift 2;; --mca) shift 3;; *) shift;; esac; done\n"
          "[ -n \"${STANDIN_MPIRUN_DELAY:-}\" ] && sleep \"$STANDIN_MPIRUN_DELAY\"\n"
          "STANDIN_RANKS=$n OMPI_COMM_WORLD_RANK=0 exec \"$@\"\n", exe=True)
    if gpus is not None:
        write(os.path.join(root, "tools/nvidia-smi"), "#!/bin/sh\n" + "".join(f"echo 'GPU {g}: stand-in'\n" for g in range(gpus)),
              exe=True)
    return os.path.join(root, "tools") + ":" + os.environ["PATH"]


# A stand-in trainer for dev/scaling.py's tests (test_predict.py, test_scaling.py): its RESULT line
# from -b/-t/-d, in the precision STANDIN_PRECISION (default bf16); it fails, as a trainer without a
# GPU does, at the sequence lengths in STANDIN_FAIL_T (or everywhere with "all"), and with --zero
# under STANDIN_FAIL_ZERO.
TRAINER_STANDIN = r"""#!/usr/bin/env python3
import os, sys
a = sys.argv
B, T, d = (int(a[a.index(k) + 1]) for k in ("-b", "-t", "-d"))
fail = os.environ.get("STANDIN_FAIL_T", "").split(",")
if "all" in fail or str(T) in fail or ("--zero" in a and os.environ.get("STANDIN_FAIL_ZERO")):
    print("train_gpt2cu: stand-in output before the error")
    sys.exit("CUDA error: no CUDA-capable device is detected")
accum = d // (B * T)
fwd, bwd, opt = 40.0 * B / 64 * accum, 80.0 * B / 64 * accum, 1.0
ms = fwd + bwd + opt
print(f"RESULT precision={os.environ.get('STANDIN_PRECISION', 'bf16')} model=L12C768 gpus=1 zero=0 B={B} T={T} accum={accum} "
      f"total_batch={d} steps=6 median_ms={ms:.3f} tok_per_s={d / ms * 1e3:.0f} mean_ms={ms:.3f} "
      f"tok_per_s_mean={d / ms * 1e3:.0f} mfu=40.00 fwd_ms={fwd:.3f} bwd_ms={bwd:.3f} opt_ms={opt:.3f} "
      f"exposed_comm_ms=0.000 exposed_comm_pct=0.00 comm_ms=0.000 comm_mb=0.0 busbw_gbs=0.0 "
      f"bwd_last_ms={bwd / accum:.3f} bwd_other_ms={bwd / accum:.3f} device_mem_gb=20.00")
"""
