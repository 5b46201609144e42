#!/usr/bin/env bash
# This trainer and its PyTorch peer (dev/torch_bench.py: the same GPT-2 with torch.compile) side by
# side on one GPU, in one call: d12 (MODEL), T=1024, B=64 (B), BF16 and FP16 (fp16 autocast + GradScaler for
# PyTorch), 20 timed steps after 5 warm-up steps each, one micro-step per optimizer step, random
# tokens; the order alternates (ours, PyTorch, ours, ...) so that neither gets the cooler GPU. One
# table: tok/s, MFU (both against the peak the trainer's banner names), ms/step, memory, mean SM
# clock / power / temperature while the row ran.
# Binaries prebuilt here (dev/device/build.sh FP16 BF16), carried in build/.
# COMPILE_MODE: torch.compile's mode for the PyTorch rows (default; max-autotune tunes its GEMMs
# for minutes first, within the row's 500 s).
#   [ROUNDS=1] [MODEL=d12] [B=64] [PRECISIONS="bf16 fp16"] [COMPILE_MODE=default] dev/device/peers.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source dev/device/gpu_power.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"
rows=()
model=${MODEL:-d12} b=${B:-64}
row() {  # name log: one table row from the RESULT line
    local r; r=$(grep ^RESULT "$2")
    if [ -z "$r" ]; then rows+=("| $1 | $model B=$b | failed: $(tail -n 1 "$2") |||||||"); return; fi
    get() { result_field "$r" "$1"; }
    rows+=("| $1 | $model B=$b | $(get precision) | $(get tok_per_s) | $(get mfu) | $(get median_ms) | $(get device_mem_gb) | $POWER_MHZ | $POWER_W | $POWER_C |")
    echo "${rows[-1]}"
}
for round in $(seq "${ROUNDS:-1}"); do
    for p in ${PRECISIONS:-bf16 fp16}; do
        log="$OUT/ours_${p}_$round.log"
        power_run "$OUT/smi.csv" build/$p/train_gpt2cu --bench -e "$model" -b "$b" -t 1024 --bench-warmup 5 --bench-steps 20 > "$log" 2>&1
        row "this project" "$log"
        # PyTorch's MFU against the peak the trainer's banner named ("MFU against 989.0 TFLOP/s per GPU ...")
        peak=$(sed -n 's/^MFU against \([0-9.]*\) TFLOP\/s per GPU.*/\1/p' "$log")
        log="$OUT/torch_${p}_$round.log"
        power_run "$OUT/smi.csv" timeout 500 python3 dev/torch_bench.py -e "$model" -b "$b" -t 1024 --dtype "$p" --steps 20 --warmup 5 \
            --compile-mode "${COMPILE_MODE:-default}" ${peak:+--peak-tflops "$peak"} > "$log" 2>&1
        row "PyTorch torch.compile${COMPILE_MODE:+ ($COMPILE_MODE)}" "$log"
    done
done
echo "================ $(date -u +%F) $(git rev-parse --short HEAD 2>/dev/null) $(head -n 1 "$OUT/gpu.txt")"
echo "| trainer | model | precision | tok/s | MFU % | ms/step | memory GB | SM MHz | W | °C |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
