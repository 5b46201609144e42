#!/usr/bin/env bash
# The trainer binary's early errors, which come before any GPU work, so CI checks them: each is
# ONE line on stderr, a non-zero exit within a second, and nothing written. Run from the repo root
# (make test does). Needs ./train_gpt2cu and data/tokenize; also checks dev/cuda/attention_check's
# --io and --stress errors, test_gpt2cu's, dev/cuda/matmul_check's, dev/interconnect's and dev/power_probe's argument errors when they are built, and
# dev/device/attn_ab.sh's, gemm_tune_ab.sh's, run.sh's, perf.sh's and power_probe.sh's and
# dev/torch_bench.py's argument errors.
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
# (checked: without it every check that reads the data would fail on "no file matches" instead)
if ! tok_err=$(data/tokenize "$tmp/text.txt" -o "$tmp/d" 2>&1 >/dev/null) || [ ! -s "$tmp/d_train.bin" ]; then
    echo "FAIL test_cli: data/tokenize made no dataset: $(printf '%s' "$tok_err" | head -n 1)"; echo "0 passed, 1 failed"; exit 1
fi
d="-i $tmp/d_train.bin -j $tmp/d_val.bin -b 1 -t 8"
# first: --help (which also loads the CUDA libraries into the page cache, so the timings below are the program's)
$bin --help > "$tmp/help.txt" 2>&1 && grep -q -- "--total-batch-tokens" "$tmp/help.txt" && grep -q "^Exit codes: 0 done" "$tmp/help.txt" \
    && { passed=$((passed + 1)); echo "PASS --help exits 0 and lists the options, the stop signals and the exit codes"; } \
    || { failed=$((failed + 1)); echo "FAIL --help"; }
