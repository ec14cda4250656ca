"""T5 and DeBERTa relative-position buckets: the exact bucket and the bucket each code path computes.

A *distance* d >= 0 is a key d tokens before its query: T5's
``relative_position = memory - query = -d``, DeBERTa's ``q - k = +d``.  The
key d tokens *after* the query gets the mirrored bucket (T5 bidirectional:
``num_buckets / 2`` plus the same bucket; DeBERTa: its negative) computed from
``|d|`` by the same operations, so it flips exactly when d does.

T5 (``T5Attention._relative_position_bucket``; bidirectional halves
``num_buckets`` first), with ``me = num_buckets // 2``, ``K = num_buckets - me``::

    bucket(d) = d                                               if d < me
              = min(me + trunc(log(d / me) / log(max_distance / me) * K), num_buckets - 1)

DeBERTa (``make_log_bucket_position`` in ``deberta_v2``), ``mid = bucket_size // 2``::

    bucket(d) = d                                               if d <= mid
              = ceil(log(d / mid) / log((max_position - 1) / mid) * (mid - 1)) + mid

DeBERTa has no clip of its own: ``DisentangledSelfAttention`` clamps the
bucket into ``[-span, span - 1]`` (content -> position) and ``[-span + 1,
span]`` (position -> content) with ``span = bucket_size``; buckets are
compared here after ``min(bucket, bucket_size)``, so a difference counts when
either term can see it.

The code paths (:data:`PATHS`), every operation rounded as the real code rounds it:

``transformers``   as transformers runs it in any model dtype.  T5 calls
                   ``relative_position.float()`` on the int64 distances, so
                   the log runs in float32 even when the model is bf16/fp16;
                   DeBERTa's ``abs_pos / mid`` on int64 gives float32 too.
``lowp``           every operation after the int -> float conversion in the
                   dtype, constants stored in it (an ONNX float16 conversion;
                   MindSpore's bf16 T5, mindone#670).
``cast-distance``  the distance cast to the dtype, the rest float32 (distances
                   built from position ids held in the model dtype).
``lowp-eager``     every operation in the dtype as eager torch runs it: the
                   Python constants stay float32 (its opmath for bf16/fp16
                   tensors); a torch port without T5's ``.float()``,
                   DeBERTa's function run on tensors of the dtype.

The exact bucket is decided on integers: ``trunc(y) >= k`` iff ``d**K *
me**k >= max_distance**k * me**K`` (DeBERTa: ``ceil(y) <= k`` iff
``d**(mid-1) * mid**k <= (max_position-1)**k * mid**(mid-1)``); float64 gives
the candidate k and Python integers settle every value within 1e-9 of an
integer, so no rounding ever decides an exact bucket.

>>> s = BucketScheme("t5")  # bidirectional: 16 buckets a side, 8 exact, 8 logarithmic up to 128
>>> d = np.array([0, 7, 8, 11, 12, 127, 128, 10**6])
>>> exact_buckets(s, d).tolist()
[0, 7, 8, 8, 9, 15, 15, 15]
>>> path_buckets(s, d, "lowp", "bfloat16").tolist()
[0.0, 7.0, 8.0, 8.0, 9.0, 15.0, 15.0, 15.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import check_choice, check_flag, check_int, describe
from ..formats import Format, get_format, round_to
from .ops import F64, div_in, log_in, mul_in, truncate

__all__ = ["DEFAULTS", "MAX_BUCKETS", "MAX_DISTANCE", "PATHS", "SCHEMES", "BucketScheme", "exact_buckets",
           "path_buckets"]

SCHEMES: tuple[str, ...] = ("t5", "deberta")
PATHS: tuple[str, ...] = ("transformers", "lowp", "cast-distance", "lowp-eager")
_FLOAT32_BUCKET = "compute the bucket in float32: .float() on the distance before the log, as transformers does"
LABELS: dict[str, tuple[str, str | None]] = {  # each path as the bottom line names it, and its fix
    "transformers": ("transformers (distances int64, the bucket log or the sinusoid in float32)", None),
    "lowp": ("every bucket operation in the dtype (lowp: an ONNX float16 export, MindSpore bfloat16)",
             _FLOAT32_BUCKET),
    "cast-distance": ("the distance cast to the dtype (cast-distance)", _FLOAT32_BUCKET),
    "lowp-eager": ("every bucket operation in the dtype in eager torch, constants float32 (lowp-eager: a torch port "
                   "without .float())", _FLOAT32_BUCKET),
}
DEFAULTS: dict[str, tuple[int, int]] = {
    "t5": (32, 128),  # relative_attention_num_buckets, relative_attention_max_distance (every T5 / Flan-T5 / UMT5)
    "deberta": (256, 512),  # position_buckets, max_relative_positions (DeBERTa-v3: max_position_embeddings 512)
}
MAX_BUCKETS = 2**12
MAX_DISTANCE = 2**24
_NEAR = 1e-9  # float64 candidates this close to an integer are settled on integers


@dataclass(frozen=True)
class BucketScheme:
    """A bucketing scheme and its parameters, validated.

    ``num_buckets`` / ``max_distance`` are T5's ``relative_attention_num_buckets`` /
    ``relative_attention_max_distance`` or DeBERTa's ``position_buckets`` (``bucket_size``)
    / ``max_relative_positions`` (``max_position``); None takes :data:`DEFAULTS`.
    DeBERTa's buckets are signed, always bidirectional.

    >>> BucketScheme("t5", num_buckets=31)
    Traceback (most recent call last):
    ...
    ValueError: num_buckets 31 must be even for bidirectional t5 (half the buckets are for keys after the query)
    >>> BucketScheme("t5", max_distance=16)
    Traceback (most recent call last):
    ...
    ValueError: max_distance 16 must be at least num_buckets 32 (the log buckets span num_buckets/4 .. max_distance)
    """

    scheme: str
    bidirectional: bool = True
    num_buckets: int | None = None
    max_distance: int | None = None

    def __post_init__(self) -> None:
        check_choice(self.scheme, "scheme", SCHEMES)
        check_flag(self.bidirectional, "bidirectional")
        nb_default, md_default = DEFAULTS[self.scheme]
        nb = nb_default if self.num_buckets is None else check_int(self.num_buckets, "num_buckets", maximum=MAX_BUCKETS)
        md = md_default if self.max_distance is None else check_int(self.max_distance, "max_distance",
                                                                     maximum=MAX_DISTANCE)
        if self.scheme == "deberta" and not self.bidirectional:
            raise ValueError("bidirectional False: DeBERTa's log buckets are signed, always bidirectional (causal is "
                             "a t5 setting)")
        smallest = 4 if self.bidirectional or self.scheme == "deberta" else 2
        if nb < smallest:
            raise ValueError(f"num_buckets {nb} must be at least {smallest} for {self._kind()}")
        if self.scheme == "t5" and self.bidirectional and nb % 2:
            raise ValueError(f"num_buckets {nb} must be even for bidirectional t5 (half the buckets are for keys "
                             "after the query)")
        if md < nb:
            span = "num_buckets/4" if self.scheme == "t5" and self.bidirectional else "num_buckets/2"
            raise ValueError(f"max_distance {md} must be at least num_buckets {nb} (the log buckets span {span} .. "
                             "max_distance)")
        object.__setattr__(self, "num_buckets", nb)
        object.__setattr__(self, "max_distance", md)

    def _kind(self) -> str:
        return self.scheme if self.scheme == "deberta" else f"{'bidirectional' if self.bidirectional else 'causal'} t5"

    @property
    def top(self) -> int:
        """The largest bucket a distance gets (T5: the last bucket of its half; DeBERTa: ``bucket_size``)."""
        nb = int(self.num_buckets or 0)
        if self.scheme == "deberta":
            return nb
        return (nb // 2 if self.bidirectional else nb) - 1


# --------------------------------------------------------------------------- exact


def _t5_floor_at_least(d: int, k: int, me: int, md: int, K: int) -> bool:
    """trunc(log(d/me) / log(md/me) * K) >= k, on integers."""
    return d**K * me**k >= md**k * me**K


def _deberta_ceil_at_most(d: int, k: int, mid: int, mp1: int) -> bool:
    """ceil(log(d/mid) / log(mp1/mid) * (mid-1)) <= k, on integers."""
    return d ** (mid - 1) * mid**k <= mp1**k * mid ** (mid - 1)


def exact_buckets(scheme: BucketScheme, distances: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The bucket of each distance (integers >= 0) in exact arithmetic.

    >>> exact_buckets(BucketScheme("deberta"), [0, 128, 129, 130, 511, 512, 10**9]).tolist()
    [0, 128, 129, 130, 255, 256, 256]
    """
    d = np.asarray(distances, dtype=np.int64)
    if d.size and d.min() < 0:
        raise ValueError(f"distances {describe(distances)} must be non-negative")
    nb, md = int(scheme.num_buckets or 0), int(scheme.max_distance or 0)
    out = np.empty(d.shape, dtype=np.int64)
    if scheme.scheme == "t5":
        nb = nb // 2 if scheme.bidirectional else nb
        me, K = nb // 2, nb - nb // 2
        small, top = d < me, d >= md
        mid = ~small & ~top
        dm = d[mid]
        y = np.log(dm / me) / math.log(md / me) * K
        k = np.floor(y)
        near = np.abs(y - np.round(y)) < _NEAR * np.maximum(1.0, np.abs(y))
        for i in np.flatnonzero(near):
            c = int(np.round(y[i]))
            k[i] = c if _t5_floor_at_least(int(dm[i]), c, me, md, K) else c - 1
        out[small] = d[small]
        out[top] = nb - 1
        out[mid] = np.minimum(me + k.astype(np.int64), nb - 1)
        return out
    half, mp1 = nb // 2, md - 1
    small = d <= half
    big = d[~small]
    y = np.log(big / half) / math.log(mp1 / half) * (half - 1)
    k = np.ceil(y)
    near = np.abs(y - np.round(y)) < _NEAR * np.maximum(1.0, np.abs(y))
    for i in np.flatnonzero(near):
        c = int(np.round(y[i]))
        k[i] = c if _deberta_ceil_at_most(int(big[i]), c, half, mp1) else c + 1
    out[small] = d[small]
    out[~small] = np.minimum(half + np.minimum(k, 2.0**40).astype(np.int64), nb)
    return out


