"""Axial RoPE of diffusion transformers: one 1-D RoPE per axis of (index | frame, row, column) position ids.

A diffusion transformer (Flux, HunyuanVideo, Wan 2.x) gives every latent token one id per axis and rotates each
axis' own block of the head by a 1-D RoPE of that block's width (``axes_dims_rope``) and the model's ``theta``: diffusers'
``get_1d_rotary_pos_embed(axes_dim[i], ids[:, i], theta, use_real=True, freqs_dtype=...)`` (read at diffusers
0.42.1, ``models/embeddings.py``).  Each axis is therefore audited exactly as 1-D RoPE with its own schedule
(``RopeSchedule(head_dim=axes_dim[i], base=theta)``) over the ids 0..largest: a superset of the ids it carries.
Wan computes its cos/sin once for ``rope_max_seq_len`` positions and slices that table per axis: ids beyond it
are not a precision loss but an error (:attr:`AxialRope.table`).

The code paths (:data:`PATHS`) are what these pipelines run, stage by stage (:class:`~.recipes.Recipe`):

* ``ids-fp32``: ids in float32 (``FluxPosEmbed.forward``: ``pos = ids.float()``), inverse frequencies and
  ``torch.outer(pos, freqs)`` in ``freqs_dtype`` (float64 for Flux on CUDA and CPU; HunyuanVideo: float32, the
  function's default), cos/sin in that dtype and ``.float()``; q/k rotated in float32 and cast to the model dtype
  (``apply_rotary_emb``: ``(x.float() * cos + x_rotated.float() * sin).to(x.dtype)``).  The fix.
* ``freqs-fp32``: ``freqs_dtype`` float32, as ``maybe_adjust_dtype_for_device`` makes it on MPS, NPU and Neuron.
* ``ids-dtype``: the ids cast to the model dtype before ``ids.float()``: FluxPipeline 0.42.1 builds them with
  ``_prepare_latent_image_ids(..., device, dtype)`` and ``dtype = prompt_embeds.dtype`` (the text encoder's, bf16
  when loaded so); trainers did the same (OneTrainer#1177, SimpleTuner#2038).  bfloat16 keeps integers exact to
  256, float16 to 2048.
* ``cos-sin-dtype``: cos/sin stored in the model dtype before the rotation (Wan's cos/sin table, a buffer that
  ``model.to(dtype)`` casts, or code that casts ``image_rotary_emb``).

>>> flux = FAMILIES["FluxTransformer2DModel"]
>>> grid = latent_grid(flux, image=(1024, 768))
>>> grid, axial_maxima(flux, grid)
((None, 48, 64), (0, 47, 63))
>>> axial_ids(flux, (None, 2, 3)).tolist()  # FluxPipeline._prepare_latent_image_ids order: row-major
[[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 1, 2]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..formats import get_format
from .axes import AxisRow
from .recipes import Recipe
from .schedules import RopeSchedule

__all__ = ["AxialPath", "AxialRope", "FAMILIES", "ID_CAP", "PATHS", "audit_axial", "axial_ids", "axial_maxima",
           "axial_recipe", "audit_input", "largest_safe", "latent_grid"]

ID_CAP = 2**16
"""The largest id count per axis a bottom line searches (65536 latent rows: about 1M px at 16 px per id)."""


@dataclass(frozen=True)
class AxialPath:
    """A code path as stage formats: ids, frequencies (None: the family's ``freqs_dtype``), the stored cos/sin
    (``"dtype"``: the model dtype); ``label`` and ``fix`` for the bottom line."""

    ids: str
    freqs: str | None
    cache: str
    label: str
    fix: str | None = None


_FIX = ("build the ids in float32 (FluxPipeline: cast latent_image_ids and text_ids to torch.float32 before "
        "the transformer), keep the frequencies in float32/float64 and cast only cos/sin or the rotated q/k")
PATHS: dict[str, AxialPath] = {
    "ids-fp32": AxialPath("float32", None, "float32", "ids in float32, freqs as built (diffusers' transformer)"),
    "freqs-fp32": AxialPath("float32", "float32", "float32", "freqs_dtype float32 (diffusers on MPS / NPU)"),
    "ids-dtype": AxialPath("dtype", None, "float32", "ids cast to the model dtype (FluxPipeline 0.42.1, "
                      "OneTrainer#1177, SimpleTuner#2038)", fix=_FIX),
    "cos-sin-dtype": AxialPath("float32", None, "dtype", "cos/sin stored in the model dtype",
                          fix="keep cos/sin in float32 and cast the rotated q/k (Wan: load with "
                              "from_pretrained(torch_dtype=...), which keeps its rope table float32, not "
                              "model.to(dtype))"),
}


@dataclass(frozen=True)
class AxialRope:
    """A diffusion transformer's axial RoPE and the pipeline facts that turn pixels and frames into ids.

    ``axes_dim``: the head block each axis rotates (sums to the head dim); ``axes``: their names; ``theta``;
    ``freqs_dtype``: the frequencies' dtype on CUDA / CPU; ``pixels_per_id``: VAE scale x patch (16 for Flux:
    8 x its 2 x 2 packing); ``frames_per_id``: the VAE's temporal compression x temporal patch (None: an image
    model); ``ids_cast``: whether the shipped pipeline casts the ids to the model dtype; ``table``: the rows of a
    precomputed cos/sin table (Wan: ``rope_max_seq_len``; an axis with more ids fails), None when cos/sin are
    computed from the ids; ``lowp_apply``: how q/k are rotated when cos/sin are in the model dtype
    (:data:`~.recipes.APPLY_MODES`); ``text``: for a model whose last axis numbers the text tokens (Flux.2's 4th
    axis), the pipeline's text length (its ``max_sequence_length``), None when no axis does.  Axes are (frame or
    index, height, width, then that text axis if any): any number of them from 3.

    >>> AxialRope(family="flux", axes_dim=(16, 56, 55), axes=("index", "height", "width"), theta=1e4,
    ...           freqs_dtype="float64", pixels_per_id=16)
    Traceback (most recent call last):
    ...
    ValueError: axes_dims_rope (16, 56, 55) must be positive even integers (one per axis: index, height, width)
    """

    family: str
    axes_dim: tuple[int, ...]
    axes: tuple[str, ...]
    theta: float
    freqs_dtype: str
    pixels_per_id: int
    frames_per_id: int | None = None
    ids_cast: bool = False
    paths: tuple[str, ...] = ("ids-fp32", "freqs-fp32", "ids-dtype", "cos-sin-dtype")
    source: str = ""
    table: int | None = None
    lowp_apply: str = "fp32-then-cast"
    text: int | None = None

    def __post_init__(self) -> None:
        d = self.axes_dim
        if not (isinstance(d, tuple) and len(d) == len(self.axes) >= 3 and all(
                isinstance(x, int) and not isinstance(x, bool) and x > 0 and x % 2 == 0 for x in d)):
            raise ValueError(f"axes_dims_rope {d!r} must be positive even integers (one per axis: "
                             f"{', '.join(self.axes)})")
        if not (isinstance(self.theta, (int, float)) and math.isfinite(self.theta) and self.theta > 1):
            raise ValueError(f"rope theta {self.theta!r} must be a finite number > 1")
        object.__setattr__(self, "freqs_dtype", get_format(self.freqs_dtype).name)
        if isinstance(self.pixels_per_id, bool) or not isinstance(self.pixels_per_id, int) or self.pixels_per_id < 1:
            raise ValueError(f"pixels_per_id {self.pixels_per_id!r} must be a positive integer")
        bad = [p for p in self.paths if p not in PATHS]
        if bad:
            raise ValueError(f"unknown axial RoPE path {bad[0]!r}; known: {', '.join(PATHS)}")
        t = self.table
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 2):
            raise ValueError(f"rope table rows {t!r} must be an integer >= 2")
        n = self.text
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1 or len(self.axes) < 4):
            raise ValueError(f"text tokens {n!r} must be a positive integer, for a text axis after height and width")

    @property
    def video(self) -> bool:
        """Whether the model makes video (it has a frame axis)."""
        return self.frames_per_id is not None

    def schedule(self, axis: int) -> RopeSchedule:
        """Axis ``axis``' 1-D schedule: ``1 / theta ** (arange(0, d, 2) / d)`` with d its block width."""
        return RopeSchedule(head_dim=self.axes_dim[axis], base=float(self.theta))


