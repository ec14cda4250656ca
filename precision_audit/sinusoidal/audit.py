"""The streaming auditor: one pass over positions per (recipe, dtype) serves every length (prefix
reductions), then each length's row: duplicates, errors, nearest neighbours and the decay curve."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .._common import Row, check_callable, check_int, check_lengths, check_names
from ..formats import Format, get_format, round_to
from .duplicates import _duplicate_activation, _RowHashes
from .neighbours import _NeighbourSearch, _WindowNeighbours
from .recipes import DEFAULT_BASE, Array, Recipe, _check_base, _check_dim, frequencies, get_recipe
from .tables import _StoredRows, decay_exact

MAX_LAG = 4096  # largest nn_window / max_lag
MAX_SINUSOIDAL_LENGTH = 2**24  # O(L) memory and O(L d) work per recipe and dtype

__all__ = ["MAX_LAG", "MAX_SINUSOIDAL_LENGTH", "SinusoidalRow", "audit_sinusoidal"]


@dataclass(frozen=True)
class SinusoidalRow(Row):
    """Audit of one (recipe, dtype, context length).

    - ``distinct_rows``: how many different stored rows the L positions have.
    - ``duplicate_rows``: count of positions p < L for which some other q < L
      has an identical stored row (nan equals nan); exact (row hashing, every
      hash collision verified element by element).
    - ``nonfinite_rows``: positions whose row holds inf/nan (overflowed positions);
      metrics that they poison are reported as None.
    - ``max_abs_error``: max over positions and columns of |stored - exact|.
    - ``exact_nn_distance``: min over p of the exact distance to p's nearest other
      position; equals ``min_{1<=k<L} |PE(0)-PE(k)|`` (translation invariance).
    - ``min_nn_distance``: the same for the stored rows (0 when rows collide).
    - ``nn_shrink``: max over p of ``1 - nn_stored(p) / nn_exact(p)`` (1.0: some
      position lost its identity; negative: every neighbour moved away).
      The stored nearest neighbour is searched among p +- 1 .. p +- ``nn_window``.
    - ``nn_certified``: True when ``min_nn_distance`` and ``nn_shrink`` are
      provably the values over ALL other positions: either some rows are
      duplicates (0 and 100 % are then the global extremes), or the window holds
      every position's true nearest stored neighbour.  The search: first the
      lags 1 .. ``nn_window``; then, with e(p) = |S(p) - PE(p)| and D(k) =
      |PE(0) - PE(k)| (exact, translation invariant), any q = p +- k has
      |S(p)-S(q)| >= D(k) - e(p) - max e, so only lags with D(k) < max_p nn(p) +
      2 max e can hold a nearer neighbour; those are searched too when they
      number few enough (``FAR_SEARCH_BUDGET`` on lags x length x dim), which
      then proves the result.  Far lags matter for small dim (d = 2: k = 710 ~
      113 * 2pi) and for large errors.  When False the NN fields are
      window-restricted (the distance an upper bound).
    - ``decay_max_dev`` / ``decay_max_dev_lag``: max over lags k = 0 .. ``max_lag``
      (< L) of |mean_p S(p).S(p+k) - sum_i cos(k w_i)| and the lag attaining it
      (the exact decay curve has C(0) = dim/2).
    """

    recipe: str
    dtype: str
    length: int
    dim: int
    base: float
    distinct_rows: int
    duplicate_rows: int
    nonfinite_rows: int
    max_abs_error: float
    exact_nn_distance: float
    min_nn_distance: float
    nn_shrink: float
    nn_window: int
    nn_certified: bool
    decay_max_dev: float
    decay_max_dev_lag: int
    max_lag: int

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"length {self.length} must be at least 1")
        _check_dim(self.dim)
        for name in ("distinct_rows", "duplicate_rows", "nonfinite_rows"):
            v = getattr(self, name)
            if not 0 <= v <= self.length:
                raise ValueError(f"{name} {v} must lie in 0 .. length {self.length}")
        if self.distinct_rows < 1:
            raise ValueError(f"distinct_rows {self.distinct_rows} must be at least 1")
        if self.nn_window < 1 or self.max_lag < 0:
            raise ValueError(f"nn_window {self.nn_window} must be >= 1 and max_lag {self.max_lag} >= 0")

    @property
    def duplicate_fraction(self) -> float:
        """Share of positions whose row is not unique."""
        return self.duplicate_rows / self.length


class _ErrorTally:
    """Pass 1: each row's ``|S - E|_2``, and per length the max ``|S - E|`` and the non-finite rows below it."""

    def __init__(self, n: int, lengths: tuple[int, ...]) -> None:
        self.lengths = lengths
        self.err_2 = np.empty(n)  # |S - E|_2 per row
        self.max_err = np.zeros(len(lengths))  # max |S - E| over the rows below each length
        self.nonfinite = np.zeros(len(lengths), dtype=np.int64)  # non-finite rows below each length

    def add(self, a: int, S: Array, w64: Array) -> None:
        """Compare ``S``, the stored rows of positions ``a, a+1, ...``, with the exact ones."""
        b = a + len(S)
        ang = np.arange(a, b, dtype=np.float64)[:, None] * w64[None, :]
        diff = S - np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
        err_inf = np.max(np.abs(diff), axis=1)
        self.err_2[a:b] = np.sqrt(np.sum(diff * diff, axis=1))
        nonfinite = ~np.all(np.isfinite(S), axis=1)
        for j, L in enumerate(self.lengths):  # prefix reductions: rows a .. min(b, L) - 1
            if L > a:
                top = min(b, L) - a
                self.max_err[j] = max(self.max_err[j], np.max(err_inf[:top]))
                self.nonfinite[j] += int(np.count_nonzero(nonfinite[:top]))