# --------------------------------------------------------------------------- code paths

_F32 = get_format("float32")


def _formats(path: str, dtype: Format) -> tuple[Format, Format]:
    """(format of the distance after the int -> float conversion, format of every later operation)."""
    return {"transformers": (_F32, _F32), "lowp": (dtype, dtype), "cast-distance": (dtype, _F32),
            "lowp-eager": (dtype, dtype)}[path]


def _const(value: float, work: Format, constants: str) -> F64:
    """A Python constant as the path holds it: float32 (torch's scalar, a float32 graph's initializer), then
    ``work`` (``constants="dtype"``) or kept in float32 (``"float32"``: torch's opmath on reduced formats)."""
    c = round_to(np.float64(value), _F32)
    return c if constants == "float32" else round_to(c, work)


def _t5_path(scheme: BucketScheme, d: F64, path: str, dtype: Format, k: str) -> F64:
    nb = int(scheme.num_buckets or 0)
    nb = nb // 2 if scheme.bidirectional else nb
    me, K, md = nb // 2, nb - nb // 2, int(scheme.max_distance or 0)
    dist_fmt, w = _formats(path, dtype)
    x = round_to(d, dist_fmt)  # .float() (transformers), the cast to the dtype (lowp, cast-distance)
    small = d < me if path == "transformers" else x < round_to(float(me), dist_fmt)  # int64 compare / dtype compare
    t = div_in(x, _const(me, w, k), w)  # relative_position.float() / max_exact
    # torch.log(...) / math.log(max_distance / max_exact)
    y = div_in(log_in(t, w), _const(math.log(md / me), w, k), w)
    y = mul_in(y, _const(K, w, k), w)  # * (num_buckets - max_exact)
    large = np.minimum(me + truncate(y), nb - 1)  # .to(torch.long); min(..., num_buckets - 1)
    return np.where(small, truncate(x), large)


