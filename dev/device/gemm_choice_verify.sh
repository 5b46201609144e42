#!/usr/bin/env bash
# The GEMM choice (llmc/matmul_plans.cuh: the candidates a plan asks for once and keeps, stand-in
# pointers in the heuristic query, the untuned single pick) on one GPU, in two calls that each fit
# a device call's 10 minutes:
#   call1: CHECK_NO_TIMING=1 matmul_check in FP32/FP16/BF16 (the algorithm-choice checks and the
#          INFO lines: where cuBLASLt's single pick stands at d12); `run.sh ref test algos` (12
#          test_gpt2cu variants, the --gemm-tune / --gemm-algos round trip)
#   call2: `matmul_check --algorithms` in BF16 and FP16 (untuned against the ranking's first and
#          best, burst); the d12 bench, binaries before the change against after, alternating
#          (trainer_ab.sh, ROUNDS=2), BF16 and FP16
# Needs, built HERE and carried: build/{fp32,fp16,bf16} (dev/device/build.sh FP16 BF16 FP32),
# build/before_{bf16,fp16}/train_gpt2cu, the trainer from the commit before the change (8184cc3),
# and dev_data: `dev/device/prepare.sh gemm` builds and packs them and prints the call.
#   dev/device/gemm_choice_verify.sh call1|call2
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
summary=()
case "${1:-}" in
call1)
    for p in fp32 fp16 bf16; do
        CHECK_NO_TIMING=1 build/$p/matmul_check > "$OUT/matmul_$p.log" 2>&1; rc=$?
        grep -E "candidate|choice|single pick|INFO d12|^FAIL" "$OUT/matmul_$p.log"
        summary+=("matmul_check $p: rc=$rc $(grep -c ^PASS "$OUT/matmul_$p.log") passed, $(grep -c ^FAIL "$OUT/matmul_$p.log") failed")
    done
    OUT=$OUT/run dev/device/run.sh ref test algos > "$OUT/run.log" 2>&1
    summary+=("run.sh ref test algos: see below")
    ;;
call2)
    for p in bf16 fp16; do
        build/$p/matmul_check --algorithms > "$OUT/algorithms_$p.log" 2>&1
        grep -E "^ALGO|^SUMMARY" "$OUT/algorithms_$p.log"
        summary+=("--algorithms $p: $(grep ^SUMMARY "$OUT/algorithms_$p.log")")
    done
    for p in bf16 fp16; do
        OUT=$OUT/ab_$p ROUNDS=${ROUNDS:-2} dev/device/trainer_ab.sh build/before_$p/train_gpt2cu build/$p/train_gpt2cu > "$OUT/ab_$p.log" 2>&1
        summary+=("bench $p before / after: $(grep MEAN "$OUT/ab_$p.log" | tr '\n' ' ')")
    done
    ;;
*) echo "usage: $0 call1|call2" >&2; exit 2 ;;
esac
echo "== summary"
printf '%s\n' "${summary[@]}"
[ -f "$OUT/run.log" ] && sed -n "/^================ summary/,\$p" "$OUT/run.log"
exit 0