expect "unknown option" "unknown option '--nope'" -- $bin --nope
expect "bad value" "option --lr: 'fast' is not a number" -- $bin --lr fast
expect "out of range" "option --batch: 0 is out of range" -- $bin -b 0
expect "out of range" "option --cuda-graphs: 2 is out of range" -- $bin --cuda-graphs 2
expect "out of range" "option --gemm-tune: 3 is out of range" -- $bin --gemm-tune 3
expect "out of range" "option --grad-int8: 2 is out of range" -- $bin --grad-int8 2
expect "a subnormal --eps" "option --eps: 1e-40 is below a 32-bit float's normal range" -- $bin --eps 1e-40
expect "-o followed by an option" "option --out needs a value, and the next argument is the option --resume" -- $bin -o --resume
expect "out of range" "option --peak-tflops: -3 is out of range [0, 1e+06]" -- $bin --peak-tflops -3
expect "global batch" "not a multiple of B*T*GPUs" -- $bin -b 3 -t 7 -d 100
expect "--resume without --out" "--resume needs --out" -- $bin --resume
expect "-n without --out" "option --checkpoint-every needs --out" -- $bin $d -n 10
expect "--bench-steps without --bench" "option --bench-steps: only with --bench" -- $bin $d --bench-steps 50
expect "missing shards" "no file matches" -- $bin -i "$tmp/none_*.bin"
mkdir -p "$tmp/empty"
expect "missing default dataset names the command" "make data" -- bash -c "cd $tmp/empty && $PWD/$bin"
expect "corrupt shard" "bad magic" -- bash -c "head -c 2000 /dev/urandom > $tmp/bad.bin; $bin -i $tmp/bad.bin"
mkdir -p "$tmp/run"; echo '{"type":"step"}' > "$tmp/run/log.jsonl"
before=$(md5sum "$tmp/run/log.jsonl")
expect "used --out without --resume" "already holds a run" -- $bin $d -o "$tmp/run"
if [ "$(md5sum "$tmp/run/log.jsonl")" = "$before" ]; then passed=$((passed + 1)); echo "PASS used --out left untouched"
else failed=$((failed + 1)); echo "FAIL used --out was modified"; fi
expect "tokenize --val-fraction ''" "option --val-fraction: '' is not a number" -- data/tokenize "$tmp/text.txt" --val-fraction "" -o "$tmp/vf"
expect "--seq-len above the model's" "option --seq-len: 2048 exceeds the model's maximum sequence length 1024" -- $bin $d -t 2048
expect "unknown model descriptor" "option --model: 'd13' is neither d12, d24, d36, d48 nor an existing model file" -- $bin $d -e d13
# --hellaswag: the file is read and checked before any GPU work; --eval-only writes nothing
printf '%s\n' '{"ctx": "To be, or not to be", "endings": ["that is the question.", "a horse.", "the sea.", "no."], "label": 0}' > "$tmp/hs.jsonl"
data/tokenize --hellaswag "$tmp/hs.jsonl" -o "$tmp/hs.bin" >/dev/null 2>&1
expect "--hellaswag missing file" "option --hellaswag: $tmp/none.bin: cannot open" -- $bin $d --hellaswag "$tmp/none.bin"
expect "--hellaswag not a choices file" "bad magic" -- $bin $d --hellaswag "$tmp/d_val.bin"
expect "--hellaswag longer than -t" "the longest example (context + ending) is" -- $bin $d --hellaswag "$tmp/hs.bin"
expect "--hellaswag rows above B*T" "one example is 4 rows of 12 tokens, more than B*T = 16 (raise -b)" -- $bin -i $tmp/d_train.bin -j $tmp/d_val.bin -b 1 -t 16 --hellaswag "$tmp/hs.bin"
# --gemm-algos naming a file that cannot be read: refused before anything is written to -o (the
# check needs the CUDA context, so only where a GPU is visible; it used to come after -o's
# log.jsonl and options.txt were written, and the corrected command was refused as "already holds a run")
if nvidia-smi -L >/dev/null 2>&1; then
    expect "--gemm-algos missing file" "option --gemm-algos: $tmp/none.txt: cannot open" -- $bin $d -o "$tmp/ga" --gemm-algos "$tmp/none.txt"
    if [ -e "$tmp/ga/log.jsonl" ] || [ -e "$tmp/ga/options.txt" ]; then failed=$((failed + 1)); echo "FAIL a refused --gemm-algos left a run in -o"
    else passed=$((passed + 1)); echo "PASS a refused --gemm-algos wrote nothing to -o"; fi
else
    echo "note: no GPU visible: the --gemm-algos check skipped"
