"""Unit test of the multi-rank scripts' bookkeeping, with stand-in binaries and scripts
(dev/unit/standins.py: mpirun runs the command with STANDIN_RANKS = its -np; nvidia-smi lists
stand-in GPUs):
  scaling_run.sh race: the bitwise pairs of the race stress, one made to differ; with RANKS above
      the GPUs, the ranks under own_host.sh and the timed parts refused (multi_gpu.sh too);
  scaling_run.sh probe and scaling on 2 GPUs: the three probes (P2P on, off, sockets) and the
      table's rows, each type's transport; faults.sh nan: one rank per GPU on 2, own_host.sh on 1;
  multi_gpu.sh resume: straight vs killed-and-resumed runs on N ranks compared, DDP and ZeRO-1, and
      the checkpoint's refusal on 1 GPU;
  multi_gpu.sh on 2 GPUs (no own_host.sh): equal's FP32 curves held to 1e-5, BF16's to 0.5 %; bench
      and int8's timing with P2P on and off; the env launch one GPU per rank; ceiling's runs one per
      GPU; graphs' speed part;
  ranks_check.sh: 1 vs 2 ranks (under own_host.sh) and the buckets' pair compared, the FP32 bound,
      a differing pair, a failed run, a missing trainer or text, the launch without mpirun;
  scaling_run.sh with an unknown part: one line, exit 2;
  gpu_count.sh: nvidia-smi's GPUs (not its MIG lines), or CUDA_VISIBLE_DEVICES's entries when set;
  stop_signal.sh: each section's summary line (exit codes, the stop line, the resumed runs compared),
      with a stand-in trainer that stops as the real one does on a signal; `ranks` under own_host.sh
      on 1 GPU, one rank per GPU on 2, and not misled by an earlier run's logs in OUT; an unknown
      section;
  x2_verify.sh: #6's two device calls, each part's arguments and environment, its refusals (no
      call named, not 2 GPUs, P2P disabled by the caller), a part stopped at its limit."""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(__file__))
from standins import ROOT, TRAINER_STANDIN, check, finish, gpu_tools, lines_with, sh, tree, write  # noqa: E402

# scaling_run.sh race, on 2 stand-in GPUs: the trainer (a log.jsonl of 3 losses in -o DIR; with STANDIN_RACE, --bucket-mb 0
# changes the last one: the race stress must name that pair, and only it)
STANDIN_TRAINER_RACE = r'''#!/usr/bin/env bash
out=""; b=x
while [ $# -gt 0 ]; do case $1 in -o) out=$2; shift;; --bucket-mb) b=$2; shift;; esac; shift; done
mkdir -p "$out"; : > "$out/log.jsonl"; echo "${NCCL_HOSTID:-none} ${NCCL_NET:-none}" > "$out/host"
for s in 1 2 3; do l=5.12345$s; [ -n "${STANDIN_RACE:-}" ] && [ "$b" = 0 ] && [ $s = 3 ] && l=5.123999
    echo "{\"type\": \"step\", \"step\": $s, \"loss\": $l}" >> "$out/log.jsonl"; done
'''
root = tree("scaling_run.sh")
path = gpu_tools(root, gpus=2)
write(os.path.join(root, "build/bf16/train_gpt2cu"), STANDIN_TRAINER_RACE, exe=True)
for race_env, bad in (({}, []), ({"STANDIN_RACE": "1"}, ["b4 vs b0"])):
    rc, out, err = sh(root, "scaling_run.sh", ["race"], env=dict(PATH=path, **race_env))
    lines = [l for l in out.splitlines() if l.startswith("race stress, ")]
    failed = [l.split(", ")[1].split(" (")[0] for l in lines if ": FAIL" in l]
    check(rc == 0 and len(lines) == 5 and failed == bad and not os.path.exists(os.path.join(root, "out/scaling_run/probe.txt")),
          f"scaling_run.sh race: 5 pairs compared bitwise, only the race part run; failing: {bad or 'none'}", out + err)
# RANKS=4 on the 2 stand-in GPUs: every rank under own_host.sh (a host id of its own, NCCL over
# sockets); DDP's pairs of other buckets held to 1e-4 (4 ranks add in the buckets' order), the
# identical pairs and ZeRO-1's still bitwise
root = tree("scaling_run.sh", "own_host.sh")
path = gpu_tools(root, gpus=2)
write(os.path.join(root, "build/bf16/train_gpt2cu"), STANDIN_TRAINER_RACE, exe=True)
rc, out, err = sh(root, "scaling_run.sh", ["race"], env=dict(PATH=path, RANKS="4"))
lines = lines_with(out, "race stress, ")
loose = [l.split(", ")[1].split(" (")[0] for l in lines if "(within 1e-4: 4 ranks add in the buckets' order" in l]
check(rc == 0 and len(lines) == 5 and loose == ["b4 vs b0", "b4 vs b1e6"] and not any(": FAIL" in l for l in lines) and
      open(os.path.join(root, "runs/race_z1_b4/host")).read() == "own-host-rank0 Socket\n",
      "scaling_run.sh race, RANKS=4 on 2 GPUs: ranks under own_host.sh; other buckets within 1e-4, the rest bitwise", out + err)