# Per diffusers ``_class_name``: the facts of its RoPE and pipeline (read at diffusers 0.42.1).  Config keys that
# override them: :mod:`precision_audit.config.diffusion`.
FAMILIES: dict[str, AxialRope] = {
    # transformer_flux.py FluxPosEmbed(theta=10000, axes_dim=axes_dims_rope); pipeline_flux.py prepare_latents:
    # rows = 2 * (H // 16) // 2 = H // 16 (vae_scale_factor 8, 2 x 2 packing), ids (0, row, col) in the pipeline's
    # dtype; text ids all 0.
    "FluxTransformer2DModel": AxialRope(
        family="flux", axes_dim=(16, 56, 56), axes=("index", "height", "width"), theta=10000.0,
        freqs_dtype="float64", pixels_per_id=16, ids_cast=True,
        source="diffusers 0.42.1 transformer_flux.FluxPosEmbed, pipeline_flux.FluxPipeline._prepare_latent_image_ids"),
    # transformer_hunyuan_video.py HunyuanVideoRotaryPosEmbed: ids torch.arange(..., dtype=float32) inside the model
    # (never cast), get_1d_rotary_pos_embed's default freqs_dtype float32 on every device; rope sizes
    # (F - 1) // 4 + 1 latent frames (patch_size_t 1), (H // 8) // 2 rows, (W // 8) // 2 columns.
    "HunyuanVideoTransformer3DModel": AxialRope(
        family="hunyuan_video", axes_dim=(16, 56, 56), axes=("frame", "height", "width"), theta=256.0,
        freqs_dtype="float32", pixels_per_id=16, frames_per_id=4, paths=("ids-fp32", "cos-sin-dtype"),
        source="diffusers 0.42.1 transformer_hunyuan_video.HunyuanVideoRotaryPosEmbed"),
    # transformer_wan.py WanRotaryPosEmbed: a cos/sin table of rope_max_seq_len positions (torch.arange, int64)
    # built at init with freqs_dtype float64 (float32 when torch.backends.mps.is_available()), split per axis
    # (h = w = 2 * (head_dim // 6), t the rest) and sliced [:ppf], [:pph], [:ppw]: more ids than rows raise.
    # The table is a buffer: from_pretrained(torch_dtype=...) keeps it float32 (_keep_in_fp32_modules "rope"),
    # model.to(dtype) casts it (diffusers warns); its apply_rotary_emb then rotates in the model dtype.
    "WanTransformer3DModel": AxialRope(
        family="wan", axes_dim=(44, 42, 42), axes=("frame", "height", "width"), theta=10000.0,
        freqs_dtype="float64", pixels_per_id=16, frames_per_id=4, paths=("ids-fp32", "freqs-fp32", "cos-sin-dtype"),
        table=1024, lowp_apply="elementwise",
        source="diffusers 0.42.1 transformer_wan.WanRotaryPosEmbed"),
    # transformer_flux2.py Flux2PosEmbed(theta=rope_theta, axes_dim=axes_dims_rope): 4 axes, get_1d_rotary_pos_embed
    # with repeat_interleave_real=True, freqs_dtype float64 (float32 on MPS / NPU), ids.float() of int64 ids;
    # pipeline_flux2.py: _prepare_latent_ids (T 0, H rows, W columns, L 0), _prepare_text_ids (0, 0, 0, L for the
    # L-th text token; padding to max_sequence_length 512), _prepare_image_ids (reference image i at T = 10 + 10 i);
    # every id stays int64 (.to(device) only): no cast to the model dtype.
    "Flux2Transformer2DModel": AxialRope(
        family="flux2", axes_dim=(32, 32, 32, 32), axes=("reference", "height", "width", "text"), theta=2000.0,
        freqs_dtype="float64", pixels_per_id=16, paths=("ids-fp32", "freqs-fp32", "cos-sin-dtype"), text=512,
        source="diffusers 0.42.1 transformer_flux2.Flux2PosEmbed, pipeline_flux2.Flux2Pipeline._prepare_latent_ids "
               "and _prepare_text_ids"),
}


