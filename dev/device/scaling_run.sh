#!/usr/bin/env bash
# On a multi-GPU machine: the interconnect probe, the scaling table (dev/scaling.py), and a
# stream-race stress test (two identical N-GPU runs must give bitwise-identical loss curves).
# Binaries prebuilt (dev/device/build.sh, make dev/interconnect); shards in dev_data.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
N=$(nvidia-smi -L | wc -l)
nvidia-smi topo -m | tee "$OUT/topo.txt"
build/interconnect > "$OUT/probe.txt" 2>&1
NCCL_P2P_DISABLE=1 build/interconnect --no-p2p-matrix >> "$OUT/probe.txt" 2>&1
grep -E "^(GPU|P2P|ALLREDUCE|NCCL| +[0-9])" "$OUT/probe.txt" | grep -v "MB" ; grep -E "^ +(1|16|64|256|512|1024)\.0 MB" "$OUT/probe.txt"
python3 dev/scaling.py --bin build/bf16/train_gpt2cu --probe build/interconnect --steps 8 --out "$OUT/scaling" \
    > "$OUT/scaling.log" 2>&1
tail -n 30 "$OUT/scaling.log"
# race stress: identical runs, identical results (the reducer's events are the only ordering;
# --gemm-tune 0: both runs on cuBLASLt's first algorithms, not on two timings)
args="-e d12 -b 4 -t 1024 -d 16384 -x 20 -l 3e-4 --warmup 5 -i dev_data/tinyshakespeare_train.bin --bucket-mb 4 --gemm-tune 0"
for i in 1 2; do mpirun --allow-run-as-root -np $N --bind-to none -x NCCL_NVLS_ENABLE build/bf16/train_gpt2cu $args > "$OUT/race$i.log" 2>&1; done
echo "race stress (two runs, bitwise): $(python3 dev/compare_losses.py "$OUT/race1.log" "$OUT/race2.log" --tol 0)"
