"""ALiBi auditor: slopes, bias recipes, bias collisions and their effect on attention.

ALiBi (Press et al., 2022) adds ``-slope_h * (i - j)`` to the attention logit
of query ``i`` and key ``j`` in head ``h``.  When the bias is built or stored
in bfloat16/float16, neighbouring keys get the same bias and large biases lose
the slope.  This module runs each code path (a :class:`Recipe`) stage by stage,
rounding once per stage with :func:`~precision_audit.formats.round_to`, and
measures per head and context length what survives.

What is audited.  The query is the last one, at position ``L - 1``; it sees
all ``L`` keys, so its biases are the worst case of a length-``L`` context.

* ``form="key"`` (Bloom's ``build_alibi_tensor``): the stored bias of key
  ``j`` is ``round(slope * j)`` for ``j = 0 .. L-1``; softmax is invariant to
  the shift ``-slope * (L-1)``, so the code drops it.  The rounding spacing
  then grows with the *absolute* key position: the nearest keys of a late
  query are the ones that collide.
* ``form="relative"``: the stored penalty for distance ``d = i - j`` is
  ``round(slope * d)`` for ``d = 0 .. L-1`` (bias ``-penalty``); the nearest
  keys keep the finest spacing.

Both forms store the same ``L`` magnitudes ``round(slope * k)``, ``k = 0 ..
L-1``, so collision counts agree; the attention effect differs.

>>> alibi_slopes(8).tolist()
[0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
>>> r = audit_alibi(8192, 8, "cast-output", "bfloat16")[0]
>>> r.min_distinct_biases, r.max_run, r.order_inversions
(897, 33, 0)
>>> audit_alibi(8192, 8, "fp32", "bfloat16")[0].min_distinct_biases
8192
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._alibi_stream import count_pass, prob_change_pass
from ._common import ArgumentTypeError, Row, check_callable, check_int, check_length, check_lengths, describe
from .formats import _as_float64, _bfloat16_from_float32, _round_into, get_format, round_to

MAX_HEADS = 4096  # Bloom-176B has 112
MAX_ALIBI_LENGTH = 2**26  # 2**26 tokens x 64 heads already take minutes

__all__ = [
    "FORMS",
    "RECIPES",
    "SLOPE_RULES",
    "AlibiAudit",
    "HeadAudit",
    "Recipe",
    "alibi_bias",
    "alibi_bias_torch",
    "alibi_slopes",
    "audit_alibi",
    "bloom_slopes",
    "get_recipe",
    "recipe_names",
    "stored_slopes",
]

FORMS = ("key", "relative")
SLOPE_RULES = ("exact", "bloom")
CHUNK_ELEMENTS = 2**19  # heads x positions per chunk: a few tens of MB of temporaries


# --------------------------------------------------------------------------
# Slopes


def _check_heads(num_heads: Any) -> int:
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)):
        raise ValueError(f"num_heads {num_heads!r} is not an integer")
    if num_heads < 1:
        raise ValueError(f"num_heads {num_heads} must be at least 1")
    if num_heads > MAX_HEADS:
        raise ValueError(f"num_heads {num_heads} exceeds {MAX_HEADS}")
    return int(num_heads)


def _slope_exponents(num_heads: int) -> list[tuple[int, int]]:
    """Slope of each head as ``2 ** (-8 * a / b)``, returned as ``(a, b)`` pairs.

    Powers of two: ``a = h + 1, b = n``.  Other counts (the ALiBi reference
    ``get_slopes``): the slopes of the closest lower power of two ``c``, then
    ``get_slopes(2c)[0::2][: n - c]``, i.e. ``a = 2t + 1, b = 2c``.
    """
    n = _check_heads(num_heads)
    c = 1 << (n.bit_length() - 1)  # closest power of two <= n
    first = [(h + 1, c) for h in range(c)]
    extra = [(2 * t + 1, 2 * c) for t in range(n - c)]
    return first + extra


def alibi_slopes(num_heads: int) -> npt.NDArray[np.float64]:
    """The ALiBi slopes in float64 (the reference rule for any head count).

    The exponent ``-8a/b`` is a dyadic rational, exact in float64, so each
    slope is ``2.0 ** exponent`` rounded once.

    >>> alibi_slopes(2).tolist()
    [0.0625, 0.00390625]
    >>> [round(float(s), 6) for s in alibi_slopes(3)]
    [0.0625, 0.003906, 0.25]
    >>> alibi_slopes(0)
    Traceback (most recent call last):
    ...
    ValueError: num_heads 0 must be at least 1
    """
    return np.array([2.0 ** (-8.0 * a / b) for a, b in _slope_exponents(num_heads)])


def _round_f32(num: int, shift: int) -> float:
    """``num * 2**shift`` (num > 0) rounded to 24 significant bits, ties to even."""
    drop = num.bit_length() - 24
    if drop > 0:
        q, r = divmod(num, 1 << drop)
        half = 1 << (drop - 1)
        if r > half or (r == half and q & 1):
            q += 1
        num, shift = q, shift + drop
    return math.ldexp(num, shift)


def bloom_slopes(num_heads: int) -> npt.NDArray[np.float64]:
    """Slopes as Bloom's ``_get_alibi_slopes`` defines them, in float32.

    The base ``2 ** -(8 / c)`` is computed in Python float64 and stored as a
    float32 tensor (rounded once); each slope is ``base ** power`` in float32,
    here correctly rounded from the exact power.  torch's vectorised ``pow``
    (SLEEF, 1-ulp accuracy) can differ from this by one float32 ulp for some
    heads (e.g. head 14 of 32..63 heads); pass torch's slopes to
    :func:`alibi_bias` to reproduce a tensor bit for bit.

    >>> bloom_slopes(8).tolist() == alibi_slopes(8).tolist()
    True
    >>> float(bloom_slopes(12)[8]) == float(np.float32(2 ** -0.5))
    True
    """
    out = []
    for a, b in _slope_exponents(num_heads):
        # b is a power of two, so -8/b is a dyadic rational, exact in float64: the float64 base is
        # 2.0 ** (-8/b) rounded once by the power, then rounded again to float32 (the stored tensor).
        base = 2.0 ** (-8.0 / b)
        m, e = math.frexp(float(np.float32(base)))  # base = m * 2**e exactly
        mant, exp = int(m * 2**24), e - 24
        out.append(_round_f32(mant**a, exp * a))
    return np.array(out)


SLOPE_FUNCTIONS: dict[str, Callable[[int], npt.NDArray[np.float64]]] = {
    "exact": alibi_slopes,
    "bloom": bloom_slopes,
}


# --------------------------------------------------------------------------
# Recipes


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


def recipe_names() -> list[str]:
    """Names of the preset recipes.

    >>> recipe_names()
    ['lowp', 'cast-output', 'relative-cast', 'fp32']
    """
    return list(RECIPES)


def get_recipe(name: str | Recipe, dtype: str = "bfloat16") -> Recipe:
    """The preset ``name`` for model dtype ``dtype`` (a Recipe passes through).

    >>> get_recipe("cast-output", "fp16").bias_format
    'float16'
    >>> get_recipe("fp32", "fp16").bias_format
    'float32'
    >>> get_recipe("bloom")
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


