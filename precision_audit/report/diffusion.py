"""The report for a diffusion transformer (a diffusers ``transformer/config.json``): its position encoding audited
for one input, per code path and dtype, as ``config`` prints it, with a figure of the largest safe size.

>>> import tempfile, pathlib
>>> from precision_audit.config import load_diffusion_config
>>> rep = diffusion_report(load_diffusion_config("tests/data/diffusers/flux.1-dev-transformer.json"))
>>> [s.title for s in rep.sections]
['Bottom line', 'Images and video', 'Model']
>>> print(rep.sections[0].blocks[1].items[2])  # doctest: +ELLIPSIS
ids cast to the model dtype (...), bfloat16: index safe, height safe, width safe; safe to 4112 px per side ...
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config.diffusion_audit import DiffusionAudit, diffusion_audit
from ._plotting import fmt, limit_bars, limit_legend, pyplot, save_figure
from .writer import Bullets, Figure, Para, Report, Section, Table

__all__ = ["diffusion_report", "largest_safe_side", "plot_largest_safe"]

def largest_safe_side(entry: dict[str, Any]) -> tuple[int | None, bool]:
    """A summary entry's largest safe side in pixels (the smaller of height and width where they differ; None:
    no input is safe) and whether it is a lower bound (the audit found no limit below its cap).

    >>> largest_safe_side({"largest_safe": {"height_px": 4112, "width_px": 4112, "at_least": False}})
    (4112, False)
    >>> largest_safe_side({"largest_safe": {"side_px": 3072}})
    (3072, False)
    """
    s = entry["largest_safe"]
    if "side_px" in s:
        return s["side_px"], False
    h, w = s.get("height_px"), s.get("width_px")
    if h is None or w is None:
        return None, False
    return min(h, w), bool(s.get("px_at_least", s.get("at_least", False)))


def _safe_frames(entry: dict[str, Any]) -> tuple[int | None, bool]:
    """A video model's summary entry: its longest safe video in frames and whether it is a lower bound."""
    s = entry["largest_safe"]
    return s.get("frames"), bool(s.get("frames_at_least", s.get("at_least", False)))


def _bars(ax: Any, entries: Sequence[dict[str, Any]], found: Sequence[tuple[int | None, bool]], mark: float,
          unit: str, floor: float) -> None:
    limit_bars(ax, [e["verdict"] for e in entries], found,
               ["none" if v is None else f"{'at least ' if at_least else ''}{v} {unit}" for v, at_least in found],
               mark, floor, 16)


def plot_largest_safe(a: DiffusionAudit, side: int, path: str | Path, frames: int | None = None) -> Path:
    """Horizontal bars per code path and dtype: the largest safe image side (px) and, for a video model
    (``frames``: the input's frame count), the longest safe video (frames); log scales, hatched where the audit
    found no limit below its cap, coloured by the verdict at the input; dotted lines at the input."""
    plt = pyplot()
    entries = a.summary
    video = frames is not None
    fig, axes = plt.subplots(1, 2 if video else 1, figsize=(11.0 if video else 8.0, 0.5 * len(entries) + 2.0),
                             sharey=True, squeeze=False)
    _bars(axes[0][0], entries, [largest_safe_side(e) for e in entries], side, "px", 16)
    axes[0][0].set_xlabel("largest safe image side (px, log scale)")
    if video:
        _bars(axes[0][1], entries, [_safe_frames(e) for e in entries], float(frames), "frames", 1)  # type: ignore
        axes[0][1].set_xlabel("longest safe video (frames, log scale)")
    ax = axes[0][0]
    ax.set_yticks(range(len(entries)), [f"{e['path']}, {e['dtype']}" for e in entries], fontsize=8)
    ax.invert_yaxis()
    limit_legend(fig, "at least (no limit below the cap)",
                 f"the input: {side} px" + (f", {frames} frames" if video else ""))
    fig.suptitle("Largest safe input per code path and dtype", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return save_figure(fig, path)


def diffusion_report(cfg: Any, dtypes: Sequence[str] | None = None, image: tuple[int, int] | None = None,
                     video: Sequence[Any] | None = None, text: int = 0, progress: Any = None) -> Report:
    """The report of a diffusers transformer config (:class:`~precision_audit.config.diffusion.DiffusionConfig`)
    for ``image`` / ``video`` (default: the pipeline's own input) in ``dtypes`` (default bfloat16): the bottom line
    per code path and dtype, the per-axis table and the largest-safe-side figure
    (:func:`precision_audit.config.diffusion_audit.diffusion_audit`)."""
    dts = list(dict.fromkeys(dtypes or ["bfloat16"]))
    if progress:
        progress(f"{cfg.class_name}: every code path in {', '.join(dts)}")
    a = diffusion_audit(cfg, image, video, (), dts, text)
    img, vid = a.data["input"]["image"], a.data["input"].get("video")
    side = max(img)
    frames = None if vid is None else round(vid["seconds"] * vid["fps"])
    bottom = Section("Bottom line", [
        Para(f"{cfg.describe()}. Per code path and dtype: each axis' verdict at the input, the largest safe input "
             "and the fix; `precision-audit config FILE --image WxH` prints the same lines."),
        Bullets(tuple(a.bottom)),
    ], {"summary": a.summary})
    cells = [(h, k) for h, k in a.columns]
    table = Table(tuple(h for h, _ in cells),
                  tuple(tuple(fmt(r.get(k)) if isinstance(r.get(k), float) else ("-" if r.get(k) is None else
                                                                                  str(r.get(k))) for _, k in cells)
                        for r in a.table))
    images = Section("Images and video", [
        Para("; ".join(line.strip() for line in a.lines[1:]) + "."),
        table,
        Para(a.note),
        Figure("diffusion_largest_safe.png", "Largest safe input per code path and dtype"
               + (": image side and video length" if frames is not None else ""),
               lambda p: plot_largest_safe(a, side, p, frames)),
    ], {"diffusion": a.data})
    settings: dict[str, Any] = {"model": cfg.name, "class_name": cfg.class_name, "dtypes": dts,
                                "input": a.data["input"], "source": cfg.source}
    model = Section("Model", [Table(("setting", "value"), tuple((k, str(v)) for k, v in settings.items()))])
    return Report(f"precision_audit: {cfg.name}", "diffusion", settings, [bottom, images, model])
