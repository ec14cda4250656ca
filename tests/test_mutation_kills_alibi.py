"""The ALiBi metrics (tallies, prefix snapshots, probability change) on hand-made bias arrays (mutation testing,
issue 21: ``python scripts/mutation.py "alibi metrics"``).

Expected values: a brute-force oracle written here, element by element in plain Python (runs of equal values
with every NaN one value, longest run of equal neighbours, strict inversions m[k+1] < m[k], non-finite count,
largest |stored - slope * k| with exact power-of-two slopes), and the softmax of the stored and the exact
logits in mpmath at 60 digits for the largest probability change.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from precision_audit.alibi import Recipe, alibi_bias, audit_alibi, stored_bias_metrics

mpmath.mp.dps = 60


def head_oracle(row, slope: float, sign: float) -> dict[str, float]:
    """One head's metrics by brute force: ``row`` holds the stored magnitudes of k = 0..L-1."""
    vals = [float(v) for v in row]
    key = ["nan" if math.isnan(v) else v for v in vals]
    # distinct values as the auditor counts them: keys whose value differs from the left neighbour's, plus
    # key 0 (runs of equal values).  For monotone magnitudes (every rounding recipe) that is the number of
    # distinct values; a value that comes back after an inversion or a NaN gap counts again.
    distinct = 1 + sum(a != b for a, b in zip(key, key[1:]))
    run = best = 1
    for a, b in zip(key, key[1:]):
        run = run + 1 if a == b else 1
        best = max(best, run)
    inversions = sum(b < a for a, b in zip(vals, vals[1:]))
    nonfinite = sum(not math.isfinite(v) for v in vals)
    err = max((abs(v - slope * k) if math.isfinite(v) else math.inf) for k, v in enumerate(vals))
    if any(math.isnan(v) or sign * v == math.inf for v in vals):
        dp = math.nan  # the softmax is undefined (AlibiRow's documented NaN)
    else:
        lp = [mpmath.mpf(sign * v) if math.isfinite(v) else mpmath.mpf("-inf") for v in vals]
        lq = [mpmath.mpf(sign * slope * k) for k in range(len(vals))]
        zp, zq = mpmath.fsum(mpmath.exp(x) for x in lp), mpmath.fsum(mpmath.exp(x) for x in lq)
        dp = float(max(abs(mpmath.exp(a) / zp - mpmath.exp(b) / zq) for a, b in zip(lp, lq)))
    return dict(distinct=distinct, run=best, inversions=inversions, nonfinite=nonfinite, err=err, dp=dp)


def oracle(stored, slopes, form="key") -> dict[str, float]:
    """stored_bias_metrics' summary, from the per-head oracle."""
    sign = 1.0 if form == "key" else -1.0
    heads = [head_oracle(r, float(s), sign) for r, s in zip(np.asarray(stored, dtype=np.float64), slopes)]
    dps = [h["dp"] for h in heads]
    return dict(min_distinct_biases=min(h["distinct"] for h in heads),
                distinct_fraction=min(h["distinct"] for h in heads) / len(stored[0]),
                max_run=max(h["run"] for h in heads), max_abs_error=max(h["err"] for h in heads),
                order_inversions=sum(h["inversions"] for h in heads),
                nonfinite_biases=sum(h["nonfinite"] for h in heads),
                max_prob_change=math.nan if any(map(math.isnan, dps)) else max(dps))


def assert_metrics(got, want):
    assert got.keys() == want.keys()
    for k in want:
        if isinstance(want[k], float) and math.isnan(want[k]):
            assert math.isnan(got[k]), k
        elif k == "max_prob_change":
            assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-15), k
        else:
            assert got[k] == want[k], k


NAN, INF = math.nan, math.inf
# slopes 1/2 and 1/4 (exact products); head 0 has an inversion (3 -> 2.5), head 1 a run and two inversions
STORED = [[0.0, 0.5, 1.0, 1.0, 1.0, 3.0, 2.5, 3.5],
          [0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.0]]


@pytest.mark.parametrize("form", ["key", "relative"])
def test_hand_array_every_metric(form):
    want = oracle(STORED, [0.5, 0.25], form)
    assert (want["min_distinct_biases"], want["max_run"], want["order_inversions"]) == (4, 4, 3)  # head 1: 4 runs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_metrics(stored_bias_metrics(STORED, [0.5, 0.25], form), want)


def test_inversions_are_counted_per_head():
    # the same rows in the other order: counts are per head, summed
    for rows in (STORED, STORED[::-1], [STORED[1]]):
        got = stored_bias_metrics(rows, [0.5] * len(rows))  # the slopes do not enter the counts
        assert got["order_inversions"] == sum(sum(b < a for a, b in zip(r, r[1:])) for r in rows)


