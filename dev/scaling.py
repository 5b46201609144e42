"""The scaling table: is communication what makes more GPUs slow?

Runs train_gpt2cu --bench for 1, 2, ... GPUs, several blocks (sequence lengths), reduction types
(DDP, DDP with NCCL_P2P_DISABLE=1, ZeRO-1) and micro-batch settings:
  seed:   4 sequences per GPU, no accumulation (the global batch grows with the GPUs);
  global: a fixed 524288-token global batch, 64K tokens per micro-batch, accumulation as needed.
Prints the table (markdown), ratios against the 1-GPU row of each group, exposed communication,
interference (how much longer the backward under the reduction ran than the step's other
backwards: communication that is hidden but still slows the compute) and achieved bus
bandwidth; writes CSV and PNG; and puts next to every row what an alpha-beta model of ring
all-reduce predicts from the 1-GPU row and the interconnect probe's fit.

  python3 dev/scaling.py --bin build/bf16/train_gpt2cu --probe dev/interconnect --out dev/scaling
  python3 dev/scaling.py --gpus 1 --predict 8,16,32 --link-gbs 50 --alpha-us 30
      (measures only the 1-GPU rows, then predicts N GPUs whose slowest link (e.g. between
       nodes) carries --link-gbs of bus bandwidth)
Multi-node rows: pass --mpirun-args "--hostfile hosts" and --gpus 16 (the ranks span the nodes; the
probe then runs one process per GPU under the same mpirun, so its fit is the network's).
"""
import argparse
import csv
import math
import os
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from configs import CONFIGS  # noqa: E402

GLOBAL_BATCH = 524288
MICRO_TOKENS = 65536
OWN_HOST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "device", "own_host.sh")
# name: (label, environment, trainer options, what each rank runs under)
TYPES = {"ddp": ("DDP", {}, [], []), "ddp_nop2p": ("DDP, P2P off", {"NCCL_P2P_DISABLE": "1"}, [], []),
         "zero1": ("ZeRO-1", {}, ["--zero", "1"], []),
         # every rank a node of its own to NCCL, which then uses its network transport, TCP sockets
         # (GPU -> host -> socket -> host -> GPU): what a node boundary over plain Ethernet-style
         # networking costs, measured on one machine (here the loopback device, no NIC limit)
         "sockets": ("DDP, sockets", {}, [], [OWN_HOST]),
         # --grad-int8 1: the gradients sent as int8 + a scale per 128 values (llmc/grad_compress.cuh)
         "ddp_int8": ("DDP int8", {}, ["--grad-int8", "1"], []),
         "ddp_int8_nop2p": ("DDP int8, P2P off", {"NCCL_P2P_DISABLE": "1"}, ["--grad-int8", "1"], [])}
INT8_BYTES = 1 + 4 / 128    # --grad-int8's bytes per gradient value on the wire


# ---------------------------------------------------------------------------------------------
# The predictor (no GPU needed; dev/unit/test_predict.py tests it).
def gpt2_ranges(L=12, C=768, Vp=50304, maxT=1024, bytes_per=2, T=None):
    """Gradient ranges in the order backward finishes them: (name, bytes, fraction of backward
    compute done when it is ready). Backward = lm head (+ LN_f), L equal blocks, the embeddings.
    maxT: the model's positions (the wpe gradient's size); T: the sequence length of the run (the
    attention's share of the backward; default maxT); bytes_per: bytes per gradient element."""
    T = maxT if T is None else T
    block = 12 * C * C + 13 * C
    head = 4 * C * Vp                            # lm-head dgrad + wgrad FLOPs per token
    blk = 48 * C * C + 5 * T * C                 # one block's backward FLOPs per token (incl. attention)
    total = head + L * blk
    out = [("lnf", 2 * C * bytes_per, head / total)]
    for i in range(L):
        out.append((f"block{L - 1 - i}", block * bytes_per, (head + (i + 1) * blk) / total))
    out.append(("embeddings", (Vp + maxT) * C * bytes_per, 1.0))
    return out


