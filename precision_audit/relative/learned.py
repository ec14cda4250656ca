"""Learned absolute position embeddings (GPT-2, BERT, OPT): position ids index a table.

A table lookup is exact whatever the model dtype: the embedding rows are
stored in it, but which row a token reads is an int64 index.  What can still
go wrong is the index itself when it is computed in a float dtype: OPT (and
every model that derives position ids from the attention mask for left
padding) computes ``position_ids = cumsum(mask) * mask - 1`` and adds its
offset 2 (``OPTLearnedPositionalEmbedding``: rows 0 and 1 are reserved).  With
the mask held in bf16/fp16 (a mask cast to the model dtype), the cumulative
sum and the ``- 1`` are rounded to the dtype, and tokens above 256 (bf16) /
2048 (fp16) share position ids.

Paths (:data:`LEARNED_PATHS`):

``arange``          ``position_ids = torch.arange(L)`` (int64): GPT-2, BERT, OPT given ids.
``mask-int64``      OPT's cumsum on an integer mask, + 2: exact.
``mask-cumsum``     the mask in the dtype; torch's CPU cumsum accumulates in float32 and
                    rounds each output (the exact count rounded once), then ``* mask - 1``
                    rounded to the dtype, ``.long()``, + 2 (checked against OPT's module).
``mask-scan``       the same with every partial sum rounded to the dtype (a scan done in the
                    dtype): the sum sticks at 2**p (256 in bf16, 2048 in fp16), since
                    2**p + 1 is a tie that rounds back to 2**p.

Left padding does not change the figures: a pad has mask 0, its cumsum adds
nothing and its id is ``0 * 0 - 1 = -1`` (row 1 after the offset), exactly.

>>> rows = audit_learned(["mask-cumsum", "mask-scan"], [256, 8192], "bfloat16")
>>> for r in rows:
...     print(r.length, r.path, r.wrong, r.distinct_ids, r.verdict)
256 mask-cumsum 0 256 safe
256 mask-scan 0 256 safe
8192 mask-cumsum 7361 833 broken
8192 mask-scan 7936 256 broken
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_lengths, check_names
from ..rows import Row
from ..formats import Format, get_format, round_to
from .ops import F64

__all__ = ["LEARNED_PATHS", "MAX_LEARNED_LENGTH", "OPT_OFFSET", "LearnedRow", "audit_learned", "position_ids"]

LEARNED_PATHS: tuple[str, ...] = ("arange", "mask-int64", "mask-cumsum", "mask-scan")
_INT64_MASK = "cast the attention mask to int64 before the cumsum that makes position ids"
LABELS: dict[str, tuple[str, str | None]] = {  # each path as the bottom line names it, and its fix
    "arange": ("position ids from arange (int64)", None),
    "mask-int64": ("position ids from an int64 attention mask's cumsum (OPT, left padding)", None),
    "mask-cumsum": ("position ids from the cumsum of a mask held in the dtype", _INT64_MASK),
    "mask-scan": ("position ids from a running sum in the dtype", _INT64_MASK),
}
OPT_OFFSET = 2  # OPTLearnedPositionalEmbedding.offset
MAX_LEARNED_LENGTH = 2**26  # the ids are materialised: 8 bytes a token


@dataclass(frozen=True)
class LearnedRow(Row):
    """Position ids of the tokens 0..length-1 on one path in one dtype.

    * ``wrong``: tokens whose id differs from the exact one (``arange``: the token's index; OPT: index + 2).
    * ``first_wrong``: the first such token, or None.
    * ``distinct_ids``: different ids among the ``length`` tokens.
    * ``collided``: tokens sharing their id with another token.
    * ``max_error``: the largest |id - exact id|.
    * ``verdict``: ``safe`` (every id exact), ``degraded`` (ids wrong but distinct), ``broken`` (tokens share ids).
    """

    path: str
    dtype: str
    length: int
    wrong: int
    first_wrong: int | None
    distinct_ids: int
    collided: int
    max_error: int
    verdict: str

    def __post_init__(self) -> None:
        check_choice(self.path, "path", LEARNED_PATHS)
        check_choice(self.verdict, "verdict", ("safe", "degraded", "broken"))
        if not 0 <= self.wrong <= self.length or not 0 <= self.collided <= self.length:
            raise ValueError(f"wrong {self.wrong} and collided {self.collided} must lie in 0..length {self.length}")


def _scan(n: int, f: Format) -> F64:
    """Partial sums of n ones, each rounded to ``f``: s_k = round(s_{k-1} + 1)."""
    out = np.arange(1, n + 1, dtype=np.float64)
    m = f.max_exact_integer  # every partial sum up to m is exact
    s, k = float(m), m
    while k < n:  # past m: a few more steps until the sum stops moving (a tie back to 2**p, or saturation)
        nxt = float(round_to(np.float64(s + 1.0), f)[()])
        if nxt == s or not np.isfinite(nxt):
            out[k:] = nxt
            break
        out[k], s, k = nxt, nxt, k + 1
    return out


def position_ids(length: int, path: str, dtype: str | Format) -> F64:
    """The position id (float64 holding an int64 value) of each token 0..length-1 on a path.

    >>> position_ids(6, "mask-int64", "bf16").tolist()  # OPT: cumsum - 1 + offset 2
    [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    >>> position_ids(262, "mask-cumsum", "bf16")[255:].tolist()  # counts 256..262 -> 256 256 258 260 260 260 262,
    [257.0, 257.0, 258.0, 262.0, 262.0, 262.0, 262.0]

    (minus 1: 255 255 257 259 259 259 261 -> 255 255 256 260 260 260 260 in bf16, ties to even; plus 2.)
    """
    n = check_lengths(length, limit=MAX_LEARNED_LENGTH, why="the ids are materialised")[0]
    check_choice(path, "path", LEARNED_PATHS)
    f = get_format(dtype)
    if path == "arange":
        return np.arange(n, dtype=np.float64)
    counts = np.arange(1, n + 1, dtype=np.float64)  # cumsum of an all-ones mask (the real tokens)
    if path == "mask-cumsum":
        counts = round_to(counts, f)  # float32 accumulation: exact to 2**24, each output rounded once
    elif path == "mask-scan":
        counts = _scan(n, f)
    if path != "mask-int64":
        counts = round_to(counts - 1.0, f)  # (position_ids * attention_mask - 1) in the dtype; * 1 is exact
    else:
        counts = counts - 1.0
    with np.errstate(invalid="ignore"):
        return np.trunc(counts) + OPT_OFFSET  # .long() + self.offset


def _row(path: str, f: Format, n: int) -> LearnedRow:
    ids = position_ids(n, path, f)
    exact = np.arange(n, dtype=np.float64) + (0 if path == "arange" else OPT_OFFSET)
    bad = ids != exact
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    collided = int(np.count_nonzero(counts[inverse] > 1))
    wrong = int(np.count_nonzero(bad))
    err = np.abs(ids - exact)[np.isfinite(ids)]  # an id that overflowed (fp16 from 65520) counts as wrong only
    return LearnedRow(
        path=path, dtype=f.name, length=n, wrong=wrong, first_wrong=int(np.argmax(bad)) if wrong else None,
        distinct_ids=int(counts.size), collided=collided,
        max_error=int(err.max()) if err.size else 0,
        verdict="broken" if collided else "degraded" if wrong else "safe",
    )


def audit_learned(
    paths: str | Iterable[str] = LEARNED_PATHS,
    lengths: int | Iterable[int] = (512, 2048, 8192),
    dtypes: str | Format | Iterable[str | Format] = ("bfloat16", "float16"),
) -> list[LearnedRow]:
    """Audit learned-position ids: one :class:`LearnedRow` per (dtype, length, path).

    >>> [(r.path, r.verdict) for r in audit_learned(LEARNED_PATHS, 4096, "float16")]
    [('arange', 'safe'), ('mask-int64', 'safe'), ('mask-cumsum', 'broken'), ('mask-scan', 'broken')]
    """
    lens = check_lengths(lengths, limit=MAX_LEARNED_LENGTH, why="the ids are materialised")
    fmts = list(dict.fromkeys(get_format(d) for d in check_names(dtypes, "dtypes", "format name", Format)))
    names = list(dict.fromkeys(check_choice(p, "path", LEARNED_PATHS) for p in check_names(paths, "paths", "path")))
    return [_row(p, f, n) for f in fmts for n in lens for p in names]
