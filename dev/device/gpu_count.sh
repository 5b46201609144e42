#!/bin/bash
# Prints how many GPUs this process may use: the entries of CUDA_VISIBLE_DEVICES when it is set,
# else the GPUs nvidia-smi lists (its lines "GPU n: ..."; nvidia-smi -L lists every GPU of the
# machine, hidden ones too, and a MIG device as an extra line under its GPU); 0 without nvidia-smi.
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c '[^[:space:]]'
else
    nvidia-smi -L 2>/dev/null | grep -c '^GPU '
fi
exit 0
