"""Unit test of dev/scaling.py's alpha-beta predictor and of how it reads the trainer's RESULT line
(no GPU, no third-party packages; --predict end to end with a stand-in trainer that prints a RESULT line)."""
import os
import re
import struct
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from check import check, finish  # noqa: E402
from standins import TRAINER_STANDIN, gpu_tools, write  # noqa: E402
from scaling import (global_tokens, gpt2_ranges, grad_bytes, interference, model_dims, model_ranges, parse_result,  # noqa: E402
                     predict_gpus, predict_step_ms, probe_fit, use_mean_step, visible_gpus)


one = {"fwd": 40.0, "bwd": 80.0, "opt": 1.0}
r = gpt2_ranges()
check(abs(sum(b for _, b, _ in r) - 2 * 124475904) < 1, "ranges cover every parameter once (bf16 bytes)")
check(all(r[i][2] <= r[i + 1][2] for i in range(len(r) - 1)) and r[-1][2] == 1.0, "ranges ready in backward order")
ms, exp = predict_step_ms(one, 1, 8, 10, 300)
check(ms == 8 * 120 + 1 and exp == 0, "1 GPU: compute only")
ms, exp = predict_step_ms(one, 2, 4, 10, 1e6)
check(abs(ms - (4 * 120 + 1)) < 0.1 and exp < 0.1, "infinite bandwidth: perfect scaling")
ms_fast, _ = predict_step_ms(one, 2, 4, 10, 300)
ms_slow, exp_slow = predict_step_ms(one, 2, 4, 10, 1)
check(ms_slow > ms_fast and exp_slow > 200, "slow link: communication exposed")
_, exp_last = predict_step_ms(one, 2, 4, 0, 28.5)
emb = r[-1][1] / 28.5e9 * 1e3
check(exp_last >= emb * 0.99, "the embeddings' bucket, ready last, is always exposed")
_, z = predict_step_ms(one, 2, 4, 10, 300, zero=True)
_, d = predict_step_ms(one, 2, 4, 10, 300, zero=False)
check(z > d, "ZeRO-1 adds the all-gather")
# the RESULT line: numbers as floats, the mean step preferred, interference from the two backwards
line = ("noise\nRESULT precision=bf16 model=L12C768 gpus=2 accum=4 total_batch=524288 median_ms=440.000 "
        "tok_per_s=1191564 mean_ms=436.000 tok_per_s_mean=1202495 bwd_last_ms=59.500 bwd_other_ms=58.000\n")
res = parse_result(line)
check(res is not None and res["precision"] == "bf16" and res["accum"] == 4.0, "RESULT parsed: strings and numbers")
res.update(gpus=2)
use_mean_step(res)
check(res["tok_per_s"] == 1202495 and res["step_ms"] == 436.0 and res["tok_per_s_median"] == 1191564,
      "throughput from the mean step, the median kept")
check(abs(interference(res) - 1.5) < 1e-9, "interference = last backward - the others' mean")
old_line = parse_result("RESULT gpus=2 median_ms=440.0 tok_per_s=1191564 bwd_last_ms=59.5 bwd_other_ms=-1\n")
old_line.update(gpus=2)
use_mean_step(old_line)
check(old_line["step_ms"] == 440.0 and old_line["tok_per_s"] == 1191564, "no mean fields: the median")
check(interference(old_line) is None, "accum 1 (bwd_other_ms -1): no interference")
check(parse_result("no result here") is None, "no RESULT line: None")

# the chosen model's gradient sizes and the build's bytes per gradient element
def n_params(L, C, Vp=50304, maxT=1024):
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C


check(n_params(12, 768) == 124475904 and n_params(24, 1024) == 354871296, "parameter counts (d12 124M, d24 355M)")
check(model_dims("d12") == (12, 768, 50304, 1024) and model_dims("d48") == (48, 1600, 50304, 1024), "descriptors from dev/configs.py")
check(sum(b for _, b, _ in model_ranges("d24", 1024, {"precision": "bf16"})) == 2 * 354871296, "d24 ranges: d24's parameters, 2 bytes")
check(sum(b for _, b, _ in model_ranges("d12", 1024, {"precision": "fp32"})) == 4 * 124475904, "FP32 build: 4 bytes per gradient")
check(sum(b for _, b, _ in model_ranges("d12", 1024, {"precision": "fp16"})) == 2 * 124475904, "FP16 build: 2 bytes per gradient")
check(grad_bytes("FP32") == 4 and grad_bytes("bf16") == 2 and grad_bytes(None) == 2, "grad_bytes: precision names, default 2")
r128 = model_ranges("d12", 128, {"precision": "bf16"})
check(r128[-1][1] == (50304 + 1024) * 768 * 2, "T=128: the wpe gradient is still the model's maxT rows")
check(sum(b for _, b, _ in r128) == 2 * 124475904, "T=128: every parameter once")
r1024 = model_ranges("d12", 1024, {})
check([b for _, b, _ in r128] == [b for _, b, _ in r1024] and r128[1][2] > r1024[1][2],
      "T changes only the attention's share of the backward (the lm head's grows), not the sizes")
