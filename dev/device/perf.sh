#!/usr/bin/env bash
# Issue #8's benchmark, the same each time so results compare across commits: bench mode
# (random tokens, median of 20 timed steps after 5 warm-up steps) for GPT-2 124M in FP16 and BF16 at
# B=64, and 350M / 774M / 1558M in BF16 (at llm.c's batch sizes and at larger ones), then one
# table (tok/s, MFU, ms/step, memory, GPU 0's mean SM clock, power, temperature while the row ran; the
# precision column is what the binary reports). With `profile`, ncu's per-kernel times of one d12 step
# (dev/kernel_profile.py).
# Binaries prebuilt here (dev/device/build.sh), carried in build/.
# `tune` adds rows with the GEMM algorithms of --gemm-tune 2 (timed at the power limit) next to
# d12's and, with `batch`, next to the largest micro-batches'; `batch` runs the models at GPT-2's
# 524288-token batch (gradient accumulation, one optimizer step per batch).
# `peak`: d12 (BF16, FP16) / d24 / d36 / d48 at GPT-2's batch, a large micro-batch, tuned GEMM
# algorithms only.
#   dev/device/perf.sh [bench] [tune] [recompute] [batch] [peak] [big] [profile]
set -uo pipefail
cd "$(dirname "$0")/../.."
source dev/device/gpu_power.sh
# peak's rows "precision model B warm-up-steps timed-steps", separated by ";" (PEAK overrides them),
# checked before anything is written
IFS=';' read -r -a peak_rows <<< "${PEAK:-bf16 d12 128 3 20;fp16 d12 128 3 20;bf16 d24 128 1 4;bf16 d36 64 1 3;bf16 d48 32 1 3}"
for mb in "${peak_rows[@]}"; do
    [[ "$mb" =~ ^\ *(fp16|bf16|fp32)\ +[a-z0-9]+(\ +[0-9]+){3}\ *$ ]] ||
        { echo "$0: PEAK row '$mb' is not 'precision model B warm-up-steps timed-steps'" >&2; exit 2; }
