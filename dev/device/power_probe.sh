#!/usr/bin/env bash
# Runs dev/power_probe (built here: build/power_probe) for several copy grids, the grids ALTERNATING
# over ROUNDS rounds, each run under gpu_power.sh's sampler: is a GEMM + copy iteration faster when
# the copy occupies fewer SMs (less power, so a higher clock for the GEMM)? One line per run.
#   dev/device/power_probe.sh [ctas...]   (default: 1056 264 132 66 33)
set -uo pipefail
cd "$(dirname "$0")/../.."
source dev/device/gpu_power.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
grids=${*:-1056 264 132 66 33}
for mode in gemm copy; do
    for g in 1056 66; do
        [ $mode = gemm ] && [ $g = 66 ] && continue
        power_run "$OUT/smi.csv" build/power_probe $g 4 $mode > "$OUT/probe.log" 2>&1
        echo "$(grep ^RESULT "$OUT/probe.log" || tail -n 1 "$OUT/probe.log") | $POWER_MHZ MHz $POWER_W W $POWER_C C"
    done
done
for r in $(seq 1 "${ROUNDS:-3}"); do
    for g in $grids; do
        power_run "$OUT/smi.csv" build/power_probe $g "${SECONDS_PER_RUN:-6}" mix > "$OUT/probe.log" 2>&1
        echo "round $r: $(grep ^RESULT "$OUT/probe.log" || tail -n 1 "$OUT/probe.log") | $POWER_MHZ MHz $POWER_W W $POWER_C C"
    done
done