def stored_slopes(recipe: Recipe, num_heads: int) -> npt.NDArray[np.float64]:
    """The slopes a recipe multiplies with (exact values of ``slope_format``).

    >>> stored_slopes(get_recipe("lowp", "bf16"), 12)[8:].tolist()
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
            _bfloat16_from_float32(p32, out, scratch[1].reshape(-1).view(np.float32)[:n].reshape(out.shape))
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
    _round_into(out, fp, out, scratch)
    _round_into(out, fb, out, scratch)


def _fits32(fmt: str) -> bool:
    """Every value of ``fmt`` is a float32 value."""
    f = get_format(fmt)
    return f.significand_bits <= 24 and f.max_finite <= 2.0**128 and f.min_exponent - f.significand_bits >= -150


def _resolve_slopes(recipe: Recipe, num_heads: int, slopes: npt.ArrayLike | None) -> npt.NDArray[np.float64]:
    if slopes is None:
        return stored_slopes(recipe, num_heads)
    s = _as_float64(slopes, odd=False, name="slopes").reshape(-1)  # round_to(slopes, "float64"), errors naming slopes
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
    s = _resolve_slopes(r, _check_heads(num_heads), slopes)
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
    n = _check_heads(num_heads)
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


# --------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class HeadAudit(Row):
    """Metrics of one head at one context length.

    * ``slope``: the float64 reference slope; ``stored_slope``: the one used.
    * ``distinct_biases``: different stored values among the ``length``
      biases (all NaNs count as one value).
    * ``max_run``: most consecutive keys (adjacent positions or distances)
      sharing one stored bias.
    * ``max_abs_error``: largest ``|stored - slope * k|`` (float64 reference
      bias); ``inf`` if any bias is inf or NaN.
    * ``order_inversions``: adjacent pairs ``(k, k+1)`` whose stored
      magnitudes satisfy ``m[k+1] < m[k]`` although the exact ones increase,
      i.e. a key one step farther from the query is penalised strictly less.
      Pairs with a NaN are not ordered and are not counted (see
      ``nonfinite_biases``).  Every stage is a monotone rounding, so presets
      give 0: rounding merges neighbours, it never swaps them.
    * ``nonfinite_biases``: biases that overflowed to inf or NaN.
    * ``max_prob_change``: for the query at ``length - 1`` with equal content
      scores (logits = bias only), ``max_j |p_j - q_j|`` where ``p`` is the
      softmax of the stored bias and ``q`` of the float64 reference bias, both
      evaluated in float64; NaN if the softmax is undefined (a ``+inf`` or NaN
      bias, as torch would give).
    """

    head: int
    slope: float
    stored_slope: float
    distinct_biases: int
    max_run: int
    max_abs_error: float
    order_inversions: int
    nonfinite_biases: int
    max_prob_change: float

    def __post_init__(self) -> None:
        if self.head < 0:
            raise ValueError(f"head {self.head} must be >= 0")
        if self.distinct_biases < 1 or self.max_run < 1:
            raise ValueError(f"distinct_biases {self.distinct_biases} and max_run {self.max_run} must be >= 1")


@dataclass(frozen=True)
class AlibiAudit(Row):
    """ALiBi metrics of one (recipe, dtype, length): per head and summarised.

    ``dtype`` is the model dtype asked for, ``bias_dtype`` the format the
    bias is stored in (float32 for the ``fp32`` recipe).  Summary over heads:
    ``min_distinct_biases`` (and ``distinct_fraction`` = it / length),
    ``max_run``, ``max_abs_error`` and ``max_prob_change`` (maxima; NaN if any
    head's is NaN), ``order_inversions`` and ``nonfinite_biases`` (totals).
    """

    recipe: str
    dtype: str
    bias_dtype: str
    form: str
    length: int
    num_heads: int
    min_distinct_biases: int
    distinct_fraction: float
    max_run: int
    max_abs_error: float
    order_inversions: int
    nonfinite_biases: int
    max_prob_change: float
    heads: tuple[HeadAudit, ...]

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form {self.form!r} is not one of {', '.join(FORMS)}")
        if len(self.heads) != self.num_heads:
            raise ValueError(f"heads holds {len(self.heads)} entries for num_heads={self.num_heads}")
        if not 1 <= self.min_distinct_biases <= self.length:
            raise ValueError(f"min_distinct_biases {self.min_distinct_biases} not in 1..{self.length}")


# --------------------------------------------------------------------------
# The streaming engine


def _chunks(stop: int, width: int) -> Iterable[tuple[int, int]]:
    for c0 in range(0, stop, width):
        yield c0, min(c0 + width, stop)


@dataclass(frozen=True)
class _Plan:
    """What both passes share: the recipe, the lengths, the slopes and the chunking."""

    recipe: Recipe
    label: str
    lengths: tuple[int, ...]
    num_heads: int
    s_used: npt.NDArray[np.float64]  # slopes the recipe multiplies with
    s_exact: npt.NDArray[np.float64]  # reference slopes
    sign: float  # logit = sign * magnitude: +1 key form, -1 relative form
    width: int  # positions per chunk

    def chunks(self) -> Iterable[tuple[int, int]]:
        return _chunks(self.lengths[-1], self.width)

    def stored_into(self, k: npt.NDArray[np.float64], out: npt.NDArray[np.float64],
                    scratch: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]) -> None:
        _magnitudes_into(self.recipe, self.s_used, k, out, scratch)


def _plan(lengths: int | Iterable[int], num_heads: int, recipe: str | Recipe, dtype: str | None,
          slopes: npt.ArrayLike | None, chunk_elements: int) -> _Plan:
    """Validate :func:`audit_alibi`'s arguments."""
    r = get_recipe(recipe, "bfloat16" if dtype is None else dtype)
    label = get_format(dtype).name if dtype is not None else r.bias_format if isinstance(recipe, Recipe) else "bfloat16"
    lens = check_lengths(lengths, limit=MAX_ALIBI_LENGTH, why="the ALiBi audit streams L x heads biases")
    n = _check_heads(num_heads)
    chunk_elements = check_int(chunk_elements, "chunk_elements", minimum=1, maximum=2**30)
    s_used = _resolve_slopes(r, n, slopes)
    s_exact = alibi_slopes(n) if slopes is None else _as_float64(slopes, odd=False, name="slopes").reshape(-1)
    sign = 1.0 if r.form == "key" else -1.0
    return _Plan(r, label, tuple(lens), n, s_used, s_exact, sign, max(1, chunk_elements // n))


def _audit_row(plan: _Plan, L: int, f: Any) -> AlibiAudit:
    """One length's :class:`AlibiAudit` from its per-head totals."""
    r = plan.recipe
    heads = tuple(
        HeadAudit(
            head=h, slope=float(plan.s_exact[h]), stored_slope=float(plan.s_used[h]),
            distinct_biases=int(f.distinct[h]), max_run=int(f.run[h]),
            max_abs_error=float(f.err[h]), order_inversions=int(f.inversions[h]),
            nonfinite_biases=int(f.nonfinite[h]), max_prob_change=float(f.dp[h]),
        )
        for h in range(plan.num_heads)
    )
    dmin = int(f.distinct.min())
    return AlibiAudit(
        recipe=r.name, dtype=plan.label, bias_dtype=r.bias_format, form=r.form,
        length=L, num_heads=plan.num_heads, min_distinct_biases=dmin, distinct_fraction=dmin / L,
        max_run=int(f.run.max()), max_abs_error=float(f.err.max()),
        order_inversions=int(f.inversions.sum()), nonfinite_biases=int(f.nonfinite.sum()),
        max_prob_change=float(np.max(f.dp)), heads=heads,
    )


def audit_alibi(
    lengths: int | Iterable[int],
    num_heads: int,
    recipe: str | Recipe = "cast-output",
    dtype: str | None = None,
    *,
    slopes: npt.ArrayLike | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
    progress: Callable[[int], None] | None = None,
) -> list[AlibiAudit]:
    """Audit the ALiBi bias of ``recipe`` in ``dtype``; one row per length.

    Two chunked passes over ``k = 0 .. max(lengths) - 1`` serve every length
    (prefix reductions); the second needs each length's log-sum-exp from the
    first.  Memory stays near ``chunk_elements`` values per array.
    ``progress`` is called after each chunk with the number of positions it
    held (``2 * max(lengths)`` in all).  ``slopes``
    (float64, one per head) replaces the reference slope rule, e.g. with
    another model's schedule: they become the reference and are rounded to
    the recipe's ``slope_format``.  ``dtype`` (the model dtype; default
    bfloat16) picks the preset's formats; for a :class:`Recipe` it is only the
    row's label and defaults to the recipe's ``bias_format``.

    >>> rows = audit_alibi([256, 512], 8, "lowp", "bf16")
    >>> [(r.length, r.min_distinct_biases, r.max_run) for r in rows]
    [(256, 256, 1), (512, 385, 3)]
    >>> rows[1].heads[0].max_prob_change < 1e-2
    True
    """
    check_callable(progress, "progress")
    plan = _plan(lengths, num_heads, recipe, dtype, slopes, chunk_elements)
    with np.errstate(invalid="ignore", over="ignore"):
        found = count_pass(plan, progress)
        prob_change_pass(plan, found, progress)
    return [_audit_row(plan, L, found[L]) for L in plan.lengths]


# --------------------------------------------------------------------------
# Metrics of a bias array already in memory


@dataclass(frozen=True)
class _StoredPlan:
    """A :class:`~precision_audit._alibi_stream.StreamPlan` over magnitudes already in memory (heads, L)."""

    stored: npt.NDArray[np.float64]
    lengths: tuple[int, ...]
    num_heads: int
    s_exact: npt.NDArray[np.float64]
    sign: float
    width: int

    def chunks(self) -> Iterable[tuple[int, int]]:
        return _chunks(self.lengths[-1], self.width)

    def stored_into(self, k: npt.NDArray[np.float64], out: npt.NDArray[np.float64],
                    scratch: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]) -> None:
        np.copyto(out, self.stored[:, int(k[0]):int(k[0]) + k.size])


def stored_bias_metrics(stored: npt.ArrayLike, slopes: npt.ArrayLike | None = None,
                        form: str = "key") -> dict[str, Any]:
    """The :class:`AlibiAudit` summary metrics of stored bias magnitudes held in memory, shape (heads, L).

    ``stored[h, k]`` is head ``h``'s stored magnitude at ``k = 0..L-1`` (key
    form: the bias of key ``k``; relative form: the penalty for distance
    ``k``), measured against the exact ``slope_h * k`` (``slopes``: float64,
    one per head; default :func:`alibi_slopes`).  The array is one chunk for
    :func:`audit_alibi`'s own tallies, so the definitions are the auditor's:
    for a tensor other code built (transformers' builders,
    :mod:`precision_audit.hf.alibi`).  Returns ``min_distinct_biases``,
    ``distinct_fraction``, ``max_run``, ``max_abs_error``,
    ``order_inversions``, ``nonfinite_biases``, ``max_prob_change``.

    >>> m = stored_bias_metrics(alibi_bias("cast-output", 8, 8192, "bf16"))
    >>> m["min_distinct_biases"], m["max_run"], m["order_inversions"]
    (897, 33, 0)
    """
    mag = np.asarray(stored, dtype=np.float64)
    if mag.ndim != 2 or mag.size == 0:
        raise ValueError(f"stored biases of shape {mag.shape} must be (heads, length) with both >= 1")
    if form not in FORMS:
        raise ValueError(f"form {form!r} is not one of {', '.join(FORMS)}")
    n, L = mag.shape
    s = alibi_slopes(n) if slopes is None else np.asarray(slopes, dtype=np.float64).reshape(-1)
    if s.shape != (n,):
        raise ValueError(f"{s.size} slopes given for {n} heads")
    plan = _StoredPlan(mag, (L,), n, s, 1.0 if form == "key" else -1.0, min(L, max(1, 2**19 // n)))
    with np.errstate(invalid="ignore", over="ignore"):  # infinite biases: inf - inf, exp overflow (as audit_alibi)
        found = count_pass(plan, None)
        prob_change_pass(plan, found, None)
    f = found[L]
    dmin = int(f.distinct.min())
    return dict(min_distinct_biases=dmin, distinct_fraction=dmin / L, max_run=int(f.run.max()),
                max_abs_error=float(f.err.max()), order_inversions=int(f.inversions.sum()),
                nonfinite_biases=int(f.nonfinite.sum()), max_prob_change=float(np.max(f.dp)))
