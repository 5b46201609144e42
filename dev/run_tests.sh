#!/usr/bin/env bash
# Runs the tests `make test` asks for and prints one summary line "N passed, N failed".
#   CPU: every unit-test program given as an argument (dev/unit/test_*.cpp, and test_*.cu for the CUDA headers' host code; built by make).
#   GPU: when nvidia-smi sees a GPU, test_gpt2cu (against the PyTorch reference state, which
#        dev/reference.py writes; skipped with a note when it is missing), the dev/cuda checks
#        (and attention_check --stress 500), dev/ranks_check.sh (2 ranks on this GPU vs 1), and
#        in FP16/BF16 builds (PRECISION, as make passes it) with torch installed, the attention
#        against PyTorch (dev/cuda/sdpa_check.py).
set -u
cd "$(dirname "$0")/.."
passed=0; failed=0
run_one() {  # a program that ends with "N passed, N failed"
    local out rc
    out=$("$@" 2>&1); rc=$?
    # each failure, and the first lines of the detail the test indents under it (what the script printed)
    echo "$out" | awk '/^FAIL/ {d = 1; n = 0; print; next} d && /^    / && n < 12 {n++; print; next} {d = 0}'
    local line; line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $*: exited $rc without a summary line"; echo "$out" | tail -n 5; failed=$((failed + 1)); return
    fi
    local p f; p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $*: exit code $rc"; fi
    passed=$((passed + p)); failed=$((failed + f))
    local label="$*"; label=${label#python3 }; label=${label#bash }   # the program and its options
    printf '  %-40s %s\n' "$label" "$line"
}
echo "CPU unit tests:"
for t in "$@"; do run_one "$t"; done
for t in dev/unit/test_*.py; do run_one python3 "$t"; done
run_one bash dev/unit/test_cli.sh   # the trainer binary's early, GPU-free errors
if nvidia-smi -L >/dev/null 2>&1; then
    echo "GPU tests:"
    for c in dev/cuda/*_check; do [ -x "$c" ] && run_one "$c"; done
    # the attention kernels' hand-offs under timing disturbance, each run bitwise the first (1-2 s)
    [ -x dev/cuda/attention_check ] && run_one dev/cuda/attention_check --stress 500
    p=$(echo "${PRECISION:-}" | tr A-Z a-z)
    if [ -x dev/cuda/attention_check ] && { [ "$p" = fp16 ] || [ "$p" = bf16 ]; } && python3 -c "import torch" 2>/dev/null; then
        run_one python3 dev/cuda/sdpa_check.py --binary dev/cuda/attention_check --dtype "$p"
    fi
    # the multi-GPU code with 2 ranks sharing this GPU against 1 rank (NCCL over loopback sockets)
    [ -x ./train_gpt2cu ] && [ -x data/tokenize ] && run_one bash dev/ranks_check.sh ./train_gpt2cu
    if [ -f dev_data/reference_state.bin ] && [ -x ./test_gpt2cu ]; then
        run_one ./test_gpt2cu
    else
        echo "  test_gpt2cu skipped: run 'make test_gpt2cu' and 'python3 dev/reference.py' first"
    fi
else
    echo "GPU tests skipped: no GPU visible (nvidia-smi sees none)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
