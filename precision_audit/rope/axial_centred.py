"""Qwen-Image's axial RoPE: ids centred on zero, looked up in a fixed table of 4096 positive and 4096 negative rows.

Read at diffusers 0.42.1, ``models/transformers/transformer_qwenimage.py``:

* ``QwenEmbedRope.__init__`` builds, per axis block of ``axes_dims_rope`` (frame 16, height 56, width 56), a
  complex64 table ``torch.polar(1, torch.outer(index, freqs))`` for ``index = arange(4096)`` (``pos_freqs``) and
  ``-(4096..1)`` (``neg_freqs``): the int64 index promotes to float32 (exact), the frequencies are
  ``1 / pow(theta, arange(0, d, 2).float32 / d)`` in float32 (theta fixed at 10000 by
  ``QwenImageTransformer2DModel``), the angle product float32, cos/sin float32.  The table is a plain attribute,
  not a buffer ("IT WILL CAUSE COMPLEX NUMBERS LOSE ITS IMAGINARY PART"): ``model.to(dtype)`` and
  ``from_pretrained(torch_dtype=...)`` leave it complex64.
* ``_compute_video_freqs`` with ``scale_rope=True``: an image of ``h`` x ``w`` latent ids gets frame id 0 (its
  index in the list of images), row ids ``-(h - h // 2) .. h // 2 - 1`` (``neg_freqs[-(h - h // 2):]`` then
  ``pos_freqs[:h // 2]``), column ids likewise.
* ``forward``: the text's ids follow on every axis at ``max_vid_index = max(h // 2, w // 2)``:
  ``pos_freqs[max_vid_index : max_vid_index + text_len]``.  Python slicing never raises, so text past row 4095 is
  silently cut; ``apply_rotary_emb_qwen`` (``use_real=False``: ``x.float()`` as complex64 times the table,
  ``type_as(x)``) then raises on the shape mismatch, except when one row is left (``max_vid_index`` 4095), which
  broadcasts over every text token without error, and when none is left for one text token, whose query comes back
  empty without error.  A side of more than 8192 latent ids does not fit the sliced
  table and raises in ``view``.
* ``pipeline_qwenimage.py``: rows = ``height // vae_scale_factor // 2`` (16 px per id), default 1024 x 1024
  (``default_sample_size`` 128 x ``vae_scale_factor`` 8), text up to ``max_sequence_length`` 512 tokens.

The rounding of id -k mirrors +k in this op sequence when each op is correctly rounded (the cast, the product,
cos / sin); torch's kernels are only faithful, so the audit does not rely on it: every path is run on the ids
actually carried, negative ones included, and pairs straddle zero (the distances rope.audit takes for that span).

>>> qwen = QWEN_IMAGE
>>> centred_range(64), centred_range(7)
((-32, 31), (-4, 2))
>>> [(a, int(i.min()), int(i.max()), i.size) for a, i in zip(qwen.axes, axis_ids(qwen, (64, 64), 512))]
[('frame', 0, 543, 513), ('height', -32, 543, 576), ('width', -32, 543, 576)]
>>> table_limit(qwen, 512), table_limit(qwen, 0)  # largest square side in latent ids
(7169, 8192)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..formats import get_format
from ..rows import Row
from ..verdicts import resolved_error, rope_verdict, rope_why
from .axial import AxialPath
from .engine import run_recipe
from .oracle import exact_angles, wrap
from .pairs import row_distances
from .recipes import Recipe
from .schedules import RopeSchedule

__all__ = ["CENTRED_PATHS", "CentredAxisRow", "CentredRope", "QWEN_IMAGE", "audit_centred", "audit_ids", "axis_ids",
           "centred_grid", "centred_recipe", "centred_range", "check_table", "table_limit"]

_TWO_PI = 2 * math.pi

CENTRED_PATHS: dict[str, AxialPath] = {
    "table-fp32": AxialPath("float32", "float32", "float32",
                            "complex64 table as built (QwenEmbedRope: float32 freqs and angles; model.to(dtype) "
                            "leaves it alone)"),
    "freqs-fp64": AxialPath("float32", "float64", "float32",
                            "frequencies and angles in float64, cos/sin float32 (what float32 costs)"),
    "cos-sin-dtype": AxialPath("float32", "float32", "dtype",
                               "cos/sin rounded to the model dtype before the rotation (a port that stores them so; "
                               "torch.complex32 holds float16 halves)",
                               fix="keep the complex64 table and rotate in float32 (apply_rotary_emb_qwen)"),
    "table-as-buffer": AxialPath("float32", "float32", "dtype",
                                 "the complex table made a buffer and cast by model.to(dtype): its imaginary part "
                                 "(sin) is dropped",
                                 fix="keep the table a plain attribute (diffusers does), or cast cos and sin "
                                     "separately"),
}
"""Qwen-Image's code paths; ``table-as-buffer`` is the one diffusers' comment guards against (tests run the cast)."""


@dataclass(frozen=True)
class CentredRope:
    """A diffusion transformer whose image ids are centred on zero and looked up in a table of ``table`` positive
    and ``table`` negative rows (Qwen-Image), its text's ids following at ``max(h // 2, w // 2)`` on every axis.

    >>> CentredRope(family="q", axes_dim=(16, 56, 55))
    Traceback (most recent call last):
    ...
    ValueError: axes_dims_rope (16, 56, 55) must be three positive even integers (frame, height, width)
    """

    family: str
    axes_dim: tuple[int, ...]
    axes: tuple[str, ...] = ("frame", "height", "width")
    theta: float = 10000.0
    pixels_per_id: int = 16
    table: int = 4096
    text: int = 512
    paths: tuple[str, ...] = tuple(CENTRED_PATHS)
    source: str = ""

    def __post_init__(self) -> None:
        d = self.axes_dim
        if not (isinstance(d, tuple) and len(d) == 3 and all(
                isinstance(x, int) and not isinstance(x, bool) and x > 0 and x % 2 == 0 for x in d)):
            raise ValueError(f"axes_dims_rope {d!r} must be three positive even integers (frame, height, width)")
        for name in ("pixels_per_id", "table", "text"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "text" else 1):
                raise ValueError(f"{name} {v!r} must be a {'non-negative' if name == 'text' else 'positive'} integer")
        bad = [p for p in self.paths if p not in CENTRED_PATHS]
        if bad:
            raise ValueError(f"unknown path {bad[0]!r}; known: {', '.join(CENTRED_PATHS)}")

    def schedule(self, axis: int) -> RopeSchedule:
        """Axis ``axis``' 1-D schedule: ``1 / theta ** (arange(0, d, 2) / d)`` with d its block width."""
        return RopeSchedule(head_dim=self.axes_dim[axis], base=float(self.theta))


