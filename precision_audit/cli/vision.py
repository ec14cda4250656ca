"""``config --image WxH --video SECONDS@FPS``: a vision-language model's M-RoPE audited per axis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from ..config.diffusion_audit import axis_columns
from ..config.mrope import MROPE_STACKS
from ._shared import echo_json, echo_table

__all__ = ["MROPE_STACKS", "vision_audit", "vision_options"]

def _image(ctx: Any, param: Any, value: str | None) -> tuple[int, int] | None:
    from ..rope.axes import parse_image

    try:
        return None if value is None else parse_image(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _video(ctx: Any, param: Any, value: str | None) -> tuple[float, float, tuple[int, int]] | None:
    from ..rope.axes import parse_video

    try:
        return None if value is None else parse_video(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def vision_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--image``, ``--video`` and ``--text`` (M-RoPE inputs of vision-language models)."""
    for opt in reversed([
        click.option("--image", default=None, metavar="WxH", callback=_image,
                     help="Vision-language models (M-RoPE): an image of WxH pixels, resized as the model's "
                          "processor does; audits each axis' section at its largest id.  Diffusion transformers (a "
                          "diffusers config): the generated image, or a video's frame size."),
        click.option("--video", default=None, metavar="SECONDS@FPS[:WxH]", callback=_video,
                     help="Vision-language models (M-RoPE): a video of SECONDS sampled at FPS (frames WxH, "
                          "default 640x360; units may be written: 3600s@2fps, 1h@2fps); the bottom line gives the longest "
                          "safe video at that FPS.  Video "
                          "diffusion transformers: SECONDS x FPS frames (of --image pixels)."),
        click.option("--text", "text_tokens", type=click.IntRange(0, 2**24), default=0, show_default=True,
                     help="Text tokens after the image and video (with --image / --video); diffusion transformers "
                          "with text ids (Qwen-Image, Flux.2): the prompt's tokens, 0 for the pipeline's 512."),
    ]):
        f = opt(f)
    return f


def _describe(model: Any, mrope: Any, image: Any, video: Any, text: int, maxima: Sequence[int]) -> list[str]:
    from ..rope.axes import AXES, FAMILIES, grid, video_grid

    lay = "interleaved" if mrope.interleaved else "contiguous"
    lines = ["M-RoPE sections: " + ", ".join(f"{a} {n}" for a, n in zip(AXES, mrope.section))
             + f" frequencies ({lay}) of {sum(mrope.section)}"]
    m = mrope.spatial_merge_size
    if image is not None:
        h, w = grid(image[0], image[1], mrope, FAMILIES[mrope.family]["image_pixels"])
        lines.append(f"image {image[0]}x{image[1]}: {h // m} x {w // m} merged patches ({h // m * (w // m)} tokens)")
    if video is not None:
        s, fps, frame = video
        t, h, w = video_grid(s, fps, mrope, frame)
        step = "" if mrope.tokens_per_second is None or FAMILIES[mrope.family]["split_frames"] else \
            f"; temporal ids step {mrope.tokens_per_second * mrope.temporal_patch_size / fps:g} per patch " \
            f"(tokens_per_second {mrope.tokens_per_second:g})"
        lines.append(f"video {s:g} s at {fps:g} fps ({frame[0]}x{frame[1]} frames): {t} temporal patches x "
                     f"{h // m} x {w // m} merged ({t * (h // m) * (w // m)} tokens){step}")
    if text:
        lines.append(f"then {text} text tokens")
    lines.append("largest position id per axis: " + ", ".join(f"{a} {x}" for a, x in zip(AXES, maxima)))
    return lines


_AXES_NOTE = ("Each axis: its section's frequencies audited as 1-D RoPE over ids 0..the largest id an image or video "
              "token carries on it (tokens of one image that differ in one axis only are told apart by that "
              "section alone); text: every frequency, over ids 0..the largest text id (a text token's three ids are "
              "equal). safe to = the longest id count audited (to 4x the longest) up to which every audited count "
              "is safe.")


def vision_audit(model: Any, image: Any, video: Any, text: int, stacks: Sequence[str], dtypes: Sequence[str],
                 as_json: bool) -> None:
    """Print (or ``--json``) the per-axis M-RoPE audit of ``model`` for the given input
    (:func:`precision_audit.config.mrope.mrope_audit`)."""
    from ..config.mrope import NOT_MODELLED, mrope_audit, video_text
    from ..rope.axes import AXES

    if model.kind != "rope" or not model.mrope:
        raise click.UsageError(f"--image / --video: {model.name} has no mrope_section (not a multimodal-RoPE model)")
    try:
        m = mrope_audit(model, image, video, text, stacks, dtypes)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    rows = m.rows
    if as_json:
        echo_json({"auditor": "config-mrope", "model": model.name, "mrope": dict(model.mrope),
                   "input": {"image": image, "video": None if video is None else
                             {"seconds": video[0], "fps": video[1], "frame": video[2]}, "text": text},
                   "largest_ids": dict(zip(AXES, m.maxima)), "largest_vision_ids": dict(zip(AXES, m.vision_maxima)),
                   "largest_text_id": m.text_max,
                   "summary": [{k: v for k, v in e.items() if k not in ("at_least", "audited")} for e in m.summary],
                   "results": [r.to_dict() for r in rows], "not_modelled": NOT_MODELLED, "skipped": m.skipped,
                   **({"notes": m.notes} if m.notes else {})})
        return
    click.echo(f"{model.name} (model_type {model.model_type}): M-RoPE\n  "
               + "\n  ".join(_describe(model, m.mrope, image, video, text, m.maxima)
                            + ["image / video tokens' largest id: " + ", ".join(
                                f"{a} {x}" for a, x in zip(AXES, m.vision_maxima))
                               + f"; text tokens' largest id {m.text_max}"]) + "\n")
    click.echo("Bottom line (each axis' verdict at its largest id" + (", and the longest safe video at this fps"
               if video is not None else "") + "):")
    for e in m.summary:
        click.echo(f"  {e['label']}, {e['dtype']}: {e['axes']}" + (f"; {video_text(e)}" if video is not None else ""))
    click.echo("")
    echo_table([r.to_dict() for r in rows], axis_columns("stack"))
    click.echo(f"\n{_AXES_NOTE}\nnot modelled: {NOT_MODELLED}."
               + "".join(f"\nskipped: {n}" for n in m.skipped) + "".join(f"\nnote: {n}" for n in m.notes))