GRAD_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def grad_bytes(precision, default=2):
    """Bytes per gradient element of a build (its RESULT line's precision): 4 in FP32, 2 in FP16 and
    BF16; default when the precision is unknown (a RESULT line without the field)."""
    return GRAD_BYTES.get(str(precision).lower(), default) if precision is not None else default


def model_dims(model, result=None):
    """(L, C, Vp, maxT) of the trainer's -e: a descriptor of dev/configs.py's CONFIGS, else a model
    file (its header), else the RESULT line's model=L<L>C<C> (maxT 1024). ValueError if none fits."""
    if model in CONFIGS:
        L, _, C, maxT = CONFIGS[model]
        return L, C, (50257 + 127) // 128 * 128, maxT
    if model and os.path.isfile(model):
        try:
            with open(model, "rb") as f:
                h = struct.unpack("<8i", f.read(32))
        except (OSError, struct.error):
            h = (0,) * 8
        if h[0] == 20240326:     # dev/model_file.py's header: maxT, V, L, NH, C, Vp
            return h[4], h[6], h[7], h[2]
    m = re.fullmatch(r"L(\d+)C(\d+)", str((result or {}).get("model", "")))
    if m:
        return int(m.group(1)), int(m.group(2)), 50304, 1024
    raise ValueError(f"--model {model!r}: not one of {', '.join(CONFIGS)}, nor a model file")


def model_ranges(model, T, result=None, bytes_per=None):
    """gpt2_ranges() for --model at sequence length T, with the bytes per gradient element of the
    build that produced result (its precision field) unless bytes_per is given."""
    L, C, Vp, maxT = model_dims(model, result)
    if bytes_per is None:
        bytes_per = grad_bytes((result or {}).get("precision"))
    return gpt2_ranges(L=L, C=C, Vp=Vp, maxT=maxT, bytes_per=bytes_per, T=T)


def predict_step_ms(one_gpu, n, accum_n, alpha_us, busbw_gbs, bucket_mb=16.0, zero=False, ranges=None):
    """Step time on n GPUs from a 1-GPU measurement.
    one_gpu: dict with fwd, bwd, opt (ms) per MICRO-step for fwd/bwd and per step for opt.
    Ring all-reduce of s bytes: alpha + s * 2(n-1)/n / busbw. Buckets go out when backward of the
    last micro-step has produced them, one after another on the comm stream; what is left after
    backward ends is exposed. ZeRO-1 adds the exposed all-gather of the weights after the update."""
    ranges = ranges or gpt2_ranges()
    f, b, opt = one_gpu["fwd"], one_gpu["bwd"], one_gpu["opt"]
    compute = accum_n * (f + b) + opt
    if n == 1:
        return compute, 0.0
    link = 2.0 * (n - 1) / n / (busbw_gbs * 1e9) * 1e3      # ms per byte
    alpha = alpha_us * 1e-3
    comm_free, pending, start_of_last_bwd = 0.0, 0, accum_n * (f + b) - b
    t_ready = start_of_last_bwd
    for _, nbytes, frac in ranges:
        pending += nbytes
        t_ready = start_of_last_bwd + frac * b
        if pending >= bucket_mb * 2 ** 20 or frac == 1.0:
            comm_free = max(comm_free, t_ready) + alpha + pending * link
            pending = 0
    exposed = max(0.0, comm_free - (start_of_last_bwd + b)) + alpha     # + the loss all-reduce
    if zero:
        total_bytes = sum(r[1] for r in ranges)
        exposed += alpha + total_bytes * link / 2                       # all-gather moves half of an all-reduce
    return compute + exposed, exposed


