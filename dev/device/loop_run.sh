#!/usr/bin/env bash
# The training loop on one GPU, checked end to end:
#   1. test_gpt2cu with recompute 0/1/2 (FP16), the HF-converter check (dev/convert_hf.py);
#   2. 100 steps of d12, B=8, T=1024, warmup + cosine, from the reference's initial model file on
#      tinyshakespeare, FP16 and BF16, vs the same run in PyTorch (dev/train_reference.py), the
#      README's claims (Training): BF16 within 0.5 % of PyTorch fp32 at every step, FP16 within
#      0.75 % of PyTorch with fp16 autocast and the same dynamic loss scaling (and, for information,
#      FP16 vs PyTorch fp32: up to 12 % around step 5, after the skipped step 4);
#   3. resume: 20 steps straight vs 10 steps + kill + --resume 10 steps (the options from the
#      checkpoint): bitwise equal losses (the runs' log.jsonl, exact floats); another -l on resume
#      is refused;
#   4. val: the validation loss of the same rows at -b 64 (more than tinyshakespeare's validation
#      data holds), 4 and 5, and with 2 and 3 ranks sharing the GPU;
#      zero1 (not in the default set): --zero 1 on one GPU, killed, resumed, vs DDP, bitwise;
#      export (not in the default set): a checkpoint written as a Hugging Face folder
#      (dev/export_hf.py), loaded by transformers, checked against dev/reference.py;
#      corpus (not in the default set): data/tokenize on JSON Lines into shards, 1 thread vs all,
#      and 10 training steps from them (needs dev_data/tinyshakespeare.txt and dev_data/gpt2/);
#      hellaswag (not in the default set): --hellaswag / --eval-only against
#      dev/hellaswag_reference.py on a synthetic HellaSwag-format set (needs the same files);
#      spike (not in the default set): the spike guard (--skip-loss-z / --skip-norm-z) on a batch of
#      random tokens (--debug-bad-batch): skipped, no false alarms, resumed bitwise;
#      wsd (not in the default set): --lr-schedule wsd extended on --resume before its decay began
#      is bitwise the run started with the longer length;
#      badres (not in the default set): --max-bad-steps across a resume: a run whose gradients turn
#      NaN from step 3 on (--debug-nan 0:3), killed after step 5 and resumed, stops at step 7 with
#      exit 2, as the uninterrupted run does (checkpoints keep the count of bad steps in a row);
#      odd (not in the default set): the loop at a length and batch no other run uses, B=3, T=77,
#      two micro-steps per step: 30 steps against PyTorch (FP32 within 1e-4 of PyTorch fp32, BF16
#      within 0.5 %), validation and a 100-token sample (its window slides past T) at T=77, 2 ranks
#      sharing the GPU against 1 (FP32, DDP and ZeRO-1, within 1e-5), and killed after step 10 and
#      resumed, bitwise (FP16);
#      width (not in the default set): the trainer at d48's width (C=1600, NH=25, 2 layers, a model
#      file from dev/reference.py --layers 2): 1 rank against 3 sharing the GPU (DDP and ZeRO-1,
#      FP32 within 1e-5, BF16 within 0.5 %), whose 143,609,600 parameters pad the buffer to 3 x 8 (d12's divide
#      evenly by 2, 3 and 4 ranks, so the other checks never pad), also with --grad-int8 1 (BF16,
#      0.5 %); ZeRO-1 on 3 ranks killed after step 5 and resumed, bitwise;
#   5. memory and speed with --recompute 0/1/2 at B=64.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
summary=()
sections=${*:-tests train resume val recompute}
has() { [[ " $sections " == *" $1 "* ]]; }
# own_hosts N SECONDS COMMAND...: COMMAND as N ranks sharing the GPU, each a host of its own to NCCL
# (dev/device/own_host.sh), stopped after SECONDS
own_hosts() {
    local n=$1 secs=$2; shift 2
    timeout "$secs" mpirun --allow-run-as-root -np "$n" --bind-to none dev/device/own_host.sh "$@"
}
# the reference state (made when missing); when reference.py fails, the lines that read dev_data say so
ref_note=""
if [ ! -f dev_data/reference_model.bin ] || [ ! -f dev_data/reference_state.bin ]; then
    PYTHONUNBUFFERED=1 python3 dev/reference.py --out dev_data 2>&1 | tee "$OUT/reference.log" | tail -n 5
    ref_rc=${PIPESTATUS[0]}
    summary+=("reference.py: rc=$ref_rc $(grep -v '^[[:space:]]*$' "$OUT/reference.log" | tail -n 1)")
    [ "$ref_rc" -ne 0 ] && ref_note=" [reference.py FAILED rc=$ref_rc: dev_data/reference_*.bin missing or stale]"
