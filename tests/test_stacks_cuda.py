"""CUDA fast-math stacks (issue 29, deliverable 5): FlashInfer's on-the-fly rope and ggml's CUDA rope.

No GPU runs here.  The bounds of precision_audit.rope.cuda are checked three ways:

(a) the arithmetic the audit runs in place of the intrinsics (FlashInfer's ``rcp-pow`` frequencies) against an
    mpmath model written here from flashinfer's include/flashinfer/pos_enc.cuh;
(b) each bound against an independent emulation of an intrinsic that errs as far as the documentation allows
    (the argument reduction in float32 rounded to nearest and toward zero, ``__log2f`` and ``exp2f`` off by
    their documented errors in either direction): the emulated errors never exceed the bounds;
(c) whole audit rows: an emulated FlashInfer kernel, within the documented bounds with random signs, computed
    in float64 from its own float32 steps, never errs more than the row's bound, absolute or pairwise;
(d) the real intrinsics, recorded on an H200 (scripts/capture_cuda.py -> tests/data/cuda_intrinsics.npz, its
    ``meta`` says how): every recorded value within its bound.
"""

from __future__ import annotations

import math
from pathlib import Path

import mpmath
import numpy as np
import pytest

from precision_audit.rope import RopeSchedule, audit, stack
from precision_audit.rope.cuda import (COS_ERROR, INV_2PI_F32, SIN_ERROR, bound_label, frequency_bound,
                                       powf_relative_bound, sincos_bound)
from precision_audit.rope.recipes import Recipe, stored_inv_freq

DATA = Path(__file__).parent / "data" / "cuda_intrinsics.npz"
F32 = np.float32


@pytest.mark.parametrize("base,d,factor", [(10000.0, 128, 1.0), (500000.0, 128, 1.0), (1e6, 64, 1.0),
                                           (10000.0, 96, 1.0), (10000.0, 128, 4.0)])
