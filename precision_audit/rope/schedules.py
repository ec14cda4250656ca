"""RoPE frequency schedules: every rope type that real configs declare.

A :class:`RopeSchedule` holds a model's rotary settings (``rope_theta``, head
and rotary dims, and the ``rope_type`` with its parameters) and computes the
inverse frequencies ``theta_i`` three ways, from ONE written formula per type
(:mod:`.rope_types`, which credits the published formulas and the operation
order it follows):

* :meth:`RopeSchedule.inv_freq`: the reference, every operation correctly
  rounded in float64 (pow through mpmath), so it is the same on every machine;
* :meth:`RopeSchedule.inv_freq_in` ``(fmt)``: the formula *evaluated in* a
  format, every operation (exponent, power, reciprocal, scaling factors)
  correctly rounded to it, as real float32 code computes it (``engine="numpy"``),
  or with this machine's real torch kernels (``engine="torch"``), which are
  faithful, not correctly rounded (the two arithmetics: :mod:`.arithmetic`).

:func:`schedule_from_rope_parameters` reads a config's ``rope_parameters``
(transformers' parameter names); :func:`check_schedule` checks an auditor's
argument; :func:`ulp_distance` compares two evaluations.

>>> RopeSchedule(head_dim=8, base=10000.0).inv_freq().tolist()
[1.0, 0.1, 0.01, 0.001]
>>> s = RopeSchedule(head_dim=128, base=500000.0, scaling="llama3", factor=8.0)
>>> bool((s.inv_freq_in("float32") != s.inv_freq().astype("float32")).any())  # 3 roundings differ from 1
True
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import check_above, check_instance, describe
from ..formats import Format, get_format, spacing
from .arithmetic import F64, _Rounded, _Torch, round_mp
from .rope_types import _FORMULAS, _TYPE_ALIASES, ROPE_TYPES, yarn_bounds

__all__ = [
    "ROPE_TYPES",
    "RopeSchedule",
    "check_schedule",
    "schedule_from_rope_parameters",
    "round_mp",
    "ulp_distance",
    "yarn_bounds",
]
# round_mp (.arithmetic), ROPE_TYPES and yarn_bounds (.rope_types) are importable from here, as before the split

MAX_HEAD_DIM = 8192



# --------------------------------------------------------------------------- the schedule


SCALE_RANGE: tuple[float, float] = (2.0 ** -32, 2.0 ** 32)
"""The range of every scaling parameter (``factor``, the llama3 and yarn factors, ``mscale``, ``attention_factor``,
the longrope factors): stacks compute with them in float32, where a wider range overflows or underflows."""
MAX_BASE: float = 2.0 ** 40
"""The largest ``base`` (about 1.1e12; real models use 1e4 .. 1e8): stacks compute its powers in float32, and
mlx-lm's YaRN blend multiplies ``factor * base**x * base**x``, which stays below float32's 2**128 within
:data:`SCALE_RANGE`."""


def _positive(name: str, value: Any) -> float:
    v = check_above(value, name, 0.0)
    if not SCALE_RANGE[0] <= v <= SCALE_RANGE[1]:
        raise ValueError(f"{name} {describe(value)} must lie in [2**-32, 2**32] (stacks compute it in float32)")
    return v


def _even_dim(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0 or value % 2:
        raise ValueError(f"{name} {value!r} must be a positive even integer")
    if value > MAX_HEAD_DIM:
        raise ValueError(f"{name} {value} exceeds {MAX_HEAD_DIM} (real models use 64..256)")
    return int(value)


@dataclass(frozen=True)
class RopeSchedule:
    """RoPE frequencies of one model: base, dims and ``scaling`` (the rope type).

    ``rotary_dim`` (default ``head_dim``) is the number of rotated dims
    (partial rotary: ``int(head_dim * partial_rotary_factor)``; for
    ``proportional`` the rotated pairs keep ``head_dim``'s exponents and the
    other ``(head_dim - rotary_dim) / 2`` pairs get frequency 0).  ``scaling``
    is one of :data:`ROPE_TYPES` (``none`` = ``default``) with transformers'
    parameter names: ``factor``; ``original_max_position_embeddings`` (the
    pretraining context L0; for ``dynamic`` it is ``max_position_embeddings``,
    where the module starts growing the base); ``low_freq_factor`` /
    ``high_freq_factor`` (llama3); ``beta_fast`` / ``beta_slow``,
    ``truncate``, ``mscale`` / ``mscale_all_dim`` / ``attention_factor``
    (yarn); ``short_factor`` / ``long_factor`` / ``attention_factor``
    (longrope).

    >>> RopeSchedule(head_dim=8, scaling="linear", factor=4).inv_freq()[0]
    np.float64(0.25)
    >>> RopeSchedule(head_dim=8, rotary_dim=4, scaling="proportional").inv_freq().tolist()
    [1.0, 0.1, 0.0, 0.0]
    >>> RopeSchedule(scaling="rope2")
    Traceback (most recent call last):
    ...
    ValueError: unknown rope type 'rope2'; valid: default, linear, dynamic, yarn, longrope, llama3, proportional
    """

    head_dim: int = 128
    base: float = 10000.0
    rotary_dim: int | None = None
    scaling: str = "none"
    factor: float = 1.0
    original_max_position_embeddings: int = 8192
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        d = _even_dim("head_dim", self.head_dim)
        base = check_above(self.base, "base", 1.0)
        if base > MAX_BASE:
            raise ValueError(f"base {describe(self.base)} must be at most 2**40 (stacks compute its powers in float32)")
        r = _even_dim("rotary_dim", d if self.rotary_dim is None else self.rotary_dim)
        if r > d:
            raise ValueError(f"rotary_dim {r} is larger than head_dim {d}")
        kind = _TYPE_ALIASES.get(str(self.scaling), str(self.scaling))
        if kind not in _FORMULAS:
            raise ValueError(f"unknown rope type {self.scaling!r}; valid: {', '.join(ROPE_TYPES)}")
        factor = _positive("scaling factor", self.factor)
        L0 = self.original_max_position_embeddings
        if isinstance(L0, bool) or not isinstance(L0, (int, np.integer)) or L0 < 1:
            raise ValueError(f"original_max_position_embeddings {L0!r} must be an integer >= 1")
        for name in ("low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
            _positive(name, getattr(self, name))
        if kind == "dynamic" and r <= 2:
            raise ValueError(f"dynamic scaling needs rotary_dim > 2, got {r}")
        if kind == "llama3" and np.float32(self.high_freq_factor) < np.float32(self.low_freq_factor):
            raise ValueError(f"llama3 needs high_freq_factor >= low_freq_factor (in float32, where stacks blend), "
                             f"got {self.high_freq_factor!r} and {self.low_freq_factor!r}")
        if kind == "yarn" and not self.beta_fast > self.beta_slow:
            raise ValueError(f"yarn needs beta_fast > beta_slow, got {self.beta_fast!r} and {self.beta_slow!r}")
        for name in ("mscale", "mscale_all_dim", "attention_factor"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if not isinstance(self.truncate, (bool, np.bool_)):
            raise ValueError(f"truncate {self.truncate!r} must be true or false")
        for name in ("short_factor", "long_factor"):
            v = getattr(self, name)
            if kind == "longrope":
                if v is None:
                    raise ValueError(f"longrope needs {name} (one factor per frequency, {r // 2} values)")
                try:
                    v = tuple(_positive(f"{name} entry", x) for x in v)
                except TypeError:
                    raise ValueError(f"{name} {v!r} must be a list of {r // 2} numbers") from None
                if len(v) != r // 2:
                    raise ValueError(f"{name} has {len(v)} values; rotary_dim {r} needs {r // 2}")
                object.__setattr__(self, name, v)
            elif v is not None:
                raise ValueError(f"{name} applies to longrope only, not {kind!r}")
        object.__setattr__(self, "scaling", kind)
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "factor", factor)
        object.__setattr__(self, "rotary_dim", r)
        object.__setattr__(self, "head_dim", d)
        object.__setattr__(self, "original_max_position_embeddings", int(L0))
        object.__setattr__(self, "truncate", bool(self.truncate))
        if kind == "llama3" and self.equal_band_factors:
            self.inv_freq()  # refuses a wavelength exactly on the band edge (0/0 in every exact evaluation)

    @property
    def equal_band_factors(self) -> bool:
        """llama3 with ``low_freq_factor == high_freq_factor`` in float32 (Llama 4 Scout: both 1): no blended
        band, every wavelength kept or divided by the factor; code that divides by ``high - low`` gets inf."""
        return self.scaling == "llama3" and np.float32(self.high_freq_factor) == np.float32(self.low_freq_factor)

    @property
    def rotary(self) -> int:
        """Number of rotated dims (``rotary_dim``)."""
        return int(self.rotary_dim)  # type: ignore[arg-type]

    @property
    def n_freq(self) -> int:
        """Number of frequencies (pairs): ``rotary_dim // 2``; ``head_dim // 2`` for proportional."""
        return self.head_dim // 2 if self.scaling == "proportional" else self.rotary // 2

    def inv_freq(self, seq_len: int | None = None) -> F64:
        """The reference frequencies, every operation correctly rounded in float64.

        ``seq_len`` (the longest position + 1) matters for ``dynamic`` and
        ``longrope`` only.
        """
        return _cached(self, "float64", "numpy", seq_len).copy()

    def inv_freq_in(self, fmt: str | Format, seq_len: int | None = None, engine: str = "numpy") -> F64:
        """The formula evaluated in ``fmt``: every operation rounded to it, as real code computes it.

        ``engine="numpy"`` rounds every operation correctly (round to nearest
        even); ``engine="torch"`` runs torch's kernels of this machine in the
        torch dtype (its ``pow`` is faithful, not correctly rounded, and
        differs between CPUs).

        >>> RopeSchedule(head_dim=8).inv_freq_in("bfloat16").tolist()  # 10000**0.75 = 1000 exact; 1/1000 -> 131 * 2**-17
        [1.0, 0.10009765625, 0.010009765625, 0.00099945068359375]
        """
        if engine not in ("numpy", "torch"):
            raise ValueError(f"unknown engine {engine!r}; valid: numpy, torch")
        return _cached(self, get_format(fmt).name, engine, seq_len).copy()

    def frequency_key(self, seq_len: int) -> int | None:
        """The ``seq_len`` the frequencies of a length-``seq_len`` pass depend on (None: none).

        Lengths with equal keys share frequencies and can share one pass.
        """
        if self.scaling in ("dynamic", "longrope") and seq_len > self.original_max_position_embeddings:
            return seq_len if self.scaling == "dynamic" else self.original_max_position_embeddings + 1
        return None

    @property
    def cos_sin_scale(self) -> float:
        """Factor on cos/sin (the attention factor): YaRN's ``0.1 ln s + 1`` (or its
        mscale ratio), LongRoPE's ``sqrt(1 + ln s / ln L0)``, 1 otherwise.

        >>> round(RopeSchedule(scaling="yarn", factor=4).cos_sin_scale, 6)
        1.138629
        """
        if self.attention_factor is not None and self.scaling in ("yarn", "longrope"):
            return float(self.attention_factor)
        s = self.factor
        if self.scaling == "yarn":
            def m(scale: float, k: float = 1.0) -> float:
                return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0

            if self.mscale and self.mscale_all_dim:
                return float(m(s, self.mscale) / m(s, self.mscale_all_dim))
            return m(s)
        if self.scaling == "longrope":
            return 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(self.original_max_position_embeddings))
        return 1.0

    def describe(self) -> str:
        """One line: the rope type and the parameters that matter for it."""
        parts = [f"head_dim={self.head_dim}", f"rotary_dim={self.rotary}", f"base={self.base:g}",
                 f"rope_type={self.scaling}"]
        if self.scaling != "default":
            parts.append(f"factor={self.factor:g}")
        if self.scaling in ("dynamic", "yarn", "longrope", "llama3"):
            parts.append(f"L0={self.original_max_position_embeddings}")
        if self.cos_sin_scale != 1.0:
            parts.append(f"attention_factor={self.cos_sin_scale:.6g}")
        return ", ".join(parts)


