"""The report for one model (its config.json, GGUF file, Hub id or a transformers model type):
the bottom line per stack and dtype, a verdict per code path at its maximum context and at 2x / 4x,
then its figures.

>>> from precision_audit.config import load_config_dict
>>> model = load_config_dict({"model_type": "llama", "head_dim": 16, "num_attention_heads": 2,
...                           "rope_theta": 10000.0, "max_position_embeddings": 512})
>>> rep = model_report(model, stacks=["transformers", "transformers-cast"])
>>> [s.title for s in rep.sections][:3]
['Bottom line', 'Verdict', 'Model']
>>> print(rep.sections[0].blocks[1].items[0])
transformers as built, bfloat16: safe to 2K
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import config as _config
from .. import verdicts as _verdicts
from ..checks import ArgumentTypeError, describe
from ..alibi import AlibiRow, recipe_names
from ..positions import PositionRow, audit_positions
from ..rope import MAX_ROPE_LENGTH, PRESETS, RopeRow, audit, preset  # noqa: F401  (audit: doctests)
from ..rope.schedules import RopeSchedule
from ._config import Drawn, drawn
from ._plotting import length_label
from .alibi import plot_alibi_attention, plot_alibi_distinct
from .headline import HEADLINE, Progress, _say, attention_blocks, fmt
from .positions import length_grid, plot_positions, position_rows
from .rope import error_grid, plot_error_heatmap, plot_error_per_frequency, plot_error_vs_length, rope_lengths
from .writer import Bullets, Figure, Para, Report, Section, Table

__all__ = ["VERDICT_RULES", "alibi_cell", "model_report", "position_cell", "rope_cell"]

VERDICT_RULES = _verdicts.VERDICT_RULES


def rope_cell(r: RopeRow) -> str:
    """The report's verdict cell of a RoPE row: its verdict (:attr:`RopeRow.verdict`) and what is lost.

    >>> from precision_audit.rope import RopeSchedule
    >>> row = audit(RopeSchedule(head_dim=16), preset("lowp", "bfloat16"), 4096)[0]
    >>> rope_cell(row).split()[0]
    'broken'
    """
    v, why = r.verdict, r.lost
    worst = max((p.max_rotation_error for p in r.pair_errors), default=2 * r.max_rotation_error)
    return f"{v} ({why})" if why else f"{v} (pairs within {fmt(worst)} rad)"


def position_cell(r: PositionRow) -> str:
    """The report's verdict cell of position ids (:attr:`PositionRow.verdict`): broken with the share that survives."""
    if r.verdict == "safe":
        return "safe (all exact)"
    extra = f", {r.non_finite} overflow" if r.non_finite else ""
    return f"broken ({100 * r.exact_fraction:.1f} % exact, runs of {r.max_run}{extra})"


def alibi_cell(r: AlibiRow) -> str:
    """The report's verdict cell of an ALiBi row (:attr:`AlibiRow.verdict`) with the share of distinct biases."""
    v = r.verdict
    extra = f", {r.nonfinite_biases} non-finite" if r.nonfinite_biases else ""
    return f"{v} ({100 * r.distinct_fraction:.1f} % distinct{extra})"


@dataclass
class _Context:
    """What every step of a model report shares; each step appends its verdict rows to ``verdict``."""

    spec: Drawn
    dts: list[str]
    ctx: int
    progress: Progress
    verdict: list[tuple[str, ...]] = field(default_factory=list)
    alibi_rows: list[dict[str, Any]] = field(default_factory=list)  # per recipe, dtype and check: the verdict

    @property
    def checks(self) -> list[int]:
        """The lengths every verdict is given at: the model's context, 2x and 4x."""
        return [self.ctx, 2 * self.ctx, 4 * self.ctx]

    @property
    def marks(self) -> list[tuple[int, str]]:
        """The same lengths as dotted lines on the figures."""
        return [(self.ctx, "max context"), (2 * self.ctx, "2x"), (4 * self.ctx, "4x")]


