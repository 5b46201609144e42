"""What the device-script tests share (dev/unit/test_device_scripts.py, test_rank_scripts.py): a
temporary copy of the repository layout a script needs, stand-in programs written into it, and
the script run there (no GPU, no third-party packages)."""
import atexit
import os
import shutil
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
    ab_means.sh, wait_line.sh, dev/compare_losses.py. Returns its root."""
    _trees[0] += 1
    root = os.path.join(TMP, f"repo{_trees[0]}")
    for rel in [f"dev/device/{s}" for s in scripts] + ["dev/device/gpu_power.sh", "dev/device/ab_means.sh", "dev/device/wait_line.sh",
                                                      "dev/compare_losses.py"]:
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), os.path.join(root, rel))
    return root


def sh(root, script, args=(), env=None, timeout=120, where="dev/device"):
    """Runs <root>/<where>/<script> from root, OUT=<root>/out; returns (exit code, stdout, stderr)."""
    e = dict(os.environ, OUT=os.path.join(root, "out"), **(env or {}))
    p = subprocess.run(["bash", f"{where}/{script}"] + list(args), cwd=root, env=e, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def lines_with(out, prefix):
    return [line for line in out.splitlines() if line.startswith(prefix)]


def gpu_tools(root, gpus=None):
    """Stand-ins in <root>/tools: mpirun (drops its options, exports STANDIN_RANKS = its -np and
    OMPI_COMM_WORLD_RANK=0, runs the command in its own process) and, when `gpus` is given,
    nvidia-smi listing that many GPUs. Returns a PATH with them first."""
    write(os.path.join(root, "tools/mpirun"), "#!/usr/bin/env bash\nn=1\n"
          "while [[ $1 == -* ]]; do case $1 in -np) n=$2; shift 2;; -x|--bind-to) shift 2;; --mca) shift 3;; *) shift;; esac; done\n"
          "STANDIN_RANKS=$n OMPI_COMM_WORLD_RANK=0 exec \"$@\"\n", exe=True)
    if gpus is not None:
        write(os.path.join(root, "tools/nvidia-smi"), "#!/bin/sh\n" + "".join(f"echo 'GPU {g}: stand-in'\n" for g in range(gpus)),
              exe=True)
    return os.path.join(root, "tools") + ":" + os.environ["PATH"]
