"""Commands about a model: ``config``, ``report`` and the live transformers audits ``hf-rope``, ``hf-scan``,
``hf-alibi`` (transformers imported lazily, only by these)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from .. import verdicts as _verdicts
from ..alibi import RECIPES as _ALIBI_RECIPES
from ..rope import PRESETS as _ROPE_PRESETS
from ._shared import fail_on as judge_rows
from ..render import bound_notes, worst_pair
from ._shared import (DTYPE, DTYPE_HELP, JSON_HELP, LENGTH, AuditCommand, Column, bottom_line_text,
                      distance_options, distances_from_options, echo_json, echo_table, emit, pct, progress_bar,
                      stack_option, wide_option)
from .vision import vision_audit, vision_options
from .weights import WEIGHTS_HELP, weights_effects, weights_lines

# --- report -----------------------------------------------------------------------------------


def _load_model(model: str | None, model_type: str | None, online: bool = False) -> Any:
    """The model description a MODEL (config.json, .gguf, Hub id) or --model-type names (None: the headline
    report); a model that cannot be read is a usage error naming it."""
    if not (model or model_type):
        return None
    if model:
        from ..config import load_model

        try:
            return load_model(model, online=online)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'MODEL'") from None
    from ..hf import default_model_config

    return default_model_config(str(model_type))


def _write_report(spec: Any, dtypes: tuple[str, ...], max_length: int | None, out: str,
                  progress: Callable[[str], None], stacks: Sequence[str] | None = None) -> list[Any]:
    """Build the headline (``spec`` None) or the model report and write its files into ``out``."""
    from ..report.writer import output_dir, write_into

    with output_dir(out) as tmp:
        if spec is None:
            from ..report.headline import DEFAULT_MAX_LENGTH, headline_report

            rep = headline_report(max_length or DEFAULT_MAX_LENGTH, dtypes or None, progress)
        else:
            from ..report.model import model_report

            rep = model_report(spec, dtypes or None, max_length, progress, stacks=stacks)
        return write_into(rep, tmp, progress)


def _report_stacks(spec: Any, stacks: tuple[str, ...]) -> list[str] | None:
    """Check --stack against the model (exit 2 naming the stack that cannot run it); None: the default stacks."""
    if not stacks:
        return None
    if spec is None:
        raise click.BadParameter("stacks are audited for a model: give MODEL or --model-type",
                                 param_hint="'--stack'")
    model = spec
    _rope_only(model, "--stack")
    _model_stacks(model, stacks)
    return list(stacks)


def _deprecated(old: str, new: str) -> Callable[[Any, Any, Any], Any]:
    """A callback that notes on stderr, when the option is given, that ``old`` is deprecated for ``new``."""

    def note(ctx: Any, param: Any, value: Any) -> Any:
        if value is not None:
            click.echo(f"note: {old} is deprecated; write `{new}` (as `config MODEL` does)", err=True)
        return value

    return note


ONLINE_HELP = ("A Hub id missing from the local cache: fetch its config.json from the Hub (one request, no "
               "retries, 10 s at most).  Without it a Hub id is read from the local cache only.")


@click.command("report", cls=AuditCommand)
@click.argument("model", metavar="[MODEL]", required=False, default=None)
@click.option("--model", "--config", "old_model", default=None, metavar="MODEL", hidden=True,
              callback=_deprecated("--model/--config MODEL", "precision-audit report MODEL -o DIR"),
              help="Deprecated spelling of the MODEL argument.")
@click.option("--model-type", "-m", default=None, metavar="TYPE",
              help="A transformers model type (llama, qwen2, bloom, ...): its default config (needs transformers; "
                   "nothing is downloaded).")
@stack_option("[default: with a model, every stack that runs it (a GGUF file: llama.cpp's)]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True,
              help=DTYPE_HELP + "  [default: headline: each section's own; model: the config's dtype, else "
                   "bfloat16]")
@click.option("--max-length", type=LENGTH, default=None, metavar="LENGTH",
              help="Headline: the longest context audited [default: 1M]. Model: replaces its maximum context "
                   "(the verdict checks it, 2x and 4x).")
@click.option("--out", "-o", "out", type=click.Path(file_okay=False, writable=True), default=None, metavar="DIR",
              help="Folder for report.md, report.html, results.json and the PNGs (created; files replaced).  "
                   "[required]")
@click.option("--online", is_flag=True, help=ONLINE_HELP)
@click.option("--quiet", "-q", is_flag=True, help="No progress messages on stderr.")
def report_cmd(model: str | None, old_model: str | None, model_type: str | None, stacks: tuple[str, ...],
               dtypes: tuple[str, ...], max_length: int | None, out: str | None, online: bool, quiet: bool) -> None:
    """Write a report: report.md, a self-contained report.html, results.json and the figures.

    MODEL is named as `config` names it: a config.json (or its folder), a
    llama.cpp .gguf file (metadata only) or a Hub id ORG/NAME[@REVISION]
    (its config.json, from the local cache; --online fetches it).  Without
    MODEL or --model-type: the project's headline report (position ids, RoPE
    recipes, attention logits, ALiBi, sinusoidal encodings); `-o figures/`
    regenerates the committed figures.  With a model: first the bottom line
    (per stack and dtype, the longest safe context and the fix, as `config`
    prints it), then a verdict per code path at its maximum context and at
    2x/4x, then its own figures.  Two runs write byte-identical files.
    (`--model MODEL --out DIR`, the old spelling, still works, with a note.)

    Example: precision-audit report tests/data/llama-3.1-8b.json -o report/
    """
    import sys

    if model and old_model:
        raise click.UsageError("give MODEL once: as the argument (`report MODEL -o DIR`), not also as --model")
    model = model or old_model
    if out is None:
        raise click.UsageError("give the output folder: -o DIR (--out DIR), e.g. `report MODEL -o report/`")
    if model and model_type:
        raise click.UsageError("give MODEL or --model-type, not both")
    if max_length is not None and not 256 <= max_length <= 2**24:
        raise click.BadParameter(f"{max_length} is not in 256 .. 16M (2**24)", param_hint="'--max-length'")
    show = not quiet and sys.stderr.isatty()

    def progress(text: str) -> None:
        if show:
            click.echo(f"report: {text}", err=True)

    if stacks and not (model or model_type):
        _report_stacks(None, stacks)
    spec = _load_model(model, model_type, online)
    paths = _write_report(spec, dtypes, max_length, out, progress, _report_stacks(spec, stacks))
    click.echo(f"wrote {len(paths)} files into {out}: " + ", ".join(p.name for p in paths))


# --- config -----------------------------------------------------------------------------------

# the paths --fail-on judges when no --recipe is named: the code the model runs as built
_JUDGED = {"alibi": ("fp32",), "relative": ("transformers",), "learned": ("arange", "mask-int64")}
_KIND_WORDS = {"rope": "RoPE", "alibi": "ALiBi", "relative": "relative positions", "learned": "learned positions"}


def _rope_only(model: Any, option: str) -> None:
    """A usage error naming ``option`` when the model is not a RoPE model (stacks model RoPE code paths)."""
    if model.kind != "rope":
        raise click.BadParameter(f"stacks model RoPE code paths; {model.name} uses {_KIND_WORDS[model.kind]}",
                                 param_hint=f"'{option}'")

RELATIVE_VERDICT_HELP = (
    "Verdict per row: relative buckets: broken = a distance moves 2 or more buckets or has none (overflow), "
    "degraded = distances move one bucket, safe = every bucket exact; relative sinusoids: broken = distances "
    "share a stored row, degraded = a row's nearest neighbour more than half-way closer; learned ids: broken "
    "= tokens share an id, degraded = wrong but distinct ids, safe = every id exact.\nchanged = distances "
    "0..L-1 whose bucket differs from the exact one (relative buckets), distances sharing a stored row "
    "(relative sinusoids) or wrong ids (learned); '-' = not measured.")
CONFIG_VERDICT_HELP = _verdicts.rules_text()
"""The verdict key under `config`'s table (precision_audit.verdicts states the rules; this prints them)."""


