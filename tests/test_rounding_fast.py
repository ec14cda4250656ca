"""round_to's bit-operation fast path against ml_dtypes' own casts.

References, computed independently of ``round_to``:

* a float32 input is exactly representable, so ml_dtypes' cast
  ``float32 -> format`` (round to nearest even, its own overflow rules) is the
  correctly rounded value;
* a float64 input is rounded to odd in float32 (Boldo & Melquiond 2008: with
  >= 2 extra bits, round-to-odd then round-to-nearest-even is the correct
  single rounding), then cast by ml_dtypes (the engine's previous code path).

Equality is to the bit: nan matches nan, and zeros must agree in sign.
"""

from __future__ import annotations

import numpy as np
import pytest

from precision_audit.formats import FORMATS, Format, _bfloat16_from_float32, _round_into, round_to

NARROW = [f for f in FORMATS.values() if f.name not in ("float64", "float32")]


def _via_ml_dtypes_f32(x32: np.ndarray, f: Format) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        out = x32.astype(f.numpy_type).astype(np.float64)
    if f.overflow == "saturate":  # round_to keeps nan (these formats have no nan)
        out[np.isnan(x32)] = np.nan
    return out


def _via_round_to_odd(x: np.ndarray, f: Format) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32)
        inexact = (y.astype(np.float64) != x) & np.isfinite(y) & np.isfinite(x)
    bits = y.view(np.uint32)
    fix = inexact & ((bits & 1) == 0)  # round to odd: step to the odd neighbour toward x
    step = np.where(np.abs(x) > np.abs(y), np.uint32(1), np.uint32(0xFFFFFFFF))
    odd = np.where(fix, bits + step, bits).view(np.float32)
    return _via_ml_dtypes_f32(odd, f)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    nan = np.isnan(a)
    return bool(
        np.array_equal(nan, np.isnan(b))
        and np.array_equal(a[~nan], b[~nan])
        and np.array_equal(np.signbit(a[~nan]), np.signbit(b[~nan]))
    )


def _boundary_inputs(f: Format) -> np.ndarray:
    """Every value of the format, the midpoints between neighbours (ties) and
    their float32 and float64 neighbours, both signs, plus inf/nan/zeros and the
    midpoint above max_finite (the overflow tie)."""
    bits = 8 * np.dtype(f.numpy_type).itemsize
    raw = np.arange(2**bits, dtype=np.uint16 if bits == 16 else np.uint8)
    vals = raw.view(f.numpy_type).astype(np.float64)
    vals = np.unique(vals[np.isfinite(vals) & (vals >= 0)])
    step_above = float(vals[-1] - vals[-2]) if f.name != "float8_e4m3fn" else 32.0  # e4m3fn: next would be 480
    grid = np.concatenate([vals, [vals[-1] + step_above, 2 * vals[-1], 4 * vals[-1]]])
    mids = (grid[1:] + grid[:-1]) / 2  # exact in float64
    pts = np.concatenate([grid, mids])
    near = [pts]
    for direction in (np.inf, -np.inf):
        near.append(np.nextafter(pts, direction))
        near.append(np.nextafter(pts.astype(np.float32), np.float32(direction)).astype(np.float64))
    x = np.concatenate(near)
    x = np.concatenate([x, -x, [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 5e-324, -5e-324, 1e300, -1e300]])
    return x


@pytest.mark.parametrize("f", NARROW, ids=lambda f: f.name)
def test_boundaries_match_ml_dtypes(f: Format) -> None:
    with np.errstate(over="ignore", invalid="ignore"):  # inputs beyond float32's range
        x = _boundary_inputs(f)
        x32 = x.astype(np.float32)
        exact32 = x32.astype(np.float64) == x
        got = round_to(x, f)
        assert _same_bits(got[exact32], _via_ml_dtypes_f32(x32[exact32], f))
        assert _same_bits(got, _via_round_to_odd(x, f))


@pytest.mark.parametrize("f", NARROW, ids=lambda f: f.name)
def test_random_bits_match_ml_dtypes(f: Format) -> None:
    rng = np.random.default_rng(12)
    with np.errstate(invalid="ignore"):  # random patterns include signalling nans
        x32 = rng.integers(0, 2**32, 2**18, dtype=np.uint64).astype(np.uint32).view(np.float32)
        x64 = rng.integers(0, 2**64, 2**18, dtype=np.uint64).view(np.float64)
        scaled = rng.standard_normal(2**18) * np.exp2(rng.integers(-40, 40, 2**18))
        assert _same_bits(round_to(x32.astype(np.float64), f), _via_ml_dtypes_f32(x32, f))
        assert _same_bits(round_to(x64, f), _via_round_to_odd(x64, f))
        assert _same_bits(round_to(scaled, f), _via_round_to_odd(scaled, f))


def test_bfloat16_low_halves_every_high_half() -> None:
    """Every float32 pattern whose low 16 bits sit at or next to a rounding boundary."""
    high = np.arange(2**16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF], dtype=np.uint32)
    x32 = (high[:, None] | lows[None, :]).reshape(-1).view(np.float32)
    f = FORMATS["bfloat16"]
    with np.errstate(invalid="ignore"):  # signalling nans among the patterns
        assert _same_bits(round_to(x32.astype(np.float64), f), _via_ml_dtypes_f32(x32, f))


def test_round_into_reuses_buffers_in_place() -> None:
    """The engine's in-place form (out is x, scratch given) equals round_to."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 8)) * 3000
    for f in FORMATS.values():
        buf = x.copy()
        scratch = (np.empty_like(x), np.empty_like(x))
        _round_into(buf, f, buf, scratch)
        assert _same_bits(buf, round_to(x, f)), f.name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_every_float32_pattern(name: str) -> None:
    """Exhaustive: all 2**32 float32 inputs, in chunks."""
    f = FORMATS[name]
    step = 2**24
    for start in range(0, 2**32, step):
        x32 = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(invalid="ignore"):
            x = x32.astype(np.float64)
            assert _same_bits(round_to(x, f), _via_ml_dtypes_f32(x32, f)), hex(start)


@pytest.mark.parametrize("f", [f for f in NARROW if f.name != "bfloat16"], ids=lambda f: f.name)
def test_float32_working_precision_matches_ml_dtypes(f: Format) -> None:
    """The same rounding carried out on float32 arrays (the engine's cache step)."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = _boundary_inputs(f)
        x32 = x.astype(np.float32)
        x32 = x32[~np.isnan(x32) | np.isnan(x)]  # float32 values (nan inputs included)
    rng = np.random.default_rng(5)
    x32 = np.concatenate([x32, (rng.standard_normal(2**16) * np.exp2(rng.integers(-30, 20, 2**16))).astype(np.float32)])
    out = np.empty_like(x32)
    with np.errstate(invalid="ignore"):
        _round_into(x32, f, out, (np.empty_like(x32), np.empty_like(x32)))
        assert _same_bits(out.astype(np.float64), _via_ml_dtypes_f32(x32, f))


def test_bfloat16_bit_carry_matches_ml_dtypes() -> None:
    """Every float32 pattern near a bfloat16 rounding boundary, nan excluded (the precondition)."""
    high = np.arange(2**16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF], dtype=np.uint32)
    x32 = (high[:, None] | lows[None, :]).reshape(-1).view(np.float32)
    x32 = x32[~np.isnan(x32)]
    out = np.empty(x32.shape)
    _bfloat16_from_float32(x32, out, np.empty_like(x32))
    with np.errstate(over="ignore"):
        assert _same_bits(out, _via_ml_dtypes_f32(x32, FORMATS["bfloat16"]))
