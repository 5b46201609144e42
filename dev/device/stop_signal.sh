#!/usr/bin/env bash
# Stopping on a signal (train_gpt2.cu, "Stopping on request"), checked on one GPU (`ranks`: on two):
#   one:    100 steps straight (d12, B=4, T=1024), against the same run sent SIGTERM once step 10
#           is printed: it finishes its step, writes a checkpoint, says so, exits 4; --resume then
#           gives the 100 losses of the straight run bit for bit (log.jsonl);
#   twice:  two SIGINTs 0.2 s apart: the second ends the process at once, during the checkpoint
#           the first one asked for (exit 130, the default action; no checkpoint, or an incomplete
#           step_N.tmp that --resume skips);
#   bench:  SIGINT during --bench: the RESULT line of the steps timed so far, exit 4;
#   ranks:  2 ranks (env launch), one per GPU on a machine with 2 or more, else sharing the GPU,
#           each under own_host.sh (sockets); SIGUSR1 sent to rank 1 alone: both stop after the same
#           step, exit 4, and the resumed pair gives a straight 2-rank run's losses bit for bit;
#           then under mpirun, SIGUSR1 sent to mpirun, and to one rank's process; and SIGTERM sent
#           to mpirun, given time to reach the ranks.
#   dev/device/stop_signal.sh [sections...]   (default: one twice bench ranks)
# Needs build/bf16/train_gpt2cu (dev/device/build.sh BF16) and dev_data/ (make data).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
sections=${*:-one twice bench ranks}
for s in $sections; do
    case $s in one|twice|bench|ranks) ;; *) echo "stop_signal.sh: unknown section '$s' (one twice bench ranks)" >&2; exit 2 ;; esac
done
has() { [[ " $sections " == *" $1 "* ]]; }
bin=build/bf16/train_gpt2cu
args="-e d12 -b 4 -t 1024 -x 100 -l 3e-4 --warmup 5 -i dev_data/tinyshakespeare_train.bin -j dev_data/tinyshakespeare_val.bin -g 0"
summary=()
source dev/device/wait_line.sh   # wait_for_line FILE PATTERN SECONDS PID
stop_line() { grep -h "^stopping" "$@" | head -n 1; }
# what each of `ranks`' 2 ranks runs under: nothing on 2 GPUs (NVLink), own_host.sh on 1 (as faults.sh)
RUN=""; [ "$(dev/device/gpu_count.sh)" -lt 2 ] && RUN=dev/device/own_host.sh
rm -rf runs/sig_*
# an earlier run's logs in OUT: wait_for_line would find its step lines before this run's process
# has truncated them, and signal that process as it starts (rc 143, no stop)
rm -f "$OUT"/sig_*.log "$OUT/stop_signal_summary.txt"
if has one; then
    $bin $args -o runs/sig_a > "$OUT/sig_a.log" 2>&1
    $bin $args -o runs/sig_b > "$OUT/sig_b1.log" 2>&1 & pid=$!
    wait_for_line "$OUT/sig_b1.log" "^step   10/" 60 $pid && kill -TERM $pid
    wait $pid; rc=$?
    $bin -o runs/sig_b --resume > "$OUT/sig_b2.log" 2>&1; rc2=$?
    summary+=("SIGTERM after step 10: rc=$rc, $(stop_line "$OUT/sig_b1.log")")
    summary+=("   resumed rc=$rc2 ($(grep -m1 -o 'resum[^,]*' "$OUT/sig_b2.log")); 100 losses vs straight: $(python3 dev/compare_losses.py runs/sig_a/log.jsonl runs/sig_b/log.jsonl --tol 0)")
fi
if has twice; then
    set -m  # job control: background jobs do not start with SIGINT ignored (which the trainer respects)
    # the second one lands while the first one's checkpoint (1.5 GB) is being written
    $bin $args -x 200 -o runs/sig_twice > "$OUT/sig_twice.log" 2>&1 & pid=$!
    wait_for_line "$OUT/sig_twice.log" "^step    3/" 60 $pid && { kill -INT $pid; sleep 0.2; kill -INT $pid; }
    wait $pid; rc=$?
    summary+=("two SIGINTs: rc=$rc (130: ended by the second), stop line: '$(stop_line "$OUT/sig_twice.log")', left in the run directory: $(ls runs/sig_twice | tr '\n' ' ')")