def _config_path(ctx: Any, param: Any, value: str) -> Any:
    from ..config import load_model

    try:
        return load_model(value, online=bool(ctx.params.get("online")))
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _check_config_lengths(model: Any, lens: tuple[int, ...], given: bool) -> None:
    """Fail at once (before the bar) on a length the model's auditor cannot run; hint at --length if defaulted."""
    try:
        if model.kind == "rope":
            from ..rope import check_rope_lengths

            check_rope_lengths(lens)
        elif model.kind == "alibi":
            from ..checks import check_lengths
            from ..alibi import MAX_ALIBI_LENGTH

            check_lengths(lens, limit=MAX_ALIBI_LENGTH, why="the ALiBi audit streams L x heads biases")
        else:
            from ..checks import check_lengths

            check_lengths(lens)
    except ValueError as e:
        ext = ", 2x and 4x" if len(lens) > 1 else " (alone, above 2**22)"
        hint = "" if given else f"; the default lengths are the config's context {lens[0]}{ext}: give --length"
        raise click.UsageError(f"{e}{hint}") from None


def _config_columns(model: Any, dicts: Sequence[dict[str, Any]]) -> list[Column]:
    """The config table's columns: the layer column only when rows carry one, RoPE or ALiBi figures."""
    cols: list[Column] = [("dtype", "dtype"), ("length", "length"), ("component", "component")]
    if any(r["layer_type"] for r in dicts):
        cols.append(("layer", "layer_type"))
    cols.append(("recipe", "recipe"))
    if model.kind == "rope":
        cols += [("max rot err", "max_rotation_error"), ("mean rot err", "mean_rotation_error"),
                 ("x cache bound", lambda r: None if r["ratio"] is None else f"{r['ratio']:.3g}")]
    elif model.kind in ("relative", "learned"):
        return cols + [("changed", "changed"), ("first changed", "first_changed"), ("max shift", "max_shift"),
                       ("max |err|", "max_abs_error"), ("colliding", "colliding_positions"), ("verdict", "verdict")]
    else:
        cols += [("min distinct", "min_distinct_biases"), ("max |err|", "max_abs_error"),
                 ("max dP", "max_prob_change")]
    cols += [("max run", "max_run"), ("colliding", "colliding_positions"), ("verdict", "verdict")]
    if model.kind == "rope":
        cols.append(("worst pair err", worst_pair))
    return cols


