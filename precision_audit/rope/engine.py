"""The numpy engine: a recipe's stages with every operation correctly rounded.

Each stage's value is the previous one rounded to the stage's format
(:func:`~precision_audit.formats.round_to`, float64 arrays throughout);
:func:`recipe_stages` runs a recipe on given frequencies, :func:`run_recipe`
on a schedule as its code would (its own inverse frequencies, the attention
factor).  The chunked audit reuses the engine's buffers (:class:`_Work`).

>>> st = run_recipe(preset("fp32", "bf16"), RopeSchedule(head_dim=4), [0, 1])
>>> st["cos"][:, 0].tolist(), st["sin"][:, 0].tolist()  # cos 1, sin 1 in bf16
([1.0, 0.5390625], [0.0, 0.83984375])
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..formats import Format, bfloat16_from_float32, fits_in, get_format, round_into, round_to
from .schedules import RopeSchedule
from .formulas import AngleMaker
from .oracle import F64
from .recipes import Recipe, _opmath, effective_recipe, preset, stored_inv_freq  # noqa: F401  (preset: doctests)

__all__ = ["ENGINES", "recipe_stages", "run_recipe"]

ENGINES: tuple[str, ...] = ("numpy", "torch")  # who computes the stages: correctly rounded, or this machine's torch


def _round_is_identity(a: Format, b: Format) -> bool:
    """Rounding a value of format ``a`` to ``b`` returns it unchanged (inf, nan and -0 included)."""
    return a.name == b.name or b.name == "float64" or (fits_in(a, b) and b.overflow == "inf")


_HUGE_PAGE = 2**21  # bytes: x86-64's and most aarch64 kernels' transparent huge page


def _huge_region(size: int) -> F64:
    """A float64 array of ``size`` elements that starts at a huge page boundary of one allocation.

    numpy asks Linux for transparent huge pages on an allocation of 4 MiB or more (``madvise``); a
    worker's buffers in one such region are then backed by 2 MiB pages instead of 4 KiB ones, which
    spares the TLB misses of passes over tens of MiB (the four-preset 1M audit: ~7 % faster here).  Small
    regions, and other systems, get an ordinary array."""
    if size * 8 < 2 * _HUGE_PAGE:
        return np.empty(size)
    raw = np.empty(size + _HUGE_PAGE // 8)
    skip = (-raw.ctypes.data % _HUGE_PAGE) // 8  # float64 elements up to the first 2 MiB boundary
    return raw[skip : skip + size]


class _Work:
    """Reused float64 buffers of one worker: ``rows`` x ``nf`` each (no allocation per chunk); ``fused``: its
    stages may run as fused kernels (:mod:`.fused`).

    ``k`` has one more row in front (``kz``): a running column sum written there continues the
    sequential axis-0 sum of the rows below it (see :mod:`.chunk`).  ``cc`` and ``ss`` are the two
    halves of one buffer (``ccss``), adjacent for any number of rows."""

    NAMES = ("p1", "p2", "ex", "t", "angle", "c", "s", "s1", "s2", "est", "rot")

    def __init__(self, rows: int, nf: int, fused: bool = False) -> None:
        self.size, self.nf, self.fused = rows, nf, fused
        n = rows * nf
        sizes = [n] * len(self.NAMES) + [(rows + 1) * nf, 2 * n]
        region = self._region = _huge_region(sum(sizes))
        views, at = [], 0
        for size in sizes:
            views.append(region[at : at + size])
            at += size
        self.bufs = {name: v.reshape(rows, nf) for name, v in zip(self.NAMES, views)}
        self.kz = views[-2].reshape(rows + 1, nf)
        self.pair = views[-1]

    def scratch(self) -> F64:
        """Every buffer as one flat float64 array (between chunks, when nothing of the chunk is in them)."""
        return self._region

    def rows(self, n: int) -> "_Rows":
        views = {k: v[:n] for k, v in self.bufs.items()}
        views["kz"] = self.kz[: n + 1]
        views["k"] = self.kz[1 : n + 1]
        size = n * self.nf
        views["ccss"] = self.pair[: 2 * size]
        views["cc"] = self.pair[:size].reshape(n, self.nf)
        views["ss"] = self.pair[size : 2 * size].reshape(n, self.nf)
        rows = _Rows(views)
        rows.fused = self.fused
        return rows


class _Rows:
    """Views of a :class:`_Work`'s buffers on the first n rows (C-contiguous)."""

    def __init__(self, b: dict[str, F64]) -> None:
        self.__dict__.update(b)

    p1: F64
    p2: F64
    ex: F64
    k: F64
    kz: F64
    t: F64
    angle: F64
    c: F64
    s: F64
    cc: F64
    ss: F64
    ccss: F64
    s1: F64
    s2: F64
    est: F64
    rot: F64
    fused: bool  # stages may run as fused kernels (:mod:`.fused`): a long pass, numba here


