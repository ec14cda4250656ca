"""SD3's 2-D sincos position embedding: an absolute table of ``pos_embed_max_size``\\ :sup:`2` patch positions, cropped
at its centre to the image, added to the patch embeddings.

Read at diffusers 0.42.1, ``models/embeddings.py``:

* ``PatchEmbed.__init__`` (``SD3Transformer2DModel``: ``height = width = sample_size``, ``pos_embed_max_size``)
  calls ``get_2d_sincos_pos_embed(embed_dim, pos_embed_max_size, base_size=sample_size // patch_size,
  interpolation_scale=1)``: the grid ``torch.arange(n, dtype=float32) / (n / base_size) / interpolation_scale``
  (float32: patch k sits at ``k / 3`` for SD3's 192 / 64, rounded to float32); per axis half of ``embed_dim``,
  ``get_1d_sincos_pos_embed_from_grid``: ``omega = 1 / 10000 ** (arange(D / 2) / (D / 2))`` in float64 (float32
  on MPS: ``maybe_adjust_dtype_for_device``), ``torch.outer(pos, omega)`` in float64, ``[sin | cos]`` in float64;
  the first half of a row encodes the column, the second the row.  ``.float()`` makes the table float32.
* It is registered as a buffer, persistent when ``pos_embed_max_size`` is set (SD3): checkpoints carry it,
  ``model.to(bf16)`` casts it, and so does ``from_pretrained(torch_dtype=bf16)`` with accelerate installed
  (diffusers' default low-memory loading sets every tensor to the dtype; without accelerate its buffers stay
  float32: both measured in tests), no ``_keep_in_fp32_modules``; and
  ``forward`` adds it to the patch embeddings in the model dtype: ``(latent + pos_embed).to(latent.dtype)``.
* ``cropped_pos_embed``: ``h = height // patch_size`` patches (of the latent), rows ``top = (max - h) // 2`` ..
  ``top + h - 1``; more than ``pos_embed_max_size`` patches per side raise ValueError: a hard limit.
* ``pipeline_stable_diffusion_3.py``: 1024 x 1024 by default (``sample_size`` 128 x ``vae_scale_factor`` 8),
  sides divisible by 16 (``vae_scale_factor * patch_size``, else ValueError).

Two patches share an embedding when both their column and their row halves round to the same values, so the audit
is per axis (the crop's positions) and the patch count follows: ``h w - u_h u_w`` with ``u`` the positions whose
1-D row is unique.

>>> sd3 = SincosGrid(family="sd3", embed_dim=2432, max_size=192, base_size=64)
>>> crop_positions(sd3, 64)[[0, -1]].tolist()  # patches 64..127 of 192, at k / 3 in float32
[21.33333396911621, 42.33333206176758]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..formats import get_format, round_to
from ..rows import Row
from ..verdicts import sinusoid_verdict

__all__ = ["GRID_PATHS", "GridAxisRow", "SincosGrid", "audit_grid", "crop_positions", "grid_patches",
           "grid_table", "patch_collisions"]

F64 = npt.NDArray[np.float64]

GRID_PATHS: dict[str, tuple[str, str, str, str | None]] = {
    # name: (omega and angle format, stored table format ("dtype": the model's), label, fix)
    "table-fp32": ("float64", "float32", "table kept float32 (as PatchEmbed builds it; added in float32, then cast)",
                   None),
    "table-dtype": ("float64", "dtype", "table cast to the model dtype (model.to(dtype); from_pretrained("
                    "torch_dtype=...) with accelerate installed: a buffer)", "keep pos_embed float32 (e.g. _keep_in_fp32_modules) or a "
                    "wider dtype for the sum"),
    "freqs-fp32": ("float32", "dtype", "omega and angles in float32 (diffusers on MPS), table in the model dtype",
                   "keep pos_embed float32 (e.g. _keep_in_fp32_modules) or a wider dtype for the sum"),
}
"""SD3's code paths for its position table."""


@dataclass(frozen=True)
class SincosGrid:
    """A 2-D sincos table of ``max_size`` x ``max_size`` patch positions (``PatchEmbed`` with
    ``pos_embed_max_size``): ``embed_dim`` the model width (half per axis), ``base_size`` = ``sample_size //
    patch_size``, ``pixels_per_patch`` = VAE factor 8 x ``patch_size``.

    >>> SincosGrid(family="sd3", embed_dim=2430, max_size=192, base_size=64)
    Traceback (most recent call last):
    ...
    ValueError: embed_dim 2430 must be a positive multiple of 4 (a sin and a cos half per axis)
    """

    family: str
    embed_dim: int
    max_size: int
    base_size: int
    interpolation_scale: float = 1.0
    pixels_per_patch: int = 16
    paths: tuple[str, ...] = tuple(GRID_PATHS)
    source: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.embed_dim, bool) or not isinstance(self.embed_dim, int) or self.embed_dim < 4 \
                or self.embed_dim % 4:
            raise ValueError(f"embed_dim {self.embed_dim!r} must be a positive multiple of 4 (a sin and a cos half "
                             "per axis)")
        for name in ("max_size", "base_size", "pixels_per_patch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} {v!r} must be a positive integer")
        s = self.interpolation_scale
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise ValueError(f"interpolation_scale {s!r} must be a finite number > 0")
        bad = [p for p in self.paths if p not in GRID_PATHS]
        if bad:
            raise ValueError(f"unknown path {bad[0]!r}; known: {', '.join(GRID_PATHS)}")