rc, out, err = sh(root, "scaling_run.sh", ["race", "probe"], env=dict(PATH=path, RANKS="4"))
check(rc == 2 and err.strip() == "scaling_run.sh: 'probe' measures the GPUs; with RANKS=4 on 2 GPU(s) the ranks share them (only equal, race)"
      and out == "", "scaling_run.sh, RANKS=4 on 2 GPUs: a timed part refused in one line, exit 2, nothing run", out + err)
root = tree("multi_gpu.sh", "own_host.sh")
path = gpu_tools(root, gpus=1)
rc, out, err = sh(root, "multi_gpu.sh", ["equal", "bench"], env=dict(PATH=path, RANKS="2"))
check(rc == 2 and err.strip() == "multi_gpu.sh: 'bench' times the GPUs; with RANKS=2 on 1 GPU(s) the ranks share them "
      "(only equal env graphs spike hellaswag resume)" and out == "" and not os.path.exists(os.path.join(root, "out/eq_fp32_1gpu.log")),
      "multi_gpu.sh, RANKS=2 on 1 GPU: a timed section refused in one line, exit 2, nothing run", out + err)
# multi_gpu.sh resume, RANKS=2 on 1 stand-in GPU: the trainer (log.jsonl in -o: steps 1-20, or 1-10 then exit 137 with --debug-exit-after 10, and
# a --resume appends 6-20 (from step 5's checkpoint), refused in one line by another rank count; with
# STANDIN_RESUME_DRIFT the resumed ZeRO-1 run's step 15 differs)
STANDIN_TRAINER_RESUME = r'''#!/usr/bin/env bash
out=""; z=0; stop=0; resume=0; ranks=${STANDIN_RANKS:-1}
while [ $# -gt 0 ]; do case $1 in -o) out=$2; shift;; --zero) z=$2; shift;; --debug-exit-after) stop=$2; shift;;
    --resume) resume=1;; esac; shift; done
mkdir -p "$out"
if [ $resume = 1 ]; then
    read -r was zw < "$out/ckpt"
    [ "$was" != "$ranks" ] && { echo "error: $out/ckpt: checkpoint written by $was GPUs, this run has $ranks" >&2; exit 1; }
    z=$zw; first=6; echo "resumed from $out/step_00000005 at step 5"
else first=1; echo "$ranks $z" > "$out/ckpt"; fi
for s in $(seq $first 20); do l=7.$s$z; [ -n "${STANDIN_RESUME_DRIFT:-}" ] && [ $resume = 1 ] && [ $z = 1 ] && [ $s = 15 ] && l=7.999
    echo "{\"type\": \"step\", \"step\": $s, \"loss\": $l}" >> "$out/log.jsonl"; [ "$s" = "$stop" ] && exit 137; done
exit 0
'''
root = tree("multi_gpu.sh", "own_host.sh")
path = gpu_tools(root, gpus=1)
write(os.path.join(root, "build/bf16/train_gpt2cu"), STANDIN_TRAINER_RESUME, exe=True)
for drift in ("", "1"):
    shutil.rmtree(os.path.join(root, "runs"), ignore_errors=True)
    rc, out, err = sh(root, "multi_gpu.sh", ["resume"], env=dict(PATH=path, RANKS="2", STANDIN_RESUME_DRIFT=drift))
    lines = lines_with(out, "resume 2 GPUs zero=")
    oks = ["killed rc=137 after step 10, resumed rc=0 at step 5" in l and "log.jsonl: OK 20 steps" in l for l in lines]
    check(rc == 0 and len(lines) == 2 and oks == ([True, True] if not drift else [True, False]) and
          "that checkpoint resumed on 1 GPU: rc=1 error: runs/mgpu_resume_b_z1/ckpt: checkpoint written by 2 GPUs, this run has 1" in out,
          f"multi_gpu.sh resume, RANKS=2: straight vs killed + resumed, DDP and ZeRO-1{', a drift in ZeRO-1 named' if drift else ''}; "
          "the 1-GPU resume refused", out + err)
# multi_gpu.sh on 2 stand-in GPUs: the branches a machine of 2 distinct GPUs takes (no own_host.sh;
# the timed sections run). The trainer records each call (its ranks, host id, P2P and NVLS
# settings, CUDA_VISIBLE_DEVICES, LOCAL_RANK, arguments); a run of several ranks logs losses 1e-4
# (relative) above the 1-rank run's: within BF16's 0.5 %, outside #6's 1e-5 for FP32
STANDIN_TRAINER_CALLS = r'''#!/usr/bin/env bash
echo "ranks=${STANDIN_RANKS:-${WORLD_SIZE:-1}} host=${NCCL_HOSTID:-none} p2p=${NCCL_P2P_DISABLE:-unset} nvls=${NCCL_NVLS_ENABLE:-unset} gpu=${CUDA_VISIBLE_DEVICES:-all} local=${LOCAL_RANK:-} | $*" >> "$CALLS"
l=5.000000; [ "${STANDIN_RANKS:-${WORLD_SIZE:-1}}" != 1 ] && l=5.000500
for s in 1 2 3; do echo "step    $s/3 | loss $l | norm 1.2345 | lr 3.00e-04 | scale 1 | 10.0 ms (fwd 4.0 bwd 6.0 exposed comm 0.0 %) | 100 tok/s"; done
echo "RESULT precision=bf16 gpus=${STANDIN_RANKS:-${WORLD_SIZE:-1}} median_ms=10.0 tok_per_s=1000 mean_ms=10.0 tok_per_s_mean=1000 fwd_ms=4.0 bwd_ms=6.0 exposed_comm_pct=0.00 busbw_gbs=0.0 bwd_last_ms=6.0 bwd_other_ms=6.0"
'''
root = tree("multi_gpu.sh", "own_host.sh", "graphs_ab.sh", "trainer_ab.sh")
for p in ("fp32", "bf16", "nompi"):
    write(os.path.join(root, f"build/{p}/train_gpt2cu"), STANDIN_TRAINER_CALLS, exe=True)