done
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sections=${*:-bench recompute big profile}
has() { [[ " $sections " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
rows=()
bench() {  # precision model B [extra args]
    local p=$1 e=$2 b=$3; shift 3
    local log="$OUT/bench_${p}_${e}_b${b}$(echo "$*" | tr -cd 'A-Za-z0-9_').log"
    local args; args=$(echo "$*" | sed 's|--gemm-algos [^ ]*|--gemm-algos (tuned: 2)|')
    power_run "$OUT/smi_row.csv" build/$p/train_gpt2cu --bench -e "$e" -b "$b" -t 1024 --bench-warmup 5 --bench-steps 20 "$@" > "$log" 2>&1
    [ -n "${collect:-}" ] && cat "$OUT/smi_row.csv" >> "$collect"  # the bench section's clock summary
    local r; r=$(grep ^RESULT "$log")
    if [ -z "$r" ]; then rows+=("| $p | $e | $b | $args | failed: $(tail -n 1 "$log") ||||||||"); return; fi
    get() { result_field "$r" "$1"; }
    rows+=("| $(get precision) | $e | $b | $args | $(get tok_per_s) | $(get mfu) | $(get median_ms) | $(get fwd_ms) | $(get bwd_ms) | $(get opt_ms) | $(get device_mem_gb) | $POWER_MHZ | $POWER_W | $POWER_C |")
    echo "${rows[-1]}"  # as it comes too: a run cut short by a time limit still shows its rows
}
# With `tune`: the row untuned, then with the GEMM algorithms that --gemm-tune 2 chose in a short
# run before both (a file, --gemm-algos), so that neither row follows right after 35 s of tuning
# and the two differ only in the algorithms. (Still one run each: dev/device/gemm_tune_ab.sh
# alternates rounds.)
tune_file() {  # precision model B: a short --gemm-tune 2 run; its choices file is $dir/gemm_algos.txt
    dir="/tmp/perf_tune_$1_$2_$3"
    rm -rf "$dir"
    build/$1/train_gpt2cu --bench -e "$2" -b "$3" -t 1024 --bench-warmup 0 --bench-steps 1 --gemm-tune 2 -o "$dir" > "$OUT/tune_$1_$2_$3.log" 2>&1
}
pair() {  # precision model B [extra args]
    local p=$1 e=$2 b=$3; shift 3
    tune_file "$p" "$e" "$b"
    bench "$p" "$e" "$b" "$@"
    bench "$p" "$e" "$b" "$@" --gemm-algos "$dir/gemm_algos.txt"
}
if has bench; then
    # the SM clock and power while the benchmark runs (the d12 rows' power_run samples, together): a
    # sustained step runs at a lower clock than ncu's isolated kernels (power limit), which is part
    # of the gap between the two
    collect="$OUT/clocks.csv"; : > "$collect"
    for p in fp16 bf16; do
        if has tune; then pair $p d12 64; else bench $p d12 64; fi
    done
    collect=
    rows+=("clocks during d12: $(awk -F, '$2 > 300 {print $1}' "$OUT/clocks.csv" | sort -n | awk '{a[NR] = $1} END {print "SM MHz median " a[int(NR/2)+1] ", min " a[1] ", max " a[NR]}'); $(awk -F', *' '{print $2}' "$OUT/clocks.csv" | sort -n | tail -n 1) W max")
fi
if has recompute; then
    bench bf16 d12 64 -r 1
    bench bf16 d12 64 -r 2
fi
if has batch; then
    # GPT-2's batch of 524288 tokens per step (-d, gradient accumulation): AdamW runs once per 8-32
    # micro-steps instead of after every one (at d48 it reads and writes 47 GB: 11.7 ms). Fewer
    # timed steps: each is 8-32 micro-steps long.
    bench bf16 d24 64 -d 524288 --bench-warmup 1 --bench-steps 4
    bench bf16 d36 32 -d 524288 --bench-warmup 1 --bench-steps 3
    bench bf16 d48 16 -d 524288 --bench-warmup 1 --bench-steps 3
    # larger micro-batches (fuller GEMMs, fewer launches)
    b=$(has tune && echo pair || echo bench)
    $b bf16 d12 64 -d 524288 --bench-warmup 2 --bench-steps 10
    $b bf16 d24 128 -d 524288 --bench-warmup 1 --bench-steps 4
    $b bf16 d36 64 -d 524288 --bench-warmup 1 --bench-steps 3
    $b bf16 d48 32 -d 524288 --bench-warmup 1 --bench-steps 3
fi
if has peak; then
    # the best each model reaches here: GPT-2's batch, the largest micro-batch (d12: 128, as fast
    # as 256 in half the memory), the GEMM algorithms of --gemm-tune 2 (tuned first, in a run of
    # their own), no untuned twin; the rows are peak_rows (above)
    for mb in "${peak_rows[@]}"; do
        read -r p e b w n <<< "$mb"
        tune_file "$p" "$e" "$b"
        bench "$p" "$e" "$b" -d 524288 --bench-warmup "$w" --bench-steps "$n" --gemm-algos "$dir/gemm_algos.txt"
    done
fi
if has big; then
    # llm.c's batch sizes (its reference rows), then the larger ones that fit in 141 GB and run
    # at a higher MFU (fuller GEMMs)
    bench bf16 d24 32
    bench bf16 d36 16
    bench bf16 d48 16
    bench bf16 d24 64
    bench bf16 d36 32
    bench bf16 d48 24
fi
if has profile; then
    # --cuda-graphs 0: every kernel its own launch, as in the profiles before graphs (same kernels)
    # (PROFILE_MODEL / PROFILE_B: another model and micro-batch than d12 B=64)
    for p in ${PROFILE_PRECISIONS:-bf16 fp16}; do
        timeout 150 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
            build/$p/train_gpt2cu --bench -e "${PROFILE_MODEL:-d12}" -b "${PROFILE_B:-64}" -t 1024 --bench-warmup 2 --bench-steps 1 --bench-profile --cuda-graphs 0 \
            > "$OUT/ncu_$p.csv" 2> "$OUT/ncu_$p.err"
        python3 dev/kernel_profile.py "$OUT/ncu_$p.csv" --by-shape > "$OUT/profile_$p.txt" 2>&1
        python3 dev/kernel_profile.py "$OUT/ncu_$p.csv" > "$OUT/profile_${p}_by_name.txt" 2>&1
    done
    cat "$OUT/profile_bf16_by_name.txt"
fi
echo "================ $(date -u +%F) $(git rev-parse --short HEAD 2>/dev/null) $(cat "$OUT/gpu.txt")"
echo "| precision | model | B | args | tok/s | MFU % | ms/step | fwd ms | bwd ms | opt ms | memory GB | SM MHz | W | °C |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
