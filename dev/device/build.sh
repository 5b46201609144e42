#!/usr/bin/env bash
# Builds, HERE (no GPU needed), every binary the device run uses, into build/<precision>/, so the
# device machine's time goes to running, not compiling. Carry `build` with the device call.
#   dev/device/build.sh [FP16 BF16 FP32 NOMPI ASAN]    NOMPI: build/nompi/train_gpt2cu (BF16, make NO_MPI=1);
#   ASAN: build/asan/{train_gpt2cu,test_gpt2cu} (FP16, make SANITIZE=1, not stripped: for host_sanitize.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
precisions=${*:-FP16 BF16 FP32}
if [[ " $precisions " == *" NOMPI "* ]]; then
    precisions=${precisions//NOMPI/}
    mkdir -p build/nompi
    make -B -j"$(nproc)" CI=true PRECISION=BF16 NO_MPI=1 train_gpt2cu >/dev/null
    mv train_gpt2cu build/nompi/ && strip build/nompi/train_gpt2cu
fi
if [[ " $precisions " == *" ASAN "* ]]; then
    precisions=${precisions//ASAN/}
    mkdir -p build/asan
    make -B -j"$(nproc)" CI=true PRECISION=FP16 SANITIZE=1 train_gpt2cu test_gpt2cu >/dev/null
    mv train_gpt2cu test_gpt2cu build/asan/
fi
for p in $precisions; do
    d=build/$(echo "$p" | tr A-Z a-z)
    mkdir -p "$d"
    make -B -j"$(nproc)" CI=true PRECISION="$p" train_gpt2cu test_gpt2cu cuda-checks >/dev/null
    mv train_gpt2cu test_gpt2cu "$d"/
    for c in dev/cuda/*_check; do [ -f "$c" ] && mv "$c" "$d"/; done
    strip "$d"/* 2>/dev/null || true
done
make -j"$(nproc)" CI=true data/tokenize dev/power_probe dev/interconnect >/dev/null && cp data/tokenize build/tokenize &&
    cp dev/power_probe build/power_probe && cp dev/interconnect build/interconnect
du -sh build
