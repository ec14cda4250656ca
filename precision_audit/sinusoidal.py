"""Absolute sinusoidal position encodings in low precision.

The encoding of Vaswani et al. (2017), section 3.5::

    PE(pos, 2i)   = sin(pos * w_i)        w_i = base ** (-2i / d),  base = 10000
    PE(pos, 2i+1) = cos(pos * w_i)        i = 0 .. d/2 - 1

is built by a *recipe*: five stages, each rounding exactly once into its own
format, like the real code path::

    positions   u_p  = round(p, F_pos)                  position_ids.to(dtype)
    frequencies v_i  = round(w_i, F_freq)               div_term / inv_freq buffer
    angles      a_pi = round(u_p * v_i, F_ang)          position * div_term
    trig        t    = round(sin(a_pi), F_trig)         torch.sin in the angle dtype
    table       s    = round(t, F_table)                the stored buffer / .to(dtype)

(``w_i`` is the float64 value of ``base ** (-2i/d)``; the product ``u_p * v_i``
is formed exactly in float64 whenever the significand bits of the position and
frequency formats sum to at most 53, true of every preset; sin and cos are
evaluated in float64 on the rounded angle, then rounded.)  A stage left as
``None`` uses the target dtype.  The presets:

=================  ==================================================================
``lowp``           every stage in the target dtype: ``torch.arange(L, dtype=dtype)``
                   times a ``div_term`` / ``inv_freq`` buffer that ``model.to(dtype)``
                   cast, ``sin``/``cos`` in that dtype (e.g. on-the-fly encodings)
``lowp-positions`` positions in the target dtype, the rest in float32, table cast
                   (isolates the position-id rounding)
``fp32``           the fix: positions, frequencies, angles, sin/cos in float32, only
                   the finished table cast to the target dtype (the Annotated
                   Transformer / HF ``pe`` buffer after ``model.half()``)
``fp64``           the floor: the exact encoding rounded once into the target dtype
=================  ==================================================================

Metrics per (recipe, dtype, length), see :class:`SinusoidalRow`, all measured
against the float64 oracle :func:`exact_table` (checked against mpmath in the
tests).  They stay tractable at long contexts: duplicate rows are found
exactly by hashing every row (O(L d)) and verifying each hash collision
element by element; the exact encoding is translation invariant
(|PE(p)-PE(q)| and PE(p).PE(q) depend on q-p only: :func:`exact_distances`,
:func:`decay_exact`), and a stored row is within its error e(p) of the exact
one, so only lags whose exact distance is small can hold a nearest neighbour
(see ``nn_certified``); the decay curve (:func:`decay_curve`) is compared
over lags 0 .. ``max_lag``.  They do not depend on the
column layout (interleaved as in the paper / Annotated Transformer / HF, or
sin-half then cos-half as in fairseq / tensor2tensor), which only permutes
columns; :func:`encoding_table` offers both.  (fairseq and tensor2tensor also
use another schedule, w_i = 10000 ** (-i / (d/2 - 1)), not modelled here.  The
Annotated Transformer's float32 ``exp(arange(0, d, 2) * -(log(10000) / d))``
is up to 7 float32 ulps off the correctly rounded w_i at d = 512; the fp32
preset uses correctly rounded w_i; spot checks (d = 512, L = 8K .. 1M) move its
table error by under 1 %, since the float32 angle rounding dominates.)

>>> rows = audit_sinusoidal([512], dim=64, dtypes=["bfloat16"], recipes=["lowp", "fp32"])
>>> [(r.recipe, r.duplicate_rows, r.distinct_rows) for r in rows]
[('lowp', 191, 385), ('fp32', 0, 512)]

(bf16 positions: 257 -> 256, 259 and 261 -> 260, ..., 509 -> 508: 2 + 63 * 3 = 191
positions share a row; 0..256, the 127 even values 258..510 and 512 stay distinct.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._common import Row, check_lengths
from .formats import Format, get_format, round_to

MAX_LAG = 4096  # largest nn_window / max_lag
MAX_DIM = 65536  # model widths in use stay below 2**15
MAX_SINUSOIDAL_LENGTH = 2**24  # O(L) memory and O(L d) work per recipe and dtype

__all__ = [
    "DEFAULT_BASE",
    "LAYOUTS",
    "RECIPES",
    "STAGES",
    "Recipe",
    "SinusoidalRow",
    "audit_sinusoidal",
    "decay_curve",
    "decay_exact",
    "encoding_table",
    "encoding_table_torch",
    "exact_distances",
    "exact_table",
    "frequencies",
    "get_recipe",
]

STAGES: tuple[str, ...] = ("positions", "frequencies", "angles", "trig", "table")
LAYOUTS: tuple[str, ...] = ("interleaved", "concat")
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


def get_recipe(recipe: str | Recipe) -> Recipe:
    """A preset by name (or a :class:`Recipe`, returned as is).

    >>> get_recipe("fp32").angles
    'float32'
    >>> get_recipe("fp16")
    Traceback (most recent call last):
    ...
    ValueError: unknown sinusoidal recipe 'fp16'; valid recipes: lowp, lowp-positions, fp32, fp64
    """
    if isinstance(recipe, Recipe):
        return recipe
    try:
        return RECIPES[str(recipe).strip().lower()]
    except KeyError:
        raise ValueError(f"unknown sinusoidal recipe {recipe!r}; valid recipes: {', '.join(RECIPES)}") from None


def _check_dim(dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 2 or dim % 2:
        raise ValueError(f"dim {dim!r} must be a positive even integer (sin and cos come in pairs)")
    if dim > MAX_DIM:
        raise ValueError(f"dim {dim} exceeds {MAX_DIM}")
    return int(dim)


def _check_base(base: Any) -> float:
    b = float(base)
    if not (math.isfinite(b) and b > 1.0):
        raise ValueError(f"base {base!r} must be a finite number greater than 1")
    return b


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


def _to_layout(sin: Array, cos: Array, layout: str) -> Array:
    if layout == "concat":
        return np.concatenate([sin, cos], axis=1)
    out = np.empty((sin.shape[0], 2 * sin.shape[1]), dtype=np.float64)
    out[:, 0::2], out[:, 1::2] = sin, cos
    return out


def _check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
    return layout


def _stored_rows(u: Array, freq: Array, fm: dict[str, Format]) -> tuple[Array, Array]:
    """sin and cos halves of the stored rows for rounded positions ``u`` (stages 3-5)."""
    with np.errstate(invalid="ignore", over="ignore"):
        ang = round_to(u[:, None] * freq[None, :], fm["angles"])
        halves = []
        for fn in (np.sin, np.cos):
            t = round_to(fn(ang), fm["trig"])
            halves.append(t if fm["table"].name == "float64" else round_to(t, fm["table"]))
    return halves[0], halves[1]


def encoding_table(
    length: int,
    dim: int,
    recipe: str | Recipe = "fp32",
    dtype: str | Format = "float16",
    *,
    base: float = DEFAULT_BASE,
    layout: str = "interleaved",
) -> Array:
    """The stored table (``length x dim``, float64 holding the stored values).

    Materialises the whole table; for inspection and tests (the auditor streams).

    >>> t = encoding_table(3, 4, "lowp", "bfloat16")
    >>> t[1].tolist()  # sin 1, cos 1, sin 0.01, cos 0.01 rounded to bfloat16
    [0.83984375, 0.5390625, 0.010009765625, 1.0]
    """
    length = check_lengths(length)[0]
    fm = get_recipe(recipe).formats(dtype)
    u = round_to(np.arange(length, dtype=np.float64), fm["positions"])
    s, c = _stored_rows(u, round_to(frequencies(dim, base), fm["frequencies"]), fm)
    return _to_layout(s, c, _check_layout(layout))


def exact_table(length: int, dim: int, *, base: float = DEFAULT_BASE, layout: str = "interleaved") -> Array:
    """The float64 oracle: exact integer positions times float64 frequencies.

    numpy's vectorised sin/cos are faithful (within 1 ulp), not always libm's
    last bit, so the comparison allows 1 ulp (2**-52 relative):

    >>> bool(np.allclose(exact_table(2, 2), [[0.0, 1.0], [math.sin(1.0), math.cos(1.0)]], rtol=2**-52, atol=0))
    True
    """
    length = check_lengths(length)[0]
    ang = np.arange(length, dtype=np.float64)[:, None] * frequencies(dim, base)[None, :]
    return _to_layout(np.sin(ang), np.cos(ang), _check_layout(layout))


def exact_distances(dim: int, lags: npt.ArrayLike, *, base: float = DEFAULT_BASE) -> Array:
    """Exact Euclidean distance ``|PE(p) - PE(p+k)|`` for lags k; independent of p.

    ``|PE(p)-PE(p+k)|^2 = sum_i (2 - 2 cos(k w_i)) = sum_i (2 sin(k w_i / 2))^2``.

    >>> math.isclose(exact_distances(2, [1])[0], 2 * math.sin(0.5), rel_tol=2**-50)  # a few roundings
    True
    """
    w = frequencies(dim, base)
    k = np.asarray(lags, dtype=np.float64).reshape(-1)
    out = np.empty(len(k))
    step = max(1, 2**19 // len(w))  # blocks of lags keep memory at O(2**19) floats
    for a in range(0, len(k), step):
        out[a : a + step] = np.sqrt(np.sum((2.0 * np.sin(k[a : a + step, None] * w[None, :] / 2.0)) ** 2, axis=1))
    return out


def decay_exact(dim: int, lags: npt.ArrayLike, *, base: float = DEFAULT_BASE) -> Array:
    """Exact inner product ``PE(p) . PE(p+k) = sum_i cos(k w_i)``; independent of p.

    >>> d = decay_exact(4, [0, 1])
    >>> float(d[0]), math.isclose(d[1], math.cos(1.0) + math.cos(0.01), rel_tol=2**-50)
    (2.0, True)
    """
    w = frequencies(dim, base)
    k = np.asarray(lags, dtype=np.float64)
    return np.sum(np.cos(k[:, None] * w[None, :]), axis=1)


def encoding_table_torch(
    length: int,
    dim: int,
    recipe: str | Recipe = "fp32",
    dtype: str | Format = "float16",
    *,
    base: float = DEFAULT_BASE,
    layout: str = "interleaved",
) -> Any:
    """The same recipe with real torch kernels (second engine); returns a torch tensor.

    ``torch.arange(L).to(F_pos)``; the frequency buffer holds the correctly
    rounded ``w_i``; both are cast to the angle dtype and multiplied there;
    ``torch.sin``/``torch.cos`` run in the angle dtype (so the recipe's trig
    format must equal its angle format); then ``.to`` the table dtype.  Only
    formats torch can compute in (float64/32/16, bfloat16) are accepted.

    >>> encoding_table_torch(3, 4, "lowp", "bfloat16")[1].tolist()
    [0.83984375, 0.5390625, 0.010009765625, 1.0]
    """
    import torch

    length = check_lengths(length)[0]
    rec = get_recipe(recipe)
    fm = rec.formats(dtype)
    computable = {"float64", "float32", "float16", "bfloat16"}
    bad = [f"{s}={f.name}" for s, f in fm.items() if f.name not in computable]
    if bad:
        raise ValueError(f"torch engine cannot compute in {', '.join(bad)} (recipe {rec.name!r})")
    if fm["trig"] != fm["angles"]:
        raise ValueError(f"torch engine evaluates sin/cos in the angle dtype; recipe {rec.name!r} has "
                         f"trig={fm['trig'].name}, angles={fm['angles'].name}")
    adt = fm["angles"].torch_dtype
    # integer positions cast once (``position_ids.to(dtype)``, correctly rounded to 2**24); torch's CPU
    # ``arange(L, dtype=bfloat16)`` adds offsets to a rounded SIMD-block base and is not (bf16 4113 -> 4096).
    pos = torch.arange(length, dtype=torch.int64).to(fm["positions"].torch_dtype)
    freq = torch.tensor(round_to(frequencies(dim, base), fm["frequencies"])).to(fm["frequencies"].torch_dtype)
    ang = pos.to(adt)[:, None] * freq.to(adt)[None, :]
    tdt = fm["table"].torch_dtype
    s, c = torch.sin(ang).to(tdt), torch.cos(ang).to(tdt)
    if _check_layout(layout) == "concat":
        return torch.cat([s, c], dim=1)
    return torch.stack([s, c], dim=2).reshape(length, dim)


def decay_curve(
    length: int,
    dim: int,
    recipe: str | Recipe = "fp32",
    dtype: str | Format = "float16",
    *,
    max_lag: int = 32,
    base: float = DEFAULT_BASE,
    chunk: int = 4096,
) -> Array:
    """The stored table's decay curve: ``mean_{p < L-k} S(p) . S(p+k)`` for k = 0 .. min(max_lag, L-1).

    Streams over positions (memory ``O((chunk + max_lag) * dim)``).  Compare with
    :func:`decay_exact`; the fp64 recipe into float64 reproduces it.

    >>> c = decay_curve(100, 4, "fp64", "float64", max_lag=2)
    >>> bool(np.allclose(c, decay_exact(4, [0, 1, 2])))
    True
    """
    length = check_lengths(length)[0]
    fm = get_recipe(recipe).formats(dtype)
    kmax = min(int(max_lag), length - 1)
    freq = round_to(frequencies(dim, base), fm["frequencies"])
    sums = np.zeros(kmax + 1)
    with np.errstate(invalid="ignore", over="ignore"):
        for a in range(0, length, chunk):
            b, e = min(a + chunk, length), min(a + chunk + kmax, length)
            u = round_to(np.arange(a, e, dtype=np.float64), fm["positions"])
            S = np.concatenate(_stored_rows(u, freq, fm), axis=1)
            for k in range(kmax + 1):
                m = min(b, length - k) - a
                if m > 0:
                    sums[k] += np.einsum("ij,ij->", S[:m], S[k : k + m])
    return sums / (length - np.arange(kmax + 1))


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


# ---------------------------------------------------------------------------
# the streaming engine

_HASH_KEYS = np.random.default_rng(20170612).integers(1, 2**63, size=8192, dtype=np.uint64) | np.uint64(1)


def _canonical_bits(rows: Array) -> npt.NDArray[np.uint64]:
    """Bit patterns with -0 -> +0 and every nan the same, so equal values <=> equal bits."""
    c = rows + 0.0
    c[np.isnan(c)] = np.nan
    return c.view(np.uint64)


def _row_hash(bits: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit hash per row (collisions are verified afterwards, so quality only affects speed)."""
    x = bits ^ (bits >> np.uint64(31))
    x = x * _HASH_KEYS[np.arange(bits.shape[1]) % len(_HASH_KEYS)][None, :]
    x ^= x >> np.uint64(29)
    h = x.sum(axis=1, dtype=np.uint64)
    h ^= h >> np.uint64(33)
    return h * np.uint64(0xFF51AFD7ED558CCD)