def model_report(model: _config.ModelConfig, dtypes: Sequence[str] | None = None, max_context: int | None = None,
                 progress: Progress = None, stacks: Sequence[str] | None = None,
                 image: tuple[int, int] | None = None, video: tuple[float, float, tuple[int, int]] | None = None,
                 text: int = 0) -> Report:
    """Audit the model's code paths at its context (``max_context`` overrides the config's) and 2x, 4x.

    ``model``: the model's description (:func:`precision_audit.config.load_model` reads a config.json, a GGUF
    file or a Hub id; :func:`precision_audit.hf.default_model_config` a transformers model type's defaults).

    The report opens with the bottom line: per stack (``stacks``, names of
    :data:`precision_audit.rope.STACKS`, ``all`` = every stack that runs the
    model; default: every stack that runs it, llama.cpp's for a GGUF file)
    or, for ALiBi, per recipe, and per dtype: the longest of those lengths
    that is safe and the fix (see :func:`precision_audit.bottomline.bottom_line`).

    A vision-language model (M-RoPE) gets an "Images and video" section for ``image`` (width, height), ``video``
    (seconds, fps, (width, height) frames) and ``text`` tokens after them; default: a 1080p image, then an hour
    of video at 2 fps (:func:`precision_audit.report.images.images_section`).
    """
    if not isinstance(model, _config.ModelConfig):
        raise ArgumentTypeError(f"model {describe(model)} must be a ModelConfig (precision_audit.config.load_model "
                                "reads one)")
    spec = drawn(model)
    ctx = max_context or spec.max_context or _config.FALLBACK_CONTEXT  # the bottom line says so
    if 4 * ctx > MAX_ROPE_LENGTH:
        raise ValueError(f"max context {ctx} x 4 exceeds the audits' limit {MAX_ROPE_LENGTH} (2**26)")
    names, skipped = _config.model_stacks(model, stacks)
    c = _Context(spec, list(dict.fromkeys(dtypes or [spec.dtype])), ctx, progress)
    if model.kind in ("relative", "learned"):
        return _table_report(c, model)
    sections = [_positions_section(c)]
    if spec.rope is not None:
        sections += _rope_sections(c, spec.rope)
    if spec.alibi_heads is not None:
        sections.append(_alibi_section(c, spec.alibi_heads))
    bottom = _bottom_line_section(c, model, names, skipped)
    settings = _settings(spec, c.dts, ctx, names)
    model_section = Section("Model", [Table(("setting", "value"), _settings_rows(settings))])
    vision = []
    if model.kind == "rope" and model.mrope:
        from .images import DEFAULT_IMAGE, DEFAULT_VIDEO, images_section

        given = image is not None or video is not None
        mrope_stacks = [n for n in names if n in _config.MROPE_STACKS] or None
        vision = [images_section(model, c.dts, mrope_stacks, image if given else DEFAULT_IMAGE,
                                 video if given else DEFAULT_VIDEO, text, progress)]
    elif image is not None or video is not None:
        raise ValueError(f"image / video: {model.name} has no mrope_section (not a multimodal-RoPE model)")
    return Report(f"precision_audit: {spec.name}", "model", settings,
                  [bottom, *vision, _verdict_section(c), model_section, *sections])


def _table_report(c: _Context, model: _config.ModelConfig) -> Report:
    """Relative buckets, relative sinusoids or learned ids: the rows `config` gives, as bottom line and verdict
    table (one row per code path, encoder / decoder side and dtype), with the bucket figure for T5 / DeBERTa."""
    from ..bottomline import bottom_line

    checks = [c.ctx] if model.kind == "learned" and c.spec.max_context else c.checks
    _say(c.progress, f"{model.scheme or 'learned ids'}: every path in {', '.join(c.dts)} at "
                     + ", ".join(length_label(n) for n in checks))
    rows = _config.audit_config(model, checks, c.dts)
    summaries = bottom_line(rows, key="recipe", kind=model.kind)
    note = None if c.spec.max_context else _config.context_note(model)
    bottom = Section("Bottom line", [
        Para(f"{model.describe()}. Per code path and dtype: the longest length audited that is safe, and the fix; "
             "`precision-audit config` prints the same lines."),
        Bullets(tuple(str(s) for s in summaries)),
        *([Para(f"Note: {note}.")] if note else []),
    ], {"summary": [s.to_dict() for s in summaries]})
    table: dict[tuple[str, ...], dict[int, str]] = {}
    for r in rows:
        key = (r.recipe + (f" ({r.layer_type})" if r.layer_type else ""), r.dtype)
        table.setdefault(key, {})[r.length] = r.verdict + ("" if r.changed in (None, 0) else f" ({r.changed})")
    header = ("code path", "dtype", *(length_label(n) for n in checks))
    verdict = Section("Verdict", [
        Table(header, tuple((*k, *(v.get(n, "-") for n in checks)) for k, v in table.items())),
        Para("In brackets: distances whose bucket changed (relative buckets), distances sharing a stored row "
             "(relative sinusoids) or wrong position ids (learned)."),
    ], {"rows": [r.to_dict() for r in rows]})
    sections = [bottom, verdict]
    if model.scheme in ("t5", "deberta"):
        from ..relative import audit_relative
        from .relative import plot_relative

        p = dict(model.scheme_params)
        fig_rows = audit_relative(model.scheme, lengths=length_grid(64, max(checks)), dtypes=c.dts,
                                  num_buckets=p["num_buckets"], max_distance=p["max_distance"])
        sections.append(Section("Relative buckets", [Figure(
            "relative_buckets.png", "Distances whose bucket flips vs context length, per path and dtype",
            lambda path: plot_relative(fig_rows, path))], {"relative": [r.to_dict() for r in fig_rows]}))
    settings = _settings(c.spec, c.dts, c.ctx)
    settings["encoding"] = model.scheme or "learned"
    model_section = Section("Model", [Table(("setting", "value"), _settings_rows(settings))])
    return Report(f"precision_audit: {c.spec.name}", "model", settings, [*sections, model_section])


