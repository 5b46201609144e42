# Waiting for a running program's output, sourced by the scripts that signal or kill a run at a
# chosen moment (faults.sh, stop_signal.sh):
#   wait_for_line FILE PATTERN SECONDS PID
#       returns 0 as soon as FILE holds a line matching PATTERN (grep), 1 when process PID has
#       ended first or SECONDS have passed (polled every 50 ms).
wait_for_line() {
    for _ in $(seq 1 $(( $3 * 20 ))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$4" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