def predict_gpus(base, T, mode, n, alpha_us, link_gbs, ranges):
    """--predict: n GPUs from a group's 1-GPU row base (use_mean_step'd RESULT fields: B, total_batch,
    fwd_ms, bwd_ms, opt_ms, accum, tok_per_s). global mode: the tokens global_tokens gives the
    trainer's runs (GLOBAL_BATCH in whole micro-steps: beyond GLOBAL_BATCH / (B*T) GPUs, B*T*n);
    seed mode: no accumulation, B*T*n tokens. Returns dict(ms, exposed, accum, tokens, tok_per_s,
    efficiency)."""
    one = {"fwd": base["fwd_ms"] / base["accum"], "bwd": base["bwd_ms"] / base["accum"], "opt": base["opt_ms"]}
    micro = base["B"] * T * n                                  # tokens of one micro-step over n GPUs
    accum = global_tokens(base["B"], T, n) // micro if mode == "global" else 1
    ms, exposed = predict_step_ms(one, n, accum, alpha_us, link_gbs, ranges=ranges)
    tokens = micro * accum
    tok_s = tokens / ms * 1e3
    return dict(ms=ms, exposed=exposed, accum=accum, tokens=tokens, tok_per_s=tok_s,
                efficiency=tok_s / (n * base["tok_per_s"]))


# ---------------------------------------------------------------------------------------------
# Running.
def parse_result(text):
    m = re.search(r"^RESULT (.*)$", text, re.M)
    if not m:
        return None
    out = {}
    for kv in m.group(1).split():
        if "=" not in kv:   # not a field (another rank's output on the same line, say): result_problem judges the rest
            continue
        k, v = kv.split("=", 1)
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out


# The RESULT fields a row is made of (the table, the ratios, the predictor): each a finite number.
RESULT_NUMBERS = ("accum", "total_batch", "median_ms", "tok_per_s", "fwd_ms", "bwd_ms", "opt_ms", "exposed_comm_pct", "busbw_gbs")


def result_problem(r):
    """Why a parsed RESULT line cannot make a row, in words; None when it can. A field missing or not
    a number (a line cut short, or mixed with other output) would otherwise end the whole sweep in a
    KeyError or a format error, its measured rows unwritten; a zero or negative time, throughput or
    accumulation would divide by zero in the ratios."""
    need = RESULT_NUMBERS + (("mean_ms", "tok_per_s_mean") if "tok_per_s_mean" in r else ())
    bad = [k for k in need if not isinstance(r.get(k), float) or not math.isfinite(r[k])]
    if bad:
        return f"the RESULT line has no number for {', '.join(bad)}"
    bad = [k for k in ("accum", "median_ms", "tok_per_s", "mean_ms", "tok_per_s_mean") if k in r and r[k] <= 0]
    return f"the RESULT line's {', '.join(bad)} not above 0" if bad else None


def use_mean_step(r):
    """Throughput is tokens over the time of the timed steps (the mean step), not the median step:
    on several GPUs at their power limit the steps were seen to alternate between two speeds, and
    the median of such a series is the fastest of the slow steps. Sets step_ms and tok_per_s
    (the median's kept as tok_per_s_median); a trainer without the mean fields keeps its median."""
    if "tok_per_s_mean" in r:
        r["tok_per_s_median"] = r["tok_per_s"]
        r["tok_per_s"], r["step_ms"] = r["tok_per_s_mean"], r["mean_ms"]
    else:
        r["step_ms"] = r["median_ms"]
    return r