fi
if has tests; then
    for rc in 0 1 2; do
        build/fp16/test_gpt2cu dev_data/reference_model.bin dev_data/reference_state.bin $rc > "$OUT/test_fp16_rc$rc.log" 2>&1
        summary+=("test_gpt2cu fp16 recompute $rc: rc=$? $(tail -n 1 "$OUT/test_fp16_rc$rc.log")$ref_note")
    done
    python3 dev/convert_hf.py --selftest > "$OUT/hf_selftest.log" 2>&1
    summary+=("convert_hf --selftest: rc=$? $(grep -c ^PASS "$OUT/hf_selftest.log") PASS, $(grep -c ^FAIL "$OUT/hf_selftest.log") FAIL")
    python3 - > "$OUT/hf_make.log" 2>&1 <<'PY'
import transformers, torch
torch.manual_seed(0)
cfg = transformers.GPT2Config(n_layer=4, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257, activation_function="gelu_new")
transformers.GPT2LMHeadModel(cfg).save_pretrained("/tmp/hf_gpt2_small")
PY
    python3 dev/convert_hf.py /tmp/hf_gpt2_small dev_data/hf_small.bin --check-state dev_data/hf_small_state.bin -B 4 -T 64 >> "$OUT/hf_make.log" 2>&1
    for p in fp32 bf16; do
        build/$p/test_gpt2cu dev_data/hf_small.bin dev_data/hf_small_state.bin > "$OUT/test_hf_$p.log" 2>&1
        summary+=("HF GPT2LMHeadModel (4 layers, converted) vs ours, $p: rc=$? $(grep -E '^(PASS|FAIL) (logits|loss)' "$OUT/test_hf_$p.log" | tr '\n' ' ')")
    done
fi
common="-e dev_data/reference_model.bin -i dev_data/tinyshakespeare_train.bin -j dev_data/tinyshakespeare_val.bin -b 8 -t 1024 -l 6e-4 --warmup 10 --lr-final 0.1 --tokenizer dev_data/gpt2_tokenizer.bin"
if has train; then
    # the README's claims (Training): BF16 within 0.5 % of PyTorch fp32 at every step; FP16 within
    # 0.75 % of PyTorch with fp16 autocast and the same dynamic loss scaling (against fp32, FP16's
    # skipped step 4 puts it up to 12 % off around step 5: for information only)
    torch_args="--model dev_data/reference_model.bin --train dev_data/tinyshakespeare_train.bin -B 8 -T 1024 -d 8192 -x 100 --lr 6e-4 --warmup 10 --lr-schedule cosine --lr-final 0.1"
    python3 dev/train_reference.py $torch_args > "$OUT/train_torch.log" 2>&1; rc32=$?
    python3 dev/train_reference.py $torch_args --dtype fp16-autocast > "$OUT/train_torch_fp16.log" 2>&1; rc16=$?
    for p in fp16 bf16; do
        rm -rf runs/train_$p
        build/$p/train_gpt2cu $common -x 100 -v 25 -s 50 -g 48 -o runs/train_$p > "$OUT/train_$p.log" 2>&1; rc=$?
        if [ $p = fp16 ]; then
            ref=train_torch_fp16.log tol=0.0075 rrc=$rc16 what="PyTorch fp16 autocast + loss scaling (README: within 0.75 %)"
        else
            ref=train_torch.log tol=0.005 rrc=$rc32 what="PyTorch fp32 (README: within 0.5 % at every step)"
        fi
        summary+=("100 steps $p (rc=$rc) vs $what, PyTorch rc=$rrc: $(python3 dev/compare_losses.py "$OUT/$ref" "$OUT/train_$p.log" --tol $tol)$ref_note")
        summary+=("   val: $(grep 'val loss' "$OUT/train_$p.log" | tr '\n' ' ')")
    done
    summary+=("   for information, fp16 vs PyTorch fp32 (README: up to 12 % around step 5, 1.5 % at step 100): $(python3 dev/compare_losses.py "$OUT/train_torch.log" "$OUT/train_fp16.log" --tol 0.125)")
    cp runs/train_fp16/log.jsonl "$OUT/train_fp16.jsonl"
    python3 dev/plot.py runs/train_fp16 runs/train_bf16 "$OUT/train_torch.log" "$OUT/train_torch_fp16.log" -o "$OUT/curves.png" > /dev/null 2>&1