@functools.lru_cache(maxsize=256)
def _cached(s: RopeSchedule, fmt: str, engine: str, seq_len: int | None) -> F64:
    ops = _Rounded(fmt) if engine == "numpy" else _Torch(fmt)
    with np.errstate(divide="ignore", invalid="ignore"):  # llama3 with equal band factors: an unused inf/NaN blend
        out = ops.result(_FORMULAS[s.scaling](s, ops, seq_len))
    bad = np.flatnonzero(~np.isfinite(out)) if s.equal_band_factors else ()
    if len(bad):
        raise ValueError(f"rope type {s.scaling} with low_freq_factor = high_freq_factor = {s.low_freq_factor!r}: "
                         f"the wavelength of pair {int(bad[0])} is exactly L0 / low_freq_factor = "
                         f"{s.original_max_position_embeddings / s.low_freq_factor:g} in {fmt}, where the blend "
                         "weight is 0/0 (NaN); no code computes that frequency")
    out.setflags(write=False)
    return out


def ulp_distance(a: npt.ArrayLike, b: npt.ArrayLike, fmt: str | Format) -> npt.NDArray[np.int64]:
    """How many ``fmt`` ulps apart two arrays of ``fmt`` values are (elementwise, same sign).

    >>> ulp_distance([1.0, 0.1], [1.0 + 2**-23, 0.1], "float32").tolist()
    [1, 0]
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    step = np.minimum(spacing(x, fmt), spacing(y, fmt))
    with np.errstate(invalid="ignore"):
        return np.rint(np.abs(x - y) / step).astype(np.int64)


# --------------------------------------------------------------------------- configs

PARAM_KEYS = {
    "rope_theta": "base",
    "factor": "factor",
    "original_max_position_embeddings": "original_max_position_embeddings",
    "low_freq_factor": "low_freq_factor",
    "high_freq_factor": "high_freq_factor",
    "beta_fast": "beta_fast",
    "beta_slow": "beta_slow",
    "mscale": "mscale",
    "mscale_all_dim": "mscale_all_dim",
    "attention_factor": "attention_factor",
    "truncate": "truncate",
    "short_factor": "short_factor",
    "long_factor": "long_factor",
}
IGNORED_KEYS = ("rope_type", "type", "partial_rotary_factor")


def schedule_from_rope_parameters(
    params: Mapping[str, Any] | str | None,
    *,
    head_dim: int,
    base: float | None = None,
    max_position_embeddings: int | None = None,
    original_max_position_embeddings: int | None = None,
    partial_rotary_factor: float | None = None,
) -> RopeSchedule:
    """A schedule from a config's ``rope_parameters`` (or legacy ``rope_scaling``) object, as is.

    ``params`` is a mapping or its JSON text (``None``: default RoPE).  The
    rope type is ``rope_type`` (or legacy ``type``); ``rope_theta`` there or
    ``base`` gives the base.  ``max_position_embeddings`` is the config's top
    level value: ``dynamic`` grows the base above it, and ``yarn``/``longrope``
    take ``factor = max_position_embeddings / original_max_position_embeddings``
    when no factor is given (as transformers does).  Older configs (Phi-3) keep
    ``original_max_position_embeddings`` at the top level: pass it, it fills
    the parameter when ``params`` lacks it.  Unknown keys are an error
    (a silently ignored key would give a wrong number).

    >>> s = schedule_from_rope_parameters('{"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, '
    ...     '"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}', head_dim=128)
    >>> s.scaling, s.factor, s.base
    ('llama3', 8.0, 500000.0)
    >>> schedule_from_rope_parameters({"rope_type": "yarn", "factr": 4}, head_dim=64)
    Traceback (most recent call last):
    ...
    ValueError: unknown rope parameter 'factr'; known: rope_theta, factor, original_max_position_embeddings, low_freq_factor, high_freq_factor, beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor, truncate, short_factor, long_factor, rope_type, type, partial_rotary_factor
    """
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except json.JSONDecodeError as e:
            raise ValueError(f"rope parameters are not valid JSON: {e}") from None
    p = dict(params or {})
    if not all(isinstance(k, str) for k in p):
        raise ValueError("rope parameters must be a JSON object with string keys")
    for k in p:
        if k not in PARAM_KEYS and k not in IGNORED_KEYS:
            raise ValueError(f"unknown rope parameter {k!r}; known: {', '.join([*PARAM_KEYS, *IGNORED_KEYS])}")
    kind = p.get("rope_type", p.get("type", "default"))
    if not isinstance(kind, str):
        raise ValueError(f"rope_type {kind!r} must be a string")
    kind = _TYPE_ALIASES.get(kind, kind)
    if kind not in _FORMULAS:
        raise ValueError(f"unknown rope type {kind!r}; valid: {', '.join(ROPE_TYPES)}")
    kw: dict[str, Any] = {PARAM_KEYS[k]: v for k, v in p.items() if k in PARAM_KEYS and v is not None}
    if base is not None and "base" not in kw:
        kw["base"] = base
    prf = p.get("partial_rotary_factor", partial_rotary_factor)
    if prf is not None:
        prf = _positive("partial_rotary_factor", prf)
        if prf > 1:
            raise ValueError(f"partial_rotary_factor {prf!r} must be <= 1")
        rotated = int(head_dim * prf) if kind != "proportional" else 2 * int(prf * head_dim // 2)
        kw["rotary_dim"] = rotated - rotated % 2
    M = max_position_embeddings
    if "original_max_position_embeddings" not in kw and kind in ("yarn", "longrope", "llama3"):
        if original_max_position_embeddings is not None:
            kw["original_max_position_embeddings"] = original_max_position_embeddings
        elif kind == "longrope" and M is not None:
            kw["original_max_position_embeddings"] = M
    if kind == "dynamic":
        if M is not None:
            kw["original_max_position_embeddings"] = M  # dynamic grows above max_position_embeddings
    elif kind in ("yarn", "longrope") and "factor" not in kw:
        if M is None or "original_max_position_embeddings" not in kw:
            raise ValueError(f"{kind} without a factor needs max_position_embeddings and "
                             "original_max_position_embeddings (factor = their ratio)")
        kw["factor"] = M / kw["original_max_position_embeddings"]
    if kind in ("linear", "dynamic", "yarn", "llama3") and "factor" not in kw:
        raise ValueError(f"rope type {kind!r} needs a factor")
    return RopeSchedule(head_dim=head_dim, scaling=kind, **kw)


def check_schedule(value: Any, name: str = "schedule") -> RopeSchedule:
    """A :class:`RopeSchedule` (for the RoPE auditors' first argument).

    >>> check_schedule(None)
    Traceback (most recent call last):
    ...
    precision_audit.checks.ArgumentTypeError: schedule None must be a RopeSchedule, not NoneType (e.g. RopeSchedule(head_dim=128, base=10000.0))
    """
    return check_instance(value, RopeSchedule, name, "e.g. RopeSchedule(head_dim=128, base=10000.0)")