fi
expect "--eval-only with --out" "option --eval-only: only evaluates -e's model and writes nothing; not with --out" -- $bin $d --eval-only -o "$tmp/ev"
expect "--eval-only with --bench" "not with --bench" -- $bin --eval-only --bench
expect "-x 0" "option --max-steps: 0 is not a step count" -- $bin -x 0
expect "--beta2 1" "option --beta2: must be below 1" -- $bin --beta2 1
expect "--skip-loss-z 0.5" "option --skip-loss-z: 0.5 would skip a large share of ordinary steps" -- $bin --skip-loss-z 0.5
expect "--spike-window 8" "option --spike-window: 8 is out of range" -- $bin --spike-window 8
# file: without a PATH (rank 0 wrote ./.tmp and failed on "", the other ranks waited 120 s): refused, nothing written
expect "--rendezvous file:" "option --rendezvous: 'file:' names no PATH" -- bash -c "cd $tmp/empty && $PWD/$bin --bench --rendezvous file:"
if [ -e "$tmp/empty/.tmp" ]; then failed=$((failed + 1)); echo "FAIL --rendezvous file: wrote .tmp"
else passed=$((passed + 1)); echo "PASS --rendezvous file: wrote nothing"; fi
# the launch environment (torchrun's and Slurm's variables), checked before anything else
expect "WORLD_SIZE=0" "environment variable WORLD_SIZE=0: must be at least 1" -- env WORLD_SIZE=0 $bin
expect "WORLD_SIZE=abc" "environment variable WORLD_SIZE='abc' is not a whole number" -- env WORLD_SIZE=abc $bin
expect "WORLD_SIZE=2 without RANK" "environment variable RANK is not set, and WORLD_SIZE=2 asks for several ranks" -- env -u RANK WORLD_SIZE=2 $bin
expect "RANK beyond WORLD_SIZE" "environment variable RANK=5: must be in [0, WORLD_SIZE-1 = 1]" -- env WORLD_SIZE=2 RANK=5 $bin
expect "SLURM_PROCID not a number" "environment variable SLURM_PROCID='x' is not a whole number" -- env -u WORLD_SIZE SLURM_NTASKS=2 SLURM_PROCID=x $bin
# numbers a type cannot hold, and file options that name nothing usable
expect "-b beyond 64 bits" "option --batch: 99999999999999999999 is out of range" -- $bin -b 99999999999999999999
expect "-b of 301 digits: quoted cut, the range still said" "0000... is out of range [1, 4096]" -- $bin -b "1$(printf '%0300d' 0)"
expect "--nccl-timeout 1e-46 (0 as a float: 'wait forever')" "option --nccl-timeout: 1e-46 is too close to 0 to be held as a 32-bit float" -- $bin --nccl-timeout 1e-46
expect "-i ''" "option --train: an empty file pattern" -- $bin -i ""
expect "--val-batches beyond one pass over --val" "option --val-batches: 100000 batches, but one pass over $tmp/d_val.bin is " -- $bin $d --val-batches 100000
expect "--val with no row of T+1 tokens" "option --val: $tmp/d_val.bin: no shard holds one row of T + 1 = 1025 tokens (the largest holds " -- $bin -i $tmp/d_train.bin -j $tmp/d_val.bin -b 1 -t 1024
expect "--val among the training files" "option --val: $tmp/d_train.bin is also one of --train's files" -- $bin -i "$tmp/d_*.bin" -j "$tmp/d_train.bin" -b 1 -t 8
expect "-e a directory" "$tmp: is a directory, not a model file" -- $bin $d -e "$tmp"
mkfifo "$tmp/fifo.bin"   # no writer: opening it would wait forever (timeout turns a hang into a failure)
expect "-e a named pipe" "$tmp/fifo.bin: not a regular file, not a model file" -- timeout 5 $bin $d -e "$tmp/fifo.bin"
touch "$tmp/plainfile"
expect "-o under a file" "option --out: $tmp/plainfile: not a directory" -- $bin $d -o "$tmp/plainfile/run"
expect "--bench --resume" "option --resume: not with --bench" -- $bin --bench --resume -o "$tmp/bres"
if [ -e "$tmp/plainfile/run" ] || [ -e "$tmp/bres" ]; then failed=$((failed + 1)); echo "FAIL a refused -o was created"
else passed=$((passed + 1)); echo "PASS a refused -o was not created"; fi
# no GPU visible (here hidden; on CI's machine there is none anyway): one line that says so and
# names why, not a CUDA error at some file:line
expect "no GPU visible" "error: no usable CUDA GPU: " -- env CUDA_VISIBLE_DEVICES= $bin --bench
[ -x dev/interconnect ] && expect "dev/interconnect, no GPU visible" "error: no usable CUDA GPU: " -- env CUDA_VISIBLE_DEVICES= dev/interconnect
[ -x dev/cuda/encoder_check ] && expect "a dev/cuda check, no GPU visible" "error: no usable CUDA GPU: " -- env CUDA_VISIBLE_DEVICES= dev/cuda/encoder_check
# --resume continues with the kept options (options.txt of the newest complete checkpoint), and
# refuses one that defines the run given with another value, before anything else happens
# (small real checkpoints from build/unit/test_checkpoint --make OUT STEP WORLD PRECISION)
ck=build/unit/test_checkpoint
if [ -x "$ck" ]; then
    prec=$(case "$(sed -n 's/^build: precision //p' "$tmp/help.txt")" in fp32) echo 0;; bf16) echo 2;; *) echo 1;; esac)
    $ck --make "$tmp/res" 10 1 "$prec" && $ck --make "$tmp/res" 20 1 "$prec" && $ck --make "$tmp/res4" 20 4 "$prec" &&
        $ck --make "$tmp/resd" 20 1 "$prec" 1 999
    printf 'lr=0.0006\nseed=42\n' > "$tmp/res/step_00000010/options.txt"
    printf 'lr=0.0006\nseed=7\n' > "$tmp/res/step_00000020/options.txt"
    expect "--resume with another --seed" "option --seed: 42 differs from 7, which the run being resumed was started with ($tmp/res/step_00000020/options.txt)" -- $bin -o "$tmp/res" --resume --seed 42
    expect "--resume with another --lr" "option --lr: 0.0003 differs from 0.0006" -- $bin -o "$tmp/res" --resume -l 3e-4
    expect "--resume, a checkpoint of 4 GPUs" "$tmp/res4/step_00000020: checkpoint written by 4 GPUs, this run has 1" -- $bin -o "$tmp/res4" --resume
    # the command line's checks come after the merge: -d 1024 fits the kept -b 4 -t 256
    printf 'lr=0.0006\nseed=7\nbatch=4\nseq-len=256\ntotal-batch-tokens=1024\n' > "$tmp/res/step_00000020/options.txt"
    # (it gets past the options to the checkpoint's model, whose tiny test shape this build refuses)
    expect "--resume -d 1024 with the kept -b 4 -t 256" "res/step_00000020/model.bin: head size 16/2 is not supported" -- $bin -o "$tmp/res" --resume -d 1024
    # the checkpoint's data position needs the shards it was taken in
    printf 'train=%s\n' "$tmp/d_train.bin" > "$tmp/resd/step_00000020/options.txt"
    expect "--resume after the shards changed" "the run read 1 training shards of 999 tokens; --train now matches 1 of" -- $bin -o "$tmp/resd" --resume
    ntok=$(od -An -t d4 -j 8 -N 4 "$tmp/d_train.bin" | tr -d ' ')   # the shard header's token count
    $ck --make "$tmp/rese" 20 1 "$prec" 1 "$ntok" && printf 'train=%s\n' "$tmp/d_train.bin" > "$tmp/rese/step_00000020/options.txt"
    expect "--resume on the same shards (gets past the data to the tiny model)" "head size 16/2 is not supported" -- $bin -o "$tmp/rese" --resume
    # before the first checkpoint, <out>/options.txt (written when the run starts) is the run's
    mkdir -p "$tmp/res0"; printf 'lr=0.0006\n' > "$tmp/res0/options.txt"
    expect "--resume before the first checkpoint: the run's options.txt" "option --lr: 0.0003 differs from 0.0006, which the run being resumed was started with ($tmp/res0/options.txt)" -- $bin -o "$tmp/res0" --resume -l 3e-4
    mkdir -p "$tmp/res_empty"; : > "$tmp/res_empty/options.txt"   # what a lost write could leave: refused, not taken as "no options"
    expect "--resume, an empty options.txt" "$tmp/res_empty/options.txt: empty (damaged?)" -- $bin -o "$tmp/res_empty" --resume
    # a named pipe or a directory as options.txt: refused in one line (fopen would wait on the pipe for a writer)
    mkdir -p "$tmp/res_fifo" "$tmp/res_dir/options.txt"; mkfifo "$tmp/res_fifo/options.txt"
    expect "--resume, options.txt a named pipe" "$tmp/res_fifo/options.txt: not a regular file" -- timeout 5 $bin -o "$tmp/res_fifo" --resume
    expect "--resume, options.txt a directory" "$tmp/res_dir/options.txt: not a regular file" -- timeout 5 $bin -o "$tmp/res_dir" --resume
    printf 'lr=0.0006\nseed=7\nbatch=0\n' > "$tmp/res/step_00000020/options.txt"
    expect "--resume, a bad options.txt" "$tmp/res/step_00000020/options.txt: option --batch: 0 is out of range" -- $bin -o "$tmp/res" --resume
    # a kept value out of range (a range narrowed since the run began): refused, unless replaced
    printf 'lr=0.0006\nseed=7\nspike-window=8\n' > "$tmp/res/step_00000020/options.txt"
    expect "--resume, a kept --spike-window out of range" "options.txt: option --spike-window: 8 is out of range" -- $bin -o "$tmp/res" --resume
    expect "--resume, the kept --spike-window replaced (gets past the options to the tiny model)" "head size 16/2 is not supported" -- $bin -o "$tmp/res" --resume --spike-window 32
    # a checkpoint that lost its model.bin after it was completed
    $ck --make "$tmp/resm" 20 1 "$prec" && rm -f "$tmp/resm/step_00000020/model.bin"
    expect "--resume, a checkpoint without its model.bin" "$tmp/resm/step_00000020/model.bin: missing from a complete checkpoint" -- $bin -o "$tmp/resm" --resume