fi
if has resume; then
    rm -rf runs/ra runs/rb
    build/fp16/train_gpt2cu $common -x 20 -o runs/ra > "$OUT/resume_a.log" 2>&1
    build/fp16/train_gpt2cu $common -x 20 -n 10 -o runs/rb --debug-exit-after 10 > "$OUT/resume_b1.log" 2>&1
    b1=$?
    # the resumed run names nothing but the run directory: the options come from the checkpoint
    build/fp16/train_gpt2cu -o runs/rb --resume > "$OUT/resume_b2.log" 2>&1
    grep -h '^step' "$OUT/resume_b1.log" "$OUT/resume_b2.log" > "$OUT/resume_b.log"
    # the exact losses: both runs' log.jsonl (9 digits; rb's holds the killed run and the resumed one,
    # the last record of a step counting)
    cp runs/ra/log.jsonl "$OUT/resume_a.jsonl" 2>/dev/null; cp runs/rb/log.jsonl "$OUT/resume_b.jsonl" 2>/dev/null
    summary+=("resume (killed rc=$b1 after step 10, resumed with only -o --resume), log.jsonl: $(python3 dev/compare_losses.py runs/ra/log.jsonl runs/rb/log.jsonl --tol 0)$ref_note")
    # killed before its first checkpoint: --resume starts again from step 0 with the run's options
    # (runs/rc/options.txt, written when it started)
    rm -rf runs/rc
    build/fp16/train_gpt2cu $common -x 20 -n 10 -o runs/rc --debug-exit-after 3 > "$OUT/resume_c1.log" 2>&1
    build/fp16/train_gpt2cu -o runs/rc --resume > "$OUT/resume_c2.log" 2>&1
    summary+=("killed before the first checkpoint, resumed with only -o --resume: $(grep -m1 '^note: no complete' "$OUT/resume_c2.log"); log.jsonl: $(python3 dev/compare_losses.py runs/ra/log.jsonl runs/rc/log.jsonl --tol 0)$ref_note")
    build/fp16/train_gpt2cu -o runs/rb --resume -l 3e-4 > "$OUT/resume_lr.log" 2>&1
    summary+=("resume with another -l: rc=$? $(tail -n 1 "$OUT/resume_lr.log")")
    build/fp16/train_gpt2cu $common -x 20 -o runs/rb > "$OUT/resume_refuse.log" 2>&1
    summary+=("fresh run into a used --out: rc=$? $(tail -n 1 "$OUT/resume_refuse.log")")
fi
if has odd; then
    # T=77 is not a multiple of the attention's 64- and 128-row tiles, and B*T = 231, the GEMMs'
    # row count, is odd; 462 tokens per step
    odd="-e dev_data/reference_model.bin -i dev_data/tinyshakespeare_train.bin -j dev_data/tinyshakespeare_val.bin -b 3 -t 77 -d 462 -l 6e-4 --warmup 5 --lr-final 0.1 --tokenizer dev_data/gpt2_tokenizer.bin"
    python3 dev/train_reference.py --model dev_data/reference_model.bin --train dev_data/tinyshakespeare_train.bin \
        -B 3 -T 77 -d 462 -x 30 --lr 6e-4 --warmup 5 --lr-schedule cosine --lr-final 0.1 > "$OUT/odd_torch.log" 2>&1; rrc=$?
    for p in fp32 bf16; do
        rm -rf runs/odd_$p
        build/$p/train_gpt2cu $odd -x 30 -v 10 -s 30 -g 100 -o runs/odd_$p > "$OUT/odd_$p.log" 2>&1; rc=$?
        tol=0.005; [ $p = fp32 ] && tol=1e-4
        summary+=("30 steps B=3 T=77 $p (rc=$rc) vs PyTorch fp32 (rc=$rrc): $(python3 dev/compare_losses.py "$OUT/odd_torch.log" "$OUT/odd_$p.log" --tol $tol)$ref_note")
        summary+=("   val: $(grep 'val loss' "$OUT/odd_$p.log" | tr '\n' ' ')samples: $(grep -c ': sample ---$' "$OUT/odd_$p.log")")
    done
    # 2 ranks sharing the GPU (own_host.sh), one micro-step each: the same 462 tokens per step as
    # on 1 GPU, so FP32's losses within 1e-5, DDP and ZeRO-1
    for z in 0 1; do
        rm -rf runs/odd_r2z$z
        own_hosts 2 300 build/fp32/train_gpt2cu $odd -x 30 -v 10 -z $z -o runs/odd_r2z$z > "$OUT/odd_r2z$z.log" 2>&1; rc=$?
        summary+=("B=3 T=77 FP32, 2 ranks sharing the GPU, --zero $z (rc=$rc) vs 1 rank: $(python3 dev/compare_losses.py "$OUT/odd_fp32.log" "$OUT/odd_r2z$z.log" --tol 1e-5)")
    done
    rm -rf runs/odd_ra runs/odd_rb
    build/fp16/train_gpt2cu $odd -x 20 -o runs/odd_ra > "$OUT/odd_resume_a.log" 2>&1
    build/fp16/train_gpt2cu $odd -x 20 -n 10 -o runs/odd_rb --debug-exit-after 10 > "$OUT/odd_resume_b1.log" 2>&1; b1=$?
    build/fp16/train_gpt2cu -o runs/odd_rb --resume > "$OUT/odd_resume_b2.log" 2>&1
    summary+=("B=3 T=77 resume (killed rc=$b1 after step 10), log.jsonl: $(python3 dev/compare_losses.py runs/odd_ra/log.jsonl runs/odd_rb/log.jsonl --tol 0)$ref_note")
