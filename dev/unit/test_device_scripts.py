"""Unit test of the device scripts' bookkeeping (dev/device/trainer_ab.sh, attn_ab.sh, graphs_ab.sh,
run.sh's ref section, loop_run.sh, faults.sh, same_output.sh, sanitize.sh, hellaswag_set.sh), with
stand-in binaries and scripts in a temporary copy of the repository layout (dev/unit/standins.py;
the multi-rank scripts: test_rank_scripts.py):
  trainer_ab.sh / attn_ab.sh: a failed run is left out of the mean (and reported); the same binary
      given twice (an A/A test) is two entries, with their own means and logs;
  graphs_ab.sh: steps printed as `scale N (skipped) |` are stripped of their timings too;
  run.sh ref / loop_run.sh: reference.py's exit status reaches the summary, and the lines after a
      failed reference say so; run.sh shapes: a line per shape and build (the worst gradient
      tensor named), the test's extra arguments passed on, each reference removed;
  loop_run.sh train: FP16 against PyTorch fp16-autocast (<= 0.75 %), BF16 against PyTorch fp32
      (<= 0.5 %), the README's claims; resume: the two runs' log.jsonl compared exactly; odd: B=3
      T=77 against PyTorch (FP32 1e-4, BF16 0.5 %), 2 ranks against 1 (1e-5), a resume exactly;
      width: 3 ranks against 1 (FP32 1e-5, BF16 0.5 %), the 3-rank resume exactly;
  faults.sh ckpt: the killed-and-resumed run's log.jsonl (appended by every segment) against the
      uninterrupted run's, exactly;
  same_output.sh: two trainers whose outputs differ only in times are the same; a loss, a skip
      mark, a RESULT shape value or a logged loss that differs is a difference;
  hellaswag_set.sh: the fixture's failure is the exit status, and the tokenizer does not run after it;
  sanitize.sh: each run's verdict line (the tool's summary, the kernels its reports name, counted),
      a run stopped at LIMIT_S, runs past BUDGET_S not started, a missing binary, no tool at all;
  host_sanitize.sh: every run's exit status against the expected one (the inf/nan stop's 2, the
      signal stop's 4), a sanitizer report's first lines, a missing binary or --hellaswag file;
  prepare.sh: a plan's binaries, tools and data in one pack, what it lacks named, the call printed."""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(__file__))
from standins import check, finish, gpu_tools, lines_with, sh, tree, write  # noqa: E402

# ---------------------------------------------------------------------------------------------
def ab_run(root, script, binary, fail_calls):
    """An A/A run of `script` on two entries of the stand-in `binary`, 2 rounds, from a clean OUT
    and call counter; the stand-in fails on the calls listed in `fail_calls`."""
    shutil.rmtree(os.path.join(root, "out"), ignore_errors=True)
    counter = os.path.join(root, "counter")
    if os.path.exists(counter):
        os.remove(counter)
    rc, out, err = sh(root, script, [binary, binary], env={"COUNTER": counter, "FAIL_CALLS": fail_calls, "ROUNDS": "2"})
    return out, err


# The stand-ins of the two A/B tests: c = this call's number (COUNTER), and a failure with `msg`
# on the calls listed in FAIL_CALLS.
COUNT_CALL = """#!/usr/bin/env bash
c=$(cat "$COUNTER" 2>/dev/null || echo 0); c=$((c + 1)); echo $c > "$COUNTER"
"""
def fail_on_listed_calls(msg):
    return f"""if [[ " $FAIL_CALLS " == *" $c "* ]]; then echo "{msg}"; exit 1; fi
"""


def check_ab_cases(root, script, binary, cases, check_logs):
    """Runs the A/B script per case (name, FAIL_CALLS, the MEAN lines wanted): its MEAN lines, one
    'round N: failed (' line per failed call, then check_logs(case) on what it wrote."""
    for case, fail_calls, want in cases:
        out, err = ab_run(root, script, binary, fail_calls)
        check(lines_with(out, "MEAN ") == want, f"{script} {case}: MEAN per entry over its successful runs", out + err)
        nfail = len(fail_calls.split())
        check(len([x for x in out.splitlines() if re.search(r"round \d+: failed \(", x)]) == nfail,
              f"{script} {case}: {nfail} failed run(s) reported")
        check_logs(case)


# trainer_ab.sh: tok/s = 1000 x the call number (calls alternate: round 1 entry 1, entry 2, round 2 ...)
COUNTING_TRAINER = COUNT_CALL + fail_on_listed_calls("error: cudaMalloc failed (call $c)") + """echo "step 1/20 | loss 11.0"
echo "RESULT precision=bf16 model=L12C768 gpus=1 B=64 T=1024 tok_per_s=$((c * 1000)) tok_per_s_mean=$((c * 1000 + 1)) fwd_ms=1.0 bwd_ms=2.0"
"""
root = tree("trainer_ab.sh")
write(os.path.join(root, "fake/trainer"), COUNTING_TRAINER, exe=True)
def trainer_ab_logs(case):
    out_dir = os.path.join(root, "out")
    logs = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
    check([x for x in logs if x.endswith(".log")] == ["ab_1_fake_trainer_1.log", "ab_1_fake_trainer_2.log",
                                                       "ab_2_fake_trainer_1.log", "ab_2_fake_trainer_2.log"],
          f"trainer_ab.sh {case}: a log per entry and round (by position)")
check_ab_cases(root, "trainer_ab.sh", "fake/trainer", [
        ("A/A, all runs succeed", "", ["MEAN fake/trainer: 2000 tok/s (median tok/s, mean over rounds)",
                                       "MEAN fake/trainer: 3000 tok/s (median tok/s, mean over rounds)"]),
        ("A/A, entry 1's round 2 fails", "3", ["MEAN fake/trainer: 1000 tok/s (median tok/s, mean over the 1 successful of 2 rounds; 1 FAILED)",
                                               "MEAN fake/trainer: 3000 tok/s (median tok/s, mean over rounds)"]),
        ("A/A, entry 1 always fails", "1 3", ["MEAN fake/trainer: - tok/s (median tok/s; all 2 rounds FAILED)",
                                              "MEAN fake/trainer: 3000 tok/s (median tok/s, mean over rounds)"])], trainer_ab_logs)

