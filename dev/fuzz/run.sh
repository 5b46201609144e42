#!/usr/bin/env bash
# Fuzzes the host-side file parsers with libFuzzer + AddressSanitizer + UBSan: one harness per
# reader (dev/fuzz/fuzz_*.cpp; each one's top comment says what it feeds where). For each: builds
# it into build/fuzz/ (clang++ -fsanitize=fuzzer,address,undefined), writes its seeds (valid files
# from the project's own writers: the harness's --seeds mode), runs it for FUZZ_SECONDS, prints one line.
#   dev/fuzz/run.sh [NAME...]      NAME: model_file, shards, checkpoint, tokenizer, gemm_choices,
#                                  choices, corpus, options, bpe_vocab, hellaswag_jsonl (default: all of them)
#   FUZZ_SECONDS=N                 seconds per harness (default 60); CLANGXX: the compiler (clang++)
# Per harness: executions, coverage (edges) at the start -> at the end, inputs added to the corpus,
# and "ok" or what it found with the input that found it. The corpus grows across runs in
# build/fuzz/corpus/NAME; findings go to build/fuzz/crashes/NAME/, the full output to
# build/fuzz/logs/NAME.log. Reproduce one: build/fuzz/fuzz_NAME FILE (FUZZ_VERBOSE=1 also prints
# every error line the readers return). fuzz_corpus encodes with the GPT-2 vocabulary in
# $GPT2_VOCAB_DIR, else ../shared/data/gpt2 (without it, JSON parsing only); fuzz_hellaswag_jsonl
# too (without it, a byte-level vocabulary).
# Exit 0 when no harness found anything, 1 when one did, else 2 when one could not be built or
# could not write its seeds, or (one line) when nothing can run.
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${FUZZ_SECONDS:-60}
[ "$secs" -gt 0 ] 2>/dev/null || { echo "run.sh: FUZZ_SECONDS=$secs is not a whole number of seconds above 0" >&2; exit 2; }
cxx=${CLANGXX:-clang++}
command -v "$cxx" >/dev/null || { echo "run.sh: $cxx not found (libFuzzer needs clang; set CLANGXX)" >&2; exit 2; }
pcre=$(pkg-config --cflags --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)

# max_len per harness: room for the largest seed and then some
declare -A max_len=([model_file]=16384 [shards]=4096 [checkpoint]=20000 [tokenizer]=4096 [gemm_choices]=4096
                    [choices]=4096 [corpus]=4096 [options]=2048 [bpe_vocab]=8192 [hellaswag_jsonl]=4096)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(model_file shards checkpoint tokenizer gemm_choices choices corpus options bpe_vocab hellaswag_jsonl)
for i in "${!names[@]}"; do
    names[$i]=${names[$i]#fuzz_}; names[$i]=${names[$i]%.cpp}
    [ -f "dev/fuzz/fuzz_${names[$i]}.cpp" ] || { echo "run.sh: no harness dev/fuzz/fuzz_${names[$i]}.cpp" >&2; exit 2; }
done

mkdir -p build/fuzz/logs
# build (in parallel) each harness whose binary is missing or older than the harness or any header
build() {
    local name=$1 bin=build/fuzz/fuzz_$1
    [ -x "$bin" ] && [ -z "$(find dev/fuzz llmc data -newer "$bin" \( -name '*.h' -o -name "fuzz_$name.cpp" \) | head -n 1)" ] && return 0
    "$cxx" -std=c++17 -I. -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        "dev/fuzz/fuzz_$name.cpp" $pcre -lpthread -o "$bin" > "build/fuzz/logs/$name.build.log" 2>&1
}
pids=()
for name in "${names[@]}"; do build "$name" & pids+=($!); done
built=()
for i in "${!names[@]}"; do wait "${pids[$i]}"; built+=($?); done
found=0 broken=0
for i in "${!names[@]}"; do
    name=${names[$i]}
    bin=build/fuzz/fuzz_$name log=build/fuzz/logs/$name.log
    corpus=build/fuzz/corpus/$name seeds=build/fuzz/seeds/$name crashes=build/fuzz/crashes/$name
    if [ "${built[$i]}" -ne 0 ]; then
        printf '%-15s BUILD FAILED: %s\n' "$name" "$(grep -m 1 'error' "build/fuzz/logs/$name.build.log")"; broken=1; continue
    fi
    rm -rf "$seeds"; mkdir -p "$seeds" "$corpus" "$crashes"
    if ! "$bin" --seeds "$seeds" > "$log" 2>&1; then
        printf '%-15s SEEDS FAILED: %s\n' "$name" "$(tail -n 1 "$log")"; broken=1; continue
    fi
    t0=$(date +%s)
    timeout $((secs + 120)) "$bin" -max_total_time="$secs" -max_len="${max_len[$name]:-4096}" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" "$seeds" > "$log" 2>&1
    rc=$? took=$(( $(date +%s) - t0 ))
    runs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    new=$(grep -ao 'stat::new_units_added: *[0-9]*' "$log" | grep -o '[0-9]*$')
    cov0=$(grep -a -m 1 'INITED' "$log" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*')
    cov1=$(grep -ao 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*')
    if [ -z "$runs" ]; then   # no final stats after a crash: the last status line's count
        runs=$(grep -ao '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
    fi
    result=ok
    if [ "$rc" -ne 0 ]; then
        found=1
        what=$(grep -a -m 1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [^(]*|runtime error: .*|out-of-memory.*' "$log" | head -n 1)
        file=$(grep -ao 'Test unit written to .*' "$log" | tail -n 1 | sed 's/Test unit written to //')
        [ "$rc" -eq 124 ] && what="hung: killed after $((secs + 120)) s"
        result="FOUND (exit $rc) ${what:-see $log}${file:+; input $file}"
    fi
    printf '%-15s %10s runs in %ss, cov %s -> %s, %s new inputs: %s\n' "$name" "${runs:-?}" "$took" "${cov0:-?}" "${cov1:-?}" \
        "${new:-?}" "$result"
done
[ $found -eq 0 ] && [ $broken -eq 1 ] && exit 2
exit $found