else
    echo "note: $ck not built: the --resume checks skipped"
fi
# dev/cuda/attention_check --io (the cases dev/cuda/sdpa_check.py writes) checks every case file
# before any GPU work, so its errors are tested here too (when the dev/cuda checks are built)
chk=dev/cuda/attention_check
i32() { python3 -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("<%di" % (len(sys.argv) - 1), *map(int, sys.argv[1:])))' "$@"; }
if [ -x "$chk" ]; then
    expect "--io without a directory" "usage:" -- $chk --io
    mkdir -p "$tmp/io_none" "$tmp/io_short" "$tmp/io_prec"
    expect "--io, no cases" "case_0.in: cannot be opened" -- $chk --io "$tmp/io_none"
    i32 1 1 > "$tmp/io_short/case_0.in"
    expect "--io, truncated header" "shorter than its 16-byte header" -- $chk --io "$tmp/io_short"
    i32 7 1 64 12 > "$tmp/io_prec/case_0.in"
    expect "--io, unknown precision" "its precision is not this build's" -- $chk --io "$tmp/io_prec"
    # a header with each precision code and too few bytes after it: the build's own code must get
    # the size error (the others the precision error)
    # (and B = 0 the shape error)
    sized=0; shaped=0
    for code in 0 1 2; do
        mkdir -p "$tmp/io_$code" "$tmp/io_b0_$code"
        { i32 $code 1 64 12; head -c 1000 /dev/zero; } > "$tmp/io_$code/case_0.in"
        expect "--io, precision code $code, 1000 bytes of data" "case_0.in: " -- $chk --io "$tmp/io_$code"
        $chk --io "$tmp/io_$code" 2>&1 | grep -q "size is not" && sized=$((sized + 1))
        i32 $code 0 64 12 > "$tmp/io_b0_$code/case_0.in"
        expect "--io, precision code $code, B=0" "case_0.in: " -- $chk --io "$tmp/io_b0_$code"
        $chk --io "$tmp/io_b0_$code" 2>&1 | grep -q "B, T, NH must be positive" && shaped=$((shaped + 1))
    done
    if [ "$sized" -eq 1 ] && [ "$shaped" -eq 1 ]; then passed=$((passed + 1)); echo "PASS --io, wrong size and B=0 named"
    else failed=$((failed + 1)); echo "FAIL --io: $sized of 3 precision codes named the size, $shaped the shape"; fi
    if ls "$tmp"/io_*/case_0.out >/dev/null 2>&1; then failed=$((failed + 1)); echo "FAIL --io wrote an output for a bad case"
    else passed=$((passed + 1)); echo "PASS --io wrote nothing for bad cases"; fi
    expect "attention_check --stress without a count" "usage:" -- $chk --stress
    expect "attention_check --stress 0" "--stress RUNS (> 0)" -- $chk --stress 0
    expect "attention_check --stress many" "usage:" -- $chk --stress many
    expect "attention_check, unknown mode" "usage:" -- $chk --stres 10
    # a build without the wgmma kernels (FP32, or not sm_90a; CI's last build of the checks is
    # FP32) refuses the TMA probes before any GPU work: the message is compiled into those only
    if grep -q "TMA needs an sm_90a build" "$chk"; then
        expect "attention_check --racecheck-probe without wgmma" "--racecheck-probe: TMA needs an sm_90a build" -- $chk --racecheck-probe
        expect "attention_check --memcheck-probe without wgmma" "--memcheck-probe: TMA needs an sm_90a build" -- $chk --memcheck-probe
    fi
