"""MLX's ``mx.fast.rope`` as the referee: the real kernel against a numpy model of its arithmetic.

The kernel runs on (1, 0) pairs (``tests/referees/_mlx.py``), so each output is the
kernel's stored (cos, sin) in the input dtype.  The model (``tests/referees/_mlx_model.py``)
repeats, with correctly rounded float32 operations and an exact fma, every step of MLX's CPU path
as read in ml-explore/mlx (``fast::rope`` in mlx/fast.cpp; ``exp``, ``sin``, ``cos`` in
mlx/backend/cpu/simd/math.h).  On x86-64 MLX's CPU backend runs those steps as scalar float
operations with ``std::fma``, so the model must give the kernel's bits exactly.  Frequencies
passed with ``freqs=`` are built as mlx-lm builds them (ml-explore/mlx-lm,
mlx_lm/models/rope_utils.py: ``Llama3RoPE``, ``YarnRoPE``, ``SuScaledRoPE``), once with MLX ops
(the real arithmetic) and once by the model.  The default frequencies (the exp path) come from
the kernel's own exp (``fallback_inv_freq``); the package's model of them (``how_inv_freq("exp-log")``)
is refereed against it in tests/test_stacks.py, with the package's stack rows.

Independent checks of the model itself: ``fma32`` against exact rational arithmetic and against the
package's independently written ``fma32``, and the model's sin / cos against float64 values within a
few float32 ulps.  mlx missing: skipped with a reason, except in CI (``referees.need``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from referees import _mlx_model as model  # tests/ helper: the referees (kernels and models)
from referees import need
from referees._mlx import BIT_EXACT, fallback_inv_freq, mlx_rope_pairs

from precision_audit.rope import RopeSchedule
from precision_audit.rope.formulas import fma32 as package_fma32
from precision_audit.rope.formulas import how_inv_freq

L = 32768  # positions 0..L-1
D = 128
BASES = (10000.0, 500000.0)
DTYPES = ("float32", "float16", "bfloat16")
# Llama-3.1's rope_scaling (config.json of meta-llama/Llama-3.1-8B): factor 8, low 1, high 4, 8192
LLAMA31 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, old_context_len=8192)
EXACT_ARCH = BIT_EXACT  # scalar float ops, no fp contraction


def _mx() -> Any:
    return need("mlx.core")


def _ulps(a: np.ndarray, b: np.ndarray, dtype: str) -> int:
    """Largest distance in ``dtype`` ulps between two arrays of ``dtype`` values (same sign assumed)."""
    types = {"float32": (np.float32, np.int32), "float16": (np.float16, np.int16),
             "bfloat16": (ml_dtypes.bfloat16, np.int16)}
    t, i = types[dtype]
    x = np.asarray(a).astype(t).view(i).astype(np.int64)
    y = np.asarray(b).astype(t).view(i).astype(np.int64)
    x = np.where(x < 0, np.iinfo(i).min - x, x)  # sign-magnitude to a monotone integer line
    y = np.where(y < 0, np.iinfo(i).min - y, y)
    return int(np.abs(x - y).max()) if x.size else 0


# ---- the model's own building blocks, against independent oracles


def _round24(q: Fraction) -> float:
    """An exact rational rounded to float32 (nearest, ties to even), for normal results."""
    if q == 0:
        return 0.0
    sign, q = (-1 if q < 0 else 1), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    scaled = q / Fraction(2) ** (e - 23)  # in [2**23, 2**24)
    n, r = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * r
    if twice > scaled.denominator or (twice == scaled.denominator and n % 2):
        n += 1
    return sign * math.ldexp(n, e - 23)


_f32 = st.floats(min_value=-1e3, max_value=1e3, width=32, allow_subnormal=False).filter(lambda v: abs(v) > 1e-6)


@settings(max_examples=400, deadline=None)
@given(_f32, _f32, _f32)
def test_fma32_is_one_rounding(a: float, b: float, c: float) -> None:
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact != 0 and abs(exact) < 2.0**-100:
        return
    assert float(model.fma32(np.float32(a), np.float32(b), np.float32(c))) == _round24(exact)
    assert float(package_fma32(np.float32(a), np.float32(b), np.float32(c))) == _round24(exact)


def test_fma32_halfway_cases() -> None:
    """A float64 sum that lands exactly halfway between two floats: the exact error decides.

    a * b = 2**-24 * (1 + 2**-12) * (1 - 2**-12 + 2**-24) = 2**-24 + 2**-60, so a * b + 1 is just
    above 1 + 2**-24 (halfway between 1 and 1 + 2**-23) and rounds up; float64 first rounds it to
    the halfway point, and ties-to-even would then give 1.
    """
    a, b, one = np.float32(2.0**-24 * (1 + 2.0**-12)), np.float32(1 - 2.0**-12 + 2.0**-24), np.float32(1.0)
    assert Fraction(float(a)) * Fraction(float(b)) == Fraction(2) ** -24 + Fraction(2) ** -60
    assert float(np.float32(np.float64(a) * np.float64(b) + 1.0)) == 1.0  # the double rounding
    for fma in (model.fma32, package_fma32):  # two independent implementations (TwoSum fix; round to odd)
        assert float(fma(a, b, one)) == 1 + 2.0**-23
        assert float(fma(np.float32(2.0**-24), one, one)) == 1.0  # exactly halfway: ties to even


@pytest.mark.parametrize("base", [10000.0, 500000.0, 10000000.0])
def test_sincos32_within_a_few_ulps(base: float) -> None:
    """Cephes float32 sin / cos stay close to the float64 functions (a sanity bound, not the claim)."""
    inv = how_inv_freq("exp-log", RopeSchedule(head_dim=D, base=base))  # sample angles: any float32 values do
    theta = model.angles(np.arange(0, 1 << 15, 7), inv)
    s, c = model.sincos32(theta)
    t64 = theta.astype(np.float64)
    assert np.abs(s - np.sin(t64)).max() <= 2.0**-23 and np.abs(c - np.cos(t64)).max() <= 2.0**-23


# ---- the frequencies mlx-lm passes: MLX ops against the model, bit for bit


def _mlx_lm_llama3_freqs(mx: Any, base: float) -> np.ndarray:
    """mlx-lm's ``Llama3RoPE.__init__`` formula, written with MLX ops (mlx_lm/models/rope_utils.py)."""
    f, lo, hi, old = (LLAMA31[k] for k in ("factor", "low_freq_factor", "high_freq_factor", "old_context_len"))
    freqs = base ** (mx.arange(0, D, 2) / D)
    wavelens = 2 * mx.pi * freqs
    freqs = mx.where(wavelens > old / lo, freqs * f, freqs)
    medium = (wavelens > old / hi) & (wavelens < old / lo)
    smooth = (old / wavelens - lo) / (hi - lo)
    return np.array(mx.where(medium, freqs / ((1 - smooth) / f + smooth), freqs))


