"""``config --image WxH --video SECONDS@FPS``: a vision-language model's M-RoPE audited per axis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from ._shared import echo_json, echo_table

__all__ = ["MROPE_STACKS", "axis_columns", "vision_audit", "vision_options"]

MROPE_STACKS: tuple[str, ...] = ("transformers", "transformers-cast", "vllm", "sglang", "llama.cpp-cpu",
                                  "llama.cpp-cuda")
"""The stacks whose M-RoPE is modelled: each builds a section's cos/sin as its 1-D RoPE code does, at that axis'
ids (transformers' Qwen2-VL / Qwen3-VL rotary modules; vLLM's and SGLang's MRotaryEmbedding index their 1-D
cos/sin cache; ggml's ``ggml_mrope_cache_init`` (CPU) runs the 1-D theta chain of each pair on its section's
id, and CUDA's ``rope_multi`` the 1-D ``pos * powf(theta_scale, i)``: contiguous sections only, tests/test_mrope.py
runs ggml's real op)."""
_CONTIGUOUS_ONLY = frozenset({"llama.cpp-cpu", "llama.cpp-cuda"})
_INTERLEAVED_WHY = ("ggml's IMROPE (interleaved sections) rotates the frequencies past 3x the height / width sections "
                    "by a 4th position id: not modelled")
_NOT_MODELLED = ("MLX, TensorRT-LLM, FlashInfer and the training stacks: their M-RoPE paths are not modelled")


def axis_columns(path: str) -> list[tuple[str, str]]:
    """The table columns of per-axis rows (:class:`~precision_audit.rope.axes.AxisRow`); ``path``: the heading
    of the code-path column (``stack`` for M-RoPE, ``path`` for diffusers' code paths)."""
    return [("dtype", "dtype"), (path, "stack"), ("axis", "axis"), ("freqs", "frequencies"),
            ("largest id", "largest_id"), ("max rot err", "max_rotation_error"), ("colliding", "colliding_positions"),
            ("worst pair err", "worst_pair_error"), ("safe to", "safe_to"), ("verdict", "verdict")]


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
                          "default 640x360); the bottom line gives the longest safe video at that FPS.  Video "
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


def _hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:g} s"


def vision_audit(model: Any, image: Any, video: Any, text: int, stacks: Sequence[str], dtypes: Sequence[str],
                 as_json: bool) -> None:
    """Print (or ``--json``) the per-axis M-RoPE audit of ``model`` for the given input."""
    from ..bottomline import path_labels
    from ..config import model_stacks
    from dataclasses import replace

    from ..rope.axes import AXES, MRope, audit_axes, axis_maxima, layout, longest_safe_video, text_maximum

    if model.kind != "rope" or not model.mrope:
        raise click.UsageError(f"--image / --video: {model.name} has no mrope_section (not a multimodal-RoPE model)")
    try:
        schedule = model.schedule
        mrope = MRope.from_config(dict(model.mrope), schedule.n_freq, model.source or model.name)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    runs = model_stacks(model, None)[0]
    asked = list(stacks) or list(MROPE_STACKS)
    names = [n for n in asked if n in MROPE_STACKS and n in runs
             and not (mrope.interleaved and n in _CONTIGUOUS_ONLY)]
    skipped = [f"{n} ({_INTERLEAVED_WHY})" if mrope.interleaved and n in _CONTIGUOUS_ONLY else
               f"{n} (its M-RoPE is not modelled, or it does not run the model)" for n in asked if n not in names]
    if not names:
        raise click.UsageError(f"no stack named has modelled M-RoPE; modelled: {', '.join(MROPE_STACKS)}")
    frame = video[2] if video else (640, 360)
    segs = layout(mrope, image=image, video=None if video is None else video[:2], text=text, frame=frame)
    maxima = axis_maxima(segs)
    rows = audit_axes(schedule, mrope, axis_maxima(segs, vision=True), names, dtypes, text=text_maximum(segs))
    labels = path_labels("rope")
    summary = []
    for stack in names:
        for d in dict.fromkeys(r.dtype for r in rows):
            rs = [r for r in rows if r.stack == stack and r.dtype == d]
            if not rs:
                continue
            verdicts = ", ".join(f"{r.axis} {r.verdict}" for r in rs)
            entry: dict[str, Any] = {"stack": stack, "label": labels[stack][0], "dtype": d, "axes": verdicts}
            if video is not None:
                entry["safe_seconds"] = longest_safe_video(mrope, rs, video[1], frame, image, text,
                                                           up_to=4 * video[0])
            summary.append(entry)
    if as_json:
        echo_json({"auditor": "config-mrope", "model": model.name, "mrope": dict(model.mrope),
                   "input": {"image": image, "video": None if video is None else
                             {"seconds": video[0], "fps": video[1], "frame": video[2]}, "text": text},
                   "largest_ids": dict(zip(("temporal", "height", "width"), maxima)),
                   "largest_vision_ids": dict(zip(("temporal", "height", "width"), axis_maxima(segs, vision=True))),
                   "largest_text_id": text_maximum(segs), "summary": summary,
                   "results": [r.to_dict() for r in rows], "not_modelled": _NOT_MODELLED, "skipped": skipped})
        return
    click.echo(f"{model.name} (model_type {model.model_type}): M-RoPE\n  "
               + "\n  ".join(_describe(model, mrope, image, video, text, maxima)
                            + ["image / video tokens' largest id: " + ", ".join(
                                f"{a} {x}" for a, x in zip(AXES, axis_maxima(segs, vision=True)))
                               + f"; text tokens' largest id {text_maximum(segs)}"]) + "\n")
    click.echo("Bottom line (each axis' verdict at its largest id" + (", and the longest safe video at this fps"
               if video is not None else "") + "):")
    for e in summary:
        line = f"  {e['label']}, {e['dtype']}: {e['axes']}"
        if "safe_seconds" in e:
            s = e["safe_seconds"]
            rs = [r for r in rows if r.stack == e["stack"] and r.dtype == e["dtype"]]
            open_ended = [replace(r, safe_to=2**40) if r.safe_to == max(r.lengths) else r for r in rs]
            edge = s is not None and longest_safe_video(mrope, open_ended, video[1], frame, image, text,
                                                        up_to=4 * video[0]) != s  # the audited range limits it
            line += ("; no video is safe" if s is None else f"; video safe to {'at least ' if edge else ''}"
                     f"{_hours(s)}" + (f" (ids audited to {max(max(r.lengths) for r in rs)})" if edge else ""))
        click.echo(line)
    click.echo("")
    echo_table([r.to_dict() for r in rows], axis_columns("stack"))
    click.echo(f"\n{_AXES_NOTE}\nnot modelled: {_NOT_MODELLED}."
               + "".join(f"\nskipped: {n}" for n in skipped))
