"""RoPE auditor: computation recipes, the exact oracle, angle and rotation errors.

Rotary position embedding rotates pair ``i`` of a query/key at position ``m``
by the angle ``m * theta_i``.  A :class:`~precision_audit.schedules.RopeSchedule`
gives the frequencies ``theta_i`` of every rope type.  A :class:`Recipe`
gives one number format per stage of the computation::

    positions -> inv_freq -> angle (= position * inv_freq) -> trig (cos/sin) -> cache

and says how each value is made, as real code makes it:

* ``positions``: the integer position ``m`` rounded to the format (as
  ``torch.arange(L, dtype=...)`` or ``position_ids.to(dtype)`` builds it);
* ``inv_freq``: either the schedule's formula *evaluated in* a format G (every
  operation, exponent, power, reciprocal and scaling factors, rounded to G, as
  ``1 / base ** (arange(0, d, 2) / d)`` in float32 does) and then stored in the
  stage format (``module.to(bfloat16)`` casts that buffer), or the exact value
  rounded once (``inv_freq_from="exact"``, a lower bound no real code reaches);
* ``angle``: the exact product of the two rounded operands, rounded to the
  format (one multiply, as ``torch.outer`` / a K=1 matmul does);
* ``trig``: the angle is converted to the trig format (a no-op unless that
  format is narrower) and cos/sin are evaluated exactly on that value and
  rounded to the format.  For a float32 trig stage this is the correctly
  rounded cos/sin, where real libm/SLEEF kernels may be off by one float32
  ulp; for bfloat16/float16 it is the correctly rounded result, where torch
  evaluates in float32 and rounds again (identical except near midpoints);
* ``cache``: cos/sin times the schedule's attention factor (YaRN, LongRoPE;
  1 otherwise) in the trig format, as ``emb.cos() * attention_scaling`` does,
  then cast to the stored format.

The numpy engine (:func:`recipe_stages`) rounds every operation correctly; the
torch engine (:func:`torch_stages`) runs this machine's torch kernels.  Every
error is measured against one oracle: the exact product of the integer ``m``
and the float64 ``theta_i`` (a two-term product), reduced modulo 2*pi with a
three-term 2*pi (Cody-Waite), i.e. accurate to ~1e-16 rad at 2**26.

>>> sched = RopeSchedule(head_dim=128, base=10000.0)
>>> rows = audit(sched, [preset("lowp", "bf16"), preset("fp32", "bf16")], [4096])
>>> [(r.recipe, r.max_rotation_error > 3.0) for r in rows]
[('lowp', True), ('fp32', False)]
"""

from __future__ import annotations

import functools
import math
import os
import queue
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .._common import Row, check_lengths
from ..formats import Format, _bfloat16_from_float32, _round_into, get_format, round_to, spacing
from ..schedules import ROPE_TYPES, RopeSchedule

__all__ = [
    "PRESETS",
    "SCALINGS",
    "STAGES",
    "Recipe",
    "RopeRow",
    "RopeSchedule",
    "audit",
    "APPLY_MODES",
    "ENGINES",
    "cache_rounding_bound",
    "effective_recipe",
    "exact_angles",
    "parse_stages",
    "preset",
    "recipe_stages",
    "run_recipe",
    "stored_inv_freq",
    "torch_stages",
    "wrap",
]

F64 = npt.NDArray[np.float64]

STAGES: tuple[str, ...] = ("positions", "inv_freq", "angle", "trig", "cache")
# the rotation of q/k by the stored cos/sin (measured by precision_audit.attention, not by the cache audit)
APPLY_MODES: tuple[str, ...] = ("elementwise", "fp32-then-cast")
SCALINGS: tuple[str, ...] = ROPE_TYPES
MAX_ROPE_LENGTH = 2**26  # the oracle's two-term product is exact for m < 2**27

# 2*pi as three float64 terms: C1 (25 bits) + C2 (25 bits) = float64(2*pi) exactly,
# C3 = 2*pi - float64(2*pi).  k * C1 and k * C2 are exact for k < 2**28.
_TWO_PI = float.fromhex("0x1.921fb54442d18p+2")
_TWO_PI_C1 = float.fromhex("0x1.921fb5p+2")
_TWO_PI_C2 = _TWO_PI - _TWO_PI_C1  # exact: the low 27 bits of float64(2*pi)
_TWO_PI_C3 = float.fromhex("0x1.1a62633145c07p-52")  # 2*pi - float64(2*pi)


# --------------------------------------------------------------------------- recipes


def _opmath(fmt: str) -> str:
    """The format torch does a float op in: float64 for float64, float32 otherwise."""
    return "float64" if fmt == "float64" else "float32"