def global_tokens(B, T, n):
    """global mode's tokens per step on n GPUs: GPT-2's GLOBAL_BATCH, rounded up to a whole number
    of micro-steps of B*T tokens on each GPU (the trainer's -d must be a multiple of B*T*n)."""
    micro = B * T * n
    return -(-GLOBAL_BATCH // micro) * micro


def type_env(typ):
    """The environment of a type's runs: NVLink multicast off, P2P on unless the type turns it off
    (so a NCCL_P2P_DISABLE of the caller's shell does not change the DDP rows)."""
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", NCCL_P2P_DISABLE="0")
    env.update(TYPES[typ][1])
    return env


def run_config(a, n, T, mode, typ):
    B = 4 if mode == "seed" else MICRO_TOKENS // T
    d = B * T * n if mode == "seed" else global_tokens(B, T, n)
    label, env_extra, args_extra, wrapper = TYPES[typ]
    cmd = [a.bin, "--bench", "-b", str(B), "-t", str(T), "-d", str(d), "--bench-warmup", str(a.warmup),
           "--bench-steps", str(a.steps), "-e", a.model] + args_extra
    # CUDA graphs as the trainer's default (on), on 1 GPU and on N alike: the ratios compare like with like
    env = type_env(typ)
    if n > 1:
        pre = ["mpirun", "--allow-run-as-root", "-np", str(n), "--bind-to", "none", "-x", "NCCL_NVLS_ENABLE", "-x", "NCCL_P2P_DISABLE"]
        pre += [x for k in env_extra if k != "NCCL_P2P_DISABLE" for x in ("-x", k)] + a.mpirun_args.split()
        cmd = pre + wrapper + cmd
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    except OSError as e:     # mpirun (or the trainer) cannot be started: a failed run like any other
        print(f"  FAILED: {' '.join(cmd)}\n{e}", file=sys.stderr)
        return None
    r = parse_result(p.stdout)
    # (a RESULT line and then a failure, e.g. a rank's teardown: failed too; so is a RESULT line
    # that cannot make a row: the other runs' rows still get written; and a run without one, which
    # "exit code 0" alone would make look like a success)
    if r is None:
        why = f"no RESULT line in its output, exit code {p.returncode}"
    else:
        why = f"exit code {p.returncode}" if p.returncode != 0 else result_problem(r)
    if why:
        print(f"  FAILED: {' '.join(cmd)} ({why})\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}", file=sys.stderr)
        return None
    r.update(gpus=n, T=T, mode=mode, type=typ, label=label, B=B)
    use_mean_step(r)
    print(f"  {n} GPU {label:12s} T={T:5d} {mode:6s}: {r['step_ms']:9.2f} ms  {r['tok_per_s']:10.0f} tok/s  "
          f"exposed {r['exposed_comm_pct']:.2f}%", flush=True)
    return r


def transport(typ):
    """What a type's all-reduce runs over: the probe's fit is per GPU count and transport."""
    _, env, _, wrapper = TYPES[typ]
    return "sockets" if wrapper else "P2P_DISABLE=" + env.get("NCCL_P2P_DISABLE", "0")


def probe_fit(a, n, typ):
    """(alpha_us, busbw_gbs) of the probe's all-reduce sweep on n GPUs over typ's transport: one
    process driving n GPUs, or, for a type whose ranks run under a wrapper or for more GPUs than
    this machine shows (several nodes: --mpirun-args' hosts), one process per GPU under mpirun like
    the trainer's ranks. None unless the probe measured n GPUs."""
    _, env_extra, _, wrapper = TYPES[typ]
    env = type_env(typ)
    cmd = [a.probe, "--no-p2p-matrix", "--max-mb", "512"]
    if wrapper or n > len(visible_gpus()):
        cmd = ["mpirun", "--allow-run-as-root", "-np", str(n), "--bind-to", "none", "-x", "NCCL_NVLS_ENABLE",
               "-x", "NCCL_P2P_DISABLE"] + a.mpirun_args.split() + wrapper + cmd
    else:  # the probe uses every GPU it sees: show it the first n of those visible
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible_gpus()[:n])
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    except OSError as e:     # no probe (or no mpirun): its rows get no prediction, as for a failed probe
        print(f"probe failed: {e}", file=sys.stderr)
        return None
    m = re.search(r"ALLREDUCE_FIT (?:gpus=(\d+) )?.*alpha_us=([0-9.]+) busbw_gbs=([0-9.]+)", p.stdout)
    if not m:
        print(f"probe failed:\n{p.stdout[-800:]}{p.stderr[-800:]}", file=sys.stderr)
        return None
    if m.group(1) and int(m.group(1)) != n:   # its fit would stand for another link (e.g. one node's NVLink for several nodes)
        print(f"probe failed: it measured {m.group(1)} GPUs, not {n}", file=sys.stderr)
        return None
    return float(m.group(2)), float(m.group(3))


