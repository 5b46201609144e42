#!/usr/bin/env bash
# The multi-GPU code on a machine with one GPU (make test runs it when a GPU is visible): 2 ranks
# sharing it, each a host of its own to NCCL (dev/device/own_host.sh: TCP sockets on loopback),
# against 1 rank at the same global batch (2 micro-steps of 4 x 256 tokens per rank), 8 steps of
# d12 on tinyshakespeare:
#   - 1 rank vs 2 ranks, DDP and ZeRO-1: losses within 1e-5 relative in FP32, 0.5 % otherwise;
#   - 2 ranks reducing in one bucket per block vs in 16 MB buckets: equal losses (on 2 ranks every
#     reduced element is one addition whatever the buckets, so a difference is a stream race);
#   - 1 rank vs 2 ranks sending the gradients as int8 (--grad-int8 1), DDP and ZeRO-1: within 0.5 %
#     in every build (the int8 roundings, not the precision, set the difference).
# Launched by mpirun when there is one, else through the environment (RANK/WORLD_SIZE, TCP).
#   dev/ranks_check.sh [TRAINER] [TEXT]   (default ./train_gpt2cu, $TINYSHAKESPEARE or
#   ../shared/data/tinyshakespeare.txt, which data/tokenize turns into shards with the vocabulary
#   in $GPT2_VOCAB_DIR or ../shared/data/gpt2). Prints PASS/FAIL lines and "N passed, N failed";
#   exit 0 when all pass, 1 when not, 2 (one line) when it cannot start.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./train_gpt2cu}
text=${2:-${TINYSHAKESPEARE:-../shared/data/tinyshakespeare.txt}}
for f in "$bin" data/tokenize; do
    [ -x "$f" ] || { echo "ranks_check.sh: $f: not built (make train_gpt2cu data/tokenize)" >&2; exit 2; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! data/tokenize "$text" -o "$tmp/ts" > "$tmp/tokenize.log" 2>&1; then
    echo "ranks_check.sh: data/tokenize $text failed: $(tail -n 1 "$tmp/tokenize.log")" >&2; exit 2
fi
passed=0; failed=0; broken=""
args="-e d12 -b 4 -t 256 -d 4096 -x 8 -l 3e-4 --warmup 2 -i $tmp/ts_train.bin -j $tmp/ts_val.bin -g 0 --gemm-tune 0"
run() {  # name ranks options: the run's output (rank 0 prints the steps) in $tmp/<name>.log
    local name=$1 n=$2; shift 2
    if [ "$n" = 1 ]; then
        "$bin" $args "$@" > "$tmp/$name.log" 2>&1
    elif command -v mpirun > /dev/null; then
        mpirun --allow-run-as-root -np "$n" --bind-to none dev/device/own_host.sh "$bin" $args "$@" > "$tmp/$name.log" 2>&1
    else
        local r pids=() rc=0
        for r in $(seq 0 $((n - 1))); do
            RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=${PORT:-29571} \
                dev/device/own_host.sh "$bin" $args "$@" > "$tmp/$name.r$r.log" 2>&1 &
            pids+=($!)
        done
        for r in "${pids[@]}"; do wait "$r" || rc=1; done
        cat "$tmp/$name".r*.log > "$tmp/$name.log"; [ $rc = 0 ]
    fi || { echo "FAIL run $name ($n rank(s)): $(grep -m 1 -i error "$tmp/$name.log" || tail -n 1 "$tmp/$name.log")"
            failed=$((failed + 1)); broken+=" $name "; }
}
compare() {  # what, run A, run B, tolerance (the printed losses: 6 decimals, float's precision at these values)
    local out
    [[ $broken == *" $2 "* || $broken == *" $3 "* ]] && return   # a failed run is counted once
    if out=$(python3 dev/compare_losses.py "$tmp/$2.log" "$tmp/$3.log" --tol "$4" 2>&1); then
        echo "PASS $1: $out"; passed=$((passed + 1))
    else
        echo "FAIL $1: $out"; failed=$((failed + 1))
    fi
}
tol=5e-3
[[ $("$bin" --help 2>&1) == *'build: precision fp32'* ]] && tol=1e-5
run one 1; run ddp 2; run zero1 2 --zero 1; run ddp_b0 2 --bucket-mb 0
run ddp_int8 2 --grad-int8 1; run zero1_int8 2 --zero 1 --grad-int8 1
compare "1 rank vs 2 sharing the GPU, DDP (tol $tol)" one ddp $tol
compare "1 rank vs 2 sharing the GPU, ZeRO-1 (tol $tol)" one zero1 $tol
compare "2 ranks, one bucket per block vs 16 MB buckets (equal)" ddp ddp_b0 0
compare "1 rank vs 2 sharing the GPU, DDP, --grad-int8 1 (tol 5e-3)" one ddp_int8 5e-3
compare "1 rank vs 2 sharing the GPU, ZeRO-1, --grad-int8 1 (tol 5e-3)" one zero1_int8 5e-3
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