class _LagSums:
    """Pass 1: per length L and lag k <= max_lag, the sum over p < L - k of ``S(p) . S(p+k)`` (the decay curve)."""

    def __init__(self, lengths: tuple[int, ...], max_lag: int) -> None:
        self.lengths, self.max_lag = np.asarray(lengths), max_lag
        self.sums = np.zeros((len(lengths), max_lag + 1))

    def add(self, a: int, b: int, e: int, S: Array) -> None:
        """Pairs (p, p+k) for p in [a, b): ``S`` holds the rows of positions a .. e-1."""
        for k in range(0, min(self.max_lag, e - a - 1) + 1):
            m = min(b, e - k) - a
            cs = np.cumsum(np.einsum("ij,ij->i", S[:m], S[k : k + m]))
            hi = np.minimum(a + m, self.lengths - k) - a  # p < L - k for each length L
            ok = hi > 0
            self.sums[ok, k] += cs[hi[ok] - 1]

    def deviation(self, j: int, L: int, exact: Array, nonfinite: int) -> tuple[float, int]:
        """``decay_max_dev`` and ``decay_max_dev_lag`` of the ``j``-th length ``L`` against the exact curve."""
        if nonfinite:
            return math.nan, 0
        nl = min(self.max_lag, L - 1)
        means = self.sums[j, : nl + 1] / (L - np.arange(nl + 1))
        devs = np.abs(means - exact[: nl + 1])
        dev_lag = int(np.argmax(devs))
        return float(devs[dev_lag]), dev_lag


@dataclass(frozen=True)
class _Settings:
    """One audit's fixed parameters."""

    lengths: tuple[int, ...]
    dim: int
    base: float
    window: int
    max_lag: int
    chunk: int


def _stream_pass(
    rows: _StoredRows, w64: Array, st: _Settings, progress: Callable[[int], None] | None
) -> tuple[_ErrorTally, _RowHashes, _WindowNeighbours, _LagSums]:
    """Pass 1 over positions 0 .. max(lengths) - 1, chunk by chunk, each chunk read with ``reach`` rows beyond it."""
    lmax = st.lengths[-1]
    reach = max(st.window, st.max_lag)
    errors, hashes = _ErrorTally(lmax, st.lengths), _RowHashes(lmax)
    near, lag_sums = _WindowNeighbours(lmax, st.window), _LagSums(st.lengths, st.max_lag)
    with np.errstate(invalid="ignore", over="ignore"):
        for a in range(0, lmax, st.chunk):
            b = min(a + st.chunk, lmax)
            e = min(b + reach, lmax)
            S = np.concatenate(rows(rows.pos[a:e]), axis=1)
            errors.add(a, S[: b - a], w64)
            hashes.add(a, S[: b - a])
            near.add(a, b, e, S)
            lag_sums.add(a, b, e, S)
            if progress is not None:
                progress(b - a)
    return errors, hashes, near, lag_sums


