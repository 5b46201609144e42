"""Does the same matrix product cost more power in fp16 than in bf16?

The FP16 trainer runs ~2 % slower than the BF16 one with the same kernels at the same tile shapes
(dev/perf_log.md, fifteenth session). Under the 700 W power limit a step runs as fast as its energy
allows, so this times one cuBLAS product (8192^3, random normal inputs) back to back for a few
seconds in each dtype, alternating, while nvidia-smi samples the SM clock and the power draw, and
prints TFLOP/s, median MHz and median W per round. A short burst after a pause is timed too (the
clock has not come down yet). Needs PyTorch and a GPU.
    python3 dev/precision_power.py [--seconds 4] [--rounds 2]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import need  # noqa: E402

# PyTorch is imported after the arguments are parsed (as in dev/torch_bench.py): --help needs no
# PyTorch, and a run without it, or without a GPU, is one line.


def smi_start(path):
    return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                             "-lms", "100", "-f", path])


def smi_medians(path):
    mhz, watts = [], []
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and float(parts[1]) > 300:  # busy samples only
            mhz.append(float(parts[0]))
            watts.append(float(parts[1]))
    med = lambda v: sorted(v)[len(v) // 2] if v else float("nan")
    return med(mhz), med(watts)


def timed(a, b, n):
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        torch.matmul(a, b)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n  # ms per product


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="sustained seconds per dtype and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n", type=int, default=8192, help="matrix size")
    args = ap.parse_args()
    torch = need("dev/precision_power.py", "torch", "PyTorch")
    if not torch.cuda.is_available():
        sys.exit("dev/precision_power.py: no CUDA device")
    n = args.n
    flop = 2.0 * n ** 3
    torch.manual_seed(0)
    base = [torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")]
    print(f"{torch.cuda.get_device_name()}, {n}^3 products, random normal inputs")
    print("| round | dtype | burst TFLOP/s | sustained TFLOP/s | SM MHz | W |")
    print("|---|---|---|---|---|---|")
    for r in range(args.rounds):
        for dt in (torch.bfloat16, torch.float16):
            a, b = base[0].to(dt), base[1].to(dt)
            timed(a, b, 3)  # warm-up (cuBLAS handle, kernel selection)
            time.sleep(2.0)  # let the clock recover
            burst = timed(a, b, 5)
            with tempfile.NamedTemporaryFile(suffix=".csv") as f:
                smi = smi_start(f.name)
                times, t0 = [], time.time()
                while time.time() - t0 < args.seconds:
                    times.append(timed(a, b, 20))
                smi.terminate()
                smi.wait()
                mhz, watts = smi_medians(f.name)
            sustained = sorted(times)[len(times) // 2]
            name = "bf16" if dt == torch.bfloat16 else "fp16"
            print(f"| {r + 1} | {name} | {flop / burst / 1e9:.1f} | {flop / sustained / 1e9:.1f} | {mhz:.0f} | {watts:.0f} |")


if __name__ == "__main__":
    main()