fi
if has bench; then
    set -m
    $bin --bench -b 8 -t 1024 --bench-warmup 2 --bench-steps 1000 > "$OUT/sig_bench.log" 2>&1 & pid=$!
    wait_for_line "$OUT/sig_bench.log" "^step   10/" 60 $pid && kill -INT $pid
    wait $pid; rc=$?
    summary+=("--bench, SIGINT: rc=$rc, $(stop_line "$OUT/sig_bench.log"); $(grep -o '^RESULT.*steps=[0-9]*' "$OUT/sig_bench.log")")
fi
if has ranks; then
    # env launch, 2 ranks: env_pair NAME [options] (logs $OUT/NAME_rank<r>.log)
    env_pair() {
        local name=$1; shift
        for r in 0 1; do
            RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
                $RUN $bin "$@" > "$OUT/${name}_rank$r.log" 2>&1 &
            pids[$r]=$!
        done
    }
    env_pair sig_ra $args -o runs/sig_ra; wait
    env_pair sig_rb $args -o runs/sig_rb
    # the background pid is rank 1's trainer (own_host.sh, where used, execs it)
    wait_for_line "$OUT/sig_rb_rank0.log" "^step    8/" 60 ${pids[0]} && kill -USR1 ${pids[1]}
    wait ${pids[0]}; rc0=$?; wait ${pids[1]}; rc1=$?
    summary+=("2 ranks, SIGUSR1 to rank 1 only: rc $rc0 / $rc1; rank 0 (which got none): $(stop_line "$OUT/sig_rb_rank0.log")")
    env_pair sig_rb2 -o runs/sig_rb --resume; wait ${pids[0]}; rc0=$?; wait ${pids[1]}; rc1=$?
    summary+=("   resumed rc $rc0 / $rc1; 100 losses vs a straight 2-rank run: $(python3 dev/compare_losses.py runs/sig_ra/log.jsonl runs/sig_rb/log.jsonl --tol 0)")
    # under mpirun: SIGUSR1 sent to mpirun (OpenMPI 4.1.6 does not pass it on: the run goes on to
    # its end), then to one rank's process (found by its absolute -o path, so a run of this script
    # in another checkout on the same machine is not signalled)
    for to in mpirun rank; do
        mpirun --allow-run-as-root -np 2 --bind-to none $RUN $bin $args -x 60 -o "$PWD/runs/sig_m_$to" > "$OUT/sig_mpi_$to.log" 2>&1 & pid=$!
        if wait_for_line "$OUT/sig_mpi_$to.log" "^step    5/" 60 $pid; then
            if [ $to = mpirun ]; then kill -USR1 $pid; else pkill -USR1 -n -f "train_gpt2cu .*$PWD/runs/sig_m_rank"; fi
        fi
        wait $pid; rc=$?
        summary+=("mpirun -np 2, SIGUSR1 to $to: rc=$rc, $(stop_line "$OUT/sig_mpi_$to.log" || true); last step: $(grep -h '^step' "$OUT/sig_mpi_$to.log" | tail -n 1 | cut -c1-14)")
    done
    # SIGTERM to mpirun: it sends the ranks SIGTERM odls_base_sigkill_timeout seconds later and
    # SIGKILL as long after that, and stops reading their output; with 10 s, and each rank's
    # output in its own file, the ranks stop after the same step and write their checkpoint
    t0=$SECONDS
    mpirun --allow-run-as-root -np 2 --bind-to none --mca odls_base_sigkill_timeout 10 \
        sh -c 'exec "$@" > "$0$OMPI_COMM_WORLD_RANK.log" 2>&1' "$OUT/sig_mpi_term_rank" \
        $RUN $bin $args -x 400 -o runs/sig_m_term > "$OUT/sig_mpi_term.log" 2>&1 & pid=$!
    sent="NOT SENT (no step 5 line, or the run ended first)"   # (a failure then says which side missed)
    wait_for_line "$OUT/sig_mpi_term_rank0.log" "^step    5/" 60 $pid && { t0=$SECONDS; kill -TERM $pid && sent="sent"; }
    wait $pid; rc=$?
    summary+=("mpirun -np 2 --mca odls_base_sigkill_timeout 10, output to files, SIGTERM to mpirun: rc=$rc after $((SECONDS - t0)) s, $(stop_line "$OUT/sig_mpi_term_rank0.log" || true); run directory: $(ls runs/sig_m_term 2>/dev/null | tr '\n' ' ')")
    [ "$rc" = 4 ] || summary+=("   the SIGTERM: $sent; rank 0's first line: $(head -n 1 "$OUT/sig_mpi_term_rank0.log" | cut -c1-120)")
fi
echo "================ summary"
printf '%s\n' "${summary[@]}" | tee "$OUT/stop_signal_summary.txt"
