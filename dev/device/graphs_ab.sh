#!/usr/bin/env bash
# CUDA graphs in the trainer (--cuda-graphs): are they exact, and where do they pay? Runs the
# carried build/<precision>/train_gpt2cu (dev/device/build.sh):
#   1. exactness: the per-step losses of --bench runs with --cuda-graphs 0 and 1 must be equal
#      bit for bit (printed with 6 decimals; FP16 includes loss-scale changes), per precision;
#   2. speed: alternating rounds of --cuda-graphs 0 / 1 at the given B x T (d12, bf16), the
#      RESULT lines' tok/s and fwd/bwd ms.
#   dev/device/graphs_ab.sh [ROUNDS=2] [SHAPES="4x128 16x128 8x1024 64x1024"] [PRECISIONS="bf16 fp16 fp32"]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2}
SHAPES=${SHAPES:-4x128 16x128 8x1024 64x1024}
PRECISIONS=${PRECISIONS:-bf16 fp16 fp32}
for p in $PRECISIONS; do
    for g in 0 1; do
        build/$p/train_gpt2cu --bench -e d12 -b 4 -t 256 --bench-warmup 2 --bench-steps 12 --cuda-graphs $g \
            > "$OUT/exact_${p}_g$g.log" 2>&1 || echo "exactness run $p graphs $g failed: $(tail -n 2 "$OUT/exact_${p}_g$g.log")"
        grep -E '^step' "$OUT/exact_${p}_g$g.log" | sed -E 's/.*\| loss ([0-9.naif-]+) \| norm ([0-9.naif-]+) \|.*\| scale ([0-9.e+-]+) \|.*/\1 \2 \3/' > "$OUT/losses_${p}_g$g.txt"
    done
    if [ -s "$OUT/losses_${p}_g0.txt" ] && cmp -s "$OUT/losses_${p}_g0.txt" "$OUT/losses_${p}_g1.txt"; then
        echo "exact $p: $(wc -l < "$OUT/losses_${p}_g0.txt") steps, losses, norms and loss scales equal with and without graphs"
    else
        echo "exact $p: DIFFERENT"; paste "$OUT/losses_${p}_g0.txt" "$OUT/losses_${p}_g1.txt" | head -n 14
    fi
done
for r in $(seq 1 "$ROUNDS"); do
    for s in $SHAPES; do
        b=${s%x*}; t=${s#*x}
        for g in 0 1; do
            log="$OUT/speed_b${b}_t${t}_g${g}_r$r.log"
            build/bf16/train_gpt2cu --bench -e d12 -b "$b" -t "$t" --bench-warmup 5 --bench-steps 20 --cuda-graphs $g > "$log" 2>&1
            echo "round $r B=$b T=$t graphs $g: $(grep -oE 'tok_per_s=[0-9]+|fwd_ms=[0-9.]+|bwd_ms=[0-9.]+|opt_ms=[0-9.]+' "$log" | tr '\n' ' ')"
        done
    done
done
