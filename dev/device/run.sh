#!/usr/bin/env bash
# The one script a device call runs: reference state, whole-model tests, kernel checks, tokenizer
# comparison, throughput. Binaries come prebuilt in build/<precision>/ (dev/device/build.sh).
# Logs go to $OUT; a short table is printed last.
#   dev/device/run.sh [sections...]   sections: ref test checks algos tok bench (default: all), shapes
# shapes (only when named): the whole model against PyTorch (reference.py + test_gpt2cu in every
# build of BUILDS) beyond the reference's d12 B=4 T=64: every GPT-2 width (NH 12/16/20/25, C 768
# to 1600, with fewer layers), odd B and T, the full context. SHAPES: config:layers:B:T[:recompute
# level,lm-head chunk] entries (the default below); each reference is removed after its tests.
# BUILDS: the build/ subdirectories that test and checks run (default "fp32 fp16 bf16"); a name's
# precision is its part before any "_" (BUILDS="bf16 bf16_all" checks a branch's build beside main's).
# tok: needs build/devdata/ (dev/device/prepare.sh) or .devdata/: a copy of ../shared/data made before the call.
# algos: the GEMM algorithm choices file: a tuned run writes <out>/gemm_algos.txt; a second run
# given it (--gemm-algos) reports it and repeats the losses bit for bit (log.jsonl); a missing or foreign file
# is one line and a non-zero exit.
set -uo pipefail
cd "$(dirname "$0")/../.."
for b in ${BUILDS:-}; do  # before anything is written
    [ -d "build/$b" ] || { echo "$0: BUILDS names build/$b, which does not exist (dev/device/build.sh)" >&2; exit 2; }
