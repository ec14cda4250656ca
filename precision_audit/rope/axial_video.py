"""Axial RoPE with fractional positions: CogVideoX (1.0, 1.5) and LTX-Video, as diffusers 0.42.1 computes them.

Flux, HunyuanVideo and Wan give each latent token integer ids (:mod:`.axial`); these two give it fractional
positions computed in float32, so each axis is audited here on its own positions, token by token, against the
exact (real-number) formula:

* CogVideoX (``CogVideoXTransformer3DModel`` with ``use_rotary_positional_embeddings``, 1.0: no ``patch_size_t``):
  ``pipeline_cogvideox.CogVideoXPipeline._prepare_rotary_positional_embeddings`` fits the latent grid into the
  base grid ``(sample_height // p, sample_width // p)`` (``get_resize_crop_region_for_grid``: resize keeping the
  aspect ratio, centre crop) and ``embeddings.get_3d_rotary_pos_embed`` (grid_type ``"linspace"``) places the n
  rows at ``torch.linspace(top, bottom * (n - 1) / n, n, dtype=float32)`` (``i * bottom / n`` on an axis that
  starts at 0; with a crop offset the end is ``bottom * (n - 1) / n``, not ``top + (bottom - top) * (n - 1) / n``:
  the reference is the formula as diffusers writes it, the positions the model was run with), rounded by float32
  linspace (:func:`linspace32`; the end is the Python float ``bottom * (n - 1) / n`` cast to float32).  Frames: ``linspace(0, T * (T - 1) / T, T)``, the integers 0..T-1.
  Per axis ``get_1d_rotary_pos_embed(dim, grid, theta=10000, use_real=True)``: frequencies
  ``1 / 10000 ** (arange(0, dim, 2, float32) / dim)`` in float32, ``torch.outer`` in float32, cos/sin float32;
  ``dim`` = head_dim // 4 (frames), head_dim // 8 * 3 (rows, columns).  The attention processor rotates with
  ``embeddings.apply_rotary_emb``: in float32, cast to the model dtype.
* CogVideoX 1.5 (a ``patch_size_t``): grid_type ``"slice"``, ``arange(sample_height // p)[:rows]`` (likewise columns)
  and ``arange(latent frames // patch_size_t)``: integer positions, in a table of the base grid's size (a larger
  grid fails in diffusers).  CogVideoX-2B (``use_rotary_positional_embeddings`` false) adds a fixed 3-D sincos
  table instead: no RoPE (:mod:`precision_audit.config.diffusion` says so).
* LTX-Video (``LTXVideoTransformer3DModel``): ``transformer_ltx.LTXVideoRotaryPosEmbed`` over the whole inner dim
  (heads x head_dim): per axis ``dim // 6`` frequencies ``theta ** linspace(0, 1, dim // 6) * pi / 2`` (float32:
  linspace, pow, ``* pi`` with pi a float32 scalar, ``/ 2``), coordinates ``arange(n) * s * patch / base`` in
  float32, s = ``rope_interpolation_scale`` of ``pipeline_ltx.LTXPipeline.__call__`` (``vae_temporal / frame_rate``,
  ``vae_spatial``, ``vae_spatial``) and base (20 frames, 2048, 2048); each op rounds (a Python scalar is cast to
  float32 first); the angle ``freqs * (grid * 2 - 1)`` rounds once more; the first ``dim % 6`` dims do not rotate.
  Its ``apply_rotary_emb`` rotates in float32 and casts.  Modelled as torch computes it on a CPU (the referee): on
  CUDA a quotient by a Python scalar is a product by its float32 reciprocal (``div_true_kernel_cuda``), so the
  frame coordinate ``/ 20`` may differ there by an ulp (the spatial ``/ 2048`` is exact either way).

The exact reference: the positions' real values (linspace's and the normalised coordinate's) times the real
frequencies (``theta ** (-2i/d)``; ``theta ** (k / (m - 1)) * pi / 2``), in float64 (a relative error near
1e-16: far below a float32 angle's).  Each axis is measured as the 1-D audit measures positions
(:func:`~.audit.audit`): the largest rotation error of the stored cos/sin, colliding rows (a token whose cos/sin row
equals its predecessor's: their positions or angles became equal), the pairwise errors at distances
1, 16, 256, 4096 and n/2 tokens; :func:`~precision_audit.verdicts.rope_verdict` judges.  (The 1-D audit itself
scans the integer positions 0..L-1 in chunks, with an oracle exact for integers and prefix reductions for every
shorter L; these axes hold at most :data:`MAX_IDS` tokens, and CogVideoX's are not a prefix of one sequence, so
:func:`measure_axis` measures them directly, the same figures: a test checks it against the audit on integers.)

>>> cog = COGVIDEOX
>>> grid = video_grid(cog, (720, 480), (49 / 8, 8.0))  # CogVideoXPipeline's default: 49 frames of 720x480
>>> grid, crop_region(cog, grid)
((13, 30, 45), ((0, 0), (30, 45)))
>>> exact, f32 = axis_positions(cog, 2, 3, crop_region(cog, (13, 2, 3)))
>>> exact.tolist()  # 3 columns fitted into the 45 columns of the base grid: linspace(0, 45 * 2 / 3, 3)
[0.0, 15.0, 30.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from ..formats import get_format, round_to
from ..verdicts import rope_verdict, rope_why
from .axes import AxisRow
from .axial import AxialPath
from .oracle import wrap
from .pairs import PairError, row_distances
from .recipes import Recipe, stored_inv_freq
from .schedules import RopeSchedule

__all__ = ["AxisMeasure", "COGVIDEOX", "COGVIDEOX_1_5", "LTX_VIDEO", "PATHS", "VIDEO_FAMILIES", "VideoRope",
           "audit_video", "axis_angles", "axis_positions", "cog_frequencies", "crop_region", "largest_safe_video",
           "linspace32", "ltx_angles", "ltx_frequencies", "measure_axis", "product_angles", "video_grid"]

F64 = npt.NDArray[np.float64]
MAX_IDS = 2**13
"""The most latent ids per axis an input may have here (CogVideoX: 131072 px, 32768 frames; LTX-Video: 262144 px,
65536 frames)."""
SCAN_CAP = 1024
"""The id count per axis up to which a bottom line searches (the input's own count when larger)."""
FRAME_CAP = 4096
"""The latent frame count up to which a bottom line searches the frame axis (LTX-Video's float32 path turns
degraded at 2896 latent frames at 25 fps: 15 min)."""
SCAN_MAX = 2048
"""CogVideoX 1.0's rows and columns are tried one count after another: at most this many (16384 px at 5B's 16 px)."""

_FIX_POS = ("keep the positions float32 as diffusers builds them (get_3d_rotary_pos_embed: linspace in float32; "
            "LTXVideoRotaryPosEmbed: 'Always compute rope in fp32'); cast only the rotated q/k")
_FIX_COS = ("keep cos/sin float32 (diffusers' apply_rotary_emb rotates in float32 and casts the result); a limit "
            "the fp32 path shares is its float32 angles'")
PATHS: dict[str, AxialPath] = {
    "fp32": AxialPath("float32", "float32", "float32", "positions, frequencies, angles, cos/sin in float32 "
                      "(diffusers' pipeline)",
                      fix="beyond it: frequencies (and angles) in float64, cos/sin cast to float32 (LTX-Video's "
                          "float32 frequencies, up to 15708 rad per unit, are off by ~1e-7 relative: distant frames "
                          "drift apart by pi/8 in a 15-minute video at 25 fps)"),
    "positions-dtype": AxialPath("dtype", "float32", "float32", "positions (CogVideoX's grid, LTX's normalised "
                                 "coordinates) in the model dtype", fix=_FIX_POS),
    "cos-sin-dtype": AxialPath("float32", "float32", "dtype", "cos/sin stored in the model dtype (CogVideoX's "
                               "original implementation did not upcast: diffusers#9203)", fix=_FIX_COS),
}
"""The code paths: the shipped float32 one and the two casts people add (a grid or ``video_coords`` tensor built in
the latents' dtype; ``image_rotary_emb`` cast to it)."""


@dataclass(frozen=True)
class VideoRope:
    """A video transformer's axial RoPE over fractional positions and the pipeline facts that make them.

    ``kind``: ``"linspace"`` (CogVideoX 1.0), ``"slice"`` (CogVideoX 1.5: integer positions sliced from a table
    of the base grid's rows and columns) or ``"ltx"``; ``axes_dim``: the dims each axis rotates (2 per
    frequency); ``unrotated``: leading dims that do not rotate (LTX: ``dim % 6``); ``base``: CogVideoX's base grid
    (rows, columns) = ``sample_height // p, sample_width // p``; LTX's (base_num_frames, base_height, base_width);
    ``units``: LTX's ``rope_interpolation_scale`` numerators (``vae_temporal``, divided by the frame rate, and
    ``vae_spatial`` twice); ``patch``: LTX's (patch_size_t, patch_size, patch_size).

    >>> VideoRope("cogvideox", "linspace", (16, 24, 22), 1e4, 16, 4, base=(30, 45))
    Traceback (most recent call last):
    ...
    ValueError: cogvideox: axes dims (16, 24, 22) must be three positive even integers with height = width
    """

    family: str
    kind: str
    axes_dim: tuple[int, int, int]
    theta: float
    pixels_per_id: int
    frames_per_id: int
    base: tuple[int, ...] = ()
    units: tuple[int, int, int] = (1, 1, 1)
    patch: tuple[int, int, int] = (1, 1, 1)
    unrotated: int = 0
    paths: tuple[str, ...] = tuple(PATHS)
    source: str = ""
    axes: tuple[str, ...] = ("frame", "height", "width")
    ids_cast: bool = False

    def __post_init__(self) -> None:
        d = self.axes_dim
        if not (isinstance(d, tuple) and len(d) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                             and x > 0 and x % 2 == 0 for x in d) and d[1] == d[2]):
            raise ValueError(f"{self.family}: axes dims {d!r} must be three positive even integers with height = width")
        if self.kind not in ("linspace", "slice", "ltx"):
            raise ValueError(f"{self.family}: kind {self.kind!r} must be 'linspace', 'slice' or 'ltx'")
        if not (isinstance(self.theta, (int, float)) and math.isfinite(self.theta) and self.theta > 1):
            raise ValueError(f"{self.family}: rope theta {self.theta!r} must be a finite number > 1")
        ints = (self.pixels_per_id, self.frames_per_id, *self.base, *self.units, *self.patch)
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in ints):
            raise ValueError(f"{self.family}: pixels/frames per id, base {self.base!r} and units {self.units!r} "
                             "must be positive integers")
        if len(self.base) != (3 if self.kind == "ltx" else 2):
            raise ValueError(f"{self.family}: base {self.base!r} must have {3 if self.kind == 'ltx' else 2} sizes")
        bad = [p for p in self.paths if p not in PATHS]
        if bad:
            raise ValueError(f"unknown video RoPE path {bad[0]!r}; known: {', '.join(PATHS)}")

    @property
    def table(self) -> int | None:
        """CogVideoX 1.5's rows and columns are sliced from a table of the base grid's size (its larger side)."""
        return max(self.base) if self.kind == "slice" else None

    @property
    def video(self) -> bool:
        """Always True: both families make video."""
        return True

    def n_freq(self, axis: int) -> int:
        """Frequencies of axis ``axis`` (half its dims)."""
        return self.axes_dim[axis] // 2