calls_file = os.path.join(root, "calls.txt")
rc, out, err = sh(root, "multi_gpu.sh", ["equal", "int8", "bench", "env", "ceiling", "graphs"],
                  env=dict(PATH=gpu_tools(root, gpus=2), CALLS=calls_file, REPEAT="1", GRAPH_SHAPES="4x128"), timeout=180)
calls = [c.split(" | ", 1) for c in open(calls_file).read().splitlines()] if os.path.exists(calls_file) else []
summary = out.split("================ summary\n", 1)[-1].splitlines()
eq = {p: [x for x in summary if x.startswith(f"equal {p} 1gpu vs 2gpu")] for p in ("fp32", "bf16")}
check(rc == 0 and len(eq["fp32"]) == 2 and all(": FAIL 3 steps: step-1 rel diff 1.00e-04" in x and "(tol 1e-05)" in x for x in eq["fp32"]) and
      len(eq["bf16"]) == 2 and all(": OK 3 steps" in x and "(tol 0.005)" in x for x in eq["bf16"]),
      "multi_gpu.sh equal, 2 GPUs: FP32's curves held to #6's 1e-5 (1e-4 apart: FAIL), BF16's to 0.5 % (OK)", out + err)
check(calls and all(" host=none " in c[0] and " nvls=0 " in c[0] for c in calls),
      "multi_gpu.sh, 2 GPUs: no rank under own_host.sh, NCCL_NVLS_ENABLE=0 in every run", calls)
bench = [c[0].split()[:3] for c in calls if c[1].startswith("--bench -b 64 -t 1024 -d 524288 --bench-warmup 2 --bench-steps 6 --zero")]
check(bench == [["ranks=2", "host=none", f"p2p={p}"] for p in "0011"] and
      "1 GPU:            RESULT precision=bf16 gpus=1" in out and out.count("2 GPU P2P_DISABLE=") == 4,
      "multi_gpu.sh bench, 2 GPUs: 1 GPU alone, then DDP and ZeRO-1 on 2 ranks with P2P on, then off", out + err)
int8 = [(c[0].split()[2], c[1].split()[-1]) for c in calls if c[0].startswith("ranks=2 ") and
        c[1].startswith("--bench -b 64 -t 1024 -d 524288") and "--grad-int8" in c[1]]
check(int8 == [("p2p=0", "0"), ("p2p=0", "1"), ("p2p=1", "0"), ("p2p=1", "1")],
      "multi_gpu.sh int8, 2 GPUs: timed at GPT-2's batch, with and without --grad-int8, P2P on and off", int8)
env_ranks = sorted(c[0].split()[5] for c in calls if c[0].startswith("ranks=2 ") and "--rendezvous" not in c[1] and "-b 8 -t 1024" in c[1])
check(env_ranks == ["local=0", "local=0", "local=1", "local=1"], "multi_gpu.sh env, 2 GPUs: the env launch gives each rank its own GPU "
      "(LOCAL_RANK 0 and 1; MPI and NO_MPI builds)", calls)
indep = sorted(c[0].split()[4] for c in calls if c[0].startswith("ranks=1 ") and " gpu=all" not in c[0])
check(indep == ["gpu=0", "gpu=1"] and any(x.startswith("ceiling 1: 1 GPU alone 1000 | 2 independent 1-GPU runs at once 1000 1000 | 2-GPU DDP 1000")
                                          for x in summary), "multi_gpu.sh ceiling, 2 GPUs: one independent run per GPU", out + err)
check(len([x for x in summary if x.startswith("graphs speed: MEAN ")]) == 2 and
      len([x for x in summary if x.startswith("graphs zero=") and "equal with and without graphs" in x]) == 4,
      "multi_gpu.sh graphs, 2 GPUs: exactness (FP32, BF16; DDP, ZeRO-1) and the speed A/B", out + err)
# scaling_run.sh probe and scaling on 2 stand-in GPUs (RANKS unset: the parts that time the GPUs):
# the probe alone (P2P on, then off), then one process per GPU over sockets; the table's rows, each
# type with its transport (P2P off only where the type says so, sockets under own_host.sh), NVLink
# multicast off in every run
STANDIN_PROBE = r"""#!/usr/bin/env bash
echo "probe ranks=${STANDIN_RANKS:-1} host=${NCCL_HOSTID:-none} p2p=${NCCL_P2P_DISABLE:-unset} nvls=${NCCL_NVLS_ENABLE:-unset} gpus=${CUDA_VISIBLE_DEVICES:-all} | $*" >> "$CALLS"
[ "${1:-}" = --no-p2p-matrix ] || echo "P2P enabled: unidirectional GB/s | bidirectional GB/s | latency us"
echo "ALLREDUCE_FIT gpus=2 p2p_disable=${NCCL_P2P_DISABLE:-0} alpha_us=30.0 busbw_gbs=300.0"
"""
root = tree("scaling_run.sh", "own_host.sh")
for f in ("dev/scaling.py", "dev/configs.py"):
    shutil.copy2(os.path.join(ROOT, f), os.path.join(root, f))