# attn_ab.sh: forward B=64 TFLOP/s = 100 x the call number
COUNTING_ATTN = COUNT_CALL + 'echo "PASS attention forward"\n' + fail_on_listed_calls("CUDA error: an illegal memory access") + """echo "TIME  attention_forward B=8 T=1024 NH=12: 0.100 ms 50.0 TFLOP/s"
echo "TIME  attention_forward B=64 T=1024 NH=12: 0.500 ms $((c * 100)).0 TFLOP/s"
echo "TIME  attention_backward B=64 T=1024 NH=12: 1.000 ms 200.0 TFLOP/s"
echo "1 passed, 0 failed"
"""
root = tree("attn_ab.sh")
write(os.path.join(root, "fake/attention_check"), COUNTING_ATTN, exe=True)
check_ab_cases(root, "attn_ab.sh", "fake/attention_check", [
        ("A/A", "", ["MEAN fake/attention_check: forward B=64 200.0 TFLOP/s",
                     "MEAN fake/attention_check: forward B=64 300.0 TFLOP/s"]),
        ("A/A, entry 2's round 1 fails", "2", ["MEAN fake/attention_check: forward B=64 200.0 TFLOP/s",
                                               "MEAN fake/attention_check: forward B=64 400.0 TFLOP/s (mean over the 1 successful of 2 rounds; 1 FAILED)"]),
        ("A/A, entry 2 always fails", "2 4", ["MEAN fake/attention_check: forward B=64 200.0 TFLOP/s",
                                              "MEAN fake/attention_check: forward B=64 - TFLOP/s (all 2 rounds FAILED)"])],
    lambda case: check(len([x for x in os.listdir(os.path.join(root, "out")) if x.startswith("ab_")]) == 4,
                       f"attn_ab.sh {case}: 4 logs"))

# ---------------------------------------------------------------------------------------------
# graphs_ab.sh exactness: the timings differ between --cuda-graphs 0 and 1, the losses do not;
# step 3 is skipped (FP16's loss-scale overflow): `scale 65536 (skipped) |`
GRAPHS_TRAINER = """#!/usr/bin/env bash
g=0; prev=""
for a in "$@"; do [ "$prev" = --cuda-graphs ] && g=$a; prev=$a; done
skip=3; [ "$g" = 1 ] && skip=${G1_SKIP:-3}
for s in 1 2 3 4 5 6; do
    if [ $s = $skip ]; then sc="65536 (skipped)"; n=inf; elif [ $s -gt $skip ]; then sc=32768; n=1.2345; else sc=65536; n=1.2345; fi
    echo "step    $s/14 | loss 5.12345$s | norm $n | lr 3.00e-04 | scale $sc | 1$g.$s ms (fwd 4.$g bwd 8.$s exposed comm 0.0$g %) | 12$g$s tok/s"
done
"""
root = tree("graphs_ab.sh", "trainer_ab.sh")
write(os.path.join(root, "build/bf16/train_gpt2cu"), GRAPHS_TRAINER, exe=True)
rc, out, err = sh(root, "graphs_ab.sh", env={"SHAPES": "", "PRECISIONS": "bf16"})
check("exact bf16: 6 steps, losses, norms and loss scales equal with and without graphs" in out,
      f"graphs_ab.sh: a skipped step's timings stripped too", out + err)
with open(os.path.join(root, "out/exact_bf16_g0.txt")) as f:
    g0 = f.read().splitlines()
check(len(g0) == 6 and g0[2] == "5.123453 inf 65536 (skipped)" and g0[3] == "5.123454 1.2345 32768",
      f"graphs_ab.sh: loss, norm, scale and the skip kept per step", g0)
rc, out, err = sh(root, "graphs_ab.sh", env={"SHAPES": "", "PRECISIONS": "bf16", "G1_SKIP": "4"})
check("exact bf16: DIFFERENT" in out, "graphs_ab.sh: another step skipped with graphs is a difference")

# ---------------------------------------------------------------------------------------------
# run.sh ref + test: reference.py's exit status in the summary (through the tee), and the test
# lines after a failed reference say so
REFERENCE = """import os, sys
rc = int(os.environ.get("STANDIN_REF_RC", "0"))
print("reference: writing dev_data/reference_model.bin ...")
if rc:
    print("RuntimeError: CUDA out of memory")
    sys.exit(rc)
os.makedirs("dev_data", exist_ok=True)
for n in ("reference_model.bin", "reference_state.bin"):
    open(os.path.join("dev_data", n), "w").write("x")
print("reference: done")
"""
TEST_GPT2CU = """#!/usr/bin/env bash
echo "PASS logits"; echo "1 passed, 0 failed"
"""
for ref_rc in (3, 0):
    root = tree("run.sh")
    write(os.path.join(root, "dev/reference.py"), REFERENCE)
    write(os.path.join(root, "build/fp16/test_gpt2cu"), TEST_GPT2CU, exe=True)
    rc, out, err = sh(root, "run.sh", ["ref", "test"], env={"BUILDS": "fp16", "STANDIN_REF_RC": str(ref_rc)})
    summary = out.split("================ summary\n", 1)[-1].splitlines()
    check(any(x.startswith(f"reference.py: rc={ref_rc} ") for x in summary), f"run.sh: reference.py rc={ref_rc} in the summary", out)
    tests = [x for x in summary if x.startswith("test_gpt2cu fp16")]
    flagged = [x for x in tests if f"reference.py FAILED rc={ref_rc}" in x]
    check(len(tests) == 4 and len(flagged) == (4 if ref_rc else 0),
          f"run.sh: the test lines {'say' if ref_rc else 'do not say'} that the reference failed")