fi
if has width; then
    PYTHONUNBUFFERED=1 python3 dev/reference.py --config d48 --layers 2 -B 2 -T 64 --steps 1 --out dev_data/width > "$OUT/width_reference.log" 2>&1
    summary+=("width: reference.py --config d48 --layers 2: rc=$? $(grep -v '^[[:space:]]*$' "$OUT/width_reference.log" | tail -n 1)")
    w="-e dev_data/width/reference_model.bin -i dev_data/tinyshakespeare_train.bin -j dev_data/tinyshakespeare_val.bin -b 2 -t 64 -d 384 -x 10 -l 3e-4 --warmup 2 -v 5 -g 0"
    rm -rf runs/width_*
    for p in fp32 bf16; do
        tol=5e-3; [ $p = fp32 ] && tol=1e-5
        build/$p/train_gpt2cu $w -o runs/width_${p}_1 > "$OUT/width_${p}_1.log" 2>&1; rc=$?   # 3 micro-steps; 1 on each of 3 ranks
        summary+=("width $p: 1 rank rc=$rc: $(grep -m1 '^GPT-2' "$OUT/width_${p}_1.log")")
        for z in 0 1; do
            own_hosts 3 300 build/$p/train_gpt2cu $w -z $z -o runs/width_${p}_3z$z > "$OUT/width_${p}_3z$z.log" 2>&1; rc=$?
            summary+=("width $p: 3 ranks sharing the GPU, --zero $z (rc=$rc) vs 1 rank: $(python3 dev/compare_losses.py "$OUT/width_${p}_1.log" "$OUT/width_${p}_3z$z.log" --tol $tol)")
        done
    done
    # the gradients sent as int8 (--grad-int8 1): its pieces and groups cut at the padded shards' edges
    for z in 0 1; do
        own_hosts 3 300 build/bf16/train_gpt2cu $w -z $z --grad-int8 1 > "$OUT/width_int8_3z$z.log" 2>&1; rc=$?
        summary+=("width bf16: 3 ranks, --grad-int8 1 --zero $z (rc=$rc) vs 1 rank: $(python3 dev/compare_losses.py "$OUT/width_bf16_1.log" "$OUT/width_int8_3z$z.log" --tol 5e-3)")
    done
    own_hosts 3 300 build/fp32/train_gpt2cu $w -z 1 -n 5 -o runs/width_3r --debug-exit-after 5 > "$OUT/width_3r1.log" 2>&1; b1=$?
    own_hosts 3 300 build/fp32/train_gpt2cu -o runs/width_3r --resume > "$OUT/width_3r2.log" 2>&1; b2=$?
    summary+=("width fp32: 3 ranks, ZeRO-1, killed (rc=$b1) after step 5, resumed (rc=$b2), log.jsonl: $(python3 dev/compare_losses.py runs/width_fp32_3z1/log.jsonl runs/width_3r/log.jsonl --tol 0)")
    rm -rf dev_data/width
fi
if has zero1; then
    # --zero 1 on one GPU (its shard is the whole model): checkpoints and resumes like DDP, and
    # computes the same losses, bit for bit
    rm -rf runs/za runs/zb
    build/bf16/train_gpt2cu $common -x 6 -o runs/za > "$OUT/zero1_a.log" 2>&1
    build/bf16/train_gpt2cu $common -x 6 -n 2 -z 1 -o runs/zb --debug-exit-after 4 > "$OUT/zero1_b1.log" 2>&1
    build/bf16/train_gpt2cu -o runs/zb --resume > "$OUT/zero1_b2.log" 2>&1
    summary+=("ZeRO-1 on one GPU, killed after step 4, resumed, vs DDP straight (log.jsonl): $(python3 dev/compare_losses.py runs/za/log.jsonl runs/zb/log.jsonl --tol 0)$ref_note")
fi
if has val; then
    # the validation loss covers the same rows at any -b and GPU count: --eval-only (FP32) of the
    # reference model on tinyshakespeare's validation shard (its 33 rows of 1024 tokens) at -b 64
    # (one batch larger than the set), -b 4 and -b 5 (a short last batch), and with 2 and 3 ranks
    # sharing the GPU (own_host.sh); equal up to the order of the float sums and GEMM algorithms
    e="-e dev_data/reference_model.bin -j dev_data/tinyshakespeare_val.bin -t 1024 --eval-only -g 0"
    vals=""
    for b in 64 4 5; do
        build/fp32/train_gpt2cu $e -b $b > "$OUT/val_b$b.log" 2>&1
        vals+=" b$b:rc=$?:$(grep -o 'val loss [0-9.]*' "$OUT/val_b$b.log" | head -n 1 | cut -d' ' -f3)"
    done
    for n in 2 3; do
        own_hosts $n 120 build/fp32/train_gpt2cu $e -b 5 > "$OUT/val_r$n.log" 2>&1
        vals+=" ${n}ranks_b5:rc=$?:$(grep -o 'val loss [0-9.]*' "$OUT/val_r$n.log" | head -n 1 | cut -d' ' -f3)"
    done
    summary+=("val, the same rows at any -b and GPU count (FP32 --eval-only):$vals$ref_note")
