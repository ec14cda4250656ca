"""ALiBi recipes: one code path that builds the bias, stage by stage, and the bias it stores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import ArgumentTypeError, check_length, describe
from ..formats import Format, as_float64, bfloat16_from_float32, get_format, round_into, round_to
from .slopes import SLOPE_FUNCTIONS, SLOPE_RULES, check_heads

__all__ = ["FORMS", "RECIPES", "Recipe", "alibi_bias", "alibi_bias_torch", "get_recipe", "recipe", "recipe_names",
           "stored_slopes"]

FORMS = ("key", "relative")


@dataclass(frozen=True)
class Recipe:
    """One code path that builds the ALiBi bias; each stage rounds once.

    * ``slope_rule``: ``"exact"`` (float64 reference slopes) or ``"bloom"``
      (float32 base raised to a power, see :func:`bloom_slopes`); the result
      is rounded to ``slope_format``.
    * ``position_format``: key positions ``j`` or distances ``d`` are rounded
      to it (``torch.arange(L).to(dtype)``).
    * ``product_format``: ``slope * position`` is computed exactly and
      rounded once to it (an IEEE multiply).
    * ``bias_format``: the stored bias (the final ``.to(dtype)``).
    * ``form``: ``"key"`` (``slope * j``) or ``"relative"`` (``slope * d``).

    >>> Recipe("mine", "relative", "exact", "bf16", "fp32", "fp32", "fp16").slope_format
    'bfloat16'
    >>> Recipe("bad", "absolute", "exact", "fp32", "fp32", "fp32", "fp32")
    Traceback (most recent call last):
    ...
    ValueError: form 'absolute' is not one of key, relative
    """

    name: str
    form: str
    slope_rule: str
    slope_format: str
    position_format: str
    product_format: str
    bias_format: str

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form {self.form!r} is not one of {', '.join(FORMS)}")
        if self.slope_rule not in SLOPE_RULES:
            raise ValueError(f"slope_rule {self.slope_rule!r} is not one of {', '.join(SLOPE_RULES)}")
        for stage in ("slope_format", "position_format", "product_format", "bias_format"):
            object.__setattr__(self, stage, get_format(getattr(self, stage)).name)


RECIPES: dict[str, Callable[[str], Recipe]] = {
    # Everything in the model dtype: slopes, arange of distances, product.
    "lowp": lambda dt: Recipe("lowp", "relative", "exact", dt, dt, dt, dt),
    # Bloom's build_alibi_tensor: float32 slopes * cumsum positions, then .to(dtype).
    "cast-output": lambda dt: Recipe("cast-output", "key", "bloom", "float32", "float32", "float32", dt),
    # slope * (i - j) in float32, then cast to the model dtype.
    "relative-cast": lambda dt: Recipe("relative-cast", "relative", "exact", "float32", "float32", "float32", dt),
    # The fix: the relative bias stays float32 and is added to float32 scores.
    "fp32": lambda dt: Recipe("fp32", "relative", "exact", "float32", "float32", "float32", "float32"),
}


_FIX = "keep the bias float32 and add it to float32 scores (the fp32 recipe)"
LABELS: dict[str, tuple[str, str | None]] = {
    # each recipe as the bottom line names it, and its fix (None: nothing to fix)
    "lowp": ("ALiBi in the model dtype (lowp)", _FIX),
    "cast-output": ("ALiBi built in float32, cast (cast-output: Bloom's build_alibi_tensor)", _FIX),
    "relative-cast": ("ALiBi slope * (i - j) in float32, cast (relative-cast)", _FIX),
    "fp32": ("ALiBi bias in float32 (fp32)", None),
}


def recipe_names() -> list[str]:
    """Names of the preset recipes.

    >>> recipe_names()
    ['lowp', 'cast-output', 'relative-cast', 'fp32']
    """
    return list(RECIPES)


def recipe(name: str | Recipe, dtype: str | Format = "bfloat16") -> Recipe:
    """The preset ``name`` for model dtype ``dtype`` (a Recipe passes through).  Every encoding package has a
    ``recipe(name, dtype)``; ``get_recipe`` is its former name.

    >>> recipe("cast-output", "fp16").bias_format
    'float16'
    >>> recipe("fp32", "fp16").bias_format
    'float32'
    >>> recipe("bloom")
    Traceback (most recent call last):
    ...
    ValueError: unknown ALiBi recipe 'bloom'; valid: lowp, cast-output, relative-cast, fp32
    """
    if isinstance(name, Recipe):
        return name
    if not isinstance(name, str):
        raise ArgumentTypeError(f"ALiBi recipe {describe(name)} must be a name ({', '.join(RECIPES)}) or a Recipe")
    try:
        build = RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown ALiBi recipe {name!r}; valid: {', '.join(RECIPES)}") from None
    return build(get_format(dtype).name)


get_recipe = recipe  # the former name


def stored_slopes(recipe: Recipe, num_heads: int) -> npt.NDArray[np.float64]:
    """The slopes a recipe multiplies with (exact values of ``slope_format``).

    >>> stored_slopes(recipe("lowp", "bf16"), 12)[8:].tolist()
    [0.70703125, 0.353515625, 0.1767578125, 0.08837890625]
    """
    return round_to(SLOPE_FUNCTIONS[recipe.slope_rule](num_heads), recipe.slope_format)


def _magnitudes(recipe: Recipe, slopes: npt.NDArray[np.float64], k: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Stored ``|bias|`` for indices ``k`` (key positions or distances), shape (heads, len(k)).

    ``slopes * positions`` is exact in float64 while the significand bits of
    both factors sum to at most 53 (float32 slopes, positions below 2**29).
    """
    pos = round_to(k, recipe.position_format)
    with np.errstate(invalid="ignore"):  # 0 * inf in formats that overflow positions
        prod = round_to(slopes[:, None] * pos[None, :], recipe.product_format)
    return round_to(prod, recipe.bias_format)


