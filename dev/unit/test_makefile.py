"""Unit test of the Makefile's plumbing, in a temporary copy of the sources it reads, with stand-in
compilers (each writes its own command line into its -o file) and a stand-in nvidia-smi:
  PRECISION / GPU_ARCH: a value the build cannot use (lowercase, two words, sm_90, 8.6) is one
      error line from make, before any compiler runs; SANITIZE=1 sanitizes the host code even
      with CXXFLAGS given on the command line;
  nvidia-smi: a working one's compute capability becomes GPU_ARCH and its GPU makes `make test`
      build the GPU tests; a failing one (no driver, a driver/library mismatch: it prints its error
      on stdout and exits non-zero) is no GPU: GPU_ARCH 90, no GPU test built, as
      dev/run_tests.sh then runs none;
  the compiler-command stamps: switching PRECISION or SANITIZE back and forth between targets
      never leaves a binary of other settings, nothing is recompiled when nothing changed, and a
      header edit rebuilds what includes it."""
import glob
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from standins import ROOT, TMP, check, finish, write  # noqa: E402

# the sources the Makefile's rules and wildcards read (not the built binaries beside them)
SOURCES = ["Makefile", "train_gpt2.cu", "test_gpt2.cu", "data/tokenize.cpp", "dev/interconnect.cu", "dev/power_probe.cu",
           "dev/unit/check.h"]
PATTERNS = ["llmc/*.h", "llmc/*.cuh", "data/*.h", "dev/unit/test_*.cpp", "dev/unit/test_*.cu", "dev/cuda/*.cu", "dev/cuda/*.cuh"]
root = os.path.join(TMP, "repo")
for rel in SOURCES + [os.path.relpath(p, ROOT) for pat in PATTERNS for p in glob.glob(os.path.join(ROOT, pat))]:
    os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
    shutil.copy2(os.path.join(ROOT, rel), os.path.join(root, rel))

COMPILER = """#!/bin/sh
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
[ -n "$out" ] && printf '%s\\n' "$*" > "$out" && chmod +x "$out"
exit 0
"""
tools = os.path.join(TMP, "tools")
write(os.path.join(tools, "cuda/bin/nvcc"), COMPILER, exe=True)
write(os.path.join(tools, "g++"), COMPILER, exe=True)
# nvidia-smi stand-ins: a Hopper GPU, an Ampere one, and the error of a machine whose driver is not
# running (nvidia-smi prints it on stdout, exit 9)
for name, text in [("hopper", "case \"$*\" in *compute_cap*) echo 9.0;; *) echo 'GPU 0: stand-in H200';; esac\n"),
                   ("ampere", "case \"$*\" in *compute_cap*) echo 8.0;; *) echo 'GPU 0: stand-in A100';; esac\n"),
                   ("broken", "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                              "the latest NVIDIA driver is installed and running.\"\nexit 9\n"),
                   ("none", None)]:
    os.makedirs(os.path.join(tools, name), exist_ok=True)
    if text:
        write(os.path.join(tools, name, "nvidia-smi"), "#!/bin/sh\n" + text, exe=True)


