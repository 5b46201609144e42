#!/usr/bin/env bash
# Issue #9's fault tests on a 2-GPU machine (binaries prebuilt: dev/device/build.sh; shards in dev_data):
#   kill   SIGKILL one rank at a random moment mid-run, 10 times with the env-var launch (only the
#          watchdog can end the survivor) and 5 times under mpirun; a rank still alive after
#          --nccl-timeout + 30 s counts as a hang; the exit times and the survivor's line are printed;
#   nan    --debug-nan 1:5: rank 1's gradients turn NaN from step 5 on; every rank skips those
#          steps and names rank 1; after --max-bad-steps 3 all ranks stop with exit code 2;
#   ckpt   one GPU: a run (a small GPT-2, 200 steps) with a checkpoint every 2 steps is SIGKILLed at
#          random moments 20 times and resumed each time; the losses of the finished run must
#          equal, bit for bit, those of a run never interrupted (the runs' log.jsonl: exact floats).
#   error  one GPU: a token outside the vocabulary in step 12's batch ends a d12 run (exit 1, one
#          line) while the step-10 checkpoint is being written in the background: the exit waits
#          for the write, so step_00000010 must be complete and --resume continue from it; the
#          same with --checkpoint-async 0 (the write done before step 11), and under mpirun -np 1
#          (comm_fail waits for the write before MPI_Abort).
#   peer   2 ranks (env launch): rank 1 SIGKILLed 0.1 s after rank 0 printed step 10, while rank
#          0 writes the step-10 checkpoint in the background: rank 0's watchdog sees the dead
#          peer, says it waits for the write, and exits (code 3) only after it, so
#          step_00000010 must be complete and a 2-rank --resume continue from it. Its ranks always
#          run under dev/device/own_host.sh (sockets), also on 2 GPUs: over NVLink a dead peer
#          shows only at --nccl-timeout, after the ~1.4 s write has ended, and nothing would wait.
# Each result line goes to stdout and $OUT/faults_summary.txt as it comes; logs in $OUT/faults.tar.gz
# (from $FAULTS_LOGS, default /tmp/faults, emptied first). On a 1-GPU machine the two ranks of
# `kill` and `nan` share the GPU, each a host of its own to NCCL (dev/device/own_host.sh: sockets
# on loopback, so a killed peer shows as a closed connection rather than as a silent NVLink peer).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOGS=${FAULTS_LOGS:-/tmp/faults}; rm -rf "$LOGS"; mkdir -p "$LOGS"
trap 'tar czf "$OUT/faults.tar.gz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" 2>/dev/null' EXIT
note() { echo "$*" | tee -a "$OUT/faults_summary.txt"; }
export NCCL_NVLS_ENABLE=0
sections=${*:-kill nan ckpt error peer}
has() { [[ " $sections " == *" $1 "* ]]; }
summary=()
BIN=build/bf16/train_gpt2cu
RUN=""; [ "$(dev/device/gpu_count.sh)" -lt 2 ] && RUN=dev/device/own_host.sh   # what each of 2 ranks runs under
TIMEOUT=5
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN {printf "%.1f", a - b}'; }   # seconds since $1 (a now)
# waits (up to $2 s) for the processes $1 (space-separated pids) to be gone; echoes the seconds taken
wait_gone() {
    local t0; t0=$(now)
    while :; do
        local alive=0
        for p in $1; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        if awk -v a="$(now)" -v b="$t0" -v m="$2" 'BEGIN {exit !(a - b > m)}'; then echo "HANG"; return; fi
        sleep 0.05
    done
    since "$t0"
}
source dev/device/wait_line.sh   # wait_for_line FILE PATTERN SECONDS PID
ARGS="--bench -e d12 -b 8 -t 1024 --bench-warmup 0 --bench-steps 100000 --nccl-timeout $TIMEOUT"
if has kill; then
    hangs=0; times=(); codes=()
    for trial in $(seq 1 10); do
        victim=$(( RANDOM % 2 )); log="$LOGS/kill_env_$trial"
        for r in 0 1; do
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29600 + trial)) RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r $RUN $BIN $ARGS > "$log.r$r" 2>&1 &
            eval "pid$r=$!"
        done
        wait_for_line "$log.r0" "^step    3/" 60 "$pid0"
        sleep "0.$(( RANDOM % 10 ))$(( RANDOM % 10 ))"
        eval "vpid=\$pid$victim"; eval "spid=\$pid$(( 1 - victim ))"
        kill -9 "$vpid"
        dt=$(wait_gone "$spid" $(( TIMEOUT + 30 )))
        [ "$dt" = HANG ] && { hangs=$((hangs + 1)); kill -9 "$spid"; }
        wait "$spid" 2>/dev/null; rc=$?
        msg=$(grep -h "error" "$log.r$(( 1 - victim ))" | head -n 1)
        times+=("$dt"); codes+=("$rc")
        note "env trial $trial: killed rank $victim; survivor gone after ${dt}s rc=$rc: $msg"
    done
    # the watchdog's exit code is 3 (llmc/comm.cuh); anything else (139: a crash) is named
    others=$(printf '%s\n' "${codes[@]}" | grep -vcx 3)
    note "kill one rank, env launch (watchdog, --nccl-timeout $TIMEOUT): 10 trials, $hangs hangs, $others survivors not exiting with code 3 (exit codes: ${codes[*]}), survivor gone after: ${times[*]} s"
    hangs=0; times=()
    for trial in $(seq 1 5); do
        log="$LOGS/kill_mpi_$trial.log"
        mpirun --allow-run-as-root -np 2 --bind-to none -x NCCL_NVLS_ENABLE $RUN $BIN $ARGS > "$log" 2>&1 &
        mpid=$!
        wait_for_line "$log" "^step    3/" 60 "$mpid"
        sleep "0.$(( RANDOM % 10 ))$(( RANDOM % 10 ))"
        ranks=$(pgrep -f "^$BIN" | tr '\n' ' ')
        victim=$(echo $ranks | tr ' ' '\n' | shuf -n 1)
        kill -9 "$victim"
        dt=$(wait_gone "$mpid $ranks" $(( TIMEOUT + 30 )))
        [ "$dt" = HANG ] && { hangs=$((hangs + 1)); kill -9 $mpid $ranks; }
        wait "$mpid" 2>/dev/null; rc=$?
        times+=("$dt")
        note "mpirun trial $trial: killed pid $victim of ($ranks); all gone after ${dt}s, mpirun rc=$rc: $(grep -m1 -iE 'error|terminated|killed|signal' "$log")"
    done
    note "kill one rank, mpirun: 5 trials, $hangs hangs, all ranks gone after: ${times[*]} s"
