"""The ALiBi audit: every head's stored biases streamed in chunks (:mod:`.stream`), reduced into rows per
context length; and the same metrics for a bias array already in memory (:func:`stored_bias_metrics`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import check_callable, check_int, check_lengths
from ..formats import as_float64, get_format
from .recipes import FORMS, Recipe, _magnitudes_into, _resolve_slopes, get_recipe
from .rows import AlibiRow, HeadRow
from .slopes import alibi_slopes, check_heads
from .stream import count_pass, prob_change_pass

__all__ = ["CHUNK_ELEMENTS", "MAX_ALIBI_LENGTH", "audit_alibi", "stored_bias_metrics"]

MAX_ALIBI_LENGTH = 2**26  # 2**26 tokens x 64 heads already take minutes
CHUNK_ELEMENTS = 2**19  # heads x positions per chunk: a few tens of MB of temporaries


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
    n = check_heads(num_heads)
    chunk_elements = check_int(chunk_elements, "chunk_elements", minimum=1, maximum=2**30)
    s_used = _resolve_slopes(r, n, slopes)
    s_exact = alibi_slopes(n) if slopes is None else as_float64(slopes, odd=False, name="slopes").reshape(-1)
    sign = 1.0 if r.form == "key" else -1.0
    return _Plan(r, label, tuple(lens), n, s_used, s_exact, sign, max(1, chunk_elements // n))


def _audit_row(plan: _Plan, L: int, f: Any) -> AlibiRow:
    """One length's :class:`AlibiRow` from its per-head totals."""
    r = plan.recipe
    heads = tuple(
        HeadRow(
            head=h, slope=float(plan.s_exact[h]), stored_slope=float(plan.s_used[h]),
            distinct_biases=int(f.distinct[h]), max_run=int(f.run[h]),
            max_abs_error=float(f.err[h]), order_inversions=int(f.inversions[h]),
            nonfinite_biases=int(f.nonfinite[h]), max_prob_change=float(f.dp[h]),
        )
        for h in range(plan.num_heads)
    )
    dmin = int(f.distinct.min())
    return AlibiRow(
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
) -> list[AlibiRow]:
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



@dataclass(frozen=True)
class _StoredPlan:
    """A :class:`~precision_audit.alibi.stream.StreamPlan` over magnitudes already in memory (heads, L)."""

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
    """The :class:`AlibiRow` summary metrics of stored bias magnitudes held in memory, shape (heads, L).

    ``stored[h, k]`` is head ``h``'s stored magnitude at ``k = 0..L-1`` (key
    form: the bias of key ``k``; relative form: the penalty for distance
    ``k``), measured against the exact ``slope_h * k`` (``slopes``: float64,
    one per head; default :func:`alibi_slopes`).  The array is one chunk for
    :func:`audit_alibi`'s own tallies, so the definitions are the auditor's:
    for a tensor other code built (transformers' builders,
    :mod:`precision_audit.hf.alibi`).  Returns ``min_distinct_biases``,
    ``distinct_fraction``, ``max_run``, ``max_abs_error``,
    ``order_inversions``, ``nonfinite_biases``, ``max_prob_change``.

    >>> from precision_audit.alibi import alibi_bias
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