def test_rcp_pow_frequencies_match_an_mpmath_model(base: float, d: int, factor: float) -> None:
    """(a) fl32(fl32(1/fl32(base)) ** fl32(2j/d)) [* fl32(1/factor)], each op correctly rounded (mpmath)."""
    s = RopeSchedule(head_dim=d, base=base, scaling="linear" if factor != 1 else "default", factor=factor)
    audit_inv = np.asarray(stored_inv_freq(stack("flashinfer", "float32", s), s))
    with mpmath.workprec(200):
        rcp = float(np.float32(np.float32(1) / np.float32(base)))
        scale = float(np.float32(np.float32(1) / np.float32(factor)))
        want = []
        for j in range(d // 2):
            e = float(np.float32(np.float32(2 * j) / np.float32(d)))
            p = float(np.float32(float(mpmath.power(mpmath.mpf(rcp), mpmath.mpf(e)))))
            want.append(float(np.float32(p * scale)) if factor != 1 else p)
    assert audit_inv.tolist() == want


@pytest.mark.parametrize("base,factor,L0", [(500000.0, 8.0, 8192), (500000.0, 32.0, 8192), (10000.0, 4.0, 4096)])
def test_rcp_pow_llama31_blend_matches_an_mpmath_model(base: float, factor: float, L0: int) -> None:
    """(a) apply_llama31_rope (pos_enc.cuh): p = fl32(rcp ** e); a = (float)(L0 / (2 pi 4 - 2 pi 1)) in double,
    b = fl32(-1 / fl32(fl32(4 / 1) - 1)); sm = clamp(fma(p, a, b), 0, 1); out = fma(sm, p, fl32(fl32(1 - sm) *
    fl32(p * fl32(1 / factor)))), every rounding done here in mpmath."""
    s = RopeSchedule(head_dim=128, base=base, scaling="llama3", factor=factor, low_freq_factor=1.0,
                     high_freq_factor=4.0, original_max_position_embeddings=L0)
    got = np.asarray(stored_inv_freq(stack("flashinfer", "float32", s), s)).tolist()

    def rn(v: mpmath.mpf) -> mpmath.mpf:  # to float32, through an exact binary conversion at 200 bits
        return mpmath.mpf(float(np.float32(float(v)))) if abs(v) > 2.0 ** -100 else mpmath.mpf(0)

    with mpmath.workprec(200):
        rcp = rn(1 / rn(mpmath.mpf(base)))
        a = rn(mpmath.mpf(float(L0 / (2 * math.pi * 4.0 - 2 * math.pi * 1.0))))
        b = rn(-1 / rn(rn(mpmath.mpf(4) / 1) - 1))
        k = rn(1 / rn(mpmath.mpf(factor)))
        want = []
        for j in range(64):
            p = rn(mpmath.power(rcp, rn(mpmath.mpf(2 * j) / 128)))
            sm = min(max(rn(p * a + b), mpmath.mpf(0)), mpmath.mpf(1))
            want.append(float(rn(sm * p + rn(rn(1 - sm) * rn(p * k)))))
    assert got == want


def test_sincos_bound_covers_the_argument_reduction_both_roundings() -> None:
    """(b) x in (pi, 2**22]: the hardware sees t = fl32(x * fl32(1/(2 pi))) (nearest or toward zero), i.e. the
    angle 2 pi t; |2 pi t - x| (mpmath) plus the documented in-range error stays within sincos_bound(x)."""
    rng = np.random.default_rng(1)
    xs = np.unique(np.concatenate([np.float32(2.0 ** rng.uniform(1.7, 22, 3000)),
                                   np.float32([4095.0, 65535.0, 1048575.0, 4194303.0])])).astype(np.float64)
    xs = xs[xs > math.pi]
    core = math.asin(math.hypot(SIN_ERROR, COS_ERROR))
    prod = xs * float(INV_2PI_F32)  # exact: two 24-bit significands fit in float64's 53
    rn = prod.astype(np.float32).astype(np.float64)
    rz = np.where(np.abs(rn) > np.abs(prod), np.nextafter(rn.astype(np.float32), F32(0)).astype(np.float64), rn)
    worst = 0.0
    with mpmath.workprec(120):
        two_pi = 2 * mpmath.pi
        for x, a, b, bound in zip(xs, rn, rz, sincos_bound(xs)):
            err = max(abs(two_pi * mpmath.mpf(a) - mpmath.mpf(x)), abs(two_pi * mpmath.mpf(b) - mpmath.mpf(x)))
            assert float(err) + core <= bound, (x, float(err), bound)
            worst = max(worst, float(err) / (bound - core))
    assert worst > 0.5  # the bound is not loose by orders of magnitude: the emulation reaches over half of it


def test_sincos_bound_in_range_is_the_documented_figure_and_grows() -> None:
    """In [-pi, pi]: asin(hypot(2^-21.41, 2^-21.19)) (CUDA Math API); non-decreasing in |x| beyond."""
    xs = np.linspace(0, math.pi, 101)
    assert np.all(sincos_bound(xs) == math.asin(math.hypot(2.0 ** -21.41, 2.0 ** -21.19)))
    assert np.array_equal(sincos_bound(-xs), sincos_bound(xs))
    big = np.sort(np.float32(2.0 ** np.linspace(1.7, 24, 5000)).astype(np.float64))
    assert np.all(np.diff(sincos_bound(big)) >= 0)


@pytest.mark.parametrize("x", [float(F32(1 / F32(1e4))), float(F32(1 / F32(5e5))), float(F32(1e4) ** F32(-2 / 128)),
                               float(F32(5e5) ** F32(-2 / 128)), 1e-7, 3.5])
def test_powf_bound_covers_an_emulation_at_its_documented_limits(x: float) -> None:
    """(b) __powf = exp2(fl32(y * L)) with L = log2 x off by the documented __log2f error (2^-22 absolute in
    [0.5, 2], else 2 ulp) in either direction, the product rounded either way, exp2 off by 2 ulp: relative to
    x**y (mpmath), within powf_relative_bound."""
    ys = np.float32(np.concatenate([np.arange(64) / 64, np.arange(64), [0.3, 0.7]])).astype(np.float64)
    ys = ys[(ys == 0) | (np.abs(ys * math.log2(x)) < 120)]  # stay inside float32's range
    bounds = powf_relative_bound(x, ys)
    with mpmath.workprec(120):
        lg = mpmath.log(mpmath.mpf(x), 2)
        e = 2.0 ** -22 if 0.5 <= x <= 2 else 2 * float(np.spacing(np.float32(float(lg))))
        for y, bound in zip(ys, bounds):
            if y == 0:
                assert bound == 0
                continue
            exact = mpmath.power(mpmath.mpf(x), mpmath.mpf(y))
            for sl in (-1, 1):
                p = mpmath.mpf(y) * (lg + sl * e)
                p32 = float(np.float32(float(p)))
                for p_r in (p32, float(np.nextafter(np.float32(p32), np.float32(math.copysign(np.inf, p32 - p))))):
                    if abs(mpmath.mpf(p_r) - p) > np.spacing(np.float32(abs(float(p)))):
                        continue  # not one of the two roundings of p
                    for se in (-1, 1):
                        got = mpmath.power(2, p_r) * (1 + se * 2 * 2.0 ** -23)
                        assert float(abs(got / exact - 1)) <= bound, (x, y, sl, se)


def _emulated_flashinfer(s: RopeSchedule, L: int, rng: np.random.Generator) -> np.ndarray:
    """An emulated FlashInfer kernel within the documented bounds: angles phi(m, j) in float64.

    Frequencies: the correctly rounded stand-in moved by a random fraction of the frequency bound, rounded to
    float32; angle fl32(fl32(m) * freq); reduction t = fl32(angle * fl32(1/(2 pi))) rounded to nearest or toward
    zero at random; the sine unit's own error a random angle within the documented in-range figure."""
    rec = stack("flashinfer", "float32", s)
    cr = np.asarray(stored_inv_freq(rec, s))  # the correctly rounded stand-in, checked by the tests (a)
    delta = frequency_bound(rec, s)
    freq = (cr * (1 + delta * rng.uniform(-1, 1, cr.size))).astype(F32)
    pos = np.arange(L, dtype=F32)
    angle = (pos[:, None] * freq[None, :]).astype(F32).astype(np.float64)
    prod = angle * float(INV_2PI_F32)
    rn = prod.astype(F32).astype(np.float64)
    rz = np.where(np.abs(rn) > np.abs(prod), np.nextafter(rn.astype(F32), F32(0)).astype(np.float64), rn)
    t = np.where(rng.random(angle.shape) < 0.5, rn, rz)
    phi = np.where(angle <= math.pi, angle, 2 * math.pi * t)
    core = math.asin(math.hypot(SIN_ERROR, COS_ERROR))
    phi = phi + core * rng.uniform(-1, 1, angle.shape)
    c, sn = np.cos(phi).astype(F32), np.sin(phi).astype(F32)  # what the kernel holds: float32 cos/sin
    return np.arctan2(sn.astype(np.float64), c.astype(np.float64))


def _wrap(x: np.ndarray) -> np.ndarray:
    return (x + math.pi) % (2 * math.pi) - math.pi


LLAMA31 = RopeSchedule(head_dim=128, base=500000.0, scaling="llama3", factor=8.0, low_freq_factor=1.0,
                       high_freq_factor=4.0, original_max_position_embeddings=8192)


@pytest.mark.parametrize("s,L", [(RopeSchedule(head_dim=128, base=10000.0), 4096),
                                 (RopeSchedule(head_dim=128, base=10000.0), 65536),
                                 (RopeSchedule(head_dim=128, base=500000.0), 32768), (LLAMA31, 65536)])
def test_flashinfer_rows_bound_an_emulated_kernel(s: RopeSchedule, L: int) -> None:
    """(c) A FlashInfer row's absolute and pairwise errors bound those of emulated kernels (float64 oracle of
    the exact angles: the schedule's float64 frequencies, Llama 3's bands included)."""
    dists = (1, 16, 256, L // 2)
    row = audit(s, stack("flashinfer", "bf16", s), [L], distances=dists)[0]
    assert row.bound == bound_label(stack("flashinfer", "bf16"))
    exact_theta = s.inv_freq()
    m = np.arange(L, dtype=np.float64)
    exact = m[:, None] * exact_theta[None, :]
    pairs = {p.distance: p.max_rotation_error for p in row.pair_errors}
    for seed in range(3):
        phi = _emulated_flashinfer(s, L, np.random.default_rng(seed))
        assert np.abs(_wrap(phi - exact)).max() <= row.max_rotation_error
        for D in dists:
            got = np.abs(_wrap(phi[D:] - phi[:-D] - D * exact_theta[None, :])).max()
            assert got <= pairs[D], (seed, D, got, pairs[D])


def test_rows_without_intrinsics_are_exact_and_unlabelled() -> None:
    """The widening touches fast-math recipes only: the same recipe without them gives the stand-in's row."""
    s = RopeSchedule(head_dim=64)
    fi = stack("flashinfer", "bf16", s)
    plain = Recipe("plain", fi.positions, fi.inv_freq, fi.angle, fi.trig, fi.cache, inv_freq_from="rcp-pow",
                   apply=fi.apply, apply_mode=fi.apply_mode)
    a, b = audit(s, [fi, plain], [8192])
    assert b.bound is None and a.bound is not None
    assert a.max_rotation_error > b.max_rotation_error and a.colliding_positions == b.colliding_positions
    assert all(p.max_rotation_error > q.max_rotation_error for p, q in zip(a.pair_errors, b.pair_errors))


@pytest.mark.parametrize("kwargs,needle", [
    (dict(fast_math=("sinf",)), "unknown fast-math function 'sinf'"),
    (dict(fast_math=("powf",)), "fast-math powf needs a power computed on the device"),
    (dict(fast_math=("sincosf",), trig="bfloat16"), "fast-math bounds are modelled for float32"),
])
def test_bad_fast_math_recipes_are_refused(kwargs: dict, needle: str) -> None:
    base = dict(name="x", positions="float32", inv_freq="float32", angle="float32", trig="float32", cache="float32")
    with pytest.raises(ValueError, match=needle):
        Recipe(**{**base, **kwargs})


def test_llama31_frequency_bound_is_the_powf_bound_outside_the_band() -> None:
    """Where the clamp holds Llama 3's smooth at 0 or 1 the blend is a product: the powf bound plus the slack;
    inside the band the bound grows with the blend's gain (>= 1)."""
    rec = stack("flashinfer", "bf16", LLAMA31)
    base = float(np.float32(np.float32(1) / np.float32(LLAMA31.base)))
    ys = (np.arange(0, 128, 2, dtype=F32) / F32(128)).astype(np.float64)
    plain = powf_relative_bound(base, ys)
    got = frequency_bound(rec, LLAMA31)
    wavelen = 2 * math.pi * LLAMA31.base ** (np.arange(0, 128, 2) / 128)  # bands: < 8192/4 kept, > 8192 divided
    outside = (wavelen < 2048 * 0.99) | (wavelen > 8192 * 1.01)
    assert np.allclose(got[outside], plain[outside] * (1 + plain[outside]) + 2.0 ** -20, rtol=0, atol=1e-18)
    assert np.all(got[~outside] >= plain[~outside]) and (~outside).any()


def test_flashinfer_refuses_what_it_does_not_run() -> None:
    with pytest.raises(ValueError, match="stack 'flashinfer' does not run rope type 'yarn'"):
        stack("flashinfer", "bf16", RopeSchedule(head_dim=64, scaling="yarn", factor=4.0))


def test_recorded_intrinsics_within_their_bounds() -> None:
    """(d) The real intrinsics recorded on a CUDA GPU, each within its bound (float64 / mpmath oracle)."""
    if not DATA.exists():
        pytest.skip("no recording of CUDA's intrinsics yet: run scripts/capture_cuda.py on a CUDA machine "
                    "(no GPU was available when this test was written)")
    z = np.load(DATA)
    x = z["sincos_x"].astype(np.float64)
    rot = np.abs(_wrap(np.arctan2(z["fast_sin"].astype(np.float64), z["fast_cos"].astype(np.float64)) - x))
    assert np.all(rot <= sincos_bound(x))
    inside = np.abs(x) <= math.pi
    assert np.all(np.abs(z["fast_sinf"][inside] - np.sin(x[inside])) <= SIN_ERROR)
    assert np.all(np.abs(z["fast_cosf"][inside] - np.cos(x[inside])) <= COS_ERROR)
    px, py = z["pow_x"].astype(np.float64), z["pow_y"].astype(np.float64)
    with mpmath.workprec(100):
        for xv, yv, got in zip(px, py, z["fast_pow"].astype(np.float64)):
            exact = mpmath.power(mpmath.mpf(xv), mpmath.mpf(yv))
            if exact == 0 or not np.isfinite(got) or not 1e-37 < float(exact) < 3e38:
                continue
            assert float(abs(got / exact - 1)) <= float(powf_relative_bound(xv, np.array([yv]))[0]), (xv, yv)