fi
if has export; then
    # a model trained here, in transformers: a 10-step FP16 run's checkpoint -> dev/export_hf.py (with
    # GPT-2's tokenizer files, carried in dev_data/gpt2) -> GPT2LMHeadModel.from_pretrained: its
    # logits against dev/reference.py's forward on the same model file, its tokenizer against
    # tiktoken, and a greedy continuation; also the exporter's self-test with torch installed
    python3 dev/export_hf.py --selftest --vocab-dir dev_data/gpt2 > "$OUT/export_selftest.log" 2>&1
    summary+=("export_hf --selftest: rc=$? $(grep -c ^PASS "$OUT/export_selftest.log") PASS, $(grep -c ^FAIL "$OUT/export_selftest.log") FAIL$(grep ^FAIL "$OUT/export_selftest.log" | head -n 3 | sed 's/^/; /' | tr -d '\n')")
    rm -rf runs/ex /tmp/hf_ex
    build/fp16/train_gpt2cu $common -x 10 -o runs/ex > "$OUT/export_train.log" 2>&1
    python3 dev/export_hf.py runs/ex/step_00000010/model.bin /tmp/hf_ex --vocab-dir dev_data/gpt2 > "$OUT/export.log" 2>&1
    summary+=("export of a 10-step checkpoint: rc=$? $(tail -n 1 "$OUT/export.log")")
    python3 - > "$OUT/export_check.log" 2>&1 <<'PY'
import sys, numpy as np, torch
sys.path.insert(0, "dev")
import reference
from tokenizer_fixture import gpt2_encoding
from model_file import read_model, map_tokens
from transformers import GPT2LMHeadModel, AutoTokenizer
cfg, p = read_model("runs/ex/step_00000010/model.bin")
hf = GPT2LMHeadModel.from_pretrained("/tmp/hf_ex", attn_implementation="eager").float().eval()
tok = AutoTokenizer.from_pretrained("/tmp/hf_ex")
x = torch.from_numpy(map_tokens("dev_data/tinyshakespeare_val.bin")[:4 * 256].astype(np.int64)).view(4, 256)
with torch.no_grad():
    ours = reference.forward({n: torch.from_numpy(a) for n, a in p.items()}, cfg, x)
    theirs = hf(x).logits
    err = (ours - theirs).abs().max().item()
    loss = torch.nn.functional.cross_entropy(theirs[:, :-1].reshape(-1, cfg["V"]), x[:, 1:].reshape(-1)).item()
text = "First Citizen:\nBefore we proceed any further, hear me speak."
same = tok.encode(text) == gpt2_encoding("dev_data/gpt2").encode_ordinary(text)
out = hf.generate(torch.tensor([tok.encode("ROMEO:")]), max_new_tokens=16, do_sample=False, pad_token_id=50256)
print(f"{'PASS' if err < 1e-3 else 'FAIL'} HF logits vs reference.py on the model file: max abs err {err:.2e}; "
      f"HF val loss (4x256 tokens) {loss:.4f}; tokenizer == tiktoken: {same}; greedy: {tok.decode(out[0])!r}")
PY
    summary+=("checkpoint in transformers: rc=$? $(tail -n 1 "$OUT/export_check.log")")
fi
if has corpus; then
    # data/tokenize's corpus mode on this machine's cores, then training from its shards:
    # tinyshakespeare's paragraphs 40 times over as JSON Lines (~50 MB; the text carried in
    # dev_data/tinyshakespeare.txt, the vocabulary in dev_data/gpt2), 1 thread against all of them
    # (the same shard bytes), then 10 steps of d12 from the train_*.bin glob, validated on its val shard
    cp build/tokenize data/tokenize
    python3 - <<'PY'
import json
paras = [p for p in open("dev_data/tinyshakespeare.txt", encoding="utf-8").read().split("\n\n") if p.strip()]
with open("/tmp/corpus.jsonl", "w") as f:
    for r in range(40):
        f.writelines(json.dumps({"id": r * 100000 + i, "text": p}) + "\n" for i, p in enumerate(paras))
PY
    for th in 1 $(nproc); do
        rm -rf /tmp/corpus_$th && mkdir /tmp/corpus_$th
        GPT2_VOCAB_DIR=dev_data/gpt2 data/tokenize /tmp/corpus.jsonl --jsonl -o /tmp/corpus_$th/c --shard-tokens 1000000 --threads $th 2> "$OUT/corpus_$th.log"
        summary+=("tokenize --jsonl --shard-tokens 1000000 --threads $th: rc=$? $(tail -n 1 "$OUT/corpus_$th.log")")
    done
    same=$(cd /tmp/corpus_1 && for f in *; do cmp -s "$f" "/tmp/corpus_$(nproc)/$f" || echo "$f"; done)
    summary+=("   1 thread vs $(nproc): $(ls /tmp/corpus_1 | wc -l) files, differing: ${same:-none}")
    build/fp16/train_gpt2cu -i "/tmp/corpus_$(nproc)/c_train_*.bin" -j "/tmp/corpus_$(nproc)/c_val.bin" -b 8 -t 1024 -x 10 -v 5 --val-batches 4 -g 0 \
        --tokenizer dev_data/gpt2_tokenizer.bin > "$OUT/corpus_train.log" 2>&1
    summary+=("   10 steps of d12 from the shards: rc=$? $(grep '^step *10/' "$OUT/corpus_train.log" | cut -d'|' -f1-2) $(grep 'val loss' "$OUT/corpus_train.log" | tr '\n' ' ')")
