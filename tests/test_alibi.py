"""Tests for the ALiBi auditor (precision_audit.alibi) and its CLI command.

Oracles used (each test names its own):
* the ALiBi paper's slope rule evaluated in mpmath (the geometric sequence for a power of
  two, the interleaving rule of the reference implementation for other head counts);
* an independent brute-force engine written here with numpy / ml_dtypes dtype
  arithmetic (no ``round_to``), np.unique, itertools.groupby and a direct float64
  softmax;
* transformers' Bloom ``build_alibi_tensor`` (real third-party torch code), imported and run;
* closed forms derived in the comments.

torch's float32 ``pow`` is a vectorised kernel whose last bit depends on the CPU, so Bloom's
slopes are compared with ours within a derived ulp bound, never bit for bit from one machine.
"""

from __future__ import annotations

import itertools
import json
import math

import ml_dtypes
import mpmath
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from precision_audit.alibi import (
    AlibiRow,
    HeadRow,
    Recipe,
    alibi_bias,
    alibi_bias_torch,
    alibi_slopes,
    audit_alibi,
    bloom_slopes,
    get_recipe,
    recipe_names,
    stored_slopes,
)
from precision_audit.cli import main

import _thirdparty  # noqa: I001  (tests/ helper: third-party references, imported and run)

NP = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
}
BITS = {"float32": 24, "float16": 11, "bfloat16": 8, "float8_e4m3fn": 4}
RECIPES = ["lowp", "cast-output", "relative-cast", "fp32"]


# ----------------------------------------------------------------------------
# Independent references


def mp_rule_slopes(n: int) -> list[mpmath.mpf]:
    """The paper's rule as stated in words, in mpmath (200 bits), written recursively.

    n a power of two: the geometric sequence starting at 2**(-8/n) with ratio 2**(-8/n).
    Otherwise: the slopes of the largest power of two c below n, then every other slope of
    the 2c-head sequence, as many as needed.
    """
    with mpmath.workprec(200):
        c = 1
        while 2 * c <= n:
            c *= 2
        start = mpmath.power(2, mpmath.mpf(-8) / c)
        geometric = [start ** (i + 1) for i in range(c)]
        if c == n:
            return geometric
        return geometric + mp_rule_slopes(2 * c)[0::2][: n - c]


def mp_exact_slopes(n: int) -> list[mpmath.mpf]:
    """The slopes as exact reals (mpmath, 200 bits): 2**(-8(h+1)/c), then 2**(-4(2t+1)/c)."""
    c = 2 ** math.floor(math.log2(n))
    with mpmath.workprec(200):
        first = [mpmath.power(2, mpmath.mpf(-8 * (h + 1)) / c) for h in range(c)]
        extra = [mpmath.power(2, mpmath.mpf(-4 * (2 * t + 1)) / c) for t in range(n - c)]
    return first + extra


def mp_round(x: mpmath.mpf, p: int) -> float:
    """Round a positive real to p significant bits (nearest; ties never occur for these irrationals)."""
    with mpmath.workprec(400):
        e = int(mpmath.floor(mpmath.log(x, 2)))
        return float(mpmath.nint(x * mpmath.power(2, p - 1 - e))) * 2.0 ** (e - p + 1)


def ulps32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.float32).view(np.int32).astype(np.int64) - b.astype(np.float32).view(np.int32))


def ulps64(a: float, b: float) -> int:
    return abs(int(np.float64(a).view(np.int64)) - int(np.float64(b).view(np.int64)))


def ulps_in(a: np.ndarray, b: np.ndarray, dt: str) -> np.ndarray:
    """Steps between same-signed values of format dt (the integer views are monotone for x >= 0)."""
    view = np.int32 if dt == "float32" else np.int16
    return np.abs(a.astype(NP[dt]).view(view).astype(np.int64) - b.astype(NP[dt]).view(view).astype(np.int64))


def fp32_base(b: int) -> float:
    """2**(-8/b) correctly rounded to float32 (mpmath), the base Bloom stores for b heads."""
    with mpmath.workprec(200):
        return mp_round(mpmath.power(2, mpmath.mpf(-8) / b), 24)


