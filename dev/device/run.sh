#!/usr/bin/env bash
# The one script a device call runs: reference state, whole-model tests, kernel checks, tokenizer
# comparison, throughput. Binaries come prebuilt in build/<precision>/ (dev/device/build.sh).
# Logs go to $OUT; a short table is printed last.
#   dev/device/run.sh [sections...]   sections: ref test checks tok bench (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sections=${*:-ref test checks tok bench}
summary=()
has() { [[ " $sections " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if has ref; then
    PYTHONUNBUFFERED=1 python3 dev/reference.py --out dev_data 2>&1 | tee "$OUT/reference.log" | tail -n 15
fi
if has test; then
    for p in fp32 fp16 bf16; do
        [ -x build/$p/test_gpt2cu ] || continue
        build/$p/test_gpt2cu > "$OUT/test_$p.log" 2>&1; rc=$?
        cat "$OUT/test_$p.log"
        summary+=("test_gpt2cu $p: rc=$rc $(grep -c ^FAIL "$OUT/test_$p.log") FAIL")
        # the chunked lm head: 4 chunks of 64 tokens at the reference's B=4, T=64
        build/$p/test_gpt2cu dev_data/reference_model.bin dev_data/reference_state.bin 0 64 > "$OUT/test_${p}_chunk64.log" 2>&1; rc=$?
        summary+=("test_gpt2cu $p lm-head chunk 64: rc=$rc $(grep -c ^FAIL "$OUT/test_${p}_chunk64.log") FAIL")
    done
fi
if has checks; then
    for p in fp16 bf16 fp32; do
        for c in build/$p/*_check; do
            [ -x "$c" ] || continue
            n=$(basename "$c")
            timeout 120 "$c" > "$OUT/${n}_$p.log" 2>&1; rc=$?
            grep -E '^(FAIL|PASS)' "$OUT/${n}_$p.log" | grep -v ^PASS
            summary+=("$n $p: rc=$rc $(tail -n 1 "$OUT/${n}_$p.log")")
        done
        grep -hE 'GB/s|TFLOP' "$OUT"/*_check_$p.log > "$OUT/kernel_speed_$p.txt" 2>/dev/null
    done
fi
if has tok; then
    # ../shared does not travel to the device machine: the data comes carried in .devdata
    cp build/tokenize data/tokenize && GPT2_VOCAB_DIR=.devdata/gpt2 python3 dev/tokenizer_fixture.py --compare \
        .devdata/tinyshakespeare.txt dev/unit/fixtures/tokenizer_text.txt > "$OUT/tokenizer.log" 2>&1
    summary+=("tokenizer vs tiktoken: $(tail -n 2 "$OUT/tokenizer.log" | tr '\n' ' ')")
fi
if has bench; then
    for p in fp16 bf16; do
        [ -x build/$p/train_gpt2cu ] || continue
        build/$p/train_gpt2cu --bench -b 64 -t 1024 --bench-warmup 5 --bench-steps 20 > "$OUT/bench_$p.log" 2>&1
        summary+=("bench $p: $(grep ^RESULT "$OUT/bench_$p.log" || tail -n 2 "$OUT/bench_$p.log")")
    done
    python3 dev/cuda/sdpa_bench.py --dtype fp16 > "$OUT/sdpa_fp16.log" 2>&1
    summary+=("$(cat "$OUT/sdpa_fp16.log")")
    summary+=("$(grep -h 'TIME.*attention' "$OUT"/attention_check_fp16.log)")
fi
echo "================ summary"
printf '%s\n' "${summary[@]}"
