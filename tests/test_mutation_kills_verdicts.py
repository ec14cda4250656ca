"""The verdict rules at their boundaries (mutation testing, issue 21: ``python scripts/mutation.py verdicts``).

Expected values come from the rules as documented (precision_audit.config's VERDICT_RULES, the bottom line's
definitions), applied by hand to hand-made inputs whose figures are exact binary fractions, so each boundary is
hit exactly: ``err == tolerance * bound`` is safe, one float64 ulp above is degraded.  bfloat16 spacings are the
closed form ``2**(e - 7)`` in the binade ``[2**e, 2**(e+1))``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from precision_audit.bottomline import Summary, bottom_line, failing, human_length
from precision_audit.verdicts import (NOTICED, PHASE_LOST, RESOLVING_TURNS, alibi_verdict, positions_verdict,
                                     resolved_error, resolving, rope_verdict)

K = 1024
up = math.nextafter


# --------------------------------------------------------------------------- rope_verdict


N8, P2 = math.pi / 8, math.pi / 2  # the thresholds of precision_audit.verdicts (derived there from the probe)


@pytest.mark.parametrize("pairs, colliding, verdict", [
    ([(1, 0.0)], 0, "safe"),
    ([(1, up(N8, 0.0))], 0, "safe"),  # one ulp below pi/8
    ([(1, N8)], 0, "degraded"),  # pi/8 itself: noticed
    ([(1, 0.0), (4096, N8)], 0, "degraded"),  # any distance counts
    ([(1, up(P2, 0.0))], 0, "degraded"),  # one ulp below pi/2
    ([(16, P2)], 0, "broken"),  # pi/2 itself: a quarter turn off
    ([(1, 2.0**-20)], 1, "broken"),  # one collision is enough
    ([(1, 2.0**-20)], 7, "broken"),
    ([(1, math.inf)], 0, "broken"),
    ([(1, math.nan)], 0, "broken"),  # a nan error is not a safe error
])
def test_rope_verdict_boundaries(pairs, colliding, verdict):
    # the absolute error (3.0 here) never enters when pairs are given
    assert rope_verdict(3.0, colliding, pair_errors=pairs) == verdict


@pytest.mark.parametrize("err, verdict", [
    (0.0, "safe"), (up(N8 / 2, 0.0), "safe"), (N8 / 2, "degraded"), (up(P2 / 2, 0.0), "degraded"),
    (P2 / 2, "broken"), (math.inf, "broken"), (math.nan, "broken"),
])
def test_rope_verdict_without_pairs_doubles_the_absolute_error(err, verdict):
    # a pair's error is at most the sum of its two positions' errors: 2 x the max absolute error stands in
    assert rope_verdict(err, 0) == verdict


def test_rope_verdict_thresholds():
    assert PHASE_LOST == math.pi / 2 and NOTICED == math.pi / 8 and RESOLVING_TURNS == 4


@pytest.mark.parametrize("pairs, verdict", [
    # (distance, max over every pair, max over the pairs that resolve the distance): broken needs the second
    ([(4096, 3.0, up(P2, 0.0))], "degraded"),  # fast pairs lose phase, resolving ones one ulp short of pi/2
    ([(4096, 3.0, P2)], "broken"),  # a resolving pair a quarter turn off
    ([(4096, 3.0, 0.0)], "degraded"),  # the max alone still says degraded (>= pi/8)
    ([(4096, up(N8, 0.0), 0.0)], "safe"),
    ([(1, 0.0, 0.0), (4096, P2)], "broken"),  # no resolved figure: every pair counts as resolving
    ([(16, math.nan, math.nan)], "broken"),
    ([(16, 3.0, math.inf)], "broken"),
])
def test_rope_verdict_broken_only_in_resolving_pairs(pairs, verdict):
    assert rope_verdict(3.0, 0, pair_errors=pairs) == verdict


def test_resolving_is_at_most_four_turns():
    # 2 pi * 4 turns exactly resolves, one ulp more does not; the sign of a rotation does not matter
    t = 2 * math.pi * 4
    assert resolving([t, up(t, math.inf), -t, 0.0]).tolist() == [True, False, True, True]
    assert resolved_error([0.5, 3.0, 0.25], [t, up(t, math.inf), 1.0]) == 0.5
    assert resolved_error([3.0], [100.0]) == 0.0  # no pair resolves: nothing judged there
    with pytest.raises(ValueError, match="column_max has 2 pairs, rotation 1"):
        resolved_error([0.1, 0.2], [1.0])


# --------------------------------------------------------------------------- positions_verdict


@pytest.mark.parametrize("colliding, non_finite, verdict", [
    (0, 0, "safe"), (1, 0, "broken"), (0, 1, "broken"), (7296, 16, "broken"),
])
def test_positions_verdict(colliding, non_finite, verdict):
    assert positions_verdict(colliding, non_finite) == verdict


# --------------------------------------------------------------------------- alibi_verdict


def alibi_row(length, heads, *, distinct=None, nonfinite=0, inversions=0, bias_dtype="bfloat16"):
    """A stand-in for an AlibiRow row: only the fields the rule reads."""
    return SimpleNamespace(
        length=length, min_distinct_biases=length if distinct is None else distinct,
        nonfinite_biases=nonfinite, order_inversions=inversions, bias_dtype=bias_dtype,
        heads=[SimpleNamespace(slope=s, max_abs_error=e) for s, e in heads])


def test_alibi_verdict_broken_conditions():
    ok = [(1.0, 0.0)]
    assert alibi_verdict(alibi_row(256, ok)) == "safe"
    assert alibi_verdict(alibi_row(256, ok, distinct=255)) == "broken"  # two neighbours share a bias
    assert alibi_verdict(alibi_row(256, ok, nonfinite=1)) == "broken"
    assert alibi_verdict(alibi_row(256, ok, inversions=1)) == "broken"


@pytest.mark.parametrize("heads, tolerance, verdict", [
    # length 256, slope 1: largest exact bias 1 * 255 in [128, 256): bf16 spacing 1, half-ulp 1/2 -> limit 4
    # (with slope * length = 256 the half-ulp would be 1 and the limit 8: 4.5 tells them apart)
    ([(1.0, 4.0)], 8.0, "safe"),
    ([(1.0, up(4.0, 5.0))], 8.0, "degraded"),
    ([(1.0, 4.5)], 8.0, "degraded"),
    ([(1.0, 1.0)], 2.0, "safe"),  # the tolerance argument: limit 2 * 1/2 = 1
    ([(1.0, 1.5)], 2.0, "degraded"),
    # per head, its own slope: slope 1/4 -> top 63.75 in [32, 64): spacing 1/4, limit 1; slope 1 limit 4
    ([(1.0, 3.0), (0.25, 1.0)], 8.0, "safe"),
    ([(1.0, 3.0), (0.25, 1.5)], 8.0, "degraded"),  # any head, not all
    ([(1.0, 4.5), (0.25, 0.0)], 8.0, "degraded"),
])
def test_alibi_verdict_degraded_limit(heads, tolerance, verdict):
    assert alibi_verdict(alibi_row(256, heads), tolerance) == verdict


def test_alibi_verdict_largest_bias_is_slope_times_length_minus_one():
    # length 257, slope 1: the largest exact bias is 256 (keys 0..256), binade [256, 512): spacing 2, half 1,
    # limit 8; the bias one key earlier (255) would give spacing 1 and limit 4
    assert alibi_verdict(alibi_row(257, [(1.0, 6.0)])) == "safe"
    assert alibi_verdict(alibi_row(257, [(1.0, 8.0)])) == "safe"
    assert alibi_verdict(alibi_row(257, [(1.0, up(8.0, 9.0))])) == "degraded"


def test_alibi_verdict_uses_the_bias_format():
    # float16 at 255: binade [128, 256), spacing 2**(7 - 10) = 1/8, half 1/16 -> limit 1/2
    assert alibi_verdict(alibi_row(256, [(1.0, 0.5)], bias_dtype="float16")) == "safe"
    assert alibi_verdict(alibi_row(256, [(1.0, 0.75)], bias_dtype="float16")) == "degraded"


# --------------------------------------------------------------------------- bottom_line


def rows(path, dtype, verdicts, **extra):
    return [dict(path=path, dtype=dtype, length=L, verdict=v, **extra) for L, v in verdicts]


def test_bottom_line_every_field():
    # lengths arrive unsorted; 16K has two layer types (safe, broken): the worst counts
    r = rows("transformers-cast", "bfloat16", [(32 * K, "degraded"), (8 * K, "safe"), (16 * K, "safe"), (16 * K, "broken"),
                                  (64 * K, "degraded")])
    (s,) = bottom_line(r)
    assert s == Summary("transformers-cast", s.label, "bfloat16", (8 * K, 16 * K, 32 * K, 64 * K), "broken", 8 * K, 32 * K,
                        16 * K, s.fix, None, ("train", "serve"))
    assert s.label != "transformers-cast" and s.fix  # a known stack: its label, fix and roles


def test_bottom_line_worst_of_layer_types_in_any_order():
    for order in (["degraded", "safe"], ["safe", "degraded"], ["broken", "degraded"], ["degraded", "broken"]):
        (s,) = bottom_line(rows("p", "f", [(K, v) for v in order]))
        worst = "broken" if "broken" in order else "degraded"
        assert s.verdict == worst and s.lengths == (K,) and s.safe_to is None
        assert (s.degraded_from, s.broken_from) == ((K, None) if worst == "degraded" else (None, K))


def test_bottom_line_all_safe_and_unknown_path():
    (s,) = bottom_line(rows("my path", "float16", [(2 * K, "safe"), (K, "safe")]))
    assert s == Summary("my path", "my path", "float16", (K, 2 * K), "safe", 2 * K, None, None, None)


def test_bottom_line_first_broken_and_degraded_are_the_first_lengths():
    (s,) = bottom_line(rows("p", "f", [(K, "degraded"), (2 * K, "broken"), (4 * K, "degraded"), (8 * K, "broken")]))
    assert (s.safe_to, s.degraded_from, s.broken_from, s.verdict) == (None, K, 2 * K, "broken")


def test_bottom_line_groups_by_path_and_dtype_and_key():
    r = rows("a", "bf16", [(K, "safe")]) + rows("a", "fp16", [(K, "broken")]) + rows("b", "bf16", [(K, "degraded")]) \
        + rows("a", "bf16", [(2 * K, "degraded")])
    got = [(s.path, s.dtype, s.lengths, s.verdict) for s in bottom_line(r)]
    assert got == [("a", "bf16", (K, 2 * K), "degraded"), ("a", "fp16", (K,), "broken"), ("b", "bf16", (K,), "degraded")]
    # key: another field names the path; objects work as mappings do
    objs = [SimpleNamespace(recipe=x["path"], dtype=x["dtype"], length=x["length"], verdict=x["verdict"]) for x in r]
    assert [(s.path, s.dtype, s.lengths, s.verdict) for s in bottom_line(objs, key="recipe")] == got


def test_bottom_line_kind_is_one_of_the_kinds():
    # the default kind reads stack and RoPE preset names; any other kind is refused by name
    (s,) = bottom_line(rows("lowp-inv-freq", "bfloat16", [(8 * K, "broken")]))
    assert s.fix == "call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)"
    for bad in ("ROPE", "sinusoidal", None):
        with pytest.raises(ValueError, match=r"^kind .* must be one of rope, alibi, relative, learned$"):
            bottom_line(rows("fp32", "bfloat16", [(8 * K, "safe")]), kind=bad)


def test_bottom_line_labels_and_fixes_of_known_paths():
    (s,) = bottom_line(rows("lowp-inv-freq", "bfloat16", [(K, "broken")]))
    assert s.label == "inv_freq buffer downcast (lowp-inv-freq)"
    assert s.fix == "call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)"


@pytest.mark.parametrize("bad", ["fine", "SAFE", ""])
def test_bottom_line_rejects_unknown_verdicts(bad):
    with pytest.raises(ValueError, match=f"^verdict '{bad}' must be one of safe, degraded, broken$"):
        bottom_line(rows("p", "f", [(K, "safe"), (2 * K, bad)]))


# --------------------------------------------------------------------------- failing


def test_failing_levels_order_paths_and_key():
    r = rows("a", "bfloat16", [(K, "safe"), (2 * K, "degraded"), (3 * 2**20, "broken")]) \
        + rows("b", "float16", [(1000, "degraded")])
    assert failing(r, "degraded") == [(r[1], "degraded at 2K in bfloat16"), (r[2], "broken at 3M in bfloat16"),
                                      (r[3], "degraded at 1000 in float16")]
    assert failing(r, "broken") == [(r[2], "broken at 3M in bfloat16")]
    assert failing(r, "degraded", paths=["b"]) == [(r[3], "degraded at 1000 in float16")]
    assert failing(r, "degraded", paths=[]) == []
    objs = [SimpleNamespace(stack=x["path"], dtype=x["dtype"], length=x["length"], verdict=x["verdict"]) for x in r]
    assert [why for _, why in failing(objs, "broken", key="stack", paths=["a"])] == ["broken at 3M in bfloat16"]
    assert failing(objs, "broken", key="stack", paths=["b"]) == []


@pytest.mark.parametrize("bad", ["safe", "Broken", None])
def test_failing_rejects_thresholds(bad):
    with pytest.raises(ValueError, match=f"^threshold {bad!r} must be degraded or broken$"):
        failing([], bad)


# --------------------------------------------------------------------------- human_length


@pytest.mark.parametrize("n, text", [
    (0, "0"), (1023, "1023"), (1024, "1K"), (1025, "1025"), (3 * 1024, "3K"), (2**20 - 1024, "1023K"),
    (2**20, "1M"), (2**20 + 1024, "1025K"), (2**21, "2M"), (5 * 2**20, "5M"), (2**30, "1024M"),
])
def test_human_length_units(n, text):
    assert human_length(n) == text