def _deberta_path(scheme: BucketScheme, d: F64, path: str, dtype: Format, k: str) -> F64:
    bs, mp = int(scheme.num_buckets or 0), int(scheme.max_distance or 0)
    mid = bs // 2
    dist_fmt, w = _formats(path, dtype)
    x = round_to(d, dist_fmt)  # relative_pos in the dtype (lowp, cast-distance); int64 in transformers
    # abs_pos = where(|rel| < mid, mid - 1, |rel|): type_as(relative_pos) (int64 in transformers)
    mid_x = round_to(float(mid), dist_fmt)
    abs_pos = np.where(x < mid_x, round_to(float(mid - 1), dist_fmt), x)
    num = round_to(abs_pos, w) if path == "transformers" else abs_pos  # int64 / int: both to float32
    t = div_in(num, _const(mid, w, k), w)  # abs_pos / mid
    # torch.log(torch.tensor((max_position - 1) / mid)): a float32 0-dim tensor
    c = log_in(_const((mp - 1) / mid, w, k), w if k == "dtype" else _F32)
    y = mul_in(div_in(log_in(t, w), c, w), _const(mid - 1, w, k), w)  # ... / c * (mid - 1)
    with np.errstate(invalid="ignore"):
        log_pos = round_to(np.ceil(y) + _const(mid, w, k), w)  # torch.ceil(...) + mid
    bucket = np.where(abs_pos <= mid_x, x, log_pos)  # where(abs_pos <= mid, relative_pos, log_pos * sign)
    return np.minimum(truncate(bucket), bs)