# run.sh shapes: a reference per shape in its own folder (removed after its tests), the test's
# recompute level and lm-head chunk passed on, the errors summarised (the worst gradient tensor
# named), a failed reference one line and no test run for it
SHAPE_REFERENCE = """import os, sys
a = sys.argv[1:]
arg = lambda k: a[a.index(k) + 1]
if arg("--config") == os.environ.get("STANDIN_REF_FAIL"):
    print("RuntimeError: CUDA out of memory"); sys.exit(1)
out = arg("--out")
os.makedirs(out)
for n in ("reference_model.bin", "reference_state.bin"):
    open(os.path.join(out, n), "w").write(" ".join(a))
print("wrote", out)
"""
SHAPE_TEST = """#!/usr/bin/env bash
echo "args: $*" >> "$OUT/shape_test_args.txt"
[ -f "$1" ] || { echo "error: $1: cannot open"; exit 1; }
echo "PASS logits     rel_err 1.000e-03  max_abs 1.0e-02  (tol 1.0e-02)"
echo "PASS loss       rel_err 2.000e-04  max_abs 1.0e-03  (tol 3.0e-03)"
echo "PASS backward is deterministic, two runs: gradients bitwise equal"
echo "PASS wte        rel_err 3.000e-03  max_abs 1.0e-03  (tol 6.0e-02)"
echo "FAIL qkvw       rel_err 9.000e-02  max_abs 1.0e-01  (tol 6.0e-02)"
echo "PASS fcb        rel_err 5.000e-03  max_abs 1.0e-03  (tol 6.0e-02)"
echo "PASS losses     rel_err 4.000e-04  max_abs 1.0e-03  (tol 5.0e-03)"
echo "PASS accum 2    rel_err 9.900e-01  max_abs 1.0e-03  (tol 1.0e-02)"
echo "6 passed, 1 failed"; exit 1
"""
root = tree("run.sh")
write(os.path.join(root, "dev/reference.py"), SHAPE_REFERENCE)
write(os.path.join(root, "build/fp16/test_gpt2cu"), SHAPE_TEST, exe=True)
rc, out, err = sh(root, "run.sh", ["shapes"], env={"BUILDS": "fp16", "STANDIN_REF_FAIL": "d24",
                                                   "SHAPES": "d12:12:3:77:2,100 d24:4:2:129 d48:2:2:64"})
summary = out.split("================ summary\n", 1)[-1].splitlines()
check(summary == ["shape d12-L12-B3-T77-2-100 fp16: rc=1 1 FAIL; logits 1.000e-03 loss 2.000e-04 grads 9.000e-02 (qkvw) losses 4.000e-04",
                  "shape d24-L4-B2-T129: reference.py rc=1: RuntimeError: CUDA out of memory",
                  "shape d48-L2-B2-T64 fp16: rc=1 1 FAIL; logits 1.000e-03 loss 2.000e-04 grads 9.000e-02 (qkvw) losses 4.000e-04"],
      "run.sh shapes: a line per shape and build, the worst gradient tensor named, a failed reference said", out + err)
with open(os.path.join(root, "out/shape_test_args.txt")) as f:
    args = f.read().splitlines()
check(args == ["args: dev_data/shapes/d12-L12-B3-T77-2-100/reference_model.bin dev_data/shapes/d12-L12-B3-T77-2-100/reference_state.bin 2 100",
               "args: dev_data/shapes/d48-L2-B2-T64/reference_model.bin dev_data/shapes/d48-L2-B2-T64/reference_state.bin"],
      "run.sh shapes: each shape's files, its recompute level and lm-head chunk passed on", args)
check(not os.listdir(os.path.join(root, "dev_data/shapes")), "run.sh shapes: each reference removed after its tests")

# ---------------------------------------------------------------------------------------------
# loop_run.sh with a stand-in trainer (losses from the step, the build's precision and env vars;
# -o DIR/log.jsonl with 9 digits; checkpoints as a file holding the step and the options) and a
# stand-in dev/train_reference.py (fp32: the base curve; fp16-autocast: 8 % above it, as FP16's
# skipped step 4 puts it)
TRAINER = r"""#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
def opt(name, default=None):
    return a[a.index(name) + 1] if name in a else default
prec = os.path.basename(os.path.dirname(os.path.abspath(sys.argv[0])))
out = opt("-o")
if "--bench" in a:
    print("RESULT precision=%s tok_per_s=1000 mfu=1.0 device_mem_gb=1.0" % prec); sys.exit(0)
ck = os.path.join(out, "checkpoint.json") if out else None
start, steps = 0, int(opt("-x", "20"))
if "--resume" in a:
    st = json.load(open(ck))
    if opt("-l") is not None and opt("-l") != st["lr"]:
        print("error: option --lr: %s differs from %s" % (opt("-l"), st["lr"])); sys.exit(1)
    start, steps = st["step"], st["steps"]
    print("resumed from %s" % ck)
elif out and os.path.exists(os.path.join(out, "log.jsonl")):
    print("error: %s: already holds a run" % out); sys.exit(1)
off = {"fp16": 1.08 * (1 + float(os.environ.get("FP16_OFF", "0.005"))), "bf16": 1 + float(os.environ.get("BF16_OFF", "0.001")),
       "fp32": 1 + float(os.environ.get("FP32_OFF", "0"))}[prec]
if out:
    os.makedirs(out, exist_ok=True)
log = open(os.path.join(out, "log.jsonl"), "a") if out else None
stop = int(opt("--debug-exit-after", "0"))
for s in range(start + 1, steps + 1):
    loss = (10.0 / s + 1.0) * off
    if "--resume" in a:
        loss += float(os.environ.get("RESUME_DRIFT", "0"))
    if os.environ.get("STANDIN_RANKS"):   # launched by mpirun's stand-in
        loss *= 1 + float(os.environ.get("RANKS_OFF", "0"))
    print("step %4d/%d | loss %.6f | norm 1.0000 | lr 6.00e-04 | scale 65536 | 1.00 ms" % (s, steps, loss))
    if log:
        log.write(json.dumps({"type": "step", "step": s, "loss": float("%.9g" % loss)}) + "\n"); log.flush()
    if s % 25 == 0 and opt("-v"):
        print("step %d: val loss %.6f" % (s, loss))
    if opt("-n") and s % int(opt("-n")) == 0:
        json.dump({"step": s, "steps": steps, "lr": opt("-l", "6e-4")}, open(ck, "w"))
    if stop and s == stop:
        sys.exit(137)
"""
TRAIN_REFERENCE = r"""import os, sys
a = sys.argv[1:]
with open(os.environ["ARGS_LOG"], "a") as f:
    f.write(" ".join(a) + "\n")
dtype = a[a.index("--dtype") + 1] if "--dtype" in a else "fp32"
steps = int(a[a.index("-x") + 1])
for s in range(1, steps + 1):
    loss = (10.0 / s + 1.0) * (1.08 if dtype == "fp16-autocast" else 1.0)
    print("step %4d/%d | loss %.6f | norm 1.0000 | lr 6.00e-04 | 1.00 ms | 1000 tok/s" % (s, steps, loss))
"""


