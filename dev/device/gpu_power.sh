# Sourced by the device scripts: GPU 0's SM clock, board power and temperature while a command
# runs, sampled every 100 ms by nvidia-smi. A training step runs at the GPU's 700 W limit, where
# the clock is whatever the power leaves, so a speed difference between two runs may be a clock
# difference, and a change can pay by spending less energy rather than less time. A hotter GPU
# leaks more: at the same power it holds a lower clock, which is why runs late in a device call
# can be slower than the same binary early in it.
#   source dev/device/gpu_power.sh
#   power_run SAMPLES.csv command args... > log   # then $POWER_MHZ, $POWER_W, $POWER_C: busy-sample means
#   result_field "$(grep ^RESULT log)" NAME        # one field of a RESULT line (tok_per_s, mfu, ...)
power_run() {
    local f=$1; shift
    nvidia-smi -i 0 --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > "$f" 2>/dev/null &
    local smi=$!
    "$@"
    local rc=$?
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    # the busy samples only (startup and exit draw far less than a step)
    read -r POWER_MHZ POWER_W POWER_C < <(awk -F, '$2 > 400 {c += $1; w += $2; t += $3; n++} END {if (n) printf "%.0f %.0f %.0f\n", c / n, w / n, t / n; else print "- - -"}' "$f")
    return $rc
}
result_field() { echo "$1" | tr ' ' '\n' | grep "^$2=" | cut -d= -f2; }
