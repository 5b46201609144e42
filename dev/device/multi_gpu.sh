#!/usr/bin/env bash
# Multi-GPU verification on a 2-GPU machine (any N works; N = number of visible GPUs):
#   1. correctness: 1 GPU vs N GPUs (DDP and ZeRO-1) at the same global batch, same init and
#      data, 20 steps on tinyshakespeare; loss curves compared step by step (dev/compare_losses.py:
#      FP32 within 1e-5, #6's bound, as dev/ranks_check.sh; otherwise 0.5 %);
#   2. throughput at T=1024 and a 524288-token global batch: 1 GPU, N GPUs with and without P2P,
#      DDP and ZeRO-1 (--bench);
#   3. the launch without MPI (RANK/WORLD_SIZE/LOCAL_RANK + TCP rendezvous), with the MPI build and
#      with the build without MPI (build/nompi, make NO_MPI=1); and launches that must be refused
#      at the id exchange (world sizes that differ, a rank twice), each process's exit code and time;
#   4. `ceiling`: where the last percent of scaling goes. REPEAT times: 1 GPU alone, then N
#      independent 1-GPU runs at once (one per GPU, no communication: what N GPUs give at best on
#      this host's power and clocks), then N-GPU DDP; then DDP under each NCCL setting in
#      NCCL_VARIANTS (space-separated VAR=value, e.g. NCCL_MAX_CTAS=4), which bounds how many SMs
#      the all-reduce takes from the backward it overlaps;
#   5. `interference`: the backward under the all-reduce against the others, for SM-sharing
#      settings (see the section);
#   6. `graphs`: CUDA graphs on N GPUs, exactness and speed (see the section);
#   7. `peers`: PyTorch's DDP (dev/torch_bench.py --ddp under torchrun, torch.compile, bf16 autocast)
#      at `bench`'s settings, 1 GPU and N GPUs with and without P2P: the scaling of the peer;
#   8. `spike`: the spike guard on N GPUs (see the section);
#   9. `hellaswag`: --hellaswag --eval-only on N GPUs against dev/hellaswag_reference.py and 1 GPU;
#  10. `resume`: checkpoints on N GPUs, DDP and ZeRO-1 (see the section);
#  11. `int8`: --grad-int8 1 (the gradients sent as int8): equal's loss curves, DDP and ZeRO-1,
#      against 1 GPU and against the same run without it; then (on real GPUs; with shared GPUs
#      the seed's small step over sockets) step time and exposed communication with it and without.
# Binaries prebuilt in build/<precision>/ (dev/device/build.sh); shards in dev_data (make data).
# RANKS=N (more than the visible GPUs): N ranks sharing the GPUs, each a host of its own to NCCL
# (dev/device/own_host.sh, sockets on loopback): the sections that check losses and exactness
# (equal env graphs spike hellaswag resume int8) run as on N GPUs; the timed ones are refused (the ranks share
# SMs and the wire is a socket), `graphs` skips its speed part, and `int8` times only the seed's small
# step over the sockets (a link that slow makes the bytes, not the GPU, the step's time).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
GPUS=$(dev/device/gpu_count.sh)
N=${RANKS:-$GPUS}
sections=${*:-equal bench env}
RUN=""   # what each rank runs under: nothing, or own_host.sh when the ranks share GPUs
if (( N > GPUS )); then
    RUN=dev/device/own_host.sh
    for s in $sections; do
        case $s in bench|ceiling|interference|peers)
            echo "multi_gpu.sh: '$s' times the GPUs; with RANKS=$N on $GPUS GPU(s) the ranks share them (only equal env graphs spike hellaswag resume)" >&2
            exit 2 ;;
        esac
    done