def _bottom_line_section(c: _Context, model: _config.ModelConfig, stacks: Sequence[str],
                         skipped: Sequence[str]) -> Section:
    """Per stack (RoPE; every layer type's schedule) or ALiBi recipe and dtype: the longest safe check, the fix."""
    from ..bottomline import bottom_line

    checks = ", ".join(length_label(n) for n in c.checks)
    if model.kind == "rope":
        rows: list[Any] = []
        if stacks:
            _say(c.progress, f"bottom line: {len(stacks)} stacks, cache in {', '.join(c.dts)}, at {checks}")
            rows = _config.audit_config(model, c.checks, c.dts, stacks=stacks, positions=False)
        summaries = bottom_line(rows, key="recipe", notes=_config.stack_notes(model, stacks))
        what = ("Per inference stack (the code it runs, written from its source; every layer type's schedule) and "
                "dtype")
    else:
        rows = c.alibi_rows
        summaries = bottom_line(rows, key="recipe", kind="alibi")
        what = "Per ALiBi code path (the model's slopes) and dtype"
    blocks: list[Any] = [
        Para(f"{what}: the longest context audited ({checks}: the model's context, 2x, 4x) that is safe, and the "
             "fix where one is known; `precision-audit config` prints the same lines."),
        Bullets(tuple(str(s) for s in summaries) or ("no stack runs this model's rope type",)),
    ]
    note = None if c.ctx != _config.FALLBACK_CONTEXT or c.spec.max_context else _config.context_note(model)
    if note:
        blocks.append(Para(f"Note: {note}."))
    if skipped:
        blocks += [Para("Left out:"), Bullets(tuple(skipped))]
    return Section("Bottom line", blocks, {
        "summary": [s.to_dict() for s in summaries], "skipped": list(skipped),
        "bottom_line_rows": [r.to_dict() if hasattr(r, "to_dict") else r for r in rows]})


def _positions_section(c: _Context) -> Section:
    """Position ids built in each model dtype: verdicts at the checks, a table and the figure."""
    checks, dts = c.checks, c.dts
    _say(c.progress, f"position ids in {', '.join(dts)} at {', '.join(length_label(n) for n in checks)}")
    pos_check = audit_positions(checks, dts)
    for d in dts:
        by = {r.length: r for r in pos_check if r.dtype == d}
        c.verdict.append((f"position ids built in {d}",) + tuple(position_cell(by[n]) for n in checks))
    grid_rows = position_rows(length_grid(16, max(4 * c.ctx, 2**12)), list(dict.fromkeys([*dts, "float32"])))
    marks = c.marks
    return Section("Position ids", [
        Para("Position ids 0..L-1 built in the model dtype (`torch.arange(L, dtype=...)`, or `arange(..., "
             "dtype=inv_freq.dtype)` after `model.to(dtype)`) against float32."),
        Table(("dtype", "length", "exact", "distinct", "max run", "first inexact"),
              tuple((r.dtype, length_label(r.length), f"{100 * r.exact_fraction:.2f} %", str(r.distinct_values),
                     str(r.max_run), str(r.first_inexact)) for r in pos_check)),
        Figure("positions.png", "Position ids in the model dtype vs context length (dotted: its context, 2x, 4x)",
               lambda p: plot_positions(grid_rows, p, marks=marks, baichuan=False)),
    ], {"position_check": [r.to_dict() for r in pos_check], "positions": [r.to_dict() for r in grid_rows]})


