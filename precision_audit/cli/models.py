"""Commands about a model: ``config`` and ``report`` (the live transformers audits are in :mod:`.live`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from .. import verdicts as _verdicts
from ..alibi import RECIPES as _ALIBI_RECIPES
from ..rope import PRESETS as _ROPE_PRESETS
from ..rope.axial import PATHS as _AXIAL_PATHS
from ..rope.axial_centred import CENTRED_PATHS as _CENTRED_PATHS
from ..rope.axial_video import PATHS as _VIDEO_PATHS
from ..sinusoidal.grid2d import GRID_PATHS as _GRID_PATHS
from ..render import bound_notes, worst_pair
from ._shared import (DTYPE, DTYPE_HELP, LENGTH, AuditCommand, Column, bottom_line_text, distance_options,
                      distances_from_options, echo_json, echo_table, progress_bar, stack_option, wide_option)
from ._shared import fail_on as judge_rows
from .diffusion import diffusion_command
from .vision import vision_audit, vision_options
from .weights import WEIGHTS_HELP, weights_effects, weights_lines

# --- report -----------------------------------------------------------------------------------


def _load_model(model: str | None, model_type: str | None, online: bool = False) -> Any:
    """The model description a MODEL (config.json, .gguf, Hub id) or --model-type names (None: the headline
    report); a model that cannot be read is a usage error naming it."""
    if not (model or model_type):
        return None
    if model:
        return _read_model(model, online, "'MODEL'")
    from ..hf import default_model_config

    return default_model_config(str(model_type))


def _write_report(spec: Any, dtypes: tuple[str, ...], max_length: int | None, out: str,
                  progress: Callable[[str], None], stacks: Sequence[str] | None = None,
                  weights: str | None = None, vision: dict[str, Any] | None = None) -> list[Any]:
    """Build the headline (``spec`` None) or the model report and write its files into ``out`` (``weights``: a
    real model's section too)."""
    from dataclasses import replace

    from ..report.writer import output_dir, write_into

    with output_dir(out) as tmp:
        if spec is None:
            from ..report.headline import DEFAULT_MAX_LENGTH, headline_report

            rep = headline_report(max_length or DEFAULT_MAX_LENGTH, dtypes or None, progress)
        elif _is_diffusion(spec):
            from ..report.diffusion import diffusion_report

            try:
                rep = diffusion_report(spec, dtypes or None, progress=progress, **(vision or {}))
            except ValueError as e:  # the input does not fit the model
                raise click.UsageError(str(e)) from None
        else:
            from ..report.model import model_report

            try:
                rep = model_report(spec, dtypes or None, max_length, progress, stacks=stacks, **(vision or {}))
            except ValueError as e:  # the input does not fit the model (an image larger than ids can carry)
                raise click.UsageError(str(e)) from None
        if weights:
            from ..report.real_model import real_model_section

            try:
                section = real_model_section(weights, progress)
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint="'--weights'") from None
            rep = replace(rep, sections=[*rep.sections, section])
        return write_into(rep, tmp, progress)


def _is_diffusion(spec: Any) -> bool:
    from ..config import DiffusionConfig

    return isinstance(spec, DiffusionConfig)


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
@click.option("--weights", default=None, metavar="PATH",
              help="Add a real model's section: smollm2, a checkpoint directory, a .gguf file or a cached Hub id (as "
                   "`effect --model`): three presets' bfloat16 cos/sin at offsets 0, 8K, 1M against its exact-RoPE "
                   "run (minutes on a CPU; needs transformers).")