fi
if has hellaswag; then
    # the multiple-choice evaluation (--hellaswag) against its PyTorch reference: a synthetic
    # HellaSwag-format set from tinyshakespeare (dev/hellaswag_fixture.py; the real HellaSwag is not on
    # these machines), tokenized by data/tokenize (checked against tiktoken), scored by a 60-step
    # model with --eval-only in FP32 (B=8 and B=1: the same counts), BF16 and FP16, and once inside a
    # run (log.jsonl); the reference is dev/hellaswag_reference.py in fp32
    dev/device/hellaswag_set.sh "$OUT/hs_tokenize.log"
    summary+=("hellaswag fixture + tokenize: rc=$? $(tail -n 1 "$OUT/hs_tokenize.log")")
    rm -rf runs/hs
    build/bf16/train_gpt2cu $common -x 60 -o runs/hs -v 30 --hellaswag dev_data/hs.bin -g 0 > "$OUT/hs_train.log" 2>&1
    summary+=("60 steps with --hellaswag -v 30: rc=$? $(grep -c '"type":"hellaswag"' runs/hs/log.jsonl 2>/dev/null) hellaswag lines in log.jsonl; $(grep 'hellaswag acc' "$OUT/hs_train.log" | tail -n 1)")
    # the evaluations between steps leave the training as it was: the same run without them, bitwise
    rm -rf runs/hs_none
    build/bf16/train_gpt2cu $common -x 60 -o runs/hs_none -g 0 > "$OUT/hs_train_none.log" 2>&1
    summary+=("   its losses vs the same 60 steps without --hellaswag and -v: $(python3 dev/compare_losses.py runs/hs/log.jsonl runs/hs_none/log.jsonl --tol 0)")
    model=runs/hs/step_00000060/model.bin
    python3 dev/hellaswag_reference.py $model dev_data/hs.bin --jsonl /tmp/hs.jsonl --vocab-dir dev_data/gpt2 > "$OUT/hs_ref.log" 2>&1
    summary+=("hellaswag_reference (fp32 torch): rc=$? $(grep -E '^(hellaswag_reference|PASS|FAIL)' "$OUT/hs_ref.log" | tr '\n' ' ')")
    # (-b 3 -t 128: 4 rows of 128 exceed B*T, so the rows are the longest example's 69 tokens)
    for v in "fp32 8 1e-5 1 1024" "fp32 1 1e-5 1 1024" "fp32 3 1e-5 1 128" "bf16 8 2e-2 12 1024" "fp16 8 2e-2 12 1024"; do
        set -- $v
        build/$1/train_gpt2cu -e $model --eval-only --hellaswag dev_data/hs.bin -b $2 -t $5 -j dev_data/tinyshakespeare_val.bin \
            -g 0 > "$OUT/hs_eval_$1_b$2.log" 2>&1
        rc=$?
        python3 dev/hellaswag_reference.py $model dev_data/hs.bin --compare "$OUT/hs_eval_$1_b$2.log" --loss-tol $3 --max-flips $4 > "$OUT/hs_cmp_$1_b$2.log" 2>&1
        summary+=("   --eval-only $1 -b $2 -t $5: rc=$rc cmp rc=$? $(grep -E 'rows of|hellaswag acc' "$OUT/hs_eval_$1_b$2.log" | cut -c1-150 | tr '\n' ' ') | $(grep -E '^(PASS|FAIL)' "$OUT/hs_cmp_$1_b$2.log" | tr '\n' ' ')")
    done
    # --eval-only's sample, and the run's curves with the HellaSwag panel (dev/plot.py, matplotlib)
    build/bf16/train_gpt2cu -e $model --eval-only -g 32 --tokenizer dev_data/gpt2_tokenizer.bin > "$OUT/hs_eval_sample.log" 2>&1
    summary+=("   --eval-only with a sample: rc=$? $(grep -c 'sample ---' "$OUT/hs_eval_sample.log") sample(s), $(grep 'val loss' "$OUT/hs_eval_sample.log")")
    python3 dev/plot.py runs/hs -o "$OUT/hs_curves.png" > "$OUT/hs_plot.log" 2>&1
    summary+=("   plot.py runs/hs: rc=$? $(head -n 1 "$OUT/hs_plot.log"); test_plot.py: $(python3 dev/unit/test_plot.py | tail -n 1)")
    # the time of one evaluation at HellaSwag's size (10,042 examples; these rows are shorter than
    # HellaSwag's, which make rows of 192 tokens where these make 128)
    python3 dev/hellaswag_fixture.py /tmp/hs10k.jsonl --text dev_data/tinyshakespeare.txt --examples 10042 > /dev/null 2>&1 &&
        build/tokenize --hellaswag /tmp/hs10k.jsonl -o dev_data/hs10k.bin --vocab dev_data/gpt2 > /dev/null 2>&1
    for b in 8 64; do
        build/bf16/train_gpt2cu -e $model --eval-only --hellaswag dev_data/hs10k.bin -b $b -t 1024 -g 0 > "$OUT/hs10k_b$b.log" 2>&1
        summary+=("   10,042 examples, bf16 -b $b: rc=$? $(grep -E '^hellaswag:|hellaswag acc' "$OUT/hs10k_b$b.log" | tr '\n' ' ')")
    done
