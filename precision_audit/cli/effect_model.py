"""``effect --model``: what a code path costs a real pretrained model (precision_audit.effect.measures), and
``effect --calibration --model``: the verdict's calibration on it (precision_audit.effect.model_calibration)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import click

from ._shared import Column, echo_json, echo_table, emit, progress_bar, stderr_is_tty

__all__ = ["model_calibration", "run_model_effect"]


def _kl(key: str) -> Any:
    return lambda r: "inf" if r[key] is None else f"{r[key]:.2e}"


def _pc(key: str) -> Any:
    return lambda r: "-" if r[key] is None else f"{100 * r[key]:.1f}%"


TEXT_COLUMNS: list[Column] = [
    ("path", "path"), ("dtype", "dtype"), ("cache", "cache"), ("offset", "offset"), ("tokens", "tokens"),
    ("KL", _kl("kl")), ("KL floor", _kl("floor_kl")), ("KL 2nd half", _kl("kl_late")),
    ("floor", _kl("floor_kl_late")), ("KL p99", _kl("kl_p99")), ("floor", _kl("floor_kl_p99")),
    ("KL max", _kl("kl_max")), ("floor", _kl("floor_kl_max")),
    ("top-1", _pc("top1")), ("top-1 floor", _pc("floor_top1")), ("top-1 2nd half", _pc("top1_late")),
    ("dNLL", lambda r: "inf" if r["nll_delta"] is None else f"{r['nll_delta']:+.4f}"),
    ("dNLL floor", lambda r: "inf" if r["floor_nll_delta"] is None else f"{r['floor_nll_delta']:+.4f}"),
]
DTYPE_COLUMNS: list[Column] = [("KL model dtype", _kl("dtype_kl")), ("top-1 model dtype", _pc("dtype_top1"))]
KEY_COLUMNS: list[Column] = [
    ("path", "path"), ("dtype", "dtype"), ("cache", "cache"), ("offset", "offset"), ("gap", "gap"),
    ("passkey", lambda r: f"{r['correct']}/{r['keys']}"), ("exact", lambda r: f"{r['exact']}/{r['keys']}"),
    ("floor", lambda r: f"{r['floor']}/{r['keys']}"),
]


def _load(model: str, recipes: Sequence[str], stacks: Sequence[str], default: Sequence[str], model_dtype: str | None,
          device: str | None, device_map: str | None) -> tuple[Any, list[str]]:
    """The loaded model and the paths: the presets asked, then the stacks asked that run its rope type."""
    from ..effect.real import load_real_model
    from ..rope import select_stacks

    if stderr_is_tty():
        click.echo(f"loading {model} (transformers; a 135M model takes ~20 s on 2 cores) ...", err=True)
    try:
        rm = load_real_model(model, model_dtype or "float32", device or "cpu", device_map)
    except ImportError as e:  # a package the model's format needs (gguf, transformers, accelerate): one line
        raise click.UsageError(str(e).splitlines()[0] if str(e) else f"{type(e).__name__} loading {model}") from None
    if not stacks:
        return rm, list(recipes or default)
    return rm, [*recipes, *select_stacks(stacks, [s.scaling for s in rm.schedules])[0]]


def _notes(rm: Any) -> None:
    """What the tool changed to run the model here (eager attention where SDPA refuses): one line each, stderr."""
    for note in rm.notes:
        click.echo(f"note: {note}", err=True)


def run_model_effect(model: str, recipes: Sequence[str], stacks: Sequence[str], dtypes: Sequence[str],
                     offsets: Sequence[int], gaps: Sequence[int], *, model_dtype: str | None, device: str | None,
                     device_map: str | None, tokens: int | None, text_file: str | None, keys: int | None,
                     plot: str | None, as_json: bool) -> None:
    """Load the model, measure every path, print the two tables (or one JSON object); defaults where None/empty."""
    from ..effect.measures import (DEFAULT_KEYS, DEFAULT_MODEL_OFFSETS, DEFAULT_MODEL_PATHS, DEFAULT_TOKENS,
                                   default_gaps, measure_model, runs)

    text = None
    if text_file is not None:
        try:
            with open(text_file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise click.BadParameter(f"{text_file}: cannot read: {e.__class__.__name__}: {e}",
                                     param_hint="'--text'") from None
    rm, paths = _load(model, recipes, stacks, DEFAULT_MODEL_PATHS, model_dtype, device, device_map)
    tokens = DEFAULT_TOKENS if tokens is None else tokens
    dtypes, offsets, gaps = dtypes or ("bfloat16",), offsets or DEFAULT_MODEL_OFFSETS, gaps or default_gaps(tokens)
    with progress_bar(runs(rm, paths, dtypes, offsets, tokens, gaps), "cos/sin tables") as bar:
        text_rows, key_rows = measure_model(rm, paths, dtypes, offsets, tokens=tokens, text=text, gaps=gaps,
                                            keys=keys or DEFAULT_KEYS, progress=bar.update)
    _notes(rm)
    if plot:
        from ..report.effect import plot_model_effect

        plot_model_effect(text_rows, key_rows, plot)
    t = [r.to_dict() for r in text_rows]
    k = [r.to_dict() for r in key_rows]
    if as_json:
        paths = [{"module": p.module, "layer_type": p.layer_type, "schedule": p.schedule.describe(),
                  "layout": p.layout, "reach": p.reach} for p in rm.paths]
        echo_json({"auditor": "effect-model", "model": rm.name, "schedule": rm.describe(), "rotary_paths": paths,
                   "model_dtype": rm.dtype, "text": t, "passkey": k})
        return
    click.echo(f"{rm.name}: {rm.describe()}; trained context {rm.context}; weights in {rm.dtype}\n")
    if t:
        echo_table(t, TEXT_COLUMNS + (DTYPE_COLUMNS if rm.dtype != "float32" else []))
        click.echo("")
    if k:
        echo_table(k, KEY_COLUMNS + ([("exact fp32 weights", lambda r: f"{r['dtype_exact']}/{r['keys']}")]
                                     if rm.dtype != "float32" else []))
        click.echo("")
    click.echo(textwrap.fill(
        "Each row: the model with the path's stored cos/sin against its own run with exact cos/sin (float64 angles) "
        "at the same positions (offset = the first token's position).  KL: mean KL(exact || path) per token, nats "
        "(over the window, its second half: tokens that see half the window back, the 99th percentile and the "
        "largest of one token); "
        "top-1: next-token argmax agrees with the exact run; dNLL: change of the text's NLL per token; passkey: keys "
        "retrieved `gap` tokens of the text after the key's sentence (one window per key: the sentence, then the "
        "text, whose first row the text columns read).  floor: exact cos/sin merely stored in the cache format (what that "
        "format costs anyway); a path near its floor costs nothing more.", 115))


def model_calibration(model: str, recipes: Sequence[str], stacks: Sequence[str], dtypes: Sequence[str],
                      lengths: Sequence[int], gaps: Sequence[int], *, model_dtype: str | None, device: str | None,
                      device_map: str | None, tokens: int | None, keys: int | None, as_json: bool) -> None:
    """The real model's calibration table (lengths from --offset, distances 1 and --gap)."""
    from ..effect.model_calibration import (MODEL_CALIBRATION_DISTANCES, MODEL_CALIBRATION_LENGTHS, calibrate_model,
                                            model_inconsistent)

    if len(dtypes) > 1:
        raise click.BadParameter("the calibration runs one dtype", param_hint="'--dtype'")
    dists = [1, *gaps] if gaps else list(MODEL_CALIBRATION_DISTANCES)
    lens = list(lengths or MODEL_CALIBRATION_LENGTHS)
    rm, paths = _load(model, recipes, stacks, ("lowp", "lowp-inv-freq", "fp32"), model_dtype, device, device_map)
    with progress_bar(len(lens) * len(dists) * (len(paths) + 2), "cos/sin tables") as bar:
        rows = calibrate_model(rm, paths, lens, dists, dtypes[0] if dtypes else "bfloat16",
                               tokens=512 if tokens is None else tokens, keys=keys or 2, progress=bar.update)
    _notes(rm)
    bad = model_inconsistent(rows)
    emit("effect-model-calibration", rows, as_json, [
        ("path", "path"), ("dtype", "dtype"), ("length", "length"), ("distance", "distance"),
        ("pair err", "pair_max_error"), ("resolved", "pair_resolved_error"), ("colliding", "colliding"),
        ("measure", "measure"), ("value", _pc("value")), ("exact", _pc("exact")), ("floor", _pc("floor")),
        ("loss", lambda r: f"{100 * r['loss']:+.1f}"),
        ("KL 2nd half", lambda r: "-" if r["kl"] is None else f"{r['kl']:.2e}"),
        ("floor", lambda r: "-" if r["floor_kl"] is None else f"{r['floor_kl']:.2e}"), ("verdict", "verdict")],
        footer=textwrap.fill(
            f"{rm.name}: pair err: max pairwise rotation error (rad) between positions `distance` apart, positions "
            "< length (resolved: in the frequency pairs that turn at most 4 times across that distance); the "
            "model's input ends at the length: top-1 agreement with its exact-RoPE run on text (distance 1; loss = "
            "floor - value; KL: mean per token over the window's second half, beside the floor's) or pass keys "
            "retrieved `distance` tokens back (loss = exact - value); verdict: precision_audit.verdicts on that "
            "distance alone.  Inconsistent rows (broken while the model loses <= 2 points, safe or degraded while it "
            f"loses >= 5): {len(bad)}.", 115),
        extra={"model": rm.name, "inconsistent": [r.to_dict() for r in bad]})
