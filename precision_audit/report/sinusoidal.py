"""Figures for the sinusoidal-encoding auditor (matplotlib, Agg backend, imported lazily).

>>> import tempfile, pathlib
>>> from precision_audit.sinusoidal import audit_sinusoidal
>>> rows = audit_sinusoidal(8, ("lowp", "fp32"), [256, 1024], max_lag=0)
>>> with tempfile.TemporaryDirectory() as tmp:
...     plot_duplicates(rows, pathlib.Path(tmp) / "d.png").stat().st_size > 0
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..rows import Row
from ..sinusoidal import DEFAULT_BASE, SinusoidalRow, decay_curve, decay_exact
from ._plotting import OKABE_ITO, format_color, pyplot, save_figure

__all__ = ["DecayCurve", "decay_curves", "plot_decay", "plot_duplicates"]


def _style(dtype: str, recipe: str) -> dict[str, object]:
    """Low-precision builds: solid, filled markers; the fp32 fix: dashed, hollow markers."""
    marker = {"bfloat16": "o", "float16": "s"}.get(dtype, "D")
    if recipe == "fp32":
        return dict(color=OKABE_ITO["blue"] if dtype == "bfloat16" else OKABE_ITO["green"] if dtype == "float16"
                    else OKABE_ITO["sky"], ls="--", marker=marker, mfc="none")
    return dict(color=format_color(dtype), ls="-", marker=marker)


def plot_duplicates(rows: Sequence[SinusoidalRow], path: str | Path) -> Path:
    """Share of positions whose encoding row is duplicated, and max abs error, vs context length.

    ``rows`` come from :func:`precision_audit.sinusoidal.audit_sinusoidal`.
    """
    plt = pyplot()
    dtypes = list(dict.fromkeys(r.dtype for r in rows))
    recipes = list(dict.fromkeys(r.recipe for r in rows))
    dim = rows[0].dim
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    x: list[int] = []
    for dt in dtypes:
        for rec in recipes:
            sel = [r for r in rows if r.dtype == dt and r.recipe == rec]
            x = [r.length for r in sel]
            label = f"{dt}, {rec}" + (" (the fix)" if rec == "fp32" else "")
            ax1.plot(x, [100 * r.duplicate_fraction for r in sel], label=label, **_style(dt, rec))  # type: ignore[arg-type]
            # rows with overflowed (non-finite) positions have no finite error: leave a gap
            err = [r.max_abs_error if r.nonfinite_rows == 0 else np.nan for r in sel]
            ax2.plot(x, err, label=label, **_style(dt, rec))  # type: ignore[arg-type]
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length L (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_ylabel("positions with a duplicated encoding row (% of L)")
    ax1.set_ylim(-3, 103)
    ax1.set_title("Positions that lose their encoding")
    ax1.legend(loc="upper left", fontsize=9)
    ax2.set_yscale("log")
    ax2.set_ylabel("max |stored - exact| over the table (encoding units)")
    ax2.set_title("Largest entry error vs float64 encoding")
    ax2.axhline(2.0, color="grey", lw=0.8, ls=":")
    ax2.set_ylim(top=8.0)
    ax2.text(x[0], 2.6, "2 = largest possible (sin/cos of the wrong angle)", va="bottom", fontsize=8, color="grey")
    if any(r.nonfinite_rows for r in rows):
        first = min(r.length for r in rows if r.nonfinite_rows)
        ax2.text(0.98, 0.03, f"gaps: rows overflowed to inf (from L = {first}), no finite error",
                 transform=ax2.transAxes, ha="right", fontsize=8, color="0.3")
    fig.suptitle(f"Sinusoidal encoding PE(p, 2i) = sin(p / 10000^(2i/d)), d = {dim}: "
                 "low-precision build (lowp) vs fp32 build then cast (fp32)")
    return save_figure(fig, path)


@dataclass(frozen=True)
class DecayCurve(Row):
    """``mean_p S(p) . S(p+k)`` for lags k = 0..len-1 of one stored table (recipe ``exact``: the float64 curve)."""

    recipe: str
    dtype: str
    length: int
    dim: int
    mean_inner_product: tuple[float, ...]


def decay_curves(length: int, dim: int, cases: Sequence[tuple[str, str]], max_lag: int = 64) -> list[DecayCurve]:
    """The exact curve, then one :func:`~precision_audit.sinusoidal.decay_curve` per (dtype, recipe) case.

    >>> [c.recipe for c in decay_curves(64, 8, [("bfloat16", "lowp")], max_lag=2)]
    ['exact', 'lowp']
    """
    ks = np.arange(min(max_lag, length - 1) + 1)
    out = [DecayCurve("exact", "float64", length, dim, tuple(decay_exact(dim, ks, base=DEFAULT_BASE).tolist()))]
    for dt, rec in cases:
        curve = decay_curve(length, dim, rec, dt, max_lag=max_lag)
        out.append(DecayCurve(rec, dt, length, dim, tuple(curve.tolist())))
    return out


def plot_decay(curves: Sequence[DecayCurve], path: str | Path) -> Path:
    """The decay curve mean_p PE(p).PE(p+k) vs lag k: exact (first curve) vs stored tables."""
    plt = pyplot()
    exact, rest = curves[0], curves[1:]
    fig, ax = plt.subplots(figsize=(8, 4.8), constrained_layout=True)
    ks = np.arange(len(exact.mean_inner_product))
    ax.plot(ks, exact.mean_inner_product, color="black", lw=2.5, label="exact (float64): sum_i cos(k w_i)")
    for c in rest:
        style = _style(c.dtype, c.recipe)
        style["marker"] = None
        ax.plot(ks[: len(c.mean_inner_product)], c.mean_inner_product, lw=1.5, label=f"{c.dtype}, {c.recipe}",
                **style)  # type: ignore[arg-type]
    ax.set_xlabel("distance k between positions (tokens)")
    ax.set_ylabel("mean inner product PE(p) . PE(p+k) (encoding units)")
    ax.set_title(f"Inner product vs distance, L = {exact.length}, d = {exact.dim} (mean over p)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_figure(fig, path)