def axial_recipe(rope: AxialRope, path: str, dtype: str) -> Recipe:
    """Code path ``path`` of ``rope``'s family in model dtype ``dtype`` as a :class:`Recipe` (the rotation in float32,
    cast to ``dtype``).

    >>> r = axial_recipe(FAMILIES["FluxTransformer2DModel"], "ids-dtype", "bf16")
    >>> r.stages, r.how["inv_freq"]
    ({'positions': 'bfloat16', 'inv_freq': 'float64', 'angle': 'float64', 'trig': 'float64', 'cache': 'float32'}, 'formula in float64')
    """
    if path not in PATHS:
        raise ValueError(f"unknown axial RoPE path {path!r}; known: {', '.join(PATHS)}")
    d = get_format(dtype).name
    p = PATHS[path]
    f = p.freqs or rope.freqs_dtype
    fill = {"dtype": d}
    cache = fill.get(p.cache, p.cache)
    return Recipe(path, fill.get(p.ids, p.ids), f, f, f, cache, inv_freq_from=f, apply=d,
                  apply_mode=rope.lowp_apply if cache == d and d != "float32" else "fp32-then-cast", stack=path)


Grid = tuple[int | None, ...]
"""Latent ids per axis: (frames or None for an image model, rows, columns, then the text tokens of a text axis)."""


