"""Whole tables: the stored encoding of a recipe (numpy and torch engines), the float64 oracle, the exact
distances and decay curve, and the stored rows made slice by slice that the streaming auditor uses."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import check_lengths
from ..formats import Format, round_into, round_to
from .recipes import DEFAULT_BASE, Array, Recipe, frequencies, get_recipe

__all__ = [
    "LAYOUTS",
    "decay_curve",
    "decay_exact",
    "encoding_table",
    "encoding_table_torch",
    "exact_distances",
    "exact_table",
]

LAYOUTS: tuple[str, ...] = ("interleaved", "concat")


_SCRATCH = threading.local()


def scratch(name: str, shape: tuple[int, ...], dtype: Any = np.float64) -> npt.NDArray[Any]:
    """A C-contiguous array of ``shape`` in a buffer kept per thread and name (no allocation per chunk:
    the first touch of fresh pages is what a large temporary costs)."""
    bufs = _SCRATCH.__dict__.setdefault("bufs", {})
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = bufs.get(name)
    if buf is None or buf.size < n:
        buf = bufs[name] = np.empty(max(n, 8), dtype=np.uint8)
    return buf[:n].view(dtype).reshape(shape)


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


class _Positions:
    """Positions 0..n-1 rounded to a format, made slice by slice: ``P[a:b]``, ``len(P)``."""

    def __init__(self, fmt: Format, n: int) -> None:
        self.fmt, self.n = fmt, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, s: slice) -> Array:
        a, b, step = s.indices(self.n)
        return round_to(np.arange(a, b, step, dtype=np.float64), self.fmt)


class _StoredRows:
    """A recipe's stored rows, made on demand: ``rows(u)`` gives the sin and cos halves for rounded positions
    ``u``, ``rows.table(u)`` the rows themselves (sin half, then cos half), faster; ``rows.pos`` the rounded
    positions ``0 .. n-1``.

    The fast ways give the same values: an angle format of at most 16 bits has at most 65536 values, whose
    stored sin and cos are tabulated (by :func:`_stored_rows` itself); a float32 or float64 trig stage
    cast to a narrow table format uses the RoPE engine's verified estimate
    (:mod:`precision_audit.rope.narrow_cache`)."""

    def __init__(self, fm: dict[str, Format], freq: Array, n: int) -> None:
        self.fm, self.freq, self.pos = fm, freq, _Positions(fm["positions"], n)
        self._codes: tuple[Array, Array] | None = None

    def __call__(self, u: Array) -> tuple[Array, Array]:
        return _stored_rows(u, self.freq, self.fm)

    def table(self, u: Array, out: Array | None = None) -> Array:
        """The stored rows of rounded positions ``u`` (into ``out``): (len(u), dim), sin half then cos half."""
        h = len(self.freq)
        out = np.empty((len(u), 2 * h)) if out is None else out
        step = max(1, 2**16 // h)  # rows per block: the temporaries stay in the CPU caches
        with np.errstate(invalid="ignore", over="ignore"):
            for r0 in range(0, len(u), step):
                r1 = min(len(u), r0 + step)
                self._block(u[r0:r1], out[r0:r1])
        return out

    def _block(self, u: Array, out: Array) -> None:
        from ..rope import narrow_cache
        from ..rope.lookup import codes_into, has_codes

        fa, ft, fs = self.fm["angles"], self.fm["trig"], self.fm["table"]
        h = len(self.freq)
        shape = (len(u), h)
        ang = scratch("t.ang", shape)
        np.multiply(u[:, None], self.freq[None, :], out=ang)
        round_into(ang, fa, ang, (scratch("t.s1", shape), scratch("t.s2", shape)))
        if np.dtype(fa.numpy_type).itemsize <= 2 and has_codes(fa, ang):
            sin_t, cos_t = self._angle_tables()
            idx = codes_into(fa, ang, scratch("t.idx", (ang.size,), np.intp), scratch("t.s1", shape))
            np.take(sin_t, idx.reshape(shape), out=out[:, :h])
            np.take(cos_t, idx.reshape(shape), out=out[:, h:])
            return
        if narrow_cache.eligible(ft, fs, 1.0):
            bufs = [scratch(f"t.b{i}", shape) for i in range(4)]
            est = narrow_cache.estimate(ang, scratch("t.est", shape), (bufs[0], bufs[1], bufs[2]))
            if est is not None:
                both = scratch("t.both", (2 * ang.size,))
                narrow_cache.stored_into(est, ft, fs, 1.0, both, (bufs[0], bufs[1], bufs[2], bufs[3]))
                out[:, h:] = both[: ang.size].reshape(shape)
                out[:, :h] = both[ang.size :].reshape(shape)
                return
        s, c = _stored_rows(u, self.freq, self.fm)
        out[:, :h], out[:, h:] = s, c

    def _angle_tables(self) -> tuple[Array, Array]:
        """The stored sin and cos of every value of the (16-bit or narrower) angle format, by bit pattern."""
        tables = self._codes
        if tables is None:  # (two threads may both build it: the same values; one assignment)
            fa = self.fm["angles"]
            width = np.dtype(fa.numpy_type).itemsize
            codes = np.arange(2 ** (8 * width), dtype=np.uint16 if width == 2 else np.uint8)
            with np.errstate(invalid="ignore", over="ignore"):
                s, c = _stored_rows(codes.view(fa.numpy_type).astype(np.float64), np.ones(1), self.fm)
            tables = self._codes = (s[:, 0].copy(), c[:, 0].copy())
        return tables


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

    >>> import math
    >>> bool(np.allclose(exact_table(2, 2), [[0.0, 1.0], [math.sin(1.0), math.cos(1.0)]], rtol=2**-52, atol=0))
    True
    """
    length = check_lengths(length)[0]
    ang = np.arange(length, dtype=np.float64)[:, None] * frequencies(dim, base)[None, :]
    return _to_layout(np.sin(ang), np.cos(ang), _check_layout(layout))


def exact_distances(dim: int, lags: npt.ArrayLike, *, base: float = DEFAULT_BASE) -> Array:
    """Exact Euclidean distance ``|PE(p) - PE(p+k)|`` for lags k; independent of p.

    ``|PE(p)-PE(p+k)|^2 = sum_i (2 - 2 cos(k w_i)) = sum_i (2 sin(k w_i / 2))^2``.

    >>> import math
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

    >>> import math
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