def _worst_pair(r: Any) -> str:
    """The row's largest pairwise rotation error and its distance (rad @D; '-': none)."""
    if not r.pair_errors:
        return "-"
    p = max(r.pair_errors, key=lambda q: (q.max_rotation_error, -q.distance))
    return f"{fmt(p.max_rotation_error)} @{length_label(p.distance)}"


def _rope_sections(c: _Context, sched: RopeSchedule) -> list[Section]:
    """RoPE per cache dtype: the four presets' verdicts, tables and figures; then the attention logits."""
    ctx, checks, marks = c.ctx, c.checks, c.marks
    lengths = rope_lengths(4 * ctx, checks)
    rope_blocks: list[Any] = [Para(
        f"{sched.describe()}. Recipes: `lowp` every stage in the dtype; `lowp-inv-freq` the inv_freq buffer "
        "downcast by `model.to(dtype)`; `fp32` the fix; `fp64` float64 angles. Cache in the dtype.")]
    att_blocks: list[Any] = []
    rope_rows: list[dict[str, Any]] = []
    grids: list[dict[str, Any]] = []
    att_rows: list[dict[str, Any]] = []
    for d in c.dts:
        _say(c.progress, f"RoPE, 4 recipes, cache in {d}, L = 256 .. {length_label(4 * ctx)}")
        recs = [preset(n, d) for n in PRESETS]
        rows = _audited(c.spec.drawn_model(), lengths, d, list(PRESETS))
        rope_rows += [r.to_dict() for r in rows]
        at = {(r.recipe, r.length): r for r in rows}
        for rec in recs:
            c.verdict.append((f"RoPE {rec.name}, cache in {d}",)
                             + tuple(rope_cell(at[rec.name, n]) for n in checks))
        _say(c.progress, f"RoPE position x frequency heatmap at {length_label(ctx)}, cache in {d}")
        pair = [error_grid(sched, preset("lowp", d), ctx), error_grid(sched, preset("fp32", d), ctx)]
        grids += [g.to_dict() for g in pair]
        rope_blocks += [
            Table(("cache", "length", "recipe", "max rot err (rad)", "x cache bound", "worst pair err (rad @D)",
                   "colliding positions"),
                  tuple((d, length_label(n), r.recipe, fmt(r.max_rotation_error),
                         f"{r.max_rotation_error / r.cache_bound:.3g}", _worst_pair(r), str(r.colliding_positions))
                        for n in checks for r in rows if r.length == n)),
            Figure(f"rope_error_vs_length_{d}.png", f"Rotation error vs context length, cache in {d}",
                   lambda p, rows=rows: plot_error_vs_length(rows, p, marks=marks)),
            Figure(f"rope_error_per_frequency_{d}.png",
                   f"Rotation error per frequency at {length_label(ctx)} and {length_label(4 * ctx)}, cache in {d}",
                   lambda p, rows=rows: plot_error_per_frequency(rows, [ctx, 4 * ctx], p)),
            Figure(f"rope_heatmap_{d}.png",
                   f"Rotation error per position and frequency at {length_label(ctx)}: lowp against the fp32 "
                   "fix, one colour scale", lambda p, pair=pair: plot_error_heatmap(pair, sched, p)),
        ]
        _say(c.progress, f"RoPE attention logits at {length_label(ctx)}, cache in {d}")
        rows_att, blocks = attention_blocks(sched, recs, ctx, f"Cache in {d}", f"rope_attention_logit_error_{d}.png",
                                            f"Attention-logit error vs offset at {length_label(ctx)}, cache in {d}")
        att_rows += rows_att
        att_blocks += blocks
    return [Section("RoPE", rope_blocks, {"rope": rope_rows, "rope_heatmap": grids}),
            Section("RoPE: attention logits", [Para(
                f"Logits q_m . k_n of {HEADLINE['attention_pairs']} seeded random (q, k) pairs over query positions "
                "spread along the context, against the exact logit; spread = how much one pair's logit moves when "
                "both positions shift (exact RoPE: 0).")] + att_blocks, {"attention": att_rows})]


def _audited(model: _config.ModelConfig, lengths: Sequence[int], dtype: str, recipes: Sequence[str]) -> list[Any]:
    """The auditors' rows of ``recipes`` in ``dtype`` over ``lengths``, audited as ``config`` audits the model
    (:func:`precision_audit.config.audit_config`; its rows' ``source``), recipe-major."""
    found = _config.audit_config(model, lengths, [dtype], recipes=recipes, positions=False)
    rank = {n: i for i, n in enumerate(recipes)}
    return [r.source for r in sorted(found, key=lambda r: (rank[r.recipe], r.length))]