with tempfile.TemporaryDirectory() as tmp:
    mf = os.path.join(tmp, "m.bin")
    with open(mf, "wb") as f:
        f.write(struct.pack("<256i", *([20240326, 3, 256, 50257, 2, 2, 128, 50304] + [0] * 248)))
    check(model_dims(mf) == (2, 128, 50304, 256), "a model file: its header's L, C, Vp, maxT")
check(model_dims("elsewhere.bin", {"model": "L24C1024"}) == (24, 1024, 50304, 1024), "unknown model: RESULT's model=L..C..")
try:
    model_dims("d13")
    check(False, "an unknown model is an error")
except ValueError:
    check(True, "an unknown model is an error")
_, e12 = predict_step_ms(one, 8, 1, 10, 5, ranges=model_ranges("d12", 1024, {"precision": "bf16"}))
_, e24 = predict_step_ms(one, 8, 1, 10, 5, ranges=model_ranges("d24", 1024, {"precision": "bf16"}))
_, e12f = predict_step_ms(one, 8, 1, 10, 5, ranges=model_ranges("d12", 1024, {"precision": "fp32"}))
check(e24 > 2 * e12 and e12f > 1.9 * e12, "slow link: d24 and FP32 gradients expose more than d12 BF16")

# --predict's tokens per step: in global mode, beyond GLOBAL_BATCH / (B*T) GPUs the accumulation is
# clamped to 1 and a step holds B*T*n tokens (more than the global batch)
base = dict(B=64, total_batch=524288, accum=8, fwd_ms=320.0, bwd_ms=640.0, opt_ms=1.0, tok_per_s=524288 / 0.961)
rng = model_ranges("d12", 1024, {"precision": "bf16"})
p2 = predict_gpus(base, 1024, "global", 2, 10, 1e6, rng)
check(p2["accum"] == 4 and p2["tokens"] == 524288, "global, 2 GPUs: accumulation 4, the global batch")
check(abs(p2["efficiency"] - 1.0) < 0.01, "global, 2 GPUs, infinite bandwidth: ~100 % efficiency")
p16 = predict_gpus(base, 1024, "global", 16, 10, 1e6, rng)
check(p16["accum"] == 1 and p16["tokens"] == 64 * 1024 * 16, "global, 16 GPUs: accumulation 1, B*T*n tokens")
check(abs(p16["tok_per_s"] - 1048576 / p16["ms"] * 1e3) < 1e-6, "global, 16 GPUs: throughput from B*T*n tokens")
check(abs(p16["efficiency"] - 1.0) < 0.01, "global, 16 GPUs, infinite bandwidth: ~100 % efficiency (not 50 %)")
ps = predict_gpus(base, 1024, "seed", 4, 10, 1e6, rng)
check(ps["accum"] == 1 and ps["tokens"] == 64 * 1024 * 4, "seed mode: B*T*n tokens")

# the GPUs scaling.py counts: CUDA_VISIBLE_DEVICES when set (nvidia-smi -L lists every GPU regardless)
_saved = os.environ.get("CUDA_VISIBLE_DEVICES")
os.environ["CUDA_VISIBLE_DEVICES"] = "2, 3"
check(visible_gpus() == ["2", "3"], "visible_gpus: CUDA_VISIBLE_DEVICES's entries")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
check(visible_gpus() == [], "visible_gpus: an empty CUDA_VISIBLE_DEVICES hides every GPU")
if _saved is None:
    del os.environ["CUDA_VISIBLE_DEVICES"]
else:
    os.environ["CUDA_VISIBLE_DEVICES"] = _saved

# end to end: dev/scaling.py --predict with a stand-in trainer (standins.TRAINER_STANDIN)
scaling = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scaling.py")


def predicted(tmp, model, precision, link="1e6", predict="2,16"):
    b = os.path.join(tmp, "standin")
    write(b, TRAINER_STANDIN, exe=True)
    p = subprocess.run([sys.executable, scaling, "--bin", b, "--gpus", "1", "--predict", predict, "--blocks", "1024",
                        "--modes", "global", "--types", "ddp", "--model", model, "--link-gbs", link, "--out",
                        os.path.join(tmp, "out")], capture_output=True, text=True,
                       env=dict(os.environ, STANDIN_PRECISION=precision, MPLBACKEND="Agg"))
    out = {}
    for m in re.finditer(r"^predicted +(\d+) GPUs T=1024 global: +([0-9.]+) ms/step, +([0-9.]+) tok/s, efficiency +([0-9.]+) %, "
                         r"exposed comm ([0-9.]+) ms", p.stdout, re.M):
        out[int(m.group(1))] = tuple(float(x) for x in m.group(2, 3, 4, 5))
    return p, out