def _frames(seconds: float, fps: float) -> int:
    if not (isinstance(seconds, (int, float)) and isinstance(fps, (int, float)) and math.isfinite(seconds)
            and math.isfinite(fps) and seconds > 0 and fps > 0):
        raise ValueError(f"video ({seconds!r} s, {fps!r} fps): seconds and fps must be finite numbers > 0")
    return max(1, round(seconds * fps))


def latent_grid(rope: AxialRope, image: tuple[int, int], video: tuple[float, float] | None = None,
                text: int | None = None) -> Grid:
    """Ids per axis for an image (width, height) in pixels, or video frames of that size lasting (seconds, fps):
    rows ``H // pixels_per_id``, columns ``W // pixels_per_id`` (the pipelines floor), latent frames
    ``(F - 1) // frames_per_id + 1`` for ``F = round(seconds * fps)`` frames; a model with a text axis (Flux.2) then
    ``text`` tokens (default: its pipeline's length).

    >>> latent_grid(FAMILIES["Flux2Transformer2DModel"], (1024, 768))
    (None, 48, 64, 512)

    >>> latent_grid(FAMILIES["HunyuanVideoTransformer3DModel"], (1280, 720), (5, 24))  # 120 frames
    (30, 45, 80)
    >>> latent_grid(FAMILIES["FluxTransformer2DModel"], (1024, 8))
    Traceback (most recent call last):
    ...
    ValueError: image 1024x8: flux makes one id per 16 px; give at least 16 px per side
    """
    w, h = image
    if video is not None and not rope.video:
        raise ValueError(f"video {video!r}: {rope.family} makes images, not video (no frame axis)")
    p = rope.pixels_per_id
    if h < p or w < p:
        raise ValueError(f"image {w}x{h}: {rope.family} makes one id per {p} px; give at least {p} px per side")
    frames = None
    if rope.video:
        n = 1 if video is None else _frames(*video)
        frames = (n - 1) // int(rope.frames_per_id) + 1  # type: ignore[arg-type]
    grid: Grid = (frames, h // p, w // p)
    if rope.text is not None:
        n = rope.text if text is None else text
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"text tokens {n!r} must be a positive integer")
        grid += (n,)
    if rope.table is not None:
        for axis, count in zip(rope.axes, grid):
            if count is not None and count > rope.table:
                raise ValueError(f"{rope.family}: {count} latent ids on the {axis} axis, more than the rope table's "
                                 f"{rope.table} rows (rope_max_seq_len): diffusers raises a RuntimeError")
    return grid


def axial_maxima(rope: AxialRope, grid: Grid) -> tuple[int, ...]:
    """Each axis' largest id, in closed form: the frame axis ``frames - 1`` (an image model's index axis: 0, the
    text's and the image's), rows - 1, columns - 1, a text axis' tokens - 1."""
    frames, rows, cols, *rest = grid
    return (0 if frames is None else frames - 1), rows - 1, cols - 1, *(int(n) - 1 for n in rest)  # type: ignore


def axial_ids(rope: AxialRope, grid: Grid) -> npt.NDArray[np.int64]:
    """The latent tokens' ids (tokens, axes), frame-major then row-major, as the pipelines order them, 0 on a text
    axis (tests; :func:`axial_maxima` for large grids)."""
    frames, rows, cols, *rest = grid
    t = np.arange(1 if frames is None else frames)
    tt, rr, cc = np.meshgrid(t, np.arange(rows), np.arange(cols), indexing="ij")
    if frames is None:
        tt = np.zeros_like(tt)
    zero = [np.zeros(tt.size, dtype=np.int64)] * len(rest)
    return np.stack([tt.ravel(), rr.ravel(), cc.ravel(), *zero], axis=1).astype(np.int64)


