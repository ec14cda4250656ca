"""M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): three position ids per token, one frequency section per axis.

A vision-language model's multimodal RoPE splits the rotary frequencies into
temporal / height / width sections (``mrope_section``: contiguous blocks, or
every third frequency in Qwen3-VL's ``mrope_interleaved`` layout) and rotates
each section by its own axis' position id.  Text tokens carry the same id on
all three axes; an image or a video carries its grid: temporal ids from the
frames (Qwen2.5-VL scales them with seconds, ``tokens_per_second *
temporal_patch_size / fps`` per temporal patch), height and width ids from
the patch grid after the spatial merge.  The ids follow transformers'
``get_rope_index`` (read at transformers 5.24: after a vision block the next
id is the block's start plus ``max(h, w)``, its merged height or width).

Each frequency's cos/sin depend on that frequency and its axis' id alone, so
an axis is audited exactly as 1-D RoPE restricted to its section's
frequencies (:func:`~precision_audit.rope.audit` ``frequencies=``) over the ids
0..largest: a superset of the ids the axis carries.

>>> m = MRope(section=(16, 24, 24))
>>> [len(ix) for ix in m.section_indices()]
[16, 24, 24]
>>> MRope(section=(2, 1, 1), interleaved=True).section_indices()
((0, 3), (1,), (2,))
>>> axis_maxima(layout(m, image=(448, 448)))  # vision_start 0, 16 x 16 merged patches at 1..16, vision_end 17
(17, 17, 17)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..rows import Row

__all__ = ["AXES", "AxisRow", "FAMILIES", "MRope", "Segment", "audit_axes", "axis_maxima", "grid", "layout", "longest_safe_video",
           "parse_image", "parse_video", "position_ids", "text_maximum", "video_grid"]

AXES: tuple[str, ...] = ("temporal", "height", "width")

# Per family: the processor's resize factor unit (patch size) and pixel bounds (images; video frames), whether
# video frames are split into one grid per temporal patch with timestamp text between them (Qwen3-VL), as
# transformers' image / video processors default them (read at 5.24).
FAMILIES: dict[str, dict[str, Any]] = {
    "qwen2_vl": dict(patch=14, image_pixels=(56 * 56, 28 * 28 * 1280), video_pixels=(128 * 28 * 28, 28 * 28 * 768),
                     split_frames=False, seconds=False),
    "qwen2_5_vl": dict(patch=14, image_pixels=(56 * 56, 28 * 28 * 1280),
                       video_pixels=(128 * 28 * 28, 28 * 28 * 768), split_frames=False, seconds=True),
    "qwen3_vl": dict(patch=16, image_pixels=(56 * 56, 28 * 28 * 1280), video_pixels=(128 * 32 * 32, 32 * 32 * 768),
                     split_frames=True, seconds=False),
}
FAMILIES["qwen3_vl_moe"] = FAMILIES["qwen3_vl"]
DEFAULT_FRAME = (640, 360)
"""A video frame's size when none is given (width, height)."""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} {value!r} must be a positive integer")
    return int(value)