else
    echo "note: $chk not built (make cuda-checks): its --io checks skipped"
fi
# dev/cuda/matmul_check takes no argument or one of its modes, checked before GPU work
if [ -x dev/cuda/matmul_check ]; then
    expect "matmul_check, unknown mode" "usage: " -- dev/cuda/matmul_check --serach
    expect "matmul_check, unknown mode: the usage names --heuristics" "| --heuristics]" -- dev/cuda/matmul_check --heuristic
    expect "matmul_check, two modes" "usage: " -- dev/cuda/matmul_check --search --algorithms
else
    echo "note: dev/cuda/matmul_check not built (make cuda-checks): its argument checks skipped"
fi
# ./test_gpt2cu's numeric arguments (recompute level, lm-head chunk, timed GEMMs), checked before it reads a file
if [ -x ./test_gpt2cu ]; then
    # --help / -h: its arguments, exit 0 (not "--help: cannot open", a model file of that name)
    for h in --help -h; do
        if out=$(./test_gpt2cu $h 2>&1) && [[ "$out" == "usage: "*"dev/reference.py"* ]]; then passed=$((passed + 1)); echo "PASS test_gpt2cu $h: usage, exit 0"
        else failed=$((failed + 1)); echo "FAIL test_gpt2cu $h: $out"; fi
    done
    expect "test_gpt2cu, recompute level 7" "recompute level (argument 3) must be an integer in [0, 2], got '7'" -- ./test_gpt2cu m s 7
    expect "test_gpt2cu, lm-head chunk 0" "lm-head chunk (tokens) (argument 4) must be an integer" -- ./test_gpt2cu m s 1 0
    expect "test_gpt2cu, lm-head chunk 64k" "got '64k'" -- ./test_gpt2cu m s 1 64k
    expect "test_gpt2cu, timed GEMMs x" "timed GEMM algorithms (0|1) (argument 5)" -- ./test_gpt2cu m s 1 64 x
    expect "test_gpt2cu, a missing model file" "$tmp/none.bin: cannot open" -- ./test_gpt2cu "$tmp/none.bin" s
    # as a missing state file does (llmc/reference_check.h), it says which script writes the two
    expect "test_gpt2cu, a missing model file names dev/reference.py" "(run: python3 dev/reference.py)" -- ./test_gpt2cu "$tmp/none.bin" s
    expect "test_gpt2cu, every numeric argument valid (then the missing file)" "$tmp/none.bin: cannot open" -- ./test_gpt2cu "$tmp/none.bin" s 2 64 1
