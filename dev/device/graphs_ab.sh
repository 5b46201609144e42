#!/usr/bin/env bash
# CUDA graphs in the trainer (--cuda-graphs): are they exact, and where do they pay? Runs the
# carried build/<precision>/train_gpt2cu (dev/device/build.sh):
#   1. exactness: --bench runs with --cuda-graphs 0 and 1 must print identical per-step losses
#      (6 decimals), norms (4) and loss scales (FP16 includes loss-scale changes and skipped steps,
#      `scale N (skipped) |`), per precision;
#   2. speed: alternating rounds of --cuda-graphs 0 / 1 at each B x T (d12, bf16; trainer_ab.sh).
#   [ROUNDS=2] [SHAPES="4x128 16x128 8x1024 64x1024"] [PRECISIONS="bf16 fp16 fp32"] [TAG=...] dev/device/graphs_ab.sh
#   (environment variables; an empty SHAPES or PRECISIONS skips that part; TAG names the logs)
# On several GPUs: LAUNCH is the launcher put before every run ("mpirun -np 2 ..."), EXACT_ARGS
# extra options of the exactness runs, e.g. "-d 6144 --zero 1": with gradient accumulation, the
# first micro-steps replay their backward from a graph while the last one issues the reductions.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2}
SHAPES=${SHAPES-4x128 16x128 8x1024 64x1024}
PRECISIONS=${PRECISIONS-bf16 fp16 fp32}
LAUNCH=${LAUNCH:-}
EXACT_ARGS=${EXACT_ARGS:-}
tag=${TAG:-}
for p in $PRECISIONS; do
    for g in 0 1; do
        log="$OUT/exact${tag}_${p}_g$g.log"
        $LAUNCH build/$p/train_gpt2cu --bench -e d12 -b 4 -t 256 --bench-warmup 2 --bench-steps 12 $EXACT_ARGS --cuda-graphs $g \
            > "$log" 2>&1 || echo "exactness run $p graphs $g failed: $(tail -n 2 "$log")"
        grep -E '^step' "$log" | sed -E 's/.*\| loss ([0-9.naif-]+) \| norm ([0-9.naif-]+) \|.*\| scale ([0-9.e+-]+)( \(skipped\))? \|.*/\1 \2 \3\4/' > "${log%.log}.txt"
    done
    a="$OUT/exact${tag}_${p}_g0.txt" b="$OUT/exact${tag}_${p}_g1.txt"
    if [ -s "$a" ] && cmp -s "$a" "$b"; then
        echo "exact $p${EXACT_ARGS:+ ($EXACT_ARGS)}: $(wc -l < "$a") steps, losses, norms and loss scales equal with and without graphs"
    else
        echo "exact $p${EXACT_ARGS:+ ($EXACT_ARGS)}: DIFFERENT"; paste "$a" "$b" | head -n 14
    fi
done
for s in $SHAPES; do
    echo "== B x T = $s"
    OUT="$OUT/speed${tag}_$s" ROUNDS=$ROUNDS dev/device/trainer_ab.sh "$LAUNCH build/bf16/train_gpt2cu --cuda-graphs 0" \
        "$LAUNCH build/bf16/train_gpt2cu --cuda-graphs 1" -- -b "${s%x*}" -t "${s#*x}"
done