def _print_config(model: Any, dicts: Sequence[dict[str, Any]], tolerance: float, summaries: Sequence[Any],
                  skipped: Sequence[str], extra: Sequence[str] = ()) -> None:
    """The model's description (and ``extra`` lines), the bottom line, the table, the verdict key and the stacks
    left out."""
    from ..config import context_note

    note = context_note(model)
    click.echo(model.describe() + (f"\nnote: {note}" if note else "") + "".join(f"\n{x}" for x in extra) + "\n")
    if not dicts:
        click.echo("No stack named runs this model." + "".join(f"\nskipped: {why}" for why in skipped))
        return
    if summaries:
        click.echo(bottom_line_text(summaries) + "\n")
    echo_table(dicts, _config_columns(model, dicts))
    if model.kind in ("relative", "learned"):
        click.echo("\n" + RELATIVE_VERDICT_HELP)
        return
    click.echo("\n" + _verdicts.rules_text(tolerance) +
               "\ncolliding = positions whose cos/sin row (rope), id (positions) or bias (alibi, worst head) "
               "equals the previous one's; '-' = not measured for that component."
               + ("\nworst pair err = the largest pairwise rotation error (rad) between positions D apart, over "
                  "the distances audited (--distance); --json has each distance's." if model.kind == "rope" else "")
               + bound_notes(dicts)
               + "".join(f"\nskipped: {why}" for why in skipped))


def _model_stacks(model: Any, stacks: Sequence[str]) -> tuple[list[str], list[str]]:
    """:func:`precision_audit.config.model_stacks` with an unknown stack name as a usage error (a stack that
    cannot run the model is left out with its reason)."""
    from ..config import model_stacks

    try:
        return model_stacks(model, stacks or None)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--stack'") from None


def _config_paths(model: Any, stacks: Sequence[str], recipes: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """The stacks to run, the reasons stacks were left out, and the code paths --fail-on and the bottom line judge.

    RoPE: the stacks named (``all`` = every stack that runs the model), else none when recipes are named, else
    every stack (llama.cpp's for a GGUF file); judged: the stacks named, else transformers as built (llama.cpp CPU
    for a GGUF file), plus the recipes named.  ALiBi: the recipes named, else the fp32 recipe.
    """
    if model.kind != "rope":
        if stacks:
            _rope_only(model, "--stack")
        return [], [], list(recipes) or list(_JUDGED[model.kind])
    names, skipped = ([], []) if recipes and not stacks else _model_stacks(model, stacks)
    judged = [n for n in names if stacks] or ([] if recipes else
                                              [("llama.cpp-cpu" if model.origin == "gguf" else "transformers")])
    return names, skipped, [*judged, *recipes]


@click.command("config", cls=AuditCommand)
@click.argument("model", metavar="MODEL", callback=_config_path)
@click.option("--online", is_flag=True, is_eager=True, help=ONLINE_HELP)
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K, 1M; RoPE at most 64M.  "
                   "[default: the config's context, 2x and 4x]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True,
              help=DTYPE_HELP + "  [default: the config's torch_dtype, bfloat16 if it names none]")