def loop_tree():
    root = tree("loop_run.sh", "own_host.sh")
    write(os.path.join(root, "dev/reference.py"), REFERENCE)
    write(os.path.join(root, "dev/train_reference.py"), TRAIN_REFERENCE)
    write(os.path.join(root, "dev/plot.py"), "")
    for p in ("fp16", "bf16", "fp32"):
        write(os.path.join(root, f"build/{p}/train_gpt2cu"), TRAINER, exe=True)
    return root


def loop(root, sections, **env):
    env = dict({"ARGS_LOG": os.path.join(root, "args.log")}, **env)
    rc, out, err = sh(root, "loop_run.sh", sections, env=env)
    return out.split("================ summary\n", 1)[-1].splitlines(), out + err


root = loop_tree()
summary, full = loop(root, ["train"])
with open(os.path.join(root, "args.log")) as f:
    calls = f.read().splitlines()
check(len(calls) == 2 and calls[1] == calls[0] + " --dtype fp16-autocast",
      f"loop_run.sh train: PyTorch fp32 and fp16-autocast, the same arguments otherwise", calls)
fp16 = [x for x in summary if x.startswith("100 steps fp16")]
bf16 = [x for x in summary if x.startswith("100 steps bf16")]
check(len(fp16) == 1 and "fp16 autocast" in fp16[0] and "0.75 %" in fp16[0] and ": OK 100 steps" in fp16[0] and "(tol 0.0075)" in fp16[0],
      f"loop_run.sh: FP16 (0.5 % off fp16-autocast, 8.5 % off fp32) vs PyTorch fp16-autocast at 0.75 %: OK", full)
check(len(bf16) == 1 and "PyTorch fp32" in bf16[0] and "0.5 %" in bf16[0] and ": OK 100 steps" in bf16[0] and "(tol 0.005)" in bf16[0],
      "loop_run.sh: BF16 (0.1 % off) vs PyTorch fp32 at 0.5 %: OK")
check(any("fp16 vs PyTorch fp32" in x and "max rel diff 8.5" in x for x in summary), "loop_run.sh: FP16 vs fp32 for information")
root = loop_tree()
summary, full = loop(root, ["train"], BF16_OFF="0.006", FP16_OFF="0.008")
check(any(x.startswith("100 steps bf16") and ": FAIL 100 steps" in x for x in summary), "loop_run.sh: BF16 0.6 % off fp32: FAIL (README: 0.5 %)")
check(any(x.startswith("100 steps fp16") and ": FAIL 100 steps" in x for x in summary), "loop_run.sh: FP16 0.8 % off fp16-autocast: FAIL (README: 0.75 %)")

# resume: equal stdout at 6 decimals is not enough; the log.jsonl losses must be equal
root = loop_tree()
summary, full = loop(root, ["resume"])
res = [x for x in summary if x.startswith("resume (killed")]
check(len(res) == 1 and "log.jsonl: OK 20 steps" in res[0] and "max rel diff 0.00e+00" in res[0],
      f"loop_run.sh resume: the runs' log.jsonl compared at --tol 0: OK", full)
check(any(x.startswith("resume with another -l: rc=1 error: option --lr") for x in summary), "loop_run.sh resume: another -l refused")
check(os.path.exists(os.path.join(root, "out/resume_b.jsonl")), "loop_run.sh resume: the log.jsonl files kept in OUT")
root = loop_tree()
summary, full = loop(root, ["resume"], RESUME_DRIFT="2e-8")
res = [x for x in summary if x.startswith("resume (killed")]
check(len(res) == 1 and "log.jsonl: FAIL 20 steps" in res[0], f"loop_run.sh resume: a difference below the 6 printed decimals: FAIL", full)
check(any(x.startswith("reference.py: rc=0 ") for x in summary) and not any("reference.py FAILED" in x for x in summary),
      "loop_run.sh: reference.py made the missing reference (rc=0): no line says it failed")

# odd: B=3 T=77 against PyTorch fp32 at 1e-4 (FP32) and 0.5 % (BF16), 2 ranks (mpirun's stand-in)
# against 1 at 1e-5, DDP and ZeRO-1, and the resume compared exactly
for fp32_off, want in (("0", "OK"), ("2e-4", "FAIL")):
    root = loop_tree()
    summary, full = loop(root, ["odd"], FP32_OFF=fp32_off, PATH=gpu_tools(root))
    with open(os.path.join(root, "args.log")) as f:
        calls = f.read().splitlines()
    check(len(calls) == 1 and "-B 3 -T 77 -d 462 -x 30" in calls[0], "loop_run.sh odd: PyTorch fp32 at B=3 T=77, 2 micro-steps, 30 steps", calls)
    f32 = [x for x in summary if x.startswith("30 steps B=3 T=77 fp32")]
    check(len(f32) == 1 and f": {want} 30 steps" in f32[0] and "(tol 0.0001)" in f32[0],
          f"loop_run.sh odd: FP32 {fp32_off} off PyTorch fp32 at 1e-4: {want}", full)
    check(any(x.startswith("30 steps B=3 T=77 bf16") and ": OK 30 steps" in x and "(tol 0.005)" in x for x in summary),
          "loop_run.sh odd: BF16 (0.1 % off) vs PyTorch fp32 at 0.5 %: OK")
    ranks = [x for x in summary if x.startswith("B=3 T=77 FP32, 2 ranks")]
    check(len(ranks) == 2 and all(": OK 30 steps" in x and "(tol 1e-05)" in x for x in ranks) and "--zero 1" in ranks[1],
          "loop_run.sh odd: 2 ranks vs 1 rank at 1e-5, DDP and ZeRO-1 (both off PyTorch alike)", summary)
    check(any(x.startswith("B=3 T=77 resume (killed rc=137") and "log.jsonl: OK 20 steps" in x and "(tol 0)" in x for x in summary),
          "loop_run.sh odd: the resumed run's log.jsonl exactly the straight run's")