with tempfile.TemporaryDirectory() as tmp:
    p, out = predicted(tmp, "d12", "bf16")
    check(p.returncode == 0 and set(out) == {2, 16}, f"--predict 2,16 runs with a stand-in trainer (rc {p.returncode}{p.stderr[-300:]})")
    if 16 in out:
        ms, tok, eff, _ = out[16]
        check(abs(tok / (1048576 / ms * 1e3) - 1) < 2e-3 and eff > 98, "--predict 16 GPUs (global): B*T*n tokens per step, ~100 % efficiency")
    if 2 in out:
        ms, tok, eff, _ = out[2]
        check(abs(tok / (524288 / ms * 1e3) - 1) < 2e-3 and eff > 98, "--predict 2 GPUs (global): the global batch per step")
    _, slow12 = predicted(tmp, "d12", "bf16", link="5", predict="8")
    _, slow24 = predicted(tmp, "d24", "bf16", link="5", predict="8")
    _, slow12f = predicted(tmp, "d12", "fp32", link="5", predict="8")
    ok = 8 in slow12 and 8 in slow24 and 8 in slow12f
    check(ok and slow24[8][3] > 2 * slow12[8][3], "--predict --model d24: d24's gradients (more exposed comm than d12)")
    check(ok and slow12f[8][3] > 1.9 * slow12[8][3], "--predict, an FP32 build's RESULT: 4-byte gradients")
    p = subprocess.run([sys.executable, scaling, "--model", "d13", "--gpus", "1"], capture_output=True, text=True)
    check(p.returncode == 2 and "d13" in p.stderr and not p.stdout, "--model unknown: an argument error before any run")
    p = subprocess.run([sys.executable, scaling, "--types", "ddp,tcp", "--gpus", "1"], capture_output=True, text=True)
    check(p.returncode == 2 and "--types: unknown tcp (known: ddp, ddp_nop2p, zero1, sockets, ddp_int8, ddp_int8_nop2p)" in p.stderr and not p.stdout,
          "--types unknown: an argument error naming the known types, before any run")

# 2 GPUs with stand-ins for mpirun (standins.gpu_tools: runs the command once), the trainer and the
# probe: the sockets type runs the trainer and the probe under dev/device/own_host.sh (NCCL_HOSTID
# set) and the other types not; the probe runs once per transport; a failed probe leaves its rows
# unpredicted.
PROBE = r"""#!/usr/bin/env python3
import os, sys
how = "sockets" if os.environ.get("NCCL_HOSTID") else "p2p_disable=" + os.environ.get("NCCL_P2P_DISABLE", "")
open(os.environ["STANDIN_LOG"], "a").write("probe " + how + "\n")
if how == os.environ.get("STANDIN_PROBE_FAILS"):
    sys.exit(1)
print("ALLREDUCE_FIT gpus=2 p2p_disable=0 alpha_us=30.0 busbw_gbs=" + ("5.0" if how == "sockets" else "300.0"))
"""
TRAINER_LOGGED = TRAINER_STANDIN.replace("import os, sys\n", "import os, sys\nopen(os.environ['STANDIN_LOG'], 'a').write("
                                 "'trainer ' + ('sockets' if os.environ.get('NCCL_HOSTID') else 'plain') + "
                                 "(' p2p_disable=1' if os.environ.get('NCCL_P2P_DISABLE') == '1' else '') + '\\n')\n")
TRAINER_LOGGED += "sys.exit(int(os.environ.get('STANDIN_EXIT', '0')))\n"   # after its RESULT line


def two_gpus(tmp, fails="", types="ddp,zero1,sockets,ddp_int8", gpus="1,2", **env):
    path = gpu_tools(tmp)
    for name, text in (("probe", PROBE), ("standin", TRAINER_LOGGED)):
        write(os.path.join(tmp, name), text, exe=True)
    log = os.path.join(tmp, "log")
    if os.path.exists(log):
        os.remove(log)
    p = subprocess.run([sys.executable, scaling, "--bin", os.path.join(tmp, "standin"), "--probe", os.path.join(tmp, "probe"),
                        "--gpus", gpus, "--blocks", "1024", "--modes", "global", "--types", types, "--out",
                        os.path.join(tmp, "out")], capture_output=True, text=True,
                       env=dict(os.environ, STANDIN_PRECISION="bf16", MPLBACKEND="Agg", STANDIN_LOG=log, STANDIN_PROBE_FAILS=fails,
                                PATH=path, CUDA_VISIBLE_DEVICES="0,1", **env))
    return p, open(log).read().split("\n")[:-1] if os.path.exists(log) else []