calls_file = os.path.join(root, "calls.txt")
write(os.path.join(root, "build/interconnect"), STANDIN_PROBE, exe=True)
write(os.path.join(root, "build/bf16/train_gpt2cu"), TRAINER_STANDIN.replace("a = sys.argv\n", "a = sys.argv\nopen(os.environ['CALLS'], 'a').write("
      "' '.join(f'{k}={os.environ.get(k, \"-\")}' for k in ('STANDIN_RANKS', 'NCCL_HOSTID', 'NCCL_P2P_DISABLE', 'NCCL_NVLS_ENABLE')) + ' | ' + ' '.join(a[1:]) + '\\n')\n"),
      exe=True)
rc, out, err = sh(root, "scaling_run.sh", ["probe", "scaling"], env=dict(PATH=gpu_tools(root, gpus=2), CALLS=calls_file, BLOCKS="1024,128", STEPS="5"),
                  timeout=180)
calls = open(calls_file).read().splitlines() if os.path.exists(calls_file) else []
probes = [c.split(" | ")[0] for c in calls if c.startswith("probe ")]
check(rc == 0 and probes[:3] == ["probe ranks=1 host=none p2p=unset nvls=0 gpus=all", "probe ranks=1 host=none p2p=1 nvls=0 gpus=all",
                                 "probe ranks=2 host=own-host-rank0 p2p=unset nvls=0 gpus=all"] and
      out.count("ALLREDUCE_FIT gpus=2") == 3, "scaling_run.sh probe, 2 GPUs: P2P on, P2P off, then one process per GPU over sockets", out + err)
trainer = [c for c in calls if not c.startswith("probe ")]
want = {"DDP": "STANDIN_RANKS=2 NCCL_HOSTID=- NCCL_P2P_DISABLE=0 NCCL_NVLS_ENABLE=0", "DDP, P2P off": "STANDIN_RANKS=2 NCCL_HOSTID=- NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0",
        "ZeRO-1": "STANDIN_RANKS=2 NCCL_HOSTID=- NCCL_P2P_DISABLE=0 NCCL_NVLS_ENABLE=0", "DDP, sockets": "STANDIN_RANKS=2 NCCL_HOSTID=own-host-rank0 NCCL_P2P_DISABLE=0 NCCL_NVLS_ENABLE=0",
        "DDP int8, P2P off": "STANDIN_RANKS=2 NCCL_HOSTID=- NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0"}
rows = [l for l in out.splitlines() if l.startswith("| d12 | ")]
check(len(trainer) == 24 and [c.split(" | ")[0] for c in trainer[:6]] == ["STANDIN_RANKS=- NCCL_HOSTID=- NCCL_P2P_DISABLE=0 NCCL_NVLS_ENABLE=0"] + list(want.values()) and
      len(rows) == 24 and [r.split(" | ")[4] for r in rows[:6]] == ["DDP"] + list(want) and
      all(r.split(" | ")[1] == ("1" if i % 6 == 0 else "2") for i, r in enumerate(rows)),
      "scaling_run.sh scaling, 2 GPUs: 2 blocks x 2 modes, the 1-GPU row and the 5 types on 2 GPUs each, each type's transport", out + err)
# faults.sh nan on 2 stand-in GPUs: the two ranks one per GPU (no own_host.sh); on 1 GPU they share it under own_host.sh
STANDIN_NAN = r"""#!/usr/bin/env bash
echo "${NCCL_HOSTID:-none}" >> "$HOSTS"
for s in 5 6 7; do echo "step    $s/20 | loss nan | norm nan | skipped: non-finite gradients on rank 1"; done
echo "error: 3 bad steps in a row (--max-bad-steps 3)"; exit 2
"""
for gpus, want in ((2, ["none"]), (1, ["own-host-rank0"])):
    root = tree("faults.sh", "own_host.sh")
    hosts = os.path.join(root, "hosts.txt")
    for p in ("bf16", "fp16"):
        write(os.path.join(root, f"build/{p}/train_gpt2cu"), STANDIN_NAN, exe=True)
    rc, out, err = sh(root, "faults.sh", ["nan"], env=dict(PATH=gpu_tools(root, gpus=gpus), HOSTS=hosts, FAULTS_LOGS=os.path.join(root, "logs")))
    lines = [l for l in out.splitlines() if l.startswith("nan ")]
    check(rc == 0 and len(lines) == 2 and all(re.match(r"nan (bf16|fp16): rc=2 after [0-9.]+ s; 3 skipped steps;", l) for l in lines) and
          sorted(set(open(hosts).read().split())) == want,
          f"faults.sh nan, {gpus} GPU(s): {'one rank per GPU' if gpus == 2 else 'the ranks under own_host.sh'}, rc 2 and the skips", out + err)
