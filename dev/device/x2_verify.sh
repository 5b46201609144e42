#!/usr/bin/env bash
# Issue #6's verify list on a machine of 2 distinct GPUs, in two device calls: the 2-GPU machine is
# lent rarely and a call may run 600 s at most, so each part runs under its own timeout (a hang
# costs that part, not the call, and the parts after it still run) and the most important parts
# come first.
#   call1: scaling_run.sh (the interconnect probe; 1 vs 2 GPUs in BF16; the scaling table at
#          T=1024 and 128, 1 and 2 GPUs, DDP with and without P2P, ZeRO-1, sockets, int8; the
#          stream-race stress), then multi_gpu.sh equal int8 bench (1 vs 2 GPUs in FP32 within
#          1e-5 and BF16 within 0.5 %, DDP and ZeRO-1; int8; --bench with P2P on and off);
#   call2: multi_gpu.sh env spike hellaswag resume; faults.sh kill nan peer; stop_signal.sh ranks
#          (one rank per GPU); then multi_gpu.sh peers (torch.compile DDP side by side) with what
#          time is left.
#   dev/device/x2_verify.sh call1|call2      (~400 s each, from the parts' own timings)
# Needs, made before the call (no GPU needed): `dev/device/prepare.sh x2` builds and packs it all
# (build.sh NOMPI FP16 BF16 FP32, build/interconnect, build/tokenize, dev_data/ from make data, and
# for hellaswag build/devdata, a copy of ../shared/data) and prints the call. NCCL_P2P_DISABLE must not be
# set by the caller (the scripts set it for the runs that want it); NVLink multicast stays off.
# Each part writes under $OUT/<part>/ and prints its summary; the lines of every summary come last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# libpcre2 for build/tokenize, where prepare.sh packed it (the device machine has none)
[ -d build/lib ] && export LD_LIBRARY_PATH=$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
case ${1:-} in
    call1|call2) ;;
    *) echo "x2_verify.sh: name the call: call1 or call2 (got '${1:-}')" >&2; exit 2 ;;
esac
gpus=$(dev/device/gpu_count.sh)
if [ "$gpus" != 2 ]; then
    echo "x2_verify.sh: needs 2 distinct GPUs, this machine shows $gpus (nvidia-smi -L / CUDA_VISIBLE_DEVICES)" >&2; exit 2
fi
if [ -n "${NCCL_P2P_DISABLE:-}" ] && [ "$NCCL_P2P_DISABLE" != 0 ]; then
    echo "x2_verify.sh: NCCL_P2P_DISABLE=$NCCL_P2P_DISABLE is set: the P2P-on rows would run without P2P (unset it)" >&2; exit 2
fi
export NCCL_NVLS_ENABLE=0
t0=$SECONDS
# seconds this call may take in all: the per-call limit, less a timed-out part's 20 s to stop
# (timeout signals the part's whole process group: the script, mpirun, the trainers) and the packing
budget=${X2_BUDGET:-560}
min_part=${X2_MIN_PART:-30}   # a part that would get less is skipped, and says so
status=()
# part NAME SECONDS COMMAND...: runs COMMAND with OUT=$OUT/NAME, at most SECONDS (and never past the
# call's budget); its output in $OUT/NAME.log
part() {
    local name=$1 limit=$2; shift 2
    local left=$(( budget - (SECONDS - t0) ))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt "$min_part" ]; then status+=("$name: skipped (${left} s left in the call)"); return; fi
    mkdir -p "$OUT/$name"
    local s=$SECONDS
    OUT=$OUT/$name timeout -k 20 "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
    status+=("$name: rc=$rc in $((SECONDS - s)) s (limit $limit s)$([ $rc = 124 ] && echo ': TIMED OUT, its summary is partial')")
}
if [ "$1" = call1 ]; then
    BLOCKS=${BLOCKS:-1024,128} STEPS=${STEPS:-5} part scaling 330 dev/device/scaling_run.sh
    part equal 250 dev/device/multi_gpu.sh equal int8 bench
else
    part mg 220 dev/device/multi_gpu.sh env spike hellaswag resume
    part faults 200 dev/device/faults.sh kill nan peer
    part stop 120 dev/device/stop_signal.sh ranks
    part peers 600 dev/device/multi_gpu.sh peers
fi
echo "================ x2_verify.sh $1: the parts"
printf '%s\n' "${status[@]}"
for f in "$OUT"/*/summary.txt "$OUT"/*/faults_summary.txt "$OUT"/*/stop_signal_summary.txt; do
    [ -f "$f" ] && { echo "================ ${f#"$OUT"/}"; cat "$f"; }
done
# scaling_run.sh prints only its table, the probe's lines and the pairs compared
[ -f "$OUT/scaling.log" ] && { echo "================ scaling_run.sh"; cat "$OUT/scaling.log"; }
tar czf "$OUT/x2_logs.tgz" -C "$OUT" --exclude=x2_logs.tgz . 2>/dev/null
echo "total $((SECONDS - t0)) s"