else
    echo "note: ./test_gpt2cu not built (make test_gpt2cu): its argument checks skipped"
fi
# dev/interconnect (the probe): its argument errors, before it touches the GPU
if [ -x dev/interconnect ]; then
    expect "interconnect, unknown option" "usage: " -- dev/interconnect --bogus
    expect "interconnect, --max-mb not a number" "option --max-mb: 'lots' is not an integer" -- dev/interconnect --max-mb lots
    expect "interconnect, --max-mb 0" "option --max-mb: 0 is out of range" -- dev/interconnect --max-mb 0
else
    echo "note: dev/interconnect not built (make dev/interconnect): its argument checks skipped"
fi
# dev/power_probe (the power study): its argument errors, before it touches the GPU
if [ -x dev/power_probe ]; then
    expect "power_probe without arguments" "usage: " -- dev/power_probe
    expect "power_probe, zero blocks" "ctas and seconds must be positive" -- dev/power_probe 0
    # --help is its usage (not "ctas must be positive": atoi read it as 0), and a number must be one whole
    if out=$(dev/power_probe --help 2>&1) && [[ "$out" == "usage: "* ]]; then passed=$((passed + 1)); echo "PASS power_probe --help: usage, exit 0"
    else failed=$((failed + 1)); echo "FAIL power_probe --help: $out"; fi
    expect "power_probe, blocks not a number" "'many' is not a number" -- dev/power_probe many
    expect "power_probe, seconds not a number" "'6s' is not a number" -- dev/power_probe 66 6s
    expect "power_probe, blocks beyond int" "ctas and seconds must be positive (ctas below 1e9)" -- dev/power_probe 1e10
    expect "power_probe, unknown mode" "mode 'copies' is not mix, copy or gemm" -- dev/power_probe 66 1 copies