def _alibi_section(c: _Context, heads: int) -> Section:
    """ALiBi in each model dtype: the four presets' verdicts, a table and two figures."""
    spec, checks, marks = c.spec, c.checks, c.marks
    lengths = rope_lengths(4 * c.ctx, checks)
    _say(c.progress, f"ALiBi, {heads} heads, 4 recipes, L = 256 .. {length_label(4 * c.ctx)}")
    names = recipe_names()
    sweep = {}
    for d in c.dts:
        rows = _audited(spec.model, lengths, d, names)
        sweep.update({(d, r): [x for x in rows if x.recipe == r] for r in names})
    for (d, r), rows in sweep.items():
        at_len = {x.length: x for x in rows}
        c.verdict.append((f"ALiBi {r}, model dtype {d}",) + tuple(alibi_cell(at_len[n]) for n in checks))
        c.alibi_rows += [{"recipe": r, "dtype": d, "length": n, "verdict": at_len[n].verdict}
                         for n in checks]
    return Section("ALiBi", [
        Para(f"{heads} heads, slopes: " + ("the model's own" if spec.alibi_slopes else "the ALiBi reference rule")
             + ". Last query of each context; dP = largest change of an attention probability from the bias "
               "rounding alone."),
        Table(("model dtype", "recipe", "length", "distinct (worst head)", "max dP"),
              tuple((d, r, length_label(x.length), f"{100 * x.distinct_fraction:.2f} %", fmt(x.max_prob_change))
                    for (d, r), rows in sweep.items() for x in rows if x.length in checks)),
        Figure("alibi_distinct.png", "Distinct ALiBi biases (worst head) vs context length",
               lambda p: plot_alibi_distinct(sweep, p, marks=marks)),
        Figure("alibi_attention.png", "Attention change from ALiBi bias rounding vs context length",
               lambda p: plot_alibi_attention(sweep, p, marks=marks)),
    ], {"alibi": [x.to_dict() for rows in sweep.values() for x in rows]})


def _verdict_section(c: _Context) -> Section:
    """The verdict table: the safe code paths at the model's context, then every path's verdict at 1x, 2x, 4x."""
    ctx, checks, verdict = c.ctx, c.checks, c.verdict
    header = ("code path",) + tuple(f"{length_label(n)}" + (" (max context)" if n == ctx else f" ({n // ctx}x)")
                                    for n in checks)
    safe_paths = [v[0] for v in verdict if v[1].startswith("safe")]
    # names hold commas ("RoPE fp32, cache in bfloat16"): one name per semicolon
    summary = (f"At its maximum context {length_label(ctx)} the safe code paths are: "
               + ("; ".join(safe_paths) if safe_paths else "none") + ".")
    return Section("Verdict", [Para(summary), Table(header, tuple(verdict)), Para(VERDICT_RULES)]
                   + [Para(f"Note: {n}.") for n in c.spec.notes],
                   {"verdict": [dict(zip(("code_path", *map(str, checks)), v)) for v in verdict]})


def _settings_rows(settings: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The settings as table rows of prose: a list as ``a, b`` (its key singular for one item), None as -.

    >>> _settings_rows({"dtypes": ["bfloat16"], "max_context": 8192, "config_max_context": None})
    (('dtype', 'bfloat16'), ('max_context', '8192'), ('config_max_context', '-'))
    >>> _settings_rows({"dtypes": ["bfloat16", "float16"]})
    (('dtypes', 'bfloat16, float16'),)
    """
    rows = []
    for k, v in settings.items():
        if isinstance(v, (list, tuple)):
            k = k[:-1] if len(v) == 1 and k.endswith("s") else k
            v = ", ".join(map(str, v))
        rows.append((k, "-" if v is None else str(v)))
    return tuple(rows)


def _settings(spec: Drawn, dts: Sequence[str], ctx: int, stacks: Sequence[str] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"model": spec.name, "model_type": spec.model_type, "dtypes": list(dts),
                           "max_context": ctx, "config_max_context": spec.max_context}
    if spec.rope is not None:
        s = spec.rope
        out.update({"head_dim": s.head_dim, "rotary_dim": s.rotary, "rope_theta": s.base, "rope_scaling": s.scaling})
        if s.scaling != "default":
            out["rope_factor"] = s.factor
        out["stacks"] = list(stacks)
    if spec.alibi_heads is not None:
        out["alibi_heads"] = spec.alibi_heads
    return out
