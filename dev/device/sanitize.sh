#!/usr/bin/env bash
# The kernels under NVIDIA's compute-sanitizer: memcheck (out-of-bounds and misaligned accesses,
# leaked device memory at exit), racecheck (shared-memory hazards between a block's threads),
# initcheck (reads of device memory never written), synccheck (barriers some threads never reach).
# Targets, from the carried build/<precision>/ (dev/device/build.sh):
#   trainer: train_gpt2cu --bench, d12, B=2, T=256, one untimed + one timed step, CUDA graphs off
#            (every kernel launched on its own: the forward, backward, norm and AdamW of a real step,
#            with the Hopper attention at this T), with RECOMPUTE (default 0);
#   <name>:  each dev/cuda/<name>_check with CHECK_NO_TIMING=1 (its correctness cases only);
#   probe:   matmul_check --initcheck-probe: a cuBLASLt GEMM's output, correct, read by a plain kernel
#            (whether initcheck sees cuBLASLt's writes: with it, initcheck's reports are read).
#   [PRECISION=bf16] [RUNS="memcheck:trainer memcheck:attention ..."] [LIMIT_S=120] [BUDGET_S=480]
#   [RECOMPUTE=0] [PRINT_LIMIT=20] dev/device/sanitize.sh
# RUNS: tool:target pairs (default: memcheck on the trainer and every check, racecheck on the
# trainer and the attention, layernorm and classifier checks, initcheck on the probe and the
# trainer, synccheck on the trainer). Each run stops after LIMIT_S; runs not started within BUDGET_S of the start are
# listed as not run. One line per run: the tool's error count (or why there is none) and the kernels
# its first PRINT_LIMIT reports name, with their counts.
# Reading the results (H200, 2026-12-02; dev/perf_log.md): initcheck does not see cuBLASLt's BF16
# kernels write their outputs (the probe: every read of a correct output reported), so in BF16 its
# reports of reads of GEMM outputs (layernorm_forward's input) are the tool's, not ours (FP16 was
# not probed; FP32's cuBLASLt outputs it sees).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
p=$(echo "${PRECISION:-bf16}" | tr "A-Z" "a-z")   # as build/<precision>/ spells it (make says BF16)
LIMIT_S=${LIMIT_S:-120}
BUDGET_S=${BUDGET_S:-480}
RECOMPUTE=${RECOMPUTE:-0}
PRINT_LIMIT=${PRINT_LIMIT:-20}
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
[ -n "$CS" ] || { echo "compute-sanitizer: not found (PATH, /usr/local/cuda*/bin)"; exit 2; }
checks=$(for c in build/$p/*_check; do [ -x "$c" ] && basename "$c" _check; done)
default="memcheck:trainer"
for c in $checks; do default+=" memcheck:$c"; done
default+=" racecheck:trainer racecheck:attention racecheck:layernorm racecheck:classifier initcheck:probe initcheck:trainer synccheck:trainer"
RUNS=${RUNS:-$default}
echo "$("$CS" --version | tail -n 1); precision $p; runs: $RUNS"
start=$(date +%s)
summary=()
for run in $RUNS; do
    tool=${run%%:*} target=${run#*:}
    if [ $(( $(date +%s) - start )) -ge "$BUDGET_S" ]; then summary+=("$tool $target: not run (BUDGET_S $BUDGET_S s spent)"); continue; fi
    case $target in
        trainer) cmd=(build/$p/train_gpt2cu --bench -e d12 -b 2 -t 256 --bench-warmup 1 --bench-steps 1 --cuda-graphs 0 -r "$RECOMPUTE") ;;
        probe) cmd=(build/$p/matmul_check --initcheck-probe) ;;
        *) cmd=(build/$p/${target}_check) ;;
    esac
    [ -x "${cmd[0]}" ] || { summary+=("$tool $target: ${cmd[0]} missing"); continue; }
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    log="$OUT/sanitize_${tool}_${target}.log"
    t0=$(date +%s)
    CHECK_NO_TIMING=1 timeout "$LIMIT_S" "$CS" --tool "$tool" "${extra[@]}" --print-limit "$PRINT_LIMIT" "${cmd[@]}" > "$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    # the tool's last summary line ("ERROR SUMMARY: N errors", "RACECHECK SUMMARY: ...")
    verdict=$(grep -E "(ERROR|RACECHECK|LEAK) SUMMARY" "$log" | tail -n 2 | tr '\n' ' ')
    [ $rc -eq 124 ] && verdict="stopped after $LIMIT_S s (no verdict) $verdict"
    [ -z "$verdict" ] && verdict="no summary: $(tail -n 2 "$log" | tr '\n' ' ')"
    kernels=$(grep -oE "Device Frame: ?[A-Za-z_][A-Za-z0-9_]*" "$log" | sed -E 's/Device Frame: ?//' | sort | uniq -c | sort -rn | head -n 6 |
              awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')
    summary+=("$tool $target: rc=$rc ${secs}s $verdict${kernels:+ [reports in: $kernels]}")
done
echo "== compute-sanitizer ($p)"
printf '%s\n' "${summary[@]}"
