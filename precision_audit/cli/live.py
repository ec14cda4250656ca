"""The live transformers audits: ``hf-rope``, ``hf-scan``, ``hf-alibi`` (transformers imported lazily, only by these)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from .. import verdicts as _verdicts
from ..render import worst_pair
from ._shared import (DTYPE, JSON_HELP, LENGTH, AuditCommand, Column, bottom_line_text, distance_options,
                      distances_from_options, echo_json, echo_table, emit, pct, progress_bar, wide_option)
from ._shared import fail_on as judge_rows
from .models import _deprecated

__all__ = ["hf_alibi_cmd", "hf_rope_cmd", "hf_scan_cmd"]

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


# the rules as precision_audit.verdicts states them, kept as one paragraph
hf_rope_cmd.help = (hf_rope_cmd.help or "").replace("VERDICT_RULES", _verdicts.rules_text())