def grid_patches(grid: SincosGrid, image: tuple[int, int]) -> tuple[int, int]:
    """Patches (rows, columns) of an image (width, height) in pixels; ValueError when a side is not a multiple of
    ``pixels_per_patch`` (the pipeline's check) or holds more patches than the table (``cropped_pos_embed``).

    >>> grid_patches(SincosGrid(family="sd3", embed_dim=2432, max_size=192, base_size=64), (3088, 1024))
    Traceback (most recent call last):
    ...
    ValueError: image 3088x1024: 193 patches per row, more than the table's pos_embed_max_size 192 (3072 px): diffusers raises a ValueError
    """
    w, h = image
    p = grid.pixels_per_patch
    if h < p or w < p or h % p or w % p:
        raise ValueError(f"image {w}x{h}: {grid.family} needs sides that are positive multiples of {p} px "
                         "(the pipeline raises otherwise)")
    for side, n in (("column", h // p), ("row", w // p)):
        if n > grid.max_size:
            raise ValueError(f"image {w}x{h}: {n} patches per {side}, more than the table's pos_embed_max_size "
                             f"{grid.max_size} ({grid.max_size * p} px): diffusers raises a ValueError")
    return h // p, w // p


def crop_positions(grid: SincosGrid, n: int) -> F64:
    """The grid positions of a crop of ``n`` patches: table rows ``(max - n) // 2`` .. ``+ n - 1``, each
    ``k / (max / base_size) / interpolation_scale`` divided in float32 (the divisors rounded to float32)."""
    top = (grid.max_size - n) // 2
    k = np.arange(top, top + n, dtype=np.float64)
    f32 = get_format("float32")
    q = round_to(np.array([grid.max_size / grid.base_size]), f32)[0]
    s = round_to(np.array([float(grid.interpolation_scale)]), f32)[0]
    return round_to(round_to(k / q, f32) / s, f32)


def _exact_positions(grid: SincosGrid, n: int) -> F64:
    top = (grid.max_size - n) // 2
    return np.arange(top, top + n, dtype=np.float64) * grid.base_size / grid.max_size / grid.interpolation_scale


def _omega(grid: SincosGrid, fmt: str) -> F64:
    """``1 / 10000 ** (arange(D / 2) / (D / 2))`` for D = embed_dim / 2, each op rounded to ``fmt``."""
    half = grid.embed_dim // 4
    f = get_format(fmt)
    e = round_to(np.arange(half, dtype=np.float64) / half, f)
    return round_to(1.0 / round_to(np.power(10000.0, e), f), f)


def grid_table(grid: SincosGrid, n: int, path: str, dtype: str) -> tuple[F64, F64]:
    """The stored 1-D half ``[sin | cos]`` (n, embed_dim / 2) of a crop of ``n`` patches on ``path`` in model dtype
    ``dtype``, and the exact one (float64 of the exact positions ``k base_size / max_size``).

    >>> sd3 = SincosGrid(family="sd3", embed_dim=8, max_size=6, base_size=2)
    >>> stored, exact = grid_table(sd3, 2, "table-dtype", "bfloat16")
    >>> stored.shape, float(abs(stored - exact).max()) < 2.0**-8
    ((2, 4), True)
    """
    fa, cache = GRID_PATHS[path][0], GRID_PATHS[path][1]
    store = get_format(dtype if cache == "dtype" else cache)
    pos = crop_positions(grid, n)
    ang = round_to(pos[:, None] * _omega(grid, fa)[None, :], get_format(fa))
    f32 = get_format("float32")
    stored = np.concatenate([np.sin(ang), np.cos(ang)], axis=1)
    stored = round_to(round_to(round_to(stored, get_format(fa)), f32), store)  # .float(), then the cast
    ex = _exact_positions(grid, n)[:, None] * _omega(grid, "float64")[None, :]
    return stored, np.concatenate([np.sin(ex), np.cos(ex)], axis=1)


def patch_collisions(unique_rows: int, unique_cols: int, rows: int, cols: int) -> int:
    """Patches whose 2-D embedding equals another patch's, from the positions per axis whose 1-D half is unique.

    >>> patch_collisions(64, 64, 64, 64), patch_collisions(62, 64, 64, 64)
    (0, 128)
    """
    return rows * cols - unique_rows * unique_cols


@dataclass(frozen=True)
class GridAxisRow(Row):
    """One axis (the crop's rows or columns) of a 2-D sincos table on one path and dtype.  ``unique``: positions
    whose stored half-row no other shares; ``nn_shrink``: max over positions of ``1 - stored / exact`` distance
    to the nearest other position (every pair compared); ``safe_to``: the largest crop (patches) that stays
    safe."""

    axis: str
    stack: str
    dtype: str
    patches: int
    first_position: float
    last_position: float
    max_abs_error: float
    duplicate_rows: int
    unique: int
    exact_nn_distance: float
    nn_shrink: float
    verdict: str
    safe_to: int | None = None


def _axis_stats(grid: SincosGrid, n: int, path: str, dtype: str) -> dict[str, float | int]:
    stored, exact = grid_table(grid, n, path, dtype)
    _, inv, counts = np.unique(stored, axis=0, return_inverse=True, return_counts=True)
    unique = int((counts[inv.reshape(-1)] == 1).sum())

    def nn(t: F64) -> F64:
        g = t @ t.T
        sq = np.diag(g)
        d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * g, 0.0)
        np.fill_diagonal(d2, np.inf)
        return np.sqrt(d2.min(axis=1))

    if n > 1:
        ne, ns = nn(exact), nn(stored)
        shrink, exact_nn = float(np.max(1 - ns / ne)), float(ne.min())
    else:
        shrink, exact_nn = 0.0, math.inf
    dup = n - unique
    return {"max": float(np.abs(stored - exact).max()), "dup": dup, "unique": unique, "nn": exact_nn,
            "shrink": shrink, "verdict": sinusoid_verdict(dup, shrink)}


def _safe_crop(grid: SincosGrid, path: str, dtype: str) -> int | None:
    """The largest crop in [1, max_size] that stays safe (bisection: a larger crop's positions hold a smaller's)."""
    def safe(n: int) -> bool:
        return _axis_stats(grid, n, path, dtype)["verdict"] == "safe"

    if not safe(1):
        return None
    if safe(grid.max_size):
        return grid.max_size
    ok, bad = 1, grid.max_size
    while bad - ok > 1:
        mid = (ok + bad) // 2
        ok, bad = (mid, bad) if safe(mid) else (ok, mid)
    return ok


def audit_grid(grid: SincosGrid, patches: tuple[int, int], paths: Sequence[str] | None = None,
               dtypes: Sequence[str] = ("bfloat16",)) -> list[GridAxisRow]:
    """The crop of ``patches`` (rows, columns) audited per axis, path and dtype (dtype-major, then path; the
    column axis first, as the table's first half), ``safe_to`` the largest crop per side that stays safe.

    >>> sd3 = SincosGrid(family="sd3", embed_dim=2432, max_size=192, base_size=64)
    >>> rows = audit_grid(sd3, (64, 64), ["table-dtype"], ["bfloat16", "float8_e4m3fn"])
    >>> [(r.axis, r.dtype, r.duplicate_rows, r.verdict, r.safe_to) for r in rows]
    [('column', 'bfloat16', 0, 'safe', 192), ('row', 'bfloat16', 0, 'safe', 192), ('column', 'float8_e4m3fn', 0, 'safe', 192), ('row', 'float8_e4m3fn', 0, 'safe', 192)]
    """
    if len(patches) != 2 or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not
                                1 <= n <= grid.max_size for n in patches):
        raise ValueError(f"patches {tuple(patches)!r} must be (rows, columns), each in 1..{grid.max_size}")
    names = list(grid.paths if paths is None else paths)
    bad = [p for p in names if p not in grid.paths]
    if bad:
        raise ValueError(f"path {bad[0]!r} is not one {grid.family} runs; its paths: {', '.join(grid.paths)}")
    out = []
    for d in dict.fromkeys(get_format(x).name for x in dtypes):
        for p in names:
            safe = _safe_crop(grid, p, d)
            for axis, n in (("column", int(patches[1])), ("row", int(patches[0]))):
                st = _axis_stats(grid, n, p, d)
                pos = crop_positions(grid, n)
                out.append(GridAxisRow(axis=axis, stack=p, dtype=d, patches=n, first_position=float(pos[0]),
                                       last_position=float(pos[-1]), max_abs_error=float(st["max"]),
                                       duplicate_rows=int(st["dup"]), unique=int(st["unique"]),
                                       exact_nn_distance=float(st["nn"]), nn_shrink=float(st["shrink"]),
                                       verdict=str(st["verdict"]), safe_to=safe))
    return out
