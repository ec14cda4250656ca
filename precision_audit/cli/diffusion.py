"""``config TRANSFORMER_CONFIG --image WxH [--video SECONDS@FPS]``: a diffusion transformer's position encoding per
axis (:func:`precision_audit.config.diffusion_audit.diffusion_audit`), printed or as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from ._shared import echo_json, echo_table

__all__ = ["diffusion_command"]


def diffusion_command(cfg: Any, image: Any, video: Any, paths: Sequence[str], dtypes: Sequence[str],
                      as_json: bool, text: int = 0) -> None:
    """Print (or ``--json``) the audit of a diffusers transformer config for one image or video (``text``:
    Qwen-Image's and Flux.2's text tokens, 0 for the pipeline's default)."""
    from ..config.diffusion_audit import diffusion_audit

    try:
        a = diffusion_audit(cfg, image, video, paths, dtypes, text)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if as_json:
        echo_json(a.data)
        return
    click.echo("\n".join(a.lines) + "\n")
    click.echo(a.heading)
    click.echo("\n".join("  " + b for b in a.bottom))
    click.echo("")
    echo_table(a.table, a.columns)
    click.echo("\n" + a.note)