# width: 1 rank against 3 (mpirun's stand-in) at 1e-5 (FP32) and 0.5 % (BF16), DDP and ZeRO-1, and
# the 3-rank ZeRO-1 resume exactly
for ranks_off, want32 in (("0", "OK"), ("2e-5", "FAIL")):
    root = loop_tree()
    summary, full = loop(root, ["width"], RANKS_OFF=ranks_off, PATH=gpu_tools(root))
    lines = {p: [x for x in summary if x.startswith(f"width {p}: 3 ranks sharing the GPU")] for p in ("fp32", "bf16")}
    check(len(lines["fp32"]) == 2 and all(f": {want32} 10 steps" in x and "(tol 1e-05)" in x for x in lines["fp32"]),
          f"loop_run.sh width: FP32, 3 ranks {ranks_off} off 1 rank at 1e-5, DDP and ZeRO-1: {want32}", full)
    check(len(lines["bf16"]) == 2 and all(": OK 10 steps" in x and "(tol 0.005)" in x for x in lines["bf16"]),
          f"loop_run.sh width: BF16, 3 ranks {ranks_off} off 1 rank at 0.5 %: OK")
    int8 = [x for x in summary if x.startswith("width bf16: 3 ranks, --grad-int8 1")]
    check(len(int8) == 2 and all(": OK 10 steps" in x and "(tol 0.005)" in x for x in int8),
          "loop_run.sh width: --grad-int8 1 on 3 ranks vs 1 rank at 0.5 %, DDP and ZeRO-1", summary)
    check(any(x.startswith("width fp32: 3 ranks, ZeRO-1, killed (rc=137)") and "log.jsonl: OK 10 steps" in x and "(tol 0)" in x
              for x in summary), "loop_run.sh width: the resumed 3-rank ZeRO-1 run's log.jsonl exactly the straight one's", summary)

# a failed reference.py: its rc in the summary, the lines that read dev_data say so
root = loop_tree()
summary, full = loop(root, ["resume"], STANDIN_REF_RC="3")
check(any(x.startswith("reference.py: rc=3 ") for x in summary), f"loop_run.sh: reference.py rc=3 in the summary", full)
res = [x for x in summary if x.startswith("resume (killed")]
check(len(res) == 1 and "reference.py FAILED rc=3" in res[0], "loop_run.sh: the line after a failed reference says so")

# ---------------------------------------------------------------------------------------------
# faults.sh ckpt: a stand-in trainer that checkpoints every -n steps (a file holding the step),
# resumes from it, appends to log.jsonl; SIGKILLed at random moments by the script
CKPT_TRAINER = r"""#!/usr/bin/env python3
import json, os, sys, time
a = sys.argv[1:]
def opt(name, default=None):
    return a[a.index(name) + 1] if name in a else default
out, steps, every = opt("-o"), int(opt("-x")), int(opt("-n"))
os.makedirs(out, exist_ok=True)
ck = os.path.join(out, "latest")
start = 0
if "--resume" in a and os.path.exists(ck):
    start = int(open(ck).read())
    print("resumed from %s/step_%08d at step %d" % (out, start, start), flush=True)
    if os.environ.get("RESUME_BROKEN"):
        start = 0   # says it resumed, starts again from step 1
log = open(os.path.join(out, "log.jsonl"), "a")
for s in range(start + 1, steps + 1):
    time.sleep(0.01)   # 200 steps take 2 s: longer than the script waits before a kill (< 1 s), so there is a resume
    loss = 10.0 / s + 1.0 + (float(os.environ.get("RESUME_DRIFT", "0")) if start else 0.0)
    print("step %4d/%d | loss %.6f | norm 1.0000 | lr 1.00e-03 | scale 1 | 4.00 ms" % (s, steps, loss), flush=True)
    log.write(json.dumps({"type": "step", "step": s, "loss": float("%.9g" % loss)}) + "\n"); log.flush()
    if s % every == 0:
        open(ck + ".tmp", "w").write(str(s)); os.replace(ck + ".tmp", ck)
        print("checkpoint: %s/step_%08d" % (out, s), flush=True)
"""
MODEL_FILE_STUB = """def padded_vocab(V):
    return V
def param_shapes(config):
    return {}
def write_model(path, params, config):
    pass
"""


def faults_tree():
    root = tree("faults.sh")
    write(os.path.join(root, "build/bf16/train_gpt2cu"), CKPT_TRAINER, exe=True)
    write(os.path.join(root, "dev/model_file.py"), MODEL_FILE_STUB)   # the tiny model is not needed
    return root


root = faults_tree()
rc, out, err = sh(root, "faults.sh", ["ckpt"], env={"FAULTS_LOGS": os.path.join(root, "faults_logs"), "RESUME_BROKEN": "1"})
line = [x for x in out.splitlines() if x.startswith("resume positions:")]
check(len(line) == 1 and line[0].endswith("FAIL"), "faults.sh ckpt: resumes that go back to step 1 FAIL (the last records alone would match)", out + err)
for drift, want in (("0", "OK 200 steps"), ("2e-8", "FAIL 200 steps")):
    root = faults_tree()
    rc, out, err = sh(root, "faults.sh", ["ckpt"], env={"FAULTS_LOGS": os.path.join(root, "faults_logs"), "RESUME_DRIFT": drift})
    line = [x for x in out.splitlines() if x.startswith("checkpoint kills:")]
    pos = [x for x in out.splitlines() if x.startswith("resume positions:")]
    check(len(pos) == 1 and pos[0].endswith(": OK") and not pos[0].startswith("resume positions: 0 "),
          f"faults.sh ckpt: every resume continues at its checkpoint's step + 1 (drift {drift})", out + err)
    check(len(line) == 1 and f"losses vs uninterrupted (log.jsonl): {want}" in line[0],
          f"faults.sh ckpt, resumed runs {'exact' if drift == '0' else 'off by ' + drift}: log.jsonl at --tol 0: {want.split()[0]}",
          out + err)
    check(os.path.exists(os.path.join(root, "out/faults.tar.gz")) and os.path.exists(os.path.join(root, "faults_logs/ckpt_b.jsonl")),
          "faults.sh ckpt: logs (and the log.jsonl files) in FAULTS_LOGS, packed into OUT")
