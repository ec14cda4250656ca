"""Transformer-XL / XLNet relative sinusoids: the sinusoidal encoding of the relative distances.

XLNet (``XLNetModel.relative_positional_encoding``) encodes the distances
``klen, klen-1, ..., -qlen+1`` (``attn_type="bi"``) or ``klen .. 0``
(``"uni"``); ``bi_data`` adds the negated sequence, the same set mirrored.
Each row is ``[sin(p w_i) ..., cos(p w_i) ...]``.  The code paths map onto the
sinusoidal auditor's recipes (:mod:`precision_audit.sinusoidal`), whose
measures are reused as they are:

``transformers``    XLNet: int64 ``arange(...).float()``, ``inv_freq`` and sin/cos in float32,
                    the table cast to the model dtype by ``r.type(self.r.dtype)``: recipe ``fp32``.
``arange-dtype``    ``torch.arange(klen - 1, -1, -1.0, dtype=word_emb.dtype)`` as the original
                    Transformer-XL code (and transformers' TransfoXL before its removal) built the
                    sequence, with the ``inv_freq`` buffer cast by ``model.half()`` and sin/cos in
                    that dtype: recipe ``lowp``.
``positions-dtype`` only the distance sequence in the dtype, the rest float32: ``lowp-positions``.

(Positions are modelled correctly rounded; torch's CPU ``arange`` in a low-precision dtype can differ
above the exact-integer range, see :mod:`precision_audit.positions`.)

Negative distances: rounding to nearest is odd-symmetric, sin odd and cos even, so the row of ``-p`` is
the row of ``p`` with its sines negated, on every recipe: duplicates and errors among the negative
distances are those of the positive distances 1..qlen-1.  A row of ``-q`` equals the row of a ``p >= 1``
only if each of its stored sines is the negative of the other's; ``cross_sign_clear`` is True when the lowest
frequency's stored sine is > 0 for every distance 1..klen (its rounded angle stays in (0, pi/2] and the
smallest one's sine does not round to zero), which proves no row is shared across signs; the
duplicate and distinct counts then add up exactly.

>>> r = audit_relative_sinusoid(64, ["transformers", "arange-dtype"], 512, "bfloat16")
>>> [(x.path, x.distances, x.duplicate_rows, x.cross_sign_clear) for x in r]
[('transformers', 1024, 0, True), ('arange-dtype', 1024, 384, True)]

(bf16 distances: 193 of 0..512 share a row (511 and 512 too), and the mirrors of 191 of 1..511.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_int, check_lengths, check_names
from ..rows import Row
from ..formats import Format, get_format, round_to
from ..sinusoidal import DEFAULT_BASE, MAX_SINUSOIDAL_LENGTH, audit_sinusoidal, frequencies, get_recipe

__all__ = ["ATTN_TYPES", "SINUSOID_PATHS", "RelativeSinusoidRow", "audit_relative_sinusoid", "relative_distances"]

SINUSOID_PATHS: dict[str, str] = {"transformers": "fp32", "arange-dtype": "lowp", "positions-dtype": "lowp-positions"}
_FLOAT32_DISTANCES = "build the relative distances in float32 (torch.arange(..., dtype=torch.float32)); cast only the encoding"
LABELS: dict[str, tuple[str, str | None]] = {  # the paths beyond transformers' as the bottom line names them
    "arange-dtype": ("relative distances built in the dtype (arange-dtype)", _FLOAT32_DISTANCES),
    "positions-dtype": ("relative distances cast to the dtype (positions-dtype)", _FLOAT32_DISTANCES),
}
ATTN_TYPES: tuple[str, ...] = ("bi", "uni")


@dataclass(frozen=True)
class RelativeSinusoidRow(Row):
    """The relative sinusoid of one (path, dtype, klen): XLNet's distances klen .. -qlen+1 (bi) or klen .. 0 (uni).

    ``distances``: how many signed distances; ``distinct_rows`` / ``duplicate_rows``: different stored rows
    and distances sharing theirs (exact when ``cross_sign_clear``); ``max_abs_error``, ``min_nn_distance``,
    ``nn_shrink``: the sinusoidal auditor's measures (nearest neighbours searched within each sign).
    """

    path: str
    recipe: str
    dtype: str
    klen: int
    qlen: int
    attn_type: str
    d_model: int
    distances: int
    distinct_rows: int
    duplicate_rows: int
    max_abs_error: float
    min_nn_distance: float
    nn_shrink: float
    cross_sign_clear: bool

    def __post_init__(self) -> None:
        check_choice(self.path, "path", tuple(SINUSOID_PATHS))
        check_choice(self.attn_type, "attn_type", ATTN_TYPES)
        if not 0 <= self.duplicate_rows <= self.distances or not 1 <= self.distinct_rows <= self.distances:
            raise ValueError(f"duplicate_rows {self.duplicate_rows} and distinct_rows {self.distinct_rows} must lie "
                             f"within distances {self.distances}")


def relative_distances(klen: int, qlen: int | None = None, attn_type: str = "bi") -> np.ndarray:
    """The distance sequence XLNet encodes (``torch.arange(beg, end, -1)``), int64.

    >>> relative_distances(3, 2).tolist(), relative_distances(3, attn_type="uni").tolist()
    ([3, 2, 1, 0, -1], [3, 2, 1, 0])
    """
    klen = check_int(klen, "klen", minimum=1)
    qlen = klen if qlen is None else check_int(qlen, "qlen", minimum=1, maximum=klen)
    end = -qlen if check_choice(attn_type, "attn_type", ATTN_TYPES) == "bi" else -1
    return np.arange(klen, end, -1, dtype=np.int64)


def _cross_sign_clear(klen: int, d_model: int, base: float, recipe: str, dtype: Format) -> bool:
    """The lowest frequency's stored sine is > 0 for every distance 1..klen (see the module docstring)."""
    fm = get_recipe(recipe).formats(dtype)
    w = round_to(frequencies(d_model, base)[-1:], fm["frequencies"])
    ends = round_to(np.array([1.0, float(klen)]), fm["positions"])
    ang = round_to(ends * w, fm["angles"])
    smallest = round_to(round_to(np.sin(ang[:1]), fm["trig"]), fm["table"])
    return bool(ang[1] <= math.pi / 2 and smallest[0] > 0)


