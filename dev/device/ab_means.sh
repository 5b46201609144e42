# The bookkeeping of the alternating A/B scripts (trainer_ab.sh, attn_ab.sh), sourced by both:
# per entry of `bins` (kept by position, so an A/A test has two entries) the sum and count of the
# runs that gave a value, and the runs that failed; then one MEAN line per entry.
#   ab_init                       zeroes sum/ok/fails for every entry of bins
#   ab_add I VALUE                entry I's run gave VALUE
#   ab_fail I                     entry I's run failed (the script reports why)
#   ab_means PREFIX UNIT FMT [NOTE]
#       "MEAN <bin>: <PREFIX><mean> <UNIT>", the mean printed with FMT over the successful runs;
#       NOTE (e.g. "median tok/s") opens the parenthesis; failures are counted there, and an entry
#       whose runs all failed shows "-".
ab_init() { sum=(); ok=(); fails=(); local i; for i in "${!bins[@]}"; do sum[$i]=0; ok[$i]=0; fails[$i]=0; done; }
ab_add() { sum[$1]=$(awk -v a="${sum[$1]}" -v x="$2" 'BEGIN {print a + x}'); ok[$1]=$((ok[$1] + 1)); }
ab_fail() { fails[$1]=$((fails[$1] + 1)); }
ab_means() {
    local prefix=$1 unit=$2 fmt=$3 note=${4:-} i n f mean
    for i in "${!bins[@]}"; do
        n=${ok[$i]} f=${fails[$i]}
        if [ "$n" -eq 0 ]; then
            echo "MEAN ${bins[$i]}: ${prefix}- $unit (${note:+$note; }all $f rounds FAILED)"
            continue
        fi
        mean=$(awk -v a="${sum[$i]}" -v n="$n" -v fmt="$fmt" 'BEGIN {printf fmt, a / n}')
        if [ "$f" -eq 0 ]; then
            echo "MEAN ${bins[$i]}: $prefix$mean $unit${note:+ ($note, mean over rounds)}"
        else
            echo "MEAN ${bins[$i]}: $prefix$mean $unit (${note:+$note, }mean over the $n successful of $((n + f)) rounds; $f FAILED)"
        fi
    done
}
