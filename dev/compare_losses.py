"""Compares the per-step training losses of two train_gpt2cu logs.
   python3 dev/compare_losses.py A.log B.log [--tol 0.005]
Prints the step-1 relative difference, the largest relative difference over all steps, and OK/FAIL
against --tol (default 0.5 %, the multi-GPU issue's bound for 20-step curves)."""
import re
import sys

def losses(path):
    with open(path) as f:
        return [float(m.group(1)) for m in re.finditer(r"^step\s+\d+/\d+ \| loss ([0-9.naninf]+)", f.read(), re.M)]

def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    tol = float(sys.argv[sys.argv.index("--tol") + 1]) if "--tol" in sys.argv else 0.005
    a, b = losses(args[0]), losses(args[1])
    if not a or len(a) != len(b):
        print(f"FAIL: {len(a)} vs {len(b)} steps")
        return 1
    rel = [abs(x - y) / abs(x) for x, y in zip(a, b)]
    worst = max(rel)
    ok = worst <= tol
    print(f"{'OK' if ok else 'FAIL'} {len(a)} steps: step-1 rel diff {rel[0]:.2e}, max rel diff {worst:.2e} "
          f"(tol {tol:g}), losses {a[0]:.4f}->{a[-1]:.4f} vs {b[0]:.4f}->{b[-1]:.4f}")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
