#!/usr/bin/env bash
# Issue #10 on one 4-GPU machine, in order of priority (a short device budget may cut the tail):
#   1. the interconnect probe (P2P matrix, all-reduce sweep with and without P2P);
#   2. 1 vs 4 GPUs loss curves, 20 steps, same global batch (multi_gpu.sh equal, BF16);
#   3. the scaling table (dev/scaling.py: 1, 2, 4 GPUs; DDP, DDP without P2P, ZeRO-1; the
#      524288-token global batch and the seed's 4 sequences per GPU; blocks BLOCKS, default
#      1024,128,512 in that order), with the predictor.
# Everything lands in $OUT/four_gpu.tgz (the device tool returns few files); summaries on stdout.
# Binaries prebuilt here: build/bf16/train_gpt2cu (dev/device/build.sh BF16), build/interconnect.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$OUT/four_gpu; mkdir -p "$R"
export NCCL_NVLS_ENABLE=0
STEPS=${STEPS:-5}
pack() { tar czf "$OUT/four_gpu.tgz" -C "$OUT" four_gpu; }
trap pack EXIT
nvidia-smi topo -m > "$R/topo.txt" 2>&1; head -n 6 "$R/topo.txt"
timeout 60 build/interconnect > "$R/probe.txt" 2>&1
NCCL_P2P_DISABLE=1 timeout 60 build/interconnect --no-p2p-matrix >> "$R/probe.txt" 2>&1
grep -E "^(P2P|ALLREDUCE_FIT)" "$R/probe.txt"
OUT=$R PRECISIONS=bf16 timeout 120 dev/device/multi_gpu.sh equal 2>&1 | tail -n 3
pack
python3 dev/scaling.py --bin build/bf16/train_gpt2cu --probe build/interconnect --blocks "${BLOCKS:-1024,128,512}" \
    --steps "$STEPS" --out "$R/scaling" 2>&1 | tee "$R/scaling.log" | grep --line-buffered -E "^(probe|  [0-9]|\|)"