COGVIDEOX = VideoRope(
    "cogvideox", "linspace", (16, 24, 24), 10000.0, pixels_per_id=16, frames_per_id=4, base=(30, 45),
    source="diffusers 0.42.1 embeddings.get_3d_rotary_pos_embed (grid_type linspace), "
           "pipeline_cogvideox.CogVideoXPipeline._prepare_rotary_positional_embeddings")
"""CogVideoX-5B (head dim 64, patch 2, sample 60 x 90 latents: base grid 30 x 45; VAE 8 x 8 x 4)."""
COGVIDEOX_1_5 = VideoRope(
    "cogvideox_1_5", "slice", (16, 24, 24), 10000.0, pixels_per_id=16, frames_per_id=8, base=(150, 150),
    source="diffusers 0.42.1 embeddings.get_3d_rotary_pos_embed (grid_type slice), "
           "pipeline_cogvideox.CogVideoXPipeline._prepare_rotary_positional_embeddings")
"""CogVideoX 1.5-5B (patch 2 x 2 x 2, sample 300 x 300 latents: a table of 150 rows and columns; frames
``(latent frames + 1) // 2``, integers)."""
LTX_VIDEO = VideoRope(
    "ltx_video", "ltx", (682, 682, 682), 10000.0, pixels_per_id=32, frames_per_id=8, base=(20, 2048, 2048),
    units=(8, 32, 32), unrotated=2,
    source="diffusers 0.42.1 transformer_ltx.LTXVideoRotaryPosEmbed, pipeline_ltx.LTXPipeline.__call__")
