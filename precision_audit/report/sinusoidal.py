"""Figures for the sinusoidal-encoding auditor (matplotlib, Agg backend, imported lazily).

>>> from precision_audit.report.sinusoidal import FIGURES
>>> sorted(FIGURES)
['decay', 'duplicates']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..sinusoidal import audit_sinusoidal, decay_curve, decay_exact
from ._plotting import pyplot, save_figure

__all__ = ["FIGURES", "plot_decay", "plot_duplicates", "make_figures"]

_STYLE = {  # (dtype, recipe) -> matplotlib line style
    ("bfloat16", "lowp"): dict(color="tab:red", ls="-", marker="o"),
    ("float16", "lowp"): dict(color="tab:orange", ls="-", marker="s"),
    ("bfloat16", "fp32"): dict(color="tab:blue", ls="--", marker="o", mfc="none"),
    ("float16", "fp32"): dict(color="tab:green", ls="--", marker="s", mfc="none"),
}


def plot_duplicates(
    path: str | Path,
    *,
    dim: int = 512,
    lengths: Sequence[int] = tuple(2**n for n in range(8, 18)),
    dtypes: Sequence[str] = ("bfloat16", "float16"),
    recipes: Sequence[str] = ("lowp", "fp32"),
) -> Path:
    """Share of positions whose encoding row is duplicated, and max abs error, vs context length.

    Returns the path written.  (Runs the auditor: ~15 s at the default 128K x 512.)

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     plot_duplicates(pathlib.Path(tmp) / "d.png", dim=8, lengths=(256, 1024)).stat().st_size > 0
    True
    """
    plt = pyplot()

    rows = audit_sinusoidal(lengths, dim, dtypes, recipes, max_lag=0)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6), constrained_layout=True)
    for dt in dtypes:
        for rec in recipes:
            sel = [r for r in rows if r.dtype == dt and r.recipe == rec]
            x = [r.length for r in sel]
            style = _STYLE.get((dt, rec), {})
            label = f"{dt}, {rec}" + (" (the fix)" if rec == "fp32" else "")
            ax1.plot(x, [100 * r.duplicate_fraction for r in sel], label=label, **style)
            # rows with overflowed (non-finite) positions have no finite error: leave a gap
            err = [r.max_abs_error if r.nonfinite_rows == 0 else np.nan for r in sel]
            ax2.plot(x, err, label=label, **style)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length L (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_ylabel("positions with a duplicated encoding row (% of L)")
    ax1.set_ylim(-3, 103)
    ax1.set_title("Positions that lose their encoding")
    ax1.legend(loc="upper left")
    ax2.set_yscale("log")
    ax2.set_ylabel("max |stored - exact| over the table (encoding units)")
    ax2.set_title("Largest entry error vs float64 encoding")
    ax2.axhline(2.0, color="grey", lw=0.8, ls=":")
    ax2.set_ylim(top=8.0)
    ax2.text(x[0], 2.6, "2 = largest possible (sin/cos of the wrong angle)", va="bottom", fontsize=8, color="grey")
    if "float16" in dtypes and "lowp" in recipes:
        ax2.text(0.98, 0.03, "float16 lowp: positions >= 65520 overflow to inf (no finite error)",
                 transform=ax2.transAxes, ha="right", fontsize=8, color="tab:orange")
    fig.suptitle(f"Sinusoidal encoding PE(p, 2i) = sin(p / 10000^(2i/d)), d = {dim}: "
                 "low-precision build (lowp) vs fp32 build then cast (fp32)")
    return save_figure(fig, path)


def plot_decay(
    path: str | Path,
    *,
    length: int = 8192,
    dim: int = 512,
    max_lag: int = 64,
    cases: Sequence[tuple[str, str]] = (("bfloat16", "lowp"), ("float16", "lowp"), ("bfloat16", "fp32")),
) -> Path:
    """The decay curve mean_p PE(p).PE(p+k) vs lag k: exact vs stored tables.

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     plot_decay(pathlib.Path(tmp) / "c.png", length=128, dim=8, max_lag=4).stat().st_size > 0
    True
    """
    plt = pyplot()

    ks = np.arange(max_lag + 1)
    fig, ax = plt.subplots(figsize=(8, 4.8), constrained_layout=True)
    ax.plot(ks, decay_exact(dim, ks), color="black", lw=2.5, label="exact (float64): sum_i cos(k w_i)")
    for dt, rec in cases:
        curve = decay_curve(length, dim, rec, dt, max_lag=max_lag)
        style = dict(_STYLE.get((dt, rec), {}))
        style["marker"] = None
        ax.plot(ks, curve, lw=1.5, label=f"{dt}, {rec}", **style)
    ax.set_xlabel("distance k between positions (tokens)")
    ax.set_ylabel("mean inner product PE(p) . PE(p+k)")
    ax.set_title(f"Inner product vs distance, L = {length}, d = {dim} (mean over p)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


FIGURES: dict[str, tuple[str, Callable[..., Path]]] = {
    "duplicates": ("sinusoidal_duplicates.png", plot_duplicates),
    "decay": ("sinusoidal_decay.png", plot_decay),
}


def make_figures(directory: str | Path = "figures") -> list[Path]:
    """Write every sinusoidal figure into ``directory`` (~20 s); returns the paths.

    ``python -m precision_audit.report.sinusoidal figures`` does the same.
    """
    return [fn(Path(directory) / name) for name, fn in FIGURES.values()]


if __name__ == "__main__":  # python -m precision_audit.report.sinusoidal [DIR]
    import sys

    for p in make_figures(sys.argv[1] if len(sys.argv) > 1 else "figures"):
        print(p)
