#!/usr/bin/env bash
# Device-side runner for the flash-attention work (issue #4): runs attention_check binaries built
# on the development machine and carried in build_attn/ (build_attn/NAME), and PyTorch's SDPA
# reference, one item after another; full logs in $OUT/NAME.log, a compact summary on stdout.
#   dev/device/attn_run.sh "new_BF16 --sweep" base_BF16 "sdpa --dtype bf16 --quick" ...
# On a machine of several GPUs, GPU=i runs on GPU i (CUDA_VISIBLE_DEVICES): two invocations with
# different GPU=, started together, time on two GPUs at once; each prints its summary when done.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=${GPU:-0}
summary=$(mktemp)
run_all() {
nvidia-smi -i "$CUDA_VISIBLE_DEVICES" --query-gpu=index,name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
for spec in "$@"; do
    name=${spec%% *}; args=""; [[ "$spec" == *" "* ]] && args=${spec#* }
    if [[ "$name" == sdpa ]]; then
        log="$OUT/sdpa$(echo "$args" | tr -c 'a-z0-9\n' '_' | tr -s _).log"
        PYTHONUNBUFFERED=1 timeout 300 python3 dev/cuda/sdpa_bench.py $args > "$log" 2>&1; rc=$?
        echo "== sdpa $args: rc=$rc"
        grep -E 'T=1024 NH=12|Error|error' "$log" | head -n 20
    else
        log="$OUT/$name$(echo "$args" | tr -c 'a-z0-9\n' _ | tr -s _)${CHECK_SYNC_TIMING:+_sync}.log"
        timeout 300 "build_attn/$name" $args > "$log" 2>&1; rc=$?
        echo "== $name $args: rc=$rc, $(tail -n 1 "$log")"
        grep -E '^FAIL' "$log" | head -n 20
        grep -E '^(PASS|FAIL) flash vs' "$log" | sed -E 's/^(PASS|FAIL) flash vs cuBLAS reference /\1 /; s/ \(max_abs.*//'
        grep -E '^TIME' "$log" | grep -v reference | sed -E 's/^TIME +//; s/ +/ /g'
        grep -E '^SWEEP B=[0-9 ]+ T=(1024|2048) NH=(12|25)' "$log" | sed -E 's/ +/ /g'
        grep -E '^LENGTHS B=' "$log" | sed -E 's/ +/ /g'
        grep -E "^BATCHES" "$log" | sed -E "s/ +/ /g"
    fi
done
}
run_all "$@" > "$summary" 2>&1
cat "$summary"; rm -f "$summary"
