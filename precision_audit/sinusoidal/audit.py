"""The streaming auditor: one pass over positions per (recipe, dtype) serves every length (prefix
reductions), then each length's row: duplicates, errors, nearest neighbours and the decay curve."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..checks import check_callable, check_int, check_lengths, check_names
from ..rows import Row
from ..formats import Format, get_format, round_to
from ..rope.audit import default_chunk, default_workers
from .duplicates import _duplicate_activation, _RowHashes
from .neighbours import _NeighbourSearch, _WindowNeighbours
from .recipes import DEFAULT_BASE, Array, Recipe, _check_base, _check_dim, frequencies, recipe
from .stream import Pass, _ErrorTally, _LagSums, stream
from .tables import _StoredRows, decay_exact, exact_distances

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


@dataclass(frozen=True)
class _Settings:
    """One audit's fixed parameters."""

    lengths: tuple[int, ...]
    dim: int
    base: float
    window: int
    max_lag: int
    chunk: int


_STATE_BUDGET = 2**29  # bytes of O(L) state (32 bytes per position) of the (recipe, dtype)s streamed together


def _passes(rec: Recipe, dtype: str, st: _Settings) -> Pass:
    """The stored rows and the empty reductions of one (recipe, dtype)."""
    fm = rec.formats(dtype)
    lmax = st.lengths[-1]
    rows = _StoredRows(fm, round_to(frequencies(st.dim, st.base), fm["frequencies"]), lmax)
    return Pass(rows, _ErrorTally(lmax, st.lengths), _RowHashes(lmax), _WindowNeighbours(lmax, st.window),
                _LagSums(st.lengths, st.max_lag))


def _exact_distances(st: _Settings, workers: int) -> Array:
    """D(k) = |PE(0) - PE(k)| for the lags k = 1 .. max(lengths) - 1, in blocks on ``workers`` threads."""
    kmax = st.lengths[-1] - 1
    if kmax < 1:
        return np.empty(0)
    step = 2**16
    blocks = [np.arange(a, min(a + step, kmax) + 1, dtype=np.float64) for a in range(1, kmax + 1, step)]
    if workers > 1 and len(blocks) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(lambda k: exact_distances(st.dim, k, base=st.base), blocks))
    else:
        parts = [exact_distances(st.dim, k, base=st.base) for k in blocks]
    return np.concatenate(parts)


def _rows_of(rec: Recipe, dtype: str, p: Pass, st: _Settings, dist: Callable[[], Array]) -> list[SinusoidalRow]:
    """Every length's row for one (recipe, dtype) after the streaming pass: the duplicate classes, then per
    length the nearest-neighbour search and the decay deviation."""
    p.near.merge(st.lengths)  # one O(L) array left before the duplicate search
    act_sorted, firsts = _duplicate_activation(p.rows.pos, p.hashes.box, p.rows, st.chunk)  # frees the hashes midway
    search = _NeighbourSearch(p.near, p.rows, p.errors.err_2, st.dim, st.base, st.chunk, dist())
    c_exact = decay_exact(st.dim, np.arange(st.max_lag + 1), base=st.base)
    out = []
    for j, L in enumerate(st.lengths):
        nonfin = int(p.errors.nonfinite[j])
        exact_nn, min_nn, shrink, certified = search.at(L, nonfin)
        dev, dev_lag = p.lag_sums.deviation(j, L, c_exact, nonfin)
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
                max_abs_error=float(p.errors.max_err[j]) if nonfin == 0 else math.nan,
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


