"""The report's "Images and video" section for a vision-language model (M-RoPE): one input's per-axis audit.

What ``config MODEL --image WxH --video SECONDS@FPS`` prints (:func:`precision_audit.config.mrope.mrope_audit`),
as a section: the input and each axis' largest id, per stack and dtype the axis verdicts and the longest safe
video, the per-axis table, and a figure of the longest safe video per stack.

>>> import tempfile, pathlib
>>> from precision_audit.config import load_model
>>> from precision_audit.config.mrope import mrope_audit
>>> m = mrope_audit(load_model("tests/data/qwen2.5-vl-7b-instruct.json"), video=(60, 2.0),
...                 stacks=["transformers", "transformers-cast"])
>>> with tempfile.TemporaryDirectory() as d:
...     plot_safe_video(m, pathlib.Path(d) / "v.png").name
'v.png'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config.mrope import NOT_MODELLED, MropeAudit, hours, mrope_audit, video_text
from ._plotting import fmt, limit_bars, limit_legend, pyplot, save_figure
from .writer import Bullets, Figure, Para, Section, Table

__all__ = ["DEFAULT_IMAGE", "DEFAULT_VIDEO", "images_section", "plot_safe_video"]

DEFAULT_IMAGE = (1920, 1080)
"""The report's image when none is given: a 1080p frame."""
DEFAULT_VIDEO = (3600.0, 2.0, (640, 360))
"""The report's video when none is given: one hour at 2 fps, 640x360 frames (``config``'s default frame)."""

def plot_safe_video(m: MropeAudit, path: str | Path) -> Path:
    """Horizontal bars: the longest safe video per stack and dtype at the input's frame rate (log scale, hatched
    where the audited ids, not a failure, bound it), coloured by the worst axis verdict at the input; a dotted
    line at the input's length."""
    from ..verdicts import worst

    if m.video is None:
        raise ValueError("plot_safe_video needs an audit with a video")
    plt = pyplot()
    entries = m.summary
    fig, ax = plt.subplots(figsize=(8.0, 0.5 * len(entries) + 2.0))
    asked = m.video[0]
    limit_bars(ax, [worst([r.verdict for r in m.rows if r.stack == e["stack"] and r.dtype == e["dtype"]])
                    for e in entries],
               [(e["safe_seconds"], e["at_least"]) for e in entries],
               [video_text(e).replace("video safe to ", "").split(" (ids")[0] if e["safe_seconds"] else "none"
                for e in entries], asked, 1.0, 8)
    ax.set_yticks(range(len(entries)), [f"{e['label']}, {e['dtype']}" for e in entries], fontsize=8)
    ax.invert_yaxis()
    top = max([asked, *(e["safe_seconds"] or 0.0 for e in entries)])
    ticks = [t for t in (1, 60, 3600, 86400, 7 * 86400) if t <= top * 8]
    ax.set_xticks(ticks, [{1: "1 s", 60: "1 min", 3600: "1 h", 86400: "1 day", 7 * 86400: "1 week"}[t]
                          for t in ticks])
    ax.set_xlabel(f"longest safe video at {m.video[1]:g} fps (log scale)")
    limit_legend(fig, "at least (ids audited to here)", f"the input: {hours(asked)}")
    ax.set_title("Longest safe video per stack and dtype (every axis within its safe ids)", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return save_figure(fig, path)


def images_section(model: Any, dtypes: Sequence[str], stacks: Sequence[str] | None = None,
                   image: tuple[int, int] | None = DEFAULT_IMAGE,
                   video: tuple[float, float, tuple[int, int]] | None = DEFAULT_VIDEO, text: int = 0,
                   progress: Any = None) -> Section:
    """The "Images and video" section of an M-RoPE model's report for one input (default: a 1080p image, then an
    hour of video at 2 fps): the bottom line per stack and dtype, the per-axis table and, with a video, the
    longest-safe-video figure."""
    from ..rope.axes import AXES

    what = [w for w in (None if image is None else f"a {image[0]}x{image[1]} image",
                        None if video is None else f"{hours(video[0])} of video at {video[1]:g} fps "
                                                   f"({video[2][0]}x{video[2][1]} frames)",
                        f"{text} text tokens" if text else None) if w]
    if progress:
        progress(f"M-RoPE per axis: {', then '.join(what)}")
    m = mrope_audit(model, image, video, text, stacks, dtypes)
    blocks: list[Any] = [
        Para(f"M-RoPE sections {', '.join(f'{a} {n}' for a, n in zip(AXES, m.mrope.section))} frequencies "
             f"({'interleaved' if m.mrope.interleaved else 'contiguous'}). Input: {', then '.join(what)}, as "
             "transformers' `get_rope_index` lays it out; `precision-audit config MODEL --image WxH --video "
             "SECONDS@FPS` audits another. Largest id an image or video token carries: "
             + ", ".join(f"{a} {x}" for a, x in zip(AXES, m.vision_maxima)) + f"; text tokens: {m.text_max}. "
             "Each axis' section is audited up to its largest id (tokens that differ in one axis only are told "
             "apart by that section alone), the text tokens on every frequency."),
        Bullets(tuple(f"{e['label']}, {e['dtype']}: {e['axes']}" + (f"; {video_text(e)}" if video else "")
                      for e in m.summary)),
        Table(("dtype", "stack", "axis", "freqs", "largest id", "max rot err", "colliding", "worst pair err",
               "safe to", "verdict"),
              tuple((r.dtype, r.stack, r.axis, str(r.frequencies), str(r.largest_id), fmt(r.max_rotation_error),
                     str(r.colliding_positions), fmt(r.worst_pair_error), str(r.safe_to or "-"), r.verdict)
                    for r in m.rows)),
    ]
    if video is not None:
        blocks.append(Figure("mrope_safe_video.png", f"Longest safe video at {video[1]:g} fps per stack and dtype",
                             lambda p: plot_safe_video(m, p)))
    blocks.append(Para(f"Not modelled: {NOT_MODELLED}." + "".join(f" Skipped: {s}." for s in m.skipped)
                       + "".join(f" Note: {n}." for n in m.notes)))
    return Section("Images and video", blocks, {"mrope": {
        "input": {"image": None if image is None else list(image),
                  "video": None if video is None else {"seconds": video[0], "fps": video[1], "frame": list(video[2])},
                  "text": text},
        "largest_vision_ids": dict(zip(AXES, m.vision_maxima)), "largest_text_id": m.text_max,
        "summary": m.summary, "rows": [r.to_dict() for r in m.rows], "skipped": m.skipped, "notes": m.notes}})