"""LTX-Video 2B (32 heads of 64: inner dim 2048, 341 frequencies per axis; VAE 32 x 32 x 8, patch 1)."""
VIDEO_FAMILIES: dict[str, VideoRope] = {"CogVideoXTransformer3DModel": COGVIDEOX,
                                        "LTXVideoTransformer3DModel": LTX_VIDEO}


def _frames(seconds: float, fps: float) -> int:
    if not (isinstance(seconds, (int, float)) and isinstance(fps, (int, float)) and math.isfinite(seconds)
            and math.isfinite(fps) and seconds > 0 and fps > 0):
        raise ValueError(f"video ({seconds!r} s, {fps!r} fps): seconds and fps must be finite numbers > 0")
    return max(1, round(seconds * fps))


def video_grid(rope: VideoRope, image: tuple[int, int],
               video: tuple[float, float] | None = None) -> tuple[int, int, int]:
    """Latent ids per axis (frames, rows, columns) for frames of ``image`` (width, height) px lasting ``video``
    (seconds, fps; None: one frame): rows ``H // pixels_per_id``, columns ``W // pixels_per_id``, frames
    ``(F - 1) // frames_per_id + 1``.  Sizes the pipeline refuses (CogVideoX: not a multiple of 8 px; LTX: of
    32 px) raise ValueError, as ``check_inputs`` does.

    >>> video_grid(LTX_VIDEO, (704, 512), (161 / 25, 25.0))  # LTXPipeline's defaults
    (21, 16, 22)
    >>> video_grid(LTX_VIDEO, (700, 512))
    Traceback (most recent call last):
    ...
    ValueError: image 700x512: ltx_video's pipeline needs height and width divisible by 32 (give --image WxH, or --video SECONDS@FPS:WxH)
    """
    w, h = image
    step = 32 if rope.kind == "ltx" else 8
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (w, h)) or w < rope.pixels_per_id \
            or h < rope.pixels_per_id:
        raise ValueError(f"image {w}x{h}: {rope.family} makes one id per {rope.pixels_per_id} px; give at least "
                         f"{rope.pixels_per_id} px per side")
    if w % step or h % step:
        raise ValueError(f"image {w}x{h}: {rope.family}'s pipeline needs height and width divisible by {step} "
                         "(give --image WxH, or --video SECONDS@FPS:WxH)")
    n = 1 if video is None else _frames(*video)
    grid = ((n - 1) // rope.frames_per_id + 1, h // rope.pixels_per_id, w // rope.pixels_per_id)
    if max(grid) > MAX_IDS:
        raise ValueError(f"{rope.family}: {max(grid)} latent ids on one axis, more than the {MAX_IDS} audited here")
    if rope.kind == "slice" and (grid[1] > rope.base[0] or grid[2] > rope.base[1]):
        raise ValueError(f"image {w}x{h}: {grid[1]} x {grid[2]} latent ids, more than the {rope.base[0]} x "
                         f"{rope.base[1]} rows of {rope.family}'s rope table (sample_height, sample_width // "
                         "patch_size): diffusers raises a RuntimeError")
    return grid


def crop_region(rope: VideoRope, grid: tuple[int, int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """CogVideoX: where the latent grid's (rows, columns) land in the base grid, ``((top, left), (bottom, right))``
    as ``get_resize_crop_region_for_grid`` computes it (resize keeping the aspect ratio to fit, centre crop;
    Python's ``round``, ties to even).

    >>> crop_region(COGVIDEOX, (13, 67, 120))  # 1920x1080: 25 of the 30 base rows, top 2 (round(2.5) = 2)
    ((2, 0), (27, 45))
    """
    th, tw = rope.base
    _, h, w = grid
    if h / w > th / tw:
        rh, rw = th, int(round(th / h * w))
    else:
        rw, rh = tw, int(round(tw / w * h))
    top, left = int(round((th - rh) / 2.0)), int(round((tw - rw) / 2.0))
    return (top, left), (top + rh, left + rw)


def linspace32(start: float, end: float, steps: int) -> F64:
    """``torch.linspace(start, end, steps, dtype=float32)`` by its algorithm (start and end cast to float32,
    ``step = (end - start) / (steps - 1)`` in float32, ``start + step * i`` below ``steps // 2``, ``end - step *
    (steps - 1 - i)`` from there), each op rounded once (torch's CUDA kernel; nvcc may fuse its multiply-add).
    torch's vectorised CPU kernel groups the lanes otherwise: its values lie within one float32 ulp of the larger
    endpoint of these (tests/test_diffusion_video.py).

    >>> linspace32(0, 45 * 2 / 3, 3).tolist()
    [0.0, 15.0, 30.0]
    """
    f = np.float32
    s, e = f(start), f(end)
    if steps == 1:
        return np.array([float(s)])
    step = f(f(e - s) / f(steps - 1))
    i = np.arange(steps)
    half = steps // 2
    low = (s + (step * i[:half].astype(f)).astype(f)).astype(f)
    high = (e - (step * (steps - 1 - i[half:]).astype(f)).astype(f)).astype(f)
    return np.concatenate([low, high]).astype(np.float64)


def _ltx_scale(rope: VideoRope, axis: int, fps: float) -> tuple[Fraction, float]:
    """LTX's ``rope_interpolation_scale[axis]`` exactly and as the pipeline's Python float."""
    if axis == 0:
        return Fraction(rope.units[0]) / Fraction(fps), rope.units[0] / fps
    return Fraction(rope.units[axis]), float(rope.units[axis])


def axis_positions(rope: VideoRope, axis: int, n: int, crop: Any = None, fps: float | None = None) -> tuple[F64, F64]:
    """Axis ``axis``' n positions: exact (float64 of the real value) and as diffusers computes them in float32.

    CogVideoX: ``crop`` is :func:`crop_region`'s result for the spatial axes; LTX: the normalised coordinate
    ``i * s * patch / base`` (``fps`` for the frame axis; the pipeline folds the patch into ``units``).

    >>> e, f = axis_positions(LTX_VIDEO, 0, 3, fps=25.0)  # 8 / 25 / 20 = 0.016 per latent frame
    >>> e.tolist(), f.tolist()  # float32: fl(fl(i * fl(0.32)) / 20)
    ([0.0, 0.016, 0.032], [0.0, 0.01599999889731407, 0.03199999779462814])
    """
    i = np.arange(n)
    if rope.kind == "slice":  # torch.arange(max_h, dtype=float32)[:n]: integers, exact
        return i.astype(np.float64), i.astype(np.float64)
    if rope.kind == "linspace":
        if axis == 0:
            start, stop = 0, n
        else:
            (top, left), (bottom, right) = crop
            start, stop = (top, bottom) if axis == 1 else (left, right)
        if n == 1:
            return np.array([float(start)]), np.array([float(start)])
        # exactly start + i * (stop * (n - 1) / n - start) / (n - 1), one rounding of integers below 2**53
        num = start * n * (n - 1) + i * (stop * (n - 1) - start * n)
        return num / float(n * (n - 1)), linspace32(start, stop * (n - 1) / n, n)
    if fps is None and axis == 0:
        raise ValueError("LTX frame positions need the frame rate (fps)")
    exact_s, py_s = _ltx_scale(rope, axis, 1.0 if fps is None else fps)
    q = exact_s * rope.patch[axis] / rope.base[axis]
    exact = np.array([float(k * q) for k in range(n)])
    f = np.float32
    g = (i.astype(f) * f(py_s)).astype(f)  # grid * rope_interpolation_scale[axis] * patch / base, op by op
    g = (g * f(rope.patch[axis])).astype(f)
    g = (g / f(rope.base[axis])).astype(f)
    return exact, g.astype(np.float64)


def ltx_frequencies(rope: VideoRope) -> tuple[F64, F64]:
    """LTX's per-axis frequencies: exact ``theta ** (k / (m - 1)) * pi / 2`` and float32 as the module makes
    them (``theta ** linspace(0, 1, m)``, ``* pi``, ``/ 2``; linspace by :func:`linspace32`, pow correctly
    rounded).

    >>> e, f = ltx_frequencies(LTX_VIDEO)
    >>> e.size, float(e[0]) == math.pi / 2, round(float(e[-1]), 3)
    (341, True, 15707.963)
    """
    m = rope.n_freq(1)
    k = np.arange(m)
    exact = rope.theta ** (k / max(m - 1, 1)) * (math.pi / 2)
    lin = linspace32(0.0, 1.0, m)
    f = np.float32
    powed = round_to(rope.theta ** lin, "float32").astype(f)
    return exact, ((powed * f(math.pi)).astype(f) / f(2)).astype(np.float64)


def cog_frequencies(rope: VideoRope, axis: int) -> tuple[F64, F64]:
    """CogVideoX's frequencies of axis ``axis``: exact ``theta ** (-2i / dim)`` and float32 as
    ``get_1d_rotary_pos_embed`` makes them (``1 / theta ** (arange(0, dim, 2, float32) / dim)``, each op rounded).

    >>> cog_frequencies(COGVIDEOX, 0)[1][:2].tolist()
    [1.0, 0.3162277638912201]
    """
    schedule = RopeSchedule(head_dim=rope.axes_dim[axis], base=float(rope.theta))
    r32 = Recipe("fp32", "float32", "float32", "float32", "float32", "float32", inv_freq_from="float32")
    return schedule.inv_freq(), np.asarray(stored_inv_freq(r32, schedule), dtype=np.float64)


def product_angles(positions: npt.ArrayLike, freqs: npt.ArrayLike, lowp: str = "float32") -> F64:
    """CogVideoX's angles: ``torch.outer(pos, freqs)`` in float32 of float32 positions (rounded to ``lowp`` first:
    a grid in the model dtype, promoted back to float32 by the product) and float32 frequencies.

    >>> product_angles([44.0], [1.0, 0.1]).tolist()  # fl32(44 * fl32(0.1))
    [[44.0, 4.400000095367432]]
    """
    f = np.float32
    pos = round_to(np.asarray(positions, dtype=np.float64), lowp).astype(f)
    fr = np.asarray(freqs, dtype=np.float64).astype(f)
    return (pos[:, None] * fr[None, :]).astype(f).astype(np.float64)


def ltx_angles(coords: npt.ArrayLike, freqs: npt.ArrayLike, lowp: str = "float32") -> F64:
    """LTX-Video's angles ``freqs * (grid * 2 - 1)``: ``grid * 2 - 1`` in the grid's dtype (float32, or ``lowp``
    for a grid in the model dtype: torch rounds the float32 result of each bfloat16 op, and ``2g - 1`` of a
    bfloat16 g is exact in float32), then the float32 product with the float32 frequencies.

    >>> ltx_angles([0.25], [1.0, 3.0]).tolist()  # 2 * 0.25 - 1 = -0.5
    [[-0.5, -1.5]]
    """
    f = np.float32
    g = round_to(np.asarray(coords, dtype=np.float64), lowp)
    c = round_to(round_to(2 * g - 1, "float32"), lowp).astype(f)
    fr = np.asarray(freqs, dtype=np.float64).astype(f)
    return (fr[None, :] * c[:, None]).astype(f).astype(np.float64)


def axis_angles(rope: VideoRope, axis: int, n: int, path: str, dtype: str, crop: Any = None,
                fps: float | None = None) -> tuple[F64, F64]:
    """Axis ``axis``' angles (n, frequencies): exact (float64, unwrapped) and the path's float32 angles
    (:func:`product_angles`, :func:`ltx_angles`).

    >>> e, a = axis_angles(COGVIDEOX, 2, 46, "positions-dtype", "bfloat16", crop_region(COGVIDEOX, (13, 30, 46)))
    >>> float(np.abs(a - e).max()) > 0.05  # column positions k * 45/46 in bfloat16: 0.125 apart at 32..45
    True
    """
    lowp = get_format(dtype).name if PATHS[path].ids == "dtype" else "float32"
    exact_pos, pos32 = axis_positions(rope, axis, n, crop, fps)
    if rope.kind != "ltx":
        fe, f32 = cog_frequencies(rope, axis)
        return exact_pos[:, None] * fe[None, :], product_angles(pos32, f32, lowp)
    fe, f32 = ltx_frequencies(rope)
    return (2 * exact_pos - 1)[:, None] * fe[None, :], ltx_angles(pos32, f32, lowp)


@dataclass(frozen=True)
class AxisMeasure:
    """One axis' figures at one id count, as the 1-D audit measures a row: the largest rotation error (rad),
    colliding rows (a token whose stored cos/sin row equals its predecessor's), the pairwise errors."""

    max_rotation_error: float
    colliding: int
    pairs: tuple[PairError, ...]

    @property
    def verdict(self) -> str:
        """:func:`~precision_audit.verdicts.rope_verdict` of the figures."""
        return rope_verdict(self.max_rotation_error, self.colliding, pair_errors=self.pairs)


def measure_axis(exact: F64, angle: F64, cache: str) -> AxisMeasure:
    """The stored cos/sin of float32 angles (n tokens, frequencies; correctly rounded cos/sin in float32, then the
    ``cache`` format) against the exact angles: largest rotation error, colliding rows, pairwise errors at
    :func:`.pairs.row_distances` tokens apart (the 1-D audit's figures, computed here per token because these
    positions are neither integers nor, for CogVideoX, a prefix of one sequence).

    >>> m = measure_axis(np.array([[0.0], [0.5], [1.0]]), np.array([[0.0], [0.5], [0.5]]), "float32")
    >>> m.colliding, round(m.max_rotation_error, 3), m.verdict
    (1, 0.5, 'broken')
    """
    c, s = round_to(np.cos(angle), "float32"), round_to(np.sin(angle), "float32")
    if cache != "float32":
        c, s = round_to(c, cache), round_to(s, cache)
    err = wrap(np.arctan2(s, c) - wrap(exact))
    n = err.shape[0]
    same = int(np.count_nonzero(np.all((c[1:] == c[:-1]) & (s[1:] == s[:-1]), axis=1))) if n > 1 else 0
    pairs = []
    for d in row_distances(n) if n > 1 else ():
        e = np.abs(wrap(err[d:] - err[:-d]))
        turn = np.abs(exact[d:] - exact[:-d]).max(axis=0)  # each pair's exact rotation across d tokens
        pairs.append(PairError.of(d, e.max(axis=0), float(e.mean()), turn))
    return AxisMeasure(float(np.abs(err).max()), same, tuple(pairs))


def _measure_at(rope: VideoRope, axis: int, n: int, path: str, dtype: str, ctx: dict[str, Any]) -> AxisMeasure:
    crop = None
    if rope.kind == "linspace" and axis > 0:
        other = ctx["grid"][3 - axis]  # the other spatial axis, scaled with this one (the input's aspect ratio)
        scaled = max(1, round(n * other / ctx["grid"][axis]))
        g = (1, n, scaled) if axis == 1 else (1, scaled, n)
        crop = crop_region(rope, g)
    exact, angle = axis_angles(rope, axis, n, path, dtype, crop, ctx.get("fps"))
    return measure_axis(exact, angle, get_format(dtype).name if PATHS[path].cache == "dtype" else "float32")


def _safe_to(rope: VideoRope, axis: int, path: str, dtype: str, ctx: dict[str, Any], cap: int) -> int | None:
    """The largest id count up to which every count is safe (None: not even one id).  Positions that are a
    prefix of one sequence (frames, LTX's axes) grow with the count: powers of two, then bisection.  CogVideoX's
    rows and columns are refitted into the base grid at every count (at the input's aspect ratio): every count
    is tried."""
    ok = lambda m: _measure_at(rope, axis, m, path, dtype, ctx).verdict == "safe"  # noqa: E731
    if rope.kind == "linspace" and axis > 0:  # not a prefix: every count
        for m in range(1, cap + 1):
            if not ok(m):
                return m - 1 or None
        return cap
    if not ok(1):
        return None
    ladder = sorted({2**j for j in range(1, cap.bit_length()) if 2**j < cap} | {cap})
    good, bad = 1, None
    for m in ladder:
        if not ok(m):
            bad = m
            break
        good = m
    if bad is None:
        return cap
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good


def audit_video(rope: VideoRope, grid: tuple[int, int, int], fps: float | None = None,
                paths: Sequence[str] | None = None, dtypes: Sequence[str] = ("bfloat16",),
                cap: int = SCAN_CAP) -> list[AxisRow]:
    """Each axis of one input (``grid``: :func:`video_grid`; ``fps``: LTX's frame rate) per path and dtype: its
    verdict at the input's id count and ``safe_to``, the largest id count up to which every count is safe
    (searched to ``cap`` or the input's count; CogVideoX 1.0's rows and columns to at most :data:`SCAN_MAX`, 1.5's
    to its table).  Rows dtype-major, then path, then axis.

    >>> rows = audit_video(COGVIDEOX, (13, 135, 240), paths=["positions-dtype"], cap=64)  # 3840x2160, bf16 grid
    >>> [(r.axis, r.verdict, r.colliding_positions, r.safe_to) for r in rows]
    [('frame', 'safe', 0, 64), ('height', 'safe', 0, 135), ('width', 'broken', 17, 181)]
    """
    if len(grid) != 3 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in grid):
        raise ValueError(f"grid {tuple(grid)!r} must be three id counts >= 1 (frames, rows, columns)")
    names = list(rope.paths if paths is None else paths)
    bad = [p for p in names if p not in rope.paths]
    if bad:
        raise ValueError(f"path {bad[0]!r} is not one {rope.family} runs; its paths: {', '.join(rope.paths)}")
    if rope.kind == "ltx" and fps is None:
        raise ValueError("LTX-Video's frame positions need the frame rate: give fps")
    ctx = {"grid": grid, "fps": fps}
    rows = []
    for d in dict.fromkeys(get_format(x).name for x in dtypes):
        for p in names:
            done: dict[Any, AxisRow] = {}
            for k, axis in enumerate(rope.axes):
                # CogVideoX 1.5: the table's rows; 1.0's rows and columns: every count, to the input's count when
                # larger than cap but at most SCAN_MAX (their verdict at the input is measured on its own); a prefix
                # axis (bisection): to the input's count when larger
                top = rope.base[k - 1] if rope.kind == "slice" and k > 0 else \
                    max(cap, min(grid[k], SCAN_MAX)) if rope.kind == "linspace" and k > 0 else \
                    max(cap, grid[k], FRAME_CAP if k == 0 and cap == SCAN_CAP else 0)
                key = (k if rope.kind != "ltx" or k == 0 else "hw", grid[k] if rope.kind == "ltx" else k)
                if key in done:  # LTX's rows and columns: the same positions and frequencies
                    rows.append(replace(done[key], axis=axis))
                    continue
                at = _measure_at(rope, k, grid[k], p, d, ctx)
                row = AxisRow(axis=axis, stack=p, dtype=d, largest_id=grid[k] - 1, frequencies=rope.n_freq(k),
                              verdict=at.verdict, max_rotation_error=at.max_rotation_error,
                              colliding_positions=at.colliding,
                              worst_pair_error=max((x.max_rotation_error for x in at.pairs), default=None),
                              why=rope_why(at.max_rotation_error, at.colliding, at.pairs),
                              safe_to=_safe_to(rope, k, p, d, ctx, top), lengths=(top,))
                done[key] = row
                rows.append(row)
    return rows


def largest_safe_video(rope: VideoRope, rows: Sequence[AxisRow], fps: float | None = None) -> dict[str, Any]:
    """What the rows of one path and dtype allow, as :func:`.axial.largest_safe` says it: pixels per side
    (``safe_to`` x ``pixels_per_id``), frames (``safe_to`` x ``frames_per_id``) and seconds at ``fps``;
    ``px_at_least`` / ``frames_at_least`` when the spatial axes / the frame axis did not fail below their searched
    count (a table's rows are a hard limit), ``at_least`` when none did.

    >>> largest_safe_video(COGVIDEOX, audit_video(COGVIDEOX, (13, 30, 45), paths=["fp32"], cap=64), 8.0)
    {'height_px': 1024, 'width_px': 1024, 'frames': 256, 'seconds': 32.0, 'px_at_least': True, 'frames_at_least': True, 'at_least': True}
    """
    by = {r.axis: r for r in rows}
    if set(by) != set(rope.axes) or len(rows) != len(rope.axes):
        raise ValueError("largest_safe_video needs the rows of one path and dtype: one per axis")
    out: dict[str, Any] = {f"{a}_px": None if by[a].safe_to is None else int(by[a].safe_to) * rope.pixels_per_id
                           for a in rope.axes[1:]}
    t = by["frame"].safe_to
    out["frames"] = None if t is None else int(t) * rope.frames_per_id
    if fps is not None:
        out["seconds"] = None if out["frames"] is None else out["frames"] / fps
    reached = {r.axis: r.safe_to == max(r.lengths) for r in rows}
    out["px_at_least"] = reached["height"] and reached["width"] and rope.table is None
    out["frames_at_least"] = reached["frame"]
    out["at_least"] = out["px_at_least"] and out["frames_at_least"]
    if rope.table is not None:
        out["table"] = rope.table
    return out