@stack_option("[default: every stack that runs the model (a GGUF file: llama.cpp's), unless --recipe]")
@click.option("--recipe", "-r", "recipes", multiple=True, metavar="NAME",
              help="Code path (repeatable): RoPE presets " + ", ".join(_ROPE_PRESETS) + " (what-if paths: lowp = "
                   "positions and angles in the dtype, lowp-inv-freq = a downcast inv_freq buffer, fp32 = the fix, "
                   "fp64 = beyond it); ALiBi recipes " + ", ".join(_ALIBI_RECIPES) + "; relative buckets "
                   "(T5, DeBERTa) transformers, lowp, cast-distance; XLNet sinusoids transformers, arange-dtype, "
                   "positions-dtype; learned ids arange, mask-int64, mask-cumsum, mask-scan.  [default: RoPE none (the "
                   "stacks), others all]")
@click.option("--engine", type=click.Choice(["numpy", "torch"]), default="numpy", show_default=True,
              help="numpy: every operation correctly rounded; torch: this machine's torch kernels (RoPE presets and "
                   "positions; stacks and ALiBi run numpy).")
@click.option("--tolerance", type=click.FloatRange(min=0.0, min_open=True), default=8.0, show_default=True,
              help="ALiBi: degraded when a head's bias error exceeds TOLERANCE half-ulps of its largest bias (RoPE is "
                   "judged on pairwise errors, see the verdict key).")
@click.option("--no-positions", is_flag=True, help="Leave out the position-id rows.")
@click.option("--fail-on", type=click.Choice(["never", "broken", "degraded"]), default="never", show_default=True,
              help="Exit 1 when a judged row is this bad or worse, printing each on stderr with why (for CI).  "
                   "Judged: the stacks named with --stack, else transformers as built (a GGUF file: llama.cpp "
                   "CPU); plus the recipes named with --recipe (ALiBi: else fp32).")
@click.option("--trained-on", "trained_on", default=None, metavar="STACK",
              help="The stack the model was trained with (a training stack such as torchtune, or transformers): "
                   "also compare every serving stack audited with what that stack stores, the angles the model "
                   "learned, rounding included.  [default: none]")
@click.option("--weights", default=None, metavar="PATH", help=WEIGHTS_HELP)
@vision_options
@distance_options
@wide_option
@click.option("--json", "as_json", is_flag=True,
              help='Print {"auditor": "config", "model": {...}, "summary": [...], "results": [row, ...]} as JSON '
                   '(with --trained-on also "trained_on": {"stack", "summary", "results"}).')
def config_cmd(model: Any, online: bool, lengths: tuple[int, ...], dtypes: tuple[str, ...], stacks: tuple[str, ...],
               recipes: tuple[str, ...], engine: str, tolerance: float, no_positions: bool, fail_on: str,
               trained_on: str | None, weights: str | None, image: Any, video: Any, text_tokens: int,
               distances: tuple[int, ...], no_pairs: bool, as_json: bool) -> None:
    """Is my model safe?  Audit a model from its description: the code paths it runs on, per dtype and length.

    MODEL is a Hugging Face config.json (or a directory holding one), a
    llama.cpp .gguf file (its metadata: never a weight), or a Hub id
    ORG/NAME[@REVISION] (its config.json only, from the local cache;
    --online fetches it from the Hub; needs the [hub] extra).  Nothing is executed.
    The output opens with the bottom line: per stack (the code a serving or
    training stack runs, written from its source) and dtype, the longest
    audited context that is safe and the fix where one is known; the table
    follows.  A stack that computes another schedule than the config
    declares is named as such.  By default at the model's context and 2x,
    4x (context extension; 2K when the config declares none), in the dtype
    the config was saved in (torch_dtype; bfloat16 if it names none).  T5 /
    DeBERTa buckets, XLNet relative sinusoids and learned absolute positions
    (GPT-2, BERT, OPT) get their own paths and a bottom line too.

    Verdicts judge what attention sees, the rotation between two positions
    (pairwise errors at distances 1, 16, 256, 4K and L/2); the bottom line
    says what is lost and from where.

    VERDICT_RULES

    With --weights the model itself runs too (e.g. --weights smollm2 for a SmolLM2 config or GGUF):
    each stack's cos/sin injected, its text predictions and pass keys against its own exact-RoPE run.

    Example: precision-audit config tests/data/llama-3.1-8b.json --length 128K
    """
    from ..bottomline import bottom_line
    from ..config import (audit_config, context_note, default_dtype, default_lengths, model_paths, stack_notes,
                          work_to_scan)
    from ..config.layers import temperature_lines

    dts = dtypes or (default_dtype(model),)
    if image or video:
        return vision_audit(model, image, video, text_tokens, stacks, dts, as_json)
    asked = distances_from_options(distances, no_pairs)
    lens = tuple(lengths) or default_lengths(model)
    _check_config_lengths(model, lens, bool(lengths))
    names, skipped, judged = _config_paths(model, stacks, recipes)
    rows = []
    if names or recipes or model.kind != "rope":  # else every stack named was left out (skipped says why)
        total = work_to_scan(model, lens, dts, recipes or None, names)
        with progress_bar(total, f"{model.kind} positions", enabled=total >= 2**18) as bar:
            rows = audit_config(model, lens, dts, recipes=recipes or None, stacks=names, engine=engine,
                                tolerance=tolerance, positions=not no_positions, progress=bar.update,
                                distances=asked)
    dicts = [r.to_dict() for r in rows]
    paths = [*names, *recipes] if model.kind == "rope" else list(recipes) or list(model_paths(model))
    summaries = bottom_line([r for r in rows if r.component != "positions" and r.recipe in paths], key="recipe",
                            kind=model.kind, notes=stack_notes(model, names) if model.kind == "rope" else None)
    trained = _against_training(model, names, trained_on, lens, dts) if trained_on else None
    measured = weights_effects(weights, model, names, dts, max(lens)) if weights else None
    temperature = temperature_lines(getattr(model, "layers", None), dts, max(lens))
    if as_json:
        echo_json({"auditor": "config", "model": model.to_dict(), "context_note": context_note(model),
                   **({"attention_temperature": temperature} if temperature else {}),
                   "engine": engine, "tolerance": tolerance, "summary": [s.to_dict() for s in summaries],
                   "skipped": skipped, "results": dicts, **({"trained_on": trained} if trained else {}),
                   **({"weights": measured} if measured else {})})
    else:
        _print_config(model, dicts, tolerance, summaries, skipped, temperature)
        if trained:
            click.echo(f"\nAgainst the stack it was trained on ({trained['label']}): the rotation difference from "
                       "the cos/sin it stored, judged as above:")
            click.echo("\n".join("  " + s for s in trained["lines"]))
        if measured:
            click.echo("\n" + "\n".join(weights_lines(measured)))
    judge_rows([r for r in rows if r.component != "positions"], fail_on, judged)