fi
MPI="mpirun --allow-run-as-root -np $N --bind-to none -x NCCL_NVLS_ENABLE=0 -x NCCL_P2P_DISABLE $RUN"
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=${NCCL_P2P_DISABLE:-0}
bench_args="--bench -b 64 -t 1024 -d 524288 --bench-warmup 2 --bench-steps ${BENCH_STEPS:-6}"
tok() { grep -h ^RESULT "$@" | sed -E 's/.* tok_per_s=([0-9]+) .*/\1/' | tr '\n' ' '; }
has() { [[ " $sections " == *" $1 "* ]]; }
summary=()
# the summary so far, also in $OUT/summary.txt after every section: a call killed at its time
# limit still brings back what it measured (the final print below is then missing)
save_summary() { printf '%s\n' "${summary[@]}" > "$OUT/summary.txt"; }
# `equal`'s and `spike`'s runs: the same global batch (2 micro-steps of B=4, T=1024 per GPU) on 1 and N GPUs
equal_args="-e d12 -b 4 -t 1024 -d $((4 * 1024 * 2 * N)) -l 3e-4 --warmup 5 -i dev_data/tinyshakespeare_train.bin"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
if has equal; then
    for p in ${PRECISIONS:-fp32 bf16}; do
        bin=build/$p/train_gpt2cu
        args="$equal_args -x 20"
        $bin $args > "$OUT/eq_${p}_1gpu.log" 2>&1
        $MPI $bin $args > "$OUT/eq_${p}_${N}gpu.log" 2>&1
        $MPI $bin $args --zero 1 > "$OUT/eq_${p}_${N}gpu_zero1.log" 2>&1
        tol=0.005; [ "$p" = fp32 ] && tol=1e-5   # (FP32 measured 1.4e-7 over the 20 steps, 2 GPUs and 2-4 ranks on one)
        for v in ${N}gpu ${N}gpu_zero1; do
            summary+=("equal $p 1gpu vs $v: $(python3 dev/compare_losses.py "$OUT/eq_${p}_1gpu.log" "$OUT/eq_${p}_$v.log" --tol $tol)")
        done
    done
    save_summary
fi
if has int8; then
    for p in ${PRECISIONS:-fp32 bf16}; do
        bin=build/$p/train_gpt2cu
        args="$equal_args -x 20"
        [ -f "$OUT/eq_${p}_1gpu.log" ] || $bin $args > "$OUT/eq_${p}_1gpu.log" 2>&1
        for z in 0 1; do
            f="$OUT/eq_${p}_${N}gpu_int8_zero$z.log"
            $MPI $bin $args --zero $z --grad-int8 1 > "$f" 2>&1
            summary+=("int8 $p zero=$z: 1gpu vs ${N}gpu int8: $(python3 dev/compare_losses.py "$OUT/eq_${p}_1gpu.log" "$f")")
            plain="$OUT/eq_${p}_${N}gpu$([ $z = 1 ] && echo _zero1).log"
            if [ -f "$plain" ]; then summary+=("  ${N}gpu vs ${N}gpu int8: $(python3 dev/compare_losses.py "$plain" "$f")")
            else summary+=("  (no ${N}gpu run without int8 to compare with: add the section equal)"); fi
        done
    done
    # the timing: GPT-2's batch on real GPUs, with and without P2P; the seed's step over shared sockets
    targs=$bench_args; p2ps="0 1"
    [ -n "$RUN" ] && { targs="--bench -b 4 -t 128 --bench-warmup 1 --bench-steps 4"; p2ps=0; }
    for p2p in $p2ps; do
        for i8 in 0 1; do
            f="$OUT/int8_bench_p2poff${p2p}_int8$i8.log"
            NCCL_P2P_DISABLE=$p2p $MPI build/${BENCH_PRECISION:-bf16}/train_gpt2cu $targs --grad-int8 $i8 > "$f" 2>&1
            r=$(grep ^RESULT "$f" | grep -oE ' (median_ms|tok_per_s|mean_ms|tok_per_s_mean|exposed_comm_ms|exposed_comm_pct|comm_ms|comm_mb|busbw_gbs|bwd_last_ms|bwd_other_ms|grad_int8)=[^ ]*' | tr -d '\n')
            summary+=("int8 bench P2P_DISABLE=$p2p grad-int8=$i8:${r:- $(tail -n 3 "$f")}")
        done
    done
    save_summary