# ---------------------------------------------------------------------------------------------
# dev/ranks_check.sh (make test's 2 ranks on one GPU): stand-ins for data/tokenize, mpirun and
# the trainer (8 step lines; with STANDIN_RACE, --bucket-mb 0
# changes step 8's loss; with STANDIN_FAIL, --zero 1 fails); a failed run is one FAIL line and
# leaves out its comparison
STANDIN_TRAINER_STEPS = r'''#!/usr/bin/env bash
[ "$1" = --help ] && { echo "build: precision ${STANDIN_PRECISION:-bf16}"; exit 0; }
b=x; z=0
while [ $# -gt 0 ]; do case $1 in --bucket-mb) b=$2; shift;; --zero) z=$2; shift;; esac; shift; done
[ -n "${STANDIN_FAIL:-}" ] && [ "$z" = 1 ] && { echo "rank 0: error: stand-in failure" >&2; exit 1; }
echo "${NCCL_HOSTID:-none}" >> "$HOSTS"
for s in 1 2 3 4 5 6 7 8; do l=9.12345$s; [ -n "${STANDIN_RACE:-}" ] && [ "$b" = 0 ] && [ $s = 8 ] && l=9.123999
    echo "step    $s/8 | loss $l | norm 1.0"; done
'''
root = tree("own_host.sh")
os.makedirs(os.path.join(root, "dev"), exist_ok=True)
shutil.copy2(os.path.join(ROOT, "dev/ranks_check.sh"), os.path.join(root, "dev/ranks_check.sh"))
write(os.path.join(root, "data/tokenize"), "#!/bin/sh\n[ -f \"$1\" ] || { echo \"tokenize: $1: cannot open\"; exit 1; }\n", exe=True)
write(os.path.join(root, "train_gpt2cu"), STANDIN_TRAINER_STEPS, exe=True)
write(os.path.join(root, "text.txt"), "text\n")
path = gpu_tools(root)
hosts = os.path.join(root, "hosts.txt")


def ranks_check(env=None, args=("./train_gpt2cu", "text.txt")):
    if os.path.exists(hosts):
        os.remove(hosts)
    return sh(root, "ranks_check.sh", args, env=dict(PATH=path, HOSTS=hosts, **(env or {})), timeout=60, where="dev")


rc, out, err = ranks_check()
check(rc == 0 and out.count("PASS ") == 5 and "(tol 5e-3)" in out and out.strip().endswith("5 passed, 0 failed") and
      out.count("--grad-int8 1 (tol 5e-3)") == 2 and open(hosts).read().split() == ["none"] + ["own-host-rank0"] * 5,
      "ranks_check.sh: 5 comparisons pass (--grad-int8's two among them); the 2-rank runs under own_host.sh, the 1-rank run not", out + err)
rc, out, err = ranks_check({"STANDIN_PRECISION": "fp32"})
check(rc == 0 and out.count("(tol 1e-5)") == 2 and out.count("--grad-int8 1 (tol 5e-3)") == 2,
      "ranks_check.sh: an FP32 trainer is held to 1e-5 (--grad-int8 to 5e-3)", out + err)
rc, out, err = ranks_check({"STANDIN_RACE": "1"})
check(rc == 1 and "FAIL 2 ranks, one bucket per block vs 16 MB buckets (equal)" in out and
      out.strip().endswith("4 passed, 1 failed"), "ranks_check.sh: a difference between the buckets' runs fails, exit 1", out + err)
rc, out, err = ranks_check({"STANDIN_FAIL": "1"})
check(rc == 1 and "FAIL run zero1 (2 rank(s)): rank 0: error: stand-in failure" in out and "ZeRO-1" not in out and
      "FAIL run zero1_int8 (2 rank(s))" in out and out.strip().endswith("3 passed, 2 failed"), "ranks_check.sh: a failed run is one FAIL line naming its error, its comparison left out", out + err)
# without mpirun: the environment-variable launch, each rank under own_host.sh (the stand-in trainer
# records RANK through NCCL_HOSTID), a failed rank is a failed run
bare = os.path.join(root, "bare")
os.makedirs(bare, exist_ok=True)
for tool in ("bash", "python3", "mktemp", "seq", "cat", "grep", "tail", "rm", "dirname", "mkdir"):
    found = shutil.which(tool)
    if found and not os.path.exists(os.path.join(bare, tool)):
        os.symlink(found, os.path.join(bare, tool))
STANDIN_TRAINER_RANKED = STANDIN_TRAINER_STEPS.replace('echo "${NCCL_HOSTID:-none}" >> "$HOSTS"',
    'echo "${NCCL_HOSTID:-none}" >> "$HOSTS"; [ -n "${STANDIN_FAIL_RANK1:-}" ] && [ "${RANK:-0}" = 1 ] && exit 3')
write(os.path.join(root, "train_gpt2cu"), STANDIN_TRAINER_RANKED, exe=True)
saved_path, path = path, bare
rc, out, err = ranks_check()
check(rc == 0 and out.strip().endswith("5 passed, 0 failed") and
      sorted(open(hosts).read().split()) == ["none"] + ["own-host-rank0"] * 5 + ["own-host-rank1"] * 5,
      "ranks_check.sh without mpirun: the env launch, every rank under own_host.sh", out + err)