def _against_training(model: Any, names: Sequence[str], trained_on: str, lens: Sequence[int],
                      dts: Sequence[str]) -> dict[str, Any]:
    """``--trained-on``: every serving stack audited against the training stack (a usage error if it is unknown
    or does not run the model)."""
    from dataclasses import replace

    from ..bottomline import bottom_line
    from ..config import training_differences
    from ..rope import STACKS

    _rope_only(model, "--trained-on")
    serving = [n for n in names if "serve" in STACKS[n].roles and n != trained_on]
    try:
        rows = training_differences(model, serving, trained_on, lens, dts)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--trained-on'") from None
    label = STACKS[trained_on].label
    summaries = [replace(s, label=f"{s.label} against {label}") for s in bottom_line(rows, key="recipe")]
    return {"stack": trained_on, "label": label, "summary": [s.to_dict() for s in summaries],
            "results": [r.to_dict() for r in rows], "lines": [str(s) for s in summaries]}


# --- live code: transformers' rotary modules and ALiBi builders (precision_audit.hf) ---------------


class _HfCommand(AuditCommand):
    """A command that needs transformers: without it, exit 2 with the install hint."""

    def invoke(self, ctx: click.Context) -> Any:
        from ..hf import TransformersMissing

        try:
            return super().invoke(ctx)
        except TransformersMissing as e:
            raise click.UsageError(str(e), ctx) from None


