#!/usr/bin/env bash
# The trainer's HOST code under AddressSanitizer + UBSan (make SANITIZE=1), on a GPU: every host
# path a run takes, each as its own run: options, data loading, the sampler, validation and
# --hellaswag, the spike guard, checkpoint write and --resume, --eval-only, --gemm-tune 1 and
# --gemm-algos, the inf/nan stop (exit 2), --bench, graphs off with recompute, shuffle and wsd,
# 2 ranks with ZeRO-1 (the env launch by TCP, and mpirun when there is one; the ranks share the
# GPU through own_host.sh) checkpointed and resumed, a SIGTERM stop (exit 4), and test_gpt2cu
# against the PyTorch reference. compute-sanitizer checks the GPU side (sanitize.sh).
#   dev/device/build.sh ASAN    (here: build/asan/{train_gpt2cu,test_gpt2cu}, FP16, not stripped)
#   dev/device/host_sanitize.sh [HS_FILE]    (carry build/asan, dev_data; HS_FILE: a --hellaswag file)
# One line per run (exit status against the expected one, seconds, the log's last line), then every
# sanitizer report's first lines. Leaks inside OpenMPI (its libraries, its progress thread's
# libevent loop, the plugins it loads and unloads, whose frames then show as the loader's) and
# libibverbs (one 8-byte block NCCL's InfiniBand probe never frees) are suppressed; a report of ours
# names our functions in its stack. A file that lists only suppressions used is no report.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T=build/asan/train_gpt2cu
[ -x $T ] || { echo "$0: $T is missing (dev/device/build.sh ASAN, then carry build/asan)" >&2; exit 2; }
hs=${1:-}
[ -z "$hs" ] || [ -f "$hs" ] || { echo "$0: HS_FILE '$hs' does not exist" >&2; exit 2; }
export GPT2_VOCAB_DIR=${GPT2_VOCAB_DIR:-dev_data/gpt2}
printf '%s\n' leak:libmpi.so leak:libopen-pal.so leak:libopen-rte.so leak:libevent_core leak:_rtld_global leak:ibv_get_device_list > "$OUT/lsan_suppressions.txt"
# protect_shadow_gap=0: the CUDA driver maps memory where ASan would otherwise reserve its gap
export ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0:log_path=$OUT/asan
export LSAN_OPTIONS=suppressions=$OUT/lsan_suppressions.txt
export UBSAN_OPTIONS=print_stacktrace=1:log_path=$OUT/ubsan
R=$(mktemp -d); trap 'rm -rf "$R"' EXIT
d="-b 4 -t 256"
summary=()
note() { summary+=("$(printf '%-14s rc=%s (want %s) %4s s | %s' "$1" "$2" "$3" "$4" "$(grep -v '^[[:space:]]*$' "$OUT/$1.log" | tail -n 1 | cut -c1-120)")"); }
run() {  # NAME WANT_RC COMMAND...
    local name=$1 want=$2; shift 2
    local t0=$SECONDS
    "$@" > "$OUT/$name.log" 2>&1
    note "$name" $? "$want" $((SECONDS - t0))
}
two() {  # NAME ARGS...: 2 ranks by TCP from the environment, rank 1 in the background
    local name=$1; shift
    WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 dev/device/own_host.sh $T "$@" > "$OUT/${name}_rank1.log" 2>&1 &
    run "$name" 0 env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 dev/device/own_host.sh $T "$@"
    wait
}
nvidia-smi -L
run train     0 $T $d -x 20 -v 10 -s 10 -g 16 -n 10 -o $R/a ${hs:+--hellaswag $hs} --skip-loss-z 3 --skip-norm-z 3 --spike-window 16 --debug-bad-batch 18
run resume    0 $T -o $R/a --resume -x 24
run eval-only 0 $T -e "$(ls -d $R/a/step_* | tail -n 1)/model.bin" --eval-only $d ${hs:+--hellaswag $hs}
run tune      0 $T $d -x 3 --gemm-tune 1 -o $R/t
run algos     0 $T $d -x 3 --gemm-algos $R/t/gemm_algos.txt
run nan       2 $T $d -x 8 --debug-nan 0:2 --max-bad-steps 2
run bench     0 $T -b 8 -t 512 --bench --bench-steps 3 --bench-warmup 1
run nographs  0 $T $d -x 3 --cuda-graphs 0 -r 2 --shuffle --lr-schedule wsd
two zero1        $d -x 4 -z 1 -o $R/z -n 2 -v 2
two zero1-resume -o $R/z --resume -x 6
if command -v mpirun > /dev/null; then
    run mpirun 0 mpirun --allow-run-as-root -np 2 --bind-to none -x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS \
        dev/device/own_host.sh $T $d -x 4 -v 2 -o $R/m
fi
$T $d -x 100000 -o $R/s > "$OUT/signal.log" 2>&1 & pid=$!
t0=$SECONDS
for _ in $(seq 240); do grep -q '^step *3/' "$OUT/signal.log" && break; sleep 0.5; done
kill -TERM $pid; wait $pid; note signal $? 4 $((SECONDS - t0))
if [ -x build/asan/test_gpt2cu ]; then
    python3 dev/reference.py --out dev_data > "$OUT/reference.log" 2>&1
    run test_gpt2cu 0 build/asan/test_gpt2cu
fi
reports=$(grep -l -E 'ERROR: |runtime error' "$OUT"/asan.* "$OUT"/ubsan.* 2>/dev/null)
echo "== sanitizer reports: $(printf '%s' "$reports" | grep -c '') file(s)"
for f in $reports; do
    echo "--- $f"; grep -E 'ERROR|SUMMARY|runtime error|leak of| in [a-z_]' "$f" | head -n 12
done
echo "== runs"
printf '%s\n' "${summary[@]}"
