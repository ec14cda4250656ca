"""The torch engine: a recipe's stages computed with this machine's torch kernels (torch imported lazily).

Casts agree with the numpy engine bit for bit; ``cos``/``sin`` are torch's
kernels, faithful but not correctly rounded, so they may differ from the numpy
engine's by an ulp of the trig format.  (The inverse-frequency formula in torch
is the schedule's: :meth:`~precision_audit.rope.schedules.RopeSchedule.inv_freq_in`.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..formats import fits_in, get_format
from .oracle import F64
from .recipes import Recipe, preset  # noqa: F401  (preset: doctests)

__all__ = ["torch_stages"]

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
    fits = all(fits_in(get_format(x), fa) for x in (recipe.positions, recipe.inv_freq))
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