def bloom_reference_slopes(n: int) -> np.ndarray:
    """Bloom's float32 slopes from its real build_alibi_tensor: the float32 bias at key 1 is slope * 1."""
    import torch

    t = _thirdparty.bloom().build_alibi_tensor(torch.ones(1, 2, dtype=torch.int64), n, torch.float32)
    return t.reshape(n, 2)[:, 1].double().numpy()


def brute_magnitudes(recipe: str, dt: str, n: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Stored |bias| (heads, length) via plain dtype arithmetic, and the exact slopes (float64)."""
    exact = mp_exact_slopes(n)
    k = np.arange(length)
    with np.errstate(over="ignore", invalid="ignore"):
        if recipe == "lowp":  # slope, distance and product all in dt; numpy computes dt*dt exactly, rounds once
            s = np.array([mp_round(x, BITS[dt]) for x in exact]).astype(NP[dt])
            d = k.astype(np.float32).astype(NP[dt])
            mag = (s[:, None] * d[None, :]).astype(np.float64)
        else:
            if recipe == "cast-output":  # Bloom: float32 base 2**(-8/b) raised to a power, rounded to fp32
                c = 2 ** math.floor(math.log2(n))
                pw = [(h + 1, c) for h in range(c)] + [(2 * t + 1, 2 * c) for t in range(n - c)]
                with mpmath.workprec(400):
                    s = np.array([mp_round(mpmath.mpf(fp32_base(b)) ** a, 24) for a, b in pw], dtype=np.float32)
            else:
                s = np.array([mp_round(x, 24) for x in exact], dtype=np.float32)
            prod = s[:, None] * k.astype(np.float32)[None, :]  # IEEE float32 multiply
            out = "float32" if recipe == "fp32" else dt
            mag = prod.astype(NP[out]).astype(np.float64)
    return mag, np.array([float(x) for x in exact])


def brute_metrics(mag: np.ndarray, slopes: np.ndarray, length: int, form: str) -> list[dict]:
    """Per-head metrics of the first `length` magnitudes, computed the obvious way."""
    out = []
    for h in range(mag.shape[0]):
        m = mag[h, :length]
        x = slopes[h] * np.arange(length)
        keyed = ["nan" if np.isnan(v) else v for v in m]
        runs = max(len(list(g)) for _, g in itertools.groupby(keyed))
        finite = np.isfinite(m)
        with np.errstate(invalid="ignore", over="ignore"):
            err = float(np.max(np.abs(m - x))) if finite.all() else math.inf
            sign = 1.0 if form == "key" else -1.0
            lo, ex = sign * m, sign * x
            p = np.exp(lo - lo.max())
            p /= p.sum()
            q = np.exp(ex - ex.max())
            q /= q.sum()
            dp = float(np.max(np.abs(p - q)))
        out.append({
            "distinct_biases": len(np.unique(m)),  # numpy >= 1.24 counts all NaNs as one value
            "max_run": runs,
            "max_abs_error": err,
            "order_inversions": int(np.sum(m[1:] < m[:-1])),
            "nonfinite_biases": int(np.sum(~finite)),
            "max_prob_change": dp,
        })
    return out


# ----------------------------------------------------------------------------
# Slopes


def test_slopes_8_heads_paper():
    # ALiBi paper, section 3: for 8 heads the slopes are 1/2, 1/4, ..., 1/256 (exact powers of two).
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    assert bloom_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]


def test_slopes_16_heads_paper():
    # ALiBi paper: for 16 heads the slopes interpolate 8 heads geometrically: 1/2^0.5, 1/2^1, ..., 1/2^8.
    # Even k: exact powers of two, which pow returns exactly.  Odd k: irrational; the C library's pow is
    # faithful, so within 1 ulp of the correctly rounded value (mpmath).
    got = alibi_slopes(16).tolist()
    expected = [mp_round(mpmath.power(2, mpmath.mpf(-k) / 2), 53) for k in range(1, 17)]
    assert got[1::2] == expected[1::2] == [2.0**-k for k in range(1, 9)]
    assert max(ulps64(a, b) for a, b in zip(got, expected)) <= 1


def test_slopes_12_heads_reference_rule():
    # Reference rule: 8 heads' slopes (1/2 .. 1/256), then every other slope of 16 heads:
    # 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (closed form, correctly rounded by mpmath).
    # (faithful C pow: within 1 ulp, see test_slopes_match_the_paper_rule).
    s = alibi_slopes(12).tolist()
    assert s[:8] == [2.0**-k for k in range(1, 9)]
    want = [mp_round(mpmath.power(2, -(mpmath.mpf(2 * t + 1) / 2)), 53) for t in range(4)]
    assert max(ulps64(a, b) for a, b in zip(s[8:], want)) <= 1


@pytest.mark.parametrize("n", list(range(1, 130)))
def test_slopes_match_the_paper_rule(n):
    # mpmath oracle for the rule in words (mp_rule_slopes).  alibi_slopes evaluates 2.0 ** (dyadic) with
    # the C library's pow, which IEEE platforms keep within 1 ulp (faithful; glibc documents < 0.52 ulp):
    # a faithful result is the correctly rounded value or its neighbour, so at most 1 ulp from it.
    got = alibi_slopes(n).tolist()
    want = [mp_round(x, 53) for x in mp_rule_slopes(n)]
    assert len(got) == n
    assert max(ulps64(a, b) for a, b in zip(got, want)) <= 1


@pytest.mark.parametrize("n", [1, 3, 5, 12, 40, 64, 96])
@pytest.mark.parametrize("fmt", ["float32", "float16", "bfloat16"])
def test_stored_slopes_correctly_rounded(n, fmt):
    # mpmath oracle: the exact slope rounded once to the format (recipes with slope_rule="exact").
    r = Recipe("t", "relative", "exact", fmt, "float32", "float32", "float32")
    expected = [mp_round(x, BITS[fmt]) for x in mp_exact_slopes(n)]
    assert stored_slopes(r, n).tolist() == expected
    (row,) = audit_alibi(n, r, [4])  # each head's row carries the slope the recipe multiplies with
    assert [h.stored_slope for h in row.heads] == expected


@pytest.mark.parametrize("n", [1, 2, 7, 12, 33, 40, 64, 100])
def test_bloom_slopes_are_fp32_base_powers(n):
    # mpmath oracle for Bloom's formula: fp32(base) ** power, correctly rounded to fp32; the base is
    # 2**(-8/b) correctly rounded to fp32 by mpmath (the library rounds a float64 power instead).
    mag, _ = brute_magnitudes("cast-output", "float32", n, 2)
    assert bloom_slopes(n).tolist() == mag[:, 1].tolist()  # row k=1 holds slope * 1


def test_bloom_base_has_no_double_rounding():
    # bloom_slopes rounds the float64 power 2.0 ** (-8/b) to float32 (as Bloom stores it).  For every
    # head count up to MAX_HEADS (b up to 8192) that equals the correctly rounded float32 base: the
    # exact value is nowhere near a float32 midpoint, so a faithful float64 power cannot flip it.
    for e in range(14):
        b = 2**e
        with mpmath.workprec(200):
            exact = mpmath.power(2, mpmath.mpf(-8) / b)
            m, _ = mpmath.frexp(exact)  # exact = m * 2**e, 0.5 <= m < 1
            frac = m * 2**24 - mpmath.floor(m * 2**24)  # position between float32 neighbours, in ulps
        assert exact == mpmath.mpf(fp32_base(b)) or abs(frac - 0.5) > 2.0**-20, b
        assert float(np.float32(2.0 ** (-8.0 / b))) == fp32_base(b), b


def test_bloom_slopes_against_transformers():
    # Real third-party code: slopes from transformers' build_alibi_tensor (torch.pow in float32).
    # Bound: torch's CPU pow (SLEEF vector kernels or libm, per CPU and ATEN_CPU_CAPABILITY) is faithful
    # (error < 1 ulp), so it returns the correctly rounded power or its neighbour; bloom_slopes is the
    # correctly rounded power of the same float32 base: at most 1 float32 ulp apart.
    for n in range(1, 65):
        assert ulps32(bloom_slopes(n), bloom_reference_slopes(n)).max() <= 1, n
    # 8 heads: base 1/2 and its integer powers are exact powers of two, which every pow returns exactly
    # (the ALiBi paper's 1/2 .. 1/256).
    assert bloom_reference_slopes(8).tolist() == bloom_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]


# ----------------------------------------------------------------------------
# Recipes and validation


def test_recipe_presets():
    assert recipe_names() == RECIPES
    r = get_recipe("cast-output", "half")
    assert (r.form, r.slope_rule, r.product_format, r.bias_format) == ("key", "bloom", "float32", "float16")
    assert get_recipe("lowp", "bf16").product_format == "bfloat16"
    assert get_recipe("fp32", "bf16").bias_format == "float32"
    assert get_recipe(r) is r


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"form": "absolute"}, "form 'absolute'"),
        ({"slope_rule": "mpt"}, "slope_rule 'mpt'"),
        ({"bias_format": "fp7"}, "unknown dtype 'fp7'"),
    ],
    ids=["form", "slope-rule", "format"],
)
def test_recipe_validation(kwargs, message):
    base = dict(name="x", form="key", slope_rule="exact", slope_format="fp32", position_format="fp32",
                product_format="fp32", bias_format="bf16")
    with pytest.raises(ValueError, match=message):
        Recipe(**{**base, **kwargs})


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: audit_alibi(0, "cast-output", 8), "num_heads 0 must be at least 1"),
        (lambda: audit_alibi(2.5, "cast-output", 8), "num_heads 2.5 is not an integer"),
        (lambda: audit_alibi(8, "cast-output", 0), "length 0 must be at least 1"),
        (lambda: audit_alibi(8, "bloom", 8), "unknown ALiBi recipe 'bloom'"),
        (lambda: audit_alibi(8, "lowp", 8, "fp7"), "unknown dtype 'fp7'"),
        (lambda: audit_alibi(2, "cast-output", 8, slopes=[0.5]), "slopes has 1 values for num_heads=2"),
        (lambda: audit_alibi(2, "cast-output", 8, chunk=0), "chunk 0"),
        (lambda: audit_alibi(2, "cast-output", 8, slopes=[0.5, -1.0]), "slopes must be positive and finite, got -1.0"),
        (lambda: audit_alibi(2, "cast-output", 8, slopes=[0.5, 2**1100]),
         "slopes must be positive and finite, got inf"),
        (lambda: audit_alibi(2, "cast-output", 8, slopes="0.5"), "slopes '0.5' is text"),
        (lambda: audit_alibi(2, [["lowp"]], 8), r"ALiBi recipe \['lowp'\] must be a name"),
        (lambda: audit_alibi(2, "cast-output", 8, chunk=2.0), "chunk 2.0 must be an integer"),
        (lambda: alibi_slopes(-1), "num_heads -1"),
    ],
    ids=["heads0", "heads-float", "length0", "recipe", "dtype", "slopes", "chunk", "slope-value", "slope-huge",
         "slopes-text", "recipe-list", "chunk-float", "heads-neg"],
)
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_row_validation():
    h = dict(head=0, slope=0.5, stored_slope=0.5, distinct_biases=1, max_run=1, max_abs_error=0.0,
             order_inversions=0, nonfinite_biases=0, max_prob_change=0.0)
    with pytest.raises(ValueError, match="head -1"):
        HeadRow(**{**h, "head": -1})
    with pytest.raises(ValueError, match="distinct_biases 0"):
        HeadRow(**{**h, "distinct_biases": 0})
    row = dict(recipe="fp32", dtype="bfloat16", bias_dtype="float32", form="relative", length=1, num_heads=1,
               min_distinct_biases=1, distinct_fraction=1.0, max_run=1, max_abs_error=0.0, order_inversions=0,
               nonfinite_biases=0, max_prob_change=0.0, heads=(HeadRow(**h),))
    AlibiRow(**row)
    with pytest.raises(ValueError, match="heads holds 1 entries for num_heads=2"):
        AlibiRow(**{**row, "num_heads": 2})
    with pytest.raises(ValueError, match="form 'diagonal'"):
        AlibiRow(**{**row, "form": "diagonal"})
    with pytest.raises(ValueError, match="min_distinct_biases 3"):
        AlibiRow(**{**row, "min_distinct_biases": 3})


# ----------------------------------------------------------------------------
# The engine against the brute-force oracle


CASES = [(recipe, dt) for recipe in RECIPES for dt in ("bfloat16", "float16", "float8_e4m3fn")]


@pytest.mark.parametrize("recipe, dt", CASES)
@pytest.mark.parametrize("n", [8, 12])
def test_audit_matches_brute_force(recipe, dt, n):
    lengths = [1, 2, 255, 257, 1000, 3000]
    mag, slopes = brute_magnitudes(recipe, dt, n, max(lengths))
    form = get_recipe(recipe, dt).form
    for chunk in (97 // n or 1, 2**19):  # chunk boundaries inside the lengths and one chunk for all
        rows = audit_alibi(n, recipe, lengths, dt, chunk=chunk)
        assert [r.length for r in rows] == lengths
        for row in rows:
            ref = brute_metrics(mag, slopes, row.length, form)
            for h, exp in zip(row.heads, ref):
                for key in ("distinct_biases", "max_run", "order_inversions", "nonfinite_biases"):
                    assert getattr(h, key) == exp[key], (row.length, h.head, key)
                assert h.max_abs_error == pytest.approx(exp["max_abs_error"], rel=1e-12, abs=1e-300)
                if math.isnan(exp["max_prob_change"]):
                    assert math.isnan(h.max_prob_change)
                else:
                    assert h.max_prob_change == pytest.approx(exp["max_prob_change"], rel=1e-6, abs=1e-14)
            assert row.min_distinct_biases == min(e["distinct_biases"] for e in ref)
            assert row.max_run == max(e["max_run"] for e in ref)
            assert row.order_inversions == sum(e["order_inversions"] for e in ref)
            assert row.nonfinite_biases == sum(e["nonfinite_biases"] for e in ref)


@settings(max_examples=25, deadline=None)
@given(
    recipe=st.sampled_from(RECIPES),
    dt=st.sampled_from(["bfloat16", "float16"]),
    n=st.integers(1, 20),
    lengths=st.lists(st.integers(1, 700), min_size=1, max_size=4),
    chunk=st.integers(1, 5000),
)
def test_chunking_does_not_change_results(recipe, dt, n, lengths, chunk):
    # Property: prefix reductions over chunks give the same rows as one whole-array chunk; counts and
    # maxima are order-free (exact); the log-sum-exp is summed in another order, which moves a
    # probability change by float64 rounding (~1e-16 absolute).
    whole = audit_alibi(n, recipe, lengths, dt, chunk=10**7)
    parts = audit_alibi(n, recipe, lengths, dt, chunk=max(1, chunk // n))
    for a, b in zip(whole, parts):
        da, db = a.to_dict(), b.to_dict()
        for row_a, row_b in [(da, db), *zip(da.pop("heads"), db.pop("heads"))]:
            assert row_a.pop("max_prob_change") == pytest.approx(row_b.pop("max_prob_change"), rel=1e-9, abs=1e-15)
            assert row_a == row_b


def test_prob_change_against_mpmath():
    # mpmath oracle (60 digits): one head, slope 0.75 (exact in every format), key form in bf16,
    # L = 600: stored biases bf16(0.75 j) from ml_dtypes; softmax of stored vs exact logits.
    L, s = 600, 0.75
    stored = (np.float32(s) * np.arange(L, dtype=np.float32)).astype(ml_dtypes.bfloat16).astype(float)
    with mpmath.workdps(60):
        zs = mpmath.fsum(mpmath.exp(mpmath.mpf(v)) for v in stored)
        zx = mpmath.fsum(mpmath.exp(s * mpmath.mpf(j)) for j in range(L))
        dp = max(abs(mpmath.exp(mpmath.mpf(v)) / zs - mpmath.exp(s * mpmath.mpf(j)) / zx) for j, v in enumerate(stored))
    row = audit_alibi(1, "cast-output", L, "bf16", slopes=[s])[0]
    assert row.max_prob_change == pytest.approx(float(dp), rel=1e-9)


# ----------------------------------------------------------------------------
# Closed forms


def distinct_rounded_integers(length: int, p: int) -> int:
    """Distinct values of round_p(j), j = 0..L-1, for L = 2**e (derivation).

    Below 2**p every integer is exact: 2**p values.  Each binade [2**b, 2**(b+1)) with
    p <= b < e holds 2**(p-1) representable numbers, and L - 1 = 2**e - 1 rounds up to
    2**e when e > p, adding one more value.
    """
    e = length.bit_length() - 1
    assert length == 2**e
    return length if e <= p else 2**p + (e - p) * 2 ** (p - 1) + 1


def max_run_rounded_integers(length: int, p: int) -> int:
    # Top binade spacing s = 2**(e-p); a value with even significand takes both ties: s + 1 integers.
    e = length.bit_length() - 1
    return 1 if e <= p else 2 ** (e - p) + 1


@pytest.mark.parametrize("recipe", ["lowp", "cast-output", "relative-cast"])
@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_power_of_two_slopes_closed_form(recipe, dt):
    # 8 heads: slopes 2**-k, so every product slope*j is an exact scaling of round(j) (no product
    # rounding, no underflow): distinct/max_run are those of the integers 0..L-1 in the format, and
    # the largest error is slope * s/2 in the top binade.  bf16 at 8192: 256 + 5*128 + 1 = 897.
    p = BITS[dt]
    lengths = [256, 2048, 8192, 2**15]
    for row in audit_alibi(8, recipe, lengths, dt):
        e = row.length.bit_length() - 1
        for h in row.heads:
            assert h.distinct_biases == distinct_rounded_integers(row.length, p)
            assert h.max_run == max_run_rounded_integers(row.length, p)
            assert h.max_abs_error == (h.slope * 2.0 ** (e - p - 1) if e > p else 0.0)
            assert h.order_inversions == 0 and h.nonfinite_biases == 0
    assert audit_alibi(8, recipe, 8192, "bf16")[0].min_distinct_biases == 897


@pytest.mark.parametrize("n", [8, 12, 40, 64])
def test_fp32_keeps_every_bias(n):
    # Consecutive products differ by slope >= 2**-8 while ulp(slope*k) <= slope*k*2**-23 < slope/2
    # for k < 2**22, so float32 keeps all L biases distinct (closed form: distinct = L, run = 1).
    for row in audit_alibi(n, "fp32", [4096, 65536], "bf16"):
        assert row.min_distinct_biases == row.length and row.max_run == 1
        assert row.bias_dtype == "float32" and row.nonfinite_biases == 0


def test_float16_overflow_counts():
    # cast-output in float16, slope 1/2, L = 2**18: 0.5 j rounds to inf from 0.5 j >= 65520,
    # i.e. j >= 131040, so 2**18 - 131040 biases overflow (closed form, float16.overflow_integer).
    row = audit_alibi(8, "cast-output", 2**18, "float16")[0]
    assert row.heads[0].nonfinite_biases == 2**18 - 131040
    assert math.isnan(row.heads[0].max_prob_change)  # softmax over +inf logits is undefined
    assert math.isinf(row.heads[0].max_abs_error)
    assert row.heads[7].nonfinite_biases == 0  # slope 1/256: 2**18/256 = 1024 stays finite


# ----------------------------------------------------------------------------
# torch: the second engine and real third-party code


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("dt", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("n", [8, 12, 40])
def test_torch_engine_bit_identical(recipe, dt, n):
    pytest.importorskip("torch")
    a = alibi_bias(recipe, n, 5000, dt)
    b = alibi_bias_torch(recipe, n, 5000, dt)
    assert a.shape == (n, 5000)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dt", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("n", [8, 12, 16, 40])
def test_cast_output_is_bloom_bit_for_bit(dt, n):
    # Real third-party code: transformers' Bloom build_alibi_tensor, run here.  Given Bloom's own slopes
    # (whose last bit comes from this CPU's pow kernel), the multiply and the cast are correctly rounded
    # IEEE operations on every machine, so the numpy engine must reproduce the tensor bit for bit.
    torch = pytest.importorskip("torch")
    bloom = _thirdparty.bloom()
    L = 9000
    theirs = bloom.build_alibi_tensor(torch.ones(1, L, dtype=torch.int64), n, getattr(torch, dt))
    theirs = theirs.reshape(n, L).double().numpy()
    slopes = bloom_reference_slopes(n)
    np.testing.assert_array_equal(alibi_bias("cast-output", n, L, dt, slopes=slopes), theirs)
    # With our correctly rounded slopes s (Bloom's s' is within 1 ulp(s), test above), the exact products
    # differ by k ulp(s) < 2 ulp(s k) (k < 2**(floor(log2 k) + 1), ulp(s k) >= ulp(s) 2**floor(log2 k)).
    # Rounding to nearest is monotone and moves each end by <= half an ulp, so the float32 products are
    # within 3 float32 steps; 3 float32 ulps are far below half an ulp of float16/bfloat16 (2**-11 relative
    # or coarser), so after the cast they are equal or adjacent: at most 1 step.  8 heads: identical.
    ours = alibi_bias("cast-output", n, L, dt)
    bound = 3 if dt == "float32" else 1
    assert ulps_in(ours, theirs, dt).max() <= (0 if n == 8 else bound)


# ----------------------------------------------------------------------------
# CLI


def test_cli_json():
    res = CliRunner().invoke(main, ["alibi", "--length", "8K", "--heads", "40", "--dtype", "bfloat16",
                                    "--recipe", "cast-output", "--recipe", "fp32", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["auditor"] == "alibi"
    rows = {r["recipe"]: r for r in data["results"]}
    assert set(rows) == {"cast-output", "fp32"}
    for r in rows.values():
        assert {"recipe", "dtype", "length", "heads", "min_distinct_biases", "max_run", "max_abs_error",
                "order_inversions", "max_prob_change", "bias_dtype", "form"} <= set(r)
        assert r["length"] == 8192 and r["dtype"] == "bfloat16" and len(r["heads"]) == 40
        assert {"slope", "distinct_biases", "max_run", "max_abs_error", "order_inversions",
                "max_prob_change"} <= set(r["heads"][0])
    # fp32 keeps all 8192 biases in every head (closed form above); bf16 loses most of them.
    assert all(h["distinct_biases"] == 8192 for h in rows["fp32"]["heads"])
    assert rows["cast-output"]["min_distinct_biases"] < 8192 // 4
    # Slopes in JSON follow the reference rule: head 0 of 40 heads is 2**(-8/32).
    assert rows["fp32"]["heads"][0]["slope"] == pytest.approx(2 ** -0.25, rel=1e-15)


def test_cli_table_and_per_head():
    runner = CliRunner()
    res = runner.invoke(main, ["alibi", "-l", "1k", "-l", "2k", "--heads", "12", "-d", "bf16", "-d", "fp16"])
    assert res.exit_code == 0, res.output
    body = [ln for ln in res.output.splitlines() if ln.strip().startswith(("bfloat16", "float16"))]
    assert len(body) == 2 * 2 * 4  # dtypes x lengths x default recipes
    assert "min distinct" in res.output and "relative-cast" in res.output
    res = runner.invoke(main, ["alibi", "-l", "512", "--heads", "5", "-r", "lowp", "--per-head"])
    assert res.exit_code == 0, res.output
    body = [ln for ln in res.output.splitlines() if ln.strip().startswith("bfloat16")]
    assert len(body) == 5 and "head" in res.output.splitlines()[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--heads", "0"], "0 is not in the range 1<=x<=4096"),
        (["--heads", "-3"], "-3 is not in the range 1<=x<=4096"),
        (["--recipe", "bloom"], "'bloom' is not one of"),
        (["--length", "0"], "length 0 must be at least 1"),
        (["--length", "1.5k"], "not a whole number of tokens"),
        (["--dtype", "fp7"], "unknown dtype 'fp7'"),
    ],
    ids=["heads0", "heads-neg", "recipe", "length0", "length-frac", "dtype"],
)
def test_cli_errors_exit_2(args, message):
    res = CliRunner().invoke(main, ["alibi", *args])
    assert res.exit_code == 2
    assert message in res.output


# ----------------------------------------------------------------------------
# Long contexts


@pytest.mark.slow
def test_one_million_tokens_64_heads():
    # Bounded memory at 1M x 64 heads; closed forms: fp32 keeps all 2**20 biases; bf16 cast-output
    # of head 7 (slope 2**-1 for 64 heads is head 7: 2**(-8*8/64)) has distinct = that of the integers.
    rows = {r: audit_alibi(64, r, 2**20, "bf16")[0] for r in ("fp32", "cast-output")}
    assert rows["fp32"].min_distinct_biases == 2**20
    assert rows["cast-output"].heads[7].slope == 0.5
    assert rows["cast-output"].heads[7].distinct_biases == distinct_rounded_integers(2**20, 8)
    assert rows["cast-output"].order_inversions == 0


@pytest.mark.parametrize("n", [8, 16])
def test_prob_change_against_transformers_softmax(n):
    # Real third-party code as oracle: transformers' Bloom alibi tensor in bf16 and torch.softmax in
    # float64 against the softmax of the float64 reference bias (slopes from the reference rule).
    torch = pytest.importorskip("torch")
    bloom = _thirdparty.bloom()
    L = 2048
    stored = bloom.build_alibi_tensor(torch.ones(1, L, dtype=torch.int64), n, torch.bfloat16).reshape(n, L)
    slopes = [float(x) for x in mp_rule_slopes(n)]  # the exact slopes (mpmath) rounded to float64
    exact = torch.tensor(slopes, dtype=torch.float64)[:, None] * torch.arange(L, dtype=torch.float64)
    dp = (torch.softmax(stored.double(), -1) - torch.softmax(exact, -1)).abs().max(-1).values.tolist()
    row = audit_alibi(n, "cast-output", L, "bf16")[0]
    assert [h.max_prob_change for h in row.heads] == pytest.approx(dp, rel=1e-6, abs=1e-14)


@pytest.mark.parametrize("name", recipe_names())
def test_cli_runs_every_library_recipe(name):
    # Every recipe the library knows can be chosen on the command line and gives the library's own row
    # (an end-to-end check of the CLI wiring: option, dtype, head count and length reach audit_alibi).
    res = CliRunner().invoke(main, ["alibi", "-r", name, "-d", "fp16", "--heads", "3", "-l", "300", "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["results"]
    want = audit_alibi(3, name, 300, "float16")[0].to_dict()
    assert row == json.loads(json.dumps(want))


def test_custom_recipe_row_label():
    # A user-built recipe: label defaults to its bias format; the fp16-slope variant of relative-cast
    # must match the brute-force count of distinct fp16 slope products (np.unique oracle).
    r = Recipe("fp16-slopes", "relative", "exact", "float16", "float32", "float32", "float32")
    row = audit_alibi(12, r, 3000)[0]
    assert (row.recipe, row.dtype, row.bias_dtype) == ("fp16-slopes", "float32", "float32")
    s16 = np.array([mp_round(x, 11) for x in mp_exact_slopes(12)], dtype=np.float32)
    mag = s16[:, None] * np.arange(3000, dtype=np.float32)[None, :]
    assert [h.distinct_biases for h in row.heads] == [len(np.unique(m)) for m in mag]
    assert audit_alibi(2, r, 10, "bf16")[0].dtype == "bfloat16"


def test_progress_reports_both_passes():
    # two chunked passes (statistics, then softmax change) over max(lengths) positions
    seen: list[int] = []
    audit_alibi(4, "lowp", [100, 3000], "bf16", chunk=256, progress=seen.append)
    assert sum(seen) == 2 * 3000 and max(seen) <= 256


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", recipe_names())
def test_stored_bias_metrics_agree_with_the_streaming_auditor(name, dtype):
    # The whole array as one chunk of the auditor's tallies (for tensors other code built, e.g. transformers'
    # builders) against audit_alibi's many small chunks, on the recipe's own biases (12 heads: not a power of
    # two, so the slopes are inexact); distinct values and the largest error also against plain numpy
    from precision_audit.alibi import alibi_bias, get_recipe, stored_bias_metrics

    r = get_recipe(name, dtype)
    b = alibi_bias(r, 12, 8192, dtype)
    mag = b if r.form == "key" else 0.0 - b[:, ::-1]
    got = stored_bias_metrics(mag, form=r.form)
    (row,) = audit_alibi(12, name, 8192, dtype, chunk=1000)
    for k in ("min_distinct_biases", "distinct_fraction", "max_run", "max_abs_error", "order_inversions",
              "nonfinite_biases"):
        assert got[k] == getattr(row, k), k
    assert got["max_prob_change"] == pytest.approx(row.max_prob_change, rel=1e-9, abs=1e-15, nan_ok=True)
    ref = alibi_slopes(12)[:, None] * np.arange(8192)[None, :]
    assert got["min_distinct_biases"] == min(len(np.unique(m)) for m in mag)  # monotone rows
    assert got["max_abs_error"] == np.abs(mag - ref).max()


def test_stored_bias_metrics_errors():
    from precision_audit.alibi import stored_bias_metrics

    with pytest.raises(ValueError, match=r"shape \(3,\) must be \(heads, length\)"):
        stored_bias_metrics(np.zeros(3))
    with pytest.raises(ValueError, match="form 'absolute'"):
        stored_bias_metrics(np.zeros((2, 3)), form="absolute")
    with pytest.raises(ValueError, match="3 slopes given for 2 heads"):
        stored_bias_metrics(np.zeros((2, 3)), slopes=[1.0, 0.5, 0.25])