# ---------------------------------------------------------------------------------------------
# same_output.sh: a stand-in trainer whose times depend on STANDIN_T; STANDIN_LOSS, STANDIN_SKIP,
# STANDIN_B and STANDIN_LOGLOSS change what must be compared
SAME_TRAINER = """#!/usr/bin/env bash
t=${STANDIN_T:-1}; out=""; prev=""
for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
echo "GEMM algorithms: 40 shapes, 0 not cuBLASLt's first choice (untimed, 0.$t s)"
for s in 1 2 3; do
    sk=""; [ "$s" = "${STANDIN_SKIP:-0}" ] && sk=" (skipped)"
    echo "step    $s/3 | loss ${STANDIN_LOSS:-5.123456} | norm 1.2345 | lr 3.00e-04 | scale 1$sk | 1$t.$s ms (fwd 4.$t bwd 8.$s exposed comm 0.0$t opt 0.$t) | 12$t$s tok/s | MFU 4$t.0% | ETA $t s"
    if [ -n "$out" ]; then mkdir -p "$out"; echo "{\\"type\\":\\"step\\",\\"step\\":$s,\\"loss\\":${STANDIN_LOGLOSS:-5.1},\\"ms\\":1$t.5,\\"tok_s\\":12$t}" >> "$out/log.jsonl"; fi
done
echo "RESULT precision=bf16 model=L12C768 gpus=1 zero=0 B=${STANDIN_B:-4} T=256 accum=1 total_batch=1024 steps=6 median_ms=1$t.000 tok_per_s=9$t mean_ms=1$t.5 tok_per_s_mean=9$t mfu=4$t.00 fwd_ms=$t.0 bwd_ms=$t.0 opt_ms=0.$t exposed_comm_ms=0.000 exposed_comm_pct=0.00 comm_ms=0.000 comm_mb=0.0 busbw_gbs=0.0 bwd_last_ms=$t.0 bwd_other_ms=-1.000 device_mem_gb=3.$t"
"""
root = tree("same_output.sh")
for name in ("a", "b"):
    write(os.path.join(root, f"bin/{name}/train_gpt2cu"), SAME_TRAINER, exe=True)
# the script runs the binaries with their own environment: per-binary values through a wrapper
def same(env_b):
    exports = " ".join(f"{k}={v}" for k, v in env_b.items())
    write(os.path.join(root, "bin/b/run"), f"#!/usr/bin/env bash\nexport STANDIN_T=7 {exports}\nexec \"$(dirname \"$0\")/train_gpt2cu\" \"$@\"\n", exe=True)
    rc, out, err = sh(root, "same_output.sh", ["bin/a/train_gpt2cu", "bin/b/run"])
    return {l.split(":")[0]: l for l in out.splitlines() if re.match(r"^(train|resume|nan|bench):", l)}, out + err
v, detail = same({})
check(len(v) == 4 and all(": same " in l for l in v.values()) and "same output and log.jsonl" in v["train"],
      "same_output.sh: other step times, speeds, memory and startup seconds are the same output", detail)
for env, runs, what in (({"STANDIN_LOSS": "5.123457"}, "train resume nan bench", "a loss in the last digit"),
                        ({"STANDIN_SKIP": "2"}, "train resume nan bench", "a step marked skipped"),
                        ({"STANDIN_B": "8"}, "bench", "a RESULT value that is not a time (B)"),
                        ({"STANDIN_LOGLOSS": "5.2"}, "train resume", "a loss in log.jsonl")):
    v, detail = same(env)
    check(all(": DIFFERENT" in v.get(r, "") for r in runs.split()), f"same_output.sh: {what} is a difference ({runs})", detail)
# ---------------------------------------------------------------------------------------------
# sanitize.sh with a stand-in compute-sanitizer on PATH: it reports per tool as told (STANDIN_*)
# and runs nothing; "hang" sleeps past LIMIT_S
SANITIZER = """#!/usr/bin/env bash
[ "$1" = --version ] && { echo "NVIDIA (R) Compute Sanitizer"; echo "Version 2099.1 (stand-in)"; exit 0; }
tool=$2
case "$tool:${STANDIN_MODE:-}" in
    initcheck:errors)
        for i in 1 2 3; do echo "========= Uninitialized __global__ memory read of size 16 bytes"
            echo "=========         Device Frame: layernorm_forward_kernel(float *, int)+0x2d0 in layernorm.cuh:34"; done
        echo "=========         Device Frame: other_kernel(int)+0x10 in x.cuh:1"
        echo "========= ERROR SUMMARY: 4 errors"; exit 0 ;;
    racecheck:errors)
        echo "========= Error: Race reported between Read access at void probe<(Mode)2>(const float *)+0x9e0 in a.cu:312"
        echo "=========     and Write access at ns::store_u32(unsigned int, unsigned int)+0x390 in b.cuh:92 [128 hazards]"
        echo "=========     and Write access at ns::store_u32(unsigned int, unsigned int)+0x3b0 in b.cuh:92 [448 hazards]"
        echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 0 ;;
    racecheck:*) echo "args: $*"; echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"; exit 0 ;;
    synccheck:hang) sleep 5 ;;
    memcheck:killed) echo "========= COMPUTE-SANITIZER"; kill -KILL $$ ;;
    *) [ "$tool" = memcheck ] && echo "========= LEAK SUMMARY: 0 bytes leaked in 0 allocations"
       echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;
esac
"""
root = tree("sanitize.sh")
write(os.path.join(root, "tools/compute-sanitizer"), SANITIZER, exe=True)
for b in ("train_gpt2cu", "matmul_check", "attention_check"):
    write(os.path.join(root, f"build/bf16/{b}"), "#!/bin/sh\nexit 0\n", exe=True)
path = os.path.join(root, "tools") + ":" + os.environ["PATH"]
rc, out, err = sh(root, "sanitize.sh", env={"PATH": path, "STANDIN_MODE": "errors", "LIMIT_S": "2", "PRECISION": "BF16"})
v = {l.split(":")[0]: l for l in out.splitlines() if re.match(r"^(memcheck|racecheck|initcheck|synccheck) [a-z-]+:", l)}
check(sorted(v) == ["initcheck probe", "initcheck trainer", "memcheck attention", "memcheck matmul", "memcheck memprobe", "memcheck trainer",
                    "racecheck attention", "racecheck matmul", "racecheck raceprobe", "synccheck trainer-ours"],
      "sanitize.sh: the default runs (memcheck on the trainer, its probe and each check found, racecheck on each check and its probe, ...); PRECISION=BF16 as make spells it", out + err)
check("LEAK SUMMARY: 0 bytes" in v["memcheck trainer"] and "ERROR SUMMARY: 0 errors" in v["memcheck trainer"],
      "sanitize.sh: memcheck's leak and error summaries in its line", v.get("memcheck trainer", out))