def _magnitudes_into(recipe: Recipe, slopes: npt.NDArray[np.float64], k: npt.NDArray[np.float64],
                     out: npt.NDArray[np.float64], scratch: tuple[npt.NDArray[Any], npt.NDArray[Any]]) -> None:
    """:func:`_magnitudes` into ``out`` (heads, len(k)) with reused ``scratch`` (two C-contiguous float64
    arrays of its shape).  A float32 product of float32 operands is one float32 multiply (the exact product rounded
    once), and its bfloat16 cast a carry on the bits."""
    pos = round_to(k, recipe.position_format)
    fp, fb = get_format(recipe.product_format), get_format(recipe.bias_format)
    n = out.size
    if (fp.name == "float32" and _fits32(recipe.slope_format) and _fits32(recipe.position_format)
            and bool(np.isfinite(pos).all()) and fb.name in ("float64", "float32", "bfloat16", "float16")):
        p32 = scratch[0].reshape(-1).view(np.float32)[:n].reshape(out.shape)
        np.multiply(slopes.astype(np.float32)[:, None], pos.astype(np.float32)[None, :], out=p32)
        if fb.name == "bfloat16":
            bfloat16_from_float32(p32, out, scratch[1].reshape(-1).view(np.float32)[:n].reshape(out.shape))
            return
        if fb.name == "float16":
            h16 = scratch[1].reshape(-1).view(np.float16)[:n].reshape(out.shape)
            np.copyto(h16, p32, casting="same_kind")  # IEEE round to nearest even, overflow to inf
            np.copyto(out, h16)
            return
        np.copyto(out, p32)
        return
    with np.errstate(invalid="ignore"):  # 0 * inf in formats that overflow positions
        np.multiply(slopes[:, None], pos[None, :], out=out)
    round_into(out, fp, out, scratch)
    round_into(out, fb, out, scratch)


def _fits32(fmt: str) -> bool:
    """Every value of ``fmt`` is a float32 value."""
    f = get_format(fmt)
    return f.significand_bits <= 24 and f.max_finite <= 2.0**128 and f.min_exponent - f.significand_bits >= -150