fi
if has bench; then
    p=${BENCH_PRECISION:-bf16}
    bin=build/$p/train_gpt2cu
    args=$bench_args
    $bin $args > "$OUT/bench_1gpu.log" 2>&1
    summary+=("1 GPU:            $(grep ^RESULT "$OUT/bench_1gpu.log" || tail -n 3 "$OUT/bench_1gpu.log")")
    for p2p in 0 1; do
        for z in 0 1; do
            f="$OUT/bench_${N}gpu_p2poff${p2p}_zero$z.log"
            NCCL_P2P_DISABLE=$p2p $MPI $bin $args --zero $z > "$f" 2>&1
            summary+=("$N GPU P2P_DISABLE=$p2p zero=$z: $(grep ^RESULT "$f" || tail -n 3 "$f")")
            summary+=("  $(grep -h -E '^communication|^hint|^ranks' "$f" | tr '\n' ' ')")   # the run's own words on it
        done
    done
    save_summary
fi
if has peers; then
    tb="dev/torch_bench.py -e d12 -b 64 -t 1024 -d 524288 --warmup 2 --steps ${BENCH_STEPS:-6}"
    timeout 240 python3 $tb > "$OUT/torch_1gpu.log" 2>&1
    summary+=("PyTorch 1 GPU:    $(grep ^RESULT "$OUT/torch_1gpu.log" || tail -n 3 "$OUT/torch_1gpu.log")")
    for p2p in 0 1; do
        f="$OUT/torch_${N}gpu_p2poff$p2p.log"
        NCCL_P2P_DISABLE=$p2p timeout 240 torchrun --standalone --nproc_per_node "$N" $tb --ddp > "$f" 2>&1
        summary+=("PyTorch $N GPU DDP P2P_DISABLE=$p2p: $(grep ^RESULT "$f" || tail -n 3 "$f")")
    done
    save_summary
