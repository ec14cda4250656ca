"""A diffusion transformer's position encoding audited for one input: what ``config`` prints and ``report`` shows.

:func:`diffusion_audit` takes a :class:`~precision_audit.config.diffusion.DiffusionConfig` and an image (or a
video model's frames), runs the audit of its family (integer axial ids: Flux, Flux.2, HunyuanVideo, Wan,
:mod:`precision_audit.rope.axial`; fractional positions: CogVideoX, LTX-Video, :mod:`~precision_audit.rope.axial_video`;
centred ids: Qwen-Image, :mod:`~precision_audit.rope.axial_centred`; SD3's 2-D sincos table,
:mod:`precision_audit.sinusoidal.grid2d`) and returns one :class:`DiffusionAudit`: its JSON data, the lines that
describe the input, the bottom line per path and dtype, the table and its footnote.

>>> from precision_audit.config import load_diffusion_config
>>> a = diffusion_audit(load_diffusion_config("tests/data/diffusers/flux.1-dev-transformer.json"), image=(8192, 8192),
...                     paths=["ids-dtype"])
>>> print(a.bottom[0])  # doctest: +ELLIPSIS
ids cast to the model dtype (...), bfloat16: index safe, height broken, width broken; safe to 4112 px per side ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_INPUT", "DiffusionAudit", "MAX_CAP", "axis_columns", "diffusion_audit"]

DEFAULT_INPUT: dict[str, tuple[tuple[int, int], tuple[float, float] | None]] = {
    "flux": ((1024, 1024), None),
    "hunyuan_video": ((1280, 720), (129 / 24, 24.0)),  # HunyuanVideoPipeline's defaults: 129 frames of 1280x720
    "wan": ((832, 480), (81 / 16, 16.0)),  # WanPipeline's defaults: 81 frames of 832x480 (its examples: 16 fps)
    "cogvideox": ((720, 480), (49 / 8, 8.0)),  # CogVideoXPipeline: sample 60 x 90 latents x 8 px, 49 frames, 8 fps
    # CogVideoX 1.5: the model card's 1360x768, 81 frames at 16 fps (the pipeline's own default, sample_height x 8,
    # would be 2400x2400: the whole rope table)
    "cogvideox_1_5": ((1360, 768), (81 / 16, 16.0)),
    "ltx_video": ((704, 512), (161 / 25, 25.0)),  # LTXPipeline.__call__: 704x512, 161 frames, frame_rate 25
    "flux2": ((1024, 1024), None),  # Flux2Pipeline: default_sample_size 128 x vae_scale_factor 8 (text: 512 tokens)
    "qwen_image": ((1024, 1024), None),  # QwenImagePipeline: default_sample_size 128 x vae_scale_factor 8
    "sd3": ((1024, 1024), None),  # StableDiffusion3Pipeline: transformer sample_size 128 x vae_scale_factor 8
}
"""The input audited when none is given: the pipeline's default size (and frames, at its frame rate)."""
MAX_CAP = 2**22
"""The most ids per axis audited (a video of 2**24 frames, the most --video takes, has 2**22 latent frames)."""

_CENTRED_COLUMNS = [("dtype", "dtype"), ("path", "stack"), ("axis", "axis"), ("freqs", "frequencies"),
                    ("ids", "ids_range"), ("max rot err", "max_rotation_error"), ("colliding", "colliding_positions"),
                    ("worst pair err", "worst_pair_error"), ("safe to", "safe_to"), ("verdict", "verdict")]
_GRID_COLUMNS = [("dtype", "dtype"), ("path", "stack"), ("axis", "axis"), ("patches", "patches"),
                 ("positions", "position_range"), ("max abs err", "max_abs_error"), ("duplicates", "duplicate_rows"),
                 ("nn shrink", "nn_shrink"), ("safe to", "safe_to"), ("verdict", "verdict")]


def axis_columns(path: str) -> list[tuple[str, str]]:
    """The table columns of per-axis rows (:class:`~precision_audit.rope.axes.AxisRow`); ``path``: the heading
    of the code-path column (``stack`` for M-RoPE, ``path`` for diffusers' code paths)."""
    return [("dtype", "dtype"), (path, "stack"), ("axis", "axis"), ("freqs", "frequencies"),
            ("largest id", "largest_id"), ("max rot err", "max_rotation_error"), ("colliding", "colliding_positions"),
            ("worst pair err", "worst_pair_error"), ("safe to", "safe_to"), ("verdict", "verdict")]


