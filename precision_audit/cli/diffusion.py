"""``config TRANSFORMER_CONFIG --image WxH [--video SECONDS@FPS]``: a diffusion transformer's axial RoPE per axis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from ._shared import echo_json, echo_table
from .vision import axis_columns

__all__ = ["DEFAULT_INPUT", "diffusion_audit"]

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
}
"""The input audited when none is given: the pipeline's default size (and frames, at its frame rate)."""
MAX_CAP = 2**22
"""The most ids per axis the CLI audits (a video of 2**24 frames, the most --video takes, has 2**22 latent frames)."""


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
    """The input: ``--image`` (a video model's frame size), ``--video`` (its :WxH when no --image), or the
    family's default; whether it was the default."""
    rope = cfg.rope
    if video is not None and not rope.video:
        raise click.UsageError(f"--video: {cfg.name} ({cfg.class_name}) makes images, not video: give --image WxH")
    if image is None and video is None:
        img, vid = DEFAULT_INPUT[rope.family]
        return img, vid, True
    if video is None:
        return image, DEFAULT_INPUT[rope.family][1], False
    return (image if image is not None else video[2]), (video[0], video[1]), False


def diffusion_audit(cfg: Any, image: Any, video: Any, stacks: Sequence[str], dtypes: Sequence[str],
                    as_json: bool, text: int = 0) -> None:
    """Print (or ``--json``) the per-axis audit of a diffusers transformer config for one image or video
    (``text``: Qwen-Image's and Flux.2's text tokens, 0 for the pipeline's default)."""
    from ..rope.axial import ID_CAP, PATHS, AxialRope, audit_axial, axial_maxima, largest_safe, latent_grid
    from ..rope.axial_video import (PATHS as VIDEO_PATHS, SCAN_CAP, VideoRope, audit_video, largest_safe_video,
                                    video_grid)
    from ..verdicts import worst

    rope = cfg.rope
    fractional = isinstance(rope, VideoRope)  # CogVideoX, LTX-Video: positions per token, not integer ids
    if not fractional and not isinstance(rope, AxialRope):  # Qwen-Image's centred ids, SD3's sincos table
        from ..rope.axial_centred import CentredRope
        from .diffusion_image import centred_audit, grid_audit

        if isinstance(rope, CentredRope):
            return centred_audit(cfg, image, video, stacks, dtypes, as_json, text)
        return grid_audit(cfg, image, video, stacks, dtypes, as_json)
    paths = VIDEO_PATHS if fractional else PATHS
    img, vid, default = _resolve(cfg, image, video)
    bad = [s for s in stacks if s not in rope.paths]
    if bad:
        raise click.UsageError(f"--recipe {bad[0]}: not a code path {cfg.class_name} runs; its paths: "
                               f"{', '.join(rope.paths)}")
    fps = None if vid is None else vid[1]
    try:
        if fractional:
            grid = video_grid(rope, img, vid)
            maxima = tuple(n - 1 for n in grid)
            rows = audit_video(rope, grid, fps, list(stacks) or None, dtypes)
        else:
            grid = latent_grid(rope, img, vid, text or None)
            maxima = axial_maxima(rope, grid)
            cap = max(ID_CAP, 1 << max(maxima).bit_length())  # a power of two above the largest id
            rows = audit_axial(rope, maxima, list(stacks) or None, dtypes, cap=min(cap, MAX_CAP))
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    summary = []
    for d in dict.fromkeys(r.dtype for r in rows):
        for p in dict.fromkeys(r.stack for r in rows):
            rs = [r for r in rows if r.stack == p and r.dtype == d]
            safe = dict((largest_safe_video if fractional else largest_safe)(rope, rs, fps),
                        audited=max(max(r.lengths) for r in rs))
            summary.append({"path": p, "label": paths[p].label, "dtype": d, "verdict": worst([r.verdict for r in rs]),
                            "axes": ", ".join(f"{r.axis} {r.verdict}" for r in rs), "largest_safe": safe,
                            "fix": paths[p].fix if any(r.verdict != "safe" or (r.safe_to or 0) < max(r.lengths)
                                                       for r in rs) else None})
    frames, hh, ww, *rest = grid
    inp = {"image": list(img), "video": None if vid is None else {"seconds": vid[0], "fps": vid[1]}}
    if rest:
        inp["text"] = int(rest[0])
    if as_json:
        echo_json({"auditor": "config-axial", "model": {"name": cfg.name, "class_name": cfg.class_name,
                                                        "axes": list(rope.axes), "axes_dim": list(rope.axes_dim),
                                                        "theta": rope.theta, "head_dim": cfg.head_dim},
                   "input": inp, "default_input": default, "largest_ids": dict(zip(rope.axes, maxima)),
                   "summary": summary, "results": [r.to_dict() for r in rows]})
        return
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
    click.echo("\n".join(lines) + "\n")
    click.echo("Bottom line (each axis' verdict at its largest id; the largest safe "
               + ("video" if rope.video else "image") + " per path and dtype):")
    for e in summary:
        line = f"  {e['label']}, {e['dtype']}: {e['axes']}; {_safe_text(rope, e['largest_safe'])}"
        bad_rows = [r for r in rows if r.stack == e["path"] and r.dtype == e["dtype"] and r.why]
        if bad_rows:
            line += f"; {bad_rows[-1].axis}: {bad_rows[-1].why}"
        click.echo(line + (f"; fix: {e['fix']}" if e["fix"] else ""))
    click.echo("")
    echo_table([r.to_dict() for r in rows], axis_columns("path"))
    if fractional:
        click.echo(f"\nEach axis: its own {rope.theta:g}-theta RoPE, at the positions diffusers computes for each "
                   "token (fractional, float32) against the exact formula's; safe to = the largest id count up to "
                   f"which every count is safe (searched to {max(max(r.lengths) for r in rows)} ids, at least "
                   f"{SCAN_CAP}; CogVideoX's rows and columns, refitted into its base grid at every count: each "
                   f"count at the input's aspect ratio). Code read: {rope.source}.")
        return
    click.echo(f"\nEach axis: its own {rope.theta:g}-theta RoPE over its block of the head, audited over ids "
               "0..largest id; safe to = the largest id count up to which the path stays safe (searched to "
               f"{max(max(r.lengths) for r in rows)}, exact by bisection). Code read: {rope.source}.")