def _audit_one(
    rec: Recipe, dtype: str, st: _Settings, progress: Callable[[int], None] | None = None
) -> list[SinusoidalRow]:
    """Every length's row for one (recipe, dtype): the streaming pass, the duplicate classes, then per length
    the nearest-neighbour search and the decay deviation."""
    fm = rec.formats(dtype)
    w64 = frequencies(st.dim, st.base)
    rows = _StoredRows(fm, round_to(w64, fm["frequencies"]), st.lengths[-1])  # rounded positions made per slice
    errors, hashes, near, lag_sums = _stream_pass(rows, w64, st, progress)
    near.merge(st.lengths)  # one O(L) array left before the duplicate search
    act_sorted, firsts = _duplicate_activation(rows.pos, hashes.box, rows, st.chunk)  # frees the hashes midway
    search = _NeighbourSearch(near, rows, errors.err_2, st.dim, st.base, st.chunk)
    c_exact = decay_exact(st.dim, np.arange(st.max_lag + 1), base=st.base)
    out = []
    for j, L in enumerate(st.lengths):
        nonfin = int(errors.nonfinite[j])
        exact_nn, min_nn, shrink, certified = search.at(L, nonfin)
        dev, dev_lag = lag_sums.deviation(j, L, c_exact, nonfin)
        out.append(
            SinusoidalRow(
                recipe=rec.name,
                dtype=get_format(dtype).name,
                length=L,
                dim=st.dim,
                base=st.base,
                distinct_rows=int(np.searchsorted(firsts, L)),
                duplicate_rows=int(np.searchsorted(act_sorted, L)),
                nonfinite_rows=nonfin,
                max_abs_error=float(errors.max_err[j]) if nonfin == 0 else math.nan,
                exact_nn_distance=exact_nn,
                min_nn_distance=min_nn,
                nn_shrink=shrink,
                nn_window=st.window,
                nn_certified=certified,
                decay_max_dev=dev,
                decay_max_dev_lag=dev_lag,
                max_lag=st.max_lag,
            )
        )
    return out


def audit_sinusoidal(
    lengths: int | Iterable[int],
    dim: int = 512,
    dtypes: str | Format | Iterable[str | Format] = ("bfloat16", "float16"),
    recipes: str | Recipe | Iterable[str | Recipe] = ("lowp", "fp32"),
    *,
    base: float = DEFAULT_BASE,
    nn_window: int = 4,
    max_lag: int = 32,
    chunk: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[SinusoidalRow]:
    """Audit sinusoidal encodings: one :class:`SinusoidalRow` per (dtype, length, recipe).

    One streaming pass per (recipe, dtype) over positions up to the largest
    length yields every shorter length (prefix reductions); memory is
    ``O(chunk * dim + length)``.  ``progress`` is called after each chunk with
    the number of positions it held (``len(recipes) * len(dtypes) * max(lengths)``
    in all).  Rows come ordered by dtype, then length, then
    recipe, so the recipes of one context sit side by side.  A bare name
    (``dtypes="float16"``) is one name, as in :func:`~precision_audit.positions.audit_positions`.

    >>> r = audit_sinusoidal(4096, dim=128, dtypes=["float16"], recipes=["lowp", "fp32"])
    >>> [(x.recipe, x.duplicate_rows) for x in r]  # fp16: {2048, 2049}, then 511 triples {4m-1, 4m, 4m+1}
    [('lowp', 1535), ('fp32', 0)]
    """
    lens = check_lengths(lengths, limit=MAX_SINUSOIDAL_LENGTH, why="the sinusoidal audit keeps O(L) state")
    dim, base = _check_dim(dim), _check_base(base)
    recs = [get_recipe(r) for r in check_names(recipes, "recipes", "sinusoidal recipe", Recipe)]
    fmts = [get_format(d).name for d in check_names(dtypes, "dtypes", "format name", Format)]
    check_callable(progress, "progress")
    if isinstance(nn_window, bool) or not isinstance(nn_window, (int, np.integer)) or nn_window < 1:
        raise ValueError(f"nn_window {nn_window!r} must be a positive integer")
    if isinstance(max_lag, bool) or not isinstance(max_lag, (int, np.integer)) or max_lag < 0:
        raise ValueError(f"max_lag {max_lag!r} must be a non-negative integer")
    for name, value in (("nn_window", nn_window), ("max_lag", max_lag)):
        if value > MAX_LAG:  # the work grows as L * lags * dim
            raise ValueError(f"{name} {value} exceeds {MAX_LAG}")
    chunk = max(256, 2**19 // dim) if chunk is None else check_int(chunk, "chunk", minimum=1)
    st = _Settings(tuple(lens), dim, base, int(nn_window), int(max_lag), int(chunk))
    results: dict[tuple[str, int, str], SinusoidalRow] = {}
    for rec in recs:
        for f in fmts:
            try:
                for row in _audit_one(rec, f, st, progress):
                    results[(f, row.length, rec.name)] = row
            except MemoryError:
                raise MemoryError(f"sinusoidal audit of recipe {rec.name!r}, dtype {f}, length {lens[-1]}") from None
    return [results[(f, L, r.name)] for f in fmts for L in lens for r in recs]