rc, out, err = ranks_check({"STANDIN_FAIL_RANK1": "1"})
check(rc == 1 and out.count("FAIL run ") == 5 and out.strip().endswith("0 passed, 5 failed"),
      "ranks_check.sh without mpirun: a rank that fails makes its run fail", out + err)
path = saved_path
write(os.path.join(root, "train_gpt2cu"), STANDIN_TRAINER_STEPS, exe=True)
for args, msg in ((["./no_trainer", "text.txt"], "ranks_check.sh: ./no_trainer: not built (make train_gpt2cu data/tokenize)"),
                  (["./train_gpt2cu", "missing.txt"], "ranks_check.sh: data/tokenize missing.txt failed: tokenize: missing.txt: cannot open")):
    rc, out, err = ranks_check(args=args)
    check(rc == 2 and err.strip() == msg and out == "", f"ranks_check.sh {' '.join(args)}: one line, exit 2", out + err)
# a usage error: one line on stderr, exit 2, nothing run
rc, out, err = sh(tree("scaling_run.sh"), "scaling_run.sh", ["rcae"])
check(rc == 2 and err.strip() == "scaling_run.sh: unknown part 'rcae' (probe, equal, scaling, race)" and out == "",
      "scaling_run.sh with an unknown part: one line, exit 2", out + err)
# stop_signal.sh, with a stand-in trainer that behaves as the real one on a signal: it finishes its
# step (20 ms), writes a "checkpoint" (the step, in -o DIR) and exits 4; a second signal of the same
# kind gets the default action; --resume goes on from the checkpoint; ranks of one run share a stop
# request through a file in -o DIR (the real trainer: its loss all-reduce), only rank 0 prints
STANDIN_TRAINER_STOP = r"""#!/usr/bin/env bash
x=100; out=""; resume=0; bench=0
while [ $# -gt 0 ]; do case $1 in -x) x=$2; shift;; -o) out=$2; shift;; --resume) resume=1;; --bench) bench=1;;
    --bench-steps) x=$(( $2 + 2 )); shift;; esac; shift; done
rank=${RANK:-${OMPI_COMM_WORLD_RANK:-0}}; world=${WORLD_SIZE:-1}
[ -n "${HOSTS:-}" ] && echo "${STANDIN_RANKS:-$world} ${NCCL_HOSTID:-none}" >> "$HOSTS"   # the ranks' count, and the host id own_host.sh gives
say() { [ "$rank" = 0 ] && echo "$@"; }
say "stand-in: $(grep SigIgn /proc/$$/status 2>/dev/null)"   # for a failure's report: was SIGINT (bit 1) ignored from the start?
stopfile=${out:-/tmp}/stop_request.$$; [ -n "$out" ] && { mkdir -p "$out"; stopfile=$out/stop_request; }
[ -z "$out" ] && trap 'rm -f "$stopfile"' EXIT   # leave no request file in /tmp
# a second signal: the default action's exit status, 128 + the signal's number (bash runs a trap
# between commands, hence the short sleeps). Not `trap - SIG; kill -SIG $$`: under load (a CI run)
# bash once spun forever in that self-kill, SIGINT and SIGCHLD blocked, its sleep child a zombie.
on() { if [ -f "$stopfile" ]; then exit $((128 + $(kill -l "$1"))); fi; echo "$1" > "$stopfile"; }
for sig in TERM INT USR1; do trap "on $sig" $sig; done
step=0
if [ $resume = 1 ] && [ -f "$out/ckpt" ]; then step=$(cat "$out/ckpt"); say "resumed from $out/step_$step at step $step"; fi
[ $resume = 1 ] || { [ -n "$out" ] && [ "$rank" = 0 ] && : > "$out/log.jsonl"; }
rm -f "$stopfile"   # a request left by an earlier run (in /tmp: by one with the same, recycled, pid) is not this run's
while [ $step -lt $x ]; do
    sleep 0.02; step=$((step + 1))
    loss=$(awk "BEGIN { printf \"%.6f\", 10 / $step }")
    say "$(printf 'step %4d/%d | loss %s | norm 1.0000 | 20.00 ms' $step $x $loss)"
    [ -n "$out" ] && [ "$rank" = 0 ] && echo "{\"type\":\"step\",\"step\":$step,\"loss\":$loss}" >> "$out/log.jsonl"
    sleep 0.01  # the other ranks' request arrives with the step's all-reduce
    if [ -f "$stopfile" ] && [ $step -lt $x ]; then
        # rank 0 writes the checkpoint (the stand-in's ranks are not kept in step, so the step a
        # later rank saw the request after must not overwrite it); writing it takes a while
        if [ -n "$out" ] && [ "$rank" = 0 ]; then
            mkdir -p "$out/step_$step.tmp"; for _ in $(seq 40); do sleep 0.01; done
            mv "$out/step_$step.tmp" "$out/step_$step"; echo $step > "$out/ckpt"; say "checkpoint: $out/step_$step"
        fi
        say "stopping after step $step of $x: $(cat "$stopfile") reached 1 of $world rank(s)"
        [ $bench = 1 ] && say "RESULT precision=bf16 steps=$((step - 2))"
        exit 4
    fi
done
[ -n "$out" ] && { echo $step > "$out/ckpt"; say "checkpoint: $out/step_$step"; }
exit 0
"""
root = tree("stop_signal.sh", "own_host.sh")
write(os.path.join(root, "build/bf16/train_gpt2cu"), STANDIN_TRAINER_STOP, exe=True)
hosts = os.path.join(root, "hosts.txt")
rc, out, err = sh(root, "stop_signal.sh", env={"PATH": gpu_tools(root, gpus=1), "HOSTS": hosts}, timeout=120)
summary = open(os.path.join(root, "out/stop_signal_summary.txt")).read().splitlines() if rc == 0 else []
def summary_line(prefix):
    found = [x for x in summary if x.startswith(prefix)]
    return found[0] if len(found) == 1 else ""