@vision_options
@click.option("--quiet", "-q", is_flag=True, help="No progress messages on stderr.")
def report_cmd(model: str | None, old_model: str | None, model_type: str | None, stacks: tuple[str, ...],
               dtypes: tuple[str, ...], max_length: int | None, out: str | None, online: bool, weights: str | None,
               image: Any, video: Any, text_tokens: int, quiet: bool) -> None:
    """Write a report: report.md, a self-contained report.html, results.json and the figures.

    MODEL is named as `config` names it: a config.json (or its folder), a
    llama.cpp .gguf file (metadata only) or a Hub id ORG/NAME[@REVISION]
    (its config.json, from the local cache; --online fetches it).  Without
    MODEL or --model-type: the project's headline report (position ids, RoPE
    recipes, attention logits, ALiBi, sinusoidal encodings); `-o figures/`
    regenerates the committed figures.  With a model: first the bottom line
    (per stack and dtype, the longest safe context and the fix, as `config`
    prints it), then a verdict per code path at its maximum context and at
    2x/4x, then its own figures.  A vision-language model (M-RoPE) gets a
    section "Images and video" for --image / --video (default: a 1920x1080
    image, then one hour of video at 2 fps).  A diffusion transformer (a
    diffusers transformer/config.json, a pipeline folder or its Hub id) gets
    its position encoding audited for one input on every code path, as
    `config FILE --image WxH` prints it (default: the pipeline's own input).
    Two runs write byte-identical files.
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
    given = image is not None or video is not None or text_tokens
    vision = {"image": image, "video": video, "text": text_tokens}
    if _is_diffusion(spec):
        extra = [o for o, v in (("--stack", stacks), ("--max-length", max_length), ("--weights", weights)) if v]
        if extra:
            raise click.UsageError(f"{extra[0]}: {spec.name} is a diffusion transformer ({spec.class_name}): its "
                                   "report audits one input (--image WxH, --video SECONDS@FPS) on every code path")
        paths = _write_report(spec, dtypes, None, out, progress, None, None, vision)
        click.echo(f"wrote {len(paths)} files into {out}: " + ", ".join(p.name for p in paths))
        return
    if given and (spec is None or spec.kind != "rope" or not spec.mrope):
        raise click.UsageError("--image / --video / --text: " + ("give a vision-language MODEL" if spec is None else
                               f"{spec.name} has no mrope_section (not a multimodal-RoPE model)"))
    paths = _write_report(spec, dtypes, max_length, out, progress, _report_stacks(spec, stacks), weights,
                          vision if given else None)
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


def _read_model(value: str, online: bool, hint: str | None = None) -> Any:
    """MODEL as `config` and `report` read it: a diffusers config, else a model description; a usage error
    naming it when it cannot be read."""
    from ..config import load_diffusion_config, load_model

    try:
        return load_diffusion_config(value, online=online) or load_model(value, online=online)
    except (ValueError, ImportError) as e:  # ImportError: a package the file's format needs (gguf)
        raise click.BadParameter(str(e), param_hint=hint) from None


def _config_path(ctx: Any, param: Any, value: str) -> Any:
    return _read_model(value, bool(ctx.params.get("online")))


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
               + _window_note(dicts)
               + bound_notes(dicts)
               + "".join(f"\nskipped: {why}" for why in skipped))


def _window_note(dicts: Sequence[dict[str, Any]]) -> str:
    """A footer line per layer type whose rows are judged within a window (sliding, chunked attention)."""
    reach: dict[str, int] = {}
    for d in dicts:
        if d.get("max_distance") is not None:
            reach.setdefault(d.get("layer_type") or "RoPE", d["max_distance"])
    return "".join(f"\n{t} rows: pairs judged up to {r} apart (these layers attend no further back); the position "
                   "ids and collisions at every length" for t, r in reach.items())


def _model_stacks(model: Any, stacks: Sequence[str], matmul_precision: str = "highest"
                  ) -> tuple[list[str], list[str]]:
    """:func:`precision_audit.config.model_stacks` with an unknown stack name as a usage error (a stack that
    cannot run the model is left out with its reason)."""
    from ..config import model_stacks

    try:
        return model_stacks(model, stacks or None, matmul_precision)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--stack'") from None


def _config_paths(model: Any, stacks: Sequence[str], recipes: Sequence[str], matmul_precision: str = "highest"
                  ) -> tuple[list[str], list[str], list[str]]:
    """The stacks to run, the reasons stacks were left out, and the code paths --fail-on and the bottom line judge.

    RoPE: the stacks named (``all`` = every stack that runs the model), else none when recipes are named, else
    every stack (llama.cpp's for a GGUF file); judged: the stacks named, else transformers as built (llama.cpp CPU
    for a GGUF file), plus the recipes named.  ``--matmul-precision high`` adds the TF32 GEMM stacks, run and
    judged (the user said their code runs under it).  ALiBi: the recipes named, else the fp32 recipe.
    """
    from ..rope import setting_stacks

    if model.kind != "rope":
        if stacks:
            _rope_only(model, "--stack")
        return [], [], list(recipes) or list(_JUDGED[model.kind])
    tf32 = setting_stacks("matmul-precision-high") if matmul_precision == "high" else []
    if recipes and not stacks:  # recipes named: no stack but the TF32 ones asked for
        names, skipped = _model_stacks(model, tf32) if tf32 else ([], [])
    else:
        names, skipped = _model_stacks(model, stacks, matmul_precision)
    default = [] if recipes else ["llama.cpp-cpu" if model.origin == "gguf" else "transformers"]
    judged = [n for n in names if stacks and n not in tf32] or default
    return names, skipped, [*judged, *(n for n in names if n in tf32), *recipes]


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
                   "(T5, DeBERTa) transformers, lowp, cast-distance, lowp-eager; XLNet sinusoids transformers, arange-dtype, "
                   "positions-dtype; learned ids arange, mask-int64, mask-cumsum, mask-scan; diffusion transformers (a "
                   "diffusers config) " + ", ".join(_AXIAL_PATHS) + "; CogVideoX, LTX-Video " + ", ".join(_VIDEO_PATHS)
                   + "; Qwen-Image " + ", ".join(_CENTRED_PATHS) + "; SD3's sincos table " + ", ".join(_GRID_PATHS)
                   + ".  [default: RoPE none (the stacks), others all]")
@click.option("--engine", type=click.Choice(["numpy", "torch"]), default="numpy", show_default=True,
              help="numpy: every operation correctly rounded; torch: this machine's torch kernels (RoPE presets and "
                   "positions; stacks and ALiBi run numpy).")
@click.option("--matmul-precision", "matmul_precision", type=click.Choice(["highest", "high"]), default="highest",
              show_default=True,
              help="torch.set_float32_matmul_precision your code runs under: high adds (and judges) the stacks whose "
                   "float32 rotary GEMM runs in TF32 on tensor-core GPUs: transformers-tf32 (cuBLAS, to nearest) "
                   "and transformers-tl-dot (a Triton tl.dot, truncated); a GPU and shape property, nothing on CPU.")
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
               recipes: tuple[str, ...], engine: str, matmul_precision: str, tolerance: float, no_positions: bool,
               fail_on: str, trained_on: str | None, weights: str | None, image: Any, video: Any, text_tokens: int,
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
    from ..config import (DiffusionConfig, audit_config, context_note, default_dtype, default_lengths, model_paths,
                          stack_notes, work_to_scan)
    from ..config.layers import temperature_lines

    if matmul_precision != "highest" and (isinstance(model, DiffusionConfig) or image or video):
        raise click.BadParameter("the TF32 GEMM paths are modelled for a text model's rotary module (not for "
                                 "--image / --video or a diffusion transformer)", param_hint="'--matmul-precision'")
    if isinstance(model, DiffusionConfig):
        given = [o for o, v in (("--length", lengths), ("--trained-on", trained_on), ("--weights", weights),
                                ("--stack", stacks)) if v]
        if given:
            raise click.UsageError(f"{given[0]}: {model.name} is a diffusion transformer ({model.class_name}): "
                                   "its position encoding is audited per input (--image WxH, --video SECONDS@FPS) "
                                   "and code path (--recipe)")
        return diffusion_command(model, image, video, recipes, dtypes or ("bfloat16",), as_json, text_tokens)
    dts = dtypes or (default_dtype(model),)
    if image or video:
        return vision_audit(model, image, video, text_tokens, stacks, dts, as_json)
    asked = distances_from_options(distances, no_pairs)
    lens = tuple(lengths) or default_lengths(model)
    _check_config_lengths(model, lens, bool(lengths))
    if matmul_precision != "highest" and model.kind != "rope":
        raise click.BadParameter(f"the TF32 paths are RoPE angle GEMMs; {model.name} uses "
                                 f"{_KIND_WORDS.get(model.kind, model.kind)}", param_hint="'--matmul-precision'")
    names, skipped, judged = _config_paths(model, stacks, recipes, matmul_precision)
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


# the rules as precision_audit.verdicts states them, kept as one paragraph
config_cmd.help = (config_cmd.help or "").replace("VERDICT_RULES", _verdicts.rules_text())