def make(*args, smi="none"):
    """make ARGS in the copy, with the stand-in compilers and the `smi` nvidia-smi (none: not on
    PATH), and none of the settings of the make that runs this test; returns (rc, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CI", "PRECISION", "GPU_ARCH", "SANITIZE",
                        "NO_MPI", "NO_NCCL", "EXTRA_FLAGS", "NVCC", "CXX", "CXXFLAGS", "CUDA_HOME")}
    path = [p for p in env.get("PATH", "/usr/bin:/bin").split(":") if not os.path.exists(os.path.join(p, "nvidia-smi"))]
    env["PATH"] = ":".join([os.path.join(tools, smi)] + path)
    p = subprocess.run(["make", "--no-print-directory", f"NVCC={tools}/cuda/bin/nvcc", f"CXX={tools}/g++"] + list(args),
                       cwd=root, env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def compiled(out):
    """The outputs of the compiler commands make ran (or, with -n, would run)."""
    return sorted(a.split(" -o ")[-1].split()[0] for a in out.splitlines() if " -o " in a and not a.startswith("mkdir"))


def built_with(path):
    with open(os.path.join(root, path)) as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# PRECISION and GPU_ARCH: one error line, nothing compiled
for var, value, says in [("PRECISION", "bf16", "PRECISION must be FP16, BF16 or FP32, not 'bf16'"),
                         ("PRECISION", "FP16 BF16", "PRECISION must be FP16, BF16 or FP32, not 'FP16 BF16'"),
                         ("PRECISION", "", "PRECISION must be FP16, BF16 or FP32, not ''"),
                         ("GPU_ARCH", "sm_90", "GPU_ARCH must be"),
                         ("GPU_ARCH", "8.6", "not '8.6'"),
                         ("GPU_ARCH", "90 80", "not '90 80'")]:
    rc, out, err = make("CI=true", f"{var}={value}", "train_gpt2cu")
    check(rc != 0 and len(err.strip().splitlines()) == 1 and says in err and compiled(out) == [],
          f"make {var}='{value}': one error line ({says}), nothing compiled", f"rc={rc}\n{out}{err}")
rc, out, err = make("CI=true", "GPU_ARCH=80", "PRECISION=BF16", "-n", "train_gpt2cu")
check(rc == 0 and "arch=compute_80,code=sm_80" in out and "-DENABLE_BF16" in out and "USE_WGMMA" not in out,
      "make GPU_ARCH=80 PRECISION=BF16: sm_80, BF16, no wgmma", out + err)
# SANITIZE=1 with the user's own CXXFLAGS (a command-line variable, which a plain += leaves alone)
rc, out, err = make("CI=true", "SANITIZE=1", "CXXFLAGS=-O1 -std=c++17", "-n", "data/tokenize")
check(rc == 0 and "-O1 -std=c++17 -g -fsanitize=address,undefined" in out, "make SANITIZE=1 CXXFLAGS=...: still sanitized", out + err)
rc, out, err = make("CI=true", "GPU_ARCH=", "-n", "train_gpt2cu")
check(rc == 0 and "arch=compute_90a,code=sm_90a" in out and "-DUSE_WGMMA" in out, "make GPU_ARCH= (empty): sm_90a", out + err)

# ---------------------------------------------------------------------------------------------
# what nvidia-smi says: the architecture, and whether `make test` builds the GPU tests
gpu_tests = ["dev/cuda/attention_check", "test_gpt2cu"]
for smi, arch, gpu in [("hopper", "90", True), ("ampere", "80", True), ("broken", "90", False), ("none", "90", False)]:
    rc, out, err = make("info", smi=smi)
    check(rc == 0 and f"GPU_ARCH={arch} " in out, f"nvidia-smi {smi}: make info says GPU_ARCH={arch}", out + err)
    rc, out, err = make("-n", "test", smi=smi)
    planned = [t for t in gpu_tests if t in compiled(out)]
    check(rc == 0 and planned == (gpu_tests if gpu else []) and "train_gpt2cu" in compiled(out),
          f"nvidia-smi {smi}: make test builds the GPU tests: {gpu}", f"planned {compiled(out)}\n{err}")
    if smi == "ampere":
        check("arch=compute_80,code=sm_80" in out, "nvidia-smi ampere: built for sm_80", out)
    rc, out, err = make("CI=true", "info", smi=smi)
    check(rc == 0 and "GPU_ARCH=90 " in out, f"nvidia-smi {smi}, CI=true: GPU_ARCH=90 (not probed)", out + err)

# ---------------------------------------------------------------------------------------------
# the stamps: each binary holds the settings of its latest make, whatever was built in between
def build(target, *settings):
    rc, out, err = make("CI=true", *settings, target)
    check(rc == 0, f"make {' '.join(settings)} {target}", out + err)
    time.sleep(0.01)   # the next make's stamp strictly newer than these outputs
    return compiled(out)


steps = [("train_gpt2cu", [], "-DENABLE_FP16", True),
         ("train_gpt2cu", [], "-DENABLE_FP16", False),           # nothing changed: nothing compiled
         ("test_gpt2cu", ["PRECISION=BF16"], "-DENABLE_BF16", True),
         ("train_gpt2cu", [], "-DENABLE_FP16", True),            # the stamp went to BF16 and back
         ("train_gpt2cu", ["PRECISION=BF16"], "-DENABLE_BF16", True),
         ("train_gpt2cu", ["SANITIZE=1", "PRECISION=BF16"], "-fsanitize=address", True),
         ("train_gpt2cu", ["PRECISION=BF16"], "-DENABLE_BF16", True),
         ("build/unit/test_shards", ["SANITIZE=1"], "-fsanitize=address", True),
         ("data/tokenize", [], "-O2", True),                     # the host stamp back without sanitizers
         ("build/unit/test_shards", [], "-O2", True),
         ("build/unit/test_shards", [], "-O2", False)]
for target, settings, flag, rebuilt in steps:
    out = build(target, *settings)
    text = built_with(target)
    ok = (target in out) == rebuilt and flag in text and ("-fsanitize" in text) == ("SANITIZE=1" in settings)
    check(ok, f"make {' '.join(settings)} {target}: {'rebuilt' if rebuilt else 'up to date'}, built with {flag}",
          f"compiled {out}; {target}: {text}")

# a header edit rebuilds what includes it, and only that
build("train_gpt2cu"), build("dev/power_probe"), build("data/tokenize")
for header, want, not_want in [("llmc/gpt2.cuh", "train_gpt2cu", "dev/power_probe"), ("llmc/common.cuh", "dev/power_probe", None),
                               ("data/bpe.h", "data/tokenize", "train_gpt2cu")]:
    os.utime(os.path.join(root, header))
    time.sleep(0.01)
    rc, out, err = make("CI=true", "train_gpt2cu", "dev/power_probe", "data/tokenize")
    check(rc == 0 and want in compiled(out) and not_want not in compiled(out),
          f"touching {header} rebuilds {want}" + (f", not {not_want}" if not_want else ""), f"compiled {compiled(out)}\n{err}")
finish()
