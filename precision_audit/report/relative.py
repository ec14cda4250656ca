"""Figure: relative-position buckets that flip (T5, DeBERTa) per dtype and code path vs context length.

>>> import tempfile, pathlib
>>> rows = relative_rows([64, 512], ["bfloat16"])
>>> with tempfile.TemporaryDirectory() as d:
...     plot_relative(rows, pathlib.Path(d) / "r.png").name
'r.png'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..relative import PATHS, RelativeRow, audit_relative
from ._plotting import format_color, pyplot, save_figure, tokens_formatter

__all__ = ["RELATIVE_FORMATS", "plot_relative", "relative_rows"]

RELATIVE_FORMATS = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
_PATH_STYLE = {"lowp": dict(ls="-", lw=2.0), "cast-distance": dict(ls=(0, (4, 2)), lw=1.6),
               "transformers": dict(ls=":", lw=1.6), "lowp-eager": dict(ls=(0, (1, 1.5, 5, 1.5)), lw=1.6)}
_PATH_LABEL = {"lowp": "lowp (every op in dtype)", "cast-distance": "cast-distance (distance in dtype)",
               "transformers": "transformers (.float(): float32)",
               "lowp-eager": "lowp-eager (every op in dtype, constants float32: eager torch)"}
_TITLES = {"t5": "T5 buckets (32 buckets, max_distance 128, bidirectional)",
           "deberta": "DeBERTa log buckets (256 buckets, max_position 512)"}


def relative_rows(lengths: Sequence[int], dtypes: Sequence[str] = RELATIVE_FORMATS) -> list[RelativeRow]:
    """T5 (bidirectional, 32 / 128) and DeBERTa (256 / 512) rows on every path, at the published defaults."""
    return [r for s in ("t5", "deberta") for r in audit_relative(s, PATHS, lengths, dtypes)]


def plot_relative(rows: Sequence[RelativeRow], path: str | Path) -> Path:
    """Distances 0..L-1 whose bucket flips vs context length, one panel per scheme, colour per dtype,
    line style per path (symlog y: 0 sits on the axis)."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    schemes = list(dict.fromkeys(r.scheme for r in rows))
    fig, axes = plt.subplots(1, len(schemes), figsize=(6.2 * len(schemes), 5.4), constrained_layout=True,
                             squeeze=False)
    dtypes = list(dict.fromkeys(r.dtype for r in rows))
    for ax, scheme in zip(axes[0], schemes):
        rs = [r for r in rows if r.scheme == scheme]
        for dtype in dict.fromkeys(r.dtype for r in rs):
            for p in PATHS:
                line = [r for r in rs if r.dtype == dtype and r.path == p]
                if not line or (p == "transformers" and not any(r.flipped for r in line)):
                    continue  # float32 after .float(): never flips; said in the note below
                ax.plot([r.length for r in line], [r.flipped for r in line], color=format_color(dtype),
                        **_PATH_STYLE[p])  # type: ignore[arg-type]
        lengths = [r.length for r in rs]
        ax.set_xscale("log", base=2)
        ax.set_yscale("symlog", linthresh=1, linscale=0.6)
        ax.xaxis.set_major_formatter(tokens_formatter())
        ax.set_xlim(min(lengths), max(lengths))
        ax.set_ylim(-0.3, max(10.0, 3 * max(r.flipped for r in rs)))
        ax.set(xlabel="context length L (tokens)", ylabel="distances 0..L-1 whose bucket flips",
               title=_TITLES.get(scheme, scheme))
        ax.grid(True, which="major", alpha=0.3)
        notes = []
        if any(r.path == "transformers" for r in rs) and not any(r.flipped for r in rs if r.path == "transformers"):
            notes.append("transformers path: 0 flips in every dtype (.float(): the log runs in float32)")
        zero = [f"{d} {p}" for d in dtypes for p in PATHS if p != "transformers" and _clean(rs, d, p)]
        if zero:
            notes.append("at 0 (no flip below the overflow): " + ", ".join(zero))
        over = _overflows(rs)
        if over:
            notes.append("steps: the distance cast overflows (bucket undefined) from "
                         + ", ".join(f"{d} {f}" for d, f in over))
        ax.annotate("\n".join(_wrap(n) for n in notes), (0.02, 0.97), xycoords="axes fraction", va="top",
                    fontsize=7.5, color="0.2")
    handles = [Line2D([], [], color=format_color(d), lw=2.0, label=d) for d in dtypes]
    handles += [Line2D([], [], color="0.3", label=_PATH_LABEL[p], **_PATH_STYLE[p])  # type: ignore[arg-type]
                for p in PATHS if any(r.path == p and r.flipped for r in rows)]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), fontsize=8, frameon=False)
    return save_figure(fig, path, dpi=110)


def _clean(rows: Sequence[RelativeRow], dtype: str, path: str) -> bool:
    """Whether the (dtype, path) line never flips a defined bucket (it sits at 0 up to any overflow)."""
    line = [r for r in rows if r.dtype == dtype and r.path == path]
    return bool(line) and all(r.flipped == r.undefined for r in line)


def _wrap(text: str, width: int = 80) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent="  "))


def _overflows(rows: Sequence[RelativeRow]) -> list[tuple[str, int]]:
    """(dtype, first distance whose cast overflows) for the dtypes that overflow within the plotted lengths."""
    first: dict[str, int] = {}
    for r in rows:
        if r.undefined and r.path != "transformers":
            first.setdefault(r.dtype, r.length - r.undefined)
    return sorted(first.items(), key=lambda t: t[1])
