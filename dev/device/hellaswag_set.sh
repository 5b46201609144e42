#!/usr/bin/env bash
# The multiple-choice set the --hellaswag device checks score (loop_run.sh, multi_gpu.sh): 400
# HellaSwag-format examples made from tinyshakespeare (dev/hellaswag_fixture.py; the real
# HellaSwag is not on these machines) as /tmp/hs.jsonl, tokenized by the carried build/tokenize
# into dev_data/hs.bin. Both steps' output goes to LOG; the exit status is the first failure's.
#   dev/device/hellaswag_set.sh LOG
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${1:?usage: dev/device/hellaswag_set.sh LOG}
# the text and the GPT-2 vocabulary: dev_data's, else the copy of ../shared/data carried in
# build/devdata (make data writes neither into dev_data)
src=dev_data; [ -f $src/tinyshakespeare.txt ] && [ -d $src/gpt2 ] || src=build/devdata
python3 dev/hellaswag_fixture.py /tmp/hs.jsonl --text $src/tinyshakespeare.txt --examples 400 > "$log" 2>&1 &&
    build/tokenize --hellaswag /tmp/hs.jsonl -o dev_data/hs.bin --vocab $src/gpt2 >> "$log" 2>&1