def _read_config(ctx: Any, param: Any, value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        with open(value, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as e:
        raise click.BadParameter(f"cannot read {value!r}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise click.BadParameter(f"{value!r} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{value!r} must hold a JSON object (a config.json)")
    return data


HF_ROPE_VERDICT_HELP = _verdicts.rules_text()


def _deprecated_config(ctx: Any, param: Any, value: str | None) -> dict[str, Any] | None:
    _deprecated("--config PATH", "precision-audit hf-rope MODEL")(ctx, param, value)
    return _read_config(ctx, param, value)


@click.command("hf-rope", cls=_HfCommand)
@click.argument("model", metavar="[MODEL]", required=False, default=None, callback=_read_config)
@click.option("--model-type", "-m", default=None, metavar="TYPE",
              help="transformers model type (llama, qwen2, gemma3_text, ...).  [default: the config's model_type]")
@click.option("--config", "config", default=None, callback=_deprecated_config, metavar="PATH", hidden=True,
              help="Deprecated spelling of the MODEL argument.")
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K.  [default: 8k]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, default=("bfloat16",), show_default=True,
              help="dtype of x, hence of the cos/sin the module returns (and of the cast); repeatable.")
@click.option("--cast-module", is_flag=True, help="Apply module.to(DTYPE) first, as model.to(DTYPE) does.")
@click.option("--layer-type", default=None, metavar="NAME",
              help="Layer type of a per-layer-type module (Gemma: full_attention, sliding_attention).  "
                   "[default: every one]")
@click.option("--class", "class_name", default=None, metavar="NAME",
              help="Rotary class of the model type's modeling module.  [default: its first text *RotaryEmbedding]")
@click.option("--fail-on", type=click.Choice(["never", "broken", "degraded"]), default="never", show_default=True,
              help="Exit 1 when a module row is this bad or worse, printing each on stderr with why (for CI).")
@distance_options
@wide_option
@click.option("--json", "as_json", is_flag=True,
              help='Print {"auditor": "hf-rope", "summary": [...], "results": [row, ...]} as JSON.')
def hf_rope_cmd(model: dict[str, Any] | None, model_type: str | None, config: dict[str, Any] | None, lengths: tuple[int, ...],
                dtypes: tuple[str, ...], cast_module: bool, layer_type: str | None, class_name: str | None,
                fail_on: str, distances: tuple[int, ...], no_pairs: bool, as_json: bool) -> None:
    """Audit the rotary module transformers builds for a model type (no weights, no downloads).

    Calls the module for positions 0..L-1 with x in DTYPE and measures its
    cos/sin against the exact angles of the schedule its config declares;
    "matches" names the rope recipe with the same figures (e.g. lowp-inv-freq:
    the inv_freq buffer was cast to DTYPE).  The output opens with the bottom
    line per module and dtype: the longest length audited that is safe, and
    the fix (a module whose buffer the cast downcast: keep_rotary_fp32).
    MODEL is a config.json (parsed, never executed) [default: the model
    type's default config].

    VERDICT_RULES

    Example: precision-audit hf-rope --model-type llama --length 32K --cast-module
    """
    from ..hf import audit_model_type, module_bottom_line

    if model is not None and config is not None:
        raise click.UsageError("give MODEL once: as the argument (`hf-rope MODEL`), not also as --config")
    config = model if model is not None else config
    if model_type is None:
        if config is None or not isinstance(config.get("model_type"), str):
            raise click.UsageError("give --model-type (or a MODEL config.json whose model_type names it)")
        model_type = config["model_type"]
    lengths = lengths or (8192,)
    asked = distances_from_options(distances, no_pairs)
    rows = [row for dtype in dict.fromkeys(dtypes)
            for row in audit_model_type(model_type, lengths, dtype=dtype, cast_module=cast_module, config=config,
                                        layer_type=layer_type, class_name=class_name, distances=asked)]
    summaries = module_bottom_line(rows)
    cols: list[Column] = [
        ("model type", "model_type"), ("class", "class"), ("layer", "layer_type"), ("dtype", "dtype"),
        ("length", "length"), ("cast", "cast_module"), ("inv_freq in", "inv_freq_dtype"),
        ("max rot err", "max_rotation_error"), ("mean rot err", "mean_rotation_error"),
        ("x cache bound", lambda r: f"{r['ratio']:.3g}"), ("colliding", "colliding_positions"),
        ("matches", "matches_recipe"), ("verdict", "verdict"), ("worst pair err", worst_pair),
    ]
    schedules = "; ".join(dict.fromkeys(f"{r.layer_type + ': ' if r.layer_type else ''}{r.schedule}" for r in rows))
    diagnoses = "; ".join(dict.fromkeys(f"{r.matches_recipe} = {r.diagnosis}" for r in rows))
    if not as_json:
        click.echo(bottom_line_text(summaries) + "\n")
    emit("hf-rope", rows, as_json, cols, extra={"summary": [s.to_dict() for s in summaries]},
         footer=f"\nSchedule from the config: {schedules}.\nErrors in rad against the exact m*theta_i, wrapped to "
                f"[-pi, pi]; matches = the rope preset with the closest max/mean error: {diagnoses}.\n"
                "worst pair err = the largest pairwise rotation error between positions D apart over the "
                "distances audited (--distance); --json has each distance's.\n"
                + HF_ROPE_VERDICT_HELP)
    judge_rows([{**r.to_dict(), "module": f"{r.module_class} " + ("after module.to(dtype)" if r.cast_module
                                                                  else "as built")} for r in rows],
               fail_on, None, key="module")


def _scan_note(r: dict[str, Any]) -> str:
    if r["status"] == "audited":  # the cast match is its own column
        return "phase lost" if "phase lost" in r["reason"] else ""
    return r["reason"] if len(r["reason"]) <= 80 else r["reason"][:77] + "..."


def _scan_summary(rows: Sequence[Any], fix: bool) -> dict[str, int]:
    """Rows per verdict (skipped included) and, with ``fix``, how many cast-damaged ones the fix restored."""
    from collections import Counter

    counts = Counter(r.verdict or "skipped" for r in rows)
    summary = {v: counts.get(v, 0) for v in ("safe", "damaged by the cast", "damaged as built", "skipped")}
    if fix:
        damaged = [r for r in rows if r.verdict == "damaged by the cast"]
        summary["restored by the fix"] = sum(bool(r.fix_restored) for r in damaged)
    return summary


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _print_scan(blocks: Sequence[tuple[str, int, Sequence[Any]]], classes: int, fix: bool) -> None:
    """Per (dtype, length) block the scan table and its verdict counts; then the column key."""
    import transformers

    cols: list[Column] = [
        ("model type", "model_type"), ("class", "class"), ("layer", "layer_type"), ("status", "status"),
        ("built max", "built_max_rotation_error"), ("cast max", "cast_max_rotation_error"),
        ("cast mean", "cast_mean_rotation_error"), ("threshold", "threshold"), ("cast matches", "cast_matches_recipe"),
        ("verdict", "verdict"), ("note / reason skipped", _scan_note),
    ]
    if fix:
        cols[-1:-1] = [("fixed max", "fix_max_rotation_error"),
                       ("fix = built", lambda r: {True: "yes", False: "NO", None: "-"}[r["fix_restored"]])]
    for i, (dtype, length, rows) in enumerate(blocks):
        if i:
            click.echo("")
        echo_table([r.to_dict() for r in rows], cols)
        summary = _scan_summary(rows, fix)
        click.echo(f"\n{_count(len(rows), 'row', 'rows')} ({_count(classes, 'class', 'classes')} of transformers "
                   f"{transformers.__version__}; per-layer-type modules give one row per layer type) "
                   f"at length {length}, {dtype}: " + ", ".join(f"{n} {v}" for v, n in summary.items()) + ".")
    click.echo("Errors in rad against the exact m*theta_i of the config's schedule; threshold = 2 x the fp32 recipe's "
               "max + one float32 ulp of each frequency per position."
               + ("  fixed = keep_rotary_fp32(module) before the cast; fix = built: its errors equal the as-built "
                  "ones exactly." if fix else ""))


def _check_families(families: Sequence[str], found: Sequence[Any]) -> None:
    """Exit 2 naming a --family that is no transformers.models package (close matches) or has no rotary class."""
    import pkgutil

    import transformers.models

    from ..checks import unknown_name
    from ..hf import MODEL_TYPES_HINT

    packages = [i.name for i in pkgutil.iter_modules(transformers.models.__path__) if i.ispkg]
    for f in families:
        if f not in packages:
            raise click.BadParameter(unknown_name("package", f, packages, where="in transformers.models",
                                                  hint=MODEL_TYPES_HINT), param_hint="'--family'")
    missing = sorted(set(families) - {f.package for f in found})
    if missing:
        raise click.BadParameter(f"no *RotaryEmbedding class in {', '.join(missing)}", param_hint="'--family'")


def _list_classes(found: Sequence[Any], as_json: bool) -> None:
    """``hf-scan --list``: the rotary classes a scan would audit (package, class, module), without auditing."""
    rows = [{"package": f.package, "class": f.name, "module": f.module, "error": f.error} for f in found]
    if as_json:
        echo_json({"auditor": "hf-scan", "results": rows})
        return
    echo_table(rows, [("package", "package"), ("class", "class"), ("module", "module")])
    click.echo(f"\n{len(rows)} classes in {len({f.package for f in found})} packages of transformers.models; "
               "a package's model type is its name for most models (see --model-type of hf-rope and report).")


@click.command("hf-scan", cls=_HfCommand)
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, default=("bfloat16",), show_default=True,
              help="Model dtype (repeatable): x and cos/sin in it, and the cast module.to(DTYPE).")
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, default=("8K",), show_default=True,
              help="Context length (repeatable): one block of rows per dtype and length.")
