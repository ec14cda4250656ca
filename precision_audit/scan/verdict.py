"""The verdict of one traced output, by what it holds: positions, buckets, angles, cos/sin, rotated vectors, biases.

Each output is held against its float64 shadow (:func:`precision_audit.trace.run_traced`), and each kind gets the
rule :mod:`precision_audit.verdicts` has for it:

* **positions** (the shadow holds integers, the output is floating): :func:`~precision_audit.verdicts.positions_verdict`
  on the positions that collide with their neighbour and the non-finite ones;
* **buckets** (an integer output): ``broken`` when a bucket moved by more than one, ``degraded`` when some moved
  to a neighbouring bucket, ``safe`` otherwise (the rule of :mod:`precision_audit.relative`);
* **angles**, **cos/sin**, **rotation** (complex), **rotated vectors**: the RoPE rules,
  :func:`~precision_audit.verdicts.rope_verdict` on the colliding rows along the position axis and the pairwise
  rotation errors at distances 1, 16, 256, 4096 and L/2 (angles wrapped to [-pi, pi]; a cos and a sin of one
  shape give the angle by atan2; one bounded table alone or rotated vectors give a lower bound of it: a value
  moves by at most the angle's error);
* **biases** (an ALiBi-like output: the callable's name says bias or alibi): ``broken`` when neighbouring keys
  share a bias the shadow tells apart, or a bias overflowed; ``degraded`` when some bias is off by more than
  :data:`~precision_audit.verdicts.DEFAULT_TOLERANCE` half-ulps of the output format at the largest bias.

>>> import numpy as np
>>> pos = np.arange(300.0)
>>> output_verdict(np.where(pos == 257, 256.0, pos), pos, 300)["verdict"]  # 257 rounds to 256 in bfloat16
'broken'
>>> ang = np.outer(np.arange(64.0), [1.0, 0.01])
>>> output_verdict(np.cos(ang).astype(np.float32), np.cos(ang), 64, partner=(np.sin(ang), np.sin(ang)))["verdict"]
'safe'
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..formats import spacing
from ..verdicts import DEFAULT_TOLERANCE, positions_verdict, resolved_error, rope_verdict, rope_why

__all__ = ["DISTANCES", "KINDS", "output_verdict", "pair_errors"]

DISTANCES = (1, 16, 256, 4096)
"""Pair distances of the RoPE rule (and L/2)."""
KINDS = ("positions", "buckets", "angles", "cos/sin", "rotation", "rotated vectors", "biases")


def _wrap(a: np.ndarray) -> np.ndarray:
    return np.abs((a + np.pi) % (2 * np.pi) - np.pi)


def _signed_wrap(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2 * np.pi) - np.pi


def _rows(a: np.ndarray, axis: int) -> np.ndarray:
    return np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)


def _axis(shape: tuple[int, ...], n: int) -> int:
    """The position axis: the first of size ``n`` (the positions given), else of a multiple of it (a grid's
    frames), else the longest."""
    for i, s in enumerate(shape):
        if s == n:
            return i
    for i, s in enumerate(shape):
        if s and s % n == 0:
            return i
    return int(np.argmax(shape)) if shape else 0


def _colliding(real: np.ndarray, shadow: np.ndarray) -> int:
    """Rows equal to the previous row where the shadow's rows differ."""
    if real.shape[0] < 2:
        return 0
    same = np.all(real[1:] == real[:-1], axis=1)
    apart = np.any(shadow[1:] != shadow[:-1], axis=1)
    return int(np.count_nonzero(same & apart))


