"""Unit test of dev/scaling.py's alpha-beta predictor and of how it reads the trainer's RESULT line
(no GPU, no third-party packages)."""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from check import check, finish  # noqa: E402
from scaling import gpt2_ranges, interference, parse_result, predict_step_ms, use_mean_step  # noqa: E402


one = {"fwd": 40.0, "bwd": 80.0, "opt": 1.0}
r = gpt2_ranges()
check(abs(sum(b for _, b, _ in r) - 2 * 124475904) < 1, "ranges cover every parameter once (bf16 bytes)")
check(all(r[i][2] <= r[i + 1][2] for i in range(len(r) - 1)) and r[-1][2] == 1.0, "ranges ready in backward order")
ms, exp = predict_step_ms(one, 1, 8, 10, 300)
check(ms == 8 * 120 + 1 and exp == 0, "1 GPU: compute only")
ms, exp = predict_step_ms(one, 2, 4, 10, 1e6)
check(abs(ms - (4 * 120 + 1)) < 0.1 and exp < 0.1, "infinite bandwidth: perfect scaling")
ms_fast, _ = predict_step_ms(one, 2, 4, 10, 300)
ms_slow, exp_slow = predict_step_ms(one, 2, 4, 10, 1)
check(ms_slow > ms_fast and exp_slow > 200, "slow link: communication exposed")
_, exp_last = predict_step_ms(one, 2, 4, 0, 28.5)
emb = r[-1][1] / 28.5e9 * 1e3
check(exp_last >= emb * 0.99, "the embeddings' bucket, ready last, is always exposed")
_, z = predict_step_ms(one, 2, 4, 10, 300, zero=True)
_, d = predict_step_ms(one, 2, 4, 10, 300, zero=False)
check(z > d, "ZeRO-1 adds the all-gather")
# the RESULT line: numbers as floats, the mean step preferred, interference from the two backwards
line = ("noise\nRESULT precision=bf16 model=L12C768 gpus=2 accum=4 total_batch=524288 median_ms=440.000 "
        "tok_per_s=1191564 mean_ms=436.000 tok_per_s_mean=1202495 bwd_last_ms=59.500 bwd_other_ms=58.000\n")
res = parse_result(line)
check(res is not None and res["precision"] == "bf16" and res["accum"] == 4.0, "RESULT parsed: strings and numbers")
res.update(gpus=2)
use_mean_step(res)
check(res["tok_per_s"] == 1202495 and res["step_ms"] == 436.0 and res["tok_per_s_median"] == 1191564,
      "throughput from the mean step, the median kept")
check(abs(interference(res) - 1.5) < 1e-9, "interference = last backward - the others' mean")
old_line = parse_result("RESULT gpus=2 median_ms=440.0 tok_per_s=1191564 bwd_last_ms=59.5 bwd_other_ms=-1\n")
old_line.update(gpus=2)
use_mean_step(old_line)
check(old_line["step_ms"] == 440.0 and old_line["tok_per_s"] == 1191564, "no mean fields: the median")
check(interference(old_line) is None, "accum 1 (bwd_other_ms -1): no interference")
check(parse_result("no result here") is None, "no RESULT line: None")
finish()