fi
if has nan; then
    for p in bf16 fp16; do
        log="$LOGS/nan_$p.log"
        t0=$(now)
        mpirun --allow-run-as-root -np 2 --bind-to none -x NCCL_NVLS_ENABLE $RUN build/$p/train_gpt2cu --bench -e d12 -b 8 -t 1024 \
            --bench-warmup 0 --bench-steps 20 --debug-nan 1:5 --max-bad-steps 3 > "$log" 2>&1
        rc=$?
        note "nan $p: rc=$rc after $(since "$t0") s; $(grep -c 'skipped: non-finite' "$log") skipped steps; $(grep -m1 'skipped: non-finite' "$log"); $(grep -m1 '^error' "$log")"
    done
fi
if has ckpt; then
    # a small GPT-2 (L=2, C=128, NH=2: head size 64 like every GPT-2; 6.9 M parameters, an 82 MB
    # checkpoint) so that 20 kills and resumes take a minute; the code path is the d12 one
    python3 - <<'PY'
import numpy as np, sys
sys.path.insert(0, "dev")
from model_file import param_shapes, write_model, padded_vocab
cfg = {"maxT": 256, "V": 50257, "L": 2, "NH": 2, "C": 128}
rng = np.random.default_rng(0)
shapes = param_shapes(dict(cfg, Vp=padded_vocab(cfg["V"])))
params = {n: (np.ones(sh) if n.endswith("w") and n.startswith("ln") else
              np.zeros(sh) if n.endswith("b") else rng.normal(0, 0.02, sh)).astype(np.float32) for n, sh in shapes.items()}
