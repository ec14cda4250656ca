"""The bottom line folds per-length verdicts into one sentence per code path and dtype.

Expected values follow from the definitions in precision_audit.bottomline
(safe_to = longest audited length with every shorter audited length safe;
first degraded / broken length), on hand-made verdict rows.
"""

from __future__ import annotations

import pytest

from precision_audit.bottomline import bottom_line, failing, human_length

K = 1024


def rows(path, dtype, verdicts):
    return [dict(path=path, dtype=dtype, length=L, verdict=v) for L, v in verdicts]


@pytest.mark.parametrize("verdicts, safe_to, degraded, broken, worst, text", [
    ([(128 * K, "safe"), (256 * K, "safe"), (512 * K, "safe")], 512 * K, None, None, "safe", "safe to 512K"),
    ([(128 * K, "safe"), (256 * K, "degraded"), (512 * K, "broken")], 128 * K, 256 * K, 512 * K, "broken",
     "safe to 128K, degraded from 256K, broken from 512K"),
    ([(128 * K, "broken"), (256 * K, "broken")], None, None, 128 * K, "broken", "broken at every length audited"),
    ([(8 * K, "degraded"), (16 * K, "degraded")], None, 8 * K, None, "degraded", "degraded from 8K"),
    # a safe length after a degraded one does not extend safe_to
    ([(8 * K, "safe"), (16 * K, "degraded"), (32 * K, "safe")], 8 * K, 16 * K, None, "degraded",
     "safe to 8K, degraded from 16K"),
])
def test_summary_fields_and_text(verdicts, safe_to, degraded, broken, worst, text):
    (s,) = bottom_line(rows("llama.cpp-cpu", "float16", verdicts))
    assert (s.safe_to, s.degraded_from, s.broken_from, s.verdict) == (safe_to, degraded, broken, worst)
    assert str(s) == f"llama.cpp CPU, float16: {text}"


def test_fix_is_named_only_when_not_safe():
    bad, good = bottom_line(rows("transformers-cast", "bfloat16", [(8 * K, "broken")])
                            + rows("transformers-cast", "float16", [(8 * K, "safe")]))
    assert str(bad).endswith("-> call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)")
    assert "->" not in str(good)


def test_layer_types_at_one_length_combine_to_the_worst():
    r = rows("transformers", "bfloat16", [(8 * K, "safe"), (8 * K, "degraded")])
    (s,) = bottom_line(r)
    assert s.verdict == "degraded" and s.lengths == (8 * K,)


def test_groups_keep_first_seen_order_and_unknown_verdicts_are_rejected():
    r = rows("vllm", "bfloat16", [(K, "safe")]) + rows("mlx", "bfloat16", [(K, "safe")])
    assert [s.path for s in bottom_line(r)] == ["vllm", "mlx"]
    with pytest.raises(ValueError, match="verdict 'fine'"):
        bottom_line(rows("vllm", "bfloat16", [(K, "fine")]))


def test_failing_respects_threshold_and_selection():
    r = rows("vllm", "bfloat16", [(K, "safe"), (2 * K, "degraded"), (4 * K, "broken")]) \
        + rows("lowp", "bfloat16", [(K, "broken")])
    assert [why for _, why in failing(r, "broken")] == ["broken at 4K in bfloat16", "broken at 1K in bfloat16"]
    assert [why for _, why in failing(r, "degraded", paths=["vllm"])] == [
        "degraded at 2K in bfloat16", "broken at 4K in bfloat16"]
    with pytest.raises(ValueError, match="threshold 'safe'"):
        failing(r, "safe")


@pytest.mark.parametrize("n, text", [(1, "1"), (1024, "1K"), (1536, "1536"), (2**20, "1M"), (2**26, "64M")])
def test_human_length(n, text):
    assert human_length(n) == text