def test_nan_at_the_first_key_and_nan_runs():
    # NaNs equal each other: [nan, nan, 1, nan] has the runs (nan nan) (1) (nan): 3, longest 2; NaN: an
    # undefined softmax.  Key 0 starts a run even when it is NaN.
    stored = [[NAN, NAN, 1.0, NAN], [0.0, 0.25, 0.5, 0.75]]
    want = oracle(stored, [0.5, 0.25])
    assert (want["min_distinct_biases"], want["max_run"], want["nonfinite_biases"]) == (3, 2, 3)
    assert_metrics(stored_bias_metrics(stored, [0.5, 0.25]), want)


def test_infinite_biases_and_no_warning_escapes():
    # key form: +inf is an undefined softmax (NaN); relative form: an infinite penalty is probability 0
    stored = [[0.0, 0.5, INF, INF], [0.0, 0.25, 0.5, 0.75]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inf - inf inside the softmax is expected and must stay silent
        for form in ("key", "relative"):
            want = oracle(stored, [0.5, 0.25], form)
            assert want["max_abs_error"] == INF and want["nonfinite_biases"] == 2
            assert_metrics(stored_bias_metrics(stored, [0.5, 0.25], form), want)


def test_probability_change_when_the_stored_bias_loses_a_huge_gap():
    # slope 1000: exact logits (0, 1000); stored (0, 0): p = (1/2, 1/2), q = (e**-1000, 1 - e**-1000), so the
    # change is 1/2 to 1e-300; q_0 underflows to 0 while p_0 / q_0 = e**999: the expm1 branch must not give 0 * inf
    stored = [[0.0, 0.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exp overflow inside must stay silent
        got = stored_bias_metrics(stored, [1000.0])
    assert got["max_prob_change"] == 0.5
    assert_metrics(got, oracle(stored, [1000.0]))


def test_one_key_one_head_and_empty_arrays():
    assert stored_bias_metrics([[0.0]], [0.5]) == dict(
        min_distinct_biases=1, distinct_fraction=1.0, max_run=1, max_abs_error=0.0, order_inversions=0,
        nonfinite_biases=0, max_prob_change=0.0)
    for shape in ((2, 0), (0, 3)):
        with pytest.raises(ValueError, match=rf"^stored biases of shape \({shape[0]}, {shape[1]}\) must be"):
            stored_bias_metrics(np.zeros(shape))


def test_form_error_lists_the_forms():
    with pytest.raises(ValueError, match=r"^form 'absolute' is not one of key, relative$"):
        stored_bias_metrics([[0.0, 1.0]], form="absolute")


def test_slopes_of_any_shape_and_type_are_float64_values():
    stored = [[0.0, 0.5, 1.0, 1.5], [0.0, 0.25, 0.5, 0.75]]
    want = stored_bias_metrics(stored, [0.5, 0.25])
    assert_metrics(want, oracle(stored, [0.5, 0.25]))
    for slopes in ([[0.5], [0.25]], np.array([0.5, 0.25], dtype=np.float32), [Fraction(1, 2), Fraction(1, 4)]):
        assert stored_bias_metrics(stored, slopes) == want
    # default slopes: alibi_slopes(2) = (2**-4, 2**-8)
    assert stored_bias_metrics(stored) == stored_bias_metrics(stored, [2.0**-4, 2.0**-8])


def test_stored_values_are_read_as_float64():
    # a float32 (or bfloat16) array holds float64 values exactly: the metrics are those of the float64 array
    import ml_dtypes

    stored = alibi_bias("lowp", 4, 300, "bf16")
    mags = 0.0 - stored[:, ::-1]  # relative form: penalties for distances 0..L-1
    want = stored_bias_metrics(mags, form="relative")
    assert want["max_prob_change"] > 0
    for dtype in (np.float32, ml_dtypes.bfloat16):
        assert stored_bias_metrics(mags.astype(dtype), form="relative") == want
    ints = [[0, 1, 1, 2], [0, 0, 1, 3]]
    assert stored_bias_metrics(ints, [0.5, 0.25]) == stored_bias_metrics(np.array(ints, float), [0.5, 0.25])
    fractions = [[Fraction(0), Fraction(1, 2), Fraction(3, 4)]]  # any real numbers: taken as float64 values
    assert stored_bias_metrics(fractions, [0.5]) == stored_bias_metrics([[0.0, 0.5, 0.75]], [0.5])


# --------------------------------------------------------------------------- the streaming auditor's tallies

# key form, slopes 1 and 2**-30: float8_e4m3fn stores 0 for k * 2**-30 (below its smallest subnormal 2**-9,
# up to k = 2**20) and, for slope 1, NaN from k = 465 on (beyond 448, no inf): runs at key 0, NaN runs
TINY = Recipe("tiny", "key", "exact", "float32", "float32", "float32", "float8_e4m3fn")


@pytest.mark.parametrize("width", [1, 2, 3, 7, 64, 1000])
def test_streaming_tallies_equal_the_oracle_at_every_length(width):
    slopes = [1.0, 2.0**-30]
    lengths = [1, 2, 3, 5, 17, 300, 465, 466, 470, 600]
    rows = audit_alibi(2, TINY, lengths, slopes=slopes, chunk=width)
    full = alibi_bias(TINY, 2, lengths[-1], slopes=slopes)
    for L, row in zip(lengths, rows):
        for h, head in enumerate(row.heads):
            want = head_oracle(full[h, :L], slopes[h], 1.0)
            got = (head.distinct_biases, head.max_run, head.order_inversions, head.nonfinite_biases,
                   head.max_abs_error)
            assert got == (want["distinct"], want["run"], want["inversions"], want["nonfinite"], want["err"]), (L, h)
            if math.isnan(want["dp"]):
                assert math.isnan(head.max_prob_change)
            else:
                assert head.max_prob_change == pytest.approx(want["dp"], rel=1e-12, abs=1e-15), (L, h)


def test_finite_biases_at_both_ends_of_float64_stay_silent():
    # 1.79e308 - (-1.79e308) overflows float64 inside the log-sum-exp (a finite but absurd stored bias, e.g. a
    # corrupted checkpoint): the metrics still equal the oracle and no overflow warning escapes
    stored = [[1.79e308, -1.79e308, 0.0], [0.0, -1e308, 1.7e308]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for form in ("key", "relative"):
            assert_metrics(stored_bias_metrics(stored, [0.5, 0.25], form), oracle(stored, [0.5, 0.25], form))


def test_many_heads_stream_in_several_chunks_like_one_head_at_a_time():
    # 64 heads x 8200 keys exceeds one block of 2**19 elements (8192 keys per head): the summary must equal the
    # per-head summaries combined (min distinct, max run, summed counts, max errors), each head alone being one
    # block (checked against the oracle above for small arrays)
    from precision_audit.alibi import alibi_slopes
    from precision_audit.formats import round_to

    slopes = alibi_slopes(64)
    L = 8200
    stored = round_to(slopes[:, None] * np.arange(L), "bf16")
    stored[3, 5000] = stored[3, 6000]  # an inversion in head 3 (5000 -> 5001) and one in head 40
    stored[40, 8100] = 0.0
    got = stored_bias_metrics(stored, slopes)
    one = [stored_bias_metrics(stored[h : h + 1], slopes[h : h + 1]) for h in range(64)]
    want = dict(min_distinct_biases=min(o["min_distinct_biases"] for o in one),
                distinct_fraction=min(o["min_distinct_biases"] for o in one) / L,
                max_run=max(o["max_run"] for o in one), max_abs_error=max(o["max_abs_error"] for o in one),
                order_inversions=sum(o["order_inversions"] for o in one),
                nonfinite_biases=sum(o["nonfinite_biases"] for o in one),
                max_prob_change=max(o["max_prob_change"] for o in one))
    assert want["order_inversions"] >= 2 and want["max_run"] > 1
    assert_metrics(got, want)


def test_a_later_chunk_with_the_largest_stored_probability_is_not_skipped():
    # relative form, slope 1, one head, L = 2**19 + 1 keys: two chunks of keys (2**19 and 1; the nearest first).
    # Stored penalties 5 + d (a constant offset: the softmax of the exact logits -d) except the farthest key, stored
    # at 5 like distance 0: there p = p_0 = 1 / Z_p while q is e**-(L-1) / Z_q ~ 0, a larger change than any key
    # of the first chunk (largest at d = 0: q_0 - p_0).  Only the stored (p) bound keeps the second chunk, and
    # all logits are negative (the stored maximum is -5).  Closed form in mpmath (geometric sums):
    # Z_q = (1 - e**-L) / (1 - e**-1), Z_p = (1 - e**-(L-1)) / (1 - e**-1) + 1.
    L = 2**19 + 1
    stored = 5.0 + np.arange(L, dtype=np.float64)[None, :]
    stored[0, -1] = 5.0
    e = mpmath.e
    zq = (1 - e ** -L) / (1 - 1 / e)
    zp = (1 - e ** -(L - 1)) / (1 - 1 / e) + 1
    want = float(max(1 / zp - e ** -(L - 1) / zq, 1 / zq - 1 / zp))
    assert want == pytest.approx(0.387, abs=1e-3)
    got = stored_bias_metrics(stored, [1.0], "relative")["max_prob_change"]
    assert got == pytest.approx(want, rel=1e-12)


# --------------------------------------------------------------------------- the probability change's two paths

@pytest.mark.parametrize("offset", [1.5 * 2.0**32, -(2.0**40)])
def test_a_huge_constant_offset_takes_the_two_softmaxes(offset):
    # stored = exact + a constant beyond 2**32 (the softmax ignores it), one key a further 3 * 2**-20 (3 ulps of
    # 1.5 * 2**32) away: the change is that key's 3 * 2**-20 shift, ~1e-7.  The log-ratio t = (l - x) - shift
    # cancels two numbers of 2**32 with an error of ~1e-6 (25 % of t); |p - q| of the two softmaxes is exact to
    # 1e-16.  Every value here is a float64 exactly (multiples of 2**-20 below 2**33, of 2**-12 below 2**41).
    slopes = [0.5]
    exact = np.array([[0.5 * k for k in range(8)]])
    stored = exact + offset
    stored[0, 5] += 3 * 2.0**-20 if abs(offset) < 2**33 else 3 * 2.0**-12
    assert np.all(stored - offset - exact == np.where(np.arange(8) == 5, stored[0, 5] - offset - exact[0, 5], 0))
    for form in ("key", "relative"):
        want = oracle(stored, slopes, form)["max_prob_change"]
        assert 1e-8 < want < 1e-3
        assert stored_bias_metrics(stored, slopes, form)["max_prob_change"] == pytest.approx(want, rel=1e-6, abs=0)


# --------------------------------------------------------------------------- pruning near a tie (the margin's sign)

L_TWO_CHUNKS = 2**19 + 1  # one head: stored_bias_metrics' chunks are 2**19 keys and 1 key


def test_a_later_chunk_just_above_the_maximum_is_kept_by_its_stored_probability():
    # relative form, slope 16, one head; stored penalties 16 d (exact) except the farthest key (second chunk),
    # stored at c = -log(G) with G = sum_{d < L-1} e**(-16 d) = 1 + 1.1e-7.  Then p_far = 1/2 (q_far = 0) while
    # the first chunk's largest change (d = 0) is q_0 - p_0 = 1/(2G): the second chunk's stored probability
    # exceeds the maximum so far by the factor G = 1 + 1.1e-7, inside the pruning margin e**(1e-6).  Closed form
    # in mpmath: Z_q = sum_{d < L} e**(-16 d), Z_p = G + e**(-c) (c as stored, a float64).
    L = L_TWO_CHUNKS
    e16 = mpmath.exp(-16)
    g = (1 - e16 ** (L - 1)) / (1 - e16)
    c = float(-mpmath.log(g))
    stored = 16.0 * np.arange(L, dtype=np.float64)[None, :]
    stored[0, -1] = c
    zq, zp = (1 - e16**L) / (1 - e16), g + mpmath.exp(-c)
    first = 1 / zq - 1 / zp  # d = 0; the other keys of the first chunk scale it by e**(-16 d)
    last = mpmath.exp(-c) / zp - e16 ** (L - 1) / zq
    assert 1 < last / first < mpmath.exp(mpmath.mpf("1e-6"))
    got = stored_bias_metrics(stored, [16.0], "relative")["max_prob_change"]
    assert got == pytest.approx(float(last), rel=1e-12)


def test_a_later_chunk_just_above_the_maximum_is_kept_by_its_exact_probability():
    # key form with slope -16 (exact logits -16 k: the largest at k = 0, in the chunk processed last).  Stored
    # logits: 0 at k = 2**19 (the first chunk processed: p ~ 1, q = 0, change 1/(1 + e**-15)), -15 at k = 1 and
    # -10000 elsewhere (p ~ 0).  The last chunk's exact q_0 = 1 - 1.1e-7 exceeds that maximum by ~2e-7, inside the
    # pruning margin, and its stored probabilities are tiny: only the exact (q) bound keeps it, and the answer
    # is q_0 - p_0.  Closed form in mpmath: Z_q = sum_{k < L} e**(-16 k), Z_p = 1 + e**-15 + (L - 2) e**-10000.
    L = L_TWO_CHUNKS
    stored = np.full((1, L), -10000.0)
    stored[0, 1], stored[0, -1] = -15.0, 0.0
    e16 = mpmath.exp(-16)
    zq = (1 - e16**L) / (1 - e16)
    zp = 1 + mpmath.exp(-15) + (L - 2) * mpmath.exp(-10000)
    changes = [abs(mpmath.exp(-10000) / zp - 1 / zq),  # k = 0
               abs(mpmath.exp(-15) / zp - e16 / zq),  # k = 1
               abs(1 / zp - e16 ** (L - 1) / zq)]  # k = 2**19 (the others are below e**-32)
    assert 1 < changes[0] / changes[2] < mpmath.exp(mpmath.mpf("1e-6"))
    got = stored_bias_metrics(stored, [-16.0], "key")["max_prob_change"]
    assert got == pytest.approx(float(max(changes)), rel=1e-12)