@pytest.mark.parametrize("base", BASES)
def test_llama3_freqs_as_mlx_lm_builds_them(base: float) -> None:
    mx = _mx()
    with mx.stream(mx.cpu):
        ref = _mlx_lm_llama3_freqs(mx, base)
    got = model.llama3_freqs(D, base, **LLAMA31)
    assert ref.dtype == np.float32
    assert _ulps(ref, got, "float32") == 0  # MLX's power (std::pow) gives the correctly rounded value here


def test_yarn_and_su_freqs_as_mlx_lm_builds_them() -> None:
    """``YarnRoPE`` (Qwen2.5's YaRN: factor 4, L0 32768) and ``SuScaledRoPE`` (long factors) freqs."""
    mx = _mx()
    base, factor, L0 = 1000000.0, 4.0, 32768
    low = max(math.floor(D * math.log(L0 / (32 * 2 * math.pi)) / (2 * math.log(base))), 0)
    high = min(math.ceil(D * math.log(L0 / (1 * 2 * math.pi)) / (2 * math.log(base))), D - 1)
    long_factor = [1.0 + i / 16 for i in range(D // 2)]
    with mx.stream(mx.cpu):
        extra = base ** (mx.arange(0, D, 2, dtype=mx.float32) / D)
        inter = factor * extra
        mask = 1.0 - mx.clip((mx.arange(D // 2, dtype=mx.float32) - low) / (high - low), 0, 1)
        yarn = np.array((inter * extra) / (inter * mask + extra * (1 - mask)))
        su = np.array(mx.array(long_factor, dtype=mx.float32) * (10000.0 ** (mx.arange(0, D, 2, dtype=mx.float32) / D)))
    assert _ulps(yarn, model.yarn_freqs(D, base, factor, L0), "float32") == 0
    assert _ulps(su, model.su_freqs(D, 10000.0, long_factor), "float32") == 0
    assert model.yarn_mscale(factor) == pytest.approx(0.1 * math.log(4) + 1)


# ---- the kernel against the model at 32K positions, head dim 128


@pytest.fixture(scope="module")
def model_f32() -> dict[tuple[str, float], tuple[np.ndarray, np.ndarray]]:
    """The model's float32 (cos, sin) per (frequency source, base), computed once (the cast comes after)."""
    _mx()  # skip before the work when there is no kernel to compare with
    out = {}
    pos = np.arange(L)
    for base in BASES:
        for src in ("default", "llama3"):
            inv = fallback_inv_freq(D, base) if src == "default" else \
                model.freqs_inv_freq(model.llama3_freqs(D, base, **LLAMA31))
            s, c = model.sincos32(model.angles(pos, inv))
            out[src, base] = (c, s)
    return out


@pytest.mark.skipif(not EXACT_ARCH, reason="bit-exact only where MLX's CPU path is scalar float ops (x86-64)")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("src", ["default", "llama3"])
@pytest.mark.parametrize("base", BASES)
def test_kernel_equals_model(base: float, src: str, dtype: str, model_f32: dict) -> None:
    """mx.fast.rope's (cos, sin) at positions 0..32767 equal the model's bits: 0 ulps in every dtype."""
    _mx()
    freqs = None if src == "default" else model.llama3_freqs(D, base, **LLAMA31)
    kc, ks = mlx_rope_pairs(np.arange(L), D, None if freqs is not None else base, freqs=freqs, dtype=dtype)
    c, s = model_f32[src, base]
    assert (_ulps(kc, model.cast(c, dtype), dtype), _ulps(ks, model.cast(s, dtype), dtype)) == (0, 0)


@pytest.mark.parametrize("factor", [2.5, 3.0, 7.3])
def test_linear_scaling_is_the_kernels_scale(factor: float) -> None:
    """mlx-lm's linear RoPE (``nn.RoPE(..., scale=1/factor)``) runs ``mx.fast.rope`` with ``scale``: the kernel scales
    the float32 position, then multiplies by its inverse frequency.  The kernel against the model (scales that are
    not powers of two), and the package's angles for the mlx-cpu stack against the model's, bit for bit."""
    _mx()
    from precision_audit.rope import stack, stored_inv_freq

    pos = np.array([0, 1, 7, 4095, 65537, 393215, 1048575])
    inv = fallback_inv_freq(D, 10000.0)
    kc, ks = mlx_rope_pairs(pos, D, 10000.0, scale=1 / factor, dtype="float32")
    c, s = model.rope_pairs(pos, inv, scale=1 / factor)
    if EXACT_ARCH:
        assert np.array_equal(kc, c) and np.array_equal(ks, s)
    else:
        assert np.abs(kc - c).max() <= 2.0**-23 and np.abs(ks - s).max() <= 2.0**-23
    sched = RopeSchedule(head_dim=D, base=10000.0, scaling="linear", factor=factor)
    maker = stored_inv_freq(stack("mlx-cpu", "float32", sched), sched)
    got = np.empty((pos.size, D // 2))
    maker.angles_into(pos.astype(np.float64), got)
    # the package's exp-log inverse frequencies equal the kernel's (tests/test_stacks.py), so the angles do too
    assert np.array_equal(got, model.angles(pos, inv, 1 / factor).astype(np.float64))


@pytest.mark.parametrize("traditional", [False, True])
def test_kernel_layouts_and_scale(traditional: bool) -> None:
    """Both pair layouts, a position scale and a vector of offsets give the same (cos, sin) as the model."""
    _mx()
    pos = np.array([0, 1, 7, 4095, 65537, 393215])
    kc, ks = mlx_rope_pairs(pos, 64, 10000.0, scale=0.25, traditional=traditional, dtype="float32")
    c, s = model.rope_pairs(pos, fallback_inv_freq(64, 10000.0), scale=0.25)
    if EXACT_ARCH:
        assert np.array_equal(kc, c) and np.array_equal(ks, s)
    else:  # angles are the same floats; the polynomials may be contracted differently: 2**-23 absolute
        assert np.abs(kc - c).max() <= 2.0**-23 and np.abs(ks - s).max() <= 2.0**-23


def test_mx_fast_rope_rotation_on_cpu_is_elementwise_in_the_dtype() -> None:
    """On a CPU stream the fallback casts cos/sin to the dtype, then multiplies and adds in the dtype.

    For q = (a, b) in float16: out1 = f16(f16(a * c16) - f16(b * s16)); a fused kernel (Metal, CUDA)
    gives f16(a * c32 - b * s32) instead.  At position 2 with this q the two differ (-0.782 vs -0.7827).
    """
    mx = _mx()
    a, b, pos = np.float16(0.9053), np.float16(0.4463), 2
    c, s = model.rope_pairs([pos], fallback_inv_freq(2, 10000.0))
    c32, s32 = np.float32(c[0, 0]), np.float32(s[0, 0])
    c16, s16 = np.float16(c32), np.float16(s32)
    x = mx.array(np.array([a, b], dtype=np.float16).reshape(1, 1, 1, 2))
    with mx.stream(mx.cpu):
        y = np.array(mx.fast.rope(x, 2, traditional=False, base=10000.0, scale=1.0, offset=pos)).ravel()
    elementwise = np.float16(np.float16(a * c16) - np.float16(b * s16))
    fused = np.float16(np.float32(a) * c32 - np.float32(b) * s32)
    assert elementwise != fused
    assert y[0] == elementwise
