"""``config TRANSFORMER_CONFIG --image WxH``: Qwen-Image's centred axial RoPE and SD3's 2-D sincos table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from ._shared import echo_json, echo_table

__all__ = ["DEFAULT_IMAGE", "centred_audit", "grid_audit"]

DEFAULT_IMAGE: dict[str, tuple[int, int]] = {
    "qwen_image": (1024, 1024),  # QwenImagePipeline: default_sample_size 128 x vae_scale_factor 8
    "sd3": (1024, 1024),  # StableDiffusion3Pipeline: transformer sample_size 128 x vae_scale_factor 8
}
"""The image audited when none is given: the pipeline's default size."""

_CENTRED_COLUMNS = [("dtype", "dtype"), ("path", "stack"), ("axis", "axis"), ("freqs", "frequencies"),
                    ("ids", "ids_range"), ("max rot err", "max_rotation_error"), ("colliding", "colliding_positions"),
                    ("worst pair err", "worst_pair_error"), ("safe to", "safe_to"), ("verdict", "verdict")]
_GRID_COLUMNS = [("dtype", "dtype"), ("path", "stack"), ("axis", "axis"), ("patches", "patches"),
                 ("positions", "position_range"), ("max abs err", "max_abs_error"), ("duplicates", "duplicate_rows"),
                 ("nn shrink", "nn_shrink"), ("safe to", "safe_to"), ("verdict", "verdict")]


def _input(cfg: Any, image: Any, video: Any) -> tuple[tuple[int, int], bool]:
    if video is not None:
        raise click.UsageError(f"--video: {cfg.name} ({cfg.class_name}) makes images, not video: give --image WxH")
    return (DEFAULT_IMAGE[cfg.rope.family], True) if image is None else (image, False)


def _check_paths(cfg: Any, stacks: Sequence[str]) -> None:
    bad = [s for s in stacks if s not in cfg.rope.paths]
    if bad:
        raise click.UsageError(f"--recipe {bad[0]}: not a code path {cfg.class_name} runs; its paths: "
                               f"{', '.join(cfg.rope.paths)}")


def centred_audit(cfg: Any, image: Any, video: Any, stacks: Sequence[str], dtypes: Sequence[str], as_json: bool,
                  text: int = 0) -> None:
    """Print (or ``--json``) Qwen-Image's per-axis audit: the ids each axis carries for one image and its text
    (``text`` tokens; 0: the pipeline's ``max_sequence_length`` 512)."""
    from ..rope.axial_centred import CENTRED_PATHS, audit_centred, axis_ids, centred_grid, table_limit
    from ..verdicts import worst

    rope = cfg.rope
    img, default = _input(cfg, image, video)
    _check_paths(cfg, stacks)
    txt = text or rope.text
    try:
        grid = centred_grid(rope, img)
        rows = audit_centred(rope, grid, txt, list(stacks) or None, dtypes)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
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
    if as_json:
        echo_json({"auditor": "config-axial-centred", "model": {
            "name": cfg.name, "class_name": cfg.class_name, "axes": list(rope.axes), "axes_dim": list(rope.axes_dim),
            "theta": rope.theta, "head_dim": cfg.head_dim, "table": rope.table},
            "input": {"image": list(img), "text": txt}, "default_input": default,
            "summary": summary, "results": [r.to_dict() for r in rows]})
        return
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
    click.echo("\n".join(lines) + "\n")
    click.echo("Bottom line (each axis' verdict over the ids it carries; the largest safe square image per path and "
               "dtype):")
    for e in summary:
        s = e["largest_safe"]
        if s["side_ids"] is None:
            limit = "no input is safe"
        else:
            limit = f"safe to {s['side_px']} px per side ({s['side_ids']} latent ids)"
            if s["side_ids"] == top:
                limit += " (the table's limit: larger inputs raise)"
        line = f"  {e['label']}, {e['dtype']}: {e['axes']}; {limit}"
        why = [r for r in rows if r.stack == e["path"] and r.dtype == e["dtype"] and r.why]
        if why:
            line += f"; {why[-1].axis}: {why[-1].why}"
        click.echo(line + (f"; fix: {e['fix']}" if e["fix"] else ""))
    click.echo("")
    echo_table([dict(r.to_dict(), ids_range=f"{r.smallest_id}..{r.largest_id}") for r in rows], _CENTRED_COLUMNS)
    click.echo(f"\nEach axis: its own {rope.theta:g}-theta RoPE over its block of the head, audited over the ids it "
               "carries (image and text, negative ones included; pairs at distances 1, 16, 256, 4096 and half the "
               "range, each capped at the range); safe to = the largest "
               f"square side in latent ids that stays safe with {txt} text tokens. Code read: {rope.source}.")


def grid_audit(cfg: Any, image: Any, video: Any, stacks: Sequence[str], dtypes: Sequence[str], as_json: bool) -> None:
    """Print (or ``--json``) SD3's 2-D sincos table audit for one image: per axis of the crop, path and dtype."""
    from ..sinusoidal.grid2d import GRID_PATHS, audit_grid, grid_patches, patch_collisions
    from ..verdicts import worst

    g = cfg.rope
    img, default = _input(cfg, image, video)
    _check_paths(cfg, stacks)
    try:
        patches = grid_patches(g, img)
        rows = audit_grid(g, patches, list(stacks) or None, dtypes)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
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
    if as_json:
        echo_json({"auditor": "config-sincos-2d", "model": {
            "name": cfg.name, "class_name": cfg.class_name, "embed_dim": g.embed_dim, "pos_embed_max_size": g.max_size,
            "base_size": g.base_size}, "input": {"image": list(img)}, "default_input": default,
            "summary": summary, "results": [r.to_dict() for r in rows]})
        return
    top = (g.max_size - patches[0]) // 2
    left = (g.max_size - patches[1]) // 2
    click.echo("\n".join([
        cfg.describe(),
        f"  image {img[0]}x{img[1]}{' (the default input)' if default else ''}: {patches[0]} x {patches[1]} "
        f"patches ({px} px each), the table's rows {top}..{top + patches[0] - 1} and columns "
        f"{left}..{left + patches[1] - 1} (centre crop)",
        f"  the table holds {g.max_size} patches per side: up to {g.max_size * px} px; larger images raise "
        "(cropped_pos_embed)"]) + "\n")
    click.echo("Bottom line (two patches collide when both halves of their rows round alike; the largest safe image "
               "per path and dtype):")
    for e in summary:
        s = e["largest_safe"]
        limit = ("no input is safe" if s["side_patches"] is None else
                 f"safe to {s['side_px']} px per side ({s['side_patches']} patches)"
                 + (" (the table's limit: larger images raise)" if s["side_patches"] == g.max_size else ""))
        click.echo(f"  {e['label']}, {e['dtype']}: {e['verdict']}, {e['colliding_patches']} patches share an "
                   f"embedding; {limit}" + (f"; fix: {e['fix']}" if e["fix"] else ""))
    click.echo("")
    echo_table([dict(r.to_dict(), position_range=f"{r.first_position:.6g}..{r.last_position:.6g}") for r in rows],
               _GRID_COLUMNS)
    click.echo("\nEach axis: one half of the table ([sin | cos] of its position), errors against float64 of the exact "
               "positions k base_size / max; nn shrink = max over positions of 1 - stored / exact distance to the "
               f"nearest other position; safe to = the largest crop per side that stays safe. Code read: {g.source}.")
