#!/usr/bin/env bash
# Did a change alter what the trainer prints or logs? Runs two trainer binaries, A and B, on the
# same short runs and compares everything they print (stdout and stderr) and log (log.jsonl),
# except what depends on time: a step line from its step time on, the RESULT line's time, speed
# and memory values, log.jsonl's ms/tok_s/mfu/exposed_comm_ms/seconds, startup's seconds. For a
# refactor meant to change no behaviour (the losses are compared to the printed digits and, in
# log.jsonl, to 9 significant digits: bitwise for a float).
#   dev/device/same_output.sh A_BINARY B_BINARY     (paths; both read dev_data/ as `make data` writes it)
# The runs (d12 from its random init, B=4, T=256; both binaries in their own empty directory):
#   train:  30 steps on tinyshakespeare, validation every 10 steps (2 batches), a sample every 15,
#           a checkpoint every 10, the spike guard (--skip-loss-z 4 --skip-norm-z 4, window 16)
#           with step 25 on random tokens (--debug-bad-batch);
#   resume: the same run killed after step 15 (--debug-exit-after), then --resume to step 30;
#   nan:    --debug-nan 0:6 --max-bad-steps 2: two steps skipped for NaN gradients, then the stop
#           (exit code 2 and its error line);
#   bench:  --bench, 2 + 6 steps on random tokens.
# Prints one line per run (same / DIFFERENT with the first differing lines) and the exit codes.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ $# -eq 2 ] || { echo "usage: dev/device/same_output.sh A_BINARY B_BINARY" >&2; exit 1; }
root=$(pwd)
bins=("$(realpath "$1")" "$(realpath "$2")")
data=(-i "$root/dev_data/tinyshakespeare_train.bin" -j "$root/dev_data/tinyshakespeare_val.bin" --tokenizer "$root/dev_data/gpt2_tokenizer.bin")
common=(-e d12 -b 4 -t 256 --seed 7)
train=("${common[@]}" "${data[@]}" -x 30 -v 10 --val-batches 2 -s 15 -g 16 -n 10 --skip-loss-z 4 --skip-norm-z 4 --spike-window 16
       --debug-bad-batch 25 -o run)

# stdin -> stdout, the time-dependent parts masked
mask_text() {
    sed -E -e 's/^(step +[0-9]+\/[0-9]+ \|.*\| scale [0-9.e+-]+( \(skipped\))? \|).*/\1 <time>/' \
           -e 's/\(([a-z]+|from [^,]+), [0-9.]+ s\)$/(\1, <s>)/' \
           -e '/^RESULT /s/ (median_ms|tok_per_s|mean_ms|tok_per_s_mean|mfu|[a-z_]*_ms|exposed_comm_pct|comm_mb|busbw_gbs|device_mem_gb)=[0-9.,e+-]+/ \1=#/g'
}
mask_log() {
    python3 -c '
import json, sys
for line in sys.stdin:
    o = json.loads(line)
    for k in ("ms", "tok_s", "mfu", "exposed_comm_ms", "seconds"):
        o.pop(k, None)
    print(json.dumps(o, sort_keys=True))'
}

# run NAME ARGS...: both binaries, each in $OUT/same_<NAME>_<a|b>/ (cwd), output in out.txt
run() {
    local name=$1; shift
    for i in 0 1; do
        local d="$OUT/same_${name}_$([ $i -eq 0 ] && echo a || echo b)"
        rm -rf "$d"; mkdir -p "$d"
        (cd "$d" && "${bins[$i]}" "$@" >> out.txt 2>&1; echo "exit $?" >> out.txt)
    done
}
compare() {  # NAME: prints the verdict
    local name=$1 a="$OUT/same_$1_a" b="$OUT/same_$1_b" what="output"
    mask_text < "$a/out.txt" > "$a/masked.txt"; mask_text < "$b/out.txt" > "$b/masked.txt"
    if [ -f "$a/run/log.jsonl" ] || [ -f "$b/run/log.jsonl" ]; then
        what="output and log.jsonl"
        for d in "$a" "$b"; do { echo "-- log.jsonl"; mask_log < "$d/run/log.jsonl"; } >> "$d/masked.txt" 2>&1; done
    fi
    if cmp -s "$a/masked.txt" "$b/masked.txt"; then
        echo "$name: same $what ($(wc -l < "$a/masked.txt") lines; $(grep -c '^step ' "$a/out.txt") step lines; $(grep '^exit' "$a/out.txt"))"
    else
        echo "$name: DIFFERENT $what:"; diff "$a/masked.txt" "$b/masked.txt" | head -n 12
    fi
}

run train "${train[@]}"
compare train
run resume "${train[@]}" --debug-exit-after 15
for i in 0 1; do (cd "$OUT/same_resume_$([ $i -eq 0 ] && echo a || echo b)" && "${bins[$i]}" "${train[@]}" --resume >> out.txt 2>&1; echo "exit $?" >> out.txt); done
compare resume
run nan "${common[@]}" "${data[@]}" -x 12 --debug-nan 0:6 --max-bad-steps 2 -g 0
compare nan
run bench "${common[@]}" --bench --bench-warmup 2 --bench-steps 6
compare bench
