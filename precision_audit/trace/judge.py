"""A traced output's verdict by its kind: what it holds decides which rule of :mod:`precision_audit.verdicts` applies.

The kind is read from the float64 shadow (the exact result), never from names:

* ``positions``: integer-valued, every row (last axis) distinct: ids or distances.  Rule:
  :func:`~precision_audit.verdicts.positions_verdict` (neighbouring values that share a real value collide; a
  value that overflows).
* ``buckets``: integer-valued with repeats in a row (a bucket function's output).  Rule: the relative
  auditor's (:mod:`precision_audit.relative`): ``broken`` where a bucket moves by more than one or is not
  finite, ``degraded`` where one moves to a neighbouring bucket, ``safe`` where none moves.
* ``rotation``: cos and sin returned side by side (two outputs of one shape with ``c**2 + s**2`` constant), or
  one output whose pairs (its last axis' halves, or its even and odd elements) have a constant norm: rotated
  vectors, a sinusoid table.  Rule: the RoPE rules (:func:`~precision_audit.verdicts.rope_verdict`) on the
  rotation angle's error: colliding positions (a row equal to the previous one's while the exact rows differ)
  and pairwise errors at the RoPE audits' distances (1, 16, 256, 4096 and L/2:
  :func:`precision_audit.rope.pairs.row_distances`) along the position axis (the axis as long as the positions).
* ``angles``: ``m * theta`` returned as such (every exact value its position times the value at position 1,
  along an axis as long as the positions that is not the last).  Rule: the RoPE rules on the angle's error.
* ``cos/sin``: one of cos or sin without its partner (every exact value in [-1, 1]).  Rule: the RoPE rules on
  the value errors, which stand for the angle's (a lower bound: |d cos| <= |d angle|).
* ``values``: anything else (biases, a scaled table).  Rule: ALiBi's
  (:func:`~precision_audit.verdicts.alibi_verdict`) per row of the last axis: ``broken`` where a value is not
  finite, or a row whose exact values are monotone has neighbours that share a value or swap order;
  ``degraded`` where a row's error is above :data:`~precision_audit.verdicts.DEFAULT_TOLERANCE` half-ulps of
  its largest exact value in the output's format.

Each judgement also says how far the output is from its own format's rounding of the exact result
(``half_ulps``: the largest error in half-ulps of the format at the exact value where it is largest; 1: a
correctly rounded result).

>>> import torch
>>> j = judge(torch.arange(300).to(torch.bfloat16), torch.arange(300, dtype=torch.float64), 300)
>>> j["kind"], j["verdict"], j["why"], j["half_ulps"]  # odd 257..297 meet a neighbour; 299 becomes 300
('positions', 'broken', "21 positions share the previous one's value (first 257)", 1.0)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..rope.pairs import row_distances
from ..verdicts import DEFAULT_TOLERANCE, positions_verdict, rope_verdict, rope_why

__all__ = ["BEYOND_ROUNDING", "judge", "judge_outputs"]

BEYOND_ROUNDING = 4.0
"""An output is "well beyond its format's own rounding of the exact result" when its error is more than this many
half-ulps of its format (1 is one correct rounding; faithful kernels and an op or two of float32 stay within)."""
_NORM_TOL = 1e-6  # relative spread of a pair's exact norm that still counts as constant
_SAMPLE = 1 << 20  # values a kind's test looks at, at most


def _np(t: Any) -> np.ndarray:
    return t.detach().double().cpu().numpy() if hasattr(t, "detach") else np.asarray(t, dtype=np.float64)


def _half_ulps(real: Any, exact: Any, dtype: str) -> float | None:
    """The largest |real - exact| in half-ulps of ``dtype`` at the exact value where it is largest (tensors,
    compared in blocks: :func:`~.compare._max_abs_diffs`)."""
    import torch

    from ..formats import get_format, spacing
    from .compare import _max_abs_diffs

    try:
        get_format(dtype)
    except ValueError:
        return None
    r, x = torch.as_tensor(real), torch.as_tensor(exact)
    (top,), at = _max_abs_diffs(r, [x], locate=True)
    if not math.isfinite(top) or at is None:
        return None
    value = float(x.reshape(-1)[at])
    return 0.0 if top == 0 else top / (float(spacing([value], dtype)[0]) / 2) if math.isfinite(value) else None


def _position_axis(shape: tuple[int, ...], length: int, skip_last: bool) -> int | None:
    """The last axis as long as the positions (None: none is)."""
    axes = range(len(shape) - (2 if skip_last else 1), -1, -1)
    return next((a for a in axes if shape[a] == length and length > 1), None)


def _wrap(x: np.ndarray) -> np.ndarray:
    """``x`` wrapped to [-pi, pi] (in place; only the values outside are touched: most errors are small)."""
    out = np.abs(x) > np.pi
    if out.any():
        x[out] -= 2 * np.pi * np.round(x[out] / (2 * np.pi))
    return x


def _rope_rule(err: np.ndarray, real_rows: list[np.ndarray], exact_rows: list[np.ndarray], axis: int | None,
               angles: bool) -> tuple[str, str | None, dict[str, Any]]:
    """The RoPE rules on per-element angle errors ``err`` (wrapped when ``angles``), rows along ``axis``."""
    finite = np.isfinite(err)
    top = float(np.abs(err[finite]).max()) if finite.any() else 0.0
    top = top if finite.all() else math.inf
    colliding, pairs = 0, []
    if axis is not None:
        e = np.moveaxis(err, axis, 0).reshape(err.shape[axis], -1)

        def rows(a: np.ndarray) -> np.ndarray:
            return np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)

        same = (lambda r: (r[1:] == r[:-1]).all(axis=1))(rows(real_rows[0]))  # most often none: stop here
        if same.any():
            for r in real_rows[1:]:
                same &= (lambda r2: (r2[1:] == r2[:-1]).all(axis=1))(rows(r))
            moved = np.zeros_like(same)
            for x in exact_rows:
                moved |= (lambda x2: (x2[1:] != x2[:-1]).any(axis=1))(rows(x))
            colliding = int((same & moved).sum())
        while e.shape[1] % 2 == 0 and e.shape[1] > 1 and np.array_equal(e[:, : e.shape[1] // 2],
                                                                          e[:, e.shape[1] // 2:]):
            e = e[:, : e.shape[1] // 2]  # cat(freqs, freqs): the same errors twice, the pairs once
        buf = np.empty_like(e)
        for d in row_distances(e.shape[0]):
            diff = np.subtract(e[d:], e[:-d], out=buf[: e.shape[0] - d])
            hi, lo = float(diff.max()), float(diff.min())
            if angles and not (-np.pi <= lo and hi <= np.pi) and math.isfinite(hi) and math.isfinite(lo):
                diff = _wrap(diff)
                hi, lo = float(diff.max()), float(diff.min())
            top_d = max(hi, -lo)
            pairs.append((d, top_d if math.isfinite(top_d) else math.inf))
    verdict = rope_verdict(top, colliding, pair_errors=pairs)
    return verdict, rope_why(top, colliding, pairs), {"max_rotation_error": top, "colliding": colliding,
                                                      "pair_errors": pairs}


def _constant_norm(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a**2 + b**2`` is one positive constant (checked on at most about :data:`_SAMPLE` values, whole
    rows of the last axis evenly spread: a kind is told, not measured)."""
    rows_a, rows_b = a.reshape(-1, a.shape[-1] if a.ndim else 1), b.reshape(-1, b.shape[-1] if b.ndim else 1)
    step = max(1, rows_a.shape[0] * rows_a.shape[1] // _SAMPLE)
    n = rows_a[::step] ** 2 + rows_b[::step] ** 2
    return bool(n.size) and bool(np.isfinite(n).all()) and n.max() > 0 and n.max() - n.min() <= _NORM_TOL * n.max()


def _pairs_of(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The (first, second) halves of a rotation's pairs whose exact norm is constant: halves of the last axis,
    else its even and odd elements (None: neither)."""
    if x.ndim == 0 or x.shape[-1] < 2 or x.shape[-1] % 2:
        return None
    h = x.shape[-1] // 2
    for a, b in ((slice(0, h), slice(h, None)), (slice(0, None, 2), slice(1, None, 2))):
        if _constant_norm(x[..., a], x[..., b]):
            return a, b
    return None


def _rotation(real: list[np.ndarray], exact: list[np.ndarray], length: int, single: bool) -> dict[str, Any]:
    """A rotation's judgement: two outputs (cos, sin) or the pairs of one."""
    if single:
        a, b = _pairs_of(exact[0])  # type: ignore[misc]
        (r,), (x,) = real, exact
        rc, rs, xc, xs = r[..., a], r[..., b], x[..., a], x[..., b]
    else:
        (rc, rs), (xc, xs) = real, exact
    while rc.ndim and rc.shape[-1] % 2 == 0 and rc.shape[-1] > 1 and all(
            np.array_equal(t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2:]) for t in (xc, xs, rc, rs)):
        rc, rs, xc, xs = (t[..., : t.shape[-1] // 2] for t in (rc, rs, xc, xs))  # cat(f, f): each pair once
    err = np.arctan2(rs * xc - rc * xs, rc * xc + rs * xs)  # the angle from the exact pair to the real one
    axis = _position_axis(err.shape, length, skip_last=False)
    verdict, why, extra = _rope_rule(err, [rc, rs], [xc, xs], axis, angles=True)
    return {"kind": "rotation", "verdict": verdict, "why": why, **extra}


def _angles_axis(x: np.ndarray, length: int) -> int | None:
    """The position axis of angles ``m * theta``: an axis as long as the positions, not the last one (the last
    holds frequencies; a bias row runs along it), along which every exact value is its position times the value
    at position 1, 0 at position 0 (checked on a sample of columns); None: not angles."""
    if x.ndim < 2 or length < 3:
        return None
    axis = _position_axis(x.shape, length, skip_last=True)
    if axis is None:
        return None
    e = np.moveaxis(x, axis, 0).reshape(length, -1)
    e = e[:, :: max(1, e.shape[1] * length // _SAMPLE)]
    m = np.arange(length, dtype=np.float64)[:, None]
    if not np.isfinite(e).all() or not (e[0] == 0).all() or not (e[1] != 0).any():
        return None
    return axis if bool(np.all(np.abs(e - m * e[1]) <= 1e-9 * np.abs(m * e[1]).max())) else None


def _integer_valued(x: np.ndarray) -> bool:
    f = x[np.isfinite(x)]
    return bool(f.size) and bool(np.array_equal(f, np.round(f)))


def _positions(r: np.ndarray, x: np.ndarray) -> dict[str, Any]:
    rows_r, rows_x = r.reshape(-1, r.shape[-1] if r.ndim else 1), x.reshape(-1, x.shape[-1] if x.ndim else 1)
    non_finite = int((~np.isfinite(rows_r) & np.isfinite(rows_x)).sum())
    order = np.argsort(rows_x, axis=1, kind="stable")
    sx, sr = np.take_along_axis(rows_x, order, 1), np.take_along_axis(rows_r, order, 1)
    hit = (sr[:, 1:] == sr[:, :-1]) & (sx[:, 1:] != sx[:, :-1])
    colliding = int(hit.sum())
    verdict = positions_verdict(colliding, non_finite)
    why = None
    if colliding:
        first = sx[:, 1:][hit]
        first = first[np.argmin(np.abs(first))]
        why = f"{colliding} positions share the previous one's value (first {int(first)})"
    elif non_finite:
        why = f"{non_finite} positions are not finite"
    bad = sx[sr != sx]
    first_inexact = int(bad[np.argmin(np.abs(bad))]) if bad.size else None
    return {"kind": "positions", "verdict": verdict, "why": why, "colliding": colliding, "non_finite": non_finite,
            "first_inexact": first_inexact}


def _buckets(r: np.ndarray, x: np.ndarray) -> dict[str, Any]:
    undefined = int((~np.isfinite(r)).sum())
    d = np.abs(r - x)
    flipped = int((d != 0).sum())
    shift = float(d[np.isfinite(d)].max()) if np.isfinite(d).any() else 0.0
    verdict = "broken" if undefined or shift > 1 else "degraded" if flipped else "safe"
    why = None if verdict == "safe" else (f"{flipped} buckets moved, by up to {shift:g}"
                                          + (f"; {undefined} not finite" if undefined else ""))
    return {"kind": "buckets", "verdict": verdict, "why": why, "flipped": flipped, "max_shift": shift}


def _values(r: np.ndarray, x: np.ndarray, dtype: str) -> dict[str, Any]:
    from ..formats import get_format, spacing

    rows_r, rows_x = r.reshape(-1, r.shape[-1] if r.ndim else 1), x.reshape(-1, x.shape[-1] if x.ndim else 1)
    non_finite = int((~np.isfinite(rows_r) & np.isfinite(rows_x)).sum())
    dx, dr = np.diff(rows_x, axis=1), np.diff(rows_r, axis=1)
    monotone = (dx > 0).all(axis=1) | (dx < 0).all(axis=1)
    shared = int(((dr == 0) & (dx != 0))[monotone].sum())
    swapped = int((np.sign(dr) * np.sign(dx) < 0)[monotone].sum())
    err = np.abs(rows_r - rows_x).max(axis=1)
    try:
        get_format(dtype)
        half = spacing(np.abs(rows_x).max(axis=1), dtype) / 2
        over = int((err > DEFAULT_TOLERANCE * half).sum())
    except ValueError:  # an integer dtype: exact or not
        over = int((err > 0).sum())
    if non_finite or shared or swapped:
        verdict = "broken"
        why = "; ".join(w for w in (f"{non_finite} values not finite" if non_finite else "",
                                    f"{shared} neighbours share a value" if shared else "",
                                    f"{swapped} neighbours swap order" if swapped else "") if w)
    elif over:
        verdict = "degraded"
        why = f"{over} rows off by more than {DEFAULT_TOLERANCE:g} half-ulps of their largest value"
    else:
        verdict, why = "safe", None
    return {"kind": "values", "verdict": verdict, "why": why}


def judge(real: Any, exact: Any, length: int) -> dict[str, Any]:
    """One output's judgement (``kind``, ``verdict``, ``why``, ``half_ulps`` and the rule's figures) from its real
    values and its float64 shadow; ``length``: how many positions the trace ran (the position axis' size).
    Infinities and NaN (an overflowed float16 output) are judged, never warned about."""
    with np.errstate(all="ignore"):
        return _judge(real, exact, length)


def _judge(real: Any, exact: Any, length: int) -> dict[str, Any]:
    dtype = str(getattr(real, "dtype", "float64")).removeprefix("torch.")
    r, x = _np(real), _np(exact)
    out: dict[str, Any]
    if _integer_valued(x):
        rows = x.reshape(-1, x.shape[-1] if x.ndim else 1)
        distinct = bool((np.diff(np.sort(rows, axis=1), axis=1) != 0).all())
        out = _positions(r, x) if distinct else _buckets(r, x)
    elif _pairs_of(x) is not None:
        out = _rotation([r], [x], length, single=True)
    elif _angles_axis(x, length) is not None:
        axis = _angles_axis(x, length)
        verdict, why, extra = _rope_rule(_wrap(r - x), [r], [x], axis, angles=True)
        out = {"kind": "angles", "verdict": verdict, "why": why, **extra}
    elif np.isfinite(x).all() and np.abs(x).max(initial=0.0) <= 1.0:
        axis = _position_axis(x.shape, length, skip_last=False)
        verdict, why, extra = _rope_rule(r - x, [r], [x], axis, angles=False)
        out = {"kind": "cos/sin", "verdict": verdict, "why": why, **extra}
    else:
        out = _values(r, x, dtype)
    out["half_ulps"] = _half_ulps(real, exact, dtype)
    return out


def _partners(reals: list[Any], exacts: list[np.ndarray]) -> dict[int, int]:
    """Outputs returned as cos and sin side by side: ``{i: i + 1}`` where both have one shape and their exact
    values' squares sum to a constant."""
    out: dict[int, int] = {}
    i = 0
    while i + 1 < len(exacts):
        a, b = exacts[i], exacts[i + 1]
        if a.shape == b.shape and a.size and getattr(reals[i], "is_floating_point", lambda: False)() \
                and getattr(reals[i + 1], "is_floating_point", lambda: False)() and _constant_norm(a, b):
            out[i] = i + 1
            i += 2
            continue
        i += 1
    return out


def judge_outputs(reals: list[Any], exacts: list[Any], length: int) -> list[dict[str, Any] | None]:
    """Each output's judgement (:func:`judge`; None for an output with no shadow or of another shape, a bool or
    complex one); cos and sin returned side by side are judged together as one rotation (both get it).

    >>> import torch
    >>> ang = torch.arange(512, dtype=torch.float64)[:, None] * torch.tensor([1.0, 0.01], dtype=torch.float64)
    >>> real = ang.to(torch.bfloat16).double()  # angles rounded to bf16: neighbouring rows collide from 257 on
    >>> [(j["kind"], j["verdict"]) for j in judge_outputs([real.cos(), real.sin()], [ang.cos(), ang.sin()], 512)]
    [('rotation', 'broken'), ('rotation', 'broken')]
    """
    ok = [e is not None and hasattr(r, "shape") and tuple(r.shape) == tuple(getattr(e, "shape", ()))
          and r.numel() > 0 and not r.is_complex() and str(r.dtype) != "torch.bool" for r, e in zip(reals, exacts)]
    xs = [_np(e) if k else np.zeros(0) for e, k in zip(exacts, ok)]
    out: list[dict[str, Any] | None] = [None] * len(reals)
    with np.errstate(all="ignore"):
        pairs = _partners([r if k else None for r, k in zip(reals, ok)], xs)
    for i, j in pairs.items():
        with np.errstate(all="ignore"):
            rot = _rotation([_np(reals[i]), _np(reals[j])], [xs[i], xs[j]], length, single=False)
        for k in (i, j):
            dtype = str(reals[k].dtype).removeprefix("torch.")
            out[k] = {**rot, "half_ulps": _half_ulps(reals[k], exacts[k], dtype)}
    for i, k in enumerate(ok):
        if k and out[i] is None:
            out[i] = judge(reals[i], exacts[i], length)
    return out