fi
# N ranks launched by hand from environment variables (no mpirun), as torchrun or Slurm would:
#   env_launch NAME BINARY [options]   logs in $OUT/NAME_rank<r>.log; MASTER_PORT from $PORT
env_launch() {
    local name=$1 bin=$2; shift 2
    for r in $(seq 0 $((N - 1))); do
        RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=${PORT:-29511} \
            $RUN $bin "$@" --bench -b 8 -t 1024 --bench-warmup 1 --bench-steps 3 > "$OUT/${name}_rank$r.log" 2>&1 &
    done
    wait
    grep -h ^RESULT "$OUT/${name}"_rank*.log || tail -n 3 "$OUT/${name}"_rank*.log
}
if has env; then
    summary+=("env launch: $(env_launch env build/bf16/train_gpt2cu)")
    rm -f /tmp/rdv.id
    summary+=("env launch, file rendezvous: $(env_launch file build/bf16/train_gpt2cu --rendezvous file:/tmp/rdv.id)")
    if [ -x build/nompi/train_gpt2cu ]; then
        build/nompi/train_gpt2cu --bench -b 8 -t 1024 --bench-warmup 1 --bench-steps 3 > "$OUT/nompi_1gpu.log" 2>&1
        summary+=("NO_MPI build, 1 GPU: $(grep -h ^RESULT "$OUT"/nompi_1gpu.log || tail -n 3 "$OUT"/nompi_1gpu.log)")
        summary+=("NO_MPI build, env launch (TCP): $(PORT=29512 env_launch nompi build/nompi/train_gpt2cu)")
    fi
    # launches that cannot work must end at the id exchange, each process in one line, not in
    # NCCL's bootstrap at --nccl-timeout: processes given as RANK:WORLD_SIZE
    #   env_refused NAME RENDEZVOUS RANK:WORLD...   per process: exit code, seconds, its error line
    env_refused() {
        local name=$1 rdv=$2 i=0 spec; shift 2
        for spec in "$@"; do
            ( t=$(date +%s.%N)
              RANK=${spec%%:*} WORLD_SIZE=${spec##*:} LOCAL_RANK=${spec%%:*} MASTER_ADDR=127.0.0.1 MASTER_PORT=${PORT:-29513} \
                  timeout 60 $RUN build/bf16/train_gpt2cu --rendezvous "$rdv" --nccl-timeout 10 --bench -b 8 -t 1024 \
                  --bench-warmup 1 --bench-steps 3 > "$OUT/${name}_$i.log" 2>&1
              rc=$?
              echo "$spec rc=$rc $(awk "BEGIN { printf \"%.1f s\", $(date +%s.%N) - $t }"): $(grep -m1 -h error "$OUT/${name}_$i.log" | cut -c1-200)" > "$OUT/${name}_$i.rc" ) &
            i=$((i + 1))
            sleep 0.3   # in the order given (the second process with a rank comes after the first)
        done
        wait
        cat "$OUT/${name}"_*.rc | sed 's/^/    /'
    }
    summary+=("env launch, WORLD_SIZE 2 and 3 (TCP): both stop at once"
              "$(env_refused world_tcp tcp 0:2 1:3)")
    rm -f /tmp/rdv_world.id
    summary+=("env launch, WORLD_SIZE 2 and 3 (file): rank 1 stops at once, rank 0 at --nccl-timeout 10, the id file removed"
              "$(env_refused world_file file:/tmp/rdv_world.id 0:2 1:3)"
              "    id file left: $([ -e /tmp/rdv_world.id ] && echo yes || echo no)")
    summary+=("env launch, RANK 1 twice in a world of 3 (TCP): rank 0 and the second rank 1 stop at once"
              "$(env_refused twice_tcp tcp 0:3 1:3 1:3)")
    save_summary
fi
if has ceiling; then
    bin=build/${BENCH_PRECISION:-bf16}/train_gpt2cu
    for i in $(seq 1 "${REPEAT:-2}"); do
        $bin $bench_args > "$OUT/ceil_solo_$i.log" 2>&1
        for r in $(seq 0 $((N - 1))); do
            CUDA_VISIBLE_DEVICES=$r $bin $bench_args > "$OUT/ceil_indep_${i}_gpu$r.log" 2>&1 &
        done
        wait
        $MPI $bin $bench_args > "$OUT/ceil_ddp_$i.log" 2>&1
        summary+=("ceiling $i: 1 GPU alone $(tok "$OUT/ceil_solo_$i.log")| $N independent 1-GPU runs at once $(tok "$OUT"/ceil_indep_${i}_gpu*.log)| $N-GPU DDP $(tok "$OUT/ceil_ddp_$i.log")tok/s")
    done
    for v in ${NCCL_VARIANTS:-}; do
        f="$OUT/ceil_ddp_$(echo "$v" | tr -c 'A-Za-z0-9\n' _).log"
        env "$v" $MPI -x "${v%%=*}" $bin $bench_args > "$f" 2>&1
        summary+=("ceiling: $N-GPU DDP with $v: $(tok "$f")tok/s $(grep -h ^RESULT "$f" | grep -oE 'exposed_comm_pct=[0-9.]+')")
    done
    save_summary
fi
# `interference`: what the all-reduce costs the backward it overlaps. The trainer reports the last
# micro-step's backward (the one the reduction runs under) and the mean of the others; each variant
# is an N-GPU DDP run: default | ctasK (NCCL_MAX_CTAS=K: fewer SMs for NCCL, which then hides less)
# | bucketK (--bucket-mb K), with P2P on and off (INTF_P2P). (Tried and removed: the persistent
# attention kernels leaving 8 or 16 SMs free during that backward made it 1.6 ms slower.)
fields() { grep -h ^RESULT "$1" | grep -oE '(tok_per_s|tok_per_s_mean|exposed_comm_pct|busbw_gbs|bwd_last_ms|bwd_other_ms)=[0-9.-]+' | tr '\n' ' ' || tail -n 2 "$1"; }
if has interference; then
    bin=build/${BENCH_PRECISION:-bf16}/train_gpt2cu
    $bin $bench_args > "$OUT/intf_1gpu.log" 2>&1
    summary+=("interference, 1 GPU: $(fields "$OUT/intf_1gpu.log")")
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING $MPI -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS $bin --bench -b 8 -t 1024 --bench-warmup 1 --bench-steps 1 > "$OUT/intf_nccl_info.log" 2>&1
    summary+=("NCCL channels: $(grep -ohE '[0-9]+ coll channels|nChannels [0-9]+|CTAs? [0-9]+' "$OUT/intf_nccl_info.log" | sort | uniq -c | tr '\n' ' ')")
    for p2p in ${INTF_P2P:-0 1}; do
        for v in ${INTF_VARIANTS:-default ctas4}; do
            e=NCCL_MAX_CTAS_UNSET=1; a=""
            case $v in ctas*) e="NCCL_MAX_CTAS=${v#ctas}";; bucket*) a="--bucket-mb ${v#bucket}";; esac
            f="$OUT/intf_p2poff${p2p}_$v.log"
            # every GPU's SM clock and power, 10 per second, during the run
            nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader,nounits -lms 100 > "${f%.log}_clocks.csv" 2>&1 &
            smi=$!
            env "$e" NCCL_P2P_DISABLE=$p2p $MPI -x "${e%%=*}" $bin $bench_args $a > "$f" 2>&1
            kill $smi 2>/dev/null; wait $smi 2>/dev/null
            summary+=("interference, $N GPUs P2P_DISABLE=$p2p $v: $(fields "$f")")
            summary+=("  step ms (fwd ms): $(grep '^step' "$f" | sed -E 's/.*\| ([0-9.]+) ms \(fwd ([0-9.]+) .*/\1(\2)/' | tr '\n' ' ')")
        done
    done
    save_summary