@click.option("--family", "families", multiple=True, metavar="PACKAGE",
              help="Only these transformers.models packages (repeatable: llama, qwen2, gemma3, ...).  [default: all]")
@click.option("--fix", is_flag=True,
              help="Audit each class a third time with precision_audit.fix.keep_rotary_fp32 applied before the "
                   "cast: the 'fixed' columns, and whether they equal the as-built errors.")
@click.option("--list", "as_list", is_flag=True,
              help="Only list the *RotaryEmbedding classes a scan audits (package, class, module).")
@wide_option
@click.option("--json", "as_json", is_flag=True,
              help='Print {"auditor": "hf-scan", "dtype": ..., "length": ..., "summary": {...}, "results": [row, '
                   '...]} as JSON (dtype and length: lists when several are given).')
def hf_scan_cmd(dtypes: tuple[str, ...], lengths: tuple[int, ...], families: tuple[str, ...], fix: bool,
                as_list: bool, as_json: bool) -> None:
    """Scan every *RotaryEmbedding class of the installed transformers.

    Each class is built from its model's default config (no weights, no
    downloads), audited as built and after .to(DTYPE), and given a verdict:
    safe, damaged by the cast, or damaged as built (max rotation error above
    2x the fp32 recipe's figure plus one float32 ulp of each frequency per
    position).  Classes that cannot be audited are listed as skipped with
    the reason.

    Example: precision-audit hf-scan --family llama --length 8K --dtype bfloat16
    """
    from ..hf import rotary_classes, scan

    found = rotary_classes(families or None)
    if families:
        _check_families(families, found)
    if as_list:
        _list_classes(found, as_json)
        return
    dtypes, lengths = tuple(dict.fromkeys(dtypes)), tuple(dict.fromkeys(lengths))
    blocks = []
    with progress_bar(len(found) * len(dtypes) * len(lengths), "rotary classes", enabled=True) as bar:
        for dtype in dtypes:
            for length in lengths:
                blocks.append((dtype, length, scan(dtype=dtype, length=length, classes=found, progress=bar.update,
                                                   fix=fix)))
    if as_json:
        rows = [r for _, _, b in blocks for r in b]
        echo_json({"auditor": "hf-scan", "dtype": dtypes[0] if len(dtypes) == 1 else list(dtypes),
                   "length": lengths[0] if len(lengths) == 1 else list(lengths),
                   "summary": _scan_summary(rows, fix), "results": [r.to_dict() for r in rows]})
        return
    _print_scan(blocks, len(found), fix)


