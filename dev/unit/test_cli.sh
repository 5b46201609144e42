#!/usr/bin/env bash
# The trainer binary's early errors, which come before any GPU work, so CI checks them: each is
# ONE line on stderr, a non-zero exit within a second, and nothing written. Run from the repo root
# (make test does). Needs ./train_gpt2cu and data/tokenize.
set -u
passed=0; failed=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# expect NAME PATTERN -- COMMAND...: fails unless exit != 0, stderr is one line containing PATTERN, < 1 s
expect() {
    local name=$1 pattern=$2; shift 3
    local t0 t1 rc err
    t0=$(date +%s%N)
    err=$("$@" 2>&1 >/dev/null); rc=$?
    t1=$(date +%s%N)
    local ms=$(( (t1 - t0) / 1000000 )) lines
    lines=$(printf '%s' "$err" | grep -c '')
    if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ] && [[ "$err" == *"$pattern"* ]] && [ "$ms" -lt 1000 ]; then
        passed=$((passed + 1)); echo "PASS $name"
    else
        failed=$((failed + 1)); echo "FAIL $name: rc=$rc, $lines line(s), ${ms} ms: $err"
    fi
}
bin=./train_gpt2cu
if [ ! -x "$bin" ] || [ ! -x data/tokenize ]; then echo "FAIL test_cli: build ./train_gpt2cu and data/tokenize first"; echo "0 passed, 1 failed"; exit 1; fi
# a tiny dataset: 90 % train, 10 % val
for i in $(seq 60); do echo "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer."; done > "$tmp/text.txt"
data/tokenize "$tmp/text.txt" -o "$tmp/d" >/dev/null 2>&1
d="-i $tmp/d_train.bin -j $tmp/d_val.bin -b 1 -t 8"
# first: --help (which also loads the CUDA libraries into the page cache, so the timings below are the program's)
$bin --help > "$tmp/help.txt" 2>&1 && grep -q -- "--total-batch-tokens" "$tmp/help.txt" && { passed=$((passed + 1)); echo "PASS --help exits 0 and lists the options"; } \
    || { failed=$((failed + 1)); echo "FAIL --help"; }
expect "unknown option" "unknown option '--nope'" -- $bin --nope
expect "bad value" "option --lr: 'fast' is not a number" -- $bin --lr fast
expect "out of range" "option --batch: 0 is out of range" -- $bin -b 0
expect "global batch" "not a multiple of B*T*GPUs" -- $bin -b 3 -t 7 -d 100
expect "--resume without --out" "--resume needs --out" -- $bin --resume
expect "missing shards" "no file matches" -- $bin -i "$tmp/none_*.bin"
mkdir -p "$tmp/empty"
expect "missing default dataset names the command" "make data" -- bash -c "cd $tmp/empty && $PWD/$bin"
expect "corrupt shard" "bad magic" -- bash -c "head -c 2000 /dev/urandom > $tmp/bad.bin; $bin -i $tmp/bad.bin"
mkdir -p "$tmp/run"; echo '{"type":"step"}' > "$tmp/run/log.jsonl"
before=$(md5sum "$tmp/run/log.jsonl")
expect "used --out without --resume" "already holds a run" -- $bin $d -o "$tmp/run"
if [ "$(md5sum "$tmp/run/log.jsonl")" = "$before" ]; then passed=$((passed + 1)); echo "PASS used --out left untouched"
else failed=$((failed + 1)); echo "FAIL used --out was modified"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