check(summary_line("SIGTERM after step 10: rc=4, stopping after step ") != "", "stop_signal.sh one: the stopped run's exit code and line",
      out + err)
check(re.search(r"resumed rc=0 .*100 losses vs straight: OK 100 steps", summary_line("   resumed rc=")),
      "stop_signal.sh one: the resumed run compared with the straight one, all 100 steps", out + err)
check(re.search(r"^two SIGINTs: rc=130 .*stop line: '', left in the run directory: log.jsonl (step_\d+.tmp )?stop_request $",
                summary_line("two SIGINTs")), "stop_signal.sh twice: the second SIGINT ends the process (130) during the checkpoint", out + err)
bench_log = os.path.join(root, "out/sig_bench.log")
check(re.search(r"^--bench, SIGINT: rc=4, stopping after .*; RESULT precision=bf16 steps=\d+$", summary_line("--bench, SIGINT")),
      "stop_signal.sh bench: exit 4 and the RESULT line",
      out + err + ("\nsig_bench.log: " + " | ".join(open(bench_log).read().splitlines()[:3] + open(bench_log).read().splitlines()[-3:])
                   if os.path.exists(bench_log) else ""))
check(re.search(r"^2 ranks, SIGUSR1 to rank 1 only: rc 4 / 4; rank 0 \(which got none\): stopping after step", summary_line("2 ranks")),
      "stop_signal.sh ranks: both ranks stop, rank 0 prints the line", out + err)
check(re.search(r"resumed rc 0 / 0; 100 losses vs a straight 2-rank run: OK 100 steps", summary_line("   resumed rc 0 / 0")),
      "stop_signal.sh ranks: the resumed pair against the straight pair", out + err)
for to in ("mpirun", "rank"):
    check(re.search(r"rc=4, stopping after step \d+ of 60", summary_line(f"mpirun -np 2, SIGUSR1 to {to}:")),
          f"stop_signal.sh ranks: under (stand-in) mpirun, the signal sent to {to}", out + err)
check(re.search(r"odls_base_sigkill_timeout 10, output to files, SIGTERM to mpirun: rc=4 after \d+ s, stopping after step (\d+) of 400.*; "
                r"run directory: .*\bstep_\1 ", summary_line("mpirun -np 2 --mca")),
      "stop_signal.sh ranks: SIGTERM to (stand-in) mpirun, each rank's output in its own file", out + err)
def multi_rank_hosts():
    return sorted(set(l.split(" ", 1)[1] for l in open(hosts).read().splitlines() if not l.startswith("1 "))) if os.path.exists(hosts) else []
check(multi_rank_hosts() == ["own-host-rank0", "own-host-rank1"], "stop_signal.sh ranks, 1 GPU: the 2 ranks share it under own_host.sh",
      multi_rank_hosts())
# on 2 GPUs: one GPU per rank, NCCL over what joins them (no own_host.sh: its sockets are what the
# 1-GPU machine already ran). Run in the same tree, so the first run's logs are in OUT: the waits
# for a step line must not read them (an mpirun that takes 0.5 s to start its ranks was sent its
# SIGTERM at once, on rank 0's old log, and died of it: rc 143)
os.remove(hosts)
rc, out, err = sh(root, "stop_signal.sh", ["ranks"], env={"PATH": gpu_tools(root, gpus=2), "HOSTS": hosts, "STANDIN_MPIRUN_DELAY": "0.5"},
                  timeout=120)
summary = open(os.path.join(root, "out/stop_signal_summary.txt")).read().splitlines() if rc == 0 else []
check(multi_rank_hosts() == ["none"] and re.search(r"^2 ranks, SIGUSR1 to rank 1 only: rc 4 / 4", summary_line("2 ranks")) and
      re.search(r"rc=4 after \d+ s, stopping after step (\d+) of 400.*; run directory: .*\bstep_\1 ", summary_line("mpirun -np 2 --mca")),
      "stop_signal.sh ranks, 2 GPUs: every multi-rank run one rank per GPU, not under own_host.sh; the stops as on 1 GPU "
      "(the earlier run's logs in OUT not read)",
      out + err + str(multi_rank_hosts()))
# gpu_count.sh, under which the scripts decide between one GPU per rank and own_host.sh: nvidia-smi
# -L lists every GPU of the machine (hidden ones too) and a MIG device as a line of its own
root = tree()
write(os.path.join(root, "tools/nvidia-smi"), "#!/bin/sh\necho 'GPU 0: stand-in'\necho '  MIG 1g.18gb Device 0: (UUID: MIG-x)'\n"
      "echo 'GPU 1: stand-in'\n", exe=True)