@dataclass(frozen=True)
class DiffusionAudit:
    """One input's audit: ``data`` (the ``--json`` object), ``lines`` (the model and the input, for the top of the
    output), ``heading`` and ``bottom`` (the bottom line per path and dtype), ``table`` and ``columns`` (the
    rows as dicts and the (heading, key) columns), ``note`` (what the table's columns mean), ``rows`` (the row
    objects), ``summary`` (per path and dtype: its verdict and largest safe input)."""

    data: dict[str, Any]
    lines: list[str]
    heading: str
    bottom: list[str]
    table: list[dict[str, Any]]
    columns: list[tuple[str, str]]
    note: str
    rows: list[Any] = field(repr=False)
    summary: list[dict[str, Any]] = field(repr=False)


def _size(px: int | None, at_least: bool) -> str:
    return "nothing" if px is None else f"{'at least ' if at_least else ''}{px} px"


def _seconds(s: float) -> str:
    return f"{s / 3600:.3g} h" if s >= 3600 else f"{s / 60:.3g} min" if s >= 60 else f"{s:.3g} s"


def _safe_text(rope: Any, safe: dict[str, Any]) -> str:
    """The bottom line's limit of one path and dtype, in pixels (and frames)."""
    al = safe["at_least"]
    al_px, al_frames = safe.get("px_at_least", al), safe.get("frames_at_least", al)  # per kind, where given
    h, w = safe["height_px"], safe["width_px"]
    if h is None or w is None or (rope.video and safe.get("frames") is None):
        return "no input is safe"
    side = f"{_size(h, al_px)} per side" if h == w else f"{_size(h, al_px)} high, {_size(w, al_px)} wide"
    p = rope.pixels_per_id
    ids = f"{h // p}" if h == w else f"{h // p} x {w // p}"
    text = f"safe to {side}" + ("" if al_px else f" ({ids} latent ids)")
    if rope.video:
        text += f", {'at least ' if al_frames else ''}{safe['frames']} frames"
        if safe.get("seconds") is not None:
            text += f" ({_seconds(safe['seconds'])})"
    if safe.get("text_tokens") is not None:
        text += f", text up to {'at least ' if al else ''}{safe['text_tokens']} tokens"
    elif "text_tokens" in safe:
        text += ", no text length is safe"
    if safe.get("table") is not None and (h // rope.pixels_per_id == safe["table"] or
                                          (rope.video and safe["frames"] == safe["table"] * rope.frames_per_id)):
        text += f" (the rope table holds {safe['table']} ids per axis: larger inputs raise)"
    return text + (f" (ids audited to {safe['audited']})" if al else "")


def _resolve(cfg: Any, image: Any, video: Any) -> tuple[tuple[int, int], tuple[float, float] | None, bool]:
    """The input: ``image`` (a video model's frame size), ``video`` (seconds, fps[, (width, height) frames when no
    image]), or the family's default; whether it was the default."""
    rope = cfg.rope
    if video is not None and not getattr(rope, "video", False):
        raise ValueError(f"--video: {cfg.name} ({cfg.class_name}) makes images, not video: give --image WxH")
    default_img, default_vid = DEFAULT_INPUT[rope.family]
    if image is None and video is None:
        return default_img, default_vid, True
    if video is None:
        return image, default_vid, False
    frame = image if image is not None else (tuple(video[2]) if len(video) > 2 else default_img)
    return frame, (float(video[0]), float(video[1])), False  # type: ignore[return-value]


def _check_paths(cfg: Any, paths: Sequence[str]) -> None:
    bad = [s for s in paths if s not in cfg.rope.paths]
    if bad:
        raise ValueError(f"--recipe {bad[0]}: not a code path {cfg.class_name} runs; its paths: "
                         f"{', '.join(cfg.rope.paths)}")


def diffusion_audit(cfg: Any, image: tuple[int, int] | None = None, video: Sequence[Any] | None = None,
                    paths: Sequence[str] = (), dtypes: Sequence[str] = ("bfloat16",), text: int = 0) -> DiffusionAudit:
    """Audit ``cfg`` (a :class:`~precision_audit.config.diffusion.DiffusionConfig`) for an ``image`` (width,
    height: a video model's frame size) or a ``video`` (seconds, fps[, (width, height)]); neither: the
    pipeline's default input (:data:`DEFAULT_INPUT`).  ``paths``: the code paths (default: every path the family
    runs); ``text``: Qwen-Image's and Flux.2's text tokens (0: the pipeline's 512).  ValueError naming a bad
    input (a size under one id, more ids than a table holds, video for an image model, an unknown path)."""
    from ..rope.axial import AxialRope
    from ..rope.axial_centred import CentredRope
    from ..rope.axial_video import VideoRope

    rope = cfg.rope
    _check_paths(cfg, paths)
    if isinstance(rope, (AxialRope, VideoRope)):
        return _axial(cfg, image, video, paths, dtypes, text)
    if video is not None:
        raise ValueError(f"--video: {cfg.name} ({cfg.class_name}) makes images, not video: give --image WxH")
    img, default = (DEFAULT_INPUT[rope.family][0], True) if image is None else (image, False)
    if isinstance(rope, CentredRope):
        return _centred(cfg, img, default, paths, dtypes, text)
    return _grid(cfg, img, default, paths, dtypes)