def _tail_forward(rows_of: Any, positions: Array, length: int, window: int) -> Array:
    """min over k = 1..window, p + k < length of |S(p) - S(p+k)|, for p in the last window positions."""
    lo = max(0, length - window)
    s, c = rows_of(positions[lo:length])
    r = np.concatenate([s, c], axis=1)
    out = np.full(length - lo, np.inf)
    with np.errstate(invalid="ignore"):
        for k in range(1, length - lo):
            d = np.sqrt(np.sum((r[:-k] - r[k:]) ** 2, axis=1))
            out[:-k] = np.minimum(out[:-k], d)
    return out


FAR_SEARCH_BUDGET = 2**27  # max (far lags x length x dim) searched beyond the window, per length


def _far_neighbours(rows_of: Any, positions: Array, length: int, lags: npt.NDArray[np.int64], chunk: int) -> Array:
    """min over the given lags k of |S(p) - S(p +- k)| (both sides, inside length), for every p < length."""
    out = np.full(length, np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        for a in range(0, length, chunk):
            b = min(a + chunk, length)
            S = np.concatenate(rows_of(positions[a:b]), axis=1)
            for k in lags:  # ascending
                hi = min(b, length - int(k))  # pairs (p, p+k) with p in [a, hi)
                if hi <= a:
                    break
                T = np.concatenate(rows_of(positions[a + k : hi + k]), axis=1)
                d = np.sqrt(np.sum((S[: hi - a] - T) ** 2, axis=1))
                out[a:hi] = np.minimum(out[a:hi], d)
                out[a + k : hi + k] = np.minimum(out[a + k : hi + k], d)
    return out


class _Positions:
    """Positions 0..n-1 rounded to a format, made slice by slice: ``P[a:b]``, ``len(P)``."""

    def __init__(self, fmt: Format, n: int) -> None:
        self.fmt, self.n = fmt, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, s: slice) -> Array:
        a, b, step = s.indices(self.n)
        return round_to(np.arange(a, b, step, dtype=np.float64), self.fmt)


