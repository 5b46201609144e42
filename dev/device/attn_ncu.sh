#!/usr/bin/env bash
# Where the attention kernels' time goes, instruction by instruction: ncu's full set with source
# counters (warp-state samples per SASS instruction) for the wgmma attention kernels as the trainer
# runs them (d12, B=64, T=1024): the first COUNT launches (default 3) matching KERNELS (default all
# three: the profiled step's first forwards; KERNELS='backward_dq_kernel|backward_dkdv_kernel' and
# COUNT=2 for the backward's). Writes to $OUT:
#   attn.ncu-rep         the report (open it in Nsight Compute)
#   attn_details.txt     every section of the profiled launches (occupancy, pipes, stalls, memory)
#   attn_sass_<k>.csv    per-SASS-instruction metrics of kernel k (stall samples by reason)
# Then `python3 dev/ncu_stalls.py $OUT/attn_sass_forward_kernel.csv` summarises one of them here.
#   dev/device/attn_ncu.sh [trainer binary, default build/bf16/train_gpt2cu]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bin=${1:-build/bf16/train_gpt2cu}
timeout 400 ncu --profile-from-start off --kernel-name-base function \
    --kernel-name regex:"^(${KERNELS:-forward_kernel|backward_dq_kernel|backward_dkdv_kernel})\$" --launch-count "${COUNT:-3}" \
    --set full --import-source yes -f -o "$OUT/attn" \
    "$bin" --bench -e d12 -b 64 -t 1024 --bench-warmup 2 --bench-steps 1 --bench-profile \
    > "$OUT/attn_ncu.log" 2>&1
echo "ncu rc=$? $(grep -c '==PROF==' "$OUT/attn_ncu.log") PROF lines"
ncu -i "$OUT/attn.ncu-rep" --page details > "$OUT/attn_details.txt" 2>&1
for k in forward_kernel backward_dq_kernel backward_dkdv_kernel; do
    ncu -i "$OUT/attn.ncu-rep" --kernel-name "$k" --page source --csv --print-source sass \
        > "$OUT/attn_sass_$k.csv" 2> "$OUT/attn_sass_$k.err"
    echo "$k: $(wc -l < "$OUT/attn_sass_$k.csv") SASS lines"
done
grep -E 'forward_kernel|backward_d|Duration|Issue Slots Busy|Eligible Warps|No Eligible|Compute \(SM\) Throughput|Memory Throughput|L2 Hit Rate|Registers Per' \
    "$OUT/attn_details.txt" | head -n 60