for visible, want in ((None, "2"), ("0", "1"), ("1,0", "2"), ("", "0"), ("GPU-a, GPU-b,", "2")):
    env = {"PATH": os.path.join(root, "tools") + ":" + os.environ["PATH"]}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    rc, out, err = sh(root, "gpu_count.sh", env=env)
    check(rc == 0 and out.strip() == want, f"gpu_count.sh with CUDA_VISIBLE_DEVICES={visible!r}: {want}", out + err)
rc, out, err = sh(tree("stop_signal.sh"), "stop_signal.sh", ["once"])
check(rc == 2 and err.strip() == "stop_signal.sh: unknown section 'once' (one twice bench ranks)" and out == "",
      "stop_signal.sh with an unknown section: one line, exit 2", out + err)
# x2_verify.sh: #6's two device calls on the 2-GPU machine; the scripts it runs are stand-ins that
# note how they were called (arguments, BLOCKS/STEPS, NVLS, P2P) and leave a summary
STANDIN_PART = """#!/usr/bin/env bash
echo "$(basename "$0") $* BLOCKS=${BLOCKS:-} STEPS=${STEPS:-} NVLS=${NCCL_NVLS_ENABLE:-} P2P=${NCCL_P2P_DISABLE:-unset}" >> "$CALLS"
mkdir -p "$OUT"; echo "summary of $(basename "$0") $*" > "$OUT/summary.txt"
[ -n "${STANDIN_SLEEP:-}" ] && sleep "$STANDIN_SLEEP"
exit 0
"""
root = tree("x2_verify.sh")
for s in ("scaling_run.sh", "multi_gpu.sh", "faults.sh", "stop_signal.sh"):
    write(os.path.join(root, "dev/device", s), STANDIN_PART, exe=True)
calls = os.path.join(root, "calls.txt")
def x2(args, gpus=2, **env):
    if os.path.exists(calls):
        os.remove(calls)
    rc, out, err = sh(root, "x2_verify.sh", args, env=dict(PATH=gpu_tools(root, gpus=gpus), CALLS=calls, **env))
    return rc, out, err, (open(calls).read().splitlines() if os.path.exists(calls) else [])
for args, gpus, env, says in (([], 2, {}, "x2_verify.sh: name the call: call1 or call2 (got '')"),
                              (["call1"], 1, {}, "x2_verify.sh: needs 2 distinct GPUs, this machine shows 1 (nvidia-smi -L / CUDA_VISIBLE_DEVICES)"),
                              (["call1"], 2, {"NCCL_P2P_DISABLE": "1"},
                               "x2_verify.sh: NCCL_P2P_DISABLE=1 is set: the P2P-on rows would run without P2P (unset it)")):
    rc, out, err, ran = x2(args, gpus, **env)
    check(rc == 2 and err.strip() == says and out == "" and ran == [], f"x2_verify.sh {' '.join(args)} on {gpus} GPU(s) {env}: one line, exit 2, nothing run",
          out + err)
rc, out, err, ran = x2(["call1"], NCCL_P2P_DISABLE="0")
check(rc == 0 and ran == ["scaling_run.sh  BLOCKS=1024,128 STEPS=5 NVLS=0 P2P=0", "multi_gpu.sh equal int8 bench BLOCKS= STEPS= NVLS=0 P2P=0"] and
      re.search(r"^scaling: rc=0 in \d+ s \(limit 330 s\)$", out, re.M) and re.search(r"^equal: rc=0 in \d+ s \(limit 250 s\)$", out, re.M) and
      "================ equal/summary.txt\nsummary of multi_gpu.sh equal int8 bench" in out and os.path.exists(os.path.join(root, "out/x2_logs.tgz")),
      "x2_verify.sh call1: scaling_run.sh (BLOCKS=1024,128 STEPS=5) then multi_gpu.sh equal int8 bench, NVLS off, summaries printed", out + err + str(ran))
rc, out, err, ran = x2(["call2"])
check(rc == 0 and ran == ["multi_gpu.sh env spike hellaswag resume BLOCKS= STEPS= NVLS=0 P2P=unset", "faults.sh kill nan peer BLOCKS= STEPS= NVLS=0 P2P=unset",
                          "stop_signal.sh ranks BLOCKS= STEPS= NVLS=0 P2P=unset", "multi_gpu.sh peers BLOCKS= STEPS= NVLS=0 P2P=unset"] and
      re.search(r"^peers: rc=0 in \d+ s \(limit 5\d\d s\)$", out, re.M),
      "x2_verify.sh call2: env spike hellaswag resume, faults, stop_signal ranks, then peers with the time left", out + err + str(ran))
# a part that runs past its time is stopped (its whole process group) and the parts that no longer fit are skipped
rc, out, err, ran = x2(["call2"], X2_BUDGET="3", X2_MIN_PART="1", STANDIN_SLEEP="60")
check(rc == 0 and len(ran) == 1 and re.search(r"^mg: rc=124 in [34] s \(limit 3 s\): TIMED OUT, its summary is partial$", out, re.M) and
      all(re.search(rf"^{p}: skipped \(-?\d+ s left in the call\)$", out, re.M) for p in ("faults", "stop", "peers")),
      "x2_verify.sh: a part past its limit stopped, the rest skipped", out + err + str(ran))
finish()