write_model("/tmp/tiny_model.bin", params, cfg)
PY
    common="-e /tmp/tiny_model.bin -b 4 -t 256 -x 200 -l 1e-3 --warmup 5 -i dev_data/tinyshakespeare_train.bin -g 0 -v 0 --val-batches 1 -n 2 --keep-checkpoints 2 --gemm-tune ${GEMM_TUNE:-0}"
    rm -rf runs/ck_a runs/ck_b
    $BIN $common -o runs/ck_a > "$LOGS/ckpt_a.log" 2>&1
    # with --gemm-tune 1 (GEMM_TUNE=1): the same GEMM algorithms as the uninterrupted run (two fresh
    # runs may time near-ties apart): its choices file in ck_b, which every resume then reads
    mkdir -p runs/ck_b && { [ ! -f runs/ck_a/gemm_algos.txt ] || cp runs/ck_a/gemm_algos.txt runs/ck_b/; }
    kills=0; mid=0; : > "$LOGS/ckpt_b.log"
    for seg in $(seq 1 40); do
        $BIN $common -o runs/ck_b --resume > "$LOGS/ckpt_b_$seg.log" 2>&1 &
        pid=$!
        wait_for_line "$LOGS/ckpt_b_$seg.log" "^step " 60 "$pid"
        sleep "0.$(( RANDOM % 10 ))$(( RANDOM % 10 ))"
        if kill -9 "$pid" 2>/dev/null; then
            kills=$((kills + 1)); ls -d runs/ck_b/*.tmp > /dev/null 2>&1 && mid=$((mid + 1))
        fi
        wait "$pid" 2>/dev/null
        cat "$LOGS/ckpt_b_$seg.log" >> "$LOGS/ckpt_b.log"
        [ $kills -ge 20 ] && break
        grep -q "checkpoint: runs/ck_b/step_00000200" "$LOGS/ckpt_b_$seg.log" && break
    done
    $BIN $common -o runs/ck_b --resume > "$LOGS/ckpt_b_final.log" 2>&1; cat "$LOGS/ckpt_b_final.log" >> "$LOGS/ckpt_b.log"
    # the last occurrence of each step (after the last resume that reached it), in step order
    grep -hE '^step +[0-9]+/' "$LOGS/ckpt_b.log" | awk '{split($2, a, "/"); last[a[1] + 0] = $0} END {for (i = 1; i <= 200; i++) print last[i]}' > "$LOGS/ckpt_b_final_steps.log"
    # the exact losses (9 digits) of both runs' log.jsonl: ck_b's holds every segment, appended, and
    # compare_losses.py counts the last record of each step (after the last resume that reached it)
    cp runs/ck_a/log.jsonl "$LOGS/ckpt_a.jsonl" 2>/dev/null; cp runs/ck_b/log.jsonl "$LOGS/ckpt_b.jsonl" 2>/dev/null
    # each resume must continue at its checkpoint's next step: a run that went back to step 1 would
    # still end with the same last records, which is all the loss comparison sees
    resumes=0; off=0
    for f in "$LOGS"/ckpt_b_*.log; do
        at=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$f" | head -n 1)
        [ -n "$at" ] || continue
        resumes=$((resumes + 1))
        first=$(grep -m1 -oE '^step +[0-9]+' "$f" | grep -oE '[0-9]+$')
        [ -z "$first" ] || [ "$first" -eq $((at + 1)) ] || off=$((off + 1))
    done
    note "resume positions: $resumes resumes, $off not continuing at their checkpoint's step + 1: $([ $resumes -gt 0 ] && [ $off -eq 0 ] && echo OK || echo FAIL)"
    note "checkpoint kills: $kills SIGKILLs ($mid during a write: .tmp present), $(grep -c '^resumed from' "$LOGS/ckpt_b.log") resumes ($(grep -h '^resumed from' "$LOGS/ckpt_b.log" | awk '{print $NF}' | tr '\n' ' ')); losses vs uninterrupted (log.jsonl): $(python3 dev/compare_losses.py runs/ck_a/log.jsonl runs/ck_b/log.jsonl --tol 0)"
    rm -rf runs/ck_a runs/ck_b
fi
if has error; then
    rm -rf runs/err_bg runs/err_fg; cp dev_data/tinyshakespeare_train.bin /tmp/faults_bad.bin
    # d12, B=8, T=1024: 8192 tokens a step, so position 8192*11 + 100 is in step 12's batch
    python3 -c "import struct; f = open('/tmp/faults_bad.bin', 'r+b'); f.seek(1024 + 2 * (8192 * 11 + 100)); f.write(struct.pack('<H', 65535))"
    for mode in bg fg mpi; do
        launch=""; [ $mode = mpi ] && launch="mpirun --allow-run-as-root -np 1 --bind-to none"
        $launch $BIN -e d12 -b 8 -t 1024 -g 0 -x 40 -n 10 -i /tmp/faults_bad.bin -o runs/err_$mode --checkpoint-async $([ $mode = fg ] && echo 0 || echo 1) \
            > "$LOGS/error_$mode.log" 2>&1; rc=$?
        $BIN -o runs/err_$mode --resume -x 10 > "$LOGS/error_${mode}_resume.log" 2>&1
        at=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$LOGS/error_${mode}_resume.log")
        ok=$([ $rc -eq 1 ] && [ -f runs/err_$mode/step_00000010/DONE ] && [ "$at" = 10 ] && echo OK || echo FAIL)
        what=$([ $mode = bg ] && echo "a background" || { [ $mode = fg ] && echo "a foreground" || echo "a background (mpirun -np 1)"; })
        note "error during $what checkpoint write: rc=$rc (1), $(grep -m1 'error:' "$LOGS/error_$mode.log" | cut -c1-150); run directory: $(ls runs/err_$mode | tr '\n' ' '); --resume from step ${at:-none}: $ok"
    done
    rm -rf runs/err_bg runs/err_fg runs/err_mpi /tmp/faults_bad.bin
fi
if has peer; then
    rm -rf runs/peer; log="$LOGS/peer"
    for r in 0 1; do
        MASTER_ADDR=127.0.0.1 MASTER_PORT=29650 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r dev/device/own_host.sh $BIN -e d12 -b 8 -t 1024 -g 0 -x 40 -n 10 \
            --nccl-timeout $TIMEOUT -o runs/peer > "$log.r$r" 2>&1 &
        eval "pid$r=$!"
    done
    wait_for_line "$log.r0" "^step   10/" 120 "$pid0"
    sleep 0.1
    kill -9 "$pid1"
    dt=$(wait_gone "$pid0" $(( TIMEOUT + 330 )))
    [ "$dt" = HANG ] && kill -9 "$pid0"
    wait "$pid0" 2>/dev/null; rc=$?
    waited=$(grep -c '^note: waiting for the background checkpoint write' "$log.r0")
    order=$(grep -E 'error:|^note: waiting|^checkpoint: runs/peer/step_00000010' "$log.r0" | cut -c1-60 | tr '\n' '|')
    for r in 0 1; do
        MASTER_ADDR=127.0.0.1 MASTER_PORT=29651 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r $RUN $BIN -o runs/peer --resume -x 12 > "$log.resume.r$r" 2>&1 &
        eval "rpid$r=$!"
    done
    wait "$rpid0"; wait "$rpid1"
    at=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$log.resume.r0")
    ok=$([ "$rc" = 3 ] && [ "$waited" = 1 ] && [ -f runs/peer/step_00000010/DONE ] && [ "$at" = 10 ] && echo OK || echo FAIL)
    note "peer killed during rank 0's background checkpoint write: rank 0 gone after ${dt}s rc=$rc (3), waited for the write: $waited (1); rank 0's lines in order: $order run directory: $(ls runs/peer | tr '\n' ' '); 2-rank --resume from step ${at:-none}: $ok"
    rm -rf runs/peer
fi