fi
# `graphs`: CUDA graphs on N GPUs (dev/device/graphs_ab.sh under mpirun): DDP and ZeRO-1 runs with
# 3 micro-steps (graphed backwards beside the last one's reductions) must print the same losses
# (6 decimals), norms (4) and loss scales with --cuda-graphs 0 and 1; then the speed A/B at GRAPH_SHAPES
# (one micro-step per GPU: the forward replays, the backward that reduces is launched).
if has graphs; then
    for z in 0 1; do
        while read -r l; do summary+=("graphs zero=$z: $l"); done < <(OUT=$OUT/graphs TAG=_z$z LAUNCH="$MPI" \
            EXACT_ARGS="-d $((4 * 256 * N * 3)) --zero $z" SHAPES= PRECISIONS=${PRECISIONS:-fp32 bf16} dev/device/graphs_ab.sh 2>&1)
    done
    [ -z "$RUN" ] && while read -r l; do summary+=("graphs speed: $l"); done < <(OUT=$OUT/graphs LAUNCH="$MPI" PRECISIONS= \
        SHAPES="${GRAPH_SHAPES:-4x128 16x128 64x1024}" dev/device/graphs_ab.sh 2>&1 | grep -E '^(==|MEAN|.*failed)')
    save_summary
fi
# `spike`: the spike guard decides alike on every rank (the loss and the norm it reads are global):
# `equal`'s runs, 30 steps, with step 25 on random tokens (the same tokens whatever the GPU count:
# --debug-bad-batch seeds each micro-batch by its place in the global batch) and the guard at z 4
# over a 16-step window; 1 GPU, N GPUs DDP and ZeRO-1 must each print one skip line, for step 25,
# and their losses agree as `equal`'s do (BF16).
if has spike; then
    bin=build/bf16/train_gpt2cu
    args="$equal_args -x 30 --skip-loss-z 4 --spike-window 16 --debug-bad-batch 25"
    $bin $args > "$OUT/spike_1gpu.log" 2>&1
    $MPI $bin $args > "$OUT/spike_${N}gpu.log" 2>&1
    $MPI $bin $args --zero 1 > "$OUT/spike_${N}gpu_zero1.log" 2>&1
    for v in 1gpu ${N}gpu ${N}gpu_zero1; do
        f="$OUT/spike_$v.log"
        line="spike $v: $(grep -c ' skipped: ' "$f") skip line(s): $(grep ' skipped: ' "$f" | head -n 2 | tr '\n' ' ')"
        [ "$v" != 1gpu ] && line+="| vs 1 GPU: $(python3 dev/compare_losses.py "$OUT/spike_1gpu.log" "$f")"
        summary+=("$line")
    done
    save_summary