@click.command("hf-alibi", cls=_HfCommand)
@click.option("--model-type", "-m", type=click.Choice(["bloom", "falcon", "mpt"]), required=True,
              help="Whose builder: Bloom's and Falcon's build_alibi_tensor, MPT's build_mpt_alibi_tensor.")
@click.option("--heads", "num_heads", type=click.IntRange(1, 4096), default=8, show_default=True,
              help="Number of attention heads.")
@click.option("--length", "-l", type=LENGTH, default="8K", show_default=True, help="Context length.")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, default=("bfloat16",), show_default=True,
              help="Model dtype (repeatable).")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def hf_alibi_cmd(model_type: str, num_heads: int, length: int, dtypes: tuple[str, ...], as_json: bool) -> None:
    """Run transformers' ALiBi builder and audit its bias next to the matching alibi recipe.

    The builder's bias for the last query of one sequence is measured with the
    alibi auditor's metrics; each alibi preset is built too, and the one that
    stores the same biases is audited alongside ("identical" = share of
    heads x keys with equal stored bias).

    Example: precision-audit hf-alibi --model-type falcon --heads 32 --length 8K --dtype float16
    """
    from ..hf import audit_alibi_builder

    rows: list[dict[str, Any]] = []
    notes = []
    for dtype in dict.fromkeys(dtypes):  # per dtype: the builder's row, then the matching recipe's
        row = audit_alibi_builder(model_type, num_heads, length, dtype)
        d = row.to_dict()
        rec = d.pop("recipe")
        rows += [{"source": f"{model_type} builder", **d},
                 {"source": f"recipe {row.matches_recipe} ({row.recipe_dtype})", "model_type": model_type, **rec}]
        notes.append(f"{row.builder} returns {row.bias_dtype} holding {row.value_format} values; "
                     f"{100 * row.identical_fraction:.2f} % of its {num_heads} x {length} biases equal recipe "
                     f"{row.matches_recipe} in {row.recipe_dtype}.")
    if as_json:
        echo_json({"auditor": "hf-alibi", "results": rows})
        return
    cols: list[Column] = [
        ("source", "source"), ("dtype", "dtype"), ("bias in", lambda r: r.get("value_format", r.get("bias_dtype"))),
        ("form", "form"), ("length", "length"), ("heads", "num_heads"), ("min distinct", "min_distinct_biases"),
        ("distinct %", pct("distinct_fraction")), ("max run", "max_run"), ("max |err|", "max_abs_error"),
        ("inversions", "order_inversions"), ("non-finite", "nonfinite_biases"), ("max dP", "max_prob_change"),
    ]
    echo_table(rows, cols)
    click.echo("\n" + "\n".join(notes))


for _cmd in (config_cmd, hf_rope_cmd):  # the rules as precision_audit.verdicts states them, kept as one paragraph
    _cmd.help = (_cmd.help or "").replace("VERDICT_RULES", _verdicts.rules_text())
