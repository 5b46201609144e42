# Sourced by the device scripts: GPU 0's SM clock and board power while a command runs, sampled
# every 100 ms by nvidia-smi. A training step runs at the GPU's 700 W limit, where the clock is
# whatever the power leaves, so a speed difference between two runs may be a clock difference, and
# a change can pay by spending less energy rather than less time.
#   source dev/device/gpu_power.sh
#   power_run SAMPLES.csv command args... > log   # then $POWER_MHZ and $POWER_W: busy-sample means
power_run() {
    local f=$1; shift
    nvidia-smi -i 0 --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$f" 2>/dev/null &
    local smi=$!
    "$@"
    local rc=$?
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    # the busy samples only (startup and exit draw far less than a step)
    read -r POWER_MHZ POWER_W < <(awk -F, '$2 > 400 {c += $1; w += $2; n++} END {if (n) printf "%.0f %.0f\n", c / n, w / n; else print "- -"}' "$f")
    return $rc
}