@dataclass(frozen=True)
class MRope:
    """A model's M-RoPE: the sections (temporal, height, width frequencies), their layout and the vision facts
    that turn images and video into ids.  ``family``: the model type (:data:`FAMILIES`); ``tokens_per_second``:
    Qwen2.5-VL's temporal scale (None: ids step 1 per temporal patch).

    >>> MRope(section=(16, 24, 0))
    Traceback (most recent call last):
    ...
    ValueError: mrope_section (16, 24, 0) must be three positive integers
    """

    section: tuple[int, int, int]
    interleaved: bool = False
    family: str = "qwen2_vl"
    patch_size: int = 14
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    tokens_per_second: float | None = None

    def __post_init__(self) -> None:
        s = self.section
        if not (isinstance(s, tuple) and len(s) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                             and x > 0 for x in s)):
            raise ValueError(f"mrope_section {s!r} must be three positive integers")
        if self.family not in FAMILIES:
            raise ValueError(f"M-RoPE family {self.family!r} is not modelled; known: {', '.join(FAMILIES)}")
        for name in ("patch_size", "spatial_merge_size", "temporal_patch_size"):
            _positive_int(name, getattr(self, name))
        tps = self.tokens_per_second
        if tps is not None and not (isinstance(tps, (int, float)) and math.isfinite(tps) and tps > 0):
            raise ValueError(f"tokens_per_second {tps!r} must be a number > 0")

    @classmethod
    def from_config(cls, facts: Mapping[str, Any], n_freq: int, source: str = "config") -> "MRope":
        """From a config's M-RoPE facts (:func:`precision_audit.config.mrope_facts`), checked against the
        schedule's ``n_freq`` rotated frequencies (head_dim / 2): ValueError when the sections do not add up.

        >>> MRope.from_config({"model_type": "qwen2_vl", "mrope_section": [16, 24, 24]}, 64).section
        (16, 24, 24)
        >>> MRope.from_config({"model_type": "qwen2_vl", "mrope_section": [16, 24, 20]}, 64)
        Traceback (most recent call last):
        ...
        ValueError: config: mrope_section [16, 24, 20] sums to 60, not head_dim / 2 = 64
        """
        sec = facts.get("mrope_section")
        if sec is None:
            raise ValueError(f"{source}: no mrope_section: not a multimodal-RoPE model (images and video need one)")
        if not isinstance(sec, (list, tuple)) or len(sec) != 3 or not all(
                isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in sec):
            raise ValueError(f"{source}: mrope_section {sec!r} must be three positive integers")
        if sum(sec) != n_freq:
            raise ValueError(f"{source}: mrope_section {list(sec)} sums to {sum(sec)}, not head_dim / 2 = {n_freq}")
        family = str(facts.get("model_type") or "")
        if family not in FAMILIES:
            raise ValueError(f"{source}: model_type {family!r}: M-RoPE ids are modelled for "
                             f"{', '.join(FAMILIES)}")
        fam = FAMILIES[family]
        tps = facts.get("tokens_per_second")
        try:
            return cls(section=tuple(int(x) for x in sec), interleaved=bool(facts.get("mrope_interleaved")),  # type: ignore[arg-type]
                       family=family, patch_size=int(facts.get("patch_size") or fam["patch"]),
                       spatial_merge_size=int(facts.get("spatial_merge_size") or 2),
                       temporal_patch_size=int(facts.get("temporal_patch_size") or 2),
                       tokens_per_second=(float(tps) if tps is not None else 2.0) if fam["seconds"] else None)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}: {e}") from None

    def section_indices(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The frequency indices each axis rotates: contiguous blocks (Qwen2-VL's split), or interleaved
        (Qwen3-VL: frequency i is height when i % 3 == 1 and i < 3 * section[1], width when i % 3 == 2 and
        i < 3 * section[2], temporal otherwise)."""
        n = sum(self.section)
        if not self.interleaved:
            a, b = self.section[0], self.section[0] + self.section[1]
            return tuple(range(a)), tuple(range(a, b)), tuple(range(b, n))
        axis = [0] * n
        for k in (1, 2):
            for i in range(k, min(n, 3 * self.section[k]), 3):
                axis[i] = k
        return tuple(tuple(i for i in range(n) if axis[i] == k) for k in range(3))  # type: ignore[return-value]

    def ggml_section_indices(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The frequency indices each position id turns in ggml's multi-section rope (llama.cpp), with the
        sections (t, h, w, 0) its converter writes: temporal, height, width and a 4th id.  Contiguous: blocks, as
        :meth:`section_indices` (none on the 4th id when the sections fill the head).  Interleaved (IMROPE,
        ``ggml_mrope_cache_init``): pair i is height when i % 3 == 1 and i < 3 * h, width when i % 3 == 2 and
        i < 3 * w, temporal when i % 3 == 0 and i < 3 * t, else the 4th id, which llama.cpp sets to 0 for
        every token (``llm_graph_input_pos``, mtmd's ``set_position_mrope_2d``): those pairs never turn.

        >>> m = MRope(section=(24, 20, 20), interleaved=True)
        >>> m.ggml_section_indices()[3], set(m.section_indices()[0]) - set(m.ggml_section_indices()[0])
        ((61, 62), {61, 62})
        """
        n = sum(self.section)
        if not self.interleaved:
            return (*self.section_indices(), ())
        axis = []
        for i in range(n):
            r = i % 3
            axis.append(r if i < 3 * self.section[r] else 3)
        return tuple(tuple(i for i in range(n) if axis[i] == k) for k in range(4))  # type: ignore[return-value]

    @property
    def factor(self) -> int:
        """The processor's resize unit: patch size x spatial merge."""
        return self.patch_size * self.spatial_merge_size


Segment = tuple[str, int, int, int, float]
"""One block of tokens: ``("text", n, 0, 0, 0.0)``, or ``(kind, t, h, w, interval)`` for an image or video grid
(merged units: h, w after the spatial merge, t temporal patches) whose temporal ids step by ``interval``."""


def grid(width: int, height: int, mrope: MRope, pixels: tuple[int, int]) -> tuple[int, int]:
    """(h, w) patches of an image resized as the processors' ``smart_resize`` does (multiples of the factor,
    area within ``pixels``), before the spatial merge.

    >>> grid(3840, 2160, MRope(section=(16, 24, 24)), FAMILIES["qwen2_vl"]["image_pixels"])
    (52, 94)
    """
    f = mrope.factor
    lo, hi = pixels
    h_bar, w_bar = round(height / f) * f, round(width / f) * f
    if h_bar * w_bar > hi:
        beta = math.sqrt(height * width / hi)
        h_bar, w_bar = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
    elif h_bar * w_bar < lo:
        beta = math.sqrt(lo / (height * width))
        h_bar, w_bar = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
    return h_bar // mrope.patch_size, w_bar // mrope.patch_size


def video_grid(seconds: float, fps: float, mrope: MRope, frame: tuple[int, int] = DEFAULT_FRAME) -> tuple[int, int, int]:
    """(t, h, w) patches of a video: ``round(seconds * fps)`` frames (at least one temporal patch, padded to
    whole temporal patches) of ``frame`` (width, height) resized as a video frame.

    >>> video_grid(3600, 2, MRope(section=(16, 24, 24)))
    (3600, 26, 46)
    """
    frames = max(mrope.temporal_patch_size, round(seconds * fps))
    h, w = grid(frame[0], frame[1], mrope, FAMILIES[mrope.family]["video_pixels"])
    return -(-frames // mrope.temporal_patch_size), h, w


def _timestamp_tokens(seconds: float) -> int:
    """Tokens of Qwen3-VL's ``<S.s seconds>`` before a frame (an estimate: one token per digit and the point,
    plus ``<``, `` seconds``, ``>``)."""
    return 3 + len(f"{seconds:.1f}")


def layout(mrope: MRope, image: tuple[int, int] | None = None, video: tuple[float, float] | None = None,
           text: int = 0, frame: tuple[int, int] = DEFAULT_FRAME) -> list[Segment]:
    """The token blocks of a prompt: an image (width, height), then a video (seconds, fps), each between
    vision_start / vision_end tokens (Qwen3-VL: each temporal patch of the video after its timestamp text), then
    ``text`` tokens.

    >>> layout(MRope(section=(16, 24, 24), family="qwen2_5_vl", tokens_per_second=2.0), video=(4, 2))[1]
    ('video', 4, 13, 23, 2.0)
    """
    segs: list[Segment] = []
    m = mrope.spatial_merge_size
    if image is not None:
        h, w = grid(image[0], image[1], mrope, FAMILIES[mrope.family]["image_pixels"])
        segs += [("text", 1, 0, 0, 0.0), ("image", 1, h // m, w // m, 1.0), ("text", 1, 0, 0, 0.0)]
    if video is not None:
        seconds, fps = video
        t, h, w = video_grid(seconds, fps, mrope, frame)
        if FAMILIES[mrope.family]["split_frames"]:
            for k in range(t):
                stamp = (k + 0.5) * mrope.temporal_patch_size / fps
                segs += [("text", _timestamp_tokens(stamp) + 1, 0, 0, 0.0), ("video", 1, h // m, w // m, 1.0),
                         ("text", 1, 0, 0, 0.0)]
        else:
            step = 1.0 if mrope.tokens_per_second is None else \
                mrope.tokens_per_second * (mrope.temporal_patch_size / fps)
            segs += [("text", 1, 0, 0, 0.0), ("video", t, h // m, w // m, step), ("text", 1, 0, 0, 0.0)]
    if text:
        segs.append(("text", _positive_int("text", text), 0, 0, 0.0))
    return segs


def _temporal(t: int, interval: float) -> np.ndarray:
    """Temporal offsets as transformers makes them: ``(arange(t) * interval).long()`` (float32 product)."""
    return np.floor(np.arange(t, dtype=np.float32) * np.float32(interval)).astype(np.int64)


def position_ids(segments: Sequence[Segment]) -> np.ndarray:
    """The (3, tokens) position ids of a layout, token by token (tests; :func:`axis_maxima` for long inputs).

    >>> position_ids([("text", 2, 0, 0, 0.0), ("image", 1, 2, 2, 1.0), ("text", 1, 0, 0, 0.0)]).tolist()
    [[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]]
    """
    parts, cur = [], 0
    for kind, t, h, w, interval in segments:
        if kind == "text":
            parts.append(np.tile(np.arange(cur, cur + t), (3, 1)))
            cur += t
            continue
        tt, hh, ww = np.meshgrid(_temporal(t, interval), np.arange(h), np.arange(w), indexing="ij")
        parts.append(np.stack([tt.ravel(), hh.ravel(), ww.ravel()]) + cur)
        cur += max(h, w)
    return np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), dtype=np.int64)


def axis_maxima(segments: Sequence[Segment], vision: bool = False) -> tuple[int, int, int]:
    """Each axis' largest id, in closed form per block (text: its last id on every axis; a grid starting at
    ``s``: ``s + floor((t - 1) * interval)``, ``s + h - 1``, ``s + w - 1``); ``vision``: over the image and
    video tokens only (-1 on every axis when there are none).

    >>> segs = [("text", 1, 0, 0, 0.0), ("video", 3600, 11, 20, 2.0), ("text", 1, 0, 0, 0.0)]
    >>> axis_maxima(segs), axis_maxima(segs, vision=True)
    ((7199, 21, 21), (7199, 11, 20))
    """
    top, cur = [-1, -1, -1], 0
    for kind, t, h, w, interval in segments:
        if kind == "text":
            if not vision:
                top = [max(x, cur + t - 1) for x in top]
            cur += t
            continue
        last_t = int(np.floor(np.float32(t - 1) * np.float32(interval)))
        top = [max(top[0], cur + last_t), max(top[1], cur + h - 1), max(top[2], cur + w - 1)]
        cur += max(h, w)
    return top[0], top[1], top[2]


def text_maximum(segments: Sequence[Segment]) -> int:
    """The largest id a text token carries (the same on every axis), -1 when there is no text.

    >>> text_maximum([("text", 1, 0, 0, 0.0), ("image", 1, 16, 16, 1.0), ("text", 1, 0, 0, 0.0)])
    17
    """
    top, cur = -1, 0
    for kind, t, h, w, _ in segments:
        if kind == "text":
            top, cur = max(top, cur + t - 1), cur + t
        else:
            cur += max(h, w)
    return top


def parse_image(text: str) -> tuple[int, int]:
    """``WxH`` -> (width, height), both positive.

    >>> parse_image("3840x2160")
    (3840, 2160)
    >>> parse_image("0x0")
    Traceback (most recent call last):
    ...
    ValueError: image '0x0' must be WIDTHxHEIGHT in pixels, both >= 1 (e.g. 3840x2160)
    """
    parts = str(text).lower().split("x")
    try:
        w, h = (int(p) for p in parts)
        if w < 1 or h < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"image {text!r} must be WIDTHxHEIGHT in pixels, both >= 1 (e.g. 3840x2160)") from None
    if max(w, h) / min(w, h) > 200:
        raise ValueError(f"image {text!r}: aspect ratio above 200, which the processors refuse")
    return w, h


_SECONDS = {"": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0,
            "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0,
            "hours": 3600.0}
"""The units a video's duration may carry (a bare number is seconds), in seconds."""
_RATE = ("", "fps", "/s", "hz")
"""The units a frame rate may carry (a bare number is frames per second)."""


def _number_unit(text: str) -> tuple[float, str]:
    """``"3600s"`` -> (3600.0, "s"): the leading number and the unit after it (lower case, spaces dropped)."""
    t = text.strip().lower().replace(" ", "")
    i = len(t)
    while i and not (t[i - 1].isdigit() or t[i - 1] == "."):
        i -= 1
    return float(t[:i]), t[i:]


def parse_video(text: str) -> tuple[float, float, tuple[int, int]]:
    """``SECONDS@FPS`` or ``SECONDS@FPS:WxH`` (a frame size; default :data:`DEFAULT_FRAME`) -> (seconds, fps,
    frame); units as people write them are accepted: a duration in s, min or h, a rate in fps (or /s, Hz).

    >>> parse_video("3600@2"), parse_video("3600s@2fps"), parse_video("1.5h@0.5fps:1280x720")
    ((3600.0, 2.0, (640, 360)), (3600.0, 2.0, (640, 360)), (5400.0, 0.5, (1280, 720)))
    >>> parse_video("-5@2")
    Traceback (most recent call last):
    ...
    ValueError: video '-5@2' must be SECONDS@FPS[:WxH] with SECONDS > 0 and FPS > 0 (e.g. 3600@2, 3600s@2fps, 1h@2fps)
    """
    body, _, size = str(text).partition(":")
    sec, at, fps = body.partition("@")
    bad = ValueError(f"video {text!r} must be SECONDS@FPS[:WxH] with SECONDS > 0 and FPS > 0 (e.g. 3600@2, "
                     "3600s@2fps, 1h@2fps)")
    try:
        (s, s_unit), (f, f_unit) = _number_unit(sec), _number_unit(fps)
    except ValueError:
        raise bad from None
    if s_unit not in _SECONDS or f_unit not in _RATE:
        raise bad
    s *= _SECONDS[s_unit]
    if not at or not (math.isfinite(s) and math.isfinite(f) and s > 0 and f > 0) or s * f > 2**24:
        raise bad
    return s, f, parse_image(size) if size else DEFAULT_FRAME


@dataclass(frozen=True)
class AxisRow(Row):
    """One M-RoPE axis on one stack and dtype: its section's frequencies audited over ids 0..``largest_id``.

    ``safe_to``: the longest audited id count (a length) up to which every audited length is safe (None when
    the shortest is not); ``verdict``, ``why`` and the errors are those at ``largest_id + 1``.
    """

    axis: str
    stack: str
    dtype: str
    largest_id: int
    frequencies: int
    verdict: str
    max_rotation_error: float
    colliding_positions: int
    worst_pair_error: float | None
    why: str | None = None
    safe_to: int | None = None
    lengths: tuple[int, ...] = field(default=(), repr=False)


def _ladder(n: int, top: int) -> list[int]:
    """Audited lengths for an axis of ``n`` ids when the longest axis has ``top``: powers of two from 16 below
    4 top (so every axis is judged as far as a longer input would take it), and n."""
    out = {n}
    L = 16
    while L < 4 * top:
        out.add(L)
        L *= 2
    return sorted(out)


def audit_axes(schedule: Any, mrope: MRope, maxima: Sequence[int], stacks: Sequence[str],
               dtypes: Sequence[str], text: int | None = None, ggml: Sequence[str] = ()) -> list[AxisRow]:
    """Each axis' section audited with :func:`~precision_audit.rope.audit` (``frequencies=`` its section) at
    its largest id + 1, and at powers of two up to 4x the longest axis' (``safe_to``), per stack and dtype.

    ``maxima``: the largest id image and video tokens carry per axis (:func:`axis_maxima` ``vision=True``):
    tokens of one image or video that differ in one axis only (neighbouring columns, rows, frames) are told
    apart by that axis' section alone.  ``text``: the largest id of a text token (:func:`text_maximum`), whose
    axes move together: a row ``text`` audits every frequency, as 1-D RoPE.  An axis with no id (-1) is left out.
    ``ggml``: the stacks (of ``stacks``) that assign pairs to axes as ggml does
    (:meth:`MRope.ggml_section_indices`); their ``text`` row audits the pairs that turn.

    >>> from precision_audit.rope import RopeSchedule
    >>> rows = audit_axes(RopeSchedule(head_dim=8, base=1e6), MRope(section=(2, 1, 1)), (99, 9, 9),
    ...                   ["transformers"], ["bfloat16"], text=120)
    >>> [(r.axis, r.largest_id, r.frequencies, r.verdict) for r in rows]
    [('temporal', 99, 2, 'safe'), ('height', 9, 1, 'safe'), ('width', 9, 1, 'safe'), ('text', 120, 4, 'safe')]
    """
    if sum(mrope.section) != schedule.n_freq:
        raise ValueError(f"mrope_section {list(mrope.section)} sums to {sum(mrope.section)}, not head_dim / 2 = "
                         f"{schedule.n_freq}")
    groups = [(list(s for s in stacks if s not in ggml), mrope.section_indices(), None),
              (list(s for s in stacks if s in ggml), mrope.ggml_section_indices()[:3],
               tuple(i for i in range(schedule.n_freq) if i not in mrope.ggml_section_indices()[3]))]
    found_rows: dict[tuple[str, str, str], AxisRow] = {}
    for names, sections, turning in groups:
        if not names:
            continue
        axes = [(a, idx, int(top)) for a, idx, top in zip(AXES, sections, maxima) if int(top) >= 0]
        if text is not None and text >= 0:
            axes.append(("text", None if turning is None or len(turning) == schedule.n_freq else turning,
                         int(text)))
        longest = max([2, *(top + 1 for _, _, top in axes)])
        for axis, idx, top in axes:
            for row in _axis_rows(schedule, axis, idx, top, longest, names, dtypes):
                found_rows[(axis, row.stack, row.dtype)] = row
    order = [*(a for a, top in zip(AXES, maxima) if int(top) >= 0), *(("text",) if text is not None and text >= 0
                                                                      else ())]
    dts = list(dict.fromkeys(d for _, _, d in found_rows))  # the rows' own names, in the order audited
    return [found_rows[(a, s, d)] for a in order for d in dts for s in stacks if (a, s, d) in found_rows]


def _axis_rows(schedule: Any, axis: str, idx: Sequence[int] | None, top: int, longest: int,
               stacks: Sequence[str], dtypes: Sequence[str]) -> list[AxisRow]:
    """One axis' rows (:func:`audit_axes`): frequencies ``idx`` (None: all) over ids 0..top, per stack and dtype."""
    from .audit import audit

    n = top + 1
    lens = _ladder(max(n, 2), longest)
    found = audit(schedule, list(stacks), lens, list(dtypes), frequencies=idx)
    by: dict[tuple[str, str], list[Any]] = {}
    for r in found:
        by.setdefault((r.recipe, r.dtype), []).append(r)
    rows = []
    for (stack, dtype), rs in by.items():
        rs.sort(key=lambda r: r.length)
        safe = None
        for r in rs:
            if r.verdict != "safe":
                break
            safe = r.length
        at = next(r for r in rs if r.length == max(n, 2))
        rows.append(AxisRow(axis=axis, stack=stack, dtype=dtype, largest_id=top,
                            frequencies=schedule.n_freq if idx is None else len(idx),
                            verdict=at.verdict, max_rotation_error=at.max_rotation_error,
                            colliding_positions=at.colliding_positions,
                            worst_pair_error=max((p.max_rotation_error for p in at.pair_errors), default=None),
                            why=at.lost, safe_to=safe, lengths=tuple(lens)))
    return rows


def longest_safe_video(mrope: MRope, rows: Sequence[AxisRow], fps: float, frame: tuple[int, int] = DEFAULT_FRAME,
                       image: tuple[int, int] | None = None, text: int = 0, up_to: float = 86400.0) -> float | None:
    """The longest video (seconds, whole seconds) whose every axis' largest id stays within that axis'
    ``safe_to`` in ``rows`` (one stack and dtype); None when some axis is not safe at its shortest audited
    length.  Searched up to ``up_to`` seconds (and the ids the rows audited).

    >>> from precision_audit.rope import RopeSchedule
    >>> m = MRope(section=(2, 1, 1))
    >>> rows = audit_axes(RopeSchedule(head_dim=8, base=1e6), m, (99, 9, 9), ["transformers"], ["float32"])
    >>> longest_safe_video(m, rows, fps=2, up_to=600)  # ids safe to 256 (audited to 4 x 100): 255 s at 2 fps
    255.0
    """
    safe = {r.axis: r.safe_to for r in rows}
    if any(safe.get(a, 0) is None for a in (*AXES, "text")):
        return None

    def fits(seconds: float) -> bool:
        segs = layout(mrope, image=image, video=(seconds, fps), text=text, frame=frame)
        tops = dict(zip(AXES, axis_maxima(segs, vision=True)))
        tops["text"] = text_maximum(segs)
        return all(t < 0 or a not in safe or t + 1 <= int(safe[a]) for a, t in tops.items())  # type: ignore[arg-type]

    if not fits(1.0):
        return 0.0
    lo, hi = 1, max(1, int(up_to))
    if fits(float(hi)):
        return float(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(float(mid)) else (lo, mid)
    return float(lo)
