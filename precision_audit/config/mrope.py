"""A vision-language model's M-RoPE audited for one input: each axis per stack and dtype, and the bottom line.

:func:`mrope_audit` is what ``config MODEL --image WxH --video SECONDS@FPS`` prints and what the report's
"Images and video" section shows: the token layout transformers' ``get_rope_index`` builds for the input
(:func:`precision_audit.rope.axes.layout`), each axis' section audited up to the largest id an image or video token
carries on it, the text tokens on every frequency (:func:`~precision_audit.rope.axes.audit_axes`), and per stack
and dtype the axis verdicts and, for a video, the longest safe video at its frame rate.

>>> from precision_audit.config import load_model
>>> m = mrope_audit(load_model("tests/data/qwen2.5-vl-7b-instruct.json"), image=(1920, 1080),
...                 stacks=["transformers-cast"])
>>> m.vision_maxima, [e["axes"] for e in m.summary]
((1, 26, 47), ['temporal safe, height safe, width safe, text safe'])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..bottomline import path_labels
from ..rope.axes import DEFAULT_FRAME, MRope, audit_axes, axis_maxima, layout, longest_safe_video, text_maximum
from .audit import model_stacks
from .parse import ModelConfig

__all__ = ["GGML_STACKS", "MROPE_STACKS", "MropeAudit", "NOT_MODELLED", "hours", "mrope_audit", "unturned_note",
           "video_text"]

MROPE_STACKS: tuple[str, ...] = ("transformers", "transformers-cast", "vllm", "sglang", "llama.cpp-cpu",
                                  "llama.cpp-cuda")
"""The stacks whose M-RoPE is modelled: each builds a section's cos/sin as its 1-D RoPE code does, at that axis'
ids (transformers' Qwen2-VL / Qwen3-VL rotary modules; vLLM's and SGLang's MRotaryEmbedding index their 1-D
cos/sin cache; ggml's ``ggml_mrope_cache_init`` (CPU) runs the 1-D theta chain of each pair on its section's
id, and CUDA's ``rope_multi`` the 1-D ``pos * powf(theta_scale, i)``, each pair on the id ggml's sector rule gives it:
tests/test_mrope.py runs ggml's real op)."""
GGML_STACKS = ("llama.cpp-cpu", "llama.cpp-cuda")
"""The stacks that assign pairs to axes as ggml does (:meth:`~precision_audit.rope.axes.MRope.ggml_section_indices`)."""
NOT_MODELLED = "MLX, TensorRT-LLM, FlashInfer and the training stacks: their M-RoPE paths are not modelled"


@dataclass(frozen=True)
class MropeAudit:
    """One input's M-RoPE audit: the sections (``mrope``), the token layout (``segments``), each axis' largest id
    over all tokens (``maxima``), over image / video tokens (``vision_maxima``) and the text tokens' (``text_max``),
    the per-axis ``rows`` (:class:`~precision_audit.rope.axes.AxisRow`), per stack and dtype a ``summary`` entry
    (``stack``, ``label``, ``dtype``, ``axes``: each axis' verdict; with a video ``safe_seconds`` and
    ``at_least``: True when the audited ids, not a failure, bound it), the stacks ``skipped`` with why, and
    ``notes`` (a stack that turns some pairs otherwise than transformers: :func:`unturned_note`)."""

    mrope: MRope
    image: tuple[int, int] | None
    video: tuple[float, float, tuple[int, int]] | None
    text: int
    segments: list[Any] = field(repr=False)
    maxima: tuple[int, int, int]
    vision_maxima: tuple[int, int, int]
    text_max: int
    rows: list[Any] = field(repr=False)
    summary: list[dict[str, Any]]
    skipped: list[str]
    notes: list[str] = field(default_factory=list)


def mrope_audit(model: ModelConfig, image: tuple[int, int] | None = None,
                video: tuple[float, float, tuple[int, int]] | tuple[float, float] | None = None, text: int = 0,
                stacks: Sequence[str] | None = None, dtypes: Sequence[str] = ("bfloat16",)) -> MropeAudit:
    """Audit ``model``'s M-RoPE for an ``image`` (width, height), a ``video`` (seconds, fps[, (width, height)
    frames: default 640x360]) and ``text`` tokens after them, on ``stacks`` (default: every modelled stack that
    runs it, :data:`MROPE_STACKS`) in ``dtypes``.  ValueError when the model has no M-RoPE, its sections do not
    fit its head, or no stack named has modelled M-RoPE."""
    if model.kind != "rope" or not model.mrope:
        raise ValueError(f"{model.name} has no mrope_section (not a multimodal-RoPE model)")
    schedule = model.schedule
    mrope = MRope.from_config(dict(model.mrope), schedule.n_freq, model.source or model.name)
    names, skipped = _mrope_stacks(model, stacks)
    vid = None if video is None else (float(video[0]), float(video[1]),
                                       tuple(video[2]) if len(video) > 2 else DEFAULT_FRAME)  # type: ignore[misc]
    frame = DEFAULT_FRAME if vid is None else vid[2]
    segs = layout(mrope, image=image, video=None if vid is None else vid[:2], text=text, frame=frame)
    vision = axis_maxima(segs, vision=True)
    rows = audit_axes(schedule, mrope, vision, names, dtypes, text=text_maximum(segs), ggml=GGML_STACKS)
    maxima = axis_maxima(segs)
    notes = [unturned_note(mrope, schedule, max(maxima), [n for n in names if n in GGML_STACKS])]
    labels = path_labels("rope")
    summary = []
    for stack in names:
        for d in dict.fromkeys(r.dtype for r in rows):
            rs = [r for r in rows if r.stack == stack and r.dtype == d]
            if not rs:
                continue
            entry: dict[str, Any] = {"stack": stack, "label": labels[stack][0], "dtype": d,
                                     "axes": ", ".join(f"{r.axis} {r.verdict}" for r in rs)}
            if vid is not None:
                s = longest_safe_video(mrope, rs, vid[1], frame, image, text, up_to=4 * vid[0])
                # at least: with every axis audited as safe past its ladder, the answer would be longer
                open_ended = [replace(r, safe_to=2**40) if r.safe_to == max(r.lengths) else r for r in rs]
                entry["safe_seconds"] = s
                entry["at_least"] = s is not None and longest_safe_video(
                    mrope, open_ended, vid[1], frame, image, text, up_to=4 * vid[0]) != s
                entry["audited"] = max(max(r.lengths) for r in rs)
            summary.append(entry)
    return MropeAudit(mrope, image, vid, text, segs, maxima, vision, text_maximum(segs), rows,  # type: ignore[arg-type]
                      summary, skipped, [n for n in notes if n])


def _mrope_stacks(model: ModelConfig, stacks: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """The stacks to audit (modelled M-RoPE and running the model) among ``stacks`` (a group such as ``serve``,
    ``train`` or ``all`` stands for its members, as for 1-D RoPE), and each other member with why; ValueError
    when none is left."""
    asked = list(stacks) if stacks else list(MROPE_STACKS)
    runs, why = model_stacks(model, asked)
    names = [n for n in runs if n in MROPE_STACKS]
    skipped = [f"{n}: its M-RoPE path is not modelled" for n in runs if n not in MROPE_STACKS] + list(why)
    if not names:
        raise ValueError(f"no stack named ({', '.join(asked)}) has modelled M-RoPE; modelled: "
                         f"{', '.join(MROPE_STACKS)}")
    return names, skipped


def unturned_note(mrope: MRope, schedule: Any, largest: int, stacks: Sequence[str]) -> str:
    """What ggml's 4th position id does to ``stacks`` (llama.cpp's): '' when no pair is on it (contiguous sections
    that fill the head); else the pairs that never turn (llama.cpp sets that id to 0 for every token) where
    transformers turns them by the temporal id, and how far apart the two are at the largest id, in closed form
    (``largest * theta_i`` rad: the float64 schedule).

    >>> from precision_audit.rope import RopeSchedule
    >>> print(unturned_note(MRope(section=(24, 20, 20), interleaved=True), RopeSchedule(head_dim=128, base=5e6),
    ...                     100000, ["llama.cpp-cpu"]))  # doctest: +NORMALIZE_WHITESPACE
    llama.cpp-cpu: ggml's interleaved M-RoPE turns pairs 61, 62 by a 4th position id that llama.cpp sets to 0
    for every token (llm_graph_input_pos; mtmd's set_position_mrope_2d): they never turn, where transformers turns
    them by the temporal id; at id 100000 that differs by up to 0.04121 rad (pairs D apart: D x 4.121e-07 rad);
    the rows audit the pairs that turn
    """
    fourth = mrope.ggml_section_indices()[3]
    if not fourth or not stacks:
        return ""
    theta = schedule.inv_freq()
    top = float(max(theta[list(fourth)]))
    return (f"{', '.join(stacks)}: ggml's interleaved M-RoPE turns pairs {', '.join(map(str, fourth))} by a 4th "
            "position id that llama.cpp sets to 0 for every token (llm_graph_input_pos; mtmd's "
            "set_position_mrope_2d): they never turn, where transformers turns them by the temporal id; at id "
            f"{largest} that differs by up to {largest * top:.4g} rad (pairs D apart: D x {top:.4g} rad); the "
            "rows audit the pairs that turn")


def hours(seconds: float) -> str:
    """A duration as the bottom line says it.

    >>> hours(90), hours(7200), hours(12)
    ('1.5 min', '2 h', '12 s')
    """
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:g} s"


def video_text(entry: dict[str, Any]) -> str:
    """A summary entry's video limit in words ('' without a video)."""
    if "safe_seconds" not in entry:
        return ""
    s = entry["safe_seconds"]
    if s is None:
        return "no video is safe"
    edge = entry["at_least"]
    return (f"video safe to {'at least ' if edge else ''}{hours(s)}"
            + (f" (ids audited to {entry['audited']})" if edge else ""))

