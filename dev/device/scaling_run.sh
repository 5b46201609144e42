#!/usr/bin/env bash
# On a multi-GPU machine (N = the visible GPUs), in order of priority, so that a short device
# budget cuts only the tail (dev/device/scaling_run.sh [probe] [equal] [scaling] [race]: those
# parts only, in this order; none: all four):
#   1. `probe`: the interconnect probe (P2P matrix, all-reduce sweep with and without P2P, and over
#      NCCL's socket transport: one process per GPU, each a node of its own, own_host.sh);
#   2. `equal`: 1 vs N GPUs loss curves, 20 steps, same global batch (multi_gpu.sh equal, BF16, DDP and ZeRO-1);
#   3. `scaling`: the scaling table (dev/scaling.py: 1, 2, 4, ... GPUs; DDP, DDP without P2P, ZeRO-1,
#      DDP over sockets, DDP without P2P with --grad-int8 (TYPES, default these five); the
#      524288-token global batch and the seed's 4 sequences per GPU; blocks BLOCKS, default
#      1024,128,512 in that order; STEPS timed steps per row), with the predictor;
#   4. `race`: a stream-race stress test: N-GPU runs, identical or reducing in other buckets (DDP and
#      ZeRO-1), must give bitwise-identical loss curves (see there).
# Everything lands in $OUT/scaling_run/ and, packed after each part, in $OUT/scaling_run.tgz (the
# device tool returns few files); summaries on stdout.
# Binaries prebuilt here: build/bf16/train_gpt2cu and build/interconnect (dev/device/build.sh BF16);
# shards in dev_data (make data). RANKS=N, more than the visible GPUs: N ranks sharing them
# (dev/device/own_host.sh; only `equal` and `race`, which check losses, not times).
set -uo pipefail
cd "$(dirname "$0")/../.."
parts=${*:-probe equal scaling race}
for part in $parts; do
    case $part in probe|equal|scaling|race) ;; *) echo "scaling_run.sh: unknown part '$part' (probe, equal, scaling, race)" >&2; exit 2 ;; esac
done
GPUS=$(dev/device/gpu_count.sh)
N=${RANKS:-$GPUS}
RUN=""
if (( N > GPUS )); then
    RUN=dev/device/own_host.sh
    for part in $parts; do
        case $part in probe|scaling) echo "scaling_run.sh: '$part' measures the GPUs; with RANKS=$N on $GPUS GPU(s) the ranks share them (only equal, race)" >&2; exit 2 ;; esac
    done
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$OUT/scaling_run; mkdir -p "$R"
export NCCL_NVLS_ENABLE=0
pack() { tar czf "$OUT/scaling_run.tgz" -C "$OUT" scaling_run; }
trap pack EXIT
has() { [[ " $parts " == *" $1 "* ]]; }
if has probe; then
    nvidia-smi topo -m > "$R/topo.txt" 2>&1; head -n $((N + 1)) "$R/topo.txt"
    timeout 60 build/interconnect > "$R/probe.txt" 2>&1
    NCCL_P2P_DISABLE=1 timeout 60 build/interconnect --no-p2p-matrix >> "$R/probe.txt" 2>&1
    timeout 120 mpirun --allow-run-as-root -np $N --bind-to none -x NCCL_NVLS_ENABLE dev/device/own_host.sh \
        build/interconnect --max-mb 512 >> "$R/probe.txt" 2>&1
    grep -E "^(P2P|ALLREDUCE_FIT)" "$R/probe.txt"
fi
if has equal; then
    OUT=$R PRECISIONS=bf16 timeout 120 dev/device/multi_gpu.sh equal 2>&1 | tail -n 3
    pack
fi
if has scaling; then
    python3 dev/scaling.py --bin build/bf16/train_gpt2cu --probe build/interconnect --blocks "${BLOCKS:-1024,128,512}" \
        --types "${TYPES:-ddp,ddp_nop2p,zero1,sockets,ddp_int8_nop2p}" \
        --steps "${STEPS:-5}" --out "$R/scaling" 2>&1 | tee "$R/scaling.log" | grep --line-buffered -E "^(probe|  [0-9]|\||  FAILED|scaling.py:)"
    pack
fi
has race || exit 0
# race stress: the reducer's events are the only ordering between the backward and the reduction
# (2 micro-steps of 4 x 1024 tokens per rank; --gemm-tune 0: every run on cuBLASLt's first
# algorithms, not on its own timings). Two identical runs must agree bitwise; so must runs that
# reduce in other buckets: one per block (--bucket-mb 0, the most overlap) and a single one (1e6:
# issued when the whole backward is done, no overlap), DDP and ZeRO-1 (whose shards do not depend
# on the buckets). On 2 GPUs each element's reduced
# value is one addition of two numbers whatever the bucketing, so a difference points to a race
# (unless NCCL reduces differently by message size: look before concluding). On more GPUs NCCL's
# order of the additions follows the bucket sizes (a ring starts each chunk's sum at another
# rank), so there DDP's pairs of other buckets are held to 1e-4, not bitwise (3 and 4 ranks on
# one GPU, 2026-12-02: 4.6e-6 to 1.2e-5 apart; ZeRO-1's were bitwise equal); the identical pairs
# must agree bitwise.
args="-e d12 -b 4 -t 1024 -d $((4 * 1024 * 2 * N)) -x 20 -l 3e-4 --warmup 5 -i dev_data/tinyshakespeare_train.bin --gemm-tune 0"
race() {  # name, trainer options
    local name=$1; shift
    rm -rf "runs/race_$name"
    mpirun --allow-run-as-root -np $N --bind-to none -x NCCL_NVLS_ENABLE $RUN build/bf16/train_gpt2cu $args "$@" -o "runs/race_$name" > "$R/race_$name.log" 2>&1 ||
        echo "race stress, run $name failed (rc $?): $(grep -m 1 'error' "$R/race_$name.log" || tail -n 1 "$R/race_$name.log")"
}
race b4 --bucket-mb 4; race b4_again --bucket-mb 4; race b0 --bucket-mb 0; race b1e6 --bucket-mb 1e6
race z1_b4 --zero 1 --bucket-mb 4; race z1_b4_again --zero 1 --bucket-mb 4; race z1_b1e6 --zero 1 --bucket-mb 1e6
for pair in "b4 b4_again" "b4 b0" "b4 b1e6" "z1_b4 z1_b4_again" "z1_b4 z1_b1e6"; do
    set -- $pair
    tol=0; how=bitwise
    if (( N > 2 )) && [[ $1 == b4 && $2 != b4_again ]]; then tol=1e-4; how="within 1e-4: $N ranks add in the buckets' order"; fi
    echo "race stress, $1 vs $2 ($how, log.jsonl losses): $(python3 dev/compare_losses.py "runs/race_$1/log.jsonl" "runs/race_$2/log.jsonl" --tol $tol)"
done
