#!/usr/bin/env bash
# A/B of attention_check binaries (issue #4's kernel work): each binary's default run (checks +
# timing at B=8 and B=64, T=1024, NH=12), the binaries ALTERNATING, ROUNDS rounds (default 3), so
# that a clock or power drift of the machine hits every binary alike. One line per run: checks
# passed / failed and the forward and backward TFLOP/s at B=8 and B=64; then the mean per binary
# of the forward B=64 TFLOP/s over the runs that timed it (a run without that TIME line is reported
# as FAILED and left out of the mean). Entries are kept by position: the same binary given twice (an
# A/A test) is two entries, each with its own mean and logs.
# With LENGTHS=1, one `--lengths` run per binary at the end (T = 1024 .. 16384 at 64K tokens).
# Logs in $OUT/ab_<position>_<name>_<round>.log (only a few files come back from a device call: keep OUT
# elsewhere, e.g. OUT=/tmp/o, when comparing many binaries).
#   dev/device/attn_ab.sh build/bf16/attention_check build_attn/wip_bf16
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]   (ROUNDS=3 LENGTHS=0)" >&2; exit 2; }
for b in "$@"; do [ -x "$b" ] || { echo "$0: $b: not an executable" >&2; exit 2; }; done
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source dev/device/ab_means.sh
# the TFLOP/s of "TIME <what> B=<B> ..." lines
tflops() { grep -E "^TIME +$2 B=$3 " "$1" | awk '{print $(NF-1)}' | head -n 1; }
bins=("$@")
ab_init
for r in $(seq 1 "${ROUNDS:-3}"); do
    for i in "${!bins[@]}"; do
        b=${bins[$i]}
        name=$(echo "$b" | tr '/' '_')
        log="$OUT/ab_$((i + 1))_${name}_$r.log"
        "$b" > "$log" 2>&1; rc=$?
        f8=$(tflops "$log" attention_forward 8); f64=$(tflops "$log" attention_forward 64)
        b8=$(tflops "$log" attention_backward 8); b64=$(tflops "$log" attention_backward 64)
        echo "$b round $r: rc=$rc $(grep -c '^PASS' "$log") passed $(grep -c '^FAIL' "$log") failed;" \
             "forward B=8 ${f8:-?} B=64 ${f64:-?}; backward B=8 ${b8:-?} B=64 ${b64:-?} TFLOP/s"
        grep -m 3 '^FAIL' "$log"
        if [[ "$f64" =~ ^[0-9]+(\.[0-9]*)?$ ]]; then
            ab_add "$i" "$f64"
        else
            ab_fail "$i"; echo "$b round $r: failed (no forward B=64 timing): $(tail -n 1 "$log")"
        fi
    done
done
ab_means "forward B=64 " TFLOP/s "%.1f"
if [ "${LENGTHS:-0}" = 1 ]; then
    for i in "${!bins[@]}"; do
        b=${bins[$i]}; log="$OUT/lengths_$((i + 1))_$(echo "$b" | tr '/' '_').log"
        "$b" --lengths > "$log" 2>&1
        grep '^LENGTHS B=' "$log" | sed -E "s|^|$b |; s/ +/ /g"
    done
fi