def _axial(cfg: Any, image: Any, video: Any, paths: Sequence[str], dtypes: Sequence[str], text: int) -> DiffusionAudit:
    from ..rope.axial import ID_CAP, PATHS, audit_axial, axial_maxima, largest_safe, latent_grid
    from ..rope.axial_video import (PATHS as VIDEO_PATHS, SCAN_CAP, VideoRope, audit_video, largest_safe_video,
                                    video_grid)
    from ..verdicts import worst

    rope = cfg.rope
    fractional = isinstance(rope, VideoRope)  # CogVideoX, LTX-Video: positions per token, not integer ids
    labels = VIDEO_PATHS if fractional else PATHS
    img, vid, default = _resolve(cfg, image, video)
    fps = None if vid is None else vid[1]
    if fractional:
        grid: tuple[Any, ...] = video_grid(rope, img, vid)
        maxima: tuple[int, ...] = tuple(n - 1 for n in grid)
        rows = audit_video(rope, grid, fps, list(paths) or None, dtypes)
    else:
        grid = latent_grid(rope, img, vid, text or None)
        maxima = axial_maxima(rope, grid)
        cap = max(ID_CAP, 1 << max(maxima).bit_length())  # a power of two above the largest id
        rows = audit_axial(rope, maxima, list(paths) or None, dtypes, cap=min(cap, MAX_CAP))
    summary = []
    for d in dict.fromkeys(r.dtype for r in rows):
        for p in dict.fromkeys(r.stack for r in rows):
            rs = [r for r in rows if r.stack == p and r.dtype == d]
            safe = dict((largest_safe_video if fractional else largest_safe)(rope, rs, fps),
                        audited=max(max(r.lengths) for r in rs))
            summary.append({"path": p, "label": labels[p].label, "dtype": d, "verdict": worst([r.verdict for r in rs]),
                            "axes": ", ".join(f"{r.axis} {r.verdict}" for r in rs), "largest_safe": safe,
                            "fix": labels[p].fix if any(r.verdict != "safe" or (r.safe_to or 0) < max(r.lengths)
                                                        for r in rs) else None})
    frames, hh, ww, *rest = grid
    inp: dict[str, Any] = {"image": list(img), "video": None if vid is None else {"seconds": vid[0], "fps": vid[1]}}
    if rest:
        inp["text"] = int(rest[0])
    data = {"auditor": "config-axial", "model": {"name": cfg.name, "class_name": cfg.class_name,
                                                 "axes": list(rope.axes), "axes_dim": list(rope.axes_dim),
                                                 "theta": rope.theta, "head_dim": cfg.head_dim},
            "input": inp, "default_input": default, "largest_ids": dict(zip(rope.axes, maxima)),
            "summary": summary, "results": [r.to_dict() for r in rows]}
    what = f"image {img[0]}x{img[1]}" if vid is None else \
        f"video {vid[0]:.4g} s at {vid[1]:g} fps ({round(vid[0] * vid[1])} frames of {img[0]}x{img[1]})"
    lines = [cfg.describe(), f"  {what}{' (the default input)' if default else ''}: "
             + ("" if frames is None else f"{frames} latent frames x ")
             + f"{hh} rows x {ww} columns of latent ids ({rope.pixels_per_id} px each)",
             "  largest id per axis: " + ", ".join(f"{a} {m}" for a, m in zip(rope.axes, maxima))]
    if rest:
        lines.append(f"  {rest[0]} text tokens: ids 0..{rest[0] - 1} on the {rope.axes[-1]} axis, 0 on the others; the "
                     f"image: 0 on the {rope.axes[0]} and {rope.axes[-1]} axes (reference images: {rope.axes[0]} "
                     "10, 20, ...; --text N for another text length)")
    elif frames is None:
        lines.append("  text tokens and the image: id 0 on the index axis (FluxPipeline: text_ids = zeros)")
    bottom = []
    for e in summary:
        line = f"{e['label']}, {e['dtype']}: {e['axes']}; {_safe_text(rope, e['largest_safe'])}"
        bad_rows = [r for r in rows if r.stack == e["path"] and r.dtype == e["dtype"] and r.why]
        if bad_rows:
            line += f"; {bad_rows[-1].axis}: {bad_rows[-1].why}"
        bottom.append(line + (f"; fix: {e['fix']}" if e["fix"] else ""))
    if fractional:
        note = (f"Each axis: its own {rope.theta:g}-theta RoPE, at the positions diffusers computes for each "
                "token (fractional, float32) against the exact formula's; safe to = the largest id count up to "
                f"which every count is safe (searched to {max(max(r.lengths) for r in rows)} ids, at least "
                f"{SCAN_CAP}; CogVideoX's rows and columns, refitted into its base grid at every count: each "
                f"count at the input's aspect ratio). Code read: {rope.source}.")
    else:
        note = (f"Each axis: its own {rope.theta:g}-theta RoPE over its block of the head, audited over ids "
                "0..largest id; safe to = the largest id count up to which the path stays safe (searched to "
                f"{max(max(r.lengths) for r in rows)}, exact by bisection). Code read: {rope.source}.")
    heading = ("Bottom line (each axis' verdict at its largest id; the largest safe "
               + ("video" if rope.video else "image") + " per path and dtype):")
    return DiffusionAudit(data, lines, heading, bottom, [r.to_dict() for r in rows], axis_columns("path"), note,
                          rows, summary)