def _trig_into(angle: F64, ft: Format, w: _Rows) -> tuple[F64, F64]:
    """cos and sin of the angle (float64 ``np.cos``/``np.sin``) rounded to the trig format, in ``w.c``, ``w.s``."""
    for fn, tb in ((np.cos, w.c), (np.sin, w.s)):
        fn(angle, out=tb)
        round_into(tb, ft, tb, (w.s1, w.s2))
    return w.c, w.s


def _cache_into(tb: F64, ft: Format, fc: Format, scale: float, sb: F64, scratch: tuple[F64, F64]) -> F64:
    """A trig value stored in the cache: times the attention factor in the trig format (the factor a
    float32 scalar, float64 for a float64 trig stage), then cast to the cache format.  Returns ``tb``
    itself when that changes nothing (no factor, and the cache holds every trig value), else ``sb``.
    A float32 trig value is rounded to a narrower cache from its float32 copy (the same value, so the
    same result, faster)."""
    if scale == 1.0 and _round_is_identity(ft, fc):  # x * 1.0 == x: no product either
        return tb
    if scale != 1.0:
        np.multiply(tb, float(round_to(scale, _opmath(ft.name))[()]), out=sb)
        round_into(sb, ft, sb, scratch)
        round_into(sb, fc, sb, scratch)
        return sb
    if ft.name == "float32" and fc.significand_bits < 24 and (fc.name != "bfloat16" or _finite(tb)):
        n = tb.size
        h32 = scratch[0].reshape(-1).view(np.float32)
        t32 = h32[:n].reshape(tb.shape)
        np.copyto(t32, tb, casting="same_kind")
        if fc.name == "bfloat16":  # the bit carry needs nan-free input
            bfloat16_from_float32(t32, sb, h32[n : 2 * n].reshape(tb.shape))
        else:
            h32b = scratch[1].reshape(-1).view(np.float32)
            round_into(t32, fc, t32, (h32[n : 2 * n].reshape(tb.shape), h32b[:n].reshape(tb.shape)))
            np.copyto(sb, t32)
        return sb
    np.copyto(sb, tb)
    round_into(sb, fc, sb, scratch)
    return sb


def _finite(x: F64) -> bool:
    return bool(np.isfinite(np.max(x)) and np.isfinite(np.min(x)))


def _run_recipe(
    recipe: Recipe, pos: F64, inv: F64 | AngleMaker, scale: float, w: _Rows
) -> tuple[F64, F64, F64, F64, F64]:
    """The numpy engine: angle, trig cos/sin and stored cos/sin, in ``w``'s buffers.

    Each stage is ``round_to`` of the previous value.  Skipped, as they cannot
    change a value: a rounding into a format that contains the value's format,
    and the product by a scale of 1.
    """
    ft, fc = get_format(recipe.trig), get_format(recipe.cache)
    angle = _angle_into(recipe, pos, inv, w)
    with np.errstate(invalid="ignore", over="ignore"):
        tc, ts = _trig_into(angle, ft, w)
        cc = _cache_into(tc, ft, fc, scale, w.cc, (w.s1, w.s2))
        ss = _cache_into(ts, ft, fc, scale, w.ss, (w.s1, w.s2))
    return angle, tc, ts, cc, ss