def two_gpu_rows(table):
    """The 2-GPU rows of scaling.py's table: type -> its predicted-samples cell."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| d12 \| 2 \| 1024 \|[^|]*\| ([^|]+) \|.*\| ([^|]+) \|$", table, re.M)}


with tempfile.TemporaryDirectory() as tmp:
    p, log = two_gpus(tmp)
    rows = two_gpu_rows(p.stdout)
    check(p.returncode == 0 and log == ["probe p2p_disable=0", "probe sockets", "trainer plain", "trainer plain", "trainer plain",
                                        "trainer sockets", "trainer plain"],
          f"sockets type: probe and trainer under own_host.sh, the other types not ({log}; {p.stderr[-300:]})")
    check("probe 2 GPUs sockets: alpha 30.0 us, busbw 5.0 GB/s" in p.stdout and "probe 2 GPUs P2P_DISABLE=0: alpha 30.0 us" in p.stdout,
          "sockets type: its own probe fit, printed with its transport")
    check(set(rows) == {"DDP", "ZeRO-1", "DDP, sockets", "DDP int8"} and all(v != "-" for v in rows.values()),
          f"2-GPU rows of every type, each with a prediction ({rows})")
    p, log = two_gpus(tmp, fails="sockets")
    rows = two_gpu_rows(p.stdout)
    check(p.returncode == 0 and "probe 2 GPUs sockets: failed: its rows get no prediction" in p.stdout
          and rows.get("DDP, sockets") == "-" and rows.get("DDP", "-") != "-",
          f"a failed probe: its rows measured but not predicted, the others predicted ({rows})")
    # the P2P-off types: the probe and the runs with NCCL_P2P_DISABLE=1 (the probe's environment
    # once named that variable twice, a TypeError before any run), the others with it 0
    p, log = two_gpus(tmp, types="ddp,ddp_nop2p,ddp_int8_nop2p", NCCL_P2P_DISABLE="1")
    rows = two_gpu_rows(p.stdout)
    check(p.returncode == 0 and log == ["probe p2p_disable=0", "probe p2p_disable=1", "trainer plain", "trainer plain",
                                        "trainer plain p2p_disable=1", "trainer plain p2p_disable=1"]
          and set(rows) == {"DDP", "DDP, P2P off", "DDP int8, P2P off"} and all(v != "-" for v in rows.values()),
          f"P2P-off types: probe and runs with P2P disabled, DDP with it on whatever the shell says ({log}; {rows}; {p.stderr[-300:]})")
    # --gpus without 1: the 1-GPU row is measured all the same (the base), and every count listed runs
    p, log = two_gpus(tmp, types="ddp", gpus="2")
    check(p.returncode == 0 and log == ["probe p2p_disable=0", "trainer plain", "trainer plain"] and set(two_gpu_rows(p.stdout)) == {"DDP"},
          f"--gpus 2: the 1-GPU base and the 2-GPU row ({log})")
    # a run that prints its RESULT line and then fails (e.g. a rank at teardown) is a failed run
    p, log = two_gpus(tmp, types="ddp", STANDIN_EXIT="3")
    check(p.returncode == 1 and "FAILED: " in p.stderr and "(exit code 3)" in p.stderr,
          f"a RESULT line and a non-zero exit: FAILED, exit 1 ({p.stderr[-300:]})")

# the probe's fit must be for the GPU count it stands for (a probe that saw one node's 8 GPUs is no
# fit for 16 on two nodes); global mode's tokens: GPT-2's batch in whole micro-steps of every GPU
check(global_tokens(64, 1024, 2) == 524288 and global_tokens(64, 1024, 3) == 589824 and global_tokens(64, 1024, 16) == 1048576,
      "global_tokens: 524288 where whole micro-steps make it, else rounded up (3 GPUs: 3 micro-steps; 16: one)")
p = subprocess.run([sys.executable, scaling, "--gpus", "1", "--link-gbs", "0"], capture_output=True, text=True)
check(p.returncode == 2 and "--link-gbs 0.0 must be above 0" in p.stderr and not p.stdout, "--link-gbs 0: an argument error before any run")
with tempfile.TemporaryDirectory() as tmp:
    write(os.path.join(tmp, "probe8"), "#!/bin/sh\necho 'ALLREDUCE_FIT gpus=8 p2p_disable=0 alpha_us=20.0 busbw_gbs=350.0'\n", exe=True)

    class A:
        probe = os.path.join(tmp, "probe8")
        mpirun_args = ""
    os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15"   # (no mpirun needed: 16 visible)
    check(probe_fit(A, 16, "ddp") is None and probe_fit(A, 8, "ddp") == (20.0, 350.0),
          "probe_fit: a fit measured on 8 GPUs is not taken for 16")
    if _saved is None:
        del os.environ["CUDA_VISIBLE_DEVICES"]
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = _saved
finish()