fi
if has spike; then
    # the spike guard: d12 from the reference model, B=8, T=256, 200 steps, --spike-window 50; step
    # 150 trains on random tokens (--debug-bad-batch 150), as a corrupt document would make it:
    #   clean / clean_g   no bad batch, the guard off / on: nothing skipped, bitwise the same losses
    #   bad / bad_g       the bad batch, the guard off / on: step 150's loss, norm and z-scores, the
    #                     line that names the skip, and the next 50 steps' losses against the clean run's
    #   res               bad_g killed after step 165 (checkpoints every 10) and resumed: bitwise bad_g
    #                     (the guard's statistics travel with the checkpoint)
    #   *_nc              clean, bad and bad_g without gradient clipping (--grad-clip 0), where one
    #                     bad batch does more harm
    #   stop              bad_g with --max-bad-steps 1: a spike skip does not count (the run ends
    #                     normally at step 200, its losses bitwise bad_g's)
    sp="-e dev_data/reference_model.bin -i dev_data/tinyshakespeare_train.bin -j dev_data/tinyshakespeare_val.bin -b 8 -t 256 -x 200 -l 6e-4 --warmup 10 -g 0 --spike-window 50"
    guard="--skip-loss-z 6 --skip-norm-z 6"
    rm -rf runs/sp_*
    build/bf16/train_gpt2cu $sp -o runs/sp_clean > "$OUT/sp_clean.log" 2>&1
    build/bf16/train_gpt2cu $sp $guard -o runs/sp_clean_g > "$OUT/sp_clean_g.log" 2>&1
    build/bf16/train_gpt2cu $sp --debug-bad-batch 150 -o runs/sp_bad > "$OUT/sp_bad.log" 2>&1
    build/bf16/train_gpt2cu $sp $guard --debug-bad-batch 150 -o runs/sp_bad_g > "$OUT/sp_bad_g.log" 2>&1
    build/bf16/train_gpt2cu $sp $guard --debug-bad-batch 150 -n 10 --debug-exit-after 165 -o runs/sp_res > "$OUT/sp_res1.log" 2>&1
    build/bf16/train_gpt2cu -o runs/sp_res --resume > "$OUT/sp_res2.log" 2>&1
    build/bf16/train_gpt2cu $sp --grad-clip 0 -o runs/sp_clean_nc > "$OUT/sp_clean_nc.log" 2>&1
    build/bf16/train_gpt2cu $sp --grad-clip 0 --debug-bad-batch 150 -o runs/sp_bad_nc > "$OUT/sp_bad_nc.log" 2>&1
    build/bf16/train_gpt2cu $sp --grad-clip 0 $guard --debug-bad-batch 150 -o runs/sp_bad_nc_g > "$OUT/sp_bad_nc_g.log" 2>&1
    summary+=("spike guard, clean run guard on vs off: $(python3 dev/compare_losses.py runs/sp_clean runs/sp_clean_g --tol 0)")
    summary+=("   killed after 165 and resumed vs straight (bad batch, guard on): $(python3 dev/compare_losses.py runs/sp_bad_g runs/sp_res --tol 0)")
    summary+=("   the skip line: $(grep -m1 'skipped:' "$OUT/sp_bad_g.log")")
    build/bf16/train_gpt2cu $sp $guard --debug-bad-batch 150 --max-bad-steps 1 -o runs/sp_stop > "$OUT/sp_stop.log" 2>&1
    summary+=("   with --max-bad-steps 1: rc=$? $(grep -c '^error' "$OUT/sp_stop.log") error lines; vs the same run without it: $(python3 dev/compare_losses.py runs/sp_bad_g runs/sp_stop --tol 0)")
    while IFS= read -r line; do summary+=("   $line"); done < <(python3 - <<'PY'
import json
val = {}
def steps(run):
    out = {}
    for line in open(f"runs/{run}/log.jsonl"):
        r = json.loads(line)
        if r.get("type") == "step": out[r["step"]] = r
        if r.get("type") == "eval": val[run] = r["val_loss"]
    return out
runs = {n: steps(n) for n in ("sp_clean", "sp_clean_g", "sp_bad", "sp_bad_g", "sp_clean_nc", "sp_bad_nc", "sp_bad_nc_g")}
zmax = lambda s, k: max((r[k] for i, r in s.items() if i > 50 and i != 150 and r[k] is not None), default=float("nan"))
for name, s in runs.items():
    if name in ("sp_clean", "sp_clean_nc"): continue
    clean = runs["sp_clean_nc" if name.endswith(("_nc", "_nc_g")) else "sp_clean"]
    skipped = [i for i, r in s.items() if r["skipped"]]
    after = [abs(s[i]["loss"] - clean[i]["loss"]) / clean[i]["loss"] for i in range(151, 201)]
    r = s[150]
    print(f"{name}: skipped {skipped} ({[s[i]['skip'] for i in skipped]}); step 150 loss {r['loss']:.4f} (clean {clean[150]['loss']:.4f}) "
          f"norm {r['norm']:.3f} (clean {clean[150]['norm']:.3f}) loss_z {r['loss_z']} norm_z {r['norm_z']}; largest z of the other "
          f"steps 51-200: loss {zmax(s, 'loss_z'):.2f} norm {zmax(s, 'norm_z'):.2f}; steps 151-200 vs clean: mean rel. diff "
          f"{100 * sum(after) / len(after):.3f} %, max {100 * max(after):.3f} %; val loss after 200 steps {val.get(name, float('nan')):.4f} "
          f"(clean {val.get('sp_clean_nc' if clean is runs['sp_clean_nc'] else 'sp_clean', float('nan')):.4f})")
PY
)
fi
if has wsd; then
    # --lr-schedule wsd: 100 steps straight, against 60 steps (the decay over printed steps 49-60)
    # killed after a checkpoint at step 40 and resumed with -x 100: the same learning rates and,
    # bitwise, losses (steps 81-100 decay; 100 ends at --lr-final 0)
    w="-e dev_data/reference_model.bin -i dev_data/tinyshakespeare_train.bin -b 8 -t 256 -l 6e-4 --warmup 10 --lr-schedule wsd -g 0 --val-batches 1"
    rm -rf runs/wsd_a runs/wsd_b
    build/bf16/train_gpt2cu $w -x 100 -o runs/wsd_a > "$OUT/wsd_a.log" 2>&1
    build/bf16/train_gpt2cu $w -x 60 -n 40 --debug-exit-after 40 -o runs/wsd_b > "$OUT/wsd_b1.log" 2>&1
    build/bf16/train_gpt2cu -o runs/wsd_b --resume -x 100 > "$OUT/wsd_b2.log" 2>&1
    summary+=("wsd: 100 straight vs 60 resumed at 40 with -x 100: $(python3 dev/compare_losses.py runs/wsd_a runs/wsd_b --tol 0); $(grep -m1 '^note: --max-steps' "$OUT/wsd_b2.log")")
    summary+=("   learning rates at steps 1 10 11 80 81 90 100 (straight): $(grep -E '^step +(1|10|11|80|81|90|100)/' "$OUT/wsd_a.log" | sed 's/.*| lr \([^ ]*\) .*/\1/' | tr '\n' ' ')")
    summary+=("   the same steps (resumed): $(cat "$OUT/wsd_b1.log" "$OUT/wsd_b2.log" | grep -E '^step +(1|10|11|80|81|90|100)/' | sed 's/.*| lr \([^ ]*\) .*/\1/' | tr '\n' ' ')")
