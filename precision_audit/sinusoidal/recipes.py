"""Sinusoidal recipes (one format per stage), the presets, and the float64 frequencies ``w_i``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import check_above
from ..formats import Format, get_format

MAX_DIM = 65536  # model widths in use stay below 2**15

__all__ = ["DEFAULT_BASE", "MAX_DIM", "RECIPES", "STAGES", "Recipe", "frequencies", "get_recipe", "recipe"]

STAGES: tuple[str, ...] = ("positions", "frequencies", "angles", "trig", "table")
DEFAULT_BASE = 10000.0
Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Recipe:
    """One format per stage (``None``: the target dtype), see the module docstring.

    >>> Recipe("mine", positions="fp32", table="bf16").formats("float16")["table"].name
    'bfloat16'
    >>> Recipe("bad", angles="fp7")
    Traceback (most recent call last):
    ...
    ValueError: recipe 'bad', stage angles: unknown dtype 'fp7'; valid names: ...
    """

    name: str
    positions: str | None = None
    frequencies: str | None = None
    angles: str | None = None
    trig: str | None = None
    table: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"recipe name {self.name!r} must be a non-empty string")
        for stage in STAGES:
            value = getattr(self, stage)
            if value is None:
                continue
            try:
                fmt = get_format(value)
            except ValueError as e:
                msg = str(e).split("; valid names:")[0] + "; valid names: ..."
                raise ValueError(f"recipe {self.name!r}, stage {stage}: {msg}") from None
            object.__setattr__(self, stage, fmt.name)

    def formats(self, dtype: str | Format) -> dict[str, Format]:
        """The format of every stage for a target dtype."""
        target = get_format(dtype)
        return {s: target if getattr(self, s) is None else get_format(getattr(self, s)) for s in STAGES}


_F32 = "float32"
_F64 = "float64"
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("lowp", description="positions, frequencies, angles, sin/cos and table all in the target dtype"),
        Recipe("lowp-positions", None, _F32, _F32, _F32, None,
               "positions in the target dtype; frequencies, angles, sin/cos in float32; table cast"),
        Recipe("fp32", _F32, _F32, _F32, _F32, None,
               "the fix: everything in float32, only the finished table cast to the target dtype"),
        Recipe("fp64", _F64, _F64, _F64, _F64, None,
               "the floor: the exact (float64) encoding rounded once into the target dtype"),
    )
}


def recipe(name: str | Recipe, dtype: str | Format | None = None) -> Recipe:
    """A preset by name (or a :class:`Recipe`, returned as is); with ``dtype``, bound to it: its stages
    without a format run in ``dtype`` whatever an audit's dtypes (the rows still carry the audit's dtype).
    Every encoding package has a ``recipe(name, dtype)``; ``get_recipe`` is its former name.

    >>> recipe("fp32").angles, recipe("fp32").table
    ('float32', None)
    >>> recipe("fp32", "bf16").table
    'bfloat16'
    >>> recipe("fp16")
    Traceback (most recent call last):
    ...
    ValueError: unknown sinusoidal recipe 'fp16'; valid recipes: lowp, lowp-positions, fp32, fp64
    """
    if isinstance(name, Recipe):
        found = name
    else:
        try:
            found = RECIPES[str(name).strip().lower()]
        except KeyError:
            raise ValueError(f"unknown sinusoidal recipe {name!r}; valid recipes: {', '.join(RECIPES)}") from None
    if dtype is None:
        return found
    target = get_format(dtype).name
    return replace(found, **{s: getattr(found, s) or target for s in STAGES})


get_recipe = recipe  # the former name


def _check_dim(dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 2 or dim % 2:
        raise ValueError(f"dim {dim!r} must be a positive even integer (sin and cos come in pairs)")
    if dim > MAX_DIM:
        raise ValueError(f"dim {dim} exceeds {MAX_DIM}")
    return int(dim)


def _check_base(base: Any) -> float:
    return check_above(base, "base", 1.0, want="a finite number greater than 1")


def frequencies(dim: int, base: float = DEFAULT_BASE) -> Array:
    """The float64 angular frequencies ``w_i = base ** (-2i/dim)``, i = 0 .. dim/2-1.

    numpy's float64 ``power`` is a vectorised kernel whose last bit can depend on
    the CPU (it is within an ulp or two of the exact value), hence the rounding:

    >>> frequencies(4).round(15).tolist()
    [1.0, 0.01]
    >>> frequencies(3)
    Traceback (most recent call last):
    ...
    ValueError: dim 3 must be a positive even integer (sin and cos come in pairs)
    """
    dim, base = _check_dim(dim), _check_base(base)
    return np.power(base, -np.arange(0, dim, 2, dtype=np.float64) / dim)