check("ERROR SUMMARY: 4 errors" in v["initcheck trainer"] and
      "[reports in: layernorm_forward_kernel x3, other_kernel x1]" in v["initcheck trainer"],
      "sanitize.sh: the error count, and the kernels the reports name, most first", v.get("initcheck trainer", out))
check("RACECHECK SUMMARY: 1 hazard displayed" in v["racecheck attention"] and
      "[reports in: ns::store_u32 x2, probe<(Mode)2> x1]" in v["racecheck attention"],
      "sanitize.sh: racecheck's races, and the functions they name (with template arguments), most first", v.get("racecheck attention", out))
rc, out, err = sh(root, "sanitize.sh", env={"PATH": path, "LIMIT_S": "2", "PRECISION": "bf16", "RUNS": "racecheck:layernorm racecheck:trainer-ours"})
check("racecheck layernorm: build/bf16/layernorm_check missing" in out, "sanitize.sh: a missing binary is named", out + err)
log = open(os.path.join(root, "out/sanitize_racecheck_trainer-ours.log")).read()
check(re.search(r"racecheck trainer-ours: rc=0 \d+s .*RACECHECK SUMMARY: 0 hazards.*\(host memory \+\d+\.\d GB\)", out) and
      "args: --tool racecheck --kernel-name-exclude regex=nvjet|cublas|xmma|cutlass --print-limit 20 build/bf16/train_gpt2cu --bench" in log,
      "sanitize.sh: trainer-ours leaves cuBLASLt's kernels unchecked; the host memory it took", out + err)
check("--bench -e d12 -b 2 -t 256 --bench-warmup 1" in log, "sanitize.sh: the trainer at B=2, T=256 by default", log)
rc, out, err = sh(root, "sanitize.sh", env={"PATH": path, "LIMIT_S": "2", "PRECISION": "bf16", "RUNS": "racecheck:trainer-ours",
                                            "TRAINER_SHAPE": "-b 3 -t 77"})
log = open(os.path.join(root, "out/sanitize_racecheck_trainer-ours.log")).read()
check("--bench -e d12 -b 3 -t 77 --bench-warmup 1" in log, "sanitize.sh: TRAINER_SHAPE sets the trainer's batch and length", log)
# BUDGET_S 2, not 1: the script reads a whole-second clock, so a first run could find 1 s "spent" already
rc, out, err = sh(root, "sanitize.sh", env={"PATH": path, "STANDIN_MODE": "hang", "LIMIT_S": "2", "BUDGET_S": "2", "PRECISION": "bf16",
                                            "RUNS": "synccheck:trainer synccheck:attention"})
check("synccheck trainer: rc=124" in out and "stopped after 2 s (no verdict)" in out and
      "synccheck attention: not run (BUDGET_S 2 s spent)" in out, "sanitize.sh: a run stopped at LIMIT_S; the next past BUDGET_S not started", out + err)
rc, out, err = sh(root, "sanitize.sh", env={"PATH": path, "STANDIN_MODE": "killed", "LIMIT_S": "2", "PRECISION": "bf16", "RUNS": "memcheck:attention"})
check("memcheck attention: rc=137" in out and "killed by signal 9" in out, "sanitize.sh: a run killed by a signal says which", out + err)
rc, out, err = sh(root, "sanitize.sh", env={"PATH": "/usr/bin:/bin"})
check(rc == 2 and "compute-sanitizer: not found" in out, "sanitize.sh: no compute-sanitizer: one line, exit 2", out + err)
# ---------------------------------------------------------------------------------------------
# host_sanitize.sh with a stand-in sanitized trainer: --debug-nan exits 2, -x 100000 prints steps
# until SIGTERM (then 4), -o DIR gets a checkpoint directory, and with STANDIN_ASAN a --resume
# writes an AddressSanitizer report where ASAN_OPTIONS's log_path says, any other run a file of
# suppressions used only (no report)
ASAN_TRAINER = """#!/usr/bin/env bash
a=" $* "
[[ $a == *" --debug-nan "* ]] && { echo "step 3 skipped: non-finite gradients"; exit 2; }
if [[ $a == *" -x 100000 "* ]]; then
    trap 'echo "stopping after step 5"; exit 4' TERM
    for i in 1 2 3 4 5; do echo "step    $i/100000 | loss 9.0"; done
    while :; do sleep 0.1; done
fi
[[ $a =~ \ -o\ ([^ ]+) ]] && mkdir -p "${BASH_REMATCH[1]}/step_00000020" && touch "${BASH_REMATCH[1]}/step_00000020/model.bin"
if [ -n "${STANDIN_ASAN:-}" ] && [[ $a == *" --resume "* ]]; then
    printf '==7==ERROR: AddressSanitizer: heap-use-after-free on address 0x1\\n    #0 0x2 in checkpoint_read llmc/checkpoint.h:99\\n' > "${ASAN_OPTIONS##*log_path=}.$$"
elif [ -n "${STANDIN_ASAN:-}" ]; then
    printf 'Suppressions used:\\n  count      bytes template\\n      1          8 ibv_get_device_list\\n' > "${ASAN_OPTIONS##*log_path=}.$$"
fi
echo "RESULT precision=fp16 gpus=${WORLD_SIZE:-1}"
"""
root = tree("host_sanitize.sh", "own_host.sh")
write(os.path.join(root, "build/asan/train_gpt2cu"), ASAN_TRAINER, exe=True)
write(os.path.join(root, "build/asan/test_gpt2cu"), "#!/bin/sh\necho '24 passed, 0 failed'\n", exe=True)
write(os.path.join(root, "dev/reference.py"), "print('reference written')\n")
write(os.path.join(root, "hs.bin"), "stand-in")
path = gpu_tools(root, gpus=1)
rc, out, err = sh(root, "host_sanitize.sh", ["hs.bin"], env={"PATH": path})
runs = {l.split()[0]: l for l in out.split("== runs")[-1].splitlines() if " rc=" in l}
check(rc == 0 and list(runs) == ["train", "resume", "eval-only", "tune", "algos", "nan", "bench", "nographs", "zero1", "zero1-resume",
                                 "mpirun", "signal", "test_gpt2cu"],
      "host_sanitize.sh: a line per run, in order (2 ranks by TCP, and under mpirun)", out + err)
