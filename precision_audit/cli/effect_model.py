"""``effect --model``: what a code path costs a real pretrained model (precision_audit.effect.measures)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import click

from ._shared import Column, echo_json, echo_table, progress_bar, stderr_is_tty

__all__ = ["run_model_effect"]


def _kl(key: str) -> Any:
    return lambda r: "inf" if r[key] is None else f"{r[key]:.2e}"


def _pc(key: str) -> Any:
    return lambda r: "-" if r[key] is None else f"{100 * r[key]:.1f}%"


TEXT_COLUMNS: list[Column] = [
    ("path", "path"), ("dtype", "dtype"), ("cache", "cache"), ("offset", "offset"), ("tokens", "tokens"),
    ("KL", _kl("kl")), ("KL floor", _kl("floor_kl")), ("top-1", _pc("top1")), ("top-1 floor", _pc("floor_top1")),
    ("top-1 2nd half", _pc("top1_late")),
    ("dNLL", lambda r: "inf" if r["nll_delta"] is None else f"{r['nll_delta']:+.4f}"),
    ("dNLL floor", lambda r: "inf" if r["floor_nll_delta"] is None else f"{r['floor_nll_delta']:+.4f}"),
]
DTYPE_COLUMNS: list[Column] = [("KL model dtype", _kl("dtype_kl")), ("top-1 model dtype", _pc("dtype_top1"))]
KEY_COLUMNS: list[Column] = [
    ("path", "path"), ("dtype", "dtype"), ("cache", "cache"), ("offset", "offset"), ("gap", "gap"),
    ("passkey", lambda r: f"{r['correct']}/{r['keys']}"), ("exact", lambda r: f"{r['exact']}/{r['keys']}"),
    ("floor", lambda r: f"{r['floor']}/{r['keys']}"),
]


def run_model_effect(model: str, paths: Sequence[str], dtypes: Sequence[str], offsets: Sequence[int],
                     gaps: Sequence[int], *, tokens: int, text_file: str | None, keys: int, model_dtype: str,
                     device: str, device_map: str | None, plot: str | None, as_json: bool) -> None:
    """Load the model, measure every path, print the two tables (or one JSON object)."""
    from ..effect.measures import measure_model, runs
    from ..effect.real import load_real_model

    text = None
    if text_file is not None:
        try:
            with open(text_file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise click.BadParameter(f"{text_file}: cannot read: {e.__class__.__name__}: {e}",
                                     param_hint="'--text'") from None
    if stderr_is_tty():
        click.echo(f"loading {model} (transformers; a 135M model takes ~20 s on 2 cores) ...", err=True)
    rm = load_real_model(model, model_dtype, device, device_map)
    total = runs(rm, paths, dtypes, offsets, tokens, gaps)
    with progress_bar(total, "cos/sin tables") as bar:
        text_rows, key_rows = measure_model(rm, paths, dtypes, offsets, tokens=tokens, text=text, gaps=gaps,
                                            keys=keys, progress=bar.update)
    if plot:
        from ..report.effect import plot_model_effect

        plot_model_effect(text_rows, key_rows, plot)
    t = [r.to_dict() for r in text_rows]
    k = [r.to_dict() for r in key_rows]
    if as_json:
        echo_json({"auditor": "effect-model", "model": rm.name, "schedule": rm.schedule.describe(),
                   "model_dtype": rm.dtype, "text": t, "passkey": k})
        return
    click.echo(f"{rm.name}: {rm.schedule.describe()}; trained context {rm.context}; weights in {rm.dtype}\n")
    if t:
        echo_table(t, TEXT_COLUMNS + (DTYPE_COLUMNS if rm.dtype != "float32" else []))
        click.echo("")
    if k:
        echo_table(k, KEY_COLUMNS + ([("exact fp32 weights", lambda r: f"{r['dtype_exact']}/{r['keys']}")]
                                     if rm.dtype != "float32" else []))
        click.echo("")
    click.echo(textwrap.fill("Each row: the model with the path's stored cos/sin against its own run with exact cos/sin (float64 "
               "angles) at the same positions (offset = the first token's position).  KL: mean KL(exact || path) "
               "per token, nats; top-1: next-token argmax agrees with the exact run; dNLL: change of the text's NLL "
               "per token; passkey: keys retrieved across `gap` filler tokens.  floor: exact cos/sin merely stored "
               "in the cache format (what that format costs anyway); a path near its floor costs nothing more.", 115))
