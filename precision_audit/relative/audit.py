"""The bucket auditor: per scheme, code path, dtype and context length, the distances whose bucket flips.

A context of L tokens holds the distances 0..L-1.  Each is bucketed on the
code path (:func:`~.buckets.path_buckets`) and exactly
(:func:`~.buckets.exact_buckets`); a distance *flips* when the two differ.
Bidirectional attention also has the keys after the query (T5: distances
1..L-1 get ``num_buckets / 2`` plus the same bucket; DeBERTa: the negated
one); they go through the same operations on ``|d|``, so each flips exactly
when its mirror does: the count over all 2L - 1 signed distances is
``2 * flipped`` (distance 0 never flips).  Counted here: the distances 0..L-1.

Every operation of both schemes is monotone in d (rounding, log, division
and multiplication by positive constants, truncation, ceil, min), so once
both the path's and the exact bucket reach the last bucket they stay there:
the sweep stops at that distance and every longer context costs nothing more,
up to the distance whose cast overflows (float16: 65520), from which the
bucket is undefined (the rest of the context is counted as such).  In a
saturating format (float6, float4) every distance from ``max_finite`` on is
held as ``max_finite``: one bucket, counted for the rest of the context.

>>> rows = audit_relative("t5", "lowp", [512, 32768], "bfloat16")
>>> [(r.length, r.flipped, r.first_flip, r.max_shift) for r in rows]
[(512, 2, 45, 1), (32768, 2, 45, 1)]
>>> r = audit_relative("t5", "lowp", 2**17, "float16")[0]
>>> r.flipped, r.undefined, r.first_flip, r.verdict  # 65520 .. 131071 become inf
(65552, 65552, 65520, 'broken')
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_lengths, check_names
from ..rows import Row
from ..formats import Format, get_format
from .buckets import PATHS, BucketScheme, exact_buckets, path_buckets

__all__ = ["RelativeRow", "audit_relative", "bucket_scheme"]

_FIRST_CHUNK = 4096
_MAX_CHUNK = 2**20


@dataclass(frozen=True)
class RelativeRow(Row):
    """Bucket flips of one (scheme, path, dtype, context length).

    * ``flipped``: distances 0..length-1 whose bucket differs from the exact one (undefined ones included).
    * ``first_flip``: the smallest such distance, or None.
    * ``max_shift``: the largest |bucket - exact bucket| over the flipped distances with a defined bucket.
    * ``undefined``: distances whose value is inf or nan when it reaches ``.to(torch.long)`` (no bucket:
      undefined behaviour; CPU torch gives a huge negative index).
    * ``verdict``: ``safe`` (nothing flips), ``degraded`` (buckets move to a neighbouring bucket only: max_shift 1),
      ``broken`` (a distance reads a bucket two or more away, or its bucket is undefined).
    """

    scheme: str
    path: str
    dtype: str
    length: int
    bidirectional: bool
    num_buckets: int
    max_distance: int
    flipped: int
    first_flip: int | None
    max_shift: int
    undefined: int
    verdict: str

    def __post_init__(self) -> None:
        check_choice(self.path, "path", PATHS)
        for name in ("flipped", "max_shift", "undefined"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} {getattr(self, name)} must be >= 0")
        if not 0 <= self.undefined <= self.flipped <= self.length:
            raise ValueError(f"undefined {self.undefined} <= flipped {self.flipped} <= length {self.length} fails")
        if (self.first_flip is None) != (self.flipped == 0):
            raise ValueError(f"first_flip {self.first_flip!r} must be None exactly when nothing flips")
        check_choice(self.verdict, "verdict", ("safe", "degraded", "broken"))


class _Sweep:
    """The flipped distances of one (scheme, path, dtype) up to a length, and the prefix reductions."""

    def __init__(self, scheme: BucketScheme, path: str, fmt: Format, stop: int) -> None:
        self.overflow = (fmt.overflow_integer if path != "transformers" and fmt.overflow != "saturate"
                         and fmt.overflow_integer < stop else None)
        # a saturating format (float6/float4) holds every distance from max_finite on as max_finite: constant
        saturated_from = (math.ceil(fmt.max_finite) if path != "transformers" and fmt.overflow == "saturate"
                          else None)
        limit = stop if self.overflow is None else self.overflow
        flips, shifts, a, chunk = [], [], 0, _FIRST_CHUNK
        self.tail: tuple[int, float] | None = None  # (from, shift): every distance from there on flips by shift
        while a < limit:
            b = min(limit, a + chunk)
            d = np.arange(a, b, dtype=np.int64)
            exact = exact_buckets(scheme, d).astype(np.float64)
            got = path_buckets(scheme, d, path, fmt)
            idx = np.flatnonzero(got != exact)  # nan (undefined) differs too
            flips.append(idx + a)
            shifts.append(np.abs(got[idx] - exact[idx]))
            a, chunk = b, min(2 * chunk, _MAX_CHUNK)
            if exact[-1] == scheme.top and got[-1] == scheme.top:
                break  # monotone: every longer distance is in the last bucket both ways (until the overflow)
            if exact[-1] == scheme.top and saturated_from is not None and b - 1 >= saturated_from:
                self.tail = (b, float(abs(got[-1] - exact[-1])))  # the same bucket for every longer distance
                break
        self.flips = np.concatenate(flips) if flips else np.zeros(0, np.int64)
        s = np.concatenate(shifts) if shifts else np.zeros(0)
        self.running_max = np.fmax.accumulate(np.where(np.isnan(s), 0.0, s)) if s.size else s

    def row(self, scheme: BucketScheme, path: str, fmt: Format, length: int) -> RelativeRow:
        k = int(np.searchsorted(self.flips, length))
        undefined = 0 if self.overflow is None else max(0, length - self.overflow)
        tail = max(0, length - self.tail[0]) if self.tail is not None and self.tail[1] else 0
        first = int(self.flips[0]) if k else (self.overflow if undefined else self.tail[0] if tail else None)
        flipped = k + undefined + tail
        shift = max(int(self.running_max[k - 1]) if k else 0, int(self.tail[1]) if tail else 0)
        return RelativeRow(
            scheme=scheme.scheme, path=path, dtype=fmt.name, length=length, bidirectional=scheme.bidirectional,
            num_buckets=int(scheme.num_buckets or 0), max_distance=int(scheme.max_distance or 0),
            flipped=flipped, first_flip=first, max_shift=shift,
            undefined=undefined, verdict="broken" if undefined or shift > 1 else "degraded" if flipped else "safe",
        )


def bucket_scheme(scheme: str | BucketScheme, *, bidirectional: bool = True, num_buckets: int | None = None,
                  max_distance: int | None = None) -> BucketScheme:
    """A :class:`~.buckets.BucketScheme` from a name and its parameters (or one given, with no parameters).

    >>> bucket_scheme("deberta").num_buckets, bucket_scheme("deberta").max_distance
    (256, 512)
    """
    if isinstance(scheme, BucketScheme):
        if not bidirectional or num_buckets is not None or max_distance is not None:
            raise ValueError("scheme is a BucketScheme already: give its parameters there, not as keywords")
        return scheme
    return BucketScheme(scheme, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)


def audit_relative(
    scheme: str | BucketScheme = "t5",
    paths: str | Iterable[str] = PATHS,
    lengths: int | Iterable[int] = (512, 2048, 8192, 32768),
    dtypes: str | Format | Iterable[str | Format] = ("bfloat16", "float16"),
    *,
    bidirectional: bool = True,
    num_buckets: int | None = None,
    max_distance: int | None = None,
) -> list[RelativeRow]:
    """Audit relative-position buckets: one :class:`RelativeRow` per (dtype, length, path).

    ``scheme``: ``"t5"`` or ``"deberta"`` with its parameters (``num_buckets`` / ``max_distance``:
    T5's ``relative_attention_num_buckets`` / ``relative_attention_max_distance``, DeBERTa's
    ``position_buckets`` / ``max_relative_positions``; None: the published defaults 32 / 128 and
    256 / 512), or a :class:`~.buckets.BucketScheme`.  ``paths``: see :data:`~.buckets.PATHS`.
    Any length up to 2**53 runs in milliseconds (see the module docstring).

    >>> rows = audit_relative("deberta", ["transformers", "lowp"], 2048, "bfloat16")
    >>> [(r.path, r.flipped, r.first_flip, r.max_shift) for r in rows]
    [('transformers', 0, None, 0), ('lowp', 76, 170, 1)]
    >>> audit_relative("t5", "lowp", 512, "bf16", num_buckets=0)
    Traceback (most recent call last):
    ...
    ValueError: num_buckets 0 must be at least 4 for bidirectional t5
    """
    s = bucket_scheme(scheme, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    names = [check_choice(p, "path", PATHS) for p in check_names(paths, "paths", "path")]
    lens = check_lengths(lengths)
    fmts = list(dict.fromkeys(get_format(d) for d in check_names(dtypes, "dtypes", "format name", Format)))
    sweeps = {(p, f.name): _Sweep(s, p, f, lens[-1]) for p in dict.fromkeys(names) for f in fmts}
    return [sweeps[p, f.name].row(s, p, f, n) for f in fmts for n in lens for p in dict.fromkeys(names)]