def pair_errors(err: np.ndarray, distances: tuple[int, ...] = DISTANCES,
                step: np.ndarray | None = None) -> list[tuple[int, float] | tuple[int, float, float]]:
    """(D, max over rows m of the wrapped |err[m] - err[m - D]|) for each D shorter than the rows, and L/2:
    the relative rotation error of two positions D apart (``err``: signed angle errors, one row per position).
    ``step``: each column's exact rotation from one row to the next (rad); then each entry also gives the max
    over the columns that resolve D (:func:`~precision_audit.verdicts.resolved_error`).

    >>> pair_errors(np.array([[0.0], [0.1], [0.1], [0.4]]), (1, 2))
    [(1, 0.3), (2, 0.3)]
    >>> pair_errors(np.array([[0.0, 0.0], [0.0, 0.1], [0.0, 0.1], [0.0, 0.4]]), (1,), step=np.array([100.0, 1.0]))
    [(1, 0.3, 0.3), (2, 0.3, 0.3)]
    """
    n = err.shape[0]
    ds = sorted({d for d in (*distances, n // 2) if 0 < d < n})
    out: list[tuple[int, float] | tuple[int, float, float]] = []
    for d in ds:
        col = _wrap(err[d:] - err[:-d]).max(axis=0)
        top = round(float(col.max()), 12)
        out.append((d, top) if step is None else (d, top, min(top, round(resolved_error(col, d * step), 12))))
    return out


def _step(angle: np.ndarray) -> np.ndarray | None:
    """Each column's exact rotation between consecutive rows (``angle``: the shadow's angles, one row per
    position), or None where fewer than two rows."""
    return np.abs(_signed_wrap(angle[1] - angle[0])) if angle.shape[0] > 1 else None


def _rope(err: np.ndarray, real: np.ndarray, shadow: np.ndarray, kind: str,
          step: np.ndarray | None = None) -> dict[str, Any]:
    err = np.where(np.isfinite(err), err, np.pi)
    pairs = pair_errors(err, step=step)
    top = float(np.abs(err).max()) if err.size else 0.0
    col = _colliding(real, shadow)
    return {"kind": kind, "verdict": rope_verdict(top, col, pair_errors=pairs), "error": top,
            "why": rope_why(top, col, pairs), "colliding": col, "pairs": pairs}


def _positions(real: np.ndarray, shadow: np.ndarray) -> dict[str, Any]:
    flat_r, flat_s = real.reshape(-1), shadow.reshape(-1)
    bad = int(np.count_nonzero(~np.isfinite(flat_r)))
    col = int(np.count_nonzero((flat_r[1:] == flat_r[:-1]) & (flat_s[1:] != flat_s[:-1])))
    wrong = np.nonzero(flat_r != flat_s)[0]
    first = None if not wrong.size else int(flat_s[wrong[np.argmin(np.abs(flat_s[wrong]))]])
    v = positions_verdict(col, bad)
    why = None if v == "safe" else f"{col} positions collide with their neighbour" + (
        f", {bad} not finite" if bad else "") + (f"; first inexact {first}" if first is not None else "")
    err = float(np.nanmax(np.abs(flat_r - flat_s))) if flat_r.size and not bad else (math.inf if bad else 0.0)
    return {"kind": "positions", "verdict": v, "error": err, "why": why, "colliding": col, "first_inexact": first}


def _buckets(real: np.ndarray, shadow: np.ndarray) -> dict[str, Any]:
    diff = np.abs(real.astype(np.float64) - shadow)
    flipped = int(np.count_nonzero(diff))
    shift = float(diff.max()) if diff.size else 0.0
    v = "broken" if shift > 1 else "degraded" if flipped else "safe"
    why = None if v == "safe" else f"{flipped} buckets moved, by up to {shift:g}"
    return {"kind": "buckets", "verdict": v, "error": shift, "why": why}


def _biases(real: np.ndarray, shadow: np.ndarray, dtype: str) -> dict[str, Any]:
    bad = int(np.count_nonzero(~np.isfinite(real) & np.isfinite(shadow)))
    keys_r, keys_s = real.reshape(-1, real.shape[-1]), shadow.reshape(-1, shadow.shape[-1])
    shared = int(np.count_nonzero((keys_r[:, 1:] == keys_r[:, :-1]) & (keys_s[:, 1:] != keys_s[:, :-1])))
    err = np.abs(real - shadow)
    top = float(err[np.isfinite(err)].max()) if np.isfinite(err).any() else 0.0
    biggest = float(np.abs(shadow[np.isfinite(shadow)]).max()) if np.isfinite(shadow).any() else 0.0
    half_ulp = float(spacing(np.array([biggest]), dtype)[0]) / 2 if dtype != "float64" else 0.0
    if bad or shared:
        v, why = "broken", f"{shared} neighbouring keys share a bias" + (f", {bad} biases overflowed" if bad else "")
    elif top > DEFAULT_TOLERANCE * half_ulp:
        v, why = "degraded", f"a bias off by {top:.3g} ({top / half_ulp:.3g} half-ulps of {dtype} at {biggest:.3g})"
    else:
        v, why = "safe", None
    return {"kind": "biases", "verdict": v, "error": top if not bad else math.inf, "why": why, "colliding": shared}


def output_verdict(real: Any, shadow: Any, n_positions: int, *, dtype: str = "float32", hint: str = "",
                   partner: tuple[Any, Any] | None = None, rotated: bool = False) -> dict[str, Any]:
    """The verdict of one output (``real``: its values; ``shadow``: its float64 shadow, same shape) as
    ``{"kind", "verdict", "error", "why", ...}``; ``n_positions``: how many positions were given (the
    position axis is the first of that size); ``dtype``: the output's format; ``hint``: the callable's name
    (bias / alibi / bucket say the kind); ``partner``: (real, shadow) of the other of a cos/sin pair;
    ``rotated``: the output has the shape of the vectors given (rotated vectors).
    """
    r = np.asarray(real)
    s = np.asarray(shadow)
    low = hint.lower()
    if np.iscomplexobj(r) or np.iscomplexobj(s):
        r, s = r.astype(np.complex128), s.astype(np.complex128)
        ax = _axis(r.shape, n_positions)
        err = np.angle(r * np.conj(s))
        return _rope(_rows(err, ax), _rows(r, ax), _rows(s, ax), "rotation")
    s = s.astype(np.float64)
    if r.dtype.kind in "iub":
        return _buckets(r, s) if "bucket" in low or not r.ndim else \
            (_buckets(r, s) if not np.all(np.diff(s.reshape(-1)) >= 0) else _positions(r.astype(np.float64), s))
    r = r.astype(np.float64)
    finite = s[np.isfinite(s)]
    if "bias" in low or "alibi" in low:
        return _biases(r, s, dtype)
    if finite.size and np.array_equal(finite, np.round(finite)) and np.ptp(finite) > 0 and not rotated:
        return _buckets(r, s) if "bucket" in low else _positions(r, s)
    ax = _axis(r.shape, n_positions)
    if rotated:
        return _rope(_rows((r - s) / math.sqrt(2), ax), _rows(r, ax), _rows(s, ax), "rotated vectors")
    if finite.size and np.abs(finite).max() <= 1.0 + 1e-9:
        if partner is not None:
            pr, ps = (np.asarray(p).astype(np.float64) for p in partner)
            exact = np.arctan2(ps, s)
            err = _signed_wrap(np.arctan2(pr, r) - exact)
            both = np.concatenate([_rows(r, ax), _rows(pr, ax)], axis=1)
            return _rope(_rows(err, ax), both, np.concatenate([_rows(s, ax), _rows(ps, ax)], axis=1), "cos/sin",
                         _step(_rows(exact, ax)))
        return _rope(_rows(r - s, ax), _rows(r, ax), _rows(s, ax), "cos/sin")
    return _rope(_rows(_signed_wrap(r - s), ax), _rows(r, ax), _rows(s, ax), "angles", _step(_rows(s, ax)))
