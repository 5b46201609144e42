#!/usr/bin/env bash
# Runs dev/power_probe (built here: build/power_probe) for several copy grids, the grids ALTERNATING
# over ROUNDS rounds (default 3, SECONDS_PER_RUN each, default 6), each run under gpu_power.sh's
# sampler: is a GEMM + copy iteration faster when the copy occupies fewer SMs (less power, so a
# higher clock for the GEMM)? First the GEMM alone and the copy alone (1056 and 66 blocks, 4 s
# each). One line per run.
#   dev/device/power_probe.sh [ctas...]   (default: 1056 264 132 66 33)
set -uo pipefail
cd "$(dirname "$0")/../.."
source dev/device/gpu_power.sh
grids=${*:-1056 264 132 66 33}
for g in $grids; do  # before anything is written
    [[ "$g" =~ ^[1-9][0-9]*$ ]] || { echo "$0: '$g' is not a positive block count" >&2; exit 2; }
done
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
probe() {  # ctas seconds mode: one line, the RESULT (or the error) and the clock, power, temperature
    power_run "$OUT/smi.csv" build/power_probe "$@" > "$OUT/probe.log" 2>&1
    echo "$(grep ^RESULT "$OUT/probe.log" || tail -n 1 "$OUT/probe.log") | $POWER_MHZ MHz $POWER_W W $POWER_C C"
}
probe 1056 4 gemm
probe 1056 4 copy
probe 66 4 copy
for r in $(seq 1 "${ROUNDS:-3}"); do
    for g in $grids; do echo "round $r: $(probe "$g" "${SECONDS_PER_RUN:-6}" mix)"; done
done