def interference(r):
    """What the overlapped reduction costs the compute: the backward it runs under minus the mean of
    the step's other backwards (ms; None with one micro-step or from a trainer without the fields)."""
    if r.get("bwd_other_ms", -1) < 0 or "bwd_last_ms" not in r or r["gpus"] == 1:
        return None
    return r["bwd_last_ms"] - r["bwd_other_ms"]


def interference_text(r):
    v = r.get("interference_ms")
    return "" if v is None or v == "" else f"{v:+.1f} ms"


def prediction_text(r):
    """The table's predicted samples/s (error against the measurement); "-" without a probe fit."""
    if not r.get("pred_tok_per_s"):
        return "-"
    return f"{r['pred_tok_per_s'] / r['T']:.0f} ({r['pred_err_pct']:+.1f} %)"


def write_outputs(rows, out):
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    keys = ["model", "gpus", "T", "mode", "label", "B", "accum", "total_batch", "step_ms", "samples_per_s", "tok_per_s",
            "ratio", "efficiency", "exposed_comm_pct", "interference_ms", "busbw_gbs", "pred_tok_per_s", "pred_err_pct",
            "device_mem_gb"]
    with open(out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    lines = ["| model | GPUs | block | micro-batch / global batch | type | step ms | samples/s | ratio to 1 GPU | efficiency "
             "| exposed comm | interference | busbw GB/s | predicted samples/s (err) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['gpus']} | {r['T']} | {r['B']} x {r['accum']:.0f} / {r['total_batch']:.0f} tok | "
                     f"{r['label']} | {r['step_ms']:.1f} | {r['samples_per_s']:.0f} | {r['ratio']:.2f} | "
                     f"{100 * r['efficiency']:.1f} % | {r['exposed_comm_pct']:.1f} % | {interference_text(r)} | {r['busbw_gbs']:.0f} | "
                     f"{prediction_text(r)} |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(11, 4.5))
        multi = [r for r in rows if r["gpus"] > 1]
        names = [f"{r['gpus']}g {r['label']}\nT={r['T']} {r['mode']}" for r in multi]
        ax.bar(range(len(multi)), [100 * r["efficiency"] for r in multi], color="tab:blue", label="measured")
        predicted = [(i, 100 * r["pred_tok_per_s"] / (r["gpus"] * r["base_tok_per_s"])) for i, r in enumerate(multi)
                     if r["pred_tok_per_s"]]
        ax.plot([i for i, _ in predicted], [e for _, e in predicted], "o", color="tab:orange", label="predicted (alpha-beta)")
        ax.set_xticks(range(len(multi)))
        ax.set_xticklabels(names, fontsize=6, rotation=60, ha="right")
        ax.set_ylabel("scaling efficiency, % of N x 1 GPU")
        ax.set_ylim(0, 110)
        ax.axhline(100, color="gray", lw=0.5)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out + ".png", dpi=130)
    except ImportError:
        print("matplotlib not installed: no PNG")


def counts(text):
    """argparse type: a comma-separated list of positive whole numbers ("" for none)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of whole numbers")
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}': every number must be at least 1")
    return values


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="./train_gpt2cu")
    ap.add_argument("--probe", default="dev/interconnect")
    ap.add_argument("--model", default="d12", help="the trainer's -e: a dev/configs.py descriptor or a model file; the "
                    "predictor's gradient sizes (L, C, maxT) come from it, their bytes per element from the RESULT "
                    "line's precision (4 in FP32, 2 in FP16/BF16)")
    ap.add_argument("--gpus", type=counts, default=[], help="GPU counts (default: 1, 2, 4, 8 up to the visible GPUs)")
    ap.add_argument("--blocks", type=counts, default=[128, 512, 1024], help="sequence lengths T")
    ap.add_argument("--modes", default="seed,global")
    ap.add_argument("--types", default="ddp,ddp_nop2p,zero1", help=f"reduction types, of {', '.join(TYPES)} (sockets: "
                    "every rank a node of its own, NCCL over TCP; dev/device/own_host.sh)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--mpirun-args", default="")
    ap.add_argument("--out", default="dev/scaling")
    ap.add_argument("--predict", type=counts, default=[], help="GPU counts to predict from the 1-GPU rows (e.g. 8,16)")
    ap.add_argument("--link-gbs", type=float, default=25.0, help="--predict: bus bandwidth of the slowest link, GB/s")
    ap.add_argument("--alpha-us", type=float, default=30.0, help="--predict: all-reduce latency, us")
    args = ap.parse_args()
    if not args.link_gbs > 0 or not args.alpha_us >= 0:   # (checked before any run: a zero would divide at the end)
        ap.error(f"--link-gbs {args.link_gbs} must be above 0 and --alpha-us {args.alpha_us} at least 0")
    try:
        model_dims(args.model)      # the predictor's gradient sizes: a known descriptor or a model file
    except ValueError as e:
        ap.error(str(e))
    if any(m not in ("seed", "global") for m in args.modes.split(",")):
        ap.error(f"--modes {args.modes}: seed and/or global, comma-separated")
    unknown = [t for t in args.types.split(",") if t not in TYPES]
    if unknown:
        ap.error(f"--types: unknown {', '.join(unknown)} (known: {', '.join(TYPES)})")
    if not shutil.which(args.bin):  # else every run fails the same way, one FAILED block each
        ap.error(f"--bin {args.bin}: not an executable file")
    return args


def visible_gpus():
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them: its entries when it is set
    (nvidia-smi -L lists every GPU of the machine regardless), else 0..n-1 for nvidia-smi's n."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [d.strip() for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    try:
        n = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")
    except OSError:
        n = 0
    return [str(i) for i in range(n)]


def gpu_counts(args):
    """--gpus, else 1, 2, 4, 8 up to the visible GPUs."""
    if args.gpus:
        return args.gpus
    return [g for g in (1, 2, 4, 8) if g <= len(visible_gpus())]


def probe_fits(args, gpus):
    """The probe's (alpha_us, busbw_gbs) per (GPU count, transport) the types use; None where it failed."""
    fits = {}
    for n in gpus:
        if n > 1:
            for typ in args.types.split(","):
                key = (n, transport(typ))
                if key not in fits:
                    fits[key] = probe_fit(args, n, typ)
                    print(f"probe {n} GPUs {key[1]}: " + (f"alpha {fits[key][0]:.1f} us, busbw {fits[key][1]:.1f} GB/s"
                                                          if fits[key] else "failed: its rows get no prediction"))
    return fits


def add_ratios(r, base, fits, model, T):
    """Fills a row's ratio and efficiency against the group's 1-GPU row base, its interference, and
    what the predictor says from base and the probe's fit for its transport (None without a fit)."""
    n = int(r["gpus"])
    one = {"fwd": base["fwd_ms"] / base["accum"], "bwd": base["bwd_ms"] / base["accum"], "opt": base["opt_ms"]}
    fit = fits.get((n, transport(r["type"])))
    if n == 1:
        pred_ms = base["step_ms"]
    elif fit and "--grad-int8" in TYPES[r["type"]][2]:
        # int8: fewer bytes per value in the same buckets, and two NCCL operations per bucket
        # (the sends to the owners, the all-gather), each paying the latency
        scale = INT8_BYTES / grad_bytes(r.get("precision"))
        pred_ms, _ = predict_step_ms(one, n, r["accum"], 2 * fit[0], fit[1], bucket_mb=16.0 * scale,
                                     ranges=model_ranges(model, T, r, bytes_per=INT8_BYTES))
    elif fit:
        pred_ms, _ = predict_step_ms(one, n, r["accum"], *fit, zero=r["type"] == "zero1", ranges=model_ranges(model, T, r))
    else:
        pred_ms = None
    r["model"] = model
    r["samples_per_s"] = r["tok_per_s"] / T
    r["base_tok_per_s"] = base["tok_per_s"]
    # the seed's ratio: throughput (samples/s) relative to the group's 1-GPU row
    r["ratio"] = r["tok_per_s"] / base["tok_per_s"]
    r["efficiency"] = r["ratio"] / n
    r["interference_ms"] = interference(r)
    r["pred_tok_per_s"] = r["total_batch"] / (pred_ms * 1e-3) if pred_ms else None
    r["pred_err_pct"] = 100 * (r["pred_tok_per_s"] - r["tok_per_s"]) / r["tok_per_s"] if pred_ms else None
    return r


def measure_group(args, gpus, fits, T, mode):
    """One block and mode: the 1-GPU row, then every type on every larger GPU count, with ratios;
    then --predict's lines. Returns (rows, runs that failed, runs not started); ([], 1, k) if the
    1-GPU run failed (the group's k other runs would have no row to be compared with, so they are
    not started, and one line says so)."""
    base = run_config(args, 1, T, mode, "ddp")
    if base is None:
        skipped = len(set(gpus) - {1}) * len(args.types.split(","))
        if skipped:
            print(f"  T={T} {mode}: {skipped} runs on more GPUs not started: no 1-GPU row to compare them with", file=sys.stderr)
        return [], 1, skipped
    group, failed = [base], 0
    for n in sorted(set(gpus) - {1}):   # (the 1-GPU row is the base whether --gpus names 1 or not)
        for typ in args.types.split(","):
            r = run_config(args, n, T, mode, typ)
            if r:
                group.append(r)
            else:
                failed += 1
    rows = [add_ratios(r, base, fits, args.model, T) for r in group]
    for n in args.predict:
        p = predict_gpus(base, T, mode, n, args.alpha_us, args.link_gbs, model_ranges(args.model, T, base))
        print(f"predicted {n:4d} GPUs T={T} {mode}: {p['ms']:8.1f} ms/step, {p['tok_per_s']:10.0f} tok/s, "
              f"efficiency {100 * p['efficiency']:5.1f} %, exposed comm {p['exposed']:.1f} ms "
              f"(link {args.link_gbs} GB/s, alpha {args.alpha_us} us)")
    return rows, failed, 0


def main():
    args = parse_args()
    gpus = gpu_counts(args)
    fits = probe_fits(args, gpus)
    rows, failed, skipped = [], 0, 0
    for T in args.blocks:
        for mode in args.modes.split(","):
            group, group_failed, group_skipped = measure_group(args, gpus, fits, T, mode)
            rows += group
            failed += group_failed
            skipped += group_skipped
    # the rows the table misses: the failed runs and those a failed 1-GPU run kept from starting
    not_started = f", {skipped} more not started (their 1-GPU run failed)" if skipped else ""
    if not rows:  # an empty table would replace the last real one: keep that, say why, fail
        sys.exit(f"scaling.py: no run measured ({failed} failed{not_started}, see FAILED above): {args.out}.csv, .md and .png "
                 f"not written")
    write_outputs(rows, args.out)
    if failed:  # the rows that were measured are written; the table misses the others
        sys.exit(f"scaling.py: {failed} of {failed + len(rows)} runs failed{not_started} (see FAILED above); the {len(rows)} "
                 f"measured are in {args.out}.csv and .md")


if __name__ == "__main__":
    main()
