"""RoPE auditor: oracle, schedules, recipes, metrics, torch engine, CLI.

Every expected value comes from mpmath, exact rational arithmetic
(fractions.Fraction), a closed-form derivation written out in the comment next
to it, or transformers' own implementation (skipped if transformers is absent).
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.rope import (
    PRESETS,
    STAGES,
    Recipe,
    RopeSchedule,
    audit,
    cache_rounding_bound,
    exact_angles,
    parse_stages,
    preset,
    recipe_stages,
    torch_stages,
    wrap,
)

mpmath.mp.prec = 200
MP_2PI = 2 * mpmath.pi


def mp_wrapped(m: int, theta: float) -> float:
    """Independent oracle: m * theta (float64 theta taken exactly) mod 2*pi in [-pi, pi], 200 bits."""
    v = mpmath.mpf(m) * mpmath.mpf(theta)
    return float(v - MP_2PI * mpmath.nint(v / MP_2PI))


def round_sig(x: Fraction, bits: int) -> Fraction:
    """Round a positive rational to ``bits`` significant bits, ties to even (normal range only)."""
    e = math.floor(math.log2(x))
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    q = x / Fraction(2) ** (e - bits + 1)  # in [2**(bits-1), 2**bits)
    n = math.floor(q)
    r = q - n
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and n % 2):
        n += 1
    return n * Fraction(2) ** (e - bits + 1)


def ulp_units(x: np.ndarray, y: np.ndarray, bits: int) -> np.ndarray:
    """|x - y| in units of the last place (of the larger magnitude's binade, ``bits`` significant bits)."""
    a = np.maximum(np.abs(x), np.abs(y))
    _, e = np.frexp(np.where(a == 0, 1.0, a))
    return np.abs(x - y) / np.ldexp(1.0, e - bits)


# --------------------------------------------------------------------------- oracle


def test_two_pi_split_matches_mpmath():
    # the oracle's three-term 2*pi must sum to 2*pi to ~2**-105
    from precision_audit.rope import oracle

    total = mpmath.mpf(oracle._TWO_PI_C1) + mpmath.mpf(oracle._TWO_PI_C2) + mpmath.mpf(oracle._TWO_PI_C3)
    assert abs(total - MP_2PI) < mpmath.mpf(2) ** -100
    assert oracle._TWO_PI_C1 + oracle._TWO_PI_C2 == oracle._TWO_PI  # the split of float64(2*pi) is exact


@pytest.mark.parametrize("schedule", [RopeSchedule(), RopeSchedule(base=500000.0), RopeSchedule(
    base=10000.0, scaling="yarn", factor=4.0), RopeSchedule(head_dim=64, scaling="linear", factor=0.5)])
def test_oracle_against_mpmath(schedule):
    # oracle: exact product of integer m and float64 theta, reduced mod 2*pi; mpmath at 200 bits
    rng = np.random.default_rng(1)
    ms = np.concatenate([[0, 1, 255, 257, 8191, 2**17 - 1, 2**20 - 1, 2**20, 2**26 - 1],
                         rng.integers(0, 2**26, 20)])
    theta = schedule.inv_freq()
    got = exact_angles(ms, theta)
    for a, m in enumerate(ms):
        for b in range(0, theta.size, 5):
            assert abs(got[a, b] - mp_wrapped(int(m), float(theta[b]))) < 1e-15, (m, b)


def test_exact_angle_doc_value():
    # the docstring's 2**20 mod 2*pi
    assert exact_angles([2**20], [1.0])[0, 0] == pytest.approx(mp_wrapped(2**20, 1.0), abs=1e-16)


def test_wrap_range():
    x = np.array([-10.0, -np.pi, 0.0, 3.0, 4.0, 1e6])
    w = wrap(x)
    assert np.all(np.abs(w) <= np.pi + 1e-12)
    # wrap changes x by a multiple of 2*pi: cos and sin are unchanged
    np.testing.assert_allclose(np.cos(w), np.cos(x), atol=1e-9)
    np.testing.assert_allclose(np.sin(w), np.sin(x), atol=1e-9)


# --------------------------------------------------------------------------- schedules


def test_default_inv_freq_matches_mpmath():
    # theta_i = base ** (-2i/d), correctly rounded float64 up to a couple of ulps (pow + divide)
    s = RopeSchedule(head_dim=128, base=10000.0)
    for i, t in enumerate(s.inv_freq()):
        exact = mpmath.mpf(10000) ** (-mpmath.mpf(2 * i) / 128)
        assert abs(t - float(exact)) <= 4 * np.spacing(t)


def test_partial_rotary_and_linear():
    # rotary_dim r < d: r/2 frequencies base ** (-2i/r); linear divides by the factor (position interpolation)
    s = RopeSchedule(head_dim=128, rotary_dim=64)
    assert s.n_freq == 32
    np.testing.assert_allclose(s.inv_freq(), 10000.0 ** (-np.arange(0, 64, 2) / 64), rtol=1e-15)
    lin = RopeSchedule(head_dim=128, scaling="linear", factor=8.0)
    np.testing.assert_allclose(lin.inv_freq(), RopeSchedule().inv_freq() / 8, rtol=1e-15)


def test_dynamic_ntk_closed_form():
    # transformers: base' = base * (factor * L / max_pos - (factor - 1)) ** (d / (d - 2)) for L > max_pos
    s = RopeSchedule(head_dim=64, scaling="dynamic", factor=2.0, original_max_position_embeddings=4096)
    np.testing.assert_array_equal(s.inv_freq(4096), RopeSchedule(head_dim=64).inv_freq())
    b2 = 10000.0 * (2.0 * 16384 / 4096 - 1.0) ** (64 / 62)
    np.testing.assert_allclose(s.inv_freq(16384), b2 ** (-np.arange(0, 64, 2) / 64), rtol=1e-14)


def test_llama3_bands():
    # llama3: wavelength 2*pi/theta below orig/high_ff kept, above orig/low_ff divided by factor
    s = RopeSchedule(base=500000.0, scaling="llama3", factor=8.0, original_max_position_embeddings=8192)
    plain = RopeSchedule(base=500000.0).inv_freq()
    got = s.inv_freq()
    wavelen = 2 * np.pi / plain
    high, low = wavelen < 8192 / 4.0, wavelen > 8192 / 1.0
    np.testing.assert_array_equal(got[high], plain[high])
    np.testing.assert_allclose(got[low], plain[low] / 8.0, rtol=1e-15)
    mid = ~high & ~low
    assert mid.any()
    assert np.all(got[mid] < plain[mid]) and np.all(got[mid] > plain[mid] / 8.0)


def test_yarn_attention_factor():
    # yarn mscale: 0.1 * ln(factor) + 1
    assert RopeSchedule(scaling="yarn", factor=4.0).cos_sin_scale == pytest.approx(0.1 * math.log(4.0) + 1.0)
    assert RopeSchedule(scaling="yarn", factor=4.0, attention_factor=1.5).cos_sin_scale == 1.5
    assert RopeSchedule(scaling="linear", factor=4.0).cos_sin_scale == 1.0


@pytest.mark.parametrize("kwargs,message", [
    (dict(head_dim=7), "head_dim 7 must be a positive even integer"),
    (dict(head_dim=0), "head_dim 0 must be a positive even integer"),
    (dict(head_dim=-4), "head_dim -4 must be a positive even integer"),
    (dict(base=1.0), "base 1.0 must be a finite number > 1"),
    (dict(base=0.5), "base 0.5 must be a finite number > 1"),
    (dict(rotary_dim=256), "rotary_dim 256 is larger than head_dim 128"),
    (dict(rotary_dim=33), "rotary_dim 33 must be a positive even integer"),
    (dict(scaling="ntk"), "unknown rope type 'ntk'; valid: default, linear, dynamic, yarn, longrope, llama3, proportional"),
    (dict(scaling="linear", factor=0.0), "scaling factor 0.0 must be a finite number > 0"),
    (dict(scaling="yarn", factor=-2.0), "scaling factor -2.0 must be a finite number > 0"),
    (dict(scaling="llama3", low_freq_factor=4.0, high_freq_factor=1.0), "llama3 needs high_freq_factor"),
    # an int beyond float64's range is refused by name, not an OverflowError from float()
    (dict(base=2**1100), "base 2**1100 is beyond float64's range"),
    (dict(scaling="yarn", factor=2.0, beta_fast=2**1100), "beta_fast 2**1100 is beyond float64's range"),
    (dict(scaling="yarn", factor=2.0, mscale="1"), "mscale '1' must be a finite number > 0"),
])
def test_schedule_validation(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RopeSchedule(**kwargs)


# --------------------------------------------------------------------------- recipes


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_presets_stages(dtype):
    # the four code paths of the issue, cache always in the target dtype
    assert preset("lowp", dtype).stages == dict.fromkeys(STAGES, dtype)
    assert preset("lowp-inv-freq", dtype).stages == {
        "positions": "float32", "inv_freq": dtype, "angle": "float32", "trig": "float32", "cache": dtype}
    assert preset("fp32", dtype).stages == {**dict.fromkeys(STAGES, "float32"), "cache": dtype}
    assert preset("fp64", dtype).stages == {**dict.fromkeys(STAGES, "float64"), "cache": dtype}


def test_parse_stages_and_errors():
    r = parse_stages("positions=bf16, angle=half", "float16")
    assert r.stages == {"positions": "bfloat16", "inv_freq": "float32", "angle": "float16", "trig": "float32",
                        "cache": "float16"}
    with pytest.raises(ValueError, match="unknown stage 'angles'"):
        parse_stages("angles=bf16")
    with pytest.raises(ValueError, match="stage angle in 'angle=fp7': unknown dtype 'fp7'"):
        parse_stages("angle=fp7")
    with pytest.raises(ValueError, match="is not STAGE=DTYPE"):
        parse_stages("angle")
    with pytest.raises(ValueError, match="unknown recipe 'fp128'"):
        preset("fp128")
    with pytest.raises(ValueError, match="recipe 'r' stage trig: unknown dtype"):
        Recipe("r", "fp32", "fp32", "fp32", "fp33", "bf16")
    with pytest.raises(ValueError, match="unknown stage 'x'"):
        preset("fp32").with_exact("x")


def test_stages_exact_rationals():
    # each stage rounds once: check against exact rational arithmetic, bf16 = 8 significant bits
    theta = RopeSchedule(head_dim=16).inv_freq()
    ms = [0, 1, 255, 257, 1000, 4097, 8191]
    st = recipe_stages(preset("lowp", "bfloat16"), theta, ms)
    for a, m in enumerate(ms):
        p = round_sig(Fraction(m), 8) if m else Fraction(0)
        assert st["positions"][a] == p
        for b, t in enumerate(theta):
            tb = round_sig(Fraction(t), 8)
            assert st["inv_freq"][b] == tb
            ang = round_sig(p * tb, 8) if p else Fraction(0)
            assert st["angle"][a, b] == ang  # product rounded once
            # trig: cos of the stored angle, correctly rounded (mpmath), then the cache (same format)
            c = mpmath.cos(mpmath.mpf(ang.numerator) / ang.denominator)
            exp_c = float(np.sign(float(c))) * float(round_sig(Fraction(abs(float(c))), 8)) if c else 0.0
            assert st["cos"][a, b] == exp_c


# --------------------------------------------------------------------------- metrics: first-principles bounds


def test_fp32_bound_and_fp64_floor():
    # fp32: |theta32 - theta| <= 2**-24 theta and the product's half-ulp <= 2**-24 (m theta32), so the angle
    # error <= (L-1) theta_max 2**-23 (1 + 2**-24); the rotation adds the cache's and the fp32 trig's
    # rounding bounds.  fp64: the float64 product's half-ulp, <= 2**-53 (L-1) theta_max, then the cache.
    L = 32768
    s = RopeSchedule(head_dim=64)
    fp32, fp64 = audit(s, [preset("fp32", "bf16"), preset("fp64", "bf16")], L)
    angle_bound = (L - 1) * s.inv_freq().max() * 2.0**-23 * (1 + 2.0**-24)
    assert fp32.max_angle_error <= angle_bound
    assert fp32.max_rotation_error <= angle_bound + cache_rounding_bound("bf16") + cache_rounding_bound("fp32")
    f64_angle = (L - 1) * s.inv_freq().max() * 2.0**-53
    assert fp64.max_angle_error <= f64_angle
    assert fp64.max_rotation_error <= cache_rounding_bound("bf16") + f64_angle + 1e-15
    # fp64's rotation error is the bf16 cache's rounding alone: brute force over all 32768 x 32 angles, written
    # here with ml_dtypes casts and atan2.  The float64 angle m*theta is within 2**-53 * 32768 of exact and
    # float64 wrapping adds ~1e-12 (5216 turns of 2*pi's float64 error), so 1e-9 covers the oracle differences.
    ang = np.arange(L, dtype=np.float64)[:, None] * s.inv_freq()[None, :]
    c = np.cos(ang).astype(ml_dtypes.bfloat16).astype(np.float64)
    sn = np.sin(ang).astype(ml_dtypes.bfloat16).astype(np.float64)
    brute = np.abs(np.remainder(np.arctan2(sn, c) - ang + np.pi, 2 * np.pi) - np.pi).max()
    assert fp64.max_rotation_error == pytest.approx(brute, abs=1e-9)
    assert fp32.colliding_positions == fp64.colliding_positions == 0


def test_lowp_collisions_closed_form():
    # bf16 positions 0..8191: distinct values 0..255 (256), 128 per binade [2**k, 2**(k+1)) for k = 8..12,
    # and 8192 (8177..8191 round up): 897 distinct.  Equal positions give equal rows, and every distinct
    # position keeps a distinct row (dim 0 angle = position, theta_0 = 1), so 8192 - 897 = 7295 positions
    # repeat their predecessor's row.
    (row,) = audit(RopeSchedule(head_dim=32), preset("lowp", "bf16"), 8192)
    assert row.colliding_positions == 8192 - 897
    # position 2047 is stored as 2048 in bf16: at theta_0 = 1 the angle is off by 1 rad, so the
    # phase is lost by 2K (rotation error >= 1 - 2 cache bounds)
    (r2k,) = audit(RopeSchedule(head_dim=32), preset("lowp", "bf16"), 2048)
    assert r2k.max_rotation_error >= 1.0 - 2 * cache_rounding_bound("bf16")


def test_lowp_inv_freq_linear_drift():
    # positions exact, theta_b = bf16(theta): the angle error at m is m |theta_b - theta| plus the fp32
    # product's half-ulp (<= 2**-24 * m theta_b), so at L = 512 the max is (L-1) max_i |theta_b,i - theta_i|
    # within that half-ulp (exact rationals for theta_b).
    s = RopeSchedule(head_dim=64)
    L = 512
    (row,) = audit(s, preset("lowp-inv-freq", "bf16"), L)
    d = [abs(round_sig(Fraction(t), 8) - Fraction(t)) for t in s.inv_freq()]
    expect = float((L - 1) * max(d))
    assert abs(row.max_angle_error - expect) <= 2.0**-24 * (L - 1)
    # per frequency too: profile_i = (L-1) |theta_b,i - theta_i| within the half-ulp
    for i, di in enumerate(d):
        assert abs(row.angle_error_profile[i] - float((L - 1) * di)) <= 2.0**-24 * (L - 1) + 1e-15
    # by 8K the error m * D grows in steps <= max D < 2**-8 rad, so it passes within 2**-8 of pi: phase lost
    (r8k,) = audit(s, preset("lowp-inv-freq", "bf16"), 8192)
    assert r8k.max_angle_error >= math.pi - 2.0**-8 - 2.0**-24 * 8192


def test_fp32_drift_near_1m_exact_rationals():
    # fp32 angles near 1M: the recipe's angle error at m, frequency 1, is |fl32(m t) - m theta| with
    # t = fp32(theta_1); products in [2**19, 2**20) sit on a 2**-4 grid.  Exact rationals over 4096 m.
    s = RopeSchedule(head_dim=128)
    theta = s.inv_freq()
    ms = np.arange(2**20 - 4096, 2**20)
    st = recipe_stages(preset("fp32", "bf16"), theta, ms)
    t = round_sig(Fraction(theta[1]), 24)
    exact_err = []
    for m in ms[::64]:
        prod = int(m) * t
        stored = round_sig(prod, 24)
        exact_err.append(abs(float(stored - int(m) * Fraction(theta[1]))))
    got = np.abs(wrap(st["angle"][::64, 1] - ms[::64] * theta[1]))
    np.testing.assert_allclose(got, exact_err, atol=1e-9)  # float64 subtraction of ~9e5-sized numbers
    assert max(exact_err) > 2.0**-6  # drift of hundredths of a radian, well above the bf16 cache level


def test_prefix_reductions_and_chunking_agree():
    # one pass for several lengths == separate passes; chunk size does not change any figure
    s = RopeSchedule(head_dim=32)
    recs = [preset("lowp", "bf16"), preset("fp32", "fp16")]
    together = audit(s, recs, [300, 1000, 4096], chunk=312)
    for r in together:
        rec = recs[0] if r.recipe == "lowp" else recs[1]
        (alone,) = audit(s, rec, r.length, chunk=2**20)
        a, b = r.to_dict(), alone.to_dict()
        for key in ("mean_angle_error", "mean_rotation_error", "mean_angle_error_profile",
                    "mean_rotation_error_profile"):  # sums: only the summation order differs
            np.testing.assert_allclose(a.pop(key), b.pop(key), rtol=1e-12)
        pa, pb = a.pop("pair_errors"), b.pop("pair_errors")  # pair means: sums too
        assert [p.pop("mean_rotation_error") for p in pa] == pytest.approx([p.pop("mean_rotation_error") for p in pb],
                                                                           rel=1e-12)
        assert pa == pb
        assert a == b  # maxima and collision counts are exact


def test_dynamic_groups_lengths_by_frequencies():
    # dynamic NTK at L > max_pos equals the plain schedule with the NTK base (closed form above)
    dyn = RopeSchedule(head_dim=32, scaling="dynamic", factor=2.0, original_max_position_embeddings=1024)
    rows = audit(dyn, preset("fp32", "bf16"), [512, 1024, 3000])
    (plain,) = audit(RopeSchedule(head_dim=32), preset("fp32", "bf16"), 1024)
    b = 10000.0 * (2.0 * 3000 / 1024 - 1.0) ** (32 / 30)
    (ntk,) = audit(RopeSchedule(head_dim=32, base=b), preset("fp32", "bf16"), 3000)
    assert rows[1].max_rotation_error == plain.max_rotation_error
    assert rows[2].max_rotation_error == ntk.max_rotation_error
    assert rows[2].rotation_error_profile == ntk.rotation_error_profile


def test_yarn_scale_keeps_rotation():
    # the attention factor scales |(cos, sin)| but not atan2(sin, cos): yarn's rotation error in float64
    # cache is the float64 floor
    s = RopeSchedule(head_dim=32, scaling="yarn", factor=4.0)
    r = Recipe("f64", "fp64", "fp64", "fp64", "fp64", "fp64")
    (row,) = audit(s, r, 4096)
    assert row.max_rotation_error < 1e-12
    st = recipe_stages(r, s.inv_freq(), [5, 100], s.cos_sin_scale)
    np.testing.assert_allclose(np.hypot(st["cos"], st["sin"]), s.cos_sin_scale, rtol=1e-15)


def test_error_budget():
    # lowp-inv-freq: making inv_freq exact leaves the fp32 recipe's error (bound as above);
    # fp64: making the cache exact leaves float64 error only; budget[cache] is the recipe's angle damage
    s = RopeSchedule(head_dim=64)
    L = 8192
    inv, f64 = audit(s, [preset("lowp-inv-freq", "bf16"), preset("fp64", "bf16")], L, budget=True)
    assert set(inv.error_budget) == set(STAGES)
    assert inv.max_rotation_error > 3.0  # phase lost by 8K, see test_lowp_inv_freq_linear_drift
    # exact inv_freq: only the fp32 product's half-ulp (<= 2**-24 (L-1)), fp32 trig and the cache remain
    assert inv.error_budget["inv_freq"] <= (L - 1) * 2.0**-24 + cache_rounding_bound("bf16") + 1e-7
    assert inv.error_budget["positions"] > 3.0  # positions were already exact: no help
    assert f64.error_budget["cache"] < 1e-12
    (plain,) = audit(s, preset("fp64", "bf16"), L)
    assert plain.error_budget is None


def test_float16_overflow_counts_as_lost():
    # lowp float16: positions >= 65520 overflow to inf, cos(inf) is nan: counted as error pi
    (row,) = audit(RopeSchedule(head_dim=8), preset("lowp", "fp16"), 65536)
    assert row.max_rotation_error == pytest.approx(math.pi)
    # the 16 nan rows (65520..65535) are indistinguishable: 15 repeat their predecessor's row at least
    assert row.colliding_positions >= 15


def test_audit_errors():
    s = RopeSchedule(head_dim=8)
    with pytest.raises(ValueError, match="exceeds the RoPE oracle's limit"):
        audit(s, preset("fp32"), 2**27)
    with pytest.raises(ValueError, match="no recipe given"):
        audit(s, [], 10)
    with pytest.raises(ValueError, match="length 0 must be at least 1"):
        audit(s, preset("fp32"), 0)


# --------------------------------------------------------------------------- torch engine vs numpy engine


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_engine_agrees(name, dtype):
    # Positions, inv_freq and angle are rounded once by both engines: bit-identical.  cos/sin: torch's
    # kernels (float32 SLEEF/libm; bf16/fp16 evaluated in float32 and rounded again) are faithful, ours
    # correctly rounded, so they may differ by one ulp of the trig format.  A one-ulp trig difference moves
    # the cache value only when the exact value lies within a trig ulp of a cache rounding midpoint, and
    # torch casts float64 to bf16/fp16 through float32 (double rounding): at most one cache ulp, rarely.
    pytest.importorskip("torch")
    s = RopeSchedule(head_dim=64)
    rec = preset(name, dtype)
    L = 70000  # past float16's overflow at 65520
    with np.errstate(invalid="ignore", over="ignore"):
        a = recipe_stages(rec, s.inv_freq(), np.arange(L))
        b = torch_stages(rec, s.inv_freq(), L)
    for k in ("positions", "inv_freq", "angle"):
        np.testing.assert_array_equal(a[k], b[k])
    bits = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
    for k, fmt in (("trig_cos", rec.trig), ("trig_sin", rec.trig), ("cos", rec.cache), ("sin", rec.cache)):
        x, y = a[k], b[k]
        both_nan = np.isnan(x) & np.isnan(y)
        assert np.array_equal(np.isnan(x), np.isnan(y))
        diff = ulp_units(x[~both_nan], y[~both_nan], bits[fmt])
        assert diff.max() <= 1.0, (k, diff.max())
        if k in ("cos", "sin"):
            # How often: a cache value can differ only if the value lies within one float32 ulp of a cache
            # rounding midpoint (a faithful float32 kernel, or torch's float64 -> float32 -> cache double
            # rounding).  With the value spread evenly over a cache ulp that is a share 2 * 2**(p - 24) of the
            # entries (p = 11 for float16, 8 for bfloat16): at most 2**-12 expected, i.e. ~550 of 2.24M entries
            # (binomial sd ~23); 2**-10 (2188) leaves a factor 4 for the unevenness of real angle values.
            assert np.count_nonzero(diff) <= x.size * 2.0**-10


def test_torch_engine_cos_sin_scale_and_errors():
    pytest.importorskip("torch")
    s = RopeSchedule(head_dim=16, scaling="yarn", factor=4.0)
    rec = preset("fp64", "float64")
    a = recipe_stages(rec, s.inv_freq(), np.arange(100), s.cos_sin_scale)
    b = torch_stages(rec, s.inv_freq(), np.arange(100), s.cos_sin_scale)
    np.testing.assert_allclose(a["cos"], b["cos"], atol=4e-16)  # float64 libm cos: within an ulp or two
    with pytest.raises(ValueError, match="has no torch dtype"):
        torch_stages(preset("fp32", "float6_e2m3fn"), s.inv_freq(), 10)


# --------------------------------------------------------------------------- CLI

ROW_KEYS = {
    "recipe", "dtype", "length", "head_dim", "base", "rotary_dim", "scaling", "stages", "how", "engine", "max_angle_error",
    "mean_angle_error", "max_rotation_error", "mean_rotation_error", "colliding_positions", "cache_bound",
    "angle_error_profile", "mean_angle_error_profile", "rotation_error_profile", "mean_rotation_error_profile",
    "error_budget", "stack", "pair_errors", "bound",
}


def run(*args: str):
    return CliRunner().invoke(main, ["rope", *args])


def test_cli_json():
    res = run("--length", "8K", "--length", "2K", "--head-dim", "32", "-r", "lowp", "-r", "fp32", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["auditor"] == "rope"
    rows = doc["results"]
    assert [(r["length"], r["recipe"]) for r in rows] == [(2048, "lowp"), (2048, "fp32"), (8192, "lowp"),
                                                          (8192, "fp32")]
    for r in rows:
        assert set(r) == ROW_KEYS
        assert (r["dtype"], r["head_dim"], r["base"]) == ("bfloat16", 32, 10000.0)
        assert len(r["rotation_error_profile"]) == 16
    assert rows[2]["colliding_positions"] == 8192 - 897  # closed form, see test_lowp_collisions_closed_form


def test_cli_table_stages_budget_scaling():
    res = run("-l", "1k", "--head-dim", "16", "--stages", "positions=bf16", "--budget", "--scaling", "yarn",
              "--factor", "4", "--dtype", "fp16")
    assert res.exit_code == 0, res.output
    assert "positions=bf16" in res.output and "exact inv_freq" in res.output
    assert "rope_type=yarn, factor=4" in res.output
    # the numbers: bf16 positions 0..1023 take 256 + 128 + 128 + 1 = 513 values (0..255, even 256..510,
    # multiples of 4 in 512..1020, and 1024 from 1022/1023); neighbouring distinct positions differ by >= 1 rad
    # at theta_0 = 1, so exactly 1024 - 513 = 511 rows repeat their predecessor's
    line = [ln for ln in res.output.splitlines() if "positions=bf16" in ln and "1024" in ln.split()][0]  # main table
    header = [c.strip() for c in res.output.splitlines()[0].split("  ") if c.strip()]
    assert line.split()[header.index("colliding")] == "511"
    # a custom recipe may store the cache in another format than --dtype: its rows carry that format
    res = run("-l", "300", "--head-dim", "8", "--stages", "cache=fp32", "-r", "fp32", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["results"]
    assert [(r["recipe"], r["dtype"]) for r in rows] == [("fp32", "bfloat16"), ("cache=fp32", "float32")]
    res = run("-l", "1k", "--head-dim", "16", "--rotary-dim", "8", "--json")
    assert res.exit_code == 0
    rows = json.loads(res.output)["results"]
    assert [r["recipe"] for r in rows] == list(PRESETS)  # default: all four presets
    assert {r["rotary_dim"] for r in rows} == {8}


@pytest.mark.parametrize("args,message", [
    (["--head-dim", "7"], "7 must be a positive even integer"),
    (["--head-dim", "0"], "0 is not in the range 2<=x<=8192"),
    (["--base", "1"], "1.0 is not in the range x>1"),
    (["--recipe", "fp16x"], "'fp16x' is not one of"),
    (["--stages", "angles=bf16"], "unknown stage 'angles'"),
    (["--stages", "angle=fp7"], "unknown dtype 'fp7'"),
    (["--scaling", "ntk"], "'ntk' is not one of"),
    (["--factor", "0"], "0.0 is not in the range x>0"),
    (["--rotary-dim", "256"], "rotary_dim 256 is larger than head_dim 128"),
    (["--length", "128M"], "exceeds the RoPE oracle's limit"),
    (["--dtype", "fp7"], "unknown dtype 'fp7'"),
    (["--scaling", "llama3", "--low-freq-factor", "4", "--high-freq-factor", "1"], "llama3 needs high_freq_factor"),
    (["--scaling", "yarn", "--beta-fast", "1", "--beta-slow", "2"], "yarn needs beta_fast > beta_slow"),
])
def test_cli_errors(args, message):
    res = run("-l", "16", *args)
    assert res.exit_code == 2, res.output
    assert message in res.output


# --------------------------------------------------------------------------- long context (slow)


@pytest.mark.slow
def test_headline_1m():
    # lowp and lowp-inv-freq lose the phase; fp32 stays within its first-principles bound and drifts to
    # hundredths of a radian at 1M; fp64 stays at the bf16 cache's own rounding bound.
    s = RopeSchedule(head_dim=128)
    rows = audit(s, [preset(n, "bf16") for n in PRESETS], [131072, 2**20])
    at = {(r.recipe, r.length): r for r in rows}
    cb = cache_rounding_bound("bf16")
    for L in (131072, 2**20):
        assert at["lowp", L].max_rotation_error > 3.0
        assert at["lowp-inv-freq", L].max_rotation_error > 3.0
        bound = (L - 1) * 2.0**-23 * (1 + 2.0**-24)
        assert at["fp32", L].max_angle_error <= bound
        assert at["fp64", L].max_rotation_error <= cb + 1e-9
    # Derived lower bound at 1M: the fp32 angle is fp32(m * theta32_i) with theta32_i = fp32(theta_i).  For the
    # last 4096 positions m * theta32_i is exact in float64 (20 + 24 bits), so the fp32 angle's error against
    # m * theta_i is computed here exactly up to float64 rounding (< 2**-30); cos/sin in fp32 and the bf16 cache
    # move the rotation by at most their rounding bounds.
    L = 2**20
    theta = s.inv_freq()
    t32 = theta.astype(np.float32).astype(np.float64)
    m = np.arange(L - 4096, L, dtype=np.float64)[:, None]
    angle32 = (m * t32).astype(np.float32).astype(np.float64)
    lower = np.abs(angle32 - m * theta).max() - cb - cache_rounding_bound("fp32") - 2.0**-30
    assert at["fp32", L].max_rotation_error >= lower > 10 * cb  # hundredths of a radian, 10x the cache's own


@pytest.mark.parametrize("scaling", ["none", "dynamic"])
def test_progress_counts_the_scanned_positions(scaling):
    from precision_audit.rope import positions_to_scan

    # dynamic NTK changes the frequencies above the pretraining context, so
    # lengths 4096 and 8192 each get their own pass: 2048 + 4096 + 8192 positions
    sched = RopeSchedule(head_dim=16, scaling=scaling, factor=2.0, original_max_position_embeddings=2048)
    lens = [1024, 2048, 4096, 8192]
    seen: list[int] = []
    audit(sched, preset("fp32", "bf16"), lens, progress=seen.append)
    expected = 8192 if scaling == "none" else 2048 + 4096 + 8192
    assert sum(seen) == positions_to_scan(sched, lens) == expected


def test_cli_stack_rows_carry_the_stack_and_refuse_unsupported_types():
    """--stack: rows named and tagged by stack; a named stack that does not run the rope type exits 2 naming both;
    --stack all lists the stacks it left out."""
    res = run("-l", "2K", "--stack", "vllm", "--stack", "llama.cpp-cpu", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["results"]
    assert [(r["recipe"], r["stack"]) for r in rows] == [("vllm", "vllm"), ("llama.cpp-cpu", "llama.cpp-cpu")]
    bad = run("-l", "2K", "--stack", "mlx", "--scaling", "dynamic", "--factor", "4")
    assert bad.exit_code == 2
    assert "stack 'mlx' does not run rope type 'dynamic'" in bad.output
    res = run("-l", "2K", "--stack", "all", "--scaling", "yarn", "--factor", "4")
    assert res.exit_code == 0, res.output
    assert "skipped: stack 'tensorrt-llm-kernel' does not run rope type 'yarn'" in res.output
    assert "skipped: stack 'vllm'" not in res.output