done
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# libpcre2 for build/tokenize, where prepare.sh packed it (the device machine has none)
[ -d build/lib ] && export LD_LIBRARY_PATH=$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
sections=${*:-ref test checks algos tok bench}
summary=()
has() { [[ " $sections " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
ref_note=""   # set when reference.py failed: the test lines then say their reference state may be stale
if has ref; then
    PYTHONUNBUFFERED=1 python3 dev/reference.py --out dev_data 2>&1 | tee "$OUT/reference.log" | tail -n 15
    ref_rc=${PIPESTATUS[0]}
    summary+=("reference.py: rc=$ref_rc $(grep -v '^[[:space:]]*$' "$OUT/reference.log" | tail -n 1)")
    [ "$ref_rc" -ne 0 ] && ref_note=" [reference.py FAILED rc=$ref_rc: dev_data/reference_*.bin missing or stale]"
fi
if has test; then
    for p in ${BUILDS:-fp32 fp16 bf16}; do
        [ -x build/$p/test_gpt2cu ] || continue
        build/$p/test_gpt2cu > "$OUT/test_$p.log" 2>&1; rc=$?
        cat "$OUT/test_$p.log"
        summary+=("test_gpt2cu $p: rc=$rc $(grep -c ^FAIL "$OUT/test_$p.log") FAIL$ref_note")
        # the chunked lm head with a partial last chunk: 100 + 100 + 56 of the reference's B*T = 256 tokens
        build/$p/test_gpt2cu dev_data/reference_model.bin dev_data/reference_state.bin 0 100 > "$OUT/test_${p}_chunk100.log" 2>&1; rc=$?
        summary+=("test_gpt2cu $p lm-head chunk 100 (last 56): rc=$rc $(grep -c ^FAIL "$OUT/test_${p}_chunk100.log") FAIL$ref_note")
        # --recompute 2: backward recomputes the GELU output and both LayerNorm outputs
        build/$p/test_gpt2cu dev_data/reference_model.bin dev_data/reference_state.bin 2 > "$OUT/test_${p}_recompute2.log" 2>&1; rc=$?
        summary+=("test_gpt2cu $p recompute 2: rc=$rc $(grep -c ^FAIL "$OUT/test_${p}_recompute2.log") FAIL$ref_note")
        # with the GEMM algorithms timed as the trainer's --gemm-tune 1 does
        build/$p/test_gpt2cu dev_data/reference_model.bin dev_data/reference_state.bin 0 16384 1 > "$OUT/test_${p}_tuned.log" 2>&1; rc=$?
        summary+=("test_gpt2cu $p timed GEMM algorithms: rc=$rc $(grep -c ^FAIL "$OUT/test_${p}_tuned.log") FAIL; $(grep -o 'GEMM algorithms timed:.*' "$OUT/test_${p}_tuned.log")$ref_note")
    done
fi
if has shapes; then
    for s in ${SHAPES:-d12:12:3:77:2,100 d12:12:1:1024 d24:4:2:129 d36:3:3:100 d48:2:2:64:1,64}; do
        IFS=: read -r cfg layers B T extra <<< "$s"
        name=$cfg-L$layers-B$B-T$T${extra:+-${extra//,/-}}
        d=dev_data/shapes/$name
        PYTHONUNBUFFERED=1 python3 dev/reference.py --config "$cfg" --layers "$layers" -B "$B" -T "$T" --out "$d" > "$OUT/ref_$name.log" 2>&1; rc=$?
        if [ $rc -ne 0 ]; then
            summary+=("shape $name: reference.py rc=$rc: $(grep -v '^[[:space:]]*$' "$OUT/ref_$name.log" | tail -n 1)")
            continue
        fi
        for p in ${BUILDS:-fp32 fp16 bf16}; do
            [ -x build/$p/test_gpt2cu ] || continue
            # shellcheck disable=SC2086  # extra: the recompute level and lm-head chunk, as two arguments
            build/$p/test_gpt2cu "$d/reference_model.bin" "$d/reference_state.bin" ${extra//,/ } > "$OUT/test_${p}_$name.log" 2>&1; rc=$?
            # the relative errors of the logits, the loss, the worst gradient tensor and the 10 steps' losses
            errs=$(awk '$1 == "PASS" || $1 == "FAIL" { if ($2 == "logits" || $2 == "loss" || $2 == "losses") e[$2] = $4;
                        else if ($3 == "rel_err" && $4 + 0 > g + 0) { g = $4; gn = $2 } }
                        END { printf "logits %s loss %s grads %s (%s) losses %s", e["logits"], e["loss"], g, gn, e["losses"] }' "$OUT/test_${p}_$name.log")
            summary+=("shape $name $p: rc=$rc $(grep -c ^FAIL "$OUT/test_${p}_$name.log") FAIL; $errs")
        done
        rm -rf "$d"
    done
fi
if has checks; then
    for p in ${BUILDS:-fp16 bf16 fp32}; do
        for c in build/$p/*_check; do
            [ -x "$c" ] || continue
            n=$(basename "$c")
            timeout 120 "$c" > "$OUT/${n}_$p.log" 2>&1; rc=$?
            grep -E '^(FAIL|PASS)' "$OUT/${n}_$p.log" | grep -v ^PASS
            summary+=("$n $p: rc=$rc $(tail -n 1 "$OUT/${n}_$p.log")")
        done
        grep -hE 'GB/s|TFLOP' "$OUT"/*_check_$p.log > "$OUT/kernel_speed_$p.txt" 2>/dev/null
        # the model's attention against float64 and PyTorch's flash attention (fp16/bf16 only)
        if [ "${p%%_*}" != fp32 ] && [ -x build/$p/attention_check ]; then
            timeout 300 python3 dev/cuda/sdpa_check.py --binary build/$p/attention_check --dtype "${p%%_*}" > "$OUT/sdpa_check_$p.log" 2>&1; rc=$?
            grep ^FAIL "$OUT/sdpa_check_$p.log"
            summary+=("sdpa_check $p: rc=$rc $(tail -n 1 "$OUT/sdpa_check_$p.log"); $(grep ^SUMMARY "$OUT/sdpa_check_$p.log")")
        fi
    done
fi
if has algos; then
    bin=build/bf16/train_gpt2cu
    a="-e d12 -b 4 -t 1024 -x 5 -l 3e-4 --warmup 2 -i dev_data/tinyshakespeare_train.bin -g 0 --val-batches 1"
    rm -rf runs/ga1 runs/ga2
    # --gemm-tune 2 (timed at the power limit, ~35 s); ALGOS_TUNE=1 for the quick burst timing
    $bin $a -o runs/ga1 --gemm-tune "${ALGOS_TUNE:-2}" > "$OUT/algos_1.log" 2>&1; rc1=$?
    $bin $a -o runs/ga2 --gemm-algos runs/ga1/gemm_algos.txt > "$OUT/algos_2.log" 2>&1; rc2=$?
    summary+=("algos: tuned run rc=$rc1: $(grep -h '^GEMM algorithms' "$OUT/algos_1.log"); with its file rc=$rc2: $(grep -h '^GEMM algorithms' "$OUT/algos_2.log"); losses (log.jsonl, exact): $(python3 dev/compare_losses.py runs/ga1/log.jsonl runs/ga2/log.jsonl --tol 0)")
    $bin $a --gemm-algos /nonexistent/gemm_algos.txt > "$OUT/algos_3.log" 2>&1; rc=$?
    summary+=("algos: missing file rc=$rc: $(grep -h error "$OUT/algos_3.log" | head -n 1)")
    sed '1s/gpu=/gpu=other_/' runs/ga1/gemm_algos.txt > /tmp/foreign_algos.txt
    $bin $a --gemm-algos /tmp/foreign_algos.txt > "$OUT/algos_4.log" 2>&1; rc=$?
    summary+=("algos: another GPU's file rc=$rc: $(grep -h error "$OUT/algos_4.log" | head -n 1)")
    cp runs/ga1/gemm_algos.txt "$OUT/gemm_algos_d12_b4.txt"
    cp runs/ga1/log.jsonl "$OUT/algos_1.jsonl" 2>/dev/null; cp runs/ga2/log.jsonl "$OUT/algos_2.jsonl" 2>/dev/null
    rm -rf runs/ga1 runs/ga2
fi
# ../shared does not travel to the device machine: the data comes as a copy of ../shared/data, in
# build/devdata (dev/device/prepare.sh packs it) or in .devdata (git neither tracks nor ignores it,
# so the working tree's copy carries it)
devdata=build/devdata; [ -f $devdata/tinyshakespeare.txt ] || devdata=.devdata
if has tok && [ ! -f $devdata/tinyshakespeare.txt ]; then
    summary+=("tokenizer vs tiktoken: not run: no build/devdata/ or .devdata/ (dev/device/prepare.sh, or cp -r ../shared/data .devdata, before the device call)")
elif has tok; then
    cp build/tokenize data/tokenize && GPT2_VOCAB_DIR=$devdata/gpt2 python3 dev/tokenizer_fixture.py --compare \
        $devdata/tinyshakespeare.txt dev/unit/fixtures/tokenizer_text.txt > "$OUT/tokenizer.log" 2>&1
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
