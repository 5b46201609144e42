#!/usr/bin/env bash
# The multi-GPU code on a machine with fewer GPUs than ranks: for each N in RANKS_LIST (default
# "2 4"), N ranks sharing the GPUs, each a host of its own to NCCL (dev/device/own_host.sh: TCP
# sockets on loopback). Checks losses and exactness, never times:
#   smoke: 3 steps, and the transport NCCL chose (NCCL_DEBUG=INFO);
#   multi_gpu.sh SECTIONS (default "equal env graphs spike"): 1 vs N loss curves (FP32, BF16;
#       DDP and ZeRO-1), the env-var launch (TCP and file rendezvous, the build without MPI), CUDA
#       graphs on and off alike, the spike guard's one skip (also: hellaswag, resume);
#   scaling_run.sh race: identical runs and runs reducing in other buckets, bitwise.
# On one H200 (2026-12-02) the default took 178 s for 2 ranks and 391 s for 4: one device call per N.
# Binaries prebuilt in build/<precision>/ and build/nompi (dev/device/build.sh NOMPI FP32 BF16);
# shards in dev_data (make data). Logs under $OUT/r<N>/; summaries on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
for n in ${RANKS_LIST:-2 4}; do
    mkdir -p "$OUT/r$n"
    echo "================ $n ranks on $(dev/device/gpu_count.sh) GPU(s)"
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 120 mpirun --allow-run-as-root -np "$n" --bind-to none -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS \
        dev/device/own_host.sh build/bf16/train_gpt2cu --bench -b 4 -t 256 --bench-warmup 1 --bench-steps 2 > "$OUT/r$n/smoke.log" 2>&1
    echo "smoke rc=$?: $(grep -h ^RESULT "$OUT/r$n/smoke.log" | cut -c1-160)"
    grep -ohE "NET/Socket : Using \[0\][^ ]*|Connected all rings.*|comm 0x[0-9a-f]+ rank [0-9]+ nRanks [0-9]+ nNodes [0-9]+" "$OUT/r$n/smoke.log" | sort | uniq -c | head -n 6
    grep -h "error\|WARN" "$OUT/r$n/smoke.log" | head -n 5
    RANKS=$n OUT=$OUT/r$n timeout 420 dev/device/multi_gpu.sh ${SECTIONS:-equal env graphs spike} 2>&1 | sed -n '/^================ summary/,$p' | tail -n +2
    RANKS=$n OUT=$OUT/r$n timeout 240 dev/device/scaling_run.sh race 2>&1 | grep -E "race stress|error"
done
