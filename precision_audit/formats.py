"""The one registry of number formats, and correctly rounded casts into them.

Every auditor names its formats through :func:`get_format`; nothing else in the
package hard-codes a dtype.  Rounding is round-to-nearest-even, as hardware
does, computed on numpy float64 arrays in one rounding (checked bit for bit
against ml_dtypes' casts in the tests); ml_dtypes supplies the format types.
TF32, the input format of a float32 GEMM on tensor cores, has no storage type:
``tf32`` (to nearest even, as cuBLAS converts) and ``tf32-rz`` (truncated, as
Triton's ``tl.dot`` converts) round on float32 bit patterns, checked bit for bit
against what an H200 returned.

>>> get_format("bf16").name
'bfloat16'
>>> get_format("bfloat16").max_exact_integer
256
>>> round_to([255.0, 257.0, 259.0], "bfloat16").tolist()
[255.0, 256.0, 260.0]
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .checks import ArgumentTypeError, check_flag, check_int, check_number, describe

__all__ = [
    "FORMATS",
    "Format",
    "as_float64",
    "bfloat16_from_float32",
    "fits_in",
    "format_names",
    "get_format",
    "round_into",
    "round_to",
    "spacing",
]

Overflow = Literal["inf", "nan", "saturate"]
_OVERFLOWS: tuple[str, ...] = ("inf", "nan", "saturate")
Rounding = Literal["nearest-even", "toward-zero"]
_ROUNDINGS: tuple[str, ...] = ("nearest-even", "toward-zero")


@dataclass(frozen=True)
class Format:
    """Facts about one binary floating-point format.

    ``significand_bits`` counts the implicit leading bit (bfloat16: 8), so
    every integer of magnitude up to ``2**significand_bits`` is exact unless
    ``max_finite`` is smaller.  ``min_exponent`` is the exponent of the
    smallest normal number.  ``overflow`` says what a value beyond the range
    becomes on a cast: ``"inf"``, ``"nan"`` (formats without an infinity) or
    ``"saturate"`` (formats without inf or nan clamp to ``max_finite``).
    ``rounding`` is how a value gets into the format: ``"nearest-even"``
    (every cast hardware does into a storage format) or ``"toward-zero"``
    (truncation: Triton's ``tl.dot`` converting float32 inputs to TF32);
    a finite value never truncates beyond ``max_finite``, inf stays inf.

    ``numpy_type`` is the type a value of the format is held in: the format
    itself (ml_dtypes), or float32 for TF32, which has no storage type of
    its own (a tensor core's input, read from float32 registers).
    """

    name: str
    numpy_type: Any
    torch_name: str | None
    significand_bits: int
    min_exponent: int
    max_finite: float
    overflow: Overflow
    rounding: Rounding = "nearest-even"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ArgumentTypeError(f"name {describe(self.name)} must be a non-empty string")
        if self.torch_name is not None and not isinstance(self.torch_name, str):
            raise ArgumentTypeError(f"torch_name {describe(self.torch_name)} must be a string or None")
        check_int(self.significand_bits, "significand_bits", minimum=1, maximum=53)
        check_int(self.min_exponent, "min_exponent", minimum=-1022, maximum=0)
        if check_number(self.max_finite, "max_finite", positive=True) < 1:
            raise ValueError(f"max_finite {self.max_finite!r} must be at least 1")
        if not isinstance(self.overflow, str) or self.overflow not in _OVERFLOWS:
            raise ValueError(f"overflow {describe(self.overflow)} must be one of {', '.join(_OVERFLOWS)}")
        if not isinstance(self.rounding, str) or self.rounding not in _ROUNDINGS:
            raise ValueError(f"rounding {describe(self.rounding)} must be one of {', '.join(_ROUNDINGS)}")

    @property
    def max_exact_integer(self) -> int:
        """Largest N such that every integer 0..N is exactly representable.

        >>> get_format("float16").max_exact_integer
        2048
        >>> get_format("float6_e2m3fn").max_exact_integer
        7
        """
        return min(2**self.significand_bits, math.floor(self.max_finite))

    @property
    def overflow_integer(self) -> int:
        """Smallest positive integer whose cast is not ``max_finite`` or below.

        It is the first integer that rounds (to nearest, ties to even, with an
        unbounded exponent) above ``max_finite``; it becomes inf, nan or
        ``max_finite`` according to ``overflow``.

        >>> get_format("float16").overflow_integer
        65520
        >>> get_format("float8_e4m3fn").overflow_integer
        465

        Truncation never takes a finite value above ``max_finite``: for a
        ``"toward-zero"`` format no integer overflows, and the answer is
        ``2**1024``, the first integer beyond float64's range.

        >>> get_format("tf32-rz").overflow_integer == 2**1024
        True
        """
        if self.rounding == "toward-zero":
            return 2**1024
        mant, exp = _split(self.max_finite, self.significand_bits)
        # max_finite = mant * 2**exp, the next step up (mant + 1) * 2**exp; the
        # midpoint (2*mant + 1) * 2**(exp-1) is a tie, which goes up iff mant is odd.
        if exp >= 1:
            mid = (2 * mant + 1) << (exp - 1)
            return mid if mant % 2 else mid + 1
        return ((2 * mant + 1) >> (1 - exp)) + 1  # midpoint is not an integer

    @property
    def torch_dtype(self) -> Any:
        """The torch dtype, or ``None`` if torch has no such scalar type."""
        if self.torch_name is None:
            return None
        import torch

        return getattr(torch, self.torch_name)

    def __str__(self) -> str:
        return self.name


def _split(x: float, p: int) -> tuple[int, int]:
    """Write a positive representable ``x`` as ``mant * 2**exp`` with a p-bit mant."""
    m, e = math.frexp(x)  # x = m * 2**e, 0.5 <= m < 1
    mant = int(m * 2**p)
    return mant, e - p


_h = float.fromhex
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("float64", np.float64, "float64", 53, -1022, _h("0x1.fffffffffffffp1023"), "inf"),
        Format("float32", np.float32, "float32", 24, -126, _h("0x1.fffffep127"), "inf"),
        # float16: integers exact to 2048; 65520 is the first value that overflows.
        Format("float16", np.float16, "float16", 11, -14, _h("0x1.ffcp15"), "inf"),
        # bfloat16: float32's range, 8 significant bits: integers exact to 256.
        Format("bfloat16", ml_dtypes.bfloat16, "bfloat16", 8, -126, _h("0x1.fep127"), "inf"),
        Format("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "float8_e4m3fn", 4, -6, _h("0x1.cp8"), "nan"),
        Format("float8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz, "float8_e4m3fnuz", 4, -7, _h("0x1.ep7"), "nan"),
        Format("float8_e5m2", ml_dtypes.float8_e5m2, "float8_e5m2", 3, -14, _h("0x1.cp15"), "inf"),
        Format("float8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz, "float8_e5m2fnuz", 3, -15, _h("0x1.cp15"), "nan"),
        # OCP microscaling element formats: no inf, no nan, casts saturate.
        Format("float6_e2m3fn", ml_dtypes.float6_e2m3fn, None, 4, 0, _h("0x1.ep2"), "saturate"),
        Format("float6_e3m2fn", ml_dtypes.float6_e3m2fn, None, 3, -2, _h("0x1.cp4"), "saturate"),
        Format("float4_e2m1fn", ml_dtypes.float4_e2m1fn, None, 2, 0, _h("0x1.8p2"), "saturate"),
        # TF32 (NVIDIA TensorFloat-32): float32's exponent, 10 stored mantissa bits: integers exact to 2048.
        # Not a storage format: what a tensor core reads of a float32 GEMM input (float32 values in float32
        # registers).  cuBLAS converts to nearest, ties to even; Triton's tl.dot truncates (tf32-rz).
        Format("tf32", np.float32, None, 11, -126, _h("0x1.ffcp127"), "inf"),
        Format("tf32-rz", np.float32, None, 11, -126, _h("0x1.ffcp127"), "inf", "toward-zero"),
    )
}

ALIASES: dict[str, str] = {
    "fp64": "float64",
    "double": "float64",
    "f64": "float64",
    "fp32": "float32",
    "float": "float32",
    "single": "float32",
    "f32": "float32",
    "fp16": "float16",
    "half": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "e4m3": "float8_e4m3fn",
    "e4m3fn": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "e4m3fnuz": "float8_e4m3fnuz",
    "e5m2": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2",
    "e5m2fnuz": "float8_e5m2fnuz",
    "fp6_e2m3": "float6_e2m3fn",
    "fp6_e3m2": "float6_e3m2fn",
    "fp4": "float4_e2m1fn",
    "e2m1": "float4_e2m1fn",
    "tensorfloat32": "tf32",
    "tf32_rz": "tf32-rz",
}


def format_names(*, with_aliases: bool = False) -> list[str]:
    """Canonical format names (and, if asked, the aliases), in registry order.

    >>> format_names()[:4]
    ['float64', 'float32', 'float16', 'bfloat16']
    """
    names = list(FORMATS)
    return names + sorted(ALIASES) if check_flag(with_aliases, "with_aliases") else names


def get_format(name: str | Format) -> Format:
    """Look up a format by canonical name, alias (``bf16``, ``half``, ``e4m3``
    ...) or torch spelling (``torch.bfloat16``); case-insensitive.

    >>> get_format("torch.float16").name
    'float16'
    >>> get_format("fp7")
    Traceback (most recent call last):
    ...
    ValueError: unknown dtype 'fp7'; valid names: float64, float32, float16, bfloat16, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn, tf32, tf32-rz (aliases: bf16, double, e2m1, e4m3, e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, f16, f32, f64, float, fp16, fp32, fp4, fp64, fp6_e2m3, fp6_e3m2, fp8_e4m3, fp8_e5m2, half, single, tensorfloat32, tf32_rz)
    """
    if isinstance(name, Format):
        return name
    key = str(name).strip().lower().removeprefix("torch.")
    key = ALIASES.get(key, key)
    try:
        return FORMATS[key]
    except KeyError:
        raise ValueError(
            f"unknown dtype {name!r}; valid names: {', '.join(FORMATS)}"
            f" (aliases: {', '.join(sorted(ALIASES))})"
        ) from None


# Round to nearest even into a narrow format, on float64, with one addition:
# for |x| in the binade [2**e, 2**(e+1)) the format's spacing is u = 2**(e-p+1)
# (e clamped below at the smallest normal exponent, which gives the subnormal
# spacing), and c = 2**52 * u has float64 spacing exactly u on [c, 2c).  So
# x + c (sign of c = sign of x) is x rounded to a multiple of u, ties to an even
# multiple, by the float64 addition itself (IEEE round to nearest even), and
# (x + c) - c is exact.  That is the correctly rounded value of x with an
# unbounded exponent; values beyond max_finite then overflow as the format says.
# One rounding from float64: no double rounding, no round-to-odd step needed.
# The same works on float32 arrays holding float32 values (c = 2**23 * u, int32
# bits) for every format whose c stays finite in float32 (all but bfloat16,
# whose range is float32's; bfloat16 from float32 is a carry on the bits,
# :func:`_bfloat16_from_float32`).


@dataclass(frozen=True)
class _RneParams:
    exp_bits: Any  # mask of the exponent field
    lo: Any  # exponent bits of the smallest normal binade
    hi: Any  # exponent bits of the first binade above max_finite
    shift: Any  # exponent bits from 2**e to 2**(e + mantissa bits + 1 - p)
    signed_zero: bool  # False for the fnuz formats: -0 is their nan encoding


# (int type, exponent mask, exponent bias, stored mantissa bits) per working dtype
_WORK: dict[Any, tuple[Any, int, int, int]] = {
    np.dtype(np.float64): (np.int64, 0x7FF0000000000000, 1023, 52),
    np.dtype(np.float32): (np.int32, 0x7F800000, 127, 23),
}


def _rne_params(f: Format, dtype: Any = np.float64) -> _RneParams:
    key = (f.name, np.dtype(dtype))
    params = _RNE_PARAMS.get(key)
    if params is None:
        it, mask, bias, mant = _WORK[np.dtype(dtype)]
        emax = math.frexp(f.max_finite)[1] - 1  # binade of max_finite
        if emax + 1 + mant + 1 - f.significand_bits >= bias + 1:
            raise ValueError(f"{f.name} cannot be rounded in {np.dtype(dtype).name}")
        neg_zero = np.array([-0.0], dtype=np.float32).astype(f.numpy_type).astype(np.float64)
        params = _RneParams(
            exp_bits=it(mask),
            lo=it((f.min_exponent + bias) << mant),
            hi=it((emax + 1 + bias) << mant),
            shift=it((mant + 1 - f.significand_bits) << mant),
            signed_zero=bool(np.signbit(neg_zero[0])),
        )
        _RNE_PARAMS[key] = params
    return params


_RNE_PARAMS: dict[tuple[str, Any], _RneParams] = {}


def _bfloat16_from_float32(x: npt.NDArray[np.float32], out: npt.NDArray[Any], tmp: npt.NDArray[np.float32]) -> None:
    """``out = round_to(x, "bfloat16")`` for float32 ``x`` without nan (the caller checks).

    Adding 0x7FFF plus the lowest kept bit to the float32 bits and clearing the
    low 16 bits rounds to nearest even, subnormals and overflow to inf included
    (the carry runs into the exponent); a nan with a large payload could carry
    into the sign bit, hence the precondition.
    """
    u, v = x.view(np.uint32), tmp.view(np.uint32)
    np.right_shift(u, np.uint32(16), out=v)
    np.bitwise_and(v, np.uint32(1), out=v)
    np.add(v, np.uint32(0x7FFF), out=v)
    np.add(v, u, out=v)
    np.bitwise_and(v, np.uint32(0xFFFF0000), out=v)
    np.copyto(out, tmp)


def _bfloat16_via_float32(
    x: npt.NDArray[np.float64], out: npt.NDArray[np.float64],
    scratch: tuple[npt.NDArray[Any], npt.NDArray[Any]] | None,
) -> bool:
    """``out = round_to(x, "bfloat16")`` through a float32 cast, if ``x`` has no nan (else False).

    Rounding twice (float64 -> float32 -> bfloat16) differs from rounding once
    only where the float32 value is exactly a bfloat16 midpoint (low 16 bits
    0x8000: every midpoint is a float32 number and the roundings are monotone);
    those few elements are rounded again from ``x`` by the one-rounding path.
    Overflow, subnormals and signed zeros come out as one rounding gives them.
    """
    top, bottom = np.max(x), np.min(x)
    if not (top == top and bottom == bottom):  # nan: the carry trick needs nan-free input
        return False
    n = x.size
    a, b = scratch if scratch is not None and all(v.flags.c_contiguous for v in scratch) else (
        np.empty(x.shape), np.empty(x.shape))
    f32 = a.reshape(-1).view(np.float32)[:n].reshape(x.shape)
    tmp = a.reshape(-1).view(np.float32)[n : 2 * n].reshape(x.shape)
    with np.errstate(over="ignore"):
        np.copyto(f32, x, casting="same_kind")
    low = b.reshape(-1).view(np.uint32)[:n].reshape(x.shape)
    np.bitwise_and(f32.view(np.uint32), np.uint32(0xFFFF), out=low)
    is_mid = b.reshape(-1).view(np.bool_)[4 * n : 5 * n].reshape(x.shape)
    np.equal(low, np.uint32(0x8000), out=is_mid)
    mid = np.flatnonzero(is_mid) if is_mid.any() else None
    xs = None if mid is None else x.flat[mid]  # before out (which may be x) is written
    _bfloat16_from_float32(f32, out, tmp)
    if xs is not None:
        out.flat[mid] = _round_rne(xs, FORMATS["bfloat16"], np.empty_like(xs))
    return True


def _round_into(
    x: npt.NDArray[Any],
    f: Format,
    out: npt.NDArray[Any],
    scratch: tuple[npt.NDArray[Any], npt.NDArray[Any]] | None = None,
) -> npt.NDArray[Any]:
    """Write ``round_to(x, f)`` into ``out`` (which may be ``x``).

    ``x`` is float64, or float32 for formats narrower than float32 other than
    bfloat16 (then ``out`` and ``scratch`` are float32 too: the same rounding
    on values that float32 holds exactly).  ``scratch``: two C-contiguous
    arrays of x's shape and dtype, so that nothing is allocated (buffers
    reused across chunks).
    """
    if f.name == "float64":
        if out is not x:
            np.copyto(out, x)
        return out
    if f.name == "float32":
        if scratch is None:
            t32 = np.empty(x.shape, np.float32)
        else:  # the first half of a C-contiguous float64 scratch array
            t32 = scratch[0].reshape(-1).view(np.float32)[: x.size].reshape(x.shape)
        with np.errstate(over="ignore", invalid="ignore"):
            np.copyto(t32, x, casting="same_kind")
        np.copyto(out, t32)
        return out
    if f.name in _TF32_MASKS:
        return _round_tf32(x, f, out, scratch)
    if f.name == "bfloat16" and x.dtype == np.float64 and x.size and _bfloat16_via_float32(x, out, scratch):
        return out
    return _round_rne(x, f, out, scratch)


# TF32 from float32 is an operation on the bits: the low 13 of float32's 23 stored mantissa bits go.  Truncation
# (tl.dot) clears them; round to nearest even (cuBLAS) first adds 0xFFF plus the lowest kept bit, whose carry runs
# into the exponent (to inf past 0x1.ffep127, the tie above max_finite; a subnormal up into the normals), as the
# bfloat16 carry does.  A nan keeps its bits (the carry could reach the sign bit).  From float64 a value that is
# not a float32 number is rounded once from its exact value: to nearest by the one addition above, toward zero by
# subtracting the remainder modulo the spacing (exact: np.fmod is exact and so is the difference).
_TF32_LOW = 13
_TF32_MASKS: dict[str, int] = {"tf32": 0xFFF, "tf32-rz": 0}  # added before the low bits are cleared


def _round_tf32(
    x: npt.NDArray[Any],
    f: Format,
    out: npt.NDArray[Any],
    scratch: tuple[npt.NDArray[Any], npt.NDArray[Any]] | None = None,
) -> npt.NDArray[Any]:
    """:func:`_round_into` for ``tf32`` / ``tf32-rz``: bits of float32 values, or one rounding of float64 ones."""
    if x.dtype == np.float32:
        u = x.view(np.uint32)
        v = (np.empty(x.shape, np.uint32) if scratch is None
             else scratch[0].reshape(-1).view(np.uint32)[: x.size].reshape(x.shape))
        if f.rounding == "toward-zero":
            np.copyto(v, u)
        else:
            np.right_shift(u, np.uint32(_TF32_LOW), out=v)
            np.bitwise_and(v, np.uint32(1), out=v)
            np.add(v, np.uint32(_TF32_MASKS[f.name]), out=v)
            np.add(v, u, out=v)
        np.bitwise_and(v, np.uint32(0xFFFFFFFF ^ ((1 << _TF32_LOW) - 1)), out=v)
        nan = np.isnan(x)
        if nan.any():
            np.copyto(v, u, where=nan)
        out[...] = v.view(np.float32)
        return out
    if f.rounding == "nearest-even":
        return _round_rne(x, f, out, scratch)
    return _truncate(x, f, out, scratch)


def _truncate(
    x: npt.NDArray[np.float64],
    f: Format,
    out: npt.NDArray[np.float64],
    scratch: tuple[npt.NDArray[Any], npt.NDArray[Any]] | None = None,
) -> npt.NDArray[np.float64]:
    """``x`` (float64) rounded toward zero into ``f``: a finite value beyond ``max_finite`` gives ``max_finite``,
    inf stays inf, nan stays nan, zero keeps its sign."""
    q = _rne_params(f, x.dtype)
    u, t = (np.empty_like(x), np.empty_like(x)) if scratch is None else scratch
    ui = u.view(q.exp_bits.dtype)
    np.bitwise_and(x.view(q.exp_bits.dtype), q.exp_bits, out=ui)
    np.clip(ui, q.lo, q.hi, out=ui)  # the spacing of x's binade (the smallest normal's below it)
    np.subtract(ui, np.int64((f.significand_bits - 1) << 52), out=ui)
    with np.errstate(invalid="ignore"):
        np.fmod(x, u, out=t)  # nan for inf and nan
        np.subtract(x, t, out=t)
    np.copysign(t, x, out=t)
    big = ~(np.abs(t) <= f.max_finite)  # beyond the range, inf and nan
    np.copyto(out, t)
    if big.any():
        np.copysign(f.max_finite, x, out=t)
        fin = np.isfinite(x)
        np.copyto(out, t, where=big & fin)
        np.copyto(out, x, where=~fin)
    return out


def _round_rne(
    x: npt.NDArray[Any],
    f: Format,
    out: npt.NDArray[Any],
    scratch: tuple[npt.NDArray[Any], npt.NDArray[Any]] | None = None,
) -> npt.NDArray[Any]:
    """:func:`_round_into` for a format narrower than float32, by one addition (see above)."""
    q = _rne_params(f, x.dtype)
    c, t = (np.empty_like(x), np.empty_like(x)) if scratch is None else scratch
    ci = c.view(q.exp_bits.dtype)
    np.bitwise_and(x.view(q.exp_bits.dtype), q.exp_bits, out=ci)
    np.clip(ci, q.lo, q.hi, out=ci)  # the upper clamp keeps c finite for inf and nan
    np.add(ci, q.shift, out=ci)
    np.copysign(c, x, out=c)
    with np.errstate(invalid="ignore", over="ignore"):
        np.add(x, c, out=t)
        np.subtract(t, c, out=t)
    np.copysign(t, x, out=out)  # a result of zero keeps x's sign, as a cast does
    if not q.signed_zero:
        np.add(out, 0.0, out=out)  # -0 -> +0
    if out.size:
        top, bottom = np.max(out), np.min(out)  # nan if any nan: then check element-wise
        if not (top <= f.max_finite and bottom >= -f.max_finite):
            np.abs(out, out=t)
            big = t > f.max_finite
            _OVERFLOW[f.overflow](out, big, f.max_finite, t)  # nan is never big: it stays nan
    return out


def _overflow_inf(out: npt.NDArray[np.float64], big: npt.NDArray[np.bool_], m: float, t: npt.NDArray[np.float64]) -> None:
    np.copysign(np.inf, out, out=t)
    np.copyto(out, t, where=big)


def _overflow_nan(out: npt.NDArray[np.float64], big: npt.NDArray[np.bool_], m: float, t: npt.NDArray[np.float64]) -> None:
    np.copyto(out, np.nan, where=big)


def _overflow_saturate(out: npt.NDArray[np.float64], big: npt.NDArray[np.bool_], m: float, t: npt.NDArray[np.float64]) -> None:
    np.copysign(m, out, out=t)
    np.copyto(out, t, where=big)


_OVERFLOW: dict[str, Any] = {"inf": _overflow_inf, "nan": _overflow_nan, "saturate": _overflow_saturate}


# --------------------------------------------------------------------------- inputs
# Integers and other rationals are converted to float64 exactly rounded: to nearest even when float64 is
# the target, else to odd (truncate and set the last bit if anything was dropped).  A round-to-odd float64
# (53 bits) rounded again to nearest even with p <= 51 bits gives the value rounded once (Boldo and
# Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd", IEEE
# Trans. Computers 57(4), 2008), so 2**60 + 2**52 + 1 reaches bfloat16 as 2**60 + 2**53, not as the
# float64 midpoint 2**60 + 2**52 that ties down to 2**60.  Truncation never leaves a binade, so the
# round-to-odd value also gives ``spacing`` the binade of the exact value.

_EXACT_INT = 2**53  # integers up to here are float64 values
_RATIONALS = (int, np.integer, numbers.Rational)
_FLOATS = (float, np.floating)


def _rational_to_float(num: int, den: int, odd: bool) -> float:
    """``num / den`` (den > 0) as float64, rounded to nearest even or (``odd``) to odd; inf beyond the range."""
    if den == 1 and -_EXACT_INT <= num <= _EXACT_INT:
        return float(num)
    m = abs(num)
    if not odd:
        try:
            v = m / den  # CPython's int true division is correctly rounded (to nearest even)
        except OverflowError:
            v = math.inf
        return -v if num < 0 else v
    k = max(m.bit_length() - den.bit_length() - 54, -1074)  # the quotient at 2**k gets 53..55 bits
    q, rem = divmod(m, den << k) if k >= 0 else divmod(m << -k, den)
    extra = max(q.bit_length() - 53, 0)
    sticky = rem != 0 or q & ((1 << extra) - 1) != 0
    q, k = q >> extra, k + extra
    q |= sticky  # round to odd
    v = math.inf if k + q.bit_length() > 1024 else math.ldexp(q, k)
    return -v if num < 0 else v


def _objects_to_float64(a: npt.NDArray[Any], odd: bool, name: str) -> npt.NDArray[np.float64]:
    """An object array of numbers (Python ints of any size, fractions, floats) as float64, element by element."""
    out = np.empty(a.shape, dtype=np.float64)
    flat = out.reshape(-1)
    for i, v in enumerate(a.reshape(-1)):
        if isinstance(v, (bool, np.bool_)) or isinstance(v, _FLOATS):
            flat[i] = float(v)
        elif isinstance(v, _RATIONALS):  # Python and numpy integers are numbers.Rational too
            flat[i] = _rational_to_float(int(v.numerator), int(v.denominator), odd)
        else:
            index = tuple(int(j) for j in np.unravel_index(i, a.shape)) if a.ndim > 1 else i
            where = f" at index {index}" if a.ndim else ""
            raise ArgumentTypeError(f"{name} holds {v!r}{where}, which is not a real number")
    return out


def _ints_to_float64(a: npt.NDArray[Any], odd: bool) -> npt.NDArray[np.float64]:
    """An integer array as float64, each element rounded once (to nearest even, or to odd)."""
    if a.dtype.itemsize <= 4 or not a.size or (a.min() >= -_EXACT_INT and a.max() <= _EXACT_INT):
        return a.astype(np.float64)
    # a = hi + lo with both parts exact in float64 and |hi| >= lo >= 0 (or hi = 0): their float64 sum is
    # the integer rounded to nearest even, and (Fast2Sum) e = lo - (s - hi) is the exact remainder
    hi = np.right_shift(a, a.dtype.type(32)).astype(np.float64) * 2.0**32
    lo = np.bitwise_and(a, a.dtype.type(0xFFFFFFFF)).astype(np.float64)
    s = hi + lo
    if odd:
        e = lo - (s - hi)
        fix = (e != 0) & (s.view(np.int64) & 1 == 0)  # inexact and even: the other neighbour is odd
        s = np.where(fix, np.nextafter(s, np.copysign(np.inf, e)), s)
    return np.asarray(s, dtype=np.float64)


def _is_ml_number(dtype: np.dtype[Any]) -> bool:
    """One of ml_dtypes' number formats (bfloat16, float8/6/4, int4, ...); not any other void type."""
    for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
        try:
            info(dtype)
        except (TypeError, ValueError, KeyError):
            continue
        return True
    return False


def _as_float64(x: npt.ArrayLike, odd: bool, name: str = "x") -> npt.NDArray[np.float64]:
    """``x`` as a float64 array; integers and fractions rounded once, as :func:`_rational_to_float` says.

    Raises TypeError naming ``name`` for anything that is not an array of real numbers
    (strings, complex numbers, None, dates).
    """
    if isinstance(x, np.ndarray) and x.dtype == np.float64:
        return x
    if isinstance(x, (str, bytes)):
        raise ArgumentTypeError(f"{name} {describe(x)} is text, not a number or an array of numbers")
    try:
        a = np.asarray(x)
        if a.dtype.kind == "f" and isinstance(x, (list, tuple)):  # Python ints beyond 2**53 among floats
            o = np.asarray(x, dtype=object)
            if any(isinstance(v, int) and not -_EXACT_INT <= v <= _EXACT_INT for v in o.reshape(-1)):
                a = o
    except (ValueError, TypeError) as e:  # ragged lists, objects numpy cannot hold
        raise ArgumentTypeError(f"{name} {describe(x)} is not an array of numbers ({e})") from None
    kind = a.dtype.kind
    if kind in "iu":
        return _ints_to_float64(a, odd)
    if kind == "O":
        return _objects_to_float64(a, odd, name)
    if kind in "fb" or (kind == "V" and _is_ml_number(a.dtype)):  # ml_dtypes' formats
        return a.astype(np.float64)
    raise ArgumentTypeError(f"{name} {describe(x)} has dtype {a.dtype}, not real numbers")


def round_to(x: npt.ArrayLike, fmt: str | Format) -> npt.NDArray[np.float64]:
    """Cast ``x`` to ``fmt`` (round to nearest, ties to even) and back to float64.

    The result is the exact value the format stores, rounded once from the
    input (as ml_dtypes casts a float32 value; ml_dtypes' and torch's
    float64 -> bfloat16 casts go through float32 and can round twice above
    2**24).  Integers of any size (integer arrays, Python ints, object arrays
    of them) and fractions are rounded once from their exact value, not
    through float64.  Overflow gives inf, nan or ``max_finite`` as the format
    does (integers beyond float64's range too); a nan input stays nan in
    every format.  Anything else (None, text, complex) raises TypeError.

    >>> round_to([2047.0, 2049.0, 65519.0, 65520.0], "float16").tolist()
    [2047.0, 2048.0, 65504.0, inf]
    >>> round_to([464.0, 465.0], "e4m3").tolist()
    [448.0, nan]
    >>> round_to([2**24 + 2**16 + 1.0], "bfloat16").tolist() == [2**24 + 2**17]
    True
    >>> round_to(2**60 + 2**52 + 1, "bf16") == 2**60 + 2**53  # float(2**60 + 2**52 + 1) would tie down
    np.True_
    >>> round_to([2**1100, -2**1100], "fp16").tolist(), round_to(2**1100, "fp4").tolist()
    ([inf, -inf], 6.0)

    ``tf32-rz`` truncates toward zero instead (:attr:`Format.rounding`), as Triton's ``tl.dot`` converts:

    >>> round_to([2049, 2051, 4099], "tf32").tolist(), round_to([2049, 2051, 4099], "tf32-rz").tolist()
    ([2048.0, 2052.0, 4100.0], [2048.0, 2050.0, 4096.0])
    """
    f = get_format(fmt)
    a = _as_float64(x, odd=f.name != "float64")
    out = np.empty_like(a)
    return _round_into(a, f, out)


def spacing(x: npt.ArrayLike, fmt: str | Format) -> npt.NDArray[np.float64]:
    """Distance from ``|x|`` to the next larger number of ``fmt`` (one ulp).

    Uses the binade of ``|x|`` (with an unbounded exponent: beyond
    ``max_finite`` the spacing keeps growing); zero and subnormals share the
    smallest normal binade's spacing (the smallest subnormal).  Integers are
    placed in their exact binade; inf (and integers beyond float64's range)
    give inf, nan gives nan.

    >>> spacing([1.0, 256.0, 4096.0, 8191.0], "bfloat16").tolist()
    [0.0078125, 2.0, 32.0, 32.0]
    >>> spacing([0.0], "float16").tolist() == [2.0**-24]
    True
    >>> spacing([2**61 - 1, float("inf")], "float64").tolist()  # float(2**61 - 1) would be 2**61
    [256.0, inf]
    """
    f = get_format(fmt)
    a = np.abs(_as_float64(x, odd=True))
    _, e = np.frexp(a)  # a = m * 2**e with 0.5 <= m < 1, so the binade is 2**(e-1)
    e = np.where(a == 0, f.min_exponent, np.maximum(e - 1, f.min_exponent))
    out = np.ldexp(1.0, e - (f.significand_bits - 1))
    return np.where(np.isfinite(a), out, np.where(np.isnan(a), np.nan, np.inf))  # a quiet nan, even from a signaling one


def fits_in(a: Format, b: Format) -> bool:
    """Every value of format ``a`` is a value of format ``b``.

    >>> fits_in(get_format("bfloat16"), get_format("float32")), fits_in(get_format("float16"), get_format("bfloat16"))
    (True, False)
    """
    return (
        a.significand_bits <= b.significand_bits
        and a.max_finite <= b.max_finite
        and a.min_exponent - a.significand_bits >= b.min_exponent - b.significand_bits
    )


# The kernel layer the auditors build on, under public names (the functions keep their underscored names, which
# scripts/mutation.py's mutants are named after): rounding into a preallocated buffer, float32 -> bfloat16 by the
# bit carry, and the exact conversion of any input to float64.
round_into = _round_into
bfloat16_from_float32 = _bfloat16_from_float32
as_float64 = _as_float64
