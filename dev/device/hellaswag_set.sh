#!/usr/bin/env bash
# The multiple-choice set the --hellaswag device checks score (loop_run.sh, multi_gpu.sh): 400
# HellaSwag-format examples made from tinyshakespeare (dev/hellaswag_fixture.py; the real
# HellaSwag is not on these machines) as /tmp/hs.jsonl, tokenized by the carried build/tokenize
# into dev_data/hs.bin. Both steps' output goes to LOG; the exit status is the first failure's.
#   dev/device/hellaswag_set.sh LOG
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: dev/device/hellaswag_set.sh LOG}
python3 dev/hellaswag_fixture.py /tmp/hs.jsonl --text dev_data/tinyshakespeare.txt --examples 400 > "$log" 2>&1 &&
    build/tokenize --hellaswag /tmp/hs.jsonl -o dev_data/hs.bin --vocab dev_data/gpt2 >> "$log" 2>&1
