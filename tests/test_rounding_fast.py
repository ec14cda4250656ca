"""round_to's bit-operation fast path against ml_dtypes' own casts.

References, computed independently of ``round_to``:

* a float32 input is exactly representable, so ml_dtypes' cast
  ``float32 -> format`` (round to nearest even, its own overflow rules) is the
  correctly rounded value; for float16 over all 2**32 patterns, torch's
  ``float32 -> float16`` conversion (IEEE round to nearest even, the same bits
  on every CPU; numpy's own cast takes a slow scalar path outside float16's
  range);
* a float64 input is rounded to odd in float32 (Boldo & Melquiond 2008: with
  >= 2 extra bits, round-to-odd then round-to-nearest-even is the correct
  single rounding), then cast by ml_dtypes (the engine's previous code path).

Equality is to the bit: nan matches nan, and zeros must agree in sign.
"""

from __future__ import annotations

import numpy as np
import pytest

from precision_audit.formats import FORMATS, Format, _bfloat16_from_float32, _round_into, round_to

# the storage formats ml_dtypes casts into (TF32 has no storage type: tests/test_tf32.py referees it)
NARROW = [f for f in FORMATS.values() if np.dtype(f.numpy_type).itemsize < 4]


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
    """Equal float64 bit patterns (so zeros agree in sign), except that any nan matches any nan."""
    a, b = np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    diff = a.view(np.uint64) != b.view(np.uint64)
    return bool(np.all(np.isnan(a[diff]) & np.isnan(b[diff])))


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


def _via_torch_f16(x32: np.ndarray, f: Format) -> np.ndarray:
    """torch's float32 -> float16 conversion (IEEE round to nearest even, overflow to inf); ``f`` is float16."""
    import torch

    assert f.name == "float16"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small arrays; pytest-xdist runs a test per core
    try:
        return torch.from_numpy(x32).to(torch.float16).to(torch.float64).numpy()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize("quarter", range(4))
@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_every_float32_pattern(name: str, quarter: int) -> None:
    """Exhaustive: all 2**32 float32 inputs, a quarter of the patterns per test (workers share them), in
    chunks of 2**16 that stay in the CPU caches.  bfloat16 against ml_dtypes, float16 against torch."""
    f = FORMATS[name]
    ref = _via_torch_f16 if name == "float16" else _via_ml_dtypes_f32
    step, size = 2**16, 2**30
    for start in range(quarter * size, (quarter + 1) * size, step):
        x32 = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(invalid="ignore"):
            x = x32.astype(np.float64)
            assert _same_bits(round_to(x, f), ref(x32, f)), hex(start)


def test_torch_float16_reference_matches_numpy_cast() -> None:
    """The exhaustive test's float16 reference agrees with numpy's cast on every float16 boundary input and
    the float32 patterns around float16's range ends (subnormal, overflow, inf, nan)."""
    f = FORMATS["float16"]
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = _boundary_inputs(f).astype(np.float32)
    edges = [0x33000000, 0x387FC000, 0x38800000, 0x477FE000, 0x47800000, 0x7F800000, 0x7FC00000]
    near = np.concatenate([np.arange(e - 2**12, e + 2**12, dtype=np.uint32) for e in edges])
    x32 = np.concatenate([x32, near.view(np.float32), (near | 0x80000000).view(np.float32)])
    assert _same_bits(_via_torch_f16(x32, f), _via_ml_dtypes_f32(x32, f))


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