_PATH_FUNCTIONS: dict[str, Any] = {"t5": _t5_path, "deberta": _deberta_path}


def path_buckets(scheme: BucketScheme, distances: npt.ArrayLike, path: str, dtype: str | Format, *,
                 constants: str = "dtype") -> F64:
    """The bucket each distance (integers >= 0) gets on a code path in a dtype (float64; nan: undefined).

    ``constants``: how the ``lowp`` path holds the formula's constants (``max_exact``, the log of
    ``max_distance / max_exact``, DeBERTa's ``torch.log(torch.tensor(...))``): ``"dtype"`` stores them in
    the dtype, as a graph converted to float16 (ONNX) does; ``"float32"`` keeps them in float32, as torch
    does when it runs the function on tensors of the dtype (Python scalars and 0-dim float32 tensors stay
    in its float32 opmath; the tests run DeBERTa's ``make_log_bucket_position`` on bf16/fp16 tensors).
    The path ``lowp-eager`` is ``lowp`` with ``constants="float32"`` (``constants`` is then not read).

    A distance that becomes inf or nan in the dtype (float16 from 65520) reaches ``.to(torch.long)``
    as a non-finite value, whose integer is undefined behaviour: nan here.

    >>> path_buckets(BucketScheme("t5"), [65519, 65520], "lowp", "float16").tolist()
    [15.0, nan]
    >>> path_buckets(BucketScheme("deberta"), [300, 301], "lowp", "bfloat16").tolist()  # 301 -> 300 in bf16
    [207.0, 207.0]
    >>> exact_buckets(BucketScheme("t5"), [16, 45]).tolist()
    [10, 12]
    >>> path_buckets(BucketScheme("t5"), [16, 45], "lowp", "bfloat16").tolist()  # constants in bf16
    [10.0, 13.0]
    >>> path_buckets(BucketScheme("t5"), [16, 45], "lowp-eager", "bfloat16").tolist()  # constants in float32
    [9.0, 12.0]
    """
    check_choice(path, "path", PATHS)
    check_choice(constants, "constants", ("dtype", "float32"))
    f = get_format(dtype)
    d = np.asarray(distances, dtype=np.float64)
    if d.size and (d.min() < 0 or not np.all(d == np.floor(d))):
        raise ValueError(f"distances {describe(distances)} must be non-negative integers")
    if path == "lowp-eager":
        path, constants = "lowp", "float32"
    with np.errstate(invalid="ignore"):
        return _PATH_FUNCTIONS[scheme.scheme](scheme, d, path, f, constants)
