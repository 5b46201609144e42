#!/usr/bin/env bash
# A/B of two (or more) trainer binaries on one GPU: bench mode (d12, B=64, T=1024, 5 warm-up and
# 20 timed steps), the binaries ALTERNATING, ROUNDS rounds (default 2), so that a clock or power
# drift of the machine hits every binary alike. One line per run (tok/s median and mean, forward,
# backward, and GPU 0's mean SM clock, power and temperature while it ran busy, every 100 ms; see
# gpu_power.sh), then the mean per binary over the rounds it ran (a failed run, one without a
# RESULT line, is reported and left out of the mean; the MEAN line says how many failed). Entries
# are kept by position: the same string given twice (an A/A test) is two entries, each with its own
# mean and logs. Logs in $OUT/ab_<position>_<name>_<round>.log. A binary may come
# with its own options, as one quoted word ("build/bf16/train_gpt2cu -b 128"; a launcher may come
# first: "mpirun -np 2 build/bf16/train_gpt2cu"), which override the defaults; the extra args after
# -- go to every run and override both (-- -b 4 -t 128).
#   dev/device/trainer_ab.sh build/bf16/train_gpt2cu build_attn/train_wip_bf16 [-- extra args]
set -uo pipefail
cd "$(dirname "$0")/../.."
source dev/device/gpu_power.sh
source dev/device/ab_means.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bins=(); extra=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
    bins+=("$1"); shift
done
ab_init
defaults=(--bench -e d12 -b 64 -t 1024 --bench-warmup 5 --bench-steps 20)
for r in $(seq 1 "${ROUNDS:-2}"); do
    for i in "${!bins[@]}"; do
        b=${bins[$i]}
        name=$(echo "$b" | tr '/ ' '__')
        log="$OUT/ab_$((i + 1))_${name}_$r.log"
        # the defaults go right after the trainer (the first word that is a path to an executable:
        # a launcher such as mpirun may come before it; else the first word), its own options after
        read -r -a words <<< "$b"; cmd=(); placed=0
        for w in "${words[@]}"; do
            cmd+=("$w")
            if [ $placed = 0 ] && [[ "$w" == */* ]] && [ -x "$w" ]; then
                cmd+=("${defaults[@]}"); placed=1
            fi
        done
        [ $placed = 0 ] && cmd=("${words[0]}" "${defaults[@]}" "${words[@]:1}")
        power_run "$OUT/smi.csv" "${cmd[@]}" "${extra[@]}" > "$log" 2>&1
        res=$(grep ^RESULT "$log" | tail -n 1)
        tok=$(result_field "$res" tok_per_s)
        if [ -z "$res" ] || ! [[ "$tok" =~ ^[0-9]+(\.[0-9]*)?$ ]]; then
            ab_fail "$i"; echo "$b round $r: failed (no RESULT tok_per_s): $(tail -n 1 "$log")"; continue
        fi
        multi=""  # several GPUs: what the communication costs
        [ "$(result_field "$res" gpus)" != 1 ] && multi=" | exposed $(result_field "$res" exposed_comm_pct) % bwd last $(result_field "$res" bwd_last_ms) other $(result_field "$res" bwd_other_ms) ms"
        echo "$b round $r: tok/s $tok mean $(result_field "$res" tok_per_s_mean) fwd $(result_field "$res" fwd_ms) bwd $(result_field "$res" bwd_ms) ms$multi | $POWER_MHZ MHz $POWER_W W $POWER_C C"
        ab_add "$i" "$tok"
    done
done
# the mean over the runs that succeeded; failures named (none succeeded: "-")
ab_means "" tok/s "%.0f" "median tok/s"
