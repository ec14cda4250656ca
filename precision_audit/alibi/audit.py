"""The ALiBi audit: every head's stored biases streamed in chunks (:mod:`.stream`), reduced into rows per
context length; and the same metrics for a bias array already in memory (:func:`stored_bias_metrics`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import check_callable, check_int, check_lengths, check_names
from ..formats import Format, as_float64, get_format
from .recipes import FORMS, Recipe, _magnitudes_into, _resolve_slopes, recipe
from .rows import AlibiRow, HeadRow
from .slopes import alibi_slopes, check_heads
from .stream import count_pass, prob_change_pass

__all__ = ["CHUNK_ELEMENTS", "MAX_ALIBI_LENGTH", "audit_alibi", "stored_bias_metrics"]

MAX_ALIBI_LENGTH = 2**26  # 2**26 tokens x 64 heads already take minutes
CHUNK_ELEMENTS = 2**19  # heads x positions per chunk by default: a few tens of MB of temporaries


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


def _plan(recipe: Recipe, label: str, lens: tuple[int, ...], n: int, slopes: npt.ArrayLike | None,
          width: int) -> _Plan:
    """One (recipe, label) job of :func:`audit_alibi` (arguments checked there)."""
    s_used = _resolve_slopes(recipe, n, slopes)
    s_exact = alibi_slopes(n) if slopes is None else as_float64(slopes, odd=False, name="slopes").reshape(-1)
    sign = 1.0 if recipe.form == "key" else -1.0
    return _Plan(recipe, label, lens, n, s_used, s_exact, sign, width)


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
    num_heads: int,
    recipes: str | Recipe | Iterable[str | Recipe],
    lengths: int | Iterable[int],
    dtypes: str | Format | Iterable[str | Format] | None = None,
    *,
    slopes: npt.ArrayLike | None = None,
    chunk: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[AlibiRow]:
    """Audit the ALiBi bias of ``num_heads`` heads: one row per (dtype, recipe, length), in that order.

    ``recipes``: preset names (:func:`~.recipes.recipe` builds each for every
    model dtype of ``dtypes``, default bfloat16) or :class:`Recipe` objects
    (their formats are fixed; the dtype only labels the row, by default their
    ``bias_format``).  Per (recipe, dtype), two chunked passes over ``k = 0 ..
    max(lengths) - 1`` serve every length (prefix reductions); the second
    needs each length's log-sum-exp from the first.  ``chunk``: positions per
    chunk (default ``2**19 // num_heads``); memory stays near ``chunk`` x
    heads values per array.  ``progress`` is called after each chunk with the
    number of positions it held (``2 * max(lengths)`` per (recipe, dtype)).
    ``slopes`` (float64, one per head) replaces the reference slope rule,
    e.g. with another model's schedule: they become the reference and are
    rounded to the recipe's ``slope_format``.

    >>> rows = audit_alibi(8, "lowp", [256, 512], "bf16")
    >>> [(r.length, r.min_distinct_biases, r.max_run) for r in rows]
    [(256, 256, 1), (512, 385, 3)]
    >>> rows[1].heads[0].max_prob_change < 1e-2
    True
    """
    n = check_heads(num_heads)
    items = check_names(recipes, "recipes", "ALiBi recipe name or Recipe", Recipe)
    fmts: list[str | None] = [None] if dtypes is None else list(dict.fromkeys(
        get_format(d).name for d in check_names(dtypes, "dtypes", "format name", Format)))
    lens = tuple(check_lengths(lengths, limit=MAX_ALIBI_LENGTH, why="the ALiBi audit streams L x heads biases"))
    width = max(1, CHUNK_ELEMENTS // n) if chunk is None else check_int(chunk, "chunk", minimum=1,
                                                                         maximum=MAX_ALIBI_LENGTH)
    check_callable(progress, "progress")
    jobs = []
    for d in fmts:
        for item in items:
            r = recipe(item, "bfloat16" if d is None else d)
            jobs.append((r, d if d is not None else r.bias_format if isinstance(item, Recipe) else "bfloat16"))
    plans = [_plan(r, label, lens, n, slopes, width) for r, label in jobs]  # every slope checked before any pass
    rows = []
    for plan in plans:
        with np.errstate(invalid="ignore", over="ignore"):
            found = count_pass(plan, progress)
            prob_change_pass(plan, found, progress)
        rows += [_audit_row(plan, L, found[L]) for L in plan.lengths]
    return rows


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