@dataclass(frozen=True)
class Recipe:
    """One number format per stage (positions, inv_freq, angle, trig, cache) and how inv_freq is made.

    ``inv_freq_from`` is a format G: the schedule's formula evaluated in G
    (every operation rounded to G), then stored in the ``inv_freq`` format;
    ``"exact"``: the exact value rounded once to the ``inv_freq`` format.
    The default is what real code does: the formula in float32 (float64 for a
    float64 stage), e.g. a float32 buffer that ``module.to(bf16)`` casts.
    ``apply`` is the format q/k are rotated in (default: the cache format, as
    a model in that dtype runs ``q*cos + rotate_half(q)*sin``); ``apply_mode``
    ``"elementwise"`` rounds every product and sum to it, ``"fp32-then-cast"``
    computes the rotation in float32 and casts the result (fused kernels).

    >>> r = preset("fp32", "bf16")
    >>> r.stages
    {'positions': 'float32', 'inv_freq': 'float32', 'angle': 'float32', 'trig': 'float32', 'cache': 'bfloat16'}
    >>> r.how["inv_freq"], preset("lowp-inv-freq", "bf16").how["inv_freq"]
    ('formula in float32', 'formula in float32, stored in bfloat16')
    >>> Recipe("x", "bf16", "fp32", "fp32", "fp32", "fp9")
    Traceback (most recent call last):
    ...
    ValueError: recipe 'x' stage cache: unknown dtype 'fp9'; valid names: float64, float32, float16, bfloat16, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn (aliases: bf16, double, e2m1, e4m3, e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, f16, f32, f64, float, fp16, fp32, fp4, fp64, fp6_e2m3, fp6_e3m2, fp8_e4m3, fp8_e5m2, half, single)
    """

    name: str
    positions: str
    inv_freq: str
    angle: str
    trig: str
    cache: str
    inv_freq_from: str | None = None
    apply: str | None = None
    apply_mode: str = "elementwise"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"recipe name {self.name!r} must be a non-empty string")
        for stage in STAGES:
            try:
                fmt = get_format(getattr(self, stage))
            except ValueError as e:
                raise ValueError(f"recipe {self.name!r} stage {stage}: {e}") from None
            object.__setattr__(self, stage, fmt.name)
        src = self.inv_freq_from
        if src is None:
            src = _opmath(self.inv_freq)
        elif src != "exact":
            try:
                src = get_format(src).name
            except ValueError as e:
                raise ValueError(f"recipe {self.name!r} inv_freq_from: {e} (or 'exact')") from None
        object.__setattr__(self, "inv_freq_from", src)
        try:
            object.__setattr__(self, "apply", get_format(self.cache if self.apply is None else self.apply).name)
        except ValueError as e:
            raise ValueError(f"recipe {self.name!r} stage apply: {e}") from None
        if self.apply_mode not in APPLY_MODES:
            raise ValueError(f"recipe {self.name!r}: unknown apply mode {self.apply_mode!r}; "
                             f"valid: {', '.join(APPLY_MODES)}")

    @property
    def stages(self) -> dict[str, str]:
        """Stage name -> canonical format name."""
        return {s: getattr(self, s) for s in STAGES}

    @property
    def how(self) -> dict[str, str]:
        """Stage name -> how its value is made (in words)."""
        out = {s: f"rounded to {getattr(self, s)}" for s in STAGES}
        out["positions"] = f"integers rounded to {self.positions}"
        if self.inv_freq_from == "exact":
            out["inv_freq"] = f"exact value rounded to {self.inv_freq}"
        elif self.inv_freq_from == self.inv_freq:
            out["inv_freq"] = f"formula in {self.inv_freq}"
        else:
            out["inv_freq"] = f"formula in {self.inv_freq_from}, stored in {self.inv_freq}"
        out["angle"] = f"product rounded to {self.angle}"
        out["trig"] = f"cos/sin rounded to {self.trig}"
        out["cache"] = f"stored in {self.cache}"
        out["apply"] = (f"q*cos + rotate_half(q)*sin, each operation in {self.apply}" if self.apply_mode == "elementwise"
                        else f"rotation in float32, cast to {self.apply}")
        return out

    def with_exact(self, stage: str) -> "Recipe":
        """The same recipe with one stage made exact (float64), for the error budget."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; valid: {', '.join(STAGES)}")
        extra = {"inv_freq_from": "exact"} if stage == "inv_freq" else {}
        return replace(self, name=f"{self.name}/exact-{stage}", **{stage: "float64"}, **extra)


def _lowp(d: str) -> tuple[str, ...]:
    return (d, d, d, d, d)


def _lowp_inv_freq(d: str) -> tuple[str, ...]:
    return ("float32", d, "float32", "float32", d)


def _fp32(d: str) -> tuple[str, ...]:
    return ("float32", "float32", "float32", "float32", d)


def _fp64(d: str) -> tuple[str, ...]:
    return ("float64", "float64", "float64", "float64", d)


# Each preset stands for a real code path; inv_freq is always the schedule's formula evaluated in
# float32 (float64 for fp64), as model code computes its buffer at init.
PRESETS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "lowp": _lowp,  # everything in the target dtype, positions built in it (old Llama/NeoX caches)
    "lowp-inv-freq": _lowp_inv_freq,  # buffer downcast by .to(dtype), then used in fp32 (transformers 5)
    "fp32": _fp32,  # the fix: fp32 until the cache
    "fp64": _fp64,  # beyond fp32: float64 angle and cos/sin, cache in dtype
}


def preset(name: str, dtype: str | Format = "bfloat16") -> Recipe:
    """A named recipe for a target dtype: ``lowp``, ``lowp-inv-freq``, ``fp32``, ``fp64``.

    >>> preset("lowp-inv-freq", "fp16").stages["inv_freq"]
    'float16'
    >>> preset("fp16x")
    Traceback (most recent call last):
    ...
    ValueError: unknown recipe 'fp16x'; valid: lowp, lowp-inv-freq, fp32, fp64
    """
    try:
        build = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; valid: {', '.join(PRESETS)}") from None
    d = get_format(dtype).name
    return Recipe(name, *build(d), inv_freq_from="float64" if name == "fp64" else "float32")


def parse_stages(text: str, dtype: str | Format = "bfloat16", name: str | None = None) -> Recipe:
    """A custom recipe from ``"positions=bf16,inv_freq=fp32,..."``.

    Stages not given keep the ``fp32`` preset's format (cache: ``dtype``).
    ``inv_freq=F`` is the formula in float32 (float64 if F is) stored in F;
    ``inv_freq=F@G`` the formula evaluated in G, stored in F;
    ``inv_freq=F@exact`` the exact value rounded once to F.  ``apply=F``
    rotates q/k in F (default: the cache format), ``apply=F@fp32`` in float32
    with the result cast to F.

    >>> parse_stages("positions=bf16").stages["positions"], parse_stages("positions=bf16").name
    ('bfloat16', 'positions=bf16')
    >>> parse_stages("inv_freq=bf16@bf16").how["inv_freq"]
    'formula in bfloat16'
    >>> parse_stages("angles=bf16")
    Traceback (most recent call last):
    ...
    ValueError: unknown stage 'angles' in 'angles=bf16'; valid: positions, inv_freq, angle, trig, cache, apply
    """
    base: dict[str, Any] = dict(preset("fp32", dtype).stages)
    source: str | None = None
    apply: dict[str, str] = {}
    for item in str(text).split(","):
        if not item.strip():
            continue
        stage, eq, fmt = item.partition("=")
        stage = stage.strip()
        if not eq:
            raise ValueError(f"stage item {item.strip()!r} in {text!r} is not STAGE=DTYPE")
        if stage == "apply":
            f, at, src = fmt.partition("@")
            try:
                if at and (not src.strip() or get_format(src.strip()).name != "float32"):
                    raise ValueError("apply=F@fp32 (rotation in float32, then cast to F) is the only @ form")
                apply = {"apply": get_format(f.strip()).name, "apply_mode": "fp32-then-cast" if at else "elementwise"}
            except ValueError as e:
                raise ValueError(f"stage apply in {text!r}: {e}") from None
            continue
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r} in {text!r}; valid: {', '.join(STAGES)}, apply")
        fmt, at, src = fmt.partition("@")
        if at and stage != "inv_freq":
            raise ValueError(f"stage {stage} in {text!r}: only inv_freq takes @FORMAT or @exact")
        try:
            base[stage] = get_format(fmt.strip()).name
            if at:
                source = "exact" if src.strip().lower() == "exact" else get_format(src.strip()).name
        except ValueError as e:
            raise ValueError(f"stage {stage} in {text!r}: {e}") from None
    return Recipe(name or str(text).replace(" ", ""), **base, inv_freq_from=source, **apply)


def stored_inv_freq(recipe: Recipe, schedule: RopeSchedule, seq_len: int | None = None,
                    engine: str = "numpy") -> F64:
    """The inverse frequencies a recipe's code holds for a pass over ``seq_len`` positions.

    The formula evaluated in ``recipe.inv_freq_from`` (numpy: correctly
    rounded; torch: this machine's kernels), rounded to the ``inv_freq``
    format.  ``dynamic`` above ``max_position_embeddings``: the module rebuilds
    the buffer in float32 from the formula, so a downcast buffer no longer
    matters (see :func:`effective_recipe`).

    >>> s = RopeSchedule(head_dim=8)
    >>> stored_inv_freq(preset("lowp-inv-freq", "bf16"), s).tolist()
    [1.0, 0.10009765625, 0.010009765625, 0.00099945068359375]
    """
    r = effective_recipe(recipe, schedule, seq_len)
    if r.inv_freq_from == "exact":
        theta = schedule.inv_freq(seq_len)
    else:
        theta = schedule.inv_freq_in(r.inv_freq_from, seq_len, engine=engine)  # type: ignore[arg-type]
    return round_to(theta, r.inv_freq)


def effective_recipe(recipe: Recipe, schedule: RopeSchedule, seq_len: int | None) -> Recipe:
    """The recipe the code really runs for a pass over ``seq_len`` positions.

    A ``dynamic`` module rebuilds ``inv_freq`` in float32 when the positions
    exceed ``max_position_embeddings`` (transformers' dynamic update): a buffer
    that ``.to(dtype)`` had downcast is replaced by float32 values.

    >>> dyn = RopeSchedule(head_dim=8, scaling="dynamic", factor=2.0, original_max_position_embeddings=4096)
    >>> effective_recipe(preset("lowp-inv-freq", "bf16"), dyn, 8192).how["inv_freq"]
    'formula in float32'
    """
    if (schedule.scaling == "dynamic" and seq_len is not None and seq_len > schedule.original_max_position_embeddings
            and recipe.inv_freq_from not in ("exact", recipe.inv_freq)):
        return replace(recipe, inv_freq="float32", inv_freq_from="float32")
    return recipe


# --------------------------------------------------------------------------- oracle and numpy engine


def wrap(x: npt.ArrayLike) -> F64:
    """Wrap angles to [-pi, pi] (float64).

    >>> wrap([3 * np.pi / 2, -np.pi / 2]).round(12).tolist()
    [-1.570796326795, -1.570796326795]
    """
    a = np.asarray(x, dtype=np.float64)
    return a - _TWO_PI * np.rint(a / _TWO_PI)


def _split(theta: F64) -> tuple[F64, F64]:
    """Veltkamp split: theta = hi + lo with hi of at most 26 significant bits."""
    t = theta * 134217729.0  # 2**27 + 1
    hi = t - (t - theta)
    return hi, theta - hi


def _exact_parts(m: F64, theta: F64) -> tuple[F64, F64, F64]:
    """m * theta = p1 + p2 (p1 exact, p2 rounded far below 1e-16 rad) and its wrapped value."""
    hi, lo = _split(theta)
    p1 = m[:, None] * hi[None, :]  # exact: <= 27 + 26 bits
    p2 = m[:, None] * lo[None, :]
    k = np.rint((p1 + p2) / _TWO_PI)
    r = (((p1 - k * _TWO_PI_C1) - k * _TWO_PI_C2) + (p2 - k * _TWO_PI_C3))
    return p1, p2, wrap(r)


def exact_angles(positions: npt.ArrayLike, theta: npt.ArrayLike) -> F64:
    """The oracle: ``positions[:, None] * theta[None, :]`` exactly, wrapped to [-pi, pi].

    ``positions`` are integers below 2**27, ``theta`` float64 frequencies.

    >>> float(exact_angles([2**20], [1.0])[0, 0])  # 2**20 mod 2*pi, checked with mpmath in tests
    0.3368260275312118
    """
    m = np.asarray(positions, dtype=np.float64)
    return _exact_parts(m, np.asarray(theta, dtype=np.float64))[2]


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
    inv = round_to(np.asarray(theta, dtype=np.float64), recipe.inv_freq)
    w = _Work(pos.size, inv.size)
    angle, c, s, cc, ss = _run_recipe(recipe, pos, inv, cos_sin_scale, w.rows(pos.size))
    return {"positions": pos, "inv_freq": inv, "angle": angle, "trig_cos": c, "trig_sin": s, "cos": cc, "sin": ss}


class _Work:
    """Reused float64 buffers of one worker: ``rows`` x ``nf`` each (no allocation per chunk)."""

    NAMES = ("p1", "p2", "ex", "k", "t", "angle", "c", "s", "cc", "ss", "s1", "s2")

    def __init__(self, rows: int, nf: int) -> None:
        self.size = rows
        self.bufs = {n: np.empty((rows, nf)) for n in self.NAMES}
        self.eq = (np.empty((max(rows - 1, 0), nf), dtype=bool), np.empty((max(rows - 1, 0), nf), dtype=bool))

    def rows(self, n: int) -> "_Rows":
        return _Rows({k: v[:n] for k, v in self.bufs.items()}, (self.eq[0][: max(n - 1, 0)], self.eq[1][: max(n - 1, 0)]))


class _Rows:
    """Views of a :class:`_Work`'s buffers on the first n rows (C-contiguous)."""

    def __init__(self, b: dict[str, F64], eq: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]) -> None:
        self.__dict__.update(b)
        self.eq = eq

    p1: F64
    p2: F64
    ex: F64
    k: F64
    t: F64
    angle: F64
    c: F64
    s: F64
    cc: F64
    ss: F64
    s1: F64
    s2: F64


def _run_recipe(
    recipe: Recipe, pos: F64, inv: F64, scale: float, w: _Rows, keep_trig: bool = True
) -> tuple[F64, F64 | None, F64 | None, F64, F64]:
    """The numpy engine: angle, trig cos/sin and stored cos/sin, in ``w``'s buffers.

    Each stage is ``round_to`` of the previous value.  Skipped, as they cannot
    change a value: a rounding into a format that contains the value's format,
    and the product by a scale of 1.  A float32 trig value is rounded to the
    cache format from its float32 copy (the same value, so the same result).
    With ``keep_trig=False`` the trig values may be left out (None).
    """
    ft, fc = get_format(recipe.trig), get_format(recipe.cache)
    scratch = (w.s1, w.s2)
    angle = _angle_into(recipe, pos, inv, w)
    with np.errstate(invalid="ignore", over="ignore"):
        fast32 = ft.name == "float32" and scale == 1.0 and fc.significand_bits < 24
        if fast32 and fc.name == "bfloat16":  # the bit carry needs nan-free input
            fast32 = bool(np.isfinite(np.max(angle)) and np.isfinite(np.min(angle)))
        trig: list[F64 | None] = []
        stored: list[F64] = []
        for fn, tb, sb in ((np.cos, w.c, w.cc), (np.sin, w.s, w.ss)):
            fn(angle, out=tb)
            if fast32:  # float32 copy of the trig value, rounded to the cache format in float32
                n = tb.size
                h32 = w.s1.reshape(-1).view(np.float32)
                t32 = h32[:n].reshape(tb.shape)
                np.copyto(t32, tb, casting="same_kind")
                if keep_trig:
                    np.copyto(tb, t32)
                if fc.name == "bfloat16":
                    _bfloat16_from_float32(t32, sb, h32[n : 2 * n].reshape(tb.shape))
                else:
                    h32b = w.s2.reshape(-1).view(np.float32)
                    sc32 = (h32[n : 2 * n].reshape(tb.shape), h32b[:n].reshape(tb.shape))
                    _round_into(t32, fc, t32, sc32)
                    np.copyto(sb, t32)
                trig.append(tb if keep_trig else None)
                stored.append(sb)
                continue
            _round_into(tb, ft, tb, scratch)
            trig.append(tb)
            if scale == 1.0 and _round_is_identity(ft, fc):  # x * 1.0 == x: no product either
                stored.append(tb)
                continue
            if scale == 1.0:
                np.copyto(sb, tb)
            else:  # cos * attention factor in the trig format (the factor a float32 scalar), then the cast
                np.multiply(tb, float(round_to(scale, _opmath(recipe.trig))[()]), out=sb)
                _round_into(sb, ft, sb, scratch)
            _round_into(sb, fc, sb, scratch)
            stored.append(sb)
    return angle, trig[0], trig[1], stored[0], stored[1]


def _angle_into(recipe: Recipe, pos: F64, inv: F64, w: _Rows) -> F64:
    """The recipe's cos/sin argument ``pos * inv`` in the angle then the trig format, into ``w.angle``."""
    fa, ft = get_format(recipe.angle), get_format(recipe.trig)
    angle, scratch = w.angle, (w.s1, w.s2)
    with np.errstate(invalid="ignore", over="ignore"):
        np.multiply(pos[:, None], inv[None, :], out=angle)
        _round_into(angle, fa, angle, scratch)
        if not _round_is_identity(fa, ft):
            _round_into(angle, ft, angle, scratch)
    return angle


@dataclass(frozen=True)
class _AngleTable:
    """Stored cos, sin and their atan2 for every value of a recipe's 16-bit (or narrower) angle format.

    Such an angle has at most 65536 values, and every later stage is a
    function of it; :func:`_recipe_stats` then looks the values up by the
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
            _, _, _, cc, ss = _run_recipe(recipe, values, np.ones(1), scale, w, keep_trig=False)
            return _AngleTable(fa, cc[:, 0].copy(), ss[:, 0].copy(), np.arctan2(ss[:, 0], cc[:, 0]))


def _codes_into(f: Format, x: F64, out: npt.NDArray[Any], scratch: F64) -> npt.NDArray[Any]:
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
        if not _has_codes(self.fmt, cc, ss):
            return np.arctan2(ss, cc, out=out)
        n, b = cc.size, self.bits
        u32 = w.s1.reshape(-1).view(np.uint32)
        pair, kc = u32[:n], u32[n : 2 * n]
        _codes_into(self.fmt, cc, pair, w.s2)
        _codes_into(self.fmt, ss, kc, w.s2)
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


def _has_codes(f: Format, *arrays: F64) -> bool:
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


def _round_is_identity(a: Format, b: Format) -> bool:
    """Rounding a value of format ``a`` to ``b`` returns it unchanged (inf, nan and -0 included)."""
    return a.name == b.name or b.name == "float64" or (_fits(a, b) and b.overflow == "inf")


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
    stages = recipe_stages if engine == "numpy" else torch_stages
    return stages(effective_recipe(recipe, schedule, key), inv, m, schedule.cos_sin_scale)




def torch_stages(
    recipe: Recipe, theta: npt.ArrayLike, positions: int | npt.ArrayLike, cos_sin_scale: float = 1.0
) -> dict[str, F64]:
    """Run a recipe with real torch kernels; same keys as :func:`recipe_stages`.

    ``positions`` is a length (``torch.arange(L, dtype=torch.int64).to(dtype)``:
    each position rounded once, as a GPU ``torch.arange(L, dtype=dtype)`` does;
    torch's vectorised CPU arange kernel instead rounds the base of each SIMD
    block and adds offsets, so above the exact-integer range its values differ,
    see ``precision_audit.positions``) or an array of integer positions (cast
    with ``.to(dtype)``).  inv_freq is the float64 schedule cast with ``.to(dtype)``;
    the angle is ``torch.outer`` in the widest of the three formats, cast to the
    angle format; cos/sin are ``Tensor.cos()/.sin()`` in the trig format; the
    cache is ``(trig * scale).to(cache dtype)``.

    >>> st = torch_stages(preset("lowp", "bf16"), [1.0, 0.1], 260)
    >>> st["positions"][256:].tolist()
    [256.0, 256.0, 258.0, 260.0]
    """
    import torch

    def dt(name: str) -> Any:
        d = get_format(name).torch_dtype
        if d is None:
            raise ValueError(f"format {name!r} has no torch dtype; the torch engine cannot run it")
        return d

    P, I, A, T, C = (dt(recipe.positions), dt(recipe.inv_freq), dt(recipe.angle), dt(recipe.trig), dt(recipe.cache))
    if isinstance(positions, (int, np.integer)):
        pos = torch.arange(int(positions), dtype=torch.int64).to(P)
    else:
        pos = torch.from_numpy(np.asarray(positions, dtype=np.float64)).to(P)
    inv = torch.from_numpy(np.asarray(theta, dtype=np.float64)).to(I)
    # multiply in the angle format when both operands fit in it exactly (one rounding, as
    # model code does); otherwise form the product in float64 and cast it
    fa = get_format(recipe.angle)
    fits = all(_fits(get_format(x), fa) for x in (recipe.positions, recipe.inv_freq))
    wide = A if fits else torch.float64
    angle = torch.outer(pos.to(wide), inv.to(wide)).to(A).to(T)
    c, s = angle.cos(), angle.sin()
    if cos_sin_scale != 1.0:
        cc, ss = (c * cos_sin_scale).to(C), (s * cos_sin_scale).to(C)
    else:
        cc, ss = c.to(C), s.to(C)

    def f64(t: Any) -> F64:
        return t.to(torch.float64).numpy()

    return {
        "positions": f64(pos),
        "inv_freq": f64(inv),
        "angle": f64(angle),
        "trig_cos": f64(c),
        "trig_sin": f64(s),
        "cos": f64(cc),
        "sin": f64(ss),
    }


def _fits(a: Format, b: Format) -> bool:
    """Every value of format ``a`` is a value of format ``b``."""
    return (
        a.significand_bits <= b.significand_bits
        and a.max_finite <= b.max_finite
        and a.min_exponent - a.significand_bits >= b.min_exponent - b.significand_bits
    )


def cache_rounding_bound(fmt: str | Format, scale: float = 1.0) -> float:
    """Worst rotation error (rad) from rounding an exact (s cos, s sin) pair to ``fmt``.

    ``scale`` s is the attention factor multiplied into cos/sin (YaRN,
    LongRoPE; 1 otherwise).  Each stored component lies below s in magnitude,
    so it moves by at most half the spacing ``h`` of the largest value below s
    (s = 1: half an ulp of [0.5, 1), ``2**-(p+1)``); the point moves by at most
    ``sqrt(2) h`` at radius s, its angle by at most ``asin(e / (1 - e))`` with
    ``e = sqrt(2) h / s``.  A factor just above a power of two coarsens the
    grid against the radius: bf16 with s = 1.35 allows about 2 / 1.35 times the s = 1 bound.

    >>> round(cache_rounding_bound("bfloat16"), 6)
    0.00277
    >>> round(cache_rounding_bound("bfloat16", 1.35) / cache_rounding_bound("bfloat16"), 3)  # 2/1.35 = 1.481, + O(e)
    1.483
    """
    f = get_format(fmt)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale {scale!r} must be a finite number > 0")
    from ..formats import spacing

    h = float(spacing([math.nextafter(scale, 0.0)], f)[0]) / 2
    e = math.sqrt(2.0) * h / scale
    return math.asin(min(1.0, e / (1 - e)))


# --------------------------------------------------------------------------- audit


@dataclass(frozen=True)
class RopeRow(Row):
    """RoPE precision of one recipe at one context length (positions 0..length-1).

    Errors in radians, wrapped to [-pi, pi], against the exact ``m * theta_i``.
    Angle errors are of the cos/sin argument; rotation errors of
    ``atan2(stored sin, stored cos)``.  A non-finite value counts as error pi.
    ``*_profile`` lists one value per frequency index i (max over positions,
    or mean).  ``error_budget`` maps each stage to the max rotation error with
    that stage alone made exact (float64), or is None if not computed.
    ``cache_bound`` is :func:`cache_rounding_bound` of the cache format;
    ``how`` says how each stage's value is made (:attr:`Recipe.how`) and
    ``engine`` who rounded (numpy: correctly rounded; torch: this machine).
    """

    recipe: str
    dtype: str
    length: int
    head_dim: int
    base: float
    rotary_dim: int
    scaling: str
    stages: dict[str, str]
    how: dict[str, str]
    engine: str
    max_angle_error: float
    mean_angle_error: float
    max_rotation_error: float
    mean_rotation_error: float
    colliding_positions: int
    cache_bound: float
    angle_error_profile: tuple[float, ...] = field(repr=False)
    mean_angle_error_profile: tuple[float, ...] = field(repr=False)
    rotation_error_profile: tuple[float, ...] = field(repr=False)
    mean_rotation_error_profile: tuple[float, ...] = field(repr=False)
    error_budget: dict[str, float] | None = None

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"length {self.length!r} must be at least 1")
        if not 0 <= self.colliding_positions < self.length:
            raise ValueError(f"colliding_positions {self.colliding_positions!r} not in [0, {self.length})")


@dataclass
class _ChunkStats:
    """One recipe's reductions over one chunk of positions (merged in chunk order)."""

    ang_max: F64
    ang_sum: F64
    rot_max: F64
    rot_sum: F64
    collisions: int  # rows equal to the previous row, inside the chunk
    first: F64  # stored (cos, sin) of the chunk's first and last position
    last: F64


class _Acc:
    """Running per-frequency reductions for one recipe over a prefix of positions."""

    def __init__(self, nf: int) -> None:
        self.ang_max = np.zeros(nf)
        self.ang_sum = np.zeros(nf)
        self.rot_max = np.zeros(nf)
        self.rot_sum = np.zeros(nf)
        self.collisions = 0
        self.last: F64 | None = None

    def add(self, c: _ChunkStats) -> None:
        """Merge the next chunk (chunks must come in position order: sums are order-sensitive)."""
        np.maximum(self.ang_max, c.ang_max, out=self.ang_max)
        self.ang_sum += c.ang_sum
        np.maximum(self.rot_max, c.rot_max, out=self.rot_max)
        self.rot_sum += c.rot_sum
        self.collisions += c.collisions + (self.last is not None and _same_row(self.last, c.first))
        self.last = c.last

    def padded(self, active: npt.NDArray[np.bool_]) -> "_Acc":
        """The accumulator over all frequencies, where the inactive ones (theta = 0) had error 0."""
        out = _Acc(active.size)
        for name in ("ang_max", "ang_sum", "rot_max", "rot_sum"):
            getattr(out, name)[active] = getattr(self, name)
        out.collisions = self.collisions
        return out

    def snapshot(self) -> "_Acc":
        snap = _Acc(0)
        snap.ang_max, snap.ang_sum = self.ang_max.copy(), self.ang_sum.copy()
        snap.rot_max, snap.rot_sum = self.rot_max.copy(), self.rot_sum.copy()
        snap.collisions = self.collisions
        return snap


ENGINES: tuple[str, ...] = ("numpy", "torch")


def _same_row(a: F64, b: F64) -> bool:
    """Rows equal element by element, nan equal to nan."""
    return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def _wrap_into(x: F64, tmp: F64) -> None:
    """``x = wrap(x)`` in place (the same operations as :func:`wrap`)."""
    np.divide(x, _TWO_PI, out=tmp)
    np.rint(tmp, out=tmp)
    np.multiply(tmp, _TWO_PI, out=tmp)
    np.subtract(x, tmp, out=x)


def _oracle_into(m: F64, hi: F64, lo: F64, w: _Rows) -> None:
    """:func:`_exact_parts` into ``w.p1``, ``w.p2``, ``w.ex`` (same operations, same bits)."""
    p1, p2, k, t, r = w.p1, w.p2, w.k, w.t, w.ex
    np.multiply(m[:, None], hi[None, :], out=p1)
    np.multiply(m[:, None], lo[None, :], out=p2)
    np.add(p1, p2, out=k)
    np.divide(k, _TWO_PI, out=k)
    np.rint(k, out=k)
    np.multiply(k, _TWO_PI_C1, out=t)
    np.subtract(p1, t, out=r)
    np.multiply(k, _TWO_PI_C2, out=t)
    np.subtract(r, t, out=r)
    np.multiply(k, _TWO_PI_C3, out=t)
    np.subtract(p2, t, out=t)
    np.add(r, t, out=r)
    # wrap(r) subtracts 2*pi*rint(r / 2*pi): nothing when every quotient rounds to
    # zero (only the sign of a zero could change, and every use takes |.|)
    if not (np.max(r) / _TWO_PI <= 0.5 and np.min(r) / _TWO_PI >= -0.5):
        _wrap_into(r, t)


def _recipe_stats(recipe: Recipe, pos: F64, inv: F64, scale: float, w: _Rows, engine: str = "numpy",
                  table: "_AngleTable | None" = None, pairs: "_PairTable | None" = None) -> _ChunkStats:
    """Angle and rotation errors of one recipe on one chunk, reduced per frequency.

    The same values as ``|wrap(angle - p1 - p2)|`` and
    ``|wrap(atan2(sin, cos) - exact)|`` with non-finite errors set to pi.
    ``engine="torch"``: ``pos`` are the integer positions, the stages torch's.
    ``table``: the recipe's :class:`_AngleTable` (numpy engine), for cos, sin, atan2;
    ``pairs``: its cache format's :class:`_PairTable`, for atan2.
    """
    rot: F64 | None = None  # atan2(ss, cc) when looked up
    if engine == "torch":
        st = torch_stages(recipe, inv, pos, scale)
        angle, cc, ss = st["angle"], st["cos"], st["sin"]
    elif table is not None and _has_codes(table.fmt, _angle_into(recipe, pos, inv, w)):
        angle = w.angle
        idx = _codes_into(table.fmt, angle, w.c.view(np.intp).reshape(-1), w.s1).reshape(angle.shape)
        cc = np.take(table.cos, idx, out=w.cc, mode="clip")
        ss = np.take(table.sin, idx, out=w.ss, mode="clip")
        rot = np.take(table.atan2, idx, out=w.s, mode="clip")
    else:
        angle, _, _, cc, ss = _run_recipe(recipe, pos, inv, scale, w, keep_trig=False)
    d = w.k  # free once the oracle is done
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(angle, w.p1, out=d)
        np.subtract(d, w.p2, out=d)
        np.abs(d, out=d)
        ang_max = d.max(axis=0)
        if not ang_max.max() / _TWO_PI <= 0.5:  # some error needs wrapping, or is not finite
            np.subtract(angle, w.p1, out=d)
            np.subtract(d, w.p2, out=d)
            _wrap_into(d, w.t)
            np.abs(d, out=d)
            d[~np.isfinite(d)] = math.pi
            ang_max = d.max(axis=0)
        ang_sum = d.sum(axis=0)
        r = w.k
        if rot is None:
            rot = np.arctan2(ss, cc, out=r) if pairs is None else pairs.lookup(cc, ss, r, w)
        np.subtract(rot, w.ex, out=r)
        _wrap_into(r, w.t)
        np.abs(r, out=r)
        rot_max = r.max(axis=0)
        has_nan = not np.isfinite(rot_max).all()  # a nan in cos/sin makes atan2 nan
        if has_nan:
            r[~np.isfinite(r)] = math.pi
            rot_max = r.max(axis=0)
        rot_sum = r.sum(axis=0)
    n = cc.shape[0]
    collisions = 0
    if n > 1:
        e1, e2 = w.eq
        np.equal(cc[1:], cc[:-1], out=e1)
        np.equal(ss[1:], ss[:-1], out=e2)
        if has_nan:
            e1 |= np.isnan(cc[1:]) & np.isnan(cc[:-1])
            e2 |= np.isnan(ss[1:]) & np.isnan(ss[:-1])
        e1 &= e2
        collisions = int(np.count_nonzero(e1.all(axis=1)))
    return _ChunkStats(
        ang_max, ang_sum, rot_max, rot_sum, collisions,
        np.concatenate([cc[0], ss[0]]), np.concatenate([cc[-1], ss[-1]]),
    )


def _chunk_stats(
    recipes: Sequence[Recipe], hi: F64, lo: F64, invs: Sequence[F64], scale: float, start: int, stop: int, w: _Rows,
    engine: str = "numpy", tables: Sequence[tuple[_AngleTable | None, _PairTable | None]] | None = None,
) -> list[_ChunkStats]:
    """Every recipe's reductions on positions start..stop-1 (one oracle evaluation)."""
    m = np.arange(start, stop, dtype=np.float64)
    _oracle_into(m, hi, lo, w)
    if engine == "torch":
        return [_recipe_stats(r, m, inv, scale, w, engine) for r, inv in zip(recipes, invs)]
    tabs = tables if tables is not None else [(None, None)] * len(recipes)
    return [_recipe_stats(r, round_to(m, r.positions), inv, scale, w, table=t, pairs=p)
            for r, inv, (t, p) in zip(recipes, invs, tabs)]


def default_workers() -> int:
    """Threads an audit uses by default: the CPU count, at most 4 (memory ~50 MB each).

    >>> 1 <= default_workers() <= 4
    True
    """
    return max(1, min(4, os.cpu_count() or 1))


def _pass(
    recipes: Sequence[Recipe], theta: F64, inv_freqs: Sequence[F64], lengths: Sequence[int], scale: float,
    chunk_elems: int, progress: Callable[[int], None] | None = None, workers: int = 1,
    engine: str = "numpy",
) -> list[list[tuple[_Acc, int]]]:
    """One pass over positions 0..max(lengths)-1; snapshots of every accumulator at each length.

    ``theta`` is the schedule's exact float64 frequencies (the oracle);
    ``inv_freqs[i]`` the inverse frequencies recipe ``i`` starts from (rounded
    to its ``inv_freq`` format here; rounding is idempotent).  Chunks run on
    ``workers`` threads (numpy releases the GIL) and are merged in position
    order, so the result does not depend on ``workers``.  ``engine``: who computes the
    recipe's stages (numpy: correctly rounded; torch: this machine's kernels).
    """
    nf = theta.size
    if len(inv_freqs) != len(recipes) or any(np.shape(v) != (nf,) for v in inv_freqs):
        raise ValueError(f"need one inverse-frequency array of {nf} values per recipe")
    invs = [round_to(np.asarray(v, dtype=np.float64), r.inv_freq) for r, v in zip(recipes, inv_freqs)]
    hi, lo = _split(theta)
    tables = None
    if engine == "numpy" and max(lengths, default=0) * nf >= _TABLE_MIN_ELEMENTS:  # else building costs more
        tables = [(_AngleTable.build(r, scale), _PairTable.build(r.cache, scale)) for r in recipes]
    chunk = max(256, chunk_elems // max(nf, 1))
    plan: list[tuple[int, int, int | None]] = []  # (start, stop, length that ends here)
    start = 0
    for L in lengths:
        while start < L:
            stop = min(L, start + chunk)
            plan.append((start, stop, None))
            start = stop
        if plan and plan[-1][1] == L:
            plan[-1] = (plan[-1][0], L, L)
        else:  # L repeats the previous length: snapshot without new positions
            plan.append((L, L, L))
    accs = [_Acc(nf) for _ in recipes]
    snaps: list[list[tuple[_Acc, int]]] = [[] for _ in recipes]
    workers = max(1, min(int(workers), len(plan)))
    spare: queue.SimpleQueue[_Work] = queue.SimpleQueue()
    for _ in range(workers):
        spare.put(_Work(chunk, nf))

    def run(item: tuple[int, int, int | None]) -> list[_ChunkStats]:
        a, b, _ = item
        if a == b:
            return []
        w = spare.get()
        try:
            return _chunk_stats(recipes, hi, lo, invs, scale, a, b, w.rows(b - a), engine, tables)
        finally:
            spare.put(w)

    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
    try:
        results = pool.map(run, plan) if pool is not None else map(run, plan)
        for (a, b, L), stats in zip(plan, results):
            for acc, st in zip(accs, stats):
                acc.add(st)
            if progress is not None and b > a:
                progress(b - a)
            if L is not None:
                for i, acc in enumerate(accs):
                    snaps[i].append((acc.snapshot(), L))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return snaps


def check_rope_lengths(lengths: int | Iterable[int]) -> tuple[int, ...]:
    """Validated lengths the exact reference angle can serve (at most 2**26).

    >>> check_rope_lengths(2**27)
    Traceback (most recent call last):
    ...
    ValueError: length 134217728 exceeds the RoPE oracle's limit 2**26 = 67108864
    """
    lens = check_lengths(lengths)
    if lens[-1] > MAX_ROPE_LENGTH:
        raise ValueError(f"length {lens[-1]} exceeds the RoPE oracle's limit 2**26 = {MAX_ROPE_LENGTH}")
    return lens


def _frequency_groups(schedule: RopeSchedule, lens: Sequence[int]) -> list[tuple[int | None, list[int]]]:
    """Lengths grouped by the ``seq_len`` their frequencies depend on (dynamic NTK and LongRoPE
    above the pretraining context); one pass each."""
    groups: dict[int | None, list[int]] = {}
    for L in lens:
        groups.setdefault(schedule.frequency_key(L), []).append(L)
    return list(groups.items())


def positions_to_scan(schedule: RopeSchedule, lengths: int | Iterable[int]) -> int:
    """How many positions :func:`audit` scans for these lengths (one pass per frequency group).

    >>> positions_to_scan(RopeSchedule(head_dim=64), [1024, 4096])
    4096
    """
    return sum(max(ls) for _, ls in _frequency_groups(schedule, check_rope_lengths(lengths)))


def audit(
    schedule: RopeSchedule,
    recipes: Recipe | Iterable[Recipe],
    lengths: int | Iterable[int],
    *,
    budget: bool = False,
    chunk_elems: int = 2**19,
    progress: Callable[[int], None] | None = None,
    engine: str = "numpy",
    workers: int | None = None,
) -> list[RopeRow]:
    """Audit recipes at context lengths: one row per (recipe, length), recipe-major.

    One chunked pass over positions up to the largest length serves every
    shorter length (prefix reductions); memory stays ~``chunk_elems`` float64
    per array.  ``dynamic`` scaling changes the frequencies with the length,
    so lengths above ``original_max_position_embeddings`` get a pass each.
    ``budget=True`` adds the error budget (five more recipe runs per recipe).
    ``progress`` is called after each chunk with the number of positions it
    held (:func:`positions_to_scan` gives the total).  Chunks of positions run
    on ``workers`` threads (default :func:`default_workers`); the rows are the
    same to the bit for any number of workers.  ``engine="torch"``
    runs every stage (inv_freq formula included) with this machine's torch
    kernels instead of correctly rounded operations.

    >>> row = audit(RopeSchedule(head_dim=64), preset("fp32", "bf16"), 2048)[0]
    >>> fp32_angle = 2047 * 2.0**-23 * (1 + 2.0**-24)  # theta rounding + product half-ulp, theta <= 1
    >>> row.max_rotation_error <= fp32_angle + row.cache_bound + cache_rounding_bound("fp32")
    True
    """
    recs = [recipes] if isinstance(recipes, Recipe) else list(recipes)
    if not recs:
        raise ValueError("no recipe given")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1):
        raise ValueError(f"workers {workers!r} must be a positive integer")
    lens = check_rope_lengths(lengths)
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    variants: list[Recipe] = []
    for r in recs:
        variants.append(r)
        if budget:
            variants.extend(r.with_exact(s) for s in STAGES)
    scale = schedule.cos_sin_scale
    results: dict[tuple[int, int], tuple[_Acc, int]] = {}
    n_workers = default_workers() if workers is None else workers
    for key, ls in _frequency_groups(schedule, lens):
        runs = [effective_recipe(v, schedule, key) for v in variants]
        invs = [stored_inv_freq(v, schedule, key, engine) for v in variants]
        theta = schedule.inv_freq(key)
        # pairs with theta = 0 (proportional RoPE's non-rotating tail) have angle 0 and cos/sin (1, 0) in
        # every format and recipe: error 0, and they never tell two rows apart; the pass skips them
        active = theta != 0
        if not active.any() or not all(np.array_equal(inv != 0, active) for inv in invs):
            active = np.ones_like(active)
        snaps = _pass(runs, theta[active], [inv[active] for inv in invs], ls, scale, chunk_elems, progress,
                      n_workers, engine)
        for v, per_len in enumerate(snaps):
            for acc, L in per_len:
                results[(v, L)] = (acc if active.all() else acc.padded(active), L)
    nf = schedule.n_freq
    rows: list[RopeRow] = []
    stride = 1 + (len(STAGES) if budget else 0)
    for i, r in enumerate(recs):
        for L in lens:
            acc, _ = results[(i * stride, L)]
            bud = None
            if budget:
                bud = {s: float(results[(i * stride + 1 + j, L)][0].rot_max.max()) for j, s in enumerate(STAGES)}
            rows.append(
                RopeRow(
                    recipe=r.name,
                    dtype=r.cache,
                    length=L,
                    head_dim=schedule.head_dim,
                    base=schedule.base,
                    rotary_dim=schedule.rotary,
                    scaling=schedule.scaling,
                    stages=r.stages,
                    how=r.how,
                    engine=engine,
                    max_angle_error=float(acc.ang_max.max()),
                    mean_angle_error=float(acc.ang_sum.sum() / (L * nf)),
                    max_rotation_error=float(acc.rot_max.max()),
                    mean_rotation_error=float(acc.rot_sum.sum() / (L * nf)),
                    colliding_positions=acc.collisions,
                    cache_bound=cache_rounding_bound(r.cache, scale),
                    angle_error_profile=tuple(acc.ang_max.tolist()),
                    mean_angle_error_profile=tuple((acc.ang_sum / L).tolist()),
                    rotation_error_profile=tuple(acc.rot_max.tolist()),
                    mean_rotation_error_profile=tuple((acc.rot_sum / L).tolist()),
                    error_budget=bud,
                )
            )
    return rows