def _angle_into(recipe: Recipe, pos: F64, inv: F64 | AngleMaker, w: _Rows) -> F64:
    """The recipe's cos/sin argument ``pos * inv`` in the angle then the trig format, into ``w.angle``.

    A float32 angle of float32 operands is one float32 multiply (the exact product rounded once)."""
    fa, ft = get_format(recipe.angle), get_format(recipe.trig)
    angle, scratch = w.angle, (w.s1, w.s2)
    with np.errstate(invalid="ignore", over="ignore"):
        if isinstance(inv, AngleMaker):
            inv.angles_into(pos, angle)
            round_into(angle, fa, angle, scratch)
        elif _f32_product(recipe, fa, pos, inv):
            n = angle.size
            a32 = w.s1.reshape(-1).view(np.float32)[:n].reshape(angle.shape)
            np.multiply(pos.astype(np.float32)[:, None], np.asarray(inv, dtype=np.float32)[None, :], out=a32)
            if fa.name == "float32":
                np.copyto(angle, a32)
            elif fa.name == "bfloat16":  # finite operands: no nan in the product
                bfloat16_from_float32(a32, angle, w.s1.reshape(-1).view(np.float32)[n : 2 * n].reshape(angle.shape))
            elif fa.name == "float16":
                h16 = w.s2.reshape(-1).view(np.float16)[:n].reshape(angle.shape)
                np.copyto(h16, a32, casting="same_kind")  # IEEE round to nearest even, overflow to inf
                np.copyto(angle, h16)
            else:
                sc = (w.s1.reshape(-1).view(np.float32)[n : 2 * n].reshape(angle.shape),
                      w.s2.reshape(-1).view(np.float32)[:n].reshape(angle.shape))
                round_into(a32, fa, a32, sc)
                np.copyto(angle, a32)
        else:
            np.multiply(pos[:, None], inv[None, :], out=angle)
            round_into(angle, fa, angle, scratch)
        if not _round_is_identity(fa, ft):
            round_into(angle, ft, angle, scratch)
    return angle


def _f32_product(recipe: Recipe, fa: Format, pos: F64, inv: F64) -> bool:
    """``pos * inv`` rounded to ``fa`` is a float32 multiply (rounded to ``fa`` from float32): both operands
    are float32 values and either ``fa`` is float32 (one rounding either way) or the float32 product is
    exact (their significands fit in 24 bits) and ``fa`` narrower; a bfloat16 angle also needs them finite."""
    fp, fi = get_format(recipe.positions), get_format(recipe.inv_freq)
    f32 = _F32
    if not (fits_in(fp, f32) and fits_in(fi, f32)):
        return False
    if fa.name == "float32":
        return True
    if fp.significand_bits + fi.significand_bits > 24 or fa.significand_bits > 24 or fa.overflow == "saturate":
        return False
    return fa.name != "bfloat16" or bool(np.isfinite(pos).all() and np.isfinite(inv).all())


_F32 = get_format("float32")


def recipe_stages(
    recipe: Recipe, theta: npt.ArrayLike, positions: npt.ArrayLike, cos_sin_scale: float = 1.0
) -> dict[str, F64]:
    """Run a recipe (numpy engine) on integer positions; every stage's value in float64.

    Returns ``positions`` (n,), ``inv_freq`` (f,), ``angle`` (n, f: the cos/sin
    argument, in the trig format), ``trig_cos``/``trig_sin`` and the stored
    ``cos``/``sin`` (n, f).

    >>> st = recipe_stages(preset("lowp", "bf16"), [1.0, 0.1], [257, 258])
    >>> st["positions"].tolist(), st["angle"][:, 1].tolist()
    ([256.0, 258.0], [25.625, 25.875])
    """
    m = np.asarray(positions, dtype=np.float64)
    pos = round_to(m, recipe.positions)
    inv = theta if isinstance(theta, AngleMaker) else round_to(np.asarray(theta, dtype=np.float64), recipe.inv_freq)
    w = _Work(pos.size, inv.width if isinstance(inv, AngleMaker) else inv.size)
    angle, c, s, cc, ss = _run_recipe(recipe, pos, inv, cos_sin_scale, w.rows(pos.size))
    return {"positions": pos, "inv_freq": inv, "angle": angle, "trig_cos": c, "trig_sin": s, "cos": cc, "sin": ss}


def run_recipe(recipe: Recipe, schedule: RopeSchedule, positions: npt.ArrayLike, seq_len: int | None = None,
               engine: str = "numpy") -> dict[str, F64]:
    """Run a recipe on a schedule as its code would: its own inv_freq, the attention factor.

    ``seq_len`` is the length of the pass (for dynamic / longrope frequencies;
    default: largest position + 1).  Same keys as :func:`recipe_stages`.

    >>> st = run_recipe(preset("lowp", "bf16"), RopeSchedule(head_dim=4), [257])
    >>> st["positions"].tolist(), st["inv_freq"].tolist()  # 1/100 in bf16: 164 * 2**-14
    ([256.0], [1.0, 0.010009765625])
    """
    m = np.asarray(positions, dtype=np.float64)
    n = seq_len if seq_len is not None else (int(m.max()) + 1 if m.size else None)
    key = schedule.frequency_key(n) if n is not None else None
    inv = stored_inv_freq(recipe, schedule, key, engine)
    if engine == "numpy":
        stages = recipe_stages
    else:
        from .torch_engine import torch_stages as stages  # torch is imported only when asked for
    return stages(effective_recipe(recipe, schedule, key), inv, m, schedule.cos_sin_scale)