def _audit_all(pairs: Sequence[tuple[Recipe, str]], st: _Settings, workers: int,
               progress: Callable[[int], None] | None) -> dict[tuple[str, int, str], SinusoidalRow]:
    """Every (recipe, dtype)'s rows: one streaming pass for as many of them as the state budget allows."""
    lmax = st.lengths[-1]
    per_batch = max(1, _STATE_BUDGET // (32 * lmax))
    w64 = frequencies(st.dim, st.base)
    results: dict[tuple[str, int, str], SinusoidalRow] = {}
    for i in range(0, len(pairs), per_batch):
        batch = pairs[i : i + per_batch]
        # the exact distances once per batch (once in all unless the O(L) state needs several batches), made
        # when the first search needs them: after the streaming pass, as memory allows
        made: dict[str, Array] = {}

        def dist() -> Array:
            if "dist" not in made:
                made["dist"] = _exact_distances(st, workers)
            return made["dist"]

        try:
            passes = [_passes(rec, f, st) for rec, f in batch]
            stream(passes, w64, lmax, st.chunk, st.window, st.max_lag, workers, progress)
            for (rec, f), p in zip(batch, passes):
                for row in _rows_of(rec, f, p, st, dist):
                    results[(f, row.length, rec.name)] = row
        except MemoryError:
            names = ", ".join(f"{rec.name!r}/{f}" for rec, f in batch)
            raise MemoryError(f"sinusoidal audit of {names}, length {lmax}") from None
        del passes
    return results


def audit_sinusoidal(
    dim: int,
    recipes: str | Recipe | Iterable[str | Recipe],
    lengths: int | Iterable[int],
    dtypes: str | Format | Iterable[str | Format] = ("bfloat16", "float16"),
    *,
    base: float = DEFAULT_BASE,
    nn_window: int = 4,
    max_lag: int = 32,
    chunk: int | None = None,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[SinusoidalRow]:
    """Audit sinusoidal encodings of width ``dim``: one :class:`SinusoidalRow` per (dtype, length, recipe).

    ``recipes``: preset names (:data:`~.recipes.RECIPES`) or :class:`Recipe` objects; a stage without a format
    runs in the target dtype, each of ``dtypes``.  One streaming pass over
    positions up to the largest length yields every
    shorter length (prefix reductions) for every (recipe, dtype) at once, the
    exact rows computed once per chunk for all of them (as many as fit in
    512 MB of O(length) state; the others in further passes); memory is
    ``O(chunk * dim + length)`` each (``chunk``: positions per chunk, default
    ``2**19 // dim``, at least 256).  Chunks run on ``workers`` threads
    (default: as the RoPE audit); the rows are the same to the bit for any
    number.  ``progress`` is called after each chunk of each (recipe, dtype)
    with the number of positions it held (``len(recipes) * len(dtypes) *
    max(lengths)`` in all).  Rows come ordered
    by dtype, then length, then recipe, so the recipes of one context sit side
    by side.  A bare name (``dtypes="float16"``) is one
    name, as in :func:`~precision_audit.positions.audit_positions`.

    >>> r = audit_sinusoidal(128, ["lowp", "fp32"], 4096, ["float16"])
    >>> [(x.recipe, x.duplicate_rows) for x in r]  # fp16: {2048, 2049}, then 511 triples {4m-1, 4m, 4m+1}
    [('lowp', 1535), ('fp32', 0)]
    """
    lens = check_lengths(lengths, limit=MAX_SINUSOIDAL_LENGTH, why="the sinusoidal audit keeps O(L) state")
    dim, base = _check_dim(dim), _check_base(base)
    recs = [recipe(r) for r in check_names(recipes, "recipes", "sinusoidal recipe", Recipe)]
    twice = next((r.name for i, r in enumerate(recs) if r.name in {q.name for q in recs[:i]}), None)
    if twice is not None:
        raise ValueError(f"recipes hold two recipes named {twice!r} (rows are keyed by recipe name)")
    fmts = [get_format(d).name for d in check_names(dtypes, "dtypes", "format name", Format)]
    check_callable(progress, "progress")
    if isinstance(nn_window, bool) or not isinstance(nn_window, (int, np.integer)) or nn_window < 1:
        raise ValueError(f"nn_window {nn_window!r} must be a positive integer")
    if isinstance(max_lag, bool) or not isinstance(max_lag, (int, np.integer)) or max_lag < 0:
        raise ValueError(f"max_lag {max_lag!r} must be a non-negative integer")
    for name, value in (("nn_window", nn_window), ("max_lag", max_lag)):
        if value > MAX_LAG:  # the work grows as L * lags * dim
            raise ValueError(f"{name} {value} exceeds {MAX_LAG}")
    chunk = default_chunk(dim) if chunk is None else check_int(chunk, "chunk", minimum=1)
    st = _Settings(tuple(lens), dim, base, int(nn_window), int(max_lag), int(chunk))
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1):
        raise ValueError(f"workers {workers!r} must be a positive integer")
    n_workers = default_workers() if workers is None else int(workers)
    results = _audit_all([(rec, f) for rec in recs for f in fmts], st, n_workers, progress)
    return [results[(f, L, r.name)] for f in fmts for L in lens for r in recs]