def audit_relative_sinusoid(
    d_model: int,
    paths: str | Iterable[str],
    klens: int | Iterable[int],
    dtypes: str | Format | Iterable[str | Format] = ("bfloat16", "float16"),
    *,
    qlen: int | None = None,
    attn_type: str = "bi",
    base: float = DEFAULT_BASE,
) -> list[RelativeSinusoidRow]:
    """Audit XLNet / Transformer-XL relative sinusoids: one row per (dtype, klen, path).

    ``qlen``: query length (default: klen, no memory); ``bi_data`` encodes the same distances negated and
    changes nothing here.
    """
    ks = check_lengths(klens, limit=MAX_SINUSOIDAL_LENGTH - 1, why="the sinusoidal audit keeps O(L) state")
    check_choice(attn_type, "attn_type", ATTN_TYPES)
    names = list(dict.fromkeys(check_choice(p, "path", tuple(SINUSOID_PATHS))
                               for p in check_names(paths, "paths", "path")))
    fmts = list(dict.fromkeys(get_format(d).name for d in check_names(dtypes, "dtypes", "format name", Format)))
    qs = {k: (k if qlen is None else check_int(qlen, "qlen", minimum=1, maximum=k)) for k in ks}
    neg = {k: qs[k] if attn_type == "bi" else 1 for k in ks}  # distances 0..q-1 mirror the negatives 1..q-1
    lengths = sorted({k + 1 for k in ks} | {n for n in neg.values() if n > 1})
    rows = audit_sinusoidal(d_model, [SINUSOID_PATHS[p] for p in names], lengths, fmts, base=base)
    by = {(r.dtype, r.length, r.recipe): r for r in rows}
    out = []
    for f in fmts:
        for k in ks:
            for p in names:
                rec = SINUSOID_PATHS[p]
                pos = by[f, k + 1, rec]
                mirror = by[f, neg[k], rec] if neg[k] > 1 else None
                parts = [pos] + ([mirror] if mirror else [])
                out.append(RelativeSinusoidRow(
                    path=p, recipe=rec, dtype=f, klen=k, qlen=qs[k], attn_type=attn_type, d_model=d_model,
                    distances=k + 1 + (neg[k] - 1),
                    distinct_rows=pos.distinct_rows + (mirror.distinct_rows - 1 if mirror else 0),
                    duplicate_rows=sum(x.duplicate_rows for x in parts),
                    max_abs_error=max(x.max_abs_error for x in parts),
                    min_nn_distance=min(x.min_nn_distance for x in parts),
                    nn_shrink=max(x.nn_shrink for x in parts),
                    cross_sign_clear=mirror is None or _cross_sign_clear(k, d_model, base, rec, get_format(f)),
                ))
    return out