fi
# `hellaswag`: each rank scores its slice of the examples and the counts are summed: on N GPUs the
# same accuracy as on 1 GPU and as the PyTorch reference (FP32, the reference model's weights,
# made by dev/reference.py when missing; the set of dev/device/hellaswag_set.sh, as loop_run.sh)
if has hellaswag; then
    [ -f dev_data/reference_model.bin ] || python3 dev/reference.py --out dev_data > "$OUT/hs_reference_model.log" 2>&1
    dev/device/hellaswag_set.sh "$OUT/hs_tokenize.log"
    summary+=("hellaswag fixture + tokenize: rc=$? $(tail -n 1 "$OUT/hs_tokenize.log")")
    model=dev_data/reference_model.bin
    eval_args="-e $model --eval-only --hellaswag dev_data/hs.bin -b 8 -t 1024 -j dev_data/tinyshakespeare_val.bin -g 0"
    build/fp32/train_gpt2cu $eval_args > "$OUT/hs_1gpu.log" 2>&1
    $MPI build/fp32/train_gpt2cu $eval_args > "$OUT/hs_${N}gpu.log" 2>&1
    for v in 1gpu ${N}gpu; do
        python3 dev/hellaswag_reference.py $model dev_data/hs.bin --compare "$OUT/hs_$v.log" --loss-tol 1e-5 --max-flips 1 \
            > "$OUT/hs_cmp_$v.log" 2>&1
        summary+=("hellaswag fp32 $v vs PyTorch: cmp rc=$? $(grep 'hellaswag acc' "$OUT/hs_$v.log" | cut -c1-150) | $(grep -E '^(PASS|FAIL)' "$OUT/hs_cmp_$v.log" | tr '\n' ' ')")
    done
    save_summary
fi
# `resume`: a checkpoint gathers every rank's state (ZeRO-1: the optimizer shards) to rank 0, and a
# resume scatters it back and puts every rank's data loader where it was. `equal`'s runs, 20 steps
# straight against 20 with a checkpoint every 5, every rank exiting abruptly after step 10
# (--debug-exit-after), then resumed with only -o and --resume: log.jsonl's losses equal at tol 0,
# DDP and ZeRO-1 (BF16); then that checkpoint resumed on 1 GPU must be refused in one line. (The
# other ranks exit while rank 0 may still be writing step 10's checkpoint, and mpirun then kills
# it: the resume takes step 10's checkpoint if it was complete, else step 5's; the line says which.)
if has resume; then
    bin=build/bf16/train_gpt2cu
    for z in 0 1; do
        a=runs/mgpu_resume_a_z$z; b=runs/mgpu_resume_b_z$z; rm -rf "$a" "$b"
        $MPI $bin $equal_args -x 20 --zero $z -o "$a" > "$OUT/resume_a_z$z.log" 2>&1
        $MPI $bin $equal_args -x 20 --zero $z -n 5 -o "$b" --debug-exit-after 10 > "$OUT/resume_b1_z$z.log" 2>&1
        killed=$?
        $MPI $bin -o "$b" --resume > "$OUT/resume_b2_z$z.log" 2>&1
        resumed=$?
        at=$(grep -m 1 -oE 'resumed from .* at step [0-9]+' "$OUT/resume_b2_z$z.log" | grep -oE '[0-9]+$' || echo "none")
        summary+=("resume $N GPUs zero=$z (killed rc=$killed after step 10, resumed rc=$resumed at step $at), log.jsonl: $(python3 dev/compare_losses.py "$a/log.jsonl" "$b/log.jsonl" --tol 0)")
    done
    $bin -o "$b" --resume > "$OUT/resume_1gpu.log" 2>&1
    summary+=("that checkpoint resumed on 1 GPU: rc=$? $(tail -n 1 "$OUT/resume_1gpu.log")")
    save_summary
fi
echo "================ summary"
printf '%s\n' "${summary[@]}"