check(all(re.search(r"rc=(\d+) \(want \1\)", l) for l in runs.values()) and "rc=2 (want 2)" in runs.get("nan", "")
      and "rc=4 (want 4)" in runs.get("signal", "") and "24 passed, 0 failed" in runs.get("test_gpt2cu", ""),
      "host_sanitize.sh: each exit status beside the expected one (the inf/nan stop's 2, SIGTERM's 4), the log's last line", out + err)
check("sanitizer reports: 0 file(s)" in out, "host_sanitize.sh: no report, no file", out + err)
rc, out, err = sh(root, "host_sanitize.sh", env={"PATH": path, "STANDIN_ASAN": "1"})
check("sanitizer reports: 3 file(s)" in out and out.count("ERROR: AddressSanitizer: heap-use-after-free") == 3
      and "in checkpoint_read llmc/checkpoint.h:99" in out,
      "host_sanitize.sh: each report's error and stack lines (the three --resume processes: one rank, then two); files of suppressions only are no reports", out + err)
for args, want in ((["nope.bin"], "HS_FILE 'nope.bin' does not exist"), ):
    rc, out, err = sh(root, "host_sanitize.sh", args, env={"PATH": path})
    check(rc == 2 and err.strip() == f"dev/device/host_sanitize.sh: {want}" and out == "", f"host_sanitize.sh: {want}: one line, exit 2", out + err)
os.remove(os.path.join(root, "build/asan/train_gpt2cu"))
rc, out, err = sh(root, "host_sanitize.sh", env={"PATH": path})
check(rc == 2 and "build/asan/train_gpt2cu is missing (dev/device/build.sh ASAN" in err and len(err.strip().splitlines()) == 1 and out == "",
      "host_sanitize.sh: no sanitized build: one line, exit 2", out + err)
# ---------------------------------------------------------------------------------------------
# hellaswag_set.sh: stand-ins for the fixture (fails when STANDIN_FAIL is set) and the tokenizer
root = tree("hellaswag_set.sh")
write(os.path.join(root, "dev/hellaswag_fixture.py"), "import os, sys\nprint('fixture')\nsys.exit(3 if os.environ.get('STANDIN_FAIL') else 0)\n")
write(os.path.join(root, "build/tokenize"), "#!/bin/sh\necho 'wrote 400 examples'\n", exe=True)
log = os.path.join(root, "hs.log")
rc, out, err = sh(root, "hellaswag_set.sh", [log])
check(rc == 0 and open(log).read() == "fixture\nwrote 400 examples\n", "hellaswag_set.sh: both steps' output in LOG, exit 0")
rc, out, err = sh(root, "hellaswag_set.sh", [log], env={"STANDIN_FAIL": "1"})
check(rc == 3 and open(log).read() == "fixture\n", "hellaswag_set.sh: a failed fixture is the exit status; the tokenizer does not run")
# ---------------------------------------------------------------------------------------------
# prepare.sh with NO_BUILD=1: it packs what build/ and dev_data hold (stand-in files) with a copy of
# SHARED, names what a plan lacks, and prints the device call
import tarfile  # noqa: E402
root = tree("prepare.sh")
shared = os.path.join(root, "shared")
for rel in ("tinyshakespeare.txt", "gpt2/encoder.json", "gpt2/vocab.bpe"):
    write(os.path.join(shared, rel), "stand-in " + rel)
for rel in ("build/fp32/train_gpt2cu", "build/fp16/train_gpt2cu", "build/bf16/train_gpt2cu", "build/tokenize",
            "build/interconnect", "build/power_probe", "dev_data/tinyshakespeare_train.bin", "dev_data/tinyshakespeare_val.bin",
            "dev_data/gpt2_tokenizer.bin"):
    write(os.path.join(root, rel), "stand-in", exe=True)
env = {"NO_BUILD": "1", "SHARED": shared}
rc, out, err = sh(root, "prepare.sh", ["x2"], env=env)
check(rc == 2 and err.strip() == "prepare.sh: build/nompi is missing (run without NO_BUILD=1)" and not os.path.exists(
      os.path.join(root, "device_pack.tar.xz")), "prepare.sh x2 without build/nompi: one line naming it, exit 2, no pack", out + err)
write(os.path.join(root, "build/nompi/train_gpt2cu"), "stand-in", exe=True)
rc, out, err = sh(root, "prepare.sh", ["x2"], env=env)
names = set(tarfile.open(os.path.join(root, "device_pack.tar.xz")).getnames()) if rc == 0 else set()
check(rc == 0 and {"build/nompi/train_gpt2cu", "build/bf16/train_gpt2cu", "build/tokenize", "build/devdata/gpt2/vocab.bpe",
                   "build/devdata/tinyshakespeare.txt", "dev_data/tinyshakespeare_val.bin", "dev_data/gpt2_tokenizer.bin"} <= names,
      "prepare.sh x2: the plan's binaries, the tools, a copy of SHARED as build/devdata and dev_data in one pack", out + err)
check("tar xJf device_pack.tar.xz && dev/device/x2_verify.sh call1" in out,
      "prepare.sh x2: prints the device call", out + err)
rc, out, err = sh(root, "prepare.sh", ["gemm"], env=env)
check(rc == 2 and err.strip() == "prepare.sh: build/before_bf16 is missing (run without NO_BUILD=1)",
      "prepare.sh gemm without the before-binaries: one line naming them, exit 2", out + err)
rc, out, err = sh(root, "prepare.sh", ["one"], env=dict(env, SHARED=os.path.join(root, "nowhere")))
check(rc == 2 and len(err.strip().splitlines()) == 1 and "nowhere/tinyshakespeare.txt is missing" in err,
      "prepare.sh without the shared data: one line naming the file, exit 2", out + err)
# the usage errors of the scripts above: one line on stderr, a non-zero exit, nothing run
for script, args in (("same_output.sh", ["only_one"]), ("hellaswag_set.sh", []), ("prepare.sh", []), ("prepare.sh", ["all"])):
    root = tree(script)
    rc, out, err = sh(root, script, args)
    check(rc != 0 and len(err.strip().splitlines()) == 1 and "usage" in err and out == "",
          f"{script} with {len(args)} argument(s): one usage line, exit {rc}", out + err)
finish()