def _ladder(need: Sequence[int], cap: int) -> list[int]:
    """Audited id counts: powers of two from 16 to ``cap`` and each asked count (at least 2)."""
    out = {max(2, int(n)) for n in need} | {cap}
    L = 16
    while L <= cap:
        out.add(L)
        L *= 2
    return sorted(out)


def _boundary(schedule: RopeSchedule, recipe: Recipe, ok: int, bad: int) -> int:
    """The largest id count in [ok, bad) whose audit is safe, by bisection (``ok`` safe, ``bad`` not)."""
    from .audit import audit

    while bad - ok > 1:
        mid = (ok + bad) // 2
        ok, bad = (mid, bad) if audit(schedule, [recipe], [mid])[0].verdict == "safe" else (ok, mid)
    return ok


def _axis_rows(rope: AxialRope, k: int, counts: Sequence[int], recipes: Sequence[Recipe],
               cap: int) -> dict[tuple[str, str, int], AxisRow]:
    """Axis ``k``'s rows for every asked id count (keyed path, dtype, count), with the exact ``safe_to``."""
    from .audit import audit

    schedule = rope.schedule(k)
    lens = _ladder(counts, cap)
    found = audit(schedule, list(recipes), lens)
    out: dict[tuple[str, str, int], AxisRow] = {}
    for r in recipes:
        rs = sorted((x for x in found if x.recipe == r.name and x.dtype == _row_dtype(r)), key=lambda x: x.length)
        safe, bad = None, None
        for x in rs:
            if x.verdict != "safe":
                bad = x.length
                break
            safe = x.length
        if safe is not None and bad is not None:
            safe = _boundary(schedule, r, safe, bad)
        for n in counts:
            at = next(x for x in rs if x.length == max(2, n))
            out[(r.name, _row_dtype(r), n)] = AxisRow(
                axis=rope.axes[k], stack=r.name, dtype=_row_dtype(r), largest_id=n - 1,
                frequencies=schedule.n_freq, verdict=at.verdict, max_rotation_error=at.max_rotation_error,
                colliding_positions=at.colliding_positions,
                worst_pair_error=max((p.max_rotation_error for p in at.pair_errors), default=None), why=at.lost,
                safe_to=safe, lengths=tuple(lens))
    return out


def _row_dtype(r: Recipe) -> str:
    from .audit import stored_format

    return stored_format(r)


def audit_axial(rope: AxialRope, maxima: Sequence[int], paths: Sequence[str] | None = None,
                dtypes: Sequence[str] = ("bfloat16",), cap: int = ID_CAP) -> list[AxisRow]:
    """Each axis audited as 1-D RoPE (its own block's schedule) over ids 0..its largest id, per path and dtype,
    with ``safe_to`` the largest id count up to which the path stays safe: searched over powers of two up to
    ``cap`` and refined by bisection to the exact count (``cap`` when none below it fails).  Axes with the same
    block width share one pass.  Rows are dtype-major, then path, then axis.

    >>> flux = FAMILIES["FluxTransformer2DModel"]
    >>> rows = audit_axial(flux, (0, 299, 299), ["ids-fp32", "ids-dtype"], ["bfloat16"], cap=1024)
    >>> [(r.axis, r.stack, r.largest_id, r.colliding_positions, r.verdict, r.safe_to) for r in rows][3:]
    [('index', 'ids-dtype', 0, 0, 'safe', 257), ('height', 'ids-dtype', 299, 21, 'broken', 257), ('width', 'ids-dtype', 299, 21, 'broken', 257)]
    """
    if len(maxima) != len(rope.axes) or any(isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0
                                            for m in maxima):
        raise ValueError(f"maxima {tuple(maxima)!r} must be one id >= 0 per axis ({', '.join(rope.axes)})")
    if isinstance(cap, bool) or not isinstance(cap, int) or not 16 <= cap <= 2**22:
        raise ValueError(f"cap {cap!r} must be an integer in [16, 2**22]")
    cap = cap if rope.table is None else min(cap, rope.table)
    if max(maxima) + 1 > cap:
        raise ValueError(f"largest id {max(maxima)} is above the audited cap {cap} ids per axis"
                         + ("" if rope.table is None else f" (the rope table's {rope.table} rows)"))
    names = list(rope.paths if paths is None else paths)
    bad = [p for p in names if p not in rope.paths]
    if bad:
        raise ValueError(f"path {bad[0]!r} is not one {rope.family} runs; its paths: {', '.join(rope.paths)}")
    recipes = [axial_recipe(rope, p, d) for d in dict.fromkeys(get_format(x).name for x in dtypes) for p in names]
    by_dim: dict[int, dict[tuple[str, str, int], AxisRow]] = {}
    for k, dim in enumerate(rope.axes_dim):
        counts = sorted({int(maxima[j]) + 1 for j, dj in enumerate(rope.axes_dim) if dj == dim})
        if dim not in by_dim:
            by_dim[dim] = _axis_rows(rope, k, counts, recipes, cap)
    rows = []
    for r in recipes:
        d = _row_dtype(r)
        for k, dim in enumerate(rope.axes_dim):
            rows.append(replace(by_dim[dim][(r.name, d, int(maxima[k]) + 1)], axis=rope.axes[k]))
    return rows