def _resolve_slopes(recipe: Recipe, num_heads: int, slopes: npt.ArrayLike | None) -> npt.NDArray[np.float64]:
    if slopes is None:
        return stored_slopes(recipe, num_heads)
    s = as_float64(slopes, odd=False, name="slopes").reshape(-1)  # round_to(slopes, "float64"), errors naming slopes
    if s.shape != (num_heads,):
        raise ValueError(f"slopes has {s.size} values for num_heads={num_heads}")
    if not (np.isfinite(s) & (s > 0)).all():
        raise ValueError(f"slopes must be positive and finite, got {float(s[~(np.isfinite(s) & (s > 0))][0])!r}")
    return round_to(s, recipe.slope_format)


def alibi_bias(
    recipe: str | Recipe,
    num_heads: int,
    length: int,
    dtype: str = "bfloat16",
    *,
    slopes: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """Stored bias of the query at ``length - 1`` for keys ``j = 0..length-1``, shape (heads, length).

    Key form: ``round(slope * j)`` (a row of Bloom's tensor).  Relative form:
    ``-round(slope * (length - 1 - j))``.  ``slopes`` overrides the recipe's
    slope rule (they are still rounded to ``slope_format``), e.g. to feed
    the float32 slopes a torch model computed.  Whole-array; use
    :func:`audit_alibi` for long contexts.

    >>> alibi_bias("cast-output", 1, 260, "bf16")[0, 255:].tolist()  # slope 1/256: 257/256 -> 1
    [0.99609375, 1.0, 1.0, 1.0078125, 1.015625]
    >>> alibi_bias("relative-cast", 1, 4, "bf16")[0].tolist()
    [-0.01171875, -0.0078125, -0.00390625, 0.0]
    """
    r = get_recipe(recipe, dtype)
    length = check_length(length)
    s = _resolve_slopes(r, check_heads(num_heads), slopes)
    m = _magnitudes(r, s, np.arange(length, dtype=np.float64))
    return m if r.form == "key" else 0.0 - m[:, ::-1]


def alibi_bias_torch(
    recipe: str | Recipe,
    num_heads: int,
    length: int,
    dtype: str = "bfloat16",
    *,
    slopes: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """:func:`alibi_bias` computed with real torch kernels (the second engine).

    Key form runs Bloom's ops on an all-ones mask: int64 key positions
    ``0..L-1``, ``slopes[..., None] * positions``, ``.to(dtype)``.  Relative form builds
    ``arange(L - 1, -1, -1)`` distances (int64, cast to the position dtype),
    multiplies and casts.  The recipe's slope, position and product formats
    must agree (a torch multiply has one dtype); slopes come from
    :func:`stored_slopes` unless given.

    >>> b = alibi_bias_torch("cast-output", 8, 300, "bf16")
    >>> bool((b == alibi_bias("cast-output", 8, 300, "bf16")).all())
    True
    """
    import torch

    r = get_recipe(recipe, dtype)
    length = check_length(length)
    n = check_heads(num_heads)
    if len({r.slope_format, r.position_format, r.product_format}) != 1:
        raise ValueError(f"recipe {r.name!r}: torch multiplies in one dtype; slope, position and product formats differ")
    compute, out = get_format(r.product_format).torch_dtype, get_format(r.bias_format).torch_dtype
    if compute is None or out is None:
        raise ValueError(f"recipe {r.name!r}: torch has no dtype for {r.product_format} or {r.bias_format}")
    s = torch.from_numpy(_resolve_slopes(r, n, slopes)).to(compute)
    if r.form == "key":  # int64 key positions 0..L-1 (how an all-ones attention mask numbers the keys)
        pos = torch.arange(length, dtype=torch.int64)[None, None, :]
    else:  # int64 distances L-1..0 from the last query
        pos = torch.arange(length - 1, -1, -1, dtype=torch.int64)[None, None, :]
    if compute != torch.float32:
        pos = pos.to(compute)  # the position stage in the model dtype
    bias = (s[..., None] * pos).reshape(n, length).to(out)
    if r.form == "relative":
        bias = -bias
    return bias.to(torch.float64).numpy()
