"""Lookup tables for 16-bit (and narrower) formats: cos, sin and atan2 by bit pattern.

A 16-bit angle has at most 65536 values, and every later stage of a recipe is
a function of it; a 16-bit cache holds at most 2**32 (cos, sin) pairs, of
which only those near the circle occur.  Long passes look these values up
instead of computing cos, sin and atan2 per element; a looked-up value is the
computed one, to the bit (the tables are built by the same code).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

from ..formats import Format, get_format, spacing
from .engine import _round_is_identity, _Rows, _run_recipe, _Work
from .oracle import F64
from .recipes import Recipe

@dataclass(frozen=True)
class _AngleTable:
    """Stored cos, sin and their atan2 for every value of a recipe's 16-bit (or narrower) angle format.

    Such an angle has at most 65536 values, and every later stage is a
    function of it; the audit (:func:`.audit._recipe_stats`) looks the values up by the
    angle's bit pattern instead of computing cos, sin and atan2 per element.
    The table comes from :func:`_run_recipe` and ``np.arctan2`` on the
    format's values, so a looked-up value is the computed one, to the bit.
    """

    fmt: Format
    cos: F64
    sin: F64
    atan2: F64

    @staticmethod
    def build(recipe: Recipe, scale: float) -> "_AngleTable | None":
        fa, ft = get_format(recipe.angle), get_format(recipe.trig)
        width = np.dtype(fa.numpy_type).itemsize
        if width > 2 or not _round_is_identity(fa, ft):  # the argument is not the angle format's value
            return None
        codes = np.arange(2 ** (8 * width), dtype=np.uint16 if width == 2 else np.uint8)
        with np.errstate(invalid="ignore"):
            values = codes.view(fa.numpy_type).astype(np.float64)
            w = _Work(values.size, 1).rows(values.size)
            _, _, _, cc, ss = _run_recipe(recipe, values, np.ones(1), scale, w)
            return _AngleTable(fa, cc[:, 0].copy(), ss[:, 0].copy(), np.arctan2(ss[:, 0], cc[:, 0]))

    def lookup(self, angle: F64, w: _Rows) -> tuple[F64, F64, F64]:
        """Stored cos, sin and their atan2 of ``angle`` (values of ``fmt``, with bit patterns: see
        :func:`has_codes`) into ``w.cc``, ``w.ss``, ``w.rot``; scratch ``w.c``, ``w.s1``."""
        idx = codes_into(self.fmt, angle, w.c.view(np.intp).reshape(-1), w.s1).reshape(angle.shape)
        cc = np.take(self.cos, idx, out=w.cc, mode="clip")
        ss = np.take(self.sin, idx, out=w.ss, mode="clip")
        return cc, ss, np.take(self.atan2, idx, out=w.rot, mode="clip")


def codes_into(f: Format, x: F64, out: npt.NDArray[Any], scratch: F64) -> npt.NDArray[Any]:
    """The bit patterns of ``x`` (values of the 16-bit or narrower format ``f``) into the integer array
    ``out`` (flat, ``x.size`` long); ``scratch``: a C-contiguous float64 array of at least ``x.size``."""
    n, flat = x.size, x.reshape(-1)
    if f.name == "bfloat16":  # exact float32 copy, then its top 16 bits
        f32 = scratch.reshape(-1).view(np.float32)[:n]
        np.copyto(f32, flat, casting="same_kind")
        return np.right_shift(f32.view(np.uint32), np.uint32(16), out=out)
    narrow = scratch.reshape(-1).view(f.numpy_type)[:n]
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(narrow, flat, casting="unsafe")
    np.copyto(out, narrow.view(np.uint16 if narrow.itemsize == 2 else np.uint8))
    return out


@dataclass(frozen=True)
class _PairTable:
    """``np.arctan2(sin, cos)`` of stored (cos, sin) pairs of a 16-bit (or narrower) cache format.

    A pair is looked up by its bit patterns: the cos code and the sin's sign
    pick a band of |sin| codes (the ones that can lie near the circle of
    radius ``scale``, with a margin), and every table entry carries its pair's
    code.  A pair whose code differs from the entry it lands on (outside its
    band) is computed by ``np.arctan2``; a looked-up value is therefore always
    ``np.arctan2`` of that very pair, to the bit, whatever the band holds.
    """

    fmt: Format
    bits: int
    off: npt.NDArray[np.int64]  # per (cos code, sin sign): flat index of |sin| code 0
    key: npt.NDArray[np.uint32]  # the pair code of each flat entry
    atan2: F64

    @staticmethod
    def build(cache: str, scale: float) -> "_PairTable | None":
        return _pair_table(get_format(cache).name, float(scale))

    def lookup(self, cc: F64, ss: F64, out: F64, w: _Rows) -> F64:
        """``out = np.arctan2(ss, cc)``; scratch from ``w`` (``s1``, ``s2``, ``t``)."""
        if not has_codes(self.fmt, cc, ss):
            return np.arctan2(ss, cc, out=out)
        n, b = cc.size, self.bits
        u32 = w.s1.reshape(-1).view(np.uint32)
        pair, kc = u32[:n], u32[n : 2 * n]
        codes_into(self.fmt, cc, pair, w.s2)
        codes_into(self.fmt, ss, kc, w.s2)
        np.left_shift(pair, np.uint32(b), out=pair)
        np.bitwise_or(pair, kc, out=pair)  # the pair's code: cos code, then sin code
        idx = w.s2.reshape(-1).view(np.int64)[:n]
        np.right_shift(pair, np.uint32(b - 1), out=kc)  # cos code and sin sign
        np.take(self.off, kc, out=idx, mode="clip")
        np.bitwise_and(pair, np.uint32((1 << (b - 1)) - 1), out=kc)  # |sin| code
        np.add(idx, kc, out=idx)
        np.take(self.key, idx, out=kc, mode="clip")
        ok = w.t.reshape(-1).view(np.bool_)[:n]
        np.equal(kc, pair, out=ok)
        flat = out.reshape(-1)
        np.take(self.atan2, idx, out=flat, mode="clip")
        if not ok.all():
            bad = ~ok
            flat[bad] = np.arctan2(ss.reshape(-1)[bad], cc.reshape(-1)[bad])
        return out


def has_codes(f: Format, *arrays: F64) -> bool:
    """Every value has a bit pattern in ``f``: false only for a nan in a format without nan (fp4, fp6),
    which ``round_to`` keeps as nan but a cast would turn into a number."""
    return f.overflow != "saturate" or all(bool(np.isfinite(np.max(a))) for a in arrays if a.size)


_TABLE_MIN_ELEMENTS = 2**20  # angles in a pass from which the lookup tables pay for themselves (~30 ms to build)


@functools.lru_cache(maxsize=4)
def _pair_table(cache: str, scale: float) -> _PairTable | None:
    f = get_format(cache)
    width = np.dtype(f.numpy_type).itemsize
    if width > 2 or not math.isfinite(scale) or scale <= 0:
        return None
    b = int(ml_dtypes.finfo(f.numpy_type).bits)  # the sign is bit b - 1 (fp4 and fp6 sit in a byte's low bits)
    half = 1 << (b - 1)
    code_t = np.uint16 if b > 8 else np.uint8
    with np.errstate(invalid="ignore", over="ignore"):
        mags = np.arange(half, dtype=code_t).view(f.numpy_type).astype(np.float64)  # |x| by code
        c = np.arange(1 << b, dtype=code_t).view(f.numpy_type).astype(np.float64)  # cos by code
        h = spacing(c, f)  # one ulp of margin on each side of the stored cos
        lo = np.clip((np.abs(c) - h) / scale, 0.0, 1.0)
        hi = np.clip((np.abs(c) + h) / scale, 0.0, 1.0)
        smax, smin = scale * np.sqrt(1.0 - lo * lo), scale * np.sqrt(1.0 - hi * hi)
        # |sin| codes from below smin to above smax (codes of positive values grow with the value)
        first = np.searchsorted(mags, smin, side="left") - 2
        last = np.searchsorted(mags, smax, side="right") + 1
    usable = np.isfinite(c) & (np.abs(c) <= scale * (1 + 2.0 ** -f.significand_bits) + h)
    first = np.clip(first, 0, half - 1)
    last = np.where(usable, np.clip(last, first, half), first)  # empty band: nothing stored
    size = last - first  # per cos code; the same band for both signs of sin
    counts = np.repeat(size, 2)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    kc = np.arange(2 << b)  # cos code * 2 + sin sign
    off = (starts - np.repeat(first, 2)).astype(np.int64)
    total = int(counts.sum())
    owner = np.repeat(kc, counts)  # kc of each flat entry
    mag = np.arange(total) - np.repeat(starts, counts) + np.repeat(np.repeat(first, 2), counts)
    ccode = owner >> 1
    scode = mag | ((owner & 1) << (b - 1))
    key = ((ccode << b) | scode).astype(np.uint32)
    with np.errstate(invalid="ignore"):
        sv = scode.astype(code_t).view(f.numpy_type).astype(np.float64)
        atan2 = np.arctan2(sv, c[ccode])
    if total == 0:  # keep take() valid: one entry that no pair code can match
        key, atan2 = np.array([0xFFFFFFFF], dtype=np.uint32), np.zeros(1)
    return _PairTable(f, b, off, key, atan2)