def _duplicate_activation(
    pos: _Positions, hash_box: list[npt.NDArray[np.uint64]], rows_of: Any, chunk: int
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """Classes of equal stored rows, as two sorted arrays: for each position the
    length from which it is a duplicate (``act``: max(p, second member of its
    class)), and the first position of each class.

    Rows are a function of the rounded position, which is monotone in p, so
    equal rounded positions are runs of neighbours; runs are sorted by hash
    (stable: position order within a hash), and runs sharing a hash are
    compared element by element (canonical bits) and split into classes.
    ``hash_box`` holds the per-position hashes and is emptied, so that they are
    freed as soon as they are no longer needed; indices are int32 (lengths stay
    below 2**24): both keep the peak memory low.
    """
    n = len(pos)
    block = 2**20
    starts = [np.zeros(1, dtype=np.int32)]
    prev = None
    for a in range(0, n, block):
        ub = _canonical_bits(pos[a : min(n, a + block)][:, None])[:, 0]
        change = (np.flatnonzero(ub[1:] != ub[:-1]) + (a + 1)).astype(np.int32)
        if prev is not None and ub[0] != prev:
            change = np.concatenate([np.array([a], dtype=np.int32), change])
        starts.append(change)
        prev = ub[-1]
    run_start = np.concatenate(starts)
    del starts
    n_runs = len(run_start)
    identity = n_runs == n  # every run is one position (e.g. float32 positions)
    hashes = hash_box.pop()
    run_hash = hashes if identity else hashes[run_start]
    del hashes
    order = np.argsort(run_hash, kind="stable").astype(np.int32)  # by hash, position order within
    new = np.empty(n_runs, dtype=bool)  # a class starts here (in sorted order)
    new[0] = True
    for a in range(1, n_runs, block):
        b = min(n_runs, a + block)
        np.not_equal(run_hash[order[a:b]], run_hash[order[a - 1 : b - 1]], out=new[a:b])
    del run_hash
    # groups of runs sharing a hash: [lo, hi) in sorted order
    lo = np.flatnonzero(new[:-1] & ~new[1:])
    hi = np.flatnonzero(~new & np.r_[new[1:], True]) + 1
    # split them by their rows, in batches that never split one hash value
    i = 0
    while i < len(lo):
        j, count = i, 0
        while j < len(lo) and (count == 0 or count + int(hi[j] - lo[j]) <= chunk):
            count += int(hi[j] - lo[j])
            j += 1
        at = np.concatenate([np.arange(x, y) for x, y in zip(lo[i:j], hi[i:j])])  # places in sorted order
        gid = np.concatenate([np.full(y - x, k) for k, (x, y) in enumerate(zip(lo[i:j], hi[i:j]))])
        sel = order[at]
        u = round_to(run_start[sel].astype(np.float64), pos.fmt)  # = pos[r] for each run start r
        bits = _canonical_bits(np.concatenate(rows_of(u), axis=1))
        _, sub = np.unique(bits, axis=0, return_inverse=True)
        sub = sub.reshape(-1)
        perm = np.lexsort((np.arange(len(sel)), sub, gid))  # by group, then row, then position
        order[at] = sel[perm]
        g2, s2 = gid[perm], sub[perm]
        new[at] = np.r_[True, (g2[1:] != g2[:-1]) | (s2[1:] != s2[:-1])]
        i = j
    del lo, hi
    cstart = np.concatenate(
        [(np.flatnonzero(new[a : a + block]) + a).astype(np.int32) for a in range(0, n_runs, block)]
    )
    del new
    ccount = np.diff(np.append(cstart, np.int32(n_runs)))
    first_run = order[cstart]
    never = np.int32(np.iinfo(np.int32).max)
    second = np.full(len(cstart), never, dtype=np.int32)
    two = ccount >= 2
    second[two] = run_start[order[cstart[two] + 1]]
    del cstart, two
    run_len = None if identity else np.diff(np.append(run_start, np.int32(n))).astype(np.int32)
    if run_len is not None:
        long_first = run_len[first_run] >= 2
        second[long_first] = run_start[first_run[long_first]] + 1
    firsts = run_start[first_run]
    del first_run, run_start
    firsts.sort()
    sec_run = np.empty(n_runs, dtype=np.int32)
    sec_run[order] = np.repeat(second, ccount)
    del order, second, ccount
    act = sec_run if run_len is None else np.repeat(sec_run, run_len)
    del sec_run
    for a in range(0, n, block):
        b = min(n, a + block)
        np.maximum(act[a:b], np.arange(a, b, dtype=np.int32), out=act[a:b])
    act.sort()
    return act, firsts


def _max_shrink(nn_s: Array, prefmin: Array, L: int, chunk: int) -> float:
    """max over p < L of 1 - nn_s[p] / nn_e[p], nn_e[p] = prefmin[max(p, L-1-p) - 1], in blocks."""
    out = -math.inf
    step = 2**18
    for a in range(0, L, step):
        b = min(L, a + step)
        p = np.arange(a, b)
        idx = np.maximum(p, L - 1 - p) - 1
        m = float(np.max(1.0 - nn_s[a:b] / prefmin[idx]))
        if math.isnan(m):
            return m
        out = max(out, m)
    return out


def _certified(far_min: float, e2: Array, emax: float, nn_s: Array, chunk: int) -> bool:
    """all(far_min - e2 - emax >= nn_s), in blocks."""
    step = 2**18
    for a in range(0, len(nn_s), step):
        b = min(len(nn_s), a + step)
        if not np.all(far_min - e2[a:b] - emax >= nn_s[a:b]):
            return False
    return True


def _audit_one(
    rec: Recipe, dtype: str, lengths: tuple[int, ...], dim: int, base: float, window: int, max_lag: int, chunk: int,
    progress: Callable[[int], None] | None = None,
) -> list[SinusoidalRow]:
    fm = rec.formats(dtype)
    lmax = lengths[-1]
    w64 = frequencies(dim, base)
    freq = round_to(w64, fm["frequencies"])
    pos = _Positions(fm["positions"], lmax)  # rounded positions, made per slice (no O(L) array)

    def rows_of(u: Array) -> tuple[Array, Array]:
        return _stored_rows(u, freq, fm)

    reach = max(window, max_lag)
    err_2 = np.empty(lmax)  # |S - E|_2 per row
    hashes = np.empty(lmax, dtype=np.uint64)
    max_err_len = np.zeros(len(lengths))  # max |S - E| over the rows below each length
    nonfinite_len = np.zeros(len(lengths), dtype=np.int64)  # non-finite rows below each length
    fwd = np.full(lmax, np.inf)  # nearest stored neighbour among p+1 .. p+window
    bwd = np.full(lmax, np.inf)  # ... among p-window .. p-1
    lag_sums = np.zeros((len(lengths), max_lag + 1))
    len_arr = np.asarray(lengths)
    with np.errstate(invalid="ignore", over="ignore"):
        for a in range(0, lmax, chunk):
            b = min(a + chunk, lmax)
            e = min(b + reach, lmax)
            s, c = rows_of(pos[a:e])
            S = np.concatenate([s, c], axis=1)
            n = b - a
            ang = np.arange(a, b, dtype=np.float64)[:, None] * w64[None, :]
            diff = S[:n] - np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
            err_inf = np.max(np.abs(diff), axis=1)
            err_2[a:b] = np.sqrt(np.sum(diff * diff, axis=1))
            nonfinite = ~np.all(np.isfinite(S[:n]), axis=1)
            for j, L in enumerate(lengths):  # prefix reductions: rows a .. min(b, L) - 1
                if L > a:
                    top = min(b, L) - a
                    max_err_len[j] = max(max_err_len[j], np.max(err_inf[:top]))
                    nonfinite_len[j] += int(np.count_nonzero(nonfinite[:top]))
            hashes[a:b] = _row_hash(_canonical_bits(S[:n]))
            for k in range(1, min(window, e - a - 1) + 1):
                m = min(b, e - k) - a  # pairs (p, p+k) with p in [a, a+m)
                d = np.sqrt(np.sum((S[:m] - S[k : k + m]) ** 2, axis=1))
                fwd[a : a + m] = np.minimum(fwd[a : a + m], d)
                bwd[a + k : a + k + m] = np.minimum(bwd[a + k : a + k + m], d)
            for k in range(0, min(max_lag, e - a - 1) + 1):
                m = min(b, e - k) - a
                cs = np.cumsum(np.einsum("ij,ij->i", S[:m], S[k : k + m]))
                hi = np.minimum(a + m, len_arr - k) - a  # p < L - k for each length L
                ok = hi > 0
                lag_sums[ok, k] += cs[hi[ok] - 1]
            if progress is not None:
                progress(b - a)

    # the last `window` backward distances of each length, then one merged O(L) array
    bwd_tails = {L: bwd[max(0, L - window) : L].copy() for L in lengths}
    np.minimum(fwd, bwd, out=fwd)  # nearest neighbour within the window, both sides
    del bwd
    hash_box = [hashes]
    del hashes  # _duplicate_activation frees them midway
    act_sorted, firsts = _duplicate_activation(pos, hash_box, rows_of, chunk)

    kmax = lmax - 1
    dist = exact_distances(dim, np.arange(1, kmax + 1, dtype=np.float64), base=base) if kmax else np.empty(0)
    prefmin = np.minimum.accumulate(dist) if kmax else dist
    lags = np.arange(max_lag + 1)
    c_exact = decay_exact(dim, lags, base=base)

    out = []
    for j, L in enumerate(lengths):
        nonfin = int(nonfinite_len[j])
        max_err = float(max_err_len[j]) if nonfin == 0 else math.nan
        if L >= 2:
            # nn_s = fwd[:L] with the last window entries replaced: a view with the tail
            # written in place, put back after this length (no O(L) copy)
            tail = _tail_forward(rows_of, pos, L, window)
            saved = fwd[L - len(tail) : L].copy()
            fwd[L - len(tail) : L] = np.minimum(tail, bwd_tails[L])
            nn_s = fwd[:L]
            exact_nn = float(prefmin[L - 2])
            if nonfin:
                min_nn = shrink = math.nan
                certified = False
            else:
                far = dist[window : L - 1]  # D(k) for the lags k = window+1 .. L-1 not searched yet
                e2 = err_2[:L]
                emax = float(np.max(e2))
                far_min = float(np.min(far)) if len(far) else math.inf
                if len(far) and np.min(nn_s) > 0.0:
                    # only lags with D(k) < max nn + 2 max e can hold a nearer neighbour: search them too
                    thr = float(np.max(nn_s)) + 2.0 * emax
                    cand = np.flatnonzero(far < thr) + window + 1
                    if 0 < len(cand) and len(cand) * L * dim <= FAR_SEARCH_BUDGET:
                        nn_s = np.minimum(nn_s, _far_neighbours(rows_of, pos, L, cand, chunk))
                        keep = far >= thr
                        far_min = float(np.min(far, where=keep, initial=math.inf))
                        n_far = int(np.count_nonzero(keep))
                    else:
                        n_far = len(far)
                else:
                    n_far = len(far)
                min_nn = float(np.min(nn_s))
                shrink = _max_shrink(nn_s, prefmin, L, chunk)
                if n_far == 0 or min_nn == 0.0:  # a duplicate: 0 and 100 % are the global extremes
                    certified = True
                else:
                    certified = _certified(far_min, e2, emax, nn_s, chunk)
            fwd[L - len(tail) : L] = saved
        else:
            exact_nn = min_nn = shrink = math.nan
            certified = True
        nl = min(max_lag, L - 1)
        if nonfin:
            dev, dev_lag = math.nan, 0
        else:
            means = lag_sums[j, : nl + 1] / (L - lags[: nl + 1])
            devs = np.abs(means - c_exact[: nl + 1])
            dev_lag = int(np.argmax(devs))
            dev = float(devs[dev_lag])
        out.append(
            SinusoidalRow(
                recipe=rec.name,
                dtype=get_format(dtype).name,
                length=L,
                dim=dim,
                base=base,
                distinct_rows=int(np.searchsorted(firsts, L)),
                duplicate_rows=int(np.searchsorted(act_sorted, L)),
                nonfinite_rows=nonfin,
                max_abs_error=max_err,
                exact_nn_distance=exact_nn,
                min_nn_distance=min_nn,
                nn_shrink=shrink,
                nn_window=window,
                nn_certified=certified,
                decay_max_dev=dev,
                decay_max_dev_lag=dev_lag,
                max_lag=max_lag,
            )
        )
    return out


def audit_sinusoidal(
    lengths: int | Iterable[int],
    dim: int = 512,
    dtypes: Sequence[str | Format] = ("bfloat16", "float16"),
    recipes: Sequence[str | Recipe] = ("lowp", "fp32"),
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
    recipe, so the recipes of one context sit side by side.

    >>> r = audit_sinusoidal(4096, dim=128, dtypes=["float16"], recipes=["lowp", "fp32"])
    >>> [(x.recipe, x.duplicate_rows) for x in r]  # fp16: {2048, 2049}, then 511 triples {4m-1, 4m, 4m+1}
    [('lowp', 1535), ('fp32', 0)]
    """
    lens = check_lengths(lengths, limit=MAX_SINUSOIDAL_LENGTH, why="the sinusoidal audit keeps O(L) state")
    dim, base = _check_dim(dim), _check_base(base)
    recs = [get_recipe(r) for r in recipes]
    fmts = [get_format(d).name for d in dtypes]
    if not recs or not fmts:
        raise ValueError("give at least one recipe and one dtype")
    if isinstance(nn_window, bool) or not isinstance(nn_window, (int, np.integer)) or nn_window < 1:
        raise ValueError(f"nn_window {nn_window!r} must be a positive integer")
    if isinstance(max_lag, bool) or not isinstance(max_lag, (int, np.integer)) or max_lag < 0:
        raise ValueError(f"max_lag {max_lag!r} must be a non-negative integer")
    for name, value in (("nn_window", nn_window), ("max_lag", max_lag)):
        if value > MAX_LAG:  # the work grows as L * lags * dim
            raise ValueError(f"{name} {value} exceeds {MAX_LAG}")
    if chunk is None:
        chunk = max(256, 2**19 // dim)
    if chunk < 1:
        raise ValueError(f"chunk {chunk!r} must be positive")
    results: dict[tuple[str, int, str], SinusoidalRow] = {}
    for rec in recs:
        for f in fmts:
            try:
                for row in _audit_one(rec, f, lens, dim, base, int(nn_window), int(max_lag), int(chunk), progress):
                    results[(f, row.length, rec.name)] = row
            except MemoryError:
                raise MemoryError(f"sinusoidal audit of recipe {rec.name!r}, dtype {f}, length {lens[-1]}") from None
    return [results[(f, L, r.name)] for f in fmts for L in lens for r in recs]