def _centred(cfg: Any, img: tuple[int, int], default: bool, paths: Sequence[str], dtypes: Sequence[str],
             text: int) -> DiffusionAudit:
    """Qwen-Image: the ids each axis carries for one image and its text (``text`` tokens; 0: the pipeline's
    ``max_sequence_length`` 512)."""
    from ..rope.axial_centred import CENTRED_PATHS, audit_centred, axis_ids, centred_grid, table_limit
    from ..verdicts import worst

    rope = cfg.rope
    txt = text or rope.text
    grid = centred_grid(rope, img)
    rows = audit_centred(rope, grid, txt, list(paths) or None, dtypes)
    top = table_limit(rope, txt)
    p = rope.pixels_per_id
    summary = []
    for d in dict.fromkeys(r.dtype for r in rows):
        for path in dict.fromkeys(r.stack for r in rows):
            rs = [r for r in rows if r.stack == path and r.dtype == d]
            side = None if any(r.safe_to is None for r in rs) else min(int(r.safe_to) for r in rs)  # type: ignore
            summary.append({"path": path, "label": CENTRED_PATHS[path].label, "dtype": d,
                            "verdict": worst([r.verdict for r in rs]),
                            "axes": ", ".join(f"{r.axis} {r.verdict}" for r in rs),
                            "largest_safe": {"side_ids": side, "side_px": None if side is None else side * p,
                                             "table_limit_ids": top, "text": txt},
                            "fix": CENTRED_PATHS[path].fix if side is None or side < top or any(
                                r.verdict != "safe" for r in rs) else None})
    data = {"auditor": "config-axial-centred", "model": {
        "name": cfg.name, "class_name": cfg.class_name, "axes": list(rope.axes), "axes_dim": list(rope.axes_dim),
        "theta": rope.theta, "head_dim": cfg.head_dim, "table": rope.table},
        "input": {"image": list(img), "text": txt}, "default_input": default,
        "summary": summary, "results": [r.to_dict() for r in rows]}
    ids = axis_ids(rope, grid, txt)
    m = max(grid[0] // 2, grid[1] // 2)
    lines = [cfg.describe(),
             f"  image {img[0]}x{img[1]}{' (the default input)' if default else ''}: {grid[0]} rows x {grid[1]} "
             f"columns of latent ids ({p} px each), {txt} text tokens"
             + (" (the pipeline's max_sequence_length; --text N for another)" if not text else ""),
             f"  image ids: frame 0, height {ids[1][0]}..{grid[0] // 2 - 1}, width {ids[2][0]}..{grid[1] // 2 - 1}; "
             f"text ids {m}..{m + txt - 1} on every axis (after max(rows // 2, columns // 2) = {m})",
             f"  the table holds {rope.table} negative and {rope.table} positive ids: with {txt} text tokens a square "
             f"image fits up to {top} latent ids ({top * p} px) per side; larger inputs raise (QwenEmbedRope)"]
    bottom = []
    for e in summary:
        s = e["largest_safe"]
        if s["side_ids"] is None:
            limit = "no input is safe"
        else:
            limit = f"safe to {s['side_px']} px per side ({s['side_ids']} latent ids)"
            if s["side_ids"] == top:
                limit += " (the table's limit: larger inputs raise)"
        line = f"{e['label']}, {e['dtype']}: {e['axes']}; {limit}"
        why = [r for r in rows if r.stack == e["path"] and r.dtype == e["dtype"] and r.why]
        if why:
            line += f"; {why[-1].axis}: {why[-1].why}"
        bottom.append(line + (f"; fix: {e['fix']}" if e["fix"] else ""))
    note = (f"Each axis: its own {rope.theta:g}-theta RoPE over its block of the head, audited over the ids it "
            "carries (image and text, negative ones included; pairs at distances 1, 16, 256, 4096 and half the "
            "range, each capped at the range); safe to = the largest "
            f"square side in latent ids that stays safe with {txt} text tokens. Code read: {rope.source}.")
    return DiffusionAudit(data, lines, "Bottom line (each axis' verdict over the ids it carries; the largest safe "
                          "square image per path and dtype):", bottom,
                          [dict(r.to_dict(), ids_range=f"{r.smallest_id}..{r.largest_id}") for r in rows],
                          _CENTRED_COLUMNS, note, rows, summary)


def _grid(cfg: Any, img: tuple[int, int], default: bool, paths: Sequence[str], dtypes: Sequence[str]) -> DiffusionAudit:
    """SD3's 2-D sincos table for one image: per axis of the crop, path and dtype."""
    from ..sinusoidal.grid2d import GRID_PATHS, audit_grid, grid_patches, patch_collisions
    from ..verdicts import worst

    g = cfg.rope
    patches = grid_patches(g, img)
    rows = audit_grid(g, patches, list(paths) or None, dtypes)
    px = g.pixels_per_patch
    summary = []
    for d in dict.fromkeys(r.dtype for r in rows):
        for path in dict.fromkeys(r.stack for r in rows):
            col, row = [r for r in rows if r.stack == path and r.dtype == d]
            safe = col.safe_to
            summary.append({"path": path, "label": GRID_PATHS[path][2], "dtype": d,
                            "verdict": worst([col.verdict, row.verdict]),
                            "colliding_patches": patch_collisions(row.unique, col.unique, row.patches, col.patches),
                            "largest_safe": {"side_patches": safe, "side_px": None if safe is None else safe * px,
                                             "table_limit_patches": g.max_size},
                            "fix": GRID_PATHS[path][3] if safe is None or safe < g.max_size or
                            worst([col.verdict, row.verdict]) != "safe" else None})
    data = {"auditor": "config-sincos-2d", "model": {
        "name": cfg.name, "class_name": cfg.class_name, "embed_dim": g.embed_dim, "pos_embed_max_size": g.max_size,
        "base_size": g.base_size}, "input": {"image": list(img)}, "default_input": default,
        "summary": summary, "results": [r.to_dict() for r in rows]}
    top = (g.max_size - patches[0]) // 2
    left = (g.max_size - patches[1]) // 2
    lines = [cfg.describe(),
             f"  image {img[0]}x{img[1]}{' (the default input)' if default else ''}: {patches[0]} x {patches[1]} "
             f"patches ({px} px each), the table's rows {top}..{top + patches[0] - 1} and columns "
             f"{left}..{left + patches[1] - 1} (centre crop)",
             f"  the table holds {g.max_size} patches per side: up to {g.max_size * px} px; larger images raise "
             "(cropped_pos_embed)"]
    bottom = []
    for e in summary:
        s = e["largest_safe"]
        limit = ("no input is safe" if s["side_patches"] is None else
                 f"safe to {s['side_px']} px per side ({s['side_patches']} patches)"
                 + (" (the table's limit: larger images raise)" if s["side_patches"] == g.max_size else ""))
        bottom.append(f"{e['label']}, {e['dtype']}: {e['verdict']}, {e['colliding_patches']} patches share an "
                      f"embedding; {limit}" + (f"; fix: {e['fix']}" if e["fix"] else ""))
    note = ("Each axis: one half of the table ([sin | cos] of its position), errors against float64 of the exact "
            "positions k base_size / max; nn shrink = max over positions of 1 - stored / exact distance to the "
            f"nearest other position; safe to = the largest crop per side that stays safe. Code read: {g.source}.")
    return DiffusionAudit(data, lines, "Bottom line (two patches collide when both halves of their rows round alike; "
                          "the largest safe image per path and dtype):", bottom,
                          [dict(r.to_dict(), position_range=f"{r.first_position:.6g}..{r.last_position:.6g}")
                           for r in rows], _GRID_COLUMNS, note, rows, summary)