fi
if has badres; then
    b="-e dev_data/reference_model.bin -i dev_data/tinyshakespeare_train.bin -b 4 -t 256 -x 20 -g 0 --val-batches 1 --max-bad-steps 5"
    rm -rf runs/bad_a runs/bad_b
    build/bf16/train_gpt2cu $b --debug-nan 0:3 -o runs/bad_a > "$OUT/bad_a.log" 2>&1; rc_a=$?
    build/bf16/train_gpt2cu $b --debug-nan 0:3 -n 1 --debug-exit-after 5 -o runs/bad_b > "$OUT/bad_b1.log" 2>&1; rc_b1=$?
    build/bf16/train_gpt2cu -o runs/bad_b --resume --debug-nan 0:3 > "$OUT/bad_b2.log" 2>&1; rc_b2=$?
    summary+=("badres: straight rc=$rc_a '$(grep -m1 '^error' "$OUT/bad_a.log")'")
    summary+=("   killed after 5 rc=$rc_b1, resumed rc=$rc_b2 '$(grep -m1 '^error' "$OUT/bad_b2.log")'")
fi
if has recompute; then
    for rc in 0 1 2; do
        build/bf16/train_gpt2cu --bench -b 64 -t 1024 --bench-warmup 3 --bench-steps 10 -r $rc > "$OUT/bench_rc$rc.log" 2>&1
        summary+=("bench bf16 B=64 recompute $rc: $(grep -o 'activations [0-9.]* GB' "$OUT/bench_rc$rc.log") $(grep -o 'tok_per_s=[0-9]* mfu=[0-9.]*' "$OUT/bench_rc$rc.log") $(grep -o 'device_mem_gb=[0-9.]*' "$OUT/bench_rc$rc.log")")
    done
fi
echo "================ summary"
printf '%s\n' "${summary[@]}"