QWEN_IMAGE = CentredRope(family="qwen_image", axes_dim=(16, 56, 56),
                         source="diffusers 0.42.1 transformer_qwenimage.QwenEmbedRope (scale_rope=True), "
                                "pipeline_qwenimage.QwenImagePipeline")
"""QwenImageTransformer2DModel's defaults (its config may change ``axes_dims_rope``)."""


def centred_range(side: int) -> tuple[int, int]:
    """The ids of one image axis of ``side`` latent ids with ``scale_rope``: ``-(side - side // 2)`` to
    ``side // 2 - 1`` (an odd side has one more negative id)."""
    return -(side - side // 2), side // 2 - 1


def table_limit(rope: CentredRope, text: int) -> int:
    """The largest square side (latent ids) whose image and ``text`` tokens fit the table: ``side - side // 2 <=
    table`` and, with text, ``side // 2 + text <= table``; 0 when none does."""
    top = 2 * rope.table
    if text > 0:
        top = min(top, 2 * (rope.table - text) + 1)
    return max(0, top)


def check_table(rope: CentredRope, grid: tuple[int, int], text: int) -> None:
    """ValueError naming the input when an image of ``grid`` (rows, columns) and ``text`` tokens do not fit the
    table (what diffusers does then, in the message)."""
    t = rope.table
    for axis, n in zip(("height", "width"), grid):
        if n - n // 2 > t or n // 2 > t:
            raise ValueError(f"{rope.family}: {n} latent ids on the {axis} axis need ids {centred_range(n)[0]}.."
                             f"{centred_range(n)[1]}, beyond the rope table's {t} negative / {t} positive rows: "
                             "diffusers raises a RuntimeError")
    m = max(grid[0] // 2, grid[1] // 2)
    if text > 0 and m + text > t:
        rows = max(0, t - m)
        what = ("its one row broadcasts over every text token without error (all text at id "
                f"{t - 1})" if rows == 1 else "apply_rotary_emb_qwen returns an empty text query without error"
                if rows == 0 and text == 1 else "apply_rotary_emb_qwen raises a RuntimeError")
        raise ValueError(f"{rope.family}: {text} text tokens at ids {m}..{m + text - 1} pass the rope table's {t} rows "
                         f"(text + max(rows // 2, columns // 2) <= {t}): diffusers slices it to {rows} rows and "
                         + what)


def centred_grid(rope: CentredRope, image: tuple[int, int]) -> tuple[int, int]:
    """Latent ids (rows, columns) of an image (width, height) in pixels: ``H // pixels_per_id`` (the pipeline's
    ``height // vae_scale_factor // 2``).

    >>> centred_grid(QWEN_IMAGE, (1664, 928))
    (58, 104)
    """
    w, h = image
    p = rope.pixels_per_id
    if h < p or w < p:
        raise ValueError(f"image {w}x{h}: {rope.family} makes one id per {p} px; give at least {p} px per side")
    return h // p, w // p


def axis_ids(rope: CentredRope, grid: tuple[int, int], text: int) -> list[npt.NDArray[np.int64]]:
    """Per axis, the sorted ids its tokens carry: the image's (frame 0; rows and columns centred) and the text's
    ``max(rows // 2, columns // 2) + 0 .. text - 1`` (the same id on every axis)."""
    m = max(grid[0] // 2, grid[1] // 2)
    txt = np.arange(m, m + text, dtype=np.int64)
    out = [np.union1d(np.zeros(1, dtype=np.int64), txt)]
    for n in grid:
        lo, hi = centred_range(n)
        out.append(np.union1d(np.arange(lo, hi + 1, dtype=np.int64), txt))
    return out


@dataclass(frozen=True)
class CentredAxisRow(Row):
    """One axis of a centred-id RoPE on one path and dtype, over the ids it carries (``smallest_id`` ..
    ``largest_id``, ``ids`` of them).  ``safe_to``: the largest square side in latent ids (with the same text)
    up to which the axis stays safe, None when even a side of 1 is not."""

    axis: str
    stack: str
    dtype: str
    smallest_id: int
    largest_id: int
    ids: int
    frequencies: int
    verdict: str
    max_rotation_error: float
    colliding_positions: int
    worst_pair_error: float | None
    why: str | None = None
    safe_to: int | None = None


def centred_recipe(path: str, dtype: str) -> Recipe:
    """Path ``path`` in model dtype ``dtype`` as a :class:`Recipe` (ids float32, the path's frequencies, the rotation
    in float32 cast to ``dtype``; ``table-as-buffer``'s dropped sin is applied by :func:`audit_ids`).

    >>> centred_recipe("table-fp32", "bfloat16").stages
    {'positions': 'float32', 'inv_freq': 'float32', 'angle': 'float32', 'trig': 'float32', 'cache': 'float32'}
    """
    if path not in CENTRED_PATHS:
        raise ValueError(f"unknown path {path!r}; known: {', '.join(CENTRED_PATHS)}")
    dtype = get_format(dtype).name
    p = CENTRED_PATHS[path]
    cache = dtype if p.cache == "dtype" else p.cache
    f = str(p.freqs)
    return Recipe(path, p.ids, f, f, f, cache, inv_freq_from=f, apply=dtype, apply_mode="fp32-then-cast", stack=path)


def audit_ids(schedule: RopeSchedule, ids: npt.NDArray[np.int64], path: str, dtype: str) -> dict[str, Any]:
    """Max rotation error, collisions (ids whose stored cos/sin equal the previous carried id's) and pair errors
    at the default distances over the ids carried, as :func:`~precision_audit.rope.audit` measures them (the same
    values on ids 0..L-1: tests), with the verdict and what is lost.

    >>> st = audit_ids(QWEN_IMAGE.schedule(1), np.arange(-32, 544), "table-as-buffer", "bfloat16")
    >>> st["verdict"], st["why"]
    ('broken', 'neighbouring positions: phase lost (3.14 rad)')
    """
    st = run_recipe(centred_recipe(path, dtype), schedule, ids, seq_len=int(np.abs(ids).max()) + 1)
    c, s = st["cos"], st["sin"]
    if path == "table-as-buffer":
        s = np.zeros_like(s)  # a complex -> real cast keeps the real part
    e = wrap(np.arctan2(s, c) - exact_angles(ids, schedule.inv_freq()))
    e[~np.isfinite(e)] = math.pi
    same = np.all((c[1:] == c[:-1]) & (s[1:] == s[:-1]), axis=1)
    lo = int(ids[0])
    member = np.zeros(int(ids[-1]) - lo + 1, dtype=bool)
    member[ids - lo] = True
    where = np.full(member.size, -1)
    where[ids - lo] = np.arange(ids.size)
    pairs = []
    for d in row_distances(member.size) if member.size > 1 else ():
        ok = member[d:] & member[:-d]
        if not ok.any():
            continue
        x = np.abs(e[where[d:][ok]] - e[where[:-d][ok]])
        x = np.minimum(x, _TWO_PI - x)
        pairs.append((d, float(x.max()), resolved_error(x.max(axis=0), d * np.abs(schedule.inv_freq()))))
    mx = float(np.abs(e).max())
    col = int(same.sum())
    return {"max": mx, "colliding": col, "pairs": pairs, "verdict": rope_verdict(mx, col, pair_errors=pairs),
            "why": rope_why(mx, col, pairs)}


def _safe_side(rope: CentredRope, k: int, path: str, dtype: str, text: int, top: int) -> int | None:
    """The largest square side in [1, top] whose axis-``k`` ids are safe (bisection: the ids of a larger square
    are a superset), None when side 1 is not."""
    sched = rope.schedule(k)

    def safe(n: int) -> bool:
        return audit_ids(sched, axis_ids(rope, (n, n), text)[k], path, dtype)["verdict"] == "safe"

    if top < 1 or not safe(1):
        return None
    if safe(top):
        return top
    ok, bad = 1, top
    while bad - ok > 1:
        mid = (ok + bad) // 2
        ok, bad = (mid, bad) if safe(mid) else (ok, mid)
    return ok


def audit_centred(rope: CentredRope, grid: tuple[int, int], text: int | None = None,
                  paths: Sequence[str] | None = None, dtypes: Sequence[str] = ("bfloat16",)) -> list[CentredAxisRow]:
    """Each axis audited over the ids it carries for an image of ``grid`` (rows, columns) latent ids and ``text``
    tokens (default: the family's), per path and dtype (rows dtype-major, then path, then axis), with ``safe_to``
    the largest square side that stays safe; ValueError when the input does not fit the table.

    >>> rows = audit_centred(QWEN_IMAGE, (64, 64), 512, ["table-fp32", "table-as-buffer"])
    >>> [(r.axis, r.stack, r.smallest_id, r.largest_id, r.verdict, r.safe_to) for r in rows][1:4]
    [('height', 'table-fp32', -32, 543, 'safe', 7169), ('width', 'table-fp32', -32, 543, 'safe', 7169), ('frame', 'table-as-buffer', 0, 543, 'broken', None)]
    """
    text = rope.text if text is None else text
    if isinstance(text, bool) or not isinstance(text, (int, np.integer)) or text < 0:
        raise ValueError(f"text tokens {text!r} must be a non-negative integer")
    if len(grid) != 2 or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 for n in grid):
        raise ValueError(f"grid {tuple(grid)!r} must be (rows, columns), each a positive integer")
    check_table(rope, (int(grid[0]), int(grid[1])), int(text))
    names = list(rope.paths if paths is None else paths)
    bad = [p for p in names if p not in rope.paths]
    if bad:
        raise ValueError(f"path {bad[0]!r} is not one {rope.family} runs; its paths: {', '.join(rope.paths)}")
    ids = axis_ids(rope, (int(grid[0]), int(grid[1])), int(text))
    top = table_limit(rope, int(text))
    rows: list[CentredAxisRow] = []
    safe_cache: dict[tuple[int, str, str], int | None] = {}
    for d in dict.fromkeys(get_format(x).name for x in dtypes):
        for p in names:
            for k, axis in enumerate(rope.axes):
                st = audit_ids(rope.schedule(k), ids[k], p, d)
                key = (rope.axes_dim[k] if k else -1, p, d)  # height and width share a block width and ids
                if key not in safe_cache:
                    safe_cache[key] = _safe_side(rope, k, p, d, int(text), top)
                rows.append(CentredAxisRow(
                    axis=axis, stack=p, dtype=d, smallest_id=int(ids[k][0]), largest_id=int(ids[k][-1]),
                    ids=int(ids[k].size), frequencies=rope.axes_dim[k] // 2, verdict=st["verdict"],
                    max_rotation_error=st["max"], colliding_positions=st["colliding"],
                    worst_pair_error=max((p[1] for p in st["pairs"]), default=None), why=st["why"],
                    safe_to=safe_cache[key]))
    return rows