def largest_safe(rope: AxialRope, rows: Sequence[AxisRow], fps: float | None = None) -> dict[str, Any]:
    """What the rows of one path and dtype allow: the largest image side (pixels: ``safe_to`` ids x
    ``pixels_per_id``, per spatial axis), and for a video model the most frames (``safe_to`` x
    ``frames_per_id``) and, with ``fps``, seconds; ``at_least`` when the audit found no limit below its cap;
    None values when even the smallest audited count is not safe; ``table``: a precomputed table's rows (a hard
    limit: the audit stops there).

    >>> flux = FAMILIES["FluxTransformer2DModel"]
    >>> largest_safe(flux, audit_axial(flux, (0, 63, 63), ["ids-dtype"], ["float16"], cap=4096))
    {'height_px': 32784, 'width_px': 32784, 'at_least': False}
    """
    by = {r.axis: r for r in rows}
    if set(by) != set(rope.axes) or len(rows) != len(rope.axes):
        raise ValueError("largest_safe needs the rows of one path and dtype: one per axis")
    p = rope.pixels_per_id
    cap = max(max(r.lengths) for r in rows)
    spatial = rope.axes[1:3]
    out: dict[str, Any] = {f"{a}_px": None if by[a].safe_to is None else int(by[a].safe_to) * p for a in spatial}
    limits = [by[a].safe_to for a in spatial]
    if rope.video:
        t = by[rope.axes[0]].safe_to
        frames = None if t is None else int(t) * int(rope.frames_per_id)  # type: ignore[arg-type]
        out["frames"] = frames
        if fps is not None:
            out["seconds"] = None if frames is None else frames / fps
        limits.append(t)
    if rope.text is not None:
        out["text_tokens"] = by[rope.axes[-1]].safe_to
        limits.append(by[rope.axes[-1]].safe_to)
    out["at_least"] = all(x == cap for x in limits) and rope.table is None
    if rope.table is not None:
        out["table"] = rope.table
    return out


def audit_input(rope: AxialRope, image: tuple[int, int], video: tuple[float, float] | None = None,
                paths: Sequence[str] | None = None, dtypes: Sequence[str] = ("bfloat16",),
                cap: int = ID_CAP, text: int | None = None) -> list[AxisRow]:
    """The axial audit of one input: an image (width, height) in pixels, or for a video model frames of that size
    lasting ``video`` (seconds, fps); every path the family runs (or ``paths``) in each dtype.  The bottom line of
    one path and dtype: :func:`largest_safe`.

    >>> flux = FAMILIES["FluxTransformer2DModel"]
    >>> rows = audit_input(flux, (8192, 8192), paths=["ids-dtype"])  # FluxPipeline 0.42.1 in bfloat16
    >>> [(r.axis, r.largest_id, r.colliding_positions, r.verdict) for r in rows]
    [('index', 0, 0, 'safe'), ('height', 511, 127, 'broken'), ('width', 511, 127, 'broken')]
    >>> largest_safe(flux, rows)
    {'height_px': 4112, 'width_px': 4112, 'at_least': False}
    """
    return audit_axial(rope, axial_maxima(rope, latent_grid(rope, image, video, text)), paths, dtypes, cap)
