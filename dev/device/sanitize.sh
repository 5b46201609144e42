#!/usr/bin/env bash
# The kernels under NVIDIA's compute-sanitizer: memcheck (out-of-bounds and misaligned accesses,
# leaked device memory at exit), racecheck (shared-memory hazards between a block's threads),
# initcheck (reads of device memory never written), synccheck (barriers some threads never reach).
# Targets, from the carried build/<precision>/ (dev/device/build.sh):
#   trainer: train_gpt2cu --bench, d12, B=2, T=256, one untimed + one timed step, CUDA graphs off
#            (every kernel launched on its own: the forward, backward, norm and AdamW of a real step,
#            with the Hopper attention at this T), with RECOMPUTE (default 0);
#   trainer-ours:   the same, cuBLASLt's kernels (nvjet, cublas*, xmma, cutlass) left unchecked;
#   trainer-cublas: the same, only cuBLASLt's kernels checked (the two halves of `trainer`);
#   <name>:  each dev/cuda/<name>_check with CHECK_NO_TIMING=1 (its correctness cases only);
#   probe:   matmul_check --initcheck-probe: a cuBLASLt GEMM's output, correct, read by a plain kernel
#            (whether initcheck sees cuBLASLt's writes: with it, initcheck's reports are read);
#   raceprobe: attention_check --racecheck-probe: a TMA copy into shared memory read before its
#            mbarrier wait, and ordinary stores read with no barrier (the control): whether
#            racecheck sees TMA's writes (with it, its reports on the wgmma kernels are read);
#   memprobe: attention_check --memcheck-probe: a freed tile read by TMA and by ordinary loads (the
#            control): whether memcheck sees TMA's reads of global memory.
#   [PRECISION=bf16] [RUNS="memcheck:trainer memcheck:attention ..."] [LIMIT_S=120] [BUDGET_S=480]
#   [RECOMPUTE=0] [PRINT_LIMIT=20] [EXTRA="more compute-sanitizer options"]
#   [TRAINER_SHAPE="-b 2 -t 256": the trainer targets' batch and length, e.g. "-b 3 -t 77"] dev/device/sanitize.sh
# RUNS: tool:target pairs (default: memcheck on the trainer, memprobe and every check; racecheck on
# every check and raceprobe; initcheck on probe and the trainer; synccheck on trainer-ours). Each run
# stops after LIMIT_S; runs not started within BUDGET_S of the start are listed as not run. One
# line per run: the tool's error count (or why there is none: the log's last lines, the signal that
# killed it), the kernels its first PRINT_LIMIT reports name, with their counts, and the most host
# memory in use meanwhile beyond what was in use at its start.
# Reading the results (H200, compute-sanitizer 2025.3.1; dev/perf_log.md, 2026-12-02):
#   - initcheck does not see cuBLASLt's BF16 kernels write their outputs (the probe: every read of
#     a correct output reported), so in BF16 its reports of reads of GEMM outputs (layernorm_forward's
#     input) are the tool's, not ours (FP16 was not probed; FP32's cuBLASLt outputs it sees).
#   - racecheck cannot take the whole trainer: it reports hazards inside cuBLASLt's own nvjet
#     kernels (matmul_check shows them too) and, checking them through a training step, used up
#     the machine's 125 GB of host memory within a minute (then exit 9, no message). With
#     cuBLASLt's kernels left unchecked (trainer-ours), or no kernel checked at all
#     (EXTRA="--kernel-name kns=no_such_kernel"), the first nvjet kernel faults under the tool
#     ("failed to handle a hardware exception"; in matmul_check too). So our kernels are
#     racechecked in their checks (and the probe), not in the trainer.
#   - racecheck does not see TMA's writes (raceprobe: only the control's race is reported, not the
#     copy read before its wait, which reads wrong), so on the wgmma attention its "0 hazards"
#     covers the ordinary shared-memory accesses only; for the rest, attention_check --stress
#     (timing disturbed, every run bitwise the first: evidence, not proof).
#   - memcheck does not see TMA's reads of global memory (memprobe: the freed tile's ordinary loads
#     are reported, its TMA copy is not), so on the wgmma attention its 0 errors cover the
#     ordinary accesses only.
#   - synccheck on the whole trainer does not finish in 100 s; trainer-ours takes seconds.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
p=$(echo "${PRECISION:-bf16}" | tr "A-Z" "a-z")   # as build/<precision>/ spells it (make says BF16)
LIMIT_S=${LIMIT_S:-120}
BUDGET_S=${BUDGET_S:-480}
RECOMPUTE=${RECOMPUTE:-0}
PRINT_LIMIT=${PRINT_LIMIT:-20}
# cuBLASLt's kernels, by the names they show on Hopper (nvjet_*) and before
CUBLAS_KERNELS="nvjet|cublas|xmma|cutlass"
mem_used_mb() { awk '/^MemTotal/ {t = $2} /^MemAvailable/ {a = $2} END {print int((t - a) / 1024)}' /proc/meminfo; }
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
[ -n "$CS" ] || { echo "compute-sanitizer: not found (PATH, /usr/local/cuda*/bin)"; exit 2; }
checks=$(for c in build/$p/*_check; do [ -x "$c" ] && basename "$c" _check; done)
default="memcheck:trainer memcheck:memprobe"
for c in $checks; do default+=" memcheck:$c"; done
for c in $checks; do default+=" racecheck:$c"; done
default+=" racecheck:raceprobe initcheck:probe initcheck:trainer synccheck:trainer-ours"
RUNS=${RUNS:-$default}
echo "$("$CS" --version | tail -n 1); precision $p; runs: $RUNS"
start=$(date +%s)
summary=()
for run in $RUNS; do
    tool=${run%%:*} target=${run#*:}
    if [ $(( $(date +%s) - start )) -ge "$BUDGET_S" ]; then summary+=("$tool $target: not run (BUDGET_S $BUDGET_S s spent)"); continue; fi
    case $target in
        trainer|trainer-ours|trainer-cublas)
            # shellcheck disable=SC2206  # TRAINER_SHAPE: options, split into words
            cmd=(build/$p/train_gpt2cu --bench -e d12 ${TRAINER_SHAPE:--b 2 -t 256} --bench-warmup 1 --bench-steps 1 --cuda-graphs 0 -r "$RECOMPUTE") ;;
        probe) cmd=(build/$p/matmul_check --initcheck-probe) ;;
        raceprobe) cmd=(build/$p/attention_check --racecheck-probe) ;;
        memprobe) cmd=(build/$p/attention_check --memcheck-probe) ;;
        *) cmd=(build/$p/${target}_check) ;;
    esac
    [ -x "${cmd[0]}" ] || { summary+=("$tool $target: ${cmd[0]} missing"); continue; }
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    case $target in
        trainer-ours) extra+=(--kernel-name-exclude "regex=$CUBLAS_KERNELS") ;;
        trainer-cublas) extra+=(--kernel-name "regex=$CUBLAS_KERNELS") ;;
    esac
    # shellcheck disable=SC2206
    extra+=(${EXTRA:-})
    log="$OUT/sanitize_${tool}_${target}.log"
    t0=$(date +%s)
    used0=$(mem_used_mb) peak=0
    CHECK_NO_TIMING=1 timeout "$LIMIT_S" "$CS" --tool "$tool" "${extra[@]}" --print-limit "$PRINT_LIMIT" "${cmd[@]}" > "$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2> /dev/null; do
        used=$(( $(mem_used_mb) - used0 )); [ "$used" -gt "$peak" ] && peak=$used
        sleep 1
    done
    wait "$pid"
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    # the tool's last summary line ("ERROR SUMMARY: N errors", "RACECHECK SUMMARY: ...")
    verdict=$(grep -E "(ERROR|RACECHECK|LEAK) SUMMARY" "$log" | tail -n 2 | tr '\n' ' ')
    [ $rc -eq 124 ] && verdict="stopped after $LIMIT_S s (no verdict) $verdict"
    [ $rc -gt 128 ] && verdict="killed by signal $((rc - 128)) $verdict"
    [ -z "$verdict" ] && verdict="no summary: $(tail -n 3 "$log" | tr '\n' ' ')"
    # the functions its reports name: memcheck's and initcheck's "Device Frame: f(...)", racecheck's
    # "Read access at [void ]f<...>(...)" / "Write access at ..." (template arguments kept)
    kernels=$(grep -oE "(Device Frame: ?|(Read|Write) access at (void )?)[A-Za-z_][A-Za-z0-9_:]*(<[^>]*>)?" "$log" |
              sed -E 's/^(Device Frame: ?|(Read|Write) access at (void )?)//' | sort | uniq -c | sort -rn | head -n 6 |
              awk '{n = $1; $1 = ""; sub(/^ /, ""); printf "%s%s x%s", (NR > 1 ? ", " : ""), $0, n}')
    summary+=("$tool $target: rc=$rc ${secs}s $verdict${kernels:+ [reports in: $kernels]} (host memory +$(awk -v m="$peak" 'BEGIN {printf "%.1f", m / 1024}') GB)")
done
echo "== compute-sanitizer ($p)"
printf '%s\n' "${summary[@]}"
