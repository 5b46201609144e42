#!/usr/bin/env bash
# Everything a device plan needs, made HERE (no GPU needed) and packed into ONE file to carry: a
# lent machine is rare and its minutes are few, so none of them should go to compiling, and a
# session should not have to remember which binaries, libraries and data each script reads.
#   dev/device/prepare.sh PLAN
#     one   build/{fp32,fp16,bf16} (dev/device/build.sh): run.sh and the one-GPU scripts
#     gemm  one + build/before_{bf16,fp16}/train_gpt2cu, the trainer at $BEFORE (default 8184cc3,
#           the commit before the GEMM choice change): gemm_choice_verify.sh call1|call2
#     x2    one + build/nompi (the trainer without MPI): x2_verify.sh call1|call2
# Every plan also packs build/{tokenize,interconnect,power_probe}, build/devdata (a copy of
# ../shared/data: the text and the GPT-2 vocabulary, which do not travel), build/lib (libpcre2,
# which data/tokenize links and the device machine lacks) and dev_data's training data (make data).
# It writes device_pack.tar.xz (git-ignored; the device call's carry is 64 MiB in all) and prints
# the device command that unpacks it. NO_BUILD=1 packs what build/ already holds.
set -euo pipefail
cd "$(dirname "$0")/../.."
plan=${1:-}
# per plan: build.sh's arguments, the build/ folders beyond fp32/fp16/bf16, the script it is for
case $plan in
    one) builds="FP16 BF16 FP32" extra="" script="dev/device/run.sh" ;;
    gemm) builds="FP16 BF16 FP32" extra="before_bf16 before_fp16" script="dev/device/gemm_choice_verify.sh call1" ;;
    x2) builds="NOMPI FP16 BF16 FP32" extra="nompi" script="dev/device/x2_verify.sh call1" ;;
    *) echo "prepare.sh: usage: dev/device/prepare.sh one|gemm|x2 (got '$plan')" >&2; exit 2 ;;
esac
SHARED=${SHARED:-../shared/data}
for f in "$SHARED/tinyshakespeare.txt" "$SHARED/gpt2/encoder.json" "$SHARED/gpt2/vocab.bpe"; do
    [ -f "$f" ] || { echo "prepare.sh: $f is missing (SHARED names the data folder)" >&2; exit 2; }
done
pack=device_pack.tar.xz
limit_mib=60  # under the carry's 64 MiB
if [ "${NO_BUILD:-0}" != 1 ]; then
    dev/device/build.sh $builds
    if [ "$plan" = gemm ]; then
        before=${BEFORE:-8184cc3}
        wt=$(mktemp -d /tmp/prepare_before.XXXXXX)
        git worktree add -q --detach "$wt" "$before"
        trap 'git worktree remove --force "$wt" 2>/dev/null' EXIT  # also when a build fails
        for p in BF16 FP16; do
            d=build/before_$(echo "$p" | tr A-Z a-z)
            mkdir -p "$d"
            make -C "$wt" -B -j"$(nproc)" CI=true PRECISION="$p" train_gpt2cu >/dev/null
            mv "$wt/train_gpt2cu" "$d/" && strip "$d/train_gpt2cu"
        done
    fi
    GPT2_VOCAB_DIR="$SHARED/gpt2" make -j"$(nproc)" data TINYSHAKESPEARE="$SHARED/tinyshakespeare.txt" >/dev/null
fi
paths=()
for d in fp32 fp16 bf16 $extra; do
    [ -d "build/$d" ] || { echo "prepare.sh: build/$d is missing (run without NO_BUILD=1)" >&2; exit 2; }
    paths+=("build/$d")
done
for f in build/tokenize build/interconnect build/power_probe dev_data/tinyshakespeare_train.bin \
         dev_data/tinyshakespeare_val.bin dev_data/gpt2_tokenizer.bin; do
    [ -f "$f" ] || { echo "prepare.sh: $f is missing (run without NO_BUILD=1)" >&2; exit 2; }
    paths+=("$f")
done
rm -rf build/devdata build/lib
cp -r "$SHARED" build/devdata
mkdir -p build/lib
cp -P /usr/lib/x86_64-linux-gnu/libpcre2-8.so* build/lib/ 2>/dev/null ||
    echo "prepare.sh: no libpcre2-8 to copy (data/tokenize will not start on the device machine)" >&2
paths+=(build/devdata build/lib)
tar cf - "${paths[@]}" | xz -T0 -6 > "$pack.tmp" && mv "$pack.tmp" "$pack"
size=$(( $(stat -c %s "$pack") / 1048576 ))
echo "$pack: ${size} MiB (${paths[*]})"
if [ "$size" -gt "$limit_mib" ]; then
    echo "prepare.sh: $pack is ${size} MiB, over the ${limit_mib} MiB a carry can take with room to spare" >&2; exit 1
fi
echo "device call: carry [\"$pack\"], command: tar xJf $pack && $script"
[ "$plan" = one ] || echo "then the same with call2 (carry the pack again: a machine that was given back starts bare)"
