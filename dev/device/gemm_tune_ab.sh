#!/usr/bin/env bash
# Which GEMM algorithm choices pay in a training step: cuBLASLt's first choices against those of
# --gemm-tune 1 (each candidate timed in a short burst, at whatever clock the GPU is at) and of
# --gemm-tune 2 (each timed after 0.2 s back to back, at the clock the power limit leaves). Both
# tunings run once (their choices kept in a file, their timings in $OUT/tune*.log), then
# dev/device/trainer_ab.sh alternates the three (ROUNDS, default 3) at d12 B=64 with the given
# binary (default build/bf16/train_gpt2cu; ARGS: other trainer options for the tunings and every
# run, later ones winning, e.g. "-b 128 -d 524288" or "-e d24 -b 32").
#   dev/device/gemm_tune_ab.sh [binary]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
b=${1:-build/bf16/train_gpt2cu}
[ -x "$b" ] || { echo "$0: $b: not an executable (build it with dev/device/build.sh)" >&2; exit 2; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
args=${ARGS:-}
for mode in 1 2; do
    rm -rf "/tmp/gemm_tune$mode"
    $b --bench -e d12 -b 64 -t 1024 --bench-warmup 1 --bench-steps 2 $args --gemm-tune $mode -o "/tmp/gemm_tune$mode" > "$OUT/tune$mode.log" 2>&1
    grep -E "^GEMM algorithms|^gemm-tune" "$OUT/tune$mode.log"
done
ROUNDS=${ROUNDS:-3} dev/device/trainer_ab.sh "$b" "$b --gemm-algos /tmp/gemm_tune1/gemm_algos.txt" "$b --gemm-algos /tmp/gemm_tune2/gemm_algos.txt" -- $args