else
    echo "note: dev/power_probe not built (make dev/power_probe): its argument checks skipped"
fi
# the device scripts' environment and argument errors, before they write anything (no GPU needed)
expect "run.sh, BUILDS names a missing build" "BUILDS names build/no_such_build, which does not exist" -- \
    env OUT="$tmp/dev_out" BUILDS="no_such_build" dev/device/run.sh test
expect "perf.sh, a PEAK row of three fields" "PEAK row 'bf16 d12 128' is not" -- env OUT="$tmp/dev_out" PEAK="bf16 d12 128" dev/device/perf.sh peak
expect "power_probe.sh, a block count that is no number" "'many' is not a positive block count" -- \
    env OUT="$tmp/dev_out" dev/device/power_probe.sh 66 many
if [ -e "$tmp/dev_out" ]; then failed=$((failed + 1)); echo "FAIL run.sh / perf.sh / power_probe.sh created their output directory on bad input"
else passed=$((passed + 1)); echo "PASS run.sh / perf.sh / power_probe.sh wrote nothing on bad input"; fi
# dev/device/attn_ab.sh (the attention A/B of the device machine): its argument errors, before it writes anything
expect "attn_ab.sh without binaries" "usage: " -- env OUT="$tmp/ab_out" dev/device/attn_ab.sh
expect "attn_ab.sh names a missing binary" "$tmp/none: not an executable" -- env OUT="$tmp/ab_out" dev/device/attn_ab.sh "$tmp/none"
if [ -e "$tmp/ab_out" ]; then failed=$((failed + 1)); echo "FAIL attn_ab.sh created its output directory on bad arguments"
else passed=$((passed + 1)); echo "PASS attn_ab.sh wrote nothing on bad arguments"; fi
expect "gemm_tune_ab.sh names a missing binary" "$tmp/none: not an executable" -- env OUT="$tmp/gt_out" dev/device/gemm_tune_ab.sh "$tmp/none"
if [ -e "$tmp/gt_out" ]; then failed=$((failed + 1)); echo "FAIL gemm_tune_ab.sh created its output directory on a bad argument"
else passed=$((passed + 1)); echo "PASS gemm_tune_ab.sh wrote nothing on a bad argument"; fi
# dev/torch_bench.py (the PyTorch peer): its argument errors come before PyTorch is imported
tb="python3 dev/torch_bench.py"
expect "torch_bench -t too long" "-t 2048 is longer than the model's 1024 positions" -- env -u LOCAL_RANK $tb -t 2048
expect "torch_bench -b 0" "-b 0 must be at least 1" -- $tb -b 0
expect "torch_bench --peak-tflops 0" "--peak-tflops 0.0 must be above 0" -- $tb --peak-tflops 0
expect "torch_bench -d not a multiple" "-d 1000 is not a multiple of B*T*GPUs = 65536" -- $tb -d 1000
expect "torch_bench --ddp without torchrun" "--ddp needs torchrun" -- env -u LOCAL_RANK -u WORLD_SIZE $tb --ddp
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
